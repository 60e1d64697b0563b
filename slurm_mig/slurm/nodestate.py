"""Node-local records of which job owns which MIG instance, shared by the hooks.

Layout under ``config.run_dir_for(node)`` (directory 0755, files 0644, so the
TaskProlog, running as the job's user, can read what the root prolog wrote):

- ``jobs/<job_id>.json``: the instance a job runs on (`JobRecord`).
- ``refused/<job_id>.json``: why the prolog gave a job no instance (`Refusal`).
- ``kept/<uuid>.json``: an instance kept after its job for the next one (`KeptInstance`).
- ``runtimes.jsonl``: one line per finished job (written by the epilog).
- ``lock``: the prolog and epilog hold an exclusive ``fcntl`` lock on it while they decide.

Writes are atomic (temporary file + rename), so readers never see half a record. Only
the standard library and ``geometry`` are imported: the hooks are on the job start path.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from ..geometry import Placement

ACTIONS = ("fail", "requeue")
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}$")
_UNSAFE_CHARS = re.compile(r"[^A-Za-z0-9_.-]")


class NodeStateError(OSError):
    """The run directory cannot be created or written; the message names the path."""


def _placement(data: object) -> Placement:
    if not isinstance(data, dict):
        raise ValueError(f"placement must be {{start, size}}, got {data!r}")
    return Placement(int(data["start"]), int(data["size"]))


def _to_json(obj: object) -> dict:
    data = asdict(obj)
    data["placement"] = obj.placement.to_json()
    return data


@dataclass(frozen=True)
class JobRecord:
    """The MIG instance a run of a job was given by the prolog."""

    job_id: str
    restart: int
    gpu: int
    profile: str
    placement: Placement
    uuid: str
    created: float  # epoch seconds the instance came to exist (earlier when adopted)
    ready: float  # epoch seconds the prolog finished preparing it for this job
    reused: bool  # adopted from a kept instance (or a retried prolog), not created
    keep_for: str | None = None  # job that inherits the instance after this one

    def to_json(self) -> dict:
        return _to_json(self)

    @classmethod
    def from_json(cls, data: dict) -> JobRecord:
        return cls(
            job_id=str(data["job_id"]),
            restart=int(data["restart"]),
            gpu=int(data["gpu"]),
            profile=str(data["profile"]),
            placement=_placement(data["placement"]),
            uuid=str(data["uuid"]),
            created=float(data["created"]),
            ready=float(data["ready"]),
            reused=bool(data["reused"]),
            keep_for=None if data.get("keep_for") is None else str(data["keep_for"]),
        )


@dataclass(frozen=True)
class Refusal:
    """Why a job got no instance, and what the TaskProlog does about it."""

    job_id: str
    action: str  # "fail": the job cannot run as submitted; "requeue": try again later
    reason: str

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(f"refusal action must be one of {ACTIONS}, got {self.action!r}")

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> Refusal:
        return cls(str(data["job_id"]), str(data["action"]), str(data["reason"]))


@dataclass(frozen=True)
class KeptInstance:
    """An instance left in place after its job, for ``for_job`` until ``until``."""

    gpu: int
    profile: str
    placement: Placement
    uuid: str
    for_job: str | None
    until: float  # epoch seconds; after it any prolog or epilog may destroy it
    created: float | None = None  # epoch seconds the instance came to exist

    def to_json(self) -> dict:
        return _to_json(self)

    @classmethod
    def from_json(cls, data: dict) -> KeptInstance:
        return cls(
            gpu=int(data["gpu"]),
            profile=str(data["profile"]),
            placement=_placement(data["placement"]),
            uuid=str(data["uuid"]),
            for_job=None if data.get("for_job") is None else str(data["for_job"]),
            until=float(data["until"]),
            created=None if data.get("created") is None else float(data["created"]),
        )


class NodeState:
    """The records of one node under ``root``; ``warn`` hears of unreadable records."""

    def __init__(self, root: str | Path, warn: Callable[[str], None] | None = None) -> None:
        self.root = Path(root)
        self._warn = warn or (lambda _msg: None)

    # -- paths --------------------------------------------------------------------

    def _path(self, kind: str, name: str) -> Path:
        if not _SAFE_NAME.match(name):
            raise ValueError(f"{kind} record name {name!r} is not a plain file name")
        return self.root / kind / f"{name}.json"

    @property
    def runtimes_path(self) -> Path:
        return self.root / "runtimes.jsonl"

    def _ensure(self, directory: Path) -> None:
        """Create ``directory`` and missing parents 0755 whatever the umask (the
        TaskProlog, running as the user, must be able to read the records)."""
        missing = []
        d = directory
        while not d.is_dir():
            missing.append(d)
            d = d.parent
        try:
            for d in reversed(missing):
                try:
                    d.mkdir()
                except FileExistsError:
                    continue
                os.chmod(d, 0o755)
        except OSError as exc:
            raise NodeStateError(
                f"cannot create {directory}: {exc.strerror} (run the hooks as root, or fix "
                "[paths] run_dir in the config)"
            ) from None

    # -- locking and raw I/O ---------------------------------------------------------

    @contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the node's exclusive state lock (prolog and epilog decide under it)."""
        self._ensure(self.root)
        path = self.root / "lock"
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise NodeStateError(f"cannot open the lock file {path}: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def _write(self, path: Path, data: dict) -> None:
        self._ensure(path.parent)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(json.dumps(data, sort_keys=True) + "\n")
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise NodeStateError(f"cannot write {path}: {exc.strerror}") from None

    def _read(self, path: Path, parse: Callable[[dict], object]) -> object | None:
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as exc:
            self._warn(f"cannot read {path}: {exc.strerror}; ignoring it")
            return None
        try:
            return parse(json.loads(text))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            self._warn(f"{path} is not a valid record ({exc}); ignoring it")
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
            paths = sorted((self.root / kind).glob("*.json"))
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

    def finished_jobs(self, last: int = 1000) -> set[str]:
        """Ids of the jobs among the last ``last`` lines of the runtime log."""
        try:
            lines = self.runtimes_path.read_text().splitlines()[-last:]
        except OSError:
            return set()
        done = set()
        for line in lines:
            try:
                done.add(str(json.loads(line)["job_id"]))
            except (ValueError, KeyError, TypeError):
                continue
        return done

    def append_runtime(self, entry: dict) -> None:
        """Append one JSON line to ``runtimes.jsonl`` (one ``write`` call, O_APPEND)."""
        self._ensure(self.root)
        line = (json.dumps(entry, sort_keys=True) + "\n").encode()
        try:
            fd = os.open(self.runtimes_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        except OSError as exc:
            raise NodeStateError(f"cannot open {self.runtimes_path}: {exc.strerror}") from None
        try:
            os.write(fd, line)
        finally:
            os.close(fd)


def _file_name(uuid: str) -> str:
    """A file name for an instance uuid (old drivers write ``MIG-GPU-<uuid>/1/0``)."""
    return _UNSAFE_CHARS.sub("_", uuid)[:128]
