"""Learned job runtimes and memory needs, and the runtime estimate the planner uses.

``RuntimeStore`` keeps, per job kind (the hint ``key``, else the job name), the
runtimes of completed jobs on each GPU model and instance size, and the peak memory
the ``mig-run`` wrapper saw. ``estimate_times`` turns that evidence into the
seconds-per-size table FAR plans with. Stdlib only (sqlite3, statistics, math).

The runtime model is Amdahl's law on compute slices:

    t(s) = a + b / s        a = serial part (s), b = parallel part (slice-seconds)

- sizes with observations keep the median of what was measured there;
- with two or more measured sizes, a and b are the least-squares fit (a, b >= 0) to
  the medians, one point per size;
- with one measured size s0 (median t0), the prior serial fraction f fixes the shape:
  t(s) = T1 * (f + (1 - f) / s) with T1 = t0 / (f + (1 - f) / s0);
- with none, the fallback runtime (the ``time=`` hint, else the time limit, else
  ``default_runtime``) on the smallest size whose memory holds the job, other sizes by
  the same prior (`estimate_for_job` weighs a limit against the runs: `limitevidence`);
- a size whose instance memory is below the job's memory need is ``inf`` (cannot run).

Whose runs count (`estimate_for_job`): runs are kept per owner (the job's uid) and
kind, so one user's jobs never change another user's plans. Runs stored without an
owner (before schema 3, or seeded by the site) are the site-wide prior: used only for
a job whose owner has no runs of the kind and no ``time=`` hint. A job's ``time=``
hint bounds what its owner's runs may make of it: each size's estimate stays within
[hint / `HINT_FLOOR`, hint] on the hint's curve (see `bounded_by_hint`), unless an
overrun of the owner's counts against their hints (`slurm_mig.overruns`).
"""

from __future__ import annotations

import logging
import math
import os
import sqlite3
import stat
import statistics
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from . import storeschema
from .geometry import GpuModel
from .limitevidence import with_limit
from .overruns import SCHEMA_SQL as _V5
from .overruns import GuardedOverruns, OverrunRecords
from .owner import names_to_uids
from .safefs import make_private

# Schema versions (``PRAGMA user_version``; ``storeschema`` migrates and refuses newer):
# 0: a new, empty file; 1: runtimes and memory; 2: the pcie and pcie_alpha tables (PCIe
# model, slurm_mig.pcie); 3: runs and memory needs have an owner (the job's user; '' for
# older records: the site-wide prior); 4: the owner is the job's uid, ``uid:<n>``
# (`slurm_mig.owner`: the nodes' memory reports and the planner's jobs agree on it);
# 5: the overruns table (runs past their time= hint, slurm_mig.overruns).
SCHEMA_VERSION = 5
BUSY_TIMEOUT_S = 30.0
DAEMON_BUSY_TIMEOUT_S = 0.25  # the planner daemon waits no longer for a locked store
STATE_DIR_MODE = 0o750  # root's state: learned runtimes, the planner's status file
PRIOR = ""  # the owner of the site-wide prior: records without a user (see the module doc)
MAX_KEY = 128  # characters of a job kind (hint keys: 64; mig-run's need file: 128)
MAX_OWNER = 64  # characters of an owner (a user name)
HINT_FLOOR = 4.0  # learned runs plan a job with a time= hint at no less than hint / this

_V1 = """
CREATE TABLE IF NOT EXISTS runtimes (
    job_id   TEXT    NOT NULL,
    restart  INTEGER NOT NULL,
    key      TEXT    NOT NULL,
    model    TEXT    NOT NULL,
    size     INTEGER NOT NULL,
    seconds  REAL    NOT NULL,
    finished REAL    NOT NULL,
    PRIMARY KEY (job_id, restart)
);
CREATE INDEX IF NOT EXISTS runtimes_by_kind ON runtimes (key, model, size);
CREATE TABLE IF NOT EXISTS memory (
    key        TEXT    NOT NULL,
    job_id     TEXT    NOT NULL,
    need_bytes INTEGER NOT NULL,
    recorded   REAL    NOT NULL,
    PRIMARY KEY (key, job_id)
)
"""
_V2 = """
CREATE TABLE IF NOT EXISTS pcie (
    key      TEXT NOT NULL,
    model    TEXT NOT NULL,
    job_id   TEXT NOT NULL,
    gbps     REAL NOT NULL,
    recorded REAL NOT NULL,
    PRIMARY KEY (key, model, job_id)
);
CREATE TABLE IF NOT EXISTS pcie_alpha (
    key      TEXT    NOT NULL,
    model    TEXT    NOT NULL,
    alpha    REAL    NOT NULL,
    stderr   REAL,
    r2       REAL,
    runs     INTEGER,
    recorded REAL    NOT NULL,
    PRIMARY KEY (key, model)
)
"""
# a store of schema 2: its records are the prior (owner '')
_V3_INDEXES = """
CREATE INDEX IF NOT EXISTS runtimes_by_owner ON runtimes (owner, key, model);
CREATE INDEX IF NOT EXISTS memory_by_owner ON memory (owner, key)
"""
SCHEMA = storeschema.Schema(
    "runtime store",
    {
        1: storeschema.script(_V1),
        2: storeschema.script(_V2),
        3: storeschema.steps(
            storeschema.add_column("runtimes", "owner", "TEXT NOT NULL DEFAULT ''"),
            storeschema.add_column("memory", "owner", "TEXT NOT NULL DEFAULT ''"),
            storeschema.script(_V3_INDEXES),
        ),
        4: names_to_uids,
        5: storeschema.script(_V5),
    },
)


class StoreError(RuntimeError):
    """The runtime store cannot be opened or is of a newer schema; names the file."""


class RuntimeStore(OverrunRecords):
    """Runtimes and memory needs in one SQLite file (WAL mode, mode 0600), safe for
    several processes; the file and its parent directories (0750) are created on first
    use. ``busy_timeout``: seconds an operation waits for a lock held by another process."""

    def __init__(self, path: Path | str, busy_timeout: float = BUSY_TIMEOUT_S) -> None:
        self.path = Path(path)
        self.busy_timeout = float(busy_timeout)
        self._ready = False

    # -- records ------------------------------------------------------------

    def record(
        self,
        key: str,
        model: str,
        size: int,
        seconds: float,
        job_id: str,
        restart: int,
        finished: float,
        *,
        owner: str = PRIOR,
    ) -> bool:
        """Store one completed run of ``owner``'s kind ``key`` (`PRIOR`: the site-wide
        prior, e.g. profiles seeded by the site); False (nothing written) if this
        (job_id, restart) is already recorded, so that a daemon restart cannot count a
        job twice."""
        _check_key(key)
        _check_owner(owner)
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"size must be a whole number of compute slices >= 1, got {size!r}")
        if not (math.isfinite(seconds) and seconds > 0):
            raise ValueError(f"seconds must be a finite number > 0, got {seconds!r}")
        row = (str(job_id), int(restart), key, model, size, float(seconds), float(finished))
        with self._connect(write=True) as db:
            cur = db.execute(
                "INSERT OR IGNORE INTO runtimes (job_id, restart, key, model, size, seconds, "
                "finished, owner) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (*row, owner),
            )
            return cur.rowcount == 1

    def observations(
        self, key: str, model: str, owner: str | None = None
    ) -> dict[int, list[float]]:
        """Measured seconds per instance size for one job kind on one GPU model, oldest
        first: ``owner``'s runs (`PRIOR`: the site-wide prior), or everyone's (None: for
        reports, never for planning)."""
        mine = "" if owner is None else " AND owner = ?"
        with self._connect() as db:
            rows = db.execute(
                f"SELECT size, seconds FROM runtimes WHERE key = ? AND model = ?{mine} "
                "ORDER BY finished, job_id, restart",
                (key, model) if owner is None else (key, model, owner),
            ).fetchall()
        out: dict[int, list[float]] = {}
        for size, seconds in rows:
            out.setdefault(int(size), []).append(float(seconds))
        return out

    def record_memory(self, key: str, need_bytes: int, job_id: str, *, owner: str = PRIOR) -> None:
        """Store a job's peak memory need under ``owner``'s kind ``key``; a repeat for
        the same job keeps the larger (and the owner, once one is known)."""
        _check_key(key)
        _check_owner(owner)
        if isinstance(need_bytes, bool) or not isinstance(need_bytes, int) or need_bytes < 0:
            raise ValueError(f"need_bytes must be a whole number >= 0, got {need_bytes!r}")
        with self._connect(write=True) as db:
            db.execute(
                "INSERT INTO memory (key, job_id, need_bytes, recorded, owner) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (key, job_id) DO UPDATE SET "
                "need_bytes = max(need_bytes, excluded.need_bytes), recorded = excluded.recorded, "
                "owner = CASE WHEN owner = '' THEN excluded.owner ELSE owner END",
                (key, str(job_id), need_bytes, time.time(), owner),
            )

    def memory_need(self, key: str, owner: str | None = None) -> int | None:
        """The largest memory need recorded for ``owner``'s job kind (`PRIOR`: the
        site-wide prior; None: anyone's), None when none is known."""
        mine = "" if owner is None else " AND owner = ?"
        with self._connect() as db:
            (need,) = db.execute(
                f"SELECT max(need_bytes) FROM memory WHERE key = ?{mine}",
                (key,) if owner is None else (key, owner),
            ).fetchone()
        return None if need is None else int(need)

    # -- PCIe model inputs (slurm_mig.pcie) ---------------------------------

    def record_pcie_demand(self, key: str, model: str, gbps: float, job_id: str) -> None:
        """Store one measured PCIe demand (GB/s, the job alone on its GPU); a repeat
        for the same job replaces it."""
        _check_key(key)
        if not (isinstance(gbps, (int, float)) and math.isfinite(gbps) and gbps >= 0):
            raise ValueError(f"gbps must be a finite number >= 0, got {gbps!r}")
        with self._connect(write=True) as db:
            db.execute(
                "INSERT OR REPLACE INTO pcie (key, model, job_id, gbps, recorded) "
                "VALUES (?, ?, ?, ?, ?)",
                (key, model, str(job_id), float(gbps), time.time()),
            )

    def pcie_demand(self, key: str, model: str) -> float | None:
        """Median measured PCIe demand of a job kind on a GPU model; None if unmeasured."""
        with self._connect() as db:
            rows = db.execute(
                "SELECT gbps FROM pcie WHERE key = ? AND model = ?", (key, model)
            ).fetchall()
        return float(statistics.median(r[0] for r in rows)) if rows else None

    def record_pcie_alpha(
        self,
        key: str,
        model: str,
        alpha: float,
        *,
        stderr: float | None = None,
        r2: float | None = None,
        runs: int | None = None,
    ) -> None:
        """Store the fitted alpha of a job kind (``pcie.fit_alpha``), replacing any
        earlier fit, with its fit quality."""
        _check_key(key)
        if not (isinstance(alpha, (int, float)) and math.isfinite(alpha) and alpha > 0):
            raise ValueError(f"alpha must be a finite number > 0, got {alpha!r}")
        with self._connect(write=True) as db:
            db.execute(
                "INSERT OR REPLACE INTO pcie_alpha (key, model, alpha, stderr, r2, runs, "
                "recorded) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (key, model, float(alpha), stderr, r2, runs, time.time()),
            )

    def pcie_alpha(self, key: str, model: str) -> float | None:
        """The fitted alpha of a job kind on a GPU model; None if never fitted."""
        with self._connect() as db:
            row = db.execute(
                "SELECT alpha FROM pcie_alpha WHERE key = ? AND model = ?", (key, model)
            ).fetchone()
        return None if row is None else float(row[0])

    # -- connection ---------------------------------------------------------

    @contextmanager
    def _connect(self, write: bool = False) -> Iterator[sqlite3.Connection]:
        """One short-lived connection per operation: safe across fork and threads."""
        try:
            if not self._ready:
                prepare_state_dir(self.path.parent)
                storeschema.check_file(
                    self.path, SCHEMA, self.busy_timeout
                )  # newer: refused unwritten
            fresh = not self.path.exists()
            db = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None)
            if fresh:
                make_private(self.path)  # SQLite gives its -wal and -shm files this mode too
        except storeschema.SchemaError as exc:
            raise StoreError(str(exc)) from None
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"{self.path}: cannot open the runtime store ({exc})") from None
        try:
            db.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
            if not self._ready:
                self._migrate(db)
                self._ready = True
            db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                yield db
            except BaseException:
                db.rollback()
                raise
            db.commit()
        except storeschema.SchemaError as exc:
            raise StoreError(str(exc)) from None
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: runtime store error ({exc})") from None
        finally:
            db.close()

    def _migrate(self, db: sqlite3.Connection) -> None:
        """Bring the file to SCHEMA_VERSION once (``storeschema.migrate``: one
        transaction); refuse a newer one."""
        # Switching to WAL needs an exclusive lock and SQLite does not wait for it (the
        # busy timeout is not applied), so two processes creating the file race: retry.
        # After the version check, so that a newer file is not written even here.
        (version,) = db.execute("PRAGMA user_version").fetchone()
        if version > SCHEMA_VERSION:
            raise storeschema.too_new(self.path, SCHEMA, version)
        deadline = time.monotonic() + self.busy_timeout
        while True:
            try:
                db.execute("PRAGMA journal_mode = WAL")
                break
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)
        storeschema.migrate(db, SCHEMA, self.path)


def prepare_state_dir(path: Path) -> None:
    """Create the state directory (and parents) 0750, or take ``o`` rights off an
    existing one this process owns: the store and the status file name other users'
    jobs. OSError when it cannot be created."""
    if not path.exists():
        path.mkdir(parents=True, exist_ok=True)
        os.chmod(path, STATE_DIR_MODE)
        return
    st = path.stat()
    if st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) & 0o007:
        os.chmod(path, stat.S_IMODE(st.st_mode) & ~0o007)


class GuardedStore(GuardedOverruns):
    """The runtime store as the planner daemon reads it: while the store cannot be read
    (locked past its busy timeout, corrupt, missing), reads answer "nothing learned" so
    that jobs are planned from hints and defaults, the store is tried again only after
    ``retry_after`` seconds (so it never costs a cycle more than one busy timeout), and
    its error is logged at most once per ``log_every`` seconds. Writes raise StoreError."""

    def __init__(
        self,
        store: RuntimeStore,
        *,
        retry_after: float = 5.0,
        log_every: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        log: logging.Logger | None = None,
    ) -> None:
        self.store = store
        self.path = store.path
        self.retry_after = retry_after
        self.log_every = log_every
        self._clock = clock
        self._log = log or logging.getLogger("slurm_mig.planner")
        self._down_until = -math.inf
        self._logged_at = -math.inf
        self.last_error: str | None = None

    def observations(
        self, key: str, model: str, owner: str | None = None
    ) -> dict[int, list[float]]:
        return self._read(lambda: self.store.observations(key, model, owner), {})

    def memory_need(self, key: str, owner: str | None = None) -> int | None:
        return self._read(lambda: self.store.memory_need(key, owner), None)

    def record(self, *args, owner: str | None = None, **kwargs) -> bool:
        """`RuntimeStore.record` of a run of ``owner``'s job. A run of no owner (`PRIOR`)
        is not stored (False): the daemon adds no user's run to the prior. None: a
        caller that knows no owners, stored as before schema 3 (in the prior)."""
        if owner == PRIOR:
            return False
        if self._clock() < self._down_until:
            raise StoreError(
                f"{self.path}: not written, the store is unavailable: {self.last_error}"
            )
        try:
            return self.store.record(*args, owner=owner or PRIOR, **kwargs)
        except StoreError as exc:
            self._failed(exc)
            raise

    def _read(self, read: Callable[[], object], empty: object) -> object:
        if self._clock() < self._down_until:
            return empty
        try:
            value = read()
        except StoreError as exc:
            self._failed(exc)
            return empty
        if self.last_error is not None:
            self._log.warning("the runtime store %s is readable again", self.path)
            self.last_error = None
        return value

    def _failed(self, exc: StoreError) -> None:
        now = self._clock()
        self._down_until = now + self.retry_after
        self.last_error = " ".join(str(exc).split())
        if now - self._logged_at >= self.log_every:
            self._logged_at = now
            self._log.error(
                "cannot read the runtime store (planning from hints and defaults; this is "
                "logged once a minute): %s",
                self.last_error,
            )


def _check_key(key: str) -> None:
    if not isinstance(key, str) or not key or len(key) > MAX_KEY or not key.isprintable():
        raise ValueError(
            f"the job kind key must be 1 to {MAX_KEY} printable characters, got {key!r:.80}"
        )


def _check_owner(owner: str) -> None:
    if not isinstance(owner, str) or len(owner) > MAX_OWNER or not owner.isprintable():
        raise ValueError(
            f"the owner must be at most {MAX_OWNER} printable characters, got {owner!r:.80}"
        )


# ---------------------------------------------------------------------------
# Estimates (pure)


def estimate_times(
    obs: Mapping[int, list[float]],
    model: GpuModel,
    *,
    serial_fraction: float,
    fallback: float | None,
    min_memory: int | None = None,
    gang: bool = False,
) -> dict[int, float]:
    """Seconds per planner size of ``model``: medians where measured, Amdahl
    t(s) = a + b/s elsewhere (see the module docstring); ``inf`` where memory is short
    (``gang``: one task of a job of several slices, on its sizes' own profiles).

    ValueError when there is no observation and no fallback."""
    if not 0.0 <= serial_fraction <= 1.0:
        raise ValueError(f"serial_fraction must be between 0 and 1, got {serial_fraction!r}")
    sizes = model.planner_sizes
    memory = (lambda s: model.profile_for_size(s).memory_bytes) if gang else model.most_memory
    fits = {s: min_memory is None or memory(s) >= min_memory for s in sizes}
    medians = {s: statistics.median(v) for s, v in obs.items() if v and fits.get(s, False)}
    if len(medians) >= 2:
        a, b = _fit_amdahl(medians)
    elif len(medians) == 1:
        ((s0, t0),) = medians.items()
        a, b = _prior(t0, s0, serial_fraction)
    else:
        usable = [s for s in sizes if fits[s]]
        if not usable:
            return dict.fromkeys(sizes, math.inf)
        if fallback is None:
            raise ValueError("no observation and no fallback runtime to estimate from")
        if not (math.isfinite(fallback) and fallback > 0):
            raise ValueError(f"fallback must be a finite number of seconds > 0, got {fallback!r}")
        a, b = _prior(fallback, min(usable), serial_fraction)
    out: dict[int, float] = {}
    for s in sizes:
        if not fits[s]:
            out[s] = math.inf
        elif s in medians:
            out[s] = float(medians[s])
        else:
            out[s] = a + b / s
    return out


def _prior(t0: float, s0: int, f: float) -> tuple[float, float]:
    """(a, b) of the Amdahl curve with serial fraction f through (s0, t0)."""
    t1 = t0 / (f + (1.0 - f) / s0)
    return f * t1, (1.0 - f) * t1


def _fit_amdahl(points: Mapping[int, float]) -> tuple[float, float]:
    """Least squares t = a + b*x, x = 1/s, under a >= 0 and b >= 0 (the optimum lies
    inside, or on the a = 0 or the b = 0 edge, whichever fits better)."""
    xs = [1.0 / s for s in points]
    ts = [float(t) for t in points.values()]
    n = len(xs)
    mx, mt = sum(xs) / n, sum(ts) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    sxt = sum((x - mx) * (t - mt) for x, t in zip(xs, ts))
    if sxx > 0:
        b = sxt / sxx
        a = mt - b * mx
        if a >= 0 and b >= 0:
            return a, b

    def sse(a: float, b: float) -> float:
        return sum((a + b * x - t) ** 2 for x, t in zip(xs, ts))

    edge_b = (0.0, sum(x * t for x, t in zip(xs, ts)) / sum(x * x for x in xs))  # a = 0
    edge_a = (mt, 0.0)  # b = 0: a constant
    return min((edge_b, edge_a), key=lambda ab: sse(*ab))


def estimate_for_job(
    store: RuntimeStore | None,
    key: str | None,
    model: GpuModel,
    *,
    owner: str | None = None,
    hint_seconds: float | None,
    time_limit: float | None,
    min_memory: int | None,
    default_runtime: float,
    serial_fraction: float,
    gang: bool = False,
) -> dict[int, float]:
    """Seconds per size for one job: its owner's runs of its kind on this model (within
    `bounded_by_hint` of its ``time=`` hint), else its hint, else the site-wide prior's
    runs, else ``default_runtime``; without a hint, the runs are weighed against its
    time limit (`limitevidence.with_limit`). ``owner`` `PRIOR`: the prior only; None:
    everyone's runs (a caller that knows no owners, as before schema 3).

    The memory need is `memory_for_job`'s. Sizes whose estimate exceeds a finite time
    limit become ``inf`` (Slurm would kill the job there), unless that would leave no
    size at all. ``gang``: of one task of a job of several slices (`estimate_times`)."""
    min_memory = memory_for_job(store, key, owner, min_memory)
    hint = _positive(hint_seconds)
    limit = _positive(time_limit)
    fallback = next((t for t in (hint, limit) if t is not None), default_runtime)
    obs: dict[int, list[float]] = {}
    own = False
    if store is not None and key:
        if owner is None:
            obs = store.observations(key, model.name)
        else:
            obs = store.observations(key, model.name, owner) if owner else {}
            own = bool(obs)
            if not obs and hint is None:
                obs = store.observations(key, model.name, PRIOR)
    shape = {"serial_fraction": serial_fraction, "min_memory": min_memory, "gang": gang}
    times = estimate_times(obs, model, fallback=fallback, **shape)
    if own and hint is not None:
        times = bounded_by_hint(times, estimate_times({}, model, fallback=hint, **shape))
    elif hint is None and limit is not None:
        times = with_limit(times, obs, limit)
    if limit is not None:
        capped = {s: (t if t <= limit else math.inf) for s, t in times.items()}
        if any(math.isfinite(t) for t in capped.values()):
            return capped
    return times


def bounded_by_hint(learned: Mapping[int, float], hinted: Mapping[int, float]) -> dict[int, float]:
    """Each size's learned estimate held within [hint / `HINT_FLOOR`, hint] of the hint's
    curve (``hinted``: `estimate_times` from the ``time=`` hint alone).

    The hint is what the job's owner says of this very run; the learned runs are of its
    kind, a label the owner picks, and may include runs unlike this one (an exit 0 in a
    second from a broken script, a smaller input). They refine the plan, but shorten it
    at most 4-fold: a run planned too short makes the planner hand its slices to the next
    job too early, and the re-plan when it runs late delays those jobs. Nor do they
    lengthen it past the hint: the hint then stands for this run, like Slurm's time
    limit, and a run that outlasts it re-plans as any late job does (its overrun then
    counts against its owner's hints: `slurm_mig.overruns`)."""
    return {
        s: min(max(t, hinted[s] / HINT_FLOOR), hinted[s]) if s in hinted else t
        for s, t in learned.items()
    }


def memory_for_job(
    store: RuntimeStore | None, key: str | None, owner: str | None, hint: int | None
) -> int | None:
    """A job's memory need: the larger of its ``mem=`` hint and what its owner's runs of
    its kind needed (mig-run's measurements); with neither, the site-wide prior's.
    ``owner`` as for `estimate_for_job`."""
    if store is None or not key:
        return hint
    if owner is None:
        learned = store.memory_need(key)
    else:
        learned = store.memory_need(key, owner) if owner else None
    if learned is not None:
        return max(hint or 0, learned) or None
    if hint is not None or owner is None:
        return hint
    return store.memory_need(key, PRIOR)


def _positive(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) and x > 0 else None
