"""Multi-batch planning (Section 4 of the FAR paper): each batch's FAR schedule is
appended to the work already planned, every other batch reversed in time so that
its small instances meet the previous batch's small instances, then tasks of the
new batch are moved or swapped to widen the overlap.

A reversed batch runs its tree bottom-up (leaves first, the root last). Every use
starts as soon as the previous batch frees its slices (this contains the paper's
best rigid overlap, Section 4.2, and is never later than it), with the
reconfigurations re-timed so the concatenated plan stays valid.

`plan_onto` plans a batch onto GPUs that already hold work (a `ClusterSnapshot`): the
best of FAR's state-aware list schedule and, on up to ``CONCAT_GPUS`` GPUs, the
batch's own FAR schedule appended forward, reversed, and reversed after mirroring
(the batch's longest GPU schedules matched to the GPUs that free first). Nothing here
changes its inputs.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cache
from itertools import permutations
from typing import Any

from ..geometry import GpuModel, Slot, get_model
from ..job import Job
from ..plan import Plan
from .batch import Batch
from .bounds import tightest_bound
from .far import FarResult, Forest, far_schedule, refine, time_assignment
from .snapshot import Gpu
from .timeline import Timeline, Use, run_uses, start_clocks

CONCAT_GPUS = 64  # beyond this many GPUs only the state-aware schedule is tried


@dataclass
class Concatenation:
    timeline: Timeline
    reversed: bool
    assign: list[list[int]]  # the tree assignment that was timed
    moves: int = 0
    swaps: int = 0
    improved: bool = False
    mirrored: bool = False


def oriented_uses(
    forest: Forest, assign: Sequence[Sequence[int]], reverse: bool, batch: int
) -> list[Use]:
    """Uses of a tree assignment, top-down (forward) or bottom-up (reversed)."""
    order = range(forest.nodes - 1, -1, -1) if reverse else range(forest.nodes)
    tree = forest.model.tree
    out = []
    for v in order:
        if assign[v]:
            tasks = list(reversed(assign[v])) if reverse else list(assign[v])
            out.append(Use(forest.gpu[v], tree[forest.local[v]].slot, tasks, batch))
    return out


def slice_free_times(forest: Forest, live: Sequence[dict[Slot, float]]) -> list[float]:
    """When each compute slice of each GPU is released by the work already there
    (``live``: per GPU, instance -> when it is free, as `timeline.start_clocks` gives)."""
    model = forest.model
    S = model.compute_slices
    out = [0.0] * (forest.gpus * S)
    for g, instances in enumerate(live):
        for slot, free in instances.items():
            p = slot.placement
            for s in range(p.start, min(p.end, S)):
                out[g * S + s] = max(out[g * S + s], free)
    return out


def _own_slice_ends(
    forest: Forest, assign: Sequence[Sequence[int]], dur: Sequence[float]
) -> list[float]:
    """Slice ends of the batch on its own, without reconfiguration (Algorithm 2's view)."""
    S = forest.model.compute_slices
    ends = [0.0] * (forest.gpus * S)

    def walk(v: int, t: float) -> None:
        t += sum(dur[i] for i in assign[v])
        for s in forest.covers[v]:
            if t > ends[s]:
                ends[s] = t
        for c in forest.children[v]:
            walk(c, t)

    for r in forest.roots:
        walk(r, 0.0)
    return ends


@cache
def _tree_symmetries(model_name: str) -> tuple[tuple[int, ...], ...]:
    """Permutations of the tree's nodes that swap identical sibling subtrees (e.g. the
    two 1g leaves under a 2g node); each maps a node to the node taking its tasks."""
    tree = get_model(model_name).tree

    def shape(v: int) -> tuple:
        return (tree[v].size, tuple(shape(c) for c in tree[v].children))

    def preorder(v: int) -> list[int]:
        out = [v]
        for c in tree[v].children:
            out += preorder(c)
        return out

    gens = []
    for node in tree:
        kids = node.children
        for i in range(len(kids)):
            for j in range(i + 1, len(kids)):
                if shape(kids[i]) == shape(kids[j]):
                    sigma = list(range(len(tree)))
                    for x, y in zip(preorder(kids[i]), preorder(kids[j])):
                        sigma[x], sigma[y] = y, x
                    gens.append(tuple(sigma))
    group = {tuple(range(len(tree)))}
    frontier = list(group)
    while frontier:
        perm = frontier.pop()
        for g in gens:
            nxt = tuple(g[p] for p in perm)
            if nxt not in group:
                group.add(nxt)
                frontier.append(nxt)
    return tuple(sorted(group))


def mirror_to_fit(
    forest: Forest, assign: Sequence[Sequence[int]], dur: Sequence[float], prev: Sequence[float]
) -> list[list[int]]:
    """Relabel the batch's trees onto equivalent instances (identical sibling subtrees,
    and GPUs) so its reversed schedule fits best behind ``prev``, the slice release
    times; the schedule itself is unchanged. Minimises max over slices of prev + end."""
    model = forest.model
    T, S, G = len(model.tree), model.compute_slices, forest.gpus
    ends = _own_slice_ends(forest, assign, dur)
    # a node's end per local node, per batch GPU, to score a relabelling cheaply
    best_for: dict[tuple[int, int], tuple[float, tuple[int, ...]]] = {}
    syms = _tree_symmetries(model.name)
    covers = [tuple(range(n.placement.start, min(n.placement.end, S))) for n in model.tree]
    leaf_of_slice = {covers[v][0]: v for v in range(T) if not model.tree[v].children}
    for i in range(G):
        for h in range(G):
            best = (float("inf"), syms[0])
            for perm in syms:
                # slice s of tree i lands on slice slot_of(perm) on gpu h
                cost = 0.0
                for s in range(S):
                    leaf = leaf_of_slice.get(s)
                    if leaf is None:
                        continue
                    target = covers[perm[leaf]][0]
                    c = prev[h * S + target] + ends[i * S + s]
                    if c > cost:
                        cost = c
                if cost < best[0] - 1e-12:
                    best = (cost, perm)
            best_for[(i, h)] = best
    gpu_orders = list(permutations(range(G))) if G <= 6 else [tuple(range(G))]
    order = min(gpu_orders, key=lambda o: max(best_for[(i, o[i])][0] for i in range(G)))
    out: list[list[int]] = [[] for _ in range(forest.nodes)]
    for i in range(G):
        h = order[i]
        perm = best_for[(i, h)][1]
        for v in range(T):
            out[h * T + perm[v]] = list(assign[i * T + v])
    return out


def concat_batch(
    start: Sequence[Gpu],
    tasks: Sequence[Job],
    result: FarResult,
    reverse: bool = True,
    improve: bool = True,
    batch: int = 1,
    max_iters: int = 20,
    mirror: bool = True,
    now: float = 0.0,
) -> Concatenation:
    """Append a batch's FAR schedule after the GPUs ``start`` (as they are at ``now``);
    reversed and improved by default. ``improve`` runs the paper's move/swap overlap
    improvement (Section 4.3); ``mirror`` first relabels equivalent instances to fit the
    previous batch (ours). The best variant tried is returned with its assignment."""
    forest = result.forest
    model = forest.model

    def timed(assign: Sequence[Sequence[int]]) -> Timeline:
        uses = oriented_uses(forest, assign, reverse, batch)
        return run_uses(model, tasks, uses, forest.gpus, start, now=now)

    chosen = [list(x) for x in result.assign]
    best = Concatenation(timed(chosen), reverse, chosen)
    if not reverse or len(tasks) < 2 or not (improve or mirror):
        return best
    dur = [tasks[i].times[result.allocation[i]] for i in range(len(tasks))]
    prev = slice_free_times(forest, start_clocks(start, forest.gpus, now)[0])
    starts = [(chosen, False)]
    if mirror:
        mirrored = mirror_to_fit(forest, chosen, dur, prev)
        starts.append((mirrored, True))
        tl = timed(mirrored)
        if tl.makespan < best.timeline.makespan - 1e-9:
            best = Concatenation(tl, True, mirrored, mirrored=True)
    if improve:
        for assign, was_mirrored in starts:
            trial = [list(x) for x in assign]
            ends = _own_slice_ends(forest, trial, dur)
            _, moves, swaps = refine(
                forest, trial, dur, ends, critical_margin=prev, max_iters=max_iters
            )
            if moves or swaps:
                tl = timed(trial)
                if tl.makespan < best.timeline.makespan - 1e-9:
                    best = Concatenation(tl, True, trial, moves, swaps, True, was_mirrored)
    return best


def trivial_concat(
    start: Sequence[Gpu],
    tasks: Sequence[Job],
    result: FarResult,
    batch: int = 1,
    now: float = 0.0,
) -> Timeline:
    """The reference of Section 6.7.1: the batch starts after the last planned task."""
    forest = result.forest
    live = start_clocks(start, forest.gpus, now)[0]
    begin = max((f for d in live for f in d.values()), default=0.0)
    return run_uses(
        forest.model,
        tasks,
        oriented_uses(forest, result.assign, False, batch),
        forest.gpus,
        start,
        not_before=begin,
        now=now,
    )


def match_gpus(
    result: FarResult, tasks: Sequence[Job], live: Sequence[dict[Slot, float]]
) -> list[list[int]]:
    """The batch's GPU schedules moved so that the longest run on the GPUs that free
    first (a new assignment; ``result`` is left as it is)."""
    forest = result.forest
    T = len(forest.model.tree)
    G = forest.gpus
    if G < 2:
        return [list(x) for x in result.assign]
    dur = [tasks[i].times[result.allocation[i]] for i in range(len(tasks))]

    def chain(v: int) -> float:
        """The longest root-to-leaf run of work below node v."""
        own = sum(dur[k] for k in result.assign[v])
        return own + max((chain(c) for c in forest.children[v]), default=0.0)

    span = [chain(i * T) for i in range(G)]
    free = [max(d.values(), default=0.0) for d in live]
    trees = sorted(range(G), key=lambda i: (-span[i], i))
    slots = sorted(range(G), key=lambda h: (free[h], h))
    out: list[list[int]] = [[] for _ in range(forest.nodes)]
    for i, h in zip(trees, slots):
        for v in range(T):
            out[h * T + v] = list(result.assign[i * T + v])
    return out


def mirrored_per_gpu(
    result: FarResult, assign: Sequence[Sequence[int]], tasks: Sequence[Job], prev: list[float]
) -> list[list[int]]:
    """`mirror_to_fit` GPU by GPU (GPUs already matched): each GPU's tree relabelled onto
    equivalent instances to fit behind that GPU's own work (``prev``: slice free times)."""
    forest = result.forest
    model = forest.model
    T, S = len(model.tree), model.compute_slices
    one = Forest.build(model, 1)
    dur = [tasks[i].times[result.allocation[i]] for i in range(len(tasks))]
    out: list[list[int]] = []
    for g in range(forest.gpus):
        block = [list(x) for x in assign[g * T : (g + 1) * T]]
        if any(block):
            block = mirror_to_fit(one, block, dur, prev[g * S : (g + 1) * S])
        out.extend(list(x) for x in block)
    return out


def plan_onto(
    batch: Batch, refine_phase: bool = True, prune: bool = True
) -> tuple[Timeline, dict[str, Any]]:
    """Plan ``batch`` onto the busy GPUs of ``batch.start`` (module doc): the best
    timeline and what it came from."""
    assert batch.start is not None
    tasks, model, G = batch.tasks, batch.model, batch.gpus
    start, now, number = batch.start.gpus, batch.start.now, batch.number
    options: list[tuple[str, Timeline]] = []
    if G <= CONCAT_GPUS:
        base = far_schedule(tasks, model, G, refine_phase, prune)
        live = start_clocks(start, G, now)[0]
        matched = match_gpus(base, tasks, live)
        prev = slice_free_times(base.forest, live)
        for name, assign in (
            ("reversed", matched),
            ("reversed-mirrored", mirrored_per_gpu(base, matched, tasks, prev)),
        ):
            trial = replace(base, assign=assign)
            cat = concat_batch(start, tasks, trial, True, batch=number, mirror=False, now=now)
            options.append((name, cat.timeline))
        fwd = concat_batch(
            start, tasks, replace(base, assign=matched), False, batch=number, now=now
        )
        options.append(("forward", fwd.timeline))
    res = far_schedule(tasks, model, G, refine_phase, prune, start=start, now=now)
    state_tl, _ = time_assignment(res.forest, tasks, res.assign, start, number, now)
    options.append(("state-aware", state_tl))
    name, best = min(options, key=lambda o: o[1].makespan)  # first wins a tie
    stats = {
        "onto": name,
        "onto_candidates": {n: round(tl.makespan, 6) for n, tl in options},
        "allocations_evaluated": res.evaluated,
    }
    return best, stats


def plan_batches(
    batches: Sequence[Sequence[Job]],
    model: GpuModel,
    gpus: int = 1,
    improve: bool = True,
    start: Sequence[Gpu] | None = None,
    mirror: bool = True,
) -> Plan:
    """Plan consecutive batches with FAR, concatenated reversed (Section 4)."""
    t0 = time.perf_counter()
    current: Sequence[Gpu] = tuple(start) if start else tuple(Gpu(g) for g in range(gpus))
    all_tasks: list[Job] = []
    planned = []
    reconfs = []
    moves = swaps = 0
    for k, batch in enumerate(batches):
        if not batch:
            continue
        result = far_schedule(batch, model, gpus)
        cat = concat_batch(
            current, batch, result, reverse=k % 2 == 1, improve=improve, batch=k, mirror=mirror
        )
        moves += cat.moves
        swaps += cat.swaps
        planned.extend(cat.timeline.tasks)
        reconfs.extend(cat.timeline.reconfigurations)
        current = cat.timeline.gpus(0.0, current)
        all_tasks.extend(batch)
    bound, name, bounds = tightest_bound(all_tasks, model, gpus)
    return Plan(
        model=model,
        gpus=gpus,
        tasks=tuple(planned),
        reconfigurations=tuple(reconfs),
        lower_bound=bound,
        planner="far-multibatch",
        stats={
            "planning_seconds": time.perf_counter() - t0,
            "batches": len(batches),
            "concat_moves": moves,
            "concat_swaps": swaps,
        },
        bound=name,
        bounds=bounds,
    )
