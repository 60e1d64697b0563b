"""Policy ``baseline`` and the placement helpers other online policies share.

``baseline``: the first GPU (by index) with room for the job's requested size (else the
smallest it can run on); an idle instance of that size there is reused, else one is
created at the first legal free placement, destroying idle instances in its way. Jobs
go in arrival order; any that fits starts (backfilling). PCIe-unaware: the PCIe
paper's baseline (Section 5.1). Option ``size=N`` gives every job that can run there N
slices (``size=7``: MISO's "full").
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

from ..geometry import GpuModel, Slot, mask_tables
from .decisions import Decisions, Destroy, Op, Place
from .registry import UnknownPolicy
from .snapshot import ClusterSnapshot, Gpu, Instance, Job, default_size, runnable_sizes

__all__ = ["Baseline", "Patched", "busy_instance", "place_exact", "start_ops"]


def start_ops(gpu: Gpu, job: str, slot: Slot, model: GpuModel, now: float) -> list[Op]:
    """Operations that start ``job`` at ``slot`` of ``gpu`` now: destroy the idle
    instances in its way (not an identical idle one, which is reused), then place it.
    The slot's slices must be free of busy instances."""
    tables = mask_tables(model)
    order = tables.index_of(slot)
    if order is None:
        raise ValueError(f"{slot!r} is not a legal instance of a planner size on {model.name}")
    mask = tables.masks[order]
    if mask & gpu.busy_mask:
        raise ValueError(f"{slot} overlaps a busy instance on gpu {gpu.index}")
    out: list[Op] = []
    if mask & gpu.held_mask:
        for inst in gpu.instances:
            if inst.job is None and tables.mask[inst.slot] & mask and inst.slot != slot:
                out.append(Destroy(gpu.index, inst.slot))
    out.append(Place(job, gpu.index, slot, now))
    return out


def place_exact(gpu: Gpu, size: int, model: GpuModel) -> Slot | None:
    """Where a job of ``size`` goes on ``gpu``: an idle instance of that size, else the
    first legal placement free of every instance, else the first free of busy ones (idle
    instances there get destroyed). None if busy instances leave no room."""
    for inst in gpu.instances:
        if inst.job is None and inst.slot.size == size:
            return inst.slot
    tables = mask_tables(model)
    return tables.first_free(size, gpu.held_mask) or tables.first_free(size, gpu.busy_mask)


def _lowest_bit(x: int) -> int:
    return (x & -x).bit_length() - 1


class Baseline:
    """First GPU with room, in arrival order with backfilling; PCIe-unaware.

    Keeps, as a cache, per size the set of GPUs with room for it (refreshed for the
    GPUs a snapshot says changed) and the queue of waiting jobs per size."""

    name = "baseline"
    kind = "online"

    def __init__(self, size: int | None = None) -> None:
        self.size = None if size is None else int(size)
        self._model: GpuModel | None = None
        self._reset()

    def _reset(self) -> None:
        self._queues: dict[int, deque[tuple[int, Job]]] = {}
        self._room: dict[int, int] = {}  # size -> bitset of GPUs with room for it
        self._seq = 0
        self._queued: set[str] = set()
        self._stale: set[int] = set()  # GPUs changed since their room was last read

    def _setup(self, model: GpuModel) -> None:
        if self.size is not None and self.size not in model.planner_sizes:
            raise UnknownPolicy(
                f"policy 'baseline': size {self.size} is not an instance size of "
                f"{model.name} ({', '.join(map(str, model.planner_sizes))})"
            )
        self._model = model
        self._fit = mask_tables(model).fit_sizes
        self._room = dict.fromkeys(model.planner_sizes, 0)
        self._queues = {s: deque() for s in model.planner_sizes}

    def _refresh(self, gpu: Gpu) -> None:
        fits = self._fit[gpu.busy_mask]
        bit = 1 << gpu.index
        for s in self._room:
            if s in fits:
                self._room[s] |= bit
            else:
                self._room[s] &= ~bit

    def _size_of(self, job: Job, model: GpuModel) -> int:
        size = self.size
        if size is None or size not in runnable_sizes(job, model):
            size = default_size(job, model)
        assert size is not None
        return size

    def decide(self, snap: ClusterSnapshot) -> Decisions:
        return Decisions(tuple(self._ops(snap)))

    def _ops(self, snap: ClusterSnapshot) -> Iterator[Op]:
        model = snap.model
        fresh = snap.arrived is None or snap.changed is None or self._model is not model
        if fresh:
            self._reset()
            self._setup(model)
        for job in snap.new_arrivals():
            self._seq += 1
            self._queues[self._size_of(job, model)].append((self._seq, job))
            self._queued.add(job.id)
        self._stale.update(snap.changed_gpus())
        if not self._queued:
            return  # GPUs that changed are read once a job waits
        gpus = snap.gpus
        for k in self._stale:
            self._refresh(gpus[k])
        self._stale.clear()
        queues, room, pending = self._queues, self._room, snap.pending
        while True:
            best = None
            for s, q in queues.items():
                while q and q[0][1].id not in pending:  # left without us (cancelled)
                    self._queued.discard(q.popleft()[1].id)
                if q and room[s] and (best is None or q[0][0] < queues[best][0][0]):
                    best = s
            if best is None:
                return
            _, job = queues[best].popleft()
            self._queued.discard(job.id)
            k = _lowest_bit(room[best])
            gpu = gpus[k]
            slot = place_exact(gpu, best, model)
            assert slot is not None  # room[best] says there is one
            ops = start_ops(gpu, job.id, slot, model, snap.now)
            yield from ops
            # the GPU as it is after this start, for the next job of this decision
            gpu = gpu.placed(busy_instance(slot, job))
            self._refresh(gpu)
            gpus = Patched(gpus, gpu)


def busy_instance(slot: Slot, job: Job) -> Instance:
    """The instance a job gets when it starts at ``slot``."""
    return Instance(slot, job.id, pcie=job.pcie_bound)


class Patched:
    """A GPU sequence with some GPUs replaced (the effect of this decision's starts)."""

    __slots__ = ("_base", "_over")

    def __init__(self, base, gpu: Gpu) -> None:
        if isinstance(base, Patched):
            self._base, self._over = base._base, {**base._over, gpu.index: gpu}
        else:
            self._base, self._over = base, {gpu.index: gpu}

    def __getitem__(self, k: int) -> Gpu:
        got = self._over.get(k)
        return got if got is not None else self._base[k]

    def __len__(self) -> int:
        return len(self._base)


POLICIES = {"baseline": Baseline}
