"""PCIe-aware FAR: its plans validate like FAR's, its replay is the simulator's
execution, the gated list schedule spreads PCIe-bound tasks, and in the simulator
with the slowdown applied it is never worse than FAR on PCIe-heavy batches."""

from __future__ import annotations

import dataclasses
import math

import pytest

from slurm_mig.geometry import get_model
from slurm_mig.pcie import PcieError
from slurm_mig.plan import validate_plan
from slurm_mig.planner import Batch, get_planner
from slurm_mig.planner.far import Forest, far_schedule, time_assignment
from slurm_mig.planner.far_pcie import (
    gated_schedule,
    pcie_inputs,
    plan_far_pcie,
    replay,
)
from slurm_mig.planner.gate import Gate
from slurm_mig.planner.snapshot import ClusterSnapshot, Gpu, Instance, Job, Running
from slurm_mig.planner.timeline import to_plan
from slurm_mig.sim import simulate
from slurm_mig.sim.jobs import build_workload
from slurm_mig.sim.policies import get_policy

A100 = get_model("A100-40GB")
B7B1 = (1.07, 17.65)
B560 = (1.25, 5.7)


def _slots(size):
    from slurm_mig.geometry import planner_slots

    return [s for s in planner_slots(A100) if s.size == size]


def _batch(gpus, n, share, seed):
    """The paper's job mix, every job ready at 0 (one FAR batch), as sim jobs and as
    planner tasks with their (alpha, demand)."""
    jobs = build_workload("pcie-paper", A100, gpus, jobs=n, seed=seed, pcie_bound=share)
    jobs = [dataclasses.replace(j, arrival=0.0) for j in jobs]
    tasks = tuple(
        Job(
            j.id,
            0.0,
            {s: j.time(s) for s in A100.planner_sizes},
            alpha=j.alpha,
            pcie_demand=j.pcie_demand,
        )
        for j in jobs
    )
    return jobs, tasks


CASES = [(1, 15, 0.6, 1), (2, 30, 0.8, 0), (4, 60, 0.6, 2), (4, 60, 1.0, 1), (8, 120, 0.8, 3)]


@pytest.mark.parametrize("gpus,n,share,seed", CASES)
def test_far_pcie_plans_validate(gpus, n, share, seed):
    _, tasks = _batch(gpus, n, share, seed)
    plan = get_planner("far-pcie")(Batch(tasks, A100, gpus, seed))
    assert plan.planner == "far-pcie"
    assert validate_plan(plan.to_json(), tasks) == []
    stats = plan.stats
    assert stats["pcie_makespan"] <= stats["far_pcie_makespan"] + 1e-9
    assert stats["candidate"] in stats["candidates"] and "far" in stats["candidates"]


@pytest.mark.parametrize("gpus,n,share,seed", CASES[:3])
def test_replay_is_the_simulators_execution_of_a_plan(gpus, n, share, seed):
    """The sim's policy ``far`` on one batch from empty GPUs ends every job when the
    replay of FAR's plan says (same arithmetic, same order)."""
    jobs, tasks = _batch(gpus, n, share, seed)
    policy = get_policy("far")
    result = simulate(jobs, policy, 1, gpus, A100, seed)
    assert policy.batches == 1 and len(policy.plans) == 1
    rep = replay(policy.plans[0], tasks, pcie_inputs(tasks), 30.08)
    by_id = dict(zip(result.ids, result.finish))
    for t, end in zip(tasks, rep.end):
        assert by_id[t.id] == pytest.approx(end, abs=1e-9)
    assert result.makespan == pytest.approx(rep.makespan, abs=1e-9)


@pytest.mark.parametrize("share", [0.6, 0.8, 1.0])
@pytest.mark.parametrize("gpus,n", [(1, 15), (2, 30), (4, 60)])
def test_far_pcie_is_never_worse_than_far_in_the_simulator(gpus, n, share):
    """One batch, the slowdown applied: never a longer makespan with objective
    makespan, never a later last start with the policy's default objective."""
    better = 0
    for seed in range(3):
        jobs, _ = _batch(gpus, n, share, seed)
        far = simulate(jobs, "far", 1, gpus, A100, seed, check=True)
        aware = simulate(
            jobs, get_policy("far-pcie", objective="makespan"), 1, gpus, A100, seed, check=True
        )
        assert aware.jobs == far.jobs == n
        assert aware.makespan <= far.makespan + 1e-6
        better += aware.makespan < far.makespan - 1e-6
        started = simulate(jobs, "far-pcie", 1, gpus, A100, seed, check=True)
        assert max(started.start) <= max(far.start) + 1e-6
    assert better >= 1  # and it does buy something on PCIe-heavy batches


def test_replay_from_a_busy_gpu_by_hand():
    """A Bloom7b1 half done (50 of 100 s left) holds 2g@0; a batch of one Bloom7b1
    goes to another 2g (created in c s): the old one runs alone until c, then both
    share the link at Eq. 2's 1.2557 until the old one ends."""
    c = A100.create_time(2)
    slot_old = next(s for s in _slots(2) if s.placement.start == 0)
    times = {1: math.inf, 2: 100.0, 3: 100.0, 4: 100.0, 7: 100.0}
    old = Job("old", 0.0, times, alpha=B7B1[0], pcie_demand=B7B1[1])
    start = ClusterSnapshot(
        now=0.0,
        model=A100,
        gpus=(Gpu(0, (Instance(slot_old, "old", -10.0, 50.0, True),), 0.0, 1),),
        running={"old": Running(old, 0, slot_old, -50.0, 0.5, 1.0, 50.0)},
    )
    tasks = [Job("new", 0.0, times)]
    batch = Batch(tuple(tasks), A100, 1, start=start)
    plan = plan_far_pcie(batch, pcie={"new": B7B1})
    new_task = next(t for t in plan.tasks if not t.running)
    assert not new_task.slot.placement.overlaps(slot_old.placement)
    rep = replay(plan, tasks, [B7B1], 30.08, start)
    sd = 1.07 * 17.65 * 2 / 30.08
    old_end = c + (0.5 - c / 100.0) * 100.0 * sd
    # the newcomer: slowed until old_end, then alone
    done = (old_end - c) / (100.0 * sd)
    new_end = old_end + (1.0 - done) * 100.0
    assert rep.end[0] == pytest.approx(new_end, abs=1e-6)
    assert rep.makespan == pytest.approx(new_end, abs=1e-6)
    assert rep.end_sum == pytest.approx(new_end + old_end, abs=1e-6)
    # an idle start is the same as no start
    idle = ClusterSnapshot(now=0.0, model=A100, gpus=(Gpu(0),))
    assert replay(plan, tasks, [B7B1], 30.08, idle).end == replay(plan, tasks, [B7B1], 30.08).end


def test_without_pcie_bound_tasks_it_is_plain_far():
    _, tasks = _batch(2, 30, 0.0, 0)
    aware = plan_far_pcie(Batch(tasks, A100, 2))
    far = get_planner("far")(Batch(tasks, A100, 2))
    assert aware.stats["candidate"] == "far" and list(aware.stats["candidates"]) == ["far"]
    assert aware.tasks == far.tasks


def test_the_gated_list_schedule_spreads_bloom7b1_over_time():
    """Three 2g nodes free at 0; LPT alone starts the three longest tasks, all
    Bloom7b1 (Eq. 2: 1.88 each); the gate at 1.3 starts two (1.26) and a ResNet."""
    inf = math.inf
    tasks = [Job(f"b{i}", 0.0, {1: inf, 2: 60.0, 3: 60.0, 4: 60.0, 7: 60.0}) for i in range(3)]
    tasks += [Job(f"r{i}", 0.0, {1: inf, 2: 50.0, 3: 50.0, 4: 50.0, 7: 50.0}) for i in range(3)]
    info = [B7B1] * 3 + [(1.0, 0.0)] * 3
    forest = Forest.build(A100, 1)
    alloc = [2] * 6
    dur = [60.0] * 3 + [50.0] * 3
    assign = gated_schedule(forest, alloc, dur, info, Gate(1.3, 1e6))
    firsts = [a[0] for a in assign if a]
    assert len(firsts) == 3
    assert sum(1 for i in firsts if i < 3) == 2  # two Bloom7b1 side by side, not three
    assert sorted(i for a in assign for i in a) == list(range(6))  # every task once
    # and its plan replays faster than the same allocation without the gate
    plain = far_schedule([Job(t.id, 0.0, dict(t.times)) for t in tasks], A100, 1)
    gated_plan = to_plan(A100, tasks, time_assignment(forest, tasks, assign)[0], 1, "x")
    plain_plan = to_plan(A100, tasks, time_assignment(plain.forest, tasks, plain.assign)[0], 1, "x")
    assert (
        replay(gated_plan, tasks, info, 30.08).makespan
        < replay(plain_plan, tasks, info, 30.08).makespan
    )


def test_the_gate_starvation_rule_bounds_a_nodes_wait():
    """Only Bloom7b1 left and one on the GPU: with a short wait threshold the node
    takes the next one anyway instead of idling until the first ends."""
    info = [B7B1] * 2
    forest = Forest.build(get_model("A30-24GB"), 1)  # 2g nodes: two
    assign_wait = gated_schedule(forest, [2, 2], [60.0, 60.0], info, Gate(1.0, 1e6))
    assign_now = gated_schedule(forest, [2, 2], [60.0, 60.0], info, Gate(1.0, 0.0))
    assert [len(a) for a in assign_wait if a] == [2]  # one node runs both, in turn
    assert sorted(len(a) for a in assign_now if a) == [1, 1]  # side by side


def test_pcie_inputs_come_from_the_map_then_meta_and_are_checked():
    tasks = [Job("a", 0.0, {1: 1.0}, alpha=1.25, pcie_demand=5.7), Job("b", 0.0, {1: 1.0})]
    assert pcie_inputs(tasks) == [(1.25, 5.7), (1.0, 0.0)]
    assert pcie_inputs(tasks, {"b": B7B1}) == [(1.25, 5.7), B7B1]
    with pytest.raises(PcieError, match="task 'a'.*alpha"):
        pcie_inputs([Job("a", 0.0, {1: 1.0}, alpha=0)])
    with pytest.raises(PcieError, match="pcie_demand"):
        pcie_inputs([Job("a", 0.0, {1: 1.0})], {"a": (1.0, -2.0)})


def test_far_pcie_policy_runs_an_online_workload_to_the_end():
    jobs = build_workload("pcie-paper", A100, 4, jobs=60, seed=5, pcie_bound=0.6)
    policy = get_policy("far-pcie", delay_threshold=1.0)
    r = simulate(jobs, policy, 1, 4, A100, 5, check=True)
    assert r.jobs == 60 and all(f >= a for f, a in zip(r.finish, r.arrival))
    assert policy.batches >= 2 and sum(policy.chosen.values()) == policy.batches


def test_objective_is_checked():
    _, tasks = _batch(1, 5, 0.6, 0)
    with pytest.raises(PcieError, match="objective"):
        plan_far_pcie(Batch(tasks, A100, 1), objective="fastest")
    for objective in ("makespan", "jct", "start", "online"):
        plan = plan_far_pcie(Batch(tasks, A100, 1), objective=objective)
        assert plan.stats["objective"] == objective
        assert validate_plan(plan.to_json(), tasks) == []
