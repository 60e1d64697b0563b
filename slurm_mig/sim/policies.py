"""Placement policies for the simulator, their registry, and helpers other policies
share.

Registry: ``get_policy(name, **options)`` looks ``name`` up in ``POLICIES`` (name ->
module) and calls that module's ``make_policy(name, **options)``; modules are
imported only when asked for, so a policy of another owner costs nothing until used.
``register_policy(name, factory)`` adds one at run time (tests, experiments).

Built in:
  baseline  First GPU (by index) with room for the job's requested size (else the
            smallest it can run on); reuses an idle instance of that size there, else
            creates one at the first legal free placement, destroying idle instances
            in its way. Jobs go in arrival order, any that fits starts (backfilling).
            PCIe-unaware: the PCIe paper's baseline (Section 5.1). Option size=N
            gives every job that can run there N slices (size=7: MISO's "full").
  far       Batches: when the previous batch has started in full, plan every
            pending job with FAR on the whole cluster and run the plan's instances
            in its order as their slices free up. Options: moldable (default true:
            FAR chooses each job's size; false: the requested size only), planner
            (a planner name, default far), max_batch (cap on jobs per batch).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterator
from importlib import import_module

from ..geometry import GpuModel, Slot
from .api import ClusterView, Command, Destroy, GpuView, Policy, SimJob, Start
from .cluster import default_size, geometry_for, runnable_sizes, slot_mask

__all__ = [
    "POLICIES",
    "Baseline",
    "FarBatches",
    "UnknownPolicy",
    "get_policy",
    "policy_names",
    "register_policy",
    "start_commands",
    "first_free_slot",
    "slot_mask",
    "default_size",
    "runnable_sizes",
]


class UnknownPolicy(ValueError):
    """A policy name or option the registry does not know; lists the valid ones."""


# name -> module exposing make_policy(name, **options) -> Policy
POLICIES: dict[str, str] = {
    "baseline": __name__,
    "far": __name__,
    # owner P (PCIe model and gate)
    "pcie-aware": "slurm_mig.planner.gate",
    "far-pcie": "slurm_mig.planner.far_pcie",
    # owner O (online placement, MIGM partition manager)
    "first-fit": "slurm_mig.planner.online",
    "frag-aware": "slurm_mig.planner.online",
    "ff+lb": "slurm_mig.planner.online",
    "ff+lb+dp": "slurm_mig.planner.online",
    "ff+lb+dp+mig": "slurm_mig.planner.online",
    "migm-a": "slurm_mig.planner.partition_manager",
    "migm-b": "slurm_mig.planner.partition_manager",
}
_FACTORIES: dict[str, Callable[..., Policy]] = {}


def register_policy(name: str, factory: Callable[..., Policy]) -> None:
    """Make ``get_policy(name, **options)`` return ``factory(**options)``."""
    _FACTORIES[name.strip().lower()] = factory


def policy_names() -> list[str]:
    return sorted(set(POLICIES) | set(_FACTORIES))


def get_policy(name: str, **options) -> Policy:
    """A fresh policy for ``name``; UnknownPolicy lists the known names or options."""
    key = name.strip().lower()
    if key in _FACTORIES:
        factory: Callable[..., Policy] = _FACTORIES[key]
    elif key in POLICIES:
        module_name = POLICIES[key]
        try:
            module = import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and module_name.startswith(exc.name):
                raise UnknownPolicy(
                    f"policy {name!r} is not available: its module {module_name} is not "
                    f"installed; available now: {', '.join(_available())}"
                ) from None
            raise
        make = getattr(module, "make_policy", None)
        if make is None:
            raise UnknownPolicy(f"policy {name!r}: {module_name} has no make_policy()")

        def factory(**kw):
            return make(key, **kw)

    else:
        raise UnknownPolicy(f"unknown policy {name!r}; known policies: {', '.join(policy_names())}")
    try:
        return factory(**options)
    except TypeError as exc:
        if "argument" not in str(exc):
            raise
        raise UnknownPolicy(f"policy {name!r}: {exc}") from None


def _available() -> list[str]:
    out = []
    for n in policy_names():
        mod = POLICIES.get(n)
        if mod is None or mod == __name__:
            out.append(n)
            continue
        try:
            import_module(mod)
        except ModuleNotFoundError:
            continue
        out.append(n)
    return out


def make_policy(name: str, **options) -> Policy:
    if name == "baseline":
        return Baseline(**options)
    if name == "far":
        return FarBatches(**options)
    raise UnknownPolicy(f"{__name__} has no policy {name!r}")


# ---------------------------------------------------------------------------
# Helpers for every policy


def first_free_slot(model: GpuModel, size: int, blocked_mask: int) -> Slot | None:
    """The first legal slot of ``size`` (lowest placement) avoiding ``blocked_mask``."""
    return geometry_for(model).first_free(size, blocked_mask)


def start_commands(gpu: GpuView, job: str, slot: Slot, model: GpuModel) -> list[Command]:
    """Commands that start ``job`` at ``slot``: destroy the idle instances in its way
    (not an identical idle one, which is reused), then Start. The slot's slices must
    be free of busy instances."""
    geom = geometry_for(model)
    order = geom.index_of(slot)
    if order is None:
        raise ValueError(f"{slot!r} is not a legal instance of a planner size on {model.name}")
    mask = geom.masks[order]
    if mask & gpu.busy_mask:
        raise ValueError(f"{slot} overlaps a busy instance on gpu {gpu.index}")
    out: list[Command] = []
    if mask & gpu.held_mask:
        for inst in gpu.instances:
            if (
                inst.job is None
                and geom.masks[geom.index_of(inst.slot)] & mask
                and inst.slot != slot
            ):
                out.append(Destroy(gpu.index, inst.slot))
    out.append(Start(job, gpu.index, slot))
    return out


def place_exact(gpu: GpuView, size: int, model: GpuModel) -> Slot | None:
    """Where a job of ``size`` goes on ``gpu``: an idle instance of that size, else
    the first legal placement free of every instance, else the first free of busy
    ones (idle instances there get destroyed). None if busy instances leave no room."""
    for inst in gpu.instances:
        if inst.job is None and inst.slot.size == size:
            return inst.slot
    geom = geometry_for(model)
    return geom.first_free(size, gpu.held_mask) or geom.first_free(size, gpu.busy_mask)


def _lowest_bit(x: int) -> int:
    return (x & -x).bit_length() - 1


# ---------------------------------------------------------------------------
# baseline


class Baseline:
    """First GPU with room, in arrival order with backfilling; PCIe-unaware."""

    name = "baseline"

    def __init__(self, size: int | None = None) -> None:
        self.size = None if size is None else int(size)  # one size for every job
        self._queues: dict[int, deque[tuple[int, SimJob]]] = {}
        self._room: dict[int, int] = {}  # size -> bitset of GPUs with room for it
        self._seq = 0
        self._queued = 0
        self._stale: set[int] = set()  # GPUs changed since their room was last read
        self._model: GpuModel | None = None

    def _refresh(self, gpu: GpuView) -> None:
        fits = self._fit[gpu.busy_mask]
        bit = 1 << gpu.index
        for s in self._room:
            if s in fits:
                self._room[s] |= bit
            else:
                self._room[s] &= ~bit

    def decide(self, view: ClusterView) -> Iterator[Command]:
        model = view.model
        if self._model is None:
            if self.size is not None and self.size not in model.planner_sizes:
                raise UnknownPolicy(
                    f"policy 'baseline': size {self.size} is not an instance size of "
                    f"{model.name} ({', '.join(map(str, model.planner_sizes))})"
                )
            self._model = model
            self._fit = geometry_for(model).fit_sizes
            self._room = dict.fromkeys(model.planner_sizes, 0)
            self._queues = {s: deque() for s in model.planner_sizes}
        gpus = view.gpus
        self._stale.update(view.changed)
        for job in view.arrived:
            self._seq += 1
            size = self.size
            if size is None or size not in runnable_sizes(job, model):
                size = default_size(job, model)
            self._queues[size].append((self._seq, job))
            self._queued += 1
        if not self._queued:
            return  # GPUs that changed are read once a job waits
        for k in self._stale:
            self._refresh(gpus[k])
        self._stale.clear()
        queues, room = self._queues, self._room
        while True:
            best = None
            for s, q in queues.items():
                if q and room[s] and (best is None or q[0][0] < queues[best][0][0]):
                    best = s
            if best is None:
                return
            _, job = queues[best].popleft()
            self._queued -= 1
            k = _lowest_bit(room[best])
            gpu = gpus[k]
            slot = place_exact(gpu, best, model)
            assert slot is not None  # room[best] says there is one
            yield from start_commands(gpu, job.id, slot, model)
            self._refresh(gpus[k])


# ---------------------------------------------------------------------------
# far: FAR batches


class FarBatches:
    """Plan pending jobs with FAR in batches and follow each plan as GPUs free up."""

    name = "far"

    def __init__(
        self, moldable: bool = True, planner: str = "far", max_batch: int | None = None
    ) -> None:
        from ..planner import get_planner

        self.moldable = bool(moldable)
        self.planner_name = planner
        self._plan = get_planner(planner)
        if max_batch is not None and int(max_batch) < 1:
            raise UnknownPolicy(f"policy 'far': max_batch {max_batch} must be at least 1")
        self.max_batch = None if max_batch is None else int(max_batch)
        self._queue: dict[int, list[tuple[str, Slot, int]]] = {}  # gpu -> planned, in order
        self._left = 0
        self.batches = 0
        self.plan_seconds = 0.0

    def _times(self, job: SimJob, model: GpuModel) -> dict[int, float]:
        ok = set(runnable_sizes(job, model))
        if not self.moldable:
            ok = {default_size(job, model)}
        return {s: (job.time(s) if s in ok else math.inf) for s in model.planner_sizes}

    def _new_batch(self, view: ClusterView) -> set[int]:
        import time

        from ..planner import Batch
        from ..workload import Task

        model = view.model
        jobs = list(view.pending.values())
        if self.max_batch is not None:
            jobs = jobs[: self.max_batch]
        tasks = tuple(Task(j.id, self._times(j, model)) for j in jobs)
        t0 = time.perf_counter()
        plan = self._plan(Batch(tasks, model, len(view.gpus), view.seed))
        self.plan_seconds += time.perf_counter() - t0
        self.batches += 1
        by_gpu: dict[int, list] = {}
        for t in plan.tasks:
            by_gpu.setdefault(t.gpu, []).append(t)
        # the most loaded planned GPU goes to the real GPU that frees first
        load = sorted(by_gpu, key=lambda g: (-max(t.end for t in by_gpu[g]), g))
        free = sorted(range(len(view.gpus)), key=lambda k: (view.gpus[k].free_at, k))
        touched = set()
        for pg, real in zip(load, free):
            planned = sorted(by_gpu[pg], key=lambda t: (t.start, t.slot))
            q = self._queue.setdefault(real, [])
            q.extend((t.id, t.slot, slot_mask(model, t.slot)) for t in planned)
            touched.add(real)
        self._left += len(plan.tasks)
        return touched

    def decide(self, view: ClusterView) -> Iterator[Command]:
        todo = set(view.changed) & set(self._queue)
        if self._left == 0 and view.pending:
            todo |= self._new_batch(view)
        model = view.model
        for k in sorted(todo):
            q = self._queue.get(k)
            if not q:
                continue
            gpu = view.gpus[k]
            busy = gpu.busy_mask
            blocked = 0
            kept = []
            starts = []
            for entry in q:
                _, slot, mask = entry
                if mask & (busy | blocked):
                    blocked |= mask
                    kept.append(entry)
                else:
                    busy |= mask
                    starts.append(entry)
            for job, slot, _ in starts:
                yield from start_commands(view.gpus[k], job, slot, model)
                self._left -= 1
            if kept:
                self._queue[k] = kept
            else:
                del self._queue[k]
