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
tests/memory/test_forecast.py checks it, but its per-call overhead was most of a forecast's time).

The code: memory/fitting.py (models and regressions), memory/peak.py (one window's
forecast), memory/forecaster.py (the online decision and its ``ForecastSettings``),
memory/replay.py (a trace replayed, and its plot); this module re-exports them.
"""

from __future__ import annotations

from .fitting import (
    EVIDENCE,
    EVIDENCE_SAFE,
    MIN_CONVEX,
    NOISE_FLOOR,
    PROFILE_MAX,
    TREND_OF,
    expected_maximum,
)
from .forecaster import Decision, Forecaster, ForecastSettings
from .peak import (
    BLOCK,
    GRID,
    GROWTH_REL,
    MAX_EDGE_RUN,
    MIB,
    NEAR,
    SPIKE_REL,
    SPIKE_SIGMAS,
    Forecast,
    ForecastError,
    forecast,
    round_up,
)
from .replay import plot_forecast, replay, run_trace
from .trace import Sample, human

__all__ = [
    "BLOCK",
    "EVIDENCE",
    "EVIDENCE_SAFE",
    "GRID",
    "GROWTH_REL",
    "MAX_EDGE_RUN",
    "MIB",
    "MIN_CONVEX",
    "NEAR",
    "NOISE_FLOOR",
    "PROFILE_MAX",
    "SPIKE_REL",
    "SPIKE_SIGMAS",
    "TREND_OF",
    "Decision",
    "Forecast",
    "ForecastError",
    "ForecastSettings",
    "Forecaster",
    "Sample",
    "expected_maximum",
    "forecast",
    "human",
    "plot_forecast",
    "replay",
    "round_up",
    "run_trace",
]
