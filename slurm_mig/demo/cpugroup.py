"""A CPU cgroup for the simulated nodes of a loopback Slurm: their slurmds, and with them
their hooks and jobs, use at most so many CPUs together, and the controller's processes
(slurmctld, the planner daemon) have the rest, as on hosts of their own.

Plain ``nice`` cannot do this where the kernel groups processes by session (autogroup):
every job is a session of its own there, and a session's nice value weighs only inside
it. A cgroup's CPU quota holds for everything in it. cgroup v2 (``cpu.max``) and v1
(``cpu.cfs_quota_us``) are both handled; where neither can be used (no cpu controller,
not root, a container that cannot delegate it) `CpuGroup.create` says why and the nodes
share the CPUs with the controller, as before."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CpuGroup", "CpuGroupError"]

ROOT = Path("/sys/fs/cgroup")
PERIOD_US = 100_000  # the quota's period


class CpuGroupError(Exception):
    """Why no CPU cgroup can be made here."""


@dataclass(frozen=True)
class CpuGroup:
    """One cgroup whose processes together use at most a number of CPUs."""

    path: Path
    version: int

    @classmethod
    def create(cls, name: str, cpus: float, root: Path = ROOT) -> CpuGroup:
        """A fresh cgroup ``name`` limited to ``cpus`` CPUs; CpuGroupError says why not."""
        if not 0.01 <= cpus <= 4096:
            raise CpuGroupError(f"{cpus:g} CPUs is not within 0.01-4096")
        quota = str(round(cpus * PERIOD_US))
        if "/" in name or name in ("", ".", ".."):
            raise CpuGroupError(f"{name!r} is not a cgroup name")
        v1 = root / "cpu"
        try:
            if (v1 / "cpu.shares").exists():
                path = v1 / name
                path.mkdir()
                _write(path / "cpu.cfs_period_us", str(PERIOD_US))
                _write(path / "cpu.cfs_quota_us", quota)
                return cls(path, 1)
            controllers = root / "cgroup.controllers"
            if not controllers.exists() or "cpu" not in controllers.read_text().split():
                raise CpuGroupError(f"no cpu controller under {root}")
            if "cpu" not in (root / "cgroup.subtree_control").read_text().split():
                _write(root / "cgroup.subtree_control", "+cpu")
            path = root / name
            path.mkdir()
            _write(path / "cpu.max", f"{quota} {PERIOD_US}")
            return cls(path, 2)
        except OSError as exc:
            raise CpuGroupError(f"cannot make a cpu cgroup under {root}: {exc}") from exc

    def add(self, pid: int) -> None:
        """Move process ``pid`` (all its threads) into the group; its children follow."""
        _write(self.path / "cgroup.procs", str(pid))

    def remove(self, wait: float = 3.0) -> bool:
        """Move what is left to the parent and remove the group, trying again for up to
        ``wait`` seconds while killed processes still exit (a dying one can neither be
        moved nor let the group go); whether it is gone."""
        deadline = time.monotonic() + wait
        while True:
            try:
                left = (self.path / "cgroup.procs").read_text().split()
            except OSError:
                return not self.path.exists()
            for pid in left:
                try:
                    _write(self.path.parent / "cgroup.procs", pid)
                except OSError:
                    pass
            try:
                self.path.rmdir()
                return True
            except OSError:
                if time.monotonic() >= deadline:
                    return False
                time.sleep(0.1)


def _write(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)  # cgroupfs: the knob exists
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
