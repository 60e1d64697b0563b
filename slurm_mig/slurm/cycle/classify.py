"""Step 1 of the cycle: each job of the partition is busy, planned, waiting, to hold,
to note or finished (see the package doc), with the events that may call for a re-plan."""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from ... import jobcomment as comments
from ...geometry import Slot, get_model
from .. import sitepolicy
from ..assignment import Assignment
from ..jobrecord import (
    JobLike,
    in_partition,
    job_phase,
    job_sort_key,
    note_admin_comment,
    parse_admin_comment,
)
from .actions import Hold, Learn, Note
from .inputs import Estimate, Snapshot
from .slots import legal_slot, model_slot

__all__ = [
    "LATE_FRACTION",
    "LATE_SECONDS",
    "OVERDUE_SECONDS",
    "Busy",
    "Classified",
    "classify",
    "feasible",
]

OVERDUE_SECONDS = 1.0  # an overdue busy job is expected to end this soon
LATE_FRACTION = 0.10  # a job ending this far off its plan (and LATE_SECONDS) re-plans
LATE_SECONDS = 2.0
# a begin time less than this far ahead counts as now: Slurm sets a job's begin time
# itself, in whole seconds, when it becomes eligible (released, its afterany met), and
# squeue may run for seconds after the cycle's clock was read
BEGIN_SLACK = 30.0


def _late_threshold(planned: float) -> float:
    return max(LATE_FRACTION * planned, LATE_SECONDS)


def _gib(n: int) -> str:
    return f"{n / 1024**3:.1f} GiB"


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
    # before this cycle's writes land (see `_gated`)
    gated: set[str] = field(default_factory=set)
    ended: dict[tuple[str, int], list[tuple[Slot, float]]] = field(
        default_factory=lambda: defaultdict(list)
    )  # (node, gpu) -> slots of jobs that left, and when
    priority: dict[str, int] = field(default_factory=dict)  # held jobs: Slurm's priority
    pool: dict[str, str] = field(default_factory=dict)  # held jobs: their reservation
    limited: dict[str, str] = field(default_factory=dict)  # released, pending for a limit


def classify(snap: Snapshot) -> Classified:
    """Step 1 (the package doc)."""
    now = snap.now
    out = Classified()
    for node in sorted(snap.nodes):
        for local, name in enumerate(snap.nodes[node]):
            out.models[(node, local)] = get_model(name).name

    def valid(a: Assignment) -> bool:
        model = out.models.get((a.node, a.gpu))
        return model == a.model and legal_slot(a.model, a.profile, a.placement) is not None

    usable_models = set(out.models.values())
    held_ids = {j.job_id for j in snap.jobs if j.held and job_phase(j.state) == "pending"}
    jobs = sorted(
        (j for j in snap.jobs if in_partition(j, snap.partition)),
        key=lambda j: job_sort_key(j.job_id),
    )
    by_id = {j.job_id: j for j in jobs}
    plans = snap.plans
    if plans is not None:
        for p in plans.values():
            out.max_batch = max(out.max_batch, p.batch)
    for job in jobs:
        out.jobs[job.job_id] = job
        a = record = parse_admin_comment(job.admin_comment)
        if a is not None:
            out.max_batch = max(out.max_batch, a.batch)
        if job.held:  # a held job's plan is the daemon's alone (none after a start);
            # its AdminComment, if any, is the record of an earlier release
            a = plans.get(job.job_id) if plans is not None else None
        current = a if a is not None and a.restart == job.restart_count else None
        if current is not None and current.job_id != job.job_id:
            current = None
        phase = job_phase(job.state)
        est = snap.estimates.get(job.job_id)

        if phase == "active":
            if a is not None:
                start = job.start_time or now
                end = max(start + a.planned_seconds, now + OVERDUE_SECONDS)
                out.busy.append(Busy(job.job_id, a.node, a.gpu, model_slot(a), start, end, True))
                late = start + a.planned_seconds + _late_threshold(a.planned_seconds)
                if job.start_time and now > late:
                    out.events.append((late, f"job {job.job_id} runs late", a.node, a.gpu))
            continue

        if phase == "done":
            if current is None:
                continue
            start, end = job.start_time, job.end_time
            ok = job.state.upper().startswith("COMPLETED") and not job.exit_code
            where = (current.node, current.gpu)
            if end:
                out.ended[where].append((model_slot(current), end))
            if start and end:
                ran = end - start
                run = (job.job_id, current.restart)
                if ok and ran > 0 and run not in snap.learned:  # learned once per run
                    size = model_slot(current).size
                    key, owner = (est.key, est.owner) if est is not None else (job.name, "")
                    out.learns.append(Learn(*run, key, current.model, size, ran, end, owner))
                if not ok:
                    out.events.append((end, f"job {job.job_id} failed", *where))
                elif abs(ran - current.planned_seconds) > _late_threshold(current.planned_seconds):
                    word = "early" if ran < current.planned_seconds else "late"
                    out.events.append((end, f"job {job.job_id} ended {word}", *where))
            elif end:
                out.events.append((end, f"job {job.job_id} left before it ran", *where))
            continue

        # pending
        squat, ours = None, False
        if not job.held and current is not None:
            squat = _squatting(job, current, by_id, now)
        if not job.held and current is not None and _orphaned(job, current, by_id, held_ids):
            out.holds.append(
                Hold(
                    job.job_id,
                    "released ahead of a job that went back to the queue",
                    clear_dependency=True,
                )
            )
            out.events.append((now, f"job {job.job_id} lost its predecessor", None, None))
            current, ours = None, True  # planned again, from its slices' new state
        elif squat is not None and current is not None and valid(current):
            # its plan is dropped: so is the planner's afterany (if it was released ahead)
            ours = bool(job.dependency) and _planners_dependency(job.dependency, current, by_id)
            out.holds.append(Hold(job.job_id, f"released, but {squat}", clear_dependency=ours))
            out.events.append((now, f"job {job.job_id} cannot start", current.node, current.gpu))
            current = None
        elif not job.held and current is not None and sitepolicy.is_limit_reason(job.reason):
            # Slurm keeps it pending for a QOS or association limit: its slices go on
            # to others, and it is planned again once the limit may allow it
            out.holds.append(
                Hold(
                    job.job_id,
                    f"released, but Slurm keeps it pending for a limit ({job.reason})",
                    clear_dependency=bool(job.dependency)
                    and _planners_dependency(job.dependency, current, by_id),
                )
            )
            out.limited[job.job_id] = job.reason
            out.events.append(
                (now, f"job {job.job_id} waits for a limit", current.node, current.gpu)
            )
            continue
        elif not job.held:
            if current is not None and valid(current):
                out.released.append((job, current))
                end = now + max(current.planned_seconds, OVERDUE_SECONDS)
                out.busy.append(
                    Busy(
                        job.job_id,
                        current.node,
                        current.gpu,
                        model_slot(current),
                        now,
                        end,
                        False,
                    )
                )
                continue
            if current is not None:
                out.holds.append(
                    Hold(job.job_id, f"node {current.node} gpu {current.gpu} unusable")
                )
            else:
                out.holds.append(Hold(job.job_id, "not planned yet"))
        elif job.owner_can_release and job.dependency:
            # A job released ahead that its owner held again still has the planner's
            # afterany: cleared, and the job planned again. Other user holds stay as
            # they are (job_submit.lua's own hold included): job_submit.lua refuses a
            # release by anyone but the planner, so converting them would cost a Slurm
            # write per job for nothing.
            ours = _planners_dependency(job.dependency, a, by_id, own=job.job_id)
            if ours:
                out.holds.append(
                    Hold(job.job_id, "held by its owner after release", clear_dependency=True)
                )
        problem = _problem(est) or _comment_problem(job.comment)
        if problem is not None:
            out.noted += 1
            fields_ = []
            want_admin = note_admin_comment(problem)
            if job.admin_comment != want_admin:
                fields_.append(("AdminComment", want_admin))
            want_comment = comments.parse(job.comment).with_token(None).with_note(problem).render()
            if job.comment != want_comment:
                fields_.append(("Comment", want_comment))
            # written only to a job Slurm holds: a job not held may start before the
            # note lands (Slurm takes this cycle's hold of a started job), and the note
            # would replace the record of the slice it runs on; it is noted once held
            if fields_ and job.held:
                out.notes.append(Note(job.job_id, problem, tuple(fields_)))
            continue
        later = _cannot_start_yet(job, now, own_dependency=ours)
        if later is None and job.held and job.job_id in snap.limited:
            later = (
                f"waits for a limit: Slurm kept it pending for {snap.limited[job.job_id]} "
                "after its release"
            )
        if later is None and snap.policy is not None:
            pool = sitepolicy.pool_of(snap.policy, job)
            if pool is None:
                later = f"waits for its reservation {job.reservation[:80]} to start"
            elif pool and not _pool_nodes(snap, pool):
                later = f"its reservation {pool[:80]} holds no usable node of the partition"
            else:
                out.pool[job.job_id] = pool
        if later is not None:
            out.deferred[job.job_id] = later
            if current is not None:
                out.events.append((now, f"job {job.job_id} {later}", current.node, current.gpu))
            continue
        if current is not None and valid(current):
            out.kept[job.job_id] = current
            continue
        if record is not None and record.restart < job.restart_count:
            out.events.append((now, f"job {job.job_id} was requeued", record.node, record.gpu))
        elif current is not None:
            out.events.append(
                (now, f"node {current.node} gpu {current.gpu} is not usable", None, None)
            )
        if not any(m in usable_models for m in feasible(est)):
            out.no_gpu += 1
            continue
        out.waiting.append(job)

    nodes = frozenset(snap.nodes)
    if snap.previous_nodes is not None and nodes != snap.previous_nodes:
        out.events.append((now, "usable nodes changed", None, None))
    _not_started(snap, out)
    _site_policy(snap, out)
    _within_horizon(snap, out)
    out.gated = _gated([by_id[h.job_id] for h in out.holds], by_id, held_ids, now)
    return out


def _gated(
    jobs: list[JobLike], by_id: Mapping[str, JobLike], held: set[str], now: float
) -> set[str]:
    """Of ``jobs``, those pending and not held that Slurm cannot start before this
    cycle's writes land: their begin time is ahead, or they wait (``after*``) for a job
    that is held (the planner releases none before its moves) or whose begin time is
    ahead. Only such a job may take a new record in place: Slurm starts any other at
    any moment, and an update that reaches a started job replaces the record of the
    slice it runs on (Slurm writes AdminComment and Comment to a running job; only a
    GRES record in the same update makes it refuse the whole update)."""
    out = set()

    def later(job: JobLike) -> bool:
        return job.eligible_time is not None and job.eligible_time > now + BEGIN_SLACK

    for job in jobs:
        if job.held or job_phase(job.state) != "pending":
            continue
        if later(job):
            out.add(job.job_id)
            continue
        names = dependency_ids(job.dependency)
        blocked = [
            jid in held
            or (other is not None and job_phase(other.state) == "pending" and later(other))
            for jid in names
            for other in [by_id.get(jid)]
        ]
        # "a,b": every one must be met, one blocked job suffices; "a?b": any one met
        if names and (all(blocked) if "?" in job.dependency else any(blocked)):
            out.add(job.job_id)
    return out


def _site_policy(snap: Snapshot, out: Classified) -> None:
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
    waiting = {j.job_id for j in out.waiting}  # released and not started for too long
    started = [job for job, _ in out.released if job.job_id not in waiting]
    denied = sitepolicy.admit(policy, order, started)
    if not denied:
        return
    out.deferred.update(denied)
    out.waiting = [j for j in out.waiting if j.job_id not in denied]
    for jid in denied:
        out.kept.pop(jid, None)


def _pool_nodes(snap: Snapshot, pool: str) -> bool:
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


def _within_horizon(snap: Snapshot, out: Classified) -> None:
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


def _cannot_start_yet(job: JobLike, now: float, own_dependency: bool = False) -> str | None:
    """Why a held job could not start now even if released (its ``--begin`` is ahead,
    or its own dependency is unfulfilled: Slurm re-checks a held job's dependencies
    about once a minute and empties the field once they are met), or None. Such a job
    is not planned: released, it would keep its slices idle. ``own_dependency``: the
    dependency is the planner's, being cleared."""
    if job.eligible_time is not None and job.eligible_time > now + BEGIN_SLACK:
        return f"waits for its begin time ({_clock(job.eligible_time)})"
    if job.dependency and not own_dependency:
        return f"waits for its dependency ({job.dependency[:80]})"
    return None


def _squatting(job: JobLike, a: Assignment, jobs: Mapping[str, JobLike], now: float) -> str | None:
    """Why a released job cannot start though its slices are held for it: its owner
    moved its begin time ahead, or gave it a dependency other than the planner's own;
    None when nothing the job's owner set keeps it from starting."""
    if job.eligible_time is not None and job.eligible_time > now + BEGIN_SLACK:
        return f"its begin time is {_clock(job.eligible_time)}"
    if job.dependency and not _planners_dependency(job.dependency, a, jobs):
        return f"it has a dependency of its own ({job.dependency[:80]})"
    return None


def _planners_dependency(
    dep: str, a: Assignment | None, jobs: Mapping[str, JobLike], own: str | None = None
) -> bool:
    """Whether ``dep`` is what the planner sets on a job released ahead: ``afterany`` on
    jobs planned on the same GPU (Slurm shows ``afterany:41(unfulfilled),...``).
    ``own``: the job's id, whose AdminComment (any run of it) gives ``a`` when None."""
    if a is None and own is not None and own in jobs:
        a = parse_admin_comment(jobs[own].admin_comment)
    if a is None:
        return False
    for item in dep.split(","):
        m = _PLANNER_DEP.fullmatch(item)
        if m is None:
            return False
        for jid in m.group(1).split(":"):
            other = jobs.get(jid)
            b = parse_admin_comment(other.admin_comment) if other is not None else None
            if b is None or (b.node, b.gpu) != (a.node, a.gpu):
                return False
    return True


def _clock(t: float) -> str:
    import time as _time

    return _time.strftime("%Y-%m-%dT%H:%M:%S", _time.localtime(t))


def _not_started(snap: Snapshot, out: Classified) -> None:
    """Released jobs that Slurm has not started ``start_timeout`` seconds after they
    could have (released, eligible, and the jobs before them on their slices gone) are
    held and planned again: whatever keeps them (a limit, their owner) must not keep
    their slices idle for everyone."""
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
        waited = f"{now - since:.0f}"
        out.holds.append(
            Hold(
                job.job_id,
                f"released, but not started {waited} s after it could",
                clear_dependency=bool(job.dependency)
                and _planners_dependency(job.dependency, a, out.jobs),
            )
        )
        out.events.append((now, f"job {job.job_id} did not start", *where))
        out.waiting.append(job)
    if stale:
        out.busy = [b for b in out.busy if b.job_id not in stale]


_AFTER = re.compile(r"after[a-z]*:([0-9_:]+)")
_ID = r"[0-9]+(?:_[0-9]+)?"  # a job, or an array task (<array id>_<task>)
_PLANNER_DEP = re.compile(rf"afterany:({_ID}(?::{_ID})*)(?:\(unfulfilled\))?")


def dependency_ids(dependency: str) -> list[str]:
    """The job ids an ``after*`` dependency names (Slurm shows
    ``afterany:41(unfulfilled),afterany:42``)."""
    return [n for m in _AFTER.finditer(dependency) for n in m.group(1).split(":") if n]


def _orphaned(job: JobLike, a: Assignment, jobs: Mapping[str, JobLike], held: set[str]) -> bool:
    """A job released ahead whose dependency names a job that went back to the queue
    (requeued) since: held again, not planned again yet, or planned again after this
    job's plan (``a``) was made. It would wait for that job's next run, wherever that
    runs. A dependency the owner added names such a job only by chance: it stays
    otherwise (the job is then held as one with a dependency of its own)."""
    for jid in dependency_ids(job.dependency):
        if jid in held:
            return True
        other = jobs.get(jid)
        if other is None or job_phase(other.state) != "pending":
            continue
        b = parse_admin_comment(other.admin_comment)
        if b is None:
            continue
        if b.restart < other.restart_count or (b.restart > 0 and b.issued > a.issued):
            return True
    return False


@lru_cache(maxsize=1 << 16)
def _comment_problem(raw: str) -> str | None:
    """Why the job's Comment leaves no room for the planner's token (a Comment written
    before job_submit.lua refused long ones, or by root), with the fix; or None.
    Memoised: a steady cycle reads the same comments again."""
    text = comments.parse(raw).text
    size = len(text.encode())
    if size <= comments.MAX_USER_COMMENT:
        return None
    return (
        f"its comment has {size} characters, more than the {comments.MAX_USER_COMMENT} "
        "that leave room for the planner's token; shorten it with scontrol update "
        "JobId=<id> Comment=..."
    )


def feasible(est: Estimate | None) -> list[str]:
    """Models on which the job can run on some size."""
    if est is None:
        return []
    return [m for m, t in est.times.items() if any(math.isfinite(x) for x in t.values())]


def _problem(est: Estimate | None) -> str | None:
    """Why a held job cannot be planned at all, or None."""
    if est is None:
        return None
    if est.problem:
        return est.problem
    if not est.times or feasible(est):
        return None
    models = [get_model(m) for m in sorted(est.times)]
    if est.mem is not None and models:
        best = max(
            ((m.profile_for_size(max(m.planner_sizes)), m) for m in models),
            key=lambda pm: pm[0].memory_bytes,
        )
        return (
            f"memory need {_gib(est.mem)} is more than the largest MIG profile offers "
            f"({best[0].name} of {best[1].name}: {_gib(best[0].memory_bytes)}); lower mem= in "
            f"the job's --comment or submit it to a partition with larger GPUs"
        )
    return "no MIG instance size can run it (every runtime estimate is inf)"
