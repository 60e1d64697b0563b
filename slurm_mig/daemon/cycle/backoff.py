"""What the daemon remembers between cycles of the jobs Slurm would not start: released
jobs it kept pending (a limit, licenses, a constraint, not started in time), each held
again and left unplanned for a delay that doubles with each time (`Backoff`), and the
array throttles learned from tasks Slurm kept pending for JobArrayTaskLimit."""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass

__all__ = ["BACKOFF_BASE", "BACKOFF_MAX", "THROTTLE_TTL", "Backoff", "backoff_delay"]

BACKOFF_BASE = 60.0  # seconds the first time a job is held again
BACKOFF_MAX = 960.0  # at most (the 5th time and later)
# a learned throttle is forgotten this long after Slurm last showed it (its owner may
# have raised it with `scontrol update ArrayTaskThrottle`): planned again, learned again
THROTTLE_TTL = 600.0


def backoff_delay(strikes: int, base: float = BACKOFF_BASE, most: float = BACKOFF_MAX) -> float:
    """Seconds a job held again for the ``strikes``-th time waits to be planned again."""
    return min(base * 2.0 ** min(max(strikes - 1, 0), 32), most)


@dataclass
class _Entry:
    reason: str
    strikes: int
    until: float


class Backoff:
    """Released jobs Slurm kept pending, by job id: the reason, how many times, until
    when it is not planned; and learned array throttles, by array id. Only jobs squeue
    still shows pending are kept (the memory is bounded by the queue)."""

    def __init__(self, base: float = BACKOFF_BASE, most: float = BACKOFF_MAX) -> None:
        self.base, self.most = base, most
        self._jobs: dict[str, _Entry] = {}
        self._throttles: dict[str, tuple[int, float]] = {}  # array -> (tasks, seen)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._jobs

    def waiting(self, now: float) -> dict[str, str]:
        """The jobs not to plan at ``now``: job id -> why (reason, times, until when)."""
        return {
            jid: f"{e.reason}; held again {e.strikes}x, planned again from {_clock(e.until)}"
            for jid, e in self._jobs.items()
            if now < e.until
        }

    def throttles(self, now: float) -> dict[str, int]:
        """The learned throttles still valid at ``now``: array id -> tasks at once."""
        return {a: n for a, (n, seen) in self._throttles.items() if now - seen < THROTTLE_TTL}

    def update(
        self,
        held: Mapping[str, str],
        throttles: Mapping[str, int],
        pending: Collection[str],
        now: float,
    ) -> None:
        """After a cycle: ``held`` (job id -> reason) were held again; ``throttles``
        were learned or confirmed; ``pending`` are the jobs squeue shows pending (the
        others, started or gone, are forgotten, and so are arrays with none of them)."""
        self._jobs = {j: e for j, e in self._jobs.items() if j in pending}
        for jid, reason in held.items():
            old = self._jobs.get(jid)
            strikes = (old.strikes if old is not None else 0) + 1
            self._jobs[jid] = _Entry(
                reason, strikes, now + backoff_delay(strikes, self.base, self.most)
            )
        arrays = {j.partition("_")[0] for j in pending if "_" in j}
        self._throttles = {
            a: v for a, v in self._throttles.items() if a in arrays and now - v[1] < THROTTLE_TTL
        }
        for array, n in throttles.items():
            self._throttles[array] = (max(1, int(n)), now)


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))
