"""FAR's second tail repair on large batches (issue 38): from phase 2's shortest schedule
of the targets near the bound (``far_phases._phase2_ladder``'s ``low``), where the plan
still ends over ``far_tail.LOW_GATE`` times the bound."""

from __future__ import annotations

import copy
import json
import math

import pytest

from slurm_mig.geometry import get_model
from slurm_mig.plan import validate_plan
from slurm_mig.planner import Batch, far, far_tail
from slurm_mig.planner.allotment import allotments, ladder
from slurm_mig.planner.far_phases import (
    LADDER_STEPS,
    LOW_TARGET,
    LowStart,
    _groups,
    _phase2_ladder,
    list_schedule,
    list_schedule_up,
)
from slurm_mig.planner.far_planner import plan_far
from slurm_mig.planner.far_rebalance import rebalance
from slurm_mig.planner.far_tree import Forest, time_assignment
from slurm_mig.workload import generate

A100 = get_model("A100-40GB")


def _tasks(scaling="GOODSCALING", times="WIDETIMES", n=1000, seed=0):
    return tuple(generate(n, A100, scaling, times, 0.5, seed))


def test_low_is_the_shortest_schedule_near_the_bound_and_changes_nothing_else():
    tasks, gpus = _tasks(n=600), 48
    forest = Forest.build(A100, gpus)
    low: LowStart = []
    got = _phase2_ladder(tasks, forest, None, low)
    assert got == _phase2_ladder(tasks, forest)
    ((ms, assign),) = low
    assert ms >= got[2]  # phase 2's choice ends no later
    assert sorted(i for a in assign for i in a) == list(range(len(tasks)))
    sizes = A100.planner_sizes
    table = allotments(tasks, sizes)
    bound = table.bound(A100.compute_slices * gpus)
    best = math.inf
    for target in ladder(tasks, sizes, bound, LADDER_STEPS, table.top()):
        if target > LOW_TARGET * bound:
            break
        alloc = table.at(target)
        dur = [tasks[i].times[alloc[i]] for i in range(len(tasks))]
        groups = _groups(alloc, dur, sizes)
        for schedule in (list_schedule, list_schedule_up):
            best = min(best, schedule(forest, groups, dur, len(tasks))[0])
    assert ms == pytest.approx(best, rel=1e-12)


def test_a_repair_aimed_lower_at_first_never_lengthens_and_leaves_its_input():
    tasks, gpus = _tasks(n=600), 48
    forest = Forest.build(A100, gpus)
    low: LowStart = []
    _phase2_ladder(tasks, forest, None, low)
    kept = copy.deepcopy(low[0][1])
    before = time_assignment(forest, tasks, low[0][1])[0].makespan
    bound = allotments(tasks, A100.planner_sizes).bound(A100.compute_slices * gpus)
    got, top, left = rebalance(forest, tasks, low[0][1], bound, first_step=0.05)
    assert low[0][1] == kept and left >= 0
    assert got is not None
    assert sorted(i for a in got for i in a) == list(range(len(tasks)))
    after = time_assignment(forest, tasks, got)[0].makespan
    assert after < before and after == pytest.approx(top, abs=1e-9)
    assert rebalance(forest, tasks, low[0][1], bound, first_step=0.05)[0] == got


@pytest.mark.parametrize("seed", [0, 1])
def test_the_low_repair_shortens_wide_batches_and_plans_stay_valid(monkeypatch, seed):
    tasks, gpus = _tasks(n=1000, seed=seed), 96
    with_low = far.far_schedule(tasks, A100, gpus)
    monkeypatch.setattr(far_tail, "LOW_GATE", math.inf)
    without = far.far_schedule(tasks, A100, gpus)
    monkeypatch.undo()
    assert with_low.timeline.makespan < without.timeline.makespan
    again = far.far_schedule(tasks, A100, gpus)
    assert again.assign == with_low.assign
    plan = plan_far(Batch(tasks, A100, gpus=gpus))
    assert plan.makespan == pytest.approx(with_low.timeline.makespan, rel=1e-12)
    assert with_low.rebalanced and plan.stats["refinement_rebalanced"] is True
    errors = validate_plan(json.loads(json.dumps(plan.to_json())), tasks)
    assert errors == [], errors


@pytest.mark.parametrize(
    "scaling,times,n,gpus,calls",
    [("GOODSCALING", "NARROWTIMES", 600, 48, 0), ("GOODSCALING", "WIDETIMES", 1000, 96, 1)],
)
def test_the_low_repair_runs_only_over_the_gate(monkeypatch, scaling, times, n, gpus, calls):
    tasks = _tasks(scaling, times, n)
    seen = []

    def spy(*args, **kwargs):
        seen.append(args[4])
        return from_low(*args, **kwargs)

    from_low = far_tail._from_low
    monkeypatch.setattr(far_tail, "_from_low", spy)
    far.far_schedule(tasks, A100, gpus)
    assert len(seen) == calls
