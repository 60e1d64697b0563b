"""What the simulator's policy sees of the engine's state, built on access: the GPUs
as snapshot GPUs (only those that changed are built anew) and the jobs on instances."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Protocol

from ..pcie import slowdown
from ..planner.gpustate import LiveInstance
from ..planner.snapshot import Gpu as GpuView
from .api import RunningView, SimJob
from .cluster import Gpu
from .site import SiteView
from .spread import Spread

__all__ = ["GpuList", "RunningMap", "SimJobs", "running_view"]


class SimJobs(Protocol):
    """What the policy's view reads of a simulation (the engine is one): its clock, the
    jobs and who holds an instance, the GPUs, and what the site lets a policy know."""

    now: float
    jobs: Sequence[SimJob]
    index: Mapping[str, int]
    held: Mapping[int, LiveInstance]
    spread: Mapping[int, Spread]  # the jobs on several instances
    gpu_state: Sequence[Gpu]
    pcie_max: float
    site: SiteView | None

    def running(self, job: str) -> RunningView | None: ...


def running_view(sim: SimJobs, job: str) -> RunningView | None:
    """Job ``job`` on its instance now (running, or waiting for it), or None; a job
    on several instances, on its main one, for its slowest task's seconds."""
    idx = sim.index.get(job)
    inst = sim.held.get(idx) if idx is not None else None
    if inst is None:
        return None
    j = sim.jobs[idx]
    run = inst.run
    site = sim.site
    if site is not None and site.learned:
        seen = site.seen[idx]
        end = site.expected_end(inst, sim.now)
        planned = site.planned(inst)
        started = run.started if run is not None else None
        rem = inst.rem if run is None else max(0.0, min(1.0, (end - sim.now) / planned))
        return RunningView(seen, inst.gpu, inst.slot, started, rem, 1.0, end)
    if run is not None:
        rem = run.remaining_at(sim.now)
        return RunningView(j, inst.gpu, inst.slot, run.started, rem, run.sd, run.finish)
    start = max(inst.ready_at, inst.start_at)
    n = sim.gpu_state[inst.gpu].pcie_n + (1 if j.pcie_demand > 0 else 0)
    sd = slowdown(j.alpha, j.pcie_demand, n, sim.pcie_max)
    sp = sim.spread.get(idx)
    seconds = j.time(inst.slot.size) if sp is None else sp.seconds
    end = start + inst.rem * seconds * sd
    return RunningView(j, inst.gpu, inst.slot, None, inst.rem, sd, end)


class GpuList(Sequence[GpuView]):
    """The engine's GPUs as snapshot GPUs, built lazily for GPUs that changed."""

    __slots__ = ("_build", "_n")

    def __init__(self, build, n: int) -> None:
        self._build, self._n = build, n

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self._build(k) for k in range(*i.indices(self._n))]
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(i)
        return self._build(i)

    def __iter__(self) -> Iterator[GpuView]:
        build = self._build
        for k in range(self._n):
            yield build(k)


class RunningMap(Mapping[str, RunningView]):
    """The jobs on instances, read-only, built on access."""

    __slots__ = ("_sim",)

    def __init__(self, sim: SimJobs) -> None:
        self._sim = sim

    def __getitem__(self, job: str) -> RunningView:
        got = self._sim.running(job)
        if got is None:
            raise KeyError(job)
        return got

    def __iter__(self) -> Iterator[str]:
        jobs = self._sim.jobs
        for idx in list(self._sim.held):
            yield jobs[idx].id

    def __len__(self) -> int:
        return len(self._sim.held)
