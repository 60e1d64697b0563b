"""Overruns of ``time=`` hints: a hint is evidence, not a promise.

A run *overruns* when it lasts longer than ``OVERRUN_FACTOR`` x its job's ``time=``
hint + ``OVERRUN_GRACE_S`` (the grace covers the Prolog and instance creation, which
Slurm counts in the run). Nothing enforces ``time=`` (Slurm's time limit is what
kills a job), so an overrun is held against the hints of its owner:

- recorded per owner (the job's uid, `slurm_mig.owner`) and kind, in the runtime
  store's ``overruns`` table (schema 5), for every run that ended past its hint,
  whether it succeeded, failed or was cancelled; a run still going past its hint
  counts from the cycle that sees it so (`live_overruns`), before it ends;
- it counts against *all* of that owner's hints, whatever the kind (a new ``key=``
  per job would shed a per-kind record), for ``OVERRUN_MEMORY_S`` (7 days) after the
  run ended; older records are dropped as new ones are written;
- while it counts, that owner's ``time=`` hints are read as absent and the site-wide
  prior is not read for them: a job is planned from what its owner's runs of its kind
  took (`runtimes.estimate_for_job`, no longer bounded by the hint), else from its
  Slurm time limit, else ``default_runtime``; and never below the longest overrun of
  its owner's kind (capped by the time limit: Slurm ends a run there). The planner
  daemon's `daemon.estimates.distrusted_times` does this.

One owner's overruns change only that owner's estimates. The daemon reads the records
once per cycle (`OverrunRecords.overruns_since`), whatever the queue. Stdlib only.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "OVERRUN_FACTOR",
    "OVERRUN_GRACE_S",
    "OVERRUN_MEMORY_S",
    "SCHEMA_SQL",
    "GuardedOverruns",
    "OverrunRecords",
    "live_overruns",
    "merge",
    "overran",
]

OVERRUN_FACTOR = 1.5  # a run may last this many times its time= hint ...
OVERRUN_GRACE_S = 10.0  # ... plus this (Prolog, instance creation) before it overruns
OVERRUN_MEMORY_S = 7 * 86400.0  # how long an overrun counts against its owner's hints
MAX_KEY, MAX_OWNER = 128, 64  # runtimes.MAX_KEY, MAX_OWNER (runtimes imports this module)

# Schema 5 of the runtime store (slurm_mig.runtimes.SCHEMA)
SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS overruns (
    job_id   TEXT    NOT NULL,
    restart  INTEGER NOT NULL,
    owner    TEXT    NOT NULL,
    key      TEXT    NOT NULL,
    seconds  REAL    NOT NULL,
    hint     REAL    NOT NULL,
    finished REAL    NOT NULL,
    PRIMARY KEY (job_id, restart)
);
CREATE INDEX IF NOT EXISTS overruns_by_time ON overruns (finished)
"""

Overruns = Mapping[str, Mapping[str, float]]  # owner -> kind -> longest overrun (s)


def overran(seconds: float | None, hint: float | None) -> bool:
    """Whether a run of ``seconds`` overran its ``time=`` ``hint`` (module doc)."""
    if seconds is None or hint is None or not (math.isfinite(hint) and hint > 0):
        return False
    return math.isfinite(seconds) and seconds > OVERRUN_FACTOR * hint + OVERRUN_GRACE_S


class OverrunRecords:
    """`runtimes.RuntimeStore`'s overrun records (it provides ``_connect``)."""

    def record_overrun(
        self,
        key: str,
        job_id: str,
        restart: int,
        seconds: float,
        hint: float,
        finished: float,
        *,
        owner: str,
    ) -> bool:
        """Store that ``owner``'s run (job_id, restart) of kind ``key`` lasted
        ``seconds`` against its ``hint``; False (nothing written) when it did not
        overrun, has no owner, or is recorded already. Drops records older than
        `OVERRUN_MEMORY_S` before ``finished``."""
        if not (isinstance(key, str) and 0 < len(key) <= MAX_KEY and key.isprintable()):
            raise ValueError(f"the job kind key must be 1 to {MAX_KEY} printable characters")
        if not (isinstance(owner, str) and len(owner) <= MAX_OWNER and owner.isprintable()):
            raise ValueError(f"the owner must be at most {MAX_OWNER} printable characters")
        if not owner or not overran(seconds, hint) or not math.isfinite(finished):
            return False
        with self._connect(write=True) as db:
            db.execute("DELETE FROM overruns WHERE finished < ?", (finished - OVERRUN_MEMORY_S,))
            cur = db.execute(
                "INSERT OR IGNORE INTO overruns (job_id, restart, owner, key, seconds, hint, "
                "finished) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (str(job_id), int(restart), owner, key, float(seconds), float(hint), finished),
            )
            return cur.rowcount == 1

    def overruns_since(self, since: float) -> dict[str, dict[str, float]]:
        """The longest overrun per owner and kind of the runs that ended at or after
        ``since``."""
        with self._connect() as db:
            rows = db.execute(
                "SELECT owner, key, max(seconds) FROM overruns WHERE finished >= ? "
                "GROUP BY owner, key",
                (float(since),),
            ).fetchall()
        out: dict[str, dict[str, float]] = {}
        for owner, key, seconds in rows:
            out.setdefault(str(owner), {})[str(key)] = float(seconds)
        return out


class GuardedOverruns:
    """`runtimes.GuardedStore`'s overrun methods: reads answer "none" while the store
    is unreadable (hints are then trusted, as when nothing is learned)."""

    def overruns_since(self, since: float) -> dict[str, dict[str, float]]:
        return self._read(lambda: self.store.overruns_since(since), {})

    def record_overrun(self, *args: Any, owner: str | None = None, **kwargs: Any) -> bool:
        """`OverrunRecords.record_overrun`; a run of no owner is not stored (False).
        Tried even while reads are off (overruns are rare): a StoreError is raised."""
        if not owner:
            return False
        try:
            return self.store.record_overrun(*args, owner=owner, **kwargs)
        except RuntimeError as exc:  # StoreError (runtimes imports this module)
            self._failed(exc)
            raise


def live_overruns(
    runs: Iterable[tuple[str, str, float | None, float | None, float | None]], now: float
) -> dict[str, dict[str, float]]:
    """Overruns that squeue shows: of (owner, kind, hint, start, end) of jobs that
    started (``end`` None: still running, counted to ``now``), those past their hint."""
    out: dict[str, dict[str, float]] = {}
    for owner, key, hint, start, end in runs:
        if not owner or not start:
            continue
        seconds = (end or now) - start
        if overran(seconds, hint):
            kinds = out.setdefault(owner, {})
            kinds[key] = max(kinds.get(key, 0.0), seconds)
    return out


def merge(a: Overruns, b: Overruns) -> dict[str, dict[str, float]]:
    """Both records, the longest overrun per owner and kind."""
    out = {owner: dict(kinds) for owner, kinds in a.items()}
    for owner, kinds in b.items():
        mine = out.setdefault(owner, {})
        for key, seconds in kinds.items():
            mine[key] = max(mine.get(key, 0.0), seconds)
    return out
