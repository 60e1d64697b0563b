"""PCIe-aware FAR: the FAR batch planner (``planner.far``) with the PCIe contention
model of Tang et al. (``slurm_mig.pcie``, Eq. 2) folded in. No paper combines them.

FAR minimises the makespan of a batch as if every task ran at its profiled speed, but
PCIe-bound tasks planned side by side on one GPU share its link and run slower.
``plan_far_pcie`` builds several candidate plans and keeps the best once the slowdown
is applied:

- ``far``: plain FAR;
- ``inflate-k``: FAR on durations inflated by the slowdown each task suffered in the
  previous candidate's replay (a damped fixed-point iteration, ``iterations`` rounds);
- ``gate``: FAR's allocation list-scheduled (Algorithm 1) with the co-location gate
  of ``planner.gate``: a node that frees up takes the longest task of its size the
  gate admits on its GPU (at most ``delay_threshold`` predicted slowdown for it and
  the PCIe-bound tasks running there), and waits for a PCIe-bound task there to end
  if none is admitted, until it has waited ``wait_time_threshold`` s (``-strict``:
  the same at threshold 1); also on the allocation of the best inflated candidate
  (``gate-inflated``).

Every candidate is replayed (``replay``) exactly as the simulator executes a plan
under policy ``far``: each GPU starts its planned tasks in plan order as their slices
free up, with Table 1's create/destroy times and Eq. 2 applied while PCIe-bound
tasks overlap, from empty GPUs or from the GPUs as the batch finds them (``start``,
what the simulator policy passes). ``objective`` ranks the replays: ``makespan``
(FAR's, the default; ties by the sum of end times), ``jct`` (sum of end times),
``start`` (when the batch's last task starts: policy ``far`` plans the next batch
only then; the policy's default), ``online`` (sum of ends + batch size x last
start). Plain FAR is a candidate, so the chosen plan is never predicted worse than
FAR on the objective; with no job arriving meanwhile the prediction is the
simulator's outcome. The emitted plan keeps the profiled (contention-free) durations,
so it validates against the tasks like any FAR plan; its ``stats`` give the
predictions with the slowdown (``pcie_makespan`` and ``far_pcie_makespan``,
``pcie_end_sum`` and ``far_pcie_end_sum``).

PCIe inputs per task: ``pcie={id: (alpha, demand)}`` (or PcieProfile), else the
task's ``meta`` keys ``alpha`` and ``pcie_demand`` (GB/s), else not PCIe-bound.
"""

from __future__ import annotations

import heapq
import math
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from ..geometry import GpuModel, Slot, slot_mask
from ..pcie import PcieError, pcie_max_for, slowdown
from ..plan import Plan
from ..workload import Task
from .batch import Batch
from .far import Forest, far_schedule, time_assignment
from .far_planner import plan_far
from .gate import DELAY_THRESHOLD, WAIT_TIME_THRESHOLD, Gate
from .registry import BatchPolicy, bind_options
from .snapshot import INF, ClusterSnapshot, Gpu
from .timeline import Timeline, retime_onto, to_plan

OBJECTIVES = ("makespan", "jct", "start", "online")
ITERATIONS = 3  # inflation rounds, one FAR run each
_FINISH, _START = 0, 1


# ---------------------------------------------------------------------------
# Inputs


def pcie_inputs(
    tasks: Sequence[Task], pcie: Mapping[str, object] | None = None
) -> list[tuple[float, float]]:
    """(alpha, demand) per task, from ``pcie`` by id, else the task's meta, else
    (1, 0): not PCIe-bound. PcieError names a task with unusable values."""
    out = []
    for t in tasks:
        src = pcie.get(t.id) if pcie else None
        if src is None:
            alpha = t.meta.get("alpha", 1.0) if t.meta else 1.0
            demand = t.meta.get("pcie_demand", 0.0) if t.meta else 0.0
        elif hasattr(src, "demand"):
            alpha, demand = src.alpha, src.demand  # type: ignore[attr-defined]
        else:
            alpha, demand = src  # type: ignore[misc]
        try:
            alpha, demand = float(alpha), float(demand)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise PcieError(
                f"task {t.id!r}: alpha {alpha!r} / pcie_demand {demand!r} are not numbers"
            ) from None
        if not (alpha > 0 and math.isfinite(alpha)):
            raise PcieError(f"task {t.id!r}: alpha {alpha} must be a number > 0")
        if not (demand >= 0 and math.isfinite(demand)):
            raise PcieError(f"task {t.id!r}: pcie_demand {demand} must be GB/s >= 0")
        out.append((alpha, demand))
    return out


# ---------------------------------------------------------------------------
# Replay: a plan executed as sim policy "far" executes it, with Eq. 2 applied


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


def _replay_gpu(
    model: GpuModel, tasks, info, entries, pmax, end, exec_s, live_insts=(), channel=0.0
) -> list[float]:
    """One GPU: the engine's arithmetic (sim.engine) under the driver's start rule (a
    GPU's planned tasks start in plan order as their slices free), from the instances
    ``live_insts`` (`_live_jobs`). Returns the end times of the jobs already there."""
    now = 0.0
    insts: dict[tuple[int, int], _Inst] = {}
    busy = held = 0
    runs: list[_Run] = []
    n_pcie = 0
    heap: list = []
    seq = 0
    queue = list(entries)
    live_ends: list[float] = []

    def push(t, kind, obj, tok):
        nonlocal seq
        seq += 1
        heapq.heappush(heap, (t, seq, kind, obj, tok))

    def pace():
        for r in runs:
            if not r.pcie:
                continue
            sd = slowdown(r.alpha, r.demand, n_pcie, pmax)
            if sd == r.sd:
                continue
            if r.sd > 0.0:
                rem = r.rem - (now - r.t0) / (r.T * r.sd)
                r.rem = rem if rem > 0.0 else 0.0
                r.t0 = now
            r.sd = sd
            r.finish = now + r.rem * r.T * sd
            r.ver += 1
            push(r.finish, _FINISH, r, r.ver)

    def begin(inst: _Inst):
        nonlocal n_pcie
        i = inst.job
        if i >= 0:
            alpha, demand = info[i]
            run = _Run(i, tasks[i].times[inst.slot.size], alpha, demand, inst, now)
        else:
            lj = inst.live
            run = _Run(i, lj.seconds, lj.alpha, lj.demand, inst, now, lj.remaining)
        runs.append(run)
        if run.pcie:
            n_pcie += 1
            pace()
        else:
            run.sd = 1.0
            run.finish = now + run.rem * run.T
            push(run.finish, _FINISH, run, run.ver)

    def scan():
        nonlocal busy, held, channel, queue
        b, blocked = busy, 0
        kept, starts = [], []
        for e in queue:
            if e[2] & (b | blocked):
                blocked |= e[2]
                kept.append(e)
            else:
                b |= e[2]
                starts.append(e)
        queue = kept
        for i, slot, mask in starts:
            key = (slot.placement.start, slot.size)
            if mask & held:
                for k in sorted(insts):
                    inst = insts[k]
                    if inst.job == -1 and inst.mask & mask and k != key:
                        s0 = max(now, channel, inst.ready_at)
                        channel = s0 + model.destroy_time(inst.slot.size)
                        del insts[k]
                        held &= ~inst.mask
            inst = insts.get(key)
            if inst is None:
                s0 = now if now > channel else channel
                channel = s0 + model.create_time(slot.size)
                inst = insts[key] = _Inst(slot, mask, channel)
                held |= mask
            inst.job = i
            busy |= mask
            t = inst.ready_at if inst.ready_at > now else now
            if t <= now:
                begin(inst)
            else:
                push(t, _START, inst, i)

    for slot, ready_at, lj in live_insts:
        inst = _Inst(slot, slot_mask(slot), ready_at)
        insts[(slot.placement.start, slot.size)] = inst
        held |= inst.mask
        if lj is None:
            continue
        inst.job, inst.live = -2, lj  # -2: a job of an earlier batch
        busy |= inst.mask
        if lj.sd > 0.0:
            run = _Run(-2, lj.seconds, lj.alpha, lj.demand, inst, now, lj.remaining)
            run.sd = lj.sd
            run.finish = now + run.rem * run.T * run.sd
            runs.append(run)
            n_pcie += run.pcie
            push(run.finish, _FINISH, run, run.ver)
        else:
            push(max(lj.begin_at, ready_at, now), _START, inst, -2)
    scan()
    while heap:
        now = heap[0][0]
        while heap and heap[0][0] <= now:
            _, _, kind, obj, tok = heapq.heappop(heap)
            if kind == _FINISH:
                if obj.ver != tok:
                    continue
                runs.remove(obj)
                inst = obj.inst
                inst.job = -1
                inst.live = None
                busy &= ~inst.mask
                if obj.idx >= 0:
                    exec_s[obj.idx] = now - obj.started
                    end[obj.idx] = now
                else:
                    live_ends.append(now)
                obj.ver += 1
                if obj.pcie:
                    n_pcie -= 1
                    pace()
            else:
                begin(obj)
        scan()
    if queue or runs:  # pragma: no cover - every planned task fits an empty GPU
        raise AssertionError("replay left planned tasks unstarted")
    return live_ends


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


# ---------------------------------------------------------------------------
# Algorithm 1 with the co-location gate


def gated_schedule(
    forest: Forest,
    alloc: Sequence[int],
    dur: Sequence[float],
    info: Sequence[tuple[float, float]],
    gate: Gate,
) -> list[list[int]]:
    """FAR's list scheduling (``far.list_schedule``) of one allocation, where a node
    that frees up takes the longest task of its size that ``gate`` admits on its GPU
    given the PCIe-bound tasks planned to run there then (a task that is not PCIe-bound
    always passes). With none admitted the node waits for the next PCIe-bound task on
    its GPU to end, or takes the longest anyway once it has waited
    ``gate.wait_time_threshold`` s. Durations of admitted PCIe-bound tasks are
    stretched by their predicted slowdown at start. Returns the tasks per node."""
    model = forest.model
    tc, td = model.create_s, model.destroy_s
    size, gpu, children = forest.size, forest.gpu, forest.children
    n = len(alloc)
    ads = [a * d if d > 0 else 0.0 for a, d in info]
    groups: dict[int, dict[float, deque[int]]] = {}
    for i in sorted(range(n), key=lambda i: (-dur[i], i)):
        groups.setdefault(alloc[i], {}).setdefault(ads[i], deque()).append(i)
    reconfig = [0.0] * forest.gpus
    started = [False] * forest.nodes
    assign: list[list[int]] = [[] for _ in range(forest.nodes)]
    running: list[list[tuple[float, float]]] = [[] for _ in range(forest.gpus)]
    since: dict[int, float] = {}
    heap = [(0.0, r) for r in forest.roots]
    thr, wait = gate.delay_threshold, gate.wait_time_threshold
    remaining = n
    pop, push = heapq.heappop, heapq.heappush
    while remaining:
        t, v = pop(heap)
        s, g = size[v], gpu[v]
        cls = groups.get(s)
        live = [c for c, q in cls.items() if q] if cls else []
        if not live:
            if started[v]:
                r = reconfig[g]
                reconfig[g] = (t if t > r else r) + td[s]
            for c in children[v]:
                push(heap, (t, c))
            continue
        begin = t
        if not started[v]:
            r = reconfig[g]
            begin = (t if t > r else r) + tc[s]
        run = running[g]
        while run and run[0][0] <= begin:
            heapq.heappop(run)
        worst = max((a for _, a in run), default=0.0)
        live.sort(key=lambda c: (-dur[cls[c][0]], cls[c][0]))
        pick = None
        for c in live:
            new, oth = gate.predict_fast(c, len(run), worst)
            w = new if (not gate.protect_others or new > oth) else oth
            if w <= thr + 1e-9:
                pick = c
                break
        if pick is None:
            deadline = since.setdefault(v, t) + wait
            if run and t < deadline:
                push(heap, (min(run[0][0], deadline), v))
                continue
            pick = live[0]
        since.pop(v, None)
        if not started[v]:
            reconfig[g] = begin
            started[v] = True
        i = cls[pick].popleft()
        remaining -= 1
        assign[v].append(i)
        d = dur[i]
        if pick > 0.0:
            sd, _ = gate.predict_fast(pick, len(run), worst)
            d *= sd
        stop = begin + d
        if pick > 0.0:
            push(run, (stop, pick))
        push(heap, (stop, v))
    return assign


# ---------------------------------------------------------------------------
# The planner


def _inflated(tasks: Sequence[Task], f: Sequence[float]) -> list[Task]:
    return [
        Task(t.id, {s: x * k for s, x in t.times.items()}, t.memory_bytes, t.meta)
        for t, k in zip(tasks, f)
    ]


def plan_far_pcie(
    batch: Batch,
    *,
    pcie: Mapping[str, object] | None = None,
    pcie_max: float | None = None,
    delay_threshold: float = DELAY_THRESHOLD,
    wait_time_threshold: float = WAIT_TIME_THRESHOLD,
    iterations: int = ITERATIONS,
    objective: str = "makespan",
) -> Plan:
    """The PCIe-aware FAR planner (module doc): the candidate plan that is best on
    ``objective`` under Eq. 2 (ties: plain FAR first), onto the GPUs of ``batch.start``
    (idle if None). PCIe_max: ``pcie_max``, else the start snapshot's, else the model's."""
    t0 = time.perf_counter()
    tasks, model, gpus = batch.tasks, batch.model, batch.gpus
    start = batch.start if batch.busy else None
    if pcie_max:
        pmax = float(pcie_max)
    elif batch.start is not None:
        pmax = batch.start.pcie_max
    else:
        pmax = pcie_max_for(model)
    info = pcie_inputs(tasks, pcie)
    if iterations < 0:
        raise PcieError(f"iterations {iterations} must be >= 0")
    if objective not in OBJECTIVES:
        raise PcieError(f"objective {objective!r}: choose one of {', '.join(OBJECTIVES)}")
    base = far_schedule(tasks, model, gpus)
    forest = base.forest
    scored: list[tuple[float, float, int, str, Timeline, Replay]] = []

    def score(name: str, timeline: Timeline) -> Replay:
        plan = to_plan(model, tasks, timeline, gpus, "far-pcie")
        rep = replay(plan, tasks, info, pmax, start)
        scored.append((rep.makespan, rep.end_sum, len(scored), name, timeline, rep))
        return rep

    def onto(batch_tasks: Sequence[Task]) -> Timeline:
        """FAR's plan of ``batch_tasks`` (durations as given) onto the start, re-timed
        with the real durations."""
        plan = plan_far(replace(batch, tasks=tuple(batch_tasks)))
        index = {t.id: i for i, t in enumerate(tasks)}
        return retime_onto(plan, tasks, start, batch.number, index) if start else time_of(plan)

    def time_of(plan: Plan) -> Timeline:
        return retime_onto(plan, tasks, None, batch.number)

    if start is None:
        far_tl = time_assignment(forest, tasks, base.assign, batch=batch.number)[0]
    else:
        far_tl = onto(tasks)
    far_rep = score("far", far_tl)
    bound = sum(1 for _, d in info if d > 0)
    if bound >= 1:
        gates = [Gate(delay_threshold, wait_time_threshold, pmax)]
        if delay_threshold > 1.0:
            gates.append(Gate(1.0, wait_time_threshold, pmax))

        def gated(alloc: Sequence[int], tag: str) -> None:
            if start is not None:
                return  # the gated list schedule starts from idle GPUs only
            dur = [tasks[i].times[alloc[i]] for i in range(len(tasks))]
            for k, gt in enumerate(gates):
                assign = gated_schedule(forest, alloc, dur, info, gt)
                score(
                    f"{tag}{'' if k == 0 else '-strict'}",
                    time_assignment(forest, tasks, assign, batch=batch.number)[0],
                )

        gated(base.allocation, "gate")
        f = [1.0] * len(tasks)
        rep, alloc = far_rep, base.allocation
        best_inflated: tuple[float, list[int]] | None = None
        for k in range(iterations):
            f = [
                0.5 * (fi + (rep.exec_s[i] / tasks[i].times[alloc[i]] if info[i][1] > 0 else 1.0))
                for i, fi in enumerate(f)
            ]
            inflated = _inflated(tasks, f)
            res = far_schedule(inflated, model, gpus)
            alloc = res.allocation
            if start is None:
                tl = time_assignment(forest, tasks, res.assign, batch=batch.number)[0]
            else:
                tl = onto(inflated)
            rep = score(f"inflate-{k + 1}", tl)
            if best_inflated is None or rep.makespan < best_inflated[0]:
                best_inflated = (rep.makespan, list(alloc))
        if best_inflated is not None and best_inflated[1] != list(base.allocation):
            gated(best_inflated[1], "gate-inflated")
    m = len(tasks)
    rank = {
        "makespan": lambda x: (x[0], x[1], x[2]),
        "jct": lambda x: (x[1], x[0], x[2]),
        "start": lambda x: (x[5].last_start, x[1], x[2]),
        # the batch's JCT plus the wait its last start imposes on the next batch
        "online": lambda x: (x[1] + m * x[5].last_start, x[0], x[2]),
    }[objective]
    _, _, _, name, timeline, rep = min(scored, key=rank)
    stats = {
        "planning_seconds": time.perf_counter() - t0,
        "pcie_bound_tasks": bound,
        "pcie_max": pmax,
        "candidate": name,
        "candidates": {c[3]: round(c[0], 6) for c in scored},
        "pcie_makespan": rep.makespan,
        "far_pcie_makespan": far_rep.makespan,
        "pcie_end_sum": rep.end_sum,
        "far_pcie_end_sum": far_rep.end_sum,
        "pcie_last_start": rep.last_start,
        "far_pcie_last_start": far_rep.last_start,
        "objective": objective,
        "delay_threshold": delay_threshold,
        "wait_time_threshold": wait_time_threshold,
    }
    return to_plan(model, tasks, timeline, gpus, "far-pcie", stats=stats, start=start)


def make_far_pcie(**options) -> BatchPolicy:
    """Registry factory of ``far-pcie`` (options: pcie_max, delay_threshold,
    wait_time_threshold, iterations, objective). PCIe demand and alpha come from each
    task's meta (the driver fills them from the jobs)."""
    Gate(
        float(options.get("delay_threshold", DELAY_THRESHOLD)),
        float(options.get("wait_time_threshold", WAIT_TIME_THRESHOLD)),
    )  # validate now
    return BatchPolicy("far-pcie", bind_options(plan_far_pcie, "far-pcie", options))


POLICIES = {"far-pcie": make_far_pcie}


def make_planner(name: str = "far-pcie", **options) -> BatchPolicy:
    """The planner ``name`` of this module (the registry maps each name to its factory)."""
    if name not in POLICIES:
        raise PcieError(f"{__name__} has no planner {name!r}; it has far-pcie")
    return POLICIES[name](**options)
