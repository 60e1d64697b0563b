"""FAR (Villarrubia et al., JPDC 2025): Family of Allocations and Repartitioning.

Phase 1 builds Turek's family of allocations (Section 3.1); phase 2 list-schedules
each allocation in LPT order over the repartitioning tree with sequential
reconfiguration (Algorithm 1) and keeps the best; phase 3 refines it by moving and
swapping tasks away from critical slices (Algorithm 2). Several GPUs are several
trees whose roots are all available at time 0.

Phase 2 skips allocations that provably cannot beat the best one found so far (an
area and a longest-task bound, and an early stop once a partial schedule reaches
the best makespan). The skip is exact: the allocation chosen is the one a full
evaluation of the family chooses; ``prune=False`` evaluates all of it.

Large batches (``SCALE_TASKS`` tasks or more). Walking the family one task at a time
costs a list schedule per step, quadratic in the batch: minutes for 10,000 tasks. There
phase 2 evaluates instead the canonical allotments (``planner.allotment``) of a short
geometric ladder of target makespans, from the moldable lower bound T* up to where the
allotment is the least-work one (the family's first member), each list-scheduled top-down
and, on several idle GPUs, also bottom-up (`list_schedule_up`: long tasks on small sizes
first; 1.35 -> 1.09 x T* on 5,000 such jobs on 512 GPUs); Algorithm 2 runs while the
forest is small enough (``REFINE_NODES``) for its scans to stay cheap. On several idle
GPUs a large batch is then refined GPU by GPU (`refine_gpus`): work moves off the GPU
that ends last by planning it again with FAR together with one of the GPUs that end
first (each pair with an allotment of its own), at most ``PAIR_ROUNDS`` times; a round
costs a two-GPU FAR per peer, whatever the cluster's size. Last, the tail repairs of
``far_tail`` (issue 38): ``far_rebalance`` moves and swaps single tasks, at any size, off
the GPUs that end last onto GPUs with room, for targets lowered step by step towards the
dual bound; a plan still well over the bound is re-packed GPU by GPU (FAR on one GPU) and
repaired again, or, where phase 2's list schedule leaves the longest tasks on small
slices (GOOD-WIDE), repaired from phase 2's schedule near the bound instead. GPU ends
between these steps come from ``far_rebalance``'s model (exact on idle GPUs); the plan
kept is timed exactly once, and only kept if it ends no later.
Phase 2 also tries the least-work allotment in whole rounds (``allotment.fill_rounds``:
a size with a few tasks too many for one round sends the cheapest of them one size up).

Onto busy GPUs (``start``): a node becomes available when its parent is released *and*
the running jobs have left its slices (a node with no task of its size is passed over at
once, as on idle GPUs, so free parts of a busy GPU serve the sizes that fit them).
``planner.concat`` adds the paper's reversed concatenation (Section 4).
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ..geometry import GpuModel
from ..job import Job
from .allotment import allotments
from .far_phases import LowStart, _phase2, _phase2_ladder
from .far_tail import model_ends, repair_tail
from .far_tree import Availability, Forest, time_assignment
from .snapshot import Gpu
from .timeline import Timeline

SCALE_TASKS = 256  # from this many tasks phase 2 evaluates the canonical ladder
REFINE_NODES = 2048  # refinement scans the forest's nodes; skip it on larger forests
PAIR_ROUNDS = 200  # `refine_gpus`: pairs planned again at most (each: PAIR_PEERS FARs)
PAIR_PEERS = 4  # the GPUs that end first, tried as the last GPU's partner
PAIR_PATIENCE = 8  # rounds in a row that take < 0.1 % off the makespan: stop
PAIR_TASKS = 40_000  # tasks planned again in all, at most (a pair's FAR grows with them)


@dataclass
class FarResult:
    """Everything FAR decided, kept for refinement, concatenation and reports."""

    forest: Forest
    allocation: list[int]  # chosen size per task
    assign: list[list[int]]  # task indexes per forest node, in run order
    phase2_makespan: float  # Algorithm 1's own makespan of the chosen allocation
    walked: int  # allocations of the family visited (the walk stops once none can win)
    evaluated: int
    chosen_index: int
    moves: int = 0
    swaps: int = 0
    iterations: int = 0
    timeline: Timeline | None = None  # ``assign`` timed (batch 0) where refinement did
    pairs: int = 0  # pairs of GPUs planned again by `refine_gpus`
    rebalanced: bool = False  # whether `far_rebalance.rebalance` shortened the plan


# ---------------------------------------------------------------------------
# Phase 3: Algorithm 2


def slice_ends(
    forest: Forest,
    assign: Sequence[Sequence[int]],
    timeline: Timeline | None,
    ends_by_node: Sequence[float],
) -> list[float]:
    out = [0.0] * (forest.gpus * forest.model.compute_slices)
    for v in range(forest.nodes):
        if assign[v]:
            e = ends_by_node[v]
            for s in forest.covers[v]:
                if e > out[s]:
                    out[s] = e
    return out


def node_ends(forest: Forest, timeline: Timeline, uses_nodes: Sequence[int]) -> list[float]:
    ends = [0.0] * forest.nodes
    for v, (_, last) in zip(uses_nodes, timeline.use_bounds):
        ends[v] = last
    return ends


def _closest_below(durs: list[float], margin: float) -> int | None:
    """Index of the duration < margin closest to margin/2 (durs sorted decreasing)."""
    target = margin / 2
    best, best_d = None, math.inf
    # durs is decreasing: scan the part below margin, stop once past the target
    lo, hi = 0, len(durs)
    while lo < hi:  # first index with dur < margin
        mid = (lo + hi) // 2
        if durs[mid] < margin:
            hi = mid
        else:
            lo = mid + 1
    for j in range(lo, len(durs)):
        d = abs(durs[j] - target)
        if d < best_d:
            best, best_d = j, d
        if durs[j] < target:
            break
    return best


def _swap_pair(a: list[float], b: list[float], margin: float) -> tuple[int, int] | None:
    """(k, j) with 0 < a[k] - b[j] < margin closest to margin/2; lists decreasing."""
    target = margin / 2
    best, best_d = None, math.inf
    k = j = 0
    while k < len(a) and j < len(b):
        diff = a[k] - b[j]
        if diff <= 0:
            j += 1
        elif diff >= margin:
            k += 1
        else:
            d = abs(diff - target)
            if d < best_d:
                best, best_d = (k, j), d
            if diff < target:
                j += 1
            else:
                k += 1
    return best


def refine(
    forest: Forest,
    assign: list[list[int]],
    dur: Sequence[float],
    ends: list[float],
    critical_margin: Sequence[float] | None = None,
    max_iters: int = 100,
) -> tuple[int, int, int]:
    """Algorithm 2 on ``assign`` in place, tracking slice ends without reconfiguration.

    ``ends`` are the slice end times. With ``critical_margin`` (concatenation,
    Section 4.3) the quantity to shrink on each slice is ``ends[s] + margin[s]``.
    Returns (iterations, moves, swaps).
    """
    extra = critical_margin or [0.0] * len(ends)
    by_size = forest.by_size
    covers, parent = forest.covers, forest.parent
    for v in range(forest.nodes):
        assign[v].sort(key=lambda i: -dur[i])
    iters = moves = swaps = 0
    stop = False
    while not stop and iters < max_iters:
        iters += 1
        omega = max(e + x for e, x in zip(ends, extra))
        queue = deque(
            v for v in forest.leaves if any(ends[s] + extra[s] >= omega for s in covers[v])
        )
        opened = set(queue)
        changed = False
        while queue:
            v = queue.popleft()
            if parent[v] < 0:
                stop = True
                break
            alt, alt_end = v, math.inf
            for w in by_size[forest.size[v]]:
                e = max(ends[s] + extra[s] for s in covers[w])
                if e < alt_end:
                    alt, alt_end = w, e
            done = False
            if alt != v:
                margin = omega - alt_end
                durs = [dur[i] for i in assign[v]]
                j = _closest_below(durs, margin)
                if j is not None:
                    task = assign[v].pop(j)
                    _insert(assign[alt], task, dur)
                    _shift(ends, covers[v], -dur[task])
                    _shift(ends, covers[alt], dur[task])
                    moves += 1
                    done = True
                else:
                    pair = _swap_pair(durs, [dur[i] for i in assign[alt]], margin)
                    if pair is not None:
                        tk = assign[v].pop(pair[0])
                        tj = assign[alt].pop(pair[1])
                        _insert(assign[alt], tk, dur)
                        _insert(assign[v], tj, dur)
                        delta = dur[tk] - dur[tj]
                        _shift(ends, covers[v], -delta)
                        _shift(ends, covers[alt], delta)
                        swaps += 1
                        done = True
            if done:
                changed = True
            elif parent[v] not in opened:
                opened.add(parent[v])
                queue.append(parent[v])
        if not changed:
            break
    return iters, moves, swaps


def _insert(tasks: list[int], task: int, dur: Sequence[float]) -> None:
    keys = [-dur[i] for i in tasks]
    tasks.insert(bisect_left(keys, -dur[task]), task)


def _shift(ends: list[float], slices: Sequence[int], delta: float) -> None:
    for s in slices:
        ends[s] += delta


# ---------------------------------------------------------------------------
# Refinement across GPUs (large batches on idle GPUs)


def gpu_ends(timeline: Timeline, gpus: int) -> list[float]:
    """When each GPU's last task ends (0 for a GPU without tasks)."""
    ends = [0.0] * gpus
    for t in timeline.tasks:
        if t.end > ends[t.gpu]:
            ends[t.gpu] = t.end
    return ends


def refine_gpus(
    forest: Forest,
    tasks: Sequence[Job],
    assign: Sequence[Sequence[int]],
    ends: Sequence[float],
    rounds: int = PAIR_ROUNDS,
    peers: int = PAIR_PEERS,
    patience: int = PAIR_PATIENCE,
    budget: int = PAIR_TASKS,
) -> tuple[list[list[int]], int, list[float]]:
    """Move work off the GPU that ends last (module doc): FAR on two GPUs for its tasks
    and those of each of the ``peers`` GPUs that end first; the pair that ends earliest
    replaces both if it ends before the last GPU did. Stops when the last GPU gains
    nothing, after ``rounds`` pairs, or after ``patience`` pairs in a row that take less than
    0.1 % off the makespan together (many GPUs end together), or once the pairs planned
    have held ``budget`` tasks in all. ``ends``: each GPU's end as ``assign`` is timed.
    Returns the new assignment (a copy), the pairs replaced and each GPU's new end."""
    T = len(forest.model.tree)
    G = forest.gpus
    local = [[list(assign[g * T + v]) for v in range(T)] for g in range(G)]
    ends = list(ends)
    work = [0.0] * G
    for v, a in enumerate(assign):
        size = forest.size[v]
        work[v // T] += math.fsum(size * tasks[i].times[size] for i in a)
    slices = 2 * forest.model.compute_slices
    replaced = idle = 0
    mark = max(ends, default=0.0)  # the makespan when it last fell by 0.1 %
    for _ in range(rounds):
        last = max(range(G), key=ends.__getitem__)
        best: tuple[float, int, list[list[int]], list[float]] | None = None
        for peer in heapq.nsmallest(peers + 1, range(G), key=ends.__getitem__):
            if peer == last or (work[last] + work[peer]) / slices >= ends[last]:
                continue  # the pair's area alone reaches the last GPU's end
            idx = [i for a in local[last] + local[peer] for i in a]
            budget -= len(idx)
            if budget < 0:
                break
            sub = [tasks[i] for i in idx]
            res = far_schedule(sub, forest.model, 2, pairs=False)  # no pairs of the pair
            tl, _ = time_assignment(res.forest, sub, res.assign)
            pair_ends = gpu_ends(tl, 2)
            if max(pair_ends) < ends[last] * (1 - 1e-12) and (
                best is None or max(pair_ends) < best[0]
            ):
                nodes = [[idx[k] for k in a] for a in res.assign]
                best = (max(pair_ends), peer, nodes, pair_ends)
        if best is None:
            break
        _, peer, nodes, pair_ends = best
        for g, half in ((last, nodes[:T]), (peer, nodes[T:])):
            local[g] = half
            work[g] = math.fsum(
                forest.size[v] * tasks[i].times[forest.size[v]] for v in range(T) for i in half[v]
            )
        ends[last], ends[peer] = pair_ends
        replaced += 1
        if budget < 0:
            break
        if max(ends) < mark * (1 - 1e-3):
            mark, idle = max(ends), 0
        else:
            idle += 1
            if idle >= patience:
                break
    return [a for g in range(G) for a in local[g]], replaced, ends


# ---------------------------------------------------------------------------
# The planner


# ---------------------------------------------------------------------------
# The planner


def far_schedule(
    tasks: Sequence[Job],
    model: GpuModel,
    gpus: int = 1,
    refine_phase: bool = True,
    prune: bool = True,
    max_iters: int = 100,
    start: Sequence[Gpu] | None = None,
    now: float = 0.0,
    scale: bool | None = None,
    pairs: bool = True,
) -> FarResult:
    """Phases 1-3 on a batch, onto ``start`` (the GPUs at ``now``; idle if None);
    returns the chosen tree assignment. ``scale``: the ladder of large batches (default:
    from ``SCALE_TASKS`` tasks). ``pairs``: refine a large batch GPU pair by GPU pair
    (``refine_gpus``); False inside that refinement, whose two-GPU plans would else
    refine themselves again without end."""
    forest = Forest.build(model, gpus)
    busy = bool(start) and any(g.instances for g in start)  # type: ignore[union-attr]
    avail = Availability.of(forest, start, now) if busy else None  # type: ignore[arg-type]
    keep = _free_sometime(tasks, forest, avail) if avail is not None else None
    if keep is not None:  # some sizes' nodes are never free (a job with no end holds them)
        batch, tasks = len(tasks), [_on_sizes(tasks[i], keep[i]) for i in keep]
    if not tasks:
        result = FarResult(forest, [], [[] for _ in range(forest.nodes)], 0.0, 0, 0, 0)
        return result if keep is None else _widened(result, list(keep), batch)
    if scale is None:
        scale = len(tasks) >= SCALE_TASKS
    repairs = refine_phase and pairs and scale and avail is None and gpus > 1
    if scale:
        low: LowStart | None = [] if repairs else None
        alloc, assign, ms2, fam, evaluated, k = _phase2_ladder(tasks, forest, avail, low)
    else:
        alloc, assign, ms2, fam, evaluated, k = _phase2(tasks, forest, prune, avail)
    result = FarResult(forest, alloc, assign, ms2, fam, evaluated, k)
    if refine_phase and len(tasks) > 1 and forest.nodes <= REFINE_NODES:
        dur = [tasks[i].times[alloc[i]] for i in range(len(tasks))]
        base_tl, nodes = time_assignment(forest, tasks, assign, start, now=now)
        trial = [list(x) for x in assign]
        ends = slice_ends(forest, trial, None, node_ends(forest, base_tl, nodes))
        iters, moves, swaps = refine(forest, trial, dur, ends, max_iters=max_iters)
        result.iterations = iters
        result.timeline = base_tl
        if moves or swaps:  # else ``trial`` is ``assign`` (re-sorted by refine: same order)
            new_tl, _ = time_assignment(forest, tasks, trial, start, now=now)
            if new_tl.makespan <= base_tl.makespan:
                result.assign, result.moves, result.swaps = trial, moves, swaps
                result.timeline = new_tl
    if repairs:
        if result.timeline is not None:
            ends = gpu_ends(result.timeline, gpus)
        else:  # the model times idle GPUs exactly, for a quarter of the timeline's cost
            ends = model_ends(forest, tasks, result.assign)
        trial, pairs, ends = refine_gpus(forest, tasks, result.assign, ends)
        if pairs:  # every pair timed exactly (`time_assignment`), each GPU apart
            result.assign, result.pairs, result.timeline = trial, pairs, None
        _rebalance(result, tasks, max(ends), low)
        result.allocation = [0] * len(tasks)
        for v, a in enumerate(result.assign):
            for i in a:
                result.allocation[i] = forest.size[v]
    return result if keep is None else _widened(result, list(keep), batch)


def _free_sometime(
    tasks: Sequence[Job], forest: Forest, avail: Availability
) -> dict[int, frozenset[int]] | None:
    """Where some node is never free: each task that can run somewhere, by index, with
    the sizes it can run on that have a node free some time; None where every
    size has a node free some time (every task can be planned as it is)."""
    free = {forest.size[v] for v in range(forest.nodes) if avail.hi[v] != math.inf}
    if len(free) == len(forest.by_size):
        return None
    out = {}
    for i, t in enumerate(tasks):
        sizes = frozenset(s for s in free if t.times.get(s, math.inf) != math.inf)
        if sizes:
            out[i] = sizes
    return out


def _on_sizes(task: Job, sizes: frozenset[int]) -> Job:
    times = {s: (t if s in sizes else math.inf) for s, t in task.times.items()}
    return task if times == task.times else replace(task, times=times)


def _widened(res: FarResult, keep: list[int], n: int) -> FarResult:
    """``res``, planned for the tasks ``keep`` of a batch of ``n``, indexed by the
    batch: a task left out is in no node's list (it waits for a later plan)."""
    allocation = [0] * n
    for k, i in enumerate(keep):
        allocation[i] = res.allocation[k]
    assign = [[keep[k] for k in a] for a in res.assign]
    return replace(res, allocation=allocation, assign=assign)


def _rebalance(result: FarResult, tasks: Sequence[Job], ms: float, low: LowStart | None) -> None:
    """The tail repairs of ``far_tail.repair_tail`` on ``result`` (idle GPUs, ending at
    ``ms``); the shortest plan they find is kept where, timed exactly, it ends no later
    (``result.timeline``: that timing; None where the plan stays as it was untimed)."""
    forest = result.forest
    bound = allotments(tasks, forest.model.planner_sizes).bound(
        forest.model.compute_slices * forest.gpus
    )
    found = repair_tail(forest, tasks, result.assign, ms, bound, low, schedule=far_schedule)
    for _, _, trial in sorted(found, key=lambda f: f[:2]):
        new_tl, _ = time_assignment(forest, tasks, trial)
        if new_tl.makespan <= ms * (1 + 1e-12):
            result.assign, result.timeline, result.rebalanced = trial, new_tl, True
            return
