"""The checks a simulation's input passes before it runs: every job with a unique id,
finite times on sizes the model has, and something that can run it."""

from __future__ import annotations

import math

from ..geometry import GpuModel
from ..planner.snapshot import runnable_sizes
from .api import SimJob

__all__ = ["SimInputError", "validate_jobs"]


class SimInputError(ValueError):
    """A workload or cluster the simulator cannot run; names the job and the fix."""


def validate_jobs(jobs: list[SimJob], model: GpuModel) -> None:
    """SimInputError naming the first job the simulator cannot run, and the fix."""
    seen: set[str] = set()
    sizes = set(model.planner_sizes)
    for j in jobs:
        if not j.id:
            raise SimInputError("a job has an empty id; give every job an id")
        if j.id in seen:
            raise SimInputError(f"duplicate job id {j.id!r}; ids must be unique")
        seen.add(j.id)
        if not (isinstance(j.arrival, (int, float)) and math.isfinite(j.arrival)):
            raise SimInputError(f"job {j.id!r}: arrival {j.arrival!r} must be a finite number")
        if j.arrival < 0:
            raise SimInputError(f"job {j.id!r}: arrival {j.arrival} must be >= 0 seconds")
        for s, t in j.times.items():
            if s not in sizes:
                raise SimInputError(
                    f"job {j.id!r}: time for size {s}, which {model.name} does not have; sizes "
                    f"are {', '.join(map(str, model.planner_sizes))}"
                )
            if not isinstance(t, (int, float)) or math.isnan(t) or t <= 0:
                raise SimInputError(f"job {j.id!r}: time {t!r} on size {s} must be > 0 seconds")
        ok = runnable_sizes(j, model)
        if not ok:
            raise SimInputError(
                f"job {j.id!r}: no size of {model.name} can run it (no finite time, or "
                "more memory than every profile has)"
            )
        if j.size is not None and j.size not in ok:
            raise SimInputError(
                f"job {j.id!r}: requested size {j.size} cannot run it on {model.name}; "
                f"runnable sizes: {', '.join(map(str, ok))}"
            )
        if not (j.pcie_demand >= 0 and math.isfinite(j.pcie_demand)):
            raise SimInputError(f"job {j.id!r}: pcie_demand {j.pcie_demand} must be >= 0 GB/s")
        if not (j.alpha > 0 and math.isfinite(j.alpha)):
            raise SimInputError(f"job {j.id!r}: alpha {j.alpha} must be > 0")
        if j.memory < 0:
            raise SimInputError(f"job {j.id!r}: memory {j.memory} must be >= 0 bytes")
