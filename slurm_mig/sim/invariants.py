"""The invariants a simulation keeps (checked after every instant with ``check=True``),
and the job states they name."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from .cluster import EPS, InvariantError, check_gpu, runnable_sizes

if TYPE_CHECKING:
    from .engine import Engine

__all__ = ["DONE", "FUTURE", "HELD", "PENDING", "check_end", "check_instant"]

# A job's state, one byte each in ``Engine.state``: not arrived yet, pending, on an
# instance, finished.
FUTURE, PENDING, HELD, DONE = 0, 1, 2, 3


def check_instant(engine: Engine, dirty: Iterable[int]) -> None:
    """InvariantError unless the GPUs that changed (``dirty``) and the job counts add up now."""
    for k in dirty:
        check_gpu(engine.gpu_state[k], engine.geom, engine.curve, engine.now, engine.jobs)
    if len(engine.pending) + len(engine.held) + engine.done != engine.arrived_count:
        raise InvariantError(
            f"t={engine.now}: {len(engine.pending)} pending + {len(engine.held)} on "
            f"instances + {engine.done} done != {engine.arrived_count} arrived"
        )
    for idx, inst in engine.held.items():
        if inst.job != idx or engine.state[idx] != HELD:
            raise InvariantError(f"t={engine.now}: job {engine.jobs[idx].id!r} lost its instance")
    if engine.total_busy != sum(g.busy_slices for g in engine.gpu_state):
        raise InvariantError(f"t={engine.now}: cluster busy slices out of step")


def check_end(engine: Engine) -> None:
    """InvariantError unless every GPU is idle and every job ran once, within its times."""
    for g in engine.gpu_state:
        check_gpu(g, engine.geom, engine.curve, engine.now, engine.jobs)
        if g.runs or g.busy:
            raise InvariantError(f"gpu {g.index} still busy at the end")
    if any(s != DONE for s in engine.state) or engine.done != len(engine.jobs):
        raise InvariantError("a job did not finish exactly once")
    for i, j in enumerate(engine.jobs):
        s, f = engine.first_start[i], engine.finish_t[i]
        if not (j.arrival - EPS <= s <= f + EPS):
            raise InvariantError(f"job {j.id!r}: arrival {j.arrival}, start {s}, end {f}")
        fastest = min(j.time(s) for s in runnable_sizes(j, engine.model))
        if engine.exec_s[i] < fastest * (1 - 1e-9) - 1e-9:
            raise InvariantError(f"job {j.id!r} ran shorter than its fastest time")
