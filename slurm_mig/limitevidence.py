"""What a job's time limit says of its runtime, next to its kind's past runs.

Users ask for several times what their jobs run: over the 4,618 completed GPU jobs of
the ThetaGPU 2023 and MIT Supercloud 2021 traces (``shared/data/traces``), the
limit is a median 8.0 times the runtime, with a standard deviation of 1.96 in
ln(limit / runtime). So a limit alone suggests ``limit / LIMIT_RATIO``, and it is weak
evidence for one run. A kind's past runs suggest its typical run, as well as their own
spread lets them: runs of one script on one input agree, runs of a label that
covers several inputs do not. `with_limit` weighs the two in log space by their
precision (their inverse variance), so a consistent kind keeps its measured times and
a scattered one leans on the job's own limit.

A running job past its planned end is expected to run to its limit (`expected_end`):
the only bound known of it, the one Slurm's own backfill plans with. Expecting it to
end any moment instead made the planner hold slices for the next job behind it, for
as long as it ran on. Stdlib only (the hooks import `slurm_mig.runtimes`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping

__all__ = [
    "LATE_FRACTION",
    "LATE_SECONDS",
    "LIMIT_RATIO",
    "LIMIT_SPREAD",
    "OVERDUE_SECONDS",
    "expected_end",
    "from_limit",
    "late_threshold",
    "limit_weight",
    "with_limit",
]

LIMIT_RATIO = 8.0  # median time limit / runtime in the two traces (module doc)
LIMIT_SPREAD = 1.96  # standard deviation of ln(limit / runtime) there
OVERDUE_SECONDS = 1.0  # an overdue job without a limit is expected to end this soon
FEW_RUNS = 3  # below this many runs their spread is not measured: the two weigh alike
LATE_FRACTION = 0.10  # a run this far off its plan (and LATE_SECONDS) re-plans its GPU
LATE_SECONDS = 2.0


def from_limit(limit: float) -> float:
    """The runtime a time limit alone suggests (on the smallest size the job runs on)."""
    return limit / LIMIT_RATIO


def limit_weight(obs: Mapping[int, list[float]]) -> float:
    """How much the limit counts (0..1) against the runs ``obs`` (size -> seconds): 1
    without runs, 1/2 while fewer than `FEW_RUNS` runs share a size with another run,
    else var / (var + `LIMIT_SPREAD`²), var the variance of ln(run / the median of its
    size's runs) over the sizes with two runs or more. A run alone on its size is its
    own median and says nothing of the spread, so it is not counted."""
    logs: list[float] = []
    seen = False
    for runs in obs.values():
        good = [t for t in runs if t > 0 and math.isfinite(t)]
        seen = seen or bool(good)
        if len(good) >= 2:
            mid = statistics.median(good)
            logs.extend(math.log(t / mid) for t in good)
    if not seen:
        return 1.0
    if len(logs) < FEW_RUNS:
        return 0.5
    var = statistics.pvariance(logs)
    return var / (var + LIMIT_SPREAD * LIMIT_SPREAD)


def with_limit(
    times: Mapping[int, float], obs: Mapping[int, list[float]], limit: float
) -> dict[int, float]:
    """``times`` (seconds per size, estimated from the runs ``obs``) scaled toward
    `from_limit` on their smallest finite size, by `limit_weight` in log space; the
    shape across sizes is the runs'. Unchanged without a finite positive limit."""
    finite = [s for s, t in times.items() if 0 < t < math.inf]
    if not finite or not (0 < limit < math.inf):
        return dict(times)
    w = limit_weight(obs)
    ref = times[min(finite)]
    factor = math.exp(w * (math.log(from_limit(limit)) - math.log(ref)))
    return {s: t * factor if math.isfinite(t) else t for s, t in times.items()}


def expected_end(start: float, planned: float, limit: float | None, now: float) -> float:
    """When a job running since ``start`` is expected to end: after its ``planned``
    seconds; once past them, at its time ``limit`` (seconds; None or inf: none), and
    never sooner than `OVERDUE_SECONDS` from ``now``."""
    end = start + planned
    if end <= now and limit is not None and math.isfinite(limit):
        end = start + limit
    return max(end, now + OVERDUE_SECONDS)


def late_threshold(planned: float) -> float:
    """How far a run may end off its ``planned`` seconds (or run past them) before it is
    an event that re-plans the jobs planned on its GPU (daemon and simulator alike)."""
    return max(LATE_FRACTION * planned, LATE_SECONDS)
