"""Policy ``adaptive``: each waiting job at the size and GPU of its earliest completion
on the MIG timeline, sized by load, with backfilling into holes before reserved slices.

Why: a static layout (or the smallest runnable size) leaves slices idle at light load,
and a batch planner makes new arrivals wait for the previous batch. Here every
decision walks the waiting jobs in Slurm's priority order (below: within a priority,
shortest first) over a timeline of each GPU's memory slices (when each frees, from the
running jobs' predicted ends) and, per job, picks the (GPU, placement, size) that
minimises

    finish + penalty,   penalty = weight x N x (s x t(s) - min area) / compute slices

where ``finish`` counts creating the instance (Table 1) and waiting for busy slices,
``min area`` is the job's fewest slice-seconds over its sizes, and ``N`` estimates the
jobs the extra slice-seconds would delay: those waiting behind it plus those expected
to arrive while it runs (the recent arrival rate), each scaled by how busy the cluster
is. At light load ``N`` is near 0 and a job takes the size that ends it first (larger
slices while slices would idle); when jobs queue it takes its most efficient size.

A job whose best option starts now is placed; one whose best option starts later
*reserves* those slices for that interval, and later jobs may use reserved slices only
if they end before the reservation begins (conservative backfilling on the MIG
timeline). Reservations live for one decision: every snapshot is planned afresh, so
the policy decides from the snapshot alone (the arrival rate too, where the snapshot
does not say what arrived since the last one).

A batch (nothing running, more waiting than the GPUs hold at once) is what FAR packs
best: it goes to FAR (``far`` with the same objective, through the driver, whose gate
then starts its jobs as their slices free); jobs that arrive while its plan stands take
the slices the plan leaves free, or its holes before a planned job begins. A plan is
only as good as its runtimes: once a run ends off its plan or runs past it (the
snapshot's events, which the daemon and the simulator send), or a GPU idles with
nothing planned on it while planned jobs still wait for other GPUs, the runtimes proved
wrong, and the plan is dropped for the list rule (MISO-100 batch, learned runtimes:
1.58 -> 1.09 x the best static layout's mean JCT; unchanged with true runtimes).
Option ``batches=false`` turns batches off.

Jobs of one priority are taken shortest first (the runtime at the most efficient
size), aged by their wait so that long jobs are not passed for ever; Slurm's priority
always comes first. Objectives (option ``objective``): ``balanced`` (default: weight 3,
aging 1 s per s), ``jct`` (aging 0: shortest first), ``makespan`` (weight 10, arrival
order: efficiency first). Options ``weight``, ``aging`` (-1: arrival order) and
``future`` (arrivals during a typical runtime counted as waiting, default 0.3) override
them. ``upsize=S`` (default off) moves a restartable job that has run S seconds and past
its estimate onto a whole GPU that would idle, when nothing waits (`planner.upsize`).
``lookahead`` bounds the jobs that may reserve slices per decision (default one
per GPU, at least 16; four times as many are looked at for a start now), so that a
decision's work grows with the GPUs, not with the queue.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from ..geometry import GpuModel, mask_tables, slot_mask
from .baseline import busy_instance, start_ops
from .decisions import Decisions, Move, Op
from .driver import BatchSettings, project, step
from .gpu_timeline import (
    GpuLine,
    earliest_start,
    job_options,
    occupy,
    ready_start,
    slot_table,
    start_bound,
    timelines,
)
from .online import mask_cost
from .registry import Policy, UnknownPolicy, get_policy
from .snapshot import (
    ClusterSnapshot,
    Gpu,
    Instance,
    Job,
    efficient_size,
    efficient_time,
    sizes_of,
)
from .upsize import next_upsize, reserve_gpus, upsizes

__all__ = ["OBJECTIVES", "Adaptive"]

INF = math.inf
# per objective: the penalty's weight, and the order's aging (seconds of runtime a
# second of waiting is worth; None: arrival order). Measured: benchmarks/value.py.
OBJECTIVES: dict[str, tuple[float, float | None]] = {
    "balanced": (3.0, 1.0),
    "jct": (3.0, 0.0),
    "makespan": (10.0, None),
}
FUTURE = 0.3  # arrivals expected during a typical runtime that count as waiting
MAX_NUMBER = 1e6
RATE_WINDOW = 64  # arrivals the rate estimate looks back over
_EPS = 1e-9


class _Recent:
    """The recent arrivals: their times and their runtimes at their most efficient
    size, for the arrival rate and a typical runtime. Kept from snapshot to snapshot
    where the snapshot says what arrived; read from the jobs it holds otherwise (the
    daemon's snapshots do not say)."""

    def __init__(self) -> None:
        self.times: deque[float] = deque(maxlen=RATE_WINDOW)
        self.runtimes: deque[float] = deque(maxlen=RATE_WINDOW)

    def update(self, snap: ClusterSnapshot) -> None:
        if snap.arrived is None:
            seen = [*snap.pending.values(), *(r.job for r in snap.running.values())]
            arrivals = heapq.nlargest(RATE_WINDOW, seen, key=lambda j: (j.arrival, j.id))[::-1]
            self.times.clear()
            self.runtimes.clear()
        else:
            arrivals = snap.arrived
        for job in arrivals:
            self.times.append(job.arrival)
            self.runtimes.append(efficient_time(job, snap.model))

    def rate(self, now: float) -> float:
        """Jobs per second (0 until two have been seen)."""
        a = self.times
        if len(a) < 2:
            return 0.0
        span = max(now, max(a)) - min(a)
        return (len(a) - 1) / span if span > 0 else 0.0

    def typical(self) -> float:
        """The median runtime (0 when none is known)."""
        known = sorted(t for t in self.runtimes if t < INF)
        return known[len(known) // 2] if known else 0.0


@dataclass(slots=True)
class _Pass:
    """One decision's state across the jobs it looks at: the GPUs' timelines, the load
    (busy slices, and those the jobs still to place need), and per option the GPUs
    ranked by the earliest start they allow (computed lazily, dropped on a start)."""

    model: GpuModel
    now: float
    lines: list[GpuLine]
    fit: tuple[frozenset[int], ...]  # per memory mask: the sizes with room there
    capacity: int  # compute slices of all GPUs
    busy: int
    demand: int
    horizon: float  # a typical runtime: arrivals during it count as waiting
    order: dict[object, list[tuple[float, int]]] = field(default_factory=dict)


def _looked_at(
    pending: Mapping[str, Job], model: GpuModel, scan: int, aging: float | None
) -> list[Job]:
    """The first ``scan`` waiting jobs in the order they are taken: Slurm's (the
    mapping's) without aging, else shortest first within a priority, aged."""
    if aging is None:  # Slurm's order (the mapping's), as far as we look
        return list(itertools.islice(pending.values(), scan))
    # shortest first within a priority, aged: the key is the runtime less ``aging`` x
    # the wait, so that long jobs are not passed for ever
    return heapq.nsmallest(
        scan,
        pending.values(),
        key=lambda j: (-j.priority, efficient_time(j, model) + aging * j.arrival),
    )


def _choose(
    st: _Pass, options: list[tuple], area: float, pressure: float, spread: float, later: bool
) -> tuple | None:
    """The job's best (score, -busy, frag, GPU, entry, start, size, seconds, now?,
    slice-seconds) over its options: starts now, and (``later``) reservations."""
    best = None
    for okey, s, t, used, entries, lattice in options:
        pen = (pressure + spread * min(t, st.horizon)) * (used - area)
        best = _best_now(st, best, (s, t, used, entries, lattice), pen)
        if later:
            best = _best_later(st, best, okey, (s, t, used, entries), pen)
    return best


def _best_now(st: _Pass, best: tuple | None, option: tuple, pen: float) -> tuple | None:
    """``best`` or better among this option's slots free now: GPUs with room for it,
    the busiest first (best fit), then the least fragmentation."""
    s, t, used, entries, lattice = option
    now, fit = st.now, st.fit
    for line in st.lines:
        if lattice and s not in fit[line.busy_now]:
            continue
        for entry in entries:
            if entry[1] & line.busy_now:
                continue
            start = earliest_start(line, entry, t, now)
            score = start + t + pen
            if best is not None and score > best[0]:
                continue
            frag = mask_cost(line.busy_now | entry[1], line.comp_now | entry[5], st.model)
            key = (score, -line.busy_slices, frag, line.index)
            if best is None or key < best[:4]:
                # placed now unless a reservation pushed it back
                soon = start <= ready_start(line, entry, now) + _EPS
                best = (*key, entry, start, s, t, soon, used)
    return best


def _best_later(
    st: _Pass, best: tuple | None, okey: object, option: tuple, pen: float
) -> tuple | None:
    """``best`` or a better later start of this option: branch and bound over GPUs by
    the earliest start they allow (ranked once per option until a job starts)."""
    s, t, used, entries = option
    now, lines = st.now, st.lines
    ranked = st.order.get(okey)
    if ranked is None:
        ranked = st.order[okey] = sorted((start_bound(ln, entries, now), ln.index) for ln in lines)
    for lb, k in ranked:
        if best is not None and lb + t + pen >= best[0]:
            break
        line = lines[k]
        for entry in entries:
            start = earliest_start(line, entry, t, now)
            if start == INF:
                continue
            key = (start + t + pen, -line.busy_slices, 1.0, k)
            if best is None or key < best[:4]:
                best = (*key, entry, start, s, t, False, used)
    return best


class Adaptive:
    """The ``adaptive`` online policy (see the module doc). Counters: ``placed``,
    ``enlarged`` (jobs placed on more slices than their most efficient size), ``moved``
    (upsized jobs)."""

    name = "adaptive"
    kind = "online"

    def __init__(
        self,
        objective: str = "balanced",
        *,
        weight: float | None = None,
        future: float = FUTURE,
        aging: float | None = None,
        lookahead: int | None = None,
        batches: bool = True,
        upsize: float | None = None,
    ) -> None:
        self.batches = bool(batches)
        # seconds a restartable job runs before it may move up (`planner.upsize`); off
        self.upsize = None if upsize is None else _number("upsize", upsize, allow_off=True)
        self.moved = 0
        self.batches_planned = 0
        self._far_policy: Policy | None = None
        self.objective = _choice("objective", objective, OBJECTIVES)
        w, a = OBJECTIVES[objective]
        self.weight = w if weight is None else _number("weight", weight)
        self.future = _number("future", future)
        self.aging = a if aging is None else _number("aging", aging, allow_off=True)
        if lookahead is not None and (
            isinstance(lookahead, bool) or not float(lookahead).is_integer() or lookahead < 1
        ):
            raise UnknownPolicy(
                f"policy 'adaptive': lookahead {lookahead!r} must be a whole number >= 1"
            )
        self.lookahead = None if lookahead is None else int(lookahead)
        self.placed = self.enlarged = 0
        self._recent = _Recent()

    # -- decide --------------------------------------------------------------

    def decide(self, snap: ClusterSnapshot) -> Decisions:
        got = self._decide(snap)
        if self.upsize is None:
            return got
        reserve = reserve_gpus(snap, self._recent.rate(snap.now), self._recent.typical())
        moves = upsizes(snap, got.ops, self.upsize, reserve)
        self.moved += sum(isinstance(op, Move) for op in moves)
        due = next_upsize(snap, self.upsize)
        wake = min((t for t in (got.wake_at, due) if t is not None), default=None)
        return replace(got, ops=(*got.ops, *moves), wake_at=wake)

    def _decide(self, snap: ClusterSnapshot) -> Decisions:
        self._recent.update(snap)
        if snap.planned and (_off_plan(snap) or _idle_beside_plans(snap)):
            snap = replace(snap, planned=MappingProxyType({}))  # the list rule takes over
        if not (snap.planned or (self.batches and self._is_batch(snap))):
            return Decisions(tuple(self._ops(snap, snap.gpus)))
        # a batch on idle GPUs, or its standing plans: FAR plans it and the driver's
        # gate starts its jobs; the other jobs take what the plan leaves free
        batch = snap.planned or snap.pending
        jobs = {j: snap.pending[j] for j in batch if j in snap.pending}
        got = step(
            replace(snap, pending=MappingProxyType(jobs), arrived=None),
            self._far(),
            BatchSettings(window=0.0, eager=True, reorder=0),
        )
        self.batches_planned += int(got.stats.get("batches", 0))
        taken = set(got.planned) | {p.job for p in got.places}
        rest = {j: job for j, job in snap.pending.items() if j not in taken}
        if not rest:
            return got
        # the standing plans as reservations: the others may use their slices before
        # they begin (holes), never past it
        reserved: dict[int, list[tuple[int, float, float]]] = {}
        model = snap.model
        for gpu in project(snap, got.planned.values()):
            for inst in gpu.instances:
                if inst.job in got.planned:
                    begin = inst.ready_at - model.create_time(inst.slot.size)
                    end = INF if inst.busy_until is None else inst.busy_until
                    reserved.setdefault(gpu.index, []).append((slot_mask(inst.slot), begin, end))
        view = list(snap.gpus)
        whole = slot_table(model).by_size[max(model.planner_sizes)][0][0]
        for k in {op.gpu for op in got.ops}:  # this decision's operations there first
            view[k] = Gpu(k, (Instance(whole, "", busy_until=INF),))
        rest_snap = replace(snap, pending=MappingProxyType(rest), arrived=None)
        return replace(got, ops=(*got.ops, *self._ops(rest_snap, view, reserved)))

    def _is_batch(self, snap: ClusterSnapshot) -> bool:
        """Nothing running and more waiting than the GPUs hold at once (at the jobs'
        most efficient sizes): a batch, which FAR packs better than a list does."""
        if snap.running or any(g.busy_mask for g in snap.gpus):
            return False
        capacity = snap.model.compute_slices * len(snap.gpus)
        need = 0
        for job in snap.pending.values():
            need += efficient_size(job, snap.model)
            if need > capacity:
                return True
        return False

    def _far(self) -> Policy:
        if self._far_policy is None:
            self._far_policy = get_policy("far", objective=self.objective)
        return self._far_policy

    def _ops(
        self,
        snap: ClusterSnapshot,
        view: Sequence[Gpu],
        reserved: Mapping[int, list[tuple[int, float, float]]] | None = None,
    ) -> Iterator[Op]:
        """Starts now by the list rule (module doc). ``view``: the GPUs as this rule
        may use them (``snap.gpus``, or busy where a batch acts this decision);
        ``reserved``: per GPU, (memory mask, begin, end) that standing plans hold."""
        rate, horizon = self._recent.rate(snap.now), self._recent.typical()
        model = snap.model
        gpus: Sequence[Gpu] = snap.gpus
        pending = snap.pending
        if not pending or not gpus:
            return
        fit = mask_tables(model).fit_sizes
        if not any(fit[g.busy_mask] for g in view):
            return  # nothing can start now; reservations would be dropped anyway
        reserving = self.lookahead or max(16, len(gpus))
        waiting = len(pending)
        jobs = _looked_at(pending, model, 4 * reserving, self.aging)
        # the load: slices busy plus those the jobs looked at need at their most
        # efficient sizes (a queue on idle GPUs is load too)
        need = {j.id: efficient_size(j, model) for j in jobs}
        st = _Pass(
            model,
            snap.now,
            timelines(snap, view, reserved),
            fit,
            model.compute_slices * len(gpus),
            sum(g.busy_slices for g in view),
            sum(need.values()),
            horizon,
        )
        for pos, job in enumerate(jobs):
            if not any(fit[ln.busy_now] for ln in st.lines):
                return
            options = job_options(job, model, sizes_of(job, model))
            if not options:
                continue
            area = min(o[3] for o in options)
            pressure, spread = self._pressure(st, waiting - pos - 1, rate)
            best = _choose(st, options, area, pressure, spread, pos < reserving)
            if best is not None:
                yield from self._act(st, job, best, area, need[job.id])

    def _pressure(self, st: _Pass, behind: int, rate: float) -> tuple[float, float]:
        """The penalty's factors (module doc): per extra slice-second, for the ``behind``
        jobs waiting after this one, and per second of runtime, for those arriving."""
        util = min(1.0, (st.busy + st.demand) / st.capacity)
        pressure = self.weight * behind * util / st.capacity
        spread = self.weight * self.future * rate * util / st.capacity
        return pressure, spread

    def _act(self, st: _Pass, job: Job, best: tuple, area: float, need: int) -> Iterator[Op]:
        """Start ``job`` now at its best option (its operations, the timeline and the
        counters updated), or reserve that option's slices when it starts later."""
        _, _, _, k, entry, start, s, t, soon, used = best
        line = st.lines[k]
        if not soon:
            line.reserved.append((entry[1], start, start + t))
            return
        slot = entry[0]
        yield from start_ops(line.gpu, job.id, slot, st.model, st.now)
        line.gpu = line.gpu.placed(busy_instance(slot, job))
        self.placed += 1
        if used > area + _EPS:
            self.enlarged += 1
        occupy(line, entry, start + t, s, st.now, st.model)
        st.busy += s
        st.demand -= need
        st.order.clear()  # the GPUs' bounds only grow: re-rank lazily


def _off_plan(snap: ClusterSnapshot) -> bool:
    """Something happened since the standing plans were made (a run ended off its plan
    or runs past it, a node changed): their runtimes or their GPUs are not as planned."""
    oldest = min(p.issued for p in snap.planned.values())
    return any(e.at > oldest for e in snap.events)


def _idle_beside_plans(snap: ClusterSnapshot) -> bool:
    """A GPU idle now that no standing plan uses while planned jobs wait for others:
    the plan's runtimes were wrong, and keeping to it would leave that GPU idle."""
    bound = {p.gpu for p in snap.planned.values()}
    return any(g.busy_mask == 0 and g.index not in bound for g in snap.gpus)


def _choice(what: str, value: str, choices) -> str:
    if value not in choices:
        raise UnknownPolicy(
            f"policy 'adaptive': {what} {value!r} must be one of {', '.join(choices)}"
        )
    return value


def _number(what: str, value, allow_off: bool = False) -> float | None:
    """A number in 0..MAX_NUMBER (``allow_off``: a negative one means off: None)."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        x = math.nan
    if isinstance(value, bool) or math.isnan(x) or x > MAX_NUMBER:
        raise UnknownPolicy(f"policy 'adaptive': {what} {value!r} must be a number in 0..1e6")
    if x < 0:
        if allow_off:
            return None
        raise UnknownPolicy(f"policy 'adaptive': {what} {value!r} must be a number in 0..1e6")
    return x


POLICIES = {"adaptive": Adaptive}
