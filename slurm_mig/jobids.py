"""Slurm job ids in Slurm's order: the one sort key the planner, the daemon and every
listing share."""

from __future__ import annotations

from functools import lru_cache

__all__ = ["job_sort_key"]


@lru_cache(maxsize=1 << 17)
def job_sort_key(job_id: str) -> tuple[int, int, int, str]:
    """Numeric job ids in numeric order, an array's tasks (``<array id>_<task>``) at
    their array's id in task order, others after them."""
    if not job_id.isascii():
        return (1, 0, 0, job_id)
    if job_id.isdigit():
        return (0, int(job_id), -1, "")
    number, _, task = job_id.partition("_")
    if number.isdigit() and task.isdigit():
        return (0, int(number), int(task), "")
    return (1, 0, 0, job_id)
