"""Peak-memory forecasting from per-iteration samples, and the early-restart decision.

MIGM's method (Section 3.2.3 of the MIGM paper) -- a trend on the requested peak and on
the inverse reuse ratio (requested / reserved), a one-sided 99 % prediction bound from the
residuals, convergence detection -- with these additions:

* competing trends, chosen on the evidence (BIC with a noise floor; a model with more
  parameters must win by a margin): flat, linear, log, quadratic (accelerating growth
  only), exponential plateau ``a - b exp(-c t)``, ramp-then-plateau ``a + b min(t, k)``,
  level shift ``a + b [t >= k]``, and a linear trend that bends at a knee
  ``a + b t + c max(t - k, 0)``. The rate ``c`` and the knee ``k`` are profiled: the bound
  is the largest over all their values the data cannot reject (likelihood ratio at the
  same confidence), so an uncertain plateau is not trusted further than the data allow.
  Bending upwards needs ``MIN_CONVEX`` samples (MIGM: a line is the stable model when
  there are few); among models of one size a flattening one replaces a steady one only
  on positive evidence, not on a tie that the noise of the first samples decides;
* the peak is the largest bound over the rest of the job, and never below a peak seen;
* spikes that come and go (periodic evaluation) are kept out of the trend: the forecast is
  the trend of the base plus the largest excess of a spike over it (the envelope of the
  peaks), and a trend of the spike peaks themselves once there are four of them;
* the first sample (warm-up: optimizer state, lazy initialisation) is not trend;
* a restart needs a trend that still grows significantly (the one-sided lower bound of
  the mean ahead exceeds today's level by a block or 1 %) and a need (bound + context +
  margin for allocator blocks and fragmentation) above the capacity; then it is decided
  when it matters (``Forecaster``): at once when the OOM is 3 iterations away, after a
  window that grows with the distance when it is far and the trend steady and strong,
  never while it slows. A trend that has flattened never restarts a job.

Pure given its inputs and deterministic. scipy is imported at the first fit, so importing
this module is cheap; the regressions are numpy's (statsmodels' OLS gives the same bounds,
tests/test_forecast.py checks it, but its per-call overhead was most of a forecast's time).
"""

from __future__ import annotations

import functools
import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from .trace import Sample, human  # noqa: F401 - human is part of this module's API

MIB = 2**20
BLOCK = 2 * MIB  # CUDA caching allocator: large allocations are rounded to 2 MiB blocks

# Trend names reported in Decision.trend, by fitted model.
TREND_OF = {
    "const": "flat",
    "linear": "linear",
    "log": "saturating",
    "quadratic": "quadratic",
    "plateau": "saturating",
    "ramp": "saturating",
    "step": "saturating",
    "segmented": "linear",
}

NOISE_FLOOR = 0.0005  # residual sd below 0.05 % of the level is treated as noise-free
# The BIC a model with k parameters must win by over the best simpler one (Kass & Raftery:
# 2 positive, 6 strong evidence). Trends that flatten extrapolate to less memory, so
# "positive" evidence is enough for them; trends that bend upwards need "strong".
EVIDENCE = {2: 2.0, 3: 6.0, 4: 6.0}
EVIDENCE_SAFE = 2.0
SPIKE_SIGMAS = 5.0  # a spike sits this many robust sds off the base trend ...
SPIKE_REL = 0.05  # ... and at least 5 % of the level above (or below) it
MAX_EDGE_RUN = 5  # a run off the trend at an end of the window longer than this is data
MIN_CONVEX = 10  # samples before a trend may bend upwards (quadratic, segmented)
GROWTH_REL = 0.01  # growth below 1 % of the level (or one block) is flat
PROFILE_MAX = 8  # fits kept from a profiled nonlinear parameter
NEAR = 64  # the forecast's first NEAR iterations are evaluated one by one ...
GRID = 129  # ... the rest to the horizon on a grid of this many points


class ForecastError(ValueError):
    """Bad forecaster input: the message names the parameter and the fix."""


@dataclass(frozen=True)
class Decision:
    """The forecaster's verdict after one sample."""

    iteration: int
    restart: bool
    predicted_peak: int | None  # bytes: 99 % upper bound of the peak up to the horizon
    need: int | None  # predicted_peak + context + margin: the memory the job needs
    trend: str  # "linear" | "quadratic" | "saturating" | "flat" | "none"
    reason: str  # one line an operator can read
    expected_peak: int | None = None  # bytes: the point forecast of the same peak
    horizon: int | None = None  # the iteration the forecast reaches
    growing: bool = False  # the trend still grows significantly
    converged: bool = False  # flat and stable: no more samples are needed
    oom_at: int | None = None  # growing over capacity: where the need's bound reaches it


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


# ---------------------------------------------------------------------------
# Models: a design matrix over iterations, linear in its coefficients.


@dataclass(frozen=True)
class _Spec:
    name: str
    k: int  # parameters, a profiled one included
    design: Callable[[np.ndarray], np.ndarray]
    bic: float
    rss: float
    profile: tuple[Callable[[np.ndarray], np.ndarray], ...] = ()  # designs not rejected


@dataclass(frozen=True)
class _Axis:
    """Time transforms of a window: u in [0, 1] over the window, log time since the start."""

    t0: float
    span: float
    start: float  # the job's first iteration

    def u(self, t: np.ndarray) -> np.ndarray:
        return (np.asarray(t, dtype=float) - self.t0) / self.span

    def lt(self, t: np.ndarray) -> np.ndarray:
        return np.log1p(np.asarray(t, dtype=float) - self.start)


def _rss(X: np.ndarray, y: np.ndarray) -> float:
    coef, *_ = np.linalg.lstsq(X, y, rcond=None)
    r = y - X @ coef
    return float(r @ r)


def _bic(rss: float, n: int, k: int, floor: float) -> float:
    return n * math.log(max(rss / n, floor * floor)) + k * math.log(n)


def _select(t: np.ndarray, y: np.ndarray, axis: _Axis, confidence: float, max_k: int = 4) -> _Spec:
    """The model the evidence favours, simplest first (see EVIDENCE); ``max_k`` = 2 allows
    only flat and linear (MIGM's own trend), for short or auxiliary series."""
    n = len(t)
    floor = max(NOISE_FLOOR * float(np.median(np.abs(y))), 1e-9)

    def const(tt):
        return np.ones((len(tt), 1))

    def linear(tt):
        return np.column_stack([np.ones(len(tt)), axis.u(tt)])

    def log(tt):
        return np.column_stack([np.ones(len(tt)), axis.lt(tt)])

    def quadratic(tt):
        u = axis.u(tt)
        return np.column_stack([np.ones(len(tt)), u, u * u])

    def spec(name, k, design, profile=()):
        rss = _rss(design(t), y)
        return _Spec(name, k, design, _bic(rss, n, k, floor), rss, profile)

    tiers: dict[int, list[_Spec]] = {1: [spec("const", 1, const)]}
    if n >= 4:
        tiers[2] = [spec("linear", 2, linear)]
        if np.ptp(axis.lt(t)) > 0 and max_k > 2:
            tiers[2].append(spec("log", 2, log))
    tiers[3] = []
    if n >= MIN_CONVEX and max_k > 2:
        coef, *_ = np.linalg.lstsq(quadratic(t), y, rcond=None)
        if coef[2] > 0 and coef[1] >= 0:  # growth that accelerates across the window
            tiers[3].append(spec("quadratic", 3, quadratic))
    u = axis.u(t)
    args = (t, y, axis, floor, confidence)
    if n >= 5 and max_k > 2:
        rates = np.geomspace(0.3, 60.0, 48)
        tiers[3].append(_profiled("plateau", rates, _plateau, *args, refine=True))
    if n >= 6 and max_k > 2:
        knees = u[2:-3]  # three samples on either side
        tiers[3].append(_profiled("ramp", knees, _ramp, *args))
        tiers[3].append(_profiled("step", (u[2:-3] + u[3:-2]) / 2, _step, *args))
    if n >= MIN_CONVEX and max_k > 3:
        knees = u[2:-5]  # three samples up to the knee, five after it
        tiers[4] = [_profiled("segmented", knees, _segment, *args, refine=True, slope=True)]
    best = tiers[1][0]
    for k in (2, 3, 4):
        bar = {m.name: EVIDENCE_SAFE if TREND_OF[m.name] == "saturating" else EVIDENCE[k]
               for m in tiers.get(k, ())}  # fmt: skip
        better = [m for m in tiers.get(k, ()) if m.bic < best.bic - bar[m.name]]
        if better:
            best = min(better, key=_flattening_last)
    return best


def _flattening_last(m: _Spec) -> float:
    """Sort key among models of one tier: the BIC, a flattening model's raised by
    ``EVIDENCE_SAFE`` -- it replaces a steady one only on positive evidence, not a tie
    that early noise decides."""
    return m.bic + (EVIDENCE_SAFE if TREND_OF[m.name] == "saturating" else 0.0)


# One-parameter families: a feature x_g(u) of the window's time u, fitted as a + b x_g.
def _plateau(u: np.ndarray, c: float) -> np.ndarray:
    return np.exp(-c * u)


def _ramp(u: np.ndarray, knee: float) -> np.ndarray:
    return np.minimum(u, knee)


def _step(u: np.ndarray, at: float) -> np.ndarray:
    return (u >= at).astype(float)


def _segment(u: np.ndarray, knee: float) -> np.ndarray:
    return np.maximum(u - knee, 0.0)


def _t_last(u: np.ndarray, y: np.ndarray, degree: int) -> float:
    """The t statistic of the highest coefficient of a polynomial of ``degree`` in u
    fitted to y: the slope (1) or the curvature (2); 0 with too few samples."""
    n = len(u)
    if n < degree + 3 or np.ptp(u) <= 0:
        return 0.0
    X = np.vander(u, degree + 1, increasing=True)
    coef, *_ = np.linalg.lstsq(X, y, rcond=None)
    r = y - X @ coef
    var = float(r @ r) / (n - degree - 1) * float(np.linalg.inv(X.T @ X)[degree, degree])
    if var <= 0:  # a perfect fit: as strong as the coefficient's sign
        return math.copysign(math.inf, coef[degree]) if coef[degree] else 0.0
    return float(coef[degree] / math.sqrt(var))


class _Projection:
    """The fixed columns B of a profiled model projected out once, for every RSS of
    y ~ B beta + b x over many features x (closed form, vectorised)."""

    def __init__(self, B: np.ndarray, y: np.ndarray) -> None:
        self.Q, _ = np.linalg.qr(B)
        self.yr = y - self.Q @ (self.Q.T @ y)
        self.syy = float(self.yr @ self.yr)
        self.n = len(y)

    def rss(self, F: np.ndarray) -> np.ndarray:
        """RSS of y ~ B beta + b x for every row x of F."""
        Fr = F - (F @ self.Q) @ self.Q.T
        sxx = np.einsum("...i,...i->...", Fr, Fr)
        sxy = Fr @ self.yr
        with np.errstate(divide="ignore", invalid="ignore"):
            rss = np.where(sxx > 1e-12 * self.n, self.syy - sxy * sxy / sxx, self.syy)
        return np.maximum(rss, 0.0)


def _profiled(
    name, grid, feature, t, y, axis, floor, confidence, refine=False, slope=False
) -> _Spec:
    """A model a (+ b u) + c feature(u, g) with one nonlinear parameter g: the best value,
    and every value a one-sided likelihood-ratio test at ``confidence`` does not reject."""
    n = len(t)
    u = axis.u(t)
    B = np.column_stack([np.ones(n), u]) if slope else np.ones((n, 1))
    k = B.shape[1] + 2
    grid = np.asarray(grid, dtype=float)
    proj = _Projection(B, y)
    rss = proj.rss(feature(u[None, :], grid[:, None]))  # every value of g at once
    i = int(np.argmin(rss))
    if refine and 0 < i < len(grid) - 1:  # the best value between its grid neighbours
        from scipy.optimize import minimize_scalar

        best = minimize_scalar(
            lambda g: float(proj.rss(feature(u, g)[None, :])[0]),
            bounds=(grid[i - 1], grid[i + 1]),
            method="bounded",
            options={"xatol": 1e-4 * (grid[i + 1] - grid[i - 1])},
        )
        if best.fun < rss[i]:
            grid, rss = np.append(grid, best.x), np.append(rss, best.fun)
            i = len(grid) - 1

    def design(g: float) -> Callable[[np.ndarray], np.ndarray]:
        if slope:
            return lambda tt: np.column_stack(
                [np.ones(len(tt)), axis.u(tt), feature(axis.u(tt), g)]
            )
        return lambda tt: np.column_stack([np.ones(len(tt)), feature(axis.u(tt), g)])

    threshold = _chi2_1(2 * confidence - 1)
    floor_rss = n * floor * floor
    lr = n * np.log(np.maximum(rss, floor_rss) / max(rss[i], floor_rss))
    keep = np.flatnonzero(lr <= threshold)
    if len(keep) > PROFILE_MAX:
        keep = keep[np.linspace(0, len(keep) - 1, PROFILE_MAX).round().astype(int)]
    return _Spec(
        name,
        k,
        design(float(grid[i])),
        _bic(float(rss[i]), n, k, floor),
        float(rss[i]),
        tuple(design(float(grid[j])) for j in keep if j != i),
    )


@functools.lru_cache(maxsize=64)
def _chi2_1(p: float) -> float:
    from scipy.stats import chi2

    return float(chi2.ppf(p, 1))


@functools.lru_cache(maxsize=1024)
def _t(p: float, df: float) -> float:
    from scipy.stats import t

    return float(t.ppf(p, df))


def _predict(design, t, y, tf, confidence) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """OLS of y on design(t); at tf: the mean, the one-sided lower bound of the mean and
    the one-sided upper prediction bound of a new observation; and the residual sd.

    The same as statsmodels' ``OLS(y, X).fit().get_prediction(Xf).conf_int(obs=...,
    alpha=2 * (1 - confidence))`` (tests/test_forecast.py checks it), solved here from
    one QR of X: statsmodels' per-call overhead was most of a forecast's time."""
    X, Xf = design(t), design(tf)
    n, k = X.shape
    Q, R = np.linalg.qr(X)
    rank = int(np.sum(np.abs(np.diag(R)) > 1e-10 * max(float(np.abs(R).max()), 1e-300)))
    if rank < k:  # a degenerate design (a feature constant over the window): pinv's answer
        coef = np.linalg.pinv(X) @ y
        cov = np.linalg.pinv(X.T @ X)
    else:
        coef = np.linalg.solve(R, Q.T @ y)
        Rinv = np.linalg.solve(R, np.eye(k))
        cov = Rinv @ Rinv.T
    mean = Xf @ coef
    df = n - rank
    if df < 1:
        return mean, mean, mean, 0.0
    r = y - X @ coef
    scale = float(r @ r) / df
    q = _t(confidence, float(df))
    var_mean = np.maximum(np.einsum("ij,jk,ik->i", Xf, cov, Xf) * scale, 0.0)
    lower = mean - q * np.sqrt(var_mean)
    upper = mean + q * np.sqrt(var_mean + scale)
    return mean, lower, upper, math.sqrt(max(scale, 0.0))


def expected_maximum(t: np.ndarray, mean: np.ndarray, sd: float) -> float:
    """The expected largest of the observations ``mean(t) + N(0, sd)`` at the iterations
    from t[0] + 1 to t[-1] (``t`` a grid, ``mean`` on it): the point forecast of a peak.

    The observations that can make the maximum are those within 3 sd of the largest mean;
    the expected maximum of n such normals is Blom's quantile ``Phi^-1((n - 0.375) /
    (n + 0.25))`` sd above it."""
    top = float(np.max(mean))
    if sd <= 0 or len(t) < 2:
        return top
    # iterations per grid point: the spacing to the next point (the last one counts once)
    weight = np.append(np.diff(t), 1.0)
    n = float(np.sum(weight[mean >= top - 3 * sd]))
    return top + sd * _blom(max(n, 1.0))


@functools.lru_cache(maxsize=4096)
def _blom(n: float) -> float:
    from scipy.stats import norm

    return float(norm.ppf((n - 0.375) / (n + 0.25)))


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
    future = np.unique(
        np.concatenate(
            [np.linspace(t_last, h, GRID), t_last + np.arange(min(NEAR, h - t_last + 1))]
        )
    )
    ct = np.unique(np.concatenate([t, future]))  # the window and the future, for plots
    cm, cl, cu, sd = _predict(spec.design, tk, yk, ct, confidence)
    ahead = ct >= t_last
    mean, lower, upper = cm[ahead], cl[ahead], cu[ahead]
    for design in spec.profile:  # the largest bound the data cannot reject
        upper = np.maximum(upper, _predict(design, tk, yk, future, confidence)[2])

    # spikes: the largest excess over the base rides on the base; their own trend if many
    coef, *_ = np.linalg.lstsq(spec.design(tk), yk, rcond=None)
    base_fit = spec.design(t) @ coef
    up_runs = [(a, b) for a, b in _runs(~keep) if (y[a:b] - base_fit[a:b]).max() > 0]
    excess = max([0.0] + [float((y[a:b] - base_fit[a:b]).max()) for a, b in up_runs])
    env_mean, env_upper = mean + excess, upper + excess
    spike_growing, spike_model, spike_t = False, "const", 0.0
    if len(up_runs) >= 4:
        st = np.array([t[a + int(np.argmax(y[a:b]))] for a, b in up_runs])
        sy = np.array([float(y[a:b].max()) for a, b in up_runs])
        sspec = _select(st, sy, axis, confidence, max_k=2)
        smean, slower, supper, _ = _predict(sspec.design, st, sy, future, confidence)
        env_mean, env_upper = np.maximum(env_mean, smean), np.maximum(env_upper, supper)
        spike_growing = bool(np.max(slower) > sy.max() * (1 + GROWTH_REL))
        spike_model = sspec.name
        spike_t = _t_last(axis.u(st), sy, 1)

    # reserved bytes from the inverse reuse ratio (requested / reserved), MIGM's second trend
    ratio = np.ones_like(future)
    have = keep & (res > 0) & (y > 0)
    if have.sum() >= 3:
        rt, rr = t[have], y[have] / res[have]
        rspec = _select(rt, rr, axis, confidence, max_k=2)
        ratio = _predict(rspec.design, rt, rr, future, confidence)[0]
        ratio = np.clip(ratio, max(0.05, 0.5 * rr.min()), 1.5 * rr.max())
    scale = 1.0 / np.minimum(ratio, 1.0)  # reserved / requested, never below 1

    seen = float(max(np.max(y), np.max(res))) * MIB
    if observed_peak is not None:
        seen = max(seen, float(observed_peak))
    future_upper = env_upper * scale * MIB
    noise = sd * float(scale.max()) * MIB
    level = float(mean[0])
    tol = max(BLOCK / MIB, GROWTH_REL * abs(level))
    base_growing = bool(np.max(lower) > level + tol)
    growing = base_growing or spike_growing
    # the point forecast extrapolates only growth that is there: a slope the data do not
    # show (99 % lower bound) would carry its noise to the horizon
    point = env_mean if base_growing else np.maximum(level + excess, env_mean - mean + level)
    future_mean = point * scale * MIB
    expected = max(expected_maximum(future, future_mean, noise), seen)
    upper_peak = max(float(np.max(future_upper)), expected)

    if base_growing:
        trend = TREND_OF[spec.name]
    else:  # the spikes grow (their peaks' own trend), or nothing does
        trend = TREND_OF[spike_model] if spike_growing else "flat"
    uk = axis.u(tk)
    slope_t, slope_df = max(
        (_t_last(uk, yk, 1) if base_growing else 0.0, len(tk) - 2),
        (spike_t if spike_growing else 0.0, len(up_runs) - 2),
    )
    return Forecast(
        model=spec.name,
        trend=trend,
        growing=growing,
        horizon=int(round(h)),
        expected_peak=expected,
        upper_peak=upper_peak,
        observed_peak=int(seen),
        level=level * MIB,
        reserved_ratio=float(scale[-1]),
        spikes=len(up_runs),
        spike_excess=excess * MIB,
        curve_t=ct,
        curve_mean=cm * MIB,
        curve_upper=(cu + excess) * MIB,
        noise=noise,
        future_t=future,
        future_mean=future_mean,
        future_upper=future_upper,
        slope_t=slope_t,
        slope_df=slope_df,
        curvature_t=_t_last(uk, yk, 2),
    )


# ---------------------------------------------------------------------------
# The online decision


def round_up(n: float, block: int = BLOCK) -> int:
    """Bytes rounded up to whole allocator blocks."""
    return int(math.ceil(max(n, 0.0) / block)) * block


class Forecaster:
    """Online peak forecaster: feed one sample per iteration to ``update``.

    ``capacity`` is the slice's usable memory and ``context`` the CUDA context overhead
    (bytes). ``horizon`` is the job's total number of iterations when known; otherwise the
    forecast looks ``lookahead`` iterations past the last sample. The first ``warmup``
    samples (lazy initialisation, optimizer state created at the first step) count for
    the observed peak but not for the trend; trends are fitted to the last ``window``.

    The restart rule, for a trend that grows with its need over the capacity:

    * urgent: the need's bound reaches the capacity within ``lead`` iterations and the trend
      is steady and strong (below), or its point forecast does (any trend);
    * confirmed: the trend is steady (linear or accelerating, its curvature not ``slowing``
      standard errors below zero), strong (slope t >= ``strong`` and significant at
      ``significance``), its point forecast runs out of memory at least ``near`` iterations
      ahead, it has been fitted to ``patience`` x the distance to the earliest OOM its bound
      allows (or to a full ``window``: a long job's slow growth), and the last ``confirm``
      forecasts were over the capacity and growing;
    * otherwise it watches: a near OOM is cheap to wait for, a slowing or weak trend may
      flatten. The targets this meets: benchmarks/forecast_stress.py.

    A converged forecast (flat, stable, fitting) stands for the samples in its band, so a
    flat job costs one fit per ``refit`` samples (benchmarks/forecast_speed.py)."""

    def __init__(
        self,
        capacity: int,
        *,
        context: int = 0,
        horizon: int | None = None,
        lookahead: int = 1000,
        min_samples: int = 5,
        margin_fraction: float = 0.05,
        margin_bytes: int = 64 * MIB,
        confidence: float = 0.99,
        window: int = 200,
        warmup: int = 1,
        confirm: int = 1,
        stable: int = 10,
        refit: int = 10,
        lead: int = 3,
        near: int = 60,
        patience: float = 0.07,
        strong: float = 4.0,
        significance: float = 0.001,
        slowing: float = 2.0,
    ) -> None:
        _check(capacity > 0, f"capacity must be a positive number of bytes, got {capacity}")
        _check(context >= 0, f"context must be >= 0 bytes, got {context}")
        _check(horizon is None or horizon >= 1, f"horizon must be >= 1 iteration, got {horizon}")
        _check(lookahead >= 1, f"lookahead must be >= 1 iteration, got {lookahead}")
        _check(min_samples >= 3, f"min_samples must be >= 3, got {min_samples}")
        _check(
            0 <= margin_fraction < 1, f"margin_fraction must be in [0, 1), got {margin_fraction}"
        )
        _check(margin_bytes >= 0, f"margin_bytes must be >= 0, got {margin_bytes}")
        _check(0.5 < confidence < 1, f"confidence must be in (0.5, 1), got {confidence}")
        _check(window >= min_samples, f"window must be >= min_samples, got {window}")
        _check(warmup >= 0, f"warmup must be >= 0 samples, got {warmup}")
        _check(confirm >= 1 and stable >= 1, "confirm and stable must be >= 1")
        _check(refit >= 1, f"refit must be >= 1 sample, got {refit}")
        _check(lead >= 1, f"lead must be >= 1 iteration, got {lead}")
        _check(near >= 0, f"near must be >= 0 iterations, got {near}")
        _check(0 < patience < 1, f"patience must be in (0, 1), got {patience}")
        _check(strong > 0, f"strong must be a t statistic > 0, got {strong}")
        _check(0 < significance < 0.5, f"significance must be in (0, 0.5), got {significance}")
        _check(slowing > 0, f"slowing must be a t statistic > 0, got {slowing}")
        self.capacity = int(capacity)
        self.context = int(context)
        self.horizon = horizon
        self.lookahead = lookahead
        self.min_samples = min_samples
        self.margin_fraction = margin_fraction
        self.margin_bytes = margin_bytes
        self.confidence = confidence
        self.warmup = warmup
        self.confirm = confirm
        self.lead = lead
        self.near = near
        self.patience = patience
        self.strong = strong
        self.significance = significance
        self.slowing = slowing
        self.stable = stable
        self.refit = refit
        self._fitted: Decision | None = None  # the last decision that fitted a forecast
        self._reused = 0  # samples since then that reused it
        self.count = 0  # samples seen
        self.first_iteration: int | None = None
        self.last_iteration: int | None = None
        self.observed_peak = 0  # the largest requested or reserved peak seen
        self.window: deque[Sample] = deque(maxlen=window)  # the trend's samples
        self.decisions: deque[Decision] = deque(maxlen=max(stable, confirm))  # the latest
        self.first_restart: Decision | None = None
        self.last_forecast: Forecast | None = None
        self._over = 0  # consecutive samples with a growing need above capacity

    def margin(self, peak: float) -> int:
        """The safety margin for a peak: allocator blocks and fragmentation."""
        return round_up(max(self.margin_bytes, self.margin_fraction * peak))

    def horizon_for(self, last: int) -> int:
        """The iteration the forecast reaches."""
        if self.horizon is not None and self.first_iteration is not None:
            return max(self.first_iteration + self.horizon - 1, last)
        return last + self.lookahead

    def update(self, sample: Sample, *, fit: bool = False) -> Decision:
        """Add one sample and decide whether the job must restart on a larger slice
        (``fit``: from a forecast fitted now, even where a converged one would stand)."""
        self._add(sample)
        if not fit and self._within_converged(sample):
            self._reused += 1
            fitted = self._fitted
            assert fitted is not None
            decision = replace(
                fitted,
                iteration=sample.iteration,
                reason=f"{fitted.reason} (forecast of iteration {fitted.iteration}: this "
                "sample is within its band)",
            )
        else:
            decision = self._decide(sample.iteration)
            self._fitted, self._reused = decision, 0
        self.decisions.append(decision)
        if decision.restart and self.first_restart is None:
            self.first_restart = decision
        return decision

    def feed(self, sample: Sample) -> None:
        """Add one sample without deciding: the next ``update`` forecasts from it (a replay
        that has its first restart needs only the last row's forecast)."""
        self._add(sample)
        self._fitted = None  # the next decision fits

    def _add(self, sample: Sample) -> None:
        if self.last_iteration is not None and sample.iteration <= self.last_iteration:
            raise ForecastError(
                f"sample iteration {sample.iteration} after {self.last_iteration}; "
                "iterations must increase"
            )
        if self.first_iteration is None:
            self.first_iteration = sample.iteration
        self.last_iteration = sample.iteration
        self.count += 1
        self.observed_peak = max(self.observed_peak, sample.requested_peak, sample.reserved_peak)
        if self.count > self.warmup:
            self.window.append(sample)

    def _within_converged(self, sample: Sample) -> bool:
        """Whether the last forecast stands for this sample: it was flat, stable and fitting
        (converged), it was fitted fewer than ``refit`` samples ago, and the sample lies in
        its band (between the mean less the bound's width and the bound, spikes in). A
        sample outside, or ``refit`` samples in a row, are fitted: a job that starts to grow
        is seen within ``refit`` iterations, or at once if it leaves the band."""
        fitted, fc = self._fitted, self.last_forecast
        if fitted is None or fc is None or not fitted.converged or fitted.restart:
            return False
        if self._reused + 1 >= self.refit or fitted.need is None or fitted.need > self.capacity:
            return False
        if not fc.curve_t[0] <= sample.iteration <= fc.horizon:
            return False
        upper = float(np.interp(sample.iteration, fc.curve_t, fc.curve_upper))
        mean = float(np.interp(sample.iteration, fc.curve_t, fc.curve_mean))
        lower = mean - (upper - mean)
        peaks = [sample.requested_peak] + ([sample.reserved_peak] if sample.reserved_peak else [])
        return lower <= sample.requested_peak <= upper and max(peaks) <= fitted.predicted_peak

    @property
    def needs_samples(self) -> bool:
        """False once the forecast is flat and stable: the probe may stop sampling."""
        return not (self.decisions and self.decisions[-1].converged)

    def _decide(self, it: int) -> Decision:
        n = len(self.window)
        if n < self.min_samples:
            return Decision(
                it,
                False,
                None,
                None,
                "none",
                f"{n} of {self.min_samples} samples past the warm-up; no forecast yet",
            )
        win = list(self.window)
        fc = forecast(
            [s.iteration for s in win],
            [s.requested_peak for s in win],
            [s.reserved_peak for s in win],
            horizon=self.horizon_for(it),
            start=self.first_iteration,
            confidence=self.confidence,
            observed_peak=self.observed_peak,
        )
        self.last_forecast = fc
        peak = round_up(fc.upper_peak)
        margin = self.margin(fc.upper_peak)
        need = peak + self.context + margin
        over = need > self.capacity
        growing = over and fc.growing
        self._over = self._over + 1 if growing else 0
        oom_at = self._crossing(fc.future_t, fc.future_upper)
        expected_oom = self._crossing(fc.future_t, fc.future_mean)
        # how far the OOM is expected, and the earliest the data allow (the need's bound)
        expected = next((x for x in (expected_oom, oom_at) if x is not None), it) - it
        earliest = next((x for x in (oom_at, expected_oom) if x is not None), it) - it
        steady = fc.trend in ("linear", "quadratic") and fc.curvature_t > -self.slowing
        strong = fc.slope_t >= self.strong_t(fc.slope_df)
        near_bound = steady and strong and oom_at is not None and earliest <= self.lead
        near_mean = expected_oom is not None and expected_oom - it <= self.lead
        urgent = growing and (near_bound or near_mean)
        far = expected >= self.near
        # a full window is all the evidence there will be: a long job's slow growth is
        # confirmed on it rather than waited for until its OOM comes within reach
        window = min(math.ceil(self.patience * earliest), self.window.maxlen or n)
        evidence = growing and far and steady and strong
        confirmed = evidence and self._over >= self.confirm and n >= window
        restart = urgent or confirmed
        converged = self._converged(fc, peak)
        pct = round(100 * self.confidence)
        what = (
            f"{fc.trend} trend ({fc.model}), peak {human(peak)} by iteration {fc.horizon} "
            f"({pct}% bound{f', {fc.spikes} spikes' if fc.spikes else ''}) + context "
            f"{human(self.context)} + margin {human(margin)} = {human(need)}"
        )
        cap = human(self.capacity)
        oom = f"out of memory projected at iteration {expected_oom or oom_at}"
        if urgent:
            by = f"the bound reaches it by iteration {oom_at}"
            if not near_bound:
                by = f"the point forecast reaches it by iteration {expected_oom}"
            reason = f"restart: {what} > capacity {cap}; {by}"
        elif confirmed:
            reason = (
                f"restart: {what} > capacity {cap}; {oom}, growth seen over {n} samples "
                f"(window {window}, slope {fc.slope_t:.3g} standard errors)"
            )
        elif evidence:
            reason = (
                f"over capacity, confirming ({n} of {window} samples, {self._over} of "
                f"{self.confirm} forecasts): {what} > {cap}; {oom}"
            )
        elif growing:
            if not steady:
                why = "but the growth slows"
            elif not strong:
                why = (
                    f"but the growth is not yet strong evidence (slope {fc.slope_t:.3g} "
                    f"standard errors, {self.strong_t(fc.slope_df):.3g} needed)"
                )
            else:
                why = "is near, so waiting costs little"
            until = (
                f"the bound is {self.lead} iterations from the capacity"
                if steady and strong
                else f"the point forecast is {self.lead} iterations from the capacity"
            )
            reason = f"over capacity, watching: {what} > {cap}; {oom} {why}: restart when {until}"
        elif over:
            reason = f"no restart: the trend has flattened; {what} > {cap} but not growing"
        else:
            reason = f"fits: {what} <= capacity {cap}"
        return Decision(
            iteration=it,
            restart=restart,
            predicted_peak=peak,
            need=need,
            trend=fc.trend,
            reason=reason,
            expected_peak=round_up(fc.expected_peak),
            horizon=fc.horizon,
            growing=fc.growing,
            converged=converged,
            oom_at=oom_at if growing else None,
        )

    def strong_t(self, df: int) -> float:
        """The t statistic a slope needs to be strong evidence of growth with ``df`` degrees
        of freedom: ``strong``, and significant at ``significance`` however few the samples."""
        return max(self.strong, _t(1.0 - self.significance, float(max(df, 1))))

    def _crossing(self, t: np.ndarray, peak: np.ndarray) -> int | None:
        """The first iteration at which a peak curve plus context and margin passes the
        capacity, or None."""
        if len(t) == 0:
            return None
        margin = np.maximum(self.margin_bytes, self.margin_fraction * peak)
        need = np.ceil(peak / BLOCK) * BLOCK + self.context + np.ceil(margin / BLOCK) * BLOCK
        hit = np.flatnonzero(need > self.capacity)
        return int(math.ceil(t[hit[0]])) if len(hit) else None

    def _converged(self, fc: Forecast, peak: int) -> bool:
        if fc.growing:
            return False
        recent = [d for d in list(self.decisions)[-(self.stable - 1) :] if d.predicted_peak]
        if len(recent) < self.stable - 1 or any(d.growing for d in recent):
            return False
        peaks = [d.predicted_peak for d in recent] + [peak]
        return max(peaks) - min(peaks) <= max(BLOCK, 0.01 * peak)


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ForecastError(message)


def run_trace(
    samples: Sequence[Sample],
    capacity: int,
    *,
    iterations: int | None = None,
    context: int = 0,
    **options,
) -> Forecaster:
    """A Forecaster fed every sample of a trace, in order: every one decided up to the first
    restart, then only the last, from a forecast fitted to every row (the rows between
    cannot change the first restart, and the last forecast depends only on the samples).
    Linear in the rows: a forecast fits at most ``window`` samples."""
    fc = Forecaster(capacity, context=context, horizon=iterations, **options)
    for i, s in enumerate(samples):
        if i == len(samples) - 1:
            fc.update(s, fit=True)  # the final forecast is from every row
        elif fc.first_restart is None:
            fc.update(s)
        else:
            fc.feed(s)
    return fc


def replay(
    samples: Sequence[Sample],
    capacity: int,
    *,
    iterations: int | None = None,
    context: int = 0,
    **options,
) -> tuple[int | None, int | None]:
    """Run a trace through the online decision: (the first iteration at which it would
    restart or None, the predicted peak at the horizon from all samples or None)."""
    fc = run_trace(samples, capacity, iterations=iterations, context=context, **options)
    first = fc.first_restart
    last = fc.decisions[-1] if fc.decisions else None
    return (first.iteration if first else None), (last.predicted_peak if last else None)


def plot_forecast(
    fc: Forecaster, samples: Sequence[Sample], path: str | Path, title: str | None = None
) -> Path:
    """Draw the trace, the fitted trend with its upper bound to the horizon, the capacity
    and the restart decision to a PNG file (imports matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    gib = float(2**30)
    it = [s.iteration for s in samples]
    fig, ax = plt.subplots(figsize=(9, 4.8))
    ax.plot(it, [s.requested_peak / gib for s in samples], ".", ms=3, label="requested peak")
    if any(s.reserved_peak for s in samples):
        ax.plot(
            it,
            [s.reserved_peak / gib for s in samples],
            ".",
            ms=2,
            alpha=0.5,
            label="reserved peak",
        )
    f = fc.last_forecast
    if f is not None:
        ax.plot(f.curve_t, f.curve_mean / gib, "-", lw=1.2, label=f"trend ({f.model})")
        ax.fill_between(
            f.curve_t,
            f.curve_mean / gib,
            f.curve_upper / gib,
            alpha=0.25,
            label=f"{round(100 * fc.confidence)}% bound" + (" + spikes" if f.spikes else ""),
        )
    last = fc.decisions[-1] if fc.decisions else None
    if last is not None and last.predicted_peak is not None and last.horizon is not None:
        ax.plot(
            [last.horizon],
            [last.predicted_peak / gib],
            "v",
            color="purple",
            label=f"predicted peak {human(last.predicted_peak)}",
        )
        ax.plot(
            [last.horizon],
            [last.need / gib],
            "_",
            ms=14,
            mew=2,
            color="purple",
            label=f"need (+ context, margin) {human(last.need)}",
        )
    ax.axhline(fc.capacity / gib, color="red", lw=1, ls="--", label="capacity")
    if fc.context:
        ax.axhline(
            (fc.capacity - fc.context) / gib,
            color="red",
            lw=0.8,
            ls=":",
            label="capacity - context",
        )
    first = fc.first_restart
    if first is not None:
        ax.axvline(first.iteration, color="black", lw=1, label=f"restart at {first.iteration}")
    ax.set_xlabel("iteration")
    ax.set_ylabel("GiB")
    ax.set_title(title or "peak memory forecast")
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(alpha=0.3)
    out = Path(path)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
