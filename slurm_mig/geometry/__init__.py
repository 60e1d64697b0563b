"""MIG hardware geometry: the one source of truth for slices, profiles, placements,
valid partitions, FAR's repartitioning tree and reconfiguration times.

- ``model``: the types (Placement, Slot, Profile, TreeNode, GpuModel).
- ``tables``: the offline catalogue of every model, ``get_model``.
- ``slots``: legal placements, planner and double-memory slots, valid partitions.
- ``masks``: slot bit masks and the per-model lookup tables planners use.
- ``gangs``: jobs of several slices: the regions that hold them, where their instances go.
"""

from __future__ import annotations

from .gangs import MAX_TASKS, gang_placements, gang_times, most_tasks, region_sizes, task_size
from .masks import MaskTables, compute_mask, mask_tables, slot_mask
from .model import GIB, Board, GeometryError, GpuModel, Placement, Profile, Slot, TreeNode
from .slots import (
    blocked_compute,
    can_coexist,
    legal_placements,
    memory_slots,
    partition_name,
    planner_slots,
    valid_partitions,
)
from .tables import ALIASES, MODELS, get_model

__all__ = [
    "Board",
    "ALIASES",
    "GIB",
    "MODELS",
    "GeometryError",
    "GpuModel",
    "MaskTables",
    "Placement",
    "Profile",
    "Slot",
    "TreeNode",
    "blocked_compute",
    "can_coexist",
    "compute_mask",
    "get_model",
    "legal_placements",
    "mask_tables",
    "memory_slots",
    "partition_name",
    "planner_slots",
    "slot_mask",
    "valid_partitions",
    "MAX_TASKS",
    "gang_placements",
    "gang_times",
    "most_tasks",
    "region_sizes",
    "task_size",
]
