"""benchmarks/far_scale.py on a small batch: its targets and a row's figures (the
makespan never below the dual bound, the median GPU's end never past the makespan)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("far_scale", ROOT / "benchmarks" / "far_scale.py")
far_scale = importlib.util.module_from_spec(_spec)
sys.modules["far_scale"] = far_scale
_spec.loader.exec_module(far_scale)


def test_the_targets_are_issue_38s():
    assert far_scale.target("GOODSCALING", "NARROWTIMES", 5000, 512) == 1.08
    assert far_scale.target("GOODSCALING", "NARROWTIMES", 3000, 256) == 1.10
    assert far_scale.target("POORSCALING", "WIDETIMES", 5000, 512) == 1.10
    sizes = {n for n, _ in far_scale.SIZES}
    assert min(sizes) == 3000 and max(sizes) == 10000


@pytest.mark.parametrize(("scaling", "times", "p_sup"), far_scale.CLASSES)
def test_a_row_measures_the_plan_against_its_bound(scaling, times, p_sup):
    r = far_scale.run(scaling, times, p_sup, 60, 6, seed=1)
    assert r["n"] == 60 and r["gpus"] == 6 and r["seconds"] >= 0
    assert r["rho"] == pytest.approx(r["makespan"] / r["dual"])
    assert r["rho"] >= 1 - 1e-9  # a lower bound
    assert 0 < r["median_end"] <= r["makespan"] + 1e-9
