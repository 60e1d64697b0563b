"""A planned job's assignment and the signed token that carries it to the prolog.

The planner daemon signs each assignment with HMAC-SHA256 under a key only root can
read (``key_file``, the same on every node) and puts the token in the job's Comment,
which the prolog sees as SLURM_JOB_COMMENT without calling Slurm. A user may edit their
own Comment, so the token binds the job id, the restart count and the node: a token
copied from another job, an older run of the same job or another node is refused.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from ..geometry import Placement

TOKEN_VERSION = "v1"
COMMENT_TAG = "migplan="
_TOKEN_RE = re.compile(r"(?:^|\s)migplan=(\S*)")
KEY_BYTES = 32


class AssignmentError(ValueError):
    """A token that is missing, malformed, forged, stale or meant for another job."""


@dataclass(frozen=True)
class Assignment:
    """Where and when one job runs: its node, GPU, MIG profile and placement."""

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

    def to_json(self) -> dict:
        data = asdict(self)
        data["placement"] = self.placement.to_json()
        return data

    @classmethod
    def from_json(cls, data: dict) -> Assignment:
        try:
            fields = dict(data)
            pl = fields.pop("placement")
            return cls(placement=Placement(int(pl["start"]), int(pl["size"])), **fields)
        except (KeyError, TypeError, ValueError) as exc:
            raise AssignmentError(f"malformed assignment: {exc}") from None


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def sign(assignment: Assignment, key: bytes) -> str:
    """``v1.<payload>.<mac>``: base64url JSON and its HMAC-SHA256."""
    payload = _b64(json.dumps(assignment.to_json(), sort_keys=True, separators=(",", ":")).encode())
    mac = hmac.new(key, f"{TOKEN_VERSION}.{payload}".encode(), hashlib.sha256).digest()
    return f"{TOKEN_VERSION}.{payload}.{_b64(mac)}"


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
    parts = token.split(".")
    if len(parts) != 3 or parts[0] != TOKEN_VERSION:
        raise AssignmentError("the assignment token is malformed")
    try:
        mac = _unb64(parts[2])
    except ValueError:
        raise AssignmentError("the assignment token is malformed") from None
    want = hmac.new(key, f"{parts[0]}.{parts[1]}".encode(), hashlib.sha256).digest()
    if not hmac.compare_digest(mac, want):
        raise AssignmentError("the assignment token's signature is wrong (forged or altered)")
    try:
        a = Assignment.from_json(json.loads(_unb64(parts[1])))
    except (ValueError, UnicodeDecodeError) as exc:
        raise AssignmentError(f"the assignment token is malformed: {exc}") from None
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
    return a


def token_from_comment(comment: str | None) -> str | None:
    """The token in a job comment, or None when there is none."""
    if not comment:
        return None
    m = _TOKEN_RE.search(comment)
    return m.group(1) if m else None


def comment_with_token(comment: str | None, token: str | None) -> str:
    """``comment`` with its token replaced by ``token`` (removed when None)."""
    rest = _TOKEN_RE.sub("", comment or "").strip()
    if token is None:
        return rest
    return f"{rest} {COMMENT_TAG}{token}".strip()


def load_key(path: str | Path) -> bytes:
    """The signing key; an error that names the file and the fix when unusable."""
    p = Path(path)
    try:
        raw = p.read_bytes().strip()
    except FileNotFoundError:
        raise AssignmentError(
            f"{p}: no signing key; create one with 'slurm-mig keygen {p}' and copy it to "
            "every node (mode 0600, owner root)"
        ) from None
    except PermissionError:
        raise AssignmentError(f"{p}: cannot read the signing key (run as root)") from None
    try:
        key = bytes.fromhex(raw.decode())
    except (UnicodeDecodeError, ValueError):
        raise AssignmentError(f"{p}: the signing key must be hex text") from None
    if len(key) < 16:
        raise AssignmentError(f"{p}: the signing key is too short (want {KEY_BYTES} bytes)")
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
