"""Step 3 of the cycle: the planning core's driver with the policy the config names
(whether to re-plan, batches, planning through the registry, the release gate); the
configured ``objective`` goes to the policy (the config refuses one the policy does not
take), and without one ``balanced`` where the policy takes it (far, auto, adaptive)."""

from __future__ import annotations

from collections.abc import Sequence

from ...planner.decisions import Decisions
from ...planner.driver import BatchSettings, step_groups
from ...planner.snapshot import ClusterSnapshot
from .classify import Classified
from .clusters import group_keys
from .inputs import CycleInput
from .policyset import PolicySet

__all__ = ["schedule"]


def schedule(
    snap: CycleInput,
    view: Classified,
    groups: Sequence[ClusterSnapshot],
    policies: PolicySet | None = None,
) -> list[Decisions]:
    """Step 3: the planning core's driver with the configured policy (package doc):
    the daemon's `PolicySet` keeps the policies across cycles; without one (a test, a
    single cycle) they are built for this cycle."""
    if not groups:
        return []
    wanted = (snap.algorithm, snap.objective, snap.upsize)
    if policies is None or (policies.algorithm, policies.objective, policies.upsize) != wanted:
        policies = PolicySet(*wanted)
    settings = BatchSettings(
        window=snap.batch_window,
        size=max(0, snap.batch_size),
        reorder=None if snap.reorder < 0 else snap.reorder,
    )
    return step_groups(groups, policies.for_groups(group_keys(snap, view)), settings)
