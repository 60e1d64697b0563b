"""One squeue job's fixed-width record as the client's fast read meets it (slurm_mig.slurm.fixedwidth): the fields of a base job, changed per test."""

from __future__ import annotations

from slurm_mig.slurm.client import WIDE, FixedWidthLayout


def cell(value: str | bytes, width: int, cut: bool = True) -> bytes:
    """One field as squeue's _print_str prints it: cut to ``width`` bytes (unless
    ``cut`` is False, as for node lists and time limits) and padded with spaces."""
    raw = value.encode() if isinstance(value, str) else value
    if cut:
        raw = raw[:width]
    return raw.ljust(width, b" ")


BASE = {
    "JobID": "41",
    "JobArrayID": "41",
    "UserID": "0",
    "UserName": "root",
    "Partition": "mig",
    "State": "PENDING",
    "Reason": "JobHeldUser",
    "PriorityLong": "0",
    "NumNodes": "1",
    "RestartCnt": "0",
    "exit_code": "0",
    "SubmitTime": "1795633577",
    "StartTime": "N/A",
    "EndTime": "N/A",
    "EligibleTime": "N/A",
    "Deadline": "N/A",
    "Nice": "0",
    "Account": "(null)",
    "QOS": "normal",
    "Reservation": "(null)",
    "Dependency": "(null)",
    "Name": "train",
    "Comment": "mig:mem=4G",
    "admin_comment": "(null)",
    "TimeLimit": "10:00",
    "ReqNodes": "",
    "NodeList": "",
}


def record(layout: FixedWidthLayout = WIDE, **values: str | bytes) -> bytes:
    fields = {**BASE, **values}
    uncut = {"TimeLimit", "ReqNodes", "NodeList"}
    return b"".join(cell(fields[n], w, n not in uncut) for n, w in layout.fields) + b"\n"
