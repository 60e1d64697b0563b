"""Issue 18, holes 2, 3 and 4, performed against the planner daemon of a whole
installation on a real loopback Slurm (slurm_mig.demo.live.LiveCluster), started with
the descriptor limit systemd gives a unit by default (1024):

- 2,000 idle connections to its metrics/web port, a slow-loris and clients that reset:
  the daemon keeps cycling, a scrape still answers within a second, its descriptors stay
  under its limit and nothing prints a traceback;
- a flood of forged, unsigned and replayed notification datagrams from ``nobody``: the
  cycle rate changes by less than 2x (each wake is a squeue and a sinfo on slurmctld),
  a genuine signed one still wakes it, and the refusals are counted, not logged each;
- 8 clients loading the web page without pause: the cycles neither slow down nor leave
  longer gaps between them.

Jobs run for minutes, so no hook fires while a test measures. Figures are printed (-s).
The outcome does not depend on the Slurm release: the module runs on the host's Slurm.
"""

from __future__ import annotations

import os
import re
import resource
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request
from datetime import datetime

import pytest
from support import sent_slowly

from slurm_mig.demo.live import LiveCluster
from slurm_mig.geometry import get_model
from slurm_mig.slurm.assignment import load_key
from slurm_mig.slurm.notify import sign
from slurm_mig.workload import load_task_source

from .conftest import host_release_only, live_cluster, notify_wakes, planner_address, wait_until

# the daemon's own listeners and cycle: the same on every Slurm release (CI's e2e time)
pytestmark = host_release_only

RODINIA = load_task_source("rodinia-a100", get_model("A100-40GB"))
CYCLE = 0.5  # [planner] cycle
SCALE = 120.0  # seconds per profiled second: every job outlives the module
KERNELS = ["Gaussian", "LavaMD", "Gaussian", "LavaMD"]
DEFAULT_NOFILE = 1024  # systemd's soft limit for a unit without LimitNOFILE
NOBODY = 65534
# the flood runs as nobody, who cannot read this venv under root's home: stdlib only
USER_PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


@pytest.fixture(scope="module")
def lc():
    with live_cluster(
        "slurm-mig-attacks-", planner={"cycle": CYCLE, "batch_window": 0.0}
    ) as cluster:
        cluster.learn(RODINIA, SCALE)
        ids = [cluster.submit(k, SCALE) for k in KERNELS]
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(DEFAULT_NOFILE, hard), hard))
        try:  # the daemon inherits the limit it would have under systemd
            cluster.start_planner()
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        _wait(lambda: sum(cluster.jobs()[j].state == "RUNNING" for j in ids) >= 2, 90, "jobs")
        _wait(lambda: cluster.status().get("cycle", 0) >= 3, 30, "cycles")
        cluster.ids = ids
        yield cluster


def _wait(ok, timeout: float, what: str):
    return wait_until(ok, timeout, what, poll=0.1)


def _scrape(lc: LiveCluster, path: str = "/metrics") -> tuple[float, bytes]:
    host, port = planner_address(lc, "metrics")
    t0 = time.monotonic()
    with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=30) as r:
        body = r.read()
    return time.monotonic() - t0, body


_DONE = re.compile(r"^(\S+ \S+) slurm-mig planner: cycle (\d+) done in")


def _cycles(lc: LiveCluster, since: float, until: float) -> list[float]:
    """When each cycle between ``since`` and ``until`` (wall time) finished, from the
    daemon's log (its time stamps are the daemon's own)."""
    out = []
    for line in lc.log_file.read_text(errors="replace").splitlines():
        m = _DONE.match(line)
        if m:
            at = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            if since <= at <= until:
                out.append(at)
    return out


def _measure(lc: LiveCluster, seconds: float) -> tuple[int, float]:
    """Cycles finished in ``seconds`` from now, and the longest gap between two."""
    t0 = time.time()
    time.sleep(seconds)  # the daemon's log is the clock here: this only lets it run
    times = _cycles(lc, t0, t0 + seconds)
    gaps = [b - a for a, b in zip(times, times[1:])]
    return len(times), max(gaps, default=seconds)


def _daemon_output(lc: LiveCluster) -> str:
    return lc.daemon_log.read_text(errors="replace") + lc.log_file.read_text(errors="replace")


# --- hole 2: the HTTP endpoint ----------------------------------------------------------


def test_two_thousand_idle_connections_neither_stop_the_daemon_nor_slow_a_scrape(lc):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 4500:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard}: 2,000 connections need more")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 4500), hard))
    host, port = planner_address(lc, "metrics")
    pid = lc.daemon.pid
    before = lc.status()["cycle"]
    idle: list[socket.socket] = []
    try:
        quiet = max(_scrape(lc)[0] for _ in range(3))
        for _ in range(2000):
            idle.append(socket.create_connection((host, port), timeout=10))
        loaded = [_scrape(lc)[0] for _ in range(5)]
        fds = len(os.listdir(f"/proc/{pid}/fd"))
        # the cycle still gets descriptors for squeue and sinfo: cycles go on
        lc.wait_status(lambda s: s["cycle"] >= before + 4, 30)
        assert lc.daemon.poll() is None, "the daemon exited"
        linger = struct.pack("ii", 1, 0)  # every client resets its connection
        for c in idle:
            c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
    finally:
        for c in idle:
            c.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    print(
        f"\nscrape: {quiet * 1000:.0f} ms quiet, {max(loaded) * 1000:.0f} ms behind 2,000 idle "
        f"connections; the daemon held {fds} descriptors (limit {DEFAULT_NOFILE})"
    )
    assert max(loaded) < 1.0, loaded
    assert fds < DEFAULT_NOFILE // 2, f"{fds} descriptors open"
    assert _scrape(lc)[1].startswith(b"# HELP")
    out = _daemon_output(lc)
    assert "Traceback" not in out and "Too many open files" not in out, out[-3000:]


def test_a_slow_loris_is_closed_and_the_daemon_says_nothing_of_it(lc):
    host, port = planner_address(lc, "metrics")
    with socket.create_connection((host, port), timeout=10) as c:
        t0 = time.monotonic()
        closed = sent_slowly(c, b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-a: " + b"a" * 100, 0.5)
        took = time.monotonic() - t0
    print(f"\na slow-loris connection was closed after {took:.1f} s")
    assert closed and took < 30, "the slow client kept its connection"
    assert "Traceback" not in _daemon_output(lc)


# --- hole 3: the notify port ------------------------------------------------------------

FLOOD = r"""
import signal, socket, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
host, port, seconds, replay = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
replay = bytes.fromhex(replay)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
end, n = time.monotonic() + seconds, 0
try:
    while time.monotonic() < end:
        for i in range(64):
            if n % 3 == 0:  # the unsigned form the daemon used to obey
                data = b"slurm-mig ended %d" % n
            elif n % 3 == 1:  # the signed form, signed with no key
                data = b"slurm-mig-n1 ended %d %d AAAAAAAAAAAAAAAAAAAAAA" % (n, time.time() * 1000)
            else:  # a genuine datagram seen on the wire, sent again
                data = replay
            try:
                s.sendto(data, (host, port))
            except OSError:
                pass
            n += 1
        time.sleep(0.002)
finally:
    print(n)
"""


def _flood(lc: LiveCluster, seconds: float, replay: bytes) -> subprocess.Popen:
    host, port = planner_address(lc, "notify")
    return subprocess.Popen(
        [USER_PYTHON, "-c", FLOOD, host, str(port), str(seconds), replay.hex()],
        user=NOBODY,
        stdout=subprocess.PIPE,
        text=True,
        cwd="/",
    )


def _refused(lc: LiveCluster) -> dict[str, float]:
    """The daemon's count of refused notifications, by reason."""
    text = _scrape(lc)[1].decode()
    pattern = r'^slurm_mig_planner_notify_refused_total\{reason="(\w+)"\} (\S+)$'
    return {m.group(1): float(m.group(2)) for m in re.finditer(pattern, text, re.M)}


def test_a_notify_flood_from_nobody_does_not_multiply_the_cycles(lc):
    key = load_key(lc.root / "etc" / "key")
    assert _refused(lc) == {}, "the Prologs' own notifications were refused"
    path = lc.node_path(lc.nodes[0], lc.log_file)
    # a job shows RUNNING while its Prolog may still be at work: wait for its log line
    _wait(lambda: path.exists() and "prolog job" in path.read_text(errors="replace"), 60, "log")
    hooks_log = path.read_text(errors="replace")
    assert "notif" not in hooks_log  # each Prolog signed its own
    window = 10.0
    assert notify_wakes(lc, key, 3, CYCLE) >= 2, "a genuine notification does not wake the daemon"
    replay = sign(key, "ended", lc.ids[0], time.time())
    host, port = planner_address(lc, "notify")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.sendto(replay, (host, port))  # heard once, here; the flood sends it again
    quiet, _ = _measure(lc, window)
    flood = _flood(lc, window + 20, replay)
    try:
        time.sleep(0.5)
        flooded, _ = _measure(lc, window)
        woke = notify_wakes(lc, key, 3, CYCLE)
    finally:
        flood.terminate()
        sent = flood.communicate(timeout=30)[0]
    refused = _refused(lc)
    print(
        f"\ncycles per {window:.0f} s: {quiet} quiet, {flooded} under a flood of "
        f"{sent.strip() or '?'} datagrams; refused {refused}"
    )
    assert quiet >= 5
    assert 0.5 < flooded / quiet < 2.0, (quiet, flooded)
    assert woke >= 2, "a genuine notification does not wake the daemon under the flood"
    assert refused.get("forged", 0) > 0 and refused.get("malformed", 0) > 0
    assert refused.get("replayed", 0) + refused.get("limited", 0) > 0
    lines = [
        line for line in lc.log_file.read_text(errors="replace").splitlines() if "notify" in line
    ]
    assert len([line for line in lines if "refused" in line]) <= 1, lines[-5:]


# --- hole 4: the web page ---------------------------------------------------------------


def test_eight_page_clients_do_not_lengthen_the_gap_between_cycles(lc):
    window = 12.0
    assert b"<svg" in _scrape(lc, "/")[1]  # the page draws the Gantt of the running jobs
    quiet, quiet_gap = _measure(lc, window)
    stop = threading.Event()
    pages = [0] * 8

    def client(i: int) -> None:
        while not stop.is_set():
            _scrape(lc, "/")
            pages[i] += 1

    clients = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(8)]
    for t in clients:
        t.start()
    try:
        busy, busy_gap = _measure(lc, window)
    finally:
        stop.set()
        for t in clients:
            t.join(30)
    print(
        f"\ncycles per {window:.0f} s: {quiet} quiet (longest gap {quiet_gap:.2f} s), {busy} "
        f"with 8 page clients (longest gap {busy_gap:.2f} s, {sum(pages)} pages served)"
    )
    assert min(pages) >= 3, pages
    assert quiet >= 5 and busy >= 0.7 * quiet, (quiet, busy)
    assert busy_gap <= 1.5 * quiet_gap + 0.5, (quiet_gap, busy_gap)
