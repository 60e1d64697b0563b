"""One step from the cluster's snapshot to decisions, for every policy: the code the
simulator and the planner daemon share, so that a simulated policy predicts the daemon.

Online policies decide directly (``policy.decide(snapshot)``). Batch planners are
driven here:

1. *Re-plan?* Standing plans stay unless something happened since the oldest of them
   was made (``snapshot.events``, e.g. a job that ended early or late, a node lost); then
   the waiting jobs planned on the GPUs those events name are planned again (all of them
   when an event names no GPU), at most once per batch window.
2. *Batches.* Waiting jobs without a plan, in arrival order, form batches of
   ``BatchSettings.size`` (0: all of them): a full batch at once, the last, smaller one
   once its oldest job has waited ``window`` seconds, or, with ``eager``, as soon as no
   standing plan is left waiting to start.
3. *Plan.* Each batch is split across GPU models (LPT on work over each model's slices
   and backlog) and planned with ``policy.plan`` onto the GPUs as they will be once the
   running jobs and the standing plans are through (the projection).
4. *Gate.* A planned job starts now when no job holds or is bound to an overlapping
   instance and no job ordered before it on its GPU (batch, then order) overlaps it; so
   two jobs released in one step never overlap.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType

from ..geometry import Slot, mask_tables, slot_mask
from ..plan import Plan
from ..workload import Task
from .batch import Batch
from .decisions import Decisions, Destroy, Op, Place
from .gcpause import paused_gc
from .registry import Policy
from .snapshot import INF, ClusterSnapshot, Gpu, Instance, Job, Planned, runnable_sizes

__all__ = [
    "BatchSettings",
    "gate",
    "project",
    "projected_end",
    "step",
    "step_groups",
    "task_of",
]

MIN_RUNTIME = 1e-3  # a planned runtime is never shorter (the planner needs > 0)


@dataclass(frozen=True)
class BatchSettings:
    """How batches form and run (module doc). ``moldable=False`` runs every job on its
    requested size (else the smallest it runs on) only. The first batch formed in a
    step is numbered ``snapshot.next_batch``."""

    window: float = 30.0
    size: int = 0
    eager: bool = False
    moldable: bool = True


def task_of(job: Job, snap: ClusterSnapshot, moldable: bool = True) -> Task:
    """The planner's task for a job on the snapshot's model: seconds per size, inf
    where it cannot run (no time, too little memory, or not its size when not moldable)."""
    model = snap.model
    ok = set(runnable_sizes(job, model))
    if not moldable:
        size = job.size if job.size in ok else min(ok, default=None)
        ok = {size} if size is not None else set()
    times = {s: (max(job.time(s), MIN_RUNTIME) if s in ok else INF) for s in model.planner_sizes}
    return Task(
        job.id, times, job.memory or None, {"alpha": job.alpha, "pcie_demand": job.pcie_demand}
    )


# ---------------------------------------------------------------------------
# The projection: the GPUs once running jobs and standing plans are through


class _Track:
    """Per memory slice of one GPU: when it is released and by which instance."""

    __slots__ = ("end", "owner", "ready", "job")

    def __init__(self, slices: int) -> None:
        self.end = [-INF] * slices
        self.owner: list[Slot | None] = [None] * slices
        self.ready: dict[Slot, float] = {}
        self.job: dict[Slot, str] = {}

    def free(self, slot: Slot) -> float:
        p = slot.placement
        return max(self.end[p.start : p.end], default=-INF)

    def occupy(self, slot: Slot, job: str, ready: float, end: float) -> None:
        p = slot.placement
        for s in range(p.start, p.end):
            if end >= self.end[s]:
                self.end[s] = end
                self.owner[s] = slot
        self.ready[slot] = ready
        self.job[slot] = job

    def gpu(self, base: Gpu) -> Gpu:
        live: dict[Slot, float] = {}
        for s, owner in enumerate(self.owner):
            if owner is not None:
                live[owner] = max(live.get(owner, -INF), self.end[s])
        insts = [
            Instance(slot, self.job[slot], self.ready[slot], end)
            for slot, end in sorted(live.items())
        ]
        # idle instances the projection leaves untouched stay (they may be reused)
        taken = 0
        for slot in live:
            taken |= slot_mask(slot)
        insts += [i for i in base.instances if i.job is None and not slot_mask(i.slot) & taken]
        insts.sort(key=lambda i: (i.slot.placement.start, i.slot.size))
        return Gpu(base.index, tuple(insts), base.channel_free, 0, base.node, base.local)


def _order_key(p: Planned) -> tuple[int, int, str]:
    return (p.batch, p.order, p.job)


def projected_end(snap: ClusterSnapshot, planned: Iterable[Planned]) -> float:
    """When the last busy or planned job of `project`'s projection ends (absolute),
    without building the projected GPUs."""
    model = snap.model
    now = snap.now
    ends = [[-INF] * model.memory_slices for _ in snap.gpus]
    last = now
    for gpu, end in zip(snap.gpus, ends):
        for inst in gpu.instances:
            if inst.job is not None:
                e = inst.busy_until if inst.busy_until is not None else INF
                e = max(e, now)
                last = max(last, e)
                p = inst.slot.placement
                for s in range(p.start, p.end):
                    if e > end[s]:
                        end[s] = e
    for p in sorted(planned, key=_order_key):
        end = ends[p.gpu]
        pl = p.slot.placement
        begin = max(now, max(end[pl.start : pl.end])) + model.create_time(p.slot.size)
        e = begin + p.seconds
        last = max(last, e)
        for s in range(pl.start, pl.end):
            if e > end[s]:
                end[s] = e
    return last


def project(snap: ClusterSnapshot, planned: Iterable[Planned]) -> tuple[Gpu, ...]:
    """The GPUs as a new batch finds them: the busy instances until their jobs end,
    then the standing plans in order, each after the work on its slices, created, run
    for its planned seconds (a projection: instances of the future may overlap)."""
    model = snap.model
    now = snap.now
    tracks = [_Track(model.memory_slices) for _ in snap.gpus]
    for g, gpu in zip(tracks, snap.gpus):
        for inst in gpu.instances:
            if inst.job is not None:
                end = inst.busy_until if inst.busy_until is not None else INF
                g.occupy(inst.slot, inst.job, inst.ready_at, max(end, now))
    for p in sorted(planned, key=_order_key):
        t = tracks[p.gpu]
        begin = max(now, t.free(p.slot)) + model.create_time(p.slot.size)
        t.occupy(p.slot, p.job, begin, begin + p.seconds)
    return tuple(t.gpu(base) for t, base in zip(tracks, snap.gpus))


# ---------------------------------------------------------------------------
# The gate


def gate(snap: ClusterSnapshot, planned: Mapping[str, Planned]) -> list[Op]:
    """Standing plans free to start now (module doc, step 4): their `Place` at ``now``,
    each after the `Destroy` of the idle instances in its way (not an identical one)."""
    model = snap.model
    tables = mask_tables(model)
    blocked = [g.busy_mask for g in snap.gpus]
    gone: set[tuple[int, Slot]] = set()  # idle instances already destroyed in this step
    ops: list[Op] = []
    for p in sorted(planned.values(), key=lambda p: (p.gpu, *_order_key(p))):
        mask = tables.mask.get(p.slot) or slot_mask(p.slot)
        if mask & blocked[p.gpu]:
            blocked[p.gpu] |= mask
            continue
        blocked[p.gpu] |= mask
        gpu = snap.gpus[p.gpu]
        if mask & gpu.held_mask:
            for inst in gpu.instances:
                key = (p.gpu, inst.slot)
                if (
                    inst.job is None
                    and inst.slot != p.slot
                    and slot_mask(inst.slot) & mask
                    and key not in gone
                ):
                    gone.add(key)
                    ops.append(Destroy(p.gpu, inst.slot))
        ops.append(Place(p.job, p.gpu, p.slot, snap.now, snap.now + p.seconds, p.batch, p.order))
    return ops


# ---------------------------------------------------------------------------
# The step


def step(
    snap: ClusterSnapshot, policy: Policy, settings: BatchSettings = BatchSettings()
) -> Decisions:
    """Decisions for one snapshot of one GPU model (module doc)."""
    return step_groups([snap], [policy], settings)[0]


def step_groups(
    groups: Sequence[ClusterSnapshot],
    policies: Sequence[Policy],
    settings: BatchSettings = BatchSettings(),
) -> list[Decisions]:
    """Decisions for a cluster of several GPU models: one snapshot and one policy object
    per model (a job waiting appears in each group it can run on, with that model's
    times). Online policies are offered the jobs group by group, in order."""
    if not groups:
        return []
    with paused_gc():
        if policies[0].kind == "online":
            return _online(groups, policies)
        return _batch(groups, policies, settings)


def _online(groups: Sequence[ClusterSnapshot], policies: Sequence[Policy]) -> list[Decisions]:
    out = []
    taken: set[str] = set()
    for snap, policy in zip(groups, policies):
        if taken:
            snap = replace(
                snap,
                pending=MappingProxyType({k: v for k, v in snap.pending.items() if k not in taken}),
                arrived=None
                if snap.arrived is None
                else [j for j in snap.arrived if j.id not in taken],
            )
        got = policy.decide(snap)  # type: ignore[union-attr]
        taken.update(p.job for p in got.places)
        taken.update(got.planned)
        out.append(got)
    return out


def _replan(
    groups: Sequence[ClusterSnapshot], window: float
) -> tuple[list[dict[str, Planned]], tuple[str, ...]]:
    """Standing plans kept after step 1, per group, and why others were dropped."""
    kept = [dict(s.planned) for s in groups]
    plans = [p for k in kept for p in k.values()]
    if not plans:
        return kept, ()
    now = groups[0].now
    first = min(p.issued for p in plans)
    last = max(p.issued for p in plans)
    if now - last < window:
        return kept, ()
    why: list[str] = []
    for g, snap in enumerate(groups):
        events = [e for e in snap.events if e.at > first]
        if not events:
            continue
        why.extend(e.what for e in sorted(events, key=lambda e: (e.at, e.what)))
        if any(e.gpu is None for e in events):
            kept = [{} for _ in groups]  # not tied to a GPU: plan every waiting job again
            continue
        named = {e.gpu for e in events}
        kept[g] = {j: p for j, p in kept[g].items() if p.gpu not in named}
    return kept, tuple(dict.fromkeys(why))


def _batch(
    groups: Sequence[ClusterSnapshot], policies: Sequence[Policy], st: BatchSettings
) -> list[Decisions]:
    now = groups[0].now
    kept, why = _replan(groups, st.window)
    planned_ids = {j for k in kept for j in k}
    # waiting jobs without a plan, in arrival order (each job once, from its first group)
    waiting: dict[str, Job] = {}
    for snap in groups:
        for jid in snap.pending:  # keys first: a snapshot may make its jobs on demand
            if jid not in planned_ids and jid not in waiting:
                waiting[jid] = snap.pending[jid]
    order = sorted(waiting.values(), key=lambda j: (j.arrival, _id_key(j.id)))
    size = st.size if st.size > 0 else max(1, len(order))
    chunks = [order[i : i + size] for i in range(0, len(order), size)]
    standing = any(kept)
    formed = [
        c
        for c in chunks
        if (st.size > 0 and len(c) == size)
        or why
        or now - c[0].arrival >= st.window
        or (st.eager and not standing)
    ]
    new: list[dict[str, Planned]] = [{} for _ in groups]
    plans: list[list[Plan]] = [[] for _ in groups]
    if formed:
        # the projection is built only when a batch is to be planned onto it
        starts = [_projected(snap, k.values()) for snap, k in zip(groups, kept)]
        first_number = max(s.next_batch for s in groups)
        for n, chunk in enumerate(formed):
            number = first_number + n
            for g, jobs in _split(chunk, groups, starts).items():
                snap = groups[g]
                start = replace(snap, gpus=starts[g], planned={})
                tasks = tuple(task_of(snap.pending[j.id], snap, st.moldable) for j in jobs)
                batch = Batch(tasks, snap.model, len(snap.gpus), snap.seed, start, number)
                plan = policies[g].plan(batch)  # type: ignore[union-attr]
                plans[g].append(plan)
                fresh = _planned_from(plan, now, number)
                new[g].update(fresh)
                if n + 1 < len(formed):
                    starts[g] = project(replace(snap, gpus=starts[g], planned={}), fresh.values())
    # a partial batch forms once its oldest job has waited the window: ask to be called then
    left_out = [j.arrival for c in chunks if c not in formed for j in c[:1]]
    wake = min(left_out) + st.window if left_out and math.isfinite(st.window) else None
    if wake is not None and wake <= now:
        wake = None
    out = []
    for g, snap in enumerate(groups):
        standing_g = {**kept[g], **new[g]}
        ops = gate(snap, standing_g)
        released = {op.job for op in ops if type(op) is Place}
        left = {j: p for j, p in standing_g.items() if j not in released}
        stats = {
            "batches": len(formed),
            "replanned": list(why),
            "waiting": len(order) - sum(len(c) for c in formed),
        }
        out.append(
            Decisions(
                tuple(ops),
                MappingProxyType(left),
                wake_at=wake,
                plan=plans[g][-1] if plans[g] else None,
                stats=stats,
            )
        )
    return out


def _projected(snap: ClusterSnapshot, planned: Iterable[Planned]) -> Sequence[Gpu]:
    """`project`, or the snapshot's own GPUs when there is nothing to project."""
    planned = list(planned)
    if not planned and not any(g.busy_mask for g in snap.gpus):
        return snap.gpus
    return project(snap, planned)


def _planned_from(plan: Plan, now: float, number: int) -> dict[str, Planned]:
    per_gpu: dict[int, list] = defaultdict(list)
    for t in plan.tasks:
        if not t.running:
            per_gpu[t.gpu].append(t)
    out = {}
    for g, items in per_gpu.items():
        items.sort(key=lambda t: (t.start, t.slot.placement.start, t.id))
        for k, t in enumerate(items):
            out[t.id] = Planned(t.id, g, t.slot, number, k, t.end - t.start, now)
    return out


def _split(
    chunk: Sequence[Job], groups: Sequence[ClusterSnapshot], starts: Sequence[Sequence[Gpu]]
) -> dict[int, list[Job]]:
    """Jobs of a batch per group: LPT on least work over each group's slices, counting
    the work already projected there as load."""
    if len(groups) == 1:  # its waiting jobs run on its model (the executor checked)
        return {0: list(chunk)}
    load, cap = [], []
    for snap, gpus in zip(groups, starts):
        m = snap.model
        cap.append(float(len(gpus) * m.compute_slices))
        backlog = 0.0
        for gpu in gpus:
            per = [max(0.0, x - snap.now) for x in gpu.slice_free_at(m.memory_slices)]
            backlog += sum(per[: m.compute_slices])
        load.append(backlog)
    work = []
    for j in chunk:
        w = []
        for snap in groups:
            job = snap.pending.get(j.id)
            sizes = runnable_sizes(job, snap.model) if job is not None else ()
            w.append(min((s * job.time(s) for s in sizes), default=INF) if job else INF)
        feasible = [g for g in range(len(groups)) if math.isfinite(w[g])]
        if feasible:
            work.append((-min(w[g] for g in feasible), _id_key(j.id), j, w, feasible))
    out: dict[int, list[Job]] = {}
    for _, _, j, w, feasible in sorted(work, key=lambda x: (x[0], x[1])):
        g = min(feasible, key=lambda g: ((load[g] + w[g]) / cap[g], g))
        load[g] += w[g]
        out.setdefault(g, []).append(j)
    return out


def _id_key(job_id: str) -> tuple[int, int, str]:
    """Numeric job ids in numeric order, others after them."""
    return (0, int(job_id), "") if job_id.isdigit() else (1, 0, job_id)
