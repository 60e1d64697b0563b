"""A planned job's assignment and the signed token that carries it to the prolog.

The planner daemon signs each assignment with HMAC-SHA256 under a key only root can
read (``key_file``, the same on every node) and puts the token in the job's Comment,
which the prolog sees as SLURM_JOB_COMMENT without calling Slurm. A user may edit their
own Comment, so the token binds the job id, the restart count, the node and one plan
(``plan``, an id the AdminComment holds too): a token copied from another job, an older
run or an earlier plan of the same job, or another node is refused.

Token format 2 (``migplan=2<base64url>``): a compact binary payload followed by its
HMAC-SHA256 truncated to 128 bits, about 130 characters for a typical job (format 1,
base64 JSON, took about 380 of the Comment's 1024). The MAC is checked before any byte
of the payload is read, and every length is bounded before anything is decoded.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import math
import os
import stat
import struct
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from ..geometry import MAX_TASKS, Placement, gang_placements, get_model
from ..jobcomment import MAX_TOKEN_CHARS  # longest token signed; longer words are refused undecoded

TOKEN_VERSION = "2"  # the first character of a token
KEY_BYTES = 32
MAC_BYTES = 16  # HMAC-SHA256 truncated to 128 bits
MAX_TEXT_BYTES = 64  # job ids, node, model and profile names in a token
_MAC_DOMAIN = b"slurm-mig token 2\0"
# character sets, not regular expressions: compiling those costs the hooks' start
_B64_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def valid_plan_id(plan: str) -> bool:
    """A plan id is 8 to 22 base64url characters (`plan_id` makes 12)."""
    return 8 <= len(plan) <= 22 and _B64_CHARS.issuperset(plan)


class AssignmentError(ValueError):
    """A token that is missing, malformed, forged, stale or meant for another job."""


class OldTokenError(AssignmentError):
    """A genuine token of an older format (signed before an upgrade): re-plan the job."""


class KeyFileError(AssignmentError):
    """The signing key cannot be used: missing, unreadable, malformed or not root-only."""


@dataclass(frozen=True)
class Assignment:
    """Where and when one job runs: its node, GPU, MIG profile and placement. A job of
    several slices (``tasks`` > 1) runs on ``tasks`` instances of ``profile`` at
    `geometry.gang_placements` inside ``placement``, its region."""

    job_id: str
    restart: int  # SLURM_JOB_RESTART_COUNT the token is valid for
    node: str
    gpu: int  # GPU index on the node
    model: str  # geometry model name of that GPU
    profile: str  # e.g. "3g.20gb"
    placement: Placement
    batch: int
    order: int  # position among the jobs planned on this GPU, from 0
    planned_seconds: float  # planned runtime on this profile
    issued: float  # epoch seconds
    reuse_from: str | None = None  # job whose instance this job inherits, if any
    keep_for: str | None = None  # job that inherits this job's instance, if any
    plan: str = ""  # id of this plan of this run (`plan_id`); "" in records before it
    tasks: int = 1  # instances, one per task (`geometry.gangs`); 1 in records before it

    def instance_placements(self) -> tuple[Placement, ...]:
        """Where its instances go, task 0 first: ``placement`` for a single job, else
        `geometry.gang_placements` inside it. AssignmentError when the region cannot
        hold them (a genuine planner never signs such an assignment)."""
        if self.tasks == 1:
            return (self.placement,)
        try:
            model = get_model(self.model)
            size = model.profile(self.profile).compute_slices
        except ValueError as exc:
            raise AssignmentError(f"malformed assignment: {exc}") from None
        got = gang_placements(model, self.placement, size, self.tasks)
        if got is None:
            raise AssignmentError(
                f"malformed assignment: {self.tasks} instances of {self.profile} do not fit "
                f"in placement {self.placement.start}:{self.placement.size}"
            )
        return got

    def to_json(self) -> dict:
        data = asdict(self)
        data["placement"] = self.placement.to_json()
        if self.tasks == 1:
            del data["tasks"]  # a single job's record as before
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Assignment:
        """An assignment from its JSON record (`to_json`; the AdminComment holds it): each
        field converted to its type, an unknown field refused, a record written before plan
        ids given the one `plan_id` makes. AssignmentError says what is malformed."""
        if not isinstance(data, Mapping):
            raise AssignmentError("malformed assignment: not a JSON object")
        extra = set(data) - _FIELDS
        if extra:
            raise AssignmentError(f"malformed assignment: unknown fields {sorted(extra)}")
        try:
            pl = data["placement"]
            a = cls(
                job_id=str(data["job_id"]),
                restart=int(data["restart"]),
                node=str(data["node"]),
                gpu=int(data["gpu"]),
                model=str(data["model"]),
                profile=str(data["profile"]),
                placement=Placement(int(pl["start"]), int(pl["size"])),
                batch=int(data["batch"]),
                order=int(data["order"]),
                planned_seconds=float(data["planned_seconds"]),
                issued=float(data.get("issued", 0.0)),
                reuse_from=_text_or_none(data.get("reuse_from")),
                keep_for=_text_or_none(data.get("keep_for")),
                tasks=_tasks(data.get("tasks", 1)),
            )
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise AssignmentError(f"malformed assignment: {exc!r}") from None
        plan = data.get("plan")
        return replace(a, plan=plan if isinstance(plan, str) and plan else plan_id(a))


_FIELDS = frozenset(f.name for f in fields(Assignment))


def _tasks(value: object) -> int:
    """A count of instances, 1 to `MAX_TASKS`."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_TASKS:
        raise ValueError(f"tasks {value!r} is not a whole number from 1 to {MAX_TASKS}")
    return value


def _text_or_none(value: object) -> str | None:
    return None if value is None else str(value)


def plan_id(a: Assignment) -> str:
    """A 12-character id of this plan of this run of the job: a digest of what the
    planner decided and when (``issued`` = planning time), so a re-plan gets a new id."""
    what = (
        f"{a.job_id}\0{a.restart}\0{a.node}\0{a.gpu}\0{a.model}\0{a.profile}\0"
        f"{a.placement.start}:{a.placement.size}\0{a.batch}\0{a.order}\0{a.issued!r}"
    ) + (f"\0{a.tasks}" if a.tasks > 1 else "")
    return _b64(hashlib.sha256(what.encode()).digest()[:9])


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _mac(key: bytes, payload: bytes) -> bytes:
    return hmac.new(key, _MAC_DOMAIN + payload, hashlib.sha256).digest()[:MAC_BYTES]


# -- the binary payload ------------------------------------------------------------------


class _Writer:
    def __init__(self) -> None:
        self.out = bytearray()

    def uint(self, n: int) -> None:
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n < 2**63:
            raise AssignmentError(f"cannot sign {n!r}: not a whole number >= 0")
        while n >= 0x80:
            self.out.append(n & 0x7F | 0x80)
            n >>= 7
        self.out.append(n)

    def text(self, s: str | None) -> None:
        raw = (s or "").encode()
        if len(raw) > MAX_TEXT_BYTES:
            raise AssignmentError(f"cannot sign {s!r}: longer than {MAX_TEXT_BYTES} bytes")
        self.out.append(len(raw))
        self.out += raw

    def real(self, x: float) -> None:
        if not math.isfinite(x):
            raise AssignmentError(f"cannot sign {x!r}: not a finite number")
        self.out += struct.pack(">d", x)


class _Reader:
    """Reads what `_Writer` wrote; any overrun or leftover is a malformed token."""

    def __init__(self, raw: bytes) -> None:
        self.raw, self.pos = raw, 0

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.raw):
            raise AssignmentError("the assignment token is malformed (truncated)")
        chunk = self.raw[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def uint(self) -> int:
        n = shift = 0
        for _ in range(9):
            b = self.take(1)[0]
            n |= (b & 0x7F) << shift
            if not b & 0x80:
                return n
            shift += 7
        raise AssignmentError("the assignment token is malformed (number too long)")

    def text(self) -> str:
        n = self.take(1)[0]
        if n > MAX_TEXT_BYTES:
            raise AssignmentError("the assignment token is malformed (text too long)")
        try:
            return self.take(n).decode()
        except UnicodeDecodeError:
            raise AssignmentError("the assignment token is malformed (text)") from None

    def real(self) -> float:
        (x,) = struct.unpack(">d", self.take(8))
        if not math.isfinite(x):
            raise AssignmentError("the assignment token is malformed (number)")
        return x


def _pack(a: Assignment, plan: str) -> bytes:
    w = _Writer()
    w.text(a.job_id)
    w.uint(a.restart)
    w.text(a.node)
    w.uint(a.gpu)
    w.text(a.model)
    w.text(a.profile)
    w.uint(a.placement.start)
    w.uint(a.placement.size)
    w.uint(a.batch)
    w.uint(a.order)
    w.real(float(a.planned_seconds))
    w.real(float(a.issued))
    w.text(a.reuse_from)
    w.text(a.keep_for)
    w.text(plan)
    if a.tasks != 1:  # a single job's token is as before
        if (
            isinstance(a.tasks, bool)
            or not isinstance(a.tasks, int)
            or not 2 <= a.tasks <= MAX_TASKS
        ):
            raise AssignmentError(f"cannot sign tasks={a.tasks!r}: from 1 to {MAX_TASKS}")
        w.uint(a.tasks)
    return bytes(w.out)


def _unpack(raw: bytes) -> Assignment:
    r = _Reader(raw)
    job_id, restart, node, gpu = r.text(), r.uint(), r.text(), r.uint()
    model, profile = r.text(), r.text()
    placement = Placement(r.uint(), r.uint())
    batch, order, planned, issued = r.uint(), r.uint(), r.real(), r.real()
    reuse_from, keep_for, plan = r.text() or None, r.text() or None, r.text()
    tasks = 1
    if r.pos < len(raw):  # only a job of several slices signs its count
        tasks = r.uint()
        if not 2 <= tasks <= MAX_TASKS:
            raise AssignmentError("the assignment token is malformed (tasks)")
    if r.pos != len(raw):
        raise AssignmentError("the assignment token is malformed (trailing bytes)")
    return Assignment(
        job_id, restart, node, gpu, model, profile, placement, batch, order, planned, issued,
        reuse_from, keep_for, plan, tasks,
    )  # fmt: skip


# -- signing and checking ------------------------------------------------------------------


def sign(assignment: Assignment, key: bytes) -> str:
    """``2<base64url(payload || mac)>``: the assignment in a compact binary form and its
    truncated HMAC. An assignment without a plan id gets `plan_id` of itself."""
    payload = _pack(assignment, assignment.plan or plan_id(assignment))
    token = TOKEN_VERSION + _b64(payload + _mac(key, payload))
    if len(token) > MAX_TOKEN_CHARS:  # ids and names of 64 bytes; real ones are far shorter
        raise AssignmentError(
            f"cannot sign the assignment of job {assignment.job_id}: its token would take "
            f"{len(token)} characters, more than {MAX_TOKEN_CHARS}"
        )
    return token


def open_token(token: str, key: bytes) -> Assignment:
    """The assignment a genuine token carries. AssignmentError when it is malformed,
    forged or altered; OldTokenError for a genuine token of format 1. The length and
    alphabet are checked first, then the MAC; only then is the payload read."""
    if token.startswith("v1.") and len(token) <= 1024:  # format 1 took about 380
        _open_v1(token, key)
    if len(token) > MAX_TOKEN_CHARS:
        raise AssignmentError(
            f"the assignment token is malformed (longer than {MAX_TOKEN_CHARS} characters)"
        )
    body = token[1:]
    if token[:1] != TOKEN_VERSION or not _B64_CHARS.issuperset(body) or len(body) % 4 == 1:
        raise AssignmentError("the assignment token is malformed")
    raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    if _b64(raw) != body:  # one spelling per token: no free bits to alter
        raise AssignmentError("the assignment token is malformed")
    if len(raw) <= MAC_BYTES:
        raise AssignmentError("the assignment token is malformed (too short)")
    payload, mac = raw[:-MAC_BYTES], raw[-MAC_BYTES:]
    if not hmac.compare_digest(mac, _mac(key, payload)):
        raise AssignmentError("the assignment token's signature is wrong (forged or altered)")
    return _unpack(payload)


def _open_v1(token: str, key: bytes) -> None:
    """Format 1 (``v1.<base64 JSON>.<mac>``): never parsed; OldTokenError when its MAC
    is genuine (the planner re-plans the job), AssignmentError when not."""
    parts = token.split(".")
    if len(parts) == 3 and all(p and _B64_CHARS.issuperset(p.rstrip("=")) for p in parts[1:]):
        want = hmac.new(key, f"v1.{parts[1]}".encode(), hashlib.sha256).digest()
        try:
            mac = base64.urlsafe_b64decode(parts[2] + "=" * (-len(parts[2]) % 4))
        except ValueError:
            mac = b""
        if hmac.compare_digest(mac, want):
            raise OldTokenError(
                "the assignment token is of an older slurm-mig (format 1, no plan id); "
                "the planner will plan the job again"
            )
    raise AssignmentError("the assignment token's signature is wrong (forged or altered)")


def check_binding(
    a: Assignment, *, job_id: str, restart: int, node: str, now: float, max_age: float
) -> None:
    """AssignmentError unless the genuine assignment ``a`` is meant for this run of this
    job on this node and was issued at most ``max_age`` seconds ago."""
    if a.job_id != str(job_id):
        raise AssignmentError(f"the assignment is for job {a.job_id}, not job {job_id}")
    if a.restart != restart:
        raise AssignmentError(
            f"the assignment is for run {a.restart} of the job, this is run {restart} "
            "(stale after a requeue)"
        )
    if a.node != node:
        raise AssignmentError(f"the assignment is for node {a.node}, not {node}")
    if now - a.issued > max_age:
        raise AssignmentError(
            f"the assignment was issued {now - a.issued:.0f} s ago, over the {max_age:.0f} s limit"
        )


def verify(
    token: str,
    key: bytes,
    *,
    job_id: str,
    restart: int,
    node: str,
    now: float,
    max_age: float,
) -> Assignment:
    """The assignment in ``token`` if it is genuine and meant for this run of this job
    on this node, issued at most ``max_age`` seconds ago; else AssignmentError."""
    a = open_token(token, key)
    check_binding(a, job_id=job_id, restart=restart, node=node, now=now, max_age=max_age)
    return a


# -- the key -------------------------------------------------------------------------------


def key_problem(st: os.stat_result, path: Path, euid: int | None = None) -> str | None:
    """Why a key file with status ``st`` must not be trusted (another owner than root or
    the process, any group or other permission), with the fix; None when it is fine."""
    euid = os.geteuid() if euid is None else euid
    if not stat.S_ISREG(st.st_mode):
        return f"{path}: the signing key is not a regular file; recreate it with 'slurm-mig keygen'"
    if st.st_uid not in (0, euid):
        return (
            f"{path}: the signing key is owned by uid {st.st_uid}, not root; "
            f"run 'chown root:root {path}' (whoever owns it can forge any assignment)"
        )
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        return (
            f"{path}: the signing key is readable or writable by others (mode {mode:04o}); "
            f"run 'chmod 600 {path}' (anyone who can read it can forge any assignment)"
        )
    return None


def load_key(path: str | Path) -> bytes:
    """The signing key; KeyFileError naming the file and the fix when it is missing,
    unreadable, malformed, or not root's alone (owner root, mode 0600 or stricter)."""
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise KeyFileError(
            f"{p}: no signing key; create one with 'slurm-mig keygen {p}' and copy it to "
            "every node (mode 0600, owner root)"
        ) from None
    except PermissionError:
        raise KeyFileError(f"{p}: cannot read the signing key (run as root)") from None
    except OSError as exc:
        raise KeyFileError(
            f"{p}: cannot open the signing key ({exc.strerror}; a symlink is refused)"
        ) from None
    try:
        problem = key_problem(os.fstat(fd), p)
        if problem:
            raise KeyFileError(problem)
        raw = os.read(fd, 4096).strip()
    finally:
        os.close(fd)
    try:
        key = bytes.fromhex(raw.decode())
    except (UnicodeDecodeError, ValueError):
        raise KeyFileError(f"{p}: the signing key must be hex text") from None
    if len(key) < 16:
        raise KeyFileError(f"{p}: the signing key is too short (want {KEY_BYTES} bytes)")
    return key


def generate_key(path: str | Path) -> Path:
    """Write a new random key, readable by its owner only; refuses to overwrite."""
    import secrets

    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(KEY_BYTES) + "\n")
    return p
