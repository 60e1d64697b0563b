"""The Slurm job record as the planner reads and writes it: the AdminComment record
(``slurm-mig:{json}``, or a note), a job's phase, its sort key and its partition test.

Hooks-free readers (``explain``, ``statusview``, the projections, the daemon) use it
without loading the cycle.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import fields
from functools import lru_cache
from typing import Protocol

from ..geometry import Placement
from ..jobids import job_sort_key
from .assignment import Assignment, AssignmentError

__all__ = [
    "ACTIVE_STATES",
    "ADMIN_TAG",
    "PENDING_STATES",
    "JobLike",
    "admin_comment_for",
    "in_partition",
    "job_phase",
    "job_sort_key",
    "note_admin_comment",
    "parse_admin_comment",
    "record_fields",
]

ADMIN_TAG = "slurm-mig:"

# squeue states: busy while one of these (COMPLETING: the epilog still owns the instance)
ACTIVE_STATES = frozenset(
    {
        "RUNNING",
        "CONFIGURING",
        "COMPLETING",
        "SUSPENDED",
        "STOPPED",
        "SIGNALING",
        "RESIZING",
        "STAGE_OUT",
    }
)
PENDING_STATES = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"})


class JobLike(Protocol):
    """The fields of `slurm_mig.slurm.client.Job` the cycle reads."""

    job_id: str
    name: str
    partition: str
    state: str
    reason: str
    held: bool
    comment: str
    admin_comment: str
    required_nodes: str
    submit_time: float | None
    start_time: float | None
    end_time: float | None
    restart_count: int
    exit_code: int | None
    dependency: str
    eligible_time: float | None
    time_limit: float | None  # seconds; None: unlimited


# ---------------------------------------------------------------------------
# The AdminComment record


def admin_comment_for(a: Assignment) -> str:
    """``slurm-mig:{json}`` (keys sorted, no spaces: what ``json.dumps(a.to_json(),
    sort_keys=True, separators=(",", ":"))`` writes, built faster); ``issued`` is when
    the job was planned (the token carries its own issue time)."""
    keys = _KEYS if a.tasks != 1 else _SINGLE_KEYS  # a single job's record as before
    return ADMIN_TAG + "{" + ",".join(f'"{k}":{_json_value(getattr(a, k))}' for k in keys) + "}"


def _json_value(v: object) -> str:
    if v is None:
        return "null"
    if isinstance(v, str):
        return _json_str(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return int.__repr__(v)
    if isinstance(v, float) and math.isfinite(v):
        return float.__repr__(v)
    if isinstance(v, Placement):
        return f'{{"size":{v.size},"start":{v.start}}}'
    return json.dumps(v, sort_keys=True, separators=(",", ":"))


_json_str = json.encoder.encode_basestring_ascii
_KEYS = tuple(sorted(f.name for f in fields(Assignment)))
_SINGLE_KEYS = tuple(k for k in _KEYS if k != "tasks")


@lru_cache(maxsize=1 << 16)
def parse_admin_comment(text: str | None) -> Assignment | None:
    """The assignment an AdminComment holds, or None (none, a note, or unreadable).
    Memoised: a steady cycle reads the same records again."""
    raw = (text or "").strip()
    if not raw.startswith(ADMIN_TAG + "{"):
        return None
    try:
        return Assignment.from_json(json.loads(raw[len(ADMIN_TAG) :]))
    except (AssignmentError, ValueError, RecursionError):
        return None


def note_admin_comment(text: str) -> str:
    return f"{ADMIN_TAG} not planned: {text}"


# ---------------------------------------------------------------------------
# Phase, order, partition


def job_phase(state: str) -> str:
    """'active' (holds or may hold slices), 'pending' or 'done', from a squeue state."""
    if state in ACTIVE_STATES:  # the common one-word states, without the split
        return "active"
    if state in PENDING_STATES:
        return "pending"
    words = set(re.split(r"[\s,|+]+", (state or "").upper()))
    if words & ACTIVE_STATES:
        return "active"
    if words & PENDING_STATES:
        return "pending"
    return "done"


def in_partition(job: JobLike, partition: str) -> bool:
    """Whether ``partition`` is one of the job's (Slurm lists a pending job's several
    partitions with commas)."""
    return partition in [p.strip() for p in (job.partition or "").split(",")]


def record_fields(job: JobLike, a: Assignment) -> tuple[tuple[str, str], ...]:
    """The job fields that must change for Slurm to hold ``a``: the AdminComment record
    and the node list, each only when it differs (nothing is rewritten unchanged)."""
    fields_ = []
    old = parse_admin_comment(job.admin_comment)  # cached: no JSON when unchanged
    if old is None or a != old:
        fields_.append(("AdminComment", admin_comment_for(a)))
    if (job.required_nodes or "") != a.node:
        fields_.append(("ReqNodeList", a.node))
    return tuple(fields_)
