"""Fragmentation cost of a GPU's free slices and where the fragmentation-aware policy
places a job (reuse, dynamic partitioning), or a job of several slices on a static
layout (`choose_gang`: N idle instances of one node, as Slurm's ``--gres=gpu:N``)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache

from ..geometry import (
    GpuModel,
    Slot,
    compute_mask,
    get_model,
    mask_tables,
    planner_slots,
    slot_mask,
)
from .snapshot import Gpu, Instance, Job

__all__ = [
    "DEFAULT_THRESHOLD",
    "gpu_running",
    "Choice",
    "choose_gang",
    "choose_placement",
    "fragmentation_cost",
    "is_lazy",
    "mask_cost",
    "profile_terms",
    "task_sizes",
]

DEFAULT_THRESHOLD = 0.4  # Sec. V-A3
_EPS = 1e-12


def gpu_running(
    index: int, slots: Iterable[Slot], idle: Iterable[Slot] = (), ends: Iterable[float] = ()
) -> Gpu:
    """A GPU running one (unnamed) job on each of ``slots``, with ``idle`` instances
    (for tests and reports)."""
    ends = list(ends)
    busy = [
        Instance(s, f"job{i}", busy_until=ends[i] if i < len(ends) else math.inf)
        for i, s in enumerate(slots)
    ]
    insts = sorted([*busy, *(Instance(s) for s in idle)], key=lambda i: i.slot.placement.start)
    return Gpu(index, tuple(insts))


_mem_mask = slot_mask
_comp_mask = compute_mask


# ---------------------------------------------------------------------------
# Eq. 3-5


@cache
def _profile_masks(model_name: str) -> tuple[tuple[int, int, tuple[tuple[int, int], ...]], ...]:
    """Per profile of the model: (compute slices, memory slices, ((memory mask,
    compute mask) of each legal placement))."""
    model = get_model(model_name)
    out = []
    for p in model.profiles:
        pl = tuple(
            (((1 << p.memory_slices) - 1) << s, ((1 << p.compute_slices) - 1) << s)
            for s in p.starts
        )
        out.append((p.compute_slices, p.memory_slices, pl))
    return tuple(out)


def profile_terms(mem: int, comp: int, model: GpuModel) -> list[tuple[str, int, int]]:
    """(profile, N_ideal Eq. 3, N_valid Eq. 4) with jobs on memory slices ``mem`` and
    compute slices ``comp`` (bit masks): the pieces of Eq. 5, for reports and tests."""
    c_rem = model.compute_slices - comp.bit_count()
    m_rem = model.memory_slices - mem.bit_count()
    out = []
    for p, (c, m, pls) in zip(model.profiles, _profile_masks(model.name)):
        ideal = min(c_rem // c, m_rem // m)
        valid = sum(1 for pm, pc in pls if not (pm & mem or pc & comp))
        out.append((p.name, ideal, valid))
    return out


@cache
def _mask_cost(model_name: str, mem: int, comp: int) -> float:
    model = get_model(model_name)
    c_rem = model.compute_slices - comp.bit_count()
    m_rem = model.memory_slices - mem.bit_count()
    profiles = _profile_masks(model_name)
    total = 0.0
    for c, m, pls in profiles:
        ideal = min(c_rem // c, m_rem // m)
        if ideal <= 0:
            continue
        valid = sum(1 for pm, pc in pls if not (pm & mem or pc & comp))
        total += 1.0 - min(valid, ideal) / ideal
    return total / len(profiles)


def mask_cost(mem: int, comp: int, model: GpuModel) -> float:
    """Eq. 5 for jobs on memory slices ``mem`` and compute slices ``comp``."""
    return _mask_cost(model.name, mem, comp)


def fragmentation_cost(gpu: Gpu | Iterable[Slot], model: GpuModel) -> float:
    """Eq. 5: the average unavailability of the model's MIG profiles on a GPU whose
    running jobs hold ``gpu`` (a snapshot GPU, or the jobs' slots); 0 = none."""
    if not isinstance(gpu, Gpu):
        gpu = gpu_running(0, gpu)
    return _mask_cost(model.name, gpu.busy_mask, gpu.compute_mask)


# ---------------------------------------------------------------------------
# Job arrival


def is_lazy(gpu: Gpu, model: GpuModel, threshold: float = DEFAULT_THRESHOLD) -> bool:
    """Lazy: load strictly below the threshold (a GPU exactly at it counts as busy)."""
    return gpu.compute_mask.bit_count() < threshold * model.compute_slices - _EPS


@dataclass(frozen=True, slots=True)
class Choice:
    """Where a job goes: ``slot`` on ``gpu``; ``destroy``: idle instances in the way;
    ``reuse``: an idle instance is already there; ``cost``: the GPU's Eq. 5 after."""

    gpu: int
    slot: Slot
    cost: float = 0.0
    reuse: bool = False
    destroy: tuple[Slot, ...] = ()


@cache
def _slots_of_size(model_name: str) -> dict[int, tuple[Slot, ...]]:
    out: dict[int, list[Slot]] = {}
    for s in planner_slots(get_model(model_name)):
        out.setdefault(s.size, []).append(s)
    return {k: tuple(sorted(v)) for k, v in out.items()}


@cache
def _candidates(model_name: str, size: int, mem: int, comp: int) -> tuple:
    """Slots of ``size`` free of the jobs' memory ``mem``, with the resulting Eq. 5
    cost, cheapest first: ((cost, slot, memory mask), ...)."""
    out = []
    for slot in _slots_of_size(model_name).get(size, ()):
        m = _mem_mask(slot)
        if not m & mem:
            cost = round(_mask_cost(model_name, mem | m, comp | _comp_mask(slot)), 12)
            out.append((cost, slot, m))
    out.sort(key=lambda c: (c[0], c[1].placement.start))
    return tuple(out)


def _idle_slots(gpu: Gpu) -> tuple[Slot, ...]:
    return tuple(i.slot for i in gpu.instances if i.job is None)


def _dp_candidates(gpu: Gpu, size: int, model: GpuModel) -> Iterator[Choice]:
    """The GPU's cheapest placements of ``size`` (a dearer one never wins)."""
    cands = _candidates(model.name, size, gpu.busy_mask, gpu.compute_mask)
    if not cands:
        return
    low = cands[0][0]
    idle = _idle_slots(gpu)
    for cost, slot, m in cands:
        if cost > low:
            return
        reuse = slot in idle
        destroy = () if reuse else tuple(s for s in idle if _mem_mask(s) & m)
        yield Choice(gpu.index, slot, cost, reuse, destroy)


def choose_placement(
    gpus: Sequence[Gpu],
    sizes: Sequence[int],
    model: GpuModel,
    threshold: float = DEFAULT_THRESHOLD,
    *,
    load_balance: bool = True,
    dynamic: bool = True,
) -> Choice | None:
    """Where a job that asks for ``sizes[0]`` compute slices goes (None: it waits).

    Dynamic: the exact size at the lowest resulting cost (Sec. IV-C steps 1-4).
    Static: an idle instance of ``sizes[0]`` (lazy GPUs first, then the lowest
    index), else of the next size in ``sizes``.
    """
    groups: tuple[list[Gpu], ...] = ([], []) if load_balance else ([],)
    for g in gpus:
        groups[1 if load_balance and not is_lazy(g, model, threshold) else 0].append(g)
    if dynamic:
        for group in groups:
            best, best_key = None, None
            for g in group:
                for c in _dp_candidates(g, sizes[0], model):
                    key = (c.cost, not c.reuse, len(c.destroy))
                    if best_key is None or key < best_key:
                        best, best_key = c, key
            if best is not None:
                return best
        return None
    for size in sizes:
        for group in groups:
            for g in group:
                for s in _idle_slots(g):
                    if s.size == size:
                        cost = _mask_cost(
                            model.name, g.busy_mask | _mem_mask(s), g.compute_mask | _comp_mask(s)
                        )
                        return Choice(g.index, s, cost, True, ())
    return None


# ---------------------------------------------------------------------------
# Jobs of several slices on a static layout


def task_sizes(job: Job, model: GpuModel) -> tuple[int, ...]:
    """The instance sizes one task of ``job`` runs on (``Job.per_task``: a finite time,
    the memory of one task), smallest first."""
    memory = mask_tables(model).memory
    per = job.per_task(model)
    return tuple(
        s
        for s in model.planner_sizes
        if per.get(s, math.inf) < math.inf and job.memory <= memory[s]
    )


def choose_gang(
    gpus: Sequence[Gpu], sizes: Sequence[int], n: int
) -> tuple[tuple[int, Slot], ...] | None:
    """``n`` idle instances of ``sizes`` on one node, as (GPU, slot), or None (the job
    waits): the first node (in the order of its first GPU) that has ``n`` of
    ``sizes[0]``, else of the first two sizes, and so on; there the earlier sizes
    first, then GPUs by index, instances by placement."""
    nodes: dict[str, list[Gpu]] = {}
    for g in gpus:
        nodes.setdefault(g.node, []).append(g)
    for k in range(1, len(sizes) + 1):
        rank = {s: i for i, s in enumerate(sizes[:k])}
        for group in nodes.values():
            idle = [
                (rank[i.slot.size], g.index, i.slot.placement.start, i.slot)
                for g in group
                for i in g.instances
                if i.job is None and i.slot.size in rank
            ]
            if len(idle) >= n:
                idle.sort(key=lambda x: x[:3])
                return tuple((gpu, slot) for _, gpu, _, slot in idle[:n])
    return None
