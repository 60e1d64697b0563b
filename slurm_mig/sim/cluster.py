"""The simulated cluster's state: per GPU the planner's one state model
(``planner.gpustate``: live instances as memory-slice bitmasks, the running jobs, the
reconfiguration channel) with what only the simulator keeps (energy, when each slice
was freed), and the invariants that must hold after every event (``check`` mode).

Bit ``i`` of a mask is memory slice ``i`` (a 3g instance at 0 holds 0b1111).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from ..geometry import MaskTables, compute_mask, mask_tables
from ..planner.gpustate import GpuState, LiveInstance
from ..planner.snapshot import Gpu as GpuView
from ..planner.snapshot import Instance as InstanceView
from .api import SimJob

if TYPE_CHECKING:
    from .spread import Spread

EPS = 1e-9


class InvariantError(AssertionError):
    """The simulator broke one of its own invariants (a simulator bug)."""


geometry_for = mask_tables  # the model's slot/mask tables (``geometry.MaskTables``)


# ---------------------------------------------------------------------------
# Mutable state, owned by the engine: the planner's one GPU state model


class Gpu(GpuState):
    """A simulated GPU: the shared state, plus where it is, its PCIe-bound jobs bound
    or running, its busy compute slices and energy, and when each memory slice was
    last freed."""

    __slots__ = (
        "node",
        "pcie_held",
        "busy_slices",
        "energy",
        "last_t",
        "released",
        "t0",
        "view",
    )

    def __init__(self, index: int, node: int, memory_slices: int, t0: float) -> None:
        super().__init__(index, t0)
        self.node = node
        self.pcie_held = 0  # PCIe-bound jobs running or bound
        self.busy_slices = 0  # compute slices running a job
        self.energy = 0.0  # J up to last_t
        self.last_t = t0
        self.released = [-math.inf] * memory_slices  # when each slice was last freed
        self.t0 = t0
        self.view: GpuView | None = None


def build_view(
    g: Gpu,
    jobs: Sequence[SimJob],
    per_node: int,
    expect: Callable[[LiveInstance, float], float] | None = None,
    now: float = 0.0,
    spread: Mapping[int, Spread] | None = None,
) -> GpuView:
    """The GPU as the snapshot shows it (``planner.snapshot.Gpu``): ``jobs`` as the
    policy sees them; ``expect(instance, now)``: when the policy expects a busy
    instance's job to end (None: when it will); ``spread``: the jobs on several
    instances (each of theirs shows the job's end)."""
    table = g.insts
    views = []
    comp = 0
    for o in sorted(table):
        inst = table[o]
        v = inst.view
        if v is None:
            v = inst.view = _instance_view(inst, jobs, expect, now, spread)
        if inst.job >= 0:
            comp |= compute_mask(inst.slot)
        views.append(v)
    return GpuView(
        g.index,
        tuple(views),
        g.channel,
        g.pcie_held,
        str(g.node),
        g.index % per_node,
        g.busy,
        g.held,
        comp,
    )


def _instance_view(
    inst: LiveInstance,
    jobs: Sequence[SimJob],
    expect: Callable[[LiveInstance, float], float] | None,
    now: float,
    spread: Mapping[int, Spread] | None = None,
) -> InstanceView:
    if inst.job < 0:
        return InstanceView(inst.slot, None, inst.ready_at)
    job = jobs[inst.job]
    sp = spread.get(inst.job) if spread else None
    main = inst if sp is None else sp.main  # a job's end is its main instance's
    run = main.run
    if expect is not None:
        until = expect(main, now)
    elif run is not None:
        until = run.finish
    else:
        start = main.ready_at if main.ready_at > main.start_at else main.start_at
        seconds = job.times.get(main.slot.size, math.inf) if sp is None else sp.seconds
        until = start + main.rem * seconds
    return InstanceView(inst.slot, job.id, inst.ready_at, until, job.pcie_demand > 0.0)


def check_gpu(
    g: Gpu, geom: MaskTables, curve: tuple[float, ...], now: float, jobs: list[SimJob]
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
