"""What the planner daemon listens on besides its cycle timer: the Epilog notifications
(``[planner] notify``, UDP) and the HTTP endpoint (``[planner] metrics``: /metrics, and
the web page with ``[planner] web``). Either that cannot be bound is logged and left off.
A standby's endpoint redirects (303) to the endpoint of the daemon that holds the lease."""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from ..config import parse_address

if TYPE_CHECKING:
    from ..config import Config
    from ..slurm.notify import Listener
    from .httpserver import Server
    from .liveness import Liveness
    from .metrics import PlannerMetrics
    from .web import WebState

__all__ = ["METRICS_TYPE", "Served", "listen", "serve", "standby_redirect"]

log = logging.getLogger("slurm_mig.planner")

METRICS_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]{0,252}")  # a host name, nothing to inject


class Served(Protocol):
    """What the endpoints read of the daemon (a `PlannerDaemon` is one), and the two slots
    they fill: ``notify_refused`` (the refused-notifications counter, made once per
    metrics registry) and ``web_state`` (the page's history, which the cycle updates)."""

    config: Config
    key: bytes | None
    wake: threading.Event
    metrics: PlannerMetrics
    liveness: Liveness | None
    last_report: Any
    last_jobs: list
    notify_refused: Any
    web_state: WebState | None


def listen(daemon: Served) -> Listener | None:
    """The notification listener on ``[planner] notify``, or None (off, or the
    address cannot be bound: then the cycle timer alone drives the daemon)."""
    from ..slurm.notify import Listener

    address = parse_address(daemon.config.notify)
    if address is None:
        return None
    if daemon.key is None:
        log.warning("no signing key: Epilog notifications are not heard (dry run)")
        return None
    refused = daemon.notify_refused
    if refused is None:  # once per registry, however often `run` is called
        from prometheus_client import Counter

        refused = daemon.notify_refused = Counter(
            "slurm_mig_planner_notify_refused",
            "Notification datagrams refused, by reason (forged, stale, replayed, limited...)",
            ["reason"],
            registry=daemon.metrics.registry,
        )
    try:
        listener = Listener(
            address, daemon.wake.set, daemon.key, refused=lambda why: refused.labels(why).inc()
        ).start()
    except OSError as exc:
        log.warning(
            "cannot listen for Epilog notifications on %s:%d (%s); planning every %.1f s instead",
            *address,
            exc.strerror or exc,
            daemon.config.cycle,
        )
        return None
    log.info("listening for Epilog notifications on %s:%d (UDP)", *listener.address)
    return listener


def serve(daemon: Served) -> Server | None:
    """The HTTP endpoint on ``[planner] metrics`` (/metrics; the web page too with
    ``[planner] web``), or None (off, or the address cannot be bound)."""
    from .httpserver import Cached, Server

    address = parse_address(daemon.config.metrics)
    if address is None:
        return None
    # at most once a cycle (and a second): many scrapers cost one
    metrics = Cached(
        lambda: (METRICS_TYPE, daemon.metrics.text()), lambda: daemon.last_report, max_age=1.0
    )
    pages = {"/metrics": metrics}
    if daemon.config.web:
        from .web import WebState
        from .web import pages as web_pages

        daemon.web_state = WebState()
        pages.update(web_pages(daemon, daemon.web_state))
    try:
        server = Server(address, pages).start()
    except OSError as exc:
        log.warning(
            "cannot serve metrics on %s:%d (%s); change [planner] metrics",
            *address,
            exc.strerror or exc,
        )
        return None
    host, port = server.address
    server.redirect = standby_redirect(daemon, port)
    lease = getattr(daemon.liveness, "lease", None)
    if lease is not None:
        lease.web_port = port  # written in the lease record: where a standby redirects
    what = "metrics and the web page" if len(pages) > 1 else "metrics"
    log.info("serving %s on http://%s:%d/", what, host, port)
    return server


def standby_redirect(daemon: Served, port: int) -> Callable[[], str | None]:
    """While ``daemon`` waits as a standby, the base URL of the active daemon's endpoint
    (``http://<lease holder's host>:<its port>``, ``port`` where its record names none);
    None while it plans, or when the lease names no live holder or no plain host name."""

    def base() -> str | None:
        liveness = daemon.liveness
        primary = liveness.primary() if liveness is not None else None
        if primary is None or not _HOST.fullmatch(primary[0]):
            return None
        return f"http://{primary[0]}:{primary[1] or port}"

    return base
