"""The FAR planner as the registry runs it: FAR (``far``) on idle GPUs; onto GPUs that
already hold work, the best of FAR's state-aware schedule and the reversed
concatenations of Section 4 (``concat.plan_onto``)."""

from __future__ import annotations

import time

from ..plan import Plan
from .batch import Batch
from .concat import plan_onto
from .far import far_schedule, time_assignment
from .registry import BatchPolicy, bind_options
from .timeline import to_plan

__all__ = ["make_planner", "plan_far"]


def plan_far(batch: Batch, refine_phase: bool = True, prune: bool = True) -> Plan:
    """The FAR planner: phases 1-3, timed with sequential reconfiguration; onto busy
    GPUs the best of the state-aware schedule and the concatenations of Section 4."""
    t0 = time.perf_counter()
    if batch.busy:
        timeline, stats = plan_onto(batch, refine_phase=refine_phase, prune=prune)
    else:
        res = far_schedule(batch.tasks, batch.model, batch.gpus, refine_phase, prune)
        timeline, _ = time_assignment(res.forest, batch.tasks, res.assign, batch=batch.number)
        stats = {
            "allocations_walked": res.walked,
            "allocations_evaluated": res.evaluated,
            "chosen_allocation": res.chosen_index,
            "phase2_makespan": res.phase2_makespan,
            "refinement_moves": res.moves,
            "refinement_swaps": res.swaps,
        }
    stats = {"planning_seconds": time.perf_counter() - t0, **stats}
    return to_plan(
        batch.model, batch.tasks, timeline, batch.gpus, "far", stats=stats, start=batch.start
    )


def make_planner(name: str = "far", **options) -> BatchPolicy:
    """Registry hook: ``far`` (options: refine_phase, prune)."""
    if name != "far":
        raise ValueError(f"{__name__} has no planner {name!r}")
    return BatchPolicy("far", bind_options(plan_far, name, options))
