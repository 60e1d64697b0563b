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


Small batches (fewer than ``NUMPY_TASKS`` tasks) use `Staircase`, pure Python: numpy's
import alone (60-90 ms) was most of a cold 1,000-task plan on one GPU. Both ways give
the same allotments and the same T* (tested).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence

from ..job import Job

__all__ = [
    "Allotments",
    "Staircase",
    "allotments",
    "canonical_allotment",
    "fill_rounds",
    "ladder",
    "moldable_bound",
]

_TIE = 1e-9
NUMPY_TASKS = 4096  # from this many tasks the numpy forms (their import is paid once)


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


def canonical_allotment(tasks: Sequence[Job], sizes: Sequence[int], target: float) -> list[int]:
    """`canonical_size` of every task for ``target``."""
    return [canonical_size(t.times, sizes, target) for t in tasks]


class Allotments:
    """Canonical allotments of one batch for many targets, vectorised (numpy): the
    ladder of a batch of 10,000 tasks evaluates ten of them. Same rule as
    `canonical_size` (an exact tie in work goes to the smaller size)."""

    def __init__(self, tasks: Sequence[Job], sizes: Sequence[int]) -> None:
        import numpy as np

        self.tasks = tasks
        self._bounds: dict[tuple[int, float], float] = {}
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

    def top(self) -> float:
        """The longest time of the least-work allotment (where `ladder` ends)."""
        sizes = self.at(math.inf)
        return max((t.times[s] for t, s in zip(self.tasks, sizes)), default=0.0)

    def bound(self, slices: int, backlog: float = 0.0) -> float:
        """T* (`moldable_bound`)."""
        key = (slices, backlog)
        if key not in self._bounds:
            self._bounds[key] = _moldable_bound_np(self.tasks, self.sizes.tolist(), slices, backlog)
        return self._bounds[key]


class Staircase:
    """Canonical allotments and T* of one batch in pure Python (module doc).

    First, per task, its least work, its least-work size (``pick``) and the time from
    which that size is its canonical one (``stable``: the longest time among the sizes
    that tie with the least work). Where every target asked for lies above all of these
    (one GPU: the area decides), that is all it needs. Else, per task, its sizes in order
    of time (fastest first): as the target grows past a size's time that size becomes
    allowed; ``steps[i]`` holds the times at which the task's canonical size changes,
    that size, and the least allowed work from there (built once, when first needed)."""

    def __init__(self, tasks: Sequence[Job], sizes: Sequence[int]) -> None:
        self.tasks = tasks
        self.sizes = tuple(sizes)
        self._bounds: dict[tuple[int, float], float] = {}
        self._steps: list[tuple[list[float], list[int], list[float]]] | None = None
        self._fastest: list[int] | None = None
        self.least: list[float] = []
        self.pick: list[int] = []
        self.pick_time: list[float] = []
        stable = 0.0
        for t in tasks:
            times = t.times
            low = math.inf
            for s in sizes:
                w = s * times[s]
                if w < low:
                    low = w
            cap = low * (1 + _TIE)
            pick, pick_t = sizes[0], math.inf
            first = True
            for s in sizes:
                ts = times[s]
                if s * ts <= cap:
                    if first:
                        pick, pick_t, first = s, ts, False
                    if ts > stable:
                        stable = ts
            self.least.append(low)
            self.pick.append(pick)
            self.pick_time.append(pick_t)
        self.stable = stable  # from this target on, every task's canonical size is ``pick``

    @property
    def fastest(self) -> list[int]:
        """Each task's fastest size (the smaller one on a tie)."""
        if self._fastest is None:
            self._fastest = [
                min(((t.times[s], s) for s in self.sizes), default=(0, self.sizes[0]))[1]
                for t in self.tasks
            ]
        return self._fastest

    @property
    def steps(self) -> list[tuple[list[float], list[int], list[float]]]:
        if self._steps is None:
            self._steps = [self._task_steps(t) for t in self.tasks]
        return self._steps

    def _task_steps(self, task: Job) -> tuple[list[float], list[int], list[float]]:
        times = task.times
        opts = sorted((times[s], s) for s in self.sizes if times[s] < math.inf)
        at: list[float] = []
        size: list[int] = []
        least: list[float] = []
        low, pick = math.inf, 0
        last = len(opts) - 1
        for k, (tk, sk) in enumerate(opts):
            w = sk * tk
            if w < low:
                if low <= w * (1 + _TIE):  # an earlier size may tie with the new least
                    cap = w * (1 + _TIE)
                    pick = min(s for tj, s in opts[: k + 1] if s * tj <= cap)
                else:
                    pick = sk
                low = w
            elif w <= low * (1 + _TIE) and sk < pick:
                pick = sk
            if k < last and opts[k + 1][0] == tk:
                continue  # the next size is allowed from the same time on
            if size and size[-1] == pick and least[-1] == low:
                continue
            at.append(tk)
            size.append(pick)
            least.append(low)
        return at, size, least

    def at(self, target: float) -> list[int]:
        """The canonical allotment for ``target``, as sizes (`canonical_size`'s rule)."""
        if target >= self.stable:
            return list(self.pick)
        out = []
        for (at, size, _), fast in zip(self.steps, self.fastest):
            k = bisect_right(at, target) - 1
            out.append(size[k] if k >= 0 else fast)
        return out

    def top(self) -> float:
        """The longest time of the least-work allotment (where `ladder` ends)."""
        return max(self.pick_time, default=0.0)

    def bound(self, slices: int, backlog: float = 0.0) -> float:
        """T* (`moldable_bound`), by one sweep over the steps in order of time."""
        key = (slices, backlog)
        if key not in self._bounds:
            self._bounds[key] = self._bound(slices, backlog)
        return self._bounds[key]

    def _bound(self, slices: int, backlog: float) -> float:
        if not self.tasks:
            return backlog / slices if slices else 0.0
        area = (math.fsum(self.least) + backlog) / slices
        if area >= self.stable:  # the least-work allotment fits by ``area`` (class doc)
            return area
        floor = max((at[0] for at, _, _ in self.steps if at), default=math.inf)
        if floor == math.inf:
            return math.inf
        works: list[float] = []
        events: list[tuple[float, int, float]] = []
        for i, (at, _, least) in enumerate(self.steps):
            k = bisect_right(at, floor) - 1
            works.append(least[k])
            events.extend((at[j], i, least[j]) for j in range(k + 1, len(at)))
        events.sort()
        total = math.fsum(works)  # kept up to date by differences; exact where it decides
        x, e = floor, 0
        while True:
            nxt = events[e][0] if e < len(events) else math.inf
            # on [x, nxt) the area is constant: T* is here when the area fits below nxt
            if (total + backlog) / slices < nxt:
                area = (math.fsum(works) + backlog) / slices
                if area < nxt:
                    return max(area, x)
            while e < len(events) and events[e][0] == nxt:
                _, i, w = events[e]
                total += w - works[i]
                works[i] = w
                e += 1
            x = nxt


_LAST: list[tuple[tuple[Job, ...], tuple[int, ...], Allotments | Staircase]] = []


def allotments(tasks: Sequence[Job], sizes: Sequence[int]) -> Allotments | Staircase:
    """The table of canonical allotments for the batch: numpy's on large batches. The
    last table built for a tuple of tasks is kept: the planner and the plan's bound
    (``planner.bounds.makespan_bounds``) of one batch share it."""
    key = tuple(sizes)
    if _LAST and _LAST[0][0] is tasks and _LAST[0][1] == key:
        return _LAST[0][2]
    table = Allotments(tasks, sizes) if len(tasks) >= NUMPY_TASKS else Staircase(tasks, sizes)
    if isinstance(tasks, tuple):
        _LAST[:] = [(tasks, key, table)]
    return table


def moldable_bound(
    tasks: Sequence[Job], sizes: Sequence[int], slices: int, backlog: float = 0.0
) -> float:
    """T* of the module doc: the least makespan for which the canonical work, plus
    ``backlog`` slice-seconds already committed, fits ``slices`` slices. O(n log n):
    `Staircase.bound` below ``NUMPY_TASKS`` tasks, else vectorised (numpy)."""
    if len(tasks) < NUMPY_TASKS:
        return Staircase(tasks, sizes).bound(slices, backlog)
    return _moldable_bound_np(tasks, sizes, slices, backlog)


def _moldable_bound_np(
    tasks: Sequence[Job], sizes: Sequence[int], slices: int, backlog: float = 0.0
) -> float:
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
    tasks: Sequence[Job],
    sizes: Sequence[int],
    bound: float,
    steps: int = 8,
    top: float | None = None,
) -> list[float]:
    """Targets from ``bound`` up to the time at which the canonical allotment is the
    least-work one (``top``, computed when not given), geometrically spaced (at most
    ``steps`` + 1 of them, >= 1 % apart)."""
    if top is None:
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


def fill_rounds(
    tasks: Sequence[Job],
    alloc: Sequence[int],
    sizes: Sequence[int],
    nodes: dict[int, int],
    target: float,
) -> list[int]:
    """``alloc`` with the tasks one size cannot run in whole rounds by ``target`` moved up
    a size: where a size's ``nodes`` (instances of it at once) times the tasks one of
    them runs by ``target`` (at their median time) hold fewer than the tasks given that
    size, the excess, least added work first, goes to the next size (one that runs it
    by ``target``). So a batch of tasks that all want one small slice, a few too many for
    one round, fills the larger instances instead of a second round (issue 38)."""
    out = list(alloc)
    order = sorted(sizes)
    for k, s in enumerate(order[:-1]):
        mine = [i for i, a in enumerate(out) if a == s]
        if not mine or not nodes.get(s):
            continue
        times = sorted(tasks[i].times[s] for i in mine)
        per_node = max(1, int(target // times[len(times) // 2]))
        excess = len(mine) - nodes[s] * per_node
        if excess <= 0:
            continue
        up = order[k + 1]
        movable = [i for i in mine if tasks[i].times[up] <= target]
        movable.sort(key=lambda i: (up * tasks[i].times[up] - s * tasks[i].times[s], i))
        for i in movable[:excess]:
            out[i] = up
    return out
