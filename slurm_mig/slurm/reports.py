"""Node reports: what only a node knows, signed, spooled and delivered to the planner.

A node is a host of its own: the controller never reads its disk. What the daemon needs
from it travels as *reports*, small signed records the root hooks write and send to
``[planner] reports`` (``host:port``, TCP), where the daemon's receiver
(`slurm_mig.slurm.receiver`) stores them:

- ``run``: one per finished run of a job (the Epilog's accounting row);
- ``instances``: after every hook run, the node's instances (job -> MIG UUID, kept
  instances and for whom until when); an instance absent from a later one is destroyed;
- ``memory``: the memory need ``mig-run`` learned in a run that it restarted (read by the
  Epilog from the job's need file, see `read_need`), with the job's user: needs are
  learned per user (`slurm_mig.runtimes`).

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
older ones. It is bounded (`MAX_FILES`, `MAX_SPOOL_BYTES`): beyond, the oldest files are
dropped with a log line. Every hook run flushes at most `BATCH` reports within
`FLUSH_SECONDS` (``connect`` gives up after `CONNECT_TIMEOUT`), so an absent daemon
delays a hook by that much at most; ``slurm-mig node-flush`` (a systemd timer on the
node) delivers the rest.

Standard library only: the hooks import this.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from ..safefs import grant_user
from .reportcodec import (
    KINDS,
    MAC_BYTES,
    MAGIC,
    MAX_REPORT,
    ReportError,
    _b64,  # noqa: F401  (tests/slurm/test_reports.py forges lines with it)
    check_payload,
    make,
    open_report,
    payload_id,
    plain,
    report_id,
    signed,
    whole_number,
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
    "trim_need_files",
    "write_need",
]

MAX_NEED_FILE = 512  # bytes of mig-run's need file
MAX_FILES = 2000  # spool files kept at a node
MAX_SPOOL_BYTES = 16 << 20
BATCH = 64  # reports per connection
SEND_BYTES = 512 << 10  # bytes per connection (the receiver reads up to 1 MiB)
CONNECT_TIMEOUT = 0.3  # seconds
FLUSH_SECONDS = 1.0  # most a hook spends delivering
SPOOL = "reports"
NEED_SUFFIX = ".need"  # task/<job_id>.need: mig-run's memory need, written as the user
PERMANENT = ("conflict", "invalid", "oversize")  # refusals a retry cannot change
_KEY_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")

Warn = Callable[[str], None]


# -- the spool ------------------------------------------------------------------------------


class Spool:
    """The node's undelivered reports, a file each, in ``<run_dir>/private/reports``."""

    def __init__(self, run_dir: Path, warn: Warn | None = None) -> None:
        self.dir = Path(run_dir) / "private" / SPOOL
        self._warn = warn or (lambda _text: None)

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
        dropped = 0
        for p, size in zip(files, sizes):
            if count <= MAX_FILES and total <= MAX_SPOOL_BYTES:
                break
            p.unlink(missing_ok=True)
            dropped += 1
            count -= 1
            total -= size
        if dropped:
            self._warn(
                f"report spool {self.dir} full ({MAX_FILES} files, {MAX_SPOOL_BYTES >> 20} MiB): "
                f"dropped the {dropped} oldest undelivered report(s); is [planner] reports "
                "reachable from this node?"
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
    from .accounting import entry_row

    row = entry_row(finished, env)
    return make(key, node, "run", row, job=str(row["job_id"]), restart=int(row["restart"] or 0))


def instances_report(key: bytes, node: str, state: Any, seq: int) -> str:
    """The node's instances now (`NodeState` ``state``): jobs and kept instances."""
    data = {
        "jobs": [r.to_json() for r in state.jobs()],
        "kept": [k.to_json() for k in state.kept()],
    }
    return make(key, node, "instances", data, seq=seq)


def need_path(run_dir: Path, job_id: str) -> Path:
    """Where ``mig-run`` of the job writes its memory need (the Prolog makes the file, the
    hooks' own, in root's ``task/`` directory)."""
    return Path(run_dir) / "task" / f"{job_id}{NEED_SUFFIX}"


def make_need_file(run_dir: Path, job_id: str, uid: int | None) -> None:
    """The Prolog: an empty need file the job's user may write but not read (root's,
    0600, and an ACL entry ``user:<uid>:-w-``). The user owns nothing in the run
    directory: they cannot change the file's mode, replace it (``task/`` is root's) or
    keep it after the job with a hard link (that needs read and write access, or
    ownership); what they write into it the Epilog reads as untrusted input, and a
    Prolog short of room truncates it (`trim_need_files`). OSError on failure."""
    if uid is None or not plain(job_id):
        return
    path = need_path(run_dir, job_id)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return
    try:
        os.fchmod(fd, 0o600)
        if uid != os.geteuid():
            grant_user(fd, uid, 2)
    finally:
        os.close(fd)


def trim_need_files(run_dir: Path) -> int:
    """Truncate every need file over `MAX_NEED_FILE` bytes (a user filling the run
    directory's disk through theirs, which the Epilog would ignore anyway); how many."""
    trimmed = 0
    try:
        names = [n for n in os.listdir(Path(run_dir) / "task") if n.endswith(NEED_SUFFIX)]
    except OSError:
        return 0
    for name in names:
        try:
            fd = os.open(Path(run_dir) / "task" / name, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            if os.fstat(fd).st_size > MAX_NEED_FILE:
                os.ftruncate(fd, 0)
                trimmed += 1
        except OSError:
            pass
        finally:
            os.close(fd)
    return trimmed


def write_need(path: Path, key: str, need: int) -> None:
    """``mig-run`` (the job's user): the learned need into the job's need file, which
    must exist (the Prolog made it). OSError when it cannot be written."""
    text = json.dumps({"key": key, "need": int(need)}, sort_keys=True) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def read_need(
    path: Path, uid: int | None, most_bytes: int, hint_key: str | None
) -> tuple[dict[str, Any] | None, str | None]:
    """The Epilog (root): the job's need file as untrusted input: not followed if a
    symlink, a regular file of one link made by the Prolog, at most `MAX_NEED_FILE`
    bytes, ``{"key": str, "need": int}`` with a plain key (the job's hint key when it has
    one) and 1 <= need <= ``most_bytes``. (the need, None), (None, why not) or
    (None, None) when there is nothing (no file, empty)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"memory need file {path.name} not read: {_why(exc)}"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            return None, f"memory need file {path.name} is not a plain file; ignored"
        # the hooks' own (a need file of slurm-mig before issue 18 is the user's)
        if uid is None or st.st_uid not in (os.geteuid(), uid):
            return None, f"memory need file {path.name} is not the job user's; ignored"
        raw = os.read(fd, MAX_NEED_FILE + 1)
    except OSError as exc:
        return None, f"memory need file {path.name} not read: {_why(exc)}"
    finally:
        os.close(fd)
    if not raw.strip():
        return None, None
    if len(raw) > MAX_NEED_FILE:
        return None, f"memory need file {path.name} is over {MAX_NEED_FILE} bytes; ignored"
    try:
        data = json.loads(raw.decode("ascii"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None, f"memory need file {path.name} is not JSON; ignored"
    if not isinstance(data, dict) or set(data) != {"key", "need"}:
        return None, f"memory need file {path.name} is not {{key, need}}; ignored"
    key, need = data["key"], data["need"]
    if not (isinstance(key, str) and 0 < len(key) <= 128 and _KEY_CHARS.issuperset(key)):
        return None, f"memory need file {path.name}: the key is not a job kind; ignored"
    if hint_key is not None and key != hint_key:
        return None, f"memory need file {path.name}: key {key!r} is not the job's; ignored"
    if not whole_number(need) or not 0 < need <= most_bytes:
        return None, f"memory need file {path.name}: the need is out of range; ignored"
    return {"key": key, "need": need}, None


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
    file. Never raises: problems are warnings on ``outcome``."""
    from ..config import parse_address

    address = parse_address(getattr(config, "reports", ""))
    run_dir = config.run_dir_for(node)
    try:
        if hook == "prolog" and job is not None and outcome.started:
            make_need_file(run_dir, job.job_id, job.uid)
        if address is None:
            return
        key = spool(hook, config, node, outcome, env, job, hint_key)
        _, failed = Spool(run_dir, warn=outcome.warn).flush(address, key=key)
        if failed:
            outcome.warn(failed)
    except Exception as exc:  # reports never fail a hook
        outcome.warn(f"reports: {type(exc).__name__}: {exc}")


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
    from .assignment import load_key
    from .nodestate import NodeState

    key = load_key(config.key_file)
    run_dir = config.run_dir_for(node)
    box = Spool(run_dir, warn=outcome.warn)
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
        if need is not None:
            user = env.get("SLURM_JOB_USER", "")
            if plain(user):  # needs are learned per user: one user's cannot size another's
                need = {**need, "user": user}
            line = make(key, node, "memory", need, job=job.job_id, restart=job.restart)
            box.put(f"memory.{job.job_id}.{job.restart}", line)
        path.unlink(missing_ok=True)
    seq = time.time_ns()
    state = NodeState(run_dir, warn=outcome.warn)
    box.put(f"instances.{seq:020d}", instances_report(key, node, state, seq), "instances.")
    return key
