"""One active planner daemon: a lease in the planner's state directory.

``[paths] state_dir`` is shared between Slurm's primary and backup controller hosts the
way slurmctld's StateSaveLocation is, possibly over NFS, where a lock held by a host
that died or lost the network is not a reliable signal. So the lease is a record, in the
manner of slurmctld's own ``heartbeat`` file: ``<state_dir>/planner-lease.json`` names
its holder (host, pid, boot id, a random instance id, since when it holds it, when it
last renewed it and its ttl), written to a temporary file and renamed over the old one
(atomic on a local file system and on NFS). The holder renews it every few seconds.

A daemon may take the lease when it is free (no record, or released at a clean stop),
its own (the record names this host: we hold the host lock below, so the daemon that
wrote it is dead), or expired: last renewed more than the holder's ttl ago, by this
host's clock against the record, or, whatever the clocks say, unchanged for the ttl
while this daemon watched it (a holder whose clock runs ahead). To take it, a daemon
writes its claim, waits `SETTLE` seconds and reads it back: of two daemons that claim
at once, the one whose rename came last holds it and the other sees that and waits.

A holder that finds the record naming someone else (it was paused or cut off for longer
than its ttl and a standby took over) has lost the lease: it stops planning. And a
holder that could not confirm the lease for most of a ttl sends nothing to Slurm
(`Lease.holds`), so that a paused daemon that wakes up mid-cycle does not write a single
action before it has looked.

Beside the record, ``<state_dir>/planner-<host>.lock`` is held with flock for the
daemon's lifetime: a second daemon on the same host and state directory refuses at
once. Its name is per host, so over NFS hosts never contend for it.

All times come through injected clocks (``clock``: the wall clock written in records;
``monotonic``: intervals), so tests fake time.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

LEASE_FILE = "planner-lease.json"
# 30 s: six renewals at the default renewal interval (ttl / 6 = 5 s, the default cycle),
# so one slow write to a busy NFS server or a missed renewal does not lose the lease,
# while a standby takes over within about 40 s of the active daemon's death: well inside
# slurmctld's own SlurmctldTimeout (120 s by default) for the same failover. Controller
# clocks must agree to well under it (MUNGE already needs them to agree within minutes).
DEFAULT_TTL = 30.0
RENEWALS_PER_TTL = 6
SETTLE = 0.25  # seconds between writing a claim and reading it back
GUARD = 0.75  # share of the ttl after the last confirmation during which we still write
MAX_BYTES = 4096


class LeaseHeld(RuntimeError):
    """Another planner holds the lease (or runs on this host): one line naming it."""


def _clock_text(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def span(seconds: float) -> str:
    """``41 s``, ``3 min``, ``2 h 10 min``."""
    s = abs(int(round(seconds)))
    if s < 120:
        return f"{s} s"
    if s < 7200:
        return f"{s // 60} min"
    return f"{s // 3600} h {(s % 3600) // 60} min"


@dataclass(frozen=True)
class Holder:
    """The lease record."""

    host: str
    pid: int
    instance: str
    boot_id: str
    since: float
    renewed_at: float
    ttl: float
    released: bool = False
    web_port: int = 0  # its [planner] metrics port, where a standby redirects (0: none)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> Holder | None:
        """The record, or None where ``data`` is not one (then the lease counts as free)."""
        if not isinstance(data, dict):
            return None
        try:
            host, instance = data["host"], data["instance"]
            pid, ttl = data["pid"], data["ttl"]
            since, renewed = data["since"], data["renewed_at"]
        except KeyError:
            return None
        if not (isinstance(host, str) and isinstance(instance, str) and host and instance):
            return None
        numbers = (pid, ttl, since, renewed)
        if any(isinstance(x, bool) or not isinstance(x, int | float) for x in numbers):
            return None
        if not ttl > 0:
            return None
        port = data.get("web_port", 0)
        valid_port = isinstance(port, int) and not isinstance(port, bool) and 0 < port < 65536
        return cls(
            host[:255],
            int(pid),
            instance[:64],
            str(data.get("boot_id", ""))[:64],
            float(since),
            float(renewed),
            float(ttl),
            data.get("released") is True,
            port if valid_port else 0,
        )

    def describe(self, now: float) -> str:
        """``host ctl1, pid 4242, since 2026-11-25 18:00:00 (renewed 3 s ago)``."""
        age = now - self.renewed_at
        renewed = f"renewed {span(age)} ago" if age >= 0 else "renewed just now"
        return f"host {self.host}, pid {self.pid}, since {_clock_text(self.since)} ({renewed})"


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()[:64]
    except OSError:
        return ""


def read_holder(path: Path) -> Holder | None:
    """The record at ``path``; None when there is none or it is not a record; OSError
    when it cannot be read (an NFS server away: neither free nor ours)."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except FileNotFoundError:
        return None
    if len(raw) > MAX_BYTES:
        return None
    try:
        return Holder.from_json(json.loads(raw))
    except (ValueError, RecursionError):
        return None


class Lease:
    """This daemon's side of the lease in ``state_dir``."""

    def __init__(
        self,
        state_dir: str | Path,
        ttl: float = DEFAULT_TTL,
        *,
        host: str | None = None,
        pid: int | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        settle: float = SETTLE,
    ) -> None:
        if not ttl > 0:
            raise ValueError(f"lease ttl must be > 0, got {ttl!r}")
        self.dir = Path(state_dir)
        self.path = self.dir / LEASE_FILE
        self.ttl = float(ttl)
        self.host = host or socket.gethostname()
        self.pid = os.getpid() if pid is None else pid
        self.instance = uuid.uuid4().hex
        self.boot_id = boot_id()
        self.clock = clock
        self.monotonic = monotonic
        self.sleep = sleep
        self.settle = settle
        self.since: float | None = None  # wall time we took it; None while not ours
        self.confirmed: float | None = None  # monotonic time of the last read showing it ours
        self._seen: tuple[tuple[str, float], float] | None = None  # (record key, first seen)
        self.last: Holder | None = None  # the record as last read
        self.web_port = 0  # our HTTP endpoint's port, written in our records
        self._lock_fd: int | None = None

    @property
    def lock_path(self) -> Path:
        safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in self.host)
        return self.dir / f"planner-{safe}.lock"

    @property
    def renew_every(self) -> float:
        return self.ttl / RENEWALS_PER_TTL

    # --- the host lock --------------------------------------------------------------
    def lock_host(self) -> None:
        """Hold this host's lock file for the daemon's lifetime; LeaseHeld when another
        daemon of this host and state directory holds it."""
        if self._lock_fd is not None:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            other = os.read(fd, 64).decode(errors="replace").strip() or "?"
            os.close(fd)
            holder = self.read()
            who = (
                holder.describe(self.clock())
                if holder is not None and holder.host == self.host
                else f"host {self.host}, pid {other}"
            )
            raise LeaseHeld(
                f"another planner runs on this host with state dir {self.dir}: {who} "
                f"(lock {self.lock_path}); stop it first (systemctl stop slurm-mig-planner)"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{self.pid}\n".encode())
        self._lock_fd = fd

    def unlock_host(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # --- the record -----------------------------------------------------------------
    def read(self) -> Holder | None:
        self.last = read_holder(self.path)
        return self.last

    def mine(self, holder: Holder | None) -> bool:
        return holder is not None and holder.instance == self.instance and not holder.released

    def expired(self, holder: Holder) -> bool:
        """Free to take: released, last renewed more than its ttl ago by our clock, or
        unchanged for its ttl while we watched."""
        if holder.released:
            return True
        if self.clock() - holder.renewed_at > holder.ttl:
            return True
        key = (holder.instance, holder.renewed_at)
        now = self.monotonic()
        if self._seen is None or self._seen[0] != key:
            self._seen = (key, now)
            return False
        return now - self._seen[1] > holder.ttl

    def _write(self, holder: Holder) -> None:
        tmp = self.dir / f".{LEASE_FILE}.{self.instance}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        try:
            os.write(fd, json.dumps(holder.to_json()).encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)

    def _record(self, now: float) -> Holder:
        since = self.since if self.since is not None else now
        return Holder(
            self.host, self.pid, self.instance, self.boot_id, since, now, self.ttl,
            web_port=self.web_port,
        )  # fmt: skip

    def try_acquire(self) -> Holder | None:
        """Take the lease if we may; None when it is ours now, else the holder that keeps
        it (after our claim: the daemon whose claim came last). OSError: the state
        directory cannot be read or written (not taken)."""
        holder = self.read()
        if self.mine(holder):
            return None if self.renew() else self.last
        own = holder is not None and holder.host == self.host and self._lock_fd is not None
        if holder is not None and not own and not self.expired(holder):
            return holder
        started = self.monotonic()
        now = self.clock()
        self._write(replace(self._record(now), since=now))
        self.sleep(self.settle)
        back = self.read()
        if not self.mine(back):
            return back
        self.since, self.confirmed = now, started
        self._seen = None
        return None

    def renew(self) -> bool:
        """Write a fresh renewal: True while the lease is ours; False when the record
        names someone else or is gone (lost: `holds` is False from now on, `last` is
        what took its place). OSError: not renewed this time (`holds` runs out)."""
        started = self.monotonic()
        if not self.mine(self.read()):
            self.since = self.confirmed = None
            return False
        self._write(self._record(self.clock()))
        self.confirmed = started
        return True

    def holds(self) -> bool:
        """True while we may send actions to Slurm: the lease was confirmed ours less
        than `GUARD` of a ttl ago (no I/O: safe between any two scontrol calls)."""
        return self.confirmed is not None and self.monotonic() - self.confirmed < self.ttl * GUARD

    def release(self) -> None:
        """At a clean stop: mark the record released, so that a standby takes over at
        once; then let go of the host lock."""
        try:
            if self.since is not None and self.mine(self.read()):
                self._write(replace(self._record(self.clock()), released=True))
        except OSError:
            pass  # it expires by itself
        finally:
            self.since = self.confirmed = None
            self.unlock_host()
