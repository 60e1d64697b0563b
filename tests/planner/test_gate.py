"""The PCIe co-location gate: the delay threshold both ways, for the newcomer and for
the jobs already there, the starvation bypass, and the online policy ``pcie-aware``
in the simulator against the PCIe-unaware baseline."""

from __future__ import annotations

import math

import pytest

from slurm_mig.geometry import get_model
from slurm_mig.pcie import PcieError
from slurm_mig.planner.gate import Gate, PcieAware
from slurm_mig.sim import SimJob, simulate
from slurm_mig.sim.jobs import build_workload
from slurm_mig.sim.policies import UnknownPolicy, get_policy

A100 = get_model("A100-40GB")
B560 = (1.25, 5.7)  # Table 2: (alpha, GB/s)
B7B1 = (1.07, 17.65)
RESNET = (1.0, 0.0)


# ---------------------------------------------------------------------------
# The gate alone


def test_the_newcomer_threshold_both_ways():
    three = [B560] * 3
    four = [B560] * 4
    strict = Gate(delay_threshold=1.0)
    # a fourth Bloom560m fits in its share (0.95), a fifth does not (1.18)
    ok = strict.decide(*B560, there=three)
    assert ok.admit and ok.reason == "within-threshold" and ok.newcomer == 1.0
    no = strict.decide(*B560, there=four)
    assert not no.admit and no.reason == "over-threshold"
    assert no.newcomer == pytest.approx(1.18434, abs=1e-5)
    # a looser threshold lets the fifth in
    assert Gate(delay_threshold=1.2).decide(*B560, there=four).admit


def test_the_jobs_already_there_are_protected_too():
    # a Bloom560m joining a Bloom7b1: itself fine (0.47 -> 1), the 7b1 slows to 1.26
    d = Gate(delay_threshold=1.2).decide(*B560, there=[B7B1])
    assert d.newcomer == 1.0 and d.others == pytest.approx(1.25569, abs=1e-5)
    assert not d.admit and d.worst == d.others
    # the paper's gate looks at the newcomer only
    assert Gate(delay_threshold=1.2, protect_others=False).decide(*B560, there=[B7B1]).admit
    assert Gate(delay_threshold=1.3).decide(*B560, there=[B7B1]).admit


def test_jobs_that_are_not_pcie_bound_always_pass():
    d = Gate(delay_threshold=1.0).decide(*RESNET, there=[B7B1] * 7)
    assert d.admit and d.reason == "not-pcie-bound" and d.worst == 1.0


def test_only_pcie_bound_jobs_count_as_competitors():
    # four ResNets and three Bloom560m: the newcomer is the fourth on the link
    there = [RESNET] * 4 + [B560] * 3
    assert Gate(delay_threshold=1.0).decide(*B560, there=there).admit


def test_starvation_bypass():
    g = Gate(delay_threshold=1.0, wait_time_threshold=120.0)
    assert not g.decide(*B7B1, there=[B7B1], waited=119.0).admit
    d = g.decide(*B7B1, there=[B7B1], waited=120.0)
    assert d.admit and d.reason == "starving"
    assert d.newcomer == pytest.approx(1.25569, abs=1e-5)  # the prediction is still reported
    never = Gate(delay_threshold=1.0, wait_time_threshold=math.inf)
    assert not never.decide(*B7B1, there=[B7B1], waited=1e12).admit


def test_gate_settings_are_checked():
    with pytest.raises(PcieError, match="delay_threshold"):
        Gate(delay_threshold=0.9)
    with pytest.raises(PcieError, match="wait_time_threshold"):
        Gate(wait_time_threshold=-1)
    with pytest.raises(PcieError, match="pcie_max"):
        Gate(pcie_max=0)


# ---------------------------------------------------------------------------
# The policy in the simulator


def _job(name, arrival, kind, size, seconds=100.0):
    alpha, demand = kind
    times = {s: seconds for s in A100.planner_sizes if s >= size}
    return SimJob(name, arrival, times, pcie_demand=demand, alpha=alpha, size=size)


def _run(jobs, policy, gpus=1):
    return simulate(jobs, policy, 1, gpus, A100, check=True)


def test_a_second_bloom7b1_waits_for_the_link_instead_of_slowing_both():
    jobs = [_job("a", 0.0, B7B1, 2), _job("b", 1.0, B7B1, 2)]
    base = _run(jobs, "baseline")
    aware = _run(jobs, PcieAware(delay_threshold=1.0, wait_time_threshold=1000.0))
    # baseline: both share the link at slowdown 1.26 while they overlap
    assert base.exec_s[0] > 120 and base.exec_s[1] > 120
    # pcie-aware: b starts when a ends, neither slows down
    assert aware.exec_s == [pytest.approx(100.0), pytest.approx(100.0)]
    assert aware.start[1] == pytest.approx(aware.finish[0], abs=1.0)


def test_a_job_that_waited_too_long_bypasses_the_gate():
    jobs = [_job("a", 0.0, B7B1, 2), _job("b", 1.0, B7B1, 2)]
    policy = PcieAware(delay_threshold=1.0, wait_time_threshold=10.0)
    r = _run(jobs, policy)
    # b is woken at 1 + 10 s and goes in despite the predicted 1.26
    assert 11.0 <= r.start[1] <= 11.0 + 1.0  # + the 2g instance's creation
    assert r.exec_s[1] > 100.0
    assert policy.denied >= 1 and policy.bypassed == 1


def test_the_delay_threshold_both_ways_in_the_simulator():
    jobs = [_job(f"b{i}", float(i), B560, 1) for i in range(5)]
    strict = _run(jobs, PcieAware(delay_threshold=1.0, wait_time_threshold=1e6))
    loose = _run(jobs, PcieAware(delay_threshold=1.2, wait_time_threshold=1e6))
    # 1.0: at most four on the link (0.95 each), the fifth waits, nobody slows down
    assert strict.exec_s == [pytest.approx(100.0)] * 5
    assert strict.start[4] == pytest.approx(strict.finish[0], abs=1.0)
    # 1.2: the fifth goes in at once and all five slow down (1.18)
    assert loose.start[4] < 10.0
    assert max(loose.exec_s) > 110.0


def test_pcie_bound_jobs_go_to_the_gpu_with_the_least_contention():
    jobs = [_job("a", 0.0, B7B1, 2), _job("b", 1.0, B7B1, 2)]
    base = _run(jobs, "baseline", gpus=2)  # first GPU with room: both on GPU 0
    aware = _run(jobs, "pcie-aware", gpus=2)  # the empty GPU 1 predicts no slowdown
    assert base.exec_s[1] > 120.0
    assert aware.exec_s == [pytest.approx(100.0), pytest.approx(100.0)]
    assert aware.start[1] < 5.0  # no waiting either


def test_the_registry_builds_it_with_options_and_checks_them():
    p = get_policy("pcie-aware", delay_threshold=1.1, wait_time_threshold=30)
    assert isinstance(p.policy, PcieAware) and p.name == "pcie-aware"
    with pytest.raises(PcieError, match="delay_threshold"):
        get_policy("pcie-aware", delay_threshold=0.5)
    with pytest.raises(UnknownPolicy):
        get_policy("pcie-aware", colour="blue")


def test_pcie_aware_beats_the_baseline_on_a_pcie_heavy_paper_mix():
    """Section 5.3's setting (4 A100s, 60 % PCIe-bound), five seeds, invariants on."""
    base = aware = 0.0
    for seed in range(5):
        jobs = build_workload("pcie-paper", A100, 4, jobs=80, seed=seed, pcie_bound=0.6)
        b = simulate(jobs, "baseline", 1, 4, A100, seed, check=True)
        a = simulate(jobs, "pcie-aware", 1, 4, A100, seed, check=True)
        assert a.jobs == b.jobs == 80
        base += b.summary()["jct_sum"]
        aware += a.summary()["jct_sum"]
    assert aware < 0.95 * base
