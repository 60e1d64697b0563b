"""The hooks' word to the planner daemon that a job has started or left its slices.

One UDP datagram to ``[planner] notify`` (``host:port``), sent at the end of a Prolog
that started its job and of every Epilog: the daemon, listening there, starts its next
cycle at once instead of when its cycle timer runs out, so a freed slice goes to the
next planned job within the cycle's own time, and the job planned after one that has
just started is released ahead at once (not only at the next timed cycle). The datagram only wakes the daemon (its content is a hint, never trusted: the
cycle reads Slurm as always), so a forged or lost one costs at most one cycle; the
daemon runs cycles at most every ``MIN_GAP`` seconds however many arrive.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable

__all__ = ["MIN_GAP", "Listener", "send"]

MIN_GAP = 0.05  # seconds between two cycles that notifications start
_MAX = 64  # bytes read of a datagram

log = logging.getLogger("slurm_mig.planner")


def send(address: tuple[str, int], job_id: str, event: str = "ended") -> str | None:
    """Tell the daemon at ``address`` that ``job_id`` has ``event`` (started, ended); the
    error text, or None. Never blocks: a datagram, no answer awaited."""
    payload = f"slurm-mig {event[:8]} {job_id[:32]}".encode(errors="replace")
    try:
        family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.setblocking(False)
            s.sendto(payload, address)
    except OSError as exc:
        return f"cannot notify the planner at {address[0]}:{address[1]}: {exc.strerror or exc}"
    return None


class Listener:
    """Receives notifications on ``address`` in a thread and calls ``wake`` for each."""

    def __init__(self, address: tuple[str, int], wake: Callable[[], None]) -> None:
        family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_DGRAM)
        self.sock.bind(address)  # OSError (port taken, no such address) to the caller
        self.address = self.sock.getsockname()[:2]
        self.received = 0
        self._wake = wake
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="notify", daemon=True)

    def start(self) -> Listener:
        self._thread.start()
        return self

    def _loop(self) -> None:
        self.sock.settimeout(0.5)
        while not self._stop.is_set():
            try:
                self.sock.recv(_MAX)
            except TimeoutError:
                continue
            except OSError:
                if self._stop.is_set():
                    return
                continue
            self.received += 1
            self._wake()

    def close(self) -> None:
        self._stop.set()
        self.sock.close()
        self._thread.join(2.0)
