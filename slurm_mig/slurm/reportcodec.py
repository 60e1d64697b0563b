"""Report lines: how a node's report is made, signed and checked (see `reports`).

The wire format, one line per report (ASCII, at most `MAX_REPORT` bytes)::

    R1 <base64url(payload)> <base64url(mac)>\\n

``mac`` is HMAC-SHA256 of ``"slurm-mig report 1\\0" + payload`` under the site key (the
key that signs the assignment tokens; only root reads it), truncated to 128 bits: a user
on a node cannot make or alter a report, and a token can never pass for a report (other
domain). ``payload`` is compact JSON: ``id`` (``node/kind/job/restart/seq``), ``node``,
``kind``, ``job``, ``restart``, ``seq``, ``at`` and ``data``. The receiver checks the
length and alphabet, then the MAC, and only then parses the payload.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Mapping
from typing import Any

__all__ = [
    "BATCH",
    "KEY_CHARS",
    "KINDS",
    "MAC_BYTES",
    "MAGIC",
    "MAX_REPORT",
    "ReportError",
    "check_payload",
    "make",
    "open_report",
    "payload_id",
    "plain",
    "report_id",
    "signed",
    "whole_number",
]

MAGIC = "R1"
MAC_BYTES = 16
MAX_REPORT = 64 << 10  # bytes of one report line
KINDS = ("run", "instances", "memory")
BATCH = 64  # reports per connection: a node sends at most this many, the receiver reads as many
# the characters of a job kind in a memory report (and in mig-run's need file)
KEY_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
_MAC_DOMAIN = b"slurm-mig report 1\0"
_B64 = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
_NAME = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.@+-")


class ReportError(ValueError):
    """A report line that is malformed, oversized, forged or altered; ``reason`` is the
    one word the receiver answers with."""

    def __init__(self, reason: str, text: str) -> None:
        super().__init__(text)
        self.reason = reason


# -- the codec ------------------------------------------------------------------------------


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    if not _B64.issuperset(text) or len(text) % 4 == 1:
        raise ReportError("invalid", "not base64url")
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if _b64(raw) != text:  # one spelling per report: no free bits to alter
        raise ReportError("invalid", "not canonical base64url")
    return raw


def _mac(key: bytes, payload: bytes) -> bytes:
    return hmac.new(key, _MAC_DOMAIN + payload, hashlib.sha256).digest()[:MAC_BYTES]


def plain(text: object, most: int = 64) -> bool:
    """A node name or job id: 1 to ``most`` characters of ``[A-Za-z0-9_.@+-]``."""
    return isinstance(text, str) and 0 < len(text) <= most and _NAME.issuperset(text)


def report_id(node: str, kind: str, job: str, restart: int, seq: int) -> str:
    return f"{node}/{kind}/{job}/{restart}/{seq}"


def make(
    key: bytes,
    node: str,
    kind: str,
    data: Mapping[str, Any],
    *,
    job: str = "-",
    restart: int = 0,
    seq: int = 0,
    at: float | None = None,
) -> str:
    """The signed report line (no newline). ValueError for a bad field or a report
    longer than `MAX_REPORT`."""
    if kind not in KINDS or not plain(node, 255) or not plain(job):
        raise ValueError(f"cannot make a {kind!r} report for node {node!r}, job {job!r}")
    body = {
        "id": report_id(node, kind, job, int(restart), int(seq)),
        "node": node,
        "kind": kind,
        "job": job,
        "restart": int(restart),
        "seq": int(seq),
        "at": round(time.time() if at is None else at, 3),
        "data": dict(data),
    }
    payload = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    line = f"{MAGIC} {_b64(payload)} {_b64(_mac(key, payload))}"
    if len(line) + 1 > MAX_REPORT:
        raise ValueError(f"the {kind} report of node {node} has {len(line)} bytes")
    return line


def open_report(line: bytes | str, key: bytes) -> dict[str, Any]:
    """The payload of a genuine report line; ReportError otherwise. Length, alphabet and
    MAC are checked before a byte of the payload is parsed."""
    if isinstance(line, str):
        line = line.encode("ascii", "replace")
    line = line.rstrip(b"\r\n")
    if len(line) + 1 > MAX_REPORT:
        raise ReportError("oversize", f"a report of {len(line)} bytes (most {MAX_REPORT})")
    try:
        text = line.decode("ascii")
    except UnicodeDecodeError:
        raise ReportError("invalid", "not ASCII") from None
    parts = text.split(" ")
    if len(parts) != 3 or parts[0] != MAGIC:
        raise ReportError("invalid", f"not a report (want '{MAGIC} payload mac')")
    payload, mac = _unb64(parts[1]), _unb64(parts[2])
    if len(mac) != MAC_BYTES or not hmac.compare_digest(mac, _mac(key, payload)):
        raise ReportError("mac", "wrong signature (forged, altered, or another site key)")
    return check_payload(payload)


def check_payload(payload: bytes) -> dict[str, Any]:
    """The parsed, checked payload of a report whose MAC is genuine."""
    try:
        body = json.loads(payload)
    except (ValueError, RecursionError):
        raise ReportError("invalid", "the payload is not JSON") from None
    if not isinstance(body, dict):
        raise ReportError("invalid", "the payload is not an object")
    node, kind, job = body.get("node"), body.get("kind"), body.get("job")
    restart, seq, at = body.get("restart"), body.get("seq"), body.get("at")
    ok = (
        plain(node, 255)
        and kind in KINDS
        and plain(job)
        and whole_number(restart)
        and whole_number(seq)
        and isinstance(at, int | float)
        and not isinstance(at, bool)
        and isinstance(body.get("data"), dict)
        and body.get("id") == report_id(node, kind, job, restart, seq)  # type: ignore[arg-type]
    )
    if not ok:
        raise ReportError("invalid", "the payload lacks a field or has a wrong one")
    body["digest"] = hashlib.sha256(payload).hexdigest()
    return body


def whole_number(x: object) -> bool:
    """An int (not a bool) in [0, 2**63): a count, sequence number or byte size."""
    return isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 2**63


def signed(line: str, key: bytes) -> str:
    """``line`` with its MAC made under ``key`` when it was made under another (a
    report spooled before the site key changed); the line itself when it verifies or is
    not a report line."""
    parts = line.split(" ")
    if len(parts) != 3 or parts[0] != MAGIC:
        return line
    try:
        payload, mac = _unb64(parts[1]), _unb64(parts[2])
    except ValueError:
        return line
    if hmac.compare_digest(mac, _mac(key, payload)):
        return line
    return f"{MAGIC} {parts[1]} {_b64(_mac(key, payload))}"


def payload_id(line: str) -> str | None:
    """The id in a report line of our own spool (no MAC check: the spool is root's)."""
    try:
        return str(json.loads(_unb64(line.split(" ")[1]))["id"])
    except (IndexError, ValueError, KeyError, TypeError, ReportError):
        return None
