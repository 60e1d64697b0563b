"""When each busy and planned job of a cycle is projected to start and end.

The same projection as ``planner.driver.projected_end`` (busy instances until their
jobs end, then the standing plans in order, each after the work on its slices and its
instance's creation, for its planned seconds), kept per job: `status` and `explain`
show it, the metrics measure drift against it. Pure: a cycle's result in, JSON out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ..geometry import Slot, task_size
from ..planner.decisions import Decisions, Place
from ..planner.snapshot import ClusterSnapshot, Instance, Planned

INF = math.inf


def _finite(x: float | None) -> float | None:
    return round(x, 3) if x is not None and math.isfinite(x) else None


def project_jobs(
    groups: Sequence[ClusterSnapshot], decisions: Sequence[Decisions]
) -> dict[str, dict[str, Any]]:
    """job id -> {node, gpu, profile, placement, state (running | released | planned),
    start, end, free_at (when the slices it waits for are free), batch, order, planned
    seconds} for every busy and planned job; times absolute, None when unknown. A job
    of several slices: ``profile`` is `gangview.slice_name` (``4x1g.5gb``), with
    ``tasks`` and ``region`` (its placement's profile) beside it."""
    out: dict[str, dict[str, Any]] = {}
    for snap, got in zip(groups, decisions):
        ends = [[-INF] * snap.model.memory_slices for _ in snap.gpus]
        running, waiting = _project_started(snap, ends)
        out.update(running)
        out.update(_project_released(snap, waiting, ends))
        out.update(_project_plans(snap, got, ends))
    return out


def _tasks(snap: ClusterSnapshot, job: str | None) -> int:
    """Instances job ``job`` of ``snap`` runs on (1 for a single job, or one unknown)."""
    if job is None:
        return 1
    run = snap.running.get(job)
    got = run.job if run is not None else snap.pending.get(job)
    return getattr(got, "tasks", 1) if got is not None else 1


def _where(snap: ClusterSnapshot, gpu: int, slot: Slot, job: str | None = None) -> dict[str, Any]:
    """Where a job runs, as `status` shows it: node, GPU index, profile and placement
    (a job of several slices: its instances as `gangview.slice_name`, and its region)."""
    from .gangview import slice_name

    g = snap.gpus[gpu]
    region = snap.model.profile_for_slot(slot).name
    out = {
        "node": g.node,
        "gpu": g.local,
        "profile": region,
        "placement": [slot.placement.start, slot.placement.size],
    }
    tasks = _tasks(snap, job)
    each = task_size(snap.model, slot.size, tasks) if tasks > 1 else None
    if each is not None:
        out["profile"] = slice_name(snap.model.profile_for_size(each).name, tasks)
        out["tasks"], out["region"], out["model"] = tasks, region, snap.model.name
    return out


def _occupy(ends: list[float], slot: Slot, until: float) -> None:
    """Marks the slices of ``slot`` on one GPU busy until at least ``until``."""
    p = slot.placement
    for s in range(p.start, p.end):
        ends[s] = max(ends[s], until)


def _project_started(
    snap: ClusterSnapshot, ends: list[list[float]]
) -> tuple[dict[str, dict[str, Any]], list[tuple[int, Instance]]]:
    """The started jobs' projections (their slices marked busy in ``ends`` until they
    end), and the released jobs not started yet: those go after the started ones."""
    now = snap.now
    out: dict[str, dict[str, Any]] = {}
    waiting: list[tuple[int, Instance]] = []
    for index, gpu in enumerate(snap.gpus):
        for inst in gpu.instances:
            if inst.job is None:
                continue
            run = snap.running.get(inst.job)
            if run is not None and run.started is None:
                waiting.append((index, inst))
                continue
            e = max(inst.busy_until if inst.busy_until is not None else INF, now)
            _occupy(ends[index], inst.slot, e)
            started = run.started if run is not None else inst.ready_at
            out[inst.job] = {
                **_where(snap, index, inst.slot, inst.job),
                "state": "running",
                "start": _finite(started),
                "end": _finite(e),
                "free_at": None,
                "seconds": None,
            }
    return out, waiting


def _project_released(
    snap: ClusterSnapshot, waiting: list[tuple[int, Instance]], ends: list[list[float]]
) -> dict[str, dict[str, Any]]:
    """The released jobs not started yet, by when they were ready: each starts once its
    slices are free and runs its planned seconds (its slices marked busy in ``ends``)."""
    now = snap.now
    out: dict[str, dict[str, Any]] = {}
    for index, inst in sorted(waiting, key=lambda w: (w[1].ready_at or 0.0, w[1].job)):
        p = inst.slot.placement
        free = max(ends[index][p.start : p.end])
        seconds = (inst.busy_until or now) - (inst.ready_at or now)
        begin = max(now, free)
        e = begin + max(0.0, seconds)
        _occupy(ends[index], inst.slot, e)
        out[inst.job] = {
            **_where(snap, index, inst.slot, inst.job),
            "state": "released",
            "start": _finite(begin),
            "end": _finite(e),
            "free_at": _finite(free) if free > now else None,
            "seconds": _finite(seconds),
        }
    return out


def _project_plans(
    snap: ClusterSnapshot, got: Decisions, ends: list[list[float]]
) -> dict[str, dict[str, Any]]:
    """The standing plans and this cycle's placements in batch order: each starts once
    its slices are free and its instance is made (its slices marked busy in ``ends``)."""
    model, now = snap.model, snap.now
    plans = list(got.planned.values()) + [
        Planned(p.job, p.gpu, p.slot, p.batch, p.order, p.end - p.start, now)
        for p in got.ops
        if type(p) is Place and math.isfinite(p.end - p.start)
    ]
    released = {p.job for p in got.ops if type(p) is Place}
    out: dict[str, dict[str, Any]] = {}
    for p in sorted(plans, key=lambda p: (p.batch, p.order, p.job)):
        pl = p.slot.placement
        free = max(ends[p.gpu][pl.start : pl.end])
        begin = max(now, free) + model.create_time(p.slot.size)
        e = begin + p.seconds
        _occupy(ends[p.gpu], p.slot, e)
        out[p.job] = {
            **_where(snap, p.gpu, p.slot, p.job),
            "state": "released" if p.job in released else "planned",
            "start": _finite(begin),
            "end": _finite(e),
            "free_at": _finite(free) if free > now else None,
            "seconds": _finite(p.seconds),
            "batch": p.batch,
            "order": p.order,
        }
    return out


def next_batch_at(decisions: Sequence[Decisions], now: float) -> float | None:
    """When the policy asked to be woken next (a batch window closing), if after now."""
    times = [d.wake_at for d in decisions if d.wake_at is not None and d.wake_at > now]
    return _finite(min(times)) if times else None


def running_drift(jobs: Sequence[Any], now: float) -> dict[str, float]:
    """Seconds each running job of ``jobs`` (squeue's, with their AdminComment records)
    is past its planned runtime: negative while it has time left, positive once late."""
    from ..slurm.jobrecord import job_phase, parse_admin_comment

    out = {}
    for job in jobs:
        a = parse_admin_comment(job.admin_comment)
        if a is None or job_phase(job.state) != "active" or not job.start_time:
            continue
        if a.restart != job.restart_count:
            continue
        out[job.job_id] = round(now - job.start_time - a.planned_seconds, 3)
    return out
