"""The geometry's types: placements, slots, profiles, FAR's tree nodes and GPU models.

Placements are NVIDIA's ``(start, size)`` in *memory* slices, as NVML reports them.
Compute slice ``i`` sits on memory slice ``i``; a 3g instance at start 0 spans memory
slices 0-3 but computes on slices 0-2 (NVIDIA's rule), so it blocks slice 3.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = [
    "GIB",
    "Board",
    "GeometryError",
    "GpuModel",
    "Placement",
    "Profile",
    "Slot",
    "TreeNode",
]

_PLANNER_CLASSES = {"1_SLICE", "2_SLICE", "3_SLICE", "4_SLICE", "7_SLICE"}
# The double-memory 1g: a size-1 instance on two memory slices, planned for a job whose
# memory needs two slices (``memory_slots``), never for one that fits a plain 1g.
_DOUBLE_CLASS = "1_SLICE_REV2"

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
    limit: int = 0  # NVML's instanceCount where below what the placements allow (+me: 1)

    @property
    def placements(self) -> tuple[Placement, ...]:
        return tuple(Placement(s, self.memory_slices) for s in self.starts)

    @property
    def instance_count(self) -> int:
        """How many instances of this profile one GPU holds at most (NVML's
        instanceCount): ``limit`` if set, else the disjoint placements (they are aligned)."""
        if self.limit:
            return self.limit
        n, end = 0, -1
        for pl in self.placements:
            if pl.start >= end:
                n, end = n + 1, pl.end
        return n


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
class Board:
    """A model's facts beside its MIG geometry, each with where it comes from:
    ``tdp_w``, the board power the energy model scales SMART-MIG's A100 curve by (the
    PCIe card's where the model has one); ``max_w``, the most any of its form factors
    draws (the bound on a measured energy counter); ``host_link`` and
    ``pcie_max_gbps``, its link to the host and the PCIe slowdown model's bandwidth per
    GPU (Eq. 1-2); ``nvml_names``, the patterns (regular expressions) of NVML's device
    names of its boards, told apart from other models of a pattern by memory, and
    ``nvml_named``, patterns that name this model where memory cannot be read (MIG
    denies the parent's memory to non-root)."""

    tdp_w: float
    max_w: float
    host_link: str
    pcie_max_gbps: float
    power_source: str
    pcie_source: str
    nvml_names: tuple[str, ...]
    nvml_source: str
    nvml_named: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for what in ("tdp_w", "max_w", "pcie_max_gbps"):
            if not 0 < getattr(self, what) < 1e5:
                raise GeometryError(f"board {what} {getattr(self, what)!r}: give a positive figure")
        if self.max_w < self.tdp_w:
            raise GeometryError(f"board max_w {self.max_w} is below its tdp_w {self.tdp_w}")
        for what in ("host_link", "power_source", "pcie_source", "nvml_source"):
            if not getattr(self, what).strip():
                raise GeometryError(f"board {what}: say it (a fact without a source is refused)")
        if not self.nvml_names:
            raise GeometryError("board nvml_names: give the patterns of NVML's names of it")
        for pattern in (*self.nvml_names, *self.nvml_named):
            try:
                re.compile(pattern)
            except re.error as exc:
                raise GeometryError(f"board NVML name pattern {pattern!r}: {exc}") from None


@dataclass(frozen=True)
class GpuModel:
    """One MIG-capable GPU model: its MIG geometry and its `Board` facts. A model
    without its board facts is refused here, where it is made: no figure is borrowed
    from another model."""

    name: str
    timing_family: str  # row of Table 1 used for create/destroy times
    compute_slices: int
    memory_slices: int
    profiles: tuple[Profile, ...]
    planner_sizes: tuple[int, ...]
    tree: tuple[TreeNode, ...]
    create_s: dict[int, float]
    destroy_s: dict[int, float]
    # Profiles the driver offers that the planner never uses: media extensions (+me),
    # and on RTX PRO 6000 +gfx, +me.all and -me. Found by ``profile``, never by
    # ``profile_for_size``; ``profiles`` (what the planners and their cost terms read)
    # stays the planner's lattice.
    extra_profiles: tuple[Profile, ...] = ()
    renamed: dict[str, str] = field(default_factory=dict)  # earlier driver name -> ours
    nvml_placement_unit: int = 1  # NVML placement units per memory slice (RTX PRO 6000: 3)
    source: str = ""  # where the profile table comes from
    board: Board | None = None  # required: None is refused (`__post_init__`)

    def __post_init__(self) -> None:
        if not isinstance(self.board, Board):
            raise GeometryError(
                f"GPU model {self.name}: no board facts (power, host link) with their "
                "sources; add them to its entry in slurm_mig/geometry/tables.py"
            )

    @property
    def all_profiles(self) -> tuple[Profile, ...]:
        """The offline catalogue: planner profiles, then the others the driver offers."""
        return self.profiles + self.extra_profiles

    def to_nvml(self, placement: Placement) -> Placement:
        """The placement as NVML reports it (RTX PRO 6000 counts 12 units, not 4)."""
        u = self.nvml_placement_unit
        return Placement(placement.start * u, placement.size * u)

    def from_nvml(self, start: int, size: int) -> Placement:
        """Our placement (memory slices) of an NVML ``start:size``."""
        u = self.nvml_placement_unit
        if start % u or size % u or size <= 0:
            raise GeometryError(
                f"{self.name}: NVML placement {start}:{size} is not whole memory slices "
                f"of {u} units"
            )
        return Placement(start // u, size // u)

    def profile_for_size(self, size: int) -> Profile:
        """The planner's profile for an instance of ``size`` compute slices."""
        for p in self.profiles:
            if p.compute_slices == size and p.nvml_class in _PLANNER_CLASSES:
                return p
        raise GeometryError(
            f"{self.name} has no instance of {size} compute slices; "
            f"sizes are {', '.join(map(str, self.planner_sizes))}"
        )

    def profile_for_slot(self, slot: Slot) -> Profile:
        """The profile of a planner instance: by its compute slices and its memory slices
        (a 1g on two memory slices is the double-memory 1g, ``1g.20gb`` of the A100-80GB)."""
        if slot.placement.size == self.profile_for_size(slot.size).memory_slices:
            return self.profile_for_size(slot.size)
        double = self.double_memory
        if double is not None and slot.size == 1 and slot.placement.size == double.memory_slices:
            return double
        raise GeometryError(
            f"{self.name} has no instance of {slot.size} compute slices on "
            f"{slot.placement.size} memory slices"
        )

    @property
    def double_memory(self) -> Profile | None:
        """The 1g profile with two memory slices (NVML 1_SLICE_REV2), if the model has one."""
        for p in self.profiles:
            if p.nvml_class == _DOUBLE_CLASS:
                return p
        return None

    def profile(self, name: str) -> Profile:
        """A profile by the driver's name (an earlier driver's name too, e.g. GB200's
        ``7g.189gb``), planner or not."""
        name = self.renamed.get(name, name)
        for p in self.all_profiles:
            if p.name == name:
                return p
        names = ", ".join(p.name for p in self.all_profiles)
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

    def most_memory(self, size: int) -> int:
        """The most memory an instance of ``size`` compute slices can have: the
        double-memory 1g's for size 1 where the model has one."""
        best = self.profile_for_size(size).memory_bytes
        double = self.double_memory
        if size == 1 and double is not None:
            best = max(best, double.memory_bytes)
        return best
