"""The forecast's model selection and regressions: competing trends over a window of
samples (flat, linear, log, quadratic, plateau, ramp, step, segmented), chosen on the
evidence (BIC with a noise floor), their profiled nonlinear parameter, and the one-sided
prediction bounds of an OLS fit (memory/forecast.py describes the method).

Pure functions of numpy arrays; scipy is imported at the first fit.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = [
    "EVIDENCE",
    "EVIDENCE_SAFE",
    "MIN_CONVEX",
    "NOISE_FLOOR",
    "PROFILE_MAX",
    "TREND_OF",
    "expected_maximum",
]

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
MIN_CONVEX = 10  # samples before a trend may bend upwards (quadratic, segmented)
PROFILE_MAX = 8  # fits kept from a profiled nonlinear parameter


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
    alpha=2 * (1 - confidence))`` (tests/memory/test_forecast.py checks it), solved here from
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
