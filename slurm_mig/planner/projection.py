"""The projection of the batch driver (``planner.driver``): the GPUs as a new batch
finds them once the running jobs and the standing plans are through, each plan after
the work on its slices, created, run for its planned seconds (instances of the future
may overlap)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import replace

from ..geometry import Slot, slot_mask
from .snapshot import INF, ClusterSnapshot, Gpu, Instance, Planned

__all__ = ["project", "projected_end"]


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


def _projected(snap: ClusterSnapshot, planned: Iterable[Planned]) -> Sequence[Gpu]:
    """`project`, or the snapshot's own GPUs when there is nothing to project."""
    planned = list(planned)
    if not planned and not any(g.busy_mask for g in snap.gpus):
        return snap.gpus
    return project(snap, planned)


def _extend(snap: ClusterSnapshot, gpus: Sequence[Gpu], fresh: Iterable[Planned]) -> list[Gpu]:
    """`project` of ``fresh`` plans onto already projected ``gpus``, rebuilding only the
    GPUs they are on (a run of one job touches one GPU)."""
    by_gpu: dict[int, list[Planned]] = defaultdict(list)
    for p in fresh:
        by_gpu[p.gpu].append(p)
    out = list(gpus)
    if len(by_gpu) * 2 > len(gpus):
        return list(
            project(replace(snap, gpus=gpus, planned={}), (p for v in by_gpu.values() for p in v))
        )
    for k, plans in by_gpu.items():
        one = replace(snap, gpus=(gpus[k],), planned={})
        moved = [replace(p, gpu=0) for p in plans]
        out[k] = project(one, moved)[0]
    return out
