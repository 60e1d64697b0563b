"""MIGM's partition manager (reachability of full configurations) and its schemes A
(by size) and B (in order), the latter two run in the real simulator."""

from __future__ import annotations

import random

import pytest

from slurm_mig.geometry import GIB, Placement, Slot, get_model, valid_partitions
from slurm_mig.planner.partition_manager import (
    MigmPolicy,
    best_slot,
    reachability,
    reachability_table,
    slot_reachability,
    tight_sizes,
)
from slurm_mig.sim import SimJob, simulate
from slurm_mig.sim.policies import get_policy

A100 = get_model("A100-40GB")
A30 = get_model("A30-24GB")


def slot(start: int, size: int, model=A100) -> Slot:
    return Slot(Placement(start, model.profile_for_size(size).memory_slices), size)


# ---------------------------------------------------------------------------
# Reachability


def test_a100_example_a_1g_goes_where_the_most_full_configurations_stay_reachable():
    # Section 4.2: a 5 GB (1g) request on an empty A100-40GB. Counting over the 19
    # full configurations of geometry.valid_partitions, a 1g on any of the first six
    # slices is in 6 of them, on the last slice in 12 (4-2-1, 4-1-1-1, 3-2-1, 3-1-1-1
    # and the eight 2/1-only ones ending in a 1g). The paper lists 7, 7, ..., 9 and
    # also picks the last slice (its prose then says "the second slice"; its own list
    # and this count both say the last).
    got = {s.placement.start: n for s, n in slot_reachability(A100, [], 1).items()}
    assert got == {0: 6, 1: 6, 2: 6, 3: 6, 4: 6, 5: 6, 6: 12}
    assert best_slot(A100, [], [1]) == (slot(6, 1), 12)
    # the count is the number of full configurations holding the slot
    for start, n in got.items():
        held = sum(1 for p in valid_partitions(A100.name) if slot(start, 1) in p)
        assert held == n


def test_reachability_of_states():
    assert reachability(A100, []) == len(valid_partitions(A100.name)) == 19
    for part in valid_partitions(A100.name):
        assert reachability(A100, part) == 1
    # overlapping or unplaceable states reach nothing
    assert reachability(A100, [slot(0, 4), slot(0, 3)]) == 0
    assert reachability(A100, [slot(0, 3), slot(3, 1)]) == 0
    # a 3g at 4 keeps six configurations (4-3, 3-3, 2-2-3, 2-1-1-3, 1-1-2-3,
    # 1-1-1-1-3), a 3g at 0 three (3-3, 3-2-1, 3-1-1-1)
    assert reachability(A100, [slot(4, 3)]) == 6
    assert reachability(A100, [slot(0, 3)]) == 3
    # the table holds every valid state once (Algorithm 2, precomputed)
    table = reachability_table(A100)
    assert len(table) == 298 and table[frozenset()] == 19
    assert all(n >= 1 for n in table.values())
    # the A30's 5 configurations: a 1g anywhere keeps 2 of them
    assert reachability(A30, []) == 5
    assert set(slot_reachability(A30, [], 1).values()) == {2}


def test_best_slot_skips_occupied_and_blocked_slices():
    # with a 1g at 6, the next 1g goes to 4 (6 configurations) rather than 0 (4)
    assert best_slot(A100, [slot(6, 1)], [1]) == (slot(4, 1), 6)
    # memory slices blocked by the caller are avoided too
    got, _ = best_slot(A100, [slot(6, 1)], [1], blocked=0b110000)
    assert got == slot(0, 1)
    assert best_slot(A100, [slot(0, 7)], [1]) is None


def test_a_20gb_job_is_tight_on_3g_and_4g_and_splits_the_gpu_4_to_3():
    job = SimJob("big", 0.0, {3: 100.0, 4: 80.0, 7: 60.0}, memory=15 * GIB)
    assert tight_sizes(job, A100) == (4, 3)
    first, n = best_slot(A100, [], (4, 3))
    assert (first, n) == (slot(4, 3), 6)  # 3g at 4 keeps 6, a 20 GB at 0 only 3
    second, n = best_slot(A100, [first], (4, 3))
    assert (second, n) == (slot(0, 4), 1)  # a tie (4-3 or 3-3): the larger compute
    assert tight_sizes(SimJob("x", 0.0, {1: 5.0, 2: 4.0}), A100) == (1,)
    assert tight_sizes(SimJob("y", 0.0, {1: 5.0, 2: 4.0}, size=2), A100) == (2,)


# ---------------------------------------------------------------------------
# Schemes in the simulator


def test_scheme_b_is_fifo_and_scheme_a_runs_small_jobs_first():
    jobs = [
        SimJob("half", 0.0, {4: 100.0}, size=4),
        SimJob("full", 0.1, {7: 50.0}, size=7),
        SimJob("small", 0.2, {1: 10.0}, size=1),
    ]
    b = simulate(jobs, get_policy("migm-b"), 1, 1, A100, check=True)
    start = dict(zip(b.ids, b.start))
    finish = dict(zip(b.ids, b.finish))
    # the full-GPU job waits for "half"; "small" would fit beside it but waits its turn
    assert start["full"] >= finish["half"]
    assert start["small"] >= finish["full"]
    a = simulate(jobs, get_policy("migm-a"), 1, 1, A100, check=True)
    start_a = dict(zip(a.ids, a.start))
    # by size: "half" starts alone (the GPU is free at 0), then the smallest class
    assert start_a["small"] < start_a["full"]
    assert a.summary()["jct_mean"] < b.summary()["jct_mean"]


def test_scheme_b_reuses_a_tight_partition_and_repartitions_idle_ones():
    jobs = [
        SimJob("s1", 0.0, {1: 10.0}, size=1),
        SimJob("s2", 20.0, {1: 10.0}, size=1),  # the idle 1g from s1 is reused
        SimJob("h", 40.0, {4: 10.0}, size=4),  # a 4g fits beside the idle 1g at 6
        SimJob("f", 60.0, {7: 10.0}, size=7),  # destroys the idle 4g and 1g
    ]
    policy = get_policy("migm-b")
    res = simulate(jobs, policy, 1, 1, A100, check=True)
    assert res.creates == 3 and res.destroys == 2
    assert policy.reconfigurations == 2
    assert all(w < 1.0 for w in res.wait)


def _mix(counts: dict[str, int], seed: int = 0, t7=(20.0, 40.0), b=(0.3, 0.7)) -> list[SimJob]:
    """A batch like MIGM's mixes: small (5 GB), medium (10 GB), large (20 GB) and
    full (40 GB) jobs, shuffled, all at t=0; time on s slices = t7 (7 / s) ** b."""
    rng = random.Random(seed)
    memory = {"small": 3, "medium": 8, "large": 15, "full": 30}
    kinds = [k for k, n in counts.items() for _ in range(n)]
    rng.shuffle(kinds)
    jobs = []
    for i, kind in enumerate(kinds):
        full = rng.uniform(*t7)
        expo = rng.uniform(*b)
        mem = memory[kind] * GIB
        times = {
            s: full * (7 / s) ** expo
            for s in A100.planner_sizes
            if A100.profile_for_size(s).memory_bytes >= mem
        }
        jobs.append(SimJob(f"{kind}-{i}", 0.0, times, memory=mem, kind=kind))
    return jobs


def test_scheme_a_beats_b_on_a_heterogeneous_mix_but_not_on_large_jobs_only():
    het = _mix({"small": 6, "large": 6, "full": 6})  # like MIGM's Ht2
    a = simulate(het, get_policy("migm-a"), 1, 1, A100, check=True)
    b = simulate(het, get_policy("migm-b"), 1, 1, A100, check=True)
    assert a.makespan < b.makespan
    # Ml3: alike, compute-bound large jobs only; A deals them equally to the 4g and
    # the 3g partition and the faster 4g side runs dry first (6 x 70 s = 420 s), B
    # gives the next job to whichever frees up (the 4g runs 7: 367.5 s)
    large = _mix({"large": 12}, t7=(30.0, 30.0), b=(1.0, 1.0))
    a = simulate(large, get_policy("migm-a"), 1, 1, A100, check=True)
    b = simulate(large, get_policy("migm-b"), 1, 1, A100, check=True)
    assert b.makespan < a.makespan
    assert a.makespan == pytest.approx(420.0, abs=1.0)
    assert b.makespan == pytest.approx(367.5, abs=1.0)


@pytest.mark.parametrize("name", ["migm-a", "migm-b"])
def test_migm_policies_keep_the_simulator_invariants(name):
    rng = random.Random(7)
    jobs, t = [], 0.0
    for i in range(50):
        t += rng.expovariate(1 / 8.0)
        size = rng.choice([1, 1, 2, 3, 4, 7])
        jobs.append(SimJob(f"j{i}", t, {size: rng.uniform(10, 80)}, size=size))
    policy = get_policy(name)
    res = simulate(jobs, policy, 2, 2, A100, check=True)
    assert res.jobs == 50 and all(f > s >= a for a, s, f in zip(res.arrival, res.start, res.finish))
    assert isinstance(policy.policy, MigmPolicy) and policy.by_size == (name == "migm-a")


def test_an_unknown_migm_variant_names_the_choices():
    from slurm_mig.planner.registry import UnknownPolicy, get_policy

    with pytest.raises(UnknownPolicy, match="choose one of .*migm-a, migm-b"):
        get_policy("migm-c")
