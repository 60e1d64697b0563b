"""FAR at scale (issue 20, item 4): single-GPU plans unchanged by the pure-Python
allotments, the bottom-up list schedule and the refinement across GPUs (valid plans,
never worse than before), and the cheap makespan bounds on hand-checked cases."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from slurm_mig.cli.plan import format_plan
from slurm_mig.geometry import get_model
from slurm_mig.job import Job
from slurm_mig.plan import lower_bound, validate_plan
from slurm_mig.planner import Batch
from slurm_mig.planner.bounds import BOUND_NAMES, makespan_bounds, tightest_bound
from slurm_mig.planner.concat import plan_batches
from slurm_mig.planner.far import Forest, far_schedule, gpu_ends, refine_gpus, time_assignment
from slurm_mig.planner.far_phases import _groups, list_schedule, list_schedule_up
from slurm_mig.planner.far_planner import plan_far
from slurm_mig.planner.timeline import to_plan
from slurm_mig.workload import generate

A100 = get_model("A100-40GB")
SIZES = A100.planner_sizes
INF = math.inf


def _valid(plan, tasks):
    errors = validate_plan(json.loads(json.dumps(plan.to_json())), tasks)
    assert errors == [], errors


def _timed_plan(forest, tasks, assign):
    timeline, _ = time_assignment(forest, tasks, assign)
    return to_plan(A100, tasks, timeline, forest.gpus, "far")


def pinned(tid: str, size: int, t: float) -> Job:
    return Job(tid, 0.0, {s: (t if s == size else INF) for s in SIZES})


# ---------------------------------------------------------------------------
# The same plans as before (makespans of the release before this change)

BEFORE_ONE_GPU = [
    (1000, "MIXEDSCALING", "WIDETIMES", 0.0, 0, 7427.611981182392),
    (1000, "GOODSCALING", "NARROWTIMES", 0.5, 1, 11778.625925651955),
    (300, "POORSCALING", "WIDETIMES", 0.5, 0, 2145.931986947616),
]


@pytest.mark.parametrize("n,scaling,times,p_sup,seed,makespan", BEFORE_ONE_GPU)
def test_one_gpu_plans_are_the_ones_before(n, scaling, times, p_sup, seed, makespan):
    tasks = tuple(generate(n, A100, scaling, times, p_sup, seed))
    plan = plan_far(Batch(tasks, A100))
    assert plan.makespan == pytest.approx(makespan, rel=1e-12)


BEFORE_MANY_GPUS = [
    (600, 16, "GOODSCALING", "NARROWTIMES", 0.5, 0, 453.52021751896416),
    (2000, 40, "MIXEDSCALING", "NARROWTIMES", 0.5, 1, 656.4148743053235),
]


@pytest.mark.parametrize("n,gpus,scaling,times,p_sup,seed,before", BEFORE_MANY_GPUS)
def test_many_gpu_plans_are_valid_and_no_worse_than_before(
    n, gpus, scaling, times, p_sup, seed, before
):
    tasks = tuple(generate(n, A100, scaling, times, p_sup, seed))
    plan = plan_far(Batch(tasks, A100, gpus=gpus))
    _valid(plan, tasks)
    assert plan.makespan <= before * (1 + 1e-12)


# ---------------------------------------------------------------------------
# Bottom-up list scheduling


def _long_small_short_big():
    """Seven long 1g tasks and two short 7g ones on two A100s: top-down runs the 7g
    tasks first on both GPUs and the 1g ones after; bottom-up fills one GPU with the
    1g tasks and runs the 7g ones on the other."""
    return [pinned(f"s{k}", 1, 10.0) for k in range(7)] + [
        pinned(f"b{k}", 7, 5.0) for k in range(2)
    ]


def test_bottom_up_by_hand():
    tasks = _long_small_short_big()
    forest = Forest.build(A100, 2)
    dur = [t.times[1] if t.id.startswith("s") else t.times[7] for t in tasks]
    alloc = [1] * 7 + [7] * 2
    down, _ = list_schedule(forest, _groups(alloc, dur, SIZES), dur, len(tasks))
    up, assign = list_schedule_up(forest, _groups(alloc, dur, SIZES), dur, len(tasks))
    assert down > 15.0  # a 7g task, then the 1g tasks
    assert up < 12.0  # ten seconds and seven creates (1.12 s)
    assert sorted(i for a in assign for i in a) == list(range(len(tasks)))
    plan = _timed_plan(forest, tasks, assign)
    _valid(plan, tasks)
    assert plan.makespan == pytest.approx(up, abs=0.5)  # read backwards: as long


def test_bottom_up_stop_at():
    tasks = _long_small_short_big()
    forest = Forest.build(A100, 2)
    dur = [10.0] * 7 + [5.0] * 2
    groups = _groups([1] * 7 + [7] * 2, dur, SIZES)
    assert list_schedule_up(forest, groups, dur, len(tasks), stop_at=5.0) is None


def test_the_ladder_takes_the_bottom_up_schedule_where_it_is_shorter():
    tasks = _long_small_short_big()
    res = far_schedule(tasks, A100, 2, scale=True)
    plan = _timed_plan(res.forest, tasks, res.assign)
    _valid(plan, tasks)
    assert plan.makespan < 12.0


# ---------------------------------------------------------------------------
# Refinement across GPUs


def test_refine_gpus_moves_work_off_the_gpu_that_ends_last():
    tasks = list(generate(40, A100, "MIXEDSCALING", "WIDETIMES", 0.0, 3))
    forest = Forest.build(A100, 3)
    one = far_schedule(tasks, A100, 1)  # everything on GPU 0 of three
    T = len(A100.tree)
    assign = [list(a) for a in one.assign] + [[] for _ in range(2 * T)]
    timeline, _ = time_assignment(forest, tasks, assign)
    ends = gpu_ends(timeline, 3)
    assert ends[1] == ends[2] == 0.0
    new, pairs, _ = refine_gpus(forest, tasks, assign, ends)
    assert pairs >= 1
    assert sorted(i for a in new for i in a) == list(range(len(tasks)))
    plan = _timed_plan(forest, tasks, new)
    _valid(plan, tasks)
    assert plan.makespan < 0.75 * timeline.makespan
    assert min(gpu_ends(time_assignment(forest, tasks, new)[0], 3)) > 0.0


def test_refine_gpus_keeps_a_balanced_plan():
    tasks = [pinned(f"t{k}", 7, 10.0) for k in range(4)]
    forest = Forest.build(A100, 2)
    assign = [[] for _ in range(forest.nodes)]
    assign[0], assign[len(A100.tree)] = [0, 1], [2, 3]
    timeline, _ = time_assignment(forest, tasks, assign)
    new, pairs, _ = refine_gpus(forest, tasks, assign, gpu_ends(timeline, 2))
    assert pairs == 0
    assert new == assign


def test_scale_refinement_never_worse_than_without():
    tasks = tuple(generate(600, A100, "GOODSCALING", "NARROWTIMES", 0.5, 2))
    with_it = far_schedule(tasks, A100, 16)
    without = far_schedule(tasks, A100, 16, refine_phase=False)
    a = time_assignment(with_it.forest, tasks, with_it.assign)[0].makespan
    b = time_assignment(without.forest, tasks, without.assign)[0].makespan
    assert a <= b * (1 + 1e-12)
    assert with_it.timeline is not None and with_it.timeline.makespan == pytest.approx(a)
    for i, s in enumerate(with_it.allocation):  # the allocation follows the moves
        assert any(i in with_it.assign[v] for v in with_it.forest.by_size[s])


# ---------------------------------------------------------------------------
# Bounds, by hand


def test_area_bound_wins_on_a_full_gpu():
    tasks = [pinned("big", 7, 10.0), pinned("small", 1, 1.0)]
    got = makespan_bounds(tasks, A100)
    assert got["area"] == pytest.approx(71 / 7)
    assert got["longest"] == pytest.approx(10.0)
    assert got["dual"] == pytest.approx(71 / 7)
    value, name, _ = tightest_bound(tasks, A100)
    assert (value, name) == (pytest.approx(71 / 7), "area")  # a tie: the first name


def test_longest_task_bound_on_two_gpus():
    tasks = [Job("t", 0.0, {1: 100.0, 2: 60.0, 3: 45.0, 4: 40.0, 7: 30.0})]
    got = makespan_bounds(tasks, A100, gpus=2)
    assert got["area"] == pytest.approx(100 / 14)
    assert got["longest"] == pytest.approx(30.0)
    assert got["dual"] == pytest.approx(30.0)
    assert tightest_bound(tasks, A100, 2)[:2] == (pytest.approx(30.0), "longest")


def test_dual_bound_above_both():
    """Two tasks with least work on 1g (70 s) but only 7g within 28 s: each must run
    on 4g or 7g (work 100 or 98) for a makespan below 30, so T* = 196 / 7 = 28."""
    times = {1: 70.0, 2: 40.0, 3: 30.0, 4: 25.0, 7: 14.0}
    tasks = [Job("a", 0.0, dict(times)), Job("b", 0.0, dict(times))]
    got = makespan_bounds(tasks, A100)
    assert got == {
        "area": pytest.approx(20.0),
        "longest": pytest.approx(14.0),
        "dual": pytest.approx(28.0),
    }
    assert tightest_bound(tasks, A100)[:2] == (pytest.approx(28.0), "dual")
    plan = plan_far(Batch(tuple(tasks), A100))
    assert plan.makespan >= 28.0


def test_bounds_never_above_a_plan():
    for seed in range(5):
        tasks = tuple(generate(30, A100, "GOODSCALING", "WIDETIMES", 0.5, seed))
        for gpus in (1, 4):
            value, name, bounds = tightest_bound(tasks, A100, gpus)
            assert name in BOUND_NAMES and value == max(bounds.values())
            assert bounds["area"] == pytest.approx(lower_bound(tasks, A100, gpus))
            assert bounds["dual"] >= max(bounds["area"], bounds["longest"]) * (1 - 1e-12)
            assert plan_far(Batch(tasks, A100, gpus=gpus)).makespan >= value * (1 - 1e-12)


def test_plan_json_names_its_bound_and_keeps_the_old_keys():
    times = {1: 70.0, 2: 40.0, 3: 30.0, 4: 25.0, 7: 14.0}
    tasks = [Job("a", 0.0, dict(times)), Job("b", 0.0, dict(times))]
    plan = plan_batches([tasks[:1], tasks[1:]], A100, 1)
    data = plan.to_json()
    assert {"makespan", "lower_bound", "rho", "tasks", "reconfigurations"} <= set(data)
    assert data["bound"] == "dual" and data["lower_bound"] == pytest.approx(28.0)
    assert data["bounds"]["area"] == pytest.approx(20.0)
    assert data["rho"] == pytest.approx(plan.makespan / 28.0, rel=1e-6)
    assert plan.area_rho == pytest.approx(plan.makespan / 20.0)
    _valid(plan, tasks)


def test_plan_prints_rho_against_the_named_bound():
    data = {
        "tasks": [],
        "reconfigurations": [],
        "makespan": 30.0,
        "lower_bound": 28.0,
        "bound": "dual",
        "gpus": 1,
        "gpu_model": "A100-40GB",
    }
    rho = next(ln for ln in format_plan(data, 0.001).splitlines() if ln.startswith("rho"))
    assert rho.split(None, 1)[1] == "1.071 (vs the dual bound)"
    del data["bound"]  # a plan JSON from before: no name
    rho = next(ln for ln in format_plan(data, 0.001).splitlines() if ln.startswith("rho"))
    assert rho.split(None, 1)[1] == "1.071"


def test_a_thousand_tasks_on_one_gpu_need_no_numpy():
    """The slowdown of issue 20 was numpy's import (60-90 ms) inside the first plan of a
    process; small batches plan in pure Python."""
    code = (
        "import sys\n"
        "from slurm_mig.geometry import get_model\n"
        "from slurm_mig.planner import Batch\n"
        "from slurm_mig.planner.far_planner import plan_far\n"
        "from slurm_mig.workload import generate\n"
        "m = get_model('A100-40GB')\n"
        "plan_far(Batch(tuple(generate(1000, m, 'MIXEDSCALING', 'WIDETIMES', 0.0, 0)), m))\n"
        "print('numpy' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
