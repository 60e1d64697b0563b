"""The Slurm Prolog's decision: check the job's assignment token, then create, adopt or
reuse its MIG instance under its GPU's lock and write the job's records (and a copy
only the job's user can read); refuse, requeue or report a node fault otherwise.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import TypeVar

from ..config import Config, ConfigError
from ..devices.base import DeviceError, MigBackend
from ..devices.migcaps import gi_id_for
from ..geometry import get_model
from ..slurm.assignment import Assignment, AssignmentError, load_key
from .admission import check_assignment, in_partition, not_ours, read_hints
from .hookenergy import energy_start
from .hookoutcome import Clock, Outcome, describe_item
from .jobenv import JobEnv
from .nodestate import (
    JobRecord,
    LockBusyError,
    NodeState,
    NodeStateError,
    Refusal,
    out_of_room,
)
from .placing import clear_way, job_record, live_instances, place_gang, plan_text
from .reclaim import destroy, destroy_all, kept_records, reclaim_expired, whose
from .recordsweep import Asker

__all__ = ["prolog"]

_Item = TypeVar("_Item", JobRecord, Refusal)


def prolog(
    job: JobEnv,
    config: Config,
    backend: MigBackend,
    clock: Clock = time.time,
    ask: Asker | None = None,
) -> Outcome:
    """Prepare the job's planned MIG instance (create, adopt a kept one, or reuse the one
    of an earlier try), or write why not; exit 1 only on a node fault. Only the lock of
    the assignment's GPU is held while deciding and creating. ``ask``: what Slurm says
    of jobs whose records are in the way (`recordsweep`; None: stale ones are kept)."""
    if not in_partition(job, config):
        return not_ours(job, config)
    out = Outcome()
    try:
        _prolog_locked(job, config, backend, clock, out, ask)
    except NodeStateError as exc:
        if out_of_room(exc):
            _requeue_out_of_room(str(exc), out)
        else:
            out.fault(str(exc))
    except (ConfigError, AssignmentError) as exc:
        out.fault(str(exc))
    return out


def _prolog_locked(
    job: JobEnv, config: Config, backend: MigBackend, clock: Clock, out: Outcome, ask: Asker | None
) -> None:
    """The prolog under the version gate; a busy gate requeues the job."""
    models = config.gpu_models(job.node)
    key = load_key(config.key_file)
    state = NodeState(config.run_dir_for(job.node), warn=out.warn)
    try:
        with state.lock(config.lock_timeout, shared=True):
            _prolog_gated(job, config, models, key, backend, state, clock, out, ask)
    except LockBusyError as exc:
        # Per-job files only, no lock needed; the planner plans the job again.
        _refuse(state, Refusal(job.job_id, "requeue", str(exc)), job, out)


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
    ask: Asker | None = None,
) -> None:
    """The prolog under the version gate: the job's own records, the assignment, then the
    assignment's GPU under its lock, then expired kept instances of any GPU."""
    now = clock()
    try:
        if _reused(job, backend, state, now, out, models):
            return
        verdict = check_assignment(
            job, key, models, config.token_ttl, now, gres=config.gres != "off"
        )
        if isinstance(verdict, Refusal):
            _refuse(state, verdict, job, out)
            return
        with state.gpu_lock(verdict.gpu, config.lock_timeout):
            records = state.jobs()  # once: the live jobs in the way, the GPU's runs' energy
            gres = config.gres != "off"
            placed = _place(verdict, job, state, records, backend, clock, out, gres=gres, ask=ask)
            if isinstance(placed, JobRecord):
                placed = energy_start(placed, models, state, records, backend, clock(), out)
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
        hints, _ = read_hints(job.comment)
        out.event("restart", "memory_hint" if hints is not None and hints.mem else "other")
    fault = reclaim_expired(state, backend, clock(), job.job_id, out)
    if fault is not None:
        out.warn(f"could not reclaim an expired kept instance (the epilog will retry): {fault}")


def _undo_unless(
    write: Callable[[], None], rec: JobRecord, state: NodeState, backend: MigBackend, out: Outcome
) -> None:
    """``write`` a record of the instance this prolog prepared; when it cannot be written,
    destroy its instances (every one of a job of several slices) and drop its job record
    (removing needs no room) before passing the error on, so no instance is left
    without a record. Under the instance's GPU lock."""
    try:
        write()
    except NodeStateError as exc:
        gone = destroy_all(backend, rec.gpu, rec.uuids, rec.job_id, out, rec.profile)
        state.remove_job(rec.job_id)
        done = "it was gone already" if gone == rec.tasks else "destroyed it"
        out.warn(f"cannot keep the record of {describe_item(rec)}: {exc}; {done}")
        raise


def _reused(
    job: JobEnv,
    backend: MigBackend,
    state: NodeState,
    now: float,
    out: Outcome,
    models: tuple[str, ...],
) -> bool:
    """True when an earlier try of this prolog prepared the job's instance (reused as it
    is; a job of several slices only when all its instances are there). An instance of
    an earlier run of the job, or what is left of an incomplete gang, becomes a kept
    one, expired, for this run to clear or adopt or the next hook to reclaim. The job's
    own records only: no GPU lock (no other hook changes a live job's record; the kept
    record is written before the job record is removed, so the instance stays accounted
    for)."""
    rec = state.job(job.job_id)
    if rec is None:
        return False
    if rec.restart == job.restart:
        there = {i.uuid for i in backend.instances(rec.gpu)}
        if there.issuperset(rec.uuids):
            state.remove_refusal(job.job_id)
            state.put_task(_own(rec, job), job.uid)
            out.say(f"reusing {describe_item(rec)}, prepared by an earlier try of this prolog")
            return True
        for k in kept_records(rec, for_job=job.job_id, until=now, models=models):
            if k.uuid in there:  # what is left of an incomplete gang
                state.put_kept(k)
        out.warn(f"its record names {describe_item(rec)}, which is gone; preparing it again")
    else:
        for k in kept_records(rec, for_job=job.job_id, until=now, models=models):
            state.put_kept(k)
        out.say(f"run {rec.restart} of this job left {describe_item(rec)}; reclaiming it")
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


def _place(
    a: Assignment,
    job: JobEnv,
    state: NodeState,
    records: list[JobRecord],
    backend: MigBackend,
    clock: Clock,
    out: Outcome,
    gres: bool = False,
    ask: Asker | None = None,
) -> JobRecord | Refusal:
    """Adopt a kept instance identical to the assignment, or clear the placement of kept
    and orphan instances and create it; refuse (requeue) when a live job (of the job
    ``records``) is in the way; a stale record in the way (its job runs here no more:
    `recordsweep`, asking Slurm with ``ask``) is cleared like an orphan. ``gres``: the
    instance must have the GPU-instance id of the job's GRES record (its capability
    nodes are the ones the device cgroup opens), else it is destroyed and the job
    requeued. A job of several slices: `placing.place_gang`."""
    live = live_instances(records, job.job_id)
    instances = backend.instances(a.gpu)
    if a.tasks > 1:
        return place_gang(a, job, state, live, instances, backend, clock, out, gres, ask)
    start = clock()
    kept = {k.uuid: k for k in state.kept()}
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
    refusal = clear_way(a, in_way, live, kept, job, state, backend, out, ask)
    if refusal is not None:
        return refusal
    if adopt is not None:
        k = kept[adopt.uuid]
        state.remove_kept(adopt.uuid)
        ready = clock()
        out.event("adopt", a.profile)
        out.say(f"adopted {describe_item(adopt)}, {whose(k)}; {plan_text(a)}")
        return job_record(a, job, adopt.uuid, k.created or start, ready, reused=True)
    return _create(a, job, backend, want_gi, start, clock, out)


def _create(
    a: Assignment,
    job: JobEnv,
    backend: MigBackend,
    want_gi: int | None,
    start: float,
    clock: Clock,
    out: Outcome,
) -> JobRecord | Refusal:
    """`_place`'s new instance, its placement clear: created, or destroyed again and the
    job requeued when the driver gave it another GPU-instance id than ``want_gi``."""
    began = time.monotonic()
    inst = backend.create(a.gpu, a.profile, a.placement, job_id=job.job_id)
    out.event("create", a.profile, time.monotonic() - began)
    if want_gi is not None and inst.gi_id != want_gi:
        destroy(backend, inst.gpu, inst.uuid, job.job_id)
        return Refusal(
            job.job_id,
            "requeue",
            f"the driver gave {describe_item(inst)} GPU-instance id {inst.gi_id}, but the job's "
            f"GRES record opens the capability nodes of id {want_gi}; destroyed it (report "
            "this GPU's numbering to the slurm-mig developers)",
        )
    ready = clock()
    out.say(f"created {describe_item(inst)} in {ready - start:.2f} s; {plan_text(a)}")
    return job_record(a, job, inst.uuid, ready, ready, reused=False)
