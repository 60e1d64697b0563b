"""Batch planners behind one small interface over an immutable snapshot.

Every planner is a callable ``plan(batch) -> Plan``; ``get_planner`` resolves the
names the CLI accepts (``far``, ``far-pcie``, ``exact``, ``auto``, ``miso-opt``,
``fixpart-best``, ``fixpart-7``, ``fixpart-1-1-1-1-1-1-1``, any ``fixpart-<sizes>``
partition).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from ..geometry import GpuModel
from ..plan import Plan
from ..workload import Task


@dataclass(frozen=True)
class Batch:
    """What a planner sees: the tasks, the GPU model and how many GPUs."""

    tasks: tuple[Task, ...]
    model: GpuModel
    gpus: int = 1
    seed: int = 0


class Planner(Protocol):
    def __call__(self, batch: Batch) -> Plan: ...


class UnknownPlanner(ValueError):
    pass


_NAMED = {
    "far": ("far", "plan_far"),
    "far-pcie": ("far_pcie", "plan_far_pcie"),
    "exact": ("exact", "plan_exact"),
    "auto": ("exact", "plan_auto"),
    "miso-opt": ("baselines", "plan_miso_opt"),
    "fixpart-best": ("baselines", "plan_fixpart_best"),
}


def get_planner(name: str) -> Callable[[Batch], Plan]:
    """The planner for a CLI name; raises UnknownPlanner listing the valid names."""
    from importlib import import_module

    key = name.strip().lower()
    if key in _NAMED:
        module, func = _NAMED[key]
        return getattr(import_module(f"{__name__}.{module}"), func)
    if key.startswith("fixpart-"):
        from . import baselines

        return baselines.fixpart_planner(key[len("fixpart-") :])
    raise UnknownPlanner(
        f"unknown planner {name!r}; choose far, far-pcie, auto, exact, miso-opt, fixpart-best, "
        "or fixpart-<sizes> (e.g. fixpart-7, fixpart-4-3, fixpart-1-1-1-1-1-1-1)"
    )
