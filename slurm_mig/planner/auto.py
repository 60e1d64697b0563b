"""The default batch planner: FAR, and the exact search seeded with FAR's assignment
where a batch is small enough to search within a budget (``auto_budget``)."""

from __future__ import annotations

import time
from dataclasses import replace
from functools import partial

from ..plan import Plan
from .batch import Batch
from .exact_search import _far, _solve
from .far import SCALE_TASKS, Forest, time_assignment
from .far_planner import plan_far
from .registry import BatchPolicy
from .timeline import retime_onto, to_plan

__all__ = ["AUTO_MAX_TASKS", "POLICIES", "auto_budget", "make_auto", "plan_auto"]


# Where the default planner adds the exact search. Measured by benchmarks/exact_gap.py
# (A100-40GB, WIDETIMES, 2-core machine): with a 10 s budget the search proves the
# optimum of every batch of 8 and 10 tasks (median 0.02-0.1 s, 95th percentile
# 0.1-0.6 s) and of 49 in 50 batches of 12 (median 0.2 s); beyond 12 tasks proofs take
# seconds. Within these budgets auto lands on the optimum of nearly every batch of 10
# (mean gap 0.01 %); when the budget runs out it keeps the best assignment found.
AUTO_MAX_TASKS = 12


def auto_budget(n: int) -> float:
    """Seconds of exact search ``plan_auto`` spends on a batch of ``n`` tasks (0: none)."""
    if n > AUTO_MAX_TASKS:
        return 0.0
    if n <= 8:
        return 0.25
    if n <= 10:
        return 0.5
    return 1.0


def plan_auto(batch: Batch) -> Plan:
    """The default planner: FAR, and on small batches (``auto_budget``) the exact search
    seeded with FAR's assignment; the better of the two (FAR on a tie).

    ``stats["winner"]`` says which ("far" or "exact"); with the search, ``optimal``
    says whether it proved its assignment optimal within the budget.
    """
    if batch.busy:
        return _onto(batch, plan_auto, "auto")
    t0 = time.perf_counter()
    tasks, model, gpus = batch.tasks, batch.model, batch.gpus
    if len(tasks) >= SCALE_TASKS:  # FAR's ladder; no exact search on batches this large
        plan = plan_far(batch)
        return replace(plan, planner="auto", stats={**plan.stats, "winner": "far"})
    far_assign, far_ms = _far(tasks, model, gpus)
    forest = Forest.build(model, gpus)
    timeline, _ = time_assignment(forest, tasks, far_assign)
    budget = auto_budget(len(tasks))
    stats: dict = {"far_makespan": far_ms, "exact_budget": budget, "winner": "far"}
    if budget > 0.0 and tasks:
        forest, assign, optimal, explored = _solve(tasks, model, gpus, budget, far_assign)
        exact_tl, _ = time_assignment(forest, tasks, assign)
        stats.update(exact_makespan=exact_tl.makespan, optimal=optimal, explored=explored)
        if exact_tl.makespan < far_ms:
            timeline = exact_tl
            stats["winner"] = "exact"
    stats["planning_seconds"] = time.perf_counter() - t0
    return to_plan(model, tasks, timeline, gpus, "auto", stats=stats)


def _plan_auto_for(batch: Batch, objective: str, slack: float | None) -> Plan:
    """``plan_auto``'s plan re-sequenced for ``objective`` (``planner.sequencing``)."""
    from .sequencing import sequence_plan

    t0 = time.perf_counter()
    plan = sequence_plan(plan_auto(batch), batch.tasks, objective, slack=slack)
    seconds = plan.stats.get("planning_seconds", 0.0) + time.perf_counter() - t0
    return replace(plan, stats={**plan.stats, "planning_seconds": seconds})


def _onto(batch: Batch, plan_idle, name: str) -> Plan:
    """Plan onto busy GPUs: FAR onto them, or ``plan_idle``'s plan for idle GPUs
    appended after their work (small batches only), whichever ends sooner."""
    t0 = time.perf_counter()
    far = plan_far(batch)
    best, stats = far, {**far.stats, "winner": "far"}
    if len(batch.tasks) <= AUTO_MAX_TASKS:
        assert batch.start is not None
        idle = plan_idle(replace(batch, start=None))
        tl = retime_onto(idle, batch.tasks, batch.start, batch.number)
        alt = to_plan(batch.model, batch.tasks, tl, batch.gpus, name, start=batch.start)
        stats[f"{name}_onto_makespan"] = alt.makespan
        if alt.makespan < far.makespan - 1e-9:
            best, stats = alt, {**stats, **idle.stats, "winner": name}
    stats["planning_seconds"] = time.perf_counter() - t0
    return replace(best, planner=name, stats=stats)


def make_auto(**options) -> BatchPolicy:
    """Registry factory of ``auto`` (options objective, slack: ``planner.sequencing``;
    default objective ``makespan``)."""
    objective = options.pop("objective", "makespan")
    slack = options.pop("slack", None)
    if options:
        raise TypeError(f"unexpected argument {next(iter(options))!r}")
    from .far_planner import _checked

    checked = _checked({"objective": objective, "slack": slack})
    if checked["objective"] == "makespan":
        return BatchPolicy("auto", plan_auto)
    return BatchPolicy("auto", partial(_plan_auto_for, **checked))


POLICIES = {"auto": make_auto}
