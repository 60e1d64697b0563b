"""Issue 18, hole 2: the daemon's HTTP endpoint (`slurm_mig.daemon.httpserver`) under attack
by any local user: idle and slow connections, floods past the cap, clients that reset,
oversized requests and pages. Each test performs the attack and asserts the endpoint
still answers a scrape promptly, holds no more than its cap and prints no traceback.
`httpserver.Cached` (pages built once per cycle by one thread) is tested with a fake clock."""

from __future__ import annotations

import logging
import resource
import socket
import struct
import threading
import time
import urllib.request

import pytest
from support import sent_slowly

from slurm_mig.daemon import httpserver
from slurm_mig.daemon.httpserver import Cached, Server

METRICS = b"slurm_mig_planner_cycles_total 1\n"


def pages(big: int = 0) -> dict:
    return {
        "/metrics": lambda: ("text/plain", METRICS),
        "/big": lambda: ("text/plain", b"x" * big),
    }


@pytest.fixture
def server():
    started: list[Server] = []

    def start(**kw) -> Server:
        s = Server(("127.0.0.1", 0), pages(kw.pop("big", 0)), **kw).start()
        started.append(s)
        return s

    yield start
    for s in started:
        s.close()


def scrape(s: Server, path: str = "/metrics") -> tuple[float, bytes]:
    """Seconds a GET took, and the body."""
    host, port = s.address
    t0 = time.monotonic()
    with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=10) as r:
        body = r.read()
    return time.monotonic() - t0, body


def connect(s: Server) -> socket.socket:
    return socket.create_connection(s.address, timeout=10)


def closed_by_server(sock: socket.socket) -> bool:
    """True once the server has closed ``sock`` (EOF or reset), waiting up to its timeout."""
    try:
        return sock.recv(4096) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def _until(ok, timeout: float = 10.0) -> bool:
    """Wait for the server's thread to have done something (not about time)."""
    pause = threading.Event()
    for _ in range(int(timeout / 0.02)):
        if ok():
            return True
        pause.wait(0.02)
    return ok()


@pytest.fixture
def many_fds():
    """Enough descriptors for 2,000 connections of both ends in this process."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 6000
    if soft != resource.RLIM_INFINITY and soft < want:
        if hard != resource.RLIM_INFINITY and hard < want:
            pytest.skip(f"RLIMIT_NOFILE hard limit {hard} < {want}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_pages_head_and_refusals(server):
    s = server()
    host, port = s.address
    assert scrape(s)[1] == METRICS
    req = urllib.request.Request(f"http://{host}:{port}/metrics", method="HEAD")
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.headers["Content-Length"] == str(len(METRICS)) and r.read() == b""
    for raw, status in (
        (b"GET /nope HTTP/1.0\r\n\r\n", b"404"),
        (b"DELETE /metrics HTTP/1.0\r\n\r\n", b"501"),
        (b"nonsense\r\n\r\n", b"400"),
        (b"GET /metrics HTTP/1.0\r\nX: " + b"a" * 20_000 + b"\r\n\r\n", b"431"),
    ):
        with connect(s) as c:
            c.sendall(raw)
            assert c.recv(64).split(b" ")[1] == status, raw[:30]


def test_a_standby_answers_each_page_with_303_to_the_active_daemon(server):
    primary: list[str | None] = ["http://ctl1:9764"]
    s = server(redirect=lambda: primary[0])
    for method in ("GET", "HEAD"):
        with connect(s) as c:
            c.sendall(f"{method} /metrics?x=1 HTTP/1.0\r\n\r\n".encode())
            head = b""
            while b"\r\n\r\n" not in head:
                head += c.recv(4096)
        lines = head.split(b"\r\n")
        assert lines[0] == b"HTTP/1.0 303 See Other"
        assert b"Location: http://ctl1:9764/metrics" in lines
    with connect(s) as c:  # an unknown path is still not found, not redirected
        c.sendall(b"GET /nope HTTP/1.0\r\n\r\n")
        assert c.recv(64).split(b" ")[1] == b"404"
    primary[0] = None  # it took the lease over: its own pages
    assert scrape(s)[1] == METRICS


def test_two_thousand_idle_connections_neither_stop_the_server_nor_slow_a_scrape(server, many_fds):
    s = server()  # the default cap: a quarter of the descriptors, at most MAX_CONNECTIONS
    assert s.max_connections <= httpserver.MAX_CONNECTIONS
    threads_before = threading.active_count()
    idle = []
    try:
        for _ in range(2000):
            idle.append(connect(s))
        _until(lambda: s.refused + s.evicted >= 2000 - s.max_connections)
        took = max(scrape(s)[0] for _ in range(5))
        assert took < 1.0, f"a scrape took {took:.2f} s behind 2,000 idle connections"
        assert s.connections <= s.max_connections
        assert threading.active_count() <= threads_before + httpserver.WORKERS  # no thread each
    finally:
        for c in idle:
            c.close()
    print(f"scrape behind 2,000 idle connections: {took * 1000:.0f} ms (cap {s.max_connections})")


def test_past_the_cap_the_longest_waiting_connection_makes_room(server):
    s = server(max_connections=4)
    idle = [connect(s) for _ in range(4)]
    _until(lambda: s.connections == 4)
    newest = connect(s)
    assert closed_by_server(idle[0])  # the one that waited longest for its request
    assert scrape(s)[1] == METRICS  # a scrape always gets in
    assert s.connections <= 4
    for c in (*idle, newest):
        c.close()


def test_a_slow_loris_is_closed_after_the_request_timeout(server):
    s = server(request_timeout=0.5)
    with connect(s) as c:
        t0 = time.monotonic()
        # never the blank line
        closed = sent_slowly(c, b"GET /metrics HTTP/1.0\r\nHost: x\r\n", 0.1)
        if not closed:
            c.settimeout(10)
            closed = closed_by_server(c)
        took = time.monotonic() - t0
    assert closed, "the slow client kept its connection"
    assert took >= 0.5 and s.timed_out == 1
    assert scrape(s)[1] == METRICS


def test_a_client_that_does_not_read_a_big_page_is_dropped(server):
    s = server(big=8 << 20, connection_timeout=1.0)
    with connect(s) as c:
        c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        c.sendall(b"GET /big HTTP/1.0\r\n\r\n")
        assert _until(lambda: s.timed_out == 1)
    assert s.connections == 0 and scrape(s)[1] == METRICS


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_resets_and_broken_pipes_print_no_traceback(server, capfd, caplog, monkeypatch):
    # the endpoint's log alone, at debug: handlers other tests leave on "slurm_mig" stay out
    logger = logging.getLogger("slurm_mig.planner")
    got = _Records()
    monkeypatch.setattr(logger, "propagate", False)
    monkeypatch.setattr(logger, "handlers", [got])
    caplog.set_level(logging.DEBUG, logger="slurm_mig.planner")  # setLevel: caches cleared
    s = server(big=4 << 20)
    linger = struct.pack("ii", 1, 0)  # close() sends RST
    for request in (b"", b"GET /met", b"GET /big HTTP/1.0\r\n\r\n"):
        for _ in range(20):
            c = connect(s)
            c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
            if request:
                c.sendall(request)
            c.close()
    _until(lambda: s.connections == 0)
    assert scrape(s)[1] == METRICS
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err and "Error" not in err, err[-2000:]
    assert got.records, "the resets are not even a debug line"
    assert all(r.levelno == logging.DEBUG and not r.exc_info for r in got.records)
    assert all("\n" not in r.getMessage() for r in got.records)


def test_a_page_too_big_or_broken_is_a_500_not_a_crash(server, caplog):
    s = server(big=2048, max_body=1024)
    host, port = s.address
    with pytest.raises(urllib.error.HTTPError) as got:
        urllib.request.urlopen(f"http://{host}:{port}/big", timeout=10)
    assert got.value.code == 500
    assert any("more than 1024" in r.getMessage() for r in caplog.records)
    assert scrape(s)[1] == METRICS


def test_the_cap_follows_the_descriptor_limit(monkeypatch):
    monkeypatch.setattr(resource, "getrlimit", lambda _: (1024, 4096))
    assert httpserver.default_cap() == 256  # the cycle keeps three quarters of them
    monkeypatch.setattr(resource, "getrlimit", lambda _: (65536, 65536))
    assert httpserver.default_cap() == httpserver.MAX_CONNECTIONS


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_a_cached_page_is_built_once_per_key_and_min_age():
    clock = FakeClock()
    key = [object()]
    cache = Cached(lambda: clock.t, lambda: key[0], min_age=2.0, max_age=5.0, monotonic=clock)
    assert [cache() for _ in range(100)] == [0.0] * 100 and cache.builds == 1
    key[0] = object()  # a new cycle, but too soon
    clock.t = 1.0
    assert cache() == 0.0
    clock.t = 2.0
    assert cache() == 2.0 and cache.builds == 2
    clock.t = 6.9  # same cycle, not yet max_age old
    assert cache() == 2.0
    clock.t = 7.0
    assert cache() == 7.0 and cache.builds == 3


def test_while_a_page_is_built_the_others_get_the_last_one_without_waiting():
    clock = FakeClock()
    key = [object()]
    building, finish = threading.Event(), threading.Event()
    calls = []

    def build() -> str:
        calls.append(1)
        if len(calls) > 1:
            building.set()
            finish.wait(10)
        return f"v{len(calls)}"

    cache = Cached(build, lambda: key[0], monotonic=clock)
    assert cache() == "v1"
    key[0] = object()
    slow = threading.Thread(target=cache)
    slow.start()
    assert building.wait(10)
    got = [cache() for _ in range(50)]  # none of them waits for the slow build
    finish.set()
    slow.join(10)
    assert got == ["v1"] * 50 and len(calls) == 2
    assert cache() == "v2"
