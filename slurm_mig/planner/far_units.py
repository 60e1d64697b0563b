"""The unit start of a large narrow FAR batch on idle GPUs (issue 38): one task on every
leaf of every GPU's tree, the other tasks chained on the leaves' parents, built in one
pass, for `far_tail` to repair.

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
always is); longest first (on the smallest chain size), each goes to the unit it ends
first on: of each chain size, the one whose chain ends first (longest processing time
first). Then the leaves: the units whose chains end last get the shortest leaf tasks.
Pure and deterministic.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence

from ..job import Job
from .far_tree import Forest

__all__ = ["unit_start", "units"]


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
    m = len(tasks) - G * sum(len(leaves) for _, leaves in unit)
    if m <= 0 or len(leaf_sizes) != 1 or not chain_sizes:
        return None
    (one,) = leaf_sizes
    small = chain_sizes[0]

    def on(i: int, size: int) -> float:
        return tasks[i].times.get(size, math.inf)

    def chain_time(i: int) -> float:
        return min(on(i, s) for s in chain_sizes)

    # the chains': those that cannot run on a leaf, then the shortest on a chain size
    order = sorted(range(len(tasks)), key=lambda i: (on(i, one) != math.inf, chain_time(i), i))
    chained, leafed = order[:m], order[m:]
    if chain_time(chained[-1]) == math.inf or on(leafed[0], one) == math.inf:
        return None
    assign: list[list[int]] = [[] for _ in range(G * T)]
    load: dict[int, float] = {}  # each chain node's seconds so far
    heaps: dict[int, list[tuple[float, int]]] = {s: [] for s in chain_sizes}
    for g in range(G):
        for v, _ in unit:
            if v is not None:
                load[g * T + v] = 0.0
                heaps[tree[v].size].append((0.0, g * T + v))
    for h in heaps.values():
        heapq.heapify(h)
    for i in sorted(chained, key=lambda i: (-on(i, small), i)):
        # the unit it ends first on: the least loaded of each chain size
        ends = [
            (h[0][0] + on(i, s) + (0.0 if assign[h[0][1]] else oh[s]), s) for s, h in heaps.items()
        ]
        end, size = min(ends)
        _, node = heapq.heappop(heaps[size])
        load[node] = end
        assign[node].append(i)
        heapq.heappush(heaps[size], (end, node))
    # the leaves: the longest chains get the shortest leaf tasks (a unit without a chain
    # gets the longest)
    slots = sorted(
        (-load[g * T + v] if v is not None else math.inf, g, leaves)
        for g in range(G)
        for v, leaves in unit
    )
    leafed.sort(key=lambda i: (on(i, one), i))
    k = 0
    for _, g, leaves in slots:
        for leaf in leaves:
            assign[g * T + leaf] = [leafed[k]]
            k += 1
    return assign
