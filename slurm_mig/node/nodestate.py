"""Node-local records of which job owns which MIG instance, shared by the hooks.

Layout under ``config.run_dir_for(node)`` (0711, root: users may pass, not list):

- ``private/`` (0700, files 0600): what only the root hooks read and write. No job can
  open a lock here, so none can hold one and stall the node's hooks.
  - ``locks/gpu<N>`` (``locks/`` 0700): a hook holds GPU N's exclusive ``flock`` while
    it decides for and changes that GPU (create, adopt, destroy, and the job and kept
    records of its instances), so hooks on different GPUs never wait for each other.
    A hook holds one GPU lock at a time; it reclaims kept instances of other GPUs
    after, taking their locks one by one, and only those that are free.
  - ``locks/node``: held for short node-wide sections only (rotating the runtime log),
    never across a device call.
  - ``lock``: the version gate. Hooks hold a shared ``flock`` on it for their whole run,
    so they never wait for each other on it; hooks of slurm-mig before the GPU locks
    held it exclusively, so during a rolling upgrade old and new hooks take turns.
  - ``jobs/<job_id>.json``: the instance a job runs on (`JobRecord`).
  - ``refused/<job_id>.json``: why the prolog gave a job no instance (`Refusal`).
  - ``kept/<uuid>.json``: an instance kept after its job for the next one (`KeptInstance`).
  - ``energy/gpu<N>.json``: GPU N's energy ledger (`energysplit.Ledger`), written
    under GPU N's lock by the Prolog and Epilog where the GPU has an energy counter.
  - ``runtimes.jsonl``: one line per finished job (the epilog's log), rotated to
    ``runtimes.jsonl.1`` at `RUNTIMES_MAX_BYTES`; only its tail is ever read.
- ``task/<job_id>.json`` (root's, 0400 plus a POSIX ACL entry ``user:<uid>:r``, in a
  0711 directory): the TaskProlog's view of its own job (its `JobRecord` or `Refusal`),
  readable by that user alone. The user owns nothing here: a file they owned they could
  make writable, grow until the run directory's disk is full and keep with a hard link
  after their job. So ``run_dir`` must be on a file system with POSIX ACLs (tmpfs,
  ext4, xfs: all by default).

Writes are atomic (temporary file + rename), so readers never see half a record; a
record of GPU N is written only under GPU N's lock, except that an instance changes
hands (job record to kept record) by writing the new record before removing the old,
so it is accounted for at every moment. A directory or lock of another owner is
refused; a mode that is too open is repaired.
Only the standard library and ``geometry`` are imported: the hooks are on the job
start path.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ..safefs import UnsafePathError, check_file, grant_user, secure_dir
from ..slurm.noderecords import JobRecord, KeptInstance, Refusal

RUNTIMES_MAX_BYTES = 1 << 20  # runtimes.jsonl is rotated beyond this (about 5000 jobs)
TAIL_MAX_BYTES = 256 << 10  # most of the runtime log a hook reads
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}$")
_UNSAFE_CHARS = re.compile(r"[^A-Za-z0-9_.-]")
_RECORD_ERRORS = (ValueError, KeyError, TypeError, AttributeError, OverflowError, RecursionError)
_OLD_LAYOUT = ("jobs", "refused", "kept", "runtimes.jsonl")  # before private/ (issue 10)


class NodeStateError(OSError):
    """The run directory cannot be created or written; the message names the path and
    ``errno`` says why (None where no system call failed)."""

    def __init__(self, text: str, code: int | None = None) -> None:
        super().__init__(text)
        self.errno = code


NO_ROOM = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO})  # see `out_of_room`


def out_of_room(exc: BaseException) -> bool:
    """True when ``exc`` says the run directory's disk is full, over quota or failing:
    the prolog undoes what it created and requeues the job instead of draining the node
    (the disk is shared with the rest of the machine; the node itself is sound)."""
    return isinstance(exc, OSError) and exc.errno in NO_ROOM


def _grant_read(fd: int, path: Path, uid: int) -> None:
    """Let user ``uid`` read the open file ``fd`` (to be renamed to ``path``) by an ACL
    entry; NodeStateError naming the fix where the file system has no ACLs."""
    try:
        grant_user(fd, uid, 4)
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS):
            raise NodeStateError(
                f"cannot let job's user {uid} read {path}: the file system of [paths] run_dir "
                "has no POSIX ACLs; put run_dir on tmpfs, ext4 or xfs (or mount it with acl)",
                exc.errno,
            ) from None
        raise


class LockBusyError(RuntimeError):
    """A lock was not free within the timeout (another hook is stuck, or busy)."""


class NodeState:
    """The records of one node under ``root``; ``warn`` hears of unreadable records and
    of repaired modes."""

    def __init__(self, root: str | Path, warn: Callable[[str], None] | None = None) -> None:
        self.root = Path(root)
        self.private = self.root / "private"
        self._warn = warn or (lambda _msg: None)

    # -- paths --------------------------------------------------------------------

    def _path(self, kind: str, name: str) -> Path:
        if not _SAFE_NAME.match(name):
            raise ValueError(f"{kind} record name {name!r} is not a plain file name")
        base = self.root if kind == "task" else self.private
        return base / kind / f"{name}.json"

    @property
    def locks(self) -> Path:
        return self.private / "locks"

    @property
    def runtimes_path(self) -> Path:
        return self.private / "runtimes.jsonl"

    def secure(self) -> None:
        """Create or check the run directory, ``private/`` and ``task/`` (owner and
        mode; a wrong mode is repaired and reported, a wrong owner refused), and move
        the records of the layout before ``private/`` into it."""
        for path, mode in ((self.root, 0o711), (self.private, 0o700), (self.root / "task", 0o711)):
            self._secure_dir(path, mode)
        self._move_old_layout()

    def _secure_dir(self, path: Path, mode: int) -> None:
        """`secure_dir` with its failures as NodeStateError and its repairs reported."""
        try:
            repaired = secure_dir(path, mode)
        except UnsafePathError as exc:
            raise NodeStateError(f"unsafe run directory: {exc}") from None
        except OSError as exc:
            raise NodeStateError(
                f"cannot create {exc.filename or path}: {exc.strerror} (run the hooks as "
                "root, or fix [paths] run_dir in the config)"
            ) from None
        if repaired:
            self._warn(f"repaired: {repaired}")

    def _move_old_layout(self) -> None:
        for name in _OLD_LAYOUT:
            old, new = self.root / name, self.private / name
            if os.path.lexists(old) and not os.path.lexists(new):
                try:
                    os.rename(old, new)
                except OSError as exc:
                    self._warn(f"cannot move {old} into {self.private}: {exc.strerror}")
        (self.root / "lock").unlink(missing_ok=True)

    def _ensure(self, directory: Path, mode: int = 0o700) -> None:
        """Create ``directory`` under the secured run directory."""
        if directory.is_dir():
            return
        self.secure()
        try:
            os.mkdir(directory, mode)
        except FileExistsError:
            pass
        except OSError as exc:
            raise NodeStateError(f"cannot create {directory}: {exc.strerror}", exc.errno) from None

    # -- locking and raw I/O ---------------------------------------------------------

    @contextmanager
    def lock(
        self, timeout: float = 60.0, poll: float = 0.02, shared: bool = False
    ) -> Iterator[None]:
        """Hold the node's version gate ``private/lock`` (hooks: ``shared``, so they never
        wait for each other on it; exclusive: what hooks before the GPU locks took);
        LockBusyError when it is not free within ``timeout`` seconds."""
        path = self.private / "lock"
        with self._flock(path, f"the node's slurm-mig lock {path}", timeout, poll, shared):
            yield

    @contextmanager
    def gpu_lock(self, gpu: int, timeout: float = 60.0, poll: float = 0.02) -> Iterator[None]:
        """Hold GPU ``gpu``'s exclusive lock (a hook deciding for and changing that GPU);
        LockBusyError when it is not free within ``timeout`` seconds (0: try once)."""
        path = self.locks / f"gpu{int(gpu)}"
        with self._flock(path, f"the slurm-mig lock of gpu {int(gpu)} {path}", timeout, poll):
            yield

    @contextmanager
    def node_lock(self, timeout: float = 10.0, poll: float = 0.005) -> Iterator[None]:
        """Hold the node-wide lock of short sections (rotating the runtime log; never a
        device call); LockBusyError when it is not free within ``timeout`` seconds."""
        path = self.locks / "node"
        with self._flock(path, f"the slurm-mig node lock {path}", timeout, poll):
            yield

    @contextmanager
    def _flock(
        self, path: Path, what: str, timeout: float, poll: float, shared: bool = False
    ) -> Iterator[None]:
        """Open ``path`` (root's, 0600, in a secured directory) and hold a ``flock`` on it."""
        self.secure()
        if path.parent == self.locks:
            self._secure_dir(self.locks, 0o700)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            raise NodeStateError(f"cannot open the lock file {path}: {exc.strerror}") from None
        try:
            try:
                repaired = check_file(path, fd, 0o600)
            except UnsafePathError as exc:
                raise NodeStateError(f"unsafe lock file: {exc}") from None
            if repaired:
                self._warn(f"repaired: {repaired}")
            if not _acquire(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX, timeout, poll):
                raise LockBusyError(
                    f"{what} was not free within {timeout:g} s (another prolog or epilog "
                    "is stuck; see [hooks] lock_timeout)"
                )
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def _write(self, path: Path, data: dict, mode: int = 0o600, reader: int | None = None) -> None:
        """Write ``data`` to ``path`` atomically, the hooks' own (``reader``: a user who
        may also read it, by an ACL entry)."""
        self._ensure(path.parent, 0o711 if path.parent.name == "task" else 0o700)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                os.fchmod(fd, mode)
                if reader is not None and reader != os.geteuid():
                    _grant_read(fd, path, reader)
                f.write(json.dumps(data, sort_keys=True) + "\n")
            os.replace(tmp, path)
        except NodeStateError:
            tmp.unlink(missing_ok=True)
            raise
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise NodeStateError(f"cannot write {path}: {exc.strerror}", exc.errno) from None

    def _read(self, path: Path, parse: Callable[[dict], object]) -> object | None:
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            self._warn(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}; ignoring it")
            return None
        try:
            return parse(json.loads(text))
        except _RECORD_ERRORS as exc:
            self._warn(f"{path} is not a valid record ({type(exc).__name__}: {exc}); ignoring it")
            return None

    def _remove(self, path: Path) -> bool:
        try:
            path.unlink()
            return True
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise NodeStateError(f"cannot remove {path}: {exc.strerror}") from None

    def _all(self, kind: str, parse: Callable[[dict], object]) -> list:
        try:
            paths = sorted((self.private / kind).glob("*.json"))
        except OSError:
            return []
        found = (self._read(p, parse) for p in paths if not p.name.startswith("."))
        return [r for r in found if r is not None]

    # -- records --------------------------------------------------------------------

    def job(self, job_id: str) -> JobRecord | None:
        return self._read(self._path("jobs", job_id), JobRecord.from_json)

    def jobs(self) -> list[JobRecord]:
        return self._all("jobs", JobRecord.from_json)

    def put_job(self, record: JobRecord) -> None:
        self._write(self._path("jobs", record.job_id), record.to_json())

    def remove_job(self, job_id: str) -> bool:
        return self._remove(self._path("jobs", job_id))

    def refusal(self, job_id: str) -> Refusal | None:
        return self._read(self._path("refused", job_id), Refusal.from_json)

    def put_refusal(self, refusal: Refusal) -> None:
        self._write(self._path("refused", refusal.job_id), refusal.to_json())

    def remove_refusal(self, job_id: str) -> bool:
        return self._remove(self._path("refused", job_id))

    def kept(self) -> list[KeptInstance]:
        return self._all("kept", KeptInstance.from_json)

    def put_kept(self, kept: KeptInstance) -> None:
        self._write(self._path("kept", _file_name(kept.uuid)), kept.to_json())

    def remove_kept(self, uuid: str) -> bool:
        return self._remove(self._path("kept", _file_name(uuid)))

    def energy_ledger(self, gpu: int):
        """GPU ``gpu``'s energy ledger (`energysplit.Ledger`), None when there is none
        (or it is unreadable: warned, and the ledger starts afresh)."""
        from ..slurm.energysplit import Ledger

        return self._read(self.private / "energy" / f"gpu{int(gpu)}.json", Ledger.from_json)

    def put_energy_ledger(self, gpu: int, ledger) -> None:
        """Write GPU ``gpu``'s energy ledger (under its GPU lock)."""
        self._write(self.private / "energy" / f"gpu{int(gpu)}.json", ledger.to_json())

    # -- the TaskProlog's view of its own job ------------------------------------------

    def task(self, job_id: str) -> JobRecord | Refusal | None:
        """The job's instance or refusal as the prolog left it for the TaskProlog."""
        return self._read(self._path("task", job_id), _task_item)

    def put_task(self, item: JobRecord | Refusal, uid: int | None) -> None:
        """Leave ``item`` for the job's TaskProlog: root's, mode 0400, with an ACL entry
        that lets ``uid`` (the job's user; None: root alone) read it, and nobody else."""
        data = {"kind": "job" if isinstance(item, JobRecord) else "refusal", **item.to_json()}
        self._write(self._path("task", item.job_id), data, mode=0o400, reader=uid)

    def remove_task(self, job_id: str) -> bool:
        return self._remove(self._path("task", job_id))

    # -- the runtime log -------------------------------------------------------------

    def finished_jobs(self, last: int = 1000) -> set[str]:
        """Ids of the jobs among the last ``last`` lines of the runtime log (the current
        file, then the rotated one), reading at most `TAIL_MAX_BYTES` of each."""
        lines = _tail_lines(self.runtimes_path, last)
        if len(lines) < last:
            lines = (
                _tail_lines(self.runtimes_path.with_name("runtimes.jsonl.1"), last - len(lines))
                + lines
            )
        done = set()
        for line in lines:
            try:
                done.add(str(json.loads(line)["job_id"]))
            except _RECORD_ERRORS:
                continue
        return done

    def append_runtime(self, entry: dict, rotate: bool = True) -> None:
        """Append one JSON line to ``runtimes.jsonl`` (one ``write`` call, O_APPEND);
        with ``rotate``, under the node lock, first rotate it to ``runtimes.jsonl.1`` when
        it has grown past `RUNTIMES_MAX_BYTES` (hooks on other GPUs append at the same
        time; two rotations at once would lose the older lines). NodeStateError when the
        line cannot be written (a full disk)."""
        self._ensure(self.private)
        if not rotate:
            self._append(entry)
            return
        try:
            with self.node_lock():
                self._rotate()
                self._append(entry)
        except LockBusyError:
            self._append(entry)  # not rotated this time: the file only grows a little

    def _rotate(self) -> None:
        path = self.runtimes_path
        try:
            if path.stat().st_size > RUNTIMES_MAX_BYTES:
                os.replace(path, path.with_name("runtimes.jsonl.1"))
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise NodeStateError(f"cannot rotate {path}: {exc.strerror}") from None

    def _append(self, entry: dict) -> None:
        path = self.runtimes_path
        line = (json.dumps(entry, sort_keys=True) + "\n").encode()
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            raise NodeStateError(f"cannot open {path}: {exc.strerror}", exc.errno) from None
        try:
            if os.write(fd, line) != len(line):
                raise OSError(errno.ENOSPC, "short write: the disk is full")
        except OSError as exc:
            raise NodeStateError(f"cannot write {path}: {exc.strerror}", exc.errno) from None
        finally:
            os.close(fd)


def _acquire(fd: int, mode: int, timeout: float, poll: float) -> bool:
    """Take ``flock`` ``mode`` on ``fd``, trying every ``poll`` seconds; False when it was
    not free within ``timeout`` (0: one try)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(poll)


def _task_item(data: dict) -> JobRecord | Refusal:
    kind = data.pop("kind")
    if kind == "job":
        return JobRecord.from_json(data)
    if kind == "refusal":
        return Refusal.from_json(data)
    raise ValueError(f"unknown kind {kind!r}")


def _tail_lines(path: Path, count: int) -> list[str]:
    """The last ``count`` complete lines of ``path`` within its last `TAIL_MAX_BYTES`."""
    if count <= 0:
        return []
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            start = max(0, size - TAIL_MAX_BYTES)
            f.seek(start)
            data = f.read(TAIL_MAX_BYTES)
    except OSError:
        return []
    lines = data.decode("utf-8", "replace").split("\n")
    if start > 0:
        lines = lines[1:]  # the first is cut
    return [x for x in lines if x][-count:]


def _file_name(uuid: str) -> str:
    """A file name for an instance uuid (old drivers write ``MIG-GPU-<uuid>/1/0``)."""
    return _UNSAFE_CHARS.sub("_", uuid)[:128]
