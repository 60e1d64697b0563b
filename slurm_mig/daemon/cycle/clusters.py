"""Step 2 of the cycle: the planning core's `ClusterSnapshot` per GPU model (the usable
GPUs, the busy jobs' instances, the standing plans, the waiting jobs, the events)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import partial
from types import MappingProxyType

from ...geometry import GpuModel, get_model
from ...planner.driver import MIN_RUNTIME
from ...planner.snapshot import ClusterSnapshot, Event, Gpu, Instance, Job, Planned, Running
from ...slurm.jobrecord import JobLike, job_sort_key
from ...slurm.sitepolicy import node_pools
from .classify import Busy, Classified, feasible
from .inputs import CycleInput, Estimate
from .slots import plan_slot

__all__ = ["cluster_snapshots", "job_deadline"]


def _submitted(job: JobLike, now: float) -> float:
    return job.submit_time if job.submit_time is not None else now


def _times(est: Estimate, model: GpuModel, memo: dict) -> Mapping[int, float]:
    """Seconds per size on ``model`` (never below MIN_RUNTIME); jobs of one kind share
    one estimate, so the table is made once per estimate and model."""
    key = (id(est), model.name)
    hit = memo.get(key)
    if hit is not None:
        return hit[0]
    raw = est.times.get(model.name, {})
    table = {}
    for s in model.planner_sizes:
        t = raw.get(s, math.inf)
        table[s] = t if math.isinf(t) else max(float(t), MIN_RUNTIME)
    memo[key] = (table, est)  # keeps est alive: its id cannot be reused meanwhile
    return table


def job_deadline(job: JobLike) -> float | None:
    """A job's deadline (epoch seconds): Slurm's own (``sbatch --deadline``), else its
    ``deadline=`` hint (a date, or a duration after submission), else None. A hint that
    does not parse gives none (the estimate reports the problem). The comment's parse
    is the estimate's own (`hints.cached_hints`): one per comment, not one per use."""
    own = getattr(job, "deadline", None)
    if own:
        return float(own)
    from ...hints import HintError, cached_hints

    text = job.comment or ""
    if "deadline=" not in text:
        return None
    hints = cached_hints(text)
    if isinstance(hints, HintError):
        hints = None
    if hints is None or job.submit_time is None:
        return None if hints is None else hints.deadline_at
    return hints.deadline(job.submit_time)


def _job(
    job: JobLike,
    est: Estimate,
    model: GpuModel,
    now: float,
    memo: dict,
    priority: int = 0,
    tasks: int | None = None,
) -> Job:
    """The planner's `Job` of ``job`` on ``model`` (a job of several slices: one job on
    its region, ``tasks`` given for a busy one, its estimate's otherwise)."""
    return Job(
        id=job.job_id,
        arrival=_submitted(job, now),
        times=_times(est, model, memo),
        memory=est.mem or 0,
        pcie_demand=est.pcie,
        alpha=est.alpha,
        restartable=est.restartable,
        kind=est.key,
        deadline=job_deadline(job),
        priority=float(priority),
        tasks=est.tasks if tasks is None else tasks,
    )


def cluster_snapshots(snap: CycleInput, view: Classified) -> tuple[ClusterSnapshot, ...]:
    """Step 2: one `ClusterSnapshot` per GPU model of the usable nodes (package doc),
    and per active reservation: the GPUs of a reservation's nodes are planned only for
    the jobs of that reservation, the others only for jobs of none."""
    memo: dict = {}
    groups = _gpu_groups(snap, view)
    held = _held_by_priority(view, snap.now)
    return tuple(
        _group_snapshot(snap, view, pool, name, sorted(groups[(pool, name)]), held, memo)
        for pool, name in sorted(groups)
    )


def group_keys(snap: CycleInput, view: Classified) -> list[tuple[str, str, tuple]]:
    """What identifies each group of `cluster_snapshots`, in its order: reservation,
    GPU model and the GPUs as (node, index)."""
    groups = _gpu_groups(snap, view)
    return [(pool, name, tuple(sorted(groups[(pool, name)]))) for pool, name in sorted(groups)]


def _gpu_groups(snap: CycleInput, view: Classified) -> dict[tuple[str, str], list[tuple[str, int]]]:
    """(reservation, GPU model) -> its GPUs as (node, index): each group is planned
    apart ("" for the nodes of no active reservation)."""
    pools = (
        node_pools(snap.policy, snap.nodes)
        if snap.policy is not None
        else dict.fromkeys(snap.nodes, "")
    )
    groups: dict[tuple[str, str], list[tuple[str, int]]] = defaultdict(list)
    for key, model in view.models.items():
        groups[(pools.get(key[0], ""), model)].append(key)
    return groups


def _held_by_priority(view: Classified, now: float) -> list[JobLike]:
    """The held jobs to plan (waiting or with a standing plan) in the order they would
    start: higher priority, then earlier submission, then job id."""
    priority = view.priority
    return sorted(
        [*view.waiting, *(view.jobs[j] for j in view.kept)],
        key=lambda j: (-priority.get(j.job_id, 0), _submitted(j, now), job_sort_key(j.job_id)),
    )


def _group_snapshot(
    snap: CycleInput,
    view: Classified,
    pool: str,
    name: str,
    keys: list[tuple[str, int]],
    held: list[JobLike],
    memo: dict,
) -> ClusterSnapshot:
    """The `ClusterSnapshot` of the GPUs ``keys`` (model ``name``, reservation
    ``pool``): their busy instances, the held jobs of the pool that can run on the
    model, their standing plans, and the events on these GPUs or on none."""
    now, model = snap.now, get_model(name)
    index = {k: i for i, k in enumerate(keys)}
    insts, busy, pcie = _busy_instances(snap, view, index)
    pending_ids = [
        j.job_id
        for j in held
        if view.pool.get(j.job_id, "") == pool and name in feasible(snap.estimates.get(j.job_id))
    ]
    pending = _Lazy(pending_ids, partial(_pending_job, snap, view, model, memo))
    return ClusterSnapshot(
        now=now,
        model=model,
        gpus=_gpus(keys, insts, pcie),
        pending=pending,
        running=_Lazy(list(busy), partial(_running_job, snap, view, model, memo, busy)),
        planned=MappingProxyType(_standing_plans(view, index, pending, snap.estimates)),
        next_batch=view.max_batch + 1,
        pcie_max=_pcie_max(model),
        events=_events(view, index),
    )


def _busy_instances(
    snap: CycleInput, view: Classified, index: Mapping[tuple[str, int], int]
) -> tuple[dict[int, list[Instance]], dict[str, tuple[Busy, int]], dict[int, int]]:
    """The busy jobs on the GPUs of ``index``: each GPU's instances, each busy job with
    its GPU, and each GPU's count of PCIe-bound jobs."""
    insts: dict[int, list[Instance]] = defaultdict(list)
    busy: dict[str, tuple[Busy, int]] = {}
    pcie: dict[int, int] = defaultdict(int)
    for b in view.busy:
        g = index.get((b.node, b.gpu))
        if g is None:
            continue
        est = snap.estimates.get(b.job_id)
        bound = est is not None and est.pcie > 0
        insts[g].append(Instance(b.slot, b.job_id, b.ready, b.end, bound))
        busy[b.job_id] = (b, g)
        pcie[g] += bound
    return insts, busy, pcie


def _gpus(
    keys: list[tuple[str, int]], insts: Mapping[int, list[Instance]], pcie: Mapping[int, int]
) -> tuple[Gpu, ...]:
    """The planner's GPUs, in ``keys`` order, with their instances by placement."""
    return tuple(
        Gpu(
            i,
            tuple(sorted(insts[i], key=lambda x: (x.slot.placement.start, x.slot.size))),
            -math.inf,
            pcie[i],
            node,
            local,
        )
        for i, (node, local) in enumerate(keys)
    )


def _running_job(
    snap: CycleInput,
    view: Classified,
    model: GpuModel,
    memo: dict,
    busy: Mapping[str, tuple[Busy, int]],
    jid: str,
) -> Running:
    """Busy job ``jid`` as the planner's `Running`, with the share of its run left."""
    now = snap.now
    b, g = busy[jid]
    seconds = max(b.end - b.ready, MIN_RUNTIME)
    if b.stale:  # a node's stale record: no job of Slurm's, it only holds its slices
        j = Job(id=jid, arrival=b.ready, times=MappingProxyType({b.slot.size: seconds}))
    else:
        est = snap.estimates.get(jid) or Estimate(jid)
        j = _job(view.jobs[jid], est, model, now, memo, tasks=b.tasks)
    left = max(0.0, min(1.0, (b.end - now) / seconds))
    return Running(j, g, b.slot, b.ready if b.started else None, left, 1.0, b.end, b.planned)


def _pending_job(snap: CycleInput, view: Classified, model: GpuModel, memo: dict, jid: str) -> Job:
    """Held job ``jid`` as the planner's `Job` on ``model``, with its priority."""
    est = snap.estimates[jid]
    job = view.jobs[jid]
    out = _job(job, est, model, snap.now, memo, view.priority.get(jid, 0))
    least = snap.moved_up.get(jid, (0, 0))[1]
    if least:  # moved up: not back below where it went (squeue may show the old run's count)
        times = {s: (t if s >= least else math.inf) for s, t in out.times.items()}
        if any(math.isfinite(t) for t in times.values()):
            out = replace(out, times=MappingProxyType(times))
    return out


def _standing_plans(
    view: Classified,
    index: Mapping[tuple[str, int], int],
    pending: Mapping[str, Job],
    estimates: Mapping[str, Estimate],
) -> dict[str, Planned]:
    """The standing plans on the GPUs of ``index`` of the jobs ``pending`` holds; a
    plan whose slot the model does not have, or for another count of instances than
    the job now asks (its ``tasks=`` changed while held: its estimate says), is
    dropped. ``pending``'s jobs are not built here (a steady cycle builds few)."""
    planned: dict[str, Planned] = {}
    for jid, a in view.kept.items():
        g = index.get((a.node, a.gpu))
        slot = plan_slot(a)
        if g is None or slot is None or jid not in pending:
            continue
        est = estimates.get(jid)
        if (est.tasks if est is not None else 1) != a.tasks:
            continue
        planned[jid] = Planned(jid, g, slot, a.batch, a.order, a.planned_seconds, a.issued)
    return planned


def _events(view: Classified, index: Mapping[tuple[str, int], int]) -> tuple[Event, ...]:
    """The events on the GPUs of ``index`` (by their planner index) or on none."""
    return tuple(
        Event(at, what, None if node is None else index.get((node, gpu)))
        for at, what, node, gpu in view.events
        if node is None or (node, gpu) in index
    )


class _Lazy(Mapping):
    """A read-only mapping whose values are made when first read: a steady cycle reads
    few of the ten thousand jobs a snapshot may name."""

    __slots__ = ("_keys", "_make", "_made")

    def __init__(self, keys: Sequence[str], make) -> None:
        self._keys = dict.fromkeys(keys)
        self._make = make
        self._made: dict = {}

    def __getitem__(self, key: str):
        got = self._made.get(key)
        if got is None:
            if key not in self._keys:
                raise KeyError(key)
            got = self._made[key] = self._make(key)
        return got

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def __iter__(self):
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)


def _pcie_max(model: GpuModel) -> float:
    from ...pcie import pcie_max_for

    return pcie_max_for(model)
