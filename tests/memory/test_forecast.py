"""The peak-memory forecaster, its trace files and ``slurm-mig forecast``: synthetic
traces of each shape fed one sample at a time, as mig-run's watchdog feeds them."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from slurm_mig.cli import main
from slurm_mig.memory.forecast import (
    Decision,
    Forecaster,
    ForecastError,
    ForecastSettings,
    forecast,
    replay,
    round_up,
    run_trace,
)
from slurm_mig.memory.trace import (
    FIELDS,
    Sample,
    TraceError,
    format_sample,
    header,
    parse_trace,
    read_trace,
    write_trace,
)

ROOT = Path(__file__).resolve().parents[2]
MIB, GIB = 2**20, 2**30
N = 200  # iterations of every synthetic job
AT_10 = N // 10  # the iteration at 10 % of the job (iterations count from 1)
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def trace(f, n: int = N, noise: float = 0.0, seed: int = 0, reserved=None) -> list[Sample]:
    """Samples of iterations 1..n with requested peak f(i) bytes (+ Gaussian noise)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(1, n + 1):
        req = int(f(i) + (rng.normal(0.0, noise) if noise else 0.0))
        out.append(Sample.short(i, req, int(reserved(req)) if reserved else 0))
    return out


def linear(i):
    return 1 * GIB + 40 * MIB * i


def quadratic(i):
    return 1 * GIB + 0.5 * MIB * i * i


def saturating(i):
    return 4 * GIB - 3 * GIB * math.exp(-i / 25)


def constant(i):
    return 3 * GIB


def spikes(i):  # an evaluation every 25 iterations, two iterations long, +1 GiB
    return 2 * GIB + (1 * GIB if i % 25 in (0, 1) else 0)


def peak(samples: list[Sample]) -> int:
    return max(max(s.requested_peak, s.reserved_peak) for s in samples)


def fits_with_room(samples: list[Sample]) -> int:
    """A capacity 20 % above what a perfect forecast would need (peak + margin)."""
    p = peak(samples)
    return int(1.2 * (round_up(p) + Forecaster(1).margin(p)))


@dataclass
class Run:
    samples: list[Sample]
    capacity: int
    decisions: list[Decision]
    forecaster: Forecaster

    @property
    def true_peak(self) -> int:
        return peak(self.samples)

    @property
    def oom_at(self) -> int | None:
        """The iteration at which the job would really run out of memory."""
        return next((s.iteration for s in self.samples if s.requested_peak > self.capacity), None)

    @property
    def restart_at(self) -> int | None:
        return next((d.iteration for d in self.decisions if d.restart), None)

    def at(self, iteration: int) -> Decision:
        return next(d for d in self.decisions if d.iteration == iteration)

    def error_at(self, iteration: int) -> float:
        return abs(self.at(iteration).predicted_peak - self.true_peak) / self.true_peak


def online(samples: list[Sample], capacity: int, **options) -> Run:
    fc = Forecaster(capacity, horizon=N, **options)
    return Run(samples, capacity, [fc.update(s) for s in samples], fc)


@pytest.fixture(scope="module")
def runs() -> dict[str, Run]:
    lin = trace(linear)
    quad = trace(quadratic)
    noisy = trace(linear, noise=30 * MIB, seed=1)
    sat, const, spiky = trace(saturating), trace(constant), trace(spikes)
    return {
        # the OOM-bound ones: the slice holds 60 % of the final peak
        "linear": online(lin, int(0.6 * peak(lin))),
        "quadratic": online(quad, int(0.6 * peak(quad))),
        "noisy": online(noisy, int(0.6 * peak(noisy))),
        # the ones that fit, with 20 % room over peak + margin
        "saturating": online(sat, fits_with_room(sat)),
        "constant": online(const, fits_with_room(const)),
        "spikes": online(spiky, fits_with_room(spiky)),
    }


# ---------------------------------------------------------------------------
# Growing traces: decided early, peak forecast right


@pytest.mark.parametrize("name", ["linear", "quadratic", "noisy"])
def test_growth_to_oom_is_decided_within_15_percent_of_the_oom_iteration(runs, name):
    run = runs[name]
    assert run.oom_at is not None and run.restart_at is not None
    assert run.restart_at <= 0.15 * run.oom_at, (run.restart_at, run.oom_at)
    decision = run.at(run.restart_at)
    assert decision.need > run.capacity and decision.growing
    assert decision.reason.startswith("restart:") and "\n" not in decision.reason


@pytest.mark.parametrize("name", ["linear", "quadratic", "noisy"])
def test_peak_forecast_at_10_percent_of_the_iterations_is_within_10_percent(runs, name):
    run = runs[name]
    assert run.error_at(AT_10) <= 0.10, run.at(AT_10)


def test_the_trend_named_is_the_shape_of_the_growth(runs):
    assert runs["linear"].at(AT_10).trend == "linear"
    assert runs["quadratic"].at(AT_10).trend == "quadratic"
    assert runs["saturating"].at(AT_10).trend == "saturating"


def test_the_upper_bound_covers_the_point_forecast_and_noise_widens_it(runs):
    clean, noisy = runs["linear"].at(AT_10), runs["noisy"].at(AT_10)
    assert clean.predicted_peak >= clean.expected_peak
    assert noisy.predicted_peak > noisy.expected_peak + 64 * MIB  # noise sd 30 MiB
    assert clean.predicted_peak - clean.expected_peak <= 2 * MIB  # one block of rounding


def test_a_restart_needs_confirming_samples_and_a_decision_holds_need_and_margin(runs):
    run = runs["linear"]
    first = run.restart_at
    before = [d for d in run.decisions if d.iteration < first and d.predicted_peak]
    assert len(before) >= 2 and all(not d.restart for d in before)
    assert "confirming" in before[-1].reason
    d = run.at(first)
    margin = max(64 * MIB, 0.05 * d.predicted_peak)
    assert d.need == d.predicted_peak + round_up(margin)
    assert d.predicted_peak % (2 * MIB) == 0  # allocator blocks


# ---------------------------------------------------------------------------
# Traces that fit: never restarted


@pytest.mark.parametrize("name", ["saturating", "constant", "spikes"])
def test_no_restart_on_traces_that_fit(runs, name):
    run = runs[name]
    assert run.oom_at is None
    assert run.restart_at is None, next(d.reason for d in run.decisions if d.restart)


def test_saturating_growth_forecasts_the_plateau_not_the_early_slope(runs):
    run = runs["saturating"]
    assert run.error_at(AT_10) <= 0.10, run.at(AT_10)
    # a straight line through the first 20 samples would need about 7 GiB by iteration 200
    assert run.at(AT_10).predicted_peak < run.capacity
    last = run.decisions[-1]
    assert last.trend == "flat" and not last.growing


def test_periodic_spikes_are_an_envelope_not_a_trend(runs):
    run = runs["spikes"]
    spike = 3 * GIB
    for d in run.decisions[30:]:
        assert spike <= d.predicted_peak <= spike + 4 * MIB, d
        assert d.trend == "flat"
    assert run.forecaster.last_forecast.spikes >= 6


def test_constant_memory_converges_and_the_probe_may_stop(runs):
    run = runs["constant"]
    assert all(d.trend == "flat" for d in run.decisions if d.predicted_peak)
    assert not run.forecaster.needs_samples
    first = next(i for i, d in enumerate(run.decisions) if d.converged)
    assert first <= 20
    assert abs(run.decisions[-1].predicted_peak - 3 * GIB) <= 2 * MIB


def test_a_flattened_trend_never_restarts_even_when_the_margin_does_not_fit():
    # 3 GiB used, 3.1 GiB slice: peak + margin (3.15 GiB) is over, but nothing grows
    run = online(trace(constant), int(3.1 * GIB))
    assert run.restart_at is None
    last = run.decisions[-1]
    assert last.need > run.capacity and last.reason.startswith(
        "no restart: the trend has flattened"
    )


def test_growth_that_stopped_long_ago_does_not_restart():
    # a ramp to 2.2 GiB in 40 iterations, then flat; the forecaster joins at iteration 60
    samples = [s for s in trace(lambda i: GIB + 30 * MIB * min(i, 40)) if s.iteration > 60]
    fc = Forecaster(int(2.4 * GIB), horizon=N)
    decisions = [fc.update(s) for s in samples]
    assert not any(d.restart for d in decisions)
    assert decisions[-1].trend == "flat"


def test_a_level_shift_is_not_growth():
    # the optimizer's state appears at iteration 5 (+0.8 GiB) and memory stays there
    run = online(trace(lambda i: 2 * GIB + (0.8 * GIB if i >= 5 else 0)), int(3.2 * GIB))
    assert run.restart_at is None
    assert run.decisions[-1].trend == "flat"
    assert abs(run.decisions[-1].predicted_peak - 2.8 * GIB) <= 4 * MIB


def test_growth_that_starts_late_is_extrapolated_from_its_own_slope():
    # flat for 15 iterations, then +60 MiB per iteration: 12.8 GiB by iteration 200
    f = lambda i: 2 * GIB + (60 * MIB * (i - 15) if i > 15 else 0)  # noqa: E731
    run = online(trace(f), 8 * GIB)
    assert run.restart_at is not None and run.restart_at <= 0.25 * run.oom_at
    d = run.at(run.restart_at)
    assert d.trend == "linear" and abs(d.predicted_peak - f(N)) / f(N) <= 0.05


def test_spikes_that_grow_are_a_trend_of_their_own():
    # flat base; every 10th iteration an evaluation whose peak grows by 50 MiB a time
    f = lambda i: 2 * GIB + ((0.5 * GIB + 50 * MIB * i) if i % 10 == 0 else 0)  # noqa: E731
    run = online(trace(f), 6 * GIB)
    assert run.restart_at is not None and run.restart_at < run.oom_at
    d = run.at(run.restart_at)
    assert d.growing and d.trend == "linear"
    assert abs(d.predicted_peak - f(N)) / f(N) <= 0.05


def test_a_single_first_iteration_outlier_is_warm_up_not_growth():
    # the optimizer's state appears at the first step: iteration 1 is 20 % lower
    samples = trace(lambda i: 2 * GIB if i > 1 else 1.6 * GIB, n=40)
    run = online(samples, int(2.3 * GIB))
    assert run.restart_at is None
    assert all(d.trend in ("none", "flat") for d in run.decisions)


# ---------------------------------------------------------------------------
# Reserved bytes, horizon, replay, determinism, bad input


def test_reserved_bytes_follow_the_inverse_reuse_ratio():
    # the allocator reserves 25 % more than requested: the forecast is of reserved bytes
    samples = trace(linear, reserved=lambda req: 1.25 * req)
    run = online(samples, 6 * GIB)
    expected = 1.25 * linear(N)
    assert abs(run.at(AT_10).predicted_peak - expected) / expected <= 0.02
    assert abs(run.forecaster.last_forecast.reserved_ratio - 1.25) <= 0.01


def test_the_horizon_is_the_job_length_when_known_else_the_lookahead():
    samples = trace(linear, n=30)
    known = Forecaster(100 * GIB, horizon=500)
    unknown = Forecaster(100 * GIB, lookahead=250)
    for s in samples:
        a, b = known.update(s), unknown.update(s)
    assert a.horizon == 500 and b.horizon == 30 + 250
    assert abs(a.expected_peak - linear(500)) <= 4 * MIB
    assert abs(b.expected_peak - linear(280)) <= 4 * MIB


def test_replay_is_the_online_decision_and_is_deterministic(runs):
    run = runs["linear"]
    assert replay(run.samples, run.capacity, iterations=N) == (
        run.restart_at,
        run.decisions[-1].predicted_peak,
    )
    again = run_trace(run.samples, run.capacity, iterations=N)
    assert again.first_restart == run.at(run.restart_at)


@pytest.mark.filterwarnings("ignore::statsmodels.tools.sm_exceptions.SingularMatrixWarning")
def test_predict_gives_statsmodels_bounds():
    # the hand-solved regression is statsmodels' OLS prediction interval, also for a
    # design the window makes rank-deficient (a knee past the last sample)
    from statsmodels.regression.linear_model import OLS

    from slurm_mig.memory.fitting import _Axis, _predict, _t

    rng = np.random.default_rng(3)
    t = np.arange(5.0, 45.0)
    y = 100 + 0.3 * t + rng.normal(0, 2, len(t))
    tf = np.linspace(44, 400, 30)
    axis = _Axis(t[0], t[-1] - t[0], 1.0)
    designs = [
        lambda tt: np.ones((len(tt), 1)),
        lambda tt: np.column_stack([np.ones(len(tt)), axis.u(tt)]),
        lambda tt: np.column_stack([np.ones(len(tt)), axis.u(tt), axis.u(tt) ** 2]),
        lambda tt: np.column_stack([np.ones(len(tt)), np.maximum(axis.u(tt) - 1.5, 0)]),
    ]
    for design in designs:
        res = OLS(y, design(t)).fit()
        pred = res.get_prediction(design(tf))
        q = _t(0.99, float(res.df_resid))
        mean, lower, upper, sd = _predict(design, t, y, tf, 0.99)
        np.testing.assert_allclose(mean, pred.predicted_mean, rtol=1e-9)
        np.testing.assert_allclose(lower, pred.predicted_mean - q * pred.se_mean, rtol=1e-9)
        np.testing.assert_allclose(upper, pred.predicted_mean + q * pred.se_obs, rtol=1e-9)
        assert sd == pytest.approx(math.sqrt(res.scale), rel=1e-9)


def test_a_replay_decides_only_the_last_row_after_its_first_restart(runs):
    # the same first restart and the same final forecast as deciding every row
    run = runs["linear"]
    fc = run_trace(run.samples, run.capacity, iterations=N)
    assert fc.first_restart == run.at(run.restart_at)
    assert run.restart_at < N - 1
    assert fc.decisions[-2] == fc.first_restart  # the rows between were not decided
    last, full = fc.decisions[-1], run.decisions[-1]
    assert last.iteration == full.iteration == N
    for field in ("predicted_peak", "expected_peak", "need", "trend", "horizon", "growing"):
        assert getattr(last, field) == getattr(full, field), field
    with pytest.raises(ForecastError, match="iterations must increase"):
        fc.feed(Sample.short(N, 10))


def test_slow_growth_in_a_long_job_is_confirmed_on_a_full_window():
    # 5000 iterations, 4 GiB growing to the 10 GiB slice at iteration 4000 (1 % noise): the
    # window a far OOM asks for (7 % of ~3500 iterations) is longer than the 200 samples
    # kept, so the full window must do, or the job waits until its OOM is 2900 away
    rng = np.random.default_rng(4)
    fc = Forecaster(10 * GIB, horizon=5000)
    for i in range(1, 600):
        d = fc.update(
            Sample.short(i, int((4 * GIB + 6 * GIB * i / 4000) * (1 + rng.normal(0, 0.01))))
        )
        if d.restart:
            break
    assert d.restart and d.iteration <= 0.15 * 4000, d.reason
    assert "growth seen over 200 samples (window 200" in d.reason


def _flat_then(after, change_at: int, n: int, refit: int = 10) -> list[Decision]:
    rng = np.random.default_rng(2)
    fc = Forecaster(10 * GIB, horizon=3000, refit=refit)
    out = []
    for i in range(1, n + 1):
        level = 5 * GIB if i < change_at else after(i)
        out.append(fc.update(Sample.short(i, int(level * (1 + rng.normal(0, 0.01))))))
    return out


def _reused(d: Decision) -> bool:
    return "within its band" in d.reason


def test_a_converged_forecast_stands_for_samples_in_its_band_until_refit():
    decisions = _flat_then(lambda i: 5 * GIB, 10**9, 200)
    assert any(_reused(d) for d in decisions)
    run = 0
    for d in decisions:  # never more than refit - 1 reused decisions in a row
        run = run + 1 if _reused(d) else 0
        assert run <= 9
    for prev, d in zip(decisions, decisions[1:]):
        if _reused(d):  # only a converged forecast that fits is reused, and said to be
            assert prev.converged and not prev.restart and d.iteration == prev.iteration + 1
            assert (d.predicted_peak, d.need, d.trend) == (
                prev.predicted_peak,
                prev.need,
                prev.trend,
            )
    assert not any(_reused(d) for d in _flat_then(lambda i: 5 * GIB, 10**9, 200, refit=1))
    # a replay's final forecast is fitted to every row, whatever stood before it
    samples = trace(lambda i: 5 * GIB, n=200, noise=0.01 * 5 * GIB, seed=2)
    last = [run_trace(samples, 10 * GIB, iterations=3000, refit=r).decisions[-1] for r in (10, 1)]
    assert not _reused(last[0]) and last[0] == last[1]


def test_a_sample_that_leaves_the_band_is_fitted_at_once_and_growth_is_seen_within_refit():
    step = _flat_then(lambda i: 6 * GIB, 300, 310)
    assert _reused(step[298]) or _reused(step[297])  # converged and reused before the step
    assert not any(_reused(d) for d in step[299:])  # every sample from the step on is fitted

    def grow(i):
        return 5 * GIB + (i - 1000) * 8 * MIB

    first = [next(d.iteration for d in ds if d.restart) for ds in (
        _flat_then(grow, 1000, 1100), _flat_then(grow, 1000, 1100, refit=1))]  # fmt: skip
    assert first[1] <= first[0] <= first[1] + 9  # at most refit - 1 iterations later


def test_replay_with_too_few_samples_forecasts_nothing():
    assert replay(trace(linear, n=3), GIB) == (None, None)
    d = Forecaster(GIB).update(Sample.short(1, 10))
    assert d.predicted_peak is None and d.trend == "none" and not d.restart


def test_forecast_needs_three_samples():
    with pytest.raises(ForecastError, match="at least 3 samples"):
        forecast([1, 2], [10, 20], horizon=10)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"capacity": 0}, "capacity"),
        ({"capacity": GIB, "context": -1}, "context"),
        ({"capacity": GIB, "horizon": 0}, "horizon"),
        ({"capacity": GIB, "confidence": 1.0}, "confidence"),
        ({"capacity": GIB, "margin_fraction": 1.5}, "margin_fraction"),
        ({"capacity": GIB, "confirm": 0}, "confirm"),
        ({"capacity": GIB, "stable": 0}, "stable"),
        ({"capacity": GIB, "slowing": 0}, "slowing"),
    ],
)
def test_bad_forecaster_settings_name_the_setting(kwargs, field):
    capacity = kwargs.pop("capacity")
    with pytest.raises(ForecastError, match=field):
        Forecaster(capacity, **kwargs)


def test_settings_in_one_dataclass_or_as_keywords_decide_alike():
    samples = [Sample.short(i, GIB + i * 8 * MIB) for i in range(1, 80)]
    settings = ForecastSettings(int(1.5 * GIB), horizon=400, refit=1, confirm=2)
    a = Forecaster(settings=settings)
    b = Forecaster(int(1.5 * GIB), horizon=400, refit=1, confirm=2)
    assert a.settings == b.settings and a.capacity == int(1.5 * GIB) and a.horizon == 400
    assert [a.update(s) for s in samples] == [b.update(s) for s in samples]
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.capacity = GIB  # type: ignore[misc]
    with pytest.raises(ForecastError, match="either settings or capacity"):
        Forecaster(GIB, settings=settings)
    with pytest.raises(TypeError, match="unknown"):
        Forecaster(GIB, unknown=1)


def test_iterations_must_increase():
    fc = Forecaster(GIB)
    fc.update(Sample.short(5, 10))
    with pytest.raises(ForecastError, match="iterations must increase"):
        fc.update(Sample.short(5, 10))


def test_scipy_is_imported_only_when_a_forecast_is_fitted_and_statsmodels_never():
    code = (
        "import sys\n"
        "from slurm_mig.cli import main\n"
        "import slurm_mig.memory.forecast, slurm_mig.memory.trace\n"
        "assert 'scipy' not in sys.modules\n"
        "main(['plan', 'rodinia-a100', '--planner', 'far', '--json'])\n"
        "assert 'scipy' not in sys.modules, 'plan imported scipy'\n"
        "from slurm_mig.memory.forecast import replay\n"
        "from slurm_mig.memory.trace import Sample\n"
        "replay([Sample.short(i, 2**30 + i * 2**20) for i in range(1, 12)], 2**33)\n"
        "assert 'scipy' in sys.modules and 'statsmodels' not in sys.modules\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr


# ---------------------------------------------------------------------------
# Trace files


def test_full_form_round_trip(tmp_path):
    samples = [
        Sample(i, 100 + i, 90 + i, 104 + i, 94 + i, 2048 + i, 1024, i // 5, 0, 0.25 * i)
        for i in range(1, 8)
    ]
    path = write_trace(samples, tmp_path / "t.csv")
    assert path.read_text().splitlines()[0] == header() == ",".join(FIELDS)
    assert read_trace(path) == samples
    assert format_sample(samples[0]).split(",")[0] == "1"


def test_short_forms_with_and_without_reserved_bytes():
    two = parse_trace("iteration,requested_bytes\n1,100\n2,200\n")
    assert [(s.iteration, s.requested_peak, s.reserved_peak) for s in two] == [
        (1, 100, 0),
        (2, 200, 0),
    ]
    three = parse_trace("Iteration, Requested_Bytes, Reserved_Bytes\n0,100,150\n1,200,260\n")
    assert [(s.iteration, s.requested_peak, s.reserved_peak) for s in three] == [
        (0, 100, 150),
        (1, 200, 260),
    ]


def test_a_line_the_probe_is_still_writing_is_skipped():
    text = header() + "\n1,10,10,10,10,10,10,0,0,0.1\n2,20,20,2"
    assert [s.iteration for s in parse_trace(text)] == [1]


@pytest.mark.parametrize(
    "text, message",
    [
        ("iteration,reserved_bytes\n1,2\n", "missing column 'requested_bytes'"),
        ("iter,requested_bytes\n1,2\n", "missing column 'iteration'"),
        ("", "empty"),
        ("iteration,requested_bytes\n1,12G\n", "line 2: column 'requested_bytes' is '12G'"),
        ("iteration,requested_bytes\n1,-5\n", "must be >= 0"),
        ("iteration,requested_bytes\n2,5\n1,5\n", "iterations must increase"),
        ("iteration,requested_bytes\n1,5\n2\n3,5\n", "line 3: 1 values for 2 columns"),
    ],
)
def test_bad_traces_say_what_and_where(text, message):
    with pytest.raises(TraceError, match=message):
        parse_trace(text, "t.csv")


def test_full_header_missing_a_column_names_requested_peak():
    # the full form needs requested_peak; every other column is optional
    with pytest.raises(TraceError, match="missing column 'requested_peak'"):
        parse_trace("iteration,reserved_peak\n1,2\n")


# ---------------------------------------------------------------------------
# slurm-mig forecast


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture(scope="module")
def growing_csv(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("trace") / "growing.csv"
    rows = "".join(f"{i},{int(linear(i))}\n" for i in range(1, 61))
    path.write_text("iteration,requested_bytes\n" + rows)
    return path


def test_cli_table_prints_restart_at_and_predicted_peak(capsys, growing_csv):
    rc, out, err = run_cli(
        capsys, "forecast", str(growing_csv), "--capacity", "5GiB", "--iterations", "200"
    )
    assert rc == 0 and err == ""
    lines = dict(line.split(None, 1) for line in out.splitlines())
    restart_at, _ = replay(read_trace(growing_csv), 5 * GIB, iterations=200)
    assert lines["restart_at"] == str(restart_at) and restart_at <= 10
    predicted = int(lines["predicted_peak"].split()[0])
    assert abs(predicted - linear(200)) / linear(200) <= 0.01
    assert lines["predicted_peak"].endswith("(8.8 GiB)")
    assert lines["trend"].startswith("linear")


def test_cli_json_has_the_contract_keys(capsys, growing_csv):
    rc, out, _ = run_cli(
        capsys, "forecast", str(growing_csv), "--capacity", "12G", "--iterations", "200", "--json"
    )
    data = json.loads(out)
    assert rc == 0
    assert {"restart_at", "predicted_peak", "trend", "capacity"} <= set(data)
    assert data["capacity"] == 12 * GIB
    assert data["restart_at"] is None  # 8.8 GiB + margin fits 12 GiB
    assert isinstance(data["predicted_peak"], int) and data["trend"] == "linear"


def test_cli_json_context_counts_against_the_capacity(capsys, growing_csv):
    args = ["forecast", str(growing_csv), "--iterations", "200", "--json"]
    _, out, _ = run_cli(capsys, *args, "--capacity", str(10 * GIB))
    assert json.loads(out)["restart_at"] is None
    _, out, _ = run_cli(capsys, *args, "--capacity", str(10 * GIB), "--context", "1.5G")
    data = json.loads(out)
    assert data["restart_at"] is not None and data["need"] > 10 * GIB


def test_cli_json_without_enough_rows_is_null(capsys, tmp_path):
    path = tmp_path / "short.csv"
    path.write_text("iteration,requested_bytes\n1,100\n2,200\n")
    _, out, _ = run_cli(capsys, "forecast", str(path), "--capacity", "1G", "--json")
    data = json.loads(out)
    assert data["restart_at"] is None and data["predicted_peak"] is None
    assert data["trend"] == "none"


def test_cli_plot_writes_a_png(capsys, growing_csv, tmp_path):
    out_png = tmp_path / "f.png"
    rc, _, err = run_cli(
        capsys, "forecast", str(growing_csv), "--capacity", "5G", "--plot", str(out_png)
    )
    assert rc == 0 and "plot written" in err
    assert out_png.read_bytes()[:8] == PNG_MAGIC


@pytest.mark.parametrize(
    "args, message",
    [
        (["--capacity", "5X"], "--capacity: unknown unit 'X'"),
        (["--capacity", "1G", "--context", "2G"], "is not above --context"),
        (["--capacity", "1G", "--iterations", "0"], "--iterations: '0'"),
        (["--capacity", "1G", "--context", "-3"], "--context"),
    ],
)
def test_cli_bad_options_are_one_error_line(capsys, growing_csv, args, message):
    rc, out, err = run_cli(capsys, "forecast", str(growing_csv), *args)
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("slurm-mig: error: ") and message in err


def test_cli_bad_traces_are_one_error_line(capsys, tmp_path):
    missing = tmp_path / "missing.csv"
    rc, _, err = run_cli(capsys, "forecast", str(missing), "--capacity", "1G")
    assert rc == 2 and err == f"slurm-mig: error: {missing}: no such file\n"
    bad = tmp_path / "bad.csv"
    bad.write_text("iteration,reserved_bytes\n1,2\n")
    rc, _, err = run_cli(capsys, "forecast", str(bad), "--capacity", "1G")
    assert rc == 2 and err.count("\n") == 1 and "missing column 'requested_bytes'" in err
    empty = tmp_path / "empty.csv"
    empty.write_text("iteration,requested_bytes\n")
    rc, _, err = run_cli(capsys, "forecast", str(empty), "--capacity", "1G")
    assert rc == 2 and "no rows after the header" in err
