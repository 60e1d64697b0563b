"""One step from the cluster's snapshot to decisions, for every policy: the code the
simulator and the planner daemon share, so that a simulated policy predicts the daemon.

Every caller decides through `as_online(policies, settings)`: online policies decide
directly (``policy.decide(snapshot)``), offered the waiting jobs in priority order
(`Offered`); batch planners are driven here (`Driven`):

1. *Re-plan?* Standing plans stay unless something happened since the oldest of them
   was made (``snapshot.events``, e.g. a job that ended early or late, a node lost); then
   the waiting jobs planned on the GPUs those events name are planned again (all of them
   when an event names no GPU), at most once per batch window.
2. *Batches.* Waiting jobs without a plan, in Slurm's priority order (highest first,
   then arrival, then id), form batches of ``BatchSettings.size`` (0: all of them): a
   full batch at once, the last, smaller one once its oldest job has waited ``window``
   seconds, or, with ``eager``, as soon as no standing plan is left waiting to start.
   With ``reorder = k`` a formed batch is planned in runs of at most k + 1 consecutive
   jobs, one run after another, so a job is overtaken by at most k jobs of lower
   priority, except by one that fits on slices free earlier (backfill: it is planned
   once the higher ones are fixed, so it delays none of them); and a waiting job of
   higher priority than standing plans drops those plans, to plan them after it.
3. *Plan.* Each batch (or run) is split across GPU models (LPT on work over each
   model's slices and backlog) and planned with ``policy.plan`` onto the GPUs as they
   will be once the running jobs and the standing plans are through (the projection).
4. *Gate.* A planned job starts now when no job holds or is bound to an overlapping
   instance and no job ordered before it on its GPU (batch, then order) overlaps it; so
   two jobs released in one step never overlap.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any, Protocol

from ..geometry import Slot, mask_tables
from ..jobids import job_sort_key
from ..plan import Plan
from .batch import Batch
from .decisions import Decisions, Place
from .gcpause import paused_gc
from .projection import _extend, _projected, project, projected_end
from .registry import BatchPlanner, Policy, UnknownPolicy
from .release import gate
from .snapshot import INF, ClusterSnapshot, Gpu, Job, Planned, runnable_sizes

__all__ = [
    "DRIVER_OPTIONS",
    "driver_settings",
    "BatchSettings",
    "Deciding",
    "Driven",
    "Offered",
    "as_online",
    "gate",
    "priority_key",
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
    requested size (else the smallest it runs on) only. ``reorder``: how many jobs of
    lower priority may overtake a job in a batch (None: unbounded, 0: strict priority
    order; module doc). The first batch (or run) formed in a step is numbered
    ``snapshot.next_batch``."""

    window: float = 30.0
    size: int = 0
    eager: bool = False
    moldable: bool = True
    reorder: int | None = None  # jobs a batch may reorder (None: unbounded; 0: strict)

    def __post_init__(self) -> None:
        if self.reorder is not None and (
            isinstance(self.reorder, bool) or not isinstance(self.reorder, int) or self.reorder < 0
        ):
            raise ValueError(
                f"reorder {self.reorder!r} must be a whole number >= 0 (or None: unbounded)"
            )


# The driver's own options, as a policy's options in the simulator and its tests.
DRIVER_OPTIONS = ("window", "eager", "max_batch", "moldable", "reorder")


def driver_settings(
    name: str, policy: Policy, base: BatchSettings, options: Mapping[str, Any]
) -> BatchSettings:
    """``base`` changed by the driver's ``options`` (`DRIVER_OPTIONS`) for the policy
    ``name``; UnknownPolicy names a bad value, or an option given to a policy that
    decides for itself (an online one, which the driver does not drive)."""
    if not options:
        return base
    if policy.kind == "online":
        raise UnknownPolicy(
            f"policy {name!r}: {', '.join(options)}: an option of the batch driver; "
            f"{name} is an online policy and takes only its own options"
        )
    window = float(options.get("window", base.window))
    if not window >= 0:
        raise UnknownPolicy(f"policy {name!r}: window {window} must be seconds >= 0")
    size = options.get("max_batch")
    if size is not None and int(size) < 1:
        raise UnknownPolicy(f"policy {name!r}: max_batch {size} must be at least 1")
    reorder = options.get("reorder", base.reorder)
    if reorder is not None and (
        isinstance(reorder, bool) or not isinstance(reorder, int) or reorder < 0
    ):
        raise UnknownPolicy(
            f"policy {name!r}: reorder {reorder!r} must be a whole number >= 0, or none"
        )
    return BatchSettings(
        window=window,
        size=base.size if size is None else int(size),
        eager=bool(options.get("eager", base.eager)),
        moldable=bool(options.get("moldable", base.moldable)),
        reorder=reorder,
    )


def task_of(job: Job, snap: ClusterSnapshot, moldable: bool = True, only: int | None = None) -> Job:
    """The planner's task for a job on the snapshot's model: seconds per size, inf
    where it cannot run (no time, too little memory, not its size when not moldable, or
    not ``only`` when given and runnable)."""
    model = snap.model
    ok = set(runnable_sizes(job, model))
    if not moldable:
        size = job.size if job.size in ok else min(ok, default=None)
        ok = {size} if size is not None else set()
    if only is not None and only in ok:
        ok = {only}
    times = {s: (max(job.time(s), MIN_RUNTIME) if s in ok else INF) for s in model.planner_sizes}
    return replace(job, times=times)


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
    return as_online(policies, settings).decide_groups(groups)


class Deciding(Protocol):
    """What every caller of a policy uses (`as_online` makes one of any policies): the
    decisions for one snapshot, or for one snapshot per GPU model of a cluster."""

    name: str

    def decide(self, snapshot: ClusterSnapshot) -> Decisions: ...

    def decide_groups(self, groups: Sequence[ClusterSnapshot]) -> list[Decisions]: ...


def _list_scheduled(policy: Policy) -> bool:
    """Whether ``policy``'s registry entry lets the driver list-schedule it."""
    from .registry import policy_info

    try:
        return policy_info(policy.name).list_scheduled
    except UnknownPolicy:  # a policy object built outside the registry
        return False


def as_online(policies: Sequence[Policy], settings: BatchSettings = BatchSettings()) -> Deciding:
    """The policies of a cluster, one per GPU model, behind one `decide`: online ones
    offered the waiting jobs (`Offered`), batch planners driven here (`Driven`, with
    ``settings``); the one place that tells the two kinds apart."""
    if all(p.kind == "online" for p in policies):
        return Offered(policies)
    return Driven(policies, settings)  # type: ignore[arg-type]


class Offered:
    """Online policies, one per GPU model: each decides on its group's snapshot, its
    waiting jobs in priority order, less the jobs an earlier group placed or planned."""

    def __init__(self, policies: Sequence[Policy]) -> None:
        self.policies = list(policies)
        self.name = self.policies[0].name

    def decide(self, snap: ClusterSnapshot) -> Decisions:
        return self.decide_groups([snap])[0]

    def decide_groups(self, groups: Sequence[ClusterSnapshot]) -> list[Decisions]:
        with paused_gc():
            out = _online(groups, self.policies)
        # placed now: even a batch the policy had driven here is the executor's to number
        return [replace(d, numbered=False) if d.numbered else d for d in out]


class Driven:
    """Batch planners, one per GPU model, as an online policy: each call forms and plans
    batches and gates their releases (module doc); its places number their batches."""

    def __init__(self, policies: Sequence[BatchPlanner], settings: BatchSettings) -> None:
        self.policies = list(policies)
        self.name = self.policies[0].name
        self.settings = settings

    def decide(self, snap: ClusterSnapshot) -> Decisions:
        return self.decide_groups([snap])[0]

    def decide_groups(self, groups: Sequence[ClusterSnapshot]) -> list[Decisions]:
        with paused_gc():
            out = _batch(groups, self.policies, self.settings)
        return [replace(d, numbered=True) for d in out]


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
        got = policy.decide(by_priority(snap))  # type: ignore[union-attr]
        taken.update(p.job for p in got.places)
        taken.update(got.planned)
        out.append(got)
    return out


def priority_key(job: Job) -> tuple[float, float, tuple[int, int, str]]:
    """The order jobs are planned in: Slurm's priority (highest first), then arrival,
    then id (with equal priorities: arrival order, as before priorities were read)."""
    return (-job.priority, job.arrival, job_sort_key(job.id))


def by_priority(snap: ClusterSnapshot) -> ClusterSnapshot:
    """The snapshot with its waiting jobs (and new arrivals) in `priority_key` order, for
    online policies that take them in mapping order; itself when all priorities are equal."""
    pending = snap.pending
    values = iter(pending.values())
    first = next(values, None)
    if first is None or all(j.priority == first.priority for j in values):
        return snap
    ordered = sorted(pending.values(), key=priority_key)
    return replace(
        snap,
        pending=MappingProxyType({j.id: j for j in ordered}),
        arrived=None if snap.arrived is None else sorted(snap.arrived, key=priority_key),
    )


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
    # waiting jobs without a plan (each job once, from its first group)
    waiting: dict[str, Job] = {}
    for snap in groups:
        for jid in snap.pending:  # keys first: a snapshot may make its jobs on demand
            if jid not in planned_ids and jid not in waiting:
                waiting[jid] = snap.pending[jid]
    order = sorted(waiting.values(), key=priority_key)
    if st.reorder is not None and order:
        kept, bumped = _yield_to(order[0], groups, kept)
        if bumped:
            order = sorted([*order, *bumped], key=priority_key)
            top = order[0]
            why = (
                *why,
                f"job {top.id} (priority {top.priority:g}) goes before planned jobs "
                "of lower priority",
            )
    size = st.size if st.size > 0 else max(1, len(order))
    chunks = [order[i : i + size] for i in range(0, len(order), size)]
    standing = any(kept)
    ready = [
        (st.size > 0 and len(c) == size)
        or bool(why)
        or now - min(j.arrival for j in c) >= st.window
        or (st.eager and not standing)
        for c in chunks
    ]
    formed = [c for c, ok in zip(chunks, ready) if ok]
    runs = _Runs(groups, policies, st, kept)
    if formed:
        if st.reorder is None:
            for n, chunk in enumerate(formed):
                runs.plan(chunk, last=n + 1 == len(formed))
        else:
            cut = _runs([j for c in formed for j in c], st.reorder)
            if len(cut) > 1:
                runs.allot(formed)
            for n, run in enumerate(cut):
                runs.plan(run, last=n + 1 == len(cut))
    new, plans = runs.new, runs.plans
    # a partial batch forms once its oldest job has waited the window: ask to be called then
    left_out = [min(j.arrival for j in c) for c, ok in zip(chunks, ready) if not ok]
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
            "batches": runs.count,
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


class _Runs:
    """Plans batches (or, with ``reorder``, runs of a batch) one after another, each onto
    the projection of the GPUs once the standing plans and the earlier ones are through.

    With ``reorder``, the policy first plans the whole batch once (`allot`) to choose
    each job's size and GPU model, as it would unbounded; each run is then planned at
    those sizes, a run of one job by list scheduling (the legal slot of its size that
    starts first on the projection), which is what the policy would do with one job of
    one size, at a fraction of the cost."""

    def __init__(
        self,
        groups: Sequence[ClusterSnapshot],
        policies: Sequence[Policy],
        st: BatchSettings,
        kept: Sequence[Mapping[str, Planned]],
    ) -> None:
        self.groups, self.policies, self.st = groups, policies, st
        self.now = groups[0].now
        self.number = max(s.next_batch for s in groups)
        self.count = 0
        self.kept = kept
        self.new: list[dict[str, Planned]] = [{} for _ in groups]
        self.plans: list[list[Plan]] = [[] for _ in groups]
        self._starts: list[list[Gpu]] | None = None
        self._unprojected: list[list[Planned]] = [[] for _ in groups]
        self._ends: list[dict[int, list[float]]] = [{} for _ in groups]
        self.size: dict[str, int] = {}
        self.group: dict[str, int] = {}

    def starts(self, g: int) -> list[Gpu]:
        """Group ``g``'s GPUs projected through every plan so far."""
        if self._starts is None:  # built only when a batch is to be planned onto it
            self._starts = [
                list(_projected(snap, k.values())) for snap, k in zip(self.groups, self.kept)
            ]
        late = self._unprojected[g]
        if late:
            self._starts[g] = _extend(self.groups[g], self._starts[g], late)
            self._unprojected[g] = []
        return self._starts[g]

    def allot(self, formed: Sequence[Sequence[Job]]) -> None:
        """Each job's size and group as the policy plans the batches unbounded."""
        saved = None
        for n, chunk in enumerate(formed):
            for g, jobs in self._split(chunk).items():
                snap = self.groups[g]
                # sizes only: a list-scheduled policy chooses them on idle GPUs, one pass
                # instead of its several onto busy ones (same quality, measured)
                start = (
                    None
                    if _list_scheduled(self.policies[g])
                    else replace(snap, gpus=tuple(self.starts(g)), planned={})
                )
                tasks = tuple(task_of(snap.pending[j.id], snap, self.st.moldable) for j in jobs)
                batch = Batch(tasks, snap.model, len(snap.gpus), snap.seed, start, self.number)
                plan = self.policies[g].plan(batch)  # type: ignore[union-attr]
                for t in plan.tasks:
                    if not t.running:
                        self.size[t.id] = t.slot.size
                        self.group[t.id] = g
                if start is not None and n + 1 < len(formed):
                    if saved is None:
                        saved = [list(self.starts(k)) for k in range(len(self.groups))]
                    fresh = _planned_from(plan, self.now, self.number)
                    self._starts[g] = _extend(snap, self.starts(g), fresh.values())  # type: ignore[index]
        if saved is not None:
            self._starts = saved

    def plan(self, chunk: Sequence[Job], last: bool) -> None:
        """Plan one batch (or run) as batch number ``self.number``; the next gets the next."""
        number = self.number
        self.number += 1
        self.count += 1
        for g, jobs in self._split(chunk).items():
            snap = self.groups[g]
            if _list_scheduled(self.policies[g]) and all(j.id in self.size for j in jobs):
                self._list_schedule(g, jobs, number)
                continue
            start = replace(snap, gpus=tuple(self.starts(g)), planned={})
            tasks = tuple(
                task_of(snap.pending[j.id], snap, self.st.moldable, self.size.get(j.id))
                for j in jobs
            )
            batch = Batch(tasks, snap.model, len(snap.gpus), snap.seed, start, number)
            plan = self.policies[g].plan(batch)  # type: ignore[union-attr]
            self.plans[g].append(plan)
            fresh = _planned_from(plan, self.now, number)
            self.new[g].update(fresh)
            if not last:
                self._unprojected[g].extend(fresh.values())
                for p in fresh.values():
                    self._ends[g].pop(p.gpu, None)

    def _split(self, chunk: Sequence[Job]) -> dict[int, list[Job]]:
        if len(self.groups) == 1:
            return {0: list(chunk)}
        if self.group and all(j.id in self.group for j in chunk):
            out: dict[int, list[Job]] = {}
            for j in chunk:
                out.setdefault(self.group[j.id], []).append(j)
            return out
        return _split(chunk, self.groups, [self.starts(g) for g in range(len(self.groups))])

    def _list_schedule(self, g: int, jobs: Sequence[Job], number: int) -> None:
        """A run's jobs at their allotted sizes, longest first (LPT), each onto the legal
        slot that starts first (then the lowest GPU and placement), after the work
        planned on its slices."""
        snap = self.groups[g]
        model = snap.model
        tables = mask_tables(model)
        ends = self._ends[g]
        orders: dict[int, int] = {}
        timed = [(max(j.time(self.size[j.id]), MIN_RUNTIME), j) for j in jobs]
        timed.sort(key=lambda x: (-x[0], priority_key(x[1])))
        for seconds, job in timed:
            size = self.size[job.id]
            best: tuple[float, int, Slot] | None = None
            for k in range(len(snap.gpus)):
                end = ends.get(k)
                if end is None:
                    end = ends[k] = self.starts(g)[k].slice_free_at(model.memory_slices)
                for slot in tables.by_size[size]:
                    p = slot.placement
                    at = max(end[p.start : p.end])
                    if best is None or at < best[0]:
                        best = (at, k, slot)
            assert best is not None  # every model has a slot of each planner size
            at, k, slot = best
            stop = max(self.now, at) + model.create_time(size) + seconds
            end = ends[k]
            p = slot.placement
            for i in range(p.start, p.end):
                end[i] = max(end[i], stop)
            order = orders[k] = orders.get(k, -1) + 1
            planned = Planned(job.id, k, slot, number, order, seconds, self.now)
            self.new[g][job.id] = planned
            self._unprojected[g].append(planned)


def _runs(order: Sequence[Job], k: int) -> list[Sequence[Job]]:
    """``order`` (by `priority_key`) cut into runs planned one after another: a run
    holds the jobs of its first job's priority and at most ``k`` more, so no job is
    overtaken by more than ``k`` jobs of lower priority (equal ones may trade places)."""
    out: list[Sequence[Job]] = []
    i, n = 0, len(order)
    while i < n:
        top = order[i].priority
        j = i + 1
        while j < n and order[j].priority == top:
            j += 1
        j = min(n, j + k)
        out.append(order[i:j])
        i = j
    return out


def _yield_to(
    top: Job, groups: Sequence[ClusterSnapshot], kept: list[dict[str, Planned]]
) -> tuple[list[dict[str, Planned]], list[Job]]:
    """Standing plans of jobs of lower priority than ``top`` (the first waiting job)
    dropped, so that they are planned again after it; the jobs whose plan was dropped."""
    bumped: dict[str, Job] = {}
    out = []
    for snap, plans in zip(groups, kept):
        stay = {}
        for jid, p in plans.items():
            job = snap.pending.get(jid)
            if job is not None and job.priority < top.priority:
                bumped[jid] = job
            else:
                stay[jid] = p
        out.append(stay if len(stay) < len(plans) else plans)
    return out, list(bumped.values())


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
            work.append((-min(w[g] for g in feasible), job_sort_key(j.id), j, w, feasible))
    out: dict[int, list[Job]] = {}
    for _, _, j, w, feasible in sorted(work, key=lambda x: (x[0], x[1])):
        g = min(feasible, key=lambda g: ((load[g] + w[g]) / cap[g], g))
        load[g] += w[g]
        out.setdefault(g, []).append(j)
    return out
