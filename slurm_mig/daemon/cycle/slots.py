"""The planner slot of an assignment: its profile and placement on its GPU model, as
the planning core numbers slots."""

from __future__ import annotations

from functools import cache

from ...geometry import GeometryError, Placement, Slot, get_model, mask_tables
from ...slurm.assignment import Assignment

__all__ = ["legal_slot", "model_slot"]


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


def model_slot(a: Assignment) -> Slot:
    """The slot of a busy job's assignment (best effort: its profile on its model)."""
    got = legal_slot(a.model, a.profile, a.placement)
    if got is not None:
        return got
    try:
        prof = get_model(a.model).profile(a.profile)
        return Slot(a.placement, prof.compute_slices)
    except GeometryError:
        return Slot(a.placement, a.placement.size)
