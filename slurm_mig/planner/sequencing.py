"""Completion-time objectives for batch plans: re-sequence a plan's work so that short
jobs are not stuck behind long ones, within a bound on the makespan.

FAR minimises the makespan, and its list schedule (LPT over the repartitioning tree)
starts the longest tasks first: on batches its mean completion time is far worse than
a fixed layout's. This pure post-pass takes a plan (FAR's, or any batch planner's) and
returns a new one; the input is never changed. Objectives (``OBJECTIVES``):

* ``makespan``: the plan as it is (FAR as published).
* ``jct``: the least mean (weighted) completion time found; the makespan only breaks
  ties, or bounds it at ``slack`` x the plan's when ``slack`` is given.
* ``balanced`` (``DEFAULT_OBJECTIVE``): the least mean (weighted) completion time with
  the makespan at most ``BALANCED_SLACK`` (1.05) x the plan's.

Three steps, each giving a valid plan:

1. *Smith's rule per instance.* The tasks run back to back on one instance are put in
   order of time / weight (shortest first when unweighted). The instance's start, end
   and reconfigurations do not move, so the makespan is unchanged: free, always done.
2. *Tree order* (a plan that uses each node of the repartitioning tree at most once
   per GPU, as FAR's, ``exact``'s and ``auto``'s do; onto busy GPUs given ``start``). A used node's tasks
   run before the nodes below it (FAR's order: the child instance is created once its
   parent's tasks ended and the parent was destroyed) or after them (the reversed tree
   of FAR Section 4). Either way the node's subtree lasts the same (the path sums do not
   change), so the choice is made per node by an exchange argument: the node goes first
   when ``W_below x L_node <= W_node x D_below`` (W: the weights of the tasks, L: the
   node's length, D: the longest subtree below it).
3. *Moves* (``jct`` and ``balanced``, batches up to ``SEARCH_TASKS`` tasks): a local
   search moves single tasks to another node of any GPU and any size they run on while
   that lowers the estimated weighted completion time and keeps the estimated makespan
   within the bound (at most ``SEARCH_EVALS`` estimates; deterministic). The estimate
   leaves out that a GPU's reconfigurations share one channel; a plan whose exact
   makespan breaks the bound is searched again under a bound tightened by as much, and
   where the estimate is rough (short tasks) an unbounded search is tried as well.

Every candidate is timed exactly as FAR's trees are (``timeline.run_uses``: one
reconfiguration at a time per GPU, an instance created only after the instances in its
way ended and were destroyed); the chosen plan is the candidate of least weighted
completion whose exact makespan holds the bound, so it is never worse than the input
on that sum (step 1 alone qualifies).

Weights: ``weights`` (task id -> weight > 0), else a task's ``meta["weight"]``, else 1.

The ``far`` and ``auto`` policies (option ``objective``) pass no ``start``: onto busy
GPUs they apply step 1 only. In the simulator's MISO streams (8 and 40 A100s) the
whole re-sequencing there made the makespan up to 24 % longer and the mean completion
time no better: a stream's batches are small and follow one another.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from ..geometry import GpuModel, Slot
from ..plan import Plan, PlannedTask
from ..workload import Task
from .snapshot import ClusterSnapshot
from .timeline import Use, run_uses

__all__ = [
    "BALANCED_SLACK",
    "DEFAULT_OBJECTIVE",
    "OBJECTIVES",
    "accepts_objective",
    "check_objective",
    "mean_completion",
    "objective_options",
    "sequence_plan",
]

OBJECTIVES = ("makespan", "jct", "balanced")
DEFAULT_OBJECTIVE = "balanced"
BALANCED_SLACK = 1.05
SEARCH_TASKS = 400  # the local search (step 3) runs on batches up to this many tasks
SEARCH_EVALS = 20_000  # estimates the local searches of one plan may make together
RETRIES = 3  # searches under a tightened bound when the last broke it
_EPS = 1e-9


def check_objective(value: object) -> str:
    """``value`` as an objective name (case and spaces ignored); ValueError names the
    valid ones."""
    name = str(value).strip().lower()
    if name not in OBJECTIVES:
        raise ValueError(
            f"objective {value!r}: choose one of {', '.join(OBJECTIVES)} (makespan: FAR's "
            "plan; jct: least mean completion time; balanced: least mean completion time "
            f"with the makespan at most {BALANCED_SLACK:g} x FAR's)"
        )
    return name


def mean_completion(plan: Plan) -> float:
    """The mean end time of the plan's own tasks (not the running jobs it found)."""
    ends = [t.end for t in plan.tasks if not t.running]
    return sum(ends) / len(ends) if ends else 0.0


def accepts_objective(name: str, objective: str) -> bool:
    """Whether the registered policy ``name`` takes the option ``objective=objective``:
    its module's ``OBJECTIVES`` (when it declares them) lists the value and the policy
    builds with it. False for a policy that cannot be built (e.g. its module absent)."""
    from importlib import import_module

    from .registry import get_policy, policy_info

    try:
        info = policy_info(name)
        module = import_module(info.target.split(":")[0])
    except (ImportError, ValueError):
        return False
    declared = getattr(module, "OBJECTIVES", None)
    if declared is not None and objective not in declared:
        return False
    try:
        get_policy(name, objective=objective)
    except (ImportError, TypeError, ValueError):
        return False
    return True


def objective_options(name: str, objective: str | None) -> dict[str, str]:
    """``{"objective": objective}`` when policy ``name`` accepts it, else ``{}`` (the
    policy plans by its own rule; e.g. the online baselines take no objective)."""
    if not objective:
        return {}
    return {"objective": objective} if accepts_objective(name, objective) else {}


# ---------------------------------------------------------------------------
# The post-pass


def sequence_plan(
    plan: Plan,
    tasks: Sequence[Task],
    objective: str = DEFAULT_OBJECTIVE,
    *,
    slack: float | None = None,
    weights: Mapping[str, float] | None = None,
    start: ClusterSnapshot | None = None,
) -> Plan:
    """The plan re-sequenced for ``objective`` (module doc); ``plan`` itself when the
    objective is ``makespan``. ``tasks``: the batch the plan was made for. ``slack``:
    the makespan bound as a factor of the plan's (default: 1.05 for ``balanced``, no
    bound for ``jct``). ``start``: the GPUs the plan was made onto when they were busy
    (their running jobs stay; without it a plan onto busy GPUs gets step 1 only)."""
    objective = check_objective(objective)
    if objective == "makespan":
        return plan
    if slack is None:
        slack = BALANCED_SLACK if objective == "balanced" else math.inf
    slack = float(slack)
    if not slack >= 1.0:
        raise ValueError(f"slack {slack!r} must be a factor >= 1 of the plan's makespan")
    w = _weights(tasks, weights)
    base_ms = plan.makespan
    bound = base_ms * slack * (1 + _EPS) + _EPS
    first = _smith_runs(plan, w)
    candidates = [("smith", first)]
    tree = _tree(plan.model)
    assign = _tree_assignment(plan, tree, start)
    searched = 0
    if assign is not None:
        index = {t.id: i for i, t in enumerate(tasks)}
        wl = [w[t.id] for t in tasks]
        state = _State(plan.model, tree, tasks, wl, [
            {v: [index[i] for i in ids] for v, ids in per.items()} for per in assign
        ], start)  # fmt: skip
        tree_plan = state.plan(plan)
        candidates.append(("tree", tree_plan))
        if len(index) <= SEARCH_TASKS:
            estimate = state.makespan()
            ratios = [slack]
            if math.isfinite(slack) and abs(tree_plan.makespan - estimate) > 0.01 * estimate:
                # reconfigurations weigh (short tasks): the estimate is rough, and a
                # search without the bound may find what the bounded one cannot
                ratios.append(math.inf)
            budget = SEARCH_EVALS
            for n, ratio in enumerate(ratios):
                for _ in range(RETRIES if n == 0 else 1):
                    if budget <= 0:
                        break
                    trial = state.copy()
                    moves, used = trial.search(
                        estimate * ratio if math.isfinite(ratio) else ratio, budget
                    )
                    budget -= used
                    if not moves:
                        break
                    got = trial.plan(plan)
                    candidates.append(("moves", got))
                    searched = max(searched, moves)
                    if got.makespan <= bound:
                        break
                    # a plan over the bound: search again under a bound tightened by as much
                    ratio *= bound / got.makespan
    fits = [(n, p) for n, p in candidates if p.makespan <= bound] or [("input", plan)]
    name, best = min(fits, key=lambda np: (_wsum(np[1], w), np[1].makespan))
    stats = {
        **plan.stats,
        "objective": objective,
        "sequencing": name,
        "sequencing_moves": searched,
        "makespan_bound": base_ms * slack if math.isfinite(slack) else None,
        "far_makespan": plan.stats.get("far_makespan", base_ms),
        "input_makespan": base_ms,
        "input_mean_completion": mean_completion(plan),
        "mean_completion": mean_completion(best),
    }
    return replace(best, stats=stats)


def _weights(tasks: Sequence[Task], given: Mapping[str, float] | None) -> dict[str, float]:
    out = {}
    for t in tasks:
        raw = given.get(t.id) if given is not None else None
        if raw is None:
            raw = t.meta.get("weight", 1.0) if t.meta else 1.0
        try:
            v = float(raw)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise ValueError(f"task {t.id!r}: weight {raw!r} is not a number") from None
        if not (v > 0 and math.isfinite(v)):
            raise ValueError(f"task {t.id!r}: weight {raw!r} must be a positive number")
        out[t.id] = v
    return out


def _wsum(plan: Plan, w: Mapping[str, float]) -> float:
    return sum(w.get(t.id, 1.0) * t.end for t in plan.tasks if not t.running)


# ---------------------------------------------------------------------------
# Step 1: Smith's rule within each run of one instance


def _smith_runs(plan: Plan, w: Mapping[str, float]) -> Plan:
    """The plan with each back-to-back run of tasks on one instance in Smith order."""
    runs: dict[tuple[int, Slot], list[int]] = {}
    for i, t in enumerate(plan.tasks):
        if not t.running:
            runs.setdefault((t.gpu, t.slot), []).append(i)
    out = list(plan.tasks)
    for idx in runs.values():
        idx.sort(key=lambda i: plan.tasks[i].start)
        cut = [0]
        for a in range(1, len(idx)):
            prev, cur = plan.tasks[idx[a - 1]], plan.tasks[idx[a]]
            if abs(cur.start - prev.end) > _EPS * max(1.0, abs(prev.end)):
                cut.append(a)
        cut.append(len(idx))
        for lo, hi in zip(cut, cut[1:]):
            run = [plan.tasks[i] for i in idx[lo:hi]]
            if len(run) < 2:
                continue
            order = sorted(run, key=lambda t: ((t.end - t.start) / w.get(t.id, 1.0), t.id))
            t0 = run[0].start
            for pos, t in zip(idx[lo:hi], order):
                d = t.end - t.start
                out[pos] = replace(t, start=t0, end=t0 + d)
                t0 += d
    return replace(plan, tasks=tuple(out))


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
        tasks: Sequence[Task],
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
