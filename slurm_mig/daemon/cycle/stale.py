"""Stale node records: a job record a node still reports although its job is not
running there any more (Slurm shows the job finished, requeued since, running on
another node, or no longer at all). That happens when a job ends while its node's
slurmd is down: Slurm never runs its Epilog, and the instance stays. The Prolog of
any job planned over those slices would refuse it ("slices still in use"), so the
slices count as busy, not plannable, until the node's next report drops the record:
each such record is a `Busy` entry (``stale``) projected to hold its slices for
`STALE_HOLD` seconds past the release-ahead window (renewed every cycle), so that no
job is planned or released ahead onto them; the first cycle that sees it is an event
on its GPU (plans there are made again)."""

from __future__ import annotations

from collections.abc import Mapping

from ...geometry import Slot, get_model
from ...hostlist import expand_hostlist
from ...slurm.jobrecord import JobLike, job_phase
from .inputs import CycleInput, NodeRecord
from .slots import gang_slot

__all__ = [
    "STALE_GRACE",
    "STALE_HOLD",
    "STALE_PREFIX",
    "stale_event",
    "stale_id",
    "stale_job",
    "stale_records",
    "stale_why",
]

STALE_HOLD = 600.0  # seconds a stale record's slices are projected busy, from now
# seconds after a job's end during which its record is not stale yet: its Epilog's
# report (which drops the record) may still be on its way
STALE_GRACE = 30.0
STALE_PREFIX = "stale:"  # the busy entry of a stale record: stale:<job>@<node>:<gpu>


def stale_id(r: NodeRecord) -> str:
    """The id of a stale record's busy entry (never a Slurm job id)."""
    return f"{STALE_PREFIX}{r.job_id}@{r.node}:{r.gpu}"


def stale_job(sid: str) -> str:
    """The Slurm job id a stale record's busy entry (`stale_id`) is of."""
    return sid.removeprefix(STALE_PREFIX).split("@", 1)[0]


def _runs_on(job: JobLike, node: str) -> bool:
    """Whether ``job``'s allocation names ``node`` (unknown: assumed so)."""
    if not job.nodes:
        return True
    try:
        return node in expand_hostlist(job.nodes)
    except ValueError:
        return True


def stale_why(r: NodeRecord, job: JobLike | None, now: float) -> str | None:
    """Why record ``r`` is stale (its job is not running on its node), or None."""
    what = f"job {r.job_id}"
    if job is None:
        return f"Slurm no longer shows {what}"
    if r.restart < job.restart_count:
        return f"{what} was requeued since (the record is of run {r.restart}, Slurm's is {job.restart_count})"
    phase = job_phase(job.state)
    if phase == "done":
        ended = job.end_time or 0.0
        if now - ended < STALE_GRACE:
            return None  # its Epilog's report may still be on its way
        return f"Slurm shows {what} {job.state.split()[0] if job.state else 'ended'}"
    if phase == "active" and not _runs_on(job, r.node):
        return f"{what} runs on {job.nodes[:80]}, not on {r.node}"
    return None


def stale_event(
    r: NodeRecord, job: JobLike | None, now: float
) -> tuple[float, str, str | None, int | None]:
    """The event of a stale record on its GPU, at about when it went stale (its run's
    start or end, past the grace; never after ``now``): standing plans made before that
    on its GPU are made again, later ones already saw its slices busy."""
    since = r.ready
    if job is not None:
        since = max(since, (job.end_time or 0.0) + STALE_GRACE, job.start_time or 0.0)
    return (min(since, now), f"node {r.node} gpu {r.gpu} holds a stale record", r.node, r.gpu)


def _slot(r: NodeRecord, model: str) -> Slot:
    """The slot a record's instance holds on ``model`` (its placement's, when the
    planner does not use that profile there)."""
    got = gang_slot(model, r.profile, r.placement, r.tasks)  # a gang's: its region
    if got is not None:
        return got
    try:
        return Slot(r.placement, get_model(model).profile(r.profile).compute_slices * r.tasks)
    except Exception:  # a profile the model lacks: the placement's slices, at least
        return Slot(r.placement, r.placement.size)


def stale_records(
    snap: CycleInput, jobs: Mapping[str, JobLike], models: Mapping[tuple[str, int], str]
) -> list[tuple[NodeRecord, Slot, str]]:
    """The reported records on usable GPUs (``models``: (node, gpu) -> model) that are
    stale, with their slot and why, in node, GPU and placement order."""
    out = []
    for r in snap.node_records:
        model = models.get((r.node, r.gpu))
        if model is None:
            continue
        why = stale_why(r, jobs.get(r.job_id), snap.now)
        if why is not None:
            out.append((r, _slot(r, model), why))
    out.sort(key=lambda x: (x[0].node, x[0].gpu, x[0].placement.start, x[0].job_id))
    return out
