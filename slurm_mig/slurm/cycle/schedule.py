"""Step 3 of the cycle: the planning core's driver with the policy the config names
(whether to re-plan, batches, planning through the registry, the release gate); the
configured ``objective`` goes to the policy when it takes one (far, auto, adaptive)."""

from __future__ import annotations

from collections.abc import Sequence

from ...planner.decisions import Decisions
from ...planner.driver import BatchSettings, step_groups
from ...planner.registry import get_policy
from ...planner.sequencing import objective_options
from ...planner.snapshot import ClusterSnapshot
from .classify import Classified
from .inputs import Snapshot

__all__ = ["schedule"]


def schedule(
    snap: Snapshot, view: Classified, groups: Sequence[ClusterSnapshot]
) -> list[Decisions]:
    """Step 3: the planning core's driver with the configured policy (package doc)."""
    if not groups:
        return []
    options = objective_options(snap.algorithm, snap.objective)
    policies = [get_policy(snap.algorithm, **options) for _ in groups]
    settings = BatchSettings(
        window=snap.batch_window,
        size=max(0, snap.batch_size),
        reorder=None if snap.reorder < 0 else snap.reorder,
    )
    return step_groups(groups, policies, settings)
