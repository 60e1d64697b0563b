"""Process and port helpers of LocalSlurm: free ports, who listens, stopping daemons by
process group and whatever else of a cluster still runs (`procfs`), and the daemons'
logs."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from . import procfs

# Harmless lines every start logs (no PMIx, no saved state, munge's notes).
LOG_NOISE = re.compile(
    r"pmix|MPI: Cannot create context|state file|Trying backup state|Unauthorized credential"
    r"|munged: (Info|Notice)|CPU frequency|differs from hardware"
)


class ClusterError(RuntimeError):
    """The local cluster did not start, or a command against it failed."""


def free_port() -> int:
    """A TCP port nothing listens on right now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening(port: int) -> bool:
    """Something accepts TCP connections on 127.0.0.1:``port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def end_cluster_processes(conf: Path, root: Path, rounds: int = 3) -> list[procfs.Found]:
    """SIGKILL what is left of a cluster whose daemons are stopped, and wait until it is
    gone: slurmstepds and job processes outlive slurmd (in sessions of their own). Its
    processes are those whose environment names its slurm.conf ``conf``, that hold a
    path under its directory ``root`` (24.11's slurmstepd shows no environment, and
    holds slurmd's log) or share a node's namespace with one (`procfs.find`); never this
    process or its ancestors. Those still running at the end."""
    exclude = procfs.ancestors(os.getpid())
    left: list[procfs.Found] = []
    for _ in range(rounds):  # again: one may have started another meanwhile
        found = procfs.find([f"SLURM_CONF={conf}"], [root], exclude)
        if not found:
            return []
        left = procfs.end(found, timeout=5.0)
    return left


def world_reachable(path: Path) -> bool:
    """Every user may run ``path`` (links followed): each directory on the way lets
    others through, the file lets them execute."""
    try:
        real = path.resolve(strict=True)
        if not os.stat(real).st_mode & 0o001:
            return False
        return all(os.stat(d).st_mode & 0o001 for d in real.parents)
    except OSError:
        return False


def _killpg(pid: int, sig: int) -> None:
    """Signal process group ``pid``, gone already or not."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


def kill_daemons(procs: Sequence[subprocess.Popen], grace: float = 5.0) -> None:
    """SIGTERM the daemons ``procs`` (their process groups), SIGKILL those still
    running after ``grace`` seconds; reaped either way."""
    for proc in procs:
        if proc.poll() is None:
            _killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for proc in procs:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def daemon_logs(root: Path, tail: int = 40) -> str:
    """The last ``tail`` lines of every daemon's output under ``root`` (``*.out``: its
    stdout and stderr), less `LOG_NOISE`."""
    parts = []
    for path in sorted(root.glob("*.out")):
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        lines = [ln for ln in text.splitlines() if not LOG_NOISE.search(ln)][-tail:]
        parts.append(f"--- {path.name} ---\n" + "\n".join(lines))
    return "\n".join(parts)


def remove_node_cgroups(nodes: Sequence[str]) -> None:
    """Remove the (empty, once its processes are gone) cgroup v1 directories each
    slurmd of ``nodes`` made, slurm_<node> in every controller; rmdir never touches a
    live one."""
    for node in nodes:
        for top in Path("/sys/fs/cgroup").glob(f"*/slurm_{node}"):
            for path in sorted(top.rglob("*"), key=lambda p: -len(p.parts)) + [top]:
                if path.is_dir():
                    try:
                        path.rmdir()
                    except OSError:
                        pass
