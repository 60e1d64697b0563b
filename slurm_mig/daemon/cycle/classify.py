"""Step 1 of the cycle: each job of the partition is busy, planned, waiting, to hold,
to note or finished (see the package doc), with the events that may call for a re-plan."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field

from ... import jobcomment as comments
from ...geometry import Slot, get_model
from ...limitevidence import OVERDUE_SECONDS, expected_end, late_threshold
from ...overruns import overran
from ...slurm import sitepolicy
from ...slurm.assignment import Assignment
from ...slurm.jobrecord import (
    JobLike,
    in_partition,
    job_phase,
    job_sort_key,
    note_admin_comment,
    parse_admin_comment,
)
from .actions import Hold, Learn, Note
from .arrays import array_of, cap_arrays, learned_throttle, running_tasks
from .inputs import CycleInput, Estimate
from .problems import (
    comment_too_long,
    feasible,
    gangs_unsupported,
    shape_problem,
    why_unplannable,
)
from .slots import instance_size, model_slot, plan_slot
from .stale import STALE_HOLD, stale_event, stale_id, stale_records
from .waiting import (
    ARRAY_LIMIT,
    cannot_start_yet,
    gated,
    kept_pending,
    orphaned,
    planners_dependency,
    squatting,
)

__all__ = [
    "OVERDUE_SECONDS",
    "Busy",
    "Classified",
    "classify",
    "feasible",
]


@dataclass
class Busy:
    """A job that holds its slices, or will once it starts (released, not yet started)."""

    job_id: str
    node: str
    gpu: int
    slot: Slot
    ready: float  # when it started (or now, if not yet)
    end: float  # predicted end, absolute
    started: bool
    # a node's record of a job not running there (`stale`): its slices are not
    # plannable; ``job_id`` is `stale.stale_id`, no job of Slurm's
    stale: bool = False
    # instances it runs on (a job of several slices: ``slot`` is their region, never
    # reused nor handed over, `reuse.link_reuse`)
    tasks: int = 1
    planned: float | None = None  # the seconds its assignment planned (a running job)


@dataclass
class Classified:
    """What step 1 found (see the package doc)."""

    jobs: dict[str, JobLike] = field(default_factory=dict)
    holds: list[Hold] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    learns: list[Learn] = field(default_factory=list)
    busy: list[Busy] = field(default_factory=list)
    kept: dict[str, Assignment] = field(default_factory=dict)  # standing plans
    waiting: list[JobLike] = field(default_factory=list)  # held, no plan, to plan
    beyond: int = 0  # held, no plan, past ``max_planned``: planned as the first start
    events: list[tuple[float, str, str | None, int | None]] = field(default_factory=list)
    max_batch: int = -1
    no_gpu: int = 0  # held jobs no usable GPU can run
    noted: int = 0
    models: dict[tuple[str, int], str] = field(default_factory=dict)  # (node, gpu) -> model
    deferred: dict[str, str] = field(default_factory=dict)  # held, cannot start yet: why
    released: list[tuple[JobLike, Assignment]] = field(default_factory=list)  # not started
    # of the jobs held this cycle: those pending, not held, that Slurm cannot start
    # before this cycle's writes land (see `waiting.gated`)
    gated: set[str] = field(default_factory=set)
    ended: dict[tuple[str, int], list[tuple[Slot, float]]] = field(
        default_factory=lambda: defaultdict(list)
    )  # (node, gpu) -> slots of jobs that left, and when
    priority: dict[str, int] = field(default_factory=dict)  # held jobs: Slurm's priority
    pool: dict[str, str] = field(default_factory=dict)  # held jobs: their reservation
    # released jobs held again: Slurm keeps them pending (a limit, licenses, not started)
    limited: dict[str, str] = field(default_factory=dict)
    throttles: dict[str, int] = field(default_factory=dict)  # array -> throttle learned
    # the nodes' stale records (`stale`): busy id -> why, for the log and the status
    stale: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class _Scope:
    """What every job's classification reads: the snapshot, the GPU models by
    (node, gpu), the partition's jobs by id, the ids of all held pending jobs, and the
    tasks running per job array."""

    snap: CycleInput
    models: Mapping[tuple[str, int], str]
    by_id: Mapping[str, JobLike]
    held_ids: set[str]
    usable_models: frozenset[str]
    running: Mapping[str, int]

    def valid(self, a: Assignment) -> bool:
        """Whether plan ``a`` is for a usable GPU of its model, on a slot it has."""
        model = self.models.get((a.node, a.gpu))
        return model == a.model and plan_slot(a) is not None


def classify(snap: CycleInput) -> Classified:
    """Step 1 (the package doc)."""
    now = snap.now
    out = Classified(models=_gpu_models(snap))
    jobs = sorted(
        (j for j in snap.jobs if in_partition(j, snap.partition)),
        key=lambda j: job_sort_key(j.job_id),
    )
    held_ids = {j.job_id for j in snap.jobs if j.held and job_phase(j.state) == "pending"}
    by_id = {j.job_id: j for j in jobs}
    running = running_tasks(jobs)
    scope = _Scope(snap, out.models, by_id, held_ids, frozenset(out.models.values()), running)
    out.max_batch = _max_plan_batch(snap.plans)
    for job in jobs:
        _classify_job(scope, out, job)
    _stale_records(snap, out)
    nodes = frozenset(snap.nodes)
    if snap.previous_nodes is not None and nodes != snap.previous_nodes:
        out.events.append((now, "usable nodes changed", None, None))
    _not_started(snap, out)
    _site_policy(snap, out)
    _throttle_arrays(snap, out, running)
    _within_horizon(snap, out)
    out.gated = gated([by_id[h.job_id] for h in out.holds], by_id, held_ids, now)
    return out


def _gpu_models(snap: CycleInput) -> dict[tuple[str, int], str]:
    """(node, gpu index) -> model name of every GPU of the usable nodes, nodes sorted."""
    return {
        (node, local): get_model(name).name
        for node in sorted(snap.nodes)
        for local, name in enumerate(snap.nodes[node])
    }


def _max_plan_batch(plans: Mapping[str, Assignment] | None) -> int:
    """The highest batch of the standing plans (-1 without any): batches go on from it."""
    batch = -1
    if plans is not None:
        for p in plans.values():
            batch = max(batch, p.batch)
    return batch


def _classify_job(scope: _Scope, out: Classified, job: JobLike) -> None:
    """Classifies one job of the partition by its phase (active, done or pending)."""
    out.jobs[job.job_id] = job
    a = record = parse_admin_comment(job.admin_comment)
    if record is not None:
        out.max_batch = max(out.max_batch, record.batch)
    if job.held:  # a held job's plan is the daemon's alone (none after a start);
        # its AdminComment, if any, is the record of an earlier release
        plans = scope.snap.plans
        a = plans.get(job.job_id) if plans is not None else None
    current = a if a is not None and a.restart == job.restart_count else None
    if current is not None and current.job_id != job.job_id:
        current = None
    phase = job_phase(job.state)
    est = scope.snap.estimates.get(job.job_id)
    if phase == "active":
        if a is not None:
            _classify_running(out, job, a, scope.snap.now)
    elif phase == "done":
        if current is not None:
            _classify_finished(scope.snap, out, job, current, est)
    else:
        _classify_pending(scope, out, job, a, record, current, est)


def _classify_running(out: Classified, job: JobLike, a: Assignment, now: float) -> None:
    """An active job is busy on its slices until its planned end (once overdue, until
    its time limit: `limitevidence.expected_end`); one past its plan by the late
    threshold is an event."""
    start = job.start_time or now
    end = expected_end(start, a.planned_seconds, job.time_limit, now)
    slot = model_slot(a)
    out.busy.append(
        Busy(
            job.job_id,
            a.node,
            a.gpu,
            slot,
            start,
            end,
            True,
            tasks=a.tasks,
            planned=a.planned_seconds,
        )
    )
    late = start + a.planned_seconds + late_threshold(a.planned_seconds)
    if job.start_time and now > late:
        out.events.append((late, f"job {job.job_id} runs late", a.node, a.gpu))


def _classify_finished(
    snap: CycleInput, out: Classified, job: JobLike, current: Assignment, est: Estimate | None
) -> None:
    """A finished run of the current plan: its slices' end, its runtime to learn (once
    per successful run), and an event when it failed, ended off its plan or never ran."""
    start, end = job.start_time, job.end_time
    ok = job.state.upper().startswith("COMPLETED") and not job.exit_code
    where = (current.node, current.gpu)
    if end:
        out.ended[where].append((model_slot(current), end))
    if start and end:
        ran = end - start
        run = (job.job_id, current.restart)
        hint = est.hint if est is not None else None
        # learned once per run; a failed run past its time= hint for its overrun only
        if (ok or overran(ran, hint)) and ran > 0 and run not in snap.learned:
            # one task on its instance: a gang's runs teach its instance size
            size = model_slot(current).size if current.tasks == 1 else instance_size(current)
            key, owner = (est.key, est.owner) if est is not None else (job.name, "")
            out.learns.append(Learn(*run, key, current.model, size, ran, end, owner, hint, ok))
        if not ok:
            out.events.append((end, f"job {job.job_id} failed", *where))
        elif abs(ran - current.planned_seconds) > late_threshold(current.planned_seconds):
            word = "early" if ran < current.planned_seconds else "late"
            out.events.append((end, f"job {job.job_id} ended {word}", *where))
    elif end:
        out.events.append((end, f"job {job.job_id} left before it ran", *where))


def _classify_pending(
    scope: _Scope,
    out: Classified,
    job: JobLike,
    a: Assignment | None,
    record: Assignment | None,
    current: Assignment | None,
    est: Estimate | None,
) -> None:
    """A pending job: released and busy, or to hold, to note, deferred, kept on its
    standing plan, or waiting to be planned (when some usable GPU model can run it)."""
    now = scope.snap.now
    shape = shape_problem(job)  # never planned, whatever plan it had: held, then noted
    if job.held:
        ours = _owner_held_again(scope, out, job, a)
    elif shape is not None:
        out.holds.append(Hold(job.job_id, shape))
        return
    else:
        settled = _settle_released(scope, out, job, current)
        if settled is None:
            return
        current, ours = settled
    problem = (
        shape
        or why_unplannable(est)
        or gangs_unsupported(est, scope.snap.algorithm)
        or comment_too_long(job.comment)
    )
    if problem is not None:
        _note_problem(out, job, problem)
        return
    later = _why_later(scope.snap, out, job, ours)
    if later is not None:
        out.deferred[job.job_id] = later
        if current is not None:
            out.events.append((now, f"job {job.job_id} {later}", current.node, current.gpu))
        return
    if current is not None and scope.valid(current):
        out.kept[job.job_id] = current
        return
    if record is not None and record.restart < job.restart_count:
        out.events.append((now, f"job {job.job_id} was requeued", record.node, record.gpu))
    elif current is not None:
        out.events.append((now, f"node {current.node} gpu {current.gpu} is not usable", None, None))
    if not any(m in scope.usable_models for m in feasible(est)):
        out.no_gpu += 1
        return
    out.waiting.append(job)


def _settle_released(
    scope: _Scope, out: Classified, job: JobLike, current: Assignment | None
) -> tuple[Assignment | None, bool] | None:
    """A pending job not held: busy on its valid plan, or held again (its predecessor
    went back to the queue, its owner keeps it from starting, a limit keeps it pending,
    its GPU is unusable, it has no plan). None when that settles it; else the plan it
    keeps (None: planned again) and whether its dependency is the planner's own."""
    now, jid = scope.snap.now, job.job_id
    if current is None:
        out.holds.append(Hold(jid, "not planned yet"))
        return None, False
    if orphaned(job, current, scope.by_id, scope.held_ids):
        out.holds.append(
            Hold(jid, "released ahead of a job that went back to the queue", clear_dependency=True)
        )
        out.events.append((now, f"job {jid} lost its predecessor", None, None))
        return None, True  # planned again, from its slices' new state
    squat = squatting(job, current, scope.by_id, now)
    if squat is not None and scope.valid(current):
        # its plan is dropped: so is the planner's afterany (if it was released ahead)
        ours = bool(job.dependency) and planners_dependency(job.dependency, current, scope.by_id)
        out.holds.append(Hold(jid, f"released, but {squat}", clear_dependency=ours))
        out.events.append((now, f"job {jid} cannot start", current.node, current.gpu))
        return None, ours
    if kept_pending(job.reason) or sitepolicy.is_limit_reason(job.reason):
        _hold_kept_pending(scope, out, job, current)
        return None
    if scope.valid(current):
        out.released.append((job, current))
        end = now + max(current.planned_seconds, OVERDUE_SECONDS)
        out.busy.append(
            Busy(
                jid,
                current.node,
                current.gpu,
                model_slot(current),
                now,
                end,
                False,
                tasks=current.tasks,
            )
        )
        return None
    # its planner's afterany goes with the hold: kept, it would wait for Slurm's next
    # scheduling pass (up to a minute) to be seen fulfilled once the job is planned again
    ours = bool(job.dependency) and planners_dependency(job.dependency, current, scope.by_id)
    out.holds.append(
        Hold(jid, f"node {current.node} gpu {current.gpu} unusable", clear_dependency=ours)
    )
    return current, ours


def _hold_kept_pending(scope: _Scope, out: Classified, job: JobLike, current: Assignment) -> None:
    """Slurm keeps a released job pending for a reason it does not lift by itself (a
    limit, licenses, a constraint, its array's throttle): held again, its slices go on
    to others; it is planned again after the daemon's back-off (`backoff`), or, an
    array task, once its array's throttle (learned here too) leaves room."""
    array = array_of(job.job_id) if job.reason == ARRAY_LIMIT else None
    why = f"released, but Slurm keeps it pending ({job.reason})"
    out.holds.append(
        Hold(
            job.job_id,
            why,
            clear_dependency=bool(job.dependency)
            and planners_dependency(job.dependency, current, scope.by_id),
        )
    )
    if array is not None:
        out.throttles[array] = learned_throttle(scope.running.get(array, 0))
    else:
        out.limited[job.job_id] = job.reason
    out.events.append(
        (scope.snap.now, f"job {job.job_id} is kept pending", current.node, current.gpu)
    )


def _stale_records(snap: CycleInput, out: Classified) -> None:
    """The nodes' stale records (`stale`) as busy entries that hold their slices; an
    event on their GPU when the record went stale after the standing plans were made."""
    if not snap.node_records:
        return
    jobs = {j.job_id: j for j in snap.jobs}
    hold = snap.now + STALE_HOLD + max(snap.release_ahead, 0.0)
    for r, slot, why in stale_records(snap, jobs, out.models):
        sid = stale_id(r)
        out.busy.append(
            Busy(sid, r.node, r.gpu, slot, r.ready, hold, True, stale=True, tasks=r.tasks)
        )
        out.stale[sid] = (
            f"node {r.node} gpu {r.gpu} {r.profile}@{r.placement.start}: the node still "
            f"holds the instance of job {r.job_id} (run {r.restart}), but {why}; not "
            "planned until the node's next report drops it"
        )
        out.events.append(stale_event(r, jobs.get(r.job_id), snap.now))


def _owner_held_again(scope: _Scope, out: Classified, job: JobLike, a: Assignment | None) -> bool:
    """Whether a held job's dependency is the planner's own (then cleared, with a hold).

    A job released ahead that its owner held again still has the planner's afterany:
    cleared, and the job planned again. Other user holds stay as they are
    (job_submit.lua's own hold included): job_submit.lua refuses a release by anyone
    but the planner, so converting them would cost a Slurm write per job for nothing."""
    if not (job.owner_can_release and job.dependency):
        return False
    ours = planners_dependency(job.dependency, a, scope.by_id, own=job.job_id)
    if ours:
        sent = scope.snap.sent
        why = (
            "held by its owner after release"
            if sent is None or job.job_id in sent
            else "plan written by an earlier planner, release not sent (or held since)"
        )
        out.holds.append(Hold(job.job_id, why, clear_dependency=True))
    return ours


def _note_problem(out: Classified, job: JobLike, problem: str) -> None:
    """A job that cannot be planned: counted, and noted (AdminComment and Comment) when
    Slurm holds it and its fields do not say so yet."""
    out.noted += 1
    fields_ = []
    want_admin = note_admin_comment(problem)
    if job.admin_comment != want_admin:
        fields_.append(("AdminComment", want_admin))
    want_comment = comments.parse(job.comment).with_token(None).with_note(problem).render()
    if job.comment != want_comment:
        fields_.append(("Comment", want_comment))
    # written only to a job Slurm holds: a job not held may start before the note
    # lands (Slurm takes this cycle's hold of a started job), and the note would
    # replace the record of the slice it runs on; it is noted once held
    if fields_ and job.held:
        out.notes.append(Note(job.job_id, problem, tuple(fields_)))


def _why_later(snap: CycleInput, out: Classified, job: JobLike, ours: bool) -> str | None:
    """Why a pending job could not start now even if released (its begin time, its own
    dependency, a limit, its reservation), or None; a job that could is given its
    reservation pool ("" for none) in ``out.pool``."""
    later = cannot_start_yet(job, snap.now, own_dependency=ours)
    if later is None and job.held and job.job_id in snap.limited:
        later = f"Slurm kept it pending after its release: {snap.limited[job.job_id][:200]}"
    if later is None and snap.policy is not None:
        pool = sitepolicy.pool_of(snap.policy, job)
        if pool is None:
            later = f"waits for its reservation {job.reservation[:80]} to start"
        elif pool and not _pool_nodes(snap, pool):
            later = f"its reservation {pool[:80]} holds no usable node of the partition"
        else:
            out.pool[job.job_id] = pool
    return later


def _site_policy(snap: CycleInput, out: Classified) -> None:
    """Each held job's priority (Slurm's multifactor terms, `sitepolicy.job_priority`),
    and the jobs a QOS or association limit would keep pending: those are deferred
    (with the limit) instead of planned, so that they hold no slices. Jobs are
    admitted in the order they would start (priority, then submission)."""
    policy = snap.policy
    if policy is None:
        return
    now = snap.now
    held = [*out.waiting, *(out.jobs[j] for j in out.kept)]
    for job in held:
        out.priority[job.job_id] = sitepolicy.job_priority(policy, job, now)
    order = sorted(held, key=lambda j: _priority_key(out, j, now))
    again = {h.job_id for h in out.holds}  # released and held again (not started)
    started = [job for job, _ in out.released if job.job_id not in again]
    denied = sitepolicy.admit(policy, order, started)
    if not denied:
        return
    out.deferred.update(denied)
    out.waiting = [j for j in out.waiting if j.job_id not in denied]
    for jid in denied:
        out.kept.pop(jid, None)


def _pool_nodes(snap: CycleInput, pool: str) -> bool:
    """Whether reservation ``pool`` holds a usable node of the partition."""
    assert snap.policy is not None
    return any(r.name == pool and r.nodes & snap.nodes.keys() for r in snap.policy.reservations)


def _priority_key(out: Classified, job: JobLike, now: float) -> tuple:
    """Higher priority first, then earlier submission, then job id."""
    return (
        -out.priority.get(job.job_id, 0),
        job.submit_time if job.submit_time is not None else now,
        job_sort_key(job.job_id),
    )


def _within_horizon(snap: CycleInput, out: Classified) -> None:
    """At most ``snap.max_planned`` held jobs have a plan (standing or to make): the
    waiting jobs first by priority, then submission, join the plans, the rest wait
    unplanned (counted in ``out.beyond``), as Slurm's backfill looks at its first
    ``bf_max_job_test`` jobs.
    A cycle's work then grows with the plans it keeps, not with the queue. Room is
    filled once a quarter of the limit is free: FAR plans one large batch better than
    many small ones."""
    limit = snap.max_planned
    room = limit - len(out.kept)
    if limit <= 0 or len(out.waiting) <= room:
        return
    if room < max(1, limit // 4):
        room = 0
    order = sorted(out.waiting, key=lambda j: _priority_key(out, j, snap.now))
    out.waiting = order[:room]
    out.beyond = len(order) - room


def _throttle_arrays(snap: CycleInput, out: Classified, running: Mapping[str, int]) -> None:
    """At most an array's throttle minus its tasks running or released are planned
    (`arrays.cap_arrays`): Slurm would keep the others pending on idle slices. A
    learned throttle below the tasks seen running is raised to them."""
    learned = {**snap.throttles, **out.throttles}
    for array, n in running.items():
        if array in learned and n > learned[array]:
            learned[array] = out.throttles[array] = n
    busy = dict(running)
    for b in out.busy:
        array = array_of(b.job_id)
        if array is not None and not b.started:
            busy[array] = busy.get(array, 0) + 1
    out.waiting, deferred = cap_arrays(
        out.jobs, out.kept, out.waiting, busy, learned, lambda j: _priority_key(out, j, snap.now)
    )
    out.deferred.update(deferred)


def _not_started(snap: CycleInput, out: Classified) -> None:
    """Released jobs that Slurm has not started ``start_timeout`` seconds after they
    could have (released, eligible, and the jobs before them on their slices gone) are
    held again: whatever keeps them (resources their node lacks, their owner) must not
    keep their slices idle for everyone. They are not planned in this cycle, and the
    daemon plans them again after a back-off (`backoff`), not in a loop."""
    if not out.released or snap.start_timeout <= 0:
        return
    now = snap.now
    active: dict[tuple[str, int], list[Slot]] = defaultdict(list)
    for b in out.busy:
        if b.started:
            active[(b.node, b.gpu)].append(b.slot)
    stale = set()
    for job, a in out.released:
        where, slot = (a.node, a.gpu), model_slot(a)
        if any(s.placement.overlaps(slot.placement) for s in active[where]):
            continue  # the slices are not free yet
        since = max(
            a.issued,
            job.eligible_time or 0.0,
            *(end for s, end in out.ended.get(where, ()) if s.placement.overlaps(slot.placement)),
        )
        if now - since <= snap.start_timeout:
            continue
        stale.add(job.job_id)
        why = f"not started {now - since:.0f} s after it could ({job.reason or 'None'})"
        out.holds.append(
            Hold(
                job.job_id,
                f"released, but {why}",
                clear_dependency=bool(job.dependency)
                and planners_dependency(job.dependency, a, out.jobs),
            )
        )
        out.events.append((now, f"job {job.job_id} did not start", *where))
        out.limited[job.job_id] = why
        out.deferred[job.job_id] = f"Slurm kept it pending after its release: {why}"
    if stale:
        out.busy = [b for b in out.busy if b.job_id not in stale]
