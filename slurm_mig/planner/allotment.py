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
    """The least-work size on which a task takes at most ``target`` (the smallest of
    those within a relative 1e-9 of the least work: float ties), else its fastest."""
    least = math.inf
    fastest, fastest_t = sizes[0], math.inf
    for s in sizes:
        t = times[s]  # type: ignore[index]
        if t < fastest_t:
            fastest, fastest_t = s, t
        if t <= target and s * t < least:
            least = s * t
    if least == math.inf:
        return fastest
    for s in sizes:
        t = times[s]  # type: ignore[index]
        if t <= target and s * t <= least * (1 + _TIE):
            return s
    return fastest  # pragma: no cover - the loop above found ``least``


def canonical_allotment(tasks: Sequence[Task], sizes: Sequence[int], target: float) -> list[int]:
    """`canonical_size` of every task for ``target``."""
    return [canonical_size(t.times, sizes, target) for t in tasks]


class Allotments:
    """Canonical allotments of one batch for many targets, vectorised (numpy): the
    ladder of a batch of 10,000 tasks evaluates ten of them. Same rule as
    `canonical_size` (an exact tie in work goes to the smaller size)."""

    def __init__(self, tasks: Sequence[Task], sizes: Sequence[int]) -> None:
        import numpy as np

        self.sizes = np.asarray(sizes)
        self.times = np.array([[t.times[s] for s in sizes] for t in tasks], dtype=float)
        self.work = self.times * self.sizes
        self.fastest = np.argmin(self.times, axis=1)

    def at(self, target: float) -> list[int]:
        """The canonical allotment for ``target``, as sizes."""
        import numpy as np

        ok = self.times <= target
        work = np.where(ok, self.work, np.inf)
        least = work.min(axis=1, keepdims=True)
        pick = np.argmax(work <= least * (1 + _TIE), axis=1)  # the first within the tie
        pick = np.where(ok.any(axis=1), pick, self.fastest)
        return self.sizes[pick].tolist()


def moldable_bound(
    tasks: Sequence[Task], sizes: Sequence[int], slices: int, backlog: float = 0.0
) -> float:
    """T* of the module doc: the least makespan for which the canonical work, plus
    ``backlog`` slice-seconds already committed, fits ``slices`` slices. O(n log n),
    vectorised (numpy)."""
    import numpy as np

    if not tasks:
        return backlog / slices if slices else 0.0
    times = np.array([[t.times[s] for s in sizes] for t in tasks], dtype=float)
    work = times * np.asarray(sizes, dtype=float)
    floor = float(np.min(times, axis=1).max())  # every task needs some size within T
    cands = np.unique(times[np.isfinite(times)])
    cands = cands[cands >= floor]

    def area(target: float) -> float:
        w = np.where(times <= target, work, np.inf).min(axis=1)
        return (float(w.sum()) + backlog) / slices

    # area() never grows with T: find the first candidate T (a task's time) that is
    # feasible; T* lies between it and the candidate below it (or is the floor).
    lo, hi = 0, len(cands) - 1
    if area(cands[hi]) > cands[hi]:  # even the largest time: T* is the area above it
        return area(cands[hi])
    while lo < hi:
        mid = (lo + hi) // 2
        if area(cands[mid]) <= cands[mid]:
            hi = mid
        else:
            lo = mid + 1
    first = float(cands[lo])
    if lo == 0:
        return first
    below = float(cands[lo - 1])
    a = area(below)  # the area on (below, first): the allotments of T = below hold there
    return max(a, below) if a < first else first


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
