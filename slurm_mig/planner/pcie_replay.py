"""Replay of a plan under the PCIe contention model (Eq. 2) for PCIe-aware FAR
(``planner.far_pcie``): the plan executed exactly as the simulator executes it under
policy ``far``. Each GPU starts its planned tasks in plan order as their slices free up,
with Table 1's create/destroy times and Eq. 2 applied while PCIe-bound tasks overlap
(the engine's own re-pacing, ``planner.pacing.repace``), from empty GPUs or from the
GPUs as the batch finds them (``start``, what the simulator policy passes).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass

from ..geometry import GpuModel, Slot, slot_mask
from ..plan import Plan
from ..workload import Task
from .pacing import repace
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


class _Run:
    __slots__ = ("idx", "T", "rem", "sd", "t0", "ver", "finish", "pcie", "alpha", "demand",
                 "inst", "started")  # fmt: skip

    def __init__(self, idx, T, alpha, demand, inst, now, rem=1.0):
        self.idx, self.T, self.rem, self.sd, self.t0 = idx, T, rem, 0.0, now
        self.ver, self.finish, self.alpha, self.demand = 0, math.inf, alpha, demand
        self.pcie = demand > 0.0
        self.inst, self.started = inst, now


class _Inst:
    __slots__ = ("slot", "mask", "ready_at", "job", "live")

    def __init__(self, slot: Slot, mask: int, ready_at: float) -> None:
        self.slot, self.mask, self.ready_at, self.job = slot, mask, ready_at, -1
        self.live: _Live | None = None  # the job of a previous batch bound to it


class _GpuReplay:
    """One GPU's replay state: its instances, running jobs, event heap and the queue of
    planned tasks not started yet (the engine's state, reduced to one GPU)."""

    def __init__(
        self, model: GpuModel, tasks, info, entries, pmax: float, end, exec_s, channel: float
    ) -> None:
        self.model, self.tasks, self.info, self.pmax = model, tasks, info, pmax
        self.end, self.exec_s, self.channel = end, exec_s, channel
        self.now = 0.0
        self.insts: dict[tuple[int, int], _Inst] = {}
        self.busy = self.held = 0
        self.runs: list[_Run] = []
        self.n_pcie = 0
        self.heap: list = []
        self.seq = 0
        self.queue = list(entries)
        self.live_ends: list[float] = []

    def push(self, t: float, kind: int, obj, tok) -> None:
        """Schedule an event; the sequence number breaks ties in push order."""
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, obj, tok))

    def pace(self) -> None:
        """Re-predict the end of every PCIe-bound run after their count changed."""
        now, n, pmax = self.now, self.n_pcie, self.pmax
        for r in self.runs:
            if not r.pcie:
                continue
            paced = repace(now, n, pmax, r.alpha, r.demand, r.T, r.rem, r.t0, r.sd)
            if paced is None:
                continue
            r.sd, r.rem, r.t0, r.finish = paced
            r.ver += 1
            self.push(r.finish, _FINISH, r, r.ver)

    def begin(self, inst: _Inst) -> None:
        """The job bound to ``inst`` (a planned task, or one of an earlier batch) starts."""
        now, i = self.now, inst.job
        if i >= 0:
            alpha, demand = self.info[i]
            run = _Run(i, self.tasks[i].times[inst.slot.size], alpha, demand, inst, now)
        else:
            lj = inst.live
            run = _Run(i, lj.seconds, lj.alpha, lj.demand, inst, now, lj.remaining)
        self.runs.append(run)
        if run.pcie:
            self.n_pcie += 1
            self.pace()
        else:
            run.sd = 1.0
            run.finish = now + run.rem * run.T
            self.push(run.finish, _FINISH, run, run.ver)

    def finish(self, run: _Run) -> None:
        """``run`` ends now: free its instance, record its end, re-pace the others."""
        self.runs.remove(run)
        inst = run.inst
        inst.job = -1
        inst.live = None
        self.busy &= ~inst.mask
        if run.idx >= 0:
            self.exec_s[run.idx] = self.now - run.started
            self.end[run.idx] = self.now
        else:
            self.live_ends.append(self.now)
        run.ver += 1
        if run.pcie:
            self.n_pcie -= 1
            self.pace()

    def startable(self) -> list:
        """Take off the queue the planned tasks whose slices are free and not claimed by
        an earlier queued task (plan order per slice), in queue order."""
        b, blocked = self.busy, 0
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
        now, insts = self.now, self.insts
        for k in sorted(insts):
            inst = insts[k]
            if inst.job == -1 and inst.mask & mask and k != key:
                s0 = max(now, self.channel, inst.ready_at)
                self.channel = s0 + self.model.destroy_time(inst.slot.size)
                del insts[k]
                self.held &= ~inst.mask

    def place(self, i: int, slot: Slot, mask: int) -> None:
        """Bind planned task ``i`` to its instance (created if missing) and start it
        when the instance is ready."""
        now, key = self.now, (slot.placement.start, slot.size)
        if mask & self.held:
            self.destroy_idle(mask, key)
        inst = self.insts.get(key)
        if inst is None:
            s0 = now if now > self.channel else self.channel
            self.channel = s0 + self.model.create_time(slot.size)
            inst = self.insts[key] = _Inst(slot, mask, self.channel)
            self.held |= mask
        inst.job = i
        self.busy |= mask
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
        now = self.now
        for slot, ready_at, lj in live_insts:
            inst = _Inst(slot, slot_mask(slot), ready_at)
            self.insts[(slot.placement.start, slot.size)] = inst
            self.held |= inst.mask
            if lj is None:
                continue
            inst.job, inst.live = -2, lj  # -2: a job of an earlier batch
            self.busy |= inst.mask
            if lj.sd > 0.0:
                run = _Run(-2, lj.seconds, lj.alpha, lj.demand, inst, now, lj.remaining)
                run.sd = lj.sd
                run.finish = now + run.rem * run.T * run.sd
                self.runs.append(run)
                self.n_pcie += run.pcie
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
        if self.queue or self.runs:  # pragma: no cover - every planned task fits an empty GPU
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
    tasks: Sequence[Task],
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
