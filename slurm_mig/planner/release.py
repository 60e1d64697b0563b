"""The release gate of the batch driver (``planner.driver``, step 4): a standing plan
starts now when no job holds or is bound to an overlapping instance and no job ordered
before it on its GPU (batch, then order) overlaps it, so two jobs released in one step
never overlap."""

from __future__ import annotations

from collections.abc import Mapping

from ..geometry import Slot, mask_tables, slot_mask
from .decisions import Destroy, Op, Place
from .projection import _order_key
from .snapshot import ClusterSnapshot, Planned

__all__ = ["gate"]


def gate(snap: ClusterSnapshot, planned: Mapping[str, Planned]) -> list[Op]:
    """Standing plans free to start now (module doc, step 4): their `Place` at ``now``,
    each after the `Destroy` of the idle instances in its way (not an identical one)."""
    model = snap.model
    tables = mask_tables(model)
    blocked = [g.busy_mask for g in snap.gpus]
    gone: set[tuple[int, Slot]] = set()  # idle instances already destroyed in this step
    ops: list[Op] = []
    for p in sorted(planned.values(), key=lambda p: (p.gpu, *_order_key(p))):
        mask = tables.mask.get(p.slot) or slot_mask(p.slot)
        if mask & blocked[p.gpu]:
            blocked[p.gpu] |= mask
            continue
        blocked[p.gpu] |= mask
        gpu = snap.gpus[p.gpu]
        if mask & gpu.held_mask:
            for inst in gpu.instances:
                key = (p.gpu, inst.slot)
                if (
                    inst.job is None
                    and inst.slot != p.slot
                    and slot_mask(inst.slot) & mask
                    and key not in gone
                ):
                    gone.add(key)
                    ops.append(Destroy(p.gpu, inst.slot))
        ops.append(Place(p.job, p.gpu, p.slot, snap.now, snap.now + p.seconds, p.batch, p.order))
    return ops
