"""The online forecaster of ``mig-run``: one sample per iteration in, a ``Decision`` out
(restart the job on a larger slice now, or not yet), with its settings in one
``ForecastSettings`` (memory/forecast.py describes the method)."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .fitting import _t
from .peak import BLOCK, MIB, Forecast, ForecastError, forecast, round_up
from .trace import Sample, human

__all__ = ["Decision", "ForecastSettings", "Forecaster"]


@dataclass(frozen=True)
class ForecastSettings:
    """The forecaster's settings, checked when made (``ForecastError`` names the field).

    See ``Forecaster`` for the restart rule the decision settings take part in."""

    capacity: int  # bytes: the slice's usable memory
    context: int = 0  # bytes: the CUDA context's overhead on top of the job's tensors
    horizon: int | None = None  # the job's total iterations, when known
    lookahead: int = 1000  # iterations forecast past the last sample without a horizon
    min_samples: int = 5  # samples past the warm-up before the first forecast
    margin_fraction: float = 0.05  # margin for allocator blocks and fragmentation: of the peak
    margin_bytes: int = 64 * MIB  # ... and at least this many bytes
    confidence: float = 0.99  # the one-sided level of the peak's bound
    window: int = 200  # trends are fitted to the last this many samples
    warmup: int = 1  # first samples that count for the observed peak, not the trend
    confirm: int = 1  # growing forecasts over capacity in a row to confirm a restart
    stable: int = 10  # forecasts in a row, flat and within a block, to converge
    refit: int = 10  # a converged forecast stands for at most this many samples
    lead: int = 3  # iterations from the OOM at which a restart is urgent
    near: int = 60  # iterations to the OOM below which a confirmed restart waits
    patience: float = 0.07  # samples a confirmed restart needs, as a share of the OOM's distance
    strong: float = 4.0  # the slope t statistic that is strong evidence of growth
    significance: float = 0.001  # ... and the level it must be significant at
    slowing: float = 2.0  # curvature standard errors below zero at which growth slows

    def __post_init__(self) -> None:
        for ok, message in self._checks():
            if not ok:
                raise ForecastError(message)
        object.__setattr__(self, "capacity", int(self.capacity))
        object.__setattr__(self, "context", int(self.context))

    def _checks(self) -> list[tuple[bool, str]]:
        """(holds, the error naming the field) for every setting, in field order."""
        h = self.horizon
        return [
            (
                self.capacity > 0,
                f"capacity must be a positive number of bytes, got {self.capacity}",
            ),
            (self.context >= 0, f"context must be >= 0 bytes, got {self.context}"),
            (h is None or h >= 1, f"horizon must be >= 1 iteration, got {h}"),
            (self.lookahead >= 1, f"lookahead must be >= 1 iteration, got {self.lookahead}"),
            (self.min_samples >= 3, f"min_samples must be >= 3, got {self.min_samples}"),
            (
                0 <= self.margin_fraction < 1,
                f"margin_fraction must be in [0, 1), got {self.margin_fraction}",
            ),
            (self.margin_bytes >= 0, f"margin_bytes must be >= 0, got {self.margin_bytes}"),
            (0.5 < self.confidence < 1, f"confidence must be in (0.5, 1), got {self.confidence}"),
            (self.window >= self.min_samples, f"window must be >= min_samples, got {self.window}"),
            (self.warmup >= 0, f"warmup must be >= 0 samples, got {self.warmup}"),
            (self.confirm >= 1, f"confirm must be >= 1, got {self.confirm}"),
            (self.stable >= 1, f"stable must be >= 1, got {self.stable}"),
            (self.refit >= 1, f"refit must be >= 1 sample, got {self.refit}"),
            (self.lead >= 1, f"lead must be >= 1 iteration, got {self.lead}"),
            (self.near >= 0, f"near must be >= 0 iterations, got {self.near}"),
            (0 < self.patience < 1, f"patience must be in (0, 1), got {self.patience}"),
            (self.strong > 0, f"strong must be a t statistic > 0, got {self.strong}"),
            (
                0 < self.significance < 0.5,
                f"significance must be in (0, 0.5), got {self.significance}",
            ),
            (self.slowing > 0, f"slowing must be a t statistic > 0, got {self.slowing}"),
        ]


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
class _Verdict:
    """What one forecast means against the capacity: the need and the restart's grounds."""

    peak: int  # bytes: the peak's bound in whole blocks
    margin: int  # bytes: allocator blocks and fragmentation
    need: int  # peak + context + margin
    over: bool  # the need is above the capacity
    growing: bool  # ... and the trend still grows
    oom_at: int | None  # where the need's bound reaches the capacity
    expected_oom: int | None  # where its point forecast does
    steady: bool  # linear or accelerating, not slowing
    strong: bool  # the slope is strong evidence of growth
    near_bound: bool  # steady, strong and the bound's OOM within ``lead``
    urgent: bool  # growing, and the OOM within ``lead``
    window: int  # samples a confirmed restart needs
    evidence: bool  # growing, far, steady and strong
    confirmed: bool  # ... over ``confirm`` forecasts and ``window`` samples

    @property
    def restart(self) -> bool:
        """Whether the job restarts now."""
        return self.urgent or self.confirmed


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
        capacity: int | None = None,
        *,
        settings: ForecastSettings | None = None,
        **options: Any,
    ) -> None:
        """``Forecaster(settings=ForecastSettings(...))``, or ``Forecaster(capacity,
        **options)`` with the options of ``ForecastSettings`` as keywords."""
        if settings is None:
            if capacity is None:
                raise ForecastError("Forecaster needs a capacity or settings")
            settings = ForecastSettings(capacity, **options)
        elif capacity is not None or options:
            raise ForecastError("give Forecaster either settings or capacity and options")
        self.settings = settings
        self._fitted: Decision | None = None  # the last decision that fitted a forecast
        self._reused = 0  # samples since then that reused it
        self.count = 0  # samples seen
        self.first_iteration: int | None = None
        self.last_iteration: int | None = None
        self.observed_peak = 0  # the largest requested or reserved peak seen
        self.window: deque[Sample] = deque(maxlen=settings.window)  # the trend's samples
        self.decisions: deque[Decision] = deque(maxlen=max(settings.stable, settings.confirm))
        self.first_restart: Decision | None = None
        self.last_forecast: Forecast | None = None
        self._over = 0  # consecutive samples with a growing need above capacity

    @property
    def capacity(self) -> int:
        """Bytes: the slice's usable memory."""
        return self.settings.capacity

    @property
    def context(self) -> int:
        """Bytes: the CUDA context's overhead."""
        return self.settings.context

    @property
    def horizon(self) -> int | None:
        """The job's total iterations, when known."""
        return self.settings.horizon

    @property
    def confidence(self) -> float:
        """The one-sided level of the peak's bound."""
        return self.settings.confidence

    def margin(self, peak: float) -> int:
        """The safety margin for a peak: allocator blocks and fragmentation."""
        s = self.settings
        return round_up(max(s.margin_bytes, s.margin_fraction * peak))

    def horizon_for(self, last: int) -> int:
        """The iteration the forecast reaches."""
        if self.horizon is not None and self.first_iteration is not None:
            return max(self.first_iteration + self.horizon - 1, last)
        return last + self.settings.lookahead

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
        """Count a sample: its peak for the observed peak, past the warm-up for the trend."""
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
        if self.count > self.settings.warmup:
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
        if (
            self._reused + 1 >= self.settings.refit
            or fitted.need is None
            or fitted.need > self.capacity
        ):
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

    # -- the decision: fit, project the need, find the crossing, judge, explain ----------

    def _decide(self, it: int) -> Decision:
        """The decision at iteration ``it``: no forecast before ``min_samples`` samples,
        else one fitted to the window, judged against the capacity."""
        n = len(self.window)
        if n < self.settings.min_samples:
            return Decision(
                it,
                False,
                None,
                None,
                "none",
                f"{n} of {self.settings.min_samples} samples past the warm-up; no forecast yet",
            )
        fc = self._fit(it)
        v = self._judge(fc, it, n)
        converged = self._converged(fc, v.peak)
        return Decision(
            iteration=it,
            restart=v.restart,
            predicted_peak=v.peak,
            need=v.need,
            trend=fc.trend,
            reason=self._reason(fc, v, n),
            expected_peak=round_up(fc.expected_peak),
            horizon=fc.horizon,
            growing=fc.growing,
            converged=converged,
            oom_at=v.oom_at if v.growing else None,
        )

    def _fit(self, it: int) -> Forecast:
        """Fit a forecast to the window up to the horizon (kept as ``last_forecast``)."""
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
        return fc

    def _judge(self, fc: Forecast, it: int, n: int) -> _Verdict:
        """Project the peak's need, find where it crosses the capacity, and judge whether
        that is urgent or confirmed (counts the growing forecasts over the capacity)."""
        s = self.settings
        peak = round_up(fc.upper_peak)
        margin = self.margin(fc.upper_peak)
        need = peak + s.context + margin
        over = need > s.capacity
        growing = over and fc.growing
        self._over = self._over + 1 if growing else 0
        oom_at = self._crossing(fc.future_t, fc.future_upper)
        expected_oom = self._crossing(fc.future_t, fc.future_mean)
        # how far the OOM is expected, and the earliest the data allow (the need's bound)
        expected = next((x for x in (expected_oom, oom_at) if x is not None), it) - it
        earliest = next((x for x in (oom_at, expected_oom) if x is not None), it) - it
        steady = fc.trend in ("linear", "quadratic") and fc.curvature_t > -s.slowing
        strong = fc.slope_t >= self.strong_t(fc.slope_df)
        near_bound = steady and strong and oom_at is not None and earliest <= s.lead
        near_mean = expected_oom is not None and expected_oom - it <= s.lead
        far = expected >= s.near
        # a full window is all the evidence there will be: a long job's slow growth is
        # confirmed on it rather than waited for until its OOM comes within reach
        window = min(math.ceil(s.patience * earliest), self.window.maxlen or n)
        evidence = growing and far and steady and strong
        return _Verdict(
            peak=peak,
            margin=margin,
            need=need,
            over=over,
            growing=growing,
            oom_at=oom_at,
            expected_oom=expected_oom,
            steady=steady,
            strong=strong,
            near_bound=near_bound,
            urgent=growing and (near_bound or near_mean),
            window=window,
            evidence=evidence,
            confirmed=evidence and self._over >= s.confirm and n >= window,
        )

    def _reason(self, fc: Forecast, v: _Verdict, n: int) -> str:
        """The decision in one line an operator can read."""
        pct = round(100 * self.confidence)
        what = (
            f"{fc.trend} trend ({fc.model}), peak {human(v.peak)} by iteration {fc.horizon} "
            f"({pct}% bound{f', {fc.spikes} spikes' if fc.spikes else ''}) + context "
            f"{human(self.context)} + margin {human(v.margin)} = {human(v.need)}"
        )
        cap = human(self.capacity)
        oom = f"out of memory projected at iteration {v.expected_oom or v.oom_at}"
        if v.urgent:
            by = f"the bound reaches it by iteration {v.oom_at}"
            if not v.near_bound:
                by = f"the point forecast reaches it by iteration {v.expected_oom}"
            return f"restart: {what} > capacity {cap}; {by}"
        if v.confirmed:
            return (
                f"restart: {what} > capacity {cap}; {oom}, growth seen over {n} samples "
                f"(window {v.window}, slope {fc.slope_t:.3g} standard errors)"
            )
        if v.evidence:
            return (
                f"over capacity, confirming ({n} of {v.window} samples, {self._over} of "
                f"{self.settings.confirm} forecasts): {what} > {cap}; {oom}"
            )
        if v.growing:
            return f"over capacity, watching: {what} > {cap}; {oom} {self._watching(fc, v)}"
        if v.over:
            return f"no restart: the trend has flattened; {what} > {cap} but not growing"
        return f"fits: {what} <= capacity {cap}"

    def _watching(self, fc: Forecast, v: _Verdict) -> str:
        """Why a growing need over the capacity does not restart yet, and when it will."""
        lead = self.settings.lead
        if not v.steady:
            why = "but the growth slows"
        elif not v.strong:
            why = (
                f"but the growth is not yet strong evidence (slope {fc.slope_t:.3g} "
                f"standard errors, {self.strong_t(fc.slope_df):.3g} needed)"
            )
        else:
            why = "is near, so waiting costs little"
        until = (
            f"the bound is {lead} iterations from the capacity"
            if v.steady and v.strong
            else f"the point forecast is {lead} iterations from the capacity"
        )
        return f"{why}: restart when {until}"

    def strong_t(self, df: int) -> float:
        """The t statistic a slope needs to be strong evidence of growth with ``df`` degrees
        of freedom: ``strong``, and significant at ``significance`` however few the samples."""
        s = self.settings
        return max(s.strong, _t(1.0 - s.significance, float(max(df, 1))))

    def _crossing(self, t: np.ndarray, peak: np.ndarray) -> int | None:
        """The first iteration at which a peak curve plus context and margin passes the
        capacity, or None."""
        if len(t) == 0:
            return None
        s = self.settings
        margin = np.maximum(s.margin_bytes, s.margin_fraction * peak)
        need = np.ceil(peak / BLOCK) * BLOCK + s.context + np.ceil(margin / BLOCK) * BLOCK
        hit = np.flatnonzero(need > s.capacity)
        return int(math.ceil(t[hit[0]])) if len(hit) else None

    def _converged(self, fc: Forecast, peak: int) -> bool:
        """Whether the forecast is flat and its peak stable over the last ``stable``."""
        if fc.growing:
            return False
        stable = self.settings.stable
        recent = [d for d in list(self.decisions)[-(stable - 1) :] if d.predicted_peak]
        if len(recent) < stable - 1 or any(d.growing for d in recent):
            return False
        peaks = [d.predicted_peak for d in recent] + [peak]
        return max(peaks) - min(peaks) <= max(BLOCK, 0.01 * peak)
