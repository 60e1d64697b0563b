"""The planner slot of an assignment: its profile and placement on its GPU model, as
the planning core numbers slots (a job of several slices: its region's slot)."""

from __future__ import annotations

from functools import cache

from ...geometry import GeometryError, Placement, Slot, get_model, mask_tables
from ...slurm.assignment import Assignment
from ..gangview import region_size

__all__ = ["gang_slot", "instance_size", "legal_slot", "model_slot", "plan_slot"]


@cache
def legal_slot(model_name: str, profile: str, placement: Placement) -> Slot | None:
    """The planner slot of ``profile`` at ``placement`` on the model (canonical), or
    None when the planner does not use that profile there."""
    model = get_model(model_name)
    try:
        prof = model.profile(profile)
        slot = Slot(placement, prof.compute_slices)
        if placement not in prof.placements or model.profile_for_slot(slot) != prof:
            return None
    except GeometryError:
        return None
    tables = mask_tables(model)
    i = tables.index_of(slot)
    return tables.slots[i] if i is not None else slot


@cache
def gang_slot(model_name: str, profile: str, placement: Placement, tasks: int) -> Slot | None:
    """The planner slot of a job of ``tasks`` instances of ``profile`` in the region at
    ``placement`` (`legal_slot` for a single job): its region's (`gangview.region_size`,
    the one rule `explain` and `status` name it by); None when there is none."""
    if tasks == 1:
        return legal_slot(model_name, profile, placement)
    region = region_size(model_name, profile, placement, tasks)
    if region is None:
        return None
    return legal_slot(model_name, get_model(model_name).profile_for_size(region).name, placement)


def plan_slot(a: Assignment) -> Slot | None:
    """The planner slot of plan ``a`` (its region for a job of several slices), or None
    when the planner does not use it."""
    return gang_slot(a.model, a.profile, a.placement, a.tasks)


def instance_size(a: Assignment) -> int:
    """Compute slices of each instance of ``a`` (runtimes are learned per instance
    size: one task on its instance), 0 when its profile is unknown."""
    try:
        return get_model(a.model).profile(a.profile).compute_slices
    except GeometryError:
        return 0


def model_slot(a: Assignment) -> Slot:
    """The slot of a busy job's assignment (best effort: its profile on its model; a
    job of several slices: its region)."""
    got = plan_slot(a)
    if got is not None:
        return got
    try:
        prof = get_model(a.model).profile(a.profile)
        return Slot(a.placement, prof.compute_slices * a.tasks)
    except GeometryError:
        return Slot(a.placement, a.placement.size)
