"""Node reports: what only a node knows, signed, spooled and delivered to the planner.

A node is a host of its own: the controller never reads its disk. What the daemon needs
from it travels as *reports*, small signed records the root hooks write and send to
``[planner] reports`` (``host:port``, TCP), where the daemon's receiver
(`slurm_mig.daemon.receiver`) stores them:

- ``run``: one per finished run of a job (the Epilog's accounting row);
- ``instances``: after every hook run, the node's instances (job -> MIG UUID, kept
  instances and for whom until when); an instance absent from a later one is destroyed;
- ``memory``: the memory need ``mig-run`` learned in a run that it restarted (read by the
  Epilog from the job's need file, see `slurm_mig.node.needarea`), with the job's uid:
  needs are learned per owner (`slurm_mig.owner`), and one without is refused.

The wire format, one line per report: `reportcodec`.

A client sends up to `BATCH` lines, closes its sending side and reads one answer line
per line sent, in order: ``ok <id>`` once the report is stored durably (after the
receiver's sqlite commit; also for an identical report stored before), or
``no <id|-> <reason>``. ``ok`` deletes the spool file; a permanent refusal (``conflict``:
the id was stored with other content, ``invalid``) deletes it with a log line; anything
else (``busy``, ``mac``: the node's key is not the controller's, no answer at all) keeps
it for the next flush. A flush given the node's key signs again, as it sends them, the
spooled reports its key does not verify (spooled before the site key was rotated), so a
rotation delays reports instead of stranding them.

The spool (``<run_dir>/private/reports/``, root's, 0700) holds one file per report,
written atomically (temporary file, fsync, rename) and named after the report
(``run.<job>.<restart>``, ``memory.<job>.<restart>``, ``instances.<seq>``), so a hook
that runs twice writes one file, and a newer ``instances`` snapshot replaces the unsent
older ones. It is bounded (`MAX_FILES`, `MAX_SPOOL_BYTES`): beyond, files are
dropped, never silently: instances snapshots first (the next one replaces them), then
memory needs, accounting rows (``run``) last, the oldest of a kind first, each drop a
warning in the hook's log naming what was lost and a ``report_drop`` event for the
node metrics (``slurm_mig_node_reports_dropped_total{kind}``, alert
``SlurmMigNodeReportsDropped``). Every hook run flushes at most `BATCH` reports within
`FLUSH_SECONDS` (``connect`` gives up after `CONNECT_TIMEOUT`), so an absent daemon
delays a hook by that much at most; ``slurm-mig node-flush`` (a systemd timer on the
node) delivers the rest.

Standard library only: the hooks import this.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from ..slurm.reportcodec import (
    BATCH,
    KINDS,
    MAC_BYTES,
    MAGIC,
    MAX_REPORT,
    ReportError,
    check_payload,
    make,
    open_report,
    payload_id,
    plain,
    report_id,
    signed,
)
from .needarea import (
    MAX_NEED_FILE,
    NEED_SUFFIX,
    drop_need_area,
    make_need_file,
    need_path,
    read_need,
    write_need,
)

__all__ = [
    "BATCH",
    "CONNECT_TIMEOUT",
    "FLUSH_SECONDS",
    "KINDS",
    "MAC_BYTES",
    "MAGIC",
    "MAX_FILES",
    "MAX_NEED_FILE",
    "MAX_REPORT",
    "MAX_SPOOL_BYTES",
    "NEED_SUFFIX",
    "PERMANENT",
    "SEND_BYTES",
    "SPOOL",
    "ReportError",
    "Spool",
    "Warn",
    "after_hook",
    "check_payload",
    "drop_need_area",
    "exchange",
    "instances_report",
    "make",
    "make_need_file",
    "need_path",
    "open_report",
    "payload_id",
    "plain",
    "read_need",
    "report_id",
    "run_report",
    "signed",
    "spool",
    "write_need",
]

MAX_FILES = 2000  # spool files kept at a node
MAX_SPOOL_BYTES = 16 << 20
SEND_BYTES = 512 << 10  # bytes per connection (the receiver reads up to 1 MiB)
CONNECT_TIMEOUT = 0.3  # seconds
FLUSH_SECONDS = 1.0  # most a hook spends delivering
SPOOL = "reports"
PERMANENT = ("conflict", "invalid", "oversize")  # refusals a retry cannot change

Warn = Callable[[str], None]
Event = Callable[[str, str], None]  # (event, label) for the node metrics
DROP_ORDER = ("other", "instances", "memory", "run")  # what a full spool drops first


# -- the spool ------------------------------------------------------------------------------


class Spool:
    """The node's undelivered reports, a file each, in ``<run_dir>/private/reports``."""

    def __init__(self, run_dir: Path, warn: Warn | None = None, event: Event | None = None) -> None:
        self.dir = Path(run_dir) / "private" / SPOOL
        self._warn = warn or (lambda _text: None)
        self._event = event or (lambda _name, _label: None)

    def _ready(self) -> None:
        from ..safefs import secure_dir

        secure_dir(self.dir.parent, 0o700)
        secure_dir(self.dir, 0o700)

    def put(self, name: str, line: str, supersedes: str | None = None) -> None:
        """Write ``line`` as spool file ``name`` (atomic, fsynced), replacing one of the
        same name; unsent files whose names start with ``supersedes`` are dropped. Then
        enforce the bounds. OSError when it cannot be written."""
        self._ready()
        path = self.dir / name
        tmp = self.dir / f".{name}.{os.getpid()}.tmp"
        data = (line + "\n").encode()
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            try:
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except OSError:
            tmp.unlink(missing_ok=True)
            raise
        if supersedes:
            for old in self.pending():
                if old.name.startswith(supersedes) and old.name < name:
                    old.unlink(missing_ok=True)
        self._bound()

    def pending(self) -> list[Path]:
        """The spool files, oldest first."""
        try:
            entries = [p for p in self.dir.iterdir() if not p.name.startswith(".")]
        except OSError:
            return []
        stamped = []
        for p in entries:
            try:
                stamped.append((p.stat().st_mtime_ns, p.name, p))
            except OSError:
                continue
        return [p for _, _, p in sorted(stamped)]

    def _bound(self) -> None:
        try:  # temporary files of a writer that died before its rename
            stale = [p for p in self.dir.glob(".*.tmp") if time.time() - p.stat().st_mtime > 3600]
        except OSError:
            stale = []
        for p in stale:
            p.unlink(missing_ok=True)
        files = self.pending()
        sizes = []
        for p in files:
            try:
                sizes.append(p.stat().st_size)
            except OSError:
                sizes.append(0)
        total, count = sum(sizes), len(files)
        if count <= MAX_FILES and total <= MAX_SPOOL_BYTES:
            return
        dropped: dict[str, int] = {}
        for p, size in sorted(zip(files, sizes), key=lambda f: _drop_rank(f[0].name)):
            if count <= MAX_FILES and total <= MAX_SPOOL_BYTES:
                break
            p.unlink(missing_ok=True)
            kind = _kind(p.name)
            dropped[kind] = dropped.get(kind, 0) + 1
            count -= 1
            total -= size
        for kind, n in dropped.items():
            for _ in range(n):
                self._event("report_drop", kind)
        what = ", ".join(f"{n} {k}" for k, n in dropped.items())
        self._warn(
            f"report spool {self.dir} full ({MAX_FILES} files, {MAX_SPOOL_BYTES >> 20} MiB): "
            f"LOST {what} undelivered report(s), the oldest of the least needed kind first "
            "(accounting rows last); is [planner] reports reachable from this node? "
            "(slurm-mig node-flush delivers the rest)"
        )

    def flush(
        self,
        address: tuple[str, int] | None,
        *,
        limit: int = BATCH,
        seconds: float = FLUSH_SECONDS,
        connect_timeout: float = CONNECT_TIMEOUT,
        key: bytes | None = None,
    ) -> tuple[int, str | None]:
        """Deliver up to ``limit`` pending reports in one connection within ``seconds``;
        (delivered, what went wrong or None). With ``key`` (the node's site key) a report
        signed under an earlier key goes out signed under this one."""
        if address is None:
            return 0, None
        batch: list[tuple[Path, str, str]] = []
        size = 0
        for p in self.pending():
            if len(batch) >= limit:
                break
            try:
                line = _read_small(p, MAX_REPORT)
            except OSError:
                continue
            rid = payload_id(line)
            if rid is None:
                self._warn(f"dropping {p.name} from the report spool: not a report")
                p.unlink(missing_ok=True)
                continue
            if key is not None:
                line = signed(line, key)
            if batch and size + len(line) + 1 > SEND_BYTES:
                break
            batch.append((p, line, rid))
            size += len(line) + 1
        if not batch:
            return 0, None
        try:
            answers = exchange(address, [line for _, line, _ in batch], seconds, connect_timeout)
        except OSError as exc:
            where = f"{address[0]}:{address[1]}"
            return 0, f"reports kept for later: cannot reach the planner at {where}: {_why(exc)}"
        delivered, problem = 0, None
        for (path, _, rid), answer in zip(batch, answers):
            word, _, rest = answer.partition(" ")
            got_id, _, reason = rest.partition(" ")
            if word == "ok" and got_id == rid:
                path.unlink(missing_ok=True)
                delivered += 1
            elif word == "no" and got_id == rid and reason in PERMANENT:
                path.unlink(missing_ok=True)
                self._warn(f"the planner refused report {rid} ({reason}); dropped it")
            elif problem is None:
                problem = f"report {rid} kept for later: the planner answered {answer[:80]!r}"
        if len(answers) < len(batch) and problem is None:
            problem = f"{len(batch) - len(answers)} report(s) kept for later: no answer"
        return delivered, problem


def _kind(name: str) -> str:
    kind = name.split(".", 1)[0]
    return kind if kind in KINDS else "other"


def _drop_rank(name: str) -> int:
    """Which spool files a full spool drops first: anything not a report, then the
    instances snapshots (the next one replaces them), then memory needs, and accounting
    rows (``run``: nothing else has them) last; the files come oldest first."""
    return DROP_ORDER.index(_kind(name))


def _read_small(path: Path, most: int) -> str:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        return os.read(fd, most + 1)[:most].decode("ascii", "replace").rstrip("\n")
    finally:
        os.close(fd)


def _why(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def exchange(
    address: tuple[str, int], lines: Iterable[str], seconds: float, connect_timeout: float
) -> list[str]:
    """Send ``lines``, half-close, read the answer lines until the receiver closes or
    ``seconds`` pass. OSError when it cannot connect or send."""
    deadline = time.monotonic() + seconds
    family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.settimeout(min(connect_timeout, seconds))
        s.connect(address)
        s.settimeout(max(0.01, deadline - time.monotonic()))
        s.sendall("".join(f"{line}\n" for line in lines).encode())
        s.shutdown(socket.SHUT_WR)
        data = b""
        while time.monotonic() < deadline and len(data) < (1 << 20):
            s.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = s.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                break
            data += chunk
    end = data.rfind(b"\n") + 1
    return data[:end].decode("ascii", "replace").splitlines()


# -- what the hooks report --------------------------------------------------------------------


def run_report(key: bytes, node: str, finished: Mapping[str, Any], env: Mapping[str, str]) -> str:
    """The ``run`` report of the Epilog's runtime record (the accounting row)."""
    from ..slurm.accounting import entry_row

    row = entry_row(finished, env)
    return make(key, node, "run", row, job=str(row["job_id"]), restart=int(row["restart"] or 0))


def instances_report(key: bytes, node: str, state: Any, seq: int) -> str:
    """The node's instances now (`NodeState` ``state``): jobs and kept instances."""
    data = {
        "jobs": [r.to_json() for r in state.jobs()],
        "kept": [k.to_json() for k in state.kept()],
    }
    return make(key, node, "instances", data, seq=seq)


def after_hook(
    hook: str,
    config: Any,
    node: str,
    outcome: Any,
    env: Mapping[str, str],
    job: Any = None,
    hint_key: str | None = None,
) -> None:
    """What a hook reports, spooled and flushed when ``[planner] reports`` is set: the
    Epilog's run row and the job's memory need, and the node's instances after every
    Prolog, Epilog and reclaim; the Prolog of a started job also makes the job's need
    area, which every Epilog removes. Never raises: problems are warnings on ``outcome``."""
    from ..config import parse_address

    address = parse_address(getattr(config, "reports", ""))
    run_dir = config.run_dir_for(node)
    try:
        if hook == "prolog" and job is not None and outcome.started and address is not None:
            _make_area(run_dir, job, outcome)
        if address is None:
            return
        key = spool(hook, config, node, outcome, env, job, hint_key)
        _, failed = Spool(run_dir, warn=outcome.warn).flush(address, key=key)
        if failed:
            outcome.warn(failed)
    except Exception as exc:  # reports never fail a hook
        outcome.warn(f"reports: {type(exc).__name__}: {exc}")
    finally:
        if hook == "epilog" and job is not None:
            _drop_area(run_dir, job, outcome)


def _make_area(run_dir: Path, job: Any, outcome: Any) -> None:
    try:
        make_need_file(run_dir, job.job_id, job.uid)
    except OSError as exc:
        outcome.warn(
            f"no memory-need file for mig-run: cannot make its area: {_why(exc)} "
            "(the hooks mount a 4 KiB tmpfs per job: they need CAP_SYS_ADMIN)"
        )


def _drop_area(run_dir: Path, job: Any, outcome: Any) -> None:
    try:
        drop_need_area(run_dir, job.job_id)
    except OSError as exc:
        outcome.warn(f"the job's memory-need area is left behind: {_why(exc)}")


def spool(
    hook: str,
    config: Any,
    node: str,
    outcome: Any,
    env: Mapping[str, str],
    job: Any = None,
    hint_key: str | None = None,
) -> bytes:
    """Spool the hook's reports (see `after_hook`); the site key they are signed with."""
    from ..geometry import get_model
    from ..owner import valid_uid
    from ..slurm.assignment import load_key
    from .nodestate import NodeState

    key = load_key(config.key_file)
    run_dir = config.run_dir_for(node)
    box = Spool(run_dir, warn=outcome.warn, event=getattr(outcome, "event", None))
    finished = getattr(outcome, "finished", None)
    if hook == "epilog" and finished is not None:
        name = f"run.{finished['job_id']}.{finished['restart']}"
        box.put(name, run_report(key, node, finished, env))
    if hook == "epilog" and job is not None:
        path = need_path(run_dir, job.job_id)
        most = max(get_model(m).memory_bytes for m in config.gpu_models(node))
        need, problem = read_need(path, job.uid, most, hint_key)
        if problem:
            outcome.warn(problem)
        if need is not None and valid_uid(job.uid):
            # learned per owner (the uid, `slurm_mig.owner`): one user's cannot size another's
            need = {**need, "uid": job.uid}
            line = make(key, node, "memory", need, job=job.job_id, restart=job.restart)
            box.put(f"memory.{job.job_id}.{job.restart}", line)
    seq = time.time_ns()
    state = NodeState(run_dir, warn=outcome.warn)
    box.put(f"instances.{seq:020d}", instances_report(key, node, state, seq), "instances.")
    return key
