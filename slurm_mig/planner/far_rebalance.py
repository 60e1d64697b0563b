"""Tail repair of a large FAR plan on idle GPUs (issue 38): move whole tasks off the GPUs
that end after a target ``tau`` onto GPUs that still have room before it, at any size,
or swap them for shorter ones there.

The model of one GPU: its repartitioning tree with, per node, the tasks it runs; a leaf's
path costs the durations of the tasks on its nodes plus each used node's creation and
destruction; the GPU ends with its costliest path plus what reconfiguration contention
adds (``pen``: the exact end, `_Shape.end`, timed as `timeline.run_uses` times it, less
the costliest path). For a target ``tau`` the GPUs that end after it are taken in order,
latest first; each gives up, one step at a time, a task on a path over ``tau``: moved to
the placement (GPU among the ``peers`` that end first and a spread of the others, or
itself; node; size) that fits under ``tau``, or swapped with a shorter task of a peer
(each on the other's node), whichever adds the least work, then takes the most off the
paths over ``tau``, then leaves the least room (best fit). A step the exact timing
refuses is taken back. Each step shortens a path over ``tau``, so a GPU is repaired or
stuck after finitely many. `rebalance` lowers ``tau`` step by step from the makespan;
a deterministic budget of steps bounds its cost. Pure (inputs are copied) and
deterministic.

The search reads each peer through a `_Summary` kept until a move touches it (per size,
the longest task a node may take; per used node, its longest and shortest tasks): a
peer or node it rules out has no fit or swap, one it keeps is checked as before, so
each step is the one the exhaustive search picks (ties in the peers' order), for about
a fifth less time a step; a swap's two moves are timed once.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Sequence

from ..job import Job
from .far_tree import Forest

__all__ = ["REPAIR_PEERS", "STEPS", "TRIALS", "rebalance", "repair", "undo"]

FIRST_STEP = 0.005  # the first target: this much below the makespan (a share of it)
MIN_STEP = 2e-4  # targets closer than this share of the bound to the makespan: stop
TRIALS = 24  # targets tried
STEPS = 1500  # steps (moves, swaps) tried in all
STEPS_PER_GPU = 24  # moves and swaps tried per GPU over the target, at most
SPREAD = 2  # and this many times ``peers`` more, spread over the rest
REPAIR_PEERS = 8  # the GPUs that end first, tried as receivers of a task


class _Shape:
    """One GPU's tree as the path model reads it (module doc)."""

    def __init__(self, forest: Forest) -> None:
        model = forest.model
        tree = model.tree
        T = len(tree)
        self.T = T
        self.size = [n.size for n in tree]
        self.oh = [model.create_s[n.size] + model.destroy_s[n.size] for n in tree]
        leaves = [n.index for n in tree if not n.children]
        self.paths: list[tuple[int, ...]] = []
        for leaf in leaves:
            path, v = [], leaf
            while v is not None:
                path.append(v)
                v = tree[v].parent
            self.paths.append(tuple(reversed(path)))
        self.under = [tuple(k for k, p in enumerate(self.paths) if v in p) for v in range(T)]
        self.mem = [range(n.placement.start, n.placement.end) for n in tree]
        self.create = [model.create_s[n.size] for n in tree]
        self.destroy = [model.destroy_s[n.size] for n in tree]
        self.slot_rank = {v: k for k, v in enumerate(sorted(range(T), key=lambda v: tree[v].slot))}
        self.size_set = set(self.size)
        self.by_size: dict[int, list[int]] = {}
        for n in tree:
            self.by_size.setdefault(n.size, []).append(n.index)
        rank = self.slot_rank.__getitem__
        self.overlaps = [
            sorted((o for o in range(T) if _overlap(self.mem[o], self.mem[v])), key=rank)
            for v in range(T)
        ]
        self._graphs: dict[tuple[int, ...], tuple[list[int], list[list[int]], list[int]]] = {}

    def end(self, dsum: Sequence[float], local: Sequence[Sequence[int]]) -> float:
        """When the GPU ends, timed as `timeline.run_uses` times its uses (idle GPU)."""
        uses = tuple(v for v in range(self.T) if local[v])
        graph = self._graphs.get(uses)
        if graph is None:
            graph = self._graphs[uses] = self._graph(uses)
        waiting0, dependents, first = graph
        waiting = list(waiting0)
        ready = [0.0] * self.T
        heap = [(0.0, v) for v in first]
        live: dict[int, float] = {}
        channel = end = 0.0
        destroy, create, overlaps = self.destroy, self.create, self.overlaps
        pop, push = heapq.heappop, heapq.heappush
        while heap:
            t, v = pop(heap)
            for o in overlaps[v]:  # the live uses on its slices, by slot
                if o in live:
                    c = live.pop(o)
                    channel = (c if c > channel else channel) + destroy[o]
            channel = (t if t > channel else channel) + create[v]
            live[v] = t = channel + dsum[v]
            if t > end:
                end = t
            for k in dependents[v]:
                if t > ready[k]:
                    ready[k] = t
                waiting[k] -= 1
                if not waiting[k]:
                    push(heap, (ready[k], k))
        return end

    def _graph(self, uses: tuple[int, ...]) -> tuple[list[int], list[list[int]], list[int]]:
        """For a set of used nodes: each one's count of uses it waits for, the uses
        waiting for each, and those waiting for none (`end`'s order of uses)."""
        last_on: dict[int, int] = {}
        waiting = [0] * self.T
        dependents: list[list[int]] = [[] for _ in range(self.T)]
        for v in uses:
            deps = {last_on[m] for m in self.mem[v] if m in last_on}
            for m in self.mem[v]:
                last_on[m] = v
            waiting[v] = len(deps)
            for i in deps:
                dependents[i].append(v)
        return waiting, dependents, [v for v in uses if not waiting[v]]


def _overlap(a: range, b: range) -> bool:
    return a.start < b.stop and b.start < a.stop


class _State:
    """Per GPU: tasks per node, their summed durations, leaf path costs, end."""

    def __init__(
        self, shape: _Shape, tasks: Sequence[Job], assign: Sequence[Sequence[int]], gpus: int
    ):
        T = shape.T
        self.shape = shape
        self.tasks = tasks
        self.local = [[list(assign[g * T + v]) for v in range(T)] for g in range(gpus)]
        self.size_of = [0] * len(tasks)
        self.dsum = [[0.0] * T for _ in range(gpus)]
        for g in range(gpus):
            for v in range(T):
                s = shape.size[v]
                for i in self.local[g][v]:
                    self.size_of[i] = s
                    self.dsum[g][v] += tasks[i].times[s]
        self.pc = [self._paths(g) for g in range(gpus)]
        self.top = [self._tops(p) for p in self.pc]
        self.end = [shape.end(self.dsum[g], self.local[g]) for g in range(gpus)]
        # what reconfiguration contention adds to the modelled paths (module doc)
        self.pen = [e - max(p, default=0.0) for e, p in zip(self.end, self.pc)]
        self.summ: list[_Summary | None] = [None] * gpus  # `summary`, while valid
        self.info: dict[tuple[int, int], tuple[list[float], float]] = {}  # `node_info`
        top = max(shape.size_set) + 1
        self.times = [[t.times.get(s, math.inf) for s in range(top)] for t in tasks]

    def node_info(self, g: int, v: int) -> tuple[list[float], float]:
        """Node ``v`` of GPU ``g`` (used): its shortest task per size (indexed by size)
        and its longest at its size (cached until a move touches the node)."""
        got = self.info.get((g, v))
        if got is None:
            times = [self.times[j] for j in self.local[g][v]]
            got = [min(col) for col in zip(*times)], max(t[self.shape.size[v]] for t in times)
            self.info[g, v] = got
        return got

    def summary(self, h: int) -> _Summary:
        """GPU ``h``'s `_Summary` (cached until a move touches it)."""
        got = self.summ[h]
        if got is None:
            got = self.summ[h] = _Summary(self, h)
        return got

    def _tops(self, pc: Sequence[float]) -> list[float]:
        """Per node, the costliest path through it."""
        return [max(map(pc.__getitem__, under)) for under in self.shape.under]

    def _paths(self, g: int) -> list[float]:
        d, local, oh = self.dsum[g], self.local[g], self.shape.oh
        return [sum(d[v] + oh[v] for v in path if local[v]) for path in self.shape.paths]

    def move(self, i: int, g: int, v: int, h: int, w: int, s: int) -> None:
        """Task ``i`` from node ``v`` of GPU ``g`` to node ``w`` of GPU ``h`` at size ``s``."""
        self.moves([(i, g, v, h, w, s)])

    def moves(self, step: Sequence[tuple[int, int, int, int, int, int]]) -> None:
        """The moves of ``step`` (each as `move`'s arguments), in order."""
        for i, g, v, h, w, s in step:
            self._shift(i, g, v, h, w, s)
        for x in {x for i, g, v, h, w, s in step for x in (g, h)}:
            self.pc[x] = self._paths(x)
            self.top[x] = self._tops(self.pc[x])
            self.end[x] = self.shape.end(self.dsum[x], self.local[x])
            self.pen[x] = self.end[x] - max(self.pc[x], default=0.0)

    def _shift(self, i: int, g: int, v: int, h: int, w: int, s: int) -> None:
        """`move`'s bookkeeping of the task lists and sums (ends left as they were)."""
        self.local[g][v].remove(i)
        self.dsum[g][v] -= self.tasks[i].times[self.size_of[i]]
        if not self.local[g][v]:
            self.dsum[g][v] = 0.0  # no drift once a node empties
        self.local[h][w].append(i)
        self.dsum[h][w] += self.tasks[i].times[s]
        self.size_of[i] = s
        self.info.pop((g, v), None)
        self.info.pop((h, w), None)
        self.summ[g] = self.summ[h] = None

    def assignment(self) -> list[list[int]]:
        """The forest assignment, each node's tasks longest first."""
        out = []
        for nodes in self.local:
            for v, a in enumerate(nodes):
                s = self.shape.size[v]
                out.append(sorted(a, key=lambda i: (-self.tasks[i].times[s], i)))
        return out


class _Summary:
    """What rules GPU ``h`` out as a receiver before `_fit` and `_best_swap` read its
    nodes, exactly (a GPU ruled out has no fit, no swap): per size, the most seconds
    under a target that may fit on a node of it (``most``, less the target); its used
    nodes as (node, its size, its longest task at that size, its shortest task per
    size) (``used``) and its shortest task per size (``short``)."""

    __slots__ = ("most", "short", "used")

    def __init__(self, st: _State, h: int) -> None:
        shape = st.shape
        tops, loc, size, oh = st.top[h], st.local[h], shape.size, shape.oh
        most = dict.fromkeys(shape.by_size, -math.inf)
        self.used: list[tuple[int, int, float, list[float]]] = []
        for w, here in enumerate(loc):
            m = -tops[w] if here else -tops[w] - oh[w]
            if m > most[size[w]]:
                most[size[w]] = m
            if here:
                least, longest = st.node_info(h, w)
                self.used.append((w, size[w], longest, least))
        self.most = [most.get(s, -math.inf) for s in range(max(most) + 1)]
        self.short = [min(col) for col in zip(*(u[3] for u in self.used))]


def _fit(
    st: _State, h: int, tops: Sequence[float], d: float, s: int, tau: float
) -> tuple[float, int] | None:
    """Best-fit node of size ``s`` on GPU ``h`` (costliest path through each node:
    ``tops``) for a task of ``d`` seconds under ``tau``: (room left, node) or None."""
    shape = st.shape
    best = None
    loc = st.local[h]
    for w in shape.by_size[s]:
        top = tops[w] + (d if loc[w] else d + shape.oh[w])
        if top <= tau and (best is None or tau - top < best[0]):
            best = (tau - top, w)
    return best


def _best_move(
    st: _State,
    g: int,
    tau: float,
    receivers: list[tuple[float, int]],
    peers: int,
    sizes: Sequence[int],
    banned: set[tuple[int, int]],
    spread: int = SPREAD,
) -> list[tuple[int, int, int, int, int, int]] | None:
    """The step that repairs GPU ``g`` (module doc): a move or a swap, as moves
    (task, gpu, node, to gpu, to node, size); the least work added, then the most taken
    off the paths over ``tau``, then the best fit."""
    shape = st.shape
    pc = st.pc[g]
    need = [0.0] * shape.T
    for k, p in enumerate(shape.paths):
        if pc[k] + st.pen[g] > tau:
            for v in p:
                need[v] = max(need[v], pc[k] + st.pen[g] - tau)
    spread = receivers[peers :: max(1, (len(receivers) - peers) // (spread * peers) + 1)]
    peers_g = [h for _, h in receivers[:peers] + spread if h != g]
    fits = _peer_fits(st, peers_g, tau)
    low = dict.fromkeys(shape.by_size, math.inf)  # per size, the lowest top of its nodes
    for w, t in enumerate(st.top[g]):
        low[shape.size[w]] = min(low[shape.size[w]], t)
    cap = tau - st.pen[g] + 1e-9 * (abs(tau - st.pen[g]) + 1.0)  # with a rounding margin
    best, best_key = None, None
    seen: set[tuple[int, float]] = set()
    for v in range(shape.T):
        if not need[v]:
            continue
        sv = shape.size[v]
        for i in list(st.local[g][v]):
            times = st.tasks[i].times
            di = times[sv]
            if (v, di) in seen:
                continue
            seen.add((v, di))
            gain = -min(di, need[v])
            # the GPU's own paths once the task has left (for moves within it)
            st.local[g][v].remove(i)
            st.dsum[g][v] -= di
            gone = di if st.local[g][v] else st.dsum[g][v] + di + shape.oh[v]
            own = None  # its tops, once a node may take the task (none ends below low - gone)
            for s in sizes:
                d = times[s]
                key0 = s * d - sv * di
                if not d <= tau or (best_key is not None and key0 > best_key[0]):
                    continue
                got = None
                if low[s] - gone + d <= cap and (i, g) not in banned:
                    if own is None:
                        own = st._tops([c - gone if v in p else c for c, p in zip(pc, shape.paths)])
                    got = _fit(st, g, own, d, s, tau - st.pen[g])
                if got is not None:
                    got = (got[0], -1, g, got[1])  # first on ties, as the peers' order
                got = _fit_peers(st, i, d, s, fits, banned, got)
                if got is not None:
                    key = (key0, gain, got[0])
                    if best_key is None or key < best_key:
                        best_key, best = key, [(i, g, v, got[2], got[3], s)]
            st.local[g][v].append(i)  # back, as it was (the loop above ran without it)
            st.dsum[g][v] += di
            if best_key is not None and best_key[0] <= 0 and best_key[1] <= gain:
                continue  # a move adding no work takes as much off: swaps skipped (speed)
            got = _best_swap(st, g, i, v, need[v], peers_g, banned, tau)
            if got is not None and (best_key is None or got[0] < best_key):
                best_key, best = got
    return best


def _peer_fits(
    st: _State, peers: Sequence[int], tau: float
) -> list[tuple[int, float, float, list[float]]]:
    """The peers as (GPU, room under ``tau``, that room with a rounding margin, the most
    seconds under a target that may fit on a node per size less the target, `_Summary`):
    a task longer than room plus most fits on no node of that size (`_fit`)."""
    out = []
    summ, pen = st.summ, st.pen
    for h in peers:
        cap = tau - pen[h]
        out.append((h, cap, cap + 1e-9 * (abs(cap) + 1.0), (summ[h] or st.summary(h)).most))
    return out


def _fit_peers(
    st: _State,
    i: int,
    d: float,
    s: int,
    fits: list[tuple[int, float, float, list[float]]],
    banned: set[tuple[int, int]],
    best: tuple[float, int, int, int] | None,
) -> tuple[float, int, int, int] | None:
    """The best fit (`_fit`) of task ``i`` (``d`` seconds at size ``s``) on the peers of
    ``fits`` (`_peer_fits`) and ``best``: (room left, rank, GPU, node), least first."""
    for k, (h, cap, lim, most) in enumerate(fits):
        if d > lim + most[s] or (banned and (i, h) in banned):
            continue
        got = _fit(st, h, st.top[h], d, s, cap)
        if got is not None and (best is None or got[0] < best[0]):
            best = (got[0], k, h, got[1])
    return best


def _best_swap(
    st: _State,
    g: int,
    i: int,
    v: int,
    need: float,
    peers: Sequence[int],
    banned: set[tuple[int, int]],
    tau: float,
) -> tuple[tuple[float, float, float], list] | None:
    """Task ``i`` on (over-``tau``) node ``v`` of its GPU for a shorter one on a peer's
    node (each on the other's node size; steps of ``banned`` left out): (key, moves) as
    `_best_move`, or None."""
    sv = st.shape.size[v]
    ti, times, summ = st.times[i], st.times, st.summ
    tv = ti[sv]
    best = None
    for h in peers:
        got = summ[h] or st.summary(h)
        if not got.used or tv <= got.short[sv] or (banned and (i, h) in banned):
            continue  # no task there is shorter
        cap = tau - st.pen[h]
        tops, loc, dsum = st.top[h], st.local[h], st.dsum[h]
        for w, sw, longest, least in got.used:
            if tv <= least[sv]:
                continue
            free = cap - tops[w] - ti[sw]  # room once i is in, before j leaves
            if free + dsum[w] < 0 or free + longest < 0:  # no task leaving makes room
                continue
            for j in loc[w]:
                tj = times[j]
                room = free + tj[sw]
                if room < 0 or tv <= tj[sv]:
                    continue
                key = (
                    sv * tj[sv] + sw * ti[sw] - sv * tv - sw * tj[sw],
                    -min(tv - tj[sv], need),
                    room,
                )
                if best is None or key < best[0]:
                    best = (key, (j, h, w, sw))
    if best is None:
        return None
    j, h, w, sw = best[1]
    return best[0], [(i, g, v, h, w, sw), (j, h, w, g, v, sv)]


def repair(
    st: _State, tau: float, peers: int = REPAIR_PEERS, budget: int = STEPS
) -> tuple[bool, list[list[tuple[int, int, int, int, int, int]]], int]:
    """Bring every GPU of ``st`` to end by ``tau`` (module doc), in place. Returns
    whether every GPU got there, the steps made (for `undo`) and the step budget left."""
    gpus = len(st.end)
    sizes = sorted(st.shape.size_set)
    over = sorted((g for g in range(gpus) if st.end[g] > tau), key=lambda g: -st.end[g])
    receivers = sorted((st.end[h], h) for h in range(gpus) if st.end[h] <= tau)
    keys = {h: e for e, h in receivers}  # each receiver's entry in ``receivers``
    log: list[list[tuple[int, int, int, int, int, int]]] = []
    for g in over:
        banned: set[tuple[int, int]] = set()  # (task, GPU) steps the exact timing refused
        for _ in range(STEPS_PER_GPU):
            if st.end[g] <= tau or budget <= 0:
                break
            budget -= 1
            step = _best_move(st, g, tau, receivers, peers, sizes, banned)
            if step is None:
                break
            if _apply(st, g, step, tau, (receivers, keys), banned):
                log.append(step)
        if st.end[g] > tau:
            return False, log, budget
    return True, log, budget


def undo(st: _State, log: list[list[tuple[int, int, int, int, int, int]]]) -> None:
    """Take back the steps of ``log`` (as `repair` returned them), latest first."""
    for step in reversed(log):
        for i, a, v, b, w, _ in reversed(step):
            st.move(i, b, w, a, v, st.shape.size[v])


def _apply(
    st: _State,
    g: int,
    step: list[tuple[int, int, int, int, int, int]],
    tau: float,
    rec: tuple[list[tuple[float, int]], dict[int, float]],
    banned: set[tuple[int, int]],
) -> bool:
    """Make the moves of ``step``; undo them (and ban the step) where the exact timing
    puts the receiving GPU over ``tau`` or lengthens ``g``; whether they stay."""
    h = step[0][3]
    old_g = st.end[g]
    sizes = {i: st.size_of[i] for i, *_ in step}
    st.moves(step)
    if st.end[g] > old_g or (h != g and st.end[h] > tau):
        st.moves([(i, b, w, a, v, sizes[i]) for i, a, v, b, w, _ in reversed(step)])
        banned.add((step[0][0], h))
        return False
    if h != g:
        receivers, keys = rec
        receivers.pop(bisect.bisect_left(receivers, (keys[h], h)))
        keys[h] = st.end[h]
        bisect.insort(receivers, (keys[h], h))
    return True


def rebalance(
    forest: Forest,
    tasks: Sequence[Job],
    assign: Sequence[Sequence[int]],
    lower: float,
    trials: int = TRIALS,
    peers: int = REPAIR_PEERS,
    budget: int = STEPS,
    first_step: float = FIRST_STEP,
) -> tuple[list[list[int]] | None, float, int]:
    """Lower the target step by step from the plan's makespan towards ``lower`` (a bound
    on it), `repair` to each; a target met makes the step 1.5 times longer, one missed
    halves it. A missed target keeps what it got: the GPUs it repaired end by it, no GPU
    ends later than before. Returns the assignment (a copy) if the makespan fell, else
    None; its makespan as `_Shape.end` times it (exact on idle GPUs); and what is left
    of ``budget`` (steps). ``first_step``: the first target's distance below the makespan,
    as a share of it."""
    st = _State(_Shape(forest), tasks, assign, forest.gpus)
    first = top = max(st.end, default=0.0)
    step = top * first_step
    for _ in range(trials):
        step = min(step, (top - lower) / 2)
        if step < lower * MIN_STEP or budget <= 0:
            break
        ok, _, budget = repair(st, top - step, peers, budget)
        top = max(st.end)
        step = step * 1.5 if ok else step / 2
    return (st.assignment() if top < first else None), top, budget
