"""Planning: every policy behind one registry, over one frozen snapshot of the cluster.

* ``snapshot``: `ClusterSnapshot` - the GPUs of one model as a policy finds them (live
  instances, when each frees, jobs waiting and running, standing plans).
* ``decisions``: what a policy answers (`Place`, `Move`, `Create`, `Destroy`).
* ``registry``: the names (``far``, ``auto``, ``far-pcie``, ``exact``, the baselines,
  ``baseline``, ``pcie-aware``, ``frag-aware`` and its ablations, ``migm-a``/``-b``);
  the CLI, the simulator and the daemon look policies up there.
* ``driver``: the one step from a snapshot to decisions: batch formation, standing
  plans and the release gate for batch planners; online policies decide directly.

A batch planner is ``plan(batch) -> Plan`` for a `Batch` of tasks on GPUs of one model,
idle or as ``batch.start`` finds them. This package imports nothing from ``sim``,
``slurm``, ``devices`` or ``memory``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["Batch", "UnknownPlanner", "get_planner"]

if TYPE_CHECKING:  # pragma: no cover
    from .batch import Batch, UnknownPlanner, get_planner


def __getattr__(name: str) -> Any:
    # lazy, so that importing planner.registry (the config does) stays cheap
    if name in __all__:
        from . import batch

        return getattr(batch, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
