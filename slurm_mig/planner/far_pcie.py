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

Every candidate is replayed (``replay``, in ``planner.pcie_replay``) exactly as the
simulator executes a plan under policy ``far``: each GPU starts its planned tasks in
plan order as their slices free up, with Table 1's create/destroy times and Eq. 2
applied while PCIe-bound tasks overlap (on the engine's own GPU state model,
``planner.gpustate``), from empty GPUs or from the GPUs as the batch finds them
(``start``, what the simulator policy passes). ``objective`` ranks the replays:
``makespan`` (FAR's, the default; ties by the sum of end times), ``jct`` (sum of end times),
``start`` (when the batch's last task starts: policy ``far`` plans the next batch
only then; the policy's default), ``online`` (sum of ends + batch size x last
start). Plain FAR is a candidate, so the chosen plan is never predicted worse than
FAR on the objective; with no job arriving meanwhile the prediction is the
simulator's outcome. The emitted plan keeps the profiled (contention-free) durations,
so it validates against the tasks like any FAR plan; its ``stats`` give the
predictions with the slowdown (``pcie_makespan`` and ``far_pcie_makespan``,
``pcie_end_sum`` and ``far_pcie_end_sum``).

PCIe inputs per task: ``pcie={id: (alpha, demand)}`` (or PcieProfile), else the
task's ``alpha`` and ``pcie_demand`` (GB/s; 0, the default, is not PCIe-bound).
"""

from __future__ import annotations

import heapq
import math
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import replace

from ..job import Job
from ..pcie import PcieError, pcie_max_for
from ..plan import Plan
from .batch import Batch
from .far import Forest, far_schedule, time_assignment
from .far_planner import plan_far
from .gate import DELAY_THRESHOLD, WAIT_TIME_THRESHOLD, Gate
from .pcie_replay import Replay, replay
from .registry import BatchPolicy, bind_options
from .timeline import Timeline, retime_onto, to_plan

OBJECTIVES = ("makespan", "jct", "start", "online")
ITERATIONS = 3  # inflation rounds, one FAR run each


# ---------------------------------------------------------------------------
# Inputs


def pcie_inputs(
    tasks: Sequence[Job], pcie: Mapping[str, object] | None = None
) -> list[tuple[float, float]]:
    """(alpha, demand) per task, from ``pcie`` by id, else the task's alpha and
    pcie_demand (defaults 1, 0: not PCIe-bound). PcieError names a task with unusable
    values."""
    out = []
    for t in tasks:
        src = pcie.get(t.id) if pcie else None
        if src is None:
            alpha, demand = t.alpha, t.pcie_demand
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
# Algorithm 1 with the co-location gate


def _size_groups(
    alloc: Sequence[int], dur: Sequence[float], info: Sequence[tuple[float, float]]
) -> dict[int, dict[float, deque[int]]]:
    """Task indices by allocated size, then by alpha x demand (0: not PCIe-bound), each
    queue longest first (ties by index), as the list schedule takes them."""
    ads = [a * d if d > 0 else 0.0 for a, d in info]
    groups: dict[int, dict[float, deque[int]]] = {}
    for i in sorted(range(len(alloc)), key=lambda i: (-dur[i], i)):
        groups.setdefault(alloc[i], {}).setdefault(ads[i], deque()).append(i)
    return groups


def _running_at(run: list[tuple[float, float]], begin: float) -> float:
    """Drop from the GPU's heap of (end, alpha x demand) the tasks ended by ``begin``;
    the largest alpha x demand of those still running (0 if none)."""
    while run and run[0][0] <= begin:
        heapq.heappop(run)
    return max((a for _, a in run), default=0.0)


def _admitted(gate: Gate, live: Sequence[float], n: int, worst: float) -> float | None:
    """The first class of ``live`` (alpha x demand, longest task first) that ``gate``
    admits next to ``n`` PCIe-bound tasks whose largest product is ``worst``; None if
    it admits none."""
    thr = gate.delay_threshold
    for c in live:
        new, oth = gate.predict_fast(c, n, worst)
        w = new if (not gate.protect_others or new > oth) else oth
        if w <= thr + 1e-9:
            return c
    return None


def _split_node(
    forest: Forest, v: int, t: float, started: bool, reconfig: list[float], heap: list
) -> None:
    """Node ``v`` has no task of its size left at ``t``: its instance (if created) is
    destroyed after the GPU's pending reconfiguration, and its children free up at ``t``."""
    if started:
        g = forest.gpu[v]
        r = reconfig[g]
        reconfig[g] = (t if t > r else r) + forest.model.destroy_s[forest.size[v]]
    for c in forest.children[v]:
        heapq.heappush(heap, (t, c))


def gated_schedule(
    forest: Forest,
    alloc: Sequence[int],
    dur: Sequence[float],
    info: Sequence[tuple[float, float]],
    gate: Gate,
) -> list[list[int]]:
    """FAR's list scheduling (``far_phases.list_schedule``) of one allocation, where a node
    that frees up takes the longest task of its size that ``gate`` admits on its GPU
    given the PCIe-bound tasks planned to run there then (a task that is not PCIe-bound
    always passes). With none admitted the node waits for the next PCIe-bound task on
    its GPU to end, or takes the longest anyway once it has waited
    ``gate.wait_time_threshold`` s. Durations of admitted PCIe-bound tasks are
    stretched by their predicted slowdown at start. Returns the tasks per node."""
    tc, size, gpu = forest.model.create_s, forest.size, forest.gpu
    groups = _size_groups(alloc, dur, info)
    reconfig = [0.0] * forest.gpus
    started = [False] * forest.nodes
    assign: list[list[int]] = [[] for _ in range(forest.nodes)]
    running: list[list[tuple[float, float]]] = [[] for _ in range(forest.gpus)]
    since: dict[int, float] = {}
    heap = [(0.0, r) for r in forest.roots]
    remaining = len(alloc)
    pop, push = heapq.heappop, heapq.heappush
    while remaining:
        t, v = pop(heap)
        s, g = size[v], gpu[v]
        cls = groups.get(s)
        live = [c for c, q in cls.items() if q] if cls else []
        if not live:
            _split_node(forest, v, t, started[v], reconfig, heap)
            continue
        begin = t
        if not started[v]:
            r = reconfig[g]
            begin = (t if t > r else r) + tc[s]
        run = running[g]
        worst = _running_at(run, begin)
        live.sort(key=lambda c: (-dur[cls[c][0]], cls[c][0]))
        pick = _admitted(gate, live, len(run), worst)
        if pick is None:
            deadline = since.setdefault(v, t) + gate.wait_time_threshold
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
        stop = begin + dur[i]
        if pick > 0.0:
            stop = begin + dur[i] * gate.predict_fast(pick, len(run), worst)[0]
            push(run, (stop, pick))
        push(heap, (stop, v))
    return assign


# ---------------------------------------------------------------------------
# The planner


def _inflated(tasks: Sequence[Job], f: Sequence[float]) -> list[Job]:
    """Copies of ``tasks`` with every duration multiplied by its factor in ``f``."""
    return [replace(t, times={s: x * k for s, x in t.times.items()}) for t, k in zip(tasks, f)]


def _resolve_pcie_max(batch: Batch, pcie_max: float | None) -> float:
    """PCIe_max: the option, else the start snapshot's, else the GPU model's."""
    if pcie_max:
        return float(pcie_max)
    if batch.start is not None:
        return batch.start.pcie_max
    return pcie_max_for(batch.model)


def _check_options(iterations: int, objective: str) -> None:
    """Reject a negative inflation count or an unknown objective (PcieError)."""
    if iterations < 0:
        raise PcieError(f"iterations {iterations} must be >= 0")
    if objective not in OBJECTIVES:
        raise PcieError(f"objective {objective!r}: choose one of {', '.join(OBJECTIVES)}")


_Scored = tuple[float, float, int, str, Timeline, Replay]  # makespan, end sum, order, ...


class _Candidates:
    """The candidate plans of one batch, each replayed under Eq. 2 as it is added
    (``scored``, in the order added: ties go to the earlier one)."""

    def __init__(self, batch: Batch, info: Sequence[tuple[float, float]], pmax: float) -> None:
        self.batch, self.info, self.pmax = batch, info, pmax
        self.tasks, self.model, self.gpus = batch.tasks, batch.model, batch.gpus
        self.start = batch.start if batch.busy else None
        self.base = far_schedule(self.tasks, self.model, self.gpus)
        self.forest = self.base.forest
        self.scored: list[_Scored] = []

    def score(self, name: str, timeline: Timeline) -> Replay:
        """Replay ``timeline`` as a plan and keep it as candidate ``name``."""
        tasks = self.tasks
        plan = to_plan(self.model, tasks, timeline, self.gpus, "far-pcie")
        rep = replay(plan, tasks, self.info, self.pmax, self.start)
        self.scored.append((rep.makespan, rep.end_sum, len(self.scored), name, timeline, rep))
        return rep

    def onto(self, batch_tasks: Sequence[Job]) -> Timeline:
        """FAR's plan of ``batch_tasks`` (durations as given) onto the start, re-timed
        with the real durations."""
        batch, tasks, start = self.batch, self.tasks, self.start
        plan = plan_far(replace(batch, tasks=tuple(batch_tasks)))
        if start is None:
            return retime_onto(plan, tasks, None, batch.number)
        index = {t.id: i for i, t in enumerate(tasks)}
        return retime_onto(plan, tasks, start, batch.number, index)

    def timeline(self, assign: list[list[int]], batch_tasks: Sequence[Job]) -> Timeline:
        """The FAR assignment ``assign`` timed with the real durations from idle GPUs,
        or, from a busy start, FAR's plan of ``batch_tasks`` onto it."""
        if self.start is None:
            return time_assignment(self.forest, self.tasks, assign, batch=self.batch.number)[0]
        return self.onto(batch_tasks)

    def gated(self, alloc: Sequence[int], tag: str, gates: Sequence[Gate]) -> None:
        """Score the gated list schedule of ``alloc`` under each gate (idle GPUs only)."""
        if self.start is not None:
            return  # the gated list schedule starts from idle GPUs only
        tasks, forest = self.tasks, self.forest
        dur = [tasks[i].times[alloc[i]] for i in range(len(tasks))]
        for k, gt in enumerate(gates):
            assign = gated_schedule(forest, alloc, dur, self.info, gt)
            self.score(
                f"{tag}{'' if k == 0 else '-strict'}",
                time_assignment(forest, tasks, assign, batch=self.batch.number)[0],
            )

    def inflate(self, rep: Replay, iterations: int) -> list[int] | None:
        """Score ``iterations`` rounds of FAR on durations inflated by the damped
        slowdown of the previous replay (from ``rep``, plain FAR's); the allocation of
        the round with the least makespan (the first on ties), None with no round."""
        tasks, info = self.tasks, self.info
        f = [1.0] * len(tasks)
        alloc = self.base.allocation
        best: tuple[float, list[int]] | None = None
        for k in range(iterations):
            f = [
                0.5 * (fi + (rep.exec_s[i] / tasks[i].times[alloc[i]] if info[i][1] > 0 else 1.0))
                for i, fi in enumerate(f)
            ]
            inflated = _inflated(tasks, f)
            res = far_schedule(inflated, self.model, self.gpus)
            alloc = res.allocation
            rep = self.score(f"inflate-{k + 1}", self.timeline(res.assign, inflated))
            if best is None or rep.makespan < best[0]:
                best = (rep.makespan, list(alloc))
        return None if best is None else best[1]

    def pcie_aware(
        self, far_rep: Replay, delay_threshold: float, wait: float, iterations: int
    ) -> None:
        """Score the gated and inflated candidates (for a batch with PCIe-bound tasks)."""
        gates = [Gate(delay_threshold, wait, self.pmax)]
        if delay_threshold > 1.0:
            gates.append(Gate(1.0, wait, self.pmax))
        self.gated(self.base.allocation, "gate", gates)
        best_alloc = self.inflate(far_rep, iterations)
        if best_alloc is not None and best_alloc != list(self.base.allocation):
            self.gated(best_alloc, "gate-inflated", gates)


def _best(scored: Sequence[_Scored], objective: str, m: int) -> _Scored:
    """The candidate best on ``objective`` for a batch of ``m`` tasks (ties: earliest)."""
    rank = {
        "makespan": lambda x: (x[0], x[1], x[2]),
        "jct": lambda x: (x[1], x[0], x[2]),
        "start": lambda x: (x[5].last_start, x[1], x[2]),
        # the batch's JCT plus the wait its last start imposes on the next batch
        "online": lambda x: (x[1] + m * x[5].last_start, x[0], x[2]),
    }[objective]
    return min(scored, key=rank)


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
    tasks = batch.tasks
    pmax = _resolve_pcie_max(batch, pcie_max)
    info = pcie_inputs(tasks, pcie)
    _check_options(iterations, objective)
    cands = _Candidates(batch, info, pmax)
    far_rep = cands.score("far", cands.timeline(cands.base.assign, tasks))
    bound = sum(1 for _, d in info if d > 0)
    if bound >= 1:
        cands.pcie_aware(far_rep, delay_threshold, wait_time_threshold, iterations)
    scored = cands.scored
    _, _, _, name, timeline, rep = _best(scored, objective, len(tasks))
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
    start = cands.start
    return to_plan(batch.model, tasks, timeline, batch.gpus, "far-pcie", stats=stats, start=start)


def make_far_pcie(**options) -> BatchPolicy:
    """Registry factory of ``far-pcie`` (options: pcie_max, delay_threshold,
    wait_time_threshold, iterations, objective). PCIe demand and alpha come from each
    task's fields (the driver fills them from the jobs)."""
    Gate(
        float(options.get("delay_threshold", DELAY_THRESHOLD)),
        float(options.get("wait_time_threshold", WAIT_TIME_THRESHOLD)),
    )  # validate now
    objective = options.get("objective", "makespan")
    if objective not in OBJECTIVES:
        raise PcieError(f"objective {objective!r}: choose one of {', '.join(OBJECTIVES)}")
    return BatchPolicy("far-pcie", bind_options(plan_far_pcie, "far-pcie", options))


POLICIES = {"far-pcie": make_far_pcie}
