"""SMART-MIG's lower bounds on the energy and the tardiness of a workload (Section V).

Both linearise the jobs (Definition 1: a job's least slice-seconds, usually its 1g time,
spread over the slices it is given; no schedule of the real jobs can use less energy or
finish later, Lemmas 1-2) and run them on ``m`` whole GPUs (7g machines on the A100):

* energy (Eq. 7): ``P7 * sum q + P0 * (m * (C* - t0) - sum q)`` with ``q_j`` a job's
  linearised time on the whole GPU, ``t0`` the first arrival (the simulator's energy
  starts there) and ``C*`` the least preemptive makespan on ``m`` identical machines
  with release dates (P|pmtn, r_j|Cmax), computed exactly in O(n log n): by time
  reversal it is the smallest ``C`` for which Horn's flow network (jobs x intervals) is
  feasible, and the cuts of that network reduce to ``C >= r_j + q_j`` and, for every job
  ``i`` in order of release (latest first), ``m C >= r_i + q_i + (the work released
  after i) + (the m - 1 largest r_j + q_j released before i)`` - the staircase of
  Labetoulle, Lawler, Lenstra and Rinnooy Kan, checked against a linear program in the
  tests;
* tardiness: the paper's time-indexed MIP (slot width ``eps``) solved by HiGHS through
  ``scipy.optimize.milp`` within a time budget; when the budget ends first, the solver's
  proven dual bound is the bound. Release times round down and completions to the slot
  they fall in, so the MIP only ever under-estimates (by at most ``2 n eps`` in total).
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..geometry import GpuModel
from ..power import power_curve
from .api import SimJob

if TYPE_CHECKING:
    import numpy as np

MAX_SLOT_VARS = 400_000  # jobs x slots: beyond it HiGHS needs GBs and hours

__all__ = [
    "EnergyBound",
    "TardinessBound",
    "energy_bound",
    "linearised",
    "min_makespan",
    "tardiness_bound",
]


def linearised(job: SimJob, model: GpuModel) -> float:
    """Seconds the job's linearised counterpart takes on the whole GPU: its least
    slice-seconds over the model's compute slices."""
    work = min(s * t for s, t in job.times.items() if math.isfinite(t))
    return work / model.compute_slices


def min_makespan(release: Sequence[float], work: Sequence[float], machines: int) -> float:
    """The least makespan of jobs (release time, processing time) on ``machines``
    identical machines with preemption, each job on one machine at a time (module doc)."""
    if machines < 1:
        raise ValueError("machines must be at least 1")
    n = len(work)
    if n == 0:
        return 0.0
    order = sorted(range(n), key=lambda j: -release[j])  # latest release first
    best = max(release[j] + work[j] for j in range(n))
    if machines == 1:
        later = 0.0
        for j in order:
            later += work[j]
            best = max(best, release[j] + later)
        return best
    # suffix (earlier releases): the m - 1 largest r + q, kept in a min-heap
    k = machines - 1
    top_sum = [0.0] * n
    heap: list[float] = []
    total = 0.0
    for pos in range(n - 1, -1, -1):
        top_sum[pos] = total if len(heap) == k else -math.inf
        v = release[order[pos]] + work[order[pos]]
        if len(heap) < k:
            heapq.heappush(heap, v)
            total += v
        elif v > heap[0]:
            total += v - heapq.heapreplace(heap, v)
    prefix = 0.0
    for pos, j in enumerate(order):
        if top_sum[pos] > -math.inf:
            best = max(best, (prefix + work[j] + release[j] + top_sum[pos]) / machines)
        prefix += work[j]
    return best


@dataclass(frozen=True)
class EnergyBound:
    """Eq. 7's bound and its parts (joules, seconds)."""

    energy_j: float
    makespan: float  # C* - t0
    active_j: float
    idle_j: float


def energy_bound(jobs: Sequence[SimJob], gpus: int, model: GpuModel) -> EnergyBound:
    """The energy no schedule of ``jobs`` on ``gpus`` GPUs can beat (module doc)."""
    if not jobs:
        return EnergyBound(0.0, 0.0, 0.0, 0.0)
    curve = power_curve(model)
    q = [linearised(j, model) for j in jobs]
    r = [j.arrival for j in jobs]
    t0 = min(r)
    c = min_makespan(r, q, gpus)
    busy = math.fsum(q)
    active = curve[-1] * busy
    idle = curve[0] * (gpus * (c - t0) - busy)
    return EnergyBound(active + idle, c - t0, active, idle)


@dataclass(frozen=True)
class TardinessBound:
    """The MIP's bound on the mean tardiness (s) and how it was obtained."""

    tardiness_mean: float
    eps: float  # slot width, seconds
    slots: int
    optimal: bool  # the MIP was solved to optimality (else: its dual bound)
    gap: float  # relative MIP gap when it stopped
    seconds: float  # solver time
    time_budget: float
    status: str


@dataclass(frozen=True)
class _Mip:
    """The linearised jobs in slots: times relative to the first arrival, ``eps``-wide slots."""

    p: list[float]  # linearised time on a whole GPU
    r: list[float]  # release
    d: list[float]  # deadline
    eps: float
    tau: int  # slots 0..tau
    first: list[int]  # each job's release slot


def _mip_instance(
    jobs: Sequence[SimJob], model: GpuModel, eps: float | None, max_slots: int
) -> _Mip:
    """The jobs (all with deadlines) in slots; ValueError for a bad or too large ``eps``."""
    m = len(jobs)
    t0 = min(j.arrival for j in jobs)
    p = [linearised(j, model) for j in jobs]
    r = [j.arrival - t0 for j in jobs]
    d = [j.deadline - t0 for j in jobs]  # type: ignore[operator]
    horizon = max(r) + math.fsum(p)
    if eps is None:
        eps = max(1.0, horizon / max_slots)
    if not (eps > 0 and math.isfinite(eps)):
        raise ValueError(f"eps {eps} must be a positive number of seconds")
    tau = int(horizon // eps) + 1  # slots 0..tau
    if tau * m > MAX_SLOT_VARS:
        raise ValueError(
            f"the tardiness MIP would have {tau * m} slot variables per kind (at most "
            f"{MAX_SLOT_VARS}); give fewer jobs (--jobs), fewer slots (--max-slots) or a "
            "larger --eps, or skip it with --no-tardiness"
        )
    return _Mip(p, r, d, eps, tau, [int(ri // eps) for ri in r])


@dataclass
class _Vars:
    """The MIP's variables: per job z (work done by the end of each slot from its release
    slot on, the running sum of the paper's x, which keeps the matrix O(n tau)) and y
    (done), then one tardiness T per job."""

    zs: list[np.ndarray]
    ys: list[np.ndarray]
    tvar: np.ndarray
    count: int


def _variables(mip: _Mip) -> _Vars:
    """Number the z, y and T variables of every job."""
    import numpy as np

    zs, ys = [], []
    nvar = 0
    for j in range(len(mip.p)):
        k = mip.tau + 1 - mip.first[j]
        zs.append(np.arange(nvar, nvar + k))
        nvar += k
        ys.append(np.arange(nvar, nvar + k))
        nvar += k
    tvar = np.arange(nvar, nvar + len(mip.p))
    return _Vars(zs, ys, tvar, nvar + len(mip.p))


def _variable_bounds(mip: _Mip, v: _Vars) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(objective, lower, upper, integrality) of the variables: minimise the sum of T."""
    import numpy as np

    c = np.zeros(v.count)
    c[v.tvar] = 1.0
    lo = np.zeros(v.count)
    hi = np.full(v.count, np.inf)
    integrality = np.zeros(v.count)
    for j, pj in enumerate(mip.p):
        hi[v.zs[j]] = pj  # (1) no more work than the job has
        hi[v.ys[j]] = 1.0
        integrality[v.ys[j]] = 1
        # done no earlier than a whole GPU from the release slot allows
        early = max(0, math.ceil(pj / mip.eps) - 1)
        hi[v.ys[j][: min(early, len(v.ys[j]))]] = 0.0
    return c, lo, hi, integrality


class _Rows:
    """The constraint matrix in COO blocks of rows, each with its lower and upper bounds."""

    def __init__(self) -> None:
        self.rows: list[np.ndarray] = []
        self.cols: list[np.ndarray] = []
        self.vals: list[np.ndarray] = []
        self.lb: list[np.ndarray] = []
        self.ub: list[np.ndarray] = []
        self.count = 0

    def block(self, r_idx: Any, c_idx: Any, v: Any, low: Any, high: Any, count: int) -> None:
        """Append ``count`` rows: entries (r_idx, c_idx, v), r_idx counted from 0 here."""
        import numpy as np

        self.rows.append(np.asarray(r_idx) + self.count)
        self.cols.append(np.asarray(c_idx))
        self.vals.append(np.asarray(v, dtype=float))
        self.lb.append(np.broadcast_to(np.asarray(low, dtype=float), (count,)))
        self.ub.append(np.broadcast_to(np.asarray(high, dtype=float), (count,)))
        self.count += count

    def constraint(self, nvar: int) -> Any:
        """The blocks as one scipy LinearConstraint over ``nvar`` variables."""
        import numpy as np
        from scipy.optimize import LinearConstraint
        from scipy.sparse import coo_matrix

        rows_a, cols_a = np.concatenate(self.rows), np.concatenate(self.cols)
        vals_a = np.concatenate(self.vals)
        lb_a, ub_a = np.concatenate(self.lb), np.concatenate(self.ub)
        a = coo_matrix((vals_a, (rows_a, cols_a)), shape=(self.count, nvar)).tocsr()
        return LinearConstraint(a, lb_a, ub_a)


def _job_rows(rows: _Rows, mip: _Mip, v: _Vars, j: int) -> None:
    """Constraints (3), (5), (6)-(7) of job ``j``."""
    import numpy as np

    z, y, eps = v.zs[j], v.ys[j], mip.eps
    k = len(z)
    i = np.arange(k)
    # (3) 0 <= x_t = z_t - z_{t-1} <= eps (z_{-1} = 0)
    rows.block(np.r_[i, i[1:]], np.r_[z, z[:-1]], np.r_[np.ones(k), -np.ones(k - 1)], 0.0, eps, k)
    # (5) y non-decreasing
    if k > 1:
        rows.block(
            np.r_[i[:-1], i[:-1]],
            np.r_[y[:-1], y[1:]],
            np.r_[np.ones(k - 1), -np.ones(k - 1)],
            -np.inf,
            0.0,
            k - 1,
        )
    # (5) done only once all work is in: p y_t - z_t <= 0
    rows.block(np.r_[i, i], np.r_[y, z], np.r_[np.full(k, mip.p[j]), -np.ones(k)], -np.inf, 0.0, k)
    # (6)-(7) T_j + eps * sum y >= eps * (first + slots) - d_j
    rows.block(
        np.zeros(k + 1, dtype=int),
        np.r_[v.tvar[j], y],
        np.r_[1.0, np.full(k, eps)],
        eps * (mip.first[j] + k) - mip.d[j],
        np.inf,
        1,
    )


def _capacity_rows(rows: _Rows, mip: _Mip, v: _Vars, gpus: int) -> None:
    """Constraint (2), capacity per slot: sum_j (z_{j,s} - z_{j,s-1}) <= m eps."""
    import numpy as np

    cap_r, cap_c, cap_v = [], [], []
    for j, z in enumerate(v.zs):
        k = len(z)
        s_idx = mip.first[j] + np.arange(k)
        cap_r += [s_idx, s_idx[1:]]
        cap_c += [z, z[:-1]]
        cap_v += [np.ones(k), -np.ones(k - 1)]
    rows.block(
        np.concatenate(cap_r),
        np.concatenate(cap_c),
        np.concatenate(cap_v),
        -np.inf,
        gpus * mip.eps,
        mip.tau + 1,
    )


def _solve(mip: _Mip, gpus: int, time_budget: float) -> tuple[Any, float]:
    """Build the MIP and run HiGHS on it within ``time_budget``: (result, solver seconds)."""
    from scipy.optimize import Bounds, milp

    v = _variables(mip)
    c, lo, hi, integrality = _variable_bounds(mip, v)
    rows = _Rows()
    for j in range(len(mip.p)):
        _job_rows(rows, mip, v, j)
    _capacity_rows(rows, mip, v, gpus)
    constraints = rows.constraint(v.count)
    t_start = time.perf_counter()
    res = milp(
        c,
        constraints=constraints,
        integrality=integrality,
        bounds=Bounds(lo, hi),
        options={"time_limit": float(time_budget), "disp": False},
    )
    return res, time.perf_counter() - t_start


def _proven(res: Any) -> tuple[float, bool, float]:
    """(total tardiness proven, solved to optimality, relative gap) of a MIP result."""
    optimal = res.status == 0
    dual = getattr(res, "mip_dual_bound", None)
    if optimal and res.fun is not None:
        total = float(res.fun)
    elif dual is not None and math.isfinite(dual):
        total = float(dual)
    else:
        total = 0.0  # nothing proven: the trivial bound
    gap = float(getattr(res, "mip_gap", math.nan) or 0.0) if optimal else math.nan
    if not optimal and res.fun is not None and dual is not None and res.fun > 0:
        gap = (float(res.fun) - float(dual)) / float(res.fun)
    return total, optimal, gap


def _require_solver() -> None:
    """Import numpy and scipy's MILP up front: without them the bound fails first, as before."""
    import numpy  # noqa: F401
    from scipy.optimize import milp  # noqa: F401
    from scipy.sparse import coo_matrix  # noqa: F401


def tardiness_bound(
    jobs: Sequence[SimJob],
    gpus: int,
    model: GpuModel,
    *,
    eps: float | None = None,
    max_slots: int = 200,
    time_budget: float = 60.0,
) -> TardinessBound:
    """The paper's time-indexed MIP on the linearised jobs (module doc). ``eps``: slot
    width (default: the horizon over ``max_slots``, at least 1 s)."""
    _require_solver()
    n = len(jobs)
    if n == 0:
        return TardinessBound(0.0, 0.0, 0, True, 0.0, 0.0, time_budget, "no jobs")
    if any(j.deadline is None for j in jobs):
        jobs = [j for j in jobs if j.deadline is not None]
        if not jobs:
            return TardinessBound(0.0, 0.0, 0, True, 0.0, 0.0, time_budget, "no deadlines")
    mip = _mip_instance(jobs, model, eps, max_slots)
    res, took = _solve(mip, gpus, time_budget)
    total, optimal, gap = _proven(res)
    # the bound is over all jobs, those without a deadline adding 0
    return TardinessBound(
        (total if total > 1e-6 else 0.0) / n,
        mip.eps,
        mip.tau + 1,
        optimal,
        gap,
        took,
        float(time_budget),
        str(res.message),
    )
