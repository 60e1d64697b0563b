"""The planner daemon's liveness: one active daemon (the lease), systemd's watchdog, and
how ``status`` and ``explain`` tell that the planner has stopped.

`Liveness` is what `PlannerDaemon` holds: before the daemon starts, `start_up` takes
the host lock and the lease (`lease.Lease`), or raises `LeaseHeld` naming the holder,
unless the daemon is a standby. Before each cycle the run loop calls `may_plan`: it
renews the lease and returns True; a standby (or a daemon that lost the lease) waits
there, polling, until the lease is free or expired, takes it, logs one line and plans.
A thread renews the lease every ``ttl / 6`` seconds, whatever a cycle is doing, and
sends systemd ``WATCHDOG=1`` while cycles progress: between cycles, or within the
first half of ``WatchdogSec`` of a cycle (a cycle stuck longer stops the pings and
systemd restarts the daemon). `StopEvent` is the daemon's stop: it also reads as set
while the lease is not confirmed ours, so that `apply_actions`, which checks it between
two actions, sends nothing to Slurm from a daemon that lost the lease mid-cycle.

Standard library only (``slurm-mig explain`` imports `staleness` as a user).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from .lease import Lease, LeaseHeld, span
from .sdnotify import notify, watchdog_seconds

log = logging.getLogger("slurm_mig.planner")

SERVICE = "slurm-mig-planner"
STALE_CYCLES = 3  # a status older than this many cycles ...
STALE_SLACK = 60.0  # ... plus these seconds (a slow cycle, a slow NFS write) is stale


def stale_after(cycle: float) -> float:
    """Seconds after which the planner's last cycle counts as stale."""
    return STALE_CYCLES * cycle + STALE_SLACK


def staleness(updated: float | None, cycle: float, now: float) -> str | None:
    """The line to show when the planner's last cycle (``updated``: when it ended) is
    older than expected, else None."""
    if updated is None or now - updated <= stale_after(cycle):
        return None
    return (
        f"the planner's last cycle ended {span(now - updated)} ago (expected every "
        f"{cycle:g} s): is {SERVICE} running? (systemctl status {SERVICE})"
    )


def for_planner(config: Any, *, dry_run: bool, once: bool, standby: bool | None) -> Liveness:
    """The liveness of ``slurm-mig planner``, started up: its lease taken (none for a
    dry run, which writes nothing), waited for (a standby: ``standby``, else
    ``[planner] standby``; ``--once`` never waits), or `LeaseHeld`."""
    if standby is None:
        standby = bool(getattr(config, "standby", False))
    lease = None if dry_run else Lease(config.state_dir, config.lease_ttl)
    liveness = Liveness(lease, standby=standby and not once)
    liveness.start_up()
    return liveness


class StopEvent(threading.Event):
    """The daemon's stop request (SIGTERM), which also reads as set while ``guard``
    says the daemon may not write (its lease is not confirmed): `requested` is the
    request alone."""

    def __init__(self) -> None:
        super().__init__()
        self.guard: Callable[[], bool] | None = None

    def requested(self) -> bool:
        return super().is_set()

    def allowed(self) -> bool:
        return self.guard is None or self.guard()

    def is_set(self) -> bool:
        return super().is_set() or not self.allowed()


class Liveness:
    """The lease and the watchdog of one daemon; ``lease`` None: no lease (a dry run)."""

    def __init__(
        self,
        lease: Lease | None,
        *,
        standby: bool = False,
        env: Mapping[str, str] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] | None = None,
        tick_every: float | None = None,
    ) -> None:
        self.lease = lease
        self.standby = standby
        self.env = env
        self.monotonic = lease.monotonic if lease is not None else monotonic
        self.watchdog = watchdog_seconds(env)
        self.active = lease is None
        self.took_over = False
        self.cycle_since: float | None = None  # monotonic start of the cycle under way
        self.sleep = sleep  # tests: advance a fake clock; else wait on the stop event
        wanted = [lease.renew_every] if lease is not None else []
        if self.watchdog:
            wanted.append(self.watchdog / 4)
        self.tick_every = tick_every if tick_every is not None else min(wanted, default=0.0)
        self.wake: threading.Event | None = None
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self._io_warned = False
        self.io_error: str | None = None  # why the lease could not be read or written
        self._metrics: Any = None

    # --- before the daemon runs -----------------------------------------------------
    def start_up(self) -> None:
        """The host lock and the lease; LeaseHeld when another daemon holds either
        (a standby only for the host lock: it waits for the lease in `may_plan`)."""
        lease = self.lease
        if lease is None:
            return
        lease.lock_host()
        try:
            with self._lock:
                holder = lease.try_acquire()
        except OSError as exc:
            if not self.standby:
                lease.unlock_host()
                raise
            log.warning("cannot read the lease %s: %s", lease.path, exc.strerror or exc)
            return
        now = lease.clock()
        if holder is None:
            self.active = True
            log.info("holding the planner lease %s (ttl %g s)", lease.path, lease.ttl)
            return
        if not self.standby:
            lease.unlock_host()
            raise LeaseHeld(
                f"another planner holds the lease {lease.path}: {holder.describe(now)}; "
                "start this one with --standby to take over when it stops"
            )
        log.info(
            "standby: the planner lease is held by %s; taking over once it expires (ttl %g s)",
            holder.describe(now),
            holder.ttl,
        )

    # --- while it runs ---------------------------------------------------------------
    def start(self, daemon: Any) -> None:
        """The daemon starts: guard its stop, write its endpoint's port in the record at
        once (a standby redirects there), tell systemd, start the keeper thread."""
        self.wake = daemon.wake
        if isinstance(daemon.stop, StopEvent):
            daemon.stop.guard = self.holds
        if self.lease is not None and self.lease.web_port and self.active:
            with self._lock:  # the record taken at start-up was written before the port
                self._renew()
        self._metrics = getattr(daemon, "metrics", None)
        self._show()
        notify(f"READY=1\nSTATUS={self._status()}", self.env)
        if self.tick_every > 0 and self._thread is None:
            self._thread = threading.Thread(
                target=self._keep, name="slurm-mig-liveness", daemon=True
            )
            self._thread.start()

    def holds(self) -> bool:
        """True while this daemon may write to Slurm."""
        return self.lease is None or (self.active and self.lease.holds())

    def primary(self) -> tuple[str, int] | None:
        """The host and HTTP port (0: not told) of the daemon that holds the lease while
        this one waits as a standby; None while this one plans, or no live record names
        another."""
        lease = self.lease
        if self.active or lease is None:
            return None
        holder = lease.last
        if holder is None or holder.released or holder.instance == lease.instance:
            return None
        if lease.clock() - holder.renewed_at > holder.ttl:
            return None  # expired: this standby is about to take it over
        return holder.host, holder.web_port

    def not_allowed(self) -> str:
        """Why this daemon may not write now, for a log line ("" while it may): the lease
        is another's, or ours but not renewed lately (the state directory full or
        read-only: `io_error`)."""
        if self.holds():
            return ""
        if not self.active:
            return "the planner lease is not ours"
        if self.io_error:
            return f"the planner lease could not be renewed ({self.io_error})"
        return "the planner lease is not confirmed yet"

    def may_plan(self, stop: StopEvent) -> bool:
        """Before a cycle: True when this daemon holds the lease (renewed just now); a
        standby waits here until it takes the lease over; False once a stop is asked."""
        lease = self.lease
        if lease is None:
            self.cycle_since = self.monotonic()
            return not stop.requested()
        while not stop.requested():
            with self._lock:
                if self.active:
                    if self._renew():
                        self.cycle_since = self.monotonic()
                        return True
                    continue  # lost it: wait as a standby
                try:
                    before = lease.read()
                    holder = lease.try_acquire()
                except OSError as exc:
                    self._io_trouble(exc)
                else:
                    self._io_warned = False
                    self.io_error = None
                    if holder is None:
                        self._took_over(before)
                        self.cycle_since = self.monotonic()
                        return True
            self._pause(stop, lease.renew_every)
        return False

    def cycle_done(self) -> None:
        """A cycle ended: that is progress."""
        self.cycle_since = None
        if self.watchdog:
            notify("WATCHDOG=1", self.env)

    def tick(self) -> None:
        """One look of the keeper: renew the lease (while active), ping the watchdog
        (while cycles progress)."""
        if self.lease is not None and self.active:
            with self._lock:
                if self.active:
                    self._renew()
        if self.watchdog and self.progressing():
            notify("WATCHDOG=1", self.env)

    def progressing(self) -> bool:
        since = self.cycle_since
        limit = (self.watchdog or math.inf) / 2
        return since is None or self.monotonic() - since < limit

    def close(self) -> None:
        """The daemon stops: stop the keeper, release the lease (a standby takes over
        at once), tell systemd."""
        self._done.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        notify("STOPPING=1", self.env)
        if self.lease is not None:
            with self._lock:
                self.lease.release()
            self.active = False

    # --- inside ---------------------------------------------------------------------
    def _keep(self) -> None:
        while not self._done.wait(self.tick_every):
            try:
                self.tick()
            except Exception:  # keep renewing; a broken keeper stops the pings anyway
                log.exception("liveness keeper")

    def _renew(self) -> bool:
        """Renew (the lock held); False when the lease was lost."""
        assert self.lease is not None
        try:
            ok = self.lease.renew()
        except OSError as exc:
            self._io_trouble(exc)
            return True  # not confirmed: `holds` runs out unless a later renewal works
        if self._io_warned and ok:
            log.info("the planner lease %s is renewed again", self.lease.path)
        self._io_warned = False
        self.io_error = None
        if not ok:
            self._lost()
        return ok

    def _lost(self) -> None:
        lease = self.lease
        assert lease is not None
        self.active = False
        taker = lease.last
        who = taker.describe(lease.clock()) if taker is not None else "nobody (the record is gone)"
        log.error(
            "planner lease lost to %s: this planner was paused or cut off longer than its "
            "ttl (%g s); it stops planning and waits as a standby",
            who,
            lease.ttl,
        )
        self._show()
        notify(f"STATUS={self._status()}", self.env)
        if self.wake is not None:
            self.wake.set()

    def _took_over(self, before: Any) -> None:
        lease = self.lease
        assert lease is not None
        self.active = True
        self.took_over = True  # the daemon forgets its standing plans: plans again
        if before is None:
            log.warning("taking over: the planner lease %s is free; planning now", lease.path)
        else:
            how = "released" if before.released else "expired"
            log.warning(
                "taking over: the planner lease of %s %s; planning now",
                before.describe(lease.clock()),
                how,
            )
        self._show()
        notify(f"STATUS={self._status()}", self.env)

    def _io_trouble(self, exc: OSError) -> None:
        self.io_error = exc.strerror or str(exc)
        if not self._io_warned:
            assert self.lease is not None
            log.warning(
                "cannot read or write the planner lease %s: %s (nothing is sent to Slurm "
                "until it can)",
                self.lease.path,
                exc.strerror or exc,
            )
            self._io_warned = True

    def _pause(self, stop: StopEvent, seconds: float) -> None:
        if self.sleep is not None:
            self.sleep(seconds)
        else:
            stop.wait(seconds)

    def _status(self) -> str:
        if self.active:
            return "active: planning"
        lease = self.lease
        holder = lease.last if lease is not None else None
        if holder is None:
            return "standby: waiting for the planner lease"
        return f"standby: the lease is held by {holder.host} pid {holder.pid}"

    def _show(self) -> None:
        if self._metrics is not None and hasattr(self._metrics, "set_active"):
            self._metrics.set_active(self.active)
