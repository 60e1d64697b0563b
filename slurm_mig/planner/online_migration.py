"""Migration on departure for the fragmentation-aware policy: restartable jobs moved to
lower the fragmentation a departing job leaves behind."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from ..geometry import (
    GpuModel,
    Slot,
)
from .online_placement import (
    DEFAULT_THRESHOLD,
    _comp_mask,
    _idle_slots,
    _mask_cost,
    _mem_mask,
    _slots_of_size,
    is_lazy,
)
from .snapshot import Gpu, Instance

__all__ = ["Migration", "plan_departure"]


# ---------------------------------------------------------------------------
# Job departure


@dataclass(frozen=True, slots=True)
class Migration:
    """Migrate ``job`` from ``src`` to ``slot`` on ``dst`` (destroying ``destroy``)."""

    job: str
    src: int
    dst: int
    slot: Slot
    destroy: tuple[Slot, ...] = ()


def _moved_cost(g: Gpu, occ: Instance, slot: Slot, model: GpuModel) -> float:
    mem = (g.busy_mask & ~_mem_mask(occ.slot)) | _mem_mask(slot)
    comp = (g.compute_mask & ~_comp_mask(occ.slot)) | _comp_mask(slot)
    return _mask_cost(model.name, mem, comp)


def _free_slots(size: int, model: GpuModel, blocked: int) -> Iterator[Slot]:
    for slot in _slots_of_size(model.name).get(size, ()):
        if not _mem_mask(slot) & blocked:
            yield slot


def _apply_move(states: dict[int, Gpu], mv: Migration, occ: Instance) -> None:
    states[mv.src] = states[mv.src].vacated(mv.job)
    moved = Instance(mv.slot, occ.job, busy_until=occ.busy_until, pcie=occ.pcie)
    states[mv.dst] = states[mv.dst].placed(moved)


def _destroys(g: Gpu, slot: Slot) -> tuple[Slot, ...]:
    m = _mem_mask(slot)
    return tuple(s for s in _idle_slots(g) if _mem_mask(s) & m and s != slot)


def plan_departure(
    gpus: Sequence[Gpu],
    departed: int,
    model: GpuModel,
    threshold: float = DEFAULT_THRESHOLD,
    *,
    can_move: Callable[[Instance], bool] | None = None,
    max_moves: int = 64,
) -> list[Migration]:
    """Migrations after a job left GPU ``departed`` (Sec. IV-D); ``gpus`` is the state
    after it left. ``can_move`` says which running jobs may move (default: none); a job
    moves at most once."""
    states = {g.index: g for g in gpus}
    ok = can_move or (lambda o: False)
    moved: set[str] = set()

    def movable(occ: Instance) -> bool:
        return occ.job not in moved and ok(occ)

    moves: list[Migration] = []
    if not is_lazy(states[departed], model, threshold):
        # intra-GPU: the single move that lowers this GPU's cost most, while one does
        while len(moves) < max_moves:
            g = states[departed]
            current = _mask_cost(model.name, g.busy_mask, g.compute_mask)
            best = None
            for occ in g.occupants:
                if not movable(occ):
                    continue
                for slot in _free_slots(occ.slot.size, model, g.busy_mask):
                    cost = _moved_cost(g, occ, slot, model)
                    key = (cost, slot.placement.start, occ.job)
                    if cost < current - 1e-9 and (best is None or key < best[0]):
                        best = (key, occ, slot)
            if best is None:
                break
            _, occ, slot = best
            assert occ.job is not None
            mv = Migration(occ.job, departed, departed, slot, _destroys(g, slot))
            _apply_move(states, mv, occ)
            moved.add(occ.job)
            moves.append(mv)
        return moves
    # inter-GPU: pull jobs from busy GPUs while that leaves this one less loaded
    while len(moves) < max_moves:
        g = states[departed]
        if not is_lazy(g, model, threshold):
            break
        load_g = g.compute_mask.bit_count()
        best = None
        for k, src in states.items():
            if k == departed or is_lazy(src, model, threshold):
                continue
            load_src = src.compute_mask.bit_count()
            for occ in src.occupants:
                s = occ.slot.size
                if not movable(occ) or not load_g + s < load_src - s:
                    continue
                for slot in _free_slots(s, model, g.busy_mask):
                    m = _mem_mask(slot)
                    cost = _mask_cost(
                        model.name, g.busy_mask | m, g.compute_mask | _comp_mask(slot)
                    )
                    key = (cost, k, slot.placement.start, occ.job)
                    if best is None or key < best[0]:
                        best = (key, occ, k, slot)
        if best is None:
            break
        _, occ, k, slot = best
        assert occ.job is not None
        mv = Migration(occ.job, k, departed, slot, _destroys(g, slot))
        _apply_move(states, mv, occ)
        moved.add(occ.job)
        moves.append(mv)
    return moves
