"""One GPU's state as time runs: its live instances, the jobs running on them at Eq. 2's
pace, and its reconfiguration channel. The simulator (``sim.engine``) and the
PCIe-aware FAR replay (``planner.pcie_replay``) both execute on it, so the replay's
predictions are the simulator's outcome to the last bit.

Bit ``i`` of a mask is memory slice ``i`` (a 3g instance at 0 holds 0b1111). A job runs
at rate ``1 / (T * sd)`` of its work per second (``planner.pacing.repace``). The
methods that change when a job ends return the runs whose end moved: the caller puts
their end events (``run.finish``, token ``run.ver``) on its own heap.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from typing import Any

from ..geometry import Slot
from .pacing import repace

__all__ = ["GpuState", "JobRun", "LiveInstance"]


class LiveInstance:
    """A live instance. ``job``: the index of the job bound to it (-1: idle; the
    replay's -2: a job of an earlier batch, described by ``live``); ``rem`` and
    ``start_at``: the bound job's work left and earliest start, before it runs."""

    __slots__ = (
        "gpu",
        "key",
        "slot",
        "mask",
        "ready_at",
        "job",
        "run",
        "rem",
        "start_at",
        "view",
        "live",
    )

    def __init__(self, gpu: int, key: Hashable, slot: Slot, mask: int, ready_at: float) -> None:
        self.gpu = gpu
        self.key = key  # its key in GpuState.insts
        self.slot = slot
        self.mask = mask
        self.ready_at = ready_at
        self.job = -1
        self.run: JobRun | None = None
        self.rem = 1.0
        self.start_at = ready_at
        self.view: Any = None  # the simulator's cached snapshot view; None after a change
        self.live: Any = None  # the replay's job of an earlier batch


class JobRun:
    """A job running on an instance: ``T`` seconds alone there, ``rem`` of its work
    left at ``t0`` under slowdown ``sd`` (0: not paced yet), its predicted end, and
    ``ver``, bumped whenever an end event of it goes stale."""

    __slots__ = (
        "idx",
        "job",
        "inst",
        "T",
        "rem",
        "sd",
        "t0",
        "ver",
        "finish",
        "alpha",
        "demand",
        "pcie",
        "started",
    )

    def __init__(
        self,
        idx: int,
        inst: LiveInstance,
        T: float,
        rem: float,
        now: float,
        alpha: float = 1.0,
        demand: float = 0.0,
        job: Any = None,
    ) -> None:
        self.idx = idx
        self.job = job  # the caller's job object, if it keeps one
        self.inst = inst
        self.T = T
        self.rem = rem
        self.sd = 0.0
        self.t0 = now
        self.ver = 0
        self.finish = math.inf
        self.alpha = alpha
        self.demand = demand
        self.pcie = demand > 0.0
        self.started = now

    def remaining_at(self, now: float) -> float:
        """The fraction of its work left at ``now``."""
        if self.sd <= 0.0:
            return self.rem
        r = self.rem - (now - self.t0) / (self.T * self.sd)
        return r if r > 0.0 else 0.0


class GpuState:
    """One GPU: ``insts`` by the caller's key, the memory slices ``held`` by live
    instances and ``busy`` with a bound job, the ``channel`` free from (creates and
    destroys run one after another), the ``runs`` and how many are PCIe-bound."""

    __slots__ = ("index", "insts", "held", "busy", "channel", "runs", "pcie_n")

    def __init__(self, index: int, channel: float) -> None:
        self.index = index
        self.insts: dict[Hashable, LiveInstance] = {}
        self.held = 0
        self.busy = 0
        self.channel = channel
        self.runs: list[JobRun] = []
        self.pcie_n = 0  # PCIe-bound jobs running (Eq. 2's n)

    def found(self, key: Hashable, slot: Slot, mask: int, ready_at: float) -> LiveInstance:
        """An instance that is there already (ready at ``ready_at``)."""
        self.held |= mask
        inst = self.insts[key] = LiveInstance(self.index, key, slot, mask, ready_at)
        return inst

    def create(
        self, key: Hashable, slot: Slot, mask: int, now: float, seconds: float
    ) -> LiveInstance:
        """A new instance at ``slot``, ready once the channel has created it."""
        start = now if now > self.channel else self.channel
        self.channel = start + seconds
        self.held |= mask
        inst = self.insts[key] = LiveInstance(self.index, key, slot, mask, self.channel)
        return inst

    def destroy(self, key: Hashable, now: float, seconds: float) -> float:
        """Destroy the idle instance at ``key`` on the channel; when it is gone."""
        inst = self.insts.pop(key)
        start = max(now, self.channel, inst.ready_at)
        self.channel = start + seconds
        self.held &= ~inst.mask
        return self.channel

    def start(self, run: JobRun, now: float, pcie_max: float) -> list[JobRun]:
        """``run`` begins on its instance; the runs whose end is new."""
        self.runs.append(run)
        run.inst.run = run
        if run.pcie:
            self.pcie_n += 1
            return self.pace(now, pcie_max)
        run.sd = 1.0
        run.finish = now + run.rem * run.T
        return [run]

    def resume(self, run: JobRun, sd: float) -> JobRun:
        """``run`` is running already, at slowdown ``sd`` since its ``t0``."""
        self.runs.append(run)
        run.inst.run = run
        run.sd = sd
        run.finish = run.t0 + run.rem * run.T * sd
        self.pcie_n += run.pcie
        return run

    def stop(self, run: JobRun, now: float, pcie_max: float) -> list[JobRun]:
        """``run`` leaves its instance (it ended or moves; the instance stays, idle);
        the runs whose end moved."""
        self.runs.remove(run)
        inst = run.inst
        inst.run = None
        inst.job = -1
        inst.live = None
        self.busy &= ~inst.mask
        run.ver += 1  # any end event of it is stale
        if run.pcie:
            self.pcie_n -= 1
            return self.pace(now, pcie_max)
        return []

    def pace(self, now: float, pcie_max: float) -> list[JobRun]:
        """Re-predict the end of every PCIe-bound run after their count changed; the
        runs whose end moved."""
        n = self.pcie_n
        moved = []
        for r in self.runs:
            if not r.pcie:
                continue
            paced = repace(now, n, pcie_max, r.alpha, r.demand, r.T, r.rem, r.t0, r.sd)
            if paced is None:
                continue
            r.sd, r.rem, r.t0, r.finish = paced
            r.ver += 1
            moved.append(r)
        return moved
