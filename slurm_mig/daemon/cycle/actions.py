"""The cycle's output: the `Action`s that move Slurm towards the plan (hold, release,
note, learn, requeue) and the `CycleResult` that carries them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from ... import jobcomment as comments
from ...planner.decisions import Decisions
from ...planner.snapshot import ClusterSnapshot
from ...slurm.assignment import Assignment
from ...slurm.jobrecord import JobLike, job_phase, parse_admin_comment

__all__ = [
    "Action",
    "CycleResult",
    "Hold",
    "Learn",
    "Note",
    "Release",
    "Requeue",
    "held_again",
    "moved_up_after",
]


@dataclass(frozen=True)
class Hold:
    """``scontrol hold``: a pending job the planner has not released. A job held again
    after a release (``scrub``) loses its token (``comment``: its Comment without it;
    None: unchanged) and its GRES record in the same update as the hold, so that no
    later lift of the hold (an admin's ``nice``) starts it on an earlier plan."""

    job_id: str
    reason: str
    clear_dependency: bool = False  # the planner's afterany, set when released ahead
    # what the hold clears besides (a hold is the same hold whatever it clears)
    scrub: bool = field(default=False, compare=False)  # a token or a release's record
    comment: str | None = field(default=None, compare=False)

    def describe(self) -> str:
        also = "; its dependency cleared" if self.clear_dependency else ""
        if self.scrub:
            also += "; its token and GRES record cleared"
        return f"job {self.job_id}: held ({self.reason}){also}"


def held_again(hold: Hold, job: JobLike) -> Hold:
    """``hold`` scrubbing ``job`` when it carries the planner's token or the record of an
    earlier release (AdminComment); ``hold`` itself otherwise."""
    parsed = comments.parse(job.comment)
    if parsed.token is None and parse_admin_comment(job.admin_comment) is None:
        return hold
    comment = parsed.with_token(None).render() if parsed.token is not None else None
    return replace(hold, scrub=True, comment=comment)


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
        from ..gangview import slice_name

        where = f"on {a.node} gpu {a.gpu} {slice_name(a.profile, a.tasks)}@{a.placement.start}"
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
    hint: float | None = None  # the run's time= hint: an overrun is recorded (overruns.py)
    ok: bool = True  # False: a run that failed past its hint, its overrun only

    def describe(self) -> str:
        from ...overruns import overran

        past = (
            f" (past its time= hint of {self.hint:g} s)" if overran(self.seconds, self.hint) else ""
        )
        return (
            f"job {self.job_id}: {'learned' if self.ok else 'failed, not learned:'} {self.key} "
            f"of {self.owner or '(no owner)'} on {self.model} size {self.size}: "
            f"{self.seconds:.1f} s{past}"
        )


@dataclass(frozen=True)
class Requeue:
    """``scontrol requeue``: a policy moves this running, restartable job; it is planned
    again for its next run (MIG has no live migration). ``at_least``: the policy moved
    it up to that size, so run ``run`` is planned on that size or larger (the daemon
    keeps it: `CycleInput.moved_up`); 0: any size."""

    job_id: str
    reason: str
    at_least: int = 0
    run: int = 0  # the restart count of its next run

    def describe(self) -> str:
        return f"job {self.job_id}: requeued ({self.reason})"


Action = Hold | Release | Note | Learn | Requeue


def moved_up_after(
    moved_up: Mapping[str, tuple[int, int]], actions: Sequence[Action], jobs: Sequence[JobLike]
) -> dict[str, tuple[int, int]]:
    """The jobs moved up (`CycleInput.moved_up`) after a cycle that saw ``jobs`` and
    took ``actions``: those kept while squeue shows them and their next run has not
    begun (still on the run the move requeues, or not running: Slurm 26.05 shows a job
    it requeues as REQUEUE_HOLD before PENDING, 22.05 as COMPLETING with the next run's
    count while the old run ends), and this cycle's moves up."""
    runs = {j.job_id: j.restart_count for j in jobs}
    begun = {j.job_id for j in jobs if _running(j.state)}
    out = {
        jid: up
        for jid, up in moved_up.items()
        if jid in runs and (runs[jid] < up[0] or jid not in begun)
    }
    for a in actions:
        if isinstance(a, Requeue) and a.at_least:
            out[a.job_id] = (a.run, a.at_least)
    return out


def _running(state: str) -> bool:
    """Whether a squeue state is of a run under way (active, and not an old run that
    is still ending: COMPLETING)."""
    return job_phase(state) == "active" and "COMPLETING" not in (state or "").upper()


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
    # released jobs Slurm keeps pending (a limit, licenses, not started), held this
    # cycle: why (the daemon backs them off)
    limited: Mapping[str, str] = field(default_factory=dict)
    # array throttles learned this cycle (JobArrayTaskLimit): array id -> tasks at once
    throttles: Mapping[str, int] = field(default_factory=dict)
    # the nodes' stale records whose slices are not planned (`stale`): busy id -> why
    stale: Mapping[str, str] = field(default_factory=dict)
    # what the policy saw and answered, per GPU model (plans carry their timing stats)
    snapshots: tuple[ClusterSnapshot, ...] = field(default=(), compare=False)
    decisions: tuple[Decisions, ...] = field(default=(), compare=False)
