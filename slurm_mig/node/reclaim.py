"""Destroying MIG instances and reclaiming kept ones (an instance kept for a job planned
next on it, whose wait ran out or whose job moved on), one GPU's lock at a time; shared
by the Prolog, the Epilog and the detached reclaim.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from ..devices.base import DeviceError, InstanceNotFound, MigBackend
from .hookoutcome import Outcome, describe_item
from .nodestate import JobRecord, KeptInstance, LockBusyError, NodeState

__all__ = ["destroy", "kept_record", "moved_on_jobs", "reclaim_expired", "whose"]


def kept_record(rec: JobRecord, for_job: str | None, until: float) -> KeptInstance:
    return KeptInstance(
        rec.gpu, rec.profile, rec.placement, rec.uuid, for_job, until, created=rec.created
    )


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
