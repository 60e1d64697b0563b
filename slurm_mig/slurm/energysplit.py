"""Measured energy of a run: the GPU's total-energy counter split across its MIG runs.

NVML gives one energy counter per physical GPU (``nvmlDeviceGetTotalEnergyConsumption``,
millijoules since the driver loaded), none per MIG instance. The split rule: every
Prolog and Epilog on a GPU reads the counter under the GPU's lock, and the energy since
the previous reading on that GPU goes to the runs that were on it in between, each in
proportion to its compute slices (``slices / sum of the slices of the GPU's runs``).
The set of runs on a GPU changes only at a Prolog or an Epilog, so between two readings
it is constant and the split is exact in time: a run's measured energy is the sum of
its shares of every interval from its Prolog to its Epilog, and the shares of the runs
sum to the GPU's energy while any run was on it. Energy while no run was on the GPU (an
idle or kept instance) goes to no run. The error is the rule's own: NVML cannot tell
which instance drew the power, so a busy 1g run beside an idle 3g one is charged by
slices, not by what each drew (at most the whole interval's energy moved between the
runs of that interval), and the GPU's idle power is shared by slices too. A run whose
interval the ledger did not see whole (started before the counter was read, a counter
that went back or jumped, a hook that ran without the GPU's lock) gets no measured
figure: accounting then shows the modelled one.

State: one small ledger per GPU (the last reading, when, and what each run on the GPU
has accrued: at most one entry per instance). Pure functions; the hooks read and write
the ledger (`nodestate.NodeState.energy_ledger`). Stdlib only: the hooks import it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

COUNTER_MAX = 2**64 - 1  # NVML's counter is an unsigned long long of millijoules
SLACK_S = 1.0  # the counter advances in steps: a short interval may see one step's worth
MAX_RUNS = 64  # entries a ledger keeps (a GPU has at most 7 compute slices)


@dataclass(frozen=True)
class Ledger:
    """One GPU's energy ledger: the last counter reading, when it was taken, and the
    millijoules each run on the GPU (``run_key``) has accrued since its Prolog."""

    mj: int
    t: float
    runs: Mapping[str, float] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"mj": self.mj, "t": self.t, "runs": dict(self.runs)}

    @classmethod
    def from_json(cls, data: dict) -> Ledger:
        mj = reading(data["mj"])
        t = float(data["t"])
        runs = {str(k): float(v) for k, v in dict(data["runs"]).items()}
        if mj is None or not math.isfinite(t) or len(runs) > MAX_RUNS:
            raise ValueError("not an energy ledger")
        if not all(math.isfinite(v) and v >= 0 for v in runs.values()):
            raise ValueError("an energy ledger's runs must be finite and >= 0")
        return cls(mj, t, runs)


def run_key(job_id: str, restart: int) -> str:
    """The ledger's name of one run of a job."""
    return f"{job_id}.{int(restart)}"


def reading(value: object) -> int | None:
    """``value`` as a counter reading (an int in 0..2**64-1), else None."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 0 <= value <= COUNTER_MAX else None


def bound_mj(seconds: float, max_watts: float) -> float:
    """The most a GPU of ``max_watts`` board power can plausibly draw in ``seconds``:
    twice its board power over the window, plus one second of slack for the counter's
    steps, in millijoules."""
    return 2.0 * max_watts * (max(0.0, seconds) + SLACK_S) * 1000.0


def check_delta(delta_mj: int, seconds: float, max_watts: float) -> str | None:
    """Why a counter difference of ``delta_mj`` over ``seconds`` is no energy, or None."""
    if delta_mj < 0:
        return f"the GPU's energy counter went back by {-delta_mj} mJ (driver reloaded?)"
    if delta_mj > bound_mj(seconds, max_watts):
        return (
            f"the GPU's energy counter jumped by {delta_mj / 1000:.0f} J in {seconds:.1f} s, "
            f"more than twice its {max_watts:.0f} W board power"
        )
    return None


def advance(
    ledger: Ledger | None, now_mj: int, now: float, busy: Mapping[str, int], max_watts: float
) -> tuple[Ledger, str | None]:
    """The ledger after the reading ``now_mj`` at ``now``: the energy since its last
    reading split among ``busy`` (run key -> compute slices: the runs on the GPU since
    then) by slices; a run the ledger has no entry for counts in the sum but accrues
    nothing. Entries of runs no longer on the GPU are dropped. A counter that went back
    or jumped starts the ledger afresh (every run on the GPU then gets the model): the
    problem is returned for a warning."""
    if ledger is None:
        return Ledger(now_mj, now), None
    problem = check_delta(now_mj - ledger.mj, now - ledger.t, max_watts)
    if problem is not None:
        return Ledger(now_mj, now), problem
    delta = now_mj - ledger.mj
    total = sum(s for s in busy.values() if s > 0)
    runs = {k: v for k, v in ledger.runs.items() if busy.get(k, 0) > 0}
    if total > 0:
        for k in runs:
            runs[k] += delta * busy[k] / total
    return Ledger(now_mj, now, runs), None


def start(ledger: Ledger, key: str) -> Ledger:
    """The ledger with run ``key`` starting now (its Prolog, after `advance`)."""
    runs = dict(ledger.runs)
    runs[key] = 0.0
    if len(runs) > MAX_RUNS:  # a bound only: live runs are dropped by `advance` first
        runs = dict(list(runs.items())[-MAX_RUNS:])
    return Ledger(ledger.mj, ledger.t, runs)


def finish(ledger: Ledger, key: str) -> tuple[Ledger, float | None]:
    """(the ledger without run ``key``, the millijoules it accrued or None when the
    ledger did not see its whole run); after `advance` at its Epilog."""
    runs = dict(ledger.runs)
    accrued = runs.pop(key, None)
    return Ledger(ledger.mj, ledger.t, runs), accrued


def measured_joules(
    accrued_mj: float | None,
    start_mj: int | None,
    end_mj: int,
    seconds: float,
    max_watts: float,
) -> tuple[float | None, str | None]:
    """(the run's measured energy in joules, or None; why not, for a warning, or None
    when there simply was no counter). The run's own window is checked too: the counter
    at its Epilog must not be below the one at its Prolog nor above it by more than
    twice the board power over the window, and its share never more than the window's
    energy."""
    if accrued_mj is None or start_mj is None:
        return None, None
    problem = check_delta(end_mj - start_mj, seconds, max_watts)
    if problem is not None:
        return None, problem
    share = min(max(0.0, accrued_mj), float(end_mj - start_mj))
    return round(share / 1000.0, 3), None
