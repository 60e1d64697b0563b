"""One GPU's repartitioning tree for the exact search, with a fast exact re-implementation
of ``far.time_assignment``'s timing."""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence

from ..geometry import GpuModel

__all__ = []


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
