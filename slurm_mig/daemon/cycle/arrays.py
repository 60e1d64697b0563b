"""Job arrays' throttles (``--array=0-19%N``): Slurm runs at most N tasks of an array at
once and keeps the others pending (JobArrayTaskLimit), so the cycle plans at most N
minus the tasks running or released of one array; the rest wait unplanned, holding no
slices. The throttle is squeue's JSON ``array_max_tasks``; the fixed-width read does
not show it, so it is also learned from the tasks Slurm keeps pending for it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping

from ...slurm.jobrecord import JobLike, job_phase

__all__ = ["array_of", "cap_arrays", "learned_throttle", "running_tasks", "throttle_of"]


def array_of(job_id: str) -> str | None:
    """The array id of task ``<array>_<task>``; None for a job of its own."""
    array, sep, _ = job_id.partition("_")
    return array if sep else None


def running_tasks(jobs: Iterable[JobLike]) -> Counter[str]:
    """Per array id, its tasks Slurm counts against the throttle (started, not ended)."""
    out: Counter[str] = Counter()
    for job in jobs:
        array = array_of(job.job_id)
        if array is not None and job_phase(job.state) == "active":
            out[array] += 1
    return out


def learned_throttle(running: int) -> int:
    """The throttle a task Slurm keeps pending for JobArrayTaskLimit shows: the tasks of
    its array running now (Slurm holds back at the throttle), one at least."""
    return max(1, running)


def throttle_of(tasks: Iterable[JobLike], learned: int | None) -> int | None:
    """The throttle of an array (``tasks``: those squeue shows): the lowest of what
    squeue's JSON says and what was learned; None when it has none (or is unknown)."""
    known = [n for t in tasks if isinstance(n := getattr(t, "array_throttle", None), int) and n > 0]
    if learned is not None and learned > 0:
        known.append(learned)
    return min(known) if known else None


def cap_arrays(
    jobs: Mapping[str, JobLike],
    kept: dict,
    waiting: list[JobLike],
    running: Mapping[str, int],
    learned: Mapping[str, int],
    order: Callable[[JobLike], tuple],
) -> tuple[list[JobLike], dict[str, str]]:
    """Of the planned (``kept``, by job id) and ``waiting`` tasks of each throttled
    array, those beyond its throttle minus ``running`` (its tasks running or released),
    the kept ones first, then in ``order``: dropped from ``kept`` and from the waiting
    list returned, with why (job id -> text) in the second item."""
    tasks: dict[str, list[JobLike]] = {}
    for job in jobs.values():
        array = array_of(job.job_id)
        if array is not None:
            tasks.setdefault(array, []).append(job)
    candidates: dict[str, list[JobLike]] = {}
    for job in [*(jobs[j] for j in kept), *sorted(waiting, key=order)]:
        array = array_of(job.job_id)
        if array is not None:
            candidates.setdefault(array, []).append(job)
    deferred: dict[str, str] = {}
    for array, planned in candidates.items():
        limit = throttle_of(tasks[array], learned.get(array))
        if limit is None:
            continue
        busy = running.get(array, 0)
        for job in planned[max(0, limit - busy) :]:
            deferred[job.job_id] = (
                f"waits for its array's throttle: Slurm runs {limit} task(s) of array "
                f"{array} at once (%{limit}), {busy} running or released"
            )
            kept.pop(job.job_id, None)
    return [j for j in waiting if j.job_id not in deferred], deferred
