"""Jobs of several slices: the regions that hold a gang and where its instances go."""

from __future__ import annotations

import math

import pytest

from slurm_mig.geometry import (
    GIB,
    MAX_TASKS,
    MODELS,
    Placement,
    can_coexist,
    gang_placements,
    gang_times,
    get_model,
    most_tasks,
    region_sizes,
    task_size,
)
from slurm_mig.job import Job
from slurm_mig.planner.cluster_snapshot import runnable_sizes

A100 = get_model("A100-40GB")


def test_a100_regions_hold_gangs_as_its_placements_allow():
    assert region_sizes(A100, 1) == {1: 1, 2: 2, 3: 3, 4: 4, 7: 7}
    assert region_sizes(A100, 2) == {2: 1, 3: 1, 4: 2, 7: 3}
    assert region_sizes(A100, 3) == {3: 1, 4: 1, 7: 2}
    assert region_sizes(A100, 4) == {4: 1, 7: 1}
    assert region_sizes(A100, 7) == {7: 1}
    assert region_sizes(A100, 8) == {}
    assert task_size(A100, 4, 2) == 2 and task_size(A100, 1, 2) is None
    assert task_size(A100, 5, 1) is None


def test_a_gang_goes_to_the_first_placements_inside_its_region():
    three = Placement(4, 4)  # the 3g node of the A100's tree
    assert gang_placements(A100, three, 1, 3) == (Placement(4, 1), Placement(5, 1), Placement(6, 1))
    assert gang_placements(A100, three, 1, 4) is None
    assert gang_placements(A100, Placement(0, 8), 3, 2) == (Placement(0, 4), Placement(4, 4))
    assert gang_placements(A100, Placement(0, 8), 2, 4) is None  # three 2g at most
    assert gang_placements(A100, Placement(0, 4), 5, 1) is None  # no such size
    assert gang_placements(A100, Placement(0, 8), 1, 0) is None


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_region_of_every_model_holds_its_gang_legally(name):
    model = get_model(name)
    for n in range(1, MAX_TASKS + 1):
        for region, size in region_sizes(model, n).items():
            assert size <= region
            for node in (t for t in model.tree if t.size == region):
                got = gang_placements(model, node.placement, size, n)
                assert got is not None and len(got) == n
                assert can_coexist(model, got)
                assert all(
                    node.placement.start <= p.start and p.end <= node.placement.end for p in got
                )
                assert all(p.size == model.profile_for_size(size).memory_slices for p in got)


def test_a_gangs_times_are_one_tasks_times_on_its_task_size():
    task = {1: 400.0, 2: 210.0, 3: 150.0, 4: 120.0, 7: 70.0}
    assert gang_times(A100, task, 2) == {2: 400.0, 3: 400.0, 4: 210.0, 7: 150.0}
    assert gang_times(A100, task, 1) == task
    assert gang_times(A100, {2: 210.0}, 2) == {4: 210.0}  # a task that runs on 2g only


def test_a_gang_runs_on_the_regions_whose_task_size_has_its_memory():
    times = gang_times(A100, {1: 400.0, 2: 210.0, 3: 150.0, 4: 120.0, 7: 70.0}, 2)
    gang = Job("g", 0.0, times, tasks=2)
    assert runnable_sizes(gang, A100) == (2, 3, 4, 7)
    big = Job("g", 0.0, times, memory=8 * GIB, tasks=2)  # more than a 1g has
    assert runnable_sizes(big, A100) == (4, 7)
    assert runnable_sizes(Job("g", 0.0, times, tasks=MAX_TASKS), A100) == ()
    single = Job("s", 0.0, {1: 1.0, 7: math.inf})
    assert runnable_sizes(single, A100) == (1,)


def test_most_tasks_is_the_largest_count_some_region_holds_on_every_model():
    for model in MODELS.values():
        n = most_tasks(model)
        assert region_sizes(model, n), model.name
        assert all(not region_sizes(model, k) for k in range(n + 1, MAX_TASKS + 1)), model.name
    assert most_tasks(get_model("A100-40GB")) == 7  # seven 1g.5gb
    assert most_tasks(get_model("A30-24GB")) == 4  # four 1g.6gb
