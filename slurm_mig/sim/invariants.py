"""The invariants a simulation keeps (checked after every instant with ``check=True``),
and the job states they name."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from ..geometry import GpuModel, MaskTables
from ..planner.gpustate import LiveInstance
from ..planner.snapshot import runnable_sizes
from .api import SimJob
from .cluster import EPS, Gpu, InvariantError, check_gpu

__all__ = ["DONE", "FUTURE", "HELD", "PENDING", "SimState", "check_end", "check_instant"]

# A job's state, one byte each in ``SimState.state``: not arrived yet, pending, on an
# instance, finished.
FUTURE, PENDING, HELD, DONE = 0, 1, 2, 3


class SimState(Protocol):
    """What the invariants read of a simulation (the engine is one): its clock, jobs,
    GPUs and the counts that must add up."""

    now: float
    jobs: Sequence[SimJob]
    model: GpuModel
    geom: MaskTables
    curve: tuple[float, ...]  # the model's power curve
    gpu_state: Sequence[Gpu]
    pending: Mapping[int, Any]
    held: Mapping[int, LiveInstance]
    spread: Mapping[int, Any]  # job index -> its instances when several (`sim.spread`)
    state: bytearray
    done: int
    arrived_count: int
    total_busy: int
    first_start: Sequence[float]
    finish_t: Sequence[float]
    exec_s: Sequence[float]


def check_instant(sim: SimState, dirty: Iterable[int]) -> None:
    """InvariantError unless the GPUs that changed (``dirty``) and the job counts add up now."""
    for k in dirty:
        check_gpu(sim.gpu_state[k], sim.geom, sim.curve, sim.now, sim.jobs)
    if len(sim.pending) + len(sim.held) + sim.done != sim.arrived_count:
        raise InvariantError(
            f"t={sim.now}: {len(sim.pending)} pending + {len(sim.held)} on "
            f"instances + {sim.done} done != {sim.arrived_count} arrived"
        )
    for idx, inst in sim.held.items():
        if inst.job != idx or sim.state[idx] != HELD:
            raise InvariantError(f"t={sim.now}: job {sim.jobs[idx].id!r} lost its instance")
    for idx, sp in sim.spread.items():
        _check_spread(sim, idx, sp.insts)
    if sim.total_busy != sum(g.busy_slices for g in sim.gpu_state):
        raise InvariantError(f"t={sim.now}: cluster busy slices out of step")


def _check_spread(sim: SimState, idx: int, insts: Sequence[LiveInstance]) -> None:
    """InvariantError unless job ``idx`` holds every one of its instances, all on one
    node, each running a share of its run while it runs."""
    job = sim.jobs[idx]
    if sim.held.get(idx) is not insts[0] or any(i.job != idx for i in insts):
        raise InvariantError(f"t={sim.now}: job {job.id!r} lost one of its instances")
    if len({sim.gpu_state[i.gpu].node for i in insts}) != 1:
        raise InvariantError(f"t={sim.now}: job {job.id!r} holds instances on two nodes")
    main = insts[0].run
    for inst in insts[1:]:
        share = inst.run
        if (main is None) != (share is None) or (share is not None and share.main is not main):
            raise InvariantError(f"t={sim.now}: job {job.id!r} runs on some instances only")


def check_end(sim: SimState) -> None:
    """InvariantError unless every GPU is idle and every job ran once, within its times."""
    for g in sim.gpu_state:
        check_gpu(g, sim.geom, sim.curve, sim.now, sim.jobs)
        if g.runs or g.busy:
            raise InvariantError(f"gpu {g.index} still busy at the end")
    if any(s != DONE for s in sim.state) or sim.done != len(sim.jobs):
        raise InvariantError("a job did not finish exactly once")
    for i, j in enumerate(sim.jobs):
        s, f = sim.first_start[i], sim.finish_t[i]
        if not (j.arrival - EPS <= s <= f + EPS):
            raise InvariantError(f"job {j.id!r}: arrival {j.arrival}, start {s}, end {f}")
        fastest = min(j.time(s) for s in runnable_sizes(j, sim.model))
        if j.tasks > 1:  # on several instances, its slowest task's on its own sizes
            fastest = min(fastest, min(j.per_task(sim.model).values()))
        if sim.exec_s[i] < fastest * (1 - 1e-9) - 1e-9:
            raise InvariantError(f"job {j.id!r} ran shorter than its fastest time")
