"""The planner daemon against a real Slurm on loopback (tests/e2e/conftest.py: jobs of
nobody, each node a host of its own, skipped where LocalSlurm cannot run): jobs that
contrib/job_submit.lua holds are planned, released onto their node and run, never two
on overlapping slices (each checked by its signed token and AdminComment); the
``slurm-mig planner`` process cycles until SIGTERM; a daemon killed halfway through
applying a plan is followed by a fresh one that rebuilds from Slurm; a corrupt runtime
store does not stop the releases. The daemon's I/O without Slurm is
tests/daemon/test_daemon.py."""

from __future__ import annotations

import io
import json
import logging
import signal
import stat
import subprocess
import sys
import time
from collections import defaultdict

import pytest
from support import ROOT, write_config

from slurm_mig import jobcomment as comments
from slurm_mig.config import load_config
from slurm_mig.daemon.cycle import plan_cycle
from slurm_mig.daemon.daemon import (
    STATUS_FILE,
    PlannerDaemon,
    apply_actions,
    build_cycle_input,
    run_planner,
)
from slurm_mig.geometry import can_coexist, get_model
from slurm_mig.runtimes import RuntimeStore
from slurm_mig.sitefiles import site_file
from slurm_mig.slurm.assignment import load_key, verify
from slurm_mig.slurm.client import SlurmClient
from slurm_mig.slurm.jobrecord import parse_admin_comment

from .cluster import LocalSlurm

A100 = get_model("A100-40GB")
NODES = ("gpu01", "gpu02")
LUA = site_file("job_submit.lua")  # holds every job in the MIG partition for the planner


@pytest.fixture
def cluster(slurm) -> LocalSlurm:
    """Two nodes of one A100 each, with the MIG gres.conf and slurm-mig's job_submit.lua."""
    return slurm(nodes=NODES, job_submit_lua=LUA, gres={n: [A100.name] for n in NODES})


def holders(client: SlurmClient, key: bytes) -> dict[str, object]:
    """Jobs that hold or may hold slices now, with the assignment their token carries.
    A job released ahead (waiting on ``afterany`` for the jobs on its slices) is
    checked to name every one of them, and is not a holder until they have left."""
    out, ahead = {}, {}
    for j in client.jobs("mig"):
        if j.state in ("RUNNING", "CONFIGURING", "COMPLETING") or (
            j.state == "PENDING" and not j.held
        ):
            token = comments.parse(j.comment).token
            assert token, f"job {j.job_id} runs without a token"
            a = verify(
                token,
                key,
                job_id=j.job_id,
                restart=j.restart_count,
                node=j.required_nodes,
                now=time.time(),
                max_age=3600,
            )
            assert parse_admin_comment(j.admin_comment).placement == a.placement
            if j.state == "PENDING" and j.dependency:
                ahead[j.job_id] = (a, j.dependency)
            else:
                out[j.job_id] = a
    for jid, (a, dep) in ahead.items():
        for other, b in out.items():
            if (a.node, a.gpu) == (b.node, b.gpu) and a.placement.overlaps(b.placement):
                assert f"afterany:{other}" in dep or f":{other}" in dep, (jid, dep, other)
    return out


def assert_no_overlap(found: dict) -> None:
    per_gpu = defaultdict(list)
    for a in found.values():
        per_gpu[(a.node, a.gpu)].append(a.placement)
    for (n, g), placements in per_gpu.items():
        assert can_coexist(A100, placements), f"{n} gpu {g}: {placements}"


def test_planner_once_plans_and_releases_the_first_wave(cluster, tmp_path):
    cfg = write_config(tmp_path, {"gpu01": ["A100-40GB"], "gpu02": ["A100-40GB"]})
    key = load_key(tmp_path / "key")
    client = SlurmClient(env=cluster.env)
    ids = [
        cluster.sbatch(
            "sleep 2",
            partition="mig",
            comment=f"mig:key=k{i % 2},time={40 + 20 * i},mem=15G",
        )
        for i in range(6)
    ]
    assert all(j.held and j.reason == "JobHeldUser" for j in client.jobs("mig"))
    out = io.StringIO()
    assert run_planner(cfg, once=True, dry_run=True, client=client, out=out) == 0
    dry = out.getvalue().splitlines()
    assert any(": released on gpu0" in line for line in dry)
    assert all(j.admin_comment == "" and j.held for j in client.jobs("mig"))  # nothing applied

    assert run_planner(cfg, once=True, client=client) == 0
    jobs = {j.job_id: j for j in client.jobs("mig")}
    released, ahead = [], []
    for jid in ids:
        j = jobs[jid]
        if not j.held:
            a = parse_admin_comment(j.admin_comment)
            assert a is not None and a.job_id == jid and a.restart == 0
            assert j.required_nodes == a.node
            (ahead if j.dependency else released).append(jid)
        else:  # its plan stays in the planner; job_submit.lua's hold is left as it is
            assert j.reason == "JobHeldUser" and j.admin_comment == "" and not j.required_nodes
    # 15 GiB fit 3g.20gb and larger only: at most two per GPU at a time start now; the
    # next on each slice may be released ahead, waiting for the jobs before it
    assert 0 < len(released) <= 4
    assert all(jobs[j].held for j in set(ids) - set(released) - set(ahead))
    status = json.loads((tmp_path / "state" / STATUS_FILE).read_text())
    assert (
        status["cycle"] == 1
        and status["failed"] == []
        and sorted(status["released"]) == sorted(released + ahead, key=int)
    )
    assert_no_overlap(holders(client, key))
    for jid in released:  # Slurm runs them on the planned node
        cluster.wait_for(
            lambda jid=jid: (
                next(j for j in client.jobs("mig") if j.job_id == jid).state
                in ("RUNNING", "COMPLETING", "COMPLETED")
            ),
            30,
            f"job {jid} to start",
        )
        j = next(j for j in client.jobs("mig") if j.job_id == jid)
        assert j.nodes == parse_admin_comment(j.admin_comment).node

    # cycles until every job ran, never two on overlapping slices; runtimes are learned
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert run_planner(cfg, once=True, client=client) == 0
        assert_no_overlap(holders(client, key))
        if all(j.state == "COMPLETED" for j in client.jobs("mig")):
            break
        time.sleep(0.5)
    assert all(j.state == "COMPLETED" for j in client.jobs("mig"))
    run_planner(cfg, once=True, client=client)
    store = RuntimeStore(tmp_path / "state" / "profiles.sqlite")
    learned = sum(len(v) for k in ("k0", "k1") for v in store.observations(k, A100.name).values())
    assert learned == 6


def test_daemon_process_cycles_and_stops_on_sigterm(cluster, tmp_path):
    cfg = write_config(tmp_path, {"gpu01": ["A100-40GB"], "gpu02": ["A100-40GB"]})
    client = SlurmClient(env=cluster.env)
    for i in range(4):
        cluster.sbatch("sleep 1", partition="mig", comment=f"mig:time={30 + i}")
    env = dict(cluster.env, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-m", "slurm_mig", "planner", "--config", str(cfg)],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    status = tmp_path / "state" / STATUS_FILE
    try:
        cluster.wait_for(
            lambda: all(j.state == "COMPLETED" for j in client.jobs("mig")),
            90,
            "the daemon to run every job",
        )
        cycles = json.loads(status.read_text())["cycle"]
        assert cycles >= 2
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "released" in err and "planner stopped after" in err
    assert "Traceback" not in err


def test_planner_restarted_mid_cycle_rebuilds_from_slurm(cluster, tmp_path):
    """A daemon whose apply stops halfway (killed) and a fresh one taking over."""
    cfg = write_config(tmp_path, {"gpu01": ["A100-40GB"]})
    key = load_key(tmp_path / "key")
    client = SlurmClient(env=cluster.env)
    for i in range(8):
        cluster.sbatch("sleep 1", partition="mig", comment=f"mig:time={60 + 15 * i}")
    config = load_config(cfg)
    store = RuntimeStore(tmp_path / "state" / "profiles.sqlite")
    snap = build_cycle_input(config, client.jobs("mig"), client.nodes(), store, time.time())
    result = plan_cycle(snap)
    half = result.actions[: len(result.actions) // 2]
    apply_actions(half, client, key=key, store=store)  # ... and the daemon dies here
    assert_no_overlap(holders(client, key))
    daemon = PlannerDaemon(config, client, store, key)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        report = daemon.run_cycle()
        assert report.error is None and not report.apply.failed
        assert_no_overlap(holders(client, key))
        if all(j.state == "COMPLETED" for j in client.jobs("mig")):
            break
        time.sleep(0.5)
    assert all(j.state == "COMPLETED" for j in client.jobs("mig"))


def test_planner_plans_and_releases_while_the_store_is_corrupt(cluster, tmp_path, caplog):
    cfg = write_config(tmp_path, {"gpu01": ["A100-40GB"], "gpu02": ["A100-40GB"]})
    state = tmp_path / "state"
    state.mkdir()
    (state / "profiles.sqlite").write_bytes(b"not a database " * 100)
    client = SlurmClient(env=cluster.env)
    ids = [cluster.sbatch("sleep 1", partition="mig", comment="mig:time=30") for _ in range(2)]
    with caplog.at_level(logging.ERROR, logger="slurm_mig.planner"):
        assert run_planner(cfg, once=True, client=client) == 0
    status = json.loads((state / STATUS_FILE).read_text())
    assert status["error"] is None and sorted(status["released"]) == sorted(ids, key=int)
    assert status["seconds"] < 5
    assert any("cannot read the runtime store" in r.getMessage() for r in caplog.records)
    assert stat.S_IMODE(state.stat().st_mode) == 0o750  # the status file is root's
