"""The Slurm Prolog, TaskProlog and Epilog: create, hand out and destroy MIG instances.

The hooks decide from their environment and node-local records only (no Slurm calls on
the normal path): the Prolog (root) checks the job's signed assignment token, creates or
adopts its instance under its GPU's lock and writes a record, and a copy only the job's
user can read; the TaskProlog (that user) turns the copy into
``export CUDA_VISIBLE_DEVICES=<MIG uuid>``; the Epilog (root) destroys the instance or
keeps it for the next job. With ``[slurm] gres = "on"`` the Prolog also checks
the job's GRES record (SLURM_JOB_GPUS, set by the planner, see ``gres``) against the
token and the created instance's GPU-instance id against that record. An Epilog that
keeps an instance starts a detached `reclaim_main` that destroys it once its wait is
over, should no later hook come to the node. The only Slurm calls: draining the node on
a device fault, and ``scontrol requeuehold`` from the TaskProlog, or from a Prolog whose
run directory is out of room (it undoes what it created: a full disk is not the node's
fault, and a job's owner must not be able to drain a node).

`prolog`, `task_prolog` and `epilog` decide and return an `Outcome` (exit status, lines
to print, log lines, a drain reason, a requeue request); the ``*_main`` functions read the
environment and the config, run them and carry the outcome out. This module is on the job
start path: only the standard library, ``geometry``, ``config``, the assignment, the node
state and the device backends are imported (no numpy, no planner).
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from ..config import Config, ConfigError, load_config
from ..devices.base import DeviceError, Instance, InstanceInUse, InstanceNotFound, MigBackend
from ..devices.migcaps import gi_id_for, minor
from ..geometry import GeometryError, Placement, get_model
from . import comment as comments
from .assignment import (
    Assignment,
    AssignmentError,
    OldTokenError,
    check_binding,
    load_key,
    open_token,
    valid_plan_id,
)
from .nodestate import (
    JobRecord,
    KeptInstance,
    LockBusyError,
    NodeState,
    NodeStateError,
    Refusal,
    out_of_room,
)

if TYPE_CHECKING:
    from .hints import Hints

# syslog priorities (the numbers of <syslog.h>), kept here so deciding needs no syslog.
ERR, WARNING, INFO = 3, 4, 6
HOOKS = ("prolog", "epilog", "taskprolog")
MAX_COMMENT = 4096  # Slurm caps a Comment at 1024; more is not Slurm's doing
_JOB_ID = re.compile(r"^[0-9A-Za-z_-]{1,64}$")
_ARRAY_TASK = re.compile(r"^[0-9]{1,10}_[0-9]{1,10}$")  # <array id>_<task>
_GPU_CHARS = frozenset("0123456789,-")  # SLURM_JOB_GPUS: GRES indices
_EXTRA_PATH = "/usr/bin:/usr/local/bin:/bin:/usr/sbin:/sbin"

Clock = Callable[[], float]
_Item = TypeVar("_Item", JobRecord, Refusal)


class HookInputError(ValueError):
    """The hook's environment lacks what Slurm always sets (not run by Slurm?)."""


@dataclass(frozen=True)
class JobEnv:
    """What a hook knows of its job, from the environment Slurm gives it."""

    job_id: str
    restart: int
    node: str
    partition: str
    comment: str
    problem: str | None = None  # a malformed variable: the prolog refuses the job
    uid: int | None = None  # SLURM_JOB_UID: the job's user, who may read its task record
    gpus: str = ""  # SLURM_JOB_GPUS: the GRES Slurm gave the job (see check_current)
    # the array task SLURM_JOB_ID is could not be asked of slurmctld (`as_array_task`)
    array_unknown: bool = False
    # SLURM_JOB_ID where job_id is an array task's <array id>_<task> (`as_array_task`)
    slurm_id: str = ""

    @property
    def own_id(self) -> str:
        """SLURM_JOB_ID: what the job itself knows it by, which names the files it reads
        and writes on the node (its task record, mig-run's need file); ``job_id`` is the
        planner's (an array task's ``<array id>_<task>``: its token, records, reports).
        The TaskProlog's environment names no array task (a task submitted from an array
        task inherits the variables): it knows its job by this number alone."""
        return self.slurm_id or self.job_id

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> JobEnv:
        """Read SLURM_JOB_ID, SLURMD_NODENAME, SLURM_JOB_PARTITION, SLURM_JOB_COMMENT,
        SLURM_JOB_UID, SLURM_JOB_GPUS and the restart count (SLURM_JOB_RESTART_COUNT, or
        SLURM_RESTART_COUNT in a task); every value's length and form is bounded."""
        job_id = env.get("SLURM_JOB_ID", "").strip()
        if not job_id:
            raise HookInputError(
                "no SLURM_JOB_ID in the environment; install this as Slurm's Prolog, "
                "Epilog or TaskProlog (slurm.conf), it is not meant to be run by hand"
            )
        if not _JOB_ID.match(job_id):
            raise HookInputError(f"SLURM_JOB_ID {job_id!r} is not a Slurm job id")
        node = env.get("SLURMD_NODENAME", "").strip()
        if not node:
            raise HookInputError("no SLURMD_NODENAME in the environment (is slurmd running it?)")
        if len(node) > 255:
            raise HookInputError(f"SLURMD_NODENAME {node[:20]!r}... is not a node name")
        problem = None
        raw = env.get("SLURM_JOB_RESTART_COUNT", env.get("SLURM_RESTART_COUNT", "")).strip()
        restart = int(raw) if _digits(raw, 9) else 0
        if raw and not _digits(raw, 9):
            problem = f"the restart count {raw[:20]!r} from Slurm is not a whole number >= 0"
        comment = env.get("SLURM_JOB_COMMENT", "")
        if len(comment) > MAX_COMMENT:
            problem = problem or (
                f"the job comment has {len(comment)} characters; Slurm allows 1024"
            )
            comment = ""
        raw_uid = env.get("SLURM_JOB_UID", "").strip()
        gpus = env.get("SLURM_JOB_GPUS", "").strip()
        if len(gpus) > 256 or not _GPU_CHARS.issuperset(gpus):
            problem = problem or f"SLURM_JOB_GPUS {gpus[:20]!r} from Slurm is not a GRES index list"
            gpus = ""
        return cls(
            job_id=job_id,
            restart=restart,
            node=node,
            partition=env.get("SLURM_JOB_PARTITION", "").strip()[:255],
            comment=comment,
            problem=problem,
            uid=int(raw_uid) if _digits(raw_uid, 10) and int(raw_uid) < 2**32 - 1 else None,
            gpus=gpus,
        )


def _digits(text: str, most: int) -> bool:
    """1 to ``most`` ASCII digits."""
    return 0 < len(text) <= most and text.isascii() and text.isdigit()


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


def _describe(item: Instance | JobRecord | KeptInstance) -> str:
    return describe(item.profile, item.placement, item.gpu, item.uuid)


def in_partition(job: JobEnv, config: Config) -> bool:
    """True when the job runs in the partition whose jobs slurm-mig plans."""
    return job.partition == config.partition


def _not_ours(job: JobEnv, config: Config) -> Outcome:
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
        ours = a.job_id == job.job_id or (job.array_unknown and _ARRAY_TASK.match(a.job_id))
        return Refusal(job.job_id, "requeue" if ours else "fail", str(exc))
    problem = impossible(a, models)
    if problem:
        return Refusal(job.job_id, "fail", problem)
    stale = check_current(a, job, models if gres else None)
    if stale:
        return Refusal(job.job_id, "requeue", stale)
    _, hint_problem = _hints(job.comment)
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
    from .gres import index_of, record_for

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


def _hints(comment: str) -> tuple[Hints | None, str | None]:
    """(the comment's hints, what is wrong with them); (None, None) without a ``mig:``
    word. The grammar is imported only then: its regular expressions cost milliseconds."""
    if "mig:" not in comment:
        return None, None
    from .hints import HintError, parse_hints

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
    if a.placement not in profile.placements:
        legal = ", ".join(f"{p.start}:{p.size}" for p in profile.placements)
        return (
            f"the assignment places {profile.name} at {a.placement.start}:{a.placement.size} "
            f"on gpu {a.gpu}; {model.name} allows {legal}"
        )
    return None


# -- Prolog ----------------------------------------------------------------------------


def prolog(job: JobEnv, config: Config, backend: MigBackend, clock: Clock = time.time) -> Outcome:
    """Prepare the job's planned MIG instance (create, adopt a kept one, or reuse the one
    of an earlier try), or write why not; exit 1 only on a node fault. Only the lock of
    the assignment's GPU is held while deciding and creating."""
    if not in_partition(job, config):
        return _not_ours(job, config)
    out = Outcome()
    for retry in (True, False):
        try:
            _prolog_locked(job, config, backend, clock, out)
        except NodeStateError as exc:
            if not out_of_room(exc):
                out.fault(str(exc))
            elif not (retry and _trimmed(config.run_dir_for(job.node), out)):
                _requeue_out_of_room(str(exc), out)
            else:
                continue  # what it prepared is undone: once more, with room
        except (ConfigError, AssignmentError) as exc:
            out.fault(str(exc))
        return out
    return out


def _prolog_locked(
    job: JobEnv, config: Config, backend: MigBackend, clock: Clock, out: Outcome
) -> None:
    """The prolog under the version gate; a busy gate requeues the job."""
    models = config.gpu_models(job.node)
    key = load_key(config.key_file)
    state = NodeState(config.run_dir_for(job.node), warn=out.warn)
    try:
        with state.lock(config.lock_timeout, shared=True):
            _prolog_gated(job, config, models, key, backend, state, clock, out)
    except LockBusyError as exc:
        # Per-job files only, no lock needed; the planner plans the job again.
        _refuse(state, Refusal(job.job_id, "requeue", str(exc)), job, out)


def _trimmed(run_dir: Path, out: Outcome) -> bool:
    """Truncate the oversized memory-need files of jobs on the node (a user filling the
    run directory's disk through theirs); True when there were any."""
    from .reports import trim_need_files  # stdlib only

    count = trim_need_files(run_dir)
    if count:
        out.warn(f"the run directory was full: truncated {count} oversized memory-need file(s)")
    return count > 0


def _requeue_out_of_room(text: str, out: Outcome) -> None:
    """The run directory's disk is full (or over quota, or failing) and what this prolog
    created is undone: requeue and hold the job for the planner, never drain the node."""
    out.requeue = True
    out.started = False
    out.event("refusal", "requeue")
    out.warn(f"requeued and held for the planner (nothing prepared is left behind): {text}")


def _prolog_gated(
    job: JobEnv,
    config: Config,
    models: tuple[str, ...],
    key: bytes,
    backend: MigBackend,
    state: NodeState,
    clock: Clock,
    out: Outcome,
) -> None:
    """The prolog under the version gate: the job's own records, the assignment, then the
    assignment's GPU under its lock, then expired kept instances of any GPU."""
    now = clock()
    try:
        if _reused(job, backend, state, now, out):
            return
        verdict = check_assignment(
            job, key, models, config.token_ttl, now, gres=config.gres == "on"
        )
        if isinstance(verdict, Refusal):
            _refuse(state, verdict, job, out)
            return
        with state.gpu_lock(verdict.gpu, config.lock_timeout):
            placed = _place(verdict, job, state, backend, clock, out, gres=config.gres == "on")
            if isinstance(placed, JobRecord):
                placed = _energy_start(placed, models, state, backend, clock(), out)
                _undo_unless(lambda: state.put_job(placed), placed, state, backend, out)
                task = _own(placed, job)
                _undo_unless(lambda: state.put_task(task, job.uid), placed, state, backend, out)
    except DeviceError as exc:
        if exc.node_fault:
            out.fault(str(exc))
        else:
            refusal = Refusal(job.job_id, "requeue", f"cannot prepare the instance: {exc}")
            _refuse(state, refusal, job, out)
        return
    if isinstance(placed, Refusal):
        _refuse(state, placed, job, out)
        return
    state.remove_refusal(job.job_id)
    out.started = True
    if job.restart > 0:  # mig-run's forecast and OOM restarts put mem= into the hint
        hints, _ = _hints(job.comment)
        out.event("restart", "memory_hint" if hints is not None and hints.mem else "other")
    fault = _reclaim_expired(state, backend, clock(), job.job_id, out)
    if fault is not None:
        out.warn(f"could not reclaim an expired kept instance (the epilog will retry): {fault}")


def _undo_unless(
    write: Callable[[], None], rec: JobRecord, state: NodeState, backend: MigBackend, out: Outcome
) -> None:
    """``write`` a record of the instance this prolog prepared; when it cannot be written,
    destroy the instance and drop its job record (removing needs no room) before passing
    the error on, so no instance is left without a record. Under the instance's GPU
    lock."""
    try:
        write()
    except NodeStateError as exc:
        gone = not _destroy(backend, rec.gpu, rec.uuid, rec.job_id, out, rec.profile)
        state.remove_job(rec.job_id)
        done = "it was gone already" if gone else "destroyed it"
        out.warn(f"cannot keep the record of {_describe(rec)}: {exc}; {done}")
        raise


def _reused(job: JobEnv, backend: MigBackend, state: NodeState, now: float, out: Outcome) -> bool:
    """True when an earlier try of this prolog prepared the job's instance (reused as it
    is). An instance of an earlier run of the job becomes a kept one, for this run to
    adopt or the next hook to reclaim. The job's own records only: no GPU lock (no other
    hook changes a live job's record; the kept record is written before the job record
    is removed, so the instance stays accounted for)."""
    rec = state.job(job.job_id)
    if rec is None:
        return False
    if rec.restart == job.restart:
        if any(i.uuid == rec.uuid for i in backend.instances(rec.gpu)):
            state.remove_refusal(job.job_id)
            state.put_task(_own(rec, job), job.uid)
            out.say(f"reusing {_describe(rec)}, prepared by an earlier try of this prolog")
            return True
        out.warn(f"its record names {_describe(rec)}, which is gone; preparing it again")
    else:
        state.put_kept(_kept(rec, for_job=job.job_id, until=now))
        out.say(f"run {rec.restart} of this job left {_describe(rec)}; reclaiming it")
    state.remove_job(job.job_id)
    return False


def _own(item: _Item, job: JobEnv) -> _Item:
    """``item`` for the job's task record, named by the job's own number (`own_id`)."""
    return item if item.job_id == job.own_id else replace(item, job_id=job.own_id)


def _refuse(state: NodeState, refusal: Refusal, job: JobEnv, out: Outcome) -> None:
    state.put_refusal(refusal)
    state.put_task(_own(refusal, job), job.uid)
    out.event("refusal", refusal.action)
    out.warn(f"refused (action {refusal.action}): {refusal.reason}")


def _kept(rec: JobRecord, for_job: str | None, until: float) -> KeptInstance:
    return KeptInstance(
        rec.gpu, rec.profile, rec.placement, rec.uuid, for_job, until, created=rec.created
    )


def _place(
    a: Assignment,
    job: JobEnv,
    state: NodeState,
    backend: MigBackend,
    clock: Clock,
    out: Outcome,
    gres: bool = False,
) -> JobRecord | Refusal:
    """Adopt a kept instance identical to the assignment, or clear the placement of kept
    and orphan instances and create it; refuse (requeue) when a live job is in the way.
    ``gres``: the instance must have the GPU-instance id of the job's GRES record (its
    capability nodes are the ones the device cgroup opens), else it is destroyed and
    the job requeued."""
    start = clock()
    live = {r.uuid: r for r in state.jobs() if r.job_id != job.job_id}
    kept = {k.uuid: k for k in state.kept()}
    instances = backend.instances(a.gpu)
    want_gi = gi_id_for(get_model(a.model), a.placement) if gres else None
    adopt = next(
        (
            i
            for i in instances
            if i.uuid in kept
            and i.profile == a.profile
            and i.placement == a.placement
            and want_gi in (None, i.gi_id)  # else cleared below like any instance in the way
        ),
        None,
    )
    in_way = [i for i in instances if i.placement.overlaps(a.placement) and i != adopt]
    for i in in_way:
        if i.uuid in live:
            return Refusal(
                job.job_id,
                "requeue",
                f"slices still in use by job {live[i.uuid].job_id}: {_describe(i)} overlaps "
                f"the planned {describe(a.profile, a.placement, a.gpu)}",
            )
    for i in in_way:
        k = kept.get(i.uuid)
        what = f"instance {_whose(k)}" if k else "orphan instance (no job record)"
        _destroy(backend, i.gpu, i.uuid, job.job_id, out, i.profile)
        if k:
            state.remove_kept(i.uuid)
        out.say(f"destroyed {what} {_describe(i)}: it overlaps the planned placement")
    common = {
        "job_id": job.job_id,
        "restart": job.restart,
        "gpu": a.gpu,
        "profile": a.profile,
        "placement": a.placement,
        "keep_for": a.keep_for,
    }
    if adopt is not None:
        k = kept[adopt.uuid]
        state.remove_kept(adopt.uuid)
        ready = clock()
        out.event("adopt", a.profile)
        out.say(f"adopted {_describe(adopt)}, {_whose(k)}; {_plan(a)}")
        return JobRecord(
            uuid=adopt.uuid, created=k.created or start, ready=ready, reused=True, **common
        )
    began = time.monotonic()
    inst = backend.create(a.gpu, a.profile, a.placement, job_id=job.job_id)
    out.event("create", a.profile, time.monotonic() - began)
    if want_gi is not None and inst.gi_id != want_gi:
        _destroy(backend, inst.gpu, inst.uuid, job.job_id)
        return Refusal(
            job.job_id,
            "requeue",
            f"the driver gave {_describe(inst)} GPU-instance id {inst.gi_id}, but the job's "
            f"GRES record opens the capability nodes of id {want_gi}; destroyed it (report "
            "this GPU's numbering to the slurm-mig developers)",
        )
    ready = clock()
    out.say(f"created {_describe(inst)} in {ready - start:.2f} s; {_plan(a)}")
    return JobRecord(uuid=inst.uuid, created=ready, ready=ready, reused=False, **common)


# -- the energy counter (`energysplit`) -------------------------------------------------


def _read_energy(backend: MigBackend, gpu: int, out: Outcome) -> int | None:
    """GPU ``gpu``'s energy counter in mJ, None without one; never fails the hook."""
    from .energysplit import reading

    try:
        return reading(backend.energy_mj(gpu))
    except DeviceError as exc:
        out.warn(f"energy counter of gpu {gpu} not read (its runs get modelled energy): {exc}")
        return None


def _busy(state: NodeState, models: tuple[str, ...], gpu: int, but: str = "") -> dict[str, int]:
    """Run key -> compute slices of the runs on GPU ``gpu`` (the job records), ``but``
    that job's."""
    from .energysplit import run_key

    out = {}
    for r in state.jobs():
        if r.gpu == gpu and r.job_id != but:
            try:
                out[run_key(r.job_id, r.restart)] = (
                    get_model(models[gpu]).profile(r.profile).compute_slices
                )
            except (GeometryError, IndexError):
                continue
    return out


def _energy_start(
    rec: JobRecord,
    models: tuple[str, ...],
    state: NodeState,
    backend: MigBackend,
    now: float,
    out: Outcome,
) -> JobRecord:
    """The Prolog, under the GPU's lock: read the counter, give the energy since the
    last reading to the GPU's other runs and start this run's share (`energysplit`);
    ``rec`` with the reading, or as it was where there is no counter."""
    from ..power import max_watts
    from . import energysplit as es

    now_mj = _read_energy(backend, rec.gpu, out)
    if now_mj is None or not 0 <= rec.gpu < len(models):
        return rec
    busy = _busy(state, models, rec.gpu, but=rec.job_id)
    watts = max_watts(models[rec.gpu])
    ledger, problem = es.advance(state.energy_ledger(rec.gpu), now_mj, now, busy, watts)
    if problem is not None:
        out.warn(f"gpu {rec.gpu}: {problem}; its runs so far get modelled energy")
    try:
        state.put_energy_ledger(rec.gpu, es.start(ledger, es.run_key(rec.job_id, rec.restart)))
    except NodeStateError as exc:
        out.warn(f"energy ledger of gpu {rec.gpu} not written (modelled energy): {exc}")
        return rec
    return replace(rec, energy_mj=now_mj)


def _energy_end(
    rec: JobRecord,
    models: tuple[str, ...],
    state: NodeState,
    backend: MigBackend,
    end: float,
    out: Outcome,
) -> float | None:
    """The Epilog, under the GPU's lock, before the instance goes: read the counter and
    take the run's share of the GPU's energy (`energysplit`); its measured joules, or
    None (no counter, or a reading that is no energy: warned)."""
    from ..power import max_watts
    from . import energysplit as es

    now_mj = _read_energy(backend, rec.gpu, out)
    if now_mj is None or not 0 <= rec.gpu < len(models):
        return None
    watts = max_watts(models[rec.gpu])
    busy = _busy(state, models, rec.gpu)
    ledger, problem = es.advance(state.energy_ledger(rec.gpu), now_mj, end, busy, watts)
    ledger, accrued = es.finish(ledger, es.run_key(rec.job_id, rec.restart))
    try:
        state.put_energy_ledger(rec.gpu, ledger)
    except NodeStateError as exc:
        out.warn(f"energy ledger of gpu {rec.gpu} not written: {exc}")
    joules, why = es.measured_joules(
        accrued, rec.energy_mj, now_mj, max(0.0, end - rec.ready), watts
    )
    why = why or problem
    if joules is None and why is not None:
        out.warn(f"gpu {rec.gpu}: {why}; the run gets modelled energy only")
    return joules


def _whose(k: KeptInstance) -> str:
    return f"kept for job {k.for_job}" if k.for_job else "kept after a failed destroy"


def _plan(a: Assignment) -> str:
    text = f"planned {a.planned_seconds:.0f} s (batch {a.batch}, order {a.order})"
    return f"{text}, kept afterwards for job {a.keep_for}" if a.keep_for else text


def _destroy(
    backend: MigBackend,
    gpu: int,
    uuid: str,
    job_id: str,
    out: Outcome | None = None,
    profile: str = "",
) -> bool:
    """Destroy an instance; False when it was gone already."""
    start = time.monotonic()
    try:
        backend.destroy(gpu, uuid, job_id=job_id)
    except InstanceNotFound:
        return False
    if out is not None:
        out.event("destroy", profile, time.monotonic() - start)
    return True


def _moved_on(state: NodeState) -> set[str]:
    """Jobs that have started or finished on this node: an instance kept for one of them
    will never be adopted (a re-plan sent it elsewhere), so it is reclaimed at once."""
    return {r.job_id for r in state.jobs()} | state.finished_jobs()


def _reclaim_expired(
    state: NodeState, backend: MigBackend, now: float, job_id: str, out: Outcome, wait: float = 0.0
) -> DeviceError | None:
    """Destroy kept instances whose wait is over or whose job has moved on, GPU by GPU in
    index order, holding one GPU's lock at a time; a GPU whose lock is not free within
    ``wait`` seconds (0: busy now) is left to the hook that holds it, or the next. The
    first node fault is returned. The runtime log is read only while an instance waits."""
    kept = state.kept()
    waiting = any(k.until > now and k.for_job for k in kept)
    moved_on = _moved_on(state) if waiting else set()
    for gpu in sorted({k.gpu for k in kept if _expired(k, now, moved_on)}):
        try:
            with state.gpu_lock(gpu, wait):
                fault = _reclaim_gpu(state, backend, gpu, now, moved_on, job_id, out)
        except LockBusyError:
            out.say(f"gpu {gpu} is busy: its expired kept instances are left to the next hook")
            continue
        if fault is not None:
            return fault
    return None


def _expired(k: KeptInstance, now: float, moved_on: set[str]) -> bool:
    """True when the wait of ``k`` is over or its job has moved on."""
    return k.until <= now or k.for_job in moved_on


def _reclaim_gpu(
    state: NodeState,
    backend: MigBackend,
    gpu: int,
    now: float,
    moved_on: set[str],
    job_id: str,
    out: Outcome,
) -> DeviceError | None:
    """`_reclaim_expired` for one GPU, under its lock: its kept records are read again
    (a prolog may have adopted one meanwhile)."""
    for k in state.kept():
        if k.gpu != gpu or not _expired(k, now, moved_on):
            continue
        try:
            gone = not _destroy(backend, k.gpu, k.uuid, job_id, out, k.profile)
        except DeviceError as exc:
            if exc.node_fault:
                return exc
            out.warn(f"dropping the kept record of {_describe(k)}: {exc}")
            state.remove_kept(k.uuid)
            continue
        state.remove_kept(k.uuid)
        done = "was gone already" if gone else "destroyed"
        out.say(f"reclaimed {_describe(k)}, {_whose(k)} until its wait ran out: {done}")
    return None


# -- TaskProlog ------------------------------------------------------------------------

NO_GPU = "export CUDA_VISIBLE_DEVICES="


def task_prolog(job: JobEnv, config: Config) -> Outcome:
    """``export CUDA_VISIBLE_DEVICES=<uuid>`` from the job's record; for a refused job
    print the reason, ask for a requeue (action requeue) and exit 1."""
    if not in_partition(job, config):
        return Outcome()
    out = Outcome()
    state = NodeState(config.run_dir_for(job.node), warn=out.warn)
    item = state.task(job.own_id)  # the job's own record: root's are not readable here
    rec = item if isinstance(item, JobRecord) else None
    if rec is not None and rec.restart == job.restart:
        out.stdout.append(f"export CUDA_VISIBLE_DEVICES={rec.uuid}")
        out.say(f"CUDA_VISIBLE_DEVICES={rec.uuid}: {describe(rec.profile, rec.placement, rec.gpu)}")
        return out
    refusal = item if isinstance(item, Refusal) else None
    if refusal is not None:
        out.stdout += [NO_GPU, f"print slurm-mig: {refusal.reason}"]
        if refusal.action == "requeue":
            out.stdout.append(
                f"print slurm-mig: job {job.job_id} is requeued and held for the planner"
            )
            out.requeue = True
        else:
            out.stdout.append(f"print slurm-mig: job {job.job_id} cannot run as submitted")
        out.exit_code = 1
        out.warn(f"refused (action {refusal.action}): {refusal.reason}")
        return out
    text = (
        f"no MIG instance was prepared for job {job.job_id} on {job.node}; "
        "the job runs without a GPU"
    )
    out.stdout += [NO_GPU, f"print slurm-mig: {text}"]
    out.warn(text)
    return out


# -- Epilog ----------------------------------------------------------------------------


def epilog(job: JobEnv, config: Config, backend: MigBackend, clock: Clock = time.time) -> Outcome:
    """Destroy the job's instance (or keep it for the job planned next on it), record the
    runtime, drop the job's records and reclaim expired kept instances. Idempotent."""
    if not in_partition(job, config):
        return _not_ours(job, config)
    out = Outcome()
    try:
        models = config.gpu_models(job.node)
        state = NodeState(config.run_dir_for(job.node), warn=out.warn)
        try:
            with state.lock(config.lock_timeout, shared=True):
                _epilog_gated(job, config, models, backend, state, clock, out)
        except LockBusyError as exc:
            _hand_over(job, models, state, clock(), str(exc), out)
    except (ConfigError, NodeStateError) as exc:
        out.fault(str(exc))
    return out


def _epilog_gated(
    job: JobEnv,
    config: Config,
    models: tuple[str, ...],
    backend: MigBackend,
    state: NodeState,
    clock: Clock,
    out: Outcome,
) -> None:
    """The epilog under the version gate: the job's instance under its GPU's lock, then
    expired kept instances of any GPU."""
    rec = state.job(job.job_id)
    state.remove_refusal(job.job_id)
    state.remove_task(job.own_id)
    if rec is None:
        out.say("no instance recorded for this job; nothing to destroy")
    else:
        with state.gpu_lock(rec.gpu, config.lock_timeout):
            _release(rec, job, config, models, backend, state, clock, out)
    if out.drain is None:
        fault = _reclaim_expired(state, backend, clock(), job.job_id, out)
        if fault is not None:
            out.fault(f"cannot reclaim an expired kept instance: {fault}")


def _hand_over(
    job: JobEnv, models: tuple[str, ...], state: NodeState, now: float, why: str, out: Outcome
) -> None:
    """Without its GPU's lock: leave the job's instance, expired, to the next prolog or
    epilog to destroy (writing the kept record before dropping the job record keeps it
    accounted for at every moment), and record the runtime (not rotating the log: a
    hook of an older slurm-mig may hold the gate and rotate it)."""
    rec = state.job(job.job_id)
    state.remove_refusal(job.job_id)
    state.remove_task(job.own_id)
    if rec is None:
        out.warn(f"{why}; no instance recorded for this job")
        return
    state.put_kept(_kept(rec, for_job=None, until=now))
    state.remove_job(job.job_id)
    out.warn(f"{why}; left {_describe(rec)} for the next hook on this node to destroy")
    _record_runtime(rec, job, models, now, state, out, rotate=False)


def _release(
    rec: JobRecord,
    job: JobEnv,
    config: Config,
    models: tuple[str, ...],
    backend: MigBackend,
    state: NodeState,
    clock: Clock,
    out: Outcome,
) -> None:
    end = clock()
    seconds = max(0.0, end - rec.ready)
    ran = f"after {seconds:.1f} s"
    measured = _energy_end(rec, models, state, backend, end, out)
    keep = bool(rec.keep_for) and rec.keep_for not in _moved_on(state)
    if keep:
        until = end + config.reuse_wait
        try:
            state.put_kept(_kept(rec, for_job=rec.keep_for, until=until))
        except NodeStateError as exc:
            if not out_of_room(exc):
                raise
            out.warn(f"cannot keep {_describe(rec)} for job {rec.keep_for}: {exc}; destroying it")
            keep = False
        else:
            out.reclaim_after = config.reuse_wait  # also when no later hook comes to the node
            out.say(
                f"kept {_describe(rec)} for job {rec.keep_for} "
                f"(up to {config.reuse_wait:.0f} s) {ran}"
            )
    if not keep:
        try:
            gone = not _destroy(backend, rec.gpu, rec.uuid, job.job_id, out, rec.profile)
            done = "found gone already" if gone else "destroyed"
            out.say(f"{done} {_describe(rec)} {ran}")
        except DeviceError as exc:
            if exc.node_fault:
                # Keep it on record, expired, so that the next hook on the node retries.
                state.put_kept(_kept(rec, for_job=None, until=end))
                held = f"; {_holders(backend, rec)}" if isinstance(exc, InstanceInUse) else ""
                out.fault(f"cannot destroy {_describe(rec)}: {exc}{held}")
            else:
                out.warn(f"cannot destroy {_describe(rec)}, leaving it: {exc}")
    _record_runtime(rec, job, models, end, state, out, freed=clock(), measured_j=measured)
    state.remove_job(rec.job_id)


def _holders(backend: MigBackend, rec: JobRecord) -> str:
    """Who keeps ``rec``'s instance in use after its job ended (processes with its
    capability nodes open), for the drain reason."""
    from .holders import describe_holders, find_holders

    try:
        inst = next((i for i in backend.instances(rec.gpu) if i.uuid == rec.uuid), None)
    except DeviceError:
        inst = None
    if inst is None:
        return describe_holders([])
    minors = {minor(rec.gpu, inst.gi_id), minor(rec.gpu, inst.gi_id, inst.ci_id)}
    return describe_holders(find_holders(minors))


def _record_runtime(
    rec: JobRecord,
    job: JobEnv,
    models: tuple[str, ...],
    end: float,
    state: NodeState,
    out: Outcome,
    rotate: bool = True,
    freed: float | None = None,
    measured_j: float | None = None,
) -> None:
    """One line in the node's runtime log (``freed``: when its slices were free or handed
    on, default ``end``; ``measured_j``: the run's share of the GPU's energy counter,
    where there is one); a failure (a full disk) is only a warning."""
    entry = {
        "job_id": rec.job_id,
        "restart": rec.restart,
        "key": _hint_key(job.comment),
        "gpu": rec.gpu,
        "model": models[rec.gpu] if 0 <= rec.gpu < len(models) else None,
        "profile": rec.profile,
        "seconds": round(max(0.0, end - rec.ready), 3),
        "end": end,
        "freed": end if freed is None else freed,
    }
    if measured_j is not None:
        entry["measured_j"] = measured_j
    out.finished = entry
    try:
        state.append_runtime(entry, rotate=rotate)
    except NodeStateError as exc:
        out.warn(f"runtime not recorded: {exc}")


def _hint_key(comment: str) -> str | None:
    """The job kind of the comment's ``mig:key=...`` hint, None without a valid one."""
    hints, _ = _hints(comment)
    return hints.key if hints else None


# -- carrying the outcome out -----------------------------------------------------------


def scontrol_path(env: Mapping[str, str]) -> str:
    """$SLURM_MIG_SCONTROL, else scontrol on PATH or in the usual places (Slurm runs the
    prolog without PATH)."""
    import shutil

    if env.get("SLURM_MIG_SCONTROL"):
        return env["SLURM_MIG_SCONTROL"]
    path = ":".join(p for p in (env.get("PATH", ""), _EXTRA_PATH) if p)
    return shutil.which("scontrol", path=path) or "scontrol"


def as_array_task(
    job: JobEnv, config: Config, env: Mapping[str, str], scontrol: str | None = None
) -> JobEnv:
    """The Prolog's or Epilog's job under the id the planner knows it by: an array
    task's ``<array id>_<task>``, which their environment does not name. Asked of
    slurmctld (squeue, beside ``scontrol``) only when the job's token names an array
    task or cannot be read (gone from a rewritten comment): a plain job's genuine token
    names its own SLURM_JOB_ID. ``array_unknown`` when slurmctld did not answer."""
    if not _digits(job.job_id, 10):
        return job
    token = comments.parse(job.comment).token
    if token is not None:
        try:
            if open_token(token, load_key(config.key_file)).job_id == job.job_id:
                return job
        except AssignmentError:
            pass  # forged, or no key: the Prolog refuses it; the Epilog still asks
    task, failed = array_task_of(job.job_id, env, scontrol)
    if failed is not None:
        return replace(job, array_unknown=True)
    return job if task is None else replace(job, job_id=task, slurm_id=job.job_id)


def array_task_of(
    job_id: str, env: Mapping[str, str], scontrol: str | None = None
) -> tuple[str | None, str | None]:
    """(``<array id>_<task>`` of Slurm job ``job_id``, or None when it is no array task;
    what went wrong, or None). Read from ``squeue -j`` as numbers only: no job name or
    comment in the output, so nothing a user wrote can pose as another job's line."""
    import subprocess

    exe = str(Path(scontrol or scontrol_path(env)).with_name("squeue"))
    argv = [exe, "-h", "--states=all", "-r", f"--jobs={job_id}", "-O", "JobID:12,JobArrayID:24"]
    clean = {k: v for k, v in env.items() if not k.startswith("SQUEUE_")}
    try:
        done = subprocess.run(argv, env=clean, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"{exe}: {exc}"
    if done.returncode != 0:
        return None, f"{exe} exited {done.returncode}: {' '.join(done.stderr.split())[:300]}"
    for line in done.stdout.splitlines():
        words = line.split()
        if len(words) == 2 and words[0] == job_id:  # -j <array id> lists every task
            return (words[1] if _ARRAY_TASK.match(words[1]) else None), None
    return None, f"{exe}: job {job_id} is not in slurmctld's list"


def run_scontrol(
    args: list[str], env: Mapping[str, str], scontrol: str | None = None
) -> str | None:
    """Run ``scontrol ARGS``; None on success, else what went wrong (never raises)."""
    import subprocess

    exe = scontrol or scontrol_path(env)
    try:
        done = subprocess.run(
            [exe, *args], env=dict(env), capture_output=True, text=True, timeout=20, check=False
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{exe}: {exc}"
    if done.returncode != 0:
        return f"{exe} exited {done.returncode}: {' '.join(done.stderr.split())[:300]}"
    return None


def emit(
    hook: str, job_id: str, node: str, log: list[tuple[int, str]], config: Config | None
) -> None:
    """Write each log line, prefixed ``slurm-mig <hook> job <id>:``, to stderr, to the
    config's log_file when set, and to syslog (all best effort); control characters
    written as escapes (`safetext.printable`), so no job name or reason starts a line."""
    from ..safetext import printable

    if not log:
        return
    most = 4000  # characters of one line (a reason, an NVML error)
    lines = [(level, printable(f"{hook} job {job_id}: {text}", most)) for level, text in log]
    if config is not None and config.log_file is not None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        text = "".join(f"{stamp} {printable(node, 256)} slurm-mig {line}\n" for _, line in lines)
        problem = _append_log(config.log_file, text.encode("utf-8", "backslashreplace"))
        if problem:
            lines.append((WARNING, printable(f"{hook} job {job_id}: {problem}", most)))
    for _, line in lines:
        print(f"slurm-mig {line}", file=sys.stderr)
    try:
        import syslog

        syslog.openlog("slurm-mig", 0, syslog.LOG_DAEMON)
        for level, line in lines:
            syslog.syslog(level, line)
        syslog.closelog()
    except (ImportError, OSError):
        pass


def _append_log(path: Path, data: bytes) -> str | None:
    """Append to the hooks' log file, best effort; what kept it from being written when
    that was the file, not the permissions: root creates it 0600; one that group or
    others may read or that is not root's is left alone, never a job's failure (the
    TaskProlog, as the user, writes only where the file lets it)."""
    from ..safetext import UnsafeLogFile, open_private_log

    try:
        fd = open_private_log(path, create=os.geteuid() == 0)
    except UnsafeLogFile as exc:
        return f"log file not written: [paths] log_file: {exc}"
    except OSError:
        return None
    try:
        os.write(fd, data)
    except OSError:
        pass
    finally:
        os.close(fd)
    return None


def _run(
    hook: str,
    env: Mapping[str, str] | None,
    scontrol: str | None,
    clock: Clock,
    open_backend: Callable[[Config, str], MigBackend] | None,
) -> int:
    env = os.environ if env is None else env
    try:
        job = JobEnv.from_env(env)
    except HookInputError as exc:
        emit(hook, env.get("SLURM_JOB_ID", "?") or "?", "", [(WARNING, str(exc))], None)
        return 0
    config = None
    try:
        config = load_config(env.get("SLURM_MIG_CONFIG") or None)
        if hook != "taskprolog" and in_partition(job, config):
            job = as_array_task(job, config, env, scontrol)
        out = _decide(hook, job, config, clock, open_backend)
    except ConfigError as exc:
        out = _broken(hook, f"slurm-mig config: {exc}")
    except Exception as exc:  # a bug must not leave a job on the wrong GPU silently
        out = _broken(hook, f"internal error: {type(exc).__name__}: {exc}")
    if out.drain is not None:
        failed = run_scontrol(
            ["update", f"NodeName={job.node}", "State=DRAIN", f"Reason=slurm-mig: {out.drain}"],
            env,
            scontrol,
        )
        if failed:
            out.warn(f"could not drain the node: {failed}")
    if out.requeue:
        target = job.job_id
        if hook == "taskprolog":  # by number, the last task of an array names all of it
            target = array_task_of(job.job_id, env, scontrol)[0] or job.job_id
        failed = run_scontrol(["requeuehold", target], env, scontrol)
        if failed:
            out.warn(f"could not requeue the job: {failed}")
    if hook != "taskprolog" and config is not None and in_partition(job, config):
        from .nodemetrics import record  # stdlib and geometry only

        try:
            failed = record(config, job.node, out.events)
            if out.finished is not None:
                from .accounting import append

                private = config.run_dir_for(job.node) / "private"
                failed = append(private, out.finished, env) or failed
        except Exception as exc:  # metrics and accounting never fail a hook
            failed = f"metrics not written: {type(exc).__name__}: {exc}"
        if failed:
            out.warn(failed)
    if hook != "taskprolog" and config is not None and in_partition(job, config):
        from . import reports  # stdlib only

        hint = _hint_key(job.comment) if hook == "epilog" else None
        own = replace(job, job_id=job.own_id)  # its need file is named as mig-run knows it
        reports.after_hook(hook, config, job.node, out, env, own, hint)
    if config is not None and config.notify:
        if hook == "epilog":
            _notify(config, job.job_id, "ended", out)
        elif hook == "prolog" and out.started and out.drain is None:
            _notify(config, job.job_id, "started", out)
    if out.reclaim_after is not None and env.get("SLURM_SCRIPT_CONTEXT") == "epilog_slurmd":
        _spawn_reclaim(env, job.node, out.reclaim_after, out)  # under slurmd only
    emit(hook, job.job_id, job.node, out.log, config)
    if out.stdout:
        sys.stdout.write("".join(f"{line}\n" for line in out.stdout))
        sys.stdout.flush()
    return out.exit_code


def _spawn_reclaim(env: Mapping[str, str], node: str, delay: float, out: Outcome) -> None:
    """Start `reclaim_main` detached: once the kept instance's wait has run out it is
    destroyed even when its job went to another node and no hook comes here again."""
    import subprocess

    tree = str(Path(__file__).resolve().parents[2])
    path = os.pathsep.join(p for p in (tree, env.get("PYTHONPATH", "")) if p)
    code = "import sys; from slurm_mig.slurm.hooks import reclaim_main; sys.exit(reclaim_main())"
    try:
        # Slurm starts hooks without PATH: Python may not know its own path then
        python = sys.executable or os.readlink("/proc/self/exe")
        subprocess.Popen(
            [python, "-c", code, node, f"{delay + 1.0:.1f}"],
            env={**env, "PYTHONPATH": path},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError as exc:
        out.warn(f"cannot start the reclaim of the kept instance (the next hook does it): {exc}")


def reclaim_main(argv: list[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    """``NODE SECONDS``: sleep, then destroy the node's kept instances whose wait is over
    (one GPU's lock at a time, waiting for each as a hook would for its own); log like
    the hooks. Exit 0 unless misused."""
    args = sys.argv[1:] if argv is None else argv
    env = os.environ if env is None else env
    if len(args) != 2 or not _digits(args[1].replace(".", "", 1), 12):
        print("usage: reclaim NODE SECONDS", file=sys.stderr)
        return 2
    node, delay = args[0], float(args[1])
    time.sleep(delay)
    out, config = Outcome(), None
    try:
        config = load_config(env.get("SLURM_MIG_CONFIG") or None)
        from ..devices.open import open_backend

        backend = open_backend(config, node)
        state = NodeState(config.run_dir_for(node), warn=out.warn)
        with state.lock(config.lock_timeout, shared=True):
            now = time.time()
            fault = _reclaim_expired(state, backend, now, "reclaim", out, config.lock_timeout)
        if fault is not None:
            out.warn(f"cannot reclaim an expired kept instance (the next hook retries): {fault}")
    except (ConfigError, DeviceError, NodeStateError, LockBusyError) as exc:
        out.warn(f"kept instances not reclaimed (the next hook does it): {exc}")
    if config is not None:
        from . import reports  # stdlib only

        reports.after_hook("reclaim", config, node, out, env)
    emit("reclaim", "-", node, out.log, config)
    return 0


def _notify(config: Config, job_id: str, event: str, out: Outcome) -> None:
    """Wake the planner daemon: the job has started (the job after it can be released
    ahead) or ended (its slices are free, or kept for the next job)."""
    from ..config import parse_address
    from .notify import send

    address = parse_address(config.notify)
    if address is not None:
        try:  # the daemon hears only signed notifications: no key, no datagram
            key = load_key(config.key_file)
        except AssignmentError as exc:
            out.warn(f"the planner is not notified: {exc}")
            return
        failed = send(address, job_id, event, key)
        if failed:
            out.warn(failed)


def _decide(
    hook: str,
    job: JobEnv,
    config: Config,
    clock: Clock,
    open_backend: Callable[[Config, str], MigBackend] | None,
) -> Outcome:
    if hook == "taskprolog":
        return task_prolog(job, config)
    if not in_partition(job, config):
        return _not_ours(job, config)
    if open_backend is None:
        from ..devices.open import open_backend
    try:
        backend = open_backend(config, job.node)
    except DeviceError as exc:
        return Outcome().fault(f"cannot open the MIG devices: {exc}")
    return (prolog if hook == "prolog" else epilog)(job, config, backend, clock)


def _broken(hook: str, text: str) -> Outcome:
    """The hook could not decide: the Prolog and Epilog drain the node, the TaskProlog
    gives the task no GPU rather than a wrong one."""
    if hook == "taskprolog":
        out = Outcome(stdout=[NO_GPU, f"print slurm-mig: {text}; the job runs without a GPU"])
        out.warn(text)
        return out
    return Outcome().fault(text)


def prolog_main(
    env: Mapping[str, str] | None = None,
    *,
    scontrol: str | None = None,
    clock: Clock = time.time,
    open_backend: Callable[[Config, str], MigBackend] | None = None,
) -> int:
    """Slurm Prolog (console script ``slurm-mig-prolog``); returns the exit status."""
    return _run("prolog", env, scontrol, clock, open_backend)


def epilog_main(
    env: Mapping[str, str] | None = None,
    *,
    scontrol: str | None = None,
    clock: Clock = time.time,
    open_backend: Callable[[Config, str], MigBackend] | None = None,
) -> int:
    """Slurm Epilog (console script ``slurm-mig-epilog``); returns the exit status."""
    return _run("epilog", env, scontrol, clock, open_backend)


def task_prolog_main(
    env: Mapping[str, str] | None = None,
    *,
    scontrol: str | None = None,
    clock: Clock = time.time,
) -> int:
    """Slurm TaskProlog (console script ``slurm-mig-taskprolog``); returns the exit status."""
    return _run("taskprolog", env, scontrol, clock, None)
