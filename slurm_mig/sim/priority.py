"""Slurm's job priority as a site's ``priority/multifactor`` gives it, for the simulator.

Modes (`PRIORITY_MODES`):

- ``none``: every job keeps the priority its workload gives it (0 unless a job file
  sets one): jobs of one priority are the policy's to order (the equal-priority
  condition of the earlier figures).
- ``age``: Slurm's age factor alone: ``int(weight_age x min(wait, max_age) / max_age)``,
  at least 1, as the multifactor plugin truncates it. Every waiting job's grows at the
  same rate, so the order is arrival order, up to the ties the truncation makes (with
  the weights below one point per 20 minutes of waiting: jobs that arrived within
  that window may share a priority, and a policy may order them).
- ``fairshare``: the age term plus ``weight_fairshare x`` the Fair Tree factor of the
  job's user (`fair_tree`): users ranked by Level FS = shares / usage (equal shares,
  all users under one account), the factor rank / users, users without usage first.
  Usage is what each user's jobs ran, decayed with the half-life; every job is billed
  one unit per second (one ``gres/gpu``, as Slurm counts every MIG job today).

Weights (`SitePriority` defaults) are those of the configuration example in Slurm's
``priority_multifactor`` documentation: PriorityWeightAge=1000,
PriorityWeightFairshare=10000, PriorityMaxAge=14-0, PriorityDecayHalfLife=14-0.
Slurm recomputes priorities and fairshare factors every PriorityCalcPeriod (5
minutes) and a job's at submission; so does the simulator (`SitePriority.calc_period`).
Pure functions and one small accumulator (`Usage`); the engine drives them
(``sim.site``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["PRIORITY_MODES", "SitePriority", "Usage", "fair_tree", "job_priority"]

PRIORITY_MODES = ("none", "age", "fairshare")
DAY = 86400.0


@dataclass(frozen=True)
class SitePriority:
    """A site's multifactor settings (module doc)."""

    mode: str = "age"
    weight_age: float = 1000.0
    weight_fairshare: float = 10000.0
    max_age: float = 14 * DAY
    half_life: float = 14 * DAY
    calc_period: float = 300.0

    def __post_init__(self) -> None:
        if self.mode not in PRIORITY_MODES:
            raise ValueError(
                f"priority {self.mode!r} is not a mode; give one of {', '.join(PRIORITY_MODES)}"
            )
        for name in ("weight_age", "weight_fairshare", "max_age", "half_life", "calc_period"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"priority {name} must be a finite number >= 0, got {value!r}")
        if self.max_age <= 0 or self.calc_period <= 0:
            raise ValueError("priority max_age and calc_period must be > 0 seconds")

    @property
    def fairshare(self) -> bool:
        return self.mode == "fairshare"


def job_priority(site: SitePriority, arrival: float, now: float, factor: float = 0.0) -> int:
    """The job's priority at ``now`` (module doc); ``factor``: its user's fairshare
    factor (ignored unless the mode is ``fairshare``)."""
    age = min(max(now - arrival, 0.0), site.max_age) / site.max_age
    total = site.weight_age * age
    if site.fairshare:
        total += site.weight_fairshare * factor
    return max(1, int(total))


def fair_tree(usage: Mapping[str, float], users: Iterable[str]) -> dict[str, float]:
    """Fair Tree factors of ``users`` (equal shares, one account): ranked by Level FS
    (shares / usage share) from the highest, ties sharing a rank; the factor is rank /
    number of users, 1.0 for the first; a user without usage ranks first."""
    names = sorted(set(users))
    n = len(names)
    if not n:
        return {}
    total = math.fsum(max(usage.get(u, 0.0), 0.0) for u in names)
    share = 1.0 / n

    def level(u: str) -> float:
        used = max(usage.get(u, 0.0), 0.0)
        return math.inf if used <= 0 or total <= 0 else share / (used / total)

    ranked = sorted(names, key=lambda u: -level(u))
    out: dict[str, float] = {}
    rank, i = n, 0
    while i < n:
        j = i
        while j < n and level(ranked[j]) == level(ranked[i]):
            j += 1
        for u in ranked[i:j]:
            out[u] = rank / n
        rank -= j - i
        i = j
    return out


class Usage:
    """Each user's decayed usage (billed seconds), advanced tick by tick as Slurm's
    decay thread does: decay what was, then add what ran since the last tick."""

    def __init__(self, half_life: float, start: float) -> None:
        self.half_life = half_life
        self.last = start
        self.used: dict[str, float] = {}
        self._pending: dict[str, float] = {}  # ran since the last tick

    def ran(self, user: str, seconds: float) -> None:
        """``user``'s jobs ran ``seconds`` (billed) since the last tick."""
        if seconds > 0:
            self._pending[user] = self._pending.get(user, 0.0) + seconds

    def tick(self, now: float) -> None:
        """Decay the usage over the time since the last tick, then add what ran."""
        dt = now - self.last
        if dt > 0 and self.half_life > 0:
            decay = 0.5 ** (dt / self.half_life)
            for u in self.used:
                self.used[u] *= decay
        for u, s in self._pending.items():
            self.used[u] = self.used.get(u, 0.0) + s
        self._pending.clear()
        self.last = max(self.last, now)
