"""What one planner cycle did: `ApplyReport` (the Slurm writes) and `CycleReport` (the
cycle, as the status file, metrics, the public summary and the web page read it)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from .cycle import CycleResult

__all__ = ["ApplyReport", "CycleReport"]


@dataclass
class ApplyReport:
    """What `apply.apply_actions` wrote to Slurm, what failed and what it left."""

    applied: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)  # (job id, error)
    skipped: int = 0  # later actions of a job whose earlier action failed, or stopped
    learned: int = 0
    # (job id, restart) of the runs whose runtime the store now holds (new or known)
    stored: list[tuple[str, int]] = field(default_factory=list)
    released: list[str] = field(default_factory=list)  # jobs whose release went through
    cut: int = 0  # actions left for the next cycle: the apply budget was spent
    calls: int = 0  # Slurm commands run


@dataclass
class CycleReport:
    """One cycle: when, what it planned (``result``), what it wrote (``apply``)."""

    number: int
    started: float
    finished: float
    result: CycleResult | None
    apply: ApplyReport | None
    error: str | None = None
    policy: str = ""
    batch_window: float = 30.0
    batch_size: int = 0
    max_planned: int = 0
    reorder: int = -1  # [planner] reorder (-1: no bound)
    # per job projections, running drift, next batch (`jobtimes`); status and explain
    extra: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        r, a = self.result, self.apply
        return {
            **self.extra,
            "cycle": self.number,
            "pid": os.getpid(),
            "started": self.started,
            "finished": self.finished,
            "seconds": round(self.finished - self.started, 6),
            "error": self.error,
            "actions": len(r.actions) if r else 0,
            "applied": a.applied if a else 0,
            "failed": [list(f) for f in a.failed] if a else [],
            "skipped": a.skipped if a else 0,
            "cut": a.cut if a else 0,
            "slurm_calls": a.calls if a else 0,
            "learned": a.learned if a else 0,
            "planned": len(r.planned) if r else 0,
            # what Slurm took (a failed update is no release); a dry run: what it would
            "released": (a.released if a else list(r.released)) if r else [],
            "deferred": dict(r.deferred) if r else {},
            # the nodes' records of jobs not running there: their slices are not planned
            "stale": sorted(r.stale.values()) if r else [],
            "priority": dict(r.priority) if r else {},
            "batches": list(r.batches) if r else [],
            "replanned": list(r.replanned) if r else [],
            "busy": r.busy if r else 0,
            "waiting": r.waiting if r else 0,
            "beyond": r.beyond if r else 0,
            "noted": r.noted if r else 0,
            "makespan": round(r.makespan, 3) if r else 0.0,
            "nodes": sorted(r.nodes) if r else [],
            "policy": self.policy,
            "batch_window": self.batch_window,
            "batch_size": self.batch_size,
            "max_planned": self.max_planned,
            "reorder": self.reorder,
            "state": [s.to_json() for s in r.snapshots] if r else [],
        }
