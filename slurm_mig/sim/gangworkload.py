"""Jobs of several slices in a simulated workload: a seeded share of a trace's jobs
made gangs (``mig:tasks=N``), for benchmarks that compare policies on such jobs
(``benchmarks/value.py``'s opt-in ``miso-40-gangs``)."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from ..geometry import GpuModel
from ..planner.snapshot import runnable_sizes
from ..workload import WorkloadError
from .api import SimJob
from .jobrows import MIB, job_from_row

__all__ = ["GANG_TASKS", "with_gangs"]

GANG_TASKS = (2, 3, 4)  # the counts of instances a gang of `with_gangs` asks for


def with_gangs(
    jobs: Sequence[SimJob], share: float, seed: int, model: GpuModel
) -> tuple[SimJob, ...]:
    """``jobs`` with a seeded ``share`` of them asking for 2, 3 or 4 instances
    (`GANG_TASKS`, drawn among the counts some region holds, by times and memory: the
    dynamic policies must run it too), each task with the job's per-size times, read
    as a job file's ``tasks`` column reads them (``sim.jobrows``); a drawn job no
    region holds 2 of stays single. Pure: ``jobs`` is not changed."""
    rng = random.Random(f"gangs:{seed}")
    out = []
    for job in jobs:
        draw, pick = rng.random(), rng.random()
        if draw < share:
            options = [g for n in GANG_TASKS if (g := _as_gang(job, n, model)) is not None]
            if options:
                job = options[int(pick * len(options))]
        out.append(job)
    return tuple(out)


def _as_gang(job: SimJob, tasks: int, model: GpuModel) -> SimJob | None:
    """``job`` as a job of ``tasks`` instances with its per-size times (``sim.jobrows``),
    or None where no region holds them."""
    row = {
        "id": job.id,
        "arrival": job.arrival,
        "times": {s: t for s, t in job.times.items() if math.isfinite(t)},
        "memory_mib": job.memory / MIB,
        "kind": job.kind,
        "tasks": tasks,
    }
    try:
        gang = job_from_row(row, "gangs", model)
    except WorkloadError:  # no region holds `tasks` of its sizes
        return None
    return gang if runnable_sizes(gang, model) else None
