"""The simulated cluster's state: live instances per GPU as memory-slice bitmasks,
the running jobs, the per-GPU reconfiguration channel, and the invariants that must
hold after every event (checked in ``check`` mode).

Bit ``i`` of a mask is memory slice ``i`` (a 3g instance at 0 holds 0b1111).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..geometry import GpuModel, Slot, planner_slots
from .api import GpuView, InstanceView, SimJob

EPS = 1e-9


class InvariantError(AssertionError):
    """The simulator broke one of its own invariants (a simulator bug)."""


@dataclass(frozen=True)
class SimGeometry:
    """Lookup tables of one model's planner slots, built once per model. Slots are
    numbered by placement order; the geometry's own Slot objects are canonical."""

    model: GpuModel
    slots: tuple[Slot, ...]  # canonical, by placement
    masks: tuple[int, ...]  # memory-slice mask of slots[i]
    mask: dict[Slot, int]
    by_size: dict[int, tuple[Slot, ...]]  # legal slots of each size, by placement
    fit_sizes: tuple[frozenset[int], ...]  # sizes with a slot avoiding mask m
    first_fit: tuple[dict[int, Slot], ...]  # first slot of each size avoiding mask m
    memory: dict[int, int]  # usable bytes of each size's profile
    _by_id: dict[int, int]
    _by_eq: dict[Slot, int]

    def index_of(self, slot: Slot) -> int | None:
        """Number of a planner slot (None if it is not one); fast for canonical ones."""
        i = self._by_id.get(id(slot))
        return i if i is not None else self._by_eq.get(slot)

    def first_free(self, size: int, blocked: int) -> Slot | None:
        """The first legal slot of ``size`` sharing no memory slice with ``blocked``."""
        return self.first_fit[blocked].get(size)


_GEOMETRY: dict[str, SimGeometry] = {}


def geometry_for(model: GpuModel) -> SimGeometry:
    """The tables of ``model`` (built on first use, then cached by model name)."""
    geom = _GEOMETRY.get(model.name)
    if geom is None or geom.model is not model:
        geom = _GEOMETRY[model.name] = _build_geometry(model)
    return geom


def _build_geometry(model: GpuModel) -> SimGeometry:
    slots = tuple(sorted(planner_slots(model), key=lambda s: (s.placement.start, s.size)))
    masks = tuple(((1 << s.placement.size) - 1) << s.placement.start for s in slots)
    mask = dict(zip(slots, masks))
    by_size = {size: tuple(s for s in slots if s.size == size) for size in model.planner_sizes}
    fit, first = [], []
    for m in range(1 << model.memory_slices):
        found = {}
        for size, cands in by_size.items():
            for s in cands:
                if not mask[s] & m:
                    found[size] = s
                    break
        first.append(found)
        fit.append(frozenset(found))
    memory = {s: model.profile_for_size(s).memory_bytes for s in model.planner_sizes}
    return SimGeometry(
        model,
        slots,
        masks,
        mask,
        by_size,
        tuple(fit),
        tuple(first),
        memory,
        {id(s): i for i, s in enumerate(slots)},
        {s: i for i, s in enumerate(slots)},
    )


def slot_mask(model: GpuModel, slot: Slot) -> int:
    """Memory-slice bitmask of a planner slot (KeyError if it is not one)."""
    geom = geometry_for(model)
    i = geom.index_of(slot)
    if i is None:
        raise KeyError(slot)
    return geom.masks[i]


def runnable_sizes(job: SimJob, model: GpuModel) -> tuple[int, ...]:
    """Sizes the job can run on: a finite time and enough profile memory."""
    memory = geometry_for(model).memory
    times, need = job.times, job.memory
    return tuple(
        s for s in model.planner_sizes if times.get(s, math.inf) < math.inf and need <= memory[s]
    )


def default_size(job: SimJob, model: GpuModel) -> int | None:
    """The job's requested size, else the smallest size it can run on."""
    if job.size is not None:
        return job.size
    sizes = runnable_sizes(job, model)
    return sizes[0] if sizes else None


# ---------------------------------------------------------------------------
# Mutable state, owned by the engine


class Inst:
    """A live instance. ``job`` is the index of the job bound to it (-1 = idle)."""

    __slots__ = (
        "gpu",
        "order",
        "slot",
        "mask",
        "ready_at",
        "job",
        "run",
        "rem",
        "start_at",
        "view",
    )

    def __init__(self, gpu: int, order: int, slot: Slot, mask: int, ready_at: float) -> None:
        self.gpu = gpu
        self.order = order  # the slot's number in SimGeometry
        self.slot = slot
        self.mask = mask
        self.ready_at = ready_at
        self.job = -1
        self.run: Run | None = None
        self.rem = 1.0  # fraction of work left for a bound job that has not started
        self.start_at = ready_at
        self.view: InstanceView | None = None  # cached; None after any change


class Run:
    """A job running on an instance at rate 1 / (T * slowdown) of its work per second."""

    __slots__ = ("idx", "job", "inst", "T", "rem", "sd", "t0", "ver", "finish", "pcie", "started")

    def __init__(self, idx: int, job: SimJob, inst: Inst, T: float, rem: float, now: float):
        self.idx = idx
        self.job = job
        self.inst = inst
        self.T = T
        self.rem = rem  # fraction of work left at time t0
        self.sd = 0.0  # 0 until the first pacing
        self.t0 = now
        self.ver = 0
        self.finish = math.inf
        self.pcie = job.pcie_demand > 0.0
        self.started = now

    def remaining_at(self, now: float) -> float:
        if self.sd <= 0.0:
            return self.rem
        r = self.rem - (now - self.t0) / (self.T * self.sd)
        return r if r > 0.0 else 0.0


class Gpu:
    __slots__ = (
        "index",
        "node",
        "insts",
        "held",
        "busy",
        "channel",
        "runs",
        "pcie_n",
        "pcie_held",
        "busy_slices",
        "energy",
        "last_t",
        "released",
        "t0",
        "view",
    )

    def __init__(self, index: int, node: int, memory_slices: int, t0: float) -> None:
        self.index = index
        self.node = node
        self.insts: dict[int, Inst] = {}  # by slot number
        self.held = 0  # memory slices of live instances
        self.busy = 0  # memory slices of instances with a job bound
        self.channel = t0  # reconfiguration channel free from
        self.runs: list[Run] = []
        self.pcie_n = 0  # PCIe-bound jobs running (Eq. 2's n)
        self.pcie_held = 0  # PCIe-bound jobs running or bound
        self.busy_slices = 0  # compute slices running a job
        self.energy = 0.0  # J up to last_t
        self.last_t = t0
        self.released = [-math.inf] * memory_slices  # when each slice was last freed
        self.t0 = t0
        self.view: GpuView | None = None


def build_view(g: Gpu, jobs: list[SimJob]) -> GpuView:
    table = g.insts
    views = []
    for o in sorted(table):
        inst = table[o]
        v = inst.view
        if v is None:
            v = inst.view = _instance_view(inst, jobs)
        views.append(v)
    return GpuView(g.index, g.node, tuple(views), g.channel, g.pcie_held, g.busy, g.held)


def _instance_view(inst: Inst, jobs: list[SimJob]) -> InstanceView:
    if inst.job < 0:
        return InstanceView(inst.slot, None, inst.ready_at, None, False)
    job = jobs[inst.job]
    run = inst.run
    if run is not None:
        until = run.finish
    else:
        start = inst.ready_at if inst.ready_at > inst.start_at else inst.start_at
        until = start + inst.rem * job.times.get(inst.slot.size, math.inf)
    return InstanceView(inst.slot, job.id, inst.ready_at, until, job.pcie_demand > 0.0)


def check_gpu(
    g: Gpu, geom: SimGeometry, curve: tuple[float, ...], now: float, jobs: list[SimJob]
) -> None:
    """Every invariant of one GPU; raises InvariantError naming the first broken one."""
    where = f"t={now:.6f} gpu {g.index}"
    held = busy = slices = pcie = pcie_held = total_bits = 0
    for o, inst in g.insts.items():
        slot = inst.slot
        if geom.slots[o] is not slot or geom.masks[o] != inst.mask:
            raise InvariantError(f"{where}: instance {slot} is not a legal planner slot")
        held |= inst.mask
        total_bits += inst.mask.bit_count()
        if inst.job >= 0:
            busy |= inst.mask
            pcie_held += jobs[inst.job].pcie_demand > 0.0
            run = inst.run
            if run is not None:
                if run.inst is not inst or run.idx != inst.job:
                    raise InvariantError(f"{where}: job #{inst.job} is not on its instance")
                slices += slot.size
                pcie += run.pcie
        elif inst.run is not None:
            raise InvariantError(f"{where}: idle instance {slot} has a running job")
    if total_bits != held.bit_count():
        raise InvariantError(f"{where}: two live instances share a memory slice")
    if held != g.held or busy != g.busy:
        raise InvariantError(f"{where}: memory masks out of step with the instances")
    if slices != g.busy_slices or pcie != g.pcie_n or pcie_held != g.pcie_held:
        raise InvariantError(f"{where}: busy slices or PCIe counts out of step")
    if len(g.runs) != sum(1 for i in g.insts.values() if i.run is not None):
        raise InvariantError(f"{where}: running jobs out of step with the instances")
    for run in g.runs:
        if run.remaining_at(now) < -1e-6 or run.finish < now - 1e-6:
            raise InvariantError(f"{where}: job {run.job.id} is past its end")
    energy = g.energy + curve[g.busy_slices] * (now - g.last_t)
    floor = curve[0] * (now - g.t0)
    if energy < floor - 1e-9 * max(1.0, floor):
        raise InvariantError(
            f"{where}: energy {energy:.3f} J below idle power x time {floor:.3f} J"
        )
