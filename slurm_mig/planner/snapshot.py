"""The cluster as a policy finds it: one frozen snapshot that every policy reads.

A `ClusterSnapshot` holds the GPUs of one model (`Gpu`: live instances with their jobs
and when each frees, the create/destroy channel, the PCIe-bound jobs there), the jobs
waiting (`Job`, in arrival order), the jobs on instances (`Running`) and the standing
plans of waiting jobs (`Planned`). Policies return decisions (``planner.decisions``)
and never change it. The daemon builds it from Slurm, the simulator from its engine,
``slurm-mig plan --start`` from JSON (`snapshot_from_json`); the three then run the
same code.

Times are absolute seconds (``now`` is the snapshot's clock: epoch seconds on Slurm,
simulated seconds in the simulator); a plan made from a snapshot counts from ``now``.
``arrived``, ``finished`` and ``changed`` say what is new since the previous snapshot
given to the same policy object, so that a policy may keep caches; ``None`` means
"unknown: everything", and a policy must then decide exactly as a fresh one.

The types live in ``cluster_snapshot`` (with the JSON writer), the JSON reader in
``snapshot_json``; this module is where the rest of the package imports them from.
"""

from __future__ import annotations

from . import cluster_snapshot
from .cluster_snapshot import *  # noqa: F403 - every type, listed once in its __all__
from .snapshot_json import snapshot_from_json

__all__ = ["snapshot_from_json"]
__all__ += cluster_snapshot.__all__
