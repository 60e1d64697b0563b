"""The tail repairs of large FAR plans (issue 38, ``planner.far_tail``): its GPU ends are
the timeline's, re-packing GPU by GPU never lengthens a GPU, keeps every task once at a
size it can run on, leaves its input alone and is deterministic; the repairs' plans end
no later than their start; a plan re-packed is no longer than without, shorter on a
POOR-NARROW batch, and valid."""

from __future__ import annotations

import copy
import json
import math

import pytest

from slurm_mig.geometry import get_model
from slurm_mig.plan import validate_plan
from slurm_mig.planner import Batch, far_tail
from slurm_mig.planner.allotment import allotments
from slurm_mig.planner.far import far_schedule, gpu_ends, time_assignment
from slurm_mig.planner.far_planner import plan_far
from slurm_mig.planner.far_tail import model_ends, repack, repair_tail
from slurm_mig.workload import generate

A100 = get_model("A100-40GB")
CASES = [
    ("GOODSCALING", "WIDETIMES", 0.5, 600, 48),
    ("POORSCALING", "NARROWTIMES", 0.5, 500, 40),
    ("MIXEDSCALING", "WIDETIMES", 0.0, 400, 32),
]


def _batch(scaling, times, p_sup, n, gpus, seed=0):
    tasks = tuple(generate(n, A100, scaling, times, p_sup, seed))
    base = far_schedule(tasks, A100, gpus, pairs=False)  # phase 2 only: no repair yet
    return tasks, base


def _bound(tasks, gpus):
    return allotments(tasks, A100.planner_sizes).bound(A100.compute_slices * gpus)


@pytest.mark.parametrize("scaling,times,p_sup,n,gpus", CASES)
def test_model_ends_are_the_timelines(scaling, times, p_sup, n, gpus):
    tasks, base = _batch(scaling, times, p_sup, n, gpus)
    timeline, _ = time_assignment(base.forest, tasks, base.assign)
    assert model_ends(base.forest, tasks, base.assign) == pytest.approx(
        gpu_ends(timeline, gpus), abs=1e-9
    )


@pytest.mark.parametrize("scaling,times,p_sup,n,gpus", CASES)
def test_repack_shortens_gpus_only_keeps_every_task_and_leaves_its_input(
    scaling, times, p_sup, n, gpus
):
    tasks, base = _batch(scaling, times, p_sup, n, gpus)
    kept = copy.deepcopy(base.assign)
    before = model_ends(base.forest, tasks, base.assign)
    got, ends, better = repack(base.forest, tasks, base.assign, far_schedule)
    assert base.assign == kept
    assert better > 0
    assert sorted(i for a in got for i in a) == list(range(n))
    for v, a in enumerate(got):
        assert all(tasks[i].times[base.forest.size[v]] < math.inf for i in a)
    timeline, _ = time_assignment(base.forest, tasks, got)
    assert gpu_ends(timeline, gpus) == pytest.approx(ends, abs=1e-9)
    assert all(e <= b + 1e-9 for e, b in zip(ends, before))
    assert sum(e < b - 1e-9 for e, b in zip(ends, before)) == better
    assert repack(base.forest, tasks, base.assign, far_schedule) == (got, ends, better)


@pytest.mark.parametrize("scaling,times,p_sup,n,gpus", CASES)
def test_the_repairs_plans_end_before_their_start_as_timed(scaling, times, p_sup, n, gpus):
    tasks, base = _batch(scaling, times, p_sup, n, gpus)
    kept = copy.deepcopy(base.assign)
    ms = max(model_ends(base.forest, tasks, base.assign))
    found = repair_tail(
        base.forest, tasks, base.assign, ms, _bound(tasks, gpus), schedule=far_schedule
    )
    assert base.assign == kept
    assert found
    for top, _, assign in found:
        assert sorted(i for a in assign for i in a) == list(range(n))
        exact = time_assignment(base.forest, tasks, assign)[0].makespan
        assert exact == pytest.approx(top, abs=1e-9) and top < ms


def test_repacking_shortens_a_poor_narrow_plan_and_it_stays_valid(monkeypatch):
    tasks = tuple(generate(1000, A100, "POORSCALING", "NARROWTIMES", 0.5, 0))
    gpus = 96
    res = far_schedule(tasks, A100, gpus)
    monkeypatch.setattr(far_tail, "REPACK_GATE", math.inf)
    without = far_schedule(tasks, A100, gpus)
    monkeypatch.undo()
    assert res.timeline.makespan < without.timeline.makespan
    assert far_schedule(tasks, A100, gpus).assign == res.assign
    plan = plan_far(Batch(tasks, A100, gpus=gpus))
    assert plan.makespan == pytest.approx(res.timeline.makespan, rel=1e-12)
    errors = validate_plan(json.loads(json.dumps(plan.to_json())), tasks)
    assert errors == [], errors


@pytest.mark.parametrize(
    "scaling,times,p_sup,n,gpus",
    [("GOODSCALING", "NARROWTIMES", 0.5, 1000, 96), ("GOODSCALING", "WIDETIMES", 0.5, 600, 48)],
)
def test_repacking_never_lengthens_a_plan(monkeypatch, scaling, times, p_sup, n, gpus):
    tasks = tuple(generate(n, A100, scaling, times, p_sup, 0))
    res = far_schedule(tasks, A100, gpus)
    monkeypatch.setattr(far_tail, "REPACK_GATE", math.inf)
    monkeypatch.setattr(far_tail, "LOW_PACK_STEPS", 0)
    without = far_schedule(tasks, A100, gpus)
    monkeypatch.undo()
    ms = (
        res.timeline.makespan
        if res.timeline
        else time_assignment(res.forest, tasks, res.assign)[0].makespan
    )
    ms_without = (
        without.timeline.makespan
        if without.timeline
        else time_assignment(without.forest, tasks, without.assign)[0].makespan
    )
    assert ms <= ms_without * (1 + 1e-12)
