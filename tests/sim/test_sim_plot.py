"""The simulator's utilisation panel: a time-weighted mean per bin, so no bin leaves
0..100 % and the bins together keep the run's busy slice-seconds."""

from __future__ import annotations

import math

import pytest

from slurm_mig.geometry import get_model
from slurm_mig.sim.engine import simulate
from slurm_mig.sim.jobs import build_workload
from slurm_mig.sim.plot import binned_mean, utilisation_percent
from slurm_mig.sim.policies import get_policy
from slurm_mig.workload import WorkloadError

A100 = get_model("A100-40GB")
PRESETS = ["miso-trace", "alibaba", "philly", "smart-mig", "smart-mig-poisson", "pcie-paper"]


def test_a_bin_gets_the_part_of_each_interval_inside_it():
    # 2 on [0, 3), 5 on [3, 7), 0 on [7, 10); four bins of 2.5 s
    xs, ys = binned_mean([0.0, 3.0, 7.0], [2.0, 5.0, 0.0], 10.0, bins=4)
    assert xs == pytest.approx([1.25, 3.75, 6.25, 8.75])
    assert ys == pytest.approx([2.0, (0.5 * 2 + 2 * 5) / 2.5, (2 * 5) / 2.5, 0.0])


def test_one_long_interval_fills_every_bin_it_crosses_and_no_more():
    # the old binning booked the rest of an interval into one bin when a bin edge
    # rounded below its own start (504 % here): 0.1-wide bins from 0.1 have such edges
    xs, ys = binned_mean([0.1, 0.3, 9.1], [3.0, 7.0, 0.0], 10.1, bins=100)
    assert len(ys) == 100 and max(ys) <= 7.0 and min(ys) >= 0.0
    assert ys[2:90] == pytest.approx([7.0] * 88)
    assert ys[:2] == pytest.approx([3.0, 3.0]) and ys[90:] == pytest.approx([0.0] * 10)
    assert math.fsum(ys) * 0.1 == pytest.approx(3 * 0.2 + 7 * 8.8)


def test_nothing_elapsed_and_no_steps():
    assert binned_mean([], [], 5.0) == ([], [])
    assert binned_mean([4.0], [3.0], 4.0) == ([4.0], [3.0])


def _workload(preset: str):
    try:
        return build_workload(
            preset, A100, 8, 120, 0, 0.4 if preset == "pcie-paper" else None, None, load=1.0
        )
    except WorkloadError as exc:
        if "shared" in str(exc):
            pytest.skip(f"{preset}: shared reference data not present")
        raise


@pytest.mark.parametrize("preset", PRESETS)
def test_utilisation_stays_within_0_and_100_percent_on_every_preset(preset):
    jobs = _workload(preset)
    for policy in ("baseline", "far"):
        r = simulate(jobs, get_policy(policy), 1, 8, A100, 0)
        hours, percent = utilisation_percent(r)
        assert percent and len(hours) == len(percent)
        assert all(0.0 <= p <= 100.0 for p in percent), (policy, max(percent))
        # equal bins: their mean is the run's own time-averaged utilisation
        assert math.fsum(percent) / len(percent) == pytest.approx(100 * r.utilization, rel=1e-9)
        assert max(percent) > 10.0  # the cluster did run something
