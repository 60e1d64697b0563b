"""The plan summary anyone may read (``[paths] public_file``), for ``slurm-mig explain``.

The status file holds what only root may see (every job's instances, comments, keys of
learned runtimes); users get this instead: per job that waits for the planner (planned,
released and not started, or deferred), where it is planned (node, GPU index, profile,
placement), its projected start and end, when the slices it waits for are free, its
batch and place in the order, and why a deferred job is not planned yet; plus the
policy, its batch window and when the next batch is due. No user names, no MIG UUIDs,
no comments, nothing of running jobs beyond what waiting jobs wait for. Written 0644
through a temporary file and a rename; its directory is made 0755.
"""

from __future__ import annotations

import json
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
)
MAX_JOBS = 100_000
MAX_BYTES = 64 << 20  # what explain reads at most


def summary(report: Any) -> dict[str, Any]:
    """The public summary of one cycle's `CycleReport`."""
    r = report.result
    projected = report.extra.get("projected", {}) if report.extra else {}
    jobs: dict[str, dict[str, Any]] = {}
    if r is not None:
        for job_id in r.planned:
            p = projected.get(job_id)
            if p is not None and p.get("state") in ("planned", "released"):
                jobs[job_id] = {k: p.get(k) for k in FIELDS if k in p}
        for job_id, why in r.deferred.items():
            jobs.setdefault(job_id, {"state": "deferred", "why": str(why)[:300]})
    return {
        "updated": report.finished,
        "cycle": report.number,
        "error": bool(report.error),
        "policy": report.policy,
        "batch_window": report.batch_window,
        "next_batch_at": report.extra.get("next_batch_at") if report.extra else None,
        "max_planned": getattr(report, "max_planned", 0),
        "beyond": r.beyond if r is not None else 0,
        "jobs": dict(list(jobs.items())[:MAX_JOBS]),
    }


def write_public(path: Path, report: Any) -> str | None:
    """Write the summary of ``report`` to ``path``; None, or why it could not be."""
    try:
        write_atomic(path, json.dumps(summary(report), separators=(",", ":")), 0o644)
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
