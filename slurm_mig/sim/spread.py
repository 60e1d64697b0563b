"""Jobs on several instances: a gang on a static layout or whole GPUs (`Place.more`),
which Slurm runs on N GRES of one node (``--gres=gpu:N``), each instance anywhere on
that node. The engine (``sim.engine``) binds such a job to every instance, starts it
once all exist, keeps every one busy while it runs and frees them all when it ends.

The job runs on its main instance (the `Place`'s own slot) for its slowest task's
seconds alone (`Spread.seconds`: the most, over its instances' sizes, of one task's
seconds there); every other instance holds a `TaskRun`, a share of the run that
counts its slices busy (utilisation, energy) and never ends on its own. A gang's
PCIe demand paces it on its main GPU only (Slurm's gangs of the traces are not
PCIe-bound). Such a job never moves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..planner.decisions import Place
from ..planner.gpustate import JobRun, LiveInstance
from .cluster import Gpu

if TYPE_CHECKING:
    from .engine import Engine

__all__ = ["Spread", "SpreadJobs", "TaskRun"]


class TaskRun(JobRun):
    """Another instance's share of a job's run (module doc): busy until ``main`` ends."""

    __slots__ = ("main",)


@dataclass(slots=True)
class Spread:
    """A job held on several instances: ``insts`` (the main one first), their sizes and
    the seconds it runs alone (its slowest task's)."""

    insts: tuple[LiveInstance, ...]
    sizes: tuple[int, ...]
    seconds: float

    @property
    def main(self) -> LiveInstance:
        return self.insts[0]


Target = tuple[Gpu, LiveInstance | None, int]  # GPU, its instance there (None: create), order


class SpreadJobs:
    """The engine's part for jobs on several instances (module doc); mixed into
    ``sim.engine.Engine``, whose state it reads and changes."""

    spread: dict[int, Spread]

    def _start_spread(self: Engine, c: Place, idx: int) -> None:
        """Bind pending job ``idx`` to every instance of ``c`` (created where missing)."""
        job = self.jobs[idx]
        targets = self._spread_targets(c, idx)
        insts = []
        for g, inst, order in targets:
            insts.append(inst if inst is not None else self._create(g, order, c))
        per = job.per_task(self.model)
        sizes = tuple(i.slot.size for i in insts)
        sp = self.spread[idx] = Spread(tuple(insts), sizes, max(per[s] for s in sizes))
        del self._pending[c.job]
        if self.site is not None:
            self.site.placed(idx, sizes)
        ready = self.now + self.start_delay
        for inst in insts[1:]:
            g = self.gpu_state[inst.gpu]
            inst.job = idx
            inst.start_at = self.now
            inst.view = None
            g.busy |= inst.mask
            if job.pcie_demand > 0.0:
                g.pcie_held += 1
            ready = max(ready, inst.ready_at)
            self._touch(g)
        g, main = targets[0][0], sp.main
        self._bind(g, main, idx, 1.0, ready)

    def _spread_targets(self: Engine, c: Place, idx: int) -> list[Target]:
        """Every instance of ``c``, checked before anything changes: one per task, legal,
        idle or free to create, runnable for one task, all on the main GPU's node."""
        job = self.jobs[idx]
        where = ((c.gpu, c.slot), *c.more)
        if len(where) != job.tasks:
            self._bad(c, f"job {job.id!r} has {job.tasks} task(s), not {len(where)} instances")
        per = job.per_task(self.model)
        out: list[Target] = []
        claimed: dict[int, int] = {}  # gpu -> memory slices of this placement there
        for k, slot in where:
            g = self._gpu(c, k)
            order = self._order(c, slot)
            mask = self.geom.masks[order]
            if math.isinf(per.get(slot.size, math.inf)):
                self._bad(c, f"job {job.id!r} has no time for a task on size {slot.size}")
            if job.memory > self.geom.slot_memory[order]:
                self._bad(c, f"job {job.id!r} needs more memory than size {slot.size} has")
            if mask & claimed.get(k, 0):
                self._bad(c, f"it names two instances that overlap on gpu {k}")
            claimed[k] = claimed.get(k, 0) | mask
            inst = g.insts.get(order)
            if inst is not None and inst.job >= 0:
                self._bad(c, f"gpu {k} {slot} is busy with job {self.jobs[inst.job].id!r}")
            if inst is None and mask & g.held:
                self._bad(c, f"gpu {k} {slot} overlaps a live instance; destroy it first")
            if out and g.node != out[0][0].node:
                node = out[0][0].node
                self._bad(c, f"gpu {k} is on node {g.node}, not {node}: a job has one node")
            out.append((g, inst, order))
        return out

    def _begin_shares(self: Engine, sp: Spread, run: JobRun) -> None:
        """The job of ``run`` began: its other instances run their shares."""
        now = self.now
        for inst in sp.insts[1:]:
            g = self.gpu_state[inst.gpu]
            share = TaskRun(run.idx, inst, math.inf, 1.0, now, 1.0, 0.0, run.job)
            share.main = run
            g.start(share, now, self.pcie_max)  # not PCIe-bound: its end is never
            inst.view = None
            self._busy_change(g, inst.slot.size)
            self._touch(g)

    def _release_shares(self: Engine, idx: int, sp: Spread) -> None:
        """Job ``idx`` ended: its other instances are idle again."""
        pcie = self.jobs[idx].pcie_demand > 0.0
        for inst in sp.insts[1:]:
            g = self.gpu_state[inst.gpu]
            if inst.run is not None:
                self._busy_change(g, -inst.slot.size)
                g.stop(inst.run, self.now, self.pcie_max)
            inst.job = -1
            g.busy &= ~inst.mask
            if pcie:
                g.pcie_held -= 1
            inst.view = None
            self._touch(g)

    def _touch_shares(self: Engine, idx: int) -> None:
        """The expected end of job ``idx`` moved: its other instances' views too."""
        sp = self.spread.get(idx)
        if sp is not None:
            for inst in sp.insts[1:]:
                inst.view = None
                self._touch(self.gpu_state[inst.gpu])

    def _slowest(self: Engine, idx: int, sp: Spread) -> int:
        """The size of job ``idx``'s slowest task's instance (the run it is learned by)."""
        per = self.jobs[idx].per_task(self.model)
        return max(sorted(sp.sizes), key=lambda s: per.get(s, math.inf))
