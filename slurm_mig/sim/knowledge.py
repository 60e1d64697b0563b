"""What a policy knows of a job's runtimes, apart from what the job really runs.

Modes (`KNOWLEDGE_MODES`):

- ``oracle``: the job's true seconds on every size (the earlier figures' condition).
- ``learned``: what the planner daemon would know: the daemon's own estimate
  (``runtimes.estimate_for_job``, the code the daemon runs) from the runs of the job's
  user and kind the simulation has finished so far (`LearnedRuntimes`, an in-memory
  store with the runtime store's reading methods), else the job's time limit, else
  ``default_runtime``, on other sizes by the Amdahl prior; sizes whose estimate
  passes the time limit are out, as the daemon rules them out. A job of several
  slices is learned per instance size and planned per region, as the daemon does
  (its ``task_times``, per instance size, are the same estimate). The sizes a job can run
  on at all (its memory need) are known: ``mig-run`` measures it and a ``mem=`` hint
  gives it.
- What Slurm itself plans with (`limit_times`): the time limit on every size, as
  Slurm's backfill does; the policies that model Slurm (static layouts, whole GPUs)
  see this under ``learned``; a gang's ``task_times`` likewise (`limit_task_times`).

The engine runs the true times whatever the mode, and reports how far what a policy
planned with was from them (`SimResult.estimate_error`). For scale, a real site's
per-user history (``SITE_ESTIMATE_OFF_P50``, ``SITE_WITHIN_2X``): on the MIT Supercloud
2021 subset (``shared/data/traces``; 1,292 completed GPU jobs whose user had run one
before) the runtime of the user's previous GPU job is off from the next one's by a
median factor of 1.40, within a factor 2 for 66 % of them. MISO's trace, whose
template's runs are one user's, comes close (40 A100s, age priority: 1.55, 60 %);
Philly's, one kind with users drawn per job, says less (4.48).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType

from ..config import SCHEMA
from ..geometry import GpuModel, gang_times
from ..job import Job
from ..runtimes import estimate_for_job

__all__ = [
    "DEFAULT_RUNTIME",
    "KNOWLEDGE_MODES",
    "SERIAL_FRACTION",
    "SITE_ESTIMATE_OFF_P50",
    "SITE_WITHIN_2X",
    "LearnedRuntimes",
    "learned_time_maps",
    "learned_times",
    "limit_task_times",
    "limit_times",
]

KNOWLEDGE_MODES = ("oracle", "learned")
DEFAULT_RUNTIME = float(SCHEMA["planner"]["default_runtime"].default)  # type: ignore[arg-type]
SERIAL_FRACTION = float(SCHEMA["planner"]["serial_fraction"].default)  # type: ignore[arg-type]
# a real site's per-user history as a runtime estimate (module doc)
SITE_ESTIMATE_OFF_P50 = 1.40
SITE_WITHIN_2X = 0.66


class LearnedRuntimes:
    """Finished runs per (kind, model, owner): the runtime store's reading side, in
    memory (``observations``, ``memory_need``), and a version per (owner, kind) that
    changes when a run of theirs is recorded."""

    def __init__(self) -> None:
        self._runs: dict[tuple[str, str, str], dict[int, list[float]]] = {}
        self.version: dict[tuple[str, str], int] = {}

    def record(self, owner: str, key: str, model: str, size: int, seconds: float) -> None:
        runs = self._runs.setdefault((key, model, owner), {})
        runs.setdefault(size, []).append(float(seconds))
        self.version[(owner, key)] = self.version.get((owner, key), 0) + 1

    def observations(
        self, key: str, model: str, owner: str | None = None
    ) -> dict[int, list[float]]:
        if owner is None:
            out: dict[int, list[float]] = {}
            for (k, m, _), runs in self._runs.items():
                if k == key and m == model:
                    for s, v in runs.items():
                        out.setdefault(s, []).extend(v)
            return out
        return {s: list(v) for s, v in self._runs.get((key, model, owner), {}).items()}

    def memory_need(self, key: str, owner: str | None = None) -> int | None:
        return None  # the job's memory is passed as known (module doc)


def _runnable(job: Job) -> set[int]:
    return {s for s, t in job.times.items() if math.isfinite(t)}


def _estimate(
    job: Job,
    model: GpuModel,
    store: LearnedRuntimes,
    owner: str,
    default_runtime: float,
    serial_fraction: float,
) -> dict[int, float]:
    """The daemon's estimate of one task's seconds per instance size."""
    limit = job.time_limit if math.isfinite(job.time_limit) else None
    return estimate_for_job(
        store,  # type: ignore[arg-type]
        job.kind or job.id,
        model,
        owner=owner,
        hint_seconds=None,
        time_limit=limit,
        min_memory=job.memory or None,
        default_runtime=default_runtime,
        serial_fraction=serial_fraction,
        gang=job.tasks > 1,
    )


def _runnable_only(
    est: Mapping[int, float], can: set[int], job: Job, default_runtime: float
) -> Mapping[int, float]:
    """``est`` on the sizes in ``can`` (inf elsewhere); at the job's limit (else
    ``default_runtime``) on them when the estimate ruled out every one."""
    out = {s: (t if s in can else math.inf) for s, t in est.items()}
    if not any(math.isfinite(t) for t in out.values()):
        # the estimate ruled out every size the job can run on: plan it at its limit
        limit = job.time_limit if math.isfinite(job.time_limit) else None
        fallback = limit if limit is not None else default_runtime
        out = {s: (fallback if s in can else math.inf) for s in est}
    return MappingProxyType(out)


def learned_times(
    job: Job,
    model: GpuModel,
    store: LearnedRuntimes,
    *,
    owner: str,
    default_runtime: float = DEFAULT_RUNTIME,
    serial_fraction: float = SERIAL_FRACTION,
) -> Mapping[int, float]:
    """Seconds per size the daemon would plan ``job`` with (module doc)."""
    kw = {"default_runtime": default_runtime, "serial_fraction": serial_fraction}
    return learned_time_maps(job, model, store, owner=owner, **kw)[0]


def _planned(
    job: Job, model: GpuModel, est: Mapping[int, float], default_runtime: float
) -> Mapping[int, float]:
    """The planned seconds per size from one task's estimate ``est`` (a gang's per
    region size)."""
    if job.tasks > 1:  # learned per instance size, planned per region (`geometry.gangs`)
        gang = gang_times(model, est, job.tasks)
        est = {s: gang.get(s, math.inf) for s in est}
    return _runnable_only(est, _runnable(job), job, default_runtime)


def learned_time_maps(
    job: Job,
    model: GpuModel,
    store: LearnedRuntimes,
    *,
    owner: str,
    default_runtime: float = DEFAULT_RUNTIME,
    serial_fraction: float = SERIAL_FRACTION,
) -> tuple[Mapping[int, float], Mapping[int, float]]:
    """(times, task_times) the daemon would plan ``job`` with, from one estimate: a
    gang's one task's seconds per instance size beside its region times (a single
    job's ``task_times`` stay empty)."""
    est = _estimate(job, model, store, owner, default_runtime, serial_fraction)
    times = _planned(job, model, est, default_runtime)
    if job.tasks <= 1:
        return times, job.task_times
    per = job.per_task(model)
    can = {s for s, t in per.items() if math.isfinite(t)}
    return times, _runnable_only(est, can, job, default_runtime)


def limit_times(job: Job) -> Mapping[int, float]:
    """The job's time limit on every size it can run on (Slurm's own knowledge); its
    true times where it has no limit."""
    if not math.isfinite(job.time_limit):
        return job.times
    return MappingProxyType({s: job.time_limit for s in _runnable(job)})


def limit_task_times(job: Job, model: GpuModel) -> Mapping[int, float]:
    """A gang's time limit on every instance size one task runs on (what Slurm knows
    of a job of N instances); its true ``task_times`` where it has no limit; a single
    job's stay empty."""
    if job.tasks <= 1 or not math.isfinite(job.time_limit):
        return job.task_times
    per = job.per_task(model)
    return MappingProxyType({s: job.time_limit for s, t in per.items() if math.isfinite(t)})
