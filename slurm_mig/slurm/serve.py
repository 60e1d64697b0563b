"""The daemon's HTTP endpoint on ``[planner] metrics``: ``/metrics`` for Prometheus and,
with ``[planner] web = true``, the read-only page of the live plan (`slurm_mig.slurm.web`).

GET and HEAD of a fixed set of paths (query strings ignored), one request per connection
(HTTP/1.0); other methods are a 501, other paths a 404. Any local user can connect, so
nothing a client does holds a thread, a descriptor or memory for long:

- one thread serves every connection from a selector: an idle or slow client costs a
  socket, never a thread; at most ``max_connections`` are open (by default a quarter of
  the process's descriptor limit, so that a flood never takes the descriptors a cycle's
  ``squeue`` needs), and connections are accepted a few at a time, so a burst never
  holds more; at the cap a new connection closes the one that has waited longest for
  its request, or is closed at once when all are being answered;
- the request line and headers (at most `MAX_REQUEST` bytes) must arrive whole within
  `REQUEST_TIMEOUT` seconds (slow-loris), the whole exchange within `CONNECTION_TIMEOUT`;
- a page is built by its callable in one of `WORKERS` threads (each page is the daemon's
  last cycle, so a scrape never waits for a cycle and a cycle never waits for a scrape;
  `Cached` builds it once a cycle however many ask), at most `MAX_BODY` bytes, written
  as the client reads it;
- a client that resets or vanishes is one debug line, never a traceback.
"""

from __future__ import annotations

import logging
import math
import resource
import selectors
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from email.utils import formatdate
from http import HTTPStatus
from typing import Generic, TypeVar

log = logging.getLogger("slurm_mig.planner")

Page = Callable[[], tuple[str, bytes]]  # -> (content type, body)

REQUEST_TIMEOUT = 5.0  # seconds for the request line and headers to arrive whole
CONNECTION_TIMEOUT = 30.0  # seconds from accept to close, answer included
LINGER = 2.0  # seconds a closed answer waits for the client to close its side
MAX_REQUEST = 8192  # bytes of request line and headers
MAX_BODY = 32 << 20  # bytes of one answer
MAX_CONNECTIONS = 512  # open connections, at most (and at most a quarter of RLIMIT_NOFILE)
WORKERS = 2  # threads that build pages
CHUNK = 256 << 10  # bytes handed to the kernel at a time
BACKLOG = 1024  # connections the kernel queues for accept: a burst is not a SYN retry
ACCEPTS = 32  # connections accepted per turn of the loop (a burst: its fds a few at a time)


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


class _Conn:
    """One client's connection: what it sent, what it is sent, its deadlines."""

    __slots__ = ("sock", "got", "out", "head_only", "state", "request_by", "close_by")

    def __init__(self, sock: socket.socket, now: float, request_s: float, total_s: float):
        self.sock = sock
        self.got = bytearray()
        self.out: deque[memoryview] = deque()
        self.head_only = False
        self.state = "reading"  # then building, writing, lingering
        self.request_by = now + request_s
        self.close_by = now + total_s


class Server:
    """A running endpoint; ``close()`` stops it."""

    def __init__(
        self,
        address: tuple[str, int],
        pages: Mapping[str, Page],
        *,
        max_connections: int | None = None,
        request_timeout: float = REQUEST_TIMEOUT,
        connection_timeout: float = CONNECTION_TIMEOUT,
        max_body: int = MAX_BODY,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.pages = dict(pages)
        self.max_connections = max(1, max_connections or default_cap())
        self.request_timeout = request_timeout
        self.connection_timeout = connection_timeout
        self.max_body = max_body
        self.monotonic = monotonic
        family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        # OSError (port taken, no such address) to the caller, before any thread starts
        self.sock = socket.create_server(address, family=family, backlog=BACKLOG)
        self.sock.setblocking(False)
        self.refused = 0  # connections closed at once: the cap was reached
        self.evicted = 0  # connections closed for a newer one while waiting for a request
        self.timed_out = 0  # connections closed by a timeout
        self._conns: dict[socket.socket, _Conn] = {}  # in the order accepted
        self._reading: dict[socket.socket, _Conn] = {}  # waiting for their request, oldest first
        self._lingering: dict[socket.socket, _Conn] = {}  # answered, oldest first
        self._selector = selectors.DefaultSelector()
        self._pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="slurm-mig-page")
        self._built: deque[tuple[_Conn, HTTPStatus, str, bytes]] = deque()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._stopping = threading.Event()
        self._accepting_at = 0.0  # accept again from then (after EMFILE)
        self.thread = threading.Thread(target=self._run, name="slurm-mig-http", daemon=True)

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.sock.getsockname()[:2]
        return str(host), int(port)

    @property
    def connections(self) -> int:
        """Connections open now."""
        return len(self._conns)

    def start(self) -> Server:
        self._selector.register(self.sock, selectors.EVENT_READ, "accept")
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self.thread.start()
        return self

    def close(self) -> None:
        self._stopping.set()
        self._poke()
        if self.thread.is_alive():
            self.thread.join(10.0)
        self._pool.shutdown(wait=False, cancel_futures=True)
        for conn in list(self._conns.values()):
            self._drop(conn)
        self._selector.close()
        for s in (self.sock, self._wake_r, self._wake_w):
            s.close()

    def _poke(self) -> None:
        try:
            self._wake_w.send(b"x")
        except OSError:  # full (it is already awake) or closed
            pass

    # --- the server's thread ------------------------------------------------------------
    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                self._turn()
            except Exception as exc:  # a bug here must not end the endpoint
                log.error("http: %s: %s", type(exc).__name__, exc)
                time.sleep(0.1)

    def _turn(self) -> None:
        now = self.monotonic()
        timeout = 0.5
        if self._reading:
            timeout = min(timeout, next(iter(self._reading.values())).request_by - now)
        if self._lingering:
            timeout = min(timeout, next(iter(self._lingering.values())).close_by - now)
        if self._conns:
            timeout = min(timeout, next(iter(self._conns.values())).close_by - now)
        if self._accepting_at > now:
            timeout = min(timeout, self._accepting_at - now)
        for key, mask in self._selector.select(max(0.0, timeout)):
            if key.data == "accept":
                self._accept()
            elif key.data == "wake":
                self._answer_built()
            else:
                self._io(key.data, mask)
        if self._accepting_at and self.monotonic() >= self._accepting_at:
            self._accepting_at = 0.0
            self._selector.register(self.sock, selectors.EVENT_READ, "accept")
        self._expire()

    def _accept(self) -> None:
        for _ in range(ACCEPTS):
            try:
                sock, _ = self.sock.accept()
            except BlockingIOError:
                return
            except OSError as exc:  # EMFILE, ENFILE, ENOBUFS: the kernel keeps them queued
                log.debug("http: accept: %s; pausing", exc.strerror or exc)
                self._selector.unregister(self.sock)
                self._accepting_at = self.monotonic() + 0.1
                return
            if len(self._conns) >= self.max_connections:
                if not self._reading:
                    self.refused += 1
                    _abort(sock)
                    continue
                self.evicted += 1
                self._drop(next(iter(self._reading.values())))
            sock.setblocking(False)
            conn = _Conn(sock, self.monotonic(), self.request_timeout, self.connection_timeout)
            self._conns[sock] = conn
            self._reading[sock] = conn
            self._selector.register(sock, selectors.EVENT_READ, conn)

    def _expire(self) -> None:
        now = self.monotonic()
        while self._reading:
            conn = next(iter(self._reading.values()))
            if conn.request_by > now:
                break
            self.timed_out += 1
            log.debug("http: no whole request within %.0f s", self.request_timeout)
            self._drop(conn)
        while self._lingering:
            conn = next(iter(self._lingering.values()))
            if conn.close_by > now:
                break
            self._drop(conn)
        while self._conns:
            conn = next(iter(self._conns.values()))
            if conn.close_by > now:
                break
            self.timed_out += 1
            log.debug("http: a connection timed out (%s)", conn.state)
            self._drop(conn)

    def _drop(self, conn: _Conn) -> None:
        self._conns.pop(conn.sock, None)
        self._reading.pop(conn.sock, None)
        self._lingering.pop(conn.sock, None)
        try:
            self._selector.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        _abort(conn.sock) if conn.state in ("reading", "writing") else conn.sock.close()
        conn.state = "closed"

    def _io(self, conn: _Conn, mask: int) -> None:
        try:
            if conn.state == "reading" and mask & selectors.EVENT_READ:
                self._read(conn)
            elif conn.state == "writing" and mask & selectors.EVENT_WRITE:
                self._write(conn)
            elif conn.state == "lingering":
                if not conn.sock.recv(4096):
                    self._drop(conn)
        except OSError as exc:  # reset, broken pipe: the client's business
            log.debug("http: client gone: %s", exc.strerror or type(exc).__name__)
            self._drop(conn)

    def _read(self, conn: _Conn) -> None:
        data = conn.sock.recv(4096)
        if not data:
            self._drop(conn)
            return
        conn.got += data
        end = conn.got.find(b"\r\n\r\n")
        if end < 0:
            if len(conn.got) > MAX_REQUEST:
                self._respond(conn, *_error(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE))
            return
        del self._reading[conn.sock]
        try:
            method, path = _parse(bytes(conn.got[:end]))
            page = self.pages.get(path)
            if page is None:
                raise _Refused(HTTPStatus.NOT_FOUND, "not found")
        except _Refused as exc:
            self._respond(conn, *_error(exc.status, str(exc)))
            return
        conn.head_only = method == "HEAD"
        conn.state = "building"
        self._selector.unregister(conn.sock)  # until its answer is ready
        future = self._pool.submit(self._build, path, page)
        future.add_done_callback(lambda f, c=conn: self._built_one(c, f))

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

    def _built_one(self, conn: _Conn, future: Future) -> None:
        if future.cancelled():
            return
        self._built.append((conn, *future.result()))
        self._poke()

    def _answer_built(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except BlockingIOError:
            pass
        while self._built:
            conn, status, kind, data = self._built.popleft()
            if conn.state == "building":
                self._respond(conn, status, kind, data)

    def _respond(self, conn: _Conn, status: HTTPStatus, kind: str, data: bytes) -> None:
        self._reading.pop(conn.sock, None)
        lines = [
            f"HTTP/1.0 {status.value} {status.phrase}",
            "Server: slurm-mig",
            f"Date: {formatdate(usegmt=True)}",
            f"Content-Type: {kind}",
            f"Content-Length: {len(data)}",
            "Cache-Control: no-store",
            "Connection: close",
        ]
        conn.out.append(memoryview(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")))
        if data and not conn.head_only:
            conn.out.append(memoryview(data))  # the page's bytes, not a copy
        if conn.state == "building":
            self._selector.register(conn.sock, selectors.EVENT_WRITE, conn)
        else:
            self._selector.modify(conn.sock, selectors.EVENT_WRITE, conn)
        conn.state = "writing"
        log.debug("http: %d, %d bytes", status.value, 0 if conn.head_only else len(data))
        try:
            self._write(conn)
        except OSError as exc:
            log.debug("http: client gone: %s", exc.strerror or type(exc).__name__)
            self._drop(conn)

    def _write(self, conn: _Conn) -> None:
        while conn.out:
            chunk = conn.out[0]
            try:
                sent = conn.sock.send(chunk[:CHUNK])
            except BlockingIOError:
                return  # the client reads slowly: wait for it (within close_by)
            if sent < len(chunk):
                conn.out[0] = chunk[sent:]
            else:
                conn.out.popleft()
        # all handed to the kernel: half-close, and let the client close (no reset that
        # could cut the answer short), for at most LINGER seconds
        conn.sock.shutdown(socket.SHUT_WR)
        conn.state = "lingering"
        conn.close_by = min(conn.close_by, self.monotonic() + LINGER)
        self._lingering[conn.sock] = conn
        self._selector.modify(conn.sock, selectors.EVENT_READ, conn)


def _abort(sock: socket.socket) -> None:
    """Close at once (a reset): nothing waits in the kernel for a client that left."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    except OSError:
        pass
    sock.close()


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
