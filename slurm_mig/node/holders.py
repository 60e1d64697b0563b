"""Who holds a MIG instance that cannot be destroyed: the processes with its capability
device nodes open, named for the operator (pid, command, user, Slurm job or none).

An instance whose job has ended is held only by a process outside that job: a session
that reached the node without Slurm (ssh without pam_slurm_adopt) or a process that
escaped the job's cgroup. The Epilog names it in the drain reason, so the admin sees
at once which site requirement is missing (README, "Security model"). Standard library
only: it runs in the Epilog.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..safetext import printable

__all__ = ["Holder", "describe_holders", "find_holders"]

MAX_HOLDERS = 5  # named in a drain reason; the rest are counted
_JOB = re.compile(r"/job_(\d{1,12})(?:/|$)")


@dataclass(frozen=True)
class Holder:
    """One process holding a device node: pid, command, uid and Slurm job (or None)."""

    pid: int
    command: str
    uid: int | None
    job: str | None

    def __str__(self) -> str:
        where = f"in Slurm job {self.job}" if self.job else "outside any Slurm job"
        user = "?" if self.uid is None else str(self.uid)
        return f"pid {self.pid} ({self.command}, uid {user}, {where})"


def find_holders(minors: set[int], proc: Path = Path("/proc")) -> list[Holder]:
    """The processes with ``nvidia-cap<minor>`` open for any of ``minors`` (the instance's
    GPU-instance and compute-instance capabilities); processes that vanish or cannot be
    read are skipped. Bounded by the node's process and descriptor counts."""
    names = {f"nvidia-cap{m}" for m in minors}
    found = []
    try:
        pids = [int(p.name) for p in proc.iterdir() if p.name.isdigit()]
    except OSError:
        return []
    for pid in sorted(pids):
        if _holds(proc / str(pid) / "fd", names):
            found.append(_describe(proc / str(pid), pid))
    return found


def describe_holders(holders: list[Holder]) -> str:
    """One line for a drain reason: the first `MAX_HOLDERS` holders and what to do."""
    if not holders:
        return "no process with its device nodes open was found (it may have just exited)"
    named = "; ".join(str(h) for h in holders[:MAX_HOLDERS])
    more = f" and {len(holders) - MAX_HOLDERS} more" if len(holders) > MAX_HOLDERS else ""
    text = f"held by {named}{more}"
    if any(h.job is None for h in holders):
        text += (
            "; processes outside Slurm jobs must not reach MIG devices: adopt ssh sessions "
            "into jobs (pam_slurm_adopt) and keep /dev/nvidia-caps root-only"
        )
    return text


def _holds(fd_dir: Path, names: set[str]) -> bool:
    try:
        fds = os.listdir(fd_dir)
    except OSError:
        return False
    for fd in fds:
        try:
            target = os.readlink(fd_dir / fd)
        except OSError:
            continue
        if target.rsplit("/", 1)[-1] in names:
            return True
    return False


def _describe(path: Path, pid: int) -> Holder:
    command = printable(_read(path / "comm").strip(), 32) or "?"
    try:
        uid: int | None = path.stat().st_uid
    except OSError:
        uid = None
    match = _JOB.search(_read(path / "cgroup"))
    return Holder(pid, command, uid, match.group(1) if match else None)


def _read(path: Path) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read(4096)
    except OSError:
        return ""
