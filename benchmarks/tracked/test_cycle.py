"""Tracked figures of the planner daemon's pure planning cycle
(``slurm_mig.daemon.cycle.plan_cycle``), built as benchmarks/planner_cycle.py builds it:
1,000 held jobs on 64 A100-40GB GPUs (8 per node). "first" plans them all and releases
the first wave; "steady" is the next cycle, with the first wave running and the plans
kept by the daemon. Quality: the first cycle's makespan over T* (the moldable bound)."""

from __future__ import annotations

import pytest
from benchlib import import_script, quality, timed

from slurm_mig.planner.allotment import moldable_bound

JOBS, GPUS = 1000, 64


@pytest.fixture(scope="module")
def cycle():
    """planner_cycle's module, the first cycle's snapshot and tasks."""
    pc = import_script("planner_cycle")
    snap, tasks = pc.snapshot(JOBS, GPUS, "far")
    return pc, snap, tasks


def test_cycle_first(benchmark, cycle) -> None:
    pc, snap, tasks = cycle
    result = timed(benchmark, lambda: pc.plan_cycle(snap), 15)
    assert len(result.planned) == JOBS
    star = moldable_bound(tasks, pc.MODEL.planner_sizes, GPUS * pc.MODEL.compute_slices)
    benchmark.extra_info["released"] = len(result.released)
    quality(benchmark, makespan_over_bound=result.makespan / star)


def test_cycle_steady(benchmark, cycle) -> None:
    pc, snap, _ = cycle
    steady = pc.applied(snap, pc.plan_cycle(snap))
    result = timed(benchmark, lambda: pc.plan_cycle(steady), 20)
    assert result.actions == ()
