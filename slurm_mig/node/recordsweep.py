"""Stale job records (issue 39): the record of a job that no longer runs on the node.

A job that ends while its node's slurmd is down (a crash, an OOM kill, a network cut)
never gets its Epilog: its job record and MIG instance would stay, and every job planned
over those slices would be refused. A record is stale when its job is not running here
any more. The evidence:

- the node itself (`local_jobs`): a job runs here while a process of it does: one in its
  cgroup (``/job_<id>/`` in ``/proc/<pid>/cgroup``: task/cgroup and proctrack/cgroup,
  cgroup v1 and v2) or a child of its slurmstepd (titled ``slurmstepd: [<id>.<step>]``,
  with or without cgroups; slurmstepd and its tasks outlive slurmd). A job with such a
  process is never stale: a node cut off from the controller may still run a job Slurm
  has requeued. A slurmstepd whose tasks have ended is not such a process: it lingers
  until slurmd takes the step's completion.
- slurmctld (`hookio.job_states`, one squeue call): a final state, a pending one
  (requeued: it runs nowhere), other nodes, a later restart than the record's, or a job
  Slurm no longer knows (it ended over MinJobAge ago). A job Slurm cannot be asked about
  is not stale: its record stays and its slices stay refused, as before.
- before slurmd starts (``boot``): no Prolog can be under way and no job can have
  started since, so a record without a process on the node is stale; Slurm is not asked.

Used by the Prolog (only for live records in the way of its placement, under that GPU's
lock), the detached reclaim and ``slurm-mig node-sweep``. Standard library only.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from ..config import Config
from ..devices.base import DeviceError, MigBackend
from ..hostlist import HostlistError, expand_hostlist
from .hookio import SlurmJob
from .hookoutcome import Outcome, describe_item
from .jobenv import JobEnv, digits
from .nodestate import JobRecord, LockBusyError, NodeState
from .reclaim import destroy_all

__all__ = [
    "Asker",
    "clear_in_way",
    "judge",
    "local_jobs",
    "recorded_job",
    "stale_why",
    "sweep",
]

PROC = Path("/proc")  # where `local_jobs` looks (the tests point it elsewhere)
FINAL_STATES = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "REVOKED",
        "TIMEOUT",
    }
)
WAITING_STATES = frozenset(
    {"PENDING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RESV_DEL_HOLD", "SPECIAL_EXIT"}
)
_JOB_CGROUP = re.compile(r"/job_([0-9]{1,12})(?:/|$)", re.MULTILINE)
_STEPD = re.compile(r"^slurmstepd: \[([0-9]{1,12})[.+\]]")

# job ids -> what slurmctld says of each (None: it forgot the job), or why it cannot say
Asker = Callable[[list[str]], "dict[str, SlurmJob | None] | str"]


def local_jobs(proc: Path | None = None) -> set[str]:
    """The Slurm job ids (numbers) with a process on this host: one in the job's cgroup
    (a slurmstepd is not one: cgroup v2 keeps it there) or a child of the job's
    slurmstepd. A slurmstepd alone is not a running job: once its tasks end it waits
    for slurmd to take its completion, for ever while slurmd is down. One pass over
    ``/proc``; processes that vanish are skipped."""
    proc = PROC if proc is None else proc
    found: set[str] = set()
    stepds: dict[str, str] = {}  # a slurmstepd's pid -> its job
    parents: set[str] = set()
    try:
        pids = [p for p in os.listdir(proc) if p.isdigit()]
    except OSError:
        return found
    for pid in pids:
        match = _STEPD.match(_read(proc / pid / "cmdline", 128).replace("\0", " "))
        if match:
            stepds[pid] = match.group(1)
            continue
        found.update(_JOB_CGROUP.findall(_read(proc / pid / "cgroup", 4096)))
        parent = _ppid(_read(proc / pid / "stat", 512))
        if parent:
            parents.add(parent)
    found.update(job for pid, job in stepds.items() if pid in parents)
    return found


def _ppid(stat: str) -> str | None:
    """The parent pid in a ``/proc/<pid>/stat`` line (after the title's last ``)``)."""
    fields = stat[stat.rfind(")") + 1 :].split()
    return fields[1] if len(fields) > 1 and fields[1].isdigit() else None


def _read(path: Path, most: int) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read(most)
    except OSError:
        return ""


def _local_id(rec: JobRecord) -> str | None:
    """The number the record's job's processes are known by; None for an array task
    recorded before records named it (`JobRecord.slurm_id`)."""
    if rec.slurm_id and digits(rec.slurm_id, 12):
        return rec.slurm_id
    return rec.job_id if digits(rec.job_id, 12) else None


def stale_why(rec: JobRecord, view: SlurmJob | None, node: str) -> str | None:
    """Why Slurm's ``view`` of the record's job says it no longer runs on ``node`` in
    the record's run, or None (it may: a state not known here counts as running)."""
    job = f"job {rec.job_id}"
    if view is None:
        return f"Slurm no longer knows {job} (it ended over MinJobAge ago)"
    if view.restart > rec.restart:
        return f"Slurm is at run {view.restart} of {job}, the record is of run {rec.restart}"
    if view.state in FINAL_STATES:
        return f"{job} is {view.state} in Slurm"
    if view.state in WAITING_STATES:
        return f"{job} is {view.state} in Slurm (it runs nowhere)"
    try:
        nodes = expand_hostlist(view.nodes) if view.nodes else []
    except HostlistError:
        return None
    if nodes and node not in nodes:
        return f"{job} runs on {view.nodes} in Slurm, not on {node}"
    return None


def judge(
    records: list[JobRecord], node: str, ask: Asker | None, local: set[str], boot: bool
) -> tuple[list[tuple[JobRecord, str]], str | None]:
    """(the stale ``records``, each with why; why some could not be judged, or None).
    A record whose job has a process here (``local``) is live; the others are asked of
    Slurm in one call, or, ``boot`` (slurmd not started yet), stale without asking."""
    absent = [r for r in records if _local_id(r) not in local]
    if not absent:
        return [], None
    if boot:
        unknown = [r.job_id for r in absent if _local_id(r) is None]
        stale = [
            (r, f"no process of job {r.job_id} runs on {node} and slurmd has not started")
            for r in absent
            if _local_id(r) is not None
        ]
        why = f"cannot tell whether jobs {', '.join(unknown)} run here" if unknown else None
        return stale, why
    if ask is None:
        return [], "Slurm cannot be asked whether their jobs still run here"
    views = ask([r.job_id for r in absent])
    if isinstance(views, str):
        return [], f"cannot ask Slurm whether their jobs still run here: {views}"
    judged = ((r, stale_why(r, views[r.job_id], node)) for r in absent if r.job_id in views)
    return [(r, why) for r, why in judged if why is not None], None


def recorded_job(job: JobEnv, config: Config) -> JobEnv | None:
    """The Epilog's ``job`` as a job of the partition when Slurm did not name its
    partition (26.05's Epilog of a job killed on a node back from a failure) and this
    node holds a record of it (only the Prolog of a partition job writes one), under
    the record's job id (an array task's); None otherwise."""
    if job.partition or not job.node or not digits(job.job_id, 12):
        return None
    state = NodeState(config.run_dir_for(job.node))
    try:
        found = [r for r in state.jobs() if job.job_id in (r.slurm_id or r.job_id, r.job_id)]
    except (OSError, ValueError):
        return None
    if not found:
        return None
    rec = found[0]
    own = job.job_id if rec.job_id != job.job_id else ""
    return replace(job, job_id=rec.job_id, slurm_id=own, partition=config.partition)


def _drop(
    state: NodeState, backend: MigBackend, rec: JobRecord, why: str, by: str, out: Outcome
) -> None:
    """Destroy a stale record's instance like an orphan's, then drop its records (under
    its GPU's lock): every instance of a job of several slices; DeviceError passes on
    with the record kept (once each instance was tried)."""
    gone = destroy_all(backend, rec.gpu, rec.uuids, by, out, rec.profile) == rec.tasks
    state.remove_job(rec.job_id)
    state.remove_task(rec.slurm_id or rec.job_id)
    done = "it was gone already" if gone else "destroyed it"
    out.warn(
        f"stale record of {describe_item(rec)} (job {rec.job_id} run {rec.restart}): {why}; {done}"
    )


def clear_in_way(
    blocking: list[JobRecord],
    node: str,
    ask: Asker | None,
    state: NodeState,
    backend: MigBackend,
    by: str,
    out: Outcome,
) -> JobRecord | None:
    """The Prolog's check of the live records in the way of its placement (under the
    GPU's lock): the stale ones are dropped with their instances; the first that still
    holds its slices, or None. At most one squeue call."""
    stale, unsure = judge(blocking, node, ask, local_jobs(), boot=False)
    dropped = set()
    for rec, why in stale:
        _drop(state, backend, rec, why, by, out)
        dropped.add(rec.job_id)
    held = [r for r in blocking if r.job_id not in dropped]
    if held and unsure:
        out.say(f"jobs in the way kept: {unsure}")
    return held[0] if held else None


def sweep(
    state: NodeState,
    backend: MigBackend,
    node: str,
    out: Outcome,
    *,
    boot: bool,
    ask: Asker | None,
    wait: float,
) -> tuple[int, DeviceError | None]:
    """Drop every stale record of the node, one GPU's lock at a time (``wait`` seconds
    each; a busy GPU is left to the next sweep), each record read again under it: (how
    many were dropped, the first node fault or None)."""
    records = state.jobs()
    stale, unsure = judge(records, node, ask, local_jobs(), boot) if records else ([], None)
    if unsure:
        out.say(f"records kept: {unsure}")
    dropped = 0
    for gpu in sorted({r.gpu for r, _ in stale}):
        try:
            with state.gpu_lock(gpu, wait):
                for rec, why in stale:
                    if rec.gpu != gpu or state.job(rec.job_id) != rec:
                        continue  # a hook changed it meanwhile
                    try:
                        _drop(state, backend, rec, why, "sweep", out)
                    except DeviceError as exc:
                        if exc.node_fault:
                            return dropped, exc
                        out.warn(f"stale record of job {rec.job_id} kept: {exc}")
                        continue
                    dropped += 1
        except LockBusyError:
            out.say(f"gpu {gpu} is busy: its stale records are left to the next sweep")
    return dropped, None
