"""The cheap lower bounds on a batch's makespan that the planners report with a plan.

Apart from ``slurm_mig.plan`` (the validator, which shares nothing with the planners):
the ``dual`` bound is the planners' own allotment target (`planner.allotment`).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..geometry import GpuModel
from ..job import Job
from ..plan import lower_bound
from .allotment import allotments

__all__ = ["BOUND_NAMES", "makespan_bounds", "tightest_bound"]

BOUND_NAMES = ("area", "longest", "dual")


def makespan_bounds(tasks: Sequence[Job], model: GpuModel, gpus: int = 1) -> dict[str, float]:
    """The cheap lower bounds on the makespan of ``tasks`` on ``gpus`` idle GPUs:

    * ``area``: every task's least work spread over all compute slices (`lower_bound`);
    * ``longest``: the longest of the tasks' best times (no size runs it faster);
    * ``dual``: T*, the dual-approximation target (``planner.allotment.moldable_bound``):
      the least T for which every task runs within T on some size and the least work
      of those sizes fits the slices by T. Never below the other two.
    """
    tasks = tuple(tasks) if not isinstance(tasks, tuple) else tasks
    if not tasks:
        return dict.fromkeys(BOUND_NAMES, 0.0)
    longest = max(min(t.times.values()) for t in tasks)
    dual = allotments(tasks, model.planner_sizes).bound(model.compute_slices * gpus)
    return {"area": lower_bound(tasks, model, gpus), "longest": longest, "dual": dual}


def tightest_bound(
    tasks: Sequence[Job], model: GpuModel, gpus: int = 1
) -> tuple[float, str, dict[str, float]]:
    """(value, name, all of them) of the tightest of `makespan_bounds`; on a tie (within
    a relative 1e-9) the first name of ``BOUND_NAMES`` that reaches it."""
    bounds = makespan_bounds(tasks, model, gpus)
    top = max(bounds.values())
    name = next(k for k in BOUND_NAMES if bounds[k] >= top * (1 - 1e-9))
    return top, name, bounds
