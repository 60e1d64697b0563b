"""Issue 34, hole 4, performed against the planner daemon of a whole installation on a
real loopback Slurm (slurm_mig.demo.live.LiveCluster): ``nobody`` keeps 100 idle
connections to ``[planner] reports`` (one closed, one opened again at once) while jobs
end. Every node's report still arrives: the Epilogs keep nothing for later, a run's
report reaches the planner's store within 2 s of what it took without the attack, and a
report sent the way a node sends it is answered within 2 s. Figures are printed (-s).
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurm_mig.demo.live import LiveCluster
from slurm_mig.geometry import get_model
from slurm_mig.node import reports
from slurm_mig.slurm.assignment import load_key
from slurm_mig.workload import load_task_source

from .conftest import host_release_only, live_cluster, planner_address, wait_until

RODINIA = load_task_source("rodinia-a100", get_model("A100-40GB"))
SCALE = 1.0  # seconds per profiled second: jobs of a few seconds
NOBODY = 65534
IDLE = 100  # the attacker's connections
BOUND = 2.0  # seconds the attack may add to a report's delivery
# the attack runs as nobody, who cannot read this venv under root's home: stdlib only
USER_PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable

HOLD = r"""
import selectors, signal, socket, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
host, port, n, seconds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
sel = selectors.DefaultSelector()
opened = 0

def one():
    global opened
    try:
        s = socket.create_connection((host, port), timeout=5)
    except OSError:
        return
    s.setblocking(False)
    sel.register(s, selectors.EVENT_READ)
    opened += 1

try:
    for _ in range(n):
        one()
    print("ready", flush=True)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for key, _ in sel.select(0.05):  # closed by the planner: open another at once
            sel.unregister(key.fileobj)
            key.fileobj.close()
            one()
finally:
    print(opened, flush=True)
"""


@pytest.fixture(scope="module")
def lc():
    with live_cluster("slurm-mig-report-port-", planner={"cycle": 0.5, "batch_window": 0.0}) as c:
        c.learn(RODINIA, SCALE)
        c.start_planner()
        wait_until(lambda: c.status().get("cycle", 0) >= 2, 60, "cycles", poll=0.1)
        yield c


def _run_delays(lc: LiveCluster, ids: list[str]) -> list[float]:
    """Per job, seconds from its Epilog's end stamp to the planner storing its run."""
    db = sqlite3.connect(lc.state_dir / "reports.sqlite")
    try:
        db.execute("ATTACH DATABASE ? AS acct", (str(lc.state_dir / "accounting.sqlite"),))
        got = dict(
            db.execute(
                "SELECT r.job_id, x.received - r.end FROM acct.runs r JOIN received x "
                "ON x.kind = 'run' AND x.id LIKE '%/run/' || r.job_id || '/%'"
            ).fetchall()
        )
    finally:
        db.close()
    return [got[j] for j in ids if j in got]


def _jobs(lc: LiveCluster, n: int) -> list[float]:
    ids = [lc.submit(k, SCALE) for k in ["Gaussian", "LavaMD", "Gaussian", "LavaMD"][:n]]
    lc.wait_done(ids, 180)
    wait_until(lambda: len(_run_delays(lc, ids)) == n, 60, "the runs' reports", poll=0.2)
    return _run_delays(lc, ids)


def _flush_times(lc: LiveCluster, tmp: Path, n: int) -> list[float]:
    """Seconds each of ``n`` deliveries took, sent the way a node's hook sends one."""
    key = load_key(lc.root / "etc" / "key")
    took = []
    for i in range(n):
        box = reports.Spool(tmp / f"probe{i}")
        box.put(
            "instances.1",
            reports.make(key, lc.nodes[0], "instances", {"jobs": [], "kept": []}, seq=1),
        )
        t0 = time.monotonic()
        sent, problem = box.flush(planner_address(lc, "reports"), seconds=10.0)
        took.append(time.monotonic() - t0)
        assert (sent, problem) == (1, None)
        time.sleep(0.2)
    return took


@host_release_only
def test_a_hundred_idle_report_connections_delay_no_nodes_report(lc, tmp_path):
    host, port = planner_address(lc, "reports")
    quiet_runs = _jobs(lc, 2)
    quiet_flush = _flush_times(lc, tmp_path / "quiet", 5)
    hold = subprocess.Popen(
        [USER_PYTHON, "-c", HOLD, host, str(port), str(IDLE), "600"],
        user=NOBODY,
        stdout=subprocess.PIPE,
        text=True,
        cwd="/",
    )
    try:
        assert hold.stdout is not None and hold.stdout.readline().strip() == "ready"
        time.sleep(1.0)
        held_flush = _flush_times(lc, tmp_path / "held", 10)
        held_runs = _jobs(lc, 4)
    finally:
        hold.terminate()
        opened = (hold.communicate(timeout=30)[0].split() or ["?"])[-1]
    hooks_log = "".join(
        lc.node_path(n, lc.log_file).read_text(errors="replace")
        for n in lc.nodes
        if lc.node_path(n, lc.log_file).exists()
    )
    print(
        f"\nreports behind {IDLE} idle connections from nobody ({opened} opened): a node's "
        f"delivery {max(quiet_flush) * 1000:.0f} ms quiet, {max(held_flush) * 1000:.0f} ms "
        f"held (of {len(held_flush)}); Epilog to store {max(quiet_runs):.2f} s quiet, "
        f"{max(held_runs):.2f} s held (of {len(held_runs)} runs)"
    )
    assert max(held_flush) < BOUND, held_flush
    assert max(held_runs) < max(quiet_runs) + BOUND, (quiet_runs, held_runs)
    assert "kept for later" not in hooks_log
    assert "Traceback" not in lc.daemon_log.read_text(errors="replace")
