"""What a simulation measured: per-job times, energy, reconfigurations, and the
cluster's busy compute slices over time; the summary the CLI prints."""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass, field


@dataclass
class SimResult:
    """One policy's run over one workload. Times in seconds, energy in joules."""

    policy: str
    model: str
    nodes: int
    gpus: int
    ids: list[str]
    kinds: list[str]
    arrival: list[float]
    start: list[float]  # first start
    finish: list[float]
    exec_s: list[float]  # seconds each job held an instance while running
    energy_j: float
    idle_energy_j: float  # idle power x GPUs x horizon: the floor of energy_j
    t0: float  # first arrival
    t_end: float  # last finish
    creates: int
    destroys: int
    migrations: int
    events: int
    decisions: int
    wall_s: float
    slices_total: int
    util_t: array = field(default_factory=lambda: array("d"))
    util_busy: array = field(default_factory=lambda: array("d"))  # busy slices from util_t[i]
    deadline: list[float | None] = field(default_factory=list)  # absolute; None: none given
    # per job at its first start: the seconds the policy planned it to run there, and
    # what it runs there alone (what the policy knew, apart from what happened)
    planned_s: list[float] = field(default_factory=list)
    alone_s: list[float] = field(default_factory=list)

    @property
    def jobs(self) -> int:
        return len(self.ids)

    @property
    def jct(self) -> list[float]:
        return [f - a for f, a in zip(self.finish, self.arrival)]

    @property
    def wait(self) -> list[float]:
        return [s - a for s, a in zip(self.start, self.arrival)]

    @property
    def tardiness(self) -> list[float]:
        """Per job, seconds it finished after its deadline (0: on time or none given)."""
        if not self.deadline:
            return [0.0] * len(self.finish)
        return [0.0 if d is None else max(0.0, f - d) for f, d in zip(self.finish, self.deadline)]

    @property
    def tardiness_mean(self) -> float:
        """SMART-MIG's average tardiness: the sum over every job / the number of jobs."""
        n = len(self.finish)
        return math.fsum(self.tardiness) / n if n else 0.0

    @property
    def makespan(self) -> float:
        return self.t_end - self.t0

    @property
    def utilization(self) -> float:
        """Time-averaged share of the cluster's compute slices running a job."""
        span = self.makespan
        if span <= 0 or not self.util_t:
            return 0.0
        area = 0.0
        t, b = self.util_t, self.util_busy
        for i in range(len(t)):
            end = t[i + 1] if i + 1 < len(t) else self.t_end
            area += b[i] * (end - t[i])
        return area / (self.slices_total * span)

    def estimate_error(self) -> tuple[float | None, float | None]:
        """How far the seconds the policy planned jobs with were from their true seconds
        alone on the size each started on: the median factor (1.0: exact) and the share
        of jobs within a factor of 2; None where no job started."""
        off = sorted(
            max(p / a, a / p)
            for p, a in zip(self.planned_s, self.alone_s)
            if 0 < p < math.inf and 0 < a < math.inf
        )
        if not off:
            return None, None
        return _quantile(off, 0.5), sum(x <= 2.0 for x in off) / len(off)

    @property
    def event_rate(self) -> float:
        return self.events / self.wall_s if self.wall_s > 0 else math.inf

    def summary(self) -> dict:
        """The JSON of one policy: the issue's five fields first, then the rest."""
        jct = self.jct
        n = len(jct)
        ordered = sorted(jct)
        jct_sum = math.fsum(jct)
        waits = sorted(self.wait)
        off, within = self.estimate_error()
        return {
            "jct_sum": jct_sum,
            "jct_mean": jct_sum / n if n else 0.0,
            "wait_mean": math.fsum(self.wait) / n if n else 0.0,
            "makespan": self.makespan,
            "energy_j": self.energy_j,
            "tardiness_mean": self.tardiness_mean,
            "jct_p50": _quantile(ordered, 0.5),
            "jct_p95": _quantile(ordered, 0.95),
            "wait_p95": _quantile(waits, 0.95),
            "wait_p99": _quantile(waits, 0.99),
            "wait_max": waits[-1] if waits else 0.0,
            "exec_mean": math.fsum(self.exec_s) / n if n else 0.0,
            "utilization": self.utilization,
            "estimate_off_p50": off,
            "estimate_within_2x": within,
            "jobs": n,
            "creates": self.creates,
            "destroys": self.destroys,
            "migrations": self.migrations,
            "events": self.events,
            "wall_s": self.wall_s,
            "events_per_s": self.event_rate,
        }

    def by_kind(self) -> dict[str, dict[str, float]]:
        """Mean JCT, wait and execution time per job kind (e.g. Bloom560m)."""
        groups: dict[str, list[int]] = {}
        for i, k in enumerate(self.kinds):
            groups.setdefault(k or "-", []).append(i)
        out = {}
        for k, idx in sorted(groups.items()):
            m = len(idx)
            out[k] = {
                "jobs": m,
                "jct_mean": math.fsum(self.finish[i] - self.arrival[i] for i in idx) / m,
                "wait_mean": math.fsum(self.start[i] - self.arrival[i] for i in idx) / m,
                "exec_mean": math.fsum(self.exec_s[i] for i in idx) / m,
            }
        return out


def et_weight(results: list[SimResult]) -> float:
    """SMART-MIG's ``a = t / (2 e)`` over a set of runs (mean tardiness over mean
    energy), the weight that makes them comparable by ET (Eq. 4); 0 when no job was late."""
    if not results:
        return 0.0
    e = math.fsum(r.energy_j for r in results) / len(results)
    t = math.fsum(r.tardiness_mean for r in results) / len(results)
    return t / (2.0 * e) if e > 0 else 0.0


def et_value(energy_j: float, tardiness_mean: float, a: float) -> float:
    """Eq. 4 for one run: (a e + t) / (a + 1)."""
    return (a * energy_j + tardiness_mean) / (a + 1.0)


def _quantile(ordered: list[float], q: float) -> float:
    if not ordered:
        return 0.0
    k = min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))
    return ordered[k]
