"""Registry policies in the simulator: ``get_policy(name, **options)`` wraps the policy
of that name (``planner.registry``) in a `SimPolicy`, which keeps the standing plans
between snapshots as the daemon keeps them in Slurm, and runs batch planners through
``planner.driver``, the daemon's own batching and release gate.

Options of batch policies: ``window`` (s a partial batch waits for more jobs; default
``inf``), ``eager`` (plan the waiting jobs as soon as no standing plan waits to start;
default true: the simulator's batches form when the previous one has started in
full), ``max_batch`` (jobs per batch; default all), ``moldable`` (default true; false
runs each job on its requested size only), ``reorder`` (jobs a batch may reorder past
a job of higher priority; default none: unbounded, 0: strict priority order); every
other option goes to the planner.
Online policies take their own options only (the driver's are refused for them, one
line); ``base`` (the driver's settings before the options) is what online policies
never use, as ``simulate --reorder`` sets it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from ..planner.decisions import Decisions
from ..planner.driver import DRIVER_OPTIONS, BatchSettings, as_online, driver_settings
from ..planner.registry import Policy, UnknownPolicy, policy_info, policy_names
from ..planner.registry import get_policy as _registry_policy
from ..planner.snapshot import ClusterSnapshot, Planned

__all__ = ["SIM_SETTINGS", "SimPolicy", "UnknownPolicy", "get_policy", "policy_names"]

KEEP_PLANS = 64
# The simulator's batches form when the previous one has started in full.
SIM_SETTINGS = BatchSettings(window=math.inf, eager=True)
# The simulator forms the next batch once the previous one has started in full, so
# far-pcie ranks its candidates by when their last task starts unless told otherwise.
_SIM_DEFAULTS: dict[str, dict[str, Any]] = {"far-pcie": {"objective": "start"}}


class SimPolicy:
    """A registry policy as the simulator runs it. Counters: ``batches``,
    ``plan_seconds`` (batch planners' own planning time), ``chosen`` (far-pcie: batches
    each candidate won); other attributes are the wrapped policy's."""

    def __init__(
        self, policy: Policy, settings: BatchSettings | None = None, record: bool = True
    ) -> None:
        self.policy = policy
        self.name = policy.name
        self.kind = policy.kind
        self.settings = settings or SIM_SETTINGS
        self.planned: Mapping[str, Planned] = MappingProxyType({})
        self.batches = 0  # batches formed so far; the next one's number
        self.plan_seconds = 0.0
        self.chosen: dict[str, int] = {}
        self.record = record
        self.plans: list = []  # the last ``KEEP_PLANS`` batches' plans, when ``record``
        self.decider = as_online([policy], self.settings)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["policy"], name)

    def decide(self, snap: ClusterSnapshot) -> Decisions:
        got = self.decider.decide(snap)
        if got.numbered:  # a plan's batches: count them
            formed = int(got.stats.get("batches", 0))
            self.batches = snap.next_batch + formed
            if got.plan is not None and formed:
                if self.record:
                    self.plans.append(got.plan)
                    del self.plans[:-KEEP_PLANS]
                self.plan_seconds += float(got.plan.stats.get("planning_seconds", 0.0))
                cand = got.plan.stats.get("candidate")
                if cand is not None:
                    self.chosen[cand] = self.chosen.get(cand, 0) + 1
        self.planned = got.planned
        return got


def get_policy(name: str, base: BatchSettings = SIM_SETTINGS, **options: Any) -> SimPolicy:
    """A fresh `SimPolicy` for the registry name ``name`` (module doc for options), a
    batch planner driven with ``base`` changed by the driver's options; UnknownPolicy
    lists the valid names or names a bad option."""
    info = policy_info(name)
    options = {**_SIM_DEFAULTS.get(info.name, {}), **options}
    driver = {k: options.pop(k) for k in DRIVER_OPTIONS if k in options}
    policy = _registry_policy(name, **options)
    return SimPolicy(policy, driver_settings(name, policy, base, driver))
