"""Bit masks of slots (bit i is memory or compute slice i) and each model's lookup
tables for the planners' inner loops."""

from __future__ import annotations

from dataclasses import dataclass

from .model import GeometryError, GpuModel, Slot
from .slots import memory_slots, planner_slots

__all__ = ["MaskTables", "compute_mask", "mask_tables", "slot_mask"]


def slot_mask(slot: Slot) -> int:
    """Memory-slice bitmask of an instance at ``slot``."""
    p = slot.placement
    return ((1 << p.size) - 1) << p.start


def compute_mask(slot: Slot) -> int:
    """Compute-slice bitmask of an instance at ``slot``."""
    return ((1 << slot.size) - 1) << slot.placement.start


@dataclass(frozen=True)
class MaskTables:
    """Lookup tables of one model's planner slots, built once per model. Slots are
    numbered by placement order; these Slot objects are canonical (fast ``index_of``)."""

    model: GpuModel
    slots: tuple[Slot, ...]  # by placement
    masks: tuple[int, ...]  # memory-slice mask of slots[i]
    mask: dict[Slot, int]
    by_size: dict[int, tuple[Slot, ...]]  # legal slots of each size, by placement
    fit_sizes: tuple[frozenset[int], ...]  # sizes with a slot avoiding memory mask m
    first_fit: tuple[dict[int, Slot], ...]  # first slot of each size avoiding memory mask m
    memory: dict[int, int]  # usable bytes of each size's profile
    _by_id: dict[int, int]
    _by_eq: dict[Slot, int]
    # slots[i]'s usable bytes; the double-memory 1g slots (``memory_slots``) come after
    # the lattice's, in ``slots``/``masks``/``mask`` but in no ``by_size``/``first_fit``
    slot_memory: tuple[int, ...] = ()
    lattice: int = 0  # how many of ``slots`` are the lattice's

    def memory_of(self, slot: Slot) -> int:
        """Usable bytes of an instance at ``slot`` (a lattice or double-memory slot)."""
        i = self.index_of(slot)
        if i is None:
            raise GeometryError(f"{self.model.name}: {slot} is not a planner slot")
        return self.slot_memory[i]

    def index_of(self, slot: Slot) -> int | None:
        """Number of a planner slot (None if it is not one); fast for canonical ones."""
        i = self._by_id.get(id(slot))
        return i if i is not None else self._by_eq.get(slot)

    def first_free(self, size: int, blocked: int) -> Slot | None:
        """The first legal slot of ``size`` sharing no memory slice with ``blocked``."""
        return self.first_fit[blocked].get(size)


_TABLES: dict[str, MaskTables] = {}


def mask_tables(model: GpuModel) -> MaskTables:
    """The tables of ``model`` (built on first use, then cached by model name)."""
    tables = _TABLES.get(model.name)
    if tables is None or tables.model is not model:
        tables = _TABLES[model.name] = _build_tables(model)
    return tables


def _build_tables(model: GpuModel) -> MaskTables:
    lattice = tuple(sorted(planner_slots(model), key=lambda s: (s.placement.start, s.size)))
    slots = lattice + memory_slots(model)
    masks = tuple(slot_mask(s) for s in slots)
    mask = dict(zip(slots, masks))
    by_size = {size: tuple(s for s in lattice if s.size == size) for size in model.planner_sizes}
    fit, first = [], []
    for m in range(1 << model.memory_slices):
        found = {}
        for size, cands in by_size.items():
            for s in cands:
                if not mask[s] & m:
                    found[size] = s
                    break
        first.append(found)
        fit.append(frozenset(found))
    memory = {s: model.profile_for_size(s).memory_bytes for s in model.planner_sizes}
    return MaskTables(
        model,
        slots,
        masks,
        mask,
        by_size,
        tuple(fit),
        tuple(first),
        memory,
        {id(s): i for i, s in enumerate(slots)},
        {s: i for i, s in enumerate(slots)},
        tuple(model.profile_for_slot(s).memory_bytes for s in slots),
        len(lattice),
    )
