"""The FAR planner as the registry runs it: FAR (``far``) on idle GPUs; onto GPUs that
already hold work, the best of FAR's state-aware schedule and the reversed
concatenations of Section 4 (``concat.plan_onto``). Option ``objective``: ``makespan``
(FAR as published, the policy's default), ``jct`` or ``balanced`` re-sequence FAR's
plan for completion time (``planner.sequencing``); ``slack`` bounds its makespan."""

from __future__ import annotations

import time
from dataclasses import replace

from ..plan import Plan
from .batch import Batch
from .concat import plan_onto
from .far import far_schedule, time_assignment
from .registry import BatchPolicy, bind_options
from .sequencing import OBJECTIVES, check_objective, sequence_plan
from .timeline import to_plan

__all__ = ["OBJECTIVES", "plan_far"]


def plan_far(
    batch: Batch,
    refine_phase: bool = True,
    prune: bool = True,
    objective: str = "makespan",
    slack: float | None = None,
) -> Plan:
    """The FAR planner: phases 1-3, timed with sequential reconfiguration; onto busy
    GPUs the best of the state-aware schedule and the concatenations of Section 4.
    ``objective`` other than ``makespan``: re-sequenced by ``sequencing.sequence_plan``
    (``slack``: its makespan bound, a factor of FAR's)."""
    t0 = time.perf_counter()
    if batch.busy:
        timeline, stats = plan_onto(batch, refine_phase=refine_phase, prune=prune)
    else:
        res = far_schedule(batch.tasks, batch.model, batch.gpus, refine_phase, prune)
        if res.timeline is not None and batch.number == 0:
            timeline = res.timeline
        else:
            timeline, _ = time_assignment(res.forest, batch.tasks, res.assign, batch=batch.number)
        stats = {
            "allocations_walked": res.walked,
            "allocations_evaluated": res.evaluated,
            "chosen_allocation": res.chosen_index,
            "phase2_makespan": res.phase2_makespan,
            "refinement_moves": res.moves,
            "refinement_swaps": res.swaps,
            "refinement_pairs": res.pairs,
            "refinement_rebalanced": res.rebalanced,
        }
    stats = {"planning_seconds": time.perf_counter() - t0, **stats}
    plan = to_plan(
        batch.model, batch.tasks, timeline, batch.gpus, "far", stats=stats, start=batch.start
    )
    if objective == "makespan":
        return plan
    # onto busy GPUs Smith's rule per instance only (no ``start``): re-sequencing the
    # whole plan there lengthened MISO streams' makespans by up to 24 % for no better
    # mean completion (the batches of a stream are small and follow one another)
    plan = sequence_plan(plan, batch.tasks, objective, slack=slack)
    return replace(plan, stats={**plan.stats, "planning_seconds": time.perf_counter() - t0})


def make_far(**options) -> BatchPolicy:
    """Registry factory of ``far`` (options: refine_phase, prune, objective, slack)."""
    options = _checked(options)
    return BatchPolicy("far", bind_options(plan_far, "far", options))


POLICIES = {"far": make_far}


def _checked(options: dict) -> dict:
    """``options`` with ``objective`` normalised and ``slack`` a number >= 1 (checked
    when the policy is built, not at its first batch)."""
    out = dict(options)
    if "objective" in out:
        out["objective"] = check_objective(out["objective"])
    if out.get("slack") is not None:
        try:
            slack = float(out["slack"])
        except (TypeError, ValueError):
            raise ValueError(f"slack {out['slack']!r} must be a number >= 1") from None
        if not slack >= 1.0:
            raise ValueError(f"slack {out['slack']!r} must be a factor >= 1 of FAR's makespan")
        out["slack"] = slack
    return out
