"""Turn an ordered list of instance uses into timed tasks and reconfigurations.

A *use* is one instance (slot) on one GPU running a list of tasks back to back.
Uses of a GPU are given in priority order; a use waits for every earlier use that
shares a memory slice. When a use becomes ready, the live instances in its way are
destroyed and its own instance is created, one operation at a time per GPU (the
driver serialises them, Section 2.1); an identical live instance is reused instead.
This is the timing of Algorithms 1 and 3 of the FAR paper, generalised so that the
same code times FAR trees, reversed trees, concatenated batches and the baselines.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..geometry import GpuModel, Slot
from ..plan import Plan, PlannedTask, Reconfiguration, lower_bound
from ..workload import Task


@dataclass
class Use:
    gpu: int
    slot: Slot
    tasks: list[int]  # indexes into the batch's task list, in run order
    batch: int = 0


@dataclass
class GpuState:
    """What a GPU holds when a batch starts: live instances and when each is free."""

    live: dict[Slot, float] = field(default_factory=dict)
    channel: float = 0.0  # when the GPU's reconfiguration channel is free


@dataclass
class Timeline:
    tasks: list[PlannedTask]
    reconfigurations: list[Reconfiguration]
    states: list[GpuState]
    use_bounds: list[tuple[float, float]]  # (first task start, last task end) per use

    @property
    def makespan(self) -> float:
        return max((t.end for t in self.tasks), default=0.0)


def run_uses(
    model: GpuModel,
    tasks: Sequence[Task],
    uses: Sequence[Use],
    gpus: int,
    states: Sequence[GpuState] | None = None,
    not_before: float = 0.0,
) -> Timeline:
    """Time ``uses`` on ``gpus`` GPUs starting from ``states`` (empty GPUs if None)."""
    st = (
        [GpuState(dict(s.live), s.channel) for s in states]
        if states
        else [GpuState() for _ in range(gpus)]
    )
    n = len(uses)
    deps: list[list[int]] = [[] for _ in range(n)]
    waiting = [0] * n
    dependents: list[list[int]] = [[] for _ in range(n)]
    last_on: dict[tuple[int, int], int] = {}
    for j, u in enumerate(uses):
        p = u.slot.placement
        seen = set()
        for m in range(p.start, p.end):
            i = last_on.get((u.gpu, m))
            if i is not None and i not in seen:
                seen.add(i)
                deps[j].append(i)
                dependents[i].append(j)
            last_on[(u.gpu, m)] = j
        waiting[j] = len(deps[j])

    ready_at = [not_before] * n
    # A use whose slices a previous batch still holds waits for them to be free.
    for j, u in enumerate(uses):
        for slot, free in st[u.gpu].live.items():
            if slot.placement.overlaps(u.slot.placement):
                ready_at[j] = max(ready_at[j], free)

    heap = [(ready_at[j], j) for j in range(n) if waiting[j] == 0]
    heapq.heapify(heap)
    end_of = [0.0] * n
    out_tasks: list[PlannedTask] = []
    ops: list[Reconfiguration] = []
    bounds: list[tuple[float, float]] = [(0.0, 0.0)] * n
    while heap:
        ready, j = heapq.heappop(heap)
        u = uses[j]
        g = st[u.gpu]
        t = ready
        if u.slot not in g.live:
            for other in sorted(g.live):
                if other.placement.overlaps(u.slot.placement):
                    s0 = max(g.channel, g.live.pop(other))
                    g.channel = s0 + model.destroy_time(other.size)
                    ops.append(Reconfiguration(u.gpu, "destroy", other, s0, g.channel))
            s0 = max(g.channel, ready)
            g.channel = s0 + model.create_time(u.slot.size)
            ops.append(Reconfiguration(u.gpu, "create", u.slot, s0, g.channel))
            t = g.channel
        first = t
        for k in u.tasks:
            d = tasks[k].times[u.slot.size]
            out_tasks.append(PlannedTask(tasks[k].id, u.gpu, u.slot, t, t + d, u.batch))
            t += d
        g.live[u.slot] = t
        end_of[j] = t
        bounds[j] = (first, t)
        for k in dependents[j]:
            ready_at[k] = max(ready_at[k], t)
            waiting[k] -= 1
            if waiting[k] == 0:
                heapq.heappush(heap, (ready_at[k], k))
    return Timeline(out_tasks, ops, st, bounds)


def to_plan(
    model: GpuModel,
    tasks: Sequence[Task],
    timeline: Timeline,
    gpus: int,
    planner: str,
    initial: Sequence[tuple[int, Slot]] = (),
    stats: dict | None = None,
) -> Plan:
    return Plan(
        model=model,
        gpus=gpus,
        tasks=tuple(timeline.tasks),
        reconfigurations=tuple(timeline.reconfigurations),
        lower_bound=lower_bound(tasks, model, gpus),
        planner=planner,
        initial_instances=tuple(initial),
        stats=dict(stats or {}),
    )
