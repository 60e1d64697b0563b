"""The restart decision and the point forecast on a generated stress set (issue 11).

Every trace is a job of N iterations (numbered from 1) on a slice of C bytes, fed one
sample at a time to the ``Forecaster`` with the job length as its horizon, as mig-run does
with ``--iterations``. Noise is Gaussian, 0.5-3 % of the level; some traces start with a
lower first sample (the optimizer's state appears at the first step).

OOM-bound families (the slice is too small; the OOM iteration T is the first sample above C,
T >= 100): linear and quadratic growth (30-70 % of the growth to the OOM linear, the rest
quadratic), fast and slow, and a slowly growing base with periodic evaluation spikes. A
trace is *slow* when its growth to the OOM is slower than C / N per iteration. Targets:
decided at <= 15 % of T (<= 30 % when slow) and before T.

Families that fit (the true peak + the forecaster's margin is 10-100 % below C): warm-up
ramps of 3-30 iterations then flat, flat noise, step changes, periodic evaluation spikes,
saturating growth. Target: no restart at all.

A drawn trace is drawn again only when no online method could decide it in time, and each
rule counts what it redrew (the report prints the counts):

* linear-twin: up to its bend (the ramp's end; for saturating growth, where its slope has
  halved) a ramp is the same data as straight growth from the same start with the same
  slope, reaching the slice at t_x (where the need, + 5 % margin, passes C). When
  t_x >= ``T_NEAR`` (40) the twin is due by 15 % of t_x (30 % when slow), and the bend is
  kept only when it shows (3 samples after it) by half of that deadline -- closer, its
  few samples past the bend are within the noise when the twin must be decided. When
  t_x < 40 no forecaster can decide the twin by 15 % of it (a forecast needs 6 samples):
  it is watched until its OOM is ``LEAD`` iterations away, so the bend must show before
  then (t_x - bend >= 3 + LEAD + 1);
* quadratic-twin: the same for the accelerating twin: a quadratic trace the OOM-bound
  family could hold (T >= 100, the same N) whose mean slope up to the bend showing is the
  ramp's and whose curvature, up to its own deadline, has a t statistic below 2.33 (a
  one-sided 99 % test cannot tell the two apart), and whose deadline comes before
  2 x (bend + 3), as above;
* hidden-growth: OOM-bound growth whose slope's t statistic by its deadline is below 5
  (``DETECT``: a 99 % test needs 2.3, the rest is room for the noise of the estimate), or,
  when its straight extension stays under the slice within the job, whose acceleration's is;
* late-spike: growing spikes whose first spike comes after the deadline (nothing grows
  before it);
* early-oom and no-oom are the definitions, not undecidability: an OOM-bound trace whose
  noise crosses the slice before iteration 100, and growing spikes that never reach it.

The point forecast (``expected_peak``) from the first 10 % of the iterations is compared
with the job's true peak (the largest sample of the uncapped trace), on the traces whose
peak is *visible* by then: every change of shape is at least 3 samples before the 10 %
mark, the growth that leads to the peak has risen by 3 noise sd by then, and a quadratic's
curvature has a t statistic of at least 5 (its peak is at the end of the job: a curvature
the noise hides cannot be extrapolated). The others are reported apart. Target: mean
|error| <= 5 % on the visible ones.

Usage: python benchmarks/forecast_stress.py [--per-family N] [--seed S] [--jobs J] [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from slurm_mig.memory.forecast import Forecaster  # noqa: E402
from slurm_mig.memory.trace import Sample  # noqa: E402

GIB = 2**30
SLICES = (4.75 * GIB, 9.75 * GIB, 19.6 * GIB, 39.5 * GIB)  # usable memory of 1g..7g (A100-40)
T_MIN = 100  # OOM-bound traces run out of memory at iteration 100 or later
T_NEAR = 40  # an OOM before 40 cannot be decided by 15 % of it (a forecast needs 6 samples)
SEPARATION = 2.0  # a bend must show by half of its twin's deadline
LEAD = 3  # the forecaster acts when its bound is this many iterations from the slice
DETECT = 5.0  # the slope's t statistic growth must reach by its deadline
TWIN = 2.33  # below this t statistic a one-sided 99 % test cannot tell two prefixes apart
SHARES = (0.3, 0.7)  # the quadratic family's share of linear growth
TARGET_FAST, TARGET_SLOW, TARGET_ERROR = 0.15, 0.30, 0.05
MARGIN = 0.05  # the forecaster's margin fraction: "fits" means peak * 1.05 * room <= C

OOM_FAMILIES = ("linear", "quadratic", "spikes-growing")
FIT_FAMILIES = ("warmup-ramp", "flat", "step", "eval-spikes", "saturating")
FAMILIES = OOM_FAMILIES + FIT_FAMILIES

# Why a drawn trace was drawn again (see the module's docstring), in the report's words.
REDRAWS = {
    "linear-twin": "ramps and saturating growth whose bend shows too late for the straight "
    "growth to an OOM they match up to it",
    "quadratic-twin": "ramps and saturating growth whose bend shows too late for an "
    "accelerating growth to an OOM they match within the noise",
    "hidden-growth": "OOM-bound growth whose slope (or acceleration) the noise hides until "
    "its deadline",
    "late-spike": "growing spikes whose first spike comes after the deadline",
    "early-oom": "OOM-bound traces whose noise crossed the slice before iteration 100 "
    "(not OOM-bound by the definition)",
    "no-oom": "growing spikes that never reach the slice (they fit)",
}


@dataclass(frozen=True)
class Trace:
    """One generated job: its requested bytes per iteration (1..N) and what is true of it."""

    family: str
    index: int
    values: tuple[int, ...]  # requested peak of iterations 1..N (uncapped)
    capacity: int
    oom_at: int | None  # first iteration above capacity; None: it fits
    slow: bool  # growth to the OOM slower than capacity / iterations
    visible: bool  # the peak's shape is visible by 10 % of the iterations
    what: str  # the parameters, for a reader

    @property
    def iterations(self) -> int:
        return len(self.values)

    @property
    def true_peak(self) -> int:
        return max(self.values)

    @property
    def at10(self) -> int:
        return max(1, round(0.1 * self.iterations))

    @property
    def bound(self) -> float:
        return TARGET_SLOW if self.slow else TARGET_FAST


@dataclass(frozen=True)
class Result:
    family: str
    index: int
    oom_at: int | None
    slow: bool
    visible: bool
    decided_at: int | None  # first restart decision (for a fitting trace: a false restart)
    expected_error: float | None  # expected_peak at 10 % vs the true peak (relative)
    predicted_error: float | None  # predicted_peak (99 % bound) at 10 %
    what: str

    @property
    def ratio(self) -> float | None:
        if self.oom_at is None or self.decided_at is None:
            return None
        return self.decided_at / self.oom_at

    @property
    def ok(self) -> bool:
        if self.oom_at is None:
            return self.decided_at is None
        bound = TARGET_SLOW if self.slow else TARGET_FAST
        return self.decided_at is not None and self.decided_at <= bound * self.oom_at


# ---------------------------------------------------------------------------
# Generation (pure, seeded)


def _noisy(rng: np.random.Generator, trend: np.ndarray, rel: float) -> np.ndarray:
    return trend * (1.0 + rng.normal(0.0, rel, len(trend)))


def _first_drop(rng: np.random.Generator, y: np.ndarray) -> np.ndarray:
    """Half of the traces: the first sample is lower (state created at the first step)."""
    if rng.random() < 0.5:
        y = y.copy()
        y[0] *= 1.0 - rng.uniform(0.05, 0.3)
    return y


def _finish(family, index, y, capacity, *, slow=False, visible=True, what="") -> Trace:
    values = tuple(int(max(v, 0.0)) for v in y)
    oom = next((i + 1 for i, v in enumerate(values) if v > capacity), None)
    return Trace(family, index, values, int(capacity), oom, slow, visible, what)


def _fitting_capacity(rng: np.random.Generator, peak: float) -> float:
    return peak * (1 + MARGIN) * rng.uniform(1.1, 2.0)


def _rises(trend: np.ndarray, at10: int, rel: float) -> bool:
    """The growth up to 10 % of the job is at least 3 noise sd."""
    return trend[at10 - 1] - trend[0] >= 3 * rel * trend[at10 - 1]


def detectable(trend: np.ndarray, rel: float, deadline: float, capacity: float) -> bool:
    """Whether the OOM can be shown by ``deadline`` at all, from the samples up to then
    (the first is warm-up): the t statistic of the slope is at least ``DETECT`` (a
    one-sided 99 % test needs 2.3; room for noise and confirmations) and the straight
    extension reaches the slice within the job, or else the t statistic of the
    acceleration is (a quadratic: SE of the curvature sd * sqrt(180 / n^5))."""
    n = int(deadline) - 1
    if n < 4:
        return False
    t = np.arange(n, dtype=float)
    y = trend[1 : n + 1]
    slope, curve = np.polyfit(t, y, 1)[0], np.polyfit(t, y, 2)[0]
    sd = rel * trend[n]
    reaches = y[-1] + slope * (len(trend) - n) >= capacity / (1 + MARGIN)
    if reaches:
        return slope * n**1.5 / (sd * math.sqrt(12)) >= DETECT
    return curve * n**2.5 / (sd * math.sqrt(180)) >= DETECT


def curvature_t(curve: float, n: int, sd: float) -> float:
    """The t statistic of a curvature ``curve`` (the coefficient of t^2) fitted to n
    evenly spaced samples with noise ``sd``: its standard error is sd sqrt(180 / n^5)."""
    return curve * n**2.5 / (sd * math.sqrt(180)) if n >= 4 else 0.0


def quadratic_twin_due(
    y0: float, slope: float, capacity: float, n: int, sd: float, bend: float
) -> float | None:
    """The earliest deadline of an OOM-bound quadratic trace the set could hold (a share of
    0.3-0.7 linear growth from y0 to the slice at T >= ``T_MIN``, the same job length)
    whose samples up to the bend showing have the mean slope ``slope`` and, up to its
    deadline, a curvature the noise hides (t below ``TWIN``); None if there is none."""
    grow, seen, due = capacity - y0, int(bend) + 3, None
    for share in np.linspace(*SHARES, 9):
        # mean slope over the first `seen` iterations: grow / T (share + (1 - share) seen / T)
        b, c = grow * share, grow * (1 - share) * seen
        t_oom = (b + math.sqrt(b * b + 4 * slope * c)) / (2 * slope)
        if not T_MIN <= t_oom <= 0.95 * n:
            continue
        deadline = (TARGET_SLOW if grow / t_oom < capacity / n else TARGET_FAST) * t_oom
        m = min(seen, int(deadline))
        if curvature_t(grow * (1 - share) / t_oom**2, m, sd) < TWIN:
            due = deadline if due is None else min(due, deadline)
    return due


def _growth(rng, index, family, redrawn: Counter) -> Trace:
    """OOM-bound: linear or quadratic growth from y0 to C at iteration T (or spikes riding
    on a slow linear base), fast or slow; growth the noise hides until its deadline is
    drawn again (counted in ``redrawn`` by rule)."""
    while True:
        drawn = _draw_growth(rng, index, family, redrawn)
        if (drawn.trace.oom_at or 0) < T_MIN:
            redrawn["early-oom"] += 1
        elif drawn.shown_by > drawn.deadline:
            redrawn["late-spike"] += 1
        elif not detectable(drawn.trend, drawn.rel, drawn.deadline, drawn.trace.capacity):
            redrawn["hidden-growth"] += 1
        else:
            return drawn.trace


@dataclass(frozen=True)
class _Drawn:
    trace: Trace
    trend: np.ndarray
    rel: float
    shown_by: int = 0  # the iteration by which the growth's shape has shown (a spike)

    @property
    def deadline(self) -> float:
        return self.trace.bound * (self.trace.oom_at or 0)


def _draw_growth(rng, index, family, redrawn: Counter) -> _Drawn:
    while True:
        n = int(rng.integers(200, 601))
        cap = float(rng.choice(SLICES))
        rel = rng.uniform(0.005, 0.03)
        y0 = cap * rng.uniform(0.15, 0.85)
        slow = rng.random() < 0.5
        fast_max = n * (1 - y0 / cap)  # T below this: faster than C / N per iteration
        lo, hi = (max(T_MIN, fast_max), 0.95 * n) if slow else (T_MIN, min(fast_max, 0.95 * n))
        if lo < hi:
            break
    t_oom = rng.uniform(lo, hi)
    t = np.arange(1, n + 1, dtype=float)
    at10 = max(1, round(0.1 * n))
    if family == "linear":
        trend = y0 + (cap - y0) * t / t_oom
        what = f"y0 {y0 / cap:.2f} C, slope {(cap - y0) / t_oom / cap:.4f} C/it"
    elif family == "quadratic":
        share = rng.uniform(0.3, 0.7)  # of the growth to the OOM that is linear
        s = t / t_oom
        trend = y0 + (cap - y0) * (share * s + (1 - share) * s * s)
        what = f"y0 {y0 / cap:.2f} C, {share:.0%} linear + quadratic to C at {t_oom:.0f}"
        curve = (cap - y0) * (1 - share) / t_oom**2  # per iteration squared
        y = _first_drop(rng, _noisy(rng, trend, rel))
        trace = _finish(family, index, y, cap, slow=slow, what=what + f", noise {rel:.1%}")
        sd = rel * trend[at10 - 1]
        visible = _rises(trend, at10, rel) and curvature_t(curve, at10 - 1, sd) >= DETECT
        return _Drawn(_with(trace, visible=visible, slow=_is_slow(trace, y0)), trend, rel)
    else:
        period, width = int(rng.integers(10, 41)), int(rng.integers(1, 3))
        height = rng.uniform(0.1, 0.4)
        top = y0 * (1 + height)
        trend = y0 + (cap / (1 + height) - y0) * t / t_oom
        if top >= cap:  # the first spike would already be out of memory: start lower
            y0 = 0.8 * cap / (1 + height)
            trend = y0 + (cap / (1 + height) - y0) * t / t_oom
        spike = np.where((t.astype(int) % period) < width, 1 + height, 1.0)
        what = f"y0 {y0 / cap:.2f} C, spikes +{height:.0%} every {period}, noise {rel:.1%}"
        y = _noisy(rng, trend, rel) * spike
        trace = _finish(family, index, _first_drop(rng, y), cap, slow=slow, what=what)
        if trace.oom_at is None:  # no spike came after the envelope reached the slice
            redrawn["no-oom"] += 1
            return _draw_growth(rng, index, family, redrawn)
        visible = _rises(trend, at10, rel) and at10 >= 2 * period
        trace = _with(trace, visible=visible, slow=_is_slow(trace, y0))
        return _Drawn(trace, trend, rel, shown_by=period + width + 2)
    y = _first_drop(rng, _noisy(rng, trend, rel))
    trace = _finish(family, index, y, cap, slow=slow, what=what + f", noise {rel:.1%}")
    return _Drawn(
        _with(trace, visible=_rises(trend, at10, rel), slow=_is_slow(trace, y0)), trend, rel
    )


def _is_slow(trace: Trace, y0: float) -> bool:
    """Growth to the OOM slower than capacity / iterations (on average)."""
    if trace.oom_at is None:
        return False
    return (trace.capacity - y0) / trace.oom_at < trace.capacity / trace.iterations


def _with(trace: Trace, **changes) -> Trace:
    return Trace(**{**asdict(trace), **changes})


def identifiable(t_x: float, deadline: float, bend: float) -> bool:
    """Whether a growth that bends at ``bend`` can be told in time from its twin, the
    straight growth reaching the slice at ``t_x`` and due for a decision by ``deadline``:
    the twin is due so early that no forecaster could meet it (t_x < ``T_NEAR``) and the
    bend shows before the twin's OOM is ``LEAD`` iterations away (a forecaster must act
    then), or the bend shows (3 samples after it) well before the twin is due."""
    if t_x < T_NEAR:  # kept unless it would reach the slice before its bend shows
        return t_x - bend >= 3 + LEAD + 1
    return deadline >= SEPARATION * (bend + 3)


def _twin(y0, slope, cap, n, rel_sd, bend, t_x) -> str | None:
    """Which twin a bend at ``bend`` cannot be told from in time (see the module's
    docstring), or None: the straight growth reaching the slice at ``t_x``, or an
    accelerating one with the same mean slope up to the bend."""
    slow_twin = (cap - y0) / t_x < cap / n
    deadline = (TARGET_SLOW if slow_twin else TARGET_FAST) * t_x
    if not identifiable(t_x, deadline, bend):
        return "linear-twin"
    due = quadratic_twin_due(y0, slope, cap, n, rel_sd, bend)
    if due is not None and due < SEPARATION * (bend + 3):
        return "quadratic-twin"
    return None


def _ramp(rng, index, redrawn: Counter) -> Trace:
    """Warm-up: a ramp of L iterations from y0 to the plateau P, then flat."""
    while True:
        n = int(rng.integers(150, 501))
        rel = rng.uniform(0.005, 0.03)
        length = int(rng.integers(3, 31))
        plateau = rng.uniform(1, 30) * GIB
        rise = rng.uniform(0.1, 0.7)
        cap = _fitting_capacity(rng, plateau * (1 + 3 * rel))
        y0 = plateau * (1 - rise)
        slope = (plateau - y0) / length
        t_x = 1 + (cap / (1 + MARGIN) - y0) / slope  # where the extension reaches the slice
        twin = _twin(y0, slope, cap, n, rel * plateau, length, t_x)
        if twin is None:
            break
        redrawn[twin] += 1
    t = np.arange(1, n + 1, dtype=float)
    trend = y0 + slope * np.minimum(t - 1, length)
    at10 = max(1, round(0.1 * n))
    what = (
        f"ramp {length} it, +{rise:.0%} to {plateau / cap:.2f} C, extension at C by {t_x:.0f},"
        f" noise {rel:.1%}"
    )
    y = _noisy(rng, trend, rel)
    return _finish("warmup-ramp", index, y, cap, visible=length <= at10 - 3, what=what)


def _fits(rng, index, family, redrawn: Counter) -> Trace:
    n = int(rng.integers(150, 501))
    rel = rng.uniform(0.005, 0.03)
    level = rng.uniform(1, 30) * GIB
    t = np.arange(1, n + 1, dtype=float)
    at10 = max(1, round(0.1 * n))
    visible = True
    if family == "flat":
        trend = np.full(n, level)
        what = f"flat, noise {rel:.1%}"
    elif family == "step":
        k = int(rng.integers(5, n - 10))
        size = rng.uniform(-0.3, 0.4)
        trend = level * np.where(t >= k, 1 + size, 1.0)
        visible = k <= at10 - 3
        what = f"step {size:+.0%} at {k}, noise {rel:.1%}"
    elif family == "eval-spikes":
        period, width = int(rng.integers(10, 51)), int(rng.integers(1, 4))
        height = rng.uniform(0.1, 0.6)
        trend = level * np.where((t.astype(int) % period) < width, 1 + height, 1.0)
        visible = at10 >= 2 * period
        what = f"spikes +{height:.0%} x{width} every {period}, noise {rel:.1%}"
    else:  # saturating
        while True:
            tau = rng.uniform(5, n / 4)
            share = rng.uniform(0.3, 0.8)
            trend = level * (1 - share * np.exp(-(t - 1) / tau))
            y = _first_drop(rng, _noisy(rng, trend, rel))
            cap = _fitting_capacity(rng, float(np.max(y)))
            # the initial slope's straight extension, and when the slope has halved
            slope = level * share / tau
            t_x = 1 + (cap / (1 + MARGIN) - trend[0]) / slope
            bend = tau * math.log(2)
            sd = rel * trend[min(int(bend), n - 1)]
            twin = _twin(trend[0], slope, cap, n, sd, bend, t_x)
            if twin is None:
                break
            redrawn[twin] += 1
        visible = at10 >= 3 * tau
        what = (
            f"saturating, tau {tau:.0f} it, {share:.0%} of the level, slope's extension at C "
            f"by {t_x:.0f}, noise {rel:.1%}"
        )
        return _finish(family, index, y, cap, visible=visible, what=what)
    y = _noisy(rng, trend, rel)
    if family != "step":
        y = _first_drop(rng, y)
    cap = _fitting_capacity(rng, float(np.max(y)))
    return _finish(family, index, y, cap, visible=visible, what=what)


def generate(per_family: int, seed: int = 11) -> tuple[list[Trace], dict[str, int]]:
    """The stress set: ``per_family`` traces of each family, and how many were drawn again
    by each rule of ``REDRAWS`` (see the module's docstring)."""
    redrawn: Counter = Counter({rule: 0 for rule in REDRAWS})
    traces = [draw(family, i, seed, redrawn) for family in FAMILIES for i in range(per_family)]
    return traces, dict(redrawn)


def draw(family: str, index: int, seed: int = 11, redrawn: Counter | None = None) -> Trace:
    """Trace ``index`` of ``family`` in the set of ``seed`` (each has its own generator)."""
    rng = np.random.default_rng([seed, FAMILIES.index(family), index])
    redrawn = Counter() if redrawn is None else redrawn
    if family in OOM_FAMILIES:
        return _growth(rng, index, family, redrawn)
    if family == "warmup-ramp":
        return _ramp(rng, index, redrawn)
    return _fits(rng, index, family, redrawn)


# ---------------------------------------------------------------------------
# Evaluation


def samples_of(trace: Trace, upto: int | None = None) -> list[Sample]:
    values = trace.values if upto is None else trace.values[:upto]
    return [Sample.short(i + 1, v) for i, v in enumerate(values)]


def evaluate(trace: Trace, make: Callable[..., Forecaster] = Forecaster) -> Result:
    """Feed the trace up to its OOM (or its end) and record the first restart decision,
    and the forecasts at 10 % of the iterations."""
    fc = make(trace.capacity, horizon=trace.iterations)
    end = trace.oom_at - 1 if trace.oom_at is not None else trace.iterations
    decided = None
    expected_err = predicted_err = None
    for s in samples_of(trace, max(end, trace.at10)):
        d = fc.update(s)
        if s.iteration == trace.at10 and d.expected_peak is not None:
            expected_err = d.expected_peak / trace.true_peak - 1
            predicted_err = d.predicted_peak / trace.true_peak - 1
        if d.restart and decided is None and s.iteration <= end:
            decided = s.iteration
        if decided is not None and s.iteration >= trace.at10:
            break
    return Result(
        trace.family,
        trace.index,
        trace.oom_at,
        trace.slow,
        trace.visible,
        decided,
        expected_err,
        predicted_err,
        trace.what,
    )


def evaluate_all(traces: Sequence[Trace], jobs: int = 1) -> list[Result]:
    if jobs <= 1:
        return [evaluate(t) for t in traces]
    with ProcessPoolExecutor(jobs) as pool:
        return list(pool.map(evaluate, traces, chunksize=4))


# ---------------------------------------------------------------------------
# Report


def _mean_abs(xs: list[float]) -> str:
    return "-" if not xs else f"{100 * statistics.fmean(abs(x) for x in xs):.2f}%"


def _max_abs(xs: list[float]) -> str:
    return "-" if not xs else f"{100 * max(abs(x) for x in xs):.1f}%"


def report(results: list[Result], redrawn: dict[str, int], wall: float) -> str:
    rows = [["family", "traces", "OOM-bound", "false restarts", "decided (within bound)",
             "decided/OOM median", "max", "missed/late", "|err| exp@10% visible (n)", "max",
             "not visible (n)", "bound@10% visible"]]  # fmt: skip
    for family in FAMILIES:
        rs = [r for r in results if r.family == family]
        oom = [r for r in rs if r.oom_at is not None]
        fits = [r for r in rs if r.oom_at is None]
        ratios = [r.ratio for r in oom if r.ratio is not None]
        vis = [r.expected_error for r in rs if r.visible and r.expected_error is not None]
        hid = [r.expected_error for r in rs if not r.visible and r.expected_error is not None]
        up = [r.predicted_error for r in rs if r.visible and r.predicted_error is not None]
        rows.append([
            family, str(len(rs)), str(len(oom)),
            f"{sum(r.decided_at is not None for r in fits)} of {len(fits)}" if fits else "-",
            f"{sum(r.ok for r in oom)} of {len(oom)}" if oom else "-",
            f"{100 * statistics.median(ratios):.1f}%" if ratios else "-",
            f"{100 * max(ratios):.1f}%" if ratios else "-",
            str(sum(not r.ok for r in oom)) if oom else "-",
            f"{_mean_abs(vis)} ({len(vis)})", _max_abs(vis),
            f"{_mean_abs(hid)} ({len(hid)})",
            _mean_abs(up),
        ])  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    oom = [r for r in results if r.oom_at is not None]
    fits = [r for r in results if r.oom_at is None]
    vis = [r.expected_error for r in results if r.visible and r.expected_error is not None]
    hid = [r.expected_error for r in results if not r.visible and r.expected_error is not None]
    slow = [r for r in oom if r.slow]
    late = [r for r in oom if not r.ok]
    lines += [
        "",
        f"{len(results)} traces; false restarts (target 0): "
        f"{sum(r.decided_at is not None for r in fits)} of {len(fits)} that fit",
        f"OOM-bound decided within the bound (15 %; 30 % for the {len(slow)} slow ones) and "
        f"before the OOM: {sum(r.ok for r in oom)} of {len(oom)}",
        f"expected_peak at 10 %: mean |error| {_mean_abs(vis)} over {len(vis)} traces whose "
        f"peak is visible (target <= {TARGET_ERROR:.0%}); {_mean_abs(hid)} over the "
        f"{len(hid)} others",
        "drawn again, by rule:",
        *(f"  {redrawn.get(rule, 0):4d} {rule}: {what}" for rule, what in REDRAWS.items()),
        f"wall time {wall:.0f} s",
    ]
    for r in late:
        lines.append(
            f"  late or missed: {r.family}#{r.index} decided {r.decided_at} of OOM {r.oom_at} "
            f"({'slow' if r.slow else 'fast'}): {r.what}"
        )
    for r in fits:
        if r.decided_at is not None:
            lines.append(f"  false restart: {r.family}#{r.index} at {r.decided_at}: {r.what}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--per-family", type=int, default=25, help="traces per family (default 25)")
    p.add_argument("--seed", type=int, default=11)
    p.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    p.add_argument("--json", action="store_true", help="print every result as JSON")
    args = p.parse_args(argv)
    if args.per_family < 1:
        p.error("--per-family must be >= 1")
    t0 = time.perf_counter()
    traces, redrawn = generate(args.per_family, args.seed)
    results = evaluate_all(traces, args.jobs)
    wall = time.perf_counter() - t0
    if args.json:
        out = [asdict(r) | {"ratio": r.ratio, "ok": r.ok} for r in results]
        print(json.dumps(out, indent=2, default=lambda o: o.item()))  # numpy scalars
    else:
        print(report(results, redrawn, wall))
    return 0


if __name__ == "__main__":
    sys.exit(main())
