"""Discrete-event simulator of a MIG cluster under the registry's policies.

``simulate(jobs, policy, nodes, gpus_per_node, model, seed) -> SimResult``; policies
come from ``planner.registry`` through ``sim.policies`` (batch planners run through the
daemon's own driver), workloads from ``sim.jobs``. Pure Python; matplotlib only for
``sim.plot``.
"""

from __future__ import annotations

from .api import PolicyError, RunningView, SimJob
from .engine import SimInputError, simulate
from .metrics import SimResult
from .policies import SimPolicy, get_policy

__all__ = [
    "PolicyError",
    "RunningView",
    "SimInputError",
    "SimJob",
    "SimPolicy",
    "SimResult",
    "get_policy",
    "simulate",
]
