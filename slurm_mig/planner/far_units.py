"""The unit start of a large narrow FAR batch on idle GPUs (issue 38): one task on every
leaf of every GPU's tree, the other tasks chained on the leaves' parents, for
`far_tail` to repair.

Why: on a batch of about ten tasks a GPU whose times vary little (POOR-NARROW 5,000 /
512: every task runs 90-100 s on a 1g, 22-100 s on a 2g) the ladder's list schedule
ends 1.13 x the dual bound and no single move or swap shortens it: its GPUs run one or
two 2g tasks before each pair of 1g leaves, and the 1g at slice 6 runs one task and
idles for the rest. Built the other way round it ends 1.09 x: every leaf (the tree's
smallest nodes) runs one task, the tasks that take least time on the larger sizes are
chained on the leaves' parents, and the 3g at slice 4 runs its chain before all three
of its leaves, so that slice 6 works while slices 4 and 5 do.

A *unit* (`units`) is a highest parent of leaves with every leaf below it (on an A100:
3g at 4, 2g at 0, 2g at 2); a leaf under none is a unit of its own. It ends with its
chain's seconds plus its longest leaf task (and each used node's creation and
destruction). Of ``n`` tasks on GPUs with ``L`` leaves in all, the ``n - L`` with the
shortest time on a chain size are chained (a task that cannot run on a leaf's size
always is). Where that is more than a task a chain (3,000 / 256: 1.6), ``LEAFLESS``
of the GPUs run their last unit's chain alone, over the whole length, and its two
leaves' tasks are chained too: a long chain of short tasks packs where one or two
tasks of 22-55 s before a 95 s leaf do not. The chains are packed best fit
decreasing (each task, longest first, to the unit, of any chain size, it leaves the
least room in) under the least end every unit can keep to (bisection, its leaves
taken at the median leaf task); then the units whose chains end last get the
shortest leaf tasks. Pure and deterministic.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Mapping, Sequence

from ..job import Job
from .far_tree import Forest

__all__ = ["BISECTIONS", "LEAFLESS", "unit_start", "units"]

BISECTIONS = 14  # steps of the search for the least end every unit keeps to
LEAFLESS = 0.1  # share of GPUs whose last unit runs no leaf tasks (module doc)


def units(forest: Forest) -> list[tuple[int | None, tuple[int, ...]]]:
    """One GPU's units (module doc) as (chain node or None, its leaves), local node
    indices: each highest parent of leaves with the leaves below it; a leaf under none
    is a unit of its own, with no chain."""
    tree = forest.model.tree
    parents = {n.parent for n in tree if not n.children and n.parent is not None}

    def above(v: int) -> list[int]:  # v's proper ancestors
        out, p = [], tree[v].parent
        while p is not None:
            out.append(p)
            p = tree[p].parent
        return out

    out: list[tuple[int | None, tuple[int, ...]]] = []
    covered: set[int] = set()
    for v in sorted(parents):
        if any(a in parents for a in above(v)):
            continue
        leaves = tuple(n.index for n in tree if not n.children and v in above(n.index))
        covered.update(leaves)
        out.append((v, leaves))
    out.extend((None, (n.index,)) for n in tree if not n.children and n.index not in covered)
    return out


def unit_start(forest: Forest, tasks: Sequence[Job]) -> list[list[int]] | None:
    """The unit plan of ``tasks`` on ``forest``'s idle GPUs (module doc); None where the
    batch has no more tasks than the forest has leaves, or some task fits neither a leaf
    nor a unit it is given."""
    return _build(forest, tasks, units(forest))


def _build(
    forest: Forest, tasks: Sequence[Job], unit: list[tuple[int | None, tuple[int, ...]]]
) -> list[list[int]] | None:
    """The unit plan (module doc), or None where it cannot hold the batch."""
    model = forest.model
    tree = model.tree
    T, G = len(tree), forest.gpus
    oh = {s: model.create_s[s] + model.destroy_s[s] for s in model.create_s}
    leaf_sizes = {tree[leaf].size for _, leaves in unit for leaf in leaves}
    chain_sizes = sorted({tree[v].size for v, _ in unit if v is not None})
    chains = [(v, leaves) for v, leaves in unit if v is not None]
    n_leaves = G * sum(len(leaves) for _, leaves in unit)
    if len(tasks) <= n_leaves or len(leaf_sizes) != 1 or not chains:
        return None
    (one,) = leaf_sizes
    per_gpu = [list(unit) for _ in range(G)]
    if len(tasks) - n_leaves > G * len(chains):  # more chained tasks than chains
        last = chains[-1]
        for g in range(int(LEAFLESS * G)):
            per_gpu[g][unit.index(last)] = (last[0], ())
            n_leaves -= len(last[1])
    m = len(tasks) - n_leaves

    def on(i: int, size: int) -> float:
        return tasks[i].times.get(size, math.inf)

    def chain_time(i: int) -> float:
        return min(on(i, s) for s in chain_sizes)

    # the chains': those that cannot run on a leaf, then the shortest on a chain size
    order = sorted(range(len(tasks)), key=lambda i: (on(i, one) != math.inf, chain_time(i), i))
    chained, leafed = order[:m], sorted(order[m:], key=lambda i: (on(i, one), i))
    if any(chain_time(i) == math.inf for i in chained) or on(leafed[-1], one) == math.inf:
        return None
    leaf = on(leafed[len(leafed) // 2], one) + oh[one]  # a unit's leaves, as planned
    bins = [
        (g * T + v, tree[v].size, leaf if leaves else 0.0)
        for g, units_g in enumerate(per_gpu)
        for v, leaves in units_g
        if v is not None
    ]
    items = sorted(chained, key=lambda i: (-chain_time(i), i))
    # every unit can end by ``hi`` (any fit: a task that fits nowhere finds every unit
    # fuller than the mean) and none by ``lo``; bisect between
    times = [chain_time(i) for i in items]
    lo = leaf
    hi = leaf + max(oh.values()) + times[0] + sum(times) / len(bins)
    best = _best_fit(items, bins, hi, on, oh, G * T)
    if best is None:  # a task that runs on one chain size only, whose units are full
        return None
    for _ in range(BISECTIONS):
        mid = (lo + hi) / 2
        got = _best_fit(items, bins, mid, on, oh, G * T)
        if got is None:
            lo = mid
        else:
            hi, best = mid, got
    assign, load = best
    # the leaves: the longest chains get the shortest leaf tasks (a unit without a chain
    # gets the longest)
    slots = sorted(
        (-load.get(g * T + v, 0.0) if v is not None else math.inf, g, leaves)
        for g, units_g in enumerate(per_gpu)
        for v, leaves in units_g
        if leaves
    )
    k = 0
    for _, g, leaves in slots:
        for node in leaves:
            assign[g * T + node] = [leafed[k]]
            k += 1
    return assign


def _best_fit(
    items: Sequence[int],
    bins: Sequence[tuple[int, int, float]],
    tau: float,
    on: Callable[[int, int], float],
    oh: Mapping[int, float],
    nodes: int,
) -> tuple[list[list[int]], dict[int, float]] | None:
    """Best fit decreasing of ``items`` into the units ``bins`` (node, size, what its
    leaves take) so that every unit ends by ``tau``: each task to the unit it leaves the
    least room in, over every chain size; the assignment and each used chain node's
    seconds, or None where a task fits nowhere."""
    rooms: dict[int, list[tuple[float, int]]] = {}
    for b, (_, size, leaves) in enumerate(bins):
        rooms.setdefault(size, []).append((tau - leaves - oh[size], b))
    for r in rooms.values():
        r.sort()
    assign: list[list[int]] = [[] for _ in range(nodes)]
    load: dict[int, float] = {}
    for i in items:
        pick = None
        for size, r in rooms.items():
            d = on(i, size)
            k = bisect.bisect_left(r, (d, -1))
            if k < len(r) and (pick is None or r[k][0] - d < pick[0]):
                pick = (r[k][0] - d, size, k)
        if pick is None:
            return None
        left, size, k = pick
        _, b = rooms[size].pop(k)
        bisect.insort(rooms[size], (left, b))
        node = bins[b][0]
        assign[node].append(i)
        load[node] = load.get(node, oh[size]) + on(i, size)
    return assign, load
