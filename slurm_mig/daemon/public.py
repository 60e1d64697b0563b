"""The plan summary anyone may read (``[paths] public_file``), for ``slurm-mig explain``.

The status file holds what only root may see (every job's instances, comments, keys of
learned runtimes); users get this instead: per job that waits for the planner (planned,
released and not started, or deferred), where it is planned (node, GPU index, profile,
placement), its projected start and end, when the slices it waits for are free, its
batch and place in the order, and why a deferred job is not planned yet; plus the
policy, its batch window and when the next batch is due; and per usable GPU (node, index,
model) its free compute slices and the profiles that could start on it now, for
``slurm-mig avail`` (`capacity`). No user or account names, no MIG UUIDs,
no comments, nothing of running jobs beyond what waiting jobs wait for: a deferred job's
reason is its category (`public_reason`: the limit's kind and value, the QOS by name,
never an association, account, reservation or dependency by name). Written 0644
through a temporary file and a rename; its directory is made 0755.

A cycle projects only what it plans; a job still waiting keeps the projection last
published for it (read back from the file) until it starts or leaves the queue, so
``explain`` does not lose it a cycle later. At most `MAX_JOBS` jobs.
"""

from __future__ import annotations

import heapq
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..safefs import write_atomic

FIELDS = (
    "state",
    "node",
    "gpu",
    "profile",
    "placement",
    "start",
    "end",
    "free_at",
    "batch",
    "order",
    "tasks",  # a job of several slices: its instances (profile is `gangview.slice_name`)
    "region",  # and the profile of the region that holds them (at placement)
    "model",  # and the GPU model (whose region it is)
)
MAX_JOBS = 100_000
MAX_GPUS = 10_000  # GPUs in the capacity list at most
MAX_BYTES = 64 << 20  # what explain reads at most


WAITING = ("planned", "released")


def summary(report: Any, previous: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The public summary of one cycle's `CycleReport`; ``previous``: the jobs of the
    last summary, whose projections carry over for the jobs that still wait."""
    r = report.result
    projected = report.extra.get("projected", {}) if report.extra else {}
    jobs: dict[str, dict[str, Any]] = {}
    if r is not None:
        for job_id, p in projected.items():
            if isinstance(p, dict) and p.get("state") in WAITING:
                jobs[job_id] = {k: p.get(k) for k in FIELDS if k in p}
        for job_id, why in r.deferred.items():
            jobs.setdefault(job_id, {"state": "deferred", "why": public_reason(str(why))})
        _priorities(jobs, getattr(r, "priority", {}) or {})
        if previous:
            waiting = _still_waiting(r, projected)
            for job_id, entry in previous.items():
                if len(jobs) >= MAX_JOBS:
                    break
                if job_id in jobs or job_id not in waiting or not isinstance(entry, dict):
                    continue
                if entry.get("state") in WAITING:
                    jobs[job_id] = {k: entry[k] for k in FIELDS if k in entry}
    return {
        "updated": report.finished,
        "cycle": report.number,
        "error": bool(report.error),
        "policy": report.policy,
        "batch_window": report.batch_window,
        "next_batch_at": report.extra.get("next_batch_at") if report.extra else None,
        "max_planned": getattr(report, "max_planned", 0),
        "reorder": getattr(report, "reorder", None),
        "beyond": r.beyond if r is not None else 0,
        "jobs": dict(list(jobs.items())[:MAX_JOBS]),
        "gpus": capacity(r.snapshots, projected) if r is not None else [],
    }


_LIMIT = re.compile(
    r"waits for a limit: (?:QOS ([\w.-]{1,64})|(association|account) \S{1,300}) "
    r"(\w{1,32})(=[\w/:.=-]{1,64})? reached \((\d{1,12}) in use\)"
)
_HOLDERS = {"association": "its association", "account": "an account it runs under"}
_SLURM_KEPT = re.compile(r"waits for a limit: Slurm kept it pending for ([A-Za-z]{1,64}) after")
_BEGIN = re.compile(r"waits for its begin time \(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\)")
_CATEGORIES = (  # (how the planner's reason starts, what the summary says)
    ("waits for its dependency", "waits for its dependency"),
    ("waits for its reservation", "waits for its reservation to start"),
    ("its reservation", "its reservation holds no usable node of the partition"),
    ("waits for a limit", "waits for a limit"),
    (  # `cycle.refused`: requeued from the same slices in a row
        "refused by its node",
        "its node refused its planned slices twice in a row: it waits for other slices, "
        "or is tried there again later",
    ),
)
UNNAMED = "kept back by the planner (its status, for administrators, says why)"


def public_reason(why: str) -> str:
    """What anyone may read of why a job is deferred: its category, with the limit's
    kind and value (a QOS by name), never an association's, account's, user's,
    reservation's or other job's name; an unknown reason says only that it waits."""
    m = _LIMIT.match(why)
    if m:
        qos, holder, kind, value, used = m.groups()
        scope = f"QOS {qos}" if qos else _HOLDERS[holder]
        return f"waits for a limit: {scope} {kind}{value or ''} reached ({used} in use)"
    m = _SLURM_KEPT.match(why)
    if m:
        return f"waits for a limit: Slurm kept it pending for {m.group(1)} after its release"
    m = _BEGIN.match(why)
    if m:
        return m.group(0)
    return next((said for start, said in _CATEGORIES if why.startswith(start)), UNNAMED)


def capacity(snapshots: Any, projected: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per usable GPU of the cycle's snapshots: node, gpu (index on the node), model,
    slices, free (compute slices no job holds, none kept for a job, none a waiting
    job's plan takes) and fits (the profiles with a placement clear of those, smallest
    first): what a job submitted now could get without waiting for another to end.
    Idle instances count as free (the planner repartitions them). At most `MAX_GPUS`;
    bit masks, each layout worked out once: a few milliseconds per thousand GPUs."""
    taken: dict[tuple[str, int], list[tuple[int, int, str]]] = {}
    for p in projected.values():
        pl = p.get("placement") if isinstance(p, dict) else None
        if not pl or p.get("node") is None or p.get("gpu") is None:
            continue
        key = (str(p["node"]), int(p["gpu"]))
        shape = p.get("region") or p.get("profile", "")  # a job of several slices: its region
        taken.setdefault(key, []).append((int(pl[0]), int(pl[1]), str(shape)))
    out: list[dict[str, Any]] = []
    for snap in snapshots:
        model = snap.model
        sizes = {prof.name: prof.compute_slices for prof in model.profiles}
        shapes = [  # name, memory-slice masks of its placements; smallest first
            (prof.name, [((1 << prof.memory_slices) - 1) << s for s in prof.starts])
            for prof in sorted(model.profiles, key=lambda x: (x.compute_slices, x.memory_slices))
        ]
        seen: dict[tuple[int, int], tuple[int, list[str]]] = {}
        for g in snap.gpus:
            if len(out) >= MAX_GPUS:
                return out
            memory = compute = 0
            for i in g.instances:
                if i.job or i.keep_for:
                    pl = i.slot.placement
                    memory |= ((1 << pl.size) - 1) << pl.start
                    compute |= ((1 << i.slot.size) - 1) << pl.start
            for start, size, profile in taken.get((g.node, g.local), ()):
                memory |= ((1 << size) - 1) << start
                compute |= ((1 << sizes.get(profile, size)) - 1) << start
            got = seen.get((memory, compute))
            if got is None:  # GPUs share layouts: each is worked out once
                busy = (compute & ((1 << model.compute_slices) - 1)).bit_count()
                fits = [n for n, masks in shapes if any(not m & memory for m in masks)]
                got = seen[memory, compute] = (model.compute_slices - busy, fits)
            out.append(
                {
                    "node": g.node,
                    "gpu": g.local,
                    "model": model.name,
                    "slices": model.compute_slices,
                    "free": got[0],
                    "fits": list(got[1]),
                }
            )
    return out


MAX_AHEAD = 5  # higher-priority jobs named per job that starts before them


def _priorities(jobs: dict[str, dict[str, Any]], priority: Mapping[str, int]) -> None:
    """Each job's priority, and for a job projected to start before jobs of higher
    priority, which (``ahead_of``: at most `MAX_AHEAD`), so that explain can say why."""
    if not priority:
        return
    for job_id, entry in jobs.items():
        if job_id in priority:
            entry["priority"] = int(priority[job_id])
    starts = sorted(
        (float(e["start"]), e["priority"], jid)
        for jid, e in jobs.items()
        if isinstance(e.get("start"), int | float) and "priority" in e
    )
    unplanned = heapq.nlargest(
        MAX_AHEAD,
        ((e["priority"], jid) for jid, e in jobs.items() if "priority" in e and "start" not in e),
    )
    top: list[tuple[int, str]] = []  # the highest priorities of the jobs starting later
    k = len(starts)
    for start, prio, jid in reversed(starts):
        while k > 0 and starts[k - 1][0] > start + 1.0:  # a second apart: not a tie
            k -= 1
            heapq.heappush(top, (starts[k][1], starts[k][2]))
            if len(top) > MAX_AHEAD:
                heapq.heappop(top)
        higher = sorted((x for x in [*top, *unplanned] if x[0] > prio), reverse=True)
        if higher:
            jobs[jid]["ahead_of"] = [other for _, other in higher[:MAX_AHEAD]]


def _still_waiting(result: Any, projected: Mapping[str, Any]) -> set[str]:
    """The jobs this cycle saw waiting: held (a snapshot's pending jobs) or released and
    not started (busy, projected as released)."""
    out: set[str] = set()
    for snap in result.snapshots:
        out.update(snap.pending)
        out.update(j for j in snap.running if (projected.get(j) or {}).get("state") == "released")
    return out


def write_public(path: Path, report: Any) -> str | None:
    """Write the summary of ``report`` to ``path`` (the projections it published for
    jobs that still wait carried over); None, or why it could not be."""
    last = read_public(path)
    try:
        data = summary(report, last["jobs"] if last else None)
        write_atomic(path, json.dumps(data, separators=(",", ":")), 0o644)
    except OSError as exc:
        return f"cannot write the public summary {path}: {exc.strerror or exc}"
    return None


def read_public(path: Path) -> dict[str, Any] | None:
    """The summary at ``path``, or None (off, missing, unreadable or not a summary)."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except OSError:
        return None
    if len(raw) > MAX_BYTES:
        return None
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("jobs"), dict):
        return None
    return data
