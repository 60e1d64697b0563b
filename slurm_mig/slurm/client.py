"""Slurm as slurm-mig sees it: jobs and nodes read from ``squeue --json`` and
``sinfo --json -N``, and the few changes the planner makes, through ``scontrol``.

Standard library only (the hooks import it). Commands get an argument vector, never a
shell, so values need no quoting: a Comment may hold spaces, quotes or ``$``.
Reads accept the JSON of Slurm 22.05 (numbers, ``job_state`` a string, node
``state`` + ``state_flags``) through 26.05 (numbers as ``{"set", "infinite",
"number"}``, states as lists, ``sinfo`` as records per node and partition);
tests/fixtures/slurm holds each release's captured output. Where pyslurm (>= 23.2,
``pyslurm.Jobs``) imports and no explicit environment was given, ``jobs()`` reads
through it instead of squeue, as long as it agrees with squeue (see
`reason_from_pyslurm`); everything else always uses the commands. Otherwise ``jobs()``
reads squeue's fixed-width output (`jobs_from_fixed_width`: 10,000 jobs cost 22.05's
``squeue --json`` 31 MB) and falls back to the JSON where that cannot be trusted.

What Slurm 22.05.8 does, measured on a loopback cluster (tests/e2e):
- ``squeue --json`` ignores ``-p``/``--states`` and lists every job slurmctld still
  keeps (finished ones for MinJobAge seconds); ``sinfo --json`` ignores ``-p``. We
  filter here. From 24.05 squeue honours ``-p``, and we pass it.
- From 23.11 plain ``sinfo --json`` groups nodes that share a partition and state:
  one record, one reason and one CPU range for all of them. ``-N`` gives one record
  per node and partition.
- ``time_limit`` is in minutes, null for an unlimited pending job and 525600
  (365 days) once an unlimited job started: both read as None (unlimited).
- ``exit_code`` is the raw wait status (768 = exit 3).
- a pending job's ``start_time``/``end_time`` are estimates or left over from a run
  before a requeue: read as None.
- a job requeued held after a Prolog failure or by ``scontrol requeuehold`` has
  ``state_reason`` JobHeldUser (its owner may release it) and the detail in
  ``state_description`` ("launch failed requeued held", "job requeued in held state"),
  which scontrol shows as the Reason.
"""

from __future__ import annotations

import json
import logging
import os
import re
import struct
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .sitepolicy import SitePolicy

# Jobs in these states have not ended: no end time, no exit code.
UNFINISHED_STATES = frozenset(
    {
        "PENDING",
        "RUNNING",
        "CONFIGURING",
        "SUSPENDED",
        "REQUEUED",
        "REQUEUE_HOLD",
        "REQUEUE_FED",
        "RESIZING",
        "STOPPED",
    }
)
# When a 23.x+ job_state list holds several names, the first of these wins (as
# Slurm's own job_state_string does); else the base state.
_STATE_FLAG_ORDER = (
    "COMPLETING",
    "CONFIGURING",
    "RESIZING",
    "REQUEUED",
    "REQUEUE_FED",
    "REQUEUE_HOLD",
    "SPECIAL_EXIT",
    "STOPPED",
    "REVOKED",
    "SIGNALING",
    "STAGE_OUT",
)
HELD_REASONS = frozenset(
    {
        "JobHeldUser",
        "JobHeldAdmin",
        "JobHoldMaxRequeue",
        "job_requeued_in_held_state",
        "launch_failed_requeued_held",
    }
)
# Holds the job's owner may lift with `scontrol release` (slurmctld's job_mgr.c lets
# a user release WAIT_HELD_USER and WAIT_RESV_DELETED, nothing else).
OWNER_RELEASABLE_REASONS = frozenset({"JobHeldUser", "ReservationDeleted"})
# The fixed descriptions slurmctld (job_mgr.c, job_scheduler.c; 22.05-26.05) gives
# pending jobs, by the reason code it sets with them: squeue's Reason and pyslurm show
# the description instead of the code.
STATE_DESCRIPTIONS = {
    "job requeued in held state": "JobHeldUser",
    "job requeued in special exit state": "JobHeldUser",
    "launch failed requeued held": "JobHeldUser",
    "user env retrieval failed requeued held": "JobHeldUser",
    "launch failure limit exceeded requeued held": "JobHoldMaxRequeue",
    # the partition has too few usable nodes (seen when a node drained)
    "Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority "
    "partitions": "Resources",
}
# Node states (base states and flags, as the JSON of 22.05-26.05 names them) in which
# no new job should be planned onto the node. Left out as usable: IDLE, MIXED,
# ALLOCATED, COMPLETING, RESERVED, PLANNED, CLOUD, EXTERNAL, DYNAMIC_NORM, UNDRAIN,
# REBOOT_CANCELED.
UNUSABLE_NODE_STATES = frozenset(
    {
        "BLOCKED",  # 25.11+: blocked by an exclusive topology allocation
        "DOWN",
        "DRAIN",
        "DRAINED",
        "DRAINING",
        "DYNAMIC_FUTURE",
        "ERROR",
        "FAIL",
        "FAILING",
        "FUTURE",
        "INVAL",
        "INVALID_REG",  # registered with a configuration that does not match slurm.conf
        "MAINT",
        "MAINTENANCE",
        "NOT_RESPONDING",
        "NO_RESPOND",
        "POWERED_DOWN",
        "POWER_DOWN",
        "POWER_DRAIN",
        "POWERING_DOWN",
        "POWERING_UP",
        "POWER_UP",
        "REBOOT_REQUESTED",
        "REBOOT_ISSUED",
        "UNKNOWN",
    }
)
_REASON_CODE_RE = re.compile(r"[A-Za-z0-9_]+")  # every job_state_reason_string, 22.05-26.05
_SQUEUE_HONOURS_PARTITION = (24, 5)
_UNLIMITED_MINUTES = 525600  # 365 days: how 22.05 reports an unlimited job once started
_NO_VAL32 = 0xFFFFFFFE  # INFINITE / NO_VAL in raw 32-bit fields
LIST_CHUNK = 256  # job ids per scontrol hold/release call (its command line stays short)
_JOB_ID_RE = re.compile(r"[0-9]+(?:_[0-9]+)?")
_TASK_RANGE_RE = re.compile(r"([0-9]{1,10})(?:-([0-9]{1,10})(?::([0-9]{1,10}))?)?")
_MAX_ARRAY_TASKS = 4_000_001  # Slurm's MaxArraySize is at most 4,000,001
_FIELD_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
log = logging.getLogger(__name__)


class SlurmError(RuntimeError):
    """A Slurm command that failed or is missing; the message says which and why."""

    def __init__(self, message: str, command: Sequence[str] = (), stderr: str = "") -> None:
        super().__init__(message)
        self.command = tuple(command)
        self.stderr = stderr


class _SlurmUnavailable(SlurmError):
    """The command is missing or did not finish in time."""


@dataclass(frozen=True)
class Job:
    """One job as slurmctld reports it (times in epoch seconds, None when unknown)."""

    job_id: str
    name: str
    user: str
    partition: str
    state: str  # PENDING RUNNING CONFIGURING COMPLETING COMPLETED FAILED CANCELLED ...
    reason: str  # state_reason, e.g. JobHeldAdmin, JobHeldUser, None
    held: bool  # pending with priority 0 (held by an admin, the user, or a requeue)
    comment: str
    admin_comment: str
    nodes: str  # allocated nodes ("" when pending)
    required_nodes: str  # ReqNodeList
    time_limit: float | None  # seconds; None = unlimited
    submit_time: float | None
    start_time: float | None  # None while pending
    end_time: float | None  # None until the job ended
    restart_count: int
    exit_code: int | None  # exit status, 128 + signal when killed; None until ended
    reason_detail: str = ""  # state_description, e.g. "launch failed requeued held"
    dependency: str = ""  # e.g. "afterany:41(unfulfilled)"; "" when none (or fulfilled)
    eligible_time: float | None = None  # --begin (or when it became eligible); None: unset
    deadline: float | None = None  # --deadline, absolute; None: none
    account: str = ""  # the account (association) the job runs under
    qos: str = ""  # its QOS ("" when unknown)
    nice: int = 0  # its nice value (lowers the priority)
    reservation: str = ""  # the reservation it asked for ("" when none)
    priority: int = 0  # Slurm's priority (0 while held: Slurm does not compute it then)
    uid: int | None = None  # the job's user id (None when unknown)

    @property
    def finished(self) -> bool:
        """True once the job ended (COMPLETING included)."""
        return self.state not in UNFINISHED_STATES

    @property
    def owner_can_release(self) -> bool:
        """Held in a way the job's owner may undo with ``scontrol release``."""
        return self.held and self.reason in OWNER_RELEASABLE_REASONS


@dataclass(frozen=True)
class Node:
    """One node: its state names (upper case, base state and flags), drain reason,
    CPU count and partitions."""

    name: str
    state: frozenset[str]
    reason: str
    cpus: int
    partitions: tuple[str, ...]

    @property
    def drained(self) -> bool:
        return bool(self.state & {"DRAIN", "DRAINED", "DRAINING"})

    @property
    def usable(self) -> bool:
        """False when the node is down, drained, failing or not responding."""
        return not (self.state & UNUSABLE_NODE_STATES)


# --- JSON of any version -> plain values -------------------------------------------
def _number(value: Any) -> float | None:
    """A number from a 22.05 plain value or a 23.x+ ``{"set", "infinite", "number"}``;
    None when unset or infinite."""
    if isinstance(value, dict):
        if value.get("set") is False or value.get("infinite"):
            return None
        value = value.get("number")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value


def _time(value: Any) -> float | None:
    n = _number(value)
    return float(n) if n else None


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _job_state(value: Any) -> str:
    if isinstance(value, list):
        names = [str(v).upper() for v in value]
        for flag in _STATE_FLAG_ORDER:
            if flag in names:
                return flag
        return names[0] if names else "UNKNOWN"
    return str(value).upper() if value else "UNKNOWN"


def _exit_code(value: Any) -> int | None:
    if isinstance(value, dict):  # 23.x+: {"status": [...], "return_code": .., "signal": ..}
        signal = value.get("signal")
        sig = _number(signal.get("id") if isinstance(signal, dict) else signal)
        if sig:
            return 128 + int(sig)
        code = _number(value.get("return_code"))
        return None if code is None else int(code)
    raw = _number(value)
    if raw is None or raw >= _NO_VAL32 or raw < 0:
        return None
    raw = int(raw)
    return 128 + (raw & 0x7F) if raw & 0x7F else raw >> 8


def _time_limit(value: Any) -> float | None:
    minutes = _number(value)
    if minutes is None or minutes >= _UNLIMITED_MINUTES or minutes >= _NO_VAL32:
        return None
    return float(minutes) * 60.0


def _uid(value: Any) -> int | None:
    n = _number(value)
    return int(n) if n is not None and 0 <= n < 2**32 else None


def job_from_json(data: Mapping[str, Any]) -> Job:
    """A Job from one entry of ``squeue --json``'s "jobs" (22.05 to 24.x)."""
    state = _job_state(data.get("job_state"))
    reason = _text(data.get("state_reason"))
    priority = _number(data.get("priority"))
    held = state == "PENDING" and (
        data.get("hold") is True or priority == 0 or reason in HELD_REASONS
    )
    ended = state not in UNFINISHED_STATES
    return Job(
        job_id=_json_job_id(data),
        name=_text(data.get("name")),
        user=_text(data.get("user_name")) or str(data.get("user_id", "")),
        partition=_text(data.get("partition")),
        state=state,
        reason=reason,
        held=held,
        comment=_text(data.get("comment")),
        admin_comment=_text(data.get("admin_comment")),
        nodes=_text(data.get("nodes")),
        required_nodes=_text(data.get("required_nodes")),
        time_limit=_time_limit(data.get("time_limit")),
        submit_time=_time(data.get("submit_time")),
        start_time=None if state == "PENDING" else _time(data.get("start_time")),
        end_time=_time(data.get("end_time")) if ended else None,
        restart_count=int(_number(data.get("restart_cnt")) or 0),
        exit_code=_exit_code(data.get("exit_code")) if ended else None,
        reason_detail=_text(data.get("state_description")),
        dependency=_text(data.get("dependency")),
        eligible_time=_time(data.get("eligible_time")),
        deadline=_time(data.get("deadline")),
        account=_text(data.get("account")),
        qos=_text(data.get("qos")),
        nice=int(_number(data.get("nice")) or 0),
        reservation=_text(data.get("resv_name")),
        priority=int(priority or 0),
        uid=_uid(data.get("user_id")),
    )


def _json_job_id(data: Mapping[str, Any]) -> str:
    """An array task's ``<array id>_<task>`` (as `_fast_job_id`), else the job id."""
    task = _number(data.get("array_task_id"))
    array = _number(data.get("array_job_id"))
    if task is not None and array and 0 <= task < _NO_VAL32:
        return f"{int(array)}_{int(task)}"
    return str(data.get("job_id", ""))


def jobs_from_json(data: Mapping[str, Any]) -> list[Job]:
    """The Jobs of one entry of ``squeue --json``'s "jobs": one per task of a job
    array's pending record (squeue -r lists those apart; the JSON does not), else
    `job_from_json`'s one. Tasks of a list squeue cut ("0-3,5,...": longer than
    SLURM_BITSTR_LEN) are left out, with a warning."""
    job = job_from_json(data)
    tasks = _text(data.get("array_task_string"))
    array = _number(data.get("array_job_id"))
    if not tasks or not array:
        return [job]
    ids = array_task_ids(tasks)
    if ids is None:
        log.warning(
            "job array %d: squeue --json lists its tasks as %r, which does not parse "
            "(set SLURM_BITSTR_LEN=0 for the planner); its pending tasks are left out",
            int(array),
            tasks[:80],
        )
        return []
    return [replace(job, job_id=f"{int(array)}_{t}") for t in ids]


def array_task_ids(text: str) -> list[int] | None:
    """The task ids of a job array's task list ("0-3", "1,3-5", "0-15:4", "0-9%2"),
    or None when it does not parse (a cut list ends in "...")."""
    ids: list[int] = []
    for part in text.split("%", 1)[0].split(","):
        m = _TASK_RANGE_RE.fullmatch(part)
        if m is None:
            return None
        first = int(m.group(1))
        last = int(m.group(2)) if m.group(2) else first
        step = int(m.group(3)) if m.group(3) else 1
        if last < first or step < 1 or (last - first) // step >= _MAX_ARRAY_TASKS:
            return None
        ids.extend(range(first, last + 1, step))
    return ids


def _node_states(base: Any, flags: Any) -> frozenset[str]:
    names = base if isinstance(base, list) else [base]
    names = [*names, *(flags if isinstance(flags, list) else [])]
    return frozenset(str(n).upper() for n in names if n)


def nodes_from_json(data: Mapping[str, Any]) -> list[Node]:
    """Nodes from ``sinfo --json -N`` (22.05/23.02's "nodes" list or 23.11+'s "sinfo"
    records, one per node and partition, merged here) or ``scontrol show nodes
    --json``. Plain 23.11+ ``sinfo --json`` groups nodes: its reason and CPUs are one
    node's, given to all of the group."""
    if isinstance(data.get("nodes"), list):
        return [
            Node(
                name=_text(n.get("name")),
                state=_node_states(n.get("state"), n.get("state_flags")),
                reason=_text(n.get("reason")),
                cpus=int(_number(n.get("cpus")) or 0),
                partitions=tuple(n.get("partitions") or ()),
            )
            for n in data["nodes"]
        ]
    merged: dict[str, Node] = {}
    for rec in data.get("sinfo") or ():
        names = (rec.get("nodes") or {}).get("nodes") or []
        part = _text((rec.get("partition") or {}).get("name"))
        reason = rec.get("reason")
        reason = _text(reason.get("description") if isinstance(reason, dict) else reason)
        cpus_rec = rec.get("cpus") or {}
        cpus = _number(cpus_rec.get("maximum")) if isinstance(cpus_rec, dict) else None
        state = _node_states((rec.get("node") or {}).get("state"), None)
        for name in names:
            old = merged.get(name)
            parts = (*old.partitions, part) if old else (part,)
            merged[name] = Node(
                name=name,
                state=state,
                reason=reason,
                cpus=int(cpus or (old.cpus if old else 0)),
                partitions=tuple(p for p in dict.fromkeys(parts) if p),
            )
    return list(merged.values())


def _load_pyslurm() -> Any | None:
    """The pyslurm module when it imports and has the 23.x ``Jobs`` API, else None."""
    try:
        import pyslurm  # type: ignore[import-not-found]
    except Exception:  # not installed, or built against another libslurm
        return None
    return pyslurm if hasattr(pyslurm, "Jobs") else None


class PyslurmDisagrees(ValueError):
    """pyslurm reported something the squeue JSON would say otherwise."""


def reason_from_pyslurm(text: Any) -> tuple[str, str]:
    """(reason code, description) from pyslurm's ``state_reason``, which is the job's
    state description when it has one ("job requeued in held state") and the reason
    code otherwise; PyslurmDisagrees for a description with no known code."""
    text = _text(text)
    if _REASON_CODE_RE.fullmatch(text):
        return text, ""
    code, colon, _ = text.partition(":")  # "RaisedSignal:9(Killed)" (job_mgr.c)
    if colon and _REASON_CODE_RE.fullmatch(code):
        return code, text
    code = STATE_DESCRIPTIONS.get(text)
    if code is None:
        raise PyslurmDisagrees(f"pyslurm gives no reason code for {text!r}")
    return code, text


def _pyslurm_job_records(pyslurm: Any) -> list[dict[str, Any]]:
    """pyslurm Job objects as squeue-JSON-shaped dicts, for job_from_json."""
    records = []
    for j in pyslurm.Jobs.load().values():
        reason, description = reason_from_pyslurm(j.state_reason)
        if getattr(j, "dependencies", None):
            # pyslurm gives the dependency as a dict without Slurm's (unfulfilled) state
            raise PyslurmDisagrees(f"job {j.id}: pyslurm gives no dependency text")
        if getattr(j, "array_id", None):
            # an array's pending tasks are one record there: squeue -r lists each task
            raise PyslurmDisagrees(f"job {j.id}: an array task (read through squeue)")
        records.append(
            {
                "job_id": j.id,
                "name": j.name,
                "user_name": j.user_name,
                "partition": j.partition,
                "job_state": j.state,
                "state_reason": reason,
                "state_description": description,
                "priority": j.priority,
                "comment": j.comment,
                "admin_comment": j.admin_comment,
                "nodes": j.allocated_nodes,
                "required_nodes": j.required_nodes,
                "time_limit": j.time_limit,
                "submit_time": j.submit_time,
                "start_time": j.start_time,
                "end_time": j.end_time,
                "restart_cnt": j.requeue_count,
                "exit_code": {"return_code": j.exit_code, "signal": j.exit_code_signal},
                "eligible_time": getattr(j, "eligible_time", None),
                "deadline": getattr(j, "deadline", None),
                "account": getattr(j, "account", ""),
                "qos": getattr(j, "qos", ""),
                "nice": getattr(j, "nice", 0),
                "resv_name": getattr(j, "reservation", ""),
                "user_id": getattr(j, "user_id", None),
            }
        )
    return records


# --- squeue's fixed-width output -----------------------------------------------------
# `squeue -h --states=all -r -O <name:width,...>` prints every field padded (or cut) to
# its width in bytes and a newline after each job: records of exactly RECORD_SIZE bytes.
# Values may hold any byte a user can put in a job name or comment (newlines too), so
# the output is cut into records by length, never split on a delimiter; anything that
# does not fit that shape or parse strictly makes the whole read fall back to JSON.
# Field names exist in 22.05, 24.11 and 26.05 (admin_comment and exit_code are not in
# the man page but in squeue's opts.c of all three). The fields squeue prints with no
# cut (TimeLimit, ReqNodes, NodeList: never a newline in them) come last, so one that
# overflows its width moves only its own record's newline, which is then missing.
FAST_FIELDS: tuple[tuple[str, int], ...] = (
    ("JobID", 12),  # the job's own numeric id (what the JSON's job_id is)
    ("JobArrayID", 24),  # an array task's <array id>_<task> (`_fast_job_id`)
    ("UserID", 12),
    ("UserName", 32),
    ("Partition", 32),
    ("State", 20),
    ("Reason", 1024),  # state_description when set (node lists too), else the reason code
    ("PriorityLong", 12),
    ("RestartCnt", 12),
    ("exit_code", 16),  # the raw wait status, or status:signal
    ("SubmitTime", 16),
    ("StartTime", 16),
    ("EndTime", 16),
    ("EligibleTime", 16),
    ("Deadline", 16),
    ("Nice", 12),
    ("Account", 64),
    ("QOS", 64),
    ("Reservation", 64),
    ("Dependency", 1024),
    ("Name", 200),
    ("Comment", 1025),  # Slurm caps a comment at 1024 bytes
    ("admin_comment", 1024),  # the planner's records are about 300
    ("TimeLimit", 16),
    ("ReqNodes", 128),
    ("NodeList", 128),
)
# The first read narrows the long text fields (squeue pads byte by byte: 10,000 jobs of
# the wide layout are 30 MB); a value that fills a narrow field is read again wide.
NARROW_WIDTHS = {
    "Reason": 96,  # "ReqNodeNotAvail, UnavailableNodes:<node list>"
    "Dependency": 256,  # the planner's afterany on up to nine jobs (28 bytes each)
    "Name": 128,
    "Comment": 384,
    "admin_comment": 512,
    "ReqNodes": 64,
    "NodeList": 64,
}
NARROW_FIELDS = tuple((name, NARROW_WIDTHS.get(name, width)) for name, width in FAST_FIELDS)


@dataclass(frozen=True)
class FixedWidthLayout:
    """One -O format: its fields and widths, and how a record of it unpacks (each
    field but its last byte, then that byte, a space unless the value filled the
    field; then the newline)."""

    fields: tuple[tuple[str, int], ...]

    @property
    def format(self) -> str:
        return ",".join(f"{name}:{width}" for name, width in self.fields)

    @property
    def record_size(self) -> int:
        return sum(width for _, width in self.fields) + 1

    @property
    def record(self) -> struct.Struct:
        return _record_struct(self.fields)


@lru_cache(maxsize=8)
def _record_struct(fields: tuple[tuple[str, int], ...]) -> struct.Struct:
    return struct.Struct("".join(f"{width - 1}s1s" for _, width in fields) + "1s")


WIDE = FixedWidthLayout(FAST_FIELDS)
NARROW = FixedWidthLayout(NARROW_FIELDS)
_WIDE_WIDTHS = dict(FAST_FIELDS)
# jobs read again wide after a narrow read, by id, at most; more: all of them wide
MAX_WIDE_IDS = 500
FAST_FORMAT = WIDE.format
RECORD_SIZE = WIDE.record_size
_PADS = (b" ",) * len(FAST_FIELDS)
_BUFFER_MAX = 31
_NULL = "(null)"  # what 22.05's printf prints for an unset text field
_DIGITS_RE = re.compile(r"[0-9]+")
_ARRAY_TASK_RE = re.compile(r"[0-9]+_[0-9]+")
_HET_ID_RE = re.compile(r"[0-9]+\+[0-9]+")
_NICE_RE = re.compile(r"-?[0-9]{1,10}")
_STATE_RE = re.compile(r"[A-Z][A-Z_]*")
_TIME_LIMIT_RE = re.compile(r"(?:([0-9]+)-)?(?:([0-9]+):)?([0-9]+):([0-9]{2})")
_EXIT_RE = re.compile(r"(-?[0-9]+)|([0-9]+):([0-9]+)")


class FastReadError(ValueError):
    """squeue's fixed-width output cannot be trusted; the message says why."""


class RecordMisfit(FastReadError):
    """A record of the wrong length: a node list longer than its field (squeue never
    cuts one) moves the newline."""


class FieldFilled(RecordMisfit):
    """A value filled its whole field: squeue may have cut it."""

    def __init__(self, message: str, field: str = "") -> None:
        super().__init__(message)
        self.field = field  # the field's -O name


def _epoch(text: str, field: str) -> float | None:
    """An epoch time as squeue prints it under SLURM_TIME_FORMAT=%s; None for N/A (0)
    and for the EndTime NONE (no time limit and an end still ahead: seen for jobs
    that a node failure ended while Slurm requeues them)."""
    if text == "N/A" or (text == "NONE" and field == "EndTime"):
        return None
    if not _DIGITS_RE.fullmatch(text):
        raise FastReadError(f"{field} {text!r} is not an epoch time")
    return float(text) or None


@lru_cache(maxsize=1024)
def _fast_time_limit(text: str) -> float | None:
    """TimeLimit ("1-00:00:00", "2:00:00", "30:00", UNLIMITED) in seconds, None for
    unlimited; 365 days or more (INVALID: over 365 days) is unlimited, as `_time_limit`."""
    if text in ("UNLIMITED", "INFINITE", "NOT_SET", "INVALID"):
        return None
    m = _TIME_LIMIT_RE.fullmatch(text)
    if m is None:
        raise FastReadError(f"TimeLimit {text!r} does not parse")
    days, hours, minutes, seconds = (int(g) if g else 0 for g in m.groups())
    if (m.group(2) and hours > 23) or minutes > 59 or seconds > 59:
        raise FastReadError(f"TimeLimit {text!r} does not parse")
    total = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    if total % 60:
        raise FastReadError(f"TimeLimit {text!r} is not whole minutes")
    return _time_limit(total // 60)


@lru_cache(maxsize=1024)
def _fast_exit_code(text: str) -> int | None:
    """exit_code as job_from_json reads it: the raw wait status (22.05) or
    "status:signal"; 128 + signal when killed."""
    m = _EXIT_RE.fullmatch(text)
    if m is None:
        raise FastReadError(f"exit_code {text!r} does not parse")
    if m.group(1) is not None:
        raw = int(m.group(1))
        if raw in (-1, -2):  # INFINITE / NO_VAL printed as int
            return None
        if raw < 0:
            raise FastReadError(f"exit_code {text!r} does not parse")
        return _exit_code(raw)
    status, sig = int(m.group(2)), int(m.group(3))
    return 128 + sig if sig else status


@lru_cache(maxsize=4096)
def _fast_reason(text: str) -> tuple[str, str]:
    """(reason code, state description) from squeue's Reason, which is the state
    description when the job has one and the reason code otherwise. A description
    of one word could not be told from a code; slurmctld's own have several words
    (STATE_DESCRIPTIONS) or start with their code ("RaisedSignal:9(Killed)")."""
    if _REASON_CODE_RE.fullmatch(text):
        return text, ""
    code = STATE_DESCRIPTIONS.get(text)
    if code is not None:
        return code, text
    m = re.match(r"([A-Za-z0-9_]+)[,:]", text)  # "ReqNodeNotAvail, UnavailableNodes:n1"
    if m:
        return m.group(1), text
    raise FastReadError(f"Reason {text!r} has no known reason code")


def jobs_from_fixed_width(
    out: bytes,
    layout: FixedWidthLayout = WIDE,
    previous: Mapping[bytes, Job] | None = None,
    keep: dict[bytes, Job] | None = None,
    filled: list[str] | None = None,
) -> list[Job]:
    """Jobs from ``squeue -h --states=all -r -O <layout.format>``
    (SLURM_TIME_FORMAT=%s), the same records job_from_json gives for squeue's JSON, in
    job id order; FastReadError when any byte of it does not fit (FieldFilled when a
    value filled its field: it may be cut). With ``filled``, such a job is left out
    and its id added there instead (to read again wide). A record found byte for byte
    in ``previous`` (the last read's ``keep``) is that job again, not parsed anew;
    ``keep`` gets every record of this read (a steady cycle reads the same 10,000)."""
    size = layout.record_size
    if len(out) % size:
        raise RecordMisfit(f"{len(out)} bytes are not a whole number of {size}-byte records")
    jobs: dict[str, Job] = {}
    seen: dict[str, bytes] = {}
    for n in range(len(out) // size):
        raw = out[n * size : (n + 1) * size]
        job = previous.get(raw) if previous is not None else None
        if job is None:
            try:
                job = _job_from_record(n, raw, layout)
            except FieldFilled as exc:
                if filled is None or _WIDE_WIDTHS[exc.field] <= dict(layout.fields)[exc.field]:
                    raise
                filled.append(_record_job_id(n, raw, layout))
                continue
        job_id = job.job_id
        if job_id in seen:  # a job listed twice (a pending array's tasks are apart)
            if seen[job_id] != raw:
                raise FastReadError(f"job {job_id} is listed twice with different fields")
            continue
        seen[job_id] = raw
        jobs[job_id] = job
        if keep is not None:
            keep[raw] = job
    return sorted(jobs.values(), key=_job_number)


def _job_number(job: Job) -> tuple[int, int]:
    """Job id order: a job's number, an array task's (array id, task id)."""
    number, _, task = job.job_id.partition("_")
    return int(number), int(task) if task else -1


def _fast_job_id(job_id: str, array_id: str) -> str:
    """The id the planner knows a job by: an array task's ``<array id>_<task>`` (which
    Slurm keeps when it splits a pending task into a record of its own with a new
    JobID, and which the hooks rebuild from SLURM_ARRAY_JOB_ID/SLURM_ARRAY_TASK_ID),
    else its JobID; FastReadError when either does not parse."""
    if not _DIGITS_RE.fullmatch(job_id):
        raise FastReadError(f"JobID {job_id!r} is not a number")
    if _ARRAY_TASK_RE.fullmatch(array_id):
        return array_id
    if _DIGITS_RE.fullmatch(array_id) or _HET_ID_RE.fullmatch(array_id):  # 6+1: hetjob
        return job_id
    raise FastReadError(f"JobArrayID {array_id!r} is not a job or array task id")


def _job_from_record(n: int, raw: bytes, layout: FixedWidthLayout) -> Job:
    items = layout.record.unpack(raw)
    cells = items[0::2]
    if items[1::2] != _PADS or cells[-1] != b"\n":
        _misfit(n, items, layout)
    try:
        values = [c.rstrip(b" ").decode() for c in cells[:-1]]
    except UnicodeDecodeError:
        raise FastReadError(f"record {n} is not UTF-8") from None
    return _job_from_fields(values)


def _record_job_id(n: int, raw: bytes, layout: FixedWidthLayout) -> str:
    """The job id of a record (its first two fields, as `_fast_job_id` reads them),
    checked."""
    first, second = layout.fields[0][1], layout.fields[1][1]
    job_id = raw[:first].rstrip(b" ").decode("ascii", "replace")
    array_id = raw[first : first + second].rstrip(b" ").decode("ascii", "replace")
    try:
        return _fast_job_id(job_id, array_id)
    except FastReadError:
        raise FastReadError(f"record {n} has no job id") from None


def _misfit(n: int, items: tuple[bytes, ...], layout: FixedWidthLayout) -> None:
    if items[-1] != b"\n":
        raise RecordMisfit(f"record {n} does not end in a newline")
    name, width = next(f for f, pad in zip(layout.fields, items[1::2], strict=True) if pad != b" ")
    raise FieldFilled(f"{name} fills its {width} bytes in record {n} (cut?)", name)


(
    _JOB_ID, _ARRAY_ID, _UID, _USER, _PARTITION, _STATE, _REASON, _PRIORITY, _RESTARTS, _EXIT,
    _SUBMIT, _START, _END, _ELIGIBLE, _DEADLINE, _NICE, _ACCOUNT, _QOS, _RESERVATION,
    _DEPENDENCY, _NAME, _COMMENT, _ADMIN,
    _TIME_LIMIT, _REQ_NODES, _NODES,
) = range(len(FAST_FIELDS))  # fmt: skip


def _text_field(value: str) -> str:
    return "" if value == _NULL else value


def _job_from_fields(v: Sequence[str]) -> Job:
    job_id = _fast_job_id(v[_JOB_ID], v[_ARRAY_ID])
    for i in (_PARTITION,):  # squeue copies it through a 32-byte buffer (Reason: no)
        if len(v[i].encode()) >= _BUFFER_MAX:
            raise FastReadError(
                f"{FAST_FIELDS[i][0]} {v[i]!r} may be cut by squeue's 32-byte buffer"
            )
    state = v[_STATE]
    if not _STATE_RE.fullmatch(state):
        raise FastReadError(f"State {state!r} is not a job state")
    reason, detail = _fast_reason(v[_REASON])
    for i in (_PRIORITY, _RESTARTS, _UID):
        if not _DIGITS_RE.fullmatch(v[i]):
            raise FastReadError(f"{FAST_FIELDS[i][0]} {v[i]!r} is not a number")
    user = v[_USER]
    if not user or (user == "nobody" and v[_UID] != "65534"):
        raise FastReadError(f"uid {v[_UID]} has no user name")
    if not _NICE_RE.fullmatch(v[_NICE]):
        raise FastReadError(f"Nice {v[_NICE]!r} is not a number")
    nice = int(v[_NICE])
    held = state == "PENDING" and (v[_PRIORITY] == "0" or reason in HELD_REASONS)
    ended = state not in UNFINISHED_STATES
    return Job(
        job_id=job_id,
        name=_text_field(v[_NAME]),
        user=user,
        partition=v[_PARTITION],
        state=state,
        reason=reason,
        held=held,
        comment=_text_field(v[_COMMENT]),
        admin_comment=_text_field(v[_ADMIN]),
        nodes=_text_field(v[_NODES]),
        required_nodes=_text_field(v[_REQ_NODES]),
        time_limit=_fast_time_limit(v[_TIME_LIMIT]),
        submit_time=_epoch(v[_SUBMIT], "SubmitTime"),
        start_time=None if state == "PENDING" else _epoch(v[_START], "StartTime"),
        end_time=_epoch(v[_END], "EndTime") if ended else None,
        restart_count=int(v[_RESTARTS]),
        exit_code=_fast_exit_code(v[_EXIT]) if ended else None,
        reason_detail=detail,
        dependency=_text_field(v[_DEPENDENCY]),
        eligible_time=_epoch(v[_ELIGIBLE], "EligibleTime"),
        deadline=_epoch(v[_DEADLINE], "Deadline"),
        account=_text_field(v[_ACCOUNT]),
        qos=_text_field(v[_QOS]),
        nice=nice,
        reservation=_text_field(v[_RESERVATION]),
        priority=int(v[_PRIORITY]),
        uid=int(v[_UID]),
    )


SHARES_REFRESH = 60.0  # seconds between reads of sshare's fairshare factors


# --- the client ----------------------------------------------------------------------
class SlurmClient:
    """Reads jobs and nodes and makes slurm-mig's changes (hold, release, requeue,
    job updates, drain) through Slurm's commands."""

    # Read jobs from squeue's fixed-width output (`jobs_from_fixed_width`) before the
    # JSON; False: always the JSON (a test, or an instance, may set either).
    fast_read: bool = True

    def __init__(
        self,
        env: Mapping[str, str] | None = None,
        timeout: float = 30.0,
        fast_read: bool | None = None,
    ) -> None:
        self.env = dict(env) if env is not None else None
        self.timeout = timeout
        if fast_read is not None:
            self.fast_read = fast_read
        self.last_read = ""  # "pyslurm", "fixed-width" or "json": how jobs() last read
        self._records: dict[bytes, Job] = {}  # the last fixed-width read's, by record
        self._pyslurm = _load_pyslurm() if env is None else None
        self._version: tuple[int, ...] | None = None

    def _run(self, *argv: str) -> str:
        return self._exec(list(argv), self.env, text=True)

    def _exec(self, cmd: list[str], env: Mapping[str, str] | None, text: bool) -> Any:
        try:
            res = subprocess.run(cmd, env=env, capture_output=True, text=text, timeout=self.timeout)
        except FileNotFoundError:
            raise _SlurmUnavailable(
                f"'{cmd[0]}' not found: Slurm's client tools are not installed or not on "
                "PATH (install slurm-client, e.g. apt-get install slurm-client)",
                cmd,
            ) from None
        except subprocess.TimeoutExpired:
            raise _SlurmUnavailable(
                f"'{' '.join(cmd)}' did not finish within {self.timeout:.0f} s "
                "(is slurmctld up and reachable?)",
                cmd,
            ) from None
        except ValueError as exc:  # e.g. an embedded NUL byte
            raise SlurmError(f"'{' '.join(cmd)}': invalid argument: {exc}", cmd) from None
        if res.returncode != 0:
            stderr = res.stderr if text else res.stderr.decode(errors="replace")
            stdout = res.stdout if text else res.stdout.decode(errors="replace")
            err = stderr.strip() or stdout.strip() or f"exit status {res.returncode}"
            raise SlurmError(f"'{' '.join(cmd)}' failed: {err}", cmd, stderr)
        return res.stdout

    def _json(self, *argv: str) -> dict[str, Any]:
        out = self._run(*argv)
        try:
            data = json.loads(out)
        except json.JSONDecodeError as exc:
            raise SlurmError(
                f"'{' '.join(argv)}' printed no JSON ({exc}); Slurm 21.08 or newer is needed",
                argv,
            ) from None
        errors = [_error_text(e) for e in data.get("errors") or () if e]
        if errors:  # 22.05 exits 0 with these when slurmctld cannot be reached
            raise SlurmError(f"'{' '.join(argv)}' failed: {'; '.join(errors)}", argv)
        return data

    # reads
    def version(self) -> tuple[int, ...]:
        """The Slurm release of the client commands, (22, 5, 8); (0,) when unknown.
        Asked once (``sinfo --version``)."""
        if self._version is None:
            try:
                text = self._run("sinfo", "--version")
            except SlurmError:
                text = ""
            m = re.search(r"\b(\d+)\.(\d+)(?:\.(\d+))?", text)
            self._version = tuple(int(g) for g in m.groups() if g) if m else (0,)
        return self._version

    def jobs(self, partition: str | None = None) -> list[Job]:
        """Every job slurmctld knows (finished ones too, for MinJobAge), optionally
        only those of one partition."""
        records = None
        jobs = None
        if self._pyslurm is not None:
            try:
                records = _pyslurm_job_records(self._pyslurm)
                self.last_read = "pyslurm"
            except Exception:  # out of step with libslurm, or disagrees: the commands
                records = None
        if records is None and self.fast_read:
            jobs = self._fast_jobs(partition)
        if records is None and jobs is None:
            argv = ["squeue", "--json", "--states=all"]
            if partition is not None and self.version() >= _SQUEUE_HONOURS_PARTITION:
                argv.append(f"--partition={partition}")  # slurmctld reads only that one
            records = self._json(*argv).get("jobs") or []
            self.last_read = "json"
        if jobs is None:
            jobs = [j for r in records or () for j in jobs_from_json(r)]
        if partition is not None:
            jobs = [j for j in jobs if j.partition == partition]
        return jobs

    def _fast_jobs(self, partition: str | None) -> list[Job] | None:
        """Jobs from squeue's fixed-width output, or None (with one log line saying
        why) when squeue refused the format or its output cannot be trusted: the
        caller then reads the JSON. A missing squeue or a timeout raises SlurmError,
        as the JSON path would."""
        env = {
            k: v
            for k, v in (os.environ if self.env is None else self.env).items()
            if not k.startswith("SQUEUE_")  # SQUEUE_USERS etc. would filter the list
        }
        env["SLURM_TIME_FORMAT"] = "%s"  # times as epoch seconds
        filled: list[str] = []
        keep: dict[bytes, Job] = {}
        try:
            jobs = self._fast_read(NARROW, partition, env, keep, filled)
        except RecordMisfit:  # an uncut field overran its narrow width: all of it wide
            keep, filled = {}, []
            jobs = self._fast_read(WIDE, partition, env, keep)
        if jobs is not None and filled:
            ids = list(dict.fromkeys(filled))
            if len(ids) > MAX_WIDE_IDS:  # a list that long costs as much as all of it
                keep = {}
                jobs = self._fast_read(WIDE, partition, env, keep)
            else:  # only those jobs again, wide: a few records, not 30 MB at 10,000 jobs
                more = self._fast_read(WIDE, partition, env, keep, ids=ids)
                jobs = None if more is None else sorted([*jobs, *more], key=_job_number)
        if jobs is None:
            return None
        self._records = keep
        self.last_read = "fixed-width"
        return jobs

    def _fast_read(
        self,
        layout: FixedWidthLayout,
        partition: str | None,
        env: Mapping[str, str],
        keep: dict[bytes, Job],
        filled: list[str] | None = None,
        ids: Sequence[str] = (),
    ) -> list[Job] | None:
        """One ``squeue -O`` read in ``layout`` (of the jobs ``ids`` only, when given):
        its jobs, or None (with one log line) when the JSON must be read instead. A
        narrow read's records whose value filled a field that is wider in the wide
        layout go to ``filled``; a narrow record out of shape raises RecordMisfit."""
        argv = ["squeue", "-h", "--states=all", "-r", "-O", layout.format]
        if partition is not None:
            argv.append(f"--partition={partition}")
        if ids:
            argv.append("--jobs=" + ",".join(ids))
        try:
            out = self._exec(argv, env, text=False)
        except _SlurmUnavailable:
            raise  # squeue missing or slurmctld silent: the JSON would fare no better
        except SlurmError as exc:
            log.warning("squeue -O failed, reading the JSON instead: %s", exc)
            return None
        try:
            return jobs_from_fixed_width(out, layout, self._records, keep, filled)
        except RecordMisfit as exc:
            if layout is not WIDE and not isinstance(exc, FieldFilled):
                raise
            log.warning("squeue's fixed-width output read as JSON instead: %s", exc)
        except FastReadError as exc:
            log.warning("squeue's fixed-width output read as JSON instead: %s", exc)
        return None

    def nodes(self, partition: str | None = None) -> list[Node]:
        """Every node (optionally only those of one partition) with its state."""
        nodes = nodes_from_json(self._json("sinfo", "--json", "-N"))
        if partition is not None:
            nodes = [n for n in nodes if partition in n.partitions]
        return nodes

    def site_policy(self, refresh: float = 300.0) -> SitePolicy:
        """Slurm's policy as the planner reads it (`sitepolicy`): the association
        manager's associations and QOS with their usage and the active reservations,
        read anew at each call (two commands); the fairshare factors after
        `SHARES_REFRESH` seconds (Slurm recalculates them once a PriorityCalcPeriod, a
        minute at least), the priority weights and partitions after ``refresh``."""
        from ..config import expand_hostlist
        from . import sitepolicy

        now = time.monotonic()
        cached = getattr(self, "_site_static", None)
        if cached is None or now - cached[0] > refresh:
            weights = sitepolicy.parse_config(self._run("scontrol", "show", "config"))
            parts = sitepolicy.parse_partitions(self._run("scontrol", "-o", "show", "partition"))
            cached = self._site_static = (now, weights, parts)
        _, weights, parts = cached
        assocs, qos = sitepolicy.parse_assoc_mgr(
            self._run("scontrol", "-o", "show", "assoc_mgr", "flags=assoc,qos")
        )
        shared = getattr(self, "_site_shares", None)
        if shared is None or now - shared[0] > min(refresh, SHARES_REFRESH):
            try:  # six decimals where the association manager prints two
                shares = sitepolicy.parse_sshare(
                    self._run("sshare", "-a", "-P", "-n", "-o", "Account,User,FairShare")
                )
            except SlurmError:  # no accounting: no fairshare either
                shares = {}
            shared = self._site_shares = (now, shares)
        shares = shared[1]
        env = dict(os.environ if self.env is None else self.env)
        env["SLURM_TIME_FORMAT"] = "%s"
        resv = self._exec(["scontrol", "-o", "show", "reservation"], env, text=True)
        return sitepolicy.SitePolicy(
            weights=weights,
            assocs=assocs,
            qos=MappingProxyType(qos),
            partitions=MappingProxyType(parts),
            reservations=sitepolicy.parse_reservations(resv, expand_hostlist),
            fairshare=MappingProxyType(shares),
        )

    # changes
    def hold(self, job_id: str | int) -> None:
        """Hold a pending job (an admin hold when run as root: the user cannot release it)."""
        self._run("scontrol", "hold", _job_id(job_id))

    def release(self, job_id: str | int) -> None:
        self._run("scontrol", "release", _job_id(job_id))

    def hold_jobs(self, job_ids: Sequence[str | int]) -> dict[str, str]:
        """Hold many pending jobs with one ``scontrol hold a,b,...`` per `LIST_CHUNK`;
        returns {job id: error} for those that failed (found one by one only when the
        list call failed)."""
        return self._for_list("hold", job_ids)

    def release_jobs(self, job_ids: Sequence[str | int]) -> dict[str, str]:
        """`hold_jobs` for ``scontrol release``."""
        return self._for_list("release", job_ids)

    def _for_list(self, verb: str, job_ids: Sequence[str | int]) -> dict[str, str]:
        ids = [_job_id(j) for j in job_ids]
        failed: dict[str, str] = {}
        for i in range(0, len(ids), LIST_CHUNK):
            chunk = ids[i : i + LIST_CHUNK]
            try:
                self._run("scontrol", verb, ",".join(chunk))
                continue
            except SlurmError as exc:
                if len(chunk) == 1:
                    failed[chunk[0]] = str(exc)
                    continue
            for jid in chunk:  # which one: hold and release are idempotent
                try:
                    self._run("scontrol", verb, jid)
                except SlurmError as exc:
                    failed[jid] = str(exc)
        return failed

    def requeue(self, job_id: str | int, hold: bool = False) -> None:
        """Put a running or finished batch job back in the queue (held with hold=True);
        its restart count goes up by one."""
        self._run("scontrol", "requeuehold" if hold else "requeue", _job_id(job_id))

    def update_job(self, job_id: str | int, **fields: str) -> None:
        """``scontrol update JobId=.. Key=Value ...`` (NodeList, Comment, AdminComment,
        Gres, ...); an empty value clears the field."""
        if not fields:
            raise ValueError("update_job: give at least one field, e.g. Comment='...'")
        args = []
        for key, value in fields.items():
            if not _FIELD_RE.fullmatch(key):
                raise ValueError(f"update_job: {key!r} is not a Slurm job field name")
            args.append(f"{key}={value}")
        self._run("scontrol", "update", f"JobId={_job_id(job_id)}", *args)

    def drain_node(self, node: str, reason: str) -> None:
        """Drain a node: running jobs finish, no new ones start; ``reason`` shows in sinfo."""
        if not reason.strip():
            raise ValueError("drain_node: Slurm needs a reason to drain a node")
        self._run(
            "scontrol", "update", f"NodeName={_node_name(node)}", "State=DRAIN", f"Reason={reason}"
        )

    def resume_node(self, node: str) -> None:
        """Undo a drain."""
        self._run("scontrol", "update", f"NodeName={_node_name(node)}", "State=RESUME")


def _error_text(error: Any) -> str:
    if not isinstance(error, dict):
        return str(error)
    parts = [str(error[k]) for k in ("description", "error") if error.get(k)]
    return " (".join(parts) + ")" * (len(parts) - 1) if parts else str(error)


def _job_id(job_id: str | int) -> str:
    text = str(job_id)
    if not _JOB_ID_RE.fullmatch(text):
        raise ValueError(f"{text!r} is not a Slurm job id (digits, or 123_4 for an array task)")
    return text


def _node_name(node: str) -> str:
    if not node or any(c.isspace() for c in node) or "=" in node:
        raise ValueError(f"{node!r} is not a node name")
    return node
