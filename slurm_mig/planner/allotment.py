"""Allotments for a target makespan, and the moldable lower bound they come from.

For a target makespan ``T`` the *canonical allotment* gives every task the size of least
work among the sizes on which it takes at most ``T`` (its fastest size when none does).
Any schedule of makespan ``T`` runs every task at a size where it takes at most ``T``,
so it does at least the canonical work; hence

    T* = min { T : T >= max_i min_s t_i(s)  and  (sum_i w_i(T) + backlog) / slices <= T }

is a lower bound on the makespan (it ignores reconfiguration and MIG placement rules),
never below the area bound of Section 6.4 and often well above it on wide clusters,
where the longest task, not the area, decides. This is the dual-approximation view of
moldable scheduling (Mounie, Rapine and Trystram); FAR's allocation family (Section
3.1) walks the same allotments one task at a time, which is quadratic on large batches.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..workload import Task

__all__ = ["canonical_allotment", "ladder", "moldable_bound"]

_TIE = 1e-9


def canonical_size(times: dict[int, float] | object, sizes: Sequence[int], target: float) -> int:
    """The least-work size on which a task takes at most ``target`` (smallest size on a
    tie), else its fastest size."""
    best, best_w = None, math.inf
    fastest, fastest_t = sizes[0], math.inf
    for s in sizes:
        t = times[s]  # type: ignore[index]
        if t < fastest_t:
            fastest, fastest_t = s, t
        if t <= target:
            w = s * t
            if w < best_w * (1 - _TIE):
                best, best_w = s, w
    return best if best is not None else fastest


def canonical_allotment(tasks: Sequence[Task], sizes: Sequence[int], target: float) -> list[int]:
    """`canonical_size` of every task for ``target``."""
    return [canonical_size(t.times, sizes, target) for t in tasks]


def moldable_bound(
    tasks: Sequence[Task], sizes: Sequence[int], slices: int, backlog: float = 0.0
) -> float:
    """T* of the module doc: the least makespan for which the canonical work, plus
    ``backlog`` slice-seconds already committed, fits ``slices`` slices. O(n log n)."""
    if not tasks:
        return backlog / slices if slices else 0.0
    floor = 0.0
    area = backlog
    events: list[tuple[float, int]] = []
    # per task: sizes by decreasing time and the least work of each suffix
    tables: list[tuple[list[float], list[float]]] = []
    for i, task in enumerate(tasks):
        pairs = sorted(((task.times[s], s * task.times[s]) for s in sizes), reverse=True)
        finite = [(t, w) for t, w in pairs if math.isfinite(t)]
        ts = [t for t, _ in finite]
        suffix = [math.inf] * (len(finite) + 1)
        for k in range(len(finite) - 1, -1, -1):
            suffix[k] = min(suffix[k + 1], finite[k][1])
        tables.append((ts, suffix))
        floor = max(floor, ts[-1])
        area += suffix[0]
        events.extend((t, i) for t in ts)
    events.sort(reverse=True)
    ptr = [0] * len(tasks)
    # Intervals of T from the top: above the largest time every size is allowed.
    high = math.inf
    k = 0
    while True:
        # all events at or above ``high`` are applied; area holds for T in [next, high)
        nxt = events[k][0] if k < len(events) else -math.inf
        a = area / slices
        if a <= max(nxt, floor):
            pass  # the whole interval [max(next, floor), high) is feasible
        elif a < high:
            return max(a, floor)
        else:
            return high
        if nxt <= floor or k >= len(events):
            return floor
        # T drops below nxt: every size taking exactly nxt is no longer allowed
        high = nxt
        while k < len(events) and events[k][0] == nxt:
            i = events[k][1]
            ts, suffix = tables[i]
            area += suffix[ptr[i] + 1] - suffix[ptr[i]]
            ptr[i] += 1
            k += 1


def ladder(
    tasks: Sequence[Task], sizes: Sequence[int], bound: float, steps: int = 8
) -> list[float]:
    """Targets from ``bound`` up to the time at which the canonical allotment is the
    least-work one, geometrically spaced (at most ``steps`` + 1 of them, >= 1 % apart)."""
    top = 0.0
    for t in tasks:
        s = canonical_size(t.times, sizes, math.inf)
        top = max(top, t.times[s])
    if not bound > 0 or top <= bound:
        return [max(bound, top)]
    ratio = max((top / bound) ** (1.0 / steps), 1.01)
    out, x = [], bound
    while x < top * (1 - 1e-12):
        out.append(x)
        x *= ratio
    out.append(top)
    return out
