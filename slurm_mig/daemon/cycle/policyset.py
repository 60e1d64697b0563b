"""The daemon's policies, built once and kept from cycle to cycle, as the simulator
keeps one per run: one per group of GPUs the cycle plans apart (reservation, GPU model
and the GPUs themselves). A group whose GPUs change (a node drained or back) gets a
fresh one; a group gone is let go. A policy kept may hold caches; the daemon's
snapshots say nothing changed since the last (``changed``/``arrived`` None), so it reads
each snapshot whole."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

from ...planner.registry import Policy, get_policy, policy_info
from ...planner.sequencing import DEFAULT_OBJECTIVE

__all__ = ["PolicySet", "configured_objective"]


def configured_objective(algorithm: str, objective: str) -> str:
    """The objective the daemon plans by: ``[planner] objective`` (the config refuses
    one the policy does not take), else ``balanced`` where the policy takes it, else
    "" (the policy's own rule)."""
    if objective:
        return objective
    return DEFAULT_OBJECTIVE if DEFAULT_OBJECTIVE in policy_info(algorithm).objectives else ""


@dataclass
class PolicySet:
    """The configured policy per group of GPUs (module doc), with ``objective`` ("":
    the policy's own) and ``upsize`` (seconds; 0: off, `planner.upsize`). ``built``
    counts the policies made over the daemon's run."""

    algorithm: str
    objective: str = ""
    upsize: float = 0.0
    built: int = 0
    _kept: dict[Hashable, Policy] = field(default_factory=dict, repr=False)

    def for_groups(self, groups: Sequence[Hashable]) -> list[Policy]:
        """The policy of each group, in order: the one kept for it, else a new one."""
        kept = {}
        for group in groups:
            policy = self._kept.get(group)
            if policy is None:
                options = policy_info(self.algorithm).objective_options(self.objective)
                if self.upsize > 0:
                    options = {**options, "upsize": self.upsize}
                policy = get_policy(self.algorithm, **options)
                self.built += 1
            kept[group] = policy
        self._kept = kept
        return [kept[g] for g in groups]
