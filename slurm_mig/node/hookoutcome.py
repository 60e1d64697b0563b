"""What a hook decided: `Outcome` (exit status, output, log lines, side effects to carry
out), the syslog priorities of its log lines, and how the logs name an instance.

Standard library, ``geometry`` and record types only: on the job start path.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..devices.base import MigInstance
from ..geometry import Placement
from .nodestate import JobRecord, KeptInstance

__all__ = ["ERR", "INFO", "WARNING", "Clock", "Outcome", "describe", "describe_item"]

# syslog priorities (the numbers of <syslog.h>), kept here so deciding needs no syslog.
ERR, WARNING, INFO = 3, 4, 6


Clock = Callable[[], float]


@dataclass
class Outcome:
    """What a hook decided: its exit status, stdout lines, log lines and side effects."""

    exit_code: int = 0
    stdout: list[str] = field(default_factory=list)
    log: list[tuple[int, str]] = field(default_factory=list)  # (syslog priority, text)
    drain: str | None = None  # drain the node with this reason
    requeue: bool = False  # scontrol requeuehold the job (TaskProlog; a full-disk Prolog)
    started: bool = False  # Prolog: the job has its instance and will run
    # (event, label, seconds) for the node metrics (`nodemetrics.EVENTS`)
    events: list[tuple[str, str, float]] = field(default_factory=list)
    finished: dict | None = None  # Epilog: the run's runtime record, for accounting

    reclaim_after: float | None = None  # Epilog kept an instance: reclaim it this late

    def event(self, name: str, label: str, seconds: float = 0.0) -> None:
        self.events.append((name, label, seconds))

    def say(self, text: str, level: int = INFO) -> None:
        self.log.append((level, text))

    def warn(self, text: str) -> None:
        self.say(text, WARNING)

    def fault(self, text: str) -> Outcome:
        """A node fault: drain the node with ``text`` and exit 1."""
        text = " ".join(str(text).split())
        self.drain = text
        self.exit_code = 1
        self.event("fault", "")
        self.say(f"node fault, draining the node: {text}", ERR)
        return self


def describe(profile: str, placement: Placement, gpu: int, uuid: str | None = None) -> str:
    """``3g.20gb at 4:4 on gpu 1 (MIG-...)``: one instance, as the logs name it."""
    where = f"{profile} at {placement.start}:{placement.size} on gpu {gpu}"
    return f"{where} ({uuid})" if uuid else where


def describe_item(item: MigInstance | JobRecord | KeptInstance) -> str:
    """`describe` of an instance or record; a job of several slices' record as ``4 x
    1g.5gb in 0:4 on gpu 1 (MIG-a, MIG-b, ...)``, every instance named."""
    if isinstance(item, JobRecord) and item.members:
        where = f"{item.placement.start}:{item.placement.size} on gpu {item.gpu}"
        return f"{item.tasks} x {item.profile} in {where} ({', '.join(item.uuids)})"
    return describe(item.profile, item.placement, item.gpu, item.uuid)
