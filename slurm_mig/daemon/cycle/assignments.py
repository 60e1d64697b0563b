"""Step 4 of the cycle: the driver's standing plans and releases as `Assignment`s (a
plan that did not change keeps its record), and the requeues of jobs a policy moves."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import replace

from ...geometry import GpuModel, Slot, task_size
from ...planner.decisions import Decisions, Move, Place
from ...planner.snapshot import ClusterSnapshot
from ...slurm.assignment import Assignment, plan_id
from ...slurm.jobrecord import job_sort_key
from .actions import Requeue
from .classify import Classified
from .inputs import CycleInput, Estimate

__all__ = ["assignments"]


def assignments(
    snap: CycleInput,
    view: Classified,
    groups: Sequence[ClusterSnapshot],
    decisions: Sequence[Decisions],
) -> tuple[dict[str, Assignment], list[str], list[Requeue]]:
    """Step 4: every held job's assignment after this cycle (standing and released),
    the jobs released now, and the requeues of moved jobs."""
    now = snap.now
    final: dict[str, Assignment] = {}
    released: list[str] = []
    requeues: list[Requeue] = []
    next_batch = view.max_batch + 1
    for snap_g, got in zip(groups, decisions):
        for jid, p in got.planned.items():
            final[jid] = _assignment(
                view, snap_g, now, jid, p.gpu, p.slot, p.batch, p.order, p.seconds, snap.estimates
            )
        orders: dict[int, int] = defaultdict(int)
        for op in got.ops:
            if type(op) is Place and op.more:
                continue  # N instances of a fixed layout: refused in `classify`
            if type(op) is Place:
                seconds = op.end - op.start
                if not math.isfinite(seconds):
                    seconds = snap_g.pending[op.job].time(op.slot.size)
                if not got.numbered:  # placed now: numbered after every batch so far
                    batch, order = next_batch, orders[op.gpu]
                    orders[op.gpu] += 1
                else:
                    batch, order = op.batch, op.order
                final[op.job] = _assignment(
                    view,
                    snap_g,
                    now,
                    op.job,
                    op.gpu,
                    op.slot,
                    batch,
                    order,
                    seconds,
                    snap.estimates,
                )
                released.append(op.job)
            elif type(op) is Move:
                job = view.jobs.get(op.job)
                if job is None or snap.moved_up.get(op.job, (-1, 0))[0] > job.restart_count:
                    continue  # gone, or its requeue sent and not yet carried out by Slurm
                run = snap_g.running.get(op.job)
                up = op.slot.size if run is not None and op.slot.size > run.slot.size else 0
                where = f"a larger slice ({up} slices)" if up else "another slice"
                why = f"{snap.algorithm} moves it to {where}"
                requeues.append(Requeue(op.job, why, up, job.restart_count + 1))
    return final, sorted(set(released), key=job_sort_key), requeues


def _assignment(
    view: Classified,
    snap: ClusterSnapshot,
    now: float,
    jid: str,
    g: int,
    slot: Slot,
    batch: int,
    order: int,
    seconds: float,
    estimates: Mapping[str, Estimate],
) -> Assignment:
    """The record of a plan; a standing one that did not change keeps its own. Its
    count of instances is the job's estimate's (its planner job is not built here)."""
    gpu, model = snap.gpus[g], snap.model
    est = estimates.get(jid)
    tasks = est.tasks if est is not None else 1
    a = Assignment(
        job_id=jid,
        restart=view.jobs[jid].restart_count,
        node=gpu.node,
        gpu=gpu.local,
        model=model.name,
        profile=_profile(model, slot, tasks),
        placement=slot.placement,
        batch=batch,
        order=order,
        planned_seconds=seconds,
        issued=now,
        tasks=tasks,
    )
    old = view.kept.get(jid)
    if old is not None and _same_plan(old, a):
        return old
    return replace(a, plan=plan_id(a))


def _profile(model: GpuModel, slot: Slot, tasks: int) -> str:
    """The profile of each instance of a plan on ``slot``: the slot's own for a single
    job; for a job of ``tasks`` instances, the task size its region holds ``tasks``
    times (`geometry.task_size`), ``placement`` staying the region's."""
    if tasks == 1:
        return model.profile_for_slot(slot).name
    size = task_size(model, slot.size, tasks)
    if size is None:  # the planner placed it on a region that holds no gang: a bug
        raise ValueError(f"{model.name} slot of {slot.size} slices holds no {tasks} instances")
    return model.profile_for_size(size).name


def _same_plan(a: Assignment, b: Assignment) -> bool:
    return (a.node, a.gpu, a.model, a.profile, a.placement, a.batch, a.order, a.tasks) == (
        b.node,
        b.gpu,
        b.model,
        b.profile,
        b.placement,
        b.batch,
        b.order,
        b.tasks,
    ) and math.isclose(a.planned_seconds, b.planned_seconds, rel_tol=1e-9, abs_tol=1e-9)
