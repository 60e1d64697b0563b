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
from dataclasses import dataclass

from ..geometry import GpuModel, Slot
from ..job import Job
from ..plan import Plan, PlannedTask, Reconfiguration
from .bounds import tightest_bound
from .snapshot import INF, ClusterSnapshot, Gpu, Instance


@dataclass
class Use:
    gpu: int
    slot: Slot
    tasks: list[int]  # indexes into the batch's task list, in run order
    batch: int = 0


@dataclass
class Timeline:
    """Timed uses. ``live[g]``: the instances of GPU g after them and when each is free,
    ``channel[g]``: when its reconfiguration channel is free (seconds from the start)."""

    tasks: list[PlannedTask]
    reconfigurations: list[Reconfiguration]
    live: list[dict[Slot, float]]
    channel: list[float]
    use_bounds: list[tuple[float, float]]  # (first task start, last task end) per use
    last_job: list[dict[Slot, str]]  # the last task on each live instance

    @property
    def makespan(self) -> float:
        return max((t.end for t in self.tasks), default=0.0)

    def gpus(self, now: float = 0.0, like: Sequence[Gpu] | None = None) -> tuple[Gpu, ...]:
        """The GPUs after the timed uses, as snapshot GPUs (absolute times from ``now``;
        node names and indices taken from ``like``)."""
        out = []
        for g, live in enumerate(self.live):
            jobs = self.last_job[g]
            insts = tuple(
                Instance(slot, jobs[slot], -float("inf"), now + free)
                if slot in jobs
                else Instance(slot, None, now + free)
                for slot, free in sorted(live.items())
            )
            base = like[g] if like is not None else None
            out.append(
                Gpu(
                    g,
                    insts,
                    now + self.channel[g],
                    node=base.node if base is not None else "",
                    local=base.local if base is not None else g,
                )
            )
        return tuple(out)


def start_clocks(
    start: Sequence[Gpu] | None, gpus: int, now: float = 0.0
) -> tuple[list[dict[Slot, float]], list[float], list[dict[Slot, str]]]:
    """Per GPU, from snapshot GPUs: live instance -> when it is free, the channel, and the
    job on each busy instance, in seconds from ``now`` (never before 0)."""
    if not start:
        return [{} for _ in range(gpus)], [0.0] * gpus, [{} for _ in range(gpus)]
    live, channel, jobs = [], [], []
    for gpu in start:
        d: dict[Slot, float] = {}
        j: dict[Slot, str] = {}
        for inst in gpu.instances:
            t = inst.busy_until if inst.busy_until is not None else inst.ready_at
            d[inst.slot] = max(0.0, t - now)
            if inst.job is not None:
                j[inst.slot] = inst.job
        live.append(d)
        channel.append(max(0.0, gpu.channel_free - now))
        jobs.append(j)
    return live, channel, jobs


def run_uses(
    model: GpuModel,
    tasks: Sequence[Job],
    uses: Sequence[Use],
    gpus: int,
    start: Sequence[Gpu] | None = None,
    not_before: float = 0.0,
    now: float = 0.0,
) -> Timeline:
    """Time ``uses`` on ``gpus`` GPUs starting from the snapshot GPUs ``start`` as they
    are at ``now`` (idle GPUs if None); times count from ``now``."""
    live, channel, last = start_clocks(start, gpus, now)
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
    # A use whose slices earlier work still holds waits for them to be free.
    for j, u in enumerate(uses):
        for slot, free in live[u.gpu].items():
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
        g = u.gpu
        gl = live[g]
        t = ready
        if u.slot not in gl:
            for other in sorted(gl):
                if other.placement.overlaps(u.slot.placement):
                    s0 = max(channel[g], gl.pop(other))
                    last[g].pop(other, None)
                    channel[g] = s0 + model.destroy_time(other.size)
                    ops.append(Reconfiguration(g, "destroy", other, s0, channel[g]))
            s0 = max(channel[g], ready)
            channel[g] = s0 + model.create_time(u.slot.size)
            ops.append(Reconfiguration(g, "create", u.slot, s0, channel[g]))
            t = channel[g]
        first = t
        for k in u.tasks:
            d = tasks[k].times[u.slot.size]
            out_tasks.append(PlannedTask(tasks[k].id, g, u.slot, t, t + d, u.batch))
            t += d
        if u.tasks:
            last[g][u.slot] = tasks[u.tasks[-1]].id
        gl[u.slot] = t
        end_of[j] = t
        bounds[j] = (first, t)
        for k in dependents[j]:
            ready_at[k] = max(ready_at[k], t)
            waiting[k] -= 1
            if waiting[k] == 0:
                heapq.heappush(heap, (ready_at[k], k))
    return Timeline(out_tasks, ops, live, channel, bounds, last)


def to_plan(
    model: GpuModel,
    tasks: Sequence[Job],
    timeline: Timeline,
    gpus: int,
    planner: str,
    initial: Sequence[tuple[int, Slot]] = (),
    stats: dict | None = None,
    start: ClusterSnapshot | None = None,
) -> Plan:
    """The plan of a timed batch. With ``start``, its live instances are the plan's
    initial instances and the jobs on them are tasks marked ``running`` (from when
    their instance is ready, or the plan's start, to their predicted end)."""
    fixed: list[PlannedTask] = []
    init = list(initial)
    if start is not None:
        now = start.now
        for g, gpu in enumerate(start.gpus):
            for inst in gpu.instances:
                init.append((g, inst.slot))
                if inst.job is None or inst.busy_until is None or inst.busy_until == INF:
                    continue  # no end to plan by (a plan's times are finite)
                begin = max(0.0, inst.ready_at - now)
                end = max(begin, inst.busy_until - now)
                fixed.append(PlannedTask(inst.job, g, inst.slot, begin, end, -1, True))
    bound, name, bounds = tightest_bound(tasks, model, gpus)
    return Plan(
        model=model,
        gpus=gpus,
        tasks=tuple(fixed) + tuple(timeline.tasks),
        reconfigurations=tuple(timeline.reconfigurations),
        lower_bound=bound,
        planner=planner,
        initial_instances=tuple(init),
        stats=dict(stats or {}),
        bound=name,
        bounds=bounds,
    )


def plan_uses(plan: Plan) -> list[Use]:
    """A plan's tasks as uses: per GPU and instance, its tasks back to back in start
    order; uses in order of their first task's start (the order to time them in)."""
    runs: dict[tuple[int, Slot], list[PlannedTask]] = {}
    for t in plan.tasks:
        if not t.running:
            runs.setdefault((t.gpu, t.slot), []).append(t)
    out = []
    for (g, slot), items in sorted(runs.items(), key=lambda kv: min(t.start for t in kv[1])):
        items.sort(key=lambda t: t.start)
        out.append((items[0].start, g, slot, [t.id for t in items], items[0].batch))
    out.sort(key=lambda x: (x[0], x[1]))
    return [Use(g, slot, ids, b) for _, g, slot, ids, b in out]  # type: ignore[arg-type]


def retime_onto(
    plan: Plan,
    tasks: Sequence[Job],
    start: ClusterSnapshot | None,
    number: int,
    index: dict[str, int] | None = None,
) -> Timeline:
    """Re-time a plan's uses with the durations of ``tasks``: onto the busy GPUs of
    ``start`` when given (a plan made for idle GPUs is appended: its GPU schedules
    moved so that the longest run on the GPUs that free first, every use after the
    work already there, reconfigurations re-timed), else on idle GPUs."""
    index = index if index is not None else {t.id: i for i, t in enumerate(tasks)}
    uses = plan_uses(plan)
    gpus = plan.gpus
    to_real = {g: g for g in range(gpus)}
    if start is not None and not any(t.running for t in plan.tasks):
        span: dict[int, float] = {}
        for t in plan.tasks:
            span[t.gpu] = max(span.get(t.gpu, 0.0), t.end)
        live = start_clocks(start.gpus, gpus, start.now)[0]
        free = [max(d.values(), default=0.0) for d in live]
        planned = sorted(range(gpus), key=lambda g: (-span.get(g, 0.0), g))
        real = sorted(range(gpus), key=lambda h: (free[h], h))
        to_real = dict(zip(planned, real))
    moved = [Use(to_real[u.gpu], u.slot, [index[i] for i in u.tasks], number) for u in uses]  # type: ignore[misc]
    if start is None:
        return run_uses(plan.model, tasks, moved, gpus)
    return run_uses(plan.model, tasks, moved, gpus, start.gpus, now=start.now)
