"""Issue 34, hole 10, performed against the planner daemon of a whole installation on a
real loopback Slurm (slurm_mig.demo.live.LiveCluster): ``nobody`` sends forged
notification datagrams from 200 loopback addresses (any of 127.0.0.0/8 can be bound on
Linux), each address within its own per-source rate, 4,000 a second together (8 x the
shared bucket's rate). They used to spend the shared bucket and keep the listener
paused about 59 s of 60, so genuine notifications were lost; now the MAC is checked
first, nothing forged spends a bucket, and a genuine notification (from 127.0.0.2, one
of the flooding addresses) still wakes the daemon at once. Figures are printed (-s)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import urllib.request

import pytest

from slurm_mig.demo.live import LiveCluster
from slurm_mig.slurm import notify
from slurm_mig.slurm.assignment import load_key

from .conftest import host_release_only, live_cluster, notify_wakes, planner_address, wait_until

CYCLE = 0.5  # [planner] cycle
NOBODY = 65534
SOURCES = 200
# the flood runs as nobody, who cannot read this venv under root's home: stdlib only
USER_PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable

FLOOD = r"""
import signal, socket, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
host, port, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
sources, rate = int(sys.argv[4]), float(sys.argv[5])
socks = []
for x in range(1, sources + 1):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.%d" % x, 0))
    socks.append(s)
at = time.monotonic()
end, n = at + seconds, 0
try:
    while time.monotonic() < end:
        for s in socks:  # one from each address per round: each within its own rate
            data = b"slurm-mig-n1 ended %d %d AAAAAAAAAAAAAAAAAAAAAA" % (n, time.time() * 1000)
            try:
                s.sendto(data, (host, port))
            except OSError:
                pass
            n += 1
        at += 1 / rate
        time.sleep(max(0.0, at - time.monotonic()))
finally:
    print(n)
"""


@pytest.fixture(scope="module")
def lc():
    with live_cluster(
        "slurm-mig-notify-", planner={"cycle": CYCLE, "batch_window": 0.0}
    ) as cluster:
        cluster.start_planner()
        wait_until(lambda: cluster.status().get("cycle", 0) >= 3, 60, "cycles", poll=0.1)
        yield cluster


def _refused(lc: LiveCluster) -> dict[str, float]:
    """The daemon's count of refused notifications, by reason (its /metrics)."""
    host, port = planner_address(lc, "metrics")
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=30) as r:
        text = r.read().decode()
    pattern = r'^slurm_mig_planner_notify_refused_total\{reason="(\w+)"\} (\S+)$'
    return {m.group(1): float(m.group(2)) for m in re.finditer(pattern, text, re.M)}


@host_release_only
def test_forgeries_from_200_addresses_neither_pause_the_listener_nor_keep_a_wake_out(lc):
    key = load_key(lc.root / "etc" / "key")
    host, port = planner_address(lc, "notify")
    before = _refused(lc)
    rate = str(notify.SOURCE_RATE)
    flood = subprocess.Popen(
        [USER_PYTHON, "-c", FLOOD, host, str(port), "60", str(SOURCES), rate],
        user=NOBODY,
        stdout=subprocess.PIPE,
        text=True,
        cwd="/",
    )
    try:
        flooding = before.get("forged", 0) + notify.TOTAL_BURST
        wait_until(lambda: _refused(lc).get("forged", 0) > flooding, 60, "the flood", poll=0.1)
        woke = notify_wakes(lc, key, 4, CYCLE)
    finally:
        flood.terminate()
        sent = flood.communicate(timeout=30)[0]
    refused = _refused(lc)
    forged = refused.get("forged", 0) - before.get("forged", 0)
    print(
        f"\n{sent.strip() or '?'} forged datagrams from {SOURCES} addresses; {forged:.0f} "
        f"refused as forged; {woke} of 4 genuine ones woke the daemon at once; {refused}"
    )
    assert woke >= 3, "a genuine notification does not wake the daemon under the flood"
    for why in ("busy", "limited"):  # the shared bucket, which paused the listener
        assert refused.get(why, 0) == before.get(why, 0), (why, before, refused)
    text = lc.daemon_log.read_text(errors="replace") + lc.log_file.read_text(errors="replace")
    assert "Traceback" not in text
