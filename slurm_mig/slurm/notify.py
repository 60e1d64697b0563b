"""The hooks' word to the planner daemon that a job has started or left its slices.

One UDP datagram to ``[planner] notify`` (``host:port``), sent at the end of a Prolog
that started its job and of every Epilog: the daemon, listening there, starts its next
cycle at once instead of when its cycle timer runs out, so a freed slice goes to the
next planned job within the cycle's own time, and the job planned after one that has
just started is released ahead at once (not only at the next timed cycle).

The datagram only wakes the daemon (the cycle reads Slurm as always), but a wake costs
slurmctld a squeue and a sinfo, so a datagram wakes only when it is genuine: it carries
an HMAC-SHA256 under the site key (``[paths] key_file``, root's; a hook without it sends
nothing) over the event, the job id and the time it was sent, and the `Guard` refuses it
when forged, malformed, older or newer than `FRESH_S` seconds, or seen before (a replay).
The MAC is checked first (a microsecond for the 128 bytes read at most): what is forged
or replayed spends no rate bucket, so a flood from any number of addresses neither
throttles a node's genuine notifications nor stops the listener. Only genuine, fresh,
first-seen ones then pass a token bucket per source address (`SOURCE_RATE`) and one for
all sources (`TOTAL_RATE`); beyond them a datagram is dropped, the listener never
pauses. Refusals are counted and logged as one summary line a minute at most, never one
line each. The daemon runs cycles at most every ``MIN_GAP`` seconds however many genuine
ones arrive.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import re
import socket
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable

__all__ = ["MIN_GAP", "Guard", "Listener", "TokenBucket", "send", "sign"]

MIN_GAP = 0.05  # seconds between two cycles that notifications start
FRESH_S = 60.0  # a notification older (or newer: clock skew) than this is refused
MAGIC = b"slurm-mig-n1"
MAC_BYTES = 16
_DOMAIN = b"slurm-mig notify 1\0"
_MAX = 128  # bytes read of a datagram (a genuine one is under 90)
EVENTS = ("started", "ended")
_EVENTS = frozenset(e.encode() for e in EVENTS)
_JOB = re.compile(rb"[0-9A-Za-z_.+-]{1,32}")
# genuine notifications a second (and burst) per source address, and of all sources
SOURCE_RATE, SOURCE_BURST = 20.0, 60.0
TOTAL_RATE, TOTAL_BURST = 500.0, 500.0
SOURCES = 1024  # source addresses whose bucket is kept (least recently seen forgotten)
SEEN = 8192  # genuine notifications remembered against replays, within 2 x FRESH_S
SUMMARY_S = 60.0  # at most one summary line of refusals per this many seconds
REASONS = ("limited", "busy", "malformed", "forged", "stale", "replayed")

log = logging.getLogger("slurm_mig.planner")


def _mac(key: bytes, body: bytes) -> bytes:
    return hmac.new(key, _DOMAIN + body, hashlib.sha256).digest()[:MAC_BYTES]


def sign(key: bytes, event: str, job_id: str, now: float) -> bytes:
    """The datagram saying ``job_id`` has ``event`` at wall time ``now``, signed with ``key``."""
    body = b"%s %s %d" % (event.encode()[:8], job_id.encode(errors="replace")[:32], int(now * 1000))
    mac = base64.urlsafe_b64encode(_mac(key, body)).rstrip(b"=")
    return b"%s %s %s" % (MAGIC, body, mac)


def send(
    address: tuple[str, int],
    job_id: str,
    event: str,
    key: bytes,
    now: Callable[[], float] = time.time,
) -> str | None:
    """Tell the daemon at ``address`` that ``job_id`` has ``event`` (started, ended),
    signed with the site ``key``; the error text, or None. Never blocks: one datagram,
    no answer awaited."""
    payload = sign(key, event, job_id, now())
    try:
        family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.setblocking(False)
            s.sendto(payload, address)
    except OSError as exc:
        return f"cannot notify the planner at {address[0]}:{address[1]}: {exc.strerror or exc}"
    return None


class TokenBucket:
    """``rate`` tokens a second up to ``burst``; `take` spends one if there is one."""

    __slots__ = ("rate", "burst", "tokens", "at")

    def __init__(self, rate: float, burst: float, now: float) -> None:
        self.rate, self.burst, self.tokens, self.at = rate, burst, burst, now

    def take(self, now: float) -> bool:
        """Spend a token at monotonic time ``now``; False when the bucket is empty."""
        self.tokens = min(self.burst, self.tokens + max(0.0, now - self.at) * self.rate)
        self.at = now
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True


class Guard:
    """Decides which datagrams wake the daemon: `check` returns None for a genuine,
    fresh, first-seen one within the rate bounds, else the reason it is refused (one of
    `REASONS`). Pure but for the clocks it is given."""

    def __init__(
        self,
        key: bytes,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.key = key
        self.monotonic = monotonic
        self.wall = wall
        now = monotonic()
        self.total = TokenBucket(TOTAL_RATE, TOTAL_BURST, now)
        self.sources: OrderedDict[str, TokenBucket] = OrderedDict()
        self.seen: OrderedDict[bytes, float] = OrderedDict()  # mac -> monotonic expiry
        self.refused: Counter[str] = Counter()  # since the last summary
        self.sources_refused: Counter[str] = Counter()
        self.accepted = 0
        self._summary_at = now

    def check(self, data: bytes, source: str) -> str | None:
        """None when ``data`` from ``source`` (an IP address) should wake the daemon."""
        why = self._check(data, source)
        if why is None:
            self.accepted += 1
        else:
            self.refused[why] += 1
            if len(self.sources_refused) < 64 or source in self.sources_refused:
                self.sources_refused[source] += 1
        return why

    def _check(self, data: bytes, source: str) -> str | None:
        now = self.monotonic()
        got = self._authentic(data)
        if isinstance(got, str):
            return got
        mac, stamp = got
        while self.seen and next(iter(self.seen.values())) < now:
            self.seen.popitem(last=False)  # too old to be replayed now: refused as stale
        if abs(self.wall() - stamp / 1000) > FRESH_S:
            return "stale"
        if mac in self.seen:
            return "replayed"
        why = self._rate(source, now)
        if why is not None:
            return why
        self.seen[mac] = now + 2 * FRESH_S
        if len(self.seen) > SEEN:
            self.seen.popitem(last=False)
        return None

    def _authentic(self, data: bytes) -> tuple[bytes, int] | str:
        """(the MAC, the stamp in ms) of a well-formed datagram signed with the key, or
        why not (malformed, forged); before any bucket, so that forgeries spend none."""
        parts = data.split(b" ")
        if len(parts) != 5 or parts[0] != MAGIC:
            return "malformed"
        _, event, job, stamp, mac = parts
        if event not in _EVENTS or not _JOB.fullmatch(job):
            return "malformed"
        if not (stamp.isdigit() and len(stamp) <= 16):
            return "malformed"
        try:
            got = base64.urlsafe_b64decode(mac + b"=" * (-len(mac) % 4))
        except ValueError:
            return "malformed"
        if not hmac.compare_digest(got, _mac(self.key, b" ".join((event, job, stamp)))):
            return "forged"
        return got, int(stamp)

    def _rate(self, source: str, now: float) -> str | None:
        """Spend a token of ``source``'s bucket and of the total; why not (limited, busy)."""
        bucket = self.sources.get(source)
        if bucket is None:
            bucket = self.sources[source] = TokenBucket(SOURCE_RATE, SOURCE_BURST, now)
            if len(self.sources) > SOURCES:
                self.sources.popitem(last=False)
        else:
            self.sources.move_to_end(source)
        if not bucket.take(now):
            return "limited"  # one source spends its own tokens, not the others'
        if not self.total.take(now):
            return "busy"
        return None

    def summary(self) -> str | None:
        """One line of what was refused since the last line, at most every `SUMMARY_S`
        seconds; None when nothing was or it is too soon."""
        now = self.monotonic()
        if not self.refused or now - self._summary_at < SUMMARY_S:
            return None
        what = ", ".join(f"{n} {why}" for why, n in sorted(self.refused.items()))
        who = ", ".join(f"{src} ({n})" for src, n in self.sources_refused.most_common(3))
        line = (
            f"notify: refused {sum(self.refused.values())} datagrams in the last "
            f"{now - self._summary_at:.0f} s ({what}); most from {who}"
        )
        self.refused.clear()
        self.sources_refused.clear()
        self._summary_at = now
        return line


class Listener:
    """Receives notifications on ``address`` in a thread and calls ``wake`` for each
    that the `Guard` accepts; ``refused(reason)`` for each it does not (a metric). It
    reads without pause: what it cannot read in time the kernel drops."""

    def __init__(
        self,
        address: tuple[str, int],
        wake: Callable[[], None],
        key: bytes,
        *,
        refused: Callable[[str], None] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_DGRAM)
        self.sock.bind(address)  # OSError (port taken, no such address) to the caller
        self.address = self.sock.getsockname()[:2]
        self.guard = Guard(key, monotonic=monotonic, wall=wall)
        self.received = 0  # datagrams that woke the daemon
        self._wake = wake
        self._refused = refused
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="notify", daemon=True)

    def start(self) -> Listener:
        self._thread.start()
        return self

    def _loop(self) -> None:
        self.sock.settimeout(0.5)
        while not self._stop.is_set():
            try:
                data, source = self.sock.recvfrom(_MAX)
            except TimeoutError:
                self._summarise()
                continue
            except OSError:
                if self._stop.is_set():
                    return
                continue
            why = self.guard.check(data, str(source[0]))
            if why is None:
                self.received += 1
                self._wake()
                continue
            if self._refused is not None:
                self._refused(why)
            self._summarise()  # and on to the next: dropped, never a pause

    def _summarise(self) -> None:
        line = self.guard.summary()
        if line:
            log.warning("%s", line)

    def close(self) -> None:
        self._stop.set()
        self.sock.close()
        self._thread.join(2.0)
