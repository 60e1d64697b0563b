"""The restart decision on a small, fast subset of the generated stress set
(benchmarks/forecast_stress.py prints the full table): no trace that fits is restarted,
every OOM-bound trace is decided within its bound and before its OOM."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location(
    "forecast_stress", ROOT / "benchmarks" / "forecast_stress.py"
)
stress = importlib.util.module_from_spec(_spec)
sys.modules["forecast_stress"] = stress
_spec.loader.exec_module(stress)

PER_FAMILY = 3


@pytest.fixture(scope="module")
def results():
    traces, _ = stress.generate(PER_FAMILY)
    return {(t.family, t.index): (t, stress.evaluate(t)) for t in traces}


def test_the_subset_has_every_family_and_its_truth():
    traces, redrawn = stress.generate(PER_FAMILY)
    assert {t.family for t in traces} == set(stress.FAMILIES)
    for t in traces:
        if t.family in stress.OOM_FAMILIES:
            assert t.oom_at is not None and t.oom_at >= stress.T_MIN
            assert max(t.values[: t.oom_at - 1]) <= t.capacity < t.values[t.oom_at - 1]
        else:
            assert t.oom_at is None and t.true_peak * 1.05 * 1.1 <= t.capacity * 1.0001
    assert stress.generate(PER_FAMILY) == (traces, redrawn)  # seeded: the same set


@pytest.mark.parametrize("family", stress.FIT_FAMILIES)
def test_traces_that_fit_are_never_restarted(results, family):
    for (fam, i), (trace, r) in results.items():
        if fam == family:
            assert r.decided_at is None, f"{fam}#{i} restarted at {r.decided_at}: {trace.what}"


@pytest.mark.parametrize("family", stress.OOM_FAMILIES)
def test_oom_bound_traces_are_decided_within_the_bound_and_before_the_oom(results, family):
    for (fam, i), (trace, r) in results.items():
        if fam != family:
            continue
        assert r.decided_at is not None, f"{fam}#{i} never decided: {trace.what}"
        assert r.decided_at < trace.oom_at
        assert r.decided_at <= trace.bound * trace.oom_at, (
            f"{fam}#{i} decided at {r.decided_at} of OOM {trace.oom_at}: {trace.what}"
        )


def test_a_warm_up_ramp_that_looks_like_an_oom_a_few_iterations_away_is_watched():
    # issue 11: 8 iterations of steep warm-up, then flat at 6.5 GiB on a 10 GiB slice
    import numpy as np

    from slurm_mig.memory.forecast import Forecaster
    from slurm_mig.memory.trace import Sample

    gib = 2**30
    rng = np.random.default_rng(7)
    fc = Forecaster(10 * gib, horizon=400)
    decisions = []
    for i in range(400):
        level = 2.5 * gib + 0.5 * gib * min(i, 8)
        decisions.append(fc.update(Sample.short(i, int(level * (1 + rng.normal(0, 0.02))))))
    assert not any(d.restart for d in decisions)
    watched = [d for d in decisions[:12] if "watching" in d.reason]
    assert watched and "is near" in watched[0].reason
    assert decisions[-1].trend == "flat"
