"""The daemon's HTTP endpoint on ``[planner] metrics``: ``/metrics`` for Prometheus and,
with ``[planner] web = true``, the read-only page of the live plan (`slurm_mig.daemon.web`).

GET and HEAD of a fixed set of paths (query strings ignored), one request per connection
(HTTP/1.0); other methods are a 501, other paths a 404. Any local user can connect, so
nothing a client does holds a thread, a descriptor or memory for long:

- the connections are handled as `listener` handles them (one thread, a selector, an
  idle client costs a socket, never a thread): at most ``max_connections`` are open (by
  default a quarter of the process's descriptor limit, so that a flood never takes the
  descriptors a cycle's ``squeue`` needs), at most half of them from one address; at a
  cap a new connection closes the idlest one still waiting for its request, or is
  closed at once when all are being answered;
- the request line and headers (at most `MAX_REQUEST` bytes) must arrive whole within
  `REQUEST_TIMEOUT` seconds (slow-loris), the whole exchange within `CONNECTION_TIMEOUT`;
- a page is built by its callable in one of `WORKERS` threads (each page is the daemon's
  last cycle, so a scrape never waits for a cycle and a cycle never waits for a scrape;
  `Cached` builds it once a cycle however many ask), at most `MAX_BODY` bytes, written
  as the client reads it;
- a client that resets or vanishes is one debug line, never a traceback.

A standby daemon (``redirect`` gives the active daemon's base URL) answers each of its
paths with 303 See Other to the same path there, as a standby slurmctld (26.11) answers
its ``/metrics`` endpoints: a scraper of either controller reads the daemon that plans.
"""

from __future__ import annotations

import logging
import math
import resource
import threading
import time
from collections.abc import Callable, Mapping
from email.utils import formatdate
from http import HTTPStatus
from typing import Generic, TypeVar

from .listener import Conn, Listener

log = logging.getLogger("slurm_mig.planner")

Page = Callable[[], tuple[str, bytes]]  # -> (content type, body)

REQUEST_TIMEOUT = 5.0  # seconds for the request line and headers to arrive whole
CONNECTION_TIMEOUT = 30.0  # seconds from accept to close, answer included
MAX_REQUEST = 8192  # bytes of request line and headers
MAX_BODY = 32 << 20  # bytes of one answer
MAX_CONNECTIONS = 512  # open connections, at most (and at most a quarter of RLIMIT_NOFILE)
WORKERS = 2  # threads that build pages


def default_cap() -> int:
    """`MAX_CONNECTIONS`, or a quarter of the soft descriptor limit when that is less."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        return MAX_CONNECTIONS
    return max(8, min(MAX_CONNECTIONS, soft // 4))


T = TypeVar("T")


class Cached(Generic[T]):
    """A page (any value) built again only when ``key()`` is another object than at its last build
    and it is ``min_age`` seconds old, or once it is ``max_age`` seconds old; built by
    one thread at a time, while the others get the last built page (only the very first
    requests wait for it). Pages are thus built at most once per cycle however many
    clients ask, and a slow build never queues the requests behind it."""

    def __init__(
        self,
        build: Callable[[], T],
        key: Callable[[], object] = lambda: None,
        *,
        min_age: float = 0.0,
        max_age: float = math.inf,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.build = build
        self.key = key
        self.min_age = min_age
        self.max_age = max_age
        self.monotonic = monotonic
        self.builds = 0
        self._entry: tuple[object, float, T] | None = None
        self._building = threading.Lock()

    def _fresh(self) -> T | None:
        entry = self._entry
        if entry is None:
            return None
        key, at, value = entry
        age = self.monotonic() - at
        if age < self.min_age or (age < self.max_age and key is self.key()):
            return value
        return None

    def __call__(self) -> T:
        value = self._fresh()
        if value is not None:
            return value
        first = self._entry is None
        if not self._building.acquire(blocking=first, timeout=CONNECTION_TIMEOUT if first else -1):
            if self._entry is None:
                raise TimeoutError("the page is still being built")
            return self._entry[2]  # being built by another thread: the last one meanwhile
        try:
            value = self._fresh()
            if value is None:
                key = self.key()  # before building: a cycle that ends meanwhile rebuilds
                value = self.build()
                self.builds += 1
                self._entry = (key, self.monotonic(), value)
            return value
        finally:
            self._building.release()


class _Refused(Exception):
    """An answer other than 200: its status and a short reason."""

    def __init__(self, status: HTTPStatus, why: str = "") -> None:
        super().__init__(why or status.phrase)
        self.status = status


class Server(Listener):
    """A running endpoint; ``close()`` stops it."""

    name = "http"

    def __init__(
        self,
        address: tuple[str, int],
        pages: Mapping[str, Page],
        *,
        max_connections: int | None = None,
        per_source: int | None = None,
        request_timeout: float = REQUEST_TIMEOUT,
        connection_timeout: float = CONNECTION_TIMEOUT,
        max_body: int = MAX_BODY,
        monotonic: Callable[[], float] = time.monotonic,
        redirect: Callable[[], str | None] | None = None,
    ) -> None:
        cap = max(1, max_connections or default_cap())
        super().__init__(
            address,
            max_connections=cap,
            per_source=per_source or max(1, cap // 2),
            first_byte_timeout=request_timeout,
            request_timeout=request_timeout,
            connection_timeout=connection_timeout,
            workers=WORKERS,
            monotonic=monotonic,
        )
        self.pages = dict(pages)
        self.request_timeout = request_timeout
        self.connection_timeout = connection_timeout
        self.max_body = max_body
        self.redirect = redirect  # -> the active daemon's base URL while this one waits

    def _received(self, conn: Conn, eof: bool) -> None:
        end = conn.got.find(b"\r\n\r\n", 0, MAX_REQUEST + 4)
        if end < 0:
            if len(conn.got) > MAX_REQUEST:
                self._answer(conn, _response(*_error(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE)))
            elif eof:
                self._drop(conn)
            return
        try:
            method, path = _parse(bytes(conn.got[:end]))
            page = self.pages.get(path)
            if page is None:
                raise _Refused(HTTPStatus.NOT_FOUND, "not found")
        except _Refused as exc:
            self._answer(conn, _response(*_error(exc.status, str(exc))))
            return
        head_only = method == "HEAD"
        base = self.redirect() if self.redirect is not None else None
        if base:
            self._answer(conn, _see_other(base + path, head_only))
            return
        self._submit(conn, lambda: _response(*self._build(path, page), head_only=head_only))

    def _build(self, path: str, page: Page) -> tuple[HTTPStatus, str, bytes]:
        try:
            kind, data = page()
        except Exception as exc:  # a page's bug is the page's 500, not the daemon's end
            log.error("web: %s: %s: %s", path, type(exc).__name__, exc)
            return _error(HTTPStatus.INTERNAL_SERVER_ERROR, "internal error")
        if len(data) > self.max_body:
            log.error("web: %s: %d bytes, more than %d: not sent", path, len(data), self.max_body)
            return _error(HTTPStatus.INTERNAL_SERVER_ERROR, "page too large")
        return HTTPStatus.OK, kind, data


def _response(
    status: HTTPStatus, kind: str, data: bytes, head_only: bool = False, *extra: str
) -> list[bytes | memoryview]:
    """The status line and headers (``extra`` ones last), then the page's bytes (not a
    copy)."""
    lines = [
        f"HTTP/1.0 {status.value} {status.phrase}",
        "Server: slurm-mig",
        f"Date: {formatdate(usegmt=True)}",
        f"Content-Type: {kind}",
        f"Content-Length: {len(data)}",
        "Cache-Control: no-store",
        "Connection: close",
        *extra,
    ]
    log.debug("http: %d, %d bytes", status.value, 0 if head_only else len(data))
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return [head] if head_only else [head, memoryview(data)]


def _see_other(url: str, head_only: bool) -> list[bytes | memoryview]:
    """303 See Other to ``url`` (ASCII: the caller checked the host)."""
    data = f"303 the active planner is at {url}\n".encode()
    kind = "text/plain; charset=utf-8"
    return _response(HTTPStatus.SEE_OTHER, kind, data, head_only, f"Location: {url}")


def _parse(head: bytes) -> tuple[str, str]:
    """The method and path of a request line, or _Refused."""
    words = head.split(b"\r\n", 1)[0].split()
    if len(words) != 3 or not words[2].startswith(b"HTTP/"):
        raise _Refused(HTTPStatus.BAD_REQUEST, "bad request line")
    method = words[0].decode("ascii", "replace")
    if method not in ("GET", "HEAD"):
        raise _Refused(HTTPStatus.NOT_IMPLEMENTED, "GET or HEAD only")
    return method, words[1].split(b"?", 1)[0].decode("ascii", "replace")


def _error(status: HTTPStatus, why: str = "") -> tuple[HTTPStatus, str, bytes]:
    return status, "text/plain; charset=utf-8", f"{status.value} {why or status.phrase}\n".encode()
