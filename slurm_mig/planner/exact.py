"""Exact planner for small batches, and the default planner that uses it when cheap.

Search space (the space FAR searches). A schedule is an *assignment* of every task to
one node of the repartitioning tree (Fig. 4 of the FAR paper) of one GPU; the forest
``far.Forest.build(model, gpus)`` holds one tree per GPU. A task assigned to node ``v``
runs on an instance of ``forest.size[v]`` slices at that node's placement, the tasks of
a node run back to back, and the assignment is timed exactly as
``far.time_assignment`` times it (``timeline.run_uses``: a node waits for its nearest
used ancestor, destroys it, is created, one reconfiguration at a time per GPU). The
order of the tasks within a node does not change the makespan (only the node's total
does), so the search is over task -> node maps. A task is never put on a size where
its time is ``inf``.

"Exact" means: the minimum makespan over this space, proven by branch and bound when
``stats["optimal"]`` is true. It is *not* the optimum of the unrestricted MIG problem
(Section 2.2): schedules off the repartitioning trees (e.g. an instance created, used,
destroyed and created again, or two uses of one placement) are outside it, so the
figure is an upper bound on the unrestricted optimum.

Branch and bound. Tasks are placed in decreasing order of minimum work, each on the
node with the smallest bound first; FAR's assignment, improved by a short local search
(moves and swaps of single tasks), is the first incumbent. A partial assignment is
pruned when a lower bound on the makespan of *every* completion reaches the incumbent
(less a relative 1e-12, so "optimal" is up to that rounding). The timing is not
monotone in the loads (a longer node can let another one get the reconfiguration
channel earlier), so only these bounds, each proven for every completion, are used:

* chain: a used node is created after its nearest used ancestor p ended and was
  destroyed, so it ends at or after end(p) + destroy(p) + create + load, down every
  root-to-leaf path; completing the assignment only lengthens these chains;
* channel-aware chain: the used nodes hanging from the same used node p (or from
  nothing, at time 0) are ready together and the channel creates them in node order,
  so each other branch holding a lower used node (hanging from p) adds at least its smallest create
  time before f's create; a completion cannot undo that (``_Search._refresh`` has the
  argument);
* area: a node holds the slices it covers (``forest.covers``) for its whole load, nodes
  that share a slice run one after the other and nothing runs before the smallest
  create time, so ``min create + sum(covered slices x time) / (slices x gpus)``, each
  unplaced task at its smallest covered area, is a lower bound;
* look-ahead: every unplaced task ends up on some node v, so the smallest over v of
  what the chains through v become with it is a lower bound, for every unplaced task.

Symmetries, broken exactly: the constraints below are lexicographic-leader
constraints of one group acting on the task -> node vectors (node numbers GPU-major),
so they hold together for the least member of every orbit. Identical GPUs are opened
in order; of two isomorphic sibling subtrees (the two 1-slice leaves under a 2-slice
node, the two 2-slice subtrees under the 3-slice node at placement 0) the first task
placed in either goes to the first; tasks with identical time vectors take
non-decreasing nodes. Swapping sibling subtrees is not an exact symmetry of the timing
(the channel serves the lower node first on a tie), so a complete assignment is scored
at the best member of its orbit, which the bounds above do not tell apart: sibling
leaves take the larger load on the first leaf (never worse: their create times do not
depend on their loads and nothing waits for them), and both orientations of two
sibling subtrees are timed when both are used (with one unused, swapping changes
nothing: the node order against every other node is kept).

``time_budget`` bounds the search; when it runs out the best assignment found is
returned with ``stats["optimal"] = False``. The search is a loop over an explicit stack
(a batch is as deep as it has tasks), and a batch with more task-node options than
``EXACT_MAX_OPTIONS`` is not searched: FAR's plan is returned (``stats["searched"]``).
"""

from __future__ import annotations

import heapq
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import replace
from functools import partial

from ..geometry import GpuModel
from ..plan import Plan
from ..workload import Task
from .batch import Batch
from .far import SCALE_TASKS, Forest, far_schedule, time_assignment
from .far_planner import plan_far
from .registry import BatchPolicy
from .timeline import retime_onto, to_plan

log = logging.getLogger(__name__)

_REL = 1e-12  # a bound within this relative margin of the incumbent cannot beat it


# ---------------------------------------------------------------------------
# The tree of one GPU, and a fast exact re-implementation of its timing


class _Tree:
    """One GPU's repartitioning tree with what the search and the timing need."""

    def __init__(self, model: GpuModel) -> None:
        tree = model.tree
        self.T = T = len(tree)
        self.size = [n.size for n in tree]
        self.parent = [-1 if n.parent is None else n.parent for n in tree]
        self.children = [tuple(n.children) for n in tree]
        self.create = [model.create_s[n.size] for n in tree]
        self.destroy = [model.destroy_s[n.size] for n in tree]
        if any(self.parent[v] >= v for v in range(1, T)) or self.parent[0] != -1:
            raise ValueError(f"{model.name}: tree nodes must follow their parents")
        # isomorphic sibling subtrees: (first side, second side, node map first->second)
        self.leaf_pairs: list[tuple[int, int]] = []
        self.subtree_pairs: list[tuple[tuple[int, ...], tuple[int, ...], list[int], bool]] = []
        self.requires: list[list[tuple[int, ...]]] = [[] for _ in range(T)]
        for u in range(T):
            kids = self.children[u]
            iso = [k for k in kids if any(self._iso(k, o) for o in kids if o != k)]
            if len(iso) != 2:
                continue  # no pair, or more than two alike: leave unbroken (still exact)
            a, b = sorted(iso)
            side_a, side_b = self._walk(a), self._walk(b)
            perm = list(range(T))
            for x, y in zip(side_a, side_b):
                perm[x], perm[y] = y, x
            if not all(perm[x] > x for x in side_a):
                continue
            if not self.children[a] and b != a + 1:
                continue  # the leaf rule below needs no node between them in node order
            if self.children[a]:
                # with one side unused the swap is exact when it keeps the node order
                # (the channel's tie-break) of the used side against every other node
                others = [w for w in range(T) if w not in side_a and w not in side_b]
                keeps = all((x < w) == (perm[x] < w) for x in side_a for w in others) and all(
                    (x < y) == (perm[x] < perm[y]) for x in side_a for y in side_a
                )
                self.subtree_pairs.append((tuple(side_a), tuple(side_b), perm, keeps))
            else:
                self.leaf_pairs.append((a, b))
        # the leaf rule is applied after the subtree swaps: they must map leaf pairs
        # onto leaf pairs (they do in NVIDIA's trees; otherwise drop the leaf rule)
        pairs = {frozenset(p) for p in self.leaf_pairs}
        if any(
            frozenset((swap[a], swap[b])) not in pairs
            for _, _, swap, _ in self.subtree_pairs
            for a, b in self.leaf_pairs
        ):
            self.leaf_pairs = []
        for side_a, side_b, _, _ in self.subtree_pairs:
            for y in side_b:
                self.requires[y].append(side_a)
        for a, b in self.leaf_pairs:
            self.requires[b].append((a,))
        self._channel_tables()

    def _channel_tables(self) -> None:
        """Tables of the channel-aware chain bound (see ``_Search._refresh``).

        ``group[u][f]``: for a node u below f in node order that is neither above nor
        below f, the child of their lowest common ancestor on u's side (u's whole
        branch there is created before f when both hang from the same used node), or
        -1. Pairs whose order a sibling swap can flip are left out (-1), so the bound
        is the same for every member of an orbit.
        """
        T = self.T
        anc = []
        for v in range(T):
            chain = [v]
            while self.parent[chain[-1]] >= 0:
                chain.append(self.parent[chain[-1]])
            anc.append(chain)  # v, parent, ..., root
        gens = [swap for _, _, swap, _ in self.subtree_pairs]
        for a, b in self.leaf_pairs:
            perm = list(range(T))
            perm[a], perm[b] = b, a
            gens.append(perm)
        group = {tuple(range(T))}
        todo = list(group)
        while todo:
            m = todo.pop()
            for gen in gens:
                nxt = tuple(gen[m[v]] for v in range(T))
                if nxt not in group:
                    group.add(nxt)
                    todo.append(nxt)
        self.group: list[list[int]] = [[-1] * T for _ in range(T)]
        for u in range(T):
            for f in range(u + 1, T):
                if u in anc[f] or f in anc[u]:
                    continue
                if not all(h[u] < h[f] for h in group):
                    continue
                lca = next(x for x in anc[u] if x in anc[f])
                self.group[u][f] = anc[u][anc[u].index(lca) - 1]
        self.cmin_sub = [min(self.create[w] for w in self._walk(h)) for h in range(T)]
        # the same as bits: group_bit[f][u] = 1 << group[u][f] (0: none)
        self.group_bit = [
            [1 << self.group[u][f] if self.group[u][f] >= 0 else 0 for u in range(T)]
            for f in range(T)
        ]
        self.before_cost: dict[int, float] = {}

    def mask_cost(self, mask: int) -> float:
        """Sum of ``cmin_sub`` over the branches whose bits are set in ``mask``."""
        return sum(self.cmin_sub[h] for h in range(self.T) if mask >> h & 1)

    def _iso(self, a: int, b: int) -> bool:
        ca, cb = self.children[a], self.children[b]
        return (
            self.size[a] == self.size[b]
            and len(ca) == len(cb)
            and all(self._iso(x, y) for x, y in zip(ca, cb))
        )

    def _walk(self, v: int) -> list[int]:
        out = [v]
        for c in self.children[v]:
            out.extend(self._walk(c))
        return out

    def makespan(self, load: Sequence[float]) -> float:
        """Makespan of one GPU with ``load[v]`` seconds of tasks on node v (0 = unused).

        The same timing as ``timeline.run_uses`` on ``Forest.uses``: uses in node order,
        each waiting for its nearest used ancestor, which is the only live instance in
        its way (the ancestors above it were destroyed when that one was created).
        """
        T, parent, create, destroy = self.T, self.parent, self.create, self.destroy
        near = [-1] * T
        deps: list[list[int]] = [[] for _ in range(T)]
        heap = []
        for v in range(T):
            p = parent[v]
            if p >= 0:
                near[v] = p if load[p] > 0.0 else near[p]
            if load[v] > 0.0:
                if near[v] < 0:
                    heap.append((0.0, v))
                else:
                    deps[near[v]].append(v)
        end = [0.0] * T
        alive = [False] * T
        channel = 0.0
        ms = 0.0
        pop, push = heapq.heappop, heapq.heappush
        while heap:
            ready, v = pop(heap)
            p = near[v]
            if p >= 0 and alive[p]:
                alive[p] = False
                e = end[p]
                channel = (channel if channel > e else e) + destroy[p]
            channel = (channel if channel > ready else ready) + create[v]
            e = channel + load[v]
            end[v] = e
            alive[v] = True
            if e > ms:
                ms = e
            for w in deps[v]:
                push(heap, (e, w))
        return ms

    def best_orientation(self, load: Sequence[float]) -> tuple[float, list[int]]:
        """(makespan, node map) of the best member of ``load``'s orbit under the
        sibling swaps; ``node map[v]`` is where node v's tasks go."""
        best, best_map = math.inf, list(range(self.T))
        for perm in self._orbit(load):
            moved = [0.0] * self.T
            for v in range(self.T):
                moved[perm[v]] = load[v]
            # sibling leaves: the larger load on the first leaf
            for a, b in self.leaf_pairs:
                if moved[b] > moved[a]:
                    moved[a], moved[b] = moved[b], moved[a]
                    perm = [b if w == a else a if w == b else w for w in perm]
            ms = self.makespan(moved)
            if ms < best:
                best, best_map = ms, perm
        return best, best_map

    def _orbit(self, load: Sequence[float]) -> list[list[int]]:
        """Node maps to try: the identity and the subtree swaps where both sides are used."""
        maps = [list(range(self.T))]
        if len(self.subtree_pairs) > 1:  # not in NVIDIA's trees: the whole group
            seen = {tuple(maps[0])}
            for m in maps:
                for _, _, swap, _ in self.subtree_pairs:
                    nxt = [swap[m[v]] for v in range(self.T)]
                    if tuple(nxt) not in seen:
                        seen.add(tuple(nxt))
                        maps.append(nxt)
            return maps
        for side_a, side_b, swap, keeps in self.subtree_pairs:
            used_a = any(load[x] > 0.0 for x in side_a)
            used_b = any(load[y] > 0.0 for y in side_b)
            if (used_a and used_b) or (not keeps and (used_a or used_b)):
                maps += [[swap[m[v]] for v in range(self.T)] for m in maps]
        return maps


# ---------------------------------------------------------------------------
# Branch and bound


class _OutOfTime(Exception):
    pass


class _Search:
    """Branch and bound over task -> forest node maps (see the module docstring)."""

    def __init__(self, tasks: Sequence[Task], forest: Forest) -> None:
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
        tree = self.tree
        T = self.T
        o = g * T
        cnt, L, M = self.cnt, self.L, self.M
        parent, create, destroy = tree.parent, tree.create, tree.destroy
        gbit, cost = tree.group_bit, tree.before_cost
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
            before = 0.0
            if siblings:  # all used, all below v in node order
                mask = 0
                row = gbit[v]
                for u in siblings:
                    mask |= row[u]
                if mask:
                    before = cost.get(mask)
                    if before is None:
                        before = cost[mask] = tree.mask_cost(mask)
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
        # subtree maxima, bottom-up (children follow their parents in node order)
        children = tree.children
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
        for v in range(T):
            if cnt[o + v]:
                M[o + v] = sub_enh[v]
            else:
                p = near[v]
                c = sub_chain[v]
                if p >= 0 and chain[p] > c:
                    c = chain[p]
                M[o + v] = (top[v] if top[v] > c else c) + create[v]
        self.emax[g] = sub_enh[0]

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


def _far(tasks: Sequence[Task], model: GpuModel, gpus: int) -> tuple[list[list[int]], float]:
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
    tasks: Sequence[Task],
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


def exact_schedule(
    tasks: Sequence[Task], model: GpuModel, gpus: int = 1, time_budget: float = 10.0
) -> tuple[list[list[int]], float, bool, int]:
    """The best task -> tree node assignment (see the module docstring).

    Returns (assignment: task indexes per ``Forest.build(model, gpus)`` node, in run
    order; its makespan as ``far.time_assignment`` times it; optimal: True when the
    search completed within ``time_budget`` seconds; explored: search nodes visited).
    """
    forest, assign, optimal, explored = _solve(tasks, model, gpus, time_budget)
    makespan = time_assignment(forest, tasks, assign)[0].makespan
    return assign, makespan, optimal, explored


def plan_exact(batch: Batch, time_budget: float = 10.0) -> Plan:
    """The exact planner (CLI ``--planner exact``): the minimum makespan over FAR's
    space of tree assignments, proven when ``stats["optimal"]`` is true; otherwise the
    best found within ``time_budget`` seconds (never worse than FAR). Onto busy GPUs:
    the optimum for idle GPUs appended after their work, or FAR's plan onto them when
    that ends sooner."""
    if batch.busy:
        return _onto(batch, lambda b: plan_exact(b, time_budget), "exact")
    t0 = time.perf_counter()
    far_assign, far_ms = _far(batch.tasks, batch.model, batch.gpus)
    budget = time_budget - (time.perf_counter() - t0)
    forest, assign, optimal, explored = _solve(
        batch.tasks, batch.model, batch.gpus, budget, far_assign
    )
    timeline, _ = time_assignment(forest, batch.tasks, assign)
    searched = searchable(len(batch.tasks), forest.nodes)
    if not searched:
        log.warning(
            "planner exact: %d tasks on %d GPUs hold %d task-node options, above the "
            "search's %d; FAR's plan is kept (use far or auto for batches this large)",
            len(batch.tasks),
            batch.gpus,
            len(batch.tasks) * forest.nodes,
            EXACT_MAX_OPTIONS,
        )
    stats = {
        "searched": searched,
        "planning_seconds": time.perf_counter() - t0,
        "optimal": optimal,
        "explored": explored,
        "far_makespan": far_ms,
        "time_budget": time_budget,
        "space": "task -> repartitioning-tree node assignments (FAR's space); "
        "an upper bound on the unrestricted optimum",
    }
    return to_plan(batch.model, batch.tasks, timeline, batch.gpus, "exact", stats=stats)


# Where the default planner adds the exact search. Measured by benchmarks/exact_gap.py
# (A100-40GB, WIDETIMES, 2-core machine): with a 10 s budget the search proves the
# optimum of every batch of 8 and 10 tasks (median 0.02-0.1 s, 95th percentile
# 0.1-0.6 s) and of 49 in 50 batches of 12 (median 0.2 s); beyond 12 tasks proofs take
# seconds. Within these budgets auto lands on the optimum of nearly every batch of 10
# (mean gap 0.01 %); when the budget runs out it keeps the best assignment found.
AUTO_MAX_TASKS = 12


def auto_budget(n: int) -> float:
    """Seconds of exact search ``plan_auto`` spends on a batch of ``n`` tasks (0: none)."""
    if n > AUTO_MAX_TASKS:
        return 0.0
    if n <= 8:
        return 0.25
    if n <= 10:
        return 0.5
    return 1.0


def plan_auto(batch: Batch) -> Plan:
    """The default planner: FAR, and on small batches (``auto_budget``) the exact search
    seeded with FAR's assignment; the better of the two (FAR on a tie).

    ``stats["winner"]`` says which ("far" or "exact"); with the search, ``optimal``
    says whether it proved its assignment optimal within the budget.
    """
    if batch.busy:
        return _onto(batch, plan_auto, "auto")
    t0 = time.perf_counter()
    tasks, model, gpus = batch.tasks, batch.model, batch.gpus
    if len(tasks) >= SCALE_TASKS:  # FAR's ladder; no exact search on batches this large
        plan = plan_far(batch)
        return replace(plan, planner="auto", stats={**plan.stats, "winner": "far"})
    far_assign, far_ms = _far(tasks, model, gpus)
    forest = Forest.build(model, gpus)
    timeline, _ = time_assignment(forest, tasks, far_assign)
    budget = auto_budget(len(tasks))
    stats: dict = {"far_makespan": far_ms, "exact_budget": budget, "winner": "far"}
    if budget > 0.0 and tasks:
        forest, assign, optimal, explored = _solve(tasks, model, gpus, budget, far_assign)
        exact_tl, _ = time_assignment(forest, tasks, assign)
        stats.update(exact_makespan=exact_tl.makespan, optimal=optimal, explored=explored)
        if exact_tl.makespan < far_ms:
            timeline = exact_tl
            stats["winner"] = "exact"
    stats["planning_seconds"] = time.perf_counter() - t0
    return to_plan(model, tasks, timeline, gpus, "auto", stats=stats)


def _plan_auto_for(batch: Batch, objective: str, slack: float | None) -> Plan:
    """``plan_auto``'s plan re-sequenced for ``objective`` (``planner.sequencing``)."""
    from .sequencing import sequence_plan

    t0 = time.perf_counter()
    plan = sequence_plan(plan_auto(batch), batch.tasks, objective, slack=slack)
    seconds = plan.stats.get("planning_seconds", 0.0) + time.perf_counter() - t0
    return replace(plan, stats={**plan.stats, "planning_seconds": seconds})


def _onto(batch: Batch, plan_idle, name: str) -> Plan:
    """Plan onto busy GPUs: FAR onto them, or ``plan_idle``'s plan for idle GPUs
    appended after their work (small batches only), whichever ends sooner."""
    t0 = time.perf_counter()
    far = plan_far(batch)
    best, stats = far, {**far.stats, "winner": "far"}
    if len(batch.tasks) <= AUTO_MAX_TASKS:
        assert batch.start is not None
        idle = plan_idle(replace(batch, start=None))
        tl = retime_onto(idle, batch.tasks, batch.start, batch.number)
        alt = to_plan(batch.model, batch.tasks, tl, batch.gpus, name, start=batch.start)
        stats[f"{name}_onto_makespan"] = alt.makespan
        if alt.makespan < far.makespan - 1e-9:
            best, stats = alt, {**stats, **idle.stats, "winner": name}
    stats["planning_seconds"] = time.perf_counter() - t0
    return replace(best, planner=name, stats=stats)


def make_planner(name: str, **options) -> BatchPolicy:
    """Registry hook: ``exact`` (option time_budget, seconds) and ``auto`` (options
    objective, slack: ``planner.sequencing``; default objective ``makespan``)."""
    if name == "exact":
        if "time_budget" not in options:
            if options:
                raise TypeError(f"unexpected argument {next(iter(options))!r}")
            return BatchPolicy("exact", plan_exact)
        budget = float(options.pop("time_budget"))
        if options:
            raise TypeError(f"unexpected argument {next(iter(options))!r}")
        if not budget > 0:
            raise ValueError(f"time_budget {budget} must be a positive number of seconds")
        return BatchPolicy("exact", partial(plan_exact, time_budget=budget))
    if name == "auto":
        objective = options.pop("objective", "makespan")
        slack = options.pop("slack", None)
        if options:
            raise TypeError(f"unexpected argument {next(iter(options))!r}")
        from .far_planner import _checked

        checked = _checked({"objective": objective, "slack": slack})
        if checked["objective"] == "makespan":
            return BatchPolicy("auto", plan_auto)
        return BatchPolicy("auto", partial(_plan_auto_for, **checked))
    raise ValueError(f"{__name__} has no planner {name!r}; it has exact, auto")
