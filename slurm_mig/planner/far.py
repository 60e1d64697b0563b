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
costs a two-GPU FAR per peer, whatever the cluster's size.

Onto busy GPUs (``start``): a node becomes available when its parent is released *and*
the running jobs have left its slices (a node with no task of its size is passed over at
once, as on idle GPUs, so free parts of a busy GPU serve the sizes that fit them).
``planner.concat`` adds the paper's reversed concatenation (Section 4).
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left, insort
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..geometry import GpuModel
from ..workload import Task
from .allotment import allotments, ladder
from .snapshot import Gpu
from .timeline import Timeline, Use, run_uses

_TIE = 1e-9  # relative tolerance for "equal work" in phase 1
SCALE_TASKS = 256  # from this many tasks phase 2 evaluates the canonical ladder
LADDER_STEPS = 8
REFINE_NODES = 2048  # refinement scans the forest's nodes; skip it on larger forests
PAIR_ROUNDS = 200  # `refine_gpus`: pairs planned again at most (each: PAIR_PEERS FARs)
PAIR_PEERS = 4  # the GPUs that end first, tried as the last GPU's partner
PAIR_PATIENCE = 8  # rounds in a row that take < 0.1 % off the makespan: stop
PAIR_TASKS = 40_000  # tasks planned again in all, at most (a pair's FAR grows with them)


@dataclass
class Forest:
    """One repartitioning tree per GPU, flattened: node v of GPU g is g*T + local."""

    model: GpuModel
    gpus: int
    size: list[int] = field(default_factory=list)
    gpu: list[int] = field(default_factory=list)
    local: list[int] = field(default_factory=list)
    parent: list[int] = field(default_factory=list)
    children: list[tuple[int, ...]] = field(default_factory=list)
    covers: list[tuple[int, ...]] = field(default_factory=list)  # slice ids g*S+s
    leaves: list[int] = field(default_factory=list)
    by_size: dict[int, list[int]] = field(default_factory=dict)
    roots: list[int] = field(default_factory=list)

    @classmethod
    def build(cls, model: GpuModel, gpus: int) -> Forest:
        """The forest of ``gpus`` trees of ``model`` (shared: read it, never change it)."""
        key = (model.name, gpus)
        got = _FORESTS.get(key)
        if got is None or got.model is not model:
            if len(_FORESTS) >= 32:
                _FORESTS.pop(next(iter(_FORESTS)))
            got = _FORESTS[key] = cls._make(model, gpus)
        return got

    @classmethod
    def _make(cls, model: GpuModel, gpus: int) -> Forest:
        f = cls(model, gpus)
        T, S = len(model.tree), model.compute_slices
        for g in range(gpus):
            for node in model.tree:
                v = g * T + node.index
                f.size.append(node.size)
                f.gpu.append(g)
                f.local.append(node.index)
                f.parent.append(-1 if node.parent is None else g * T + node.parent)
                f.children.append(tuple(g * T + c for c in node.children))
                p = node.placement
                # slices whose availability the instance holds (3g at 0 blocks slice 3)
                f.covers.append(tuple(g * S + s for s in range(p.start, min(p.end, S))))
                if not node.children:
                    f.leaves.append(v)
                f.by_size.setdefault(node.size, []).append(v)
            f.roots.append(g * T)
        return f

    @property
    def nodes(self) -> int:
        return len(self.size)

    def uses(self, assign: Sequence[Sequence[int]], batch: int = 0) -> list[Use]:
        tree = self.model.tree
        return [
            Use(self.gpu[v], tree[self.local[v]].slot, list(assign[v]), batch)
            for v in range(self.nodes)
            if assign[v]
        ]


_FORESTS: dict[tuple[str, int], Forest] = {}


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


def allocation_family(tasks: Sequence[Task], model: GpuModel) -> list[list[int]]:
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
# Phase 2: Algorithm 1


@dataclass(frozen=True)
class Availability:
    """When each forest node's slices are free of running work (``hi``: all of them,
    ``lo``: the first one) and when each GPU's reconfiguration channel is free, in
    seconds from the batch's start; from the GPUs as a batch finds them."""

    hi: list[float]
    lo: list[float]
    channel: list[float]

    @classmethod
    def of(cls, forest: Forest, start: Sequence[Gpu], now: float) -> Availability:
        S = forest.model.compute_slices
        free = [0.0] * (forest.gpus * S)
        channel = [0.0] * forest.gpus
        for g, gpu in enumerate(start):
            channel[g] = max(0.0, gpu.channel_free - now)
            for inst in gpu.instances:
                if inst.job is None:
                    continue
                end = math.inf if inst.busy_until is None else max(0.0, inst.busy_until - now)
                p = inst.slot.placement
                for sl in range(p.start, min(p.end, S)):
                    if end > free[g * S + sl]:
                        free[g * S + sl] = end
        hi = [max(free[c] for c in forest.covers[v]) for v in range(forest.nodes)]
        lo = [min(free[c] for c in forest.covers[v]) for v in range(forest.nodes)]
        return cls(hi, lo, channel)

    def backlog(self, forest: Forest) -> float:
        """Slice-seconds still committed to running work."""
        return math.fsum(self.hi[v] for v in forest.leaves)


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
    after ``stop_at`` (it can then not beat the schedule that set ``stop_at``).
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
        end, v = pop(heap)
        s = size[v]
        p = ptr.get(s)
        if p is not None and p < lens[s]:
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
    tasks: Sequence[Task], forest: Forest, prune: bool, avail: Availability | None = None
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
    tasks: Sequence[Task], forest: Forest, avail: Availability | None = None
) -> tuple[list[int], list[list[int]], float, int, int, int]:
    """Phase 2 on large batches: the canonical allotment of every target of the ladder
    from the moldable bound (module doc); same return as `_phase2`."""
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
    for k, target in enumerate(targets):
        alloc = table.at(target)
        key = tuple(alloc)
        if key in seen:
            continue
        seen.add(key)
        dur = [tasks[i].times[alloc[i]] for i in range(n)]
        evaluated += 1
        groups = _groups(alloc, dur, sizes)
        res = list_schedule(forest, groups, dur, n, best, avail)
        if res is not None and res[0] < best:
            best, best_assign = res
            best_alloc, best_k = alloc, k
        if both:
            res = list_schedule_up(forest, groups, dur, n, best)
            if res is not None and res[0] < best:
                best, best_assign = res
                best_alloc, best_k = alloc, k
    return best_alloc, best_assign, best, len(targets), evaluated, best_k


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
    tasks: Sequence[Task],
    assign: Sequence[Sequence[int]],
    ends: Sequence[float],
    rounds: int = PAIR_ROUNDS,
    peers: int = PAIR_PEERS,
    patience: int = PAIR_PATIENCE,
    budget: int = PAIR_TASKS,
) -> tuple[list[list[int]], int]:
    """Move work off the GPU that ends last (module doc): FAR on two GPUs for its tasks
    and those of each of the ``peers`` GPUs that end first; the pair that ends earliest
    replaces both if it ends before the last GPU did. Stops when the last GPU gains
    nothing, after ``rounds`` pairs, or after ``patience`` pairs in a row that take less than
    0.1 % off the makespan together (many GPUs end together), or once the pairs planned
    have held ``budget`` tasks in all. ``ends``: each GPU's end as ``assign`` is timed.
    Returns the new assignment (a copy) and the pairs replaced."""
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
    return [a for g in range(G) for a in local[g]], replaced


# ---------------------------------------------------------------------------
# The planner


def time_assignment(
    forest: Forest,
    tasks: Sequence[Task],
    assign: Sequence[Sequence[int]],
    start: Sequence[Gpu] | None = None,
    batch: int = 0,
    now: float = 0.0,
) -> tuple[Timeline, list[int]]:
    """Time a tree assignment (top-down uses) from ``start`` as it is at ``now``."""
    uses = forest.uses(assign, batch)
    nodes = [v for v in range(forest.nodes) if assign[v]]
    return run_uses(forest.model, tasks, uses, forest.gpus, start, now=now), nodes


def far_schedule(
    tasks: Sequence[Task],
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
    if scale is None:
        scale = len(tasks) >= SCALE_TASKS
    if scale:
        alloc, assign, ms2, fam, evaluated, k = _phase2_ladder(tasks, forest, avail)
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
    if refine_phase and pairs and scale and avail is None and gpus > 1:
        base_tl = result.timeline
        if base_tl is None:
            base_tl, _ = time_assignment(forest, tasks, result.assign, start, now=now)
        trial, pairs = refine_gpus(forest, tasks, result.assign, gpu_ends(base_tl, gpus))
        if pairs:
            new_tl, _ = time_assignment(forest, tasks, trial, start, now=now)
            if new_tl.makespan <= base_tl.makespan:
                result.assign, result.pairs, result.timeline = trial, pairs, new_tl
                result.allocation = [0] * len(tasks)
                for v, a in enumerate(trial):
                    for i in a:
                        result.allocation[i] = forest.size[v]
    return result
