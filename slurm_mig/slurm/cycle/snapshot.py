"""Step 2 of the cycle: the planning core's `ClusterSnapshot` per GPU model (the usable
GPUs, the busy jobs' instances, the standing plans, the waiting jobs, the events)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from types import MappingProxyType

from ...geometry import GpuModel, get_model
from ...planner.driver import MIN_RUNTIME
from ...planner.snapshot import ClusterSnapshot, Event, Gpu, Instance, Job, Planned, Running
from ..jobrecord import JobLike, job_sort_key
from ..sitepolicy import node_pools
from .classify import Busy, Classified, feasible
from .inputs import Estimate, Snapshot
from .slots import legal_slot

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


def job_deadline(job: JobLike, memo: dict | None = None) -> float | None:
    """A job's deadline (epoch seconds): Slurm's own (``sbatch --deadline``), else its
    ``deadline=`` hint (a date, or a duration after submission), else None. A hint that
    does not parse gives none (the estimate reports the problem)."""
    own = getattr(job, "deadline", None)
    if own:
        return float(own)
    from ...hints import HintError, parse_hints

    text = job.comment or ""
    if "deadline=" not in text:
        return None
    cache = memo if memo is not None else {}
    key = ("deadline-hint", text)
    if key not in cache:
        try:
            cache[key] = parse_hints(text)
        except HintError:
            cache[key] = None
    hints = cache[key]
    if hints is None or job.submit_time is None:
        return None if hints is None else hints.deadline_at
    return hints.deadline(job.submit_time)


def _job(
    job: JobLike, est: Estimate, model: GpuModel, now: float, memo: dict, priority: int = 0
) -> Job:
    return Job(
        id=job.job_id,
        arrival=_submitted(job, now),
        times=_times(est, model, memo),
        memory=est.mem or 0,
        pcie_demand=est.pcie,
        alpha=est.alpha,
        restartable=est.restartable,
        kind=est.key,
        deadline=job_deadline(job, memo),
        priority=float(priority),
    )


def cluster_snapshots(snap: Snapshot, view: Classified) -> tuple[ClusterSnapshot, ...]:
    """Step 2: one `ClusterSnapshot` per GPU model of the usable nodes (package doc),
    and per active reservation: the GPUs of a reservation's nodes are planned only for
    the jobs of that reservation, the others only for jobs of none."""
    now = snap.now
    memo: dict = {}
    pools = (
        node_pools(snap.policy, snap.nodes)
        if snap.policy is not None
        else dict.fromkeys(snap.nodes, "")
    )
    groups: dict[tuple[str, str], list[tuple[str, int]]] = defaultdict(list)
    for key, model in view.models.items():
        groups[(pools.get(key[0], ""), model)].append(key)
    priority = view.priority
    out = []
    for pool, name in sorted(groups):
        model = get_model(name)
        keys = sorted(groups[(pool, name)])
        index = {k: i for i, k in enumerate(keys)}
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

        def running_job(jid: str, model: GpuModel = model, busy: dict = busy) -> Running:
            b, g = busy[jid]
            est = snap.estimates.get(jid) or Estimate(jid)
            j = _job(view.jobs[jid], est, model, now, memo)
            seconds = max(b.end - b.ready, MIN_RUNTIME)
            left = max(0.0, min(1.0, (b.end - now) / seconds))
            return Running(j, g, b.slot, b.ready if b.started else None, left, 1.0, b.end)

        gpus = tuple(
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
        held = sorted(
            [*view.waiting, *(view.jobs[j] for j in view.kept)],
            key=lambda j: (-priority.get(j.job_id, 0), _submitted(j, now), job_sort_key(j.job_id)),
        )
        pending_ids = [
            j.job_id
            for j in held
            if view.pool.get(j.job_id, "") == pool
            and name in feasible(snap.estimates.get(j.job_id))
        ]

        def pending_job(jid: str, model: GpuModel = model) -> Job:
            return _job(view.jobs[jid], snap.estimates[jid], model, now, memo, priority.get(jid, 0))

        pending = _Lazy(pending_ids, pending_job)
        planned: dict[str, Planned] = {}
        for jid, a in view.kept.items():
            g = index.get((a.node, a.gpu))
            slot = legal_slot(a.model, a.profile, a.placement)
            if g is None or slot is None or jid not in pending:
                continue
            planned[jid] = Planned(jid, g, slot, a.batch, a.order, a.planned_seconds, a.issued)
        events = tuple(
            Event(at, what, None if node is None else index.get((node, gpu)))
            for at, what, node, gpu in view.events
            if node is None or (node, gpu) in index
        )
        out.append(
            ClusterSnapshot(
                now=now,
                model=model,
                gpus=gpus,
                pending=pending,
                running=_Lazy(list(busy), running_job),
                planned=MappingProxyType(planned),
                next_batch=view.max_batch + 1,
                pcie_max=_pcie_max(model),
                events=events,
            )
        )
    return tuple(out)


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
