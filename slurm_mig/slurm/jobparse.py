"""Jobs and nodes from Slurm's JSON (``squeue --json``, ``sinfo --json -N`` of 22.05
to 26.05) and from pyslurm's job objects, as `Job` and `Node` records."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from .jobtypes import (
    HELD_REASONS,
    REASON_CODE_RE,
    STATE_DESCRIPTIONS,
    UNFINISHED_STATES,
    Job,
    Node,
)

__all__ = [
    "PyslurmDisagrees",
    "array_task_ids",
    "exit_code",
    "job_from_json",
    "jobs_from_json",
    "load_pyslurm",
    "nodes_from_json",
    "pyslurm_job_records",
    "reason_from_pyslurm",
    "time_limit_seconds",
]

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
_UNLIMITED_MINUTES = 525600  # 365 days: how 22.05 reports an unlimited job once started
_NO_VAL32 = 0xFFFFFFFE  # INFINITE / NO_VAL in raw 32-bit fields
_TASK_RANGE_RE = re.compile(r"([0-9]{1,10})(?:-([0-9]{1,10})(?::([0-9]{1,10}))?)?")
_MAX_ARRAY_TASKS = 4_000_001  # Slurm's MaxArraySize is at most 4,000,001
# the client's logger: these warnings read as they did when this was part of it
log = logging.getLogger("slurm_mig.slurm.client")


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


def exit_code(value: Any) -> int | None:
    """A job's exit status (128 + signal when killed) from 22.05's raw wait status or
    23.x+'s ``{"status", "return_code", "signal"}``; None when unset."""
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


def time_limit_seconds(value: Any) -> float | None:
    """A time limit in minutes as seconds; None for unlimited (unset, or 365 days)."""
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
        time_limit=time_limit_seconds(data.get("time_limit")),
        submit_time=_time(data.get("submit_time")),
        start_time=None if state == "PENDING" else _time(data.get("start_time")),
        end_time=_time(data.get("end_time")) if ended else None,
        restart_count=int(_number(data.get("restart_cnt")) or 0),
        exit_code=exit_code(data.get("exit_code")) if ended else None,
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
        array_throttle=_throttle(data),
        het_job=bool(_number(data.get("het_job_id"))),
        node_count=node_count_value(data.get("node_count")),
    )


def node_count_value(value: Any) -> int:
    """A job's node count (1 when unset or out of Slurm's range)."""
    n = _number(value)
    return int(n) if n is not None and 1 <= n < _NO_VAL32 else 1


def _throttle(data: Mapping[str, Any]) -> int | None:
    """``array_max_tasks`` (every task of an array shows its array's ``%N``), None when
    the record has none (0: no throttle; not an array task, or not squeue's JSON)."""
    if data.get("array_max_tasks") is None or not _number(data.get("array_job_id")):
        return None
    n = _number(data.get("array_max_tasks"))
    return int(n) if n is not None and 0 < n < _MAX_ARRAY_TASKS else None


def _json_job_id(data: Mapping[str, Any]) -> str:
    """An array task's ``<array id>_<task>`` (as `fixedwidth` reads it), else the job id."""
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


def load_pyslurm() -> Any | None:
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
    if REASON_CODE_RE.fullmatch(text):
        return text, ""
    code, colon, _ = text.partition(":")  # "RaisedSignal:9(Killed)" (job_mgr.c)
    if colon and REASON_CODE_RE.fullmatch(code):
        return code, text
    code = STATE_DESCRIPTIONS.get(text)
    if code is None:
        raise PyslurmDisagrees(f"pyslurm gives no reason code for {text!r}")
    return code, text


def pyslurm_job_records(pyslurm: Any) -> list[dict[str, Any]]:
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
                "het_job_id": getattr(j, "het_job_id", None),
                "node_count": getattr(j, "num_nodes", None),
            }
        )
    return records
