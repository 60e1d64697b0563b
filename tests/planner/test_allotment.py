"""The moldable lower bound T* and canonical allotments: T* equals a brute-force
bisection, lies above the area and longest-task bounds, and below every plan."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_mig.geometry import get_model
from slurm_mig.job import Job
from slurm_mig.plan import lower_bound
from slurm_mig.planner import Batch, get_planner
from slurm_mig.planner.allotment import (
    Allotments,
    Staircase,
    _moldable_bound_np,
    allotments,
    canonical_allotment,
    canonical_size,
    ladder,
    moldable_bound,
)
from slurm_mig.workload import generate

A100 = get_model("A100-40GB")
SIZES = A100.planner_sizes


def brute(tasks, slices, backlog=0.0):
    """T* by bisection on the definition."""
    lo = max(min(t.times.values()) for t in tasks)

    def area(x):
        return (
            sum(min(s * v for s, v in t.times.items() if v <= x) for t in tasks) + backlog
        ) / slices

    if area(lo) <= lo:
        return lo
    hi = lo + area(lo) + 1.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if area(mid) <= mid:
            hi = mid
        else:
            lo = mid
    return hi


@st.composite
def batches(draw):
    n = draw(st.integers(1, 40))
    seed = draw(st.integers(0, 10_000))
    scaling = draw(st.sampled_from(["MIXEDSCALING", "POORSCALING", "GOODSCALING"]))
    tasks = generate(n, A100, scaling, "WIDETIMES", draw(st.sampled_from([0.0, 0.5])), seed)
    gpus = draw(st.integers(1, 8))
    backlog = draw(st.sampled_from([0.0, 0.0, 50.0]))
    return tasks, gpus, backlog


@settings(max_examples=150, deadline=None)
@given(batches())
def test_the_bound_is_the_definition_and_above_the_simple_bounds(case):
    tasks, gpus, backlog = case
    slices = 7 * gpus
    got = moldable_bound(tasks, SIZES, slices, backlog)
    assert got == pytest.approx(brute(tasks, slices, backlog), rel=1e-9)
    assert got >= lower_bound(tasks, A100, gpus) * (1 - 1e-12)
    assert got >= max(min(t.times.values()) for t in tasks) * (1 - 1e-12)


@settings(max_examples=40, deadline=None)
@given(batches())
def test_no_plan_beats_the_bound(case):
    tasks, gpus, _ = case
    bound = moldable_bound(tasks, SIZES, 7 * gpus)
    for name in ("far", "auto"):
        plan = get_planner(name)(Batch(tuple(tasks), A100, gpus))
        assert plan.makespan >= bound * (1 - 1e-9)


def test_wide_clusters_are_bound_by_the_longest_task_not_the_area():
    tasks = generate(2000, A100, "MIXEDSCALING", "WIDETIMES", 0.0, 0)
    gpus = 200
    area = lower_bound(tasks, A100, gpus)
    bound = moldable_bound(tasks, SIZES, 7 * gpus)
    assert bound > 1.1 * area  # the area bound is unreachable here
    longest = max(min(t.times.values()) for t in tasks)
    assert longest <= bound <= 1.05 * longest


def test_canonical_size_is_the_least_work_within_the_target():
    t = {1: 100.0, 2: 60.0, 3: 45.0, 4: 40.0, 7: 30.0}  # work 100, 120, 135, 160, 210
    assert canonical_size(t, SIZES, 1000.0) == 1
    assert canonical_size(t, SIZES, 70.0) == 2
    assert canonical_size(t, SIZES, 44.0) == 4
    assert canonical_size(t, SIZES, 10.0) == 7  # none within: the fastest
    tie = {1: 10.0, 2: 5.0, 3: math.inf, 4: math.inf, 7: math.inf}  # equal work
    assert canonical_size(tie, SIZES, 100.0) == 1  # the smaller size on a tie


@settings(max_examples=60, deadline=None)
@given(batches(), st.floats(1.0, 200.0))
def test_the_vectorised_allotments_are_the_canonical_ones(case, target):
    tasks = case[0]
    assert Allotments(tasks, SIZES).at(target) == canonical_allotment(tasks, SIZES, target)


@settings(max_examples=80, deadline=None)
@given(batches(), st.floats(1.0, 200.0))
def test_the_pure_python_staircase_is_the_numpy_table(case, target):
    """Same allotments, T* and ladder top with or without numpy (small batches skip
    its import)."""
    tasks, gpus, backlog = case
    stairs, table = Staircase(tasks, SIZES), Allotments(tasks, SIZES)
    assert stairs.at(target) == table.at(target) == canonical_allotment(tasks, SIZES, target)
    star = stairs.bound(7 * gpus, backlog)
    assert star == pytest.approx(_moldable_bound_np(tasks, SIZES, 7 * gpus, backlog), rel=1e-12)
    assert stairs.at(star) == table.at(star)
    assert stairs.top() == table.top()


def test_staircase_ties_and_sizes_a_task_cannot_use():
    tie = Job("tie", 0.0, {1: 10.0, 2: 5.0, 3: math.inf, 4: math.inf, 7: 2.0})  # work 10, 10, 14
    stairs = Staircase([tie], SIZES)
    assert stairs.at(1.0) == [7]  # none within: the fastest
    assert stairs.at(5.0) == [2]
    assert stairs.at(10.0) == [1]  # the smaller size of equal work
    assert stairs.bound(7) == pytest.approx(2.0)  # on 7g: 14 slice-seconds by 2 s


def test_one_table_per_batch():
    tasks = tuple(generate(20, A100, "MIXEDSCALING", "WIDETIMES", 0.0, 1))
    assert allotments(tasks, SIZES) is allotments(tasks, SIZES)
    assert allotments(list(tasks), SIZES) is not allotments(list(tasks), SIZES)


def test_the_ladder_runs_from_the_bound_to_the_least_work_allotment():
    tasks = generate(300, A100, "MIXEDSCALING", "WIDETIMES", 0.0, 3)
    bound = moldable_bound(tasks, SIZES, 7 * 30)
    steps = ladder(tasks, SIZES, bound, 8)
    assert steps[0] == bound and steps == sorted(steps) and len(steps) <= 10
    least = [canonical_size(t.times, SIZES, math.inf) for t in tasks]
    assert canonical_allotment(tasks, SIZES, steps[-1]) == least
    one = [Job("a", 0.0, {1: 5.0, 2: 5.0, 3: 5.0, 4: 5.0, 7: 5.0})]
    assert ladder(one, SIZES, 5.0) == [5.0]
