"""Jobs from squeue's fixed-width output (``squeue -h --states=all -r -O ...``): the
field layouts, narrow and wide, and the strict parse that gives the same `Job` records
as the JSON or says why it cannot be trusted (FastReadError)."""

from __future__ import annotations

import re
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from .jobparse import exit_code, node_count_value, time_limit_seconds
from .jobrecord import job_sort_key
from .jobtypes import (
    HELD_REASONS,
    REASON_CODE_RE,
    STATE_DESCRIPTIONS,
    UNFINISHED_STATES,
    Job,
)

__all__ = [
    "FAST_FIELDS",
    "FAST_FORMAT",
    "MAX_WIDE_IDS",
    "NARROW",
    "NARROW_FIELDS",
    "NARROW_WIDTHS",
    "RECORD_SIZE",
    "WIDE",
    "FastReadError",
    "FieldFilled",
    "FixedWidthLayout",
    "RecordMisfit",
    "jobs_from_fixed_width",
]

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
# No field shows an array's throttle (``%N``): with -r squeue drops it from ArrayTaskId
# and JobArrayID (22.05, 24.11, 26.05), so `Job.array_throttle` is None here and the
# cycle learns it from the tasks Slurm keeps pending for JobArrayTaskLimit.
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
    ("NumNodes", 12),  # what it asks for while pending
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
    unlimited; 365 days or more (INVALID: over 365 days) is unlimited, as `jobparse.time_limit_seconds`."""
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
    return time_limit_seconds(total // 60)


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
        return exit_code(raw)
    status, sig = int(m.group(2)), int(m.group(3))
    return 128 + sig if sig else status


@lru_cache(maxsize=4096)
def _fast_reason(text: str) -> tuple[str, str]:
    """(reason code, state description) from squeue's Reason, which is the state
    description when the job has one and the reason code otherwise. A description
    of one word could not be told from a code; slurmctld's own have several words
    (STATE_DESCRIPTIONS) or start with their code ("RaisedSignal:9(Killed)")."""
    if REASON_CODE_RE.fullmatch(text):
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
    return sorted(jobs.values(), key=lambda j: job_sort_key(j.job_id))


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
    # a byte that is not UTF-8 costs its own field its exact text (U+FFFD), never the read
    values = [c.rstrip(b" ").decode("utf-8", "replace") for c in cells[:-1]]
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
    _SUBMIT, _START, _END, _ELIGIBLE, _DEADLINE, _NICE, _NODE_COUNT, _ACCOUNT, _QOS, _RESERVATION,
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
    for i in (_PRIORITY, _RESTARTS, _UID, _NODE_COUNT):
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
        het_job=_HET_ID_RE.fullmatch(v[_ARRAY_ID]) is not None,
        node_count=node_count_value(v[_NODE_COUNT]),
    )
