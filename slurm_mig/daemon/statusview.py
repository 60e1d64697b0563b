"""What ``slurm-mig status`` shows, as plain data: per node and GPU the live instances
(profile, placement, UUID, job, user, since, time left), the free slices, the largest free
block and the fragmentation cost, and the queue with each planned job's GPU, profile
and projected start.

Pure: built from the planner's status file (its last cycle's snapshots and
projections), squeue's jobs and the nodes' records as they reported them
(`receiver.node_records`: MIG UUIDs, when each instance became ready, kept
instances). The CLI draws it. Every string in it is printable (`safetext.printable`: a job name's
escape sequences shown as ``\x1b``), whichever way it is drawn. It lives in the slurm
package beside the web page (`web`) that draws it too, so that no top-level module and
the slurm package import each other.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ..geometry import GeometryError, GpuModel, Placement, get_model
from ..safetext import printable

__all__ = [
    "LONG",
    "SHORT",
    "GpuRow",
    "InstanceRow",
    "QueueRow",
    "StatusView",
    "ago",
    "build_view",
    "largest_free",
    "left_text",
    "span",
    "when",
]

# characters a view keeps of a Slurm-sourced string (job names, users, reasons)
SHORT, LONG = 128, 1000


@dataclass(frozen=True)
class InstanceRow:
    profile: str
    placement: tuple[int, int]  # start, size (memory slices)
    uuid: str  # "" when this host cannot read the node's records; "(no record yet)"
    job: str  # "" for a kept or orphan instance
    user: str
    since: float | None  # when it became ready for its job
    # running: seconds past its planned runtime (negative: that many left); `left_text`
    drift: float | None
    note: str = ""  # e.g. "kept for job 12"
    name: str = ""  # the job's name, as squeue shows it

    @property
    def left(self) -> float | None:
        """Seconds of its planned runtime left (negative: late by that much)."""
        return None if self.drift is None else -self.drift


@dataclass(frozen=True)
class GpuRow:
    node: str
    gpu: int
    model: str
    slices: int  # compute slices of the GPU
    busy: int  # compute slices of instances that run (or are about to run) a job
    free: int  # compute slices not held by any instance
    largest_free: str  # the largest profile that could be created now ("" none)
    fragmentation: float  # 1 - largest free block / free slices (0: all in one block)
    instances: tuple[InstanceRow, ...] = ()


@dataclass(frozen=True)
class QueueRow:
    job: str
    user: str
    name: str
    state: str  # planned | released | waiting | deferred | noted | not planned
    node: str
    gpu: int | None
    profile: str
    start: float | None  # projected start
    free_at: float | None  # when the slices it waits for are free
    why: str = ""
    priority: int | None = None  # Slurm's priority as the planner read it (held jobs)


@dataclass(frozen=True)
class StatusView:
    now: float
    cycle: int
    updated: float | None
    policy: str
    error: str | None
    next_batch_at: float | None
    gpus: tuple[GpuRow, ...] = ()
    queue: tuple[QueueRow, ...] = ()
    problems: tuple[str, ...] = field(default=())
    # the planner's last cycle is older than expected (or there is none): what to check
    stale: str = ""

    def to_json(self) -> dict[str, Any]:
        """The view as JSON data; each instance with ``left`` (seconds of its planned
        runtime left, negative once late) beside ``drift`` (the same, negated)."""
        data = asdict(self)
        for g in data["gpus"]:
            for i in g["instances"]:
                i["left"] = None if i["drift"] is None else -i["drift"]
        return data


def largest_free(model: GpuModel, held: Sequence[Placement]) -> tuple[str, int]:
    """The largest profile (name, compute slices) with a placement clear of ``held``."""
    best = ("", 0)
    for prof in model.profiles:
        if prof.compute_slices <= best[1]:
            continue
        if any(not any(p.overlaps(h) for h in held) for p in prof.placements):
            best = (prof.name, prof.compute_slices)
    return best


def _profile_slices(model: GpuModel, profile: str) -> int:
    """Compute slices of a row's instances (``4x1g.5gb``: four 1g; 0 when unknown)."""
    from .gangview import slice_slices

    return slice_slices(model, profile)


def _gang_names(projected: Mapping[str, Any]) -> dict[str, str]:
    """Job id -> its `gangview.slice_name` for the jobs of several slices projected
    (the planner's snapshot names only their region)."""
    return {
        str(j): str(p.get("profile", ""))
        for j, p in projected.items()
        if isinstance(p, Mapping) and isinstance(p.get("tasks"), int) and p["tasks"] > 1
    }


def _snapshot_rows(
    model: GpuModel,
    g: Mapping[str, Any],
    local: int,
    uuid_of: Mapping[tuple[Any, str], Any],
    by_id: Mapping[str, Any],
    drift: Mapping[str, Any],
    pending: str,
    gangs: Mapping[str, str] | None = None,
) -> tuple[list[InstanceRow], list[Placement], int]:
    """The rows of the instances in the GPU's last snapshot, their placements and the
    compute slices busy with a job (a job of several slices: one row, named as
    ``gangs`` says, its instances' slices); a released job not yet started is left to
    the queue."""
    from ..slurm.jobrecord import job_phase

    rows: list[InstanceRow] = []
    held: list[Placement] = []
    busy = 0
    for inst in g.get("instances") or []:
        pl = inst.get("placement") or {}
        placement = Placement(int(pl.get("start", 0)), int(pl.get("size", 0)))
        job_id = str(inst.get("job") or "")
        rec = uuid_of.get((local, job_id))
        sq = by_id.get(job_id)
        if job_id and rec is None and sq is not None and job_phase(sq.state) != "active":
            continue  # released, not started: in the queue (its slices may be busy)
        held.append(placement)
        profile = (gangs or {}).get(job_id) or str(inst.get("profile", ""))
        if job_id:
            busy += _profile_slices(model, profile)
        rows.append(
            InstanceRow(
                profile=printable(profile, SHORT),
                placement=(placement.start, placement.size),
                uuid=printable(rec.uuid, SHORT) if rec is not None else (pending if job_id else ""),
                job=printable(job_id, SHORT),
                user=printable(sq.user, SHORT) if sq is not None else "",
                since=rec.ready if rec is not None else _num(inst.get("ready_at")),
                drift=drift.get(job_id),
                note="" if job_id else _kept_note(inst),
                name=printable(sq.name, SHORT) if sq is not None else "",
            )
        )
    return rows, held, busy


def _released_rows(
    model: GpuModel,
    name: str,
    local: int,
    shown: set[str],
    projected: Mapping[str, Any],
    uuid_of: Mapping[tuple[Any, str], Any],
    by_id: Mapping[str, Any],
    drift: Mapping[str, Any],
    pending: str,
) -> tuple[list[InstanceRow], list[Placement], int]:
    """The rows of jobs released in the last cycle (after its snapshot) that run now on
    this GPU, their placements and compute slices."""
    from ..slurm.jobrecord import job_phase

    rows: list[InstanceRow] = []
    held: list[Placement] = []
    busy = 0
    for job_id, p in projected.items():
        sq = by_id.get(job_id)
        if job_id in shown or sq is None or job_phase(sq.state) != "active":
            continue
        if p.get("node") != name or p.get("gpu") != local or not p.get("placement"):
            continue
        placement = Placement(int(p["placement"][0]), int(p["placement"][1]))
        rec = uuid_of.get((local, job_id))
        held.append(placement)
        busy += _profile_slices(model, str(p.get("profile", "")))
        rows.append(
            InstanceRow(
                profile=printable(p.get("profile", ""), SHORT),
                placement=(placement.start, placement.size),
                uuid=printable(rec.uuid, SHORT) if rec is not None else pending,
                job=printable(job_id, SHORT),
                user=printable(sq.user, SHORT),
                since=rec.ready if rec is not None else sq.start_time,
                drift=drift.get(job_id),
                name=printable(sq.name, SHORT),
            )
        )
    return rows, held, busy


def _kept_rows(
    kept: Sequence[Any], local: int, held: Sequence[Placement]
) -> tuple[list[InstanceRow], list[Placement]]:
    """The rows of the node's kept instances on this GPU that no other row holds, and
    their placements."""
    rows: list[InstanceRow] = []
    taken = list(held)
    for k in kept:
        if int(k.gpu) != local or k.placement in taken:
            continue
        taken.append(k.placement)
        rows.append(
            InstanceRow(
                printable(k.profile, SHORT),
                (k.placement.start, k.placement.size),
                printable(k.uuid, SHORT),
                "",
                "",
                k.created,
                None,
                printable(
                    f"kept for job {k.for_job}" if k.for_job else "kept, to be destroyed",
                    SHORT,
                ),
            )
        )
    return rows, taken[len(held) :]


def _gpu_row(
    model: GpuModel,
    g: Mapping[str, Any],
    name: str,
    local: int,
    recs: Mapping[str, Any],
    status: Mapping[str, Any],
    by_id: Mapping[str, Any],
) -> GpuRow:
    """One GPU's row: its instances (snapshot, just released, kept), busy and free
    slices, the largest free profile and the fragmentation."""
    projected = status.get("projected") or {}
    drift = status.get("drift") or {}
    uuid_of = {(r.gpu, r.job_id): r for r in recs.get("jobs", ()) if int(r.gpu) == local}
    # the node's records are readable and name no instance (yet: squeue shows a job
    # running while its Prolog still prepares the instance)
    pending = "(no record yet)" if "jobs" in recs else ""
    gangs = _gang_names(projected)
    rows, held, busy = _snapshot_rows(model, g, local, uuid_of, by_id, drift, pending, gangs)
    shown = {r.job for r in rows}
    more, more_held, more_busy = _released_rows(
        model, name, local, shown, projected, uuid_of, by_id, drift, pending
    )
    rows, held, busy = rows + more, held + more_held, busy + more_busy
    kept, kept_held = _kept_rows(recs.get("kept", ()), local, held)
    rows, held = rows + kept, held + kept_held
    held_slices = sum(_profile_slices(model, r.profile) for r in rows)
    free = max(0, model.compute_slices - held_slices)
    big_name, big = largest_free(model, held)
    frag = round(1 - big / free, 3) if free else 0.0
    rows.sort(key=lambda r: r.placement)
    return GpuRow(
        name, local, model.name, model.compute_slices, busy, free, big_name, frag, tuple(rows)
    )


def _gpu_rows(
    status: Mapping[str, Any],
    by_id: Mapping[str, Any],
    records: Mapping[str, Mapping[str, Any]],
    node: str | None,
) -> list[GpuRow]:
    """The rows of every GPU in the status file (of ``node`` only, if given) whose
    model is known, by node and GPU index."""
    gpus: list[GpuRow] = []
    for group in status.get("state") or []:
        try:
            model = get_model(group.get("gpu_model", ""))
        except GeometryError:
            continue
        for g in group.get("gpus") or []:
            name, local = printable(g.get("node", ""), SHORT), int(g.get("local", 0))
            if node is not None and name != node:
                continue
            gpus.append(_gpu_row(model, g, name, local, records.get(name, {}), status, by_id))
    gpus.sort(key=lambda r: (r.node, r.gpu))
    return gpus


def _queue_state(
    j: Any, p: Mapping[str, Any] | None, deferred: Mapping[str, Any]
) -> tuple[str, str]:
    """A pending job's queue state and why it waits, from its projection, the planner's
    deferrals and its AdminComment note."""
    from ..slurm.jobrecord import ADMIN_TAG

    why = ""
    text = (j.admin_comment or "").strip()
    if text.startswith(ADMIN_TAG) and not text.startswith(ADMIN_TAG + "{"):
        why = text[len(ADMIN_TAG) :].strip()
    if p is not None and p.get("state") in ("planned", "released"):
        return p["state"], why
    if j.job_id in deferred:
        return "deferred", str(deferred[j.job_id])
    if why.startswith("not planned:"):
        return "noted", why
    return "waiting", why


def _queue_rows(status: Mapping[str, Any], jobs: Sequence[Any], node: str | None) -> list[QueueRow]:
    """The pending jobs (planned on ``node`` only, if given) with their state, plan
    and priority, by projected start then job id."""
    from ..slurm.jobrecord import job_phase, job_sort_key

    projected = status.get("projected") or {}
    deferred = status.get("deferred") or {}
    priority = status.get("priority") or {}
    if not isinstance(priority, dict):
        priority = {}
    queue: list[QueueRow] = []
    for j in jobs:
        if job_phase(j.state) != "pending":
            continue
        p = projected.get(j.job_id)
        if node is not None and (p is None or p.get("node") != node):
            continue
        state, why = _queue_state(j, p, deferred)
        queue.append(
            QueueRow(
                printable(j.job_id, SHORT),
                printable(j.user, SHORT),
                printable(j.name, SHORT),
                state,
                printable(p.get("node", ""), SHORT) if p else "",
                int(p["gpu"]) if p and p.get("gpu") is not None else None,
                printable(p.get("profile", ""), SHORT) if p else "",
                _num(p.get("start")) if p else None,
                _num(p.get("free_at")) if p else None,
                printable(why, LONG),
                _prio(priority.get(j.job_id)),
            )
        )
    queue.sort(key=lambda q: (q.start is None, q.start or 0.0, job_sort_key(q.job)))
    return queue


def build_view(
    status: Mapping[str, Any],
    jobs: Sequence[Any],
    records: Mapping[str, Mapping[str, Any]],
    now: float,
    node: str | None = None,
) -> StatusView:
    """The view from the status file's JSON, squeue's jobs (with user, name, state,
    AdminComment) and ``records``: node -> {"jobs": [JobRecord], "kept": [KeptInstance]}
    (empty where unreadable). ``node`` keeps one node only."""
    by_id = {j.job_id: j for j in jobs}
    gpus = _gpu_rows(status, by_id, records, node)
    queue = _queue_rows(status, jobs, node)
    return StatusView(
        now=now,
        cycle=int(status.get("cycle", 0) or 0),
        updated=_num(status.get("finished")),
        policy=printable(status.get("policy", ""), SHORT),
        error=None if status.get("error") is None else printable(status["error"], LONG),
        next_batch_at=_num(status.get("next_batch_at")),
        gpus=tuple(gpus),
        queue=tuple(queue),
    )


def _prio(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**32:
        return value
    return None


def _kept_note(inst: Mapping[str, Any]) -> str:
    keep = inst.get("keep_for")
    return printable(f"kept for job {keep}", SHORT) if keep else "idle"


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) else None


def ago(t: float | None, now: float) -> str:
    """``23:07:10 (4s ago)``; "-" for None."""
    if t is None:
        return "-"
    d = now - t
    return f"{time.strftime('%H:%M:%S', time.localtime(t))} ({span(d)} ago)"


def span(seconds: float) -> str:
    """``41s``, ``3m05s``, ``2h10m``."""
    s = abs(int(round(seconds)))
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def left_text(drift: float | None) -> str:
    """What the "Left" column shows for a running job's ``drift`` (seconds past its
    planned runtime): ``4m10s`` left, ``late 41s`` once past it, "-" unknown."""
    if drift is None:
        return "-"
    return f"late {span(drift)}" if drift > 0 else span(-drift)


def when(t: float | None, now: float) -> str:
    """``23:08:36 (in 15s)``, ``(now)`` once due; "-" for None."""
    if t is None:
        return "-"
    clock = time.strftime("%H:%M:%S", time.localtime(t))
    return f"{clock} (now)" if t <= now + 0.5 else f"{clock} (in {span(t - now)})"
