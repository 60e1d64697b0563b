"""SMART-MIG's deadline schedulers over fixed GPU configurations (Section IV-C).

Every GPU keeps a configuration (``mig_configs``); waiting jobs, earliest deadline first,
go onto free slots of it:

* ``edf`` - EDF most packed (Alg. 1): GPUs by busy compute slices (most first), in each
  the slowest free slot that still meets the job's deadline; if none anywhere, the slot
  that finishes it first.
* ``met`` - EDF marginal ET (Alg. 2): the free slot with the least
  ``tardiness + a * marginal energy``, where the marginal energy is what the GPU draws
  over the job's run on top of its running jobs, assuming nothing else starts there.
* ``cedf`` - categorical EDF (Alg. 3): jobs by throughput class (1: scales up to 7g, ...
  4: 1g already gives 80 %) then deadline, GPUs by mean slot size (largest first),
  slots chosen as Alg. 1.

A job that asked for a size no configuration has runs on a free slot of that size
outside the configuration (on the least busy GPU), so that it never waits forever.
A job that gives no deadline is planned as due ``default_slack`` times its fastest
time after it arrived (it adds no tardiness to any report). Jobs are never stopped: a
slot held by a running job is not free. Non-preemptive, as on Slurm.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import partial

from ..geometry import GpuModel, MaskTables, Slot, mask_tables, slot_mask
from ..power import power_curve
from .baseline import busy_instance, start_ops
from .decisions import Decisions, Op
from .mig_configs import Layout, MigConfig, parse_configs, realise
from .registry import UnknownPolicy
from .snapshot import INF, ClusterSnapshot, Gpu, Job, runnable_sizes

__all__ = [
    "DEFAULT_A",
    "DEFAULT_SLACK",
    "DeadlinePolicy",
    "assign_jobs",
    "marginal_energy",
    "planning_deadline",
    "throughput_class",
]

DEFAULT_SLACK = 1.5  # the top of SMART-MIG's U(1, 1.5) deadline draw
# MET's weight of energy against tardiness, seconds per joule: a = t/(2e) per job, from
# EDF on the smart-mig workload at rate 8 (seeds 1000-1004, not used for any figure).
DEFAULT_A = 1.0e-3
RULES = ("edf", "met", "cedf")


def planning_deadline(job: Job, default_slack: float = DEFAULT_SLACK) -> float:
    """The deadline a scheduler plans with: the job's own, else ``default_slack`` times
    its fastest time after it arrived."""
    if job.deadline is not None:
        return job.deadline
    fastest = min(job.times.values(), default=INF)
    return job.arrival + default_slack * fastest if math.isfinite(fastest) else INF


def throughput_class(job: Job, model: GpuModel) -> int:
    """CEDF's class (Alg. 3): 1 when 4g gives under 80 % of the largest size's
    throughput (nearly linear), 2 when 2g does, 3 when 1g does, else 4 (capped)."""
    top = max(model.planner_sizes)
    t_top = job.time(top)
    if not math.isfinite(t_top):
        return 1

    def below(size: int) -> bool:
        t = job.time(size)
        # throughput ratio thr(size) / thr(top) = t_top / t
        return not math.isfinite(t) or t_top / t < 0.8

    mid = max((s for s in model.planner_sizes if s < top), default=top)
    for cls, size in ((1, mid), (2, 2), (3, 1)):
        if size in model.planner_sizes and below(size):
            return cls
    return 4


def marginal_energy(
    running: Sequence[tuple[float, int]],
    now: float,
    size: int,
    seconds: float,
    curve: Sequence[float],
) -> float:
    """Joules a GPU draws over ``seconds`` from ``now`` on top of its running jobs
    (``(end, compute slices)`` each) when a job of ``size`` slices runs there too."""
    end = now + seconds
    busy = sum(s for e, s in running if e > now)
    points = sorted((e, s) for e, s in running if now < e < end)
    total, t = 0.0, now
    for e, s in points:
        total += (curve[busy + size] - curve[busy]) * (e - t)
        busy -= s
        t = e
    total += (curve[busy + size] - curve[busy]) * (end - t)
    return total


@dataclass
class _GpuState:
    gpu: Gpu
    layout: Layout
    free: list[Slot]
    busy: int  # compute slices running
    running: list[tuple[float, int]]  # (end, size) of jobs there


def _state(gpu: Gpu, layout: Layout, now: float) -> _GpuState:
    running = [
        (INF if i.busy_until is None else max(i.busy_until, now), i.slot.size)
        for i in gpu.instances
        if i.job is not None
    ]
    return _GpuState(gpu, layout, list(layout.free), sum(s for _, s in running), running)


def assign_jobs(
    snap: ClusterSnapshot,
    layouts: Sequence[Layout],
    rule: str,
    *,
    a: float = DEFAULT_A,
    default_slack: float = DEFAULT_SLACK,
    shift: float = 0.0,
    gpus: Sequence[Gpu] | None = None,
) -> list[Op]:
    """Operations that start waiting jobs on free slots of ``layouts`` (one per GPU)
    under ``rule`` (``edf``, ``met`` or ``cedf``); deadlines are planned ``shift``
    seconds early. ``gpus``: the snapshot's GPUs as earlier operations of this decision
    left them (default: as the snapshot has them)."""
    if rule not in RULES:
        raise ValueError(f"rule {rule!r} must be one of {', '.join(RULES)}")
    model, now = snap.model, snap.now
    views = snap.gpus if gpus is None else gpus
    states = [_state(g, lay, now) for g, lay in zip(views, layouts)]
    if not any(st.free for st in states):
        return []
    jobs = list(snap.pending.values())
    due = {j.id: planning_deadline(j, default_slack) - shift for j in jobs}
    if rule == "cedf":
        jobs.sort(key=lambda j: (throughput_class(j, model), due[j.id], j.arrival, j.id))
    else:
        jobs.sort(key=lambda j: (due[j.id], j.arrival, j.id))
    curve = power_curve(model) if rule == "met" else ()
    tables = mask_tables(model)
    by_size = sorted(states, key=lambda st: (-st.layout.config.mean_size, st.gpu.index))
    ops: list[Op] = []
    for job in jobs:
        sizes = set(runnable_sizes(job, model))
        if job.size is not None:
            sizes &= {job.size}
        if not sizes:
            continue
        if rule == "met":
            pick = _met(states, job, sizes, now, due[job.id], a, curve)
        else:
            order = (
                by_size
                if rule == "cedf"
                else sorted(states, key=lambda st: (-st.busy, st.gpu.index))
            )
            pick = _packed(order, job, sizes, now, due[job.id])
        if pick is None and not any(x.size in sizes for st in states for x in st.layout.slots):
            pick = _outside(states, job, sizes, tables)
        if pick is None:
            continue
        st, slot = pick
        ops.extend(start_ops(st.gpu, job.id, slot, model, now))
        seconds = job.time(slot.size)
        ops[-1] = replace(ops[-1], end=now + seconds)
        st.gpu = st.gpu.placed(busy_instance(slot, job))
        taken = slot_mask(slot)
        st.free = [x for x in st.free if not slot_mask(x) & taken]
        st.busy += slot.size
        st.running.append((now + seconds, slot.size))
        if not any(s.free for s in states):
            break
    return ops


def _outside(
    states: Sequence[_GpuState], job: Job, sizes: set[int], tables: MaskTables
) -> tuple[_GpuState, Slot] | None:
    """A slot for a job no configuration has a size for (it asked for a size the static
    configurations lack): the fastest of its sizes free of running jobs on the least
    busy GPU; the configuration yields to it rather than leave the job waiting forever."""
    for st in sorted(states, key=lambda st: (st.busy, st.gpu.index)):
        for size in sorted(sizes, key=lambda z: (job.time(z), z)):
            slot = tables.first_free(size, st.gpu.busy_mask)
            if slot is not None:
                return st, slot
    return None


def _slowest_first(st: _GpuState, job: Job, sizes: set[int]) -> list[Slot]:
    slots = [s for s in st.free if s.size in sizes]
    slots.sort(key=lambda s: (-job.time(s.size), s.size, s.placement.start))
    return slots


def _packed(
    order: Sequence[_GpuState], job: Job, sizes: set[int], now: float, due: float
) -> tuple[_GpuState, Slot] | None:
    """Alg. 1 steps 2-13: the slowest slot meeting the deadline on the first GPU in
    ``order`` that has one, else the slot that finishes first."""
    best, best_t = None, INF
    for st in order:
        for slot in _slowest_first(st, job, sizes):
            t = now + job.time(slot.size)
            if t <= due:
                return st, slot
            if t < best_t:
                best, best_t = (st, slot), t
    return best


def _met(
    states: Sequence[_GpuState],
    job: Job,
    sizes: set[int],
    now: float,
    due: float,
    a: float,
    curve: Sequence[float],
) -> tuple[_GpuState, Slot] | None:
    """Alg. 2: the free slot with the least tardiness + a * marginal energy."""
    best, best_key = None, None
    for st in states:
        for slot in _slowest_first(st, job, sizes):
            seconds = job.time(slot.size)
            late = max(0.0, now + seconds - due)
            extra = marginal_energy(st.running, now, slot.size, seconds, curve)
            key = (late + a * extra, seconds, st.gpu.index, slot.placement.start)
            if best_key is None or key < best_key:
                best, best_key = (st, slot), key
    return best


class DeadlinePolicy:
    """``edf``, ``met`` or ``cedf`` on static configurations (``configs``: paper
    numbers cycled over the GPUs; default Fig. 12's 1,1,2,3,3,5,5,10)."""

    kind = "online"

    def __init__(
        self,
        name: str = "edf",
        *,
        configs: str | Sequence[int] | None = None,
        a: float = DEFAULT_A,
        default_slack: float = DEFAULT_SLACK,
    ) -> None:
        if name not in RULES:
            raise UnknownPolicy(f"{__name__} has no policy {name!r}; it has {', '.join(RULES)}")
        try:
            a, default_slack = float(a), float(default_slack)
        except (TypeError, ValueError):
            raise UnknownPolicy(f"policy {name!r}: a and default_slack must be numbers") from None
        if not (0.0 <= a < INF):
            raise UnknownPolicy(f"policy {name!r}: a {a} must be a number >= 0 (seconds per J)")
        if not (1.0 <= default_slack <= 1000.0):
            raise UnknownPolicy(
                f"policy {name!r}: default_slack {default_slack} must be in [1, 1000]"
            )
        self.name = name
        self.spec = configs
        self.a = a
        self.default_slack = default_slack
        self._configs: dict[str, tuple[MigConfig, ...]] = {}

    def configs(self, model: GpuModel) -> tuple[MigConfig, ...]:
        got = self._configs.get(model.name)
        if got is None:
            try:
                got = self._configs[model.name] = parse_configs(self.spec, model)
            except ValueError as exc:
                raise UnknownPolicy(f"policy {self.name!r}: {exc}") from None
        return got

    def layouts(self, snap: ClusterSnapshot) -> list[Layout]:
        cfgs = self.configs(snap.model)
        return [realise(cfgs[k % len(cfgs)], g) for k, g in enumerate(snap.gpus)]

    def decide(self, snap: ClusterSnapshot) -> Decisions:
        ops = assign_jobs(
            snap, self.layouts(snap), self.name, a=self.a, default_slack=self.default_slack
        )
        return Decisions(tuple(ops))


POLICIES = {rule: partial(DeadlinePolicy, rule) for rule in RULES}  # configs, a, default_slack
