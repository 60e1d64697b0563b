"""Where a cycle's actions go, chosen once when the daemon starts: `SlurmApplier` writes
them through scontrol (`apply.apply_actions`) and keeps the daemon's files up to date;
`DryRunApplier` (``slurm-mig planner --dry-run``) prints them and writes nothing."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TextIO

from .apply import Client, apply_actions
from .cycle import Action, CycleResult, Learn
from .cyclereport import ApplyReport, CycleReport

__all__ = ["Applied", "Applier", "DryRunApplier", "Publisher", "SlurmApplier"]


@dataclass
class Applied:
    """What applying one cycle's actions left: the writes' report (None: nothing was
    written), the runs whose runtime the store holds, and what the daemon keeps of
    Slurm for the next cycle (the nodes of the last plan applied, held jobs' plans)."""

    report: ApplyReport | None
    stored: set[tuple[str, int]]
    nodes: frozenset[str] | None
    plans: dict[str, Any] | None


class Publisher(Protocol):
    """What the daemon writes after a cycle: status file, public summary, accounting."""

    def publish(self, report: CycleReport) -> None: ...


class Applier(Protocol):
    """Takes a cycle's actions somewhere and says what the daemon keeps for the next."""

    def apply(
        self,
        actions: Sequence[Action],
        result: CycleResult,
        nodes: frozenset[str] | None,
        plans: dict[str, Any] | None,
    ) -> Applied: ...

    def publish(self, daemon: Publisher, report: CycleReport) -> None: ...


class SlurmApplier:
    """The actions written to Slurm; the plans Slurm did not take stand for the next
    cycle, and the daemon publishes what the cycle did."""

    def __init__(
        self,
        client: Client,
        key: bytes | None,
        store: Any,
        clock: Callable[[], float],
        stop: threading.Event,
        *,
        gres: bool,
        workers: int,
        budget: float,
        slices: bool = False,
    ) -> None:
        self.client = client
        self.key = key
        self.store = store
        self.clock = clock
        self.stop = stop
        self.gres = gres
        self.slices = slices
        self.workers = workers
        self.budget = budget
        self.unstored: set[tuple[str, int]] = set()  # runs the store refused, logged once

    def apply(
        self,
        actions: Sequence[Action],
        result: CycleResult,
        nodes: frozenset[str] | None,
        plans: dict[str, Any] | None,
    ) -> Applied:
        """`apply.apply_actions`; the next cycle starts from this plan's nodes and the
        plans of the jobs whose release did not go through."""
        assert self.key is not None, "a key is needed to release jobs"
        report = apply_actions(
            actions,
            self.client,
            key=self.key,
            store=self.store,
            clock=self.clock,
            stop=self.stop,
            gres=self.gres,
            slices=self.slices,
            workers=self.workers,
            budget=self.budget,
            unstored=self.unstored,
        )
        took = set(report.released)
        standing = {j: a for j, a in result.planned.items() if j not in took}
        return Applied(report, set(report.stored), result.nodes, standing)

    def publish(self, daemon: Publisher, report: CycleReport) -> None:
        """The status file, the public summary and the accounting gathered."""
        daemon.publish(report)


class DryRunApplier:
    """Each action printed, one line, to ``out``; Slurm, the store and the daemon's files
    untouched, so the next cycle plans from the same standing plans."""

    def __init__(self, out: TextIO) -> None:
        self.out = out

    def apply(
        self,
        actions: Sequence[Action],
        result: CycleResult,
        nodes: frozenset[str] | None,
        plans: dict[str, Any] | None,
    ) -> Applied:
        """Print; the learned runs count as stored, so each is printed once."""
        for action in actions:
            print(action.describe(), file=self.out)
        stored = {(a.job_id, a.restart) for a in actions if isinstance(a, Learn)}
        return Applied(None, stored, nodes, plans)

    def publish(self, daemon: Publisher, report: CycleReport) -> None:
        """Nothing: a dry run writes no file."""
