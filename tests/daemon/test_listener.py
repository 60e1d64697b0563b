"""Issue 34, hole 4: the connection handling the HTTP endpoint and the report port share
(`slurm_mig.daemon.listener`): per-address caps, the idlest connection closed for a newer
one, a request already in the kernel never taken for idle, the first-byte timeout, and
a burst that waits in the backlog. Time is a FakeClock given to the listener: a
connection is idle, or late, when the test moves the clock."""

from __future__ import annotations

import select
import socket
import time

import pytest
from support import FakeClock

from slurm_mig.daemon.listener import Conn, Listener


class Echo(Listener):
    """Answers each line-terminated request with ``ok <request>``."""

    name = "echo"

    def _received(self, conn: Conn, eof: bool) -> None:
        if eof and not conn.got:
            self._drop(conn)
        elif b"\n" in conn.got or eof:
            got = bytes(conn.got).strip()
            self._submit(conn, lambda: [b"ok " + got + b"\n"])


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1000.0)


@pytest.fixture
def listen(clock):
    started: list[Echo] = []

    def start(**kw) -> Echo:
        kw.setdefault("first_byte_timeout", 2.0)
        kw.setdefault("request_timeout", 5.0)
        kw.setdefault("connection_timeout", 5.0)
        e = Echo(("127.0.0.1", 0), monotonic=clock.monotonic, **kw).start()
        started.append(e)
        return e

    yield start
    for e in started:
        e.close()


def until(ok, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not ok():
        assert time.monotonic() < deadline, "not within the time"
        time.sleep(0.01)


def connect(e: Listener, source: str = "127.0.0.1") -> socket.socket:
    s = socket.socket()
    s.settimeout(10)
    s.bind((source, 0))
    s.connect(e.address)
    return s


def ask(e: Listener, text: bytes, source: str = "127.0.0.1") -> bytes:
    with connect(e, source) as s:
        s.sendall(text + b"\n")
        s.shutdown(socket.SHUT_WR)
        return s.recv(100)


def closed(s: socket.socket) -> bool:
    s.settimeout(10)
    try:
        return s.recv(10) == b""
    except ConnectionResetError:
        return True


def test_a_new_connection_closes_the_idlest_of_its_own_address_not_anothers(listen, clock):
    e = listen(max_connections=8, per_source=2, idle_after=0.1)
    other = connect(e, "127.0.0.3")  # another node's idle connection
    idle = [connect(e, "127.0.0.2") for _ in range(2)]
    until(lambda: e.connections == 3)
    clock.now += 1.0  # all three idle now
    assert ask(e, b"x", "127.0.0.2") == b"ok x\n"
    assert closed(idle[0]), "the idlest connection of that address stays open"
    assert e.evicted == 1
    other.sendall(b"y\n")
    other.shutdown(socket.SHUT_WR)
    assert other.recv(10) == b"ok y\n"  # the other address kept its connection
    for s in (other, *idle):
        s.close()


def test_a_request_already_sent_is_read_not_taken_for_idle(clock):
    """The choice itself, on a listener whose loop is not running: of two idle-looking
    connections, the one whose request is in the kernel is served, the silent one closed."""
    e = Echo(
        ("127.0.0.1", 0),
        max_connections=8,
        per_source=2,
        first_byte_timeout=2.0,
        request_timeout=5.0,
        connection_timeout=5.0,
        idle_after=0.1,
        monotonic=clock.monotonic,
    )
    clients = [connect(e) for _ in range(2)]
    try:
        e.sock.setblocking(True)
        conns = []
        for _ in clients:
            sock, peer = e.sock.accept()
            sock.setblocking(False)
            conns.append(Conn(sock, peer, clock.now, e.limits))
            e._add(conns[-1])
        clients[0].sendall(b"a\n")  # the older one: its request is here, not yet read
        select.select([conns[0].sock], [], [], 10)
        clock.now += 1.0
        assert e._room("127.0.0.1")
        assert conns[0].state == "working" and conns[1].state == "closed"
        assert e.evicted == 1
        assert closed(clients[1])
    finally:
        for s in clients:
            s.close()
        e.close()


def test_silent_connections_are_closed_at_the_first_byte_timeout(listen, clock):
    e = listen(max_connections=8)
    idle = [connect(e) for _ in range(3)]
    until(lambda: e.connections == 3)
    clock.now += 2.5
    e._poke()  # a turn of the loop, which reads the clock
    assert all(closed(s) for s in idle)
    assert e.timed_out == 3 and e.connections == 0
    for s in idle:
        s.close()


def test_when_none_is_idle_a_burst_waits_in_the_backlog_and_is_served(listen, clock):
    e = listen(max_connections=2, idle_after=0.1, wait_when_full=True)
    young = [connect(e) for _ in range(2)]  # young: not idle while the clock stands still
    until(lambda: e.connections == 2)
    late = connect(e)  # the kernel completes it; the listener waits
    late.sendall(b"z\n")
    late.shutdown(socket.SHUT_WR)
    young[0].sendall(b"a\n")
    young[0].shutdown(socket.SHUT_WR)
    assert young[0].recv(10) == b"ok a\n"
    young[0].close()  # it closes its side: its slot is free
    assert late.recv(10) == b"ok z\n"  # let in once a slot was free, never reset
    assert e.evicted == 0 and e.refused == 0
    for s in (late, *young):
        s.close()
