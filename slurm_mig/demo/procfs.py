"""Which processes are ours, read from /proc, and ending them: a loopback cluster's
(`LocalSlurm.stop`) or a whole test run's (`slurm_mig.demo.leftovers`).

A process is ours when it carries one of our marks: an environment entry (a cluster's
``SLURM_CONF=<its slurm.conf>``, a test run's ``SLURM_MIG_TEST_RUN=<id>``), or a path
under one of our directories that it works in or holds open (slurmstepd of Slurm 24.11
and later overwrites its environment block with its title, ``slurmstepd: [3.batch]``,
so /proc shows it no environment; it always holds slurmd's log, under the cluster's
directory), or a private mount namespace it shares with such a process (a node's
hooks and jobs). The host's namespaces (this process's, init's) mark nothing. Zombies
are no running processes (they hold nothing, and only their parent can reap them).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

DELETED = " (deleted)"


@dataclass(frozen=True)
class Found:
    """A process of ours: its pid, start time (clock ticks since boot: the same process
    when it is signalled), command line and why it is ours (both printable)."""

    pid: int
    start: int
    command: str
    reason: str

    def __str__(self) -> str:
        return f"pid {self.pid} {self.command} ({self.reason})"


def printable(text: str, limit: int = 200) -> str:
    """``text`` with every control or other unprintable character as ``?``, cut to
    ``limit`` characters: command lines and paths are anyone's bytes."""
    clean = "".join(c if c.isprintable() else "?" for c in text)
    return clean if len(clean) <= limit else clean[: limit - 3] + "..."


def pids() -> list[int]:
    """Every process's pid, this one's excepted."""
    me = os.getpid()
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != me]


def _stat(pid: int) -> list[str]:
    """/proc/<pid>/stat's fields after the command name (state first); [] when gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return []
    return text[text.rfind(")") + 2 :].split()


def start_time(pid: int) -> int | None:
    """When the process started (clock ticks since boot); None when it is gone or a zombie."""
    fields = _stat(pid)
    if not fields or fields[0] in "ZX":
        return None
    return int(fields[19])


def parent(pid: int) -> int:
    """The process's parent's pid (0 when gone)."""
    fields = _stat(pid)
    return int(fields[1]) if fields else 0


def ancestors(pid: int) -> set[int]:
    """``pid`` and every process above it up to init."""
    seen = set()
    while pid > 0 and pid not in seen:
        seen.add(pid)
        pid = parent(pid)
    return seen


def command(pid: int) -> str:
    """The process's command line (its title, as ps shows it), printable."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    if not raw.strip(b"\0"):
        try:
            return printable(f"[{Path(f'/proc/{pid}/comm').read_text().strip()}]")
        except OSError:
            return ""
    return printable(raw.rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace"))


def mount_ns(pid: int) -> str:
    """The process's mount namespace ("mnt:[<inode>]"), "" when it is gone."""
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return ""


def environment(pid: int) -> list[bytes]:
    """The process's initial environment's entries ([] when unreadable)."""
    try:
        return Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return []


def held_paths(pid: int) -> Iterable[tuple[str, str]]:
    """(what, path) for the directory the process works in, its root and each file it
    holds open, as this process sees them (a chrooted one's under its root)."""
    for what in ("cwd", "root"):
        try:
            yield what, os.readlink(f"/proc/{pid}/{what}")
        except OSError:
            pass
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return
    for fd in fds:
        try:
            yield f"fd {fd}", os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            pass


def within(path: str, directory: str) -> bool:
    """``path`` lies in ``directory``, also as a chrooted process's path shows it
    (``<root>/<directory>/...``) and once deleted."""
    if path.endswith(DELETED):
        path = path[: -len(DELETED)]
    return f"{directory.rstrip('/')}/" in f"{path}/"


def mark_of(pid: int, entries: Collection[bytes], dirs: Sequence[str]) -> str:
    """Why process ``pid`` is ours by its own marks ("" when it carries none)."""
    for entry in environment(pid):
        if entry in entries:
            return f"its environment has {entry.decode(errors='replace')}"
    for what, path in held_paths(pid):
        for d in dirs:
            if path.startswith("/") and within(path, d):
                return f"{what} is {path}, in {d} (ours)"
    return ""


def find(
    entries: Iterable[str], dirs: Iterable[str | Path], exclude: Collection[int] = ()
) -> list[Found]:
    """The running processes (not ``exclude``, nor this one) that carry one of the
    environment ``entries`` (NAME=value), work in or hold open a path under one of
    ``dirs``, or share a private mount namespace with one that does."""
    want = {e.encode() for e in entries}
    places = [str(d) for d in dirs if len(Path(d).parts) > 2]  # never / nor /tmp
    host = {mount_ns(os.getpid()), mount_ns(1), ""}
    found: dict[int, Found] = {}
    spaces: dict[str, int] = {}
    rest = []
    for pid in pids():
        start = start_time(pid)
        if pid in exclude or start is None:
            continue
        reason = mark_of(pid, want, places)
        if not reason:
            rest.append((pid, start))
            continue
        found[pid] = Found(pid, start, command(pid), printable(reason))
        spaces.setdefault(mount_ns(pid), pid)
    for space in host:
        spaces.pop(space, None)
    for pid, start in rest:
        owner = spaces.get(mount_ns(pid))
        if owner is not None:
            why = f"shares a node's mount namespace with pid {owner}"
            found[pid] = Found(pid, start, command(pid), why)
    return sorted(found.values(), key=lambda f: f.pid)


def running(found: Found) -> bool:
    """The process found is still running (same pid, same start, no zombie)."""
    return start_time(found.pid) == found.start


def _signal(found: Found, sig: int) -> None:
    if running(found):
        try:
            os.kill(found.pid, sig)
        except ProcessLookupError:
            pass


def end(found: Sequence[Found], grace: float = 0.0, timeout: float = 10.0) -> list[Found]:
    """SIGTERM the processes ``found`` and SIGKILL those running after ``grace``
    seconds (at once without grace), then wait up to ``timeout`` seconds until they
    are gone; those still running then."""
    if grace > 0:
        for f in found:
            _signal(f, signal.SIGTERM)
        _wait_gone(found, grace)
    left = [f for f in found if running(f)]
    for f in left:
        _signal(f, signal.SIGKILL)
    return _wait_gone(left, timeout)


def _wait_gone(found: Sequence[Found], timeout: float) -> list[Found]:
    """Wait up to ``timeout`` seconds until none of ``found`` runs; those that do."""
    deadline = time.monotonic() + timeout
    while True:
        left = [f for f in found if running(f)]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.05)
