"""How a job's slices are named to users and admins: one instance by its profile
(``1g.5gb``), a job of several slices (``mig:tasks=N``, `geometry.gangs`) as N times the
profile of each of its instances, ``4x1g.5gb`` (Slurm's own counted spelling, as in
``gres/gpu:a100:4``, reversed to read "4 times 1g.5gb"), in `status`, `explain`, the
public summary, the web page and the metrics alike; and the region such a job holds.
"""

from __future__ import annotations

import re
from functools import cache

from ..geometry import MAX_TASKS, GeometryError, GpuModel, Placement, get_model, region_sizes

__all__ = ["gang_phrase", "region_size", "slice_name", "slice_slices", "split_slice"]

_COUNTED = re.compile(r"([1-9][0-9]?)x(.+)")


def slice_name(profile: str, tasks: int = 1) -> str:
    """What a job's slices are shown as: ``profile`` for one instance, ``4x1g.5gb``
    for a job of ``tasks`` instances of ``profile``."""
    return profile if tasks <= 1 else f"{tasks}x{profile}"


def split_slice(text: str) -> tuple[str, int]:
    """(profile, count of instances) of a `slice_name` (``1g.5gb`` -> one)."""
    m = _COUNTED.fullmatch(text)
    if m is None or not 2 <= int(m.group(1)) <= MAX_TASKS:
        return text, 1
    return m.group(2), int(m.group(1))


def slice_slices(model: GpuModel, text: str) -> int:
    """Compute slices of the instances a `slice_name` names on ``model`` (0: unknown)."""
    profile, tasks = split_slice(text)
    try:
        return model.profile(profile).compute_slices * tasks
    except GeometryError:
        return 0


@cache
def region_size(model_name: str, profile: str, placement: Placement, tasks: int) -> int | None:
    """Compute slices of the region of a job of ``tasks`` instances of ``profile`` at
    ``placement``: the smallest planner size with a profile placed there that holds
    ``tasks`` instances of ``profile`` (`geometry.region_sizes`); None when none does."""
    try:
        model = get_model(model_name)
        size = model.profile(profile).compute_slices
    except (GeometryError, KeyError):
        return None
    for region, each in sorted(region_sizes(model, tasks).items()):
        if each == size and placement in model.profile_for_size(region).placements:
            return region
    return None


def gang_phrase(model_name: str, profile: str, placement: Placement, tasks: int) -> str:
    """``4 instances of 1g.5gb in region 4g at placement 0:4`` (the region's compute
    slices, "?" when the model does not place them there)."""
    region = region_size(model_name, profile, placement, tasks) if model_name else None
    where = f"{placement.start}:{placement.size}"
    return (
        f"{tasks} instances of {profile} in region {region if region else '?'}"
        f"{'g' if region else ''} at placement {where}"
    )
