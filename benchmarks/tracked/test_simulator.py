"""Tracked simulator figures: the MISO trace preset (``slurm-mig simulate miso-trace``),
300 jobs on 10 A100-40GB GPUs, seed 0, under the ``baseline`` policy (first GPU with
room), under ``far`` (FAR batches) and under ``adaptive`` (the daemon's default). Quality figures: the mean JCT (s) and the
makespan over the lower bound of ``sim.bounds`` (the least preemptive makespan of the
jobs' linearised work on whole GPUs, with their arrival times)."""

from __future__ import annotations

import pytest
from benchlib import quality, timed

from slurm_mig.geometry import get_model
from slurm_mig.sim import get_policy, simulate
from slurm_mig.sim.bounds import energy_bound
from slurm_mig.sim.jobs import build_workload

MODEL = get_model("A100-40GB")
GPUS = 10
JOBS = 300


@pytest.fixture(scope="module")
def workload():
    try:
        return build_workload("miso-trace", MODEL, GPUS, JOBS, 0)
    except (OSError, ValueError) as exc:  # the shared trace data is not on this machine
        pytest.skip(f"miso-trace preset unavailable: {exc}")


@pytest.mark.parametrize("policy", ["baseline", "far", "adaptive"])
def test_simulate_miso_trace(benchmark, workload, policy: str) -> None:
    rounds = 40 if policy == "baseline" else 10
    result = timed(
        benchmark, lambda: simulate(workload, get_policy(policy), 1, GPUS, MODEL, 0), rounds
    )
    assert result.jobs == JOBS
    summary = result.summary()
    benchmark.extra_info["events"] = result.events
    quality(
        benchmark,
        jct_mean_s=summary["jct_mean"],
        makespan_over_bound=result.makespan / energy_bound(workload, GPUS, MODEL).makespan,
    )
