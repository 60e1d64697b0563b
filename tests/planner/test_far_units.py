"""The unit start of large narrow FAR batches (issue 38, ``planner.far_units``): the units
of each GPU's tree, a plan with one task on every leaf and every task once at a size it
runs on, left-alone input, determinism; through ``far_schedule``, a POOR-NARROW plan
shorter than without it and valid, and no unit start where the plan is already close
to the bound."""

from __future__ import annotations

import copy
import json
import math

import pytest

from slurm_mig.geometry import get_model
from slurm_mig.job import Job
from slurm_mig.plan import validate_plan
from slurm_mig.planner import Batch, far_tail, far_units
from slurm_mig.planner.far import far_schedule
from slurm_mig.planner.far_planner import plan_far
from slurm_mig.planner.far_tail import model_ends
from slurm_mig.planner.far_tree import Forest
from slurm_mig.planner.far_units import unit_start, units
from slurm_mig.workload import generate

A100 = get_model("A100-40GB")
INF = math.inf


def test_an_a100s_units_are_the_3g_at_4_and_the_two_2g_at_0_and_2_with_their_leaves():
    # 3g@4 (node 2) over 2g@4's leaves (8, 9) and the 1g at slice 6 (5); 2g@0, 2g@2
    assert units(Forest.build(A100, 1)) == [(2, (5, 8, 9)), (6, (10, 11)), (7, (12, 13))]
    # an A30: its two 2g, each with its two 1g
    assert units(Forest.build(get_model("A30-24GB"), 1)) == [(1, (3, 4)), (2, (5, 6))]


def _check_plan(forest, tasks, assign, leafless=0):
    """Every task once at a size it runs on; one task on every leaf but those of the
    last unit of ``leafless`` GPUs, which have none."""
    T = len(forest.model.tree)
    placed = sorted(i for a in assign for i in a)
    assert placed == list(range(len(tasks)))
    unit = units(forest)
    last = [u for u in unit if u[0] is not None][-1]
    for g in range(forest.gpus):
        for v, leaves in unit:
            for leaf in leaves:
                alone = g < leafless and (v, leaves) == last
                assert len(assign[g * T + leaf]) == (0 if alone else 1)
    for v, a in enumerate(assign):
        for i in a:
            assert tasks[i].times[forest.size[v]] < INF


@pytest.mark.parametrize("n,gpus", [(600, 48), (500, 48)])
def test_the_unit_plan_puts_a_task_on_the_leaves_and_every_task_once_where_it_runs(n, gpus):
    tasks = tuple(generate(n, A100, "POORSCALING", "NARROWTIMES", 0.5, 0))
    forest = Forest.build(A100, gpus)
    before = copy.deepcopy(tasks)
    assign = unit_start(forest, tasks)
    assert assign is not None
    # 600 tasks: 264 to chain on 144 units, more than one each: a tenth of the GPUs
    # run their 2g at slice 2 without leaves; 500: 164 on 144, the same
    chained = n - 7 * gpus
    leafless = int(far_units.LEAFLESS * gpus) if chained > 3 * gpus else 0
    _check_plan(forest, tasks, assign, leafless)
    assert tasks == before
    assert unit_start(forest, tasks) == assign  # deterministic


def test_every_leaf_gets_a_task_where_chains_take_at_most_one_each():
    tasks = tuple(generate(7 * 48 + 3 * 48, A100, "POORSCALING", "NARROWTIMES", 0.5, 0))
    forest = Forest.build(A100, 48)
    assign = unit_start(forest, tasks)
    assert assign is not None
    _check_plan(forest, tasks, assign)


def test_a_task_that_cannot_run_on_a_1g_is_chained_and_one_that_fits_nothing_is_refused():
    forest = Forest.build(A100, 1)
    runs_anywhere = [
        Job(f"t{k}", 0.0, {1: 100.0, 2: 50.0, 3: 40.0, 4: 35.0, 7: 20.0}) for k in range(7)
    ]
    no_1g = Job("big", 0.0, {1: INF, 2: 60.0, 3: 45.0, 4: 40.0, 7: 25.0})
    tasks = (*runs_anywhere, no_1g)
    assign = unit_start(forest, tasks)
    assert assign is not None
    _check_plan(forest, tasks, assign)
    leaves = {n.index for n in A100.tree if not n.children}
    assert all(7 not in assign[v] for v in leaves)  # the 1g-less task is on a chain
    # a task that runs on a whole GPU only fits neither a leaf nor a chain
    only_7g = Job("whole", 0.0, {1: INF, 2: INF, 3: INF, 4: INF, 7: 20.0})
    assert unit_start(forest, (*runs_anywhere, only_7g)) is None


def test_no_unit_plan_for_a_batch_no_larger_than_the_leaves():
    tasks = tuple(generate(7 * 4, A100, "POORSCALING", "NARROWTIMES", 0.5, 0))
    assert unit_start(Forest.build(A100, 4), tasks) is None


def test_a_poor_narrow_plan_with_the_unit_start_is_shorter_and_valid(monkeypatch):
    tasks = tuple(generate(600, A100, "POORSCALING", "NARROWTIMES", 0.5, 0))
    gpus = 48
    res = far_schedule(tasks, A100, gpus)
    monkeypatch.setattr(far_tail, "unit_start", lambda forest, tasks: None)
    without = far_schedule(tasks, A100, gpus)
    monkeypatch.undo()
    assert res.timeline.makespan < 0.98 * without.timeline.makespan
    assert max(model_ends(res.forest, tasks, res.assign)) == pytest.approx(res.timeline.makespan)
    plan = plan_far(Batch(tasks, A100, gpus=gpus))
    assert plan.makespan == pytest.approx(res.timeline.makespan, rel=1e-12)
    errors = validate_plan(json.loads(json.dumps(plan.to_json())), tasks)
    assert errors == [], errors


def test_no_unit_start_where_the_plan_is_already_near_the_bound(monkeypatch):
    built = []

    def spy(forest, tasks):
        built.append(len(tasks))
        return unit_start(forest, tasks)

    monkeypatch.setattr(far_tail, "unit_start", spy)
    tasks = tuple(generate(400, A100, "MIXEDSCALING", "WIDETIMES", 0.0, 0))
    far_schedule(tasks, A100, 32)
    assert built == []
    tasks = tuple(generate(600, A100, "POORSCALING", "NARROWTIMES", 0.5, 0))
    far_schedule(tasks, A100, 48)
    assert built == [600]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_wider_second_repair_of_the_unit_plan_never_lengthens_it(monkeypatch, seed):
    tasks = tuple(generate(400, A100, "POORSCALING", "NARROWTIMES", 0.5, seed))
    res = far_schedule(tasks, A100, 32)
    monkeypatch.setattr(far_tail, "UNIT_WIDE_STEPS", 0)
    once = far_schedule(tasks, A100, 32)
    assert res.timeline.makespan <= once.timeline.makespan
    if seed == 2:  # here the 24 receivers of the first repair had stopped short
        assert res.timeline.makespan < 0.998 * once.timeline.makespan
    errors = validate_plan(
        json.loads(json.dumps(plan_far(Batch(tasks, A100, gpus=32)).to_json())), tasks
    )
    assert errors == [], errors
