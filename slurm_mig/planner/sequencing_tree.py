"""Steps 2 and 3 of ``planner.sequencing``: a plan as a tree assignment (per GPU,
repartitioning-tree node -> the tasks it runs back to back) with its estimated
weighted completion, each used node before or after the nodes below it (step 2), and
the local search that moves single tasks between nodes within a makespan bound (step 3)."""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from ..geometry import GpuModel, Slot
from ..job import Job
from ..plan import Plan, PlannedTask
from .snapshot import ClusterSnapshot
from .timeline import Use, run_uses

__all__: list[str] = []  # private to planner.sequencing

SEARCH_EVALS = 20_000  # estimates the local searches of one plan may make together
_EPS = 1e-9


# ---------------------------------------------------------------------------
# Steps 2 and 3: the plan as a tree assignment


@dataclass(frozen=True)
class _Tree:
    """A model's repartitioning tree: per node its slot, children, post order."""

    slots: tuple[Slot, ...]
    children: tuple[tuple[int, ...], ...]
    post: tuple[int, ...]
    root: int
    create: tuple[float, ...]
    destroy: tuple[float, ...]
    node_of: Mapping[Slot, int]
    parent: tuple[int, ...]  # -1 at the root
    rank: tuple[int, ...]  # position in ``post``


_TREES: dict[str, tuple[GpuModel, _Tree]] = {}


def _tree(model: GpuModel) -> _Tree:
    """The model's `_Tree` (kept per model name while the model object is the same)."""
    got = _TREES.get(model.name)
    if got is None or got[0] is not model:
        got = _TREES[model.name] = (model, _make_tree(model))
    return got[1]


def _make_tree(model: GpuModel) -> _Tree:
    nodes = model.tree
    slots = tuple(n.slot for n in nodes)
    children = tuple(tuple(n.children) for n in nodes)
    root = next(n.index for n in nodes if n.parent is None)
    post: list[int] = []

    def walk(v: int) -> None:
        for c in children[v]:
            walk(c)
        post.append(v)

    walk(root)
    node_of = {s: i for i, s in enumerate(slots)}
    if len(node_of) != len(slots):  # pragma: no cover - a tree with a slot twice
        node_of = {}
    return _Tree(
        slots,
        children,
        tuple(post),
        root,
        tuple(model.create_time(s.size) for s in slots),
        tuple(model.destroy_time(s.size) for s in slots),
        node_of,
        tuple(-1 if n.parent is None else n.parent for n in nodes),
        tuple(post.index(v) for v in range(len(slots))),
    )


def _tree_assignment(
    plan: Plan, tree: _Tree, start: ClusterSnapshot | None
) -> list[dict[int, list[str]]] | None:
    """Per GPU, tree node -> task ids of the plan's own tasks, when each node of a GPU
    holds one back-to-back run and the plan starts on idle GPUs or on ``start``; else
    None (steps 2 and 3 do not apply)."""
    busy = bool(plan.initial_instances) or any(t.running for t in plan.tasks)
    if (busy and start is None) or not tree.node_of:
        return None
    out: list[dict[int, list[PlannedTask]]] = [{} for _ in range(plan.gpus)]
    for t in plan.tasks:
        if t.running:
            continue
        v = tree.node_of.get(t.slot)
        if v is None:
            return None
        out[t.gpu].setdefault(v, []).append(t)
    for per in out:
        for run in per.values():
            run.sort(key=lambda t: t.start)
            for a, b in zip(run, run[1:]):
                if abs(b.start - a.end) > _EPS * max(1.0, abs(a.end)):
                    return None  # one slot used twice: not a tree assignment
    return [{v: [t.id for t in run] for v, run in per.items()} for per in out]


@dataclass(frozen=True)
class _Node:
    """A used node's tasks in Smith order, with the sums an insertion needs: ``pre[i]``
    the time of the tasks before position i, ``suf[i]`` the weight from i on."""

    keys: tuple[tuple[float, str], ...]
    ks: tuple[int, ...]
    pre: tuple[float, ...]
    suf: tuple[float, ...]
    cost: float  # sum of weight x end, the node's create at 0
    weight: float
    length: float  # create + tasks + destroy


class _State:
    """A tree assignment (per GPU, node -> task indexes) with its estimated cost: a used
    node lasts its create, its tasks and its destroy (step 2's model)."""

    def __init__(
        self,
        model: GpuModel,
        tree: _Tree,
        tasks: Sequence[Job],
        w: Sequence[float],
        assign: Sequence[Mapping[int, Sequence[int]]],
        start: ClusterSnapshot | None = None,
    ) -> None:
        self.model, self.tree, self.tasks, self.w = model, tree, tasks, w
        self.start = start
        self.sizes = [s.size for s in tree.slots]
        self.nodes: list[dict[int, _Node]] = []
        for per in assign:
            self.nodes.append({v: self._node(v, ks) for v, ks in per.items() if ks})
        self.cost = [0.0] * len(self.nodes)
        self.span = [0.0] * len(self.nodes)
        self._kept: list[tuple[list[float], list[float], list[float]]] = [
            ([], [], []) for _ in self.nodes
        ]
        for g in range(len(self.nodes)):
            self._update(g)

    def copy(self) -> _State:
        return _State(
            self.model,
            self.tree,
            self.tasks,
            self.w,
            [{v: n.ks for v, n in per.items()} for per in self.nodes],
            self.start,
        )

    def makespan(self) -> float:
        return max(self.span, default=0.0)

    def _update(self, g: int) -> None:
        self.cost[g], self.span[g], _ = self._eval(self.nodes[g], keep=g)

    def _delta(
        self, g: int, changes: Mapping[int, tuple[float, float, float] | None]
    ) -> tuple[float, float]:
        """(weighted completion, span) of GPU ``g`` with the nodes in ``changes`` given
        (cost, weight, length) instead, or unused (None): only they and the nodes above
        them are computed again (`_eval` on the rest, kept by `_update`)."""
        tree = self.tree
        parent, rank, children = tree.parent, tree.rank, tree.children
        span0, wt0, cost0 = self._kept[g]
        nodes = self.nodes[g]
        todo: set[int] = set()
        for v in changes:
            while v >= 0 and v not in todo:
                todo.add(v)
                v = parent[v]
        span: dict[int, float] = {}
        wt: dict[int, float] = {}
        cost: dict[int, float] = {}
        for v in sorted(todo, key=rank.__getitem__):
            d_below = w_below = c_below = 0.0
            for c in children[v]:
                if c in span:
                    sc, wc, cc = span[c], wt[c], cost[c]
                else:
                    sc, wc, cc = span0[c], wt0[c], cost0[c]
                if sc > d_below:
                    d_below = sc
                w_below += wc
                c_below += cc
            if v in changes:
                sums = changes[v]
            elif v in nodes:
                node = nodes[v]
                sums = (node.cost, node.weight, node.length)
            else:
                sums = None
            if sums is None:
                span[v], wt[v], cost[v] = d_below, w_below, c_below
                continue
            own_c, own_w, length = sums
            if w_below * length <= own_w * d_below:
                cost[v] = own_c + c_below + w_below * length
            else:
                cost[v] = c_below + own_c + own_w * d_below
            span[v] = length + d_below
            wt[v] = own_w + w_below
        r = tree.root
        return cost[r], span[r]

    def _node(self, v: int, ks: Sequence[int]) -> _Node:
        size = self.sizes[v]
        tasks, w, tree = self.tasks, self.w, self.tree
        items = sorted(
            ((tasks[k].times[size] / w[k], tasks[k].id), k, tasks[k].times[size]) for k in ks
        )
        pre = [0.0]
        t = tree.create[v]
        cost = 0.0
        for _, k, d in items:
            t += d
            cost += w[k] * t
            pre.append(pre[-1] + d)
        suf = [0.0] * (len(items) + 1)
        for i in range(len(items) - 1, -1, -1):
            suf[i] = suf[i + 1] + w[items[i][1]]
        return _Node(
            tuple(x[0] for x in items),
            tuple(x[1] for x in items),
            tuple(pre),
            tuple(suf),
            cost,
            suf[0],
            t + tree.destroy[v],
        )

    def _insert(self, node: _Node | None, v: int, k: int) -> tuple[float, float, float]:
        """(cost, weight, length) of node ``v`` (``node``: its tasks, None if unused)
        with task ``k`` added in Smith order."""
        task = self.tasks[k]
        d, wk = task.times[self.sizes[v]], self.w[k]
        if node is None:
            c = self.tree.create[v]
            return wk * (c + d), wk, c + d + self.tree.destroy[v]
        i = bisect_left(node.keys, (d / wk, task.id))
        cost = node.cost + wk * (self.tree.create[v] + node.pre[i] + d) + d * node.suf[i]
        return cost, node.weight + wk, node.length + d

    def _eval(
        self,
        nodes: Mapping[int, _Node],
        over: int = -1,
        sums: tuple[float, float, float] | None = None,
        skip: int = -1,
        keep: int = -1,
    ) -> tuple[float, float, dict[int, bool]]:
        """(weighted completion, span, node -> runs before the nodes below it) of one
        GPU: ``over`` given ``sums`` (cost, weight, length) instead, ``skip`` unused."""
        tree = self.tree
        n = len(tree.slots)
        span = [0.0] * n
        wt = [0.0] * n
        cost = [0.0] * n
        first: dict[int, bool] = {}
        children = tree.children
        for v in tree.post:
            d_below = w_below = c_below = 0.0
            for c in children[v]:
                if span[c] > d_below:
                    d_below = span[c]
                w_below += wt[c]
                c_below += cost[c]
            if v == over:
                own_c, own_w, length = sums  # type: ignore[misc]
            elif v == skip or v not in nodes:
                span[v], wt[v], cost[v] = d_below, w_below, c_below
                continue
            else:
                node = nodes[v]
                own_c, own_w, length = node.cost, node.weight, node.length
            if w_below * length <= own_w * d_below:
                cost[v] = own_c + c_below + w_below * length
                first[v] = True
            else:
                cost[v] = c_below + own_c + own_w * d_below
                first[v] = False
            span[v] = length + d_below
            wt[v] = own_w + w_below
        r = tree.root
        if keep >= 0:
            self._kept[keep] = (span, wt, cost)
        return cost[r], span[r], first

    def uses(self, batch: int) -> list[Use]:
        """The timed order: per GPU, each used node before or after the nodes below it
        (step 2), siblings with the most weight below them first; tasks in Smith order."""
        tree = self.tree
        out: list[Use] = []
        for g, per in enumerate(self.nodes):
            _, _, first = self._eval(per)
            weight: dict[int, float] = {}
            for v in tree.post:
                own = per[v].weight if v in per else 0.0
                weight[v] = own + sum(weight[c] for c in tree.children[v])

            self._emit(g, per, first, weight, tree.root, batch, out)
        return out

    def _emit(
        self,
        g: int,
        per: Mapping[int, _Node],
        first: Mapping[int, bool],
        weight: Mapping[int, float],
        v: int,
        batch: int,
        out: list[Use],
    ) -> None:
        """Node ``v``'s use before or after the uses below it, appended to ``out``."""
        node = per.get(v)
        use = Use(g, self.tree.slots[v], list(node.ks), batch) if node else None
        if use is not None and first[v]:
            out.append(use)
        for c in sorted(self.tree.children[v], key=lambda c: (-weight[c], c)):
            self._emit(g, per, first, weight, c, batch, out)
        if use is not None and not first[v]:
            out.append(use)

    def plan(self, like: Plan) -> Plan:
        """The assignment timed exactly, as a plan like ``like`` (same model, GPUs,
        bound, planner)."""
        batch = next((t.batch for t in like.tasks if not t.running), 0)
        start = self.start
        if start is None:
            tl = run_uses(self.model, self.tasks, self.uses(batch), like.gpus)
        else:
            tl = run_uses(
                self.model, self.tasks, self.uses(batch), like.gpus, start.gpus, now=start.now
            )
        return replace(
            like,
            tasks=tuple(t for t in like.tasks if t.running) + tuple(tl.tasks),
            reconfigurations=tuple(tl.reconfigurations),
        )

    def search(self, bound: float, budget: int = SEARCH_EVALS) -> tuple[int, int]:
        """Step 3: single-task moves (module doc) within ``budget`` estimates; returns
        how many moves were made and how many estimates."""
        tasks, sizes = self.tasks, self.sizes
        where: dict[int, tuple[int, int]] = {}
        for g, per in enumerate(self.nodes):
            for v, node in per.items():
                for k in node.ks:
                    where[k] = (g, v)
        gpus = len(self.nodes)
        evals = moves = 0
        improved = True
        while improved and evals < budget:
            improved = False
            # tasks that end last first: they gain most from an earlier slot
            for k in sorted(where, key=lambda k: (-self._end_guess(k, where), k)):
                if evals >= budget:
                    break
                g, v = where[k]
                left = [x for x in self.nodes[g][v].ks if x != k]
                less = self._node(v, left) if left else None
                less_sums = None if less is None else (less.cost, less.weight, less.length)
                less_c, less_s = self._delta(g, {v: less_sums})
                evals += 1
                total = sum(self.cost)
                # over the bound, a move must first shorten the excess (lexicographic)
                excess = max(0.0, self.makespan() - bound)
                best = (excess, total - _EPS * max(1.0, total), -1, -1)
                empty_seen = False
                times = tasks[k].times
                top = heapq.nlargest(3, zip(self.span, range(gpus)))
                for h in range(gpus):
                    per_h = self.nodes[h]
                    if not per_h:  # idle GPUs are alike: try one
                        if empty_seen:
                            continue
                        empty_seen = True
                    others = next((sp for sp, x in top if x != g and x != h), 0.0)
                    for u in range(len(sizes)):
                        if (h == g and u == v) or not math.isfinite(times[sizes[u]]):
                            continue
                        ins = self._insert(per_h.get(u), u, k)
                        if h == g:
                            c, s = self._delta(g, {v: less_sums, u: ins})
                            new_total = total - self.cost[g] + c
                            ms = max(others, s)
                        else:
                            c, s = self._delta(h, {u: ins})
                            new_total = total - self.cost[g] - self.cost[h] + less_c + c
                            ms = max(others, s, less_s)
                        evals += 1
                        over = max(0.0, ms - bound)
                        if over < best[0] - _EPS * bound or (
                            over <= best[0] and new_total < best[1]
                        ):
                            best = (over, new_total, h, u)
                _, _, h, u = best
                if h < 0:
                    continue
                if less is None:
                    del self.nodes[g][v]
                else:
                    self.nodes[g][v] = less
                old = self.nodes[h].get(u)
                self.nodes[h][u] = self._node(u, [*(old.ks if old else ()), k])
                where[k] = (h, u)
                for x in {g, h}:
                    self._update(x)
                moves += 1
                improved = True
        return moves, evals

    def _end_guess(self, k: int, where: Mapping[int, tuple[int, int]]) -> float:
        g, v = where[k]
        return self.span[g] - self.tasks[k].times[self.sizes[v]]
