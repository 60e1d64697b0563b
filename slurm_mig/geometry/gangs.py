"""Jobs of several slices (``mig:tasks=N``): a gang of N instances of one size, planned
as one job on a *region*, a node of FAR's repartitioning tree whose placement holds N
legal placements of that size. Every planner and the simulator see the gang as a job
on the region (its times are keyed by region size); only the Prolog, which creates the
N instances inside the region, and the TaskProlog, which gives task i instance i, know
of N. One task per instance; a single job is a gang of one (its region is its
instance).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache

from .model import GeometryError, GpuModel, Placement
from .tables import get_model

__all__ = [
    "MAX_TASKS",
    "gang_placements",
    "gang_times",
    "most_tasks",
    "region_sizes",
    "task_size",
]

MAX_TASKS = 8  # the most instances a GPU of 2026 holds (7 on A100/H100, 8 with +me)


def gang_placements(
    model: GpuModel, region: Placement, size: int, n: int
) -> tuple[Placement, ...] | None:
    """The first ``n`` legal placements of ``size``'s profile inside ``region``, in
    start order and pairwise disjoint (where the Prolog creates a gang's instances);
    None when fewer fit or the GPU holds fewer instances of that profile."""
    try:
        profile = model.profile_for_size(size)
    except GeometryError:
        return None
    if n < 1 or n > profile.instance_count:
        return None
    out: list[Placement] = []
    end = region.start
    for pl in profile.placements:
        if pl.start >= end and pl.end <= region.end:
            out.append(pl)
            end = pl.end
            if len(out) == n:
                return tuple(out)
    return None


@cache
def _task_sizes(name: str, n: int) -> dict[int, int]:
    model = get_model(name)
    out: dict[int, int] = {}
    for region in model.planner_sizes:
        where = model.profile_for_size(region).placements
        fits = [
            s
            for s in model.planner_sizes
            if s <= region and all(gang_placements(model, p, s, n) for p in where)
        ]
        if fits:
            out[region] = max(fits)
    return out


def task_size(model: GpuModel, region: int, n: int) -> int | None:
    """The largest planner size of which every placement of size ``region`` holds ``n``
    instances: the size of each of a gang's ``n`` instances on that region (``region``
    itself when ``n`` is 1); None when no size fits ``n`` times."""
    if n == 1:
        return region if region in model.planner_sizes else None
    return _task_sizes(model.name, n).get(region)


def region_sizes(model: GpuModel, n: int) -> dict[int, int]:
    """Region size -> task size, for every region that holds a gang of ``n``."""
    if n == 1:
        return {s: s for s in model.planner_sizes}
    return dict(_task_sizes(model.name, n))


def gang_times(model: GpuModel, task_times: Mapping[int, float], n: int) -> dict[int, float]:
    """A gang's seconds per region size from one task's seconds per instance size (the
    tasks run side by side, each on its own instance); regions that hold no gang of
    ``n`` are left out (cannot run)."""
    return {
        region: task_times[s] for region, s in region_sizes(model, n).items() if s in task_times
    }


def most_tasks(model: GpuModel) -> int:
    """The most instances of one size a GPU of ``model`` holds (a gang's largest N)."""
    return max((n for n in range(1, MAX_TASKS + 1) if region_sizes(model, n)), default=0)
