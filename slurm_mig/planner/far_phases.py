"""FAR's phases 1 and 2 (``planner.far``): Turek's family of allocations (Section 3.1)
and Algorithm 1, list scheduling each allocation in LPT order over the repartitioning
tree with sequential reconfiguration, walked with exact pruning; on large batches the
canonical allotments of a ladder of target makespans, top-down and bottom-up, and the
least-work one in whole rounds (``allotment.fill_rounds``)."""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left, insort
from collections.abc import Sequence

from ..geometry import GpuModel
from ..job import Job
from .allotment import allotments, fill_rounds, ladder
from .far_tree import Availability, Forest

__all__ = ["LADDER_STEPS", "allocation_family", "list_schedule", "list_schedule_up"]

_TIE = 1e-9  # relative tolerance for "equal work" in phase 1
LADDER_STEPS = 8
LOW_TARGET = 1.10  # `_phase2_ladder`'s ``low``: the targets within this share of the bound
LowStart = list[tuple[float, list[list[int]]]]  # `_phase2_ladder` fills in one entry


# ---------------------------------------------------------------------------
# Phase 1


def _best_size(times: dict[int, float], sizes: Sequence[int], above: int = 0) -> int | None:
    """Smallest-work size above ``above``; the smallest size wins an exact tie."""
    best, best_w = None, math.inf
    for s in sizes:
        if s <= above:
            continue
        w = s * times[s]
        if w < best_w * (1 - _TIE):
            best, best_w = s, w
    return best


def allocation_family(tasks: Sequence[Job], model: GpuModel) -> list[list[int]]:
    """All allocations of Section 3.1 (for tests and reports; FAR walks it lazily)."""
    sizes = model.planner_sizes
    a = [_best_size(t.times, sizes) for t in tasks]
    fam = [list(a)]
    while True:
        i = max(range(len(tasks)), key=lambda j: (tasks[j].times[a[j]], -j))
        nxt = _best_size(tasks[i].times, sizes, a[i])
        if nxt is None:
            return fam
        a[i] = nxt
        fam.append(list(a))


# ---------------------------------------------------------------------------


# ---------------------------------------------------------------------------
# Phase 2: Algorithm 1


def list_schedule(
    forest: Forest,
    groups: dict[int, list[tuple[float, int]]],
    dur: Sequence[float],
    n: int,
    stop_at: float = math.inf,
    avail: Availability | None = None,
) -> tuple[float, list[list[int]]] | None:
    """Algorithm 1 over the forest. ``groups[s]`` holds ``(-time, task)`` in LPT order.
    ``avail``: the GPUs are busy as it says (module doc); None: idle.

    Returns (makespan, tasks per node), or None as soon as a task would end at or
    after ``stop_at`` (it can then not beat the schedule that set ``stop_at``) or when
    a task has no node but ones never free (a running job with no end holds them; such
    a node passes its turn to its children, whose slices may be free).
    """
    model = forest.model
    tc, td = model.create_s, model.destroy_s
    size, gpu, children = forest.size, forest.gpu, forest.children
    ptr = dict.fromkeys(groups, 0)
    lens = {s: len(g) for s, g in groups.items()}
    reconfig = list(avail.channel) if avail is not None else [0.0] * forest.gpus
    hi = avail.hi if avail is not None else None
    started = [False] * forest.nodes
    assign: list[list[int]] = [[] for _ in range(forest.nodes)]
    heap = [(0.0, r) for r in forest.roots]
    remaining = n
    makespan = 0.0
    pop, push = heapq.heappop, heapq.heappush
    while remaining:
        if not heap:
            return None
        end, v = pop(heap)
        s = size[v]
        p = ptr.get(s)
        if p is not None and p < lens[s] and (hi is None or hi[v] != math.inf):
            if hi is not None and not started[v] and hi[v] > end:
                push(heap, (hi[v], v))  # wait until its slices are free
                continue
            if not started[v]:
                g = gpu[v]
                r = reconfig[g]
                if end > r:
                    r = end
                r += tc[s]
                reconfig[g] = r
                end = r
                started[v] = True
            i = groups[s][p][1]
            ptr[s] = p + 1
            remaining -= 1
            assign[v].append(i)
            end += dur[i]
            if end >= stop_at:
                return None
            if end > makespan:
                makespan = end
            push(heap, (end, v))
        else:
            if started[v]:
                g = gpu[v]
                r = reconfig[g]
                reconfig[g] = (end if end > r else r) + td[s]
            for c in children[v]:
                push(heap, (end, c))
    return makespan, assign


def _phase2(
    tasks: Sequence[Job], forest: Forest, prune: bool, avail: Availability | None = None
) -> tuple[list[int], list[list[int]], float, int, int, int]:
    """The family walk (Section 3.1 + Algorithm 1); returns (allocation, assignment,
    makespan, allocations walked, evaluated, index of the chosen one)."""
    model = forest.model
    sizes = model.planner_sizes
    n = len(tasks)
    times = [t.times for t in tasks]
    slices_total = model.compute_slices * forest.gpus
    min_create = min(model.create_s[s] for s in sizes)
    a = [_best_size(t, sizes) for t in times]
    cur = [times[i][a[i]] for i in range(n)]
    area = math.fsum(a[i] * cur[i] for i in range(n))
    if avail is not None:
        area += avail.backlog(forest)
    groups: dict[int, list[tuple[float, int]]] = {s: [] for s in sizes}
    for i in range(n):
        groups[a[i]].append((-cur[i], i))
    for g in groups.values():
        g.sort()
    longest = [(-cur[i], i) for i in range(n)]
    heapq.heapify(longest)

    best = math.inf
    best_alloc: list[int] = list(a)
    best_assign: list[list[int]] = []
    best_k, k, evaluated = 0, 0, 0
    while True:
        h = -longest[0][0]
        bound_area = area / slices_total + min_create
        if prune and bound_area * (1 - 1e-12) >= best:
            break  # area never shrinks along the family: no later allocation wins
        if not prune or (h + min_create) * (1 - 1e-12) < best:
            evaluated += 1
            res = list_schedule(forest, groups, cur, n, best if prune else math.inf, avail)
            if res is not None and res[0] < best:
                best, best_assign = res
                best_alloc, best_k = list(a), k
        _, i = longest[0]
        nxt = _best_size(times[i], sizes, a[i])
        if nxt is None:
            break
        old = a[i]
        groups[old].pop(bisect_left(groups[old], (-cur[i], i)))
        area += nxt * times[i][nxt] - old * cur[i]
        a[i], cur[i] = nxt, times[i][nxt]
        insort(groups[nxt], (-cur[i], i))
        heapq.heapreplace(longest, (-cur[i], i))
        k += 1
    return best_alloc, best_assign, best, k + 1, evaluated, best_k


def _groups(alloc: Sequence[int], dur: Sequence[float], sizes: Sequence[int]) -> dict:
    groups: dict[int, list[tuple[float, int]]] = {s: [] for s in sizes}
    for i, s in enumerate(alloc):
        groups[s].append((-dur[i], i))
    for g in groups.values():
        g.sort()
    return groups


def _phase2_ladder(
    tasks: Sequence[Job],
    forest: Forest,
    avail: Availability | None = None,
    low: LowStart | None = None,
) -> tuple[list[int], list[list[int]], float, int, int, int]:
    """Phase 2 on large batches: the canonical allotment of every target of the ladder
    from the moldable bound, and on several idle GPUs the least-work one in whole rounds
    (module doc); same return as `_phase2`. ``low`` (filled in): the shortest
    schedule of the targets within ``LOW_TARGET`` times the bound, as (makespan,
    assignment); its tasks are short, a start for ``far_rebalance`` (issue 38)."""
    model = forest.model
    sizes = model.planner_sizes
    n = len(tasks)
    backlog = avail.backlog(forest) if avail is not None else 0.0
    table = allotments(tasks, sizes)
    bound = table.bound(model.compute_slices * forest.gpus, backlog)
    targets = ladder(tasks, sizes, bound, LADDER_STEPS, table.top())
    best = math.inf
    best_alloc: list[int] = []
    best_assign: list[list[int]] = []
    best_k = evaluated = 0
    seen: set[tuple[int, ...]] = set()
    both = avail is None and forest.gpus > 1  # bottom-up too (module doc)
    candidates = [(k, table.at(t)) for k, t in enumerate(targets)]
    if both:  # and the least-work allotment in whole rounds (`fill_rounds`), last
        counts = {s: len(v) for s, v in forest.by_size.items()}
        fill = fill_rounds(tasks, candidates[-1][1], sizes, counts, bound)
        candidates.append((len(candidates), fill))
    for k, alloc in candidates:
        past = k >= len(targets) or targets[k] > LOW_TARGET * bound
        if low is not None and not low and best_assign and past:
            low.append((best, best_assign))  # every target within LOW_TARGET is done
        key = tuple(alloc)
        if key in seen:
            continue
        seen.add(key)
        dur = [tasks[i].times[alloc[i]] for i in range(n)]
        evaluated += 1
        groups = _groups(alloc, dur, sizes)
        for up in (False, True) if both else (False,):
            if up:
                res = list_schedule_up(forest, groups, dur, n, best)
            else:
                res = list_schedule(forest, groups, dur, n, best, avail)
            if res is not None and res[0] < best:
                best, best_assign = res
                best_alloc, best_k = alloc, k
    return best_alloc, best_assign, best, len(candidates), evaluated, best_k


def list_schedule_up(
    forest: Forest,
    groups: dict[int, list[tuple[float, int]]],
    dur: Sequence[float],
    n: int,
    stop_at: float = math.inf,
) -> tuple[float, list[list[int]]] | None:
    """Algorithm 1 with the tree upside down, on idle GPUs: the leaves are available at
    0 (GPU by GPU), a node once all its children have passed, each node takes tasks of
    its size in LPT order while any are left. Where the long tasks want the small sizes,
    this packs them first, GPU by GPU, instead of after every larger size. Its schedule
    read backwards in time is a top-down one of the same length, so the tasks per node
    come back in that order (each node's list reversed) for `time_assignment`. Same
    return as `list_schedule`; the makespan is the bottom-up schedule's own."""
    model = forest.model
    tc, td = model.create_s, model.destroy_s
    size, gpu, parent = forest.size, forest.gpu, forest.parent
    ptr = dict.fromkeys(groups, 0)
    lens = {s: len(g) for s, g in groups.items()}
    reconfig = [0.0] * forest.gpus
    started = [False] * forest.nodes
    pending = [len(c) for c in forest.children]
    ready = [0.0] * forest.nodes
    assign: list[list[int]] = [[] for _ in range(forest.nodes)]
    heap = [(0.0, v) for v in forest.leaves]
    heapq.heapify(heap)
    remaining = n
    makespan = 0.0
    pop, push = heapq.heappop, heapq.heappush
    while remaining:
        end, v = pop(heap)
        s = size[v]
        p = ptr.get(s)
        if p is not None and p < lens[s]:
            if not started[v]:
                g = gpu[v]
                r = reconfig[g]
                reconfig[g] = r = (end if end > r else r) + tc[s]
                end = r
                started[v] = True
            i = groups[s][p][1]
            ptr[s] = p + 1
            remaining -= 1
            assign[v].append(i)
            end += dur[i]
            if end >= stop_at:
                return None
            if end > makespan:
                makespan = end
            push(heap, (end, v))
        else:
            if started[v]:
                g = gpu[v]
                r = reconfig[g]
                reconfig[g] = end = (end if end > r else r) + td[s]
            q = parent[v]
            if q >= 0:
                if end > ready[q]:
                    ready[q] = end
                pending[q] -= 1
                if pending[q] == 0:
                    push(heap, (ready[q], q))
    for a in assign:
        a.reverse()
    return makespan, assign
