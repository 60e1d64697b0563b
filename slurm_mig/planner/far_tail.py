"""The tail repairs of a large FAR plan on idle GPUs (issue 38), after `refine_gpus`:
`far_rebalance.rebalance` on the plan, then a second repair from the plan re-packed GPU
by GPU; or, where the plan's longest tasks run on small slices, one repair from phase 2's
schedule near the bound (the "low start") instead.

Re-packing (`repack`): each GPU's tasks planned again by FAR on one GPU (the small-batch
family walk, which chooses their sizes anew), kept where that ends earlier. The ladder's
list schedule leaves many GPUs with idle slices (GOOD-WIDE 5,000 / 512: the median GPU
ends 0.08 x the bound after its work over seven slices); a GPU planned alone packs its
own tasks tighter, and the room it frees is where the repair moves the tail's tasks. A
plan still over ``REPACK_GATE`` times the bound after the first repair is re-packed and
repaired again with the steps the first left and ``REPACK_STEPS`` more (GOOD-NARROW,
POOR-NARROW); plans closer to the bound skip it (about 0.35 ms a GPU that buys nothing
there: MIXED-WIDE and POOR-WIDE at 10,000 / 1,000, the daemon's planner_cycle batch).

The low start: where the plan ends over ``LOW_GATE`` times the bound and phase 2's
shortest schedule of the targets near the bound (``far_phases.LOW_TARGET``) ends within
``LOW_RATIO`` times it (GOOD-WIDE: 1.13-1.22 and 1.02-1.07 over seeds and sizes; the next
classes: GOOD-NARROW at most 1.10 x the bound, POOR-NARROW's schedule 1.088 x the plan or
more), the repair runs from that schedule: it ends later, but no task runs longer than
about the bound, so whole tasks can move off its tail, where the plan's longest tasks
alone reach past the median GPU. Its budget is ``LOW_GPU_STEPS`` steps over the GPUs
(``STEPS`` to ``LOW_STEPS``: GOOD-WIDE 10,000 / 1,000 needs about 3,000 to come within
1.10 x the bound); where that is under ``LOW_PACK_STEPS`` steps a GPU (from about 400
GPUs) the schedule is re-packed first (GOOD-WIDE 5,000 / 512: 1.13 -> 1.09 x the bound),
and where it is under ``LOW_THIN_STEPS`` (from about 800 GPUs) each step looks at
``LOW_THIN_PEERS`` receivers and twice as many spread ones instead of ``REPAIR_PEERS``
(a step costs about a fifth less: GOOD-WIDE 10,000 / 1,000 1.098-1.100 x the bound over
seeds 0-2 for about 0.15 s more than its 1,500 steps with eight took; 5,000 / 512 ends
later with six, so it keeps eight). If it does not get the plan within ``LOW_GATE``
times the bound, the repairs of the plan run too, and the shortest plan found wins.

The unit start (`far_units.unit_start`): where the best plan found still ends over
``UNIT_GATE`` times the bound, one task on every leaf of every GPU and the others
chained above the leaves (0.09-0.35 s on 256-1,000 GPUs), repaired with ``UNIT_PEERS``
receivers a step and ``UNIT_STEPS`` steps (the plan's repairs: 8 and 1,500; the unit
plan's GPUs all end near its makespan, and its repair gains from the wider look:
POOR-NARROW 3,000 / 256, seeds 0-2, 1.104 / 1.100 / 1.102 x the dual bound with 8 and
1,500, 1.100 / 1.098 / 1.098 with these), then once more from where that repair
stopped with ``UNIT_WIDE_PEERS`` receivers, ``UNIT_WIDE_STEPS`` steps and a first
target ``UNIT_WIDE_FIRST`` below the makespan (the first repair stops where no move
to its 24 receivers meets a target; a wider look still finds some: 1.098 / 1.097 /
1.097, 0.2-0.5 s more), kept where it ends sooner. On POOR-NARROW no move or swap of
the plan's tasks shortens it (its 2g chains hold one or two tasks, its slice 6
idles): 3,000 / 256 1.138 -> 1.098, 5,000 / 512 1.126 -> 1.088, 10,000 / 1,000
1.110 -> 1.072 x the dual bound (seed 0). Plans nearer the bound skip it:
on GOOD-NARROW (1.06-1.07) it took 1.8-2.3 s more and found nothing shorter.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..geometry import GpuModel
from ..job import Job
from .far_phases import LowStart
from .far_rebalance import FIRST_STEP, REPAIR_PEERS, STEPS, _Shape, rebalance
from .far_tree import Forest, time_assignment
from .far_units import unit_start

__all__ = [
    "LOW_GATE",
    "LOW_RATIO",
    "REPACK_GATE",
    "UNIT_GATE",
    "low_budget",
    "model_ends",
    "repack",
    "repair_tail",
]

LOW_GATE = 1.12  # plans ending over this many times the bound ...
LOW_RATIO = 1.08  # ... try phase 2's schedule near the bound if it ends within this
LOW_GPU_STEPS = 3_200_000  # its repair's steps times GPUs (STEPS to LOW_STEPS)
LOW_STEPS = 3200  # at most (about 0.75 s on 1,000 GPUs)
LOW_PACK_STEPS = 8  # re-pack the low start where its repair has fewer steps a GPU
LOW_THIN_STEPS = 4  # and look at fewer peers a step where it has fewer than this
LOW_THIN_PEERS = 6  # (REPAIR_PEERS, 8, else): more steps for the same time
REPACK_GATE = 1.06  # else plans ending over this many times the bound are re-packed
REPACK_STEPS = 500  # and repaired again with this many steps more than the first left
UNIT_GATE = 1.09  # plans still ending over this many times the bound try the unit start
UNIT_PEERS = 24  # its repair looks at this many receivers a step
UNIT_STEPS = 3000  # in at most this many steps
UNIT_WIDE_PEERS = 64  # then once more from where it stopped, with this many receivers
UNIT_WIDE_STEPS = 1500  # and this many steps,
UNIT_WIDE_FIRST = 0.002  # its first target this share below the makespan

Found = list[tuple[float, int, list[list[int]]]]  # (makespan, rank, assignment)
# FAR on a batch of one GPU (``far.far_schedule``; passed in: far imports this module)
Schedule = Callable[[Sequence[Job], GpuModel, int], Any]


def model_ends(
    forest: Forest, tasks: Sequence[Job], assign: Sequence[Sequence[int]]
) -> list[float]:
    """Each GPU's end as `far_rebalance`'s model times it (exact on idle GPUs)."""
    shape = _Shape(forest)
    T = shape.T
    out = []
    for g in range(forest.gpus):
        local = assign[g * T : (g + 1) * T]
        dsum = [sum(tasks[i].times[shape.size[v]] for i in a) for v, a in enumerate(local)]
        out.append(shape.end(dsum, local))
    return out


def repack(
    forest: Forest, tasks: Sequence[Job], assign: Sequence[Sequence[int]], schedule: Schedule
) -> tuple[list[list[int]], list[float], int]:
    """Each GPU of ``assign`` planned again alone by ``schedule`` (module doc); returns
    the assignment (a copy), each GPU's end and how many GPUs got shorter. Pure,
    deterministic."""
    T = len(forest.model.tree)
    out = [list(a) for a in assign]
    ends = model_ends(forest, tasks, assign)
    better = 0
    for g in range(forest.gpus):
        idx = [i for v in range(T) for i in assign[g * T + v]]
        if len(idx) < 2:
            continue
        sub = [tasks[i] for i in idx]
        res = schedule(sub, forest.model, 1)
        tl = res.timeline
        if tl is None:  # pragma: no cover - FAR on one GPU times its plan (refinement)
            tl, _ = time_assignment(res.forest, sub, res.assign)
        if tl.makespan < ends[g] * (1 - 1e-12):
            out[g * T : (g + 1) * T] = [[idx[k] for k in a] for a in res.assign]
            ends[g] = tl.makespan
            better += 1
    return out, ends, better


def repair_tail(
    forest: Forest,
    tasks: Sequence[Job],
    assign: Sequence[Sequence[int]],
    ms: float,
    bound: float,
    low: LowStart | None = None,
    *,
    schedule: Schedule,
) -> Found:
    """The repairs of the module doc on ``assign`` (idle GPUs, ending at ``ms``; ``bound``:
    the dual bound; ``low``: phase 2's schedule near the bound, as (makespan, assignment)):
    the plans they found that end before ``ms`` as the model times them, as (makespan,
    rank, assignment); the input is left as it was."""
    found: Found = []
    if low and ms > LOW_GATE * bound and low[0][0] <= LOW_RATIO * ms:
        found = _from_low(forest, tasks, ms, bound, *low[0], schedule)
        if found and found[0][0] <= LOW_GATE * bound:
            return found
    trial, top, left = rebalance(forest, tasks, assign, bound)
    if trial is not None and top < ms:
        found.append((top, 0, trial))
        ms, assign = top, trial  # the model times idle GPUs exactly (`far_rebalance`)
    if ms > REPACK_GATE * bound:
        packed, ends, better = repack(forest, tasks, assign, schedule)
        if better:
            trial, top, _ = rebalance(forest, tasks, packed, bound, budget=left + REPACK_STEPS)
            if trial is None:
                trial, top = packed, max(ends)
            if top < ms:
                found.append((top, 1, trial))
    best = min([ms, *(f[0] for f in found)])
    start = unit_start(forest, tasks) if best > UNIT_GATE * bound else None
    if start is not None:
        trial, top, _ = rebalance(forest, tasks, start, bound, peers=UNIT_PEERS, budget=UNIT_STEPS)
        wide, top2, _ = rebalance(
            forest,
            tasks,
            trial if trial is not None else start,
            bound,
            peers=UNIT_WIDE_PEERS,
            budget=UNIT_WIDE_STEPS,
            first_step=UNIT_WIDE_FIRST,
        )
        if wide is not None and top2 < top:
            trial, top = wide, top2
        if top < best:
            found.append((top, 3, trial if trial is not None else start))
    return found


def _from_low(
    forest: Forest,
    tasks: Sequence[Job],
    ms: float,
    bound: float,
    low_ms: float,
    low: list[list[int]],
    schedule: Schedule,
) -> Found:
    """The repair from the low start (module doc), re-packed first where its budget is
    under ``LOW_PACK_STEPS`` steps a GPU: the plan it found, if it ends before ``ms``."""
    budget = low_budget(forest.gpus)
    first = max(FIRST_STEP, 1 - ms / low_ms)  # aim just below the plan at once
    if budget < LOW_PACK_STEPS * forest.gpus:
        low, _, _ = repack(forest, tasks, low, schedule)
    peers = LOW_THIN_PEERS if budget < LOW_THIN_STEPS * forest.gpus else REPAIR_PEERS
    trial, top, _ = rebalance(
        forest, tasks, low, bound, peers=peers, budget=budget, first_step=first
    )
    return [(top, 2, trial)] if trial is not None and top < ms else []


def low_budget(gpus: int) -> int:
    """The low start's repair steps on ``gpus`` GPUs (module doc)."""
    return min(LOW_STEPS, max(STEPS, LOW_GPU_STEPS // gpus))
