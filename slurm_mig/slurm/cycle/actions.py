"""The cycle's output: the `Action`s that move Slurm towards the plan (hold, release,
note, learn, requeue) and the `CycleResult` that carries them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ...planner.decisions import Decisions
from ...planner.snapshot import ClusterSnapshot
from ..assignment import Assignment

__all__ = ["Action", "CycleResult", "Hold", "Learn", "Note", "Release", "Requeue"]


@dataclass(frozen=True)
class Hold:
    """``scontrol hold``: a pending job the planner has not released."""

    job_id: str
    reason: str
    clear_dependency: bool = False  # the planner's afterany, set when released ahead

    def describe(self) -> str:
        also = "; its dependency cleared" if self.clear_dependency else ""
        return f"job {self.job_id}: held ({self.reason}){also}"


@dataclass(frozen=True)
class Release:
    """Sign ``assignment`` (issued = now), write the token into the job's Comment (the
    user's text ``comment`` kept) and the record (``fields``) in one update, then
    release (``in_place``: the update alone). With ``after``, the job is released ahead
    of its slices: Slurm starts it once those jobs are gone (``Dependency=afterany``)."""

    job_id: str
    assignment: Assignment
    comment: str  # the job's Comment without token or note
    after: tuple[str, ...] = ()
    # the record fields that differ from what Slurm holds (AdminComment, ReqNodeList),
    # written in the same update as the token
    fields: tuple[tuple[str, str], ...] = ()
    # why the job is re-planned in place ("": a release): it is pending and not held
    # (its plan changed after a release), so the one update moves it, with no hold
    # before it and no release after it
    in_place: str = ""

    def describe(self) -> str:
        a = self.assignment
        verb = f"re-planned ({self.in_place})" if self.in_place else "released"
        where = f"on {a.node} gpu {a.gpu} {a.profile}@{a.placement.start}"
        if self.after:
            return f"job {self.job_id}: {verb} {where}, to start after job " + ", ".join(self.after)
        return f"job {self.job_id}: {verb} {where}"


@dataclass(frozen=True)
class Note:
    """The job stays held and cannot be planned: say why (AdminComment + Comment)."""

    job_id: str
    text: str
    fields: tuple[tuple[str, str], ...]

    def describe(self) -> str:
        return f"job {self.job_id}: not planned: {self.text}"


@dataclass(frozen=True)
class Learn:
    """A finished run's runtime for the runtime store (idempotent per job and restart),
    learned under its owner's kind (owner "": unknown, not stored)."""

    job_id: str
    restart: int
    key: str
    model: str
    size: int
    seconds: float
    finished: float
    owner: str = ""

    def describe(self) -> str:
        return (
            f"job {self.job_id}: learned {self.key} of {self.owner or '(no owner)'} on "
            f"{self.model} size {self.size}: {self.seconds:.1f} s"
        )


@dataclass(frozen=True)
class Requeue:
    """``scontrol requeue``: a policy moves this running, restartable job; it is planned
    again for its next run (MIG has no live migration)."""

    job_id: str
    reason: str

    def describe(self) -> str:
        return f"job {self.job_id}: requeued ({self.reason})"


Action = Hold | Release | Note | Learn | Requeue


@dataclass(frozen=True)
class CycleResult:
    """The actions, in the order to apply them, and what the plan looks like."""

    actions: tuple[Action, ...]
    planned: Mapping[str, Assignment]  # every held job's assignment (released ones too)
    released: tuple[str, ...]
    batches: tuple[int, ...]  # batch numbers formed this cycle
    replanned: tuple[str, ...]  # why standing plans were made again ('' none)
    busy: int  # jobs holding or about to hold slices
    waiting: int  # held jobs left for a later batch
    beyond: int  # of them: held jobs past ``max_planned`` (not planned yet)
    noted: int  # held jobs that cannot be planned
    makespan: float  # seconds from now until all busy and planned work ends (projected)
    nodes: frozenset[str]  # pass as the next snapshot's previous_nodes
    # held jobs not planned because they cannot start yet (begin time, dependency): why
    deferred: Mapping[str, str] = field(default_factory=dict)
    # held jobs' priorities (Slurm's multifactor terms; empty without a site policy)
    priority: Mapping[str, int] = field(default_factory=dict)
    # released jobs Slurm keeps pending for a limit, held this cycle: the limit
    limited: Mapping[str, str] = field(default_factory=dict)
    # what the policy saw and answered, per GPU model (plans carry their timing stats)
    snapshots: tuple[ClusterSnapshot, ...] = field(default=(), compare=False)
    decisions: tuple[Decisions, ...] = field(default=(), compare=False)
