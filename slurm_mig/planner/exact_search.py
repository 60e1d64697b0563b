"""The exact planner's branch and bound over task -> node assignments (``planner.exact``
has the search space, the bounds and the symmetries it breaks)."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

from ..geometry import GpuModel
from ..job import Job
from .exact_tree import _REL, _Tree
from .far import Forest, far_schedule, time_assignment

__all__ = ["EXACT_MAX_OPTIONS", "searchable"]


# ---------------------------------------------------------------------------
# Branch and bound


class _OutOfTime(Exception):
    pass


def _before(tree: _Tree, v: int, siblings: list[int]) -> float:
    """``before(p, v)`` of ``_Search._refresh``: over the branches below p holding one of
    ``siblings`` (the used nodes hanging from p), the sum of each one's smallest create
    time; memoised in ``tree.before_cost`` since the search asks the same masks often."""
    mask = 0
    row = tree.group_bit[v]
    for u in siblings:
        mask |= row[u]
    if not mask:
        return 0.0
    cost = tree.before_cost
    before = cost.get(mask)
    if before is None:
        before = cost[mask] = tree.mask_cost(mask)
    return before


class _Search:
    """Branch and bound over task -> forest node maps (see the module docstring)."""

    def __init__(self, tasks: Sequence[Job], forest: Forest) -> None:
        self.tasks, self.forest = tasks, forest
        self.tree = tree = _Tree(forest.model)
        T, G = tree.T, forest.gpus
        self.T, self.G, self.N = T, G, T * G
        self.create = tree.create * G
        self.destroy = tree.destroy * G
        self.cover = [len(c) for c in forest.covers]
        self.by_size = [(s, tuple(nodes)) for s, nodes in forest.by_size.items()]
        self.requires = [
            [tuple(g * T + x for x in side) for side in tree.requires[v]]
            for g in range(G)
            for v in range(T)
        ]
        n = len(tasks)
        sizes = forest.model.planner_sizes
        for t in tasks:  # an empty node is one with no load
            if any(not x > 0.0 for x in t.times.values()):
                raise ValueError(f"task {t.id!r}: times must be > 0 seconds (or inf)")
        min_cover = {s: min(self.cover[v] for v in forest.by_size[s]) for s in sizes}

        def key(i: int) -> tuple:
            t = tasks[i]
            return (-t.min_work(), tuple(sorted(t.times.items())), i)

        self.order = order = sorted(range(n), key=key)
        self.same = [
            k > 0 and dict(tasks[order[k]].times) == dict(tasks[order[k - 1]].times)
            for k in range(n)
        ]
        self.opts = [
            [
                (v, tasks[i].times[forest.size[v]])
                for v in range(self.N)
                if not math.isinf(tasks[i].times[forest.size[v]])
            ]
            for i in order
        ]
        self.sized = [
            [(s, tasks[i].times[s]) for s, _ in self.by_size if not math.isinf(tasks[i].times[s])]
            for i in order
        ]
        # the smallest covered area of the unplaced tasks
        self.rem_area = [0.0] * (n + 1)
        for k in range(n - 1, -1, -1):
            t = tasks[order[k]].times
            self.rem_area[k] = self.rem_area[k + 1] + min(
                min_cover[s] * t[s] for s in sizes if not math.isinf(t[s])
            )
        self.min_create = min(self.create)
        self.slices = forest.model.compute_slices * G

    # -- scoring complete assignments ------------------------------------------------

    def loads(self, assign: Sequence[Sequence[int]]) -> list[float]:
        size, tasks = self.forest.size, self.tasks
        out = [0.0] * self.N
        for v in range(self.N):
            for i in assign[v]:
                out[v] += tasks[i].times[size[v]]
        return out

    def score(self, load: Sequence[float], stop: float = math.inf) -> tuple[float, list]:
        """Best makespan over the orbit of ``load``, GPU by GPU, and the node maps."""
        T = self.T
        worst, maps = 0.0, []
        for g in range(self.G):
            ms, m = self.tree.best_orientation(load[g * T : (g + 1) * T])
            maps.append(m)
            if ms > worst:
                worst = ms
                if worst >= stop:
                    return worst, maps
        return worst, maps

    def remap(self, assign: Sequence[Sequence[int]], maps: list) -> list[list[int]]:
        T = self.T
        out: list[list[int]] = [[] for _ in range(self.N)]
        for v in range(self.N):
            g, loc = divmod(v, T)
            out[g * T + maps[g][loc]] = list(assign[v])
        return out

    # -- the search ------------------------------------------------------------------

    def run(
        self, incumbent: Sequence[Sequence[int]], deadline: float
    ) -> tuple[list[list[int]], float, bool, int]:
        """(assignment, makespan, optimal, explored) starting from ``incumbent``."""
        ms0, maps0 = self.score(self.loads(incumbent))
        self.best = ms0
        self.best_assign = self.remap(incumbent, maps0)
        self.deadline = deadline
        self.explored = 0
        n, N, G = len(self.order), self.N, self.G
        self.L = [0.0] * N
        self.cnt = [0] * N
        self.M = list(self.create)  # see _refresh
        self.emax = [0.0] * G  # largest channel-aware bound of a node end, per GPU
        self.gcount = [0] * G
        self.x = [-1] * n
        self.area = 0.0
        try:
            self._dfs(0)
            done = True
        except _OutOfTime:
            done = False
        return self.best_assign, self.best, done, self.explored

    def _refresh(self, g: int) -> None:
        """Recompute GPU g's bounds after a change: ``emax[g]`` and ``M`` of its nodes.

        Two lower bounds on the end of each used node f, top-down; p is f's nearest
        used ancestor (or none, -1: then "end(p) + destroy(p)" reads 0):

        * chain: end(p) + destroy(p) + create(f) + load(f);
        * channel-aware: end(p) + destroy(p) + before(p, f) + create(f) + load(f), where
          ``before`` adds, for each branch (``tree.group[u][f]``) holding a used node
          u < f that hangs from p, the smallest create time in that branch.

        Why the second holds for every completion: in it, let q be the deepest used
        common ancestor of u and f (p, or a node added below p) and r the highest used
        node between q and u. r hangs from q, so it is popped when q ends (or at 0);
        f is popped then too (and loses the tie, r <= u < f) or later, when a used node
        below q ends. Either way r's create runs on the channel after end(p) + destroy(p)
        and before f's create; the r of different branches are different nodes. Pairs
        whose order a sibling swap can flip are not counted, so the bound is the same
        for every member of an orbit.

        ``M[v]`` is what the end of some node on every path through v is at least
        once one more task goes on v, less that task's time: for a used v, the largest
        channel-aware end in its subtree; for an unused v, its create time on top of
        the channel-aware end of its nearest used ancestor plus that one's destroy
        plus ``before`` (v becomes a used node hanging from it), or of the largest
        chain end on a path through v (v becomes a link of that chain).
        """
        o = g * self.T
        near, chain, enh, top = self._top_down(o)
        sub_chain, sub_enh = self._subtree_max(o, chain, enh)
        cnt, M, create = self.cnt, self.M, self.tree.create
        for v in range(self.T):
            if cnt[o + v]:
                M[o + v] = sub_enh[v]
            else:
                p = near[v]
                c = sub_chain[v]
                if p >= 0 and chain[p] > c:
                    c = chain[p]
                M[o + v] = (top[v] if top[v] > c else c) + create[v]
        self.emax[g] = sub_enh[0]

    def _top_down(self, o: int) -> tuple[list[int], list[float], list[float], list[float]]:
        """The bounds of ``_refresh`` top-down over the GPU whose nodes start at ``o``:
        (nearest used ancestor, chain bound and channel-aware bound of each used node,
        ``top`` of each unused node: enh[p] + destroy[p] + before(p, v))."""
        tree = self.tree
        T = self.T
        cnt, L = self.cnt, self.L
        parent, create, destroy = tree.parent, tree.create, tree.destroy
        near = [-1] * T
        chain = [0.0] * T  # chain bound on the end of each used node
        enh = [0.0] * T  # channel-aware bound on the end of each used node
        top = [0.0] * T  # for an unused node: enh[p] + destroy[p] + before(p, v)
        hang: list[list[int]] = [[] for _ in range(T + 1)]  # used nodes by near + 1
        for v in range(T):
            if v:
                p = parent[v]
                p = near[v] = p if cnt[o + p] else near[p]
            else:
                p = -1
            siblings = hang[p + 1]
            before = _before(tree, v, siblings) if siblings else 0.0  # all used, below v
            if p >= 0:
                start = enh[p] + destroy[p]
                if cnt[o + v]:
                    siblings.append(v)
                    enh[v] = start + before + create[v] + L[o + v]
                    chain[v] = chain[p] + destroy[p] + create[v] + L[o + v]
                else:
                    top[v] = start + before
            elif cnt[o + v]:
                siblings.append(v)
                enh[v] = before + create[v] + L[o + v]
                chain[v] = create[v] + L[o + v]
            else:
                top[v] = before
        return near, chain, enh, top

    def _subtree_max(
        self, o: int, chain: list[float], enh: list[float]
    ) -> tuple[list[float], list[float]]:
        """The largest chain and channel-aware bounds of the used nodes in each node's
        subtree, bottom-up (children follow their parents in node order)."""
        T, cnt, children = self.T, self.cnt, self.tree.children
        sub_chain = [0.0] * T
        sub_enh = [0.0] * T
        for v in range(T - 1, -1, -1):
            c = e = 0.0
            if cnt[o + v]:
                c, e = chain[v], enh[v]
            for w in children[v]:
                if sub_chain[w] > c:
                    c = sub_chain[w]
                if sub_enh[w] > e:
                    e = sub_enh[w]
            sub_chain[v], sub_enh[v] = c, e
        return sub_chain, sub_enh

    def _dfs(self, k0: int) -> None:
        """Depth-first branch and bound from level ``k0``, with an explicit stack (a
        batch of thousands of tasks is as deep as it has tasks: no Python recursion)."""
        first = self._expand(k0)
        if first is None:
            return
        # one frame per level: [candidates, next candidate, undo record of the child]
        stack: list[list] = [[first, 0, None]]
        while stack:
            frame = stack[-1]
            k = k0 + len(stack) - 1
            if frame[2] is not None:
                self._unplace(frame[2])
                frame[2] = None
            cands, i = frame[0], frame[1]
            if i >= len(cands) or cands[i][0] >= self.best * (1 - _REL):
                self.x[k] = -1
                stack.pop()
                continue
            frame[1] = i + 1
            _, v, t = cands[i]
            frame[2] = self._place(k, v, t)
            child = self._expand(k + 1)
            if child is not None:
                stack.append([child, 0, None])

    def _expand(self, k: int) -> list[tuple[float, int, float]] | None:
        """Visit level ``k``: None when the partial assignment is pruned or complete
        (then scored), else the candidate nodes of task k, best bound first."""
        self.explored += 1
        if not self.explored & 31 and time.perf_counter() > self.deadline:
            raise _OutOfTime
        n = len(self.order)
        cut = self.best * (1 - _REL)
        if max(self.emax) >= cut:
            return None
        if k == n:
            self._leaf()
            return None
        if self.min_create + (self.area + self.rem_area[k]) / self.slices >= cut:
            return None
        # look-ahead: every unplaced task ends up on some node v, and every path
        # through v then reaches M[v] + its time
        M, cnt = self.M, self.cnt
        best_of_size = {s: min(M[v] for v in nodes) for s, nodes in self.by_size}
        for j in range(k + 1, n):
            if min(best_of_size[s] + t for s, t in self.sized[j]) >= cut:
                return None
        # candidates for task k, under the symmetry-breaking rules
        gcount, requires, T = self.gcount, self.requires, self.T
        opened = sum(1 for c in gcount if c)
        low = self.x[k - 1] if self.same[k] else -1
        cands = []
        for v, t in self.opts[k]:
            if v < low or v // T > opened:
                continue
            req = requires[v]
            if req and any(not any(cnt[u] for u in side) for side in req):
                continue
            lb = M[v] + t
            if lb < cut:
                cands.append((lb, v, t))
        cands.sort()
        return cands

    def _place(self, k: int, v: int, t: float) -> tuple:
        """Put task k on node v (time t); returns what ``_unplace`` restores."""
        T, L, M = self.T, self.L, self.M
        g = v // T
        lo, hi = g * T, (g + 1) * T
        undo = (v, g, L[v], self.area, self.emax[g], M[lo:hi])
        L[v] += t
        self.cnt[v] += 1
        self.area += self.cover[v] * t
        self._refresh(g)
        self.gcount[g] += 1
        self.x[k] = v
        return undo

    def _unplace(self, undo: tuple) -> None:
        v, g, old_L, old_area, old_emax, old_M = undo
        T = self.T
        self.gcount[g] -= 1
        self.cnt[v] -= 1
        self.L[v] = old_L
        self.area = old_area
        self.M[g * T : (g + 1) * T] = old_M
        self.emax[g] = old_emax

    def _leaf(self) -> None:
        ms, maps = self.score(self.L, self.best)
        if ms < self.best:
            assign: list[list[int]] = [[] for _ in range(self.N)]
            for k, v in enumerate(self.x):
                assign[v].append(self.order[k])
            self.best = ms
            self.best_assign = self.remap(assign, maps)


# ---------------------------------------------------------------------------
# Local search on the incumbent


def _improve(search: _Search, assign: list[list[int]], deadline: float) -> list[list[int]]:
    """Local search: move one task to another node, or swap two tasks, while that
    strictly lowers the makespan (as the search scores it: the best orientation);
    first improvement, until ``deadline``. Returns the best assignment found."""
    best, maps = search.score(search.loads(assign))
    assign = search.remap(assign, maps)
    while time.perf_counter() < deadline:
        step = _better_neighbour(search, assign, best, deadline)
        if step is None:
            break
        best, assign = step
    return assign


def _better_neighbour(
    search: _Search, assign: list[list[int]], best: float, deadline: float
) -> tuple[float, list[list[int]]] | None:
    tasks, size, N = search.tasks, search.forest.size, search.N
    load = search.loads(assign)
    where = {i: v for v in range(N) for i in assign[v]}
    cut = best * (1 - _REL)

    def commit(change: dict[int, list[int]]) -> tuple[float, list[list[int]]] | None:
        trial = [change.get(v, assign[v]) for v in range(N)]
        ms, maps = search.score(search.loads(trial))
        return (ms, search.remap(trial, maps)) if ms < cut else None

    # the longest tasks first: they are the likeliest to sit on a critical chain
    for i in sorted(where, key=lambda i: -tasks[i].times[size[where[i]]]):
        if time.perf_counter() > deadline:
            return None
        v, ti = where[i], tasks[i].times
        rest_v = [x for x in assign[v] if x != i]
        base_v = load[v] - ti[size[v]] if rest_v else 0.0
        for w in range(N):  # move i from v to w
            if w == v or math.isinf(ti[size[w]]):
                continue
            old_v, old_w = load[v], load[w]
            load[v], load[w] = base_v, old_w + ti[size[w]]
            ms, _ = search.score(load, cut)
            load[v], load[w] = old_v, old_w
            if ms < cut:
                step = commit({v: rest_v, w: [*assign[w], i]})
                if step:
                    return step
        for j, w in where.items():  # swap i and j
            tj = tasks[j].times
            if w == v or math.isinf(ti[size[w]]) or math.isinf(tj[size[v]]):
                continue
            old_v, old_w = load[v], load[w]
            load[v] = old_v - ti[size[v]] + tj[size[v]]
            load[w] = old_w - tj[size[w]] + ti[size[w]]
            ms, _ = search.score(load, cut)
            load[v], load[w] = old_v, old_w
            if ms < cut:
                rest_w = [x for x in assign[w] if x != j]
                step = commit({v: [*rest_v, j], w: [*rest_w, i]})
                if step:
                    return step
    return None


# ---------------------------------------------------------------------------
# The planners


def _far(tasks: Sequence[Job], model: GpuModel, gpus: int) -> tuple[list[list[int]], float]:
    """FAR's assignment and makespan (an empty batch: nothing, 0)."""
    if not tasks:
        return [[] for _ in range(Forest.build(model, gpus).nodes)], 0.0
    res = far_schedule(tasks, model, gpus)
    return res.assign, time_assignment(res.forest, tasks, res.assign)[0].makespan


# The search keeps every (task, node) option of the batch: about 90 bytes each. Above
# this many (1,000 tasks on 64 A100s hold 960,000) ``exact`` keeps FAR's plan instead of
# taking memory that grows with tasks x GPUs (a daemon with algorithm = "exact" and a
# large queue must not run out of memory, nor the CLI on a typo).
EXACT_MAX_OPTIONS = 1_000_000


def searchable(tasks: int, nodes: int) -> bool:
    """Whether the exact search takes a batch of ``tasks`` on a forest of ``nodes``."""
    return tasks * nodes <= EXACT_MAX_OPTIONS


def _solve(
    tasks: Sequence[Job],
    model: GpuModel,
    gpus: int,
    time_budget: float,
    far_assign: Sequence[Sequence[int]] | None = None,
) -> tuple[Forest, list[list[int]], bool, int]:
    """Local search from FAR's assignment (a quarter of the budget at most), then
    branch and bound until ``time_budget`` seconds after the call.

    Returns (forest, assignment, optimal, explored); the assignment is never worse
    than FAR's, and is FAR's (explored 0) for a batch above ``EXACT_MAX_OPTIONS``.
    """
    t0 = time.perf_counter()
    budget = max(0.0, time_budget)
    forest = Forest.build(model, gpus)
    if not tasks:
        return forest, [[] for _ in range(forest.nodes)], True, 0
    if far_assign is None:
        far_assign = _far(tasks, model, gpus)[0]
    if not searchable(len(tasks), forest.nodes):
        return forest, [list(a) for a in far_assign], False, 0
    search = _Search(tasks, forest)
    start = _improve(search, [list(a) for a in far_assign], t0 + 0.25 * budget)
    assign, _, optimal, explored = search.run(start, t0 + budget)
    size = forest.size
    for v in range(forest.nodes):  # longest first within a node (any order is as good)
        assign[v].sort(key=lambda i: (-tasks[i].times[size[v]], i))
    return forest, assign, optimal, explored
