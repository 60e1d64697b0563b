"""LocalSlurm's node daemons: start a node's slurmd, crash it (SIGKILL to slurmd alone:
its slurmstepds and jobs keep running, as on a real node whose slurmd died or was cut
off), crash the whole node (every process in its namespace: slurmd, slurmstepds, jobs)
and start slurmd again with the same configuration, in the node's own namespace."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .processes import ClusterError
from .procfs import mount_ns, pids

if TYPE_CHECKING:
    from .localslurm import LocalSlurm


class NodeDaemons:
    """LocalSlurm's methods on the slurmds (a mixin: LocalSlurm is its only user)."""

    def spawn_slurmd(self: LocalSlurm, node: str) -> None:
        """Start node ``node``'s slurmd (in its namespace, see `node_argv`); no wait."""
        self._spawn(
            f"slurmd-{node}",
            [self._binary("slurmd"), "-D", "-N", node, "-f", str(self.conf)],
            extra_env=self.slurmd_env,
            node=node,
        )

    def crash_slurmd(self: LocalSlurm, node: str, timeout: float = 10.0) -> int:
        """SIGKILL node ``node``'s slurmd, and it alone (not its process group): its
        slurmstepds and jobs run on, nobody tells slurmctld; the pid killed."""
        proc = self._procs.get(f"slurmd-{node}")
        if proc is None or proc.poll() is not None:
            raise ClusterError(f"slurmd of {node} is not running")
        comm = _comm(proc.pid)  # every wrapper execs: the Popen's pid is slurmd's
        if comm != "slurmd":
            raise ClusterError(f"slurmd of {node}: pid {proc.pid} is {comm!r}, not slurmd")
        os.kill(proc.pid, signal.SIGKILL)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired as exc:
            raise ClusterError(f"slurmd of {node} outlived SIGKILL for {timeout:.0f} s") from exc
        return proc.pid

    def crash_node(self: LocalSlurm, node: str, timeout: float = 10.0, reboot: bool = False) -> int:
        """SIGKILL every process of node ``node`` (those in its slurmd's mount namespace:
        slurmd, its slurmstepds, their jobs), as a node that lost power would lose them;
        ``reboot``: slurmd is stopped first (SIGTERM: it saves its state, as systemd stops
        it at shutdown), then the rest killed. Its disks, job records and simulated GPUs'
        state stay. How many processes were killed."""
        proc = self._procs.get(f"slurmd-{node}")
        if proc is None or proc.poll() is not None:
            raise ClusterError(f"slurmd of {node} is not running")
        space = mount_ns(proc.pid)
        if not space or space == mount_ns(os.getpid()):
            raise ClusterError(f"slurmd of {node} has no mount namespace of its own")
        if reboot:
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired as exc:
                raise ClusterError(
                    f"slurmd of {node} outlived SIGTERM for {timeout:.0f} s"
                ) from exc
        victims = [p for p in pids() if mount_ns(p) == space]
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait(timeout)
        deadline = time.monotonic() + timeout
        while any(mount_ns(p) == space for p in victims):
            if time.monotonic() > deadline:
                raise ClusterError(f"processes of {node} outlived SIGKILL for {timeout:.0f} s")
            time.sleep(0.05)
        return len(victims)

    def start_slurmd(
        self: LocalSlurm, node: str, timeout: float = 30.0, before: Sequence[str] = ()
    ) -> str:
        """Start node ``node``'s slurmd again with the same configuration (after
        `crash_slurmd`), running ``before`` first as on the node (an ExecStartPre=,
        e.g. ``slurm-mig node-sweep --boot``: ClusterError if it fails), and wait until
        slurmctld hears from it (sinfo's state without ``*``, not down); that state."""
        proc = self._procs.get(f"slurmd-{node}")
        if proc is not None and proc.poll() is None:
            raise ClusterError(f"slurmd of {node} is running already")
        if before:
            self.run_on(node, *before, timeout=timeout)
        self.spawn_slurmd(node)
        state = ""

        def registered() -> bool:
            nonlocal state
            proc = self._procs[f"slurmd-{node}"]
            if proc.poll() is not None:
                raise ClusterError(f"slurmd of {node} exited {proc.returncode}\n{self.logs()}")
            state = self.node_states().get(node, "")
            return bool(state) and not state.endswith("*") and not state.startswith("down")

        self.wait_for(registered, timeout, f"slurmd of {node} to register (last {state!r})")
        return state

    def wait_node_state(
        self: LocalSlurm, node: str, prefix: str, timeout: float = 60.0
    ) -> tuple[str, float]:
        """Wait until sinfo's state of ``node`` starts with ``prefix`` (e.g. "down" once
        SlurmdTimeout has passed since its slurmd was lost); (that state, seconds waited)."""
        t0, state = time.monotonic(), ""

        def reached() -> bool:
            nonlocal state
            state = self.node_states().get(node, "")
            return state.startswith(prefix)

        self.wait_for(reached, timeout, f"{node} to be {prefix}* (last {state!r})", 0.5)
        return state, time.monotonic() - t0


def _comm(pid: int) -> str:
    """The process's name (/proc/<pid>/comm), "" when it is gone."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""
