"""Where the Prolog puts a job's instances: the instances in the way of its placement
(a live job's: requeue; a stale record's, a kept or an orphan one: destroyed), the job
record of what it prepared, and the instances of a job of several slices
(`geometry.gangs`), created one by one inside its region and all destroyed again when
one of them cannot be made as planned: nothing of a gang is left behind.

Standard library, ``geometry`` and the node's record types only: on the job start path.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

from ..devices.base import DeviceError, MigBackend, MigInstance
from ..devices.migcaps import gi_id_for
from ..geometry import Placement, get_model
from ..slurm.assignment import Assignment
from .hookoutcome import Clock, Outcome, describe, describe_item
from .jobenv import JobEnv
from .nodestate import JobRecord, KeptInstance, NodeState, Refusal
from .reclaim import destroy, destroy_each, whose, worst
from .recordsweep import Asker, clear_in_way

__all__ = ["clear_way", "job_record", "live_instances", "place_gang", "plan_text", "planned"]


def live_instances(records: Iterable[JobRecord], job_id: str) -> dict[str, JobRecord]:
    """Instance uuid -> the record of the other job (not ``job_id``) that holds it: every
    instance of a job of several slices, so that none of them is taken for an orphan."""
    return {uuid: r for r in records if r.job_id != job_id for uuid in r.uuids}


def planned(a: Assignment) -> str:
    """How the logs name the instance(s) ``a`` plans: `describe`, or for a job of several
    slices ``4 x 1g.5gb in 0:4 on gpu 1``."""
    if a.tasks == 1:
        return describe(a.profile, a.placement, a.gpu)
    return f"{a.tasks} x {a.profile} in {a.placement.start}:{a.placement.size} on gpu {a.gpu}"


def clear_way(
    a: Assignment,
    in_way: list[MigInstance],
    live: Mapping[str, JobRecord],
    kept: Mapping[str, KeptInstance],
    job: JobEnv,
    state: NodeState,
    backend: MigBackend,
    out: Outcome,
    ask: Asker | None,
) -> Refusal | None:
    """Clear ``in_way`` (the GPU's instances overlapping ``a``'s placement) under the
    GPU's lock: a refusal (requeue) when a live job still holds one; the instances of
    stale records (`recordsweep`), kept and orphan instances are destroyed."""
    blocking = list({live[i.uuid].job_id: live[i.uuid] for i in in_way if i.uuid in live}.values())
    held = (
        clear_in_way(blocking, job.node, ask, state, backend, job.job_id, out) if blocking else None
    )
    if held is not None:
        return Refusal(
            job.job_id,
            "requeue",
            f"slices still in use by job {held.job_id}: {describe_item(held)} overlaps "
            f"the planned {planned(a)}",
        )
    for i in (i for i in in_way if i.uuid not in live):
        k = kept.get(i.uuid)
        what = f"instance {whose(k)}" if k else "orphan instance (no job record)"
        destroy(backend, i.gpu, i.uuid, job.job_id, out, i.profile)
        if k:
            state.remove_kept(i.uuid)
        out.say(f"destroyed {what} {describe_item(i)}: it overlaps the planned placement")
    return None


def job_record(
    a: Assignment,
    job: JobEnv,
    uuid: str,
    created: float,
    ready: float,
    reused: bool,
    members: tuple[str, ...] = (),
) -> JobRecord:
    """The job record of this run's instance ``uuid`` of assignment ``a`` (``members``:
    the other tasks' instances of a job of several slices, in task order)."""
    return JobRecord(
        slurm_id=job.slurm_id or None,
        job_id=job.job_id,
        restart=job.restart,
        gpu=a.gpu,
        profile=a.profile,
        placement=a.placement,
        uuid=uuid,
        created=created,
        ready=ready,
        reused=reused,
        keep_for=a.keep_for,
        members=members,
    )


def plan_text(a: Assignment) -> str:
    """What the plan says of ``a`` (runtime, batch, order, the job it is kept for), for
    the Prolog's log line."""
    text = f"planned {a.planned_seconds:.0f} s (batch {a.batch}, order {a.order})"
    return f"{text}, kept afterwards for job {a.keep_for}" if a.keep_for else text


# -- a job of several slices ---------------------------------------------------------------


def place_gang(
    a: Assignment,
    job: JobEnv,
    state: NodeState,
    live: Mapping[str, JobRecord],
    instances: list[MigInstance],
    backend: MigBackend,
    clock: Clock,
    out: Outcome,
    gres: bool = False,
    ask: Asker | None = None,
) -> JobRecord | Refusal:
    """`prolog._place` for a job of several slices: clear its whole region (``live``: the
    other jobs' instances, ``instances``: the GPU's), then create its instances. A gang
    never adopts a kept instance: every kept one in the region is destroyed."""
    start = clock()
    kept = {k.uuid: k for k in state.kept()}
    in_way = [i for i in instances if i.placement.overlaps(a.placement)]
    refusal = clear_way(a, in_way, live, kept, job, state, backend, out, ask)
    if refusal is not None:
        return refusal
    return _create_gang(a, job, backend, gres, start, clock, out)


def _create_gang(
    a: Assignment,
    job: JobEnv,
    backend: MigBackend,
    gres: bool,
    start: float,
    clock: Clock,
    out: Outcome,
) -> JobRecord | Refusal:
    """The gang's instances at `Assignment.instance_placements`, task 0 first; when one
    cannot be created (DeviceError, passed on) or gets another GPU-instance id than its
    GRES record's (``gres``; the job is requeued), those made so far are destroyed."""
    model = get_model(a.model)
    made: list[MigInstance] = []
    for task, pl in enumerate(a.instance_placements()):
        try:
            inst = _create_one(a, pl, job, backend, out)
        except DeviceError as exc:
            out.warn(f"cannot create task {task}'s {describe(a.profile, pl, a.gpu)}: {exc}")
            _undo(made, job, backend, out, exc)
            raise
        made.append(inst)
        want = gi_id_for(model, pl) if gres else None
        if want is not None and inst.gi_id != want:
            _undo(made, job, backend, out)
            return Refusal(
                job.job_id,
                "requeue",
                f"the driver gave task {task}'s {describe_item(inst)} GPU-instance id "
                f"{inst.gi_id}, but the job's GRES record opens the capability nodes of id "
                f"{want}; destroyed the job's {len(made)} instance(s) (report this GPU's "
                "numbering to the slurm-mig developers)",
            )
    ready = clock()
    rec = job_record(a, job, made[0].uuid, ready, ready, False, tuple(i.uuid for i in made[1:]))
    out.say(f"created {describe_item(rec)} in {ready - start:.2f} s; {plan_text(a)}")
    return rec


def _create_one(
    a: Assignment, pl: Placement, job: JobEnv, backend: MigBackend, out: Outcome
) -> MigInstance:
    """One instance of the gang at ``pl``, timed for the node metrics."""
    began = time.monotonic()
    inst = backend.create(a.gpu, a.profile, pl, job_id=job.job_id)
    out.event("create", a.profile, time.monotonic() - began)
    return inst


def _undo(
    made: list[MigInstance],
    job: JobEnv,
    backend: MigBackend,
    out: Outcome,
    cause: DeviceError | None = None,
) -> None:
    """Destroy the gang's instances ``made`` so far (each tried); one that cannot be
    destroyed is named, and a node fault among them passes on (the node drains: the
    admin finds what is left) unless ``cause`` is a node fault already."""
    if not made:
        return
    _, failed = destroy_each(backend, made[0].gpu, [i.uuid for i in made], job.job_id, out)
    left = [i for i in made if i.uuid in failed]
    for i in left:
        out.warn(f"cannot destroy {describe_item(i)} of the unfinished gang: {failed[i.uuid]}")
    if not left:
        out.say(f"destroyed the {len(made)} instance(s) of the unfinished gang")
    error = worst(failed)
    if error is not None and error.node_fault and not (cause is not None and cause.node_fault):
        raise error
