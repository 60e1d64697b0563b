"""What a site's users give the scheduler besides the job: who submits it, and the
time limit they ask for (``--time``), for simulations under site conditions.

Time limits. Users ask for several times what their jobs run, and pick round values.
The model: a job's reference runtime ``t`` is its runtime on its smallest runnable
instance (the longest it can take: a user's limit must hold wherever the job lands);
the ratio limit / runtime is drawn from the empirical distribution of completed GPU
jobs of the same runtime class in two real traces, and the product is rounded up to
the next value of ``GRID`` (the limits users ask most often), at most ``GRID[-1]``
(and never below ``t``: a limit the job would run into is no limit a user keeps).

``RATIO_QUANTILES`` (limit / runtime at 0, 10, ..., 90 and 95 %, per runtime class)
pool the single-node jobs that passed on ALCF ThetaGPU 2023 (A100, Cobalt; 4,186
jobs) and the completed GPU jobs with a finite limit of the MIT Supercloud 2021 subset
(V100, Slurm; 432 jobs), from ``shared/data/traces/`` (a test recomputes them there).
Above the 95th percentile the tail is cut (a ratio in the thousands is a limit of days
on a run of seconds, which the grid's top already covers). Short runs get huge ratios
(a 1-hour limit on a 40-second test), long runs ratios near 1.3.

Users. A trace without users gets ``USERS`` synthetic ones, each job's drawn seeded
with Zipf weights 1/rank (a few heavy users and a tail, as on shared clusters:
`draw_user`); a job that names its user keeps it (MISO's trace names one per template:
a rerun is its owner's).
"""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Iterable
from dataclasses import replace

from ..job import Job

__all__ = [
    "GRID",
    "RATIO_LEVELS",
    "RATIO_QUANTILES",
    "USERS",
    "draw_user",
    "limit_for",
    "reference_runtime",
    "with_site_fields",
]

USERS = 8
# the limits users ask most often (seconds): 10 min ... 7 days
GRID = (
    600,
    900,
    1200,
    1800,
    3600,
    5400,
    7200,
    10800,
    14400,
    18000,
    21600,
    28800,
    36000,
    43200,
    86400,
    172800,
    259200,
    604800,
)
# the quantile levels of RATIO_QUANTILES
RATIO_LEVELS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95)
# runtime class (lower bound, seconds) -> limit / runtime at RATIO_LEVELS
RATIO_QUANTILES: dict[float, tuple[float, ...]] = {
    0.0: (1.11, 7.1, 11.22, 20.43, 42.4, 59.92, 84.07, 128.8, 160.56, 258.68, 478.09),
    600.0: (1.01, 1.63, 1.9, 2.02, 2.48, 3.6, 4.72, 5.86, 17.23, 94.96, 118.15),
    3600.0: (1.01, 1.32, 1.35, 1.38, 1.9, 3.14, 4.5, 7.11, 11.83, 46.27, 97.68),
    14400.0: (1.0, 1.01, 1.08, 1.18, 1.22, 1.32, 1.42, 1.55, 1.82, 3.18, 17.65),
}
_CLASSES = tuple(sorted(RATIO_QUANTILES))


def reference_runtime(job: Job) -> float:
    """The job's longest finite runtime over its sizes (on its smallest runnable one)."""
    finite = [t for t in job.times.values() if math.isfinite(t)]
    if not finite:
        raise ValueError(f"job {job.id!r} has no size it can run on")
    return max(finite)


def _ratio(runtime: float, u: float) -> float:
    """The ratio at quantile ``u`` in [0, 0.95] of ``runtime``'s class, interpolated
    log-linearly between the table's levels."""
    table = RATIO_QUANTILES[_CLASSES[bisect.bisect_right(_CLASSES, runtime) - 1]]
    u = min(max(u, 0.0), RATIO_LEVELS[-1])
    i = min(bisect.bisect_right(RATIO_LEVELS, u) - 1, len(RATIO_LEVELS) - 2)
    lo, hi = RATIO_LEVELS[i], RATIO_LEVELS[i + 1]
    w = (u - lo) / (hi - lo)
    return math.exp((1 - w) * math.log(table[i]) + w * math.log(table[i + 1]))


def limit_for(runtime: float, u: float) -> float:
    """The limit a user asks for a job of ``runtime`` seconds at quantile ``u`` of the
    ratio (0 <= u < 1; above 0.95 the 95th percentile): rounded up to `GRID`, at most
    its top, never below ``runtime``."""
    if not (math.isfinite(runtime) and runtime > 0):
        raise ValueError(f"runtime must be a finite number of seconds > 0, got {runtime!r}")
    want = runtime * _ratio(runtime, u)
    i = bisect.bisect_left(GRID, want)
    limit = float(GRID[min(i, len(GRID) - 1)])
    return max(limit, math.ceil(runtime))


def _users(n: int) -> tuple[list[str], list[float]]:
    names = [f"user{k + 1}" for k in range(n)]
    return names, [1.0 / (k + 1) for k in range(n)]


def draw_user(rng: random.Random, users: int = USERS) -> str:
    """One of ``users`` synthetic users, drawn from ``rng`` with Zipf weights 1/rank."""
    names, weights = _users(users)
    return rng.choices(names, weights)[0]


def with_site_fields(jobs: Iterable[Job], seed: int, users: int = USERS) -> list[Job]:
    """``jobs`` with a user (kept where a job has one, else drawn as the module doc says)
    and a time limit (kept where finite, else drawn), seeded and deterministic."""
    if users < 1:
        raise ValueError(f"users must be at least 1, got {users}")
    rng = random.Random(f"site-fields:{seed}")
    out: list[Job] = []
    for job in jobs:
        pick = draw_user(rng, users)
        u = rng.random()
        user = job.user or pick
        limit = job.time_limit
        if not math.isfinite(limit):
            limit = limit_for(reference_runtime(job), u)
        out.append(replace(job, user=user, time_limit=limit))
    return out
