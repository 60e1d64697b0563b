"""Whether a job may run here as its assignment token says: the partition, the token's
MAC and binding, the assignment's possibility on this node's GPUs, its currency (the
GRES record) and the comment's hints. Pure decisions: no files, no devices.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import jobcomment as comments
from ..config import Config
from ..geometry import GeometryError, GpuModel, get_model
from ..slurm import jobrecord
from ..slurm.assignment import (
    Assignment,
    AssignmentError,
    OldTokenError,
    check_binding,
    open_token,
    valid_plan_id,
)
from .hookoutcome import Outcome
from .jobenv import ARRAY_TASK, JobEnv, digits
from .nodestate import Refusal

if TYPE_CHECKING:
    from ..hints import Hints

__all__ = [
    "check_assignment",
    "check_current",
    "hint_key",
    "impossible",
    "in_partition",
    "not_ours",
    "read_hints",
]


def in_partition(job: JobEnv, config: Config) -> bool:
    """True when the job runs in the partition whose jobs slurm-mig plans (the one rule,
    ``jobrecord.in_partition``, that the planner applies too)."""
    return bool(job.partition) and jobrecord.in_partition(job, config.partition)


def not_ours(job: JobEnv, config: Config) -> Outcome:
    out = Outcome()
    out.say(f"partition {job.partition or '(none)'} is not {config.partition}; nothing to do")
    return out


# -- the assignment ------------------------------------------------------------------


def check_assignment(
    job: JobEnv,
    key: bytes,
    models: tuple[str, ...],
    token_ttl: float,
    now: float,
    gres: bool = False,
) -> Assignment | Refusal:
    """The job's assignment if its token is genuine, current and possible on this node;
    else a refusal: requeue when the planner can fix it (missing, stale, superseded,
    other node), fail when the job cannot run as it is (forged, malformed, another job's,
    impossible, bad hint). The token's MAC is checked before its payload is read.
    ``gres``: the job's GRES (SLURM_JOB_GPUS) must be the assignment's record."""
    if job.problem:
        return Refusal(job.job_id, "fail", job.problem)
    token = comments.parse(job.comment).token
    if token is None:
        return Refusal(
            job.job_id,
            "requeue",
            "no assignment token (migplan=...) in the job comment: the slurm-mig planner "
            "has not released this job (was it released by hand?)",
        )
    try:
        a = open_token(token, key)
    except OldTokenError as exc:
        return Refusal(job.job_id, "requeue", str(exc))
    except AssignmentError as exc:
        return Refusal(job.job_id, "fail", str(exc))
    try:
        check_binding(
            a, job_id=job.job_id, restart=job.restart, node=job.node, now=now, max_age=token_ttl
        )
    except AssignmentError as exc:
        ours = a.job_id == job.job_id or (job.array_unknown and ARRAY_TASK.match(a.job_id))
        return Refusal(job.job_id, "requeue" if ours else "fail", str(exc))
    problem = impossible(a, models)
    if problem:
        return Refusal(job.job_id, "fail", problem)
    stale = check_current(a, job, models if gres else None)
    if stale:
        return Refusal(job.job_id, "requeue", stale)
    _, hint_problem = read_hints(job.comment)
    if hint_problem:
        return Refusal(job.job_id, "fail", hint_problem)
    return a


def check_current(a: Assignment, job: JobEnv, models: tuple[str, ...] | None) -> str | None:
    """Why the genuine, possible token's assignment ``a`` is not the planner's current
    plan for this run of the job (a replayed token of an earlier plan), or None.

    The Prolog cannot read the AdminComment; the planner's current plan reaches it as
    the job's GRES: the planner sets the job's TresPerNode to its instance's gres.conf
    record before it releases the job, and the job's owner cannot change it. So with
    ``models`` (the node's GPUs; None: GRES off) SLURM_JOB_GPUS must be the index of
    the record of ``a``'s GPU and placement."""
    if not valid_plan_id(a.plan):
        return f"the assignment names no valid plan id ({a.plan[:30]!r}); the planner re-plans it"
    if models is None:
        return None
    from ..slurm.gres import index_of, record_for

    if a.tasks > 1:
        return _gang_gres(a, job, models)
    record = record_for(models, a.gpu, a.placement)
    want = index_of(models, record)
    if job.gpus != str(want):
        got = f"SLURM_JOB_GPUS={job.gpus}" if job.gpus else "no GRES"
        return (
            f"the job has {got}, not the GRES record {record.type} (index {want}) of its "
            "assignment: a token of another plan, or a job released without the planner "
            "(is gres.conf from 'slurm-mig gres-conf'?); the planner plans it again"
        )
    return None


def _gang_gres(a: Assignment, job: JobEnv, models: tuple[str, ...]) -> str | None:
    """`check_current` for a job of several slices: SLURM_JOB_GPUS must be the indexes
    of its instances' GRES records (one per task, in any order), or one of them: Slurm
    22.05 to 26.05 build a Prolog's SLURM_JOB_GPUS record by record, each ``gpu``
    record's value replacing the one before (the job's device cgroup still opens all
    of them; the e2e suite checks both)."""
    from ..slurm.gres import index_of, record_for

    want = {index_of(models, record_for(models, a.gpu, p)) for p in a.instance_placements()}
    got = gres_indexes(job.gpus)
    if got is not None and (got == want or (len(got) == 1 and got <= want)):
        return None
    shown = ",".join(str(i) for i in sorted(i for i in want if i is not None))
    have = f"SLURM_JOB_GPUS={job.gpus}" if job.gpus else "no GRES"
    return (
        f"the job has {have}, not the GRES records (indexes {shown}) of its {a.tasks} "
        "instances: a token of another plan, or a job released without the planner (is "
        "gres.conf from 'slurm-mig gres-conf'?); the planner plans it again"
    )


def gres_indexes(text: str) -> set[int] | None:
    """The GRES indexes of SLURM_JOB_GPUS (``0,3,5``, ranges ``2-4`` too); None when it is
    not such a list, names an index twice or more than 64 of them."""
    out: set[int] = set()
    for item in text.split(",") if text else []:
        low, _, high = item.partition("-")
        if not digits(low, 4) or (high and not digits(high, 4)):
            return None
        first, last = int(low), int(high or low)
        if (
            last < first
            or last - first + len(out) >= 64
            or any(i in out for i in range(first, last + 1))
        ):
            return None
        out.update(range(first, last + 1))
    return out


def read_hints(comment: str) -> tuple[Hints | None, str | None]:
    """(the comment's hints, what is wrong with them); (None, None) without a ``mig:``
    word. The grammar is imported only then: its regular expressions cost milliseconds."""
    if "mig:" not in comment:
        return None, None
    from ..hints import HintError, parse_hints

    try:
        return parse_hints(comment), None
    except HintError as exc:
        return None, str(exc).removeprefix("slurm-mig: ")


def impossible(a: Assignment, models: tuple[str, ...]) -> str | None:
    """Why ``a`` cannot be carried out on a node with GPUs ``models``, or None."""
    if not 0 <= a.gpu < len(models):
        return (
            f"the assignment names gpu {a.gpu} of {a.node}, which has {len(models)} GPU(s) "
            "in the slurm-mig config (are the planner's and the node's configs the same?)"
        )
    try:
        model = get_model(models[a.gpu])
        if get_model(a.model).name != model.name:
            return (
                f"the assignment is for a {a.model} but gpu {a.gpu} of {a.node} is a "
                f"{model.name} in the slurm-mig config"
            )
        profile = model.profile(a.profile)
    except GeometryError as exc:
        return f"the assignment is impossible on gpu {a.gpu}: {exc}"
    if a.tasks > 1:
        return _gang_impossible(a, model)
    if a.placement not in profile.placements:
        legal = ", ".join(f"{p.start}:{p.size}" for p in profile.placements)
        return (
            f"the assignment places {profile.name} at {a.placement.start}:{a.placement.size} "
            f"on gpu {a.gpu}; {model.name} allows {legal}"
        )
    return None


def _gang_impossible(a: Assignment, model: GpuModel) -> str | None:
    """Why the job of several slices ``a`` cannot run on a GPU ``model``, or None: its
    region must be a legal placement that holds its instances, and a gang never
    inherits nor keeps instances (`Assignment.reuse_from`, ``keep_for``)."""
    if a.reuse_from or a.keep_for:
        return (
            f"the assignment of {a.tasks} instances of {a.profile} names an instance to "
            f"{'inherit' if a.reuse_from else 'keep'}; a job of several slices never "
            "reuses nor keeps instances (a planner bug: report it)"
        )
    if not any(a.placement in p.placements for p in model.all_profiles):
        return (
            f"the assignment's region {a.placement.start}:{a.placement.size} on gpu {a.gpu} "
            f"is no placement of {model.name}"
        )
    try:
        a.instance_placements()
    except AssignmentError as exc:
        return str(exc)
    return None


def hint_key(comment: str) -> str | None:
    """The job kind of the comment's ``mig:key=...`` hint, None without a valid one."""
    hints, _ = read_hints(comment)
    return hints.key if hints else None
