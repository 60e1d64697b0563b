"""Discrete-event simulator of a MIG cluster under online and batch policies.

``simulate(jobs, policy, nodes, gpus_per_node, model, seed) -> SimResult``; the
policy contract is in ``sim.api``, the registry in ``sim.policies``, workloads in
``sim.jobs``. Pure Python; matplotlib only for ``sim.plot``.
"""

from __future__ import annotations

from .api import (
    ClusterView,
    Command,
    Create,
    Destroy,
    GpuView,
    InstanceView,
    Migrate,
    Policy,
    PolicyError,
    RunningView,
    SimJob,
    Start,
    Wake,
)
from .engine import SimInputError, simulate
from .metrics import SimResult

__all__ = [
    "ClusterView",
    "Command",
    "Create",
    "Destroy",
    "GpuView",
    "InstanceView",
    "Migrate",
    "Policy",
    "PolicyError",
    "RunningView",
    "SimInputError",
    "SimJob",
    "SimResult",
    "Start",
    "Wake",
    "simulate",
]
