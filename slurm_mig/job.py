"""The one job type of the planning core: what a policy, a batch planner, the
simulator and a task table all know of a job."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from .geometry import GpuModel, region_sizes

__all__ = ["Job"]


@dataclass(frozen=True, slots=True)
class Job:
    """A job as the planner knows it: seconds alone per instance size (compute slices;
    missing or ``inf``: cannot run there), the memory it needs, its PCIe demand (GB/s
    alone) and alpha (Eq. 2 of the PCIe paper; demand 0: not PCIe-bound), whether it
    may be restarted elsewhere, the size its user asked for (``None``: the policy
    chooses), its deadline, its priority (Slurm's: higher goes first) and its weight in
    completion-time objectives, its user and its time limit. A batch's task is a job that arrived at 0.
    A job of several slices (``tasks`` > 1, `geometry.gangs`) is planned as one job on a
    region that holds its instances: its ``times`` are keyed by region size, ``memory``
    is one task's; ``task_times`` keeps one task's seconds per instance size, for a
    static layout, which runs the tasks on N instances of its own (`per_task`)."""

    id: str
    arrival: float
    times: Mapping[int, float] = field(hash=False)
    memory: int = 0  # bytes (0: fits any profile)
    pcie_demand: float = 0.0
    alpha: float = 1.0
    restartable: bool = False
    size: int | None = None
    kind: str = ""  # job kind (learning key; a label in reports)
    deadline: float | None = None  # absolute time, or None
    priority: float = 0.0  # Slurm's job priority: higher goes first
    weight: float = 1.0  # its weight in completion-time objectives
    user: str = ""  # who submitted it ("": unknown; a site's fairshare and learning key)
    time_limit: float = math.inf  # Slurm's --time in seconds (inf: none)
    tasks: int = 1  # instances it runs on, one per task, side by side (`geometry.gangs`)
    # one task's seconds per instance size (a gang's; empty: see `per_task`)
    task_times: Mapping[int, float] = field(default_factory=dict, hash=False, compare=False)

    def time(self, size: int) -> float:
        """Seconds on an instance of ``size`` compute slices alone (inf: cannot run)."""
        return self.times.get(size, math.inf)

    def per_task(self, model: GpuModel) -> Mapping[int, float]:
        """One task's seconds per instance size: ``task_times``; a single job's
        ``times``; a gang given by region times only, read back from them (each
        region's time is its task size's), so every gang can run on N instances."""
        if self.task_times or self.tasks <= 1:
            return self.task_times or self.times
        out: dict[int, float] = {}
        for region, size in region_sizes(model, self.tasks).items():
            t = self.times.get(region, math.inf)
            if t < out.get(size, math.inf):
                out[size] = t
        return out

    def work(self, size: int) -> float:
        """Slice-seconds on an instance of ``size``."""
        return size * self.time(size)

    def min_work(self) -> float:
        """The fewest slice-seconds over the sizes it has a time for."""
        return min(s * t for s, t in self.times.items())

    @property
    def pcie_bound(self) -> bool:
        return self.pcie_demand > 0.0
