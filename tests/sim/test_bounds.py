"""SMART-MIG's lower bounds (sim.bounds): the staircase makespan against a linear
program, Eq. 7 on a hand case, and both bounds below what real policies achieve."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_mig.cli import main
from slurm_mig.geometry import get_model
from slurm_mig.sim.api import SimJob
from slurm_mig.sim.bounds import energy_bound, linearised, min_makespan, tardiness_bound
from slurm_mig.sim.deadline_workload import deadline_jobs
from slurm_mig.sim.engine import simulate

A100 = get_model("A100-40GB")
POLICIES = ("edf", "met", "cedf", "smart-mig", "first-fit")


def lp_makespan(release, work, m) -> float:
    """P|pmtn, r_j|Cmax by Horn's interval LP: intervals between releases and C, each
    job at most the interval's length in it, m times the length in all."""
    from scipy.optimize import linprog

    n = len(work)
    points = sorted(set(release))
    k = len(points)  # interval i: [points[i], points[i+1]) and the last [points[-1], C]
    nx = n * k
    cost = [0.0] * nx + [1.0]
    a_ub, b_ub, a_eq, b_eq = [], [], [], []

    def var(j, i):
        return j * k + i

    for i in range(k):
        last = i == k - 1
        length = 0.0 if last else points[i + 1] - points[i]
        cap = [0.0] * (nx + 1)
        for j in range(n):
            cap[var(j, i)] = 1.0
            row = [0.0] * (nx + 1)
            row[var(j, i)] = 1.0
            if last:  # x <= C - points[-1]
                row[-1] = -1.0
                a_ub.append(row)
                b_ub.append(-points[i])
            else:
                a_ub.append(row)
                b_ub.append(length)
        if last:
            cap[-1] = -m
            a_ub.append(cap)
            b_ub.append(-m * points[i])
        else:
            a_ub.append(cap)
            b_ub.append(m * length)
    for j in range(n):
        row = [0.0] * (nx + 1)
        for i in range(k):
            row[var(j, i)] = 1.0 if points[i] >= release[j] else 0.0
        a_eq.append(row)
        b_eq.append(work[j])
        for i in range(k):  # nothing before the release
            if points[i] < release[j]:
                z = [0.0] * (nx + 1)
                z[var(j, i)] = 1.0
                a_eq.append(z)
                b_eq.append(0.0)
    res = linprog(cost, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=b_eq, bounds=(0, None))
    assert res.status == 0, res.message
    return res.fun


jobs_st = st.lists(
    st.tuples(st.integers(0, 20).map(float), st.integers(1, 30).map(float)), min_size=1, max_size=7
)


@settings(max_examples=60, deadline=None)
@given(jobs=jobs_st, m=st.integers(1, 4))
def test_staircase_equals_the_lp(jobs, m):
    r = [a for a, _ in jobs]
    q = [b for _, b in jobs]
    assert min_makespan(r, q, m) == pytest.approx(lp_makespan(r, q, m), rel=1e-7, abs=1e-6)


def test_energy_bound_closed_form_hand_case():
    # three linear jobs of 700 slice-seconds (100 s on a whole GPU), all at t = 0, on
    # 2 GPUs: C* = max(100, 300 / 2) = 150 s; Eq. 7: 248.5 W x 300 s + 40 W x (2 x 150 - 300)
    times = {1: 700.0, 2: 350.0, 3: 700 / 3, 4: 175.0, 7: 100.0}
    jobs = [SimJob(f"j{i}", 0.0, times) for i in range(3)]
    b = energy_bound(jobs, 2, A100)
    assert b.makespan == pytest.approx(150.0)
    assert b.energy_j == pytest.approx(248.5 * 300.0)
    # one more GPU: C* = 100 s, 3 x 100 s busy, no idle
    assert energy_bound(jobs, 3, A100).energy_j == pytest.approx(248.5 * 300.0)
    # four GPUs: C* = 100 s, one GPU idles 100 s at 40 W
    assert energy_bound(jobs, 4, A100).energy_j == pytest.approx(248.5 * 300.0 + 40.0 * 100.0)
    # a sublinear job is linearised from its least slice-seconds (1g here: 1 x 140)
    sub = SimJob("s", 0.0, {1: 140.0, 2: 100.0, 3: 90.0, 4: 80.0, 7: 60.0})
    assert linearised(sub, A100) == pytest.approx(20.0)


def _run_all(jobs, gpus):
    out = {}
    for p in POLICIES:
        out[p] = simulate(jobs, p, 1, gpus, A100, 0)
    return out


@settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)  # each example simulates five policies
@given(seed=st.integers(0, 10_000), gpus=st.integers(1, 3), n=st.integers(3, 25),
       rate=st.sampled_from([1.0, 8.0, 40.0]))  # fmt: skip
def test_energy_bound_below_every_policy(seed, gpus, n, rate):
    jobs = deadline_jobs(A100, rate_multiplier=rate, jobs=n, seed=seed, daily=False)
    bound = energy_bound(jobs, gpus, A100).energy_j
    for name, r in _run_all(jobs, gpus).items():
        assert bound <= r.energy_j * (1 + 1e-9), name


@pytest.mark.parametrize("linear", [False, True])
def test_tardiness_mip_below_every_policy(linear):
    # 12 jobs at 8x the base rate on 1 GPU: the queue makes several jobs late
    jobs = deadline_jobs(A100, rate_multiplier=200.0, jobs=12, seed=7, daily=False, linear=linear)
    tb = tardiness_bound(jobs, 1, A100, max_slots=120, time_budget=30.0)
    assert tb.eps > 0 and tb.time_budget == 30.0
    results = _run_all(jobs, 1)
    worst_case_best = min(r.tardiness_mean for r in results.values())
    assert worst_case_best > 0  # the case is not trivial
    assert tb.tardiness_mean > 0  # and the bound sees some of it
    for name, r in results.items():
        assert tb.tardiness_mean <= r.tardiness_mean + 1e-9, name


def test_bound_cli_json(tmp_path, capsys):
    rows = [
        {"id": "a", "arrival": 0, "times": {"1": 700, "2": 350, "3": 240, "4": 175, "7": 100},
         "deadline": 50},
        {"id": "b", "arrival": 0, "times": {"1": 700, "2": 350, "3": 240, "4": 175, "7": 100},
         "deadline": 400},
    ]  # fmt: skip
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps(rows))
    assert main(["bound", str(path), "--gpus", "1", "--json", "--eps", "10"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["energy_lb_j"] == pytest.approx(248.5 * 200.0)
    # one GPU: one of the two finishes at >= 100 s against a 50 s deadline, or the other
    # at >= 200 s (fine): the best is a late by 50 s -> mean >= 25 s less the slot error
    assert out["tardiness_mip"]["eps_s"] == 10.0
    assert out["tardiness_mip"]["optimal"] is True
    assert 25.0 - 2 * 10.0 / 2 <= out["tardiness_lb"] <= 25.0 + 1e-6
    assert math.isfinite(out["energy_lb"]["seconds"])


def test_bound_cli_rejects_a_bad_budget(tmp_path, capsys):
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps([{"id": "a", "arrival": 0, "runtime": 10, "size": 7}]))
    with pytest.raises(SystemExit) as exit_:
        main(["bound", str(path), "--gpus", "1", "--time-budget", "0"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "--time-budget" in err and "Traceback" not in err


def test_an_oversized_mip_is_refused_with_the_way_out():
    jobs = deadline_jobs(A100, rate_multiplier=20.0, jobs=3000, seed=1, daily=False)
    with pytest.raises(ValueError, match="--no-tardiness"):
        tardiness_bound(jobs, 8, A100, max_slots=200)
