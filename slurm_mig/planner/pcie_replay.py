"""Replay of a plan under the PCIe contention model (Eq. 2) for PCIe-aware FAR
(``planner.far_pcie``): the plan executed exactly as the simulator executes it under
policy ``far``. Each GPU starts its planned tasks in plan order as their slices free up,
with Table 1's create/destroy times and Eq. 2 applied while PCIe-bound tasks overlap,
on the simulator's own GPU state model (``planner.gpustate``), from empty GPUs or from the
GPUs as the batch finds them (``start``, what the simulator policy passes).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass

from ..geometry import GpuModel, Slot, slot_mask
from ..job import Job
from ..plan import Plan
from .gpustate import GpuState, JobRun, LiveInstance
from .snapshot import INF, ClusterSnapshot, Gpu

__all__ = ["Replay", "replay"]

_FINISH, _START = 0, 1


@dataclass(frozen=True, slots=True)
class _Live:
    """A job that holds an instance when a batch is planned (from the snapshot):
    ``seconds`` alone on it, ``remaining`` fraction of its work left, its current
    slowdown ``sd`` (0 if it has not begun: it then begins at ``begin_at``)."""

    seconds: float
    remaining: float
    alpha: float = 1.0
    demand: float = 0.0
    sd: float = 0.0
    begin_at: float = 0.0


def _live_jobs(start: ClusterSnapshot, gpu: Gpu) -> list[tuple[Slot, float, _Live | None]]:
    """(slot, ready_at, job) of every instance of ``gpu``, times from ``start.now``."""
    now = start.now
    out = []
    for inst in gpu.instances:
        ready = max(0.0, inst.ready_at - now)
        live = None
        if inst.job is not None:
            run = start.running.get(inst.job)
            if run is not None:
                j = run.job
                live = _Live(
                    seconds=j.time(inst.slot.size),
                    remaining=run.remaining,
                    alpha=j.alpha,
                    demand=j.pcie_demand,
                    sd=run.slowdown if run.started is not None else 0.0,
                    begin_at=ready,
                )
            else:  # a standing plan of an earlier batch: it runs until busy_until
                waiting = start.pending.get(inst.job)
                end = INF if inst.busy_until is None else inst.busy_until - now
                live = _Live(
                    seconds=max(end - ready, 1e-9),
                    remaining=1.0,
                    alpha=waiting.alpha if waiting is not None else 1.0,
                    demand=waiting.pcie_demand if waiting is not None else 0.0,
                    begin_at=ready,
                )
        out.append((inst.slot, ready, live))
    return out


@dataclass(frozen=True)
class Replay:
    """A plan's predicted outcome under the slowdown model."""

    makespan: float  # last end, of the batch's tasks and of the jobs already running
    end_sum: float  # sum of those end times (every batch task is ready at ``now``)
    end: list[float]  # per batch task
    exec_s: list[float]  # seconds each batch task ran (its duration with the slowdown)

    @property
    def last_start(self) -> float:
        """When the batch's last task starts (``far`` plans the next batch then)."""
        return max((e - x for e, x in zip(self.end, self.exec_s)), default=0.0)


class _GpuReplay:
    """One GPU's replay: the planner's GPU state (``planner.gpustate``, the engine's
    own), its event heap and the queue of planned tasks not started yet."""

    def __init__(
        self, model: GpuModel, tasks, info, entries, pmax: float, end, exec_s, channel: float
    ) -> None:
        self.model, self.tasks, self.info, self.pmax = model, tasks, info, pmax
        self.end, self.exec_s = end, exec_s
        self.gpu = GpuState(0, channel)
        self.now = 0.0
        self.heap: list = []
        self.seq = 0
        self.queue = list(entries)
        self.live_ends: list[float] = []

    def push(self, t: float, kind: int, obj, tok) -> None:
        """Schedule an event; the sequence number breaks ties in push order."""
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, obj, tok))

    def ends(self, runs: list[JobRun]) -> None:
        """Put the new ends of ``runs`` on the heap (their earlier ones are stale)."""
        for r in runs:
            self.push(r.finish, _FINISH, r, r.ver)

    def begin(self, inst: LiveInstance) -> None:
        """The job bound to ``inst`` (a planned task, or one of an earlier batch) starts."""
        now, i = self.now, inst.job
        if i >= 0:
            alpha, demand = self.info[i]
            run = JobRun(i, inst, self.tasks[i].times[inst.slot.size], 1.0, now, alpha, demand)
        else:
            lj = inst.live
            run = JobRun(i, inst, lj.seconds, lj.remaining, now, lj.alpha, lj.demand)
        self.ends(self.gpu.start(run, now, self.pmax))

    def finish(self, run: JobRun) -> None:
        """``run`` ends now: free its instance, record its end, re-pace the others."""
        if run.idx >= 0:
            self.exec_s[run.idx] = self.now - run.started
            self.end[run.idx] = self.now
        else:
            self.live_ends.append(self.now)
        self.ends(self.gpu.stop(run, self.now, self.pmax))

    def startable(self) -> list:
        """Take off the queue the planned tasks whose slices are free and not claimed by
        an earlier queued task (plan order per slice), in queue order."""
        b, blocked = self.gpu.busy, 0
        kept, starts = [], []
        for e in self.queue:
            if e[2] & (b | blocked):
                blocked |= e[2]
                kept.append(e)
            else:
                b |= e[2]
                starts.append(e)
        self.queue = kept
        return starts

    def destroy_idle(self, mask: int, key: tuple[int, int]) -> None:
        """Destroy the idle instances (other than ``key``) overlapping ``mask``, one
        after another on the GPU's reconfiguration channel."""
        gpu = self.gpu
        for k in sorted(gpu.insts):
            inst = gpu.insts[k]
            if inst.job == -1 and inst.mask & mask and k != key:
                gpu.destroy(k, self.now, self.model.destroy_time(inst.slot.size))

    def place(self, i: int, slot: Slot, mask: int) -> None:
        """Bind planned task ``i`` to its instance (created if missing) and start it
        when the instance is ready."""
        now, key, gpu = self.now, (slot.placement.start, slot.size), self.gpu
        if mask & gpu.held:
            self.destroy_idle(mask, key)
        inst = gpu.insts.get(key)
        if inst is None:
            inst = gpu.create(key, slot, mask, now, self.model.create_time(slot.size))
        inst.job = i
        gpu.busy |= mask
        t = inst.ready_at if inst.ready_at > now else now
        if t <= now:
            self.begin(inst)
        else:
            self.push(t, _START, inst, i)

    def scan(self) -> None:
        """Start every planned task the driver's start rule allows now."""
        for i, slot, mask in self.startable():
            self.place(i, slot, mask)

    def seed(self, live_insts) -> None:
        """Load the instances found on the GPU and the jobs of earlier batches on them."""
        now, gpu = self.now, self.gpu
        for slot, ready_at, lj in live_insts:
            inst = gpu.found((slot.placement.start, slot.size), slot, slot_mask(slot), ready_at)
            if lj is None:
                continue
            inst.job, inst.live = -2, lj  # -2: a job of an earlier batch
            gpu.busy |= inst.mask
            if lj.sd > 0.0:
                run = JobRun(-2, inst, lj.seconds, lj.remaining, now, lj.alpha, lj.demand)
                gpu.resume(run, lj.sd)
                self.push(run.finish, _FINISH, run, run.ver)
            else:
                self.push(max(lj.begin_at, ready_at, now), _START, inst, -2)

    def run(self) -> list[float]:
        """Process events until the GPU is idle; the end times of earlier batches' jobs."""
        heap = self.heap
        self.scan()
        while heap:
            now = self.now = heap[0][0]
            while heap and heap[0][0] <= now:
                _, _, kind, obj, tok = heapq.heappop(heap)
                if kind == _FINISH:
                    if obj.ver != tok:
                        continue
                    self.finish(obj)
                else:
                    self.begin(obj)
            self.scan()
        if self.queue or self.gpu.runs:  # pragma: no cover - every planned task fits
            raise AssertionError("replay left planned tasks unstarted")
        return self.live_ends


def _replay_gpu(
    model: GpuModel, tasks, info, entries, pmax, end, exec_s, live_insts=(), channel=0.0
) -> list[float]:
    """One GPU: the engine's arithmetic (sim.engine) under the driver's start rule (a
    GPU's planned tasks start in plan order as their slices free), from the instances
    ``live_insts`` (`_live_jobs`). Returns the end times of the jobs already there."""
    gpu = _GpuReplay(model, tasks, info, entries, pmax, end, exec_s, channel)
    gpu.seed(live_insts)
    return gpu.run()


def replay(
    plan: Plan,
    tasks: Sequence[Job],
    info: Sequence[tuple[float, float]],
    pcie_max: float,
    start: ClusterSnapshot | None = None,
) -> Replay:
    """Predicted end of every task of ``plan`` under Eq. 2 (seconds from the plan's
    start), executed as the driver executes a plan (each GPU starts its planned tasks in
    plan order as their slices free up), from idle GPUs or from the GPUs of ``start``
    with the jobs already on them. No job arrives meanwhile."""
    index = {t.id: i for i, t in enumerate(tasks)}
    by_gpu: dict[int, list] = {}
    for t in plan.tasks:
        if not t.running:
            by_gpu.setdefault(t.gpu, []).append(t)
    end = [math.nan] * len(tasks)
    exec_s = [0.0] * len(tasks)
    entries: dict[int, list] = {}
    for g, planned in by_gpu.items():
        planned.sort(key=lambda t: (t.start, t.slot))
        entries[g] = [(index[t.id], t.slot, slot_mask(t.slot)) for t in planned]
    live: list[float] = []
    if start is None:
        for e in entries.values():
            _replay_gpu(plan.model, tasks, info, e, pcie_max, end, exec_s)
    else:
        for k, gpu in enumerate(start.gpus):
            live += _replay_gpu(
                plan.model,
                tasks,
                info,
                entries.get(k, []),
                pcie_max,
                end,
                exec_s,
                _live_jobs(start, gpu),
                max(0.0, gpu.channel_free - start.now),
            )
    finite = [e for e in end if not math.isnan(e)] + live
    return Replay(max(finite, default=0.0), math.fsum(finite), end, exec_s)
