"""The peak forecast of one window of samples: spikes kept out of the base trend, the
base trend and its bound to the horizon, the spike envelope, the reserved/requested ratio
and whether anything still grows (memory/forecast.py describes the method).

Pure given its inputs and deterministic; the fits are memory/fitting.py's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from .fitting import TREND_OF, _Axis, _predict, _select, _Spec, _t_last, expected_maximum

__all__ = [
    "BLOCK",
    "GRID",
    "GROWTH_REL",
    "MAX_EDGE_RUN",
    "MIB",
    "NEAR",
    "SPIKE_REL",
    "SPIKE_SIGMAS",
    "Forecast",
    "ForecastError",
    "forecast",
    "round_up",
]

MIB = 2**20
BLOCK = 2 * MIB  # CUDA caching allocator: large allocations are rounded to 2 MiB blocks
SPIKE_SIGMAS = 5.0  # a spike sits this many robust sds off the base trend ...
SPIKE_REL = 0.05  # ... and at least 5 % of the level above (or below) it
MAX_EDGE_RUN = 5  # a run off the trend at an end of the window longer than this is data
GROWTH_REL = 0.01  # growth below 1 % of the level (or one block) is flat
NEAR = 64  # the forecast's first NEAR iterations are evaluated one by one ...
GRID = 129  # ... the rest to the horizon on a grid of this many points


class ForecastError(ValueError):
    """Bad forecaster input: the message names the parameter and the fix."""


@dataclass(frozen=True)
class Forecast:
    """A fitted forecast of one window of samples (bytes)."""

    model: str  # a key of TREND_OF
    trend: str  # Decision.trend
    growing: bool
    horizon: int
    expected_peak: float  # point forecast of the peak over [last sample, horizon]
    upper_peak: float  # its one-sided bound at the confidence level
    observed_peak: int  # the largest requested or reserved peak seen so far
    level: float  # the fitted base level at the last sample
    reserved_ratio: float  # predicted reserved / requested at the horizon (>= 1)
    spikes: int  # spike runs kept out of the trend
    spike_excess: float  # the largest spike above the base trend
    curve_t: np.ndarray = field(repr=False, compare=False)  # iterations, window to horizon
    curve_mean: np.ndarray = field(repr=False, compare=False)  # fitted mean (bytes)
    curve_upper: np.ndarray = field(repr=False, compare=False)  # upper bound incl. spikes
    noise: float = 0.0  # residual sd of the base trend (bytes, reserved scale)
    # From the last sample to the horizon: every iteration for the first ``NEAR`` ones,
    # then a grid; the peak's mean and upper bound there (spikes and reserved ratio in).
    future_t: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False, compare=False)
    future_mean: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False, compare=False)
    future_upper: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False, compare=False)
    # Evidence on the base samples (a straight line, and a parabola): the t statistic of
    # the slope of what grows (the base, or the spike peaks), and of the curvature.
    slope_t: float = 0.0
    slope_df: int = 0  # its degrees of freedom
    curvature_t: float = 0.0


def round_up(n: float, block: int = BLOCK) -> int:
    """Bytes rounded up to whole allocator blocks."""
    return int(math.ceil(max(n, 0.0) / block)) * block


# ---------------------------------------------------------------------------
# Spikes: runs of samples far above the base trend that came back down.


def _spike_mask(t, y, axis, confidence) -> tuple[np.ndarray, _Spec]:
    """Samples that belong to the base trend (True) and the base model fitted to them.

    The first pass measures residuals from a Theil-Sen line (robust to half the samples
    being spikes); later passes from the model selected on the samples kept so far."""
    n = len(t)
    keep = np.ones(n, dtype=bool)
    r = y - _theil_sen(t, y)
    spec = None
    for _ in range(4):
        new = _base_samples(r, keep, y)
        if spec is not None and np.array_equal(new, keep):
            break
        keep = new
        spec = _select(t[keep], y[keep], axis, confidence)
        coef, *_ = np.linalg.lstsq(spec.design(t[keep]), y[keep], rcond=None)
        r = y - spec.design(t) @ coef
    assert spec is not None
    return keep, spec


def _theil_sen(t: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The Theil-Sen line through (t, y), evaluated at t."""
    i, j = np.triu_indices(len(t), 1)
    slope = float(np.median((y[j] - y[i]) / (t[j] - t[i])))
    return float(np.median(y - slope * t)) + slope * t


def _base_samples(r: np.ndarray, keep: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Which samples are base (True), given residuals r from the trend. Spikes are runs
    far from the trend that came back to it (a start-up dip is data, though); once a
    window has one, a short run at its end is taken for a spike in progress too (else it
    is data: maybe a level shift). At most a third of the window is left out."""
    n = len(r)
    rk = r[keep]
    scale = 1.4826 * float(np.median(np.abs(rk - np.median(rk))))
    level = float(np.median(np.abs(y[keep])))
    threshold = max(SPIKE_SIGMAS * scale, SPIKE_REL * level)
    runs = sorted(_runs(r > threshold) + _runs(r < -threshold))  # up and down apart
    spikes = [(a, b) for a, b in runs if b < n and (a > 0 or r[a] > 0) and b - a <= n // 4]
    a, b = runs[-1] if runs else (0, 0)
    if spikes and b == n and 0 < a and b - a <= MAX_EDGE_RUN:
        spikes.append((a, b))
    while spikes and sum(b - a for a, b in spikes) > n // 3:
        spikes.pop()  # the run at the end first
    new = np.ones(n, dtype=bool)
    for a, b in spikes:
        new[a:b] = False
    return new


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """[start, end) of each run of True."""
    out, start = [], None
    for i, v in enumerate(mask):
        if v and start is None:
            start = i
        elif not v and start is not None:
            out.append((start, i))
            start = None
    if start is not None:
        out.append((start, len(mask)))
    return out


# ---------------------------------------------------------------------------
# The forecast


@dataclass(frozen=True)
class _Spikes:
    """The spike envelope over the future: the largest excess of a spike over the base,
    riding on it, and the trend of the spike peaks themselves once there are four."""

    runs: list[tuple[int, int]]  # the spike runs above the base trend
    excess: float  # the largest spike above the base trend (MiB)
    mean: np.ndarray  # the envelope's mean ahead
    upper: np.ndarray  # its upper bound ahead
    growing: bool = False  # the spike peaks' own trend grows significantly
    model: str = "const"  # the spike peaks' model
    slope_t: float = 0.0  # the t statistic of their slope


def forecast(
    iterations: Sequence[int],
    requested: Sequence[int],
    reserved: Sequence[int] | None = None,
    *,
    horizon: int,
    start: int | None = None,
    confidence: float = 0.99,
    observed_peak: int | None = None,
) -> Forecast:
    """Forecast the peak memory from a window of samples up to iteration ``horizon``.

    ``requested``/``reserved`` are per-iteration peaks in bytes (reserved 0 = unknown);
    ``start`` is the job's first iteration (for log time); ``observed_peak`` the largest
    peak seen so far, in the window or before it. Needs at least 3 samples."""
    t = np.asarray(iterations, dtype=float)
    y = np.asarray(requested, dtype=float) / MIB
    if len(t) < 3:
        raise ForecastError(f"forecast needs at least 3 samples, got {len(t)}")
    res = np.zeros_like(y) if reserved is None else np.asarray(reserved, dtype=float) / MIB
    t_last = float(t[-1])
    h = max(float(horizon), t_last)
    axis = _Axis(
        float(t[0]), max(t_last - float(t[0]), 1.0), float(t[0] if start is None else start)
    )

    keep, spec = _spike_mask(t, y, axis, confidence)
    tk, yk = t[keep], y[keep]
    future = _future(t_last, h)
    ct = np.unique(np.concatenate([t, future]))  # the window and the future, for plots
    cm, cl, cu, sd = _predict(spec.design, tk, yk, ct, confidence)
    ahead = ct >= t_last
    mean, lower, upper = cm[ahead], cl[ahead], cu[ahead]
    for design in spec.profile:  # the largest bound the data cannot reject
        upper = np.maximum(upper, _predict(design, tk, yk, future, confidence)[2])
    sp = _spike_envelope(t, y, keep, spec, mean, upper, future, axis, confidence)
    scale = _reserved_scale(t, y, res, keep, future, axis, confidence)

    seen = float(max(np.max(y), np.max(res))) * MIB
    if observed_peak is not None:
        seen = max(seen, float(observed_peak))
    future_upper = sp.upper * scale * MIB
    noise = sd * float(scale.max()) * MIB
    level = float(mean[0])
    tol = max(BLOCK / MIB, GROWTH_REL * abs(level))
    base_growing = bool(np.max(lower) > level + tol)
    # the point forecast extrapolates only growth that is there: a slope the data do not
    # show (99 % lower bound) would carry its noise to the horizon
    point = sp.mean if base_growing else np.maximum(level + sp.excess, sp.mean - mean + level)
    future_mean = point * scale * MIB
    expected = max(expected_maximum(future, future_mean, noise), seen)
    uk = axis.u(tk)
    slope_t, slope_df = max(
        (_t_last(uk, yk, 1) if base_growing else 0.0, len(tk) - 2),
        (sp.slope_t if sp.growing else 0.0, len(sp.runs) - 2),
    )
    return Forecast(
        model=spec.name,
        trend=_trend(spec, sp, base_growing),
        growing=base_growing or sp.growing,
        horizon=int(round(h)),
        expected_peak=expected,
        upper_peak=max(float(np.max(future_upper)), expected),
        observed_peak=int(seen),
        level=level * MIB,
        reserved_ratio=float(scale[-1]),
        spikes=len(sp.runs),
        spike_excess=sp.excess * MIB,
        curve_t=ct,
        curve_mean=cm * MIB,
        curve_upper=(cu + sp.excess) * MIB,
        noise=noise,
        future_t=future,
        future_mean=future_mean,
        future_upper=future_upper,
        slope_t=slope_t,
        slope_df=slope_df,
        curvature_t=_t_last(uk, yk, 2),
    )


def _future(t_last: float, h: float) -> np.ndarray:
    """The iterations a forecast evaluates ahead: every one of the first ``NEAR`` from the
    last sample, then a grid of ``GRID`` points to the horizon."""
    return np.unique(
        np.concatenate(
            [np.linspace(t_last, h, GRID), t_last + np.arange(min(NEAR, h - t_last + 1))]
        )
    )


def _spike_envelope(
    t: np.ndarray,
    y: np.ndarray,
    keep: np.ndarray,
    spec: _Spec,
    mean: np.ndarray,
    upper: np.ndarray,
    future: np.ndarray,
    axis: _Axis,
    confidence: float,
) -> _Spikes:
    """Spikes: the largest excess over the base rides on the base's mean and bound ahead;
    with four spikes or more, their peaks' own trend (flat or linear) too."""
    tk, yk = t[keep], y[keep]
    coef, *_ = np.linalg.lstsq(spec.design(tk), yk, rcond=None)
    base_fit = spec.design(t) @ coef
    up_runs = [(a, b) for a, b in _runs(~keep) if (y[a:b] - base_fit[a:b]).max() > 0]
    excess = max([0.0] + [float((y[a:b] - base_fit[a:b]).max()) for a, b in up_runs])
    env_mean, env_upper = mean + excess, upper + excess
    if len(up_runs) < 4:
        return _Spikes(up_runs, excess, env_mean, env_upper)
    st = np.array([t[a + int(np.argmax(y[a:b]))] for a, b in up_runs])
    sy = np.array([float(y[a:b].max()) for a, b in up_runs])
    sspec = _select(st, sy, axis, confidence, max_k=2)
    smean, slower, supper, _ = _predict(sspec.design, st, sy, future, confidence)
    return _Spikes(
        up_runs,
        excess,
        np.maximum(env_mean, smean),
        np.maximum(env_upper, supper),
        growing=bool(np.max(slower) > sy.max() * (1 + GROWTH_REL)),
        model=sspec.name,
        slope_t=_t_last(axis.u(st), sy, 1),
    )


def _reserved_scale(
    t: np.ndarray,
    y: np.ndarray,
    res: np.ndarray,
    keep: np.ndarray,
    future: np.ndarray,
    axis: _Axis,
    confidence: float,
) -> np.ndarray:
    """Reserved / requested ahead (never below 1), from the trend of the inverse reuse
    ratio (requested / reserved): MIGM's second trend; 1 without reserved samples."""
    ratio = np.ones_like(future)
    have = keep & (res > 0) & (y > 0)
    if have.sum() >= 3:
        rt, rr = t[have], y[have] / res[have]
        rspec = _select(rt, rr, axis, confidence, max_k=2)
        ratio = _predict(rspec.design, rt, rr, future, confidence)[0]
        ratio = np.clip(ratio, max(0.05, 0.5 * rr.min()), 1.5 * rr.max())
    return 1.0 / np.minimum(ratio, 1.0)


def _trend(spec: _Spec, sp: _Spikes, base_growing: bool) -> str:
    """Decision.trend: the base's, the spikes' when only they grow, else flat."""
    if base_growing:
        return TREND_OF[spec.name]
    return TREND_OF[sp.model] if sp.growing else "flat"
