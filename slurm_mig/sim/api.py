"""The simulator's contract with placement policies: the job, the read-only view of
the cluster a policy decides on, and the commands it answers with.

A policy is any object with a ``name`` and ``decide(view) -> commands``. The engine
calls ``decide`` once per instant at which something happened (arrivals, departures,
instances finished creating, a requested wake-up), applies the commands in order,
validates each against ``geometry`` and raises :class:`PolicyError` on an illegal
one. Commands are applied as they are produced, so a generator policy sees the
effect of each command in the view before it yields the next. Views are live: read
them inside ``decide`` only, never keep them.

Timing: a Start on an idle existing instance runs at once; one that needs an
instance runs when its creation ends (Table 1 times, after the GPU's earlier create
and destroy operations, which run one at a time). A destroyed instance's slices are
free for the GPU's next operation (no event marks the end of a destroy).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol, runtime_checkable

from ..geometry import GpuModel, Slot

INF = math.inf


class PolicyError(RuntimeError):
    """A policy issued a command the cluster cannot carry out (a policy bug)."""


@dataclass(frozen=True, slots=True)
class SimJob:
    """One job of a simulated workload.

    ``times`` maps planner instance sizes (compute slices) to seconds when running
    alone; a missing size or ``inf`` means it cannot run there. ``size`` is the size
    the user asked for (online policies honour it; ``None`` lets the policy choose).
    ``pcie_demand`` (GB/s when alone) and ``alpha`` feed Eq. 2 of the PCIe paper.
    """

    id: str
    arrival: float
    times: Mapping[int, float] = field(hash=False)
    memory: int = 0  # bytes of GPU memory needed (0 = fits any profile)
    pcie_demand: float = 0.0
    alpha: float = 1.0
    restartable: bool = False
    size: int | None = None
    kind: str = ""  # label for reports, e.g. "Bloom560m"

    def time(self, size: int) -> float:
        """Seconds on an instance of ``size`` compute slices alone (inf = cannot run)."""
        return self.times.get(size, INF)

    @property
    def pcie_bound(self) -> bool:
        return self.pcie_demand > 0.0


# ---------------------------------------------------------------------------
# Commands


@dataclass(frozen=True, slots=True)
class Start:
    """Run pending ``job`` on the instance at ``slot`` of ``gpu``. An idle instance
    there is reused; otherwise one is created (Table 1 time, after the GPU's earlier
    operations), which needs the slot's memory slices free of every live instance."""

    job: str
    gpu: int
    slot: Slot


@dataclass(frozen=True, slots=True)
class Create:
    """Create an empty instance (the policy is called again once it exists)."""

    gpu: int
    slot: Slot


@dataclass(frozen=True, slots=True)
class Destroy:
    """Destroy an idle instance; its memory slices are free for the next operation."""

    gpu: int
    slot: Slot


@dataclass(frozen=True, slots=True)
class Migrate:
    """Move running, restartable ``job`` to ``slot`` of ``gpu`` (created if needed);
    it keeps its progress and resumes after the engine's migration overhead."""

    job: str
    gpu: int
    slot: Slot


@dataclass(frozen=True, slots=True)
class Wake:
    """Call ``decide`` again at time ``at`` even if nothing else happens by then
    (ignored unless later than now; one call per distinct time)."""

    at: float


Command = Start | Create | Destroy | Migrate | Wake


# ---------------------------------------------------------------------------
# Views


class InstanceView(NamedTuple):
    slot: Slot
    job: str | None  # job running there or about to start there; None = idle
    ready_at: float  # when its creation completes (<= now: it exists)
    busy_until: float | None  # predicted end of its job at the current rates
    pcie: bool  # its job is PCIe-bound


class GpuView(NamedTuple):
    """One GPU. Masks have bit ``i`` set for memory slice ``i``."""

    index: int
    node: int
    instances: tuple[InstanceView, ...]  # sorted by placement
    channel_free: float  # when its create/destroy queue is empty
    pcie_jobs: int  # PCIe-bound jobs running or bound there (Eq. 2's n, less a newcomer)
    busy_mask: int  # memory slices of instances with a job
    held_mask: int  # memory slices of every live instance

    def instance(self, slot: Slot) -> InstanceView | None:
        for inst in self.instances:
            if inst.slot == slot:
                return inst
        return None

    @property
    def idle(self) -> tuple[InstanceView, ...]:
        return tuple(i for i in self.instances if i.job is None)

    @property
    def busy_slices(self) -> int:
        """Compute slices of instances that hold a job."""
        return sum(i.slot.size for i in self.instances if i.job is not None)

    @property
    def free_at(self) -> float:
        """When its last job is predicted to end (its channel if it has none)."""
        ends = [i.busy_until for i in self.instances if i.busy_until is not None]
        return max(ends, default=self.channel_free)


class RunningView(NamedTuple):
    """A job that holds an instance: running, or waiting for its instance to exist."""

    job: SimJob
    gpu: int
    slot: Slot
    started: float | None  # when it (re)started on this instance; None = not yet
    remaining: float  # fraction of its work left, now
    slowdown: float  # current PCIe slowdown (>= 1)
    finish_at: float  # predicted at the current rates


class ClusterView(Protocol):
    """What a policy sees at time ``now`` (read-only, valid during ``decide`` only)."""

    now: float
    model: GpuModel
    nodes: int
    gpus_per_node: int
    pcie_max: float  # GB/s per GPU (Eq. 1-2)
    seed: int

    @property
    def gpus(self) -> Sequence[GpuView]: ...

    @property
    def pending(self) -> Mapping[str, SimJob]:
        """Jobs waiting to start, in arrival order."""
        ...

    @property
    def arrived(self) -> tuple[SimJob, ...]:
        """Jobs that arrived since the previous ``decide``."""
        ...

    @property
    def finished(self) -> tuple[str, ...]:
        """Jobs that finished since the previous ``decide``."""
        ...

    @property
    def changed(self) -> frozenset[int]:
        """GPUs whose view changed since the previous ``decide`` (all on the first)."""
        ...

    def waited(self, job: str | SimJob) -> float:
        """Seconds a job has waited since it arrived."""
        ...

    def running(self, job: str) -> RunningView | None:
        """The job on an instance, or None if it is pending, finished or unknown."""
        ...

    def job(self, job: str) -> SimJob: ...


@runtime_checkable
class Policy(Protocol):
    """A placement policy: one instance per simulation (it may keep state)."""

    name: str

    def decide(self, view: ClusterView) -> Iterable[Command]: ...


class _GpuList(Sequence[GpuView]):
    """The engine's GPU views, rebuilt lazily for GPUs that changed."""

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
