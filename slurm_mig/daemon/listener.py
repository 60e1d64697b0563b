"""A TCP listener any local user can connect to, served by one thread from a selector:
the connection handling the daemon's HTTP endpoint (`httpserver`) and the node-report port
(`receiver`) share. Nothing a client does holds a thread, a descriptor or memory for long:

- an idle or slow client costs a socket, never a thread;
- at most ``max_connections`` are open, and at most ``per_source`` from one address;
  connections are accepted a few at a time, so a burst never holds more;
- at a cap a new connection closes the idlest one (of its address when that address is
  at its cap): the one open longest while still waiting for its request that has sent
  nothing for ``idle_after`` seconds and nothing since the loop last looked (a client
  whose request is already in the kernel is read, not closed); when none is idle, the
  new one is closed at once, or, with ``wait_when_full``, let in while there is room
  (an address then holds more than its cap, young or busy connections only) and the
  others wait in the listen backlog until one is idle or closes;
- the first byte must arrive within ``first_byte_timeout``, the whole request within
  ``request_timeout``, the whole exchange within ``connection_timeout``;
- the answer is made by a subclass's function in one of ``workers`` threads, written as
  the client reads it, then the sending side is closed and the client given `LINGER`
  seconds to close its own;
- a client that resets or vanishes is one debug line, never a traceback.

A subclass says what a request is (`Listener._received`): it answers (`_answer`), hands
the work to a thread (`_submit`), drops the connection, or waits for more bytes.
"""

from __future__ import annotations

import logging
import selectors
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

log = logging.getLogger("slurm_mig.planner")

LINGER = 2.0  # seconds a closed answer waits for the client to close its side
CHUNK = 256 << 10  # bytes handed to the kernel at a time
BACKLOG = 1024  # connections the kernel queues for accept: a burst is not a SYN retry
ACCEPTS = 32  # connections accepted per turn of the loop (a burst: its fds a few at a time)
RECV = 65536  # bytes read per turn from one connection
LOOKS = 8  # connections looked at (read) when choosing the idlest one to close
Answer = Sequence[bytes | memoryview]


class Conn:
    """One client's connection: what it sent, what it is sent, its deadlines."""

    __slots__ = (
        "sock", "peer", "source", "got", "out", "state", "heard", "first_by",
        "request_by", "close_by", "tag",
    )  # fmt: skip

    def __init__(self, sock: socket.socket, peer: Any, now: float, limits: tuple) -> None:
        first_s, request_s, total_s = limits
        self.sock = sock
        self.peer = peer
        self.source = str(peer[0]) if isinstance(peer, tuple) and peer else "?"
        self.got = bytearray()
        self.out: deque[memoryview] = deque()
        self.state = "reading"  # then working, writing, lingering, closed
        self.heard = now  # when it was accepted or last sent bytes
        self.first_by = now + first_s
        self.request_by = now + request_s
        self.close_by = now + total_s
        self.tag: Any = None  # the subclass's


class Listener:
    """A running listener; ``close()`` stops it. Counters: ``refused`` (closed at once, a
    cap reached), ``evicted`` (closed for a newer one), ``timed_out``."""

    name = "listener"  # in thread names and log lines

    def __init__(
        self,
        address: tuple[str, int],
        *,
        max_connections: int,
        per_source: int | None = None,
        first_byte_timeout: float,
        request_timeout: float,
        connection_timeout: float,
        workers: int = 2,
        wait_when_full: bool = False,
        idle_after: float = 0.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_connections = max(1, max_connections)
        self.per_source = max(1, min(per_source or self.max_connections, self.max_connections))
        self.limits = (
            min(first_byte_timeout, request_timeout),
            request_timeout,
            connection_timeout,
        )
        self.wait_when_full = wait_when_full
        self.idle_after = idle_after
        self.monotonic = monotonic
        family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        # OSError (port taken, no such address) to the caller, before any thread starts
        self.sock = socket.create_server(address, family=family, backlog=BACKLOG)
        self.sock.setblocking(False)
        self.refused = self.evicted = self.timed_out = 0
        self._conns: dict[socket.socket, Conn] = {}  # in the order accepted
        self._silent: dict[socket.socket, Conn] = {}  # no byte yet, oldest first
        self._reading: dict[socket.socket, Conn] = {}  # waiting for their request, oldest first
        self._lingering: dict[socket.socket, Conn] = {}  # answered, oldest first
        self._sources: dict[str, dict[socket.socket, Conn]] = {}  # open ones per address
        self._selector = selectors.DefaultSelector()
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix=f"slurm-mig-{self.name}")
        self._done: deque[tuple[Conn, Answer]] = deque()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._stopping = threading.Event()
        self._accepting = True
        self._accepting_at = 0.0  # accept again from then (after EMFILE, or full)
        self._full = False  # paused at the cap: accept again as soon as one closes
        self.thread = threading.Thread(target=self._run, name=f"slurm-mig-{self.name}", daemon=True)

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.sock.getsockname()[:2]
        return str(host), int(port)

    @property
    def connections(self) -> int:
        """Connections open now."""
        return len(self._conns)

    def start(self) -> Listener:
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

    # --- what a subclass says -----------------------------------------------------------
    def _received(self, conn: Conn, eof: bool) -> None:
        """Bytes arrived in ``conn.got`` (``eof``: the client closed its side)."""
        raise NotImplementedError

    def _submit(self, conn: Conn, work: Callable[[], Answer]) -> None:
        """The request is whole: ``work`` makes the answer in a worker thread."""
        self._stop_reading(conn)
        conn.state = "working"
        self._selector.unregister(conn.sock)  # until its answer is ready
        future = self._pool.submit(work)
        future.add_done_callback(lambda f, c=conn: self._worked(c, f))

    def _stop_reading(self, conn: Conn) -> None:
        self._reading.pop(conn.sock, None)
        self._silent.pop(conn.sock, None)

    # --- the loop's thread --------------------------------------------------------------
    def _poke(self) -> None:
        try:
            self._wake_w.send(b"x")
        except OSError:  # full (it is already awake) or closed
            pass

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                self._turn()
            except Exception as exc:  # a bug here must not end the listener
                log.error("%s: %s: %s", self.name, type(exc).__name__, exc)
                time.sleep(0.1)

    def _next_deadline(self, now: float) -> float:
        timeout = 0.5
        for table, attr in (
            (self._silent, "first_by"),
            (self._reading, "request_by"),
            (self._lingering, "close_by"),
            (self._conns, "close_by"),
        ):
            if table:
                timeout = min(timeout, getattr(next(iter(table.values())), attr) - now)
        if self._accepting_at > now:
            timeout = min(timeout, self._accepting_at - now)
        return max(0.0, timeout)

    def _turn(self) -> None:
        events = self._selector.select(self._next_deadline(self.monotonic()))
        # the clients' bytes first: a request already here is never taken for idle
        for key, mask in sorted(events, key=lambda e: e[0].data == "accept"):
            if key.data == "accept":
                self._accept()
            elif key.data == "wake":
                self._answer_done()
            elif key.data.state != "closed":
                self._io(key.data, mask)
        if self._accepting_at and self.monotonic() >= self._accepting_at:
            self._accepting_at = 0.0
            self._resume()
        self._expire()
        if self._full and len(self._conns) < self.max_connections:
            self._accepting_at = 0.0
            self._resume()

    def _pause(self, until: float, full: bool = False) -> None:
        self._accepting_at = until
        self._full = full
        if self._accepting:
            self._selector.unregister(self.sock)
            self._accepting = False

    def _resume(self) -> None:
        if not self._accepting and not self._stopping.is_set():
            self._selector.register(self.sock, selectors.EVENT_READ, "accept")
            self._accepting = True

    def _accept(self) -> None:
        for _ in range(min(ACCEPTS, self.per_source)):
            full = len(self._conns) >= self.max_connections
            if self.wait_when_full and full and not self._room(None):
                self._pause(self.monotonic() + max(0.01, self.idle_after), full=True)
                return  # the kernel queues the others meanwhile
            try:
                sock, peer = self.sock.accept()
            except BlockingIOError:
                return
            except OSError as exc:  # EMFILE, ENFILE, ENOBUFS: the kernel keeps them queued
                log.debug("%s: accept: %s; pausing", self.name, exc.strerror or exc)
                self._pause(self.monotonic() + 0.1)
                return
            sock.setblocking(False)
            conn = Conn(sock, peer, self.monotonic(), self.limits)
            # waiting, a source over its cap with no idle connection is let in while
            # there is room: its connections are young, or busy, not idle
            if not self._room(conn.source) and not self.wait_when_full:
                self.refused += 1
                abort(sock)
                continue
            self._add(conn)

    def _room(self, source: str | None) -> bool:
        """Whether one more connection (from ``source``) fits, after closing the idlest
        one where a cap is reached."""
        mine = self._sources.get(source, {}) if source is not None else {}
        if len(mine) >= self.per_source:
            pool = [c for c in mine.values() if c.state == "reading"]
        elif len(self._conns) >= self.max_connections:
            pool = list(self._reading.values())
        else:
            return True
        now = self.monotonic()
        idle = [c for c in pool if now - c.heard >= self.idle_after]
        for conn in idle[:LOOKS]:
            try:
                self._read(conn)  # its request is here after all: not idle
            except BlockingIOError:
                self.evicted += 1
                self._drop(conn)
                return True
            except OSError:
                self._drop(conn)
                return True
            if conn.state == "closed":
                return True
        return False

    def _add(self, conn: Conn) -> None:
        self._conns[conn.sock] = conn
        self._silent[conn.sock] = conn
        self._reading[conn.sock] = conn
        self._sources.setdefault(conn.source, {})[conn.sock] = conn
        self._selector.register(conn.sock, selectors.EVENT_READ, conn)

    def _expire(self) -> None:
        now = self.monotonic()
        for table, attr, what in (
            (self._silent, "first_by", "no first byte"),
            (self._reading, "request_by", "no whole request"),
            (self._lingering, "close_by", ""),
            (self._conns, "close_by", "the connection's time"),
        ):
            while table:
                conn = next(iter(table.values()))
                if getattr(conn, attr) > now:
                    break
                if what:
                    self.timed_out += 1
                    log.debug("%s: %s in time (%s)", self.name, what, conn.state)
                self._drop(conn)

    def _drop(self, conn: Conn) -> None:
        for table in (self._conns, self._silent, self._reading, self._lingering):
            table.pop(conn.sock, None)
        mine = self._sources.get(conn.source)
        if mine is not None:
            mine.pop(conn.sock, None)
            if not mine:
                del self._sources[conn.source]
        try:
            self._selector.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        abort(conn.sock) if conn.state in ("reading", "writing") else conn.sock.close()
        conn.state = "closed"

    def _io(self, conn: Conn, mask: int) -> None:
        try:
            if conn.state == "reading" and mask & selectors.EVENT_READ:
                self._read(conn)
            elif conn.state == "writing" and mask & selectors.EVENT_WRITE:
                self._send(conn)
            elif conn.state == "lingering":
                if not conn.sock.recv(4096):
                    self._drop(conn)
        except BlockingIOError:
            pass
        except OSError as exc:  # reset, broken pipe: the client's business
            log.debug("%s: client gone: %s", self.name, exc.strerror or type(exc).__name__)
            self._drop(conn)

    def _read(self, conn: Conn) -> None:
        """What the client sent (BlockingIOError: nothing yet), to `_received`."""
        data = conn.sock.recv(RECV)
        self._silent.pop(conn.sock, None)
        conn.heard = self.monotonic()
        conn.got += data
        self._received(conn, not data)

    # --- answers ------------------------------------------------------------------------
    def _worked(self, conn: Conn, future: Future) -> None:
        if future.cancelled():
            return
        self._done.append((conn, future.result()))
        self._poke()

    def _answer_done(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except BlockingIOError:
            pass
        while self._done:
            conn, chunks = self._done.popleft()
            if conn.state == "working":
                self._answer(conn, chunks)

    def _answer(self, conn: Conn, chunks: Answer) -> None:
        """Send ``chunks`` (as the client reads them), then close the sending side."""
        was = conn.state
        self._stop_reading(conn)
        conn.out.extend(memoryview(c) for c in chunks if len(c))
        conn.state = "writing"
        if was == "working":
            self._selector.register(conn.sock, selectors.EVENT_WRITE, conn)
        else:
            self._selector.modify(conn.sock, selectors.EVENT_WRITE, conn)
        try:
            self._send(conn)
        except OSError as exc:
            log.debug("%s: client gone: %s", self.name, exc.strerror or type(exc).__name__)
            self._drop(conn)

    def _send(self, conn: Conn) -> None:
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


def abort(sock: socket.socket) -> None:
    """Close at once (a reset): nothing waits in the kernel for a client that left."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    except OSError:
        pass
    sock.close()
