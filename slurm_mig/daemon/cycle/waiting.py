"""What keeps a pending job from starting: its begin time, its dependencies (its owner's
or the planner's ``afterany``), a reason Slurm keeps a released job pending for, and
which jobs Slurm cannot start before a cycle's writes."""

from __future__ import annotations

import re
import time
from collections.abc import Mapping

from ...slurm.assignment import Assignment
from ...slurm.jobrecord import JobLike, job_phase, parse_admin_comment

__all__ = [
    "ARRAY_LIMIT",
    "BEGIN_SLACK",
    "PLANNER_DEP",
    "cannot_start_yet",
    "kept_pending",
    "dependency_ids",
    "gated",
    "orphaned",
    "planners_dependency",
    "squatting",
]

# a begin time less than this far ahead counts as now: Slurm sets a job's begin time
# itself, in whole seconds, when it becomes eligible (released, its afterany met), and
# squeue may run for seconds after the cycle's clock was read
BEGIN_SLACK = 30.0

_AFTER = re.compile(r"after[a-z]*:([0-9_:]+)")
_ID = r"[0-9]+(?:_[0-9]+)?"  # a job, or an array task (<array id>_<task>)
PLANNER_DEP = re.compile(rf"afterany:({_ID}(?::{_ID})*)(?:\(unfulfilled\))?")

# Slurm keeps a released job pending for these reasons (job_state_reason.c, 22.05-26.05)
# until something else changes (another job or task ends, licenses come back, an admin
# acts): held again at first sight, and planned again after a back-off. The reasons
# left out (None, Priority, Resources, Prolog, SchedDefer, Cleaning, and ReqNodeNotAvail,
# which is also what Slurm says while the job's required node is in use: the scheduler
# has not reached the job, or the last job on its slices or the node's CPUs is still
# leaving) are normal for a released job for a while: waited out for ``start_timeout``,
# then held the same way. A node that is down or drained is read from its state.
ARRAY_LIMIT = "JobArrayTaskLimit"  # its array's ``%N`` tasks run: the throttle caps it
_KEPT_PENDING = frozenset(
    {
        ARRAY_LIMIT,
        "Licenses",
        "BadConstraints",
        "Constraints",
        "PartitionConfig",
        "PartitionNodeLimit",
        "PartitionTimeLimit",
        "PartitionDown",
        "PartitionInactive",
        "NodeDown",
        "FrontEndDown",
        "InvalidAccount",
        "InvalidQOS",
        "AccountNotAllowed",
        "DependencyNeverSatisfied",
        "Reservation",
        "ReservationInvalid",
        "DeadLine",
        "PowerNotAvail",
        "PowerReserved",
        "MaxPoweredUpNodes",
        "MpiPortsBusy",
        "NvidiaImexChannels",
        "FedJobLock",
    }
)
# QOS and association limits, per-account and per-user ones, burst buffers
_KEPT_PENDING_RE = re.compile(r"(?:QOS|Assoc|Max|BurstBuffer)\w*|AccountingPolicy")


def dependency_ids(dependency: str) -> list[str]:
    """The job ids an ``after*`` dependency names (Slurm shows
    ``afterany:41(unfulfilled),afterany:42``)."""
    return [n for m in _AFTER.finditer(dependency) for n in m.group(1).split(":") if n]


def _clock(t: float) -> str:
    """``t`` as local ISO time, as a job's reason shows it."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t))


def _begins_later(job: JobLike, now: float) -> bool:
    """Whether the job's begin time is ahead (past the slack)."""
    return job.eligible_time is not None and job.eligible_time > now + BEGIN_SLACK


def cannot_start_yet(job: JobLike, now: float, own_dependency: bool = False) -> str | None:
    """Why a held job could not start now even if released (its ``--begin`` is ahead,
    or its own dependency is unfulfilled: Slurm re-checks a held job's dependencies
    about once a minute and empties the field once they are met), or None. Such a job
    is not planned: released, it would keep its slices idle. ``own_dependency``: the
    dependency is the planner's, being cleared."""
    if _begins_later(job, now):
        return f"waits for its begin time ({_clock(job.eligible_time)})"
    if job.dependency and not own_dependency:
        return f"waits for its dependency ({job.dependency[:80]})"
    return None


def kept_pending(reason: str) -> bool:
    """Whether Slurm keeps a released job pending for ``reason`` (its reason code) until
    something else changes: the job is held again at once, its slices go to others."""
    return reason in _KEPT_PENDING or bool(_KEPT_PENDING_RE.fullmatch(reason or ""))


def squatting(job: JobLike, a: Assignment, jobs: Mapping[str, JobLike], now: float) -> str | None:
    """Why a released job cannot start though its slices are held for it: its owner
    moved its begin time ahead, or gave it a dependency other than the planner's own;
    None when nothing the job's owner set keeps it from starting."""
    if _begins_later(job, now):
        return f"its begin time is {_clock(job.eligible_time)}"
    if job.dependency and not planners_dependency(job.dependency, a, jobs):
        return f"it has a dependency of its own ({job.dependency[:80]})"
    return None


def planners_dependency(
    dep: str, a: Assignment | None, jobs: Mapping[str, JobLike], own: str | None = None
) -> bool:
    """Whether ``dep`` is what the planner sets on a job released ahead: ``afterany`` on
    jobs planned on the same GPU (Slurm shows ``afterany:41(unfulfilled),...``).
    ``own``: the job's id, whose AdminComment (any run of it) gives ``a`` when None."""
    if a is None and own is not None and own in jobs:
        a = parse_admin_comment(jobs[own].admin_comment)
    if a is None:
        return False
    for item in dep.split(","):
        m = PLANNER_DEP.fullmatch(item)
        if m is None:
            return False
        for jid in m.group(1).split(":"):
            other = jobs.get(jid)
            b = parse_admin_comment(other.admin_comment) if other is not None else None
            if b is None or (b.node, b.gpu) != (a.node, a.gpu):
                return False
    return True


def orphaned(job: JobLike, a: Assignment, jobs: Mapping[str, JobLike], held: set[str]) -> bool:
    """A job released ahead whose dependency names a job that went back to the queue
    (requeued) since: held again, not planned again yet, or planned again after this
    job's plan (``a``) was made. It would wait for that job's next run, wherever that
    runs. A dependency the owner added names such a job only by chance: it stays
    otherwise (the job is then held as one with a dependency of its own)."""
    for jid in dependency_ids(job.dependency):
        if jid in held:
            return True
        other = jobs.get(jid)
        if other is None or job_phase(other.state) != "pending":
            continue
        b = parse_admin_comment(other.admin_comment)
        if b is None:
            continue
        if b.restart < other.restart_count or (b.restart > 0 and b.issued > a.issued):
            return True
    return False


def gated(
    jobs: list[JobLike], by_id: Mapping[str, JobLike], held: set[str], now: float
) -> set[str]:
    """Of ``jobs``, those pending and not held that Slurm cannot start before this
    cycle's writes land: their begin time is ahead, or they wait (``after*``) for a job
    that is held (the planner releases none before its moves) or whose begin time is
    ahead. Only such a job may take a new record in place: Slurm starts any other at
    any moment, and an update that reaches a started job replaces the record of the
    slice it runs on (Slurm writes AdminComment and Comment to a running job; only a
    GRES record in the same update makes it refuse the whole update)."""
    out = set()
    for job in jobs:
        if job.held or job_phase(job.state) != "pending":
            continue
        if _begins_later(job, now):
            out.add(job.job_id)
            continue
        names = dependency_ids(job.dependency)
        blocked = [
            jid in held
            or (
                other is not None
                and job_phase(other.state) == "pending"
                and _begins_later(other, now)
            )
            for jid in names
            for other in [by_id.get(jid)]
        ]
        # "a,b": every one must be met, one blocked job suffices; "a?b": any one met
        if names and (all(blocked) if "?" in job.dependency else any(blocked)):
            out.add(job.job_id)
    return out
