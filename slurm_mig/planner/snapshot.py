"""The cluster as a policy finds it: one frozen snapshot that every policy reads.

A `ClusterSnapshot` holds the GPUs of one model (`Gpu`: live instances with their jobs
and when each frees, the create/destroy channel, the PCIe-bound jobs there), the jobs
waiting (`Job`, in arrival order), the jobs on instances (`Running`) and the standing
plans of waiting jobs (`Planned`). Policies return decisions (``planner.decisions``)
and never change it. The daemon builds it from Slurm, the simulator from its engine,
``slurm-mig plan --start`` from JSON (`snapshot_from_json`); the three then run the
same code.

Times are absolute seconds (``now`` is the snapshot's clock: epoch seconds on Slurm,
simulated seconds in the simulator); a plan made from a snapshot counts from ``now``.
``arrived``, ``finished`` and ``changed`` say what is new since the previous snapshot
given to the same policy object, so that a policy may keep caches; ``None`` means
"unknown: everything", and a policy must then decide exactly as a fresh one.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ..geometry import (
    GeometryError,
    GpuModel,
    Placement,
    Slot,
    compute_mask,
    get_model,
    mask_tables,
    slot_mask,
)

__all__ = [
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
    "snapshot_from_json",
]

INF = math.inf
MAX_PRIORITY = float(2**32)  # Slurm's priorities are 32-bit unsigned


class SnapshotError(ValueError):
    """A snapshot (or its JSON) that does not describe a possible cluster."""


@dataclass(frozen=True, slots=True)
class Job:
    """A job as the planner knows it: seconds alone per instance size (compute slices;
    missing or ``inf``: cannot run there), the memory it needs, its PCIe demand (GB/s
    alone) and alpha (Eq. 2 of the PCIe paper), whether it may be restarted elsewhere,
    the size its user asked for (``None``: the policy chooses), its deadline and its
    priority (Slurm's: higher goes first)."""

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

    def time(self, size: int) -> float:
        """Seconds on an instance of ``size`` compute slices alone (inf: cannot run)."""
        return self.times.get(size, INF)

    @property
    def pcie_bound(self) -> bool:
        return self.pcie_demand > 0.0


def runnable_sizes(job: Job, model: GpuModel) -> tuple[int, ...]:
    """Sizes the job can run on: a finite time and enough profile memory."""
    memory = mask_tables(model).memory
    times, need = job.times, job.memory
    return tuple(s for s in model.planner_sizes if times.get(s, INF) < INF and need <= memory[s])


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


# ---------------------------------------------------------------------------
# JSON: the form `slurm-mig plan --start` reads and the daemon's status file holds.


def _slot_json(model: GpuModel, slot: Slot) -> dict[str, Any]:
    return {
        "profile": model.profile_for_size(slot.size).name,
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


class _Reader:
    """Strict readers of one JSON document; every error names the field."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, where: str, why: str) -> SnapshotError:
        return SnapshotError(f"{self.source}: {where}: {why}")

    def obj(self, data: Any, where: str) -> Mapping[str, Any]:
        if not isinstance(data, Mapping):
            raise self.fail(where, "expected an object")
        return data

    def seq(self, data: Any, where: str) -> list:
        if data is None:
            return []
        if not isinstance(data, list):
            raise self.fail(where, "expected a list")
        return data

    def num(self, data: Any, where: str, *, allow_inf: bool = False) -> float:
        if isinstance(data, str) and allow_inf and data in ("inf", "-inf"):
            return math.inf if data == "inf" else -math.inf
        if isinstance(data, bool) or not isinstance(data, (int, float)):
            raise self.fail(where, f"{data!r} is not a number")
        value = float(data)
        if math.isnan(value) or (math.isinf(value) and not allow_inf):
            raise self.fail(where, f"{data!r} must be a finite number")
        return value

    def opt_num(self, data: Any, where: str, *, allow_inf: bool = False) -> float | None:
        return None if data is None else self.num(data, where, allow_inf=allow_inf)

    def int_(self, data: Any, where: str, lo: int = 0) -> int:
        if isinstance(data, bool) or not isinstance(data, int) or data < lo:
            raise self.fail(where, f"{data!r} must be a whole number >= {lo}")
        return data

    def text(self, data: Any, where: str, *, empty: bool = False) -> str:
        if isinstance(data, bool) or not isinstance(data, (str, int)):
            raise self.fail(where, f"{data!r} must be a string")
        text = str(data)
        if not empty and not text:
            raise self.fail(where, "must not be empty")
        if any(ord(c) < 32 for c in text):
            raise self.fail(where, "must not hold control characters")
        return text

    def slot(self, model: GpuModel, data: Mapping[str, Any], where: str) -> Slot:
        try:
            prof = model.profile(str(data.get("profile")))
            pl = self.obj(data.get("placement"), f"{where}.placement")
            placement = Placement(
                self.int_(pl.get("start"), f"{where}.placement.start"),
                self.int_(pl.get("size"), f"{where}.placement.size", 1),
            )
        except GeometryError as exc:
            raise self.fail(where, str(exc)) from None
        if placement not in prof.placements:
            raise self.fail(
                where,
                f"placement {placement.start}:{placement.size} is not legal for {prof.name} "
                f"(legal starts {list(prof.starts)})",
            )
        slot = Slot(placement, prof.compute_slices)
        if slot.size not in model.planner_sizes or model.profile_for_size(slot.size) != prof:
            raise self.fail(where, f"{prof.name} is not a profile the planner uses")
        canon = mask_tables(model).index_of(slot)
        return mask_tables(model).slots[canon] if canon is not None else slot

    def job(self, model: GpuModel, data: Any, where: str) -> Job:
        d = self.obj(data, where)
        times_raw = self.obj(d.get("times"), f"{where}.times")
        times: dict[int, float] = {}
        for k, v in times_raw.items():
            try:
                size = int(str(k).rstrip("g"))
            except ValueError:
                raise self.fail(f"{where}.times", f"size {k!r} is not a number") from None
            if size not in model.planner_sizes:
                raise self.fail(
                    f"{where}.times",
                    f"size {size} is not an instance size of {model.name} "
                    f"({', '.join(map(str, model.planner_sizes))})",
                )
            t = self.num(v, f"{where}.times.{k}", allow_inf=True)
            if not t > 0:
                raise self.fail(f"{where}.times.{k}", f"{t} must be > 0 seconds")
            times[size] = t
        size = d.get("size")
        deadline = d.get("deadline")
        return Job(
            id=self.text(d.get("id"), f"{where}.id"),
            arrival=self.num(d.get("arrival", 0.0), f"{where}.arrival"),
            times=times,
            memory=self.int_(d.get("memory", 0), f"{where}.memory"),
            pcie_demand=self.num(d.get("pcie_demand", 0.0), f"{where}.pcie_demand"),
            alpha=self.num(d.get("alpha", 1.0), f"{where}.alpha"),
            restartable=bool(d.get("restartable", False)),
            size=None if size is None else self.int_(size, f"{where}.size", 1),
            kind=self.text(d.get("kind", ""), f"{where}.kind", empty=True),
            deadline=None if deadline is None else self.num(deadline, f"{where}.deadline"),
            priority=self.priority(d.get("priority", 0.0), f"{where}.priority"),
        )

    def priority(self, data: Any, where: str) -> float:
        value = self.num(data, where)
        if abs(value) > MAX_PRIORITY:
            raise self.fail(
                where, f"{data!r} is out of range: a priority lies between -2^32 and 2^32"
            )
        return value


def snapshot_from_json(data: Any, source: str = "snapshot") -> ClusterSnapshot:
    """A snapshot from its JSON form; SnapshotError names the first bad field."""
    r = _Reader(source)
    d = r.obj(data, "top level")
    try:
        model = get_model(str(d.get("gpu_model", "")))
    except GeometryError as exc:
        raise r.fail("gpu_model", str(exc)) from None
    now = r.num(d.get("now"), "now")
    gpus = []
    for k, g in enumerate(r.seq(d.get("gpus"), "gpus")):
        where = f"gpus[{k}]"
        g = r.obj(g, where)
        insts = []
        for i, inst in enumerate(r.seq(g.get("instances"), f"{where}.instances")):
            w = f"{where}.instances[{i}]"
            inst = r.obj(inst, w)
            job = inst.get("job")
            keep = inst.get("keep_for")
            insts.append(
                Instance(
                    slot=r.slot(model, inst, w),
                    job=None if job is None else r.text(job, f"{w}.job"),
                    ready_at=r.num(inst.get("ready_at", "-inf"), f"{w}.ready_at", allow_inf=True),
                    busy_until=r.opt_num(inst.get("busy_until"), f"{w}.busy_until", allow_inf=True),
                    keep_for=None if keep is None else r.text(keep, f"{w}.keep_for"),
                )
            )
        insts.sort(key=lambda i: (i.slot.placement.start, i.slot.size))
        masks = [slot_mask(i.slot) for i in insts]
        for a in range(len(insts)):
            for b in range(a + 1, len(insts)):
                if masks[a] & masks[b]:
                    raise r.fail(
                        f"{where}.instances",
                        f"{insts[a].slot} and {insts[b].slot} share a memory slice",
                    )
        gpus.append(
            (
                insts,
                r.num(g.get("channel_free", "-inf"), f"{where}.channel_free", allow_inf=True),
                r.text(g.get("node", str(k)), f"{where}.node", empty=True),
                r.int_(g.get("local", 0), f"{where}.local"),
            )
        )
    if not gpus:
        raise r.fail("gpus", "a snapshot needs at least one GPU")
    pending: dict[str, Job] = {}
    for i, j in enumerate(r.seq(d.get("pending"), "pending")):
        job = r.job(model, j, f"pending[{i}]")
        if job.id in pending:
            raise r.fail(f"pending[{i}].id", f"job {job.id!r} appears twice")
        pending[job.id] = job
    running: dict[str, Running] = {}
    for i, x in enumerate(r.seq(d.get("running"), "running")):
        where = f"running[{i}]"
        x = r.obj(x, where)
        job = r.job(model, x.get("job"), f"{where}.job")
        if job.id in running or job.id in pending:
            raise r.fail(f"{where}.job.id", f"job {job.id!r} appears twice")
        gpu = r.int_(x.get("gpu"), f"{where}.gpu")
        if gpu >= len(gpus):
            raise r.fail(f"{where}.gpu", f"no gpu {gpu}; gpus are 0..{len(gpus) - 1}")
        running[job.id] = Running(
            job=job,
            gpu=gpu,
            slot=r.slot(model, x, where),
            started=r.opt_num(x.get("started"), f"{where}.started"),
            remaining=r.num(x.get("remaining", 1.0), f"{where}.remaining"),
            slowdown=r.num(x.get("slowdown", 1.0), f"{where}.slowdown"),
            finish_at=r.num(x.get("finish_at"), f"{where}.finish_at", allow_inf=True),
        )
    planned: dict[str, Planned] = {}
    for i, x in enumerate(r.seq(d.get("planned"), "planned")):
        where = f"planned[{i}]"
        x = r.obj(x, where)
        jid = r.text(x.get("job"), f"{where}.job")
        if jid not in pending:
            raise r.fail(f"{where}.job", f"job {jid!r} is not pending")
        gpu = r.int_(x.get("gpu"), f"{where}.gpu")
        if gpu >= len(gpus):
            raise r.fail(f"{where}.gpu", f"no gpu {gpu}; gpus are 0..{len(gpus) - 1}")
        planned[jid] = Planned(
            job=jid,
            gpu=gpu,
            slot=r.slot(model, x, where),
            batch=r.int_(x.get("batch", 0), f"{where}.batch"),
            order=r.int_(x.get("order", 0), f"{where}.order"),
            seconds=r.num(x.get("seconds", 0.0), f"{where}.seconds"),
            issued=r.num(x.get("issued", now), f"{where}.issued"),
        )
    events = []
    for i, e in enumerate(r.seq(d.get("events"), "events")):
        e = r.seq(e, f"events[{i}]")
        if len(e) not in (2, 3):
            raise r.fail(f"events[{i}]", "expected [time, text] or [time, text, gpu]")
        gpu = e[2] if len(e) == 3 else None
        if gpu is not None:
            gpu = r.int_(gpu, f"events[{i}][2]")
            if gpu >= len(gpus):
                raise r.fail(f"events[{i}][2]", f"no gpu {gpu}; gpus are 0..{len(gpus) - 1}")
        events.append(
            Event(
                r.num(e[0], f"events[{i}][0]", allow_inf=True),
                r.text(e[1], f"events[{i}][1]"),
                gpu,
            )
        )
    on_instance = {(k, i.slot): i.job for k, g in enumerate(gpus) for i in g[0] if i.job}
    for jid, run in running.items():
        if on_instance.get((run.gpu, run.slot)) != jid:
            raise r.fail(
                f"running job {jid!r}",
                f"gpu {run.gpu} has no instance {run.slot} holding it; list it in that "
                "GPU's instances with job set",
            )
    for (k, slot), jid in on_instance.items():
        if jid not in running:
            raise r.fail(
                f"gpus[{k}] instance {slot}",
                f"holds job {jid!r}, which is not in running; add it there",
            )
    finished = []
    for i, e in enumerate(r.seq(d.get("finished"), "finished")):
        e = r.seq(e, f"finished[{i}]")
        if len(e) != 2:
            raise r.fail(f"finished[{i}]", "expected [job, gpu]")
        gpu = r.int_(e[1], f"finished[{i}][1]")
        if gpu >= len(gpus):
            raise r.fail(f"finished[{i}][1]", f"no gpu {gpu}; gpus are 0..{len(gpus) - 1}")
        finished.append((r.text(e[0], f"finished[{i}][0]"), gpu))
    pcie: dict[int, int] = {}
    for run in running.values():
        if run.job.pcie_bound:
            pcie[run.gpu] = pcie.get(run.gpu, 0) + 1
    bound_jobs = {jid for jid, run in running.items() if run.job.pcie_bound}
    out_gpus = tuple(
        Gpu(
            k,
            tuple(
                Instance(i.slot, i.job, i.ready_at, i.busy_until, i.job in bound_jobs, i.keep_for)
                for i in insts
            ),
            chan,
            pcie.get(k, 0),
            node,
            local,
        )
        for k, (insts, chan, node, local) in enumerate(gpus)
    )
    return ClusterSnapshot(
        now=now,
        model=model,
        gpus=out_gpus,
        pending=MappingProxyType(pending),
        running=MappingProxyType(running),
        planned=MappingProxyType(planned),
        next_batch=r.int_(d.get("next_batch", 0), "next_batch"),
        pcie_max=r.num(d.get("pcie_max", 30.08), "pcie_max"),
        seed=r.int_(d.get("seed", 0), "seed"),
        events=tuple(events),
        finished=tuple(finished),
    )
