"""Baselines of the FAR paper (Section 6.5): FIXPART(P), FIXPARTBEST, MISO-OPT."""

from __future__ import annotations

import math

import pytest
from support import shared_file

from slurm_mig.geometry import Placement, Slot, get_model, partition_name, valid_partitions
from slurm_mig.job import Job
from slurm_mig.plan import validate_plan
from slurm_mig.planner import Batch, UnknownPlanner
from slurm_mig.planner.far_baselines import (
    fixpart_planner,
    plan_fixpart,
    plan_fixpart_best,
    plan_miso_opt,
)
from slurm_mig.workload import generate, load_tasks

INF = math.inf
A30 = get_model("A30-24GB")
A100 = get_model("A100-40GB")
H100 = get_model("H100-80GB")


def task(tid: str, times: dict[int, float], model=A100) -> Job:
    """A task with ``times`` given for some sizes and 1000 s on the others."""
    return Job(tid, 0.0, {s: times.get(s, 1000.0) for s in model.planner_sizes})


def by_id(plan):
    return {t.id: t for t in plan.tasks}


def slot(start: int, mem: int, size: int) -> Slot:
    return Slot(Placement(start, mem), size)


# ---------------------------------------------------------------------------
# FIXPART(P)


def test_fixpart_7_runs_tasks_one_after_another_in_fifo_order():
    tasks = (
        task("a", {7: 5.0}),
        task("b", {7: 2.5}),
        task("c", {7: 1.25}),
    )
    plan = fixpart_planner("7")(Batch(tasks, A100))
    assert plan.planner == "fixpart(7)"
    assert plan.makespan == pytest.approx(5.0 + 2.5 + 1.25)
    got = by_id(plan)
    assert [(got[i].start, got[i].end) for i in "abc"] == [(0.0, 5.0), (5.0, 7.5), (7.5, 8.75)]
    assert plan.reconfigurations == ()
    assert plan.initial_instances == ((0, slot(0, 8, 7)),)
    assert validate_plan(plan.to_json(), tasks) == []


def test_fixpart_fifo_goes_to_the_instance_that_frees_first():
    # 4-3: the 4g at 0:4 (left) and the 3g at 4:4 (right)
    tasks = (
        task("a", {4: 10.0, 3: 12.0}),  # both free at 0: leftmost, 4g [0, 10]
        task("b", {4: 3.0, 3: 5.0}),  # 3g free at 0: [0, 5]
        task("c", {4: 4.0, 3: 1.0}),  # 3g free at 5 < 10: [5, 6]
        task("d", {4: 2.0, 3: 8.0}),  # 3g free at 6 < 10: [6, 14]
        task("e", {4: 7.0, 3: 1.0}),  # 4g free at 10 < 14: [10, 17]
        task("f", {4: 9.0, 3: 2.0}),  # 3g free at 14 < 17: [14, 16]
    )
    plan = plan_fixpart(Batch(tasks, A100), "4-3")
    got = by_id(plan)
    four, three = slot(0, 4, 4), slot(4, 4, 3)
    want = {
        "a": (four, 0, 10),
        "b": (three, 0, 5),
        "c": (three, 5, 6),
        "d": (three, 6, 14),
        "e": (four, 10, 17),
        "f": (three, 14, 16),
    }
    assert {i: (t.slot, t.start, t.end) for i, t in got.items()} == want
    assert plan.makespan == 17.0
    assert plan.stats["partition"] == "4-3"
    assert plan.reconfigurations == ()
    assert validate_plan(plan.to_json(), tasks) == []


def test_fixpart_skips_instances_where_a_task_cannot_run():
    tasks = (
        task("a", {4: 10.0, 3: 12.0}),
        task("b", {4: INF, 3: 5.0}),
        task("c", {4: INF, 3: 1.0}),  # 4g frees at 10, but c cannot run there
    )
    got = by_id(plan_fixpart(Batch(tasks, A100), "4-3"))
    assert got["c"].slot == slot(4, 4, 3)
    assert (got["c"].start, got["c"].end) == (5.0, 6.0)


def test_fixpart_ties_go_to_the_lower_gpu_and_the_partition_is_replicated():
    tasks = (task("a", {7: 4.0}), task("b", {7: 3.0}), task("c", {7: 1.0}), task("d", {7: 1.0}))
    plan = fixpart_planner("7")(Batch(tasks, A100, gpus=2))
    got = by_id(plan)
    assert [got[i].gpu for i in "abcd"] == [0, 1, 1, 0]  # c: gpu1 frees at 3 < 4; d: tie at 4
    assert got["d"].start == 4.0
    assert plan.initial_instances == ((0, slot(0, 8, 7)), (1, slot(0, 8, 7)))
    assert plan.reconfigurations == ()
    assert validate_plan(plan.to_json(), tasks) == []


def test_fixpart_rejects_a_partition_some_task_cannot_use():
    tasks = (task("a", {1: 5.0}), task("b", {1: 2.0, 7: INF}))
    with pytest.raises(ValueError, match=r"task 'b'.*partition 7 of A100-40GB"):
        fixpart_planner("7")(Batch(tasks, A100))


def test_fixpart_bad_spec_names_the_valid_partitions_of_the_model():
    planner = fixpart_planner("4-4")  # syntactically fine; checked against the model
    with pytest.raises(UnknownPlanner) as err:
        planner(Batch((task("a", {}),), A100))
    msg = str(err.value)
    assert "A100-40GB" in msg and "4-4" in msg
    for p in valid_partitions("A100-40GB"):
        assert partition_name(p) in msg
    # 4-3 is an A100 partition but not an A30 one
    with pytest.raises(UnknownPlanner, match=r"A30-24GB.*1-1-2"):
        fixpart_planner("4-3")(Batch((task("a", {}, A30),), A30))
    with pytest.raises(UnknownPlanner, match="fixpart-abc"):
        fixpart_planner("abc")


def test_fixpart_accepts_every_valid_partition_name():
    tasks = tuple(generate(9, A100, "MIXEDSCALING", "WIDETIMES", seed=3))
    for p in valid_partitions("A100-40GB"):
        plan = fixpart_planner(partition_name(p))(Batch(tasks, A100))
        assert plan.planner == f"fixpart({partition_name(p)})"
        assert {s for _, s in plan.initial_instances} == set(p)


# ---------------------------------------------------------------------------
# FIXPARTBEST


def test_fixpart_best_is_the_minimum_over_every_fixpart():
    for model, seed in ((A100, 1), (A30, 2), (H100, 4)):
        tasks = tuple(generate(11, model, "MIXEDSCALING", "WIDETIMES", seed=seed))
        for gpus in (1, 2):
            batch = Batch(tasks, model, gpus=gpus)
            best = plan_fixpart_best(batch)
            each = {
                partition_name(p): plan_fixpart(batch, p).makespan
                for p in valid_partitions(model.name)
            }
            assert all(best.makespan <= m for m in each.values())
            first = min(each, key=lambda name: each[name])  # min keeps the first on ties
            assert best.stats["partition"] == first
            assert best.makespan == each[first]
            assert best.reconfigurations == ()


def test_fixpart_best_skips_infeasible_partitions():
    # b cannot run on 1 or 2 slices; a is best on 1 slice
    tasks = (
        task("a", {1: 1.0, 2: 1.0, 3: 1.0, 4: 1.0, 7: 1.0}),
        task("b", {1: INF, 2: INF, 3: 4.0, 4: 3.0, 7: 3.5}),
    )
    # 7: 1 + 3.5; 4-3: a on the 4g (leftmost), b on the 3g: 4; nothing does better
    plan = plan_fixpart_best(Batch(tasks, A100))
    assert plan.stats["makespans"]["1-1-1-1-1-1-1"] is None
    assert plan.stats["makespans"]["2-2-2-1"] is None
    assert plan.stats["makespans"]["7"] == 4.5
    assert plan.stats["partition"] == "4-3"
    assert plan.makespan == 4.0
    assert validate_plan(plan.to_json(), tasks) == []


def test_fixpart_best_says_so_when_no_partition_fits_the_batch():
    tasks = (
        task("small", {2: INF, 3: INF, 4: INF, 7: INF}),  # 1 slice only
        task("big", {1: INF, 2: INF, 3: INF, 4: INF}),  # 7 slices only
    )
    with pytest.raises(ValueError, match="no partition of A100-40GB can run every task"):
        plan_fixpart_best(Batch(tasks, A100))


# ---------------------------------------------------------------------------
# MISO-OPT


def test_miso_opt_picks_the_partition_with_the_largest_speedup_sum():
    tasks = (
        Job("t0", 0.0, {1: 10.0, 2: 2.0, 4: 1.5}),  # speedups 1, 5, 6.67
        Job("t1", 0.0, {1: 10.0, 2: 9.0, 4: 9.0}),  # 1, 1.11, 1.11
        Job("t2", 0.0, {1: 10.0, 2: 10.0, 4: 10.0}),  # flat
        Job("t3", 0.0, {1: 4.0, 2: 4.0, 4: 4.0}),  # flat
        Job("t4", 0.0, {1: 3.0, 2: 3.0, 4: 3.0}),  # flat
    )
    # round 1: 4 -> 6.67, 2-2 -> 6.11, 2-1-1 -> 7, 1-1-2 -> 3, 1-1-1-1 -> 3
    # round 2 (t3, t4): every partition with two instances sums 2: the first, 2-2, wins
    plan = plan_miso_opt(Batch(tasks, A30))
    assert plan.planner == "miso-opt"
    assert plan.stats["partitions"] == ["2-1-1", "2-2"]
    got = by_id(plan)
    assert [got[i].slot for i in ("t0", "t1", "t2", "t3", "t4")] == [
        slot(0, 2, 2),
        slot(2, 1, 1),
        slot(3, 1, 1),
        slot(0, 2, 2),
        slot(2, 2, 2),
    ]
    # creates are sequential: 2g 0-0.12, 1g 0.12-0.23, 1g 0.23-0.34
    assert got["t0"].start == pytest.approx(0.12)
    assert got["t1"].start == pytest.approx(0.23)
    assert got["t2"].start == pytest.approx(0.34)
    # t3 reuses t0's identical 2g instance at once, with no reconfiguration
    assert got["t3"].start == pytest.approx(got["t0"].end)
    creates = [r for r in plan.reconfigurations if r.op == "create"]
    assert [r.slot for r in creates].count(slot(0, 2, 2)) == 1
    # t4 needs both 1g gone: t1's is destroyed as soon as t1 ends (10.23-10.33), t2's
    # when t2 ends (10.34-10.44), then the 2g is created (10.44-10.56)
    assert got["t1"].end < got["t2"].end
    assert got["t4"].start == pytest.approx(got["t2"].end + 0.10 + 0.12)
    assert got["t4"].start == pytest.approx(10.56)
    assert validate_plan(plan.to_json(), tasks) == []


def test_miso_opt_uses_the_smallest_runnable_size_as_reference_and_never_an_inf_size():
    tasks = (
        Job("only1", 0.0, {1: 5.0, 2: INF, 4: INF}),
        Job("no1", 0.0, {1: INF, 2: 4.0, 4: 1.0}),  # reference t(2): speedup 4 on 4g
    )
    # No partition fits both (the second instance is 1g whenever the first is):
    # 1-1-2 takes only 'only1'; then 'no1' alone goes where its speedup is 4.
    plan = plan_miso_opt(Batch(tasks, A30))
    assert plan.stats["partitions"] == ["1-1-2", "4"]
    assert by_id(plan)["no1"].slot == slot(0, 4, 4)
    assert validate_plan(plan.to_json(), tasks) == []


def test_miso_opt_on_sublinear_tasks_fills_seven_slices_and_alternates_gpus():
    tasks = tuple(
        task(f"t{i}", {1: 10.0 + i, 2: 6.0 + i, 3: 4.5 + i, 4: 4.0 + i, 7: 3.0 + i})
        for i in range(15)
    )
    plan = plan_miso_opt(Batch(tasks, A100, gpus=2))
    assert plan.stats["partitions"] == ["1-1-1-1-1-1-1", "1-1-1-1-1-1-1", "7"]
    # round 2 goes to the idle GPU, round 3 to the GPU whose tasks end first (GPU 0)
    assert plan.stats["round_gpus"] == [0, 1, 0]
    assert validate_plan(plan.to_json(), tasks) == []


# ---------------------------------------------------------------------------
# Every plan is valid; stats; determinism


@pytest.mark.parametrize("model", [A30, A100, H100], ids=lambda m: m.name)
@pytest.mark.parametrize("gpus", [1, 2])
@pytest.mark.parametrize("scaling", ["POORSCALING", "MIXEDSCALING", "GOODSCALING"])
def test_every_baseline_plan_is_valid(model, gpus, scaling):
    ones = fixpart_planner("-".join(["1"] * model.compute_slices))
    full = fixpart_planner(str(model.compute_slices))
    for seed in range(3):
        plain = tuple(generate(10, model, scaling, "WIDETIMES", p_sup=0.5, seed=seed))
        # the same batch with one task that cannot run on one slice
        odd = (Job(plain[0].id, 0.0, {**plain[0].times, 1: INF}), *plain[1:])
        runs = [(plan_miso_opt, plain), (plan_fixpart_best, plain), (ones, plain), (full, plain)]
        runs += [(plan_miso_opt, odd), (plan_fixpart_best, odd), (full, odd)]
        for planner, tasks in runs:
            plan = planner(Batch(tasks, model, gpus=gpus))
            assert validate_plan(plan.to_json(), tasks) == [], plan.planner
            assert plan.stats["planning_seconds"] >= 0.0
            assert plan.makespan >= plan.lower_bound - 1e-9
            assert {t.gpu for t in plan.tasks} <= set(range(gpus))


def test_every_fixpart_plan_is_valid_on_two_gpus():
    for model in (A30, A100):
        tasks = tuple(generate(8, model, "MIXEDSCALING", "WIDETIMES", seed=5))
        for p in valid_partitions(model.name):
            plan = plan_fixpart(Batch(tasks, model, gpus=2), p)
            assert validate_plan(plan.to_json(), tasks) == []
            assert len(plan.initial_instances) == 2 * len(p)


def test_baselines_are_deterministic():
    tasks = tuple(generate(12, A100, "MIXEDSCALING", "WIDETIMES", seed=7))
    for planner in (plan_miso_opt, plan_fixpart_best, fixpart_planner("2-2-3")):
        a = planner(Batch(tasks, A100, gpus=2)).to_json()
        b = planner(Batch(tasks, A100, gpus=2)).to_json()
        a["stats"].pop("planning_seconds")
        b["stats"].pop("planning_seconds")
        assert a == b


def test_rodinia_makespans():
    tasks = tuple(load_tasks(shared_file("far-reference/rodinia_A100_mean_long.csv"), A100))
    batch = Batch(tasks, A100)
    # FIXPART(7): every kernel alone on the whole GPU
    assert fixpart_planner("7")(batch).makespan == pytest.approx(sum(t.times[7] for t in tasks))
    best = plan_fixpart_best(batch)
    assert best.stats["partition"] == "4-2-1"
    # sigma against FAR's 12.609 s: 1.158 (paper 1.16); FIXPART(1,...,1) 2.184 (2.18)
    assert best.makespan / 12.6093 == pytest.approx(1.16, abs=0.005)
    ones = fixpart_planner("1-1-1-1-1-1-1")(batch)
    assert ones.makespan / 12.6093 == pytest.approx(2.18, abs=0.01)


# ---------------------------------------------------------------------------
# Batch baselines are not a site's static layout (issue 20)


def _stream(n: int = 40, gap: float = 15.0) -> list:
    from slurm_mig.sim import SimJob

    jobs = []
    for i in range(n):
        long = i % 4 == 0
        times = {1: 900.0 if long else 90.0, 2: 500.0 if long else 50.0}
        times.update({3: times[2] * 0.8, 4: times[2] * 0.7, 7: times[2] * 0.5})
        jobs.append(SimJob(f"j{i}", i * gap, times))
    return jobs


def test_fixpart_best_repartitions_between_batches_where_static_never_does():
    from slurm_mig.sim import get_policy, simulate

    jobs = _stream()
    best = simulate(jobs, get_policy("fixpart-best"), 1, 2, A100, check=True)
    static = simulate(jobs, get_policy("static", layout="4-3", match="fit"), 1, 2, A100)
    assert best.destroys > 0  # a new partition for a later batch
    assert (static.creates, static.destroys) == (4, 0)


def test_batch_baselines_are_still_batch_planners_and_say_what_they_are_not():
    from slurm_mig.planner.registry import get_policy, policy_info

    batch = Batch([task("a", {1: 10.0}), task("b", {1: 10.0})], A100)
    for name in ("miso-opt", "fixpart-best", "fixpart-4-3"):
        policy = get_policy(name)
        assert policy.kind == "batch"
        validate_plan(policy.plan(batch))
    assert "not MISO's online scheduler" in policy_info("miso-opt").summary
    for name in ("fixpart-best", "fixpart-4-3"):
        assert "see static" in policy_info(name).summary
