"""Running Slurm's commands: an argument vector (never a shell) with a timeout, a
failure or a missing command as a one-line SlurmError, their JSON read, and the job ids
and node names checked before they go on a command line."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "SlurmError",
    "SlurmUnavailable",
    "check_job_id",
    "check_node_name",
    "error_text",
    "parse_json_output",
    "run_command",
]

_JOB_ID_RE = re.compile(r"[0-9]+(?:_[0-9]+)?")


class SlurmError(RuntimeError):
    """A Slurm command that failed or is missing; the message says which and why."""

    def __init__(self, message: str, command: Sequence[str] = (), stderr: str = "") -> None:
        super().__init__(message)
        self.command = tuple(command)
        self.stderr = stderr


class SlurmUnavailable(SlurmError):
    """The command is missing or did not finish in time."""


def run_command(cmd: list[str], env: Mapping[str, str] | None, text: bool, timeout: float) -> Any:
    """``cmd``'s standard output (str or bytes); SlurmError when it fails,
    SlurmUnavailable when it is missing or runs past ``timeout`` seconds. As text, a byte
    that is not UTF-8 (a job name in Latin-1, say) reads as U+FFFD: it costs the record
    that holds it its exact text, never the whole output (issue 34)."""
    errors = "replace" if text else None
    try:
        res = subprocess.run(
            cmd, env=env, capture_output=True, text=text, errors=errors, timeout=timeout
        )
    except FileNotFoundError:
        raise SlurmUnavailable(
            f"'{cmd[0]}' not found: Slurm's client tools are not installed or not on "
            "PATH (install slurm-client, e.g. apt-get install slurm-client)",
            cmd,
        ) from None
    except subprocess.TimeoutExpired:
        raise SlurmUnavailable(
            f"'{' '.join(cmd)}' did not finish within {timeout:.0f} s "
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


def parse_json_output(out: str, argv: Sequence[str]) -> dict[str, Any]:
    """The JSON that ``argv`` printed; SlurmError when it printed none or reports errors."""
    try:
        data = json.loads(out)
    except json.JSONDecodeError as exc:
        raise SlurmError(
            f"'{' '.join(argv)}' printed no JSON ({exc}); Slurm 21.08 or newer is needed",
            argv,
        ) from None
    errors = [error_text(e) for e in data.get("errors") or () if e]
    if errors:  # 22.05 exits 0 with these when slurmctld cannot be reached
        raise SlurmError(f"'{' '.join(argv)}' failed: {'; '.join(errors)}", argv)
    return data


def error_text(error: Any) -> str:
    """One entry of a JSON reply's "errors" as text: its description (error)."""
    if not isinstance(error, dict):
        return str(error)
    parts = [str(error[k]) for k in ("description", "error") if error.get(k)]
    return " (".join(parts) + ")" * (len(parts) - 1) if parts else str(error)


def check_job_id(job_id: str | int) -> str:
    """``job_id`` as text; ValueError unless it is digits or an array task's ``123_4``."""
    text = str(job_id)
    if not _JOB_ID_RE.fullmatch(text):
        raise ValueError(f"{text!r} is not a Slurm job id (digits, or 123_4 for an array task)")
    return text


def check_node_name(node: str) -> str:
    """``node``; ValueError when it is empty or holds a space or '=' (scontrol's syntax)."""
    if not node or any(c.isspace() for c in node) or "=" in node:
        raise ValueError(f"{node!r} is not a node name")
    return node
