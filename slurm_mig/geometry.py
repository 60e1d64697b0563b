"""MIG hardware geometry: the one source of truth for slices, profiles, placements,
valid partitions, FAR's repartitioning tree and reconfiguration times.

Placements are NVIDIA's ``(start, size)`` in *memory* slices, as NVML reports them.
Compute slice ``i`` sits on memory slice ``i``; a 3g instance at start 0 spans memory
slices 0-3 but computes on slices 0-2 (NVIDIA's rule), so it blocks slice 3.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from itertools import combinations

GIB = 1024**3


class GeometryError(ValueError):
    """A model, profile, size or placement that the hardware does not have."""


@dataclass(frozen=True, order=True)
class Placement:
    """NVIDIA placement: first memory slice and number of memory slices."""

    start: int
    size: int

    def __hash__(self) -> int:  # planners key dicts by slots: keep hashing cheap
        return self.start * 16 + self.size

    @property
    def end(self) -> int:
        return self.start + self.size

    def overlaps(self, other: Placement) -> bool:
        return self.start < other.end and other.start < self.end

    def to_json(self) -> dict:
        return {"start": self.start, "size": self.size}


@dataclass(frozen=True, order=True)
class Slot:
    """Where an instance can sit: its size in compute slices and its placement."""

    placement: Placement
    size: int

    def __hash__(self) -> int:
        p = self.placement
        return (p.start * 16 + p.size) * 16 + self.size

    @property
    def slices(self) -> tuple[int, ...]:
        """Compute slices; compute slice i sits on memory slice i."""
        return tuple(range(self.placement.start, self.placement.start + self.size))


@dataclass(frozen=True)
class Profile:
    """A GPU-instance profile of one model (e.g. ``3g.20gb`` of the A100-40GB)."""

    name: str
    compute_slices: int
    memory_slices: int
    memory_bytes: int  # usable memory, below the number in the name
    starts: tuple[int, ...]  # legal placement starts, in memory slices
    nvml_class: str  # NVML profile constant suffix, e.g. "3_SLICE", "1_SLICE_REV2"

    @property
    def placements(self) -> tuple[Placement, ...]:
        return tuple(Placement(s, self.memory_slices) for s in self.starts)


@dataclass(frozen=True)
class TreeNode:
    """A node of FAR's repartitioning tree (Fig. 4): one instance placement."""

    index: int
    size: int  # compute slices (the planner's instance size)
    placement: Placement
    slices: tuple[int, ...]  # compute slices used
    parent: int | None
    children: tuple[int, ...]

    @property
    def slot(self) -> Slot:
        return Slot(self.placement, self.size)


@dataclass(frozen=True)
class GpuModel:
    """One MIG-capable GPU model."""

    name: str
    timing_family: str  # row of Table 1 used for create/destroy times
    compute_slices: int
    memory_slices: int
    profiles: tuple[Profile, ...]
    planner_sizes: tuple[int, ...]
    tree: tuple[TreeNode, ...]
    create_s: dict[int, float]
    destroy_s: dict[int, float]

    def profile_for_size(self, size: int) -> Profile:
        """The planner's profile for an instance of ``size`` compute slices."""
        for p in self.profiles:
            if p.compute_slices == size and p.nvml_class in _PLANNER_CLASSES:
                return p
        raise GeometryError(
            f"{self.name} has no instance of {size} compute slices; "
            f"sizes are {', '.join(map(str, self.planner_sizes))}"
        )

    def profile(self, name: str) -> Profile:
        for p in self.profiles:
            if p.name == name:
                return p
        names = ", ".join(p.name for p in self.profiles)
        raise GeometryError(f"{self.name} has no profile {name!r}; profiles: {names}")

    def compute_slices_of(self, placement: Placement, size: int) -> tuple[int, ...]:
        """Compute slices of an instance of ``size`` compute slices at ``placement``.

        Compute slice ``i`` sits on memory slice ``i``; a 3g instance at start 0
        therefore computes on 0-2 while holding memory slices 0-3.
        """
        return tuple(range(placement.start, placement.start + size))

    def create_time(self, size: int) -> float:
        return self.create_s[size]

    def destroy_time(self, size: int) -> float:
        return self.destroy_s[size]

    def nodes_of_size(self, size: int) -> tuple[TreeNode, ...]:
        return tuple(n for n in self.tree if n.size == size)

    @property
    def memory_bytes(self) -> int:
        return max(p.memory_bytes for p in self.profiles)


# ---------------------------------------------------------------------------
# Table 1 of the FAR paper (shared/data/far-reference/reconfig_times.csv).
# Models not measured there (H100-94GB, H200, B200) take the H100 figures.
_RECONFIG = {
    "A30": ({1: 0.11, 2: 0.12, 4: 0.13}, {1: 0.10, 2: 0.10, 4: 0.10}),
    "A100": (
        {1: 0.16, 2: 0.17, 3: 0.20, 4: 0.21, 7: 0.24},
        {1: 0.20, 2: 0.20, 3: 0.21, 4: 0.21, 7: 0.22},
    ),
    "H100": (
        {1: 0.16, 2: 0.21, 3: 0.33, 4: 0.38, 7: 0.42},
        {1: 0.21, 2: 0.23, 3: 0.25, 4: 0.26, 7: 0.26},
    ),
}

_PLANNER_CLASSES = {"1_SLICE", "2_SLICE", "3_SLICE", "4_SLICE", "7_SLICE"}

# (class, compute slices, memory slices, starts) for the 7-slice lattice.
_LATTICE7 = (
    ("1_SLICE", 1, 1, (0, 1, 2, 3, 4, 5, 6)),
    ("1_SLICE_REV2", 1, 2, (0, 2, 4, 6)),
    ("2_SLICE", 2, 2, (0, 2, 4)),
    ("3_SLICE", 3, 4, (0, 4)),
    ("4_SLICE", 4, 4, (0,)),
    ("7_SLICE", 7, 8, (0,)),
)
_LATTICE4 = (
    ("1_SLICE", 1, 1, (0, 1, 2, 3)),
    ("2_SLICE", 2, 2, (0, 2)),
    ("4_SLICE", 4, 4, (0,)),
)

# Usable memory per profile class. Known NVML figures where published (H100-80GB:
# 1g 9.75 GiB, 3g 39.5 GiB, 7g 79.25 GiB); others scale the same reserve per
# memory slice. NVML's memorySizeMB is authoritative on a real GPU.
_RESERVE_GIB = {1: 0.25, 2: 0.25, 4: 0.5, 8: 0.75}


def _profiles(names: dict[str, str], lattice: tuple, slice_gib: float) -> tuple[Profile, ...]:
    out = []
    for cls, c, m, starts in lattice:
        usable = (m * slice_gib - _RESERVE_GIB[m] * slice_gib / 10.0) * GIB
        out.append(Profile(names[cls], c, m, int(usable), starts, cls))
    return tuple(out)


def _names7(g1: int, g2: int, g3: int, total: int) -> dict[str, str]:
    return {
        "1_SLICE": f"1g.{g1}gb",
        "1_SLICE_REV2": f"1g.{g2}gb",
        "2_SLICE": f"2g.{g2}gb",
        "3_SLICE": f"3g.{g3}gb",
        "4_SLICE": f"4g.{g3}gb",
        "7_SLICE": f"7g.{total}gb",
    }


def _tree7() -> tuple[TreeNode, ...]:
    """FAR's A100/H100 tree (Fig. 4), with the 3-slice use of the first four slices."""
    spec = [
        # index, size, placement, slices, parent
        (0, 7, Placement(0, 8), (0, 1, 2, 3, 4, 5, 6), None),
        (1, 4, Placement(0, 4), (0, 1, 2, 3), 0),
        (2, 3, Placement(4, 4), (4, 5, 6), 0),
        (3, 3, Placement(0, 4), (0, 1, 2), 1),
        (4, 2, Placement(4, 2), (4, 5), 2),
        (5, 1, Placement(6, 1), (6,), 2),
        (6, 2, Placement(0, 2), (0, 1), 3),
        (7, 2, Placement(2, 2), (2, 3), 3),
        (8, 1, Placement(4, 1), (4,), 4),
        (9, 1, Placement(5, 1), (5,), 4),
        (10, 1, Placement(0, 1), (0,), 6),
        (11, 1, Placement(1, 1), (1,), 6),
        (12, 1, Placement(2, 1), (2,), 7),
        (13, 1, Placement(3, 1), (3,), 7),
    ]
    return _link(spec)


def _tree4() -> tuple[TreeNode, ...]:
    spec = [
        (0, 4, Placement(0, 4), (0, 1, 2, 3), None),
        (1, 2, Placement(0, 2), (0, 1), 0),
        (2, 2, Placement(2, 2), (2, 3), 0),
        (3, 1, Placement(0, 1), (0,), 1),
        (4, 1, Placement(1, 1), (1,), 1),
        (5, 1, Placement(2, 1), (2,), 2),
        (6, 1, Placement(3, 1), (3,), 2),
    ]
    return _link(spec)


def _link(spec: list) -> tuple[TreeNode, ...]:
    children: dict[int, list[int]] = {i: [] for i, *_ in spec}
    for i, _, _, _, parent in spec:
        if parent is not None:
            children[parent].append(i)
    return tuple(
        TreeNode(i, size, pl, sl, parent, tuple(children[i])) for i, size, pl, sl, parent in spec
    )


def _model7(name: str, family: str, names: dict[str, str], total_gb: int) -> GpuModel:
    create, destroy = _RECONFIG[family]
    return GpuModel(
        name=name,
        timing_family=family,
        compute_slices=7,
        memory_slices=8,
        profiles=_profiles(names, _LATTICE7, total_gb / 8),
        planner_sizes=(1, 2, 3, 4, 7),
        tree=_tree7(),
        create_s=dict(create),
        destroy_s=dict(destroy),
    )


def _a30() -> GpuModel:
    create, destroy = _RECONFIG["A30"]
    names = {"1_SLICE": "1g.6gb", "2_SLICE": "2g.12gb", "4_SLICE": "4g.24gb"}
    return GpuModel(
        name="A30-24GB",
        timing_family="A30",
        compute_slices=4,
        memory_slices=4,
        profiles=_profiles(names, _LATTICE4, 6.0),
        planner_sizes=(1, 2, 4),
        tree=_tree4(),
        create_s=dict(create),
        destroy_s=dict(destroy),
    )


MODELS: dict[str, GpuModel] = {
    m.name: m
    for m in (
        _a30(),
        _model7("A100-40GB", "A100", _names7(5, 10, 20, 40), 40),
        _model7("A100-80GB", "A100", _names7(10, 20, 40, 80), 80),
        _model7("H100-80GB", "H100", _names7(10, 20, 40, 80), 80),
        _model7("H100-94GB", "H100", _names7(12, 24, 47, 94), 94),
        # Table 1 has no H200 or B200 row: they take the H100 figures.
        _model7("H200-141GB", "H100", _names7(18, 35, 71, 141), 141),
        _model7("B200-180GB", "H100", _names7(23, 45, 90, 180), 180),
    )
}

_ALIASES = {"A30": "A30-24GB", "A100": "A100-40GB", "H100": "H100-80GB"}


def get_model(name: str) -> GpuModel:
    """Look a model up by name (case-insensitive; ``A100`` means ``A100-40GB``)."""
    key = name.strip().upper()
    key = _ALIASES.get(key, key)
    for model_name, model in MODELS.items():
        if model_name.upper() == key:
            return model
    raise GeometryError(f"unknown GPU model {name!r}; known models: {', '.join(MODELS)}")


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


# ---------------------------------------------------------------------------
# Bit masks: bit i is memory (or compute) slice i. A 3g instance at 0 holds memory 0b1111
# and computes on 0b0111.


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
    slots = tuple(sorted(planner_slots(model), key=lambda s: (s.placement.start, s.size)))
    masks = tuple(slot_mask(s) for s in slots)
    mask = dict(zip(slots, masks))
    by_size = {size: tuple(s for s in slots if s.size == size) for size in model.planner_sizes}
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
    )


def partition_name(partition: Iterable[Slot]) -> str:
    """Sizes left to right, as the paper writes partitions: ``4-2-1``."""
    return "-".join(str(s.size) for s in sorted(partition))
