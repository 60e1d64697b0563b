"""FAR onto GPUs where a running job has no predicted end (``busy_until`` inf): the
slices it holds are never free. FAR used to prune every allocation (an infinite
backlog in its area bound) and crash on an empty assignment; now it plans around those
slices and leaves out a task that can run nowhere else. The plan leaves out the endless
job's own task (a plan's times are finite); its instance stays an initial one."""

from __future__ import annotations

import math

from slurm_mig.geometry import get_model
from slurm_mig.job import Job
from slurm_mig.plan import validate_plan
from slurm_mig.planner import Batch
from slurm_mig.planner.far import far_schedule
from slurm_mig.planner.far_tree import Availability, Forest
from slurm_mig.planner.registry import get_policy
from slurm_mig.planner.snapshot import ClusterSnapshot, Gpu, Instance

A100 = get_model("A100-40GB")
INF = math.inf
LEAF6 = next(n.slot for n in A100.tree if n.slot.size == 1 and n.slot.placement.start == 6)


def _scaling(tid: str, base: float) -> Job:
    return Job(tid, 0.0, {s: base * (7 / s) ** 0.5 for s in A100.planner_sizes})


def _only(tid: str, size: int, t: float) -> Job:
    return Job(tid, 0.0, {s: (t if s == size else INF) for s in A100.planner_sizes})


def _start(gpus: int, end: float = INF) -> ClusterSnapshot:
    first = Gpu(0, (Instance(LEAF6, "old", 0.0, end),), 0.0)
    return ClusterSnapshot(0.0, A100, (first, *(Gpu(g) for g in range(1, gpus))))


def _placed(res) -> dict[int, int]:
    return {i: v for v, a in enumerate(res.assign) for i in a}


def test_the_area_bound_leaves_out_slices_never_free():
    forest = Forest.build(A100, 1)
    avail = Availability.of(forest, _start(1).gpus, 0.0)
    assert avail.hi[forest.roots[0]] == INF
    assert avail.backlog(forest) == 0.0
    ending = Availability.of(forest, _start(1, 50.0).gpus, 0.0)
    assert ending.backlog(forest) == 50.0


def test_a_slice_never_free_is_planned_around():
    tasks = [_scaling(f"t{i}", 60.0 + i) for i in range(9)]
    start = _start(1)
    res = far_schedule(tasks, A100, 1, start=start.gpus, now=0.0)
    where = _placed(res)
    assert sorted(where) == list(range(9))  # every task planned
    forest = res.forest
    for v in where.values():  # none on the slice the endless job holds
        assert 6 not in forest.covers[v]
    plan = get_policy("far").plan(Batch(tuple(tasks), A100, 1, start=start))
    assert validate_plan(plan.to_json()) == []
    assert math.isfinite(plan.makespan)


def test_a_task_that_can_run_only_on_held_slices_waits():
    tasks = [_only("big", 7, 100.0), *(_scaling(f"s{i}", 50.0) for i in range(4))]
    start = _start(1)
    res = far_schedule(tasks, A100, 1, start=start.gpus, now=0.0)
    assert sorted(_placed(res)) == [1, 2, 3, 4]
    assert res.allocation[1:] == [res.forest.size[_placed(res)[i]] for i in range(1, 5)]
    for objective in ("makespan", "balanced"):
        plan = get_policy("far", objective=objective).plan(
            Batch(tuple(tasks), A100, 1, start=start)
        )
        assert validate_plan(plan.to_json()) == []
        assert sorted(t.id for t in plan.tasks if not t.running) == ["s0", "s1", "s2", "s3"]
    # with a second, idle GPU the whole GPU it needs is there
    plan = get_policy("far").plan(Batch(tuple(tasks), A100, 2, start=_start(2)))
    big = [t for t in plan.tasks if t.id == "big"]
    assert len(big) == 1 and big[0].gpu == 1 and big[0].slot.size == 7


def test_nothing_placeable_and_nothing_at_all_give_empty_plans():
    start = _start(1)
    res = far_schedule([_only("big", 7, 100.0)], A100, 1, start=start.gpus, now=0.0)
    assert res.allocation == [0] and not any(res.assign)
    empty = far_schedule([], A100, 2)
    assert empty.allocation == [] and len(empty.assign) == empty.forest.nodes
    assert not any(empty.assign)
