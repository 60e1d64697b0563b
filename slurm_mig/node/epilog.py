"""The Slurm Epilog's decision: destroy the job's instance (or keep it for the job
planned next on it, or hand it over expired when its GPU's lock is busy), record the
run's runtime and measured energy, drop the job's records and reclaim expired kept
instances. Idempotent.
"""

from __future__ import annotations

import time
from functools import cache

from ..config import Config, ConfigError
from ..devices.base import DeviceError, InstanceInUse, MigBackend
from ..devices.migcaps import minor
from .admission import hint_key, in_partition, not_ours
from .hookenergy import energy_end
from .hookoutcome import Clock, Outcome, describe_item
from .jobenv import JobEnv
from .nodestate import JobRecord, LockBusyError, NodeState, NodeStateError, out_of_room
from .reclaim import destroy_each, kept_record, kept_records, moved_on_jobs, reclaim_expired, worst

__all__ = ["epilog"]


def epilog(job: JobEnv, config: Config, backend: MigBackend, clock: Clock = time.time) -> Outcome:
    """Destroy the job's instance (or keep it for the job planned next on it), record the
    runtime, drop the job's records and reclaim expired kept instances. Idempotent."""
    if not in_partition(job, config):
        return not_ours(job, config)
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
    rec = _take_records(job, state)
    if rec is None:
        out.say("no instance recorded for this job; nothing to destroy")
    else:
        with state.gpu_lock(rec.gpu, config.lock_timeout):
            _release(rec, job, config, models, backend, state, clock, out)
    if out.drain is None:
        fault = reclaim_expired(state, backend, clock(), job.job_id, out)
        if fault is not None:
            out.fault(f"cannot reclaim an expired kept instance: {fault}")


def _take_records(job: JobEnv, state: NodeState) -> JobRecord | None:
    """The job's instance record (None: none), with its refusal and task records dropped:
    the job record itself goes only once its instance is destroyed or kept."""
    rec = state.job(job.job_id)
    state.remove_refusal(job.job_id)
    state.remove_task(job.own_id)
    return rec


def _hand_over(
    job: JobEnv, models: tuple[str, ...], state: NodeState, now: float, why: str, out: Outcome
) -> None:
    """Without its GPU's lock: leave the job's instance, expired, to the next prolog or
    epilog to destroy (writing the kept record before dropping the job record keeps it
    accounted for at every moment), and record the runtime (not rotating the log: a
    hook of an older slurm-mig may hold the gate and rotate it)."""
    rec = _take_records(job, state)
    if rec is None:
        out.warn(f"{why}; no instance recorded for this job")
        return
    for k in kept_records(rec, for_job=None, until=now, models=models):
        state.put_kept(k)
    state.remove_job(job.job_id)
    out.warn(f"{why}; left {describe_item(rec)} for the next hook on this node to destroy")
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
    jobs = cache(state.jobs)  # read once, and only if energy or a kept instance needs it
    measured = energy_end(rec, models, state, backend, end, out, jobs)
    # a job of several slices is never kept (its Prolog refuses a keep_for)
    keep = bool(rec.keep_for) and not rec.members and rec.keep_for not in moved_on_jobs(state, jobs)
    if keep:
        until = end + config.reuse_wait
        try:
            state.put_kept(kept_record(rec, for_job=rec.keep_for, until=until))
        except NodeStateError as exc:
            if not out_of_room(exc):
                raise
            out.warn(
                f"cannot keep {describe_item(rec)} for job {rec.keep_for}: {exc}; destroying it"
            )
            keep = False
        else:
            out.reclaim_after = config.reuse_wait  # also when no later hook comes to the node
            out.say(
                f"kept {describe_item(rec)} for job {rec.keep_for} "
                f"(up to {config.reuse_wait:.0f} s) {ran}"
            )
    if not keep:
        _destroy(rec, job, models, backend, state, end, ran, out)
    _record_runtime(rec, job, models, end, state, out, freed=clock(), measured_j=measured)
    state.remove_job(rec.job_id)


def _destroy(
    rec: JobRecord,
    job: JobEnv,
    models: tuple[str, ...],
    backend: MigBackend,
    state: NodeState,
    end: float,
    ran: str,
    out: Outcome,
) -> None:
    """Destroy every instance of the job (each tried); one that cannot be destroyed for
    a node fault stays on record as a kept instance, expired, for the next hook on the
    node to retry, and the node drains."""
    gone, failed = destroy_each(backend, rec.gpu, rec.uuids, job.job_id, out, rec.profile)
    exc = worst(failed)
    if exc is None:
        done = "found gone already" if gone == rec.tasks else "destroyed"
        out.say(f"{done} {describe_item(rec)} {ran}")
        return
    left = [k for k in kept_records(rec, None, end, models) if k.uuid in failed]
    what = describe_item(rec) if rec.tasks == 1 else ", ".join(describe_item(k) for k in left)
    if exc.node_fault:
        for k in left:  # kept on record, expired, so that the next hook on the node retries
            state.put_kept(k)
        bad = next(k for k in left if failed[k.uuid] is exc)
        held = f"; {_holders(backend, rec.gpu, bad.uuid)}" if isinstance(exc, InstanceInUse) else ""
        out.fault(f"cannot destroy {what}: {exc}{held}")
    else:
        out.warn(f"cannot destroy {what}, leaving it: {exc}")


def _holders(backend: MigBackend, gpu: int, uuid: str) -> str:
    """Who keeps instance ``uuid`` in use after its job ended (processes with its
    capability nodes open), for the drain reason."""
    from .holders import describe_holders, find_holders

    try:
        inst = next((i for i in backend.instances(gpu) if i.uuid == uuid), None)
    except DeviceError:
        inst = None
    if inst is None:
        return describe_holders([])
    minors = {minor(gpu, inst.gi_id), minor(gpu, inst.gi_id, inst.ci_id)}
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
        "key": hint_key(job.comment),
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
