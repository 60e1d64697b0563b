"""One cycle of the planner daemon as a pure function: Slurm's view in, actions out.

``plan_cycle(snapshot)`` reads an immutable `Snapshot` (the jobs of the MIG partition as
squeue shows them, the usable nodes and their GPU models, runtime estimates, the
planner settings) and returns the `Action`s that move Slurm towards the plan: hold,
write the assignment (AdminComment ``slurm-mig:{json}`` + ReqNodeList), release, note
why a job cannot be planned, learn a runtime. It keeps no state between cycles: every
planned job's assignment lives in its AdminComment, so a daemon restarted at any moment
rebuilds the same view.

Safety (no two jobs on overlapping slices of a GPU) rests on Slurm's view alone. *Busy*
jobs are those running, configuring or completing (the epilog still owns the
instance) with an assignment, and those released but still pending. A held job is
released only when no busy job and no held job ordered before it (``(batch, order)``
on its GPU) overlaps its placement; so two jobs released in one cycle never overlap,
and a released job stays busy until Slurm says it has left. The daemon writes the
AdminComment before the release (and skips the release when that write failed), so a
busy job's slices are always known.

Planning: the GPUs of the usable nodes form one FAR forest per GPU model (global index
<-> (node, local GPU), nodes sorted by name); a batch of held jobs is split between the
models (LPT on estimated work) and each part is planned with FAR and concatenated
(reversed, or forward when that ends sooner) onto the busy and already-planned work.
All times in the plan are seconds relative to ``snapshot.now``.
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from functools import cache
from typing import Protocol

from ..geometry import GeometryError, GpuModel, Placement, Slot, get_model
from ..planner.timeline import GpuState
from ..workload import Task
from .assignment import Assignment, AssignmentError, comment_with_token

ADMIN_TAG = "slurm-mig:"
NOTE_RE = re.compile(r"\s*\[slurm-mig: [^\]]*\]")

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
    held: bool
    comment: str
    admin_comment: str
    required_nodes: str
    submit_time: float | None
    start_time: float | None
    end_time: float | None
    restart_count: int
    exit_code: int | None


# ---------------------------------------------------------------------------
# Inputs


@dataclass(frozen=True)
class Estimate:
    """A job's runtime estimate: seconds per instance size per GPU model (inf = cannot
    run there, e.g. too little memory), its learning key, its memory hint, and a problem
    (e.g. a bad hint) that keeps it from being planned."""

    key: str
    times: Mapping[str, Mapping[int, float]] = field(default_factory=dict)
    mem: int | None = None
    problem: str | None = None


@dataclass(frozen=True)
class Snapshot:
    """Everything one cycle decides from; ``nodes`` holds only the usable nodes."""

    now: float  # epoch seconds, taken before squeue ran
    jobs: tuple[JobLike, ...]
    nodes: Mapping[str, tuple[str, ...]]  # usable node -> GPU model names, index order
    estimates: Mapping[str, Estimate]  # job id -> estimate
    partition: str = "mig"
    algorithm: str = "far"  # far | auto
    batch_window: float = 30.0
    batch_size: int = 64
    previous_nodes: frozenset[str] | None = None  # usable nodes of the last cycle, if any


# ---------------------------------------------------------------------------
# Actions


@dataclass(frozen=True)
class Hold:
    """``scontrol hold``: a pending job the planner has not released."""

    job_id: str
    reason: str

    def describe(self) -> str:
        return f"job {self.job_id}: held ({self.reason})"


@dataclass(frozen=True)
class UpdateJob:
    """``scontrol update JobId=.. Key=Value ...`` (AdminComment, ReqNodeList)."""

    job_id: str
    fields: tuple[tuple[str, str], ...]
    text: str  # what it means, for the log

    def describe(self) -> str:
        return f"job {self.job_id}: {self.text}"


@dataclass(frozen=True)
class Release:
    """Sign ``assignment`` (issued = now), write the token into ``comment`` and release."""

    job_id: str
    assignment: Assignment
    comment: str  # the job's Comment without token or note

    def describe(self) -> str:
        a = self.assignment
        return (
            f"job {self.job_id}: released on {a.node} gpu {a.gpu} {a.profile}@{a.placement.start}"
        )


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


Action = Hold | UpdateJob | Release | Note | Learn


@dataclass(frozen=True)
class CycleResult:
    """The actions, in the order to apply them, and what the plan looks like."""

    actions: tuple[Action, ...]
    planned: Mapping[str, Assignment]  # every held job's assignment after this cycle
    released: tuple[str, ...]
    batches: tuple[int, ...]  # batch numbers formed this cycle
    replanned: tuple[str, ...]  # why every held job was planned again ('' none)
    busy: int  # jobs holding or about to hold slices
    waiting: int  # held jobs left for a later batch
    noted: int  # held jobs that cannot be planned
    makespan: float  # seconds from now until all busy and planned work ends (projected)
    nodes: frozenset[str]  # pass as the next snapshot's previous_nodes


# ---------------------------------------------------------------------------
# The AdminComment record


def admin_comment_for(a: Assignment) -> str:
    """``slurm-mig:{json}``; ``issued`` is when the job was planned (the token carries
    its own issue time)."""
    data = {f.name: getattr(a, f.name) for f in fields(Assignment)}  # = a.to_json(), faster
    data["placement"] = {"start": a.placement.start, "size": a.placement.size}
    return ADMIN_TAG + json.dumps(data, sort_keys=True, separators=(",", ":"))


def parse_admin_comment(text: str | None) -> Assignment | None:
    """The assignment an AdminComment holds, or None (none, a note, or unreadable)."""
    raw = (text or "").strip()
    if not raw.startswith(ADMIN_TAG + "{"):
        return None
    try:
        data = json.loads(raw[len(ADMIN_TAG) :])
        if not isinstance(data, dict):
            return None
        data.setdefault("issued", 0.0)
        a = Assignment.from_json(data)
        return replace(
            a,
            job_id=str(a.job_id),
            restart=int(a.restart),
            gpu=int(a.gpu),
            batch=int(a.batch),
            order=int(a.order),
            planned_seconds=float(a.planned_seconds),
            issued=float(a.issued),
        )
    except (AssignmentError, ValueError, TypeError):
        return None


def note_admin_comment(text: str) -> str:
    return f"{ADMIN_TAG} not planned: {text}"


def strip_note(comment: str | None) -> str:
    """A Comment without the planner's ``[slurm-mig: ...]`` note."""
    return NOTE_RE.sub("", comment or "").strip()


def comment_with_note(comment: str | None, text: str) -> str:
    clean = text.replace("[", "(").replace("]", ")")
    return f"{strip_note(comment)} [slurm-mig: {clean}]".strip()


# ---------------------------------------------------------------------------
# Helpers


def job_sort_key(job_id: str) -> tuple[int, int, str]:
    """Numeric job ids in numeric order, others after them."""
    return (0, int(job_id), "") if job_id.isdigit() else (1, 0, job_id)


def job_phase(state: str) -> str:
    """'active' (holds or may hold slices), 'pending' or 'done', from a squeue state."""
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


@dataclass(frozen=True)
class _Busy:
    job_id: str
    node: str
    gpu: int
    placement: Placement
    size: int
    end: float  # relative to now


@dataclass(frozen=True)
class _Gpu:
    node: str
    local: int
    model: GpuModel


class _Track:
    """Per memory slice of one GPU: when it is released and which instance holds it."""

    def __init__(self, model: GpuModel) -> None:
        self.end = [0.0] * model.memory_slices
        self.owner: list[Slot | None] = [None] * model.memory_slices

    def ready(self, p: Placement) -> float:
        return max(self.end[p.start : p.end], default=0.0)

    def occupy(self, slot: Slot, end: float) -> None:
        p = slot.placement
        for s in range(p.start, min(p.end, len(self.end))):
            if end >= self.end[s]:
                self.end[s] = end
                self.owner[s] = slot

    def state(self) -> GpuState:
        live: dict[Slot, float] = {}
        for s, owner in enumerate(self.owner):
            if owner is not None:
                live[owner] = max(live.get(owner, 0.0), self.end[s])
        return GpuState(live)


def _slot_of(model: GpuModel, a: Assignment) -> Slot | None:
    """The planner slot of an assignment on ``model``, or None when it is not legal."""
    return _legal_slot(model.name, a.profile, a.placement)


@cache
def _legal_slot(model_name: str, profile: str, placement: Placement) -> Slot | None:
    model = get_model(model_name)
    try:
        prof = model.profile(profile)
        slot = Slot(placement, prof.compute_slices)
        if placement not in prof.placements or model.profile_for_size(slot.size) != prof:
            return None
    except GeometryError:
        return None
    return slot


def _model_slot(a: Assignment) -> Slot:
    """The slot of a busy job's assignment (best effort: its profile on its model)."""
    try:
        prof = get_model(a.model).profile(a.profile)
        return Slot(a.placement, prof.compute_slices)
    except GeometryError:
        return Slot(a.placement, a.placement.size)


# ---------------------------------------------------------------------------
# The cycle


def plan_cycle(snap: Snapshot) -> CycleResult:
    """The actions this cycle takes, from Slurm's view alone (pure and deterministic)."""
    now = snap.now
    jobs = sorted(
        (j for j in snap.jobs if _in_partition(j, snap.partition)),
        key=lambda j: job_sort_key(j.job_id),
    )
    # GPUs per model, global index <-> (node, local gpu)
    groups: dict[str, list[_Gpu]] = defaultdict(list)
    gpu_at: dict[tuple[str, int], _Gpu] = {}
    for node in sorted(snap.nodes):
        for local, name in enumerate(snap.nodes[node]):
            model = get_model(name)
            g = _Gpu(node, local, model)
            groups[model.name].append(g)
            gpu_at[(node, local)] = g

    def valid(a: Assignment) -> bool:
        g = gpu_at.get((a.node, a.gpu))
        return g is not None and g.model.name == a.model and _slot_of(g.model, a) is not None

    holds: list[Hold] = []
    notes: list[Note] = []
    learns: list[Learn] = []
    busy: list[_Busy] = []
    kept: dict[str, Assignment] = {}  # held jobs whose plan still stands
    unplanned: list[JobLike] = []
    by_id: dict[str, JobLike] = {}
    events: list[tuple[float, str]] = []  # (when, what) that may call for a re-plan
    must: list[str] = []  # reasons that call for a re-plan whenever anything is planned
    max_batch = -1
    waiting_no_gpu = 0
    noted = 0

    for job in jobs:
        by_id[job.job_id] = job
        a = parse_admin_comment(job.admin_comment)
        if a is not None:
            max_batch = max(max_batch, a.batch)
        current = a if a is not None and a.restart == job.restart_count else None
        if current is not None and current.job_id != job.job_id:
            current = None
        phase = job_phase(job.state)
        est = snap.estimates.get(job.job_id)

        if phase == "active":
            if a is not None:
                start = job.start_time or now
                end = start + a.planned_seconds - now
                busy.append(
                    _Busy(
                        job.job_id,
                        a.node,
                        a.gpu,
                        a.placement,
                        _model_slot(a).size,
                        max(end, OVERDUE_SECONDS),
                    )
                )
                late = start + a.planned_seconds + _late_threshold(a.planned_seconds)
                if job.start_time and now > late:
                    events.append((late, f"job {job.job_id} runs late"))
            continue

        if phase == "done":
            if current is None:
                continue
            start, end = job.start_time, job.end_time
            ok = job.state.upper().startswith("COMPLETED") and not job.exit_code
            if start and end:
                ran = end - start
                if ok and ran > 0:
                    size = _model_slot(current).size
                    key = est.key if est is not None else job.name
                    learns.append(
                        Learn(job.job_id, current.restart, key, current.model, size, ran, end)
                    )
                if not ok:
                    events.append((end, f"job {job.job_id} failed"))
                elif abs(ran - current.planned_seconds) > _late_threshold(current.planned_seconds):
                    word = "early" if ran < current.planned_seconds else "late"
                    events.append((end, f"job {job.job_id} ended {word}"))
            elif end:
                events.append((end, f"job {job.job_id} left before it ran"))
            continue

        # pending
        if not job.held:
            if current is not None and valid(current):
                slot = _model_slot(current)
                busy.append(
                    _Busy(
                        job.job_id,
                        current.node,
                        current.gpu,
                        current.placement,
                        slot.size,
                        max(current.planned_seconds, OVERDUE_SECONDS),
                    )
                )
                continue
            if current is not None:
                holds.append(Hold(job.job_id, f"node {current.node} gpu {current.gpu} unusable"))
            else:
                holds.append(Hold(job.job_id, "not planned yet"))
        elif job.reason == "JobHeldUser":
            # job_submit.lua's hold or a requeuehold: the user could release it himself
            holds.append(Hold(job.job_id, "an admin hold in place of the user's"))
        problem = _problem(est, groups, snap)
        if problem is not None:
            noted += 1
            fields = []
            want_admin = note_admin_comment(problem)
            if job.admin_comment != want_admin:
                fields.append(("AdminComment", want_admin))
            want_comment = comment_with_note(job.comment, problem)
            if job.comment != want_comment:
                fields.append(("Comment", want_comment))
            if fields:
                notes.append(Note(job.job_id, problem, tuple(fields)))
            continue
        if current is not None and valid(current):
            kept[job.job_id] = current
            continue
        if a is not None and a.restart < job.restart_count:
            must.append(f"job {job.job_id} was requeued")
        elif current is not None:
            must.append(f"node {current.node} gpu {current.gpu} is not usable")
        if not any(m in groups for m in _feasible(est)):
            waiting_no_gpu += 1
            continue
        unplanned.append(job)

    nodes = frozenset(snap.nodes)
    if snap.previous_nodes is not None and nodes != snap.previous_nodes:
        must.append("usable nodes changed")

    # Re-plan every held job when something changed since the oldest plan was made,
    # at most once per batch window.
    replanned: tuple[str, ...] = ()
    # the node change counts as seen once nothing planned is left to move
    seen_nodes = nodes if not kept or snap.previous_nodes is None else snap.previous_nodes
    if kept:
        first = min(a.issued for a in kept.values())
        last = max(a.issued for a in kept.values())
        why = must + [w for t, w in sorted(events) if t > first]
        if why and now - last >= snap.batch_window:
            replanned = tuple(dict.fromkeys(why))
            seen_nodes = nodes
            unplanned.extend(by_id[i] for i in kept)
            kept = {}

    # Batches: full batches always; the last, smaller one once its oldest job waited.
    unplanned.sort(key=lambda j: (_submitted(j, now), job_sort_key(j.job_id)))
    size = max(1, snap.batch_size)
    chunks = [unplanned[i : i + size] for i in range(0, len(unplanned), size)]
    formed = [
        c
        for c in chunks
        if len(c) == size or replanned or now - _submitted(c[0], now) >= snap.batch_window
    ]
    waiting = sum(len(c) for c in chunks) - sum(len(c) for c in formed) + waiting_no_gpu

    # The projected state every GPU is in before the new batches: busy, then kept plans.
    tracks = {key: _Track(g.model) for key, g in gpu_at.items()}
    for b in busy:
        t = tracks.get((b.node, b.gpu))
        if t is not None:
            t.occupy(Slot(b.placement, b.size), b.end)
    for a in sorted(kept.values(), key=_order_key):
        t = tracks[(a.node, a.gpu)]
        g = gpu_at[(a.node, a.gpu)]
        slot = _slot_of(g.model, a)
        assert slot is not None
        start = t.ready(a.placement)
        t.occupy(slot, start + g.model.create_time(slot.size) + a.planned_seconds)
    states = {m: [tracks[(g.node, g.local)].state() for g in gpus] for m, gpus in groups.items()}

    new: dict[str, Assignment] = {}
    batches: list[int] = []
    for k, chunk in enumerate(formed):
        b = max_batch + 1 + k
        batches.append(b)
        for model_name, part in _split(chunk, snap.estimates, groups, states).items():
            gpus = groups[model_name]
            model = gpus[0].model
            tasks = [_task(j.job_id, snap.estimates[j.job_id], model) for j in part]
            planned, states[model_name] = _plan_group(
                tasks, model, states[model_name], snap.algorithm, b
            )
            per_gpu: dict[int, list[tuple[float, int, str, Slot, float]]] = defaultdict(list)
            for pt in planned:
                per_gpu[pt.gpu].append(
                    (pt.start, pt.slot.placement.start, pt.id, pt.slot, pt.end - pt.start)
                )
            for gi, items in per_gpu.items():
                g = gpus[gi]
                for order, (_, _, jid, slot, dur) in enumerate(sorted(items)):
                    new[jid] = Assignment(
                        job_id=jid,
                        restart=by_id[jid].restart_count,
                        node=g.node,
                        gpu=g.local,
                        model=model.name,
                        profile=model.profile_for_size(slot.size).name,
                        placement=slot.placement,
                        batch=b,
                        order=order,
                        planned_seconds=dur,
                        issued=now,
                    )

    final = _link_reuse({**kept, **new}, busy)

    # Write what changed, then release what the gate allows.
    updates: list[UpdateJob] = []
    for jid in sorted(final, key=job_sort_key):
        a = final[jid]
        job = by_id[jid]
        fields = []
        text = admin_comment_for(a)
        if job.admin_comment != text:
            fields.append(("AdminComment", text))
        if (job.required_nodes or "") != a.node:
            fields.append(("ReqNodeList", a.node))
        if fields:
            updates.append(UpdateJob(jid, tuple(fields), _plan_text(a, fields)))

    released = _gate(final, busy)
    releases = [
        Release(jid, final[jid], comment_with_token(strip_note(by_id[jid].comment), None))
        for jid in released
    ]
    actions: tuple[Action, ...] = (*holds, *notes, *updates, *releases, *learns)
    return CycleResult(
        actions=actions,
        planned=final,
        released=tuple(released),
        batches=tuple(batches),
        replanned=replanned,
        busy=len(busy) + len(released),
        waiting=waiting,
        noted=noted,
        makespan=_makespan(final, busy, gpu_at),
        nodes=seen_nodes,
    )


def _order_key(a: Assignment) -> tuple[int, int, tuple[int, int, str]]:
    return (a.batch, a.order, job_sort_key(a.job_id))


def _feasible(est: Estimate | None) -> list[str]:
    """Models on which the job can run on some size."""
    if est is None:
        return []
    return [m for m, t in est.times.items() if any(math.isfinite(x) for x in t.values())]


def _problem(est: Estimate | None, groups: Mapping[str, list[_Gpu]], snap: Snapshot) -> str | None:
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


def _task(job_id: str, est: Estimate, model: GpuModel) -> Task:
    got = est.times.get(model.name, {})
    times = {}
    for s in model.planner_sizes:
        t = got.get(s, math.inf)
        times[s] = t if math.isinf(t) else max(float(t), MIN_RUNTIME)
    return Task(job_id, times)


def _min_work(est: Estimate, model: GpuModel) -> float:
    got = est.times.get(model.name, {})
    return min((s * got.get(s, math.inf) for s in model.planner_sizes), default=math.inf)


def _split(
    chunk: Sequence[JobLike],
    estimates: Mapping[str, Estimate],
    groups: Mapping[str, list[_Gpu]],
    states: Mapping[str, list[GpuState]],
) -> dict[str, list[JobLike]]:
    """Jobs of a batch per GPU model: LPT on estimated work over each model's capacity
    (its slices times the work already queued on them counted as load)."""
    names = sorted(groups)
    if len(names) == 1:
        only = names[0]
        return {only: [j for j in chunk if only in _feasible(estimates[j.job_id])]}
    load: dict[str, float] = {}
    cap: dict[str, float] = {}
    for m in names:
        model = groups[m][0].model
        cap[m] = float(len(groups[m]) * model.compute_slices)
        backlog = 0.0
        for st in states[m]:
            per_slice = [0.0] * model.memory_slices
            for slot, free in st.live.items():
                for s in range(slot.placement.start, slot.placement.end):
                    per_slice[s] = max(per_slice[s], free)
            backlog += sum(per_slice[: model.compute_slices])
        load[m] = backlog
    out: dict[str, list[JobLike]] = {}
    work = []
    for j in chunk:
        est = estimates[j.job_id]
        w = {m: _min_work(est, groups[m][0].model) for m in names}
        feasible = [m for m in names if math.isfinite(w[m])]
        if feasible:
            work.append((-min(w[m] for m in feasible), job_sort_key(j.job_id), j, w, feasible))
    for _, _, j, w, feasible in sorted(work, key=lambda x: (x[0], x[1])):
        m = min(feasible, key=lambda m: ((load[m] + w[m]) / cap[m], m))
        load[m] += w[m]
        out.setdefault(m, []).append(j)
    return {m: sorted(js, key=lambda j: job_sort_key(j.job_id)) for m, js in out.items()}


def _plan_group(
    tasks: Sequence[Task],
    model: GpuModel,
    states: Sequence[GpuState],
    algorithm: str,
    batch: int,
) -> tuple[list, list[GpuState]]:
    """Plan one batch on one model's GPUs after ``states``; the planned tasks (ids are
    job ids, gpu the model-group index) and the states after them."""
    from ..planner.concat import concat_batch
    from ..planner.far import far_schedule, time_assignment

    gpus = len(states)
    if all(not s.live for s in states):
        if algorithm.strip().lower() == "auto":
            from ..planner import Batch, get_planner

            plan = get_planner("auto")(Batch(tuple(tasks), model, gpus))
            tracks = [_Track(model) for _ in range(gpus)]
            for pt in sorted(plan.tasks, key=lambda t: t.start):
                tracks[pt.gpu].occupy(pt.slot, pt.end)
            return list(plan.tasks), [t.state() for t in tracks]
        res = far_schedule(tasks, model, gpus)
        timeline, _ = time_assignment(res.forest, tasks, res.assign, batch=batch)
        return timeline.tasks, timeline.states
    res = far_schedule(tasks, model, gpus)
    _match_gpus(res, tasks, states)
    options = [concat_batch(states, tasks, res, reverse=False, batch=batch).timeline]
    for assign in (res.assign, _mirrored(res, tasks, states)):
        trial = replace(res, assign=[list(x) for x in assign])
        options.append(
            concat_batch(states, tasks, trial, reverse=True, batch=batch, mirror=False).timeline
        )
    # reversed first: on a tie the paper's orientation wins
    best = min(options[1:] + options[:1], key=lambda tl: tl.makespan)
    return best.tasks, best.states


def _match_gpus(res, tasks: Sequence[Task], states: Sequence[GpuState]) -> None:
    """Put the batch's longest GPU schedules on the GPUs that free up first (in place)."""
    forest = res.forest
    T = len(forest.model.tree)
    G = forest.gpus
    if G < 2:
        return
    dur = [tasks[i].times[res.allocation[i]] for i in range(len(tasks))]

    def chain(v: int) -> float:
        """The longest root-to-leaf run of work below node v."""
        own = sum(dur[k] for k in res.assign[v])
        return own + max((chain(c) for c in forest.children[v]), default=0.0)

    span = [chain(i * T) for i in range(G)]
    free = [max(st.live.values(), default=0.0) for st in states]
    trees = sorted(range(G), key=lambda i: (-span[i], i))
    slots = sorted(range(G), key=lambda h: (free[h], h))
    out: list[list[int]] = [[] for _ in range(forest.nodes)]
    for i, h in zip(trees, slots):
        for v in range(T):
            out[h * T + v] = list(res.assign[i * T + v])
    res.assign = out


def _mirrored(res, tasks: Sequence[Task], states: Sequence[GpuState]) -> list[list[int]]:
    """``concat.mirror_to_fit`` GPU by GPU (the GPUs are matched already): each GPU's
    tree relabelled onto equivalent instances to fit behind that GPU's own work."""
    from ..planner.concat import mirror_to_fit, slice_free_times
    from ..planner.far import Forest

    forest = res.forest
    model = forest.model
    T, S = len(model.tree), model.compute_slices
    one = Forest.build(model, 1)
    dur = [tasks[i].times[res.allocation[i]] for i in range(len(tasks))]
    prev = slice_free_times(forest, states)
    out: list[list[int]] = []
    for g in range(forest.gpus):
        block = res.assign[g * T : (g + 1) * T]
        if any(block):
            block = mirror_to_fit(one, block, dur, prev[g * S : (g + 1) * S])
        out.extend(list(x) for x in block)
    return out


def _link_reuse(plans: Mapping[str, Assignment], busy: Sequence[_Busy]) -> dict[str, Assignment]:
    """Set keep_for / reuse_from where the next job on a job's slices of its GPU runs on
    the identical instance (same profile and placement)."""
    per_gpu: dict[tuple[str, int], list[Assignment]] = defaultdict(list)
    for a in plans.values():
        per_gpu[(a.node, a.gpu)].append(a)
    busy_on: dict[tuple[str, int], list[_Busy]] = defaultdict(list)
    for b in busy:
        busy_on[(b.node, b.gpu)].append(b)
    out = {jid: replace(a, keep_for=None, reuse_from=None) for jid, a in plans.items()}
    for key, lst in per_gpu.items():
        lst.sort(key=_order_key)
        # a busy job's instance is reused by the first held job on its slices
        for b in busy_on.get(key, []):
            nxt = next((a for a in lst if a.placement.overlaps(b.placement)), None)
            if nxt is not None and nxt.placement == b.placement and _model_slot(nxt).size == b.size:
                out[nxt.job_id] = replace(out[nxt.job_id], reuse_from=b.job_id)
        for i, a in enumerate(lst):
            nxt = next((c for c in lst[i + 1 :] if c.placement.overlaps(a.placement)), None)
            if nxt is not None and nxt.placement == a.placement and nxt.profile == a.profile:
                out[a.job_id] = replace(out[a.job_id], keep_for=nxt.job_id)
                out[nxt.job_id] = replace(out[nxt.job_id], reuse_from=a.job_id)
    return out


def _gate(plans: Mapping[str, Assignment], busy: Sequence[_Busy]) -> list[str]:
    """Held jobs free to start: no busy job and no held job ordered before them on
    their GPU overlaps their placement."""
    blocked: dict[tuple[str, int], set[int]] = defaultdict(set)
    for b in busy:
        blocked[(b.node, b.gpu)].update(range(b.placement.start, b.placement.end))
    out = []
    for a in sorted(plans.values(), key=_order_key):
        taken = blocked[(a.node, a.gpu)]
        mine = range(a.placement.start, a.placement.end)
        if not any(s in taken for s in mine):
            out.append(a.job_id)
        taken.update(mine)
    return sorted(out, key=job_sort_key)


def _makespan(
    plans: Mapping[str, Assignment], busy: Sequence[_Busy], gpu_at: Mapping[tuple[str, int], _Gpu]
) -> float:
    tracks = {key: _Track(g.model) for key, g in gpu_at.items()}
    ms = 0.0
    for b in busy:
        t = tracks.get((b.node, b.gpu))
        if t is not None:
            t.occupy(Slot(b.placement, b.size), b.end)
            ms = max(ms, b.end)
    for a in sorted(plans.values(), key=_order_key):
        g = gpu_at[(a.node, a.gpu)]
        slot = _slot_of(g.model, a)
        if slot is None:
            continue
        t = tracks[(a.node, a.gpu)]
        end = t.ready(a.placement) + g.model.create_time(slot.size) + a.planned_seconds
        t.occupy(slot, end)
        ms = max(ms, end)
    return ms


def _plan_text(a: Assignment, fields: Sequence[tuple[str, str]]) -> str:
    if not any(k == "AdminComment" for k, _ in fields):
        return f"node list set to {a.node}"
    text = (
        f"planned on {a.node} gpu {a.gpu} {a.profile}@{a.placement.start} "
        f"(batch {a.batch}, order {a.order}, {a.planned_seconds:.0f} s)"
    )
    if a.reuse_from:
        text += f", reuses job {a.reuse_from}'s instance"
    if a.keep_for:
        text += f", keeps its instance for job {a.keep_for}"
    return text


def _submitted(job: JobLike, now: float) -> float:
    return job.submit_time if job.submit_time is not None else now
