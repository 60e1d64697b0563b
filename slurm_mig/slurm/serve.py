"""The daemon's HTTP endpoint on ``[planner] metrics``: ``/metrics`` for Prometheus and,
with ``[planner] web = true``, the read-only page of the live plan (`slurm_mig.slurm.web`).

Standard library ``http.server`` in a daemon thread: GET and HEAD only, no query
parameters honoured, a fixed set of paths; every other request is a 404 or 405. Each
page is built by a callable from the daemon's last cycle, so a scrape never waits for
a cycle and a cycle never waits for a scrape.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

log = logging.getLogger("slurm_mig.planner")

Page = Callable[[], tuple[str, bytes]]  # -> (content type, body)


class _Handler(BaseHTTPRequestHandler):
    pages: Mapping[str, Page] = {}
    server_version = "slurm-mig"
    sys_version = ""

    def _answer(self, body: bool) -> None:
        page = self.pages.get(self.path.split("?", 1)[0])
        if page is None:
            self.send_error(404, "not found")
            return
        try:
            kind, data = page()
        except Exception as exc:  # a page's bug is the page's 500, not the daemon's end
            log.error("web: %s: %s: %s", self.path, type(exc).__name__, exc)
            self.send_error(500, "internal error")
            return
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if body:
            self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self._answer(True)

    def do_HEAD(self) -> None:  # noqa: N802
        self._answer(False)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        log.debug("web: " + format, *args)


class Server:
    """A running endpoint; ``close()`` stops it."""

    def __init__(self, address: tuple[str, int], pages: Mapping[str, Page]) -> None:
        handler = type("Handler", (_Handler,), {"pages": dict(pages)})
        self.httpd = ThreadingHTTPServer(address, handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, name="slurm-mig-http", daemon=True
        )

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.httpd.server_address[:2]
        return str(host), int(port)

    def start(self) -> Server:
        self.thread.start()
        return self

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
