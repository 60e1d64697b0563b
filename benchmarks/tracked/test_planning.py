"""Tracked planner figures: FAR on one A100 (n = 15 and 1,000; issue 20's target for
1,000 is 10 ms), FAR on a 5,000-job batch on 512 A100s (target 2 s and 1.10 x the dual
bound), and the exact planner on a small batch. Batches: the FAR paper's generator,
MIXEDSCALING / WIDETIMES, as in plan_speed.py and planner_cycle.py; and POORSCALING /
NARROWTIMES for 5,000 jobs on 512 A100s, issue 38's class whose plans the unit start
(``planner.far_units``) shortens. The quality figure
``makespan_over_bound`` is the plan's makespan over T*, the moldable (dual) lower bound
of ``planner.allotment``, which is never below the area bound."""

from __future__ import annotations

import pytest
from benchlib import quality, timed

from slurm_mig.geometry import get_model
from slurm_mig.plan import Plan
from slurm_mig.planner import Batch
from slurm_mig.planner.allotment import moldable_bound
from slurm_mig.planner.exact import plan_exact
from slurm_mig.planner.far_planner import plan_far
from slurm_mig.workload import generate

MODEL = get_model("A100-40GB")


def batch(n: int, gpus: int = 1, seed: int = 0) -> Batch:
    return Batch(tuple(generate(n, MODEL, "MIXEDSCALING", "WIDETIMES", 0.0, seed)), MODEL, gpus)


def narrow_batch(n: int, gpus: int, seed: int = 0) -> Batch:
    """far_scale.py's POOR-NARROW batch (half the tasks superlinear)."""
    return Batch(tuple(generate(n, MODEL, "POORSCALING", "NARROWTIMES", 0.5, seed)), MODEL, gpus)


def bound(b: Batch) -> float:
    return moldable_bound(b.tasks, MODEL.planner_sizes, b.gpus * MODEL.compute_slices)


def figures(plan: Plan, b: Batch) -> dict[str, float]:
    """Makespan over T*, and the mean completion time (s) of the batch's tasks."""
    ends = [t.end for t in plan.tasks]
    return {
        "makespan_over_bound": plan.makespan / bound(b),
        "completion_mean_s": sum(ends) / len(ends),
    }


@pytest.mark.parametrize("n", [15, 1000])
def test_far_one_gpu(benchmark, n: int) -> None:
    b = batch(n)
    plan = timed(benchmark, lambda: plan_far(b), 200 if n < 100 else 40)
    assert len(plan.tasks) == n
    quality(benchmark, **figures(plan, b))


def test_far_5000_jobs_512_gpus(benchmark) -> None:
    b = batch(5000, 512)
    plan = timed(benchmark, lambda: plan_far(b), 20)
    assert len(plan.tasks) == 5000
    quality(benchmark, **figures(plan, b))


def test_far_5000_poor_narrow_jobs_512_gpus(benchmark) -> None:
    b = narrow_batch(5000, 512)
    plan = timed(benchmark, lambda: plan_far(b), 10)
    assert len(plan.tasks) == 5000
    quality(benchmark, **figures(plan, b))


def test_exact_10_tasks(benchmark) -> None:
    """Seed 0 of exact_gap.py's first case: proven optimal in about 1,100 search nodes."""
    b = batch(10)
    plan = timed(benchmark, lambda: plan_exact(b, time_budget=10.0), 20)
    benchmark.extra_info["optimal"] = bool(plan.stats.get("optimal"))
    quality(
        benchmark,
        makespan_over_bound=plan.makespan / bound(b),
        search_nodes=plan.stats.get("explored", 0),
    )
