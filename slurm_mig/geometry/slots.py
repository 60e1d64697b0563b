"""Where instances can sit: legal placements, planner and double-memory slots, the
valid partitions (Fig. 1 of the FAR paper)."""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache
from itertools import combinations

from .model import GpuModel, Placement, Slot
from .tables import get_model

__all__ = [
    "blocked_compute",
    "can_coexist",
    "legal_placements",
    "memory_slots",
    "partition_name",
    "planner_slots",
    "valid_partitions",
]


def can_coexist(model: GpuModel, placements: Iterable[Placement]) -> bool:
    """True when every placement is legal on ``model`` and no two share a memory slice."""
    items = list(placements)
    legal = {pl for p in model.profiles for pl in p.placements}
    if any(pl not in legal for pl in items):
        return False
    return not any(a.overlaps(b) for a, b in combinations(items, 2))


def legal_placements(model: GpuModel) -> tuple[Placement, ...]:
    return tuple(sorted({pl for p in model.profiles for pl in p.placements}))


def planner_slots(model: GpuModel) -> tuple[Slot, ...]:
    """Every (placement, size) an instance of a planner size can take."""
    return tuple(
        sorted(
            Slot(pl, s) for s in model.planner_sizes for pl in model.profile_for_size(s).placements
        )
    )


def memory_slots(model: GpuModel) -> tuple[Slot, ...]:
    """Where a double-memory 1g can sit (``Slot(Placement(s, 2), 1)``); () when the
    model has none. Not in ``planner_slots``: the lattice planners never see them."""
    double = model.double_memory
    if double is None:
        return ()
    return tuple(Slot(pl, 1) for pl in double.placements)


def blocked_compute(model: GpuModel, slot: Slot) -> int:
    """Compute slices an instance at ``slot`` keeps from others: those whose memory slice
    it holds (a double-memory 1g at 0:2 blocks two, at 6:2 on A100 one: slice 7 has no
    compute)."""
    p = slot.placement
    return max(0, min(p.end, model.compute_slices) - p.start)


@cache
def valid_partitions(model_name: str) -> tuple[tuple[Slot, ...], ...]:
    """Maximal sets of disjoint planner slots (19 on A100/H100, 5 on A30), Fig. 1."""
    model = get_model(model_name)
    options = planner_slots(model)
    found: list[tuple[Slot, ...]] = []

    def fits(o: Slot, chosen: list[Slot]) -> bool:
        return not any(o.placement.overlaps(c.placement) for c in chosen)

    def extend(chosen: list[Slot], i: int) -> None:
        if i == len(options):
            if not any(fits(o, chosen) for o in options):
                found.append(tuple(sorted(chosen)))
            return
        if fits(options[i], chosen):
            extend(chosen + [options[i]], i + 1)
        extend(chosen, i + 1)

    extend([], 0)
    return tuple(sorted(set(found), key=lambda p: [(-x.size, x.placement.start) for x in p]))


def partition_name(partition: Iterable[Slot]) -> str:
    """Sizes left to right, as the paper writes partitions: ``4-2-1``."""
    return "-".join(str(s.size) for s in sorted(partition))
