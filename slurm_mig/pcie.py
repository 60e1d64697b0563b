"""PCIe contention model of Tang et al., "PCIe Bandwidth-Aware Scheduling for
Multi-Instance GPUs" (HPCAsia 2025), Eq. 1-3, with its inputs: alpha fitted from
profiling runs, PCIe demand measured through NVML, both per job kind from the
learned profiles or the job's hints.

MIG isolates compute and memory but not the PCIe link: the link is shared equally by
the instances whose jobs stream data (Section 3.1), so each of ``n`` PCIe-bound jobs
gets ``PCIe_max / n`` and slows down once alpha times its demand exceeds that share:

    Eq. 1  runtime(j, n) / base_runtime(j) = alpha_j * demand_j / (PCIe_max / n)
    Eq. 2  slowdown(j, g) = max(1, alpha_j * demand_j / (PCIe_max / PCIe_jobs(g)))
    Eq. 3  exec_time(j, g) = remain_work(j) / base_throughput(j) * slowdown(j, g)

Units: GB/s (10**9 bytes/s) for demand and PCIe_max. ``slowdown`` is stdlib-only
and called on every simulator event; statsmodels (``fit_alpha``) and pynvml
(``measure_demand``) are imported only when those are called.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .geometry import get_model

# Section 5.1: achievable PCIe 4.0 bandwidth of the paper's A100-PCIe-40GB, GB/s.
PCIE_MAX_A100 = get_model("A100-40GB").board.pcie_max_gbps  # 30.08 GB/s, measured


class PcieError(ValueError):
    """Bad input to the PCIe model or a measurement that cannot be taken; the message
    names the field and the fix."""


# ---------------------------------------------------------------------------
# Eq. 1-3 (hot path: plain floats, no allocation)


def slowdown(alpha: float, demand: float, n: int, pcie_max: float = PCIE_MAX_A100) -> float:
    """Eq. 2: ``max(1, alpha * demand / (pcie_max / n))`` for a job with PCIe
    ``demand`` (GB/s alone) among ``n`` PCIe-bound jobs on its GPU (itself included);
    1.0 for a job that is not PCIe-bound (``demand`` 0)."""
    if demand <= 0.0 or n <= 0:
        return 1.0
    s = alpha * demand * n / pcie_max
    return s if s > 1.0 else 1.0


def share(n: int, pcie_max: float = PCIE_MAX_A100) -> float:
    """Eq. 1's allocation: each of ``n`` competing instances gets ``pcie_max / n`` GB/s
    whatever its size (Section 3.1); the whole link when nobody competes."""
    return pcie_max / n if n > 1 else pcie_max


def contention(demand: float, n: int, pcie_max: float = PCIE_MAX_A100) -> float:
    """Eq. 1's regressor: ``demand / (pcie_max / n)``, demand over the equal share."""
    return demand * n / pcie_max


def remaining_time(remaining_work: float, base_throughput: float, slow: float) -> float:
    """Eq. 3: remaining execution time = remaining work / base throughput x slowdown."""
    return remaining_work / base_throughput * slow


def max_sharers(alpha: float, demand: float, threshold: float = 1.0,
                pcie_max: float = PCIE_MAX_A100) -> int:  # fmt: skip
    """The largest ``n`` (PCIe-bound jobs on the GPU, this one included) at which this
    job's Eq. 2 slowdown stays within ``threshold``: 0 if none does (a threshold
    below 1, or a job too demanding even alone), unbounded (2**30) for a job that
    is not PCIe-bound."""
    if threshold < 1.0:
        return 0
    if demand <= 0.0:
        return 1 << 30
    return max(0, math.floor(threshold * pcie_max / (alpha * demand) * (1 + 1e-12)))


def pcie_max_for(model: Any) -> float:
    """PCIe_max per GPU for a geometry model: its catalogue entry's
    `Board.pcie_max_gbps` (the paper's measured 30.08 GB/s on PCIe 4.0 parts, twice
    that from PCIe 5.0 on, our assumption; each with its source)."""
    board = getattr(model, "board", None)
    if board is None:
        raise PcieError(f"{getattr(model, 'name', model)!r}: no board facts (PCIe) for this model")
    return float(board.pcie_max_gbps)


# ---------------------------------------------------------------------------
# Fitting alpha (Eq. 1) from profiling runs


@dataclass(frozen=True)
class ProfileRun:
    """One profiling observation: ``runtime`` seconds of one copy of the job while
    ``n`` copies ran at once on one GPU, each in its own MIG instance."""

    n: int
    runtime: float


@dataclass(frozen=True)
class AlphaFit:
    """Eq. 1 fitted through the origin by OLS: ``slowdown = alpha * x`` with
    ``x = demand / (pcie_max / n)``. ``r2`` is the centered R^2 of that line on the
    points used (statsmodels' own, uncentered for a model without a constant, is
    ``r2_uncentered``); ``stderr`` and ``ci95`` are alpha's, the OLS standard error
    (``stderr_ols``) combined with that of a base runtime estimated from the n = 1
    runs (every slowdown is divided by it); ``n`` points were used, ``dropped`` left
    out as uncontended (see ``fit_alpha``)."""

    alpha: float
    stderr: float
    stderr_ols: float
    r2: float
    r2_uncentered: float
    n: int
    dropped: int
    ci95: tuple[float, float]
    demand: float
    pcie_max: float
    base_runtime: float

    def summary(self) -> str:
        lo, hi = self.ci95
        return (
            f"alpha {self.alpha:.4f} +- {self.stderr:.4f} (95% CI {lo:.4f}..{hi:.4f}), "
            f"R^2 {self.r2:.4f}, {self.n} runs used, {self.dropped} uncontended left out"
        )


def _runs(samples: Iterable[Any]) -> list[ProfileRun]:
    out = []
    for i, s in enumerate(samples):
        if isinstance(s, ProfileRun):
            r = s
        elif isinstance(s, Mapping):
            try:
                r = ProfileRun(int(s["n"]), float(s["runtime"]))
            except (KeyError, TypeError, ValueError):
                raise PcieError(
                    f"profiling sample #{i + 1}: {dict(s)!r}; give 'n' (copies at once) and "
                    "'runtime' (seconds)"
                ) from None
        else:
            try:
                n, rt = s
                r = ProfileRun(int(n), float(rt))
            except (TypeError, ValueError):
                raise PcieError(
                    f"profiling sample #{i + 1}: {s!r}; give (n, runtime) pairs"
                ) from None
        if r.n < 1:
            raise PcieError(f"profiling sample #{i + 1}: n {r.n} must be at least 1 copy")
        if not (math.isfinite(r.runtime) and r.runtime > 0):
            raise PcieError(f"profiling sample #{i + 1}: runtime {r.runtime} must be > 0 s")
        out.append(r)
    return out


def fit_alpha(
    samples: Iterable[ProfileRun | tuple[int, float] | Mapping[str, Any]],
    demand: float,
    *,
    pcie_max: float = PCIE_MAX_A100,
    base_runtime: float | None = None,
    min_slowdown: float = 1.05,
) -> AlphaFit:
    """alpha of Eq. 1 by linear regression (statsmodels OLS through the origin) of the
    observed slowdown ``runtime(n) / base_runtime`` on ``demand / (pcie_max / n)``.

    ``base_runtime`` defaults to the mean runtime of the ``n = 1`` runs. Runs whose
    slowdown is below ``min_slowdown`` are left out: there the link is not saturated,
    the ``max(1, .)`` of Eq. 2 holds the slowdown at 1, and those points carry no
    information on alpha (Fig. 2a: no loss below five Bloom560m copies). Set
    ``min_slowdown=0`` to regress on every run. PcieError when fewer than two runs
    remain, or the input is unusable."""
    if not (math.isfinite(demand) and demand > 0):
        raise PcieError(
            f"demand {demand!r} must be the job's PCIe GB/s alone (> 0); measure it with "
            "measure_demand, or the job is not PCIe-bound and has no alpha"
        )
    if not (math.isfinite(pcie_max) and pcie_max > 0):
        raise PcieError(f"pcie_max {pcie_max!r} must be a positive GB/s figure")
    runs = _runs(samples)
    base_rel_se = 0.0  # relative standard error of an estimated base runtime
    if base_runtime is None:
        alone = [r.runtime for r in runs if r.n == 1]
        if not alone:
            raise PcieError("no run with n = 1: give base_runtime, or profile one copy alone too")
        base_runtime = statistics.fmean(alone)
        if len(alone) > 1:
            base_rel_se = statistics.stdev(alone) / math.sqrt(len(alone)) / base_runtime
    if not (math.isfinite(base_runtime) and base_runtime > 0):
        raise PcieError(f"base_runtime {base_runtime!r} must be > 0 seconds")
    xs, ys = [], []
    dropped = 0
    for r in runs:
        y = r.runtime / base_runtime
        if y < min_slowdown:
            dropped += 1
            continue
        xs.append(contention(demand, r.n, pcie_max))
        ys.append(y)
    if len(xs) < 2:
        raise PcieError(
            f"only {len(xs)} contended run(s) (slowdown >= {min_slowdown}) of {len(runs)}: "
            "profile more copies at once (up to the GPU's instance count), or lower "
            "min_slowdown"
        )
    import numpy as np
    import statsmodels.api as sm

    x = np.asarray(xs, dtype=float)
    y = np.asarray(ys, dtype=float)
    res = sm.OLS(y, x).fit()
    alpha = float(res.params[0])
    from scipy.stats import t as student_t

    se_ols = float(res.bse[0])
    stderr = math.hypot(se_ols, alpha * base_rel_se)  # delta method on alpha ~ 1/base
    q = float(student_t.ppf(0.975, len(xs) - 1))
    lo, hi = alpha - q * stderr, alpha + q * stderr
    ssr = float(np.sum((y - alpha * x) ** 2))
    sst = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - ssr / sst if sst > 0 else (1.0 if ssr == 0 else 0.0)
    return AlphaFit(
        alpha=alpha,
        stderr=stderr,
        stderr_ols=se_ols,
        r2=r2,
        r2_uncentered=float(res.rsquared),
        n=len(xs),
        dropped=dropped,
        ci95=(lo, hi),
        demand=float(demand),
        pcie_max=float(pcie_max),
        base_runtime=float(base_runtime),
    )


# ---------------------------------------------------------------------------
# Measuring a job's PCIe demand through NVML

KB = 1000  # NVML reports KB/s; nvidia-smi divides by 1000 for MB/s: decimal units
GB = 10**9
NVML_SAMPLE_S = 0.02  # each nvmlDeviceGetPcieThroughput reading covers the last 20 ms
DIRECTIONS = ("max", "rx", "tx", "sum")


@dataclass(frozen=True)
class PcieDemand:
    """PCIe traffic of a GPU over a measurement: means and the peak, GB/s. RX is host
    to device (what ZeRO-Inference streams), TX device to host. ``gbps`` is the
    demand in the chosen ``direction``: ``max`` (default) takes the busier direction
    per sample, since the link is full duplex and each direction has PCIe_max."""

    gbps: float
    rx_gbps: float
    tx_gbps: float
    peak_gbps: float
    samples: int
    seconds: float
    direction: str


def _nvml_session(source: Any, gpu: int, nvml: Any):
    """(pynvml module, device handle, close, error mapper) for a backend or a handle."""
    from contextlib import ExitStack

    stack = ExitStack()
    if hasattr(source, "_handle") and hasattr(source, "nvml"):  # devices.nvml.NvmlBackend
        stack.enter_context(source)
        module = source.nvml
        handle = source._handle(gpu)

        def err(exc: Exception, what: str) -> Exception:
            return source._error(exc, what, gpu)

        return module, handle, stack, err
    if hasattr(source, "gpus") and hasattr(source, "instances"):  # another MigBackend
        raise PcieError(
            f"{type(source).__name__} has no PCIe counters; measure on a node with the "
            'nvml backend (devices.backend = "nvml") or pass an NVML device handle'
        )
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError:
            raise PcieError(
                "nvidia-ml-py is not installed (import pynvml failed); pip install "
                "nvidia-ml-py, or pass nvml= the module"
            ) from None

    def err2(exc: Exception, what: str) -> Exception:
        return PcieError(f"GPU {gpu}: {what}: NVML {exc}")

    return nvml, source, stack, err2


def measure_demand(
    source: Any,
    seconds: float = 10.0,
    interval: float = 0.1,
    *,
    gpu: int = 0,
    direction: str = "max",
    nvml: Any = None,
    sleep: Callable[[float], None] = time.sleep,
) -> PcieDemand:
    """A job's PCIe demand (Table 1's ``PCIe_demand``): sample NVML's PCIe throughput
    counters of the GPU every ``interval`` s for ``seconds`` while the job runs alone
    on it (the counters are per physical GPU, not per MIG instance).

    ``source`` is a ``devices.nvml.NvmlBackend`` (then ``gpu`` picks the GPU) or an
    NVML device handle (then ``nvml`` is the pynvml module, imported if None)."""
    if direction not in DIRECTIONS:
        raise PcieError(f"direction {direction!r}: choose one of {', '.join(DIRECTIONS)}")
    if not (math.isfinite(seconds) and seconds > 0):
        raise PcieError(f"seconds {seconds!r} must be > 0")
    if not (math.isfinite(interval) and interval >= NVML_SAMPLE_S):
        raise PcieError(
            f"interval {interval!r} must be at least {NVML_SAMPLE_S} s (NVML's own window)"
        )
    count = max(1, round(seconds / interval))
    module, handle, stack, err = _nvml_session(source, gpu, nvml)
    tx_c = module.NVML_PCIE_UTIL_TX_BYTES
    rx_c = module.NVML_PCIE_UTIL_RX_BYTES
    rx: list[float] = []
    tx: list[float] = []
    with stack:
        for i in range(count):
            try:
                t = module.nvmlDeviceGetPcieThroughput(handle, tx_c)
                r = module.nvmlDeviceGetPcieThroughput(handle, rx_c)
            except module.NVMLError as exc:
                raise err(exc, "read the PCIe throughput counters") from None
            tx.append(float(t) * KB / GB)
            rx.append(float(r) * KB / GB)
            if i + 1 < count:
                sleep(interval)
    pick = {
        "max": lambda a, b: a if a > b else b,
        "rx": lambda a, b: a,
        "tx": lambda a, b: b,
        "sum": lambda a, b: a + b,
    }[direction]
    per = [pick(a, b) for a, b in zip(rx, tx)]
    return PcieDemand(
        gbps=statistics.fmean(per),
        rx_gbps=statistics.fmean(rx),
        tx_gbps=statistics.fmean(tx),
        peak_gbps=max(per),
        samples=count,
        seconds=count * interval,
        direction=direction,
    )


# ---------------------------------------------------------------------------
# Per-job demand and alpha: learned profiles first, then the job's hints


@dataclass(frozen=True)
class PcieProfile:
    """What the model needs of one job: PCIe demand (GB/s alone, 0 = not PCIe-bound)
    and alpha, with where each came from (``learned``, ``hint`` or ``default``)."""

    demand: float = 0.0
    alpha: float = 1.0
    demand_source: str = "default"
    alpha_source: str = "default"

    @property
    def bound(self) -> bool:
        return self.demand > 0.0

    def slowdown(self, n: int, pcie_max: float = PCIE_MAX_A100) -> float:
        return slowdown(self.alpha, self.demand, n, pcie_max)


def job_pcie(
    hints: Any = None,
    store: Any = None,
    key: str | None = None,
    model: str | None = None,
) -> PcieProfile:
    """A job's demand and alpha: per field, what the profile store learned for its kind
    ``key`` on GPU ``model`` (measured beats claimed, as for runtimes), else its hints
    (``pcie=5.7``, ``alpha=1.25``, ``hints.Hints``), else not PCIe-bound and
    alpha 1."""
    demand, alpha = 0.0, 1.0
    d_src = a_src = "default"
    if store is not None and key and model:
        learned_d = store.pcie_demand(key, model)
        learned_a = store.pcie_alpha(key, model)
        if learned_d is not None:
            demand, d_src = float(learned_d), "learned"
        if learned_a is not None:
            alpha, a_src = float(learned_a), "learned"
    if hints is not None:
        if d_src == "default" and getattr(hints, "pcie", None) is not None:
            demand, d_src = float(hints.pcie), "hint"
        if a_src == "default" and getattr(hints, "alpha", None) is not None:
            alpha, a_src = float(hints.alpha), "hint"
    return PcieProfile(demand, alpha, d_src, a_src)


def predicted_slowdowns(
    jobs: Sequence[tuple[float, float]], pcie_max: float = PCIE_MAX_A100
) -> list[float]:
    """Eq. 2 for every job of a GPU at once; ``jobs`` are (alpha, demand) pairs and
    ``n`` counts those with demand > 0."""
    n = sum(1 for _, d in jobs if d > 0.0)
    return [slowdown(a, d, n, pcie_max) for a, d in jobs]
