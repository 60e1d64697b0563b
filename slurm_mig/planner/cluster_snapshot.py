"""The cluster as a policy finds it (``planner.snapshot``'s types): `ClusterSnapshot`
and its parts, the sizes a job runs on, and the snapshot's JSON form as written."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..geometry import (
    GeometryError,
    GpuModel,
    Profile,
    Slot,
    compute_mask,
    mask_tables,
    region_sizes,
    slot_mask,
)
from ..job import Job

__all__ = [
    "MAX_PRIORITY",
    "INF",
    "ClusterSnapshot",
    "Event",
    "Gpu",
    "Instance",
    "Job",
    "Planned",
    "Running",
    "SnapshotError",
    "default_size",
    "efficient_size",
    "efficient_time",
    "runnable_sizes",
    "sizes_of",
    "snapshot_to_json",
]

INF = math.inf
MAX_PRIORITY = float(2**32)  # Slurm's priorities are 32-bit unsigned


class SnapshotError(ValueError):
    """A snapshot (or its JSON) that does not describe a possible cluster."""


def runnable_sizes(job: Job, model: GpuModel) -> tuple[int, ...]:
    """Sizes the job can run on: a finite time and enough profile memory (a job of
    several slices: the regions that hold its instances, each with the memory of one
    task)."""
    memory = mask_tables(model).memory
    times, need = job.times, job.memory
    per = region_sizes(model, job.tasks)
    return tuple(
        s
        for s in model.planner_sizes
        if times.get(s, INF) < INF and s in per and need <= memory[per[s]]
    )


def default_size(job: Job, model: GpuModel) -> int | None:
    """The job's requested size, else the smallest size it can run on."""
    if job.size is not None:
        return job.size
    sizes = runnable_sizes(job, model)
    return sizes[0] if sizes else None


def sizes_of(job: Job, model: GpuModel) -> tuple[int, ...]:
    """Sizes the job may take: those it runs on, at least its requested size."""
    sizes = runnable_sizes(job, model)
    if job.size is not None:
        sizes = tuple(s for s in sizes if s >= job.size)
    return sizes


def efficient_size(job: Job, model: GpuModel) -> int:
    """The job's most efficient size: fewest slice-seconds, the smaller of equals (0 if
    it runs on none)."""
    sizes = sizes_of(job, model)
    return min(sizes, key=lambda s: (s * job.time(s), s)) if sizes else 0


def efficient_time(job: Job, model: GpuModel) -> float:
    """Seconds the job runs at its most efficient size (inf if it runs on none)."""
    size = efficient_size(job, model)
    return job.time(size) if size else INF


@dataclass(frozen=True, slots=True)
class Instance:
    """A live MIG instance. ``job``: the job running there or bound to it (about to
    start once the instance exists); ``None``: idle. ``ready_at``: when its creation
    completes (``<= now``: it exists). ``busy_until``: predicted end of its job.
    ``keep_for``: an idle instance kept for that job (it will reuse it)."""

    slot: Slot
    job: str | None = None
    ready_at: float = -INF
    busy_until: float | None = None
    pcie: bool = False  # its job is PCIe-bound
    keep_for: str | None = None


@dataclass(frozen=True, slots=True)
class Gpu:
    """One GPU. Masks have bit ``i`` set for memory slice ``i``."""

    index: int  # position in the snapshot
    instances: tuple[Instance, ...] = ()  # sorted by placement
    channel_free: float = -INF  # when its create/destroy queue is empty
    pcie_jobs: int = 0  # PCIe-bound jobs running or bound there
    node: str = ""  # where it is (a Slurm node name; the simulator's node number)
    local: int = 0  # its index on that node
    busy_mask: int = field(default=-1, compare=False)  # memory slices of instances with a job
    held_mask: int = field(default=-1, compare=False)  # memory slices of every live instance
    compute_mask: int = field(default=-1, compare=False)  # compute slices of jobs

    def __post_init__(self) -> None:
        if self.busy_mask < 0 or self.held_mask < 0 or self.compute_mask < 0:
            busy = held = comp = 0
            for inst in self.instances:
                m = slot_mask(inst.slot)
                held |= m
                if inst.job is not None:
                    busy |= m
                    comp |= compute_mask(inst.slot)
            object.__setattr__(self, "busy_mask", busy)
            object.__setattr__(self, "held_mask", held)
            object.__setattr__(self, "compute_mask", comp)

    def placed(self, inst: Instance) -> Gpu:
        """This GPU once ``inst`` (with its job) is live: idle instances it overlaps are
        gone, an identical idle one is taken over."""
        m = slot_mask(inst.slot)
        kept = tuple(i for i in self.instances if not slot_mask(i.slot) & m)
        insts = tuple(sorted((*kept, inst), key=_by_placement))
        busy, comp = self.busy_mask, self.compute_mask
        if inst.job is not None:
            busy, comp = busy | m, comp | compute_mask(inst.slot)
        held = 0
        for i in insts:
            held |= slot_mask(i.slot)
        return Gpu(
            self.index,
            insts,
            self.channel_free,
            self.pcie_jobs + (1 if inst.pcie else 0),
            self.node,
            self.local,
            busy,
            held,
            comp,
        )

    def vacated(self, job: str, keep_instance: bool = True) -> Gpu:
        """This GPU once ``job`` has left (its instance stays, idle, by default)."""
        insts = []
        pcie = self.pcie_jobs
        for i in self.instances:
            if i.job != job:
                insts.append(i)
                continue
            pcie -= 1 if i.pcie else 0
            if keep_instance:
                insts.append(Instance(i.slot, None, i.ready_at))
        return Gpu(self.index, tuple(insts), self.channel_free, pcie, self.node, self.local)

    @property
    def occupants(self) -> tuple[Instance, ...]:
        """Instances that hold a job."""
        return tuple(i for i in self.instances if i.job is not None)

    def instance(self, slot: Slot) -> Instance | None:
        for inst in self.instances:
            if inst.slot == slot:
                return inst
        return None

    @property
    def idle(self) -> tuple[Instance, ...]:
        return tuple(i for i in self.instances if i.job is None)

    def load(self, model: GpuModel) -> float:
        """Share of the compute slices running (or bound to) a job."""
        return self.compute_mask.bit_count() / model.compute_slices

    @property
    def busy_slices(self) -> int:
        """Compute slices of instances that hold a job."""
        return sum(i.slot.size for i in self.instances if i.job is not None)

    @property
    def free_at(self) -> float:
        """When its last job is predicted to end (its channel if it has none)."""
        ends = [i.busy_until for i in self.instances if i.busy_until is not None]
        return max(ends, default=self.channel_free)

    def slice_free_at(self, memory_slices: int) -> list[float]:
        """When each memory slice is released by the jobs on it (-inf: free now)."""
        out = [-INF] * memory_slices
        for inst in self.instances:
            if inst.job is None:
                continue
            end = INF if inst.busy_until is None else inst.busy_until
            p = inst.slot.placement
            for s in range(p.start, p.end):
                if end > out[s]:
                    out[s] = end
        return out


def _by_placement(inst: Instance) -> tuple[int, int]:
    return (inst.slot.placement.start, inst.slot.size)


@dataclass(frozen=True, slots=True)
class Running:
    """A job that holds an instance: running, or bound and waiting for the instance."""

    job: Job
    gpu: int
    slot: Slot
    started: float | None  # when it (re)started on this instance; None = not yet
    remaining: float  # fraction of its work left, now
    slowdown: float  # current PCIe slowdown (>= 1)
    finish_at: float  # predicted at the current rates
    # seconds it was planned to run on this instance (the daemon's assignment: its job's
    # times are not estimated while it runs); None: its job's time on this size
    planned: float | None = None

    @property
    def planned_seconds(self) -> float:
        """The seconds it was planned to run on its instance (`planned`, else its
        job's time on the instance's size)."""
        return self.job.time(self.slot.size) if self.planned is None else self.planned


@dataclass(frozen=True, slots=True)
class Event:
    """Something that may call for a re-plan: ``what`` happened at ``at``, on GPU ``gpu``
    of the snapshot (None: not tied to one GPU, e.g. a node lost or a job requeued)."""

    at: float
    what: str
    gpu: int | None = None


@dataclass(frozen=True, slots=True)
class Planned:
    """The standing plan of a waiting job: where it runs, its batch and its place in the
    order of its GPU, how long it is planned to run, and when the plan was made."""

    job: str
    gpu: int
    slot: Slot
    batch: int = 0
    order: int = 0
    seconds: float = 0.0
    issued: float = 0.0


@dataclass(frozen=True)
class ClusterSnapshot:
    """Everything a policy decides from (read-only; see the module doc)."""

    now: float
    model: GpuModel
    gpus: Sequence[Gpu]
    pending: Mapping[str, Job] = field(default_factory=dict)  # waiting, in arrival order
    running: Mapping[str, Running] = field(default_factory=dict)
    planned: Mapping[str, Planned] = field(default_factory=dict)  # waiting jobs' plans
    next_batch: int = 0  # the number the next batch formed gets
    pcie_max: float = 30.08  # GB/s per GPU (Eq. 1-2)
    seed: int = 0
    arrived: Sequence[Job] | None = None  # None: every pending job is new
    finished: Sequence[tuple[str, int]] = ()  # (job, the GPU it left) since the last one
    changed: frozenset[int] | None = None  # None: every GPU changed
    events: tuple[Event, ...] = ()  # what may call for a re-plan of standing plans

    @property
    def nodes(self) -> int:
        """Number of distinct nodes (for reports)."""
        return len({g.node for g in self.gpus})

    def job(self, job_id: str) -> Job:
        """A waiting or running job by id (KeyError if neither)."""
        got = self.pending.get(job_id)
        if got is not None:
            return got
        return self.running[job_id].job

    def waited(self, job: str | Job) -> float:
        """Seconds a job has waited since it arrived."""
        j = job if isinstance(job, Job) else self.job(job)
        return self.now - j.arrival

    def new_arrivals(self) -> Sequence[Job]:
        """Jobs new since the previous snapshot (all pending ones when unknown)."""
        return tuple(self.pending.values()) if self.arrived is None else self.arrived

    def changed_gpus(self) -> Iterable[int]:
        """GPUs changed since the previous snapshot (all of them when unknown)."""
        return range(len(self.gpus)) if self.changed is None else self.changed

    def to_json(self) -> dict[str, Any]:
        return snapshot_to_json(self)


def _planned_profile(model: GpuModel, slot: Slot, prof: Profile) -> bool:
    """True when ``prof`` at ``slot`` is an instance the planners make (the lattice's, or
    the double-memory 1g)."""
    if slot.size not in model.planner_sizes:
        return False
    try:
        return model.profile_for_slot(slot) == prof
    except GeometryError:
        return False


# ---------------------------------------------------------------------------
# JSON: the form `slurm-mig plan --start` reads and the daemon's status file holds.


def _slot_json(model: GpuModel, slot: Slot) -> dict[str, Any]:
    return {
        "profile": model.profile_for_slot(slot).name,
        "placement": slot.placement.to_json(),
    }


def _num(x: float | None) -> float | str | None:
    if x is None:
        return None
    return x if math.isfinite(x) else ("inf" if x > 0 else "-inf")


def snapshot_to_json(snap: ClusterSnapshot) -> dict[str, Any]:
    """The snapshot as plain JSON data (finite numbers, ``"inf"``/``"-inf"`` otherwise)."""
    m = snap.model
    gpus = []
    for g in snap.gpus:
        gpus.append(
            {
                "node": g.node,
                "local": g.local,
                "channel_free": _num(g.channel_free),
                "instances": [
                    {
                        **_slot_json(m, i.slot),
                        "job": i.job,
                        "ready_at": _num(i.ready_at),
                        "busy_until": _num(i.busy_until),
                        "keep_for": i.keep_for,
                    }
                    for i in g.instances
                ],
            }
        )
    return {
        "now": snap.now,
        "gpu_model": m.name,
        "pcie_max": snap.pcie_max,
        "seed": snap.seed,
        "next_batch": snap.next_batch,
        "gpus": gpus,
        "pending": [_job_json(j) for j in snap.pending.values()],
        "running": [
            {
                "job": _job_json(r.job),
                "gpu": r.gpu,
                **_slot_json(m, r.slot),
                "started": _num(r.started),
                "remaining": r.remaining,
                "slowdown": r.slowdown,
                "finish_at": _num(r.finish_at),
                **({} if r.planned is None else {"planned": _num(r.planned)}),
            }
            for r in snap.running.values()
        ],
        "planned": [
            {
                "job": p.job,
                "gpu": p.gpu,
                **_slot_json(m, p.slot),
                "batch": p.batch,
                "order": p.order,
                "seconds": p.seconds,
                "issued": p.issued,
            }
            for p in snap.planned.values()
        ],
        "events": [[_num(e.at), e.what, e.gpu] for e in snap.events],
        "finished": [[j, g] for j, g in snap.finished],
    }


def _job_json(j: Job) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": j.id,
        "arrival": j.arrival,
        "times": {str(s): _num(t) for s, t in sorted(j.times.items())},
    }
    for key, default in (
        ("memory", 0),
        ("pcie_demand", 0.0),
        ("alpha", 1.0),
        ("restartable", False),
        ("size", None),
        ("kind", ""),
        ("deadline", None),
        ("priority", 0.0),
    ):
        value = getattr(j, key)
        if value != default:
            out[key] = value
    return out
