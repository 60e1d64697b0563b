"""Destroying MIG instances and reclaiming kept ones (an instance kept for a job planned
next on it, whose wait ran out or whose job moved on), one GPU's lock at a time; shared
by the Prolog, the Epilog and the detached reclaim.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from ..devices.base import DeviceError, InstanceNotFound, MigBackend
from ..geometry import GeometryError, Placement, gang_placements, get_model
from .hookoutcome import Outcome, describe_item
from .nodestate import JobRecord, KeptInstance, LockBusyError, NodeState

__all__ = [
    "destroy",
    "destroy_all",
    "destroy_each",
    "kept_record",
    "kept_records",
    "moved_on_jobs",
    "reclaim_expired",
    "record_placements",
    "whose",
    "worst",
]


def kept_record(rec: JobRecord, for_job: str | None, until: float) -> KeptInstance:
    return KeptInstance(
        rec.gpu, rec.profile, rec.placement, rec.uuid, for_job, until, created=rec.created
    )


def record_placements(rec: JobRecord, models: Sequence[str]) -> tuple[Placement, ...]:
    """Where each instance of ``rec`` sits, task 0 first: its placement for one instance,
    `gang_placements` in its region for several (the region for each when the config
    names no model that holds them: kept records then overlap the whole region)."""
    if not rec.members:
        return (rec.placement,)
    got = None
    if 0 <= rec.gpu < len(models):
        try:
            model = get_model(models[rec.gpu])
            size = model.profile(rec.profile).compute_slices
            got = gang_placements(model, rec.placement, size, rec.tasks)
        except GeometryError:
            got = None
    return got or (rec.placement,) * rec.tasks


def kept_records(
    rec: JobRecord, for_job: str | None, until: float, models: Sequence[str]
) -> list[KeptInstance]:
    """A kept record of every instance of ``rec`` (`kept_record` of each, at its own
    placement), task 0 first."""
    return [
        KeptInstance(rec.gpu, rec.profile, pl, uuid, for_job, until, created=rec.created)
        for uuid, pl in zip(rec.uuids, record_placements(rec, models), strict=True)
    ]


def whose(k: KeptInstance) -> str:
    return f"kept for job {k.for_job}" if k.for_job else "kept after a failed destroy"


def destroy(
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


def destroy_each(
    backend: MigBackend,
    gpu: int,
    uuids: Sequence[str],
    job_id: str,
    out: Outcome | None = None,
    profile: str = "",
) -> tuple[int, dict[str, DeviceError]]:
    """`destroy` every instance of ``uuids`` (a job's: one failure never spares the
    others): (how many were gone already, the uuids not destroyed with why)."""
    gone, failed = 0, {}
    for uuid in uuids:
        try:
            gone += not destroy(backend, gpu, uuid, job_id, out, profile)
        except DeviceError as exc:
            failed[uuid] = exc
    return gone, failed


def worst(failed: dict[str, DeviceError]) -> DeviceError | None:
    """The error to pass on of `destroy_each`'s failures: a node fault before any other."""
    errors = list(failed.values())
    return next((e for e in errors if e.node_fault), errors[0] if errors else None)


def destroy_all(
    backend: MigBackend,
    gpu: int,
    uuids: Sequence[str],
    job_id: str,
    out: Outcome | None = None,
    profile: str = "",
) -> int:
    """`destroy_each`, raising the `worst` failure once every instance was tried; how
    many were gone already."""
    gone, failed = destroy_each(backend, gpu, uuids, job_id, out, profile)
    error = worst(failed)
    if error is not None:
        raise error
    return gone


def moved_on_jobs(
    state: NodeState, jobs: Callable[[], Sequence[JobRecord]] | None = None
) -> set[str]:
    """Jobs that have started or finished on this node: an instance kept for one of them
    will never be adopted (a re-plan sent it elsewhere), so it is reclaimed at once.
    ``jobs`` reads the job records (default ``state.jobs``)."""
    return {r.job_id for r in (jobs or state.jobs)()} | state.finished_jobs()


def reclaim_expired(
    state: NodeState, backend: MigBackend, now: float, job_id: str, out: Outcome, wait: float = 0.0
) -> DeviceError | None:
    """Destroy kept instances whose wait is over or whose job has moved on, GPU by GPU in
    index order, holding one GPU's lock at a time; a GPU whose lock is not free within
    ``wait`` seconds (0: busy now) is left to the hook that holds it, or the next. The
    first node fault is returned. The runtime log is read only while an instance waits."""
    kept = state.kept()
    waiting = any(k.until > now and k.for_job for k in kept)
    moved_on = moved_on_jobs(state) if waiting else set()
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
    """`reclaim_expired` for one GPU, under its lock: its kept records are read again
    (a prolog may have adopted one meanwhile)."""
    for k in state.kept():
        if k.gpu != gpu or not _expired(k, now, moved_on):
            continue
        try:
            gone = not destroy(backend, k.gpu, k.uuid, job_id, out, k.profile)
        except DeviceError as exc:
            if exc.node_fault:
                return exc
            out.warn(f"dropping the kept record of {describe_item(k)}: {exc}")
            state.remove_kept(k.uuid)
            continue
        state.remove_kept(k.uuid)
        done = "was gone already" if gone else "destroyed"
        out.say(f"reclaimed {describe_item(k)}, {whose(k)} until its wait ran out: {done}")
    return None
