"""One cycle of the planner daemon as a pure function: Slurm's view in, actions out.

``plan_cycle(snapshot)`` reads an immutable `Snapshot` (the jobs of the MIG partition as
squeue shows them, the usable nodes and their GPU models, runtime estimates, the
planner settings, the standing plans of held jobs) and returns the `Action`s that move
Slurm towards the plan: hold, release with the assignment (AdminComment
``slurm-mig:{json}``, ReqNodeList, token), note why a job cannot be planned, learn a
runtime, requeue a job a policy moves. A held job's plan stays in the daemon
(`CycleResult.planned` becomes the next snapshot's ``plans``) until the job is
released: Slurm is written to for the jobs that start, never for the queue. A released
job's assignment lives in its AdminComment; a daemon restarted at any moment rebuilds
the busy view from Slurm and plans held jobs again.

The cycle in steps, each a function below:

1. `classify`: each job of the partition is busy (running, configuring, completing, or
   released and not yet started, with an assignment), planned (held, with a standing
   assignment for this run on a usable GPU), waiting (held, no plan), to hold, to note
   (it cannot be planned), or finished (its runtime to learn; an early or late end, a
   failure, a requeue or a lost node is an event that may call for a re-plan).
2. `cluster_snapshots`: the planning core's `ClusterSnapshot` per GPU model: the GPUs of
   the usable nodes (nodes sorted by name, then GPU index), the busy jobs' instances,
   the standing plans, the waiting jobs with that model's runtimes, the events.
3. `schedule`: ``planner.driver`` with the policy the config names (``algorithm``):
   whether to re-plan, batches, planning through the registry, the release gate - the
   code the simulator runs too.
4. `assignments`: the driver's standing plans and releases as `Assignment`s (a plan
   that did not change keeps its record).
5. `link_reuse`: ``keep_for``/``reuse_from`` where the next job on an instance runs on
   the identical instance, so the Epilog keeps it for that job.
6. `actions`: what to release (with the record fields that changed), hold, note and
   learn.

Safety (no two jobs on overlapping slices of a GPU) rests on Slurm's view alone: a held
job is released only when no busy job and no job ordered before it on its GPU overlaps
it, and a released job stays busy until Slurm says it has left. The daemon writes the
AdminComment in the update before the release (and skips the release when that write
failed), so a busy job's slices are always known. Times in plans are seconds from ``snapshot.now``.
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from functools import cache, lru_cache
from types import MappingProxyType
from typing import Protocol

from ..geometry import GeometryError, GpuModel, Placement, Slot, get_model, mask_tables
from ..planner.decisions import Decisions, Move, Place
from ..planner.driver import BatchSettings, projected_end, step_groups
from ..planner.gcpause import paused_gc
from ..planner.registry import get_policy, policy_info
from ..planner.snapshot import (
    ClusterSnapshot,
    Event,
    Gpu,
    Instance,
    Job,
    Planned,
    Running,
)
from . import comment as comments
from .assignment import Assignment, plan_id

ADMIN_TAG = "slurm-mig:"

# squeue states: busy while one of these (COMPLETING: the epilog still owns the instance)
ACTIVE_STATES = frozenset(
    {
        "RUNNING",
        "CONFIGURING",
        "COMPLETING",
        "SUSPENDED",
        "STOPPED",
        "SIGNALING",
        "RESIZING",
        "STAGE_OUT",
    }
)
PENDING_STATES = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"})

OVERDUE_SECONDS = 1.0  # an overdue busy job is expected to end this soon
LATE_FRACTION = 0.10  # a job ending this far off its plan (and LATE_SECONDS) re-plans
LATE_SECONDS = 2.0
MIN_RUNTIME = 1e-3  # a planned runtime is never shorter (the planner needs > 0)


class JobLike(Protocol):
    """The fields of `slurm_mig.slurm.client.Job` the cycle reads."""

    job_id: str
    name: str
    partition: str
    state: str
    reason: str
    held: bool
    comment: str
    admin_comment: str
    required_nodes: str
    submit_time: float | None
    start_time: float | None
    end_time: float | None
    restart_count: int
    exit_code: int | None
    dependency: str
    eligible_time: float | None


# ---------------------------------------------------------------------------
# Inputs


@dataclass(frozen=True)
class Estimate:
    """A job's runtime estimate: seconds per instance size per GPU model (inf = cannot
    run there, e.g. too little memory), its learning key, its memory hint, its PCIe
    demand and alpha, whether it may be restarted elsewhere, and a problem (e.g. a bad
    hint) that keeps it from being planned."""

    key: str
    times: Mapping[str, Mapping[int, float]] = field(default_factory=dict)
    mem: int | None = None
    problem: str | None = None
    pcie: float = 0.0
    alpha: float = 1.0
    restartable: bool = False


@dataclass(frozen=True)
class Snapshot:
    """Everything one cycle decides from; ``nodes`` holds only the usable nodes."""

    now: float  # epoch seconds, taken before squeue ran
    jobs: tuple[JobLike, ...]
    nodes: Mapping[str, tuple[str, ...]]  # usable node -> GPU model names, index order
    estimates: Mapping[str, Estimate]  # job id -> estimate
    partition: str = "mig"
    algorithm: str = "far"  # any registered policy name
    batch_window: float = 30.0
    batch_size: int = 0  # jobs per batch (0: every waiting job)
    previous_nodes: frozenset[str] | None = None  # usable nodes of the last cycle, if any
    release_ahead: float = 0.0  # seconds (0: off); see `release_ahead`
    start_timeout: float = 120.0  # a released job not started this long after it could
    # the standing plans of held jobs, kept by the daemon between cycles (Slurm hears of
    # a plan only at release); None after a start: held jobs are planned again
    plans: Mapping[str, Assignment] | None = None


# ---------------------------------------------------------------------------
# Actions


@dataclass(frozen=True)
class Hold:
    """``scontrol hold``: a pending job the planner has not released."""

    job_id: str
    reason: str
    clear_dependency: bool = False  # the planner's afterany, set when released ahead

    def describe(self) -> str:
        also = "; its dependency cleared" if self.clear_dependency else ""
        return f"job {self.job_id}: held ({self.reason}){also}"


@dataclass(frozen=True)
class Release:
    """Sign ``assignment`` (issued = now), write the token into the job's Comment (the
    user's text ``comment`` kept) and the record (``fields``) in one update, then
    release. With ``after``, the job is released ahead
    of its slices: Slurm starts it once those jobs are gone (``Dependency=afterany``)."""

    job_id: str
    assignment: Assignment
    comment: str  # the job's Comment without token or note
    after: tuple[str, ...] = ()
    # the record fields that differ from what Slurm holds (AdminComment, ReqNodeList),
    # written in the same update as the token
    fields: tuple[tuple[str, str], ...] = ()

    def describe(self) -> str:
        a = self.assignment
        where = f"on {a.node} gpu {a.gpu} {a.profile}@{a.placement.start}"
        if self.after:
            return f"job {self.job_id}: released {where}, to start after job " + ", ".join(
                self.after
            )
        return f"job {self.job_id}: released {where}"


@dataclass(frozen=True)
class Note:
    """The job stays held and cannot be planned: say why (AdminComment + Comment)."""

    job_id: str
    text: str
    fields: tuple[tuple[str, str], ...]

    def describe(self) -> str:
        return f"job {self.job_id}: not planned: {self.text}"


@dataclass(frozen=True)
class Learn:
    """A finished run's runtime for the runtime store (idempotent per job and restart)."""

    job_id: str
    restart: int
    key: str
    model: str
    size: int
    seconds: float
    finished: float

    def describe(self) -> str:
        return (
            f"job {self.job_id}: learned {self.key} on {self.model} size {self.size}: "
            f"{self.seconds:.1f} s"
        )


@dataclass(frozen=True)
class Requeue:
    """``scontrol requeue``: a policy moves this running, restartable job; it is planned
    again for its next run (MIG has no live migration)."""

    job_id: str
    reason: str

    def describe(self) -> str:
        return f"job {self.job_id}: requeued ({self.reason})"


Action = Hold | Release | Note | Learn | Requeue


@dataclass(frozen=True)
class CycleResult:
    """The actions, in the order to apply them, and what the plan looks like."""

    actions: tuple[Action, ...]
    planned: Mapping[str, Assignment]  # every held job's assignment (released ones too)
    released: tuple[str, ...]
    batches: tuple[int, ...]  # batch numbers formed this cycle
    replanned: tuple[str, ...]  # why standing plans were made again ('' none)
    busy: int  # jobs holding or about to hold slices
    waiting: int  # held jobs left for a later batch
    noted: int  # held jobs that cannot be planned
    makespan: float  # seconds from now until all busy and planned work ends (projected)
    nodes: frozenset[str]  # pass as the next snapshot's previous_nodes
    # held jobs not planned because they cannot start yet (begin time, dependency): why
    deferred: Mapping[str, str] = field(default_factory=dict)
    # what the policy saw and answered, per GPU model (plans carry their timing stats)
    snapshots: tuple[ClusterSnapshot, ...] = field(default=(), compare=False)
    decisions: tuple[Decisions, ...] = field(default=(), compare=False)


# ---------------------------------------------------------------------------
# The AdminComment record


def admin_comment_for(a: Assignment) -> str:
    """``slurm-mig:{json}`` (keys sorted, no spaces: what ``json.dumps(a.to_json(),
    sort_keys=True, separators=(",", ":"))`` writes, built faster); ``issued`` is when
    the job was planned (the token carries its own issue time)."""
    return ADMIN_TAG + "{" + ",".join(f'"{k}":{_json_value(getattr(a, k))}' for k in _KEYS) + "}"


def _json_value(v: object) -> str:
    if v is None:
        return "null"
    if isinstance(v, str):
        return _json_str(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return int.__repr__(v)
    if isinstance(v, float) and math.isfinite(v):
        return float.__repr__(v)
    if isinstance(v, Placement):
        return f'{{"size":{v.size},"start":{v.start}}}'
    return json.dumps(v, sort_keys=True, separators=(",", ":"))


_json_str = json.encoder.encode_basestring_ascii
_KEYS = tuple(sorted(f.name for f in fields(Assignment)))


@lru_cache(maxsize=1 << 16)
def parse_admin_comment(text: str | None) -> Assignment | None:
    """The assignment an AdminComment holds, or None (none, a note, or unreadable).
    Memoised: a steady cycle reads the same records again."""
    raw = (text or "").strip()
    if not raw.startswith(ADMIN_TAG + "{"):
        return None
    try:
        d = json.loads(raw[len(ADMIN_TAG) :])
        if not isinstance(d, dict):
            return None
        pl = d["placement"]
        extra = set(d) - _RECORD_KEYS
        if extra:
            return None
        a = Assignment(
            job_id=str(d["job_id"]),
            restart=int(d["restart"]),
            node=str(d["node"]),
            gpu=int(d["gpu"]),
            model=str(d["model"]),
            profile=str(d["profile"]),
            placement=Placement(int(pl["start"]), int(pl["size"])),
            batch=int(d["batch"]),
            order=int(d["order"]),
            planned_seconds=float(d["planned_seconds"]),
            issued=float(d.get("issued", 0.0)),
            reuse_from=None if d.get("reuse_from") is None else str(d["reuse_from"]),
            keep_for=None if d.get("keep_for") is None else str(d["keep_for"]),
        )
        plan = d.get("plan")
        return replace(a, plan=plan if isinstance(plan, str) and plan else plan_id(a))
    except (KeyError, ValueError, TypeError, RecursionError):
        return None


_RECORD_KEYS = frozenset(f.name for f in fields(Assignment))


def note_admin_comment(text: str) -> str:
    return f"{ADMIN_TAG} not planned: {text}"


def waits_admin_comment(text: str) -> str:
    return f"{ADMIN_TAG} not planned yet: {text}"


# ---------------------------------------------------------------------------
# Helpers


@lru_cache(maxsize=1 << 17)
def job_sort_key(job_id: str) -> tuple[int, int, str]:
    """Numeric job ids in numeric order, others after them."""
    return (0, int(job_id), "") if job_id.isdigit() else (1, 0, job_id)


def job_phase(state: str) -> str:
    """'active' (holds or may hold slices), 'pending' or 'done', from a squeue state."""
    if state in ACTIVE_STATES:  # the common one-word states, without the split
        return "active"
    if state in PENDING_STATES:
        return "pending"
    words = set(re.split(r"[\s,|+]+", (state or "").upper()))
    if words & ACTIVE_STATES:
        return "active"
    if words & PENDING_STATES:
        return "pending"
    return "done"


def _in_partition(job: JobLike, partition: str) -> bool:
    return partition in [p.strip() for p in (job.partition or "").split(",")]


def _late_threshold(planned: float) -> float:
    return max(LATE_FRACTION * planned, LATE_SECONDS)


def _gib(n: int) -> str:
    return f"{n / 1024**3:.1f} GiB"


@cache
def _legal_slot(model_name: str, profile: str, placement: Placement) -> Slot | None:
    """The planner slot of ``profile`` at ``placement`` on the model (canonical), or
    None when the planner does not use that profile there."""
    model = get_model(model_name)
    try:
        prof = model.profile(profile)
        slot = Slot(placement, prof.compute_slices)
        if placement not in prof.placements or model.profile_for_size(slot.size) != prof:
            return None
    except GeometryError:
        return None
    tables = mask_tables(model)
    i = tables.index_of(slot)
    return tables.slots[i] if i is not None else slot


def _model_slot(a: Assignment) -> Slot:
    """The slot of a busy job's assignment (best effort: its profile on its model)."""
    got = _legal_slot(a.model, a.profile, a.placement)
    if got is not None:
        return got
    try:
        prof = get_model(a.model).profile(a.profile)
        return Slot(a.placement, prof.compute_slices)
    except GeometryError:
        return Slot(a.placement, a.placement.size)


def _submitted(job: JobLike, now: float) -> float:
    return job.submit_time if job.submit_time is not None else now


# ---------------------------------------------------------------------------
# Step 1: classify


@dataclass
class _Busy:
    job_id: str
    node: str
    gpu: int
    slot: Slot
    ready: float  # when it started (or now, if not yet)
    end: float  # predicted end, absolute
    started: bool


@dataclass
class Classified:
    """What step 1 found (see the module doc)."""

    jobs: dict[str, JobLike] = field(default_factory=dict)
    holds: list[Hold] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    learns: list[Learn] = field(default_factory=list)
    busy: list[_Busy] = field(default_factory=list)
    kept: dict[str, Assignment] = field(default_factory=dict)  # standing plans
    waiting: list[JobLike] = field(default_factory=list)  # held, no plan
    events: list[tuple[float, str, str | None, int | None]] = field(default_factory=list)
    max_batch: int = -1
    no_gpu: int = 0  # held jobs no usable GPU can run
    noted: int = 0
    models: dict[tuple[str, int], str] = field(default_factory=dict)  # (node, gpu) -> model
    deferred: dict[str, str] = field(default_factory=dict)  # held, cannot start yet: why
    released: list[tuple[JobLike, Assignment]] = field(default_factory=list)  # not started
    ended: dict[tuple[str, int], list[tuple[Slot, float]]] = field(
        default_factory=lambda: defaultdict(list)
    )  # (node, gpu) -> slots of jobs that left, and when


def classify(snap: Snapshot) -> Classified:
    """Step 1 (module doc)."""
    now = snap.now
    out = Classified()
    for node in sorted(snap.nodes):
        for local, name in enumerate(snap.nodes[node]):
            out.models[(node, local)] = get_model(name).name

    def valid(a: Assignment) -> bool:
        model = out.models.get((a.node, a.gpu))
        return model == a.model and _legal_slot(a.model, a.profile, a.placement) is not None

    usable_models = set(out.models.values())
    held_ids = {j.job_id for j in snap.jobs if j.held and job_phase(j.state) == "pending"}
    jobs = sorted(
        (j for j in snap.jobs if _in_partition(j, snap.partition)),
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
                out.busy.append(_Busy(job.job_id, a.node, a.gpu, _model_slot(a), start, end, True))
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
                out.ended[where].append((_model_slot(current), end))
            if start and end:
                ran = end - start
                if ok and ran > 0:
                    size = _model_slot(current).size
                    key = est.key if est is not None else job.name
                    out.learns.append(
                        Learn(job.job_id, current.restart, key, current.model, size, ran, end)
                    )
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
        if not job.held and current is not None and _orphaned(job, held_ids):
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
        elif not job.held:
            if current is not None and valid(current):
                out.released.append((job, current))
                end = now + max(current.planned_seconds, OVERDUE_SECONDS)
                out.busy.append(
                    _Busy(
                        job.job_id,
                        current.node,
                        current.gpu,
                        _model_slot(current),
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
            if fields_:
                out.notes.append(Note(job.job_id, problem, tuple(fields_)))
            continue
        later = _cannot_start_yet(job, now, own_dependency=ours)
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
        if not any(m in usable_models for m in _feasible(est)):
            out.no_gpu += 1
            continue
        out.waiting.append(job)

    nodes = frozenset(snap.nodes)
    if snap.previous_nodes is not None and nodes != snap.previous_nodes:
        out.events.append((now, "usable nodes changed", None, None))
    _not_started(snap, out)
    return out


def _cannot_start_yet(job: JobLike, now: float, own_dependency: bool = False) -> str | None:
    """Why a held job could not start now even if released (its ``--begin`` is ahead,
    or its own dependency is unfulfilled: Slurm re-checks a held job's dependencies
    about once a minute and empties the field once they are met), or None. Such a job
    is not planned: released, it would keep its slices idle. ``own_dependency``: the
    dependency is the planner's, being cleared."""
    if job.eligible_time is not None and job.eligible_time > now:
        return f"waits for its begin time ({_clock(job.eligible_time)})"
    if job.dependency and not own_dependency:
        return f"waits for its dependency ({job.dependency[:80]})"
    return None


def _squatting(job: JobLike, a: Assignment, jobs: Mapping[str, JobLike], now: float) -> str | None:
    """Why a released job cannot start though its slices are held for it: its owner
    moved its begin time ahead, or gave it a dependency other than the planner's own;
    None when nothing the job's owner set keeps it from starting."""
    if job.eligible_time is not None and job.eligible_time > now:
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
        where, slot = (a.node, a.gpu), _model_slot(a)
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


_AFTER = re.compile(r"after[a-z]*:([0-9:]+)")
_PLANNER_DEP = re.compile(r"afterany:([0-9]+(?::[0-9]+)*)(?:\(unfulfilled\))?")


def _orphaned(job: JobLike, held: set[str]) -> bool:
    """A job released ahead whose dependency names a job that is held again (requeued):
    it would wait for that job's next run, wherever that runs."""
    if not job.dependency:
        return False
    for m in _AFTER.finditer(job.dependency):
        if any(n in held for n in m.group(1).split(":")):
            return True
    return False


def _comment_problem(raw: str) -> str | None:
    """Why the job's Comment leaves no room for the planner's token (a Comment written
    before job_submit.lua refused long ones, or by root), with the fix; or None."""
    text = comments.parse(raw).text
    size = len(text.encode())
    if size <= comments.MAX_USER_COMMENT:
        return None
    return (
        f"its comment has {size} characters, more than the {comments.MAX_USER_COMMENT} "
        "that leave room for the planner's token; shorten it with scontrol update "
        "JobId=<id> Comment=..."
    )


def _feasible(est: Estimate | None) -> list[str]:
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
    if not est.times or _feasible(est):
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


# ---------------------------------------------------------------------------
# Step 2: the planning core's snapshots


def _times(est: Estimate, model: GpuModel, memo: dict) -> Mapping[int, float]:
    """Seconds per size on ``model`` (never below MIN_RUNTIME); jobs of one kind share
    one estimate, so the table is made once per estimate and model."""
    key = (id(est), model.name)
    hit = memo.get(key)
    if hit is not None:
        return hit[0]
    raw = est.times.get(model.name, {})
    table = {}
    for s in model.planner_sizes:
        t = raw.get(s, math.inf)
        table[s] = t if math.isinf(t) else max(float(t), MIN_RUNTIME)
    memo[key] = (table, est)  # keeps est alive: its id cannot be reused meanwhile
    return table


def job_deadline(job: JobLike, memo: dict | None = None) -> float | None:
    """A job's deadline (epoch seconds): Slurm's own (``sbatch --deadline``), else its
    ``deadline=`` hint (a date, or a duration after submission), else None. A hint that
    does not parse gives none (the estimate reports the problem)."""
    own = getattr(job, "deadline", None)
    if own:
        return float(own)
    from .hints import HintError, parse_hints

    text = job.comment or ""
    if "deadline=" not in text:
        return None
    cache = memo if memo is not None else {}
    key = ("deadline-hint", text)
    if key not in cache:
        try:
            cache[key] = parse_hints(text)
        except HintError:
            cache[key] = None
    hints = cache[key]
    if hints is None or job.submit_time is None:
        return None if hints is None else hints.deadline_at
    return hints.deadline(job.submit_time)


def _job(job: JobLike, est: Estimate, model: GpuModel, now: float, memo: dict) -> Job:
    return Job(
        id=job.job_id,
        arrival=_submitted(job, now),
        times=_times(est, model, memo),
        memory=est.mem or 0,
        pcie_demand=est.pcie,
        alpha=est.alpha,
        restartable=est.restartable,
        kind=est.key,
        deadline=job_deadline(job, memo),
    )


def cluster_snapshots(snap: Snapshot, view: Classified) -> tuple[ClusterSnapshot, ...]:
    """Step 2: one `ClusterSnapshot` per GPU model of the usable nodes (module doc)."""
    now = snap.now
    memo: dict = {}
    groups: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for key, model in view.models.items():
        groups[model].append(key)
    out = []
    for name in sorted(groups):
        model = get_model(name)
        keys = sorted(groups[name])
        index = {k: i for i, k in enumerate(keys)}
        insts: dict[int, list[Instance]] = defaultdict(list)
        busy: dict[str, tuple[_Busy, int]] = {}
        pcie: dict[int, int] = defaultdict(int)
        for b in view.busy:
            g = index.get((b.node, b.gpu))
            if g is None:
                continue
            est = snap.estimates.get(b.job_id)
            bound = est is not None and est.pcie > 0
            insts[g].append(Instance(b.slot, b.job_id, b.ready, b.end, bound))
            busy[b.job_id] = (b, g)
            pcie[g] += bound

        def running_job(jid: str, model: GpuModel = model, busy: dict = busy) -> Running:
            b, g = busy[jid]
            est = snap.estimates.get(jid) or Estimate(jid)
            j = _job(view.jobs[jid], est, model, now, memo)
            seconds = max(b.end - b.ready, MIN_RUNTIME)
            left = max(0.0, min(1.0, (b.end - now) / seconds))
            return Running(j, g, b.slot, b.ready if b.started else None, left, 1.0, b.end)

        gpus = tuple(
            Gpu(
                i,
                tuple(sorted(insts[i], key=lambda x: (x.slot.placement.start, x.slot.size))),
                -math.inf,
                pcie[i],
                node,
                local,
            )
            for i, (node, local) in enumerate(keys)
        )
        held = sorted(
            [*view.waiting, *(view.jobs[j] for j in view.kept)],
            key=lambda j: (_submitted(j, now), job_sort_key(j.job_id)),
        )
        pending_ids = [j.job_id for j in held if name in _feasible(snap.estimates.get(j.job_id))]

        def pending_job(jid: str, model: GpuModel = model) -> Job:
            return _job(view.jobs[jid], snap.estimates[jid], model, now, memo)

        pending = _Lazy(pending_ids, pending_job)
        planned: dict[str, Planned] = {}
        for jid, a in view.kept.items():
            g = index.get((a.node, a.gpu))
            slot = _legal_slot(a.model, a.profile, a.placement)
            if g is None or slot is None or jid not in pending:
                continue
            planned[jid] = Planned(jid, g, slot, a.batch, a.order, a.planned_seconds, a.issued)
        events = tuple(
            Event(at, what, None if node is None else index.get((node, gpu)))
            for at, what, node, gpu in view.events
            if node is None or (node, gpu) in index
        )
        out.append(
            ClusterSnapshot(
                now=now,
                model=model,
                gpus=gpus,
                pending=pending,
                running=_Lazy(list(busy), running_job),
                planned=MappingProxyType(planned),
                next_batch=view.max_batch + 1,
                pcie_max=_pcie_max(model),
                events=events,
            )
        )
    return tuple(out)


class _Lazy(Mapping):
    """A read-only mapping whose values are made when first read: a steady cycle reads
    few of the ten thousand jobs a snapshot may name."""

    __slots__ = ("_keys", "_make", "_made")

    def __init__(self, keys: Sequence[str], make) -> None:
        self._keys = dict.fromkeys(keys)
        self._make = make
        self._made: dict = {}

    def __getitem__(self, key: str):
        got = self._made.get(key)
        if got is None:
            if key not in self._keys:
                raise KeyError(key)
            got = self._made[key] = self._make(key)
        return got

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def __iter__(self):
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)


def _pcie_max(model: GpuModel) -> float:
    from ..pcie import pcie_max_for

    return pcie_max_for(model)


# ---------------------------------------------------------------------------
# Step 3: the driver


def schedule(
    snap: Snapshot, view: Classified, groups: Sequence[ClusterSnapshot]
) -> list[Decisions]:
    """Step 3: the planning core's driver with the configured policy (module doc)."""
    if not groups:
        return []
    policies = [get_policy(snap.algorithm) for _ in groups]
    settings = BatchSettings(window=snap.batch_window, size=max(0, snap.batch_size))
    return step_groups(groups, policies, settings)


# ---------------------------------------------------------------------------
# Step 4: assignments


def assignments(
    snap: Snapshot,
    view: Classified,
    groups: Sequence[ClusterSnapshot],
    decisions: Sequence[Decisions],
) -> tuple[dict[str, Assignment], list[str], list[Requeue]]:
    """Step 4: every held job's assignment after this cycle (standing and released),
    the jobs released now, and the requeues of moved jobs."""
    now = snap.now
    final: dict[str, Assignment] = {}
    released: list[str] = []
    requeues: list[Requeue] = []
    next_batch = view.max_batch + 1
    online = policy_info(snap.algorithm).kind == "online"
    for snap_g, got in zip(groups, decisions):
        for jid, p in got.planned.items():
            final[jid] = _assignment(
                view, snap_g, now, jid, p.gpu, p.slot, p.batch, p.order, p.seconds
            )
        orders: dict[int, int] = defaultdict(int)
        for op in got.ops:
            if type(op) is Place:
                seconds = op.end - op.start
                if not math.isfinite(seconds):
                    seconds = snap_g.pending[op.job].time(op.slot.size)
                if online:  # placed now: numbered after every batch so far
                    batch, order = next_batch, orders[op.gpu]
                    orders[op.gpu] += 1
                else:
                    batch, order = op.batch, op.order
                final[op.job] = _assignment(
                    view, snap_g, now, op.job, op.gpu, op.slot, batch, order, seconds
                )
                released.append(op.job)
            elif type(op) is Move:
                job = view.jobs.get(op.job)
                if job is not None:
                    requeues.append(Requeue(op.job, f"{snap.algorithm} moves it to another slice"))
    return final, sorted(set(released), key=job_sort_key), requeues


def _linked(a: Assignment, keep: str | None, reuse: str | None) -> Assignment:
    """``a`` with ``keep_for``/``reuse_from`` set (faster than dataclasses.replace)."""
    return Assignment(
        a.job_id,
        a.restart,
        a.node,
        a.gpu,
        a.model,
        a.profile,
        a.placement,
        a.batch,
        a.order,
        a.planned_seconds,
        a.issued,
        reuse,
        keep,
        a.plan,
    )


def _assignment(
    view: Classified,
    snap: ClusterSnapshot,
    now: float,
    jid: str,
    g: int,
    slot: Slot,
    batch: int,
    order: int,
    seconds: float,
) -> Assignment:
    """The record of a plan; a standing one that did not change keeps its own."""
    gpu, model = snap.gpus[g], snap.model
    a = Assignment(
        job_id=jid,
        restart=view.jobs[jid].restart_count,
        node=gpu.node,
        gpu=gpu.local,
        model=model.name,
        profile=model.profile_for_size(slot.size).name,
        placement=slot.placement,
        batch=batch,
        order=order,
        planned_seconds=seconds,
        issued=now,
    )
    old = view.kept.get(jid)
    if old is not None and _same_plan(old, a):
        return old
    return replace(a, plan=plan_id(a))


def _same_plan(a: Assignment, b: Assignment) -> bool:
    return (a.node, a.gpu, a.model, a.profile, a.placement, a.batch, a.order) == (
        b.node,
        b.gpu,
        b.model,
        b.profile,
        b.placement,
        b.batch,
        b.order,
    ) and math.isclose(a.planned_seconds, b.planned_seconds, rel_tol=1e-9, abs_tol=1e-9)


# ---------------------------------------------------------------------------
# Step 5: instance reuse


def _order_key(a: Assignment) -> tuple[int, int, tuple[int, int, str]]:
    return (a.batch, a.order, job_sort_key(a.job_id))


def link_reuse(plans: Mapping[str, Assignment], busy: Sequence[_Busy]) -> dict[str, Assignment]:
    """Step 5: set keep_for / reuse_from where the next job on a job's slices of its GPU
    runs on the identical instance (same profile and placement)."""
    per_gpu: dict[tuple[str, int], list[Assignment]] = defaultdict(list)
    for a in plans.values():
        per_gpu[(a.node, a.gpu)].append(a)
    busy_on: dict[tuple[str, int], list[_Busy]] = defaultdict(list)
    for b in busy:
        busy_on[(b.node, b.gpu)].append(b)
    links: dict[str, dict[str, str]] = defaultdict(dict)
    for key, lst in per_gpu.items():
        lst.sort(key=_order_key)
        # a busy job's instance is reused by the first held job on its slices
        for b in busy_on.get(key, []):
            nxt = next((a for a in lst if a.placement.overlaps(b.slot.placement)), None)
            if (
                nxt is not None
                and nxt.placement == b.slot.placement
                and _model_slot(nxt).size == b.slot.size
            ):
                links[nxt.job_id]["reuse_from"] = b.job_id
        for i, a in enumerate(lst):
            nxt = next((c for c in lst[i + 1 :] if c.placement.overlaps(a.placement)), None)
            if nxt is not None and nxt.placement == a.placement and nxt.profile == a.profile:
                links[a.job_id]["keep_for"] = nxt.job_id
                links[nxt.job_id]["reuse_from"] = a.job_id
    out = {}
    for jid, a in plans.items():
        want = links.get(jid, {})
        keep, reuse = want.get("keep_for"), want.get("reuse_from")
        out[jid] = a if (a.keep_for, a.reuse_from) == (keep, reuse) else _linked(a, keep, reuse)
    return out


# ---------------------------------------------------------------------------
# Step 6 and the cycle


def plan_cycle(snap: Snapshot) -> CycleResult:
    """The actions this cycle takes, from Slurm's view alone (pure and deterministic)."""
    with paused_gc():
        view = classify(snap)
        groups = cluster_snapshots(snap, view)
        decisions = schedule(snap, view, groups)
        planned, released, requeues = assignments(snap, view, groups, decisions)
        final = link_reuse(planned, view.busy)
        ahead = release_ahead(snap, view, final, released)
        return _result(snap, view, groups, decisions, final, released, requeues, ahead)


def release_ahead(
    snap: Snapshot,
    view: Classified,
    final: Mapping[str, Assignment],
    released: Sequence[str],
) -> dict[str, tuple[str, ...]]:
    """Held jobs to release before their slices are free, each with the jobs it must
    wait for (Slurm's ``afterany``: satisfied once those jobs have left, their Epilog
    done, and that moment triggers Slurm's scheduler at once). A chain of jobs on a
    slice then hands over in milliseconds, without the daemon's cycle or the
    scheduler's batch delay in between.

    In plan order, a job goes ahead when every job before it on its slices is running,
    completing or released (now or ahead), and they are projected to be through within
    ``snapshot.release_ahead`` seconds (kept below the token's lifetime, so that the
    token is still valid when the job starts). A job with a dependency of its own is
    not released ahead."""
    if snap.release_ahead <= 0:
        return {}
    now = snap.now
    # per GPU: (slot, job, projected end) of what holds or will hold slices, in order
    holding: dict[tuple[str, int], list[tuple[Slot, str, float]]] = defaultdict(list)
    for b in view.busy:
        holding[(b.node, b.gpu)].append((b.slot, b.job_id, b.end))
    out: dict[str, tuple[str, ...]] = {}
    now_released = set(released)
    for jid in sorted(final, key=lambda j: _order_key(final[j])):
        a = final[jid]
        key = (a.node, a.gpu)
        slot = _model_slot(a)
        before = [h for h in holding[key] if h[0].placement.overlaps(slot.placement)]
        ready = max((h[2] for h in before), default=now)
        create = get_model(a.model).create_time(slot.size)
        if jid in now_released:
            holding[key].append((slot, jid, max(now, ready) + create + a.planned_seconds))
            continue
        if (
            before
            and not view.jobs[jid].dependency
            and ready - now <= snap.release_ahead
            and all(math.isfinite(h[2]) for h in before)
        ):
            out[jid] = tuple(sorted({h[1] for h in before}, key=job_sort_key))
            holding[key].append((slot, jid, ready + create + a.planned_seconds))
        else:
            holding[key].append((slot, jid, math.inf))  # later jobs wait for this one
    return out


def _result(
    snap: Snapshot,
    view: Classified,
    groups: Sequence[ClusterSnapshot],
    decisions: Sequence[Decisions],
    final: Mapping[str, Assignment],
    released: Sequence[str],
    requeues: Sequence[Requeue],
    ahead: Mapping[str, tuple[str, ...]] = MappingProxyType({}),
) -> CycleResult:
    """Step 6: what to release (with the records that changed), learn and requeue.
    Standing plans of held jobs are not written to Slurm: they stay in the daemon's
    state (`CycleResult.planned`) until their job is released."""
    releases = []
    for jid in sorted([*released, *ahead], key=job_sort_key):
        a, job = final[jid], view.jobs[jid]
        user = comments.parse(job.comment).with_token(None).with_note(None)
        releases.append(Release(jid, a, user.render(), ahead.get(jid, ()), record_fields(job, a)))
    stats = [d.stats for d in decisions]
    batches = sorted({b for a in final.values() for b in [a.batch] if b > view.max_batch})
    why = tuple(dict.fromkeys(w for s in stats for w in s.get("replanned", ())))
    waiting = sum(int(s.get("waiting", 0)) for s in stats) + view.no_gpu
    actions: tuple[Action, ...] = (
        *view.holds,
        *view.notes,
        *releases,
        *requeues,
        *view.learns,
    )
    return CycleResult(
        actions=actions,
        planned=MappingProxyType({j: final[j] for j in sorted(final, key=job_sort_key)}),
        released=tuple(sorted([*released, *ahead], key=job_sort_key)),
        batches=tuple(batches),
        replanned=why,
        busy=len(view.busy) + len(released) + len(ahead),
        waiting=waiting,
        noted=view.noted,
        makespan=_makespan(groups, decisions),
        nodes=_seen_nodes(snap, view, bool(why)),
        deferred=MappingProxyType(dict(view.deferred)),
        snapshots=tuple(groups),
        decisions=tuple(decisions),
    )


def _seen_nodes(snap: Snapshot, view: Classified, replanned: bool) -> frozenset[str]:
    """The usable nodes to compare the next cycle with: a change of them counts as seen
    once the standing plans were made again, or when none was left to move."""
    nodes = frozenset(snap.nodes)
    if snap.previous_nodes is None or not view.kept or replanned:
        return nodes
    return snap.previous_nodes


def _makespan(groups: Sequence[ClusterSnapshot], decisions: Sequence[Decisions]) -> float:
    """Seconds from now until every busy and planned job is projected to end."""
    ms = 0.0
    for snap, got in zip(groups, decisions):
        plans = list(got.planned.values()) + [
            Planned(p.job, p.gpu, p.slot, p.batch, p.order, p.end - p.start, snap.now)
            for p in got.ops
            if type(p) is Place and math.isfinite(p.end - p.start)
        ]
        end = projected_end(snap, plans)
        if math.isfinite(end):
            ms = max(ms, end - snap.now)
    return ms


def record_fields(job: JobLike, a: Assignment) -> tuple[tuple[str, str], ...]:
    """The job fields that must change for Slurm to hold ``a``: the AdminComment record
    and the node list, each only when it differs (nothing is rewritten unchanged)."""
    fields_ = []
    old = parse_admin_comment(job.admin_comment)  # cached: no JSON when unchanged
    if old is None or a != old:
        fields_.append(("AdminComment", admin_comment_for(a)))
    if (job.required_nodes or "") != a.node:
        fields_.append(("ReqNodeList", a.node))
    return tuple(fields_)
