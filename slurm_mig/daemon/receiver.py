"""The planner's side of the node reports (`slurm_mig.node.reports`): a TCP listener
on ``[planner] reports`` and the store it writes.

Connections are handled as `listener` handles them (one thread and a selector, so an
idle client costs a socket, never a thread): at most `MAX_CONNECTIONS` open, at most
`PER_SOURCE` idle ones from one address; at a cap a new one closes the idlest (the one
open longest that has not sent its whole batch and sent nothing for `IDLE` seconds),
and when none is idle the others wait in the listen backlog (a burst of Epilogs is
served);
the first byte must come within `FIRST_BYTE` seconds and everything within `TIMEOUT`
from accept to close, at most `BATCH_BYTES` and `BATCH` lines (what is read then
is handled). So idle clients, however many, delay a node's report by a few
milliseconds, not a slot's timeout; the cycle neither waits for the receiver nor makes
a Slurm call for it. The lines of a connection are checked in one of `WORKERS` threads
(length, alphabet, then the MAC with the site key, only then the payload); a node may
deliver `RATE` reports a second (burst `BURST`), more are answered ``busy`` and come
again later. Refusals of reports are logged one line each (control characters
stripped, at most `LOG_PER_MINUTE` a minute); closed connections are counted, not logged.

The verified reports of a connection are stored in one sqlite transaction in
``<state_dir>/reports.sqlite`` (with ``accounting.sqlite`` attached, so a run's
accounting row and its delivery record commit together) and only then answered
``ok <id>``. A report is stored once: its id (node, kind, job, restart, seq) and the
digest of its payload are kept; the same report again is answered ``ok`` and changes
nothing, the same id with other content is refused (``conflict``) and logged. An
``instances`` snapshot replaces the node's stored one only when its ``seq`` is higher
(no delivery record: the nodes send one per hook run). Memory
needs go to the runtime store (``profiles.sqlite``, `RuntimeStore.record_memory`, which
keeps the larger of two needs of a job: idempotent) before that commit.

The store is what the controller shows of the nodes: ``runs`` (accounting.sqlite) for
``slurm-mig report``, the latest ``instances`` snapshot per node (MIG UUIDs, kept
instances) for ``slurm-mig status`` and the web page, and when each node last reported.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .. import storeschema
from ..owner import owner_of, valid_uid
from ..safefs import make_private
from ..safetext import printable
from ..slurm.accounting import INSERT_RUN, STORE, row
from ..slurm.accounting import schema as accounting_schema
from ..slurm.noderecords import JobRecord, KeptInstance
from ..slurm.reportcodec import BATCH, KEY_CHARS, KINDS, ReportError, open_report
from .listener import Conn, Listener

log = logging.getLogger("slurm_mig.planner")

DB = "reports.sqlite"
MAX_CONNECTIONS = 128  # open connections, at most (a node's hooks use one each)
PER_SOURCE = 16  # open connections from one address, at most
FIRST_BYTE = 2.0  # seconds from accept to the first byte (the nodes send at once)
IDLE = 0.1  # seconds a connection has sent nothing before a newer one may close it
TIMEOUT = 5.0  # seconds a connection may take, accept to close
WORKERS = 2  # threads that check and store reports
BATCH_BYTES = 1 << 20  # read from one connection
RATE = 20.0  # reports a second per node, sustained
BURST = 400.0
LOG_PER_MINUTE = 30
MAX_INSTANCES = 512  # jobs + kept instances in one snapshot
RETAIN = 90 * 86400.0  # seconds delivery records are kept (a report is re-sent within hours)

# Schema versions of reports.sqlite (``PRAGMA user_version``, ``storeschema``): 0: the
# layout before versioning, or a new file; 1: these tables.
_SCHEMA = """
CREATE TABLE IF NOT EXISTS received (
    id TEXT PRIMARY KEY, node TEXT NOT NULL, kind TEXT NOT NULL, digest TEXT NOT NULL,
    received REAL NOT NULL);
CREATE TABLE IF NOT EXISTS nodes (
    node TEXT PRIMARY KEY, last REAL NOT NULL, seq INTEGER NOT NULL DEFAULT -1,
    snapshot_at REAL, jobs TEXT NOT NULL DEFAULT '[]', kept TEXT NOT NULL DEFAULT '[]');
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value REAL NOT NULL)
"""
REPORTS_SCHEMA = storeschema.Schema("report store", {1: storeschema.script(_SCHEMA)})


def clean(text: object, most: int = 200) -> str:
    """``text`` on one line, control characters escaped, at most ``most`` characters."""
    return printable(str(text)[: most * 4], most)


class ReportDB:
    """``<state_dir>/reports.sqlite`` (delivery records, node snapshots) with the
    accounting store attached; one short connection per operation."""

    def __init__(self, state_dir: Path | str, runtime_store: Any = None) -> None:
        self.state_dir = Path(state_dir)
        self.path = self.state_dir / DB
        self.runtime_store = runtime_store  # RuntimeStore for memory needs (None: off)

    def _connect(self) -> sqlite3.Connection:
        from ..runtimes import prepare_state_dir

        prepare_state_dir(self.state_dir)  # 0750, root's
        acct = self.state_dir / STORE
        # a store of a newer schema is refused before anything is written to either
        storeschema.check_file(self.path, REPORTS_SCHEMA)
        storeschema.check_file(acct, accounting_schema())
        fresh = not self.path.exists()
        db = sqlite3.connect(self.path, timeout=5.0, isolation_level=None)
        try:
            if fresh:
                make_private(self.path)
            fresh_acct = not acct.exists()
            db.execute("ATTACH DATABASE ? AS acct", (str(acct),))
            if fresh_acct:
                make_private(acct)
            storeschema.migrate(db, REPORTS_SCHEMA, self.path)
            storeschema.migrate(db, accounting_schema(), acct, prefix="acct.")
            db.execute("INSERT OR IGNORE INTO meta VALUES ('started', ?)", (time.time(),))
        except BaseException:
            db.close()
            raise
        return db

    def prune(self, now: float | None = None) -> int:
        db = self._connect()
        try:
            with db:
                cur = db.execute(
                    "DELETE FROM received WHERE received < ?", ((now or time.time()) - RETAIN,)
                )
            return cur.rowcount
        finally:
            db.close()

    def store(self, bodies: Sequence[Mapping[str, Any]], now: float | None = None) -> list:
        """Store the verified reports ``bodies``; per report None (stored now or before)
        or the refusal word. Committed before it returns. sqlite3.Error or StoreError
        (the runtime store) when nothing could be stored."""
        now = time.time() if now is None else now
        bodies = list(bodies)
        results: list[str | None] = []
        db = self._connect()
        try:
            # memory needs first (recording one twice changes nothing, losing one would),
            # but not one whose id was stored with other content
            for b in bodies:
                if b["kind"] != "memory" or self.runtime_store is None or not _need(b):
                    continue
                got = db.execute("SELECT digest FROM received WHERE id = ?", (b["id"],))
                if got.fetchone() in (None, (b["digest"],)):
                    d = b["data"]
                    owner = owner_of(d["uid"])  # the rule of the planner's jobs, never the prior
                    self.runtime_store.record_memory(d["key"], d["need"], b["job"], owner=owner)
            db.execute("BEGIN IMMEDIATE")
            try:
                for b in bodies:
                    results.append(self._one(db, b, now))
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        finally:
            db.close()
        return results

    def _one(self, db: sqlite3.Connection, b: Mapping[str, Any], now: float) -> str | None:
        node, kind, data = b["node"], b["kind"], b["data"]
        if kind == "instances":  # idempotent by its sequence: only a newer one counts
            return self._snapshot(db, b, now)
        got = db.execute("SELECT digest FROM received WHERE id = ?", (b["id"],)).fetchone()
        if got is not None:
            return None if got[0] == b["digest"] else "conflict"
        if kind == "run":
            r = row(node, data)
            if r is None or r[0] != b["job"] or r[1] != b["restart"]:
                return "invalid"
            db.execute(INSERT_RUN.format(schema="acct."), r)
        elif kind == "memory":
            if not _need(b):
                return "invalid"
        db.execute(
            "INSERT INTO received VALUES (?, ?, ?, ?, ?)", (b["id"], node, kind, b["digest"], now)
        )
        self._seen(db, node, now)
        return None

    def _snapshot(self, db: sqlite3.Connection, b: Mapping[str, Any], now: float) -> str | None:
        """The node's instances, kept when newer (higher ``seq``) than the stored ones:
        a snapshot delivered twice, or after a newer one, changes nothing."""
        snap = _snapshot(b["data"])
        if snap is None:
            return "invalid"
        jobs, kept = snap
        self._seen(db, b["node"], now)
        db.execute(
            "UPDATE nodes SET seq = ?, snapshot_at = ?, jobs = ?, kept = ? "
            "WHERE node = ? AND seq < ?",
            (b["seq"], b["at"], jobs, kept, b["node"], b["seq"]),
        )
        return None

    @staticmethod
    def _seen(db: sqlite3.Connection, node: str, now: float) -> None:
        db.execute(
            "INSERT INTO nodes (node, last) VALUES (?, ?) "
            "ON CONFLICT (node) DO UPDATE SET last = max(last, excluded.last)",
            (node, now),
        )

    # -- what the controller shows ----------------------------------------------------

    def _read(self, sql: str, args: tuple = ()) -> list:
        if not self.path.exists():
            return []
        db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=2.0)
        try:
            return db.execute(sql, args).fetchall()
        except sqlite3.OperationalError:
            return []  # no table yet
        finally:
            db.close()

    def last_reports(self) -> dict[str, float]:
        """node -> when its last report arrived."""
        return {n: float(t) for n, t in self._read("SELECT node, last FROM nodes")}

    def started(self) -> float | None:
        got = self._read("SELECT value FROM meta WHERE name = 'started'")
        return float(got[0][0]) if got else None

    def snapshots(self) -> dict[str, dict[str, list]]:
        """node -> {"jobs": [JobRecord], "kept": [KeptInstance]} of its latest snapshot."""
        import json

        out = {}
        for node, jobs, kept in self._read("SELECT node, jobs, kept FROM nodes WHERE seq >= 0"):
            try:
                out[node] = {
                    "jobs": [JobRecord.from_json(j) for j in json.loads(jobs)],
                    "kept": [KeptInstance.from_json(k) for k in json.loads(kept)],
                }
            except (ValueError, KeyError, TypeError):
                continue
        return out


def _detail(b: Mapping[str, Any]) -> str:
    """What an admin needs to know of a refused report beyond its id: a memory report
    without its owner's uid comes from a node whose hooks predate the uid rule."""
    data = b.get("data")
    if b.get("kind") == "memory" and isinstance(data, Mapping) and "uid" not in data:
        return (
            " (a memory report without the job's uid: that node's slurm-mig is older than "
            "the planner's; upgrade its hooks)"
        )
    return ""


def _need(b: Mapping[str, Any]) -> bool:
    """A memory report's payload is ``{key, need, uid}``: one without its owner's uid (a
    node of a slurm-mig before the uid rule) is refused, never stored as the prior."""
    d = b["data"]
    key, need = d.get("key"), d.get("need")
    return (
        set(d) == {"key", "need", "uid"}
        and valid_uid(d["uid"])
        and isinstance(key, str)
        and 0 < len(key) <= 128
        and KEY_CHARS.issuperset(key)
        and isinstance(need, int)
        and not isinstance(need, bool)
        and 0 < need < 2**50
    )


def _snapshot(data: Mapping[str, Any]) -> tuple[str, str] | None:
    """The snapshot's jobs and kept instances as canonical JSON, None when invalid."""
    import json

    jobs, kept = data.get("jobs"), data.get("kept")
    if not isinstance(jobs, list) or not isinstance(kept, list):
        return None
    if len(jobs) + len(kept) > MAX_INSTANCES:
        return None
    try:
        j = [JobRecord.from_json(x).to_json() for x in jobs]
        k = [KeptInstance.from_json(x).to_json() for x in kept]
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    return json.dumps(j, sort_keys=True), json.dumps(k, sort_keys=True)


class _Bucket:
    def __init__(self, now: float) -> None:
        self.tokens = BURST
        self.at = now

    def take(self, now: float, rate: float) -> bool:
        self.tokens = min(BURST, self.tokens + (now - self.at) * rate)
        self.at = now
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True


class Receiver(Listener):
    """The listener on ``address``: connections handled as `listener` handles them, the
    reports of each stored in a worker thread (see the module docstring)."""

    name = "reports"

    def __init__(
        self,
        address: tuple[str, int],
        key: bytes,
        db: ReportDB,
        *,
        max_connections: int = MAX_CONNECTIONS,
        per_source: int = PER_SOURCE,
        timeout: float = TIMEOUT,
        rate: float = RATE,
    ) -> None:
        super().__init__(  # OSError (port taken, no such address) to the caller
            address,
            max_connections=max_connections,
            per_source=per_source,
            first_byte_timeout=FIRST_BYTE,
            request_timeout=timeout,
            connection_timeout=timeout,
            workers=WORKERS,
            wait_when_full=True,  # a burst of Epilogs waits in the backlog, not refused
            idle_after=IDLE,
        )
        self.key = key
        self.db = db
        self.timeout = timeout
        self.rate = rate
        self.stored = {k: 0 for k in KINDS}  # since the last `take_counts`
        self.refused_reports = 0
        self._closed = 0  # connections closed idle, at a cap or timed out, at the last take
        self._write = threading.Lock()  # one writer at a time (sqlite's rule anyway)
        self._counts = threading.Lock()
        self._buckets: dict[str, _Bucket] = {}
        self._log_window = (0.0, 0, 0)  # minute start, lines logged, lines suppressed

    def start(self) -> Receiver:
        try:
            self.db.prune()
        except (sqlite3.Error, OSError) as exc:
            log.warning("node reports: cannot prune %s: %s", self.db.path, clean(exc))
        super().start()
        return self

    def take_counts(self) -> dict[str, int]:
        """Reports stored per kind, reports ``refused`` and connections ``closed`` (idle,
        over a cap, timed out) since the last call."""
        closed = self.refused + self.evicted + self.timed_out
        with self._counts:
            out = {**self.stored, "refused": self.refused_reports, "closed": closed - self._closed}
            self.stored = dict.fromkeys(self.stored, 0)
            self.refused_reports = 0
            self._closed = closed
        return out

    def _received(self, conn: Conn, eof: bool) -> None:
        """The lines sent, once the client half-closes or a limit is reached (what is
        read then is handled, the rest is not)."""
        if not (eof or len(conn.got) >= BATCH_BYTES or conn.got.count(b"\n") >= BATCH):
            return
        lines = bytes(conn.got[:BATCH_BYTES]).split(b"\n")[:-1][:BATCH]
        peer = conn.peer
        self._submit(conn, lambda: ["".join(f"{a}\n" for a in self.handle(lines, peer)).encode()])

    def handle(self, lines: Sequence[bytes], peer: Any = None) -> list[str]:
        """The answer line to each report line (see `reports`)."""
        answers: list[str | None] = [None] * len(lines)
        verified: list[tuple[int, dict]] = []
        now = time.monotonic()
        for i, line in enumerate(lines):
            try:
                body = open_report(line, self.key)
            except ReportError as exc:
                answers[i] = f"no - {exc.reason}"
                self._refuse(peer, f"{exc.reason}: {exc}")
                continue
            bucket = self._buckets.setdefault(body["node"], _Bucket(now))
            if not bucket.take(now, self.rate):
                answers[i] = f"no {body['id']} busy"
                continue
            verified.append((i, body))
        if verified:
            try:
                with self._write:
                    results = self.db.store([b for _, b in verified])
            except Exception as exc:  # sqlite or the runtime store: the nodes send again
                log.error("node reports: not stored (the nodes send them again): %s", clean(exc))
                results = ["store"] * len(verified)
            for (i, body), result in zip(verified, results):
                if result is None:
                    answers[i] = f"ok {body['id']}"
                    with self._counts:
                        self.stored[body["kind"]] += 1
                else:
                    answers[i] = f"no {body['id']} {result}"
                    if result != "store":
                        self._refuse(peer, f"{result}: report {body['id']}{_detail(body)}")
        return [a or "no - invalid" for a in answers]

    def _refuse(self, peer: Any, text: str) -> None:
        with self._counts:
            self.refused_reports += 1
            now = time.monotonic()
            start, logged, suppressed = self._log_window
            if now - start >= 60.0:
                if suppressed:
                    log.warning("node reports: %d more refusals not logged", suppressed)
                start, logged, suppressed = now, 0, 0
            if logged < LOG_PER_MINUTE:
                who = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else "?"
                log.warning("node reports: refused from %s: %s", clean(who, 60), clean(text))
                logged += 1
            else:
                suppressed += 1
            self._log_window = (start, logged, suppressed)


def start_receiver(config: Any, key: bytes | None) -> Receiver | None:
    """The receiver on ``[planner] reports``, started, or None (off, no key, or the
    address cannot be bound: then the nodes keep their reports spooled)."""
    from ..config import parse_address
    from ..runtimes import RuntimeStore

    address = parse_address(getattr(config, "reports", ""))
    if address is None or key is None:
        return None
    state = Path(config.state_dir)
    db = ReportDB(state, RuntimeStore(state / "profiles.sqlite"))
    try:
        receiver = Receiver(address, key, db).start()
    except OSError as exc:
        log.warning(
            "cannot listen for node reports on %s:%d (%s); the nodes keep them spooled "
            "until this is fixed ([planner] reports)",
            *address,
            exc.strerror or exc,
        )
        return None
    log.info("listening for node reports on %s:%d (TCP)", *receiver.address)
    return receiver


def node_records(config: Any, only: str | None = None) -> dict[str, dict[str, list]]:
    """node -> {"jobs": [...], "kept": [...]} as `statusview.build_view` takes them: the
    nodes' latest reports; with ``[planner] reports`` off, the nodes' files where this
    host can read them (one host, or a shared run_dir). A node unknown: {}."""
    names = [n for n in config.nodes if only is None or n == only]
    if getattr(config, "reports", ""):
        try:
            snaps = ReportDB(config.state_dir).snapshots()
        except sqlite3.Error:
            snaps = {}
        return {n: snaps.get(n, {}) for n in names}
    from ..node.nodestate import NodeState

    records: dict[str, dict[str, list]] = {}
    for name in names:
        state = NodeState(config.run_dir_for(name))
        try:
            records[name] = {"jobs": state.jobs(), "kept": state.kept()}
        except OSError:
            records[name] = {}
    return records


def silent_nodes(config: Any, now: float, quiet: float = 86400.0) -> list[tuple[str, float | None]]:
    """(node, when it last reported or None) for the configured nodes that have sent no
    report, or none for ``quiet`` seconds."""
    db = ReportDB(config.state_dir)
    try:
        last = db.last_reports()
    except sqlite3.Error:
        last = {}
    return [(n, last.get(n)) for n in config.nodes if n not in last or now - last[n] > quiet]
