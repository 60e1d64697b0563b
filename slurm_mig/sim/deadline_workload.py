"""SMART-MIG's workload generator (Section VI-A): training and inference jobs with
deadlines, per-size times from measured MIG throughput curves, Poisson arrivals at a
fixed rate or following a day's pattern (Fig. 5) times a multiplier.

* Jobs: 4 inference to 1 training (the paper's ratio). Base time on 7g: training
  lognormal (median 15 min, sigma 0.8), inference exponential (mean 4 min); the paper
  names the distributions, not their parameters: ours, chosen so that 20x the base rate
  loads 8 A100s as Table I describes (no-MIG falls behind, MIG keeps up).
* Per-size times: ``p(s) = p(7) / thr(s)`` with ``thr`` a throughput curve relative to
  7g, measured by MIGPerf on an A100 (shared/data/profiles/migperf-a100, A100-80g: 1g,
  2g, 3g and 7g; 4g, not measured, interpolated between 3g and 7g): ResNet-50 training
  at batch 8/16/32, BERT-base inference at batch 4/8/16, one drawn per job. A group of
  these has a sublinearity score ``ss`` of about 0.75 (0.70-0.80 for 20 jobs), inside
  the paper's 0.67-0.84.
* Deadline: ``d = r + U(1, 1.5) * p(7)`` (the paper's draw, after the release).
* Arrivals: ``BASE_PER_DAY`` jobs a day on average at multiplier 1 (the paper trains on
  5M jobs = 5000 days at 20x, i.e. 1000 a day); ``daily``: the hourly pattern
  ``DAY_PATTERN`` (mean 1), a non-homogeneous Poisson process drawn by thinning;
  ``fixed``: the mean rate all day.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping, Sequence

from ..geometry import GpuModel
from ..workload import WorkloadError
from .api import SimJob

BASE_PER_DAY = 50.0
DAY_S = 86400.0
INFERENCE_SHARE = 0.8
TRAIN_MEDIAN_S, TRAIN_SIGMA = 900.0, 0.8
INFER_MEAN_S = 240.0
SLACK = (1.0, 1.5)

# Fig. 5 shows a day's arrival rate without its values; this is our diurnal curve
# (night trough, morning rise, afternoon peak), hours 0-23, normalised to mean 1.
_RAW_DAY = (
    0.45, 0.40, 0.35, 0.33, 0.33, 0.38, 0.50, 0.75, 1.10, 1.40, 1.55, 1.50,
    1.30, 1.45, 1.60, 1.65, 1.55, 1.40, 1.20, 1.05, 0.95, 0.85, 0.70, 0.55,
)  # fmt: skip
DAY_PATTERN = tuple(x * len(_RAW_DAY) / sum(_RAW_DAY) for x in _RAW_DAY)

# Throughput relative to 7g per size (MIGPerf, A100-80g, see the module doc):
# 7g, 3g, 2g, 1g samples/s.
_MEASURED = {
    "train:resnet50-b8": (356.27, 274.19, 175.44, 91.73),
    "train:resnet50-b16": (590.54, 344.72, 213.35, 110.31),
    "train:resnet50-b32": (722.21, 396.70, 239.52, 123.14),
    "infer:bert-base-b4": (432.19, 318.24, 232.98, 123.92),
    "infer:bert-base-b8": (360.37, 176.19, 126.75, 67.50),
    "infer:bert-base-b16": (215.34, 96.29, 66.79, 33.83),
}


def _curve(t7: float, t3: float, t2: float, t1: float) -> dict[int, float]:
    r3, r2, r1 = (min(1.0, t / t7) for t in (t3, t2, t1))
    return {1: r1, 2: r2, 3: r3, 4: r3 + (1.0 - r3) / 4.0, 7: 1.0}


CURVES: dict[str, dict[int, float]] = {k: _curve(*v) for k, v in _MEASURED.items()}
TRAIN_KINDS = tuple(k for k in CURVES if k.startswith("train:"))
INFER_KINDS = tuple(k for k in CURVES if k.startswith("infer:"))


def sublinearity_score(curves: Iterable[Mapping[int, float]]) -> float:
    """SMART-MIG's ``ss`` (Section IV-A) of a group: the slope of the least-squares line
    through the origin fitted to the group's mean throughput curve, over the slope of
    the linear curve through its 1g point (1: linear; lower: more sublinear)."""
    curves = list(curves)
    if not curves:
        raise ValueError("sublinearity_score needs at least one curve")
    sizes = sorted(set.intersection(*(set(c) for c in curves)))
    mean = {s: math.fsum(c[s] for c in curves) / len(curves) for s in sizes}
    fitted = math.fsum(s * mean[s] for s in sizes) / math.fsum(s * s for s in sizes)
    return fitted / mean[min(sizes)]


def job_curve(job: SimJob) -> dict[int, float]:
    """A job's throughput per size relative to its fastest (from its times)."""
    best = min(job.times.values())
    return {s: best / t for s, t in job.times.items() if math.isfinite(t)}


def _arrivals(n: int | None, days: float, rate: float, pattern: Sequence[float],
              rng: random.Random) -> list[float]:  # fmt: skip
    """Poisson arrivals at ``rate`` jobs a day times ``pattern[hour]`` (thinning),
    until ``n`` jobs (if given) or ``days`` days."""
    peak = rate * max(pattern) / DAY_S
    out: list[float] = []
    t = 0.0
    horizon = math.inf if n is not None else days * DAY_S
    while n is None or len(out) < n:
        t += rng.expovariate(peak)
        if t >= horizon:
            break
        hour = int(t // 3600.0) % len(pattern)
        if rng.random() * max(pattern) <= pattern[hour]:
            out.append(t)
    return out


def deadline_jobs(
    model: GpuModel,
    *,
    rate_multiplier: float = 20.0,
    days: float = 1.0,
    jobs: int | None = None,
    seed: int = 0,
    daily: bool = True,
    linear: bool = False,
    deadline_from_zero: bool = False,
) -> list[SimJob]:
    """SMART-MIG's jobs (module doc): ``daily`` arrivals follow Fig. 5's pattern, else a
    fixed rate; ``jobs`` stops after that many, else after ``days``; ``linear`` gives
    every job the linear curve (the paper's "linear throughput jobs" of Fig. 11);
    ``deadline_from_zero`` reads the paper's ``d_j ~ U(1, 1.5) p_j7`` literally, from the
    start of the queue rather than from the job's release."""
    if not (0 < rate_multiplier <= 10_000 and math.isfinite(rate_multiplier)):
        raise WorkloadError(f"--rate-multiplier {rate_multiplier} must be in (0, 10000]")
    if not (0 < days <= 366):
        raise WorkloadError(f"days {days} must be in (0, 366]")
    if jobs is not None and not 1 <= jobs <= 10_000_000:
        raise WorkloadError(f"--jobs {jobs} must be in [1, 10000000]")
    top = max(model.planner_sizes)
    rng = random.Random(f"smart-mig:{seed}")
    pattern = DAY_PATTERN if daily else (1.0,)
    times_at = _arrivals(jobs, days, BASE_PER_DAY * rate_multiplier, pattern, rng)
    out = []
    for i, r in enumerate(times_at):
        if rng.random() < INFERENCE_SHARE:
            kind = rng.choice(INFER_KINDS)
            base = rng.expovariate(1.0 / INFER_MEAN_S)
        else:
            kind = rng.choice(TRAIN_KINDS)
            base = rng.lognormvariate(math.log(TRAIN_MEDIAN_S), TRAIN_SIGMA)
        base = max(base, 1.0)
        curve = CURVES[kind]
        times = {}
        for s in model.planner_sizes:
            # a 4-slice model (A30) reads its sizes off the 7-slice curve by share
            x = s * 7 / top
            lo = max((k for k in curve if k <= x), default=1)
            hi = min((k for k in curve if k >= x), default=7)
            rel = (
                curve[lo]
                if hi == lo
                else curve[lo] + (curve[hi] - curve[lo]) * (x - lo) / (hi - lo)
            )
            times[s] = base * top / s if linear else base / rel
        times[top] = base
        d = (0.0 if deadline_from_zero else r) + rng.uniform(*SLACK) * base
        out.append(SimJob(f"j{i}", r, times, kind=kind, deadline=d))
    if not out:
        raise WorkloadError(
            "the smart-mig workload drew no job; raise --rate-multiplier or the days"
        )
    return out
