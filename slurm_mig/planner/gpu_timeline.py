"""When could this job start on that GPU: the per-GPU MIG timeline of one decision.

Used by the ``adaptive`` policy (``adaptive.py``) for every (job, GPU, slot) it weighs,
so this is the hot arithmetic of the daemon's default policy. It holds:

* a model's slot table (``slot_table``): per planner size the slots as plain numbers
  (slot, memory mask, first memory slice, end, seconds to create, compute mask), and
  the double-memory 1g slots grouped by the compute slices each keeps from others;
* a job's options on a model (``job_options``): the ways it can run, with their
  runtime and slice-seconds;
* each GPU's timeline during a decision (``GpuLine``, built by ``gpu_line`` and
  ``timelines``): when each memory slice frees, the idle instances that could be
  reused, the create/destroy channel and the reservations; and the starts it allows
  (``earliest_start``, ``ready_start``, ``start_bound``) and a job taking a slot
  (``occupy``).

Not to be confused with ``timeline.py``, which times a batch plan's ordered instance
uses into tasks and reconfigurations.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..geometry import (
    GpuModel,
    Slot,
    blocked_compute,
    compute_mask,
    mask_tables,
    slot_mask,
)
from .snapshot import ClusterSnapshot, Gpu

__all__ = [
    "GpuLine",
    "SlotTable",
    "earliest_start",
    "gpu_line",
    "job_options",
    "occupy",
    "ready_start",
    "slot_entry",
    "slot_table",
    "start_bound",
    "timelines",
]

INF = math.inf


@dataclass(frozen=True, slots=True)
class SlotTable:
    """A model's planner slots by size, as plain numbers for the inner loops:
    (slot, memory mask, first memory slice, end, seconds to create, compute mask).
    ``double``: the double-memory 1g slots grouped by the compute slices each keeps
    from others (``blocked_compute``), for jobs whose memory needs two slices."""

    by_size: dict[int, tuple[tuple[Slot, int, int, int, float, int], ...]]
    double: tuple[tuple[int, tuple[tuple[Slot, int, int, int, float, int], ...]], ...]
    double_memory: int  # usable bytes of the double-memory 1g (0: the model has none)


_TABLES: dict[str, SlotTable] = {}


def slot_entry(model: GpuModel, slot: Slot) -> tuple[Slot, int, int, int, float, int]:
    """A slot as plain numbers for the inner loops (the layout in ``SlotTable``)."""
    return (
        slot,
        slot_mask(slot),
        slot.placement.start,
        slot.placement.end,
        model.create_time(slot.size),
        compute_mask(slot),
    )


def slot_table(model: GpuModel) -> SlotTable:
    """The model's slot table, built once per model name and cached."""
    got = _TABLES.get(model.name)
    if got is None:
        tables = mask_tables(model)
        groups: dict[int, list] = {}
        for slot in tables.slots[tables.lattice :]:  # the canonical double-memory slots
            groups.setdefault(blocked_compute(model, slot), []).append(slot_entry(model, slot))
        double = model.double_memory
        got = _TABLES[model.name] = SlotTable(
            {
                size: tuple(slot_entry(model, slot) for slot in tables.by_size[size])
                for size in model.planner_sizes
            },
            tuple((b, tuple(e)) for b, e in sorted(groups.items())),
            double.memory_bytes if double is not None else 0,
        )
    return got


def job_options(job, model: GpuModel, sizes: Sequence[int]) -> list[tuple]:
    """(key, size, seconds, slice-seconds, slot entries, lattice?) for each way the job
    can run: its sizes on the lattice, and for a job too big for a plain 1g but within
    the double-memory 1g, that 1g on two memory slices, costed by the compute slices it
    keeps from others (one where the second memory slice has no compute slice)."""
    table = slot_table(model)
    out = [(s, s, job.time(s), s * job.time(s), table.by_size[s], True) for s in sizes]
    t = job.time(1)
    if (
        table.double
        and 1 not in sizes
        and (job.size is None or job.size <= 1)
        and t < INF
        and mask_tables(model).memory[1] < job.memory <= table.double_memory
    ):
        for blocked, entries in table.double:
            out.append((("double", blocked), 1, t, blocked * t, entries, False))
    return out


@dataclass(slots=True)
class GpuLine:
    """One GPU's timeline during a decision: when each memory slice frees, the idle
    instances that could be reused, the create/destroy channel, and reservations."""

    index: int
    gpu: Gpu
    free: list[float]  # per memory slice: when its running job ends (-inf: free now)
    idle: dict[Slot, float]  # idle instance -> when it is ready
    channel: float
    reserved: list[tuple[int, float, float]]  # (memory mask, start, end)
    busy_slices: int
    busy_now: int  # memory mask of slices busy now
    comp_now: int  # compute mask of slices busy now


def gpu_line(k: int, gpu: Gpu, view: Gpu, model: GpuModel) -> GpuLine:
    """``gpu`` as it is; ``view``: the same with standing plans' slices busy."""
    idle = {i.slot: i.ready_at for i in gpu.instances if i.job is None}
    if view is not gpu:
        idle = {s: r for s, r in idle.items() if not slot_mask(s) & view.busy_mask}
    return GpuLine(
        k,
        gpu,
        view.slice_free_at(model.memory_slices),
        idle,
        max(gpu.channel_free, view.channel_free),
        [],
        view.busy_slices,
        view.busy_mask,
        view.compute_mask,
    )


def earliest_start(line: GpuLine, entry: tuple, seconds: float, now: float) -> float:
    """When a job of ``seconds`` could start at this slot of this GPU: its slices free,
    its instance created (or an idle one reused), and no reservation overlapping."""
    slot, mask, lo, hi, create, cmask = entry
    free = line.free
    base = now
    for i in range(lo, hi):
        if free[i] > base:
            base = free[i]
    if base == INF:
        return INF
    ready = line.idle.get(slot)
    if ready is not None:
        t = base if base >= ready else ready
    else:
        t = (base if base >= line.channel else line.channel) + create
    if not line.reserved:
        return t
    moved = True
    while moved:
        moved = False
        for rmask, rstart, rend in line.reserved:
            if rmask & mask and rstart < t + seconds and rend > t:
                t = rend + create
                moved = True
    return t


def ready_start(line: GpuLine, entry: tuple, now: float) -> float:
    """When a slot whose slices are free now could start: at once on an idle instance
    of its own, else once the GPU's earlier operations and its creation are done."""
    ready = line.idle.get(entry[0])
    if ready is not None:
        return ready if ready > now else now
    return (line.channel if line.channel > now else now) + entry[4]


def start_bound(line: GpuLine, entries: tuple, now: float) -> float:
    """The earliest any of these slots could start on this GPU, reservations aside."""
    best = INF
    free, idle = line.free, line.idle
    for slot, _mask, lo, hi, create, _ in entries:
        base = now
        for i in range(lo, hi):
            if free[i] > base:
                base = free[i]
        ready = idle.get(slot)
        t = (base if base >= ready else ready) if ready is not None else base + create
        if t < best:
            best = t
    return best


def timelines(
    snap: ClusterSnapshot,
    view: Sequence[Gpu],
    reserved: Mapping[int, list[tuple[int, float, float]]] | None,
) -> list[GpuLine]:
    """Each GPU's timeline (``gpu_line``) with the slices standing plans reserve on it."""
    model = snap.model
    lines = [gpu_line(k, g, v, model) for k, (g, v) in enumerate(zip(snap.gpus, view, strict=True))]
    for k, held in (reserved or {}).items():
        lines[k].reserved.extend(held)
    return lines


def occupy(line: GpuLine, entry: tuple, end: float, size: int, now: float, model: GpuModel) -> None:
    """A job starts at this slot of this GPU until ``end``: its slices busy, the idle
    instances overlapping it gone, its creation on the GPU's channel."""
    slot, mask, lo, hi, create, cmask = entry
    creating = slot not in line.idle
    for i in range(lo, hi):
        line.free[i] = end
    for other in [o for o in line.idle if mask_tables(model).mask[o] & mask]:
        del line.idle[other]
    if creating:
        line.channel = max(line.channel, now) + create
    line.busy_slices += size
    line.busy_now |= mask
    line.comp_now |= cmask
