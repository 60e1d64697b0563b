"""Liveness and failover: one active planner (the lease), a standby that takes over, a
daemon that lost its lease and writes nothing, systemd's notifications and watchdog,
and what ``status`` and ``explain`` say when the planner's last cycle is stale. Time is
faked throughout (one clock for the wall and the intervals); the systemd tests use a
real datagram socket."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support import node, write_config
from support import squeue_job as job

from slurm_mig.config import ConfigError, config_from_dict, load_config
from slurm_mig.daemon.daemon import STATUS_FILE, PlannerDaemon
from slurm_mig.daemon.lease import LEASE_FILE, SETTLE, Holder, Lease, LeaseHeld, read_holder
from slurm_mig.daemon.liveness import Liveness, StopEvent, staleness
from slurm_mig.daemon.metrics import PlannerMetrics
from slurm_mig.daemon.sdnotify import notify, watchdog_seconds
from slurm_mig.explain import explain
from slurm_mig.slurm.assignment import load_key

ROOT = Path(__file__).resolve().parents[2]
TTL = 30.0


class Clock:
    """Fake time: the wall clock and the monotonic clock at once."""

    def __init__(self, t: float = 100_000.0) -> None:
        self.t = t

    def time(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds


def _liveness(state: Path, host: str, pid: int, clock: Clock, standby: bool = False, **kw):
    lease = Lease(
        state,
        kw.pop("ttl", TTL),
        host=host,
        pid=pid,
        clock=kw.pop("wall", clock.time),
        monotonic=clock.time,
        sleep=clock.sleep,
    )
    return Liveness(lease, standby=standby, env=kw.pop("env", {}), tick_every=0, **kw)


class FakeSlurm:
    """squeue's jobs and sinfo's nodes as given; every write is recorded."""

    def __init__(self, jobs, on_read=None) -> None:
        self.shown = list(jobs)
        self.on_read = on_read
        self.writes: list[tuple] = []

    def jobs(self, partition=None):
        if self.on_read is not None:
            self.on_read()
        return list(self.shown)

    def nodes(self, partition=None):
        return [node("g1")]

    def hold(self, job_id):
        self.writes.append(("hold", job_id))

    def release(self, job_id):
        self.writes.append(("release", job_id))

    def requeue(self, job_id, hold=False):
        self.writes.append(("requeue", job_id))

    def update_job(self, job_id, **fields):
        self.writes.append(("update", job_id, tuple(sorted(fields))))


# ---------------------------------------------------------------------------
# The lease


def test_a_second_planner_refuses_in_one_line_naming_the_holder(tmp_path):
    clock = Clock()
    active = _liveness(tmp_path, "ctl1", 101, clock)
    active.start_up()
    assert active.active and active.holds()
    record = read_holder(tmp_path / LEASE_FILE)
    assert (record.host, record.pid, record.ttl) == ("ctl1", 101, TTL)

    clock.t += 5
    other = _liveness(tmp_path, "ctl2", 202, clock)  # the backup controller
    with pytest.raises(LeaseHeld) as got:
        other.start_up()
    text = str(got.value)
    assert "\n" not in text and "host ctl1, pid 101, since " in text
    assert "(renewed 5 s ago)" in text and "--standby" in text
    assert other.lease._lock_fd is None  # it let go of its host lock

    same = _liveness(tmp_path, "ctl1", 303, clock)  # the same host and state directory
    with pytest.raises(LeaseHeld, match=r"another planner runs on this host .* pid 101"):
        same.start_up()
    assert read_holder(tmp_path / LEASE_FILE).instance == active.lease.instance


def test_a_standby_takes_over_once_the_active_lease_expires(tmp_path, caplog):
    clock = Clock()
    active = _liveness(tmp_path, "ctl1", 101, clock)
    active.start_up()
    standby = _liveness(tmp_path, "ctl2", 202, clock, standby=True)
    with caplog.at_level(logging.INFO, logger="slurm_mig.planner"):
        standby.start_up()  # waits, no error
    assert not standby.active and not standby.holds()
    assert "standby: the planner lease is held by host ctl1, pid 101" in caplog.text

    renewed: list[float] = []
    dies_at = clock.t + 60

    def sleep(seconds):  # the active daemon keeps renewing until it dies
        clock.t += seconds
        if clock.t <= dies_at:
            active.tick()
            renewed.append(clock.t)

    standby.sleep = sleep
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="slurm_mig.planner"):
        assert standby.may_plan(StopEvent())
    took = clock.t
    poll = standby.lease.renew_every
    assert renewed[-1] + TTL < took <= renewed[-1] + TTL + poll + SETTLE + 1e-6
    assert standby.active and standby.holds()
    lines = [r.getMessage() for r in caplog.records if "taking over" in r.getMessage()]
    assert len(lines) == 1 and "host ctl1, pid 101" in lines[0] and "expired" in lines[0]
    assert read_holder(tmp_path / LEASE_FILE).host == "ctl2"

    # the old active was only paused: it wakes, finds the lease taken and stops
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="slurm_mig.planner"):
        active.tick()
    assert not active.active and not active.holds()
    assert "planner lease lost to host ctl2, pid 202" in caplog.text
    assert read_holder(tmp_path / LEASE_FILE).host == "ctl2"  # it wrote nothing


def _active_and_standby(state: Path, host: str, clock: Clock) -> tuple[Liveness, Liveness]:
    """An active daemon on ``host`` holding the lease in ``state`` and a standby on ctl2."""
    active = _liveness(state, host, 101, clock)
    active.start_up()
    standby = _liveness(state, "ctl2", 202, clock, standby=True)
    standby.start_up()
    return active, standby


def test_a_standby_names_the_active_host_for_its_redirect_until_the_lease_expires(tmp_path):
    from types import SimpleNamespace

    from slurm_mig.daemon.endpoints import standby_redirect

    clock = Clock()
    active, standby = _active_and_standby(tmp_path, "ctl1", clock)
    assert active.primary() is None  # it plans: it serves its own pages
    assert standby.primary() == ("ctl1", 0)
    assert standby_redirect(SimpleNamespace(liveness=standby), 9764)() == "http://ctl1:9764"
    assert standby_redirect(SimpleNamespace(liveness=active), 9764)() is None
    active.lease.web_port = 9800  # its record names its port: the redirect follows it
    active.tick()
    standby.lease.read()
    assert standby_redirect(SimpleNamespace(liveness=standby), 9764)() == "http://ctl1:9800"
    clock.t += TTL + 1  # ctl1 stopped renewing: the standby is about to take over
    standby.lease.read()
    assert standby.primary() is None
    assert standby.may_plan(StopEvent()) and standby.primary() is None


def test_a_starting_daemon_writes_its_endpoints_port_before_its_first_renewal(tmp_path):
    """The lease is taken before the endpoint is bound; the standby must not redirect to
    its own port meanwhile (seen under load: the first renewal came after its first
    scrape)."""
    from types import SimpleNamespace

    from slurm_mig.daemon.endpoints import standby_redirect

    clock = Clock()
    active, standby = _active_and_standby(tmp_path, "ctl1", clock)
    active.lease.web_port = 9800  # as `endpoints.serve` sets it, after the lease was taken
    active.start(SimpleNamespace(wake=None, stop=StopEvent(), metrics=None))
    standby.lease.read()
    assert standby_redirect(SimpleNamespace(liveness=standby), 9764)() == "http://ctl1:9800"


def test_a_lease_record_naming_no_plain_host_is_never_a_redirect(tmp_path):
    from types import SimpleNamespace

    from slurm_mig.daemon.endpoints import standby_redirect

    clock = Clock()
    for i, host in enumerate(("evil.example/x?", "ctl1\r\nSet-Cookie: a=b", "-ctl1")):
        state = tmp_path / str(i)
        state.mkdir()
        _, standby = _active_and_standby(state, host, clock)
        assert standby.primary() == (host, 0)
        assert standby_redirect(SimpleNamespace(liveness=standby), 9764)() is None
    record = json.loads((tmp_path / "0" / LEASE_FILE).read_text())
    for port in (0, -1, 65536, True, "9764", 9.5):
        assert Holder.from_json({**record, "web_port": port}).web_port == 0
    assert Holder.from_json({**record, "web_port": 9764}).web_port == 9764


def test_a_holder_whose_clock_runs_ahead_still_expires_for_a_standby(tmp_path):
    clock = Clock()
    ahead = _liveness(tmp_path, "ctl1", 101, clock, wall=lambda: clock.t + 3600)
    ahead.start_up()
    standby = _liveness(tmp_path, "ctl2", 202, clock, standby=True)
    standby.start_up()
    dies_at = clock.t + 20

    def sleep(seconds):
        clock.t += seconds
        if clock.t <= dies_at:
            ahead.tick()

    standby.sleep = sleep
    assert standby.may_plan(StopEvent())  # unchanged for the ttl while it watched
    assert dies_at + TTL < clock.t <= dies_at + TTL + 2 * standby.lease.renew_every + 1


def test_a_clean_stop_releases_the_lease_and_a_standby_takes_it_at_once(tmp_path):
    clock = Clock()
    active = _liveness(tmp_path, "ctl1", 101, clock)
    active.start_up()
    standby = _liveness(tmp_path, "ctl2", 202, clock, standby=True)
    standby.start_up()
    active.close()
    assert read_holder(tmp_path / LEASE_FILE).released
    start = clock.t
    assert standby.may_plan(StopEvent())
    assert clock.t - start == pytest.approx(SETTLE)
    # the restarted primary now refuses, naming the standby
    again = _liveness(tmp_path, "ctl1", 303, clock)
    with pytest.raises(LeaseHeld, match="host ctl2, pid 202"):
        again.start_up()


def test_a_daemon_restarted_on_the_same_host_takes_its_own_lease_at_once(tmp_path):
    clock = Clock()
    crashed = _liveness(tmp_path, "ctl1", 101, clock)
    crashed.start_up()
    crashed.lease.unlock_host()  # killed: the kernel drops its flock, the record stays
    clock.t += 2
    restarted = _liveness(tmp_path, "ctl1", 102, clock)
    restarted.start_up()
    assert restarted.active and read_holder(tmp_path / LEASE_FILE).pid == 102


def _daemon(tmp_path, clock, liveness, client):
    cfg = write_config(tmp_path, {"g1": ["A100-40GB"]}, metrics="")
    config = load_config(cfg)
    key = load_key(tmp_path / "key")
    return PlannerDaemon(config, client, None, key, clock=clock.time, liveness=liveness)


def test_an_active_daemon_that_lost_its_lease_mid_cycle_sends_nothing(tmp_path, caplog):
    clock = Clock()
    state = tmp_path / "state"
    mine = _liveness(state, "ctl1", 101, clock)
    other = _liveness(state, "ctl2", 202, clock, standby=True)
    paused = {"now": False}

    def on_read():  # squeue answers after a pause longer than the ttl; ctl2 took over
        if paused["now"]:
            clock.t += TTL + 1
            other.start_up()
            assert other.active

    client = FakeSlurm([job("1", comment="mig:time=10m")], on_read)
    daemon = _daemon(tmp_path, clock, mine, client)
    mine.start_up()
    mine.start(daemon)
    assert mine.may_plan(daemon.stop)
    daemon.run_cycle()
    mine.cycle_done()
    assert ("release", "1") in client.writes  # planned and released while it held it
    status = json.loads((state / STATUS_FILE).read_text())
    assert status["cycle"] == 1

    written = list(client.writes)
    client.shown.append(job("2", comment="mig:time=10m"))
    paused["now"] = True
    assert mine.may_plan(daemon.stop)  # renewed before the cycle ...
    report = daemon.run_cycle()  # ... paused inside it
    paused["now"] = False
    assert report.result is not None and report.result.actions  # it would have acted
    assert client.writes == written and report.apply.skipped == len(report.result.actions)
    assert json.loads((state / STATUS_FILE).read_text())["cycle"] == 1  # status not written

    # before its next cycle it finds the lease taken: it stops planning, as a standby
    daemon.stop.guard = None  # (only to see that the lost lease alone stops it)
    mine.sleep = lambda s: daemon.stop.set()
    with caplog.at_level(logging.ERROR, logger="slurm_mig.planner"):
        assert not mine.may_plan(daemon.stop)
    assert "planner lease lost to host ctl2, pid 202" in caplog.text
    assert not mine.active and client.writes == written
    assert read_holder(state / LEASE_FILE).host == "ctl2"


def test_run_once_takes_and_releases_the_lease(tmp_path):
    clock = Clock()
    state = tmp_path / "state"
    live = _liveness(state, "ctl1", 101, clock)
    client = FakeSlurm([job("1", comment="mig:time=10m")])
    daemon = _daemon(tmp_path, clock, live, client)
    live.start_up()
    assert daemon.run(once=True) == 0
    assert ("release", "1") in client.writes
    assert read_holder(state / LEASE_FILE).released and not live.active


# ---------------------------------------------------------------------------
# systemd: READY=1, WATCHDOG=1, STOPPING=1 on a real datagram socket


@pytest.fixture
def notify_socket():
    folder = tempfile.mkdtemp(prefix="sdn", dir="/tmp")  # short: AF_UNIX paths <= 107
    path = os.path.join(folder, "notify")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(0.05)
    try:
        yield path, sock
    finally:
        sock.close()
        shutil.rmtree(folder, ignore_errors=True)


def _received(sock) -> list[str]:
    out = []
    while True:
        try:
            out.append(sock.recv(4096).decode())
        except TimeoutError:
            return out


def test_notify_reaches_path_and_abstract_sockets_and_is_a_no_op_without_one(notify_socket):
    path, sock = notify_socket
    assert notify("READY=1\nSTATUS=x", {"NOTIFY_SOCKET": path})
    assert _received(sock) == ["READY=1\nSTATUS=x"]
    name = f"slurm-mig-test-{os.getpid()}"
    abstract = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    abstract.bind("\0" + name)
    abstract.settimeout(1)
    try:
        assert notify("WATCHDOG=1", {"NOTIFY_SOCKET": "@" + name})
        assert abstract.recv(100) == b"WATCHDOG=1"
    finally:
        abstract.close()
    assert not notify("READY=1", {})
    assert not notify("READY=1", {"NOTIFY_SOCKET": path + ".gone"})
    assert watchdog_seconds({"WATCHDOG_USEC": "4000000"}) == 4.0
    assert watchdog_seconds({"WATCHDOG_USEC": "4000000", "WATCHDOG_PID": "1"}, pid=2) is None
    assert watchdog_seconds({}) is None


def test_watchdog_pings_while_cycles_progress_and_stops_for_a_stuck_cycle(notify_socket):
    path, sock = notify_socket
    clock = Clock()
    env = {"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "4000000"}  # WatchdogSec=4
    live = _liveness(Path(tempfile.mkdtemp(dir=path.rsplit("/", 1)[0])), "h", 1, clock, env=env)
    live.start_up()
    assert live.tick_every == 0  # the test ticks by hand (the thread's period: 1 s)
    assert Liveness(live.lease, env=env).tick_every == pytest.approx(1.0)

    class Daemon:
        wake = None
        stop = StopEvent()
        metrics = None

    live.start(Daemon())
    assert _received(sock) == ["READY=1\nSTATUS=active: planning"]
    live.tick()  # idle between cycles: alive
    assert _received(sock) == ["WATCHDOG=1"]
    assert live.may_plan(Daemon.stop)  # a cycle starts
    clock.t += 1.9
    live.tick()
    assert _received(sock) == ["WATCHDOG=1"]
    clock.t += 0.2  # the cycle has run past WatchdogSec / 2: no more pings
    live.tick()
    clock.t += 5
    live.tick()
    assert _received(sock) == []
    live.cycle_done()  # it ended after all
    assert _received(sock) == ["WATCHDOG=1"]
    live.close()
    assert _received(sock) == ["STOPPING=1"]


def _cli(*args, env=None, slurm: Path, **kw):
    """``slurm-mig ARGS`` whose Slurm commands fail at once (``slurm``: their folder)."""
    slurm.mkdir(exist_ok=True)
    for name in ("squeue", "sinfo", "scontrol"):
        (slurm / name).write_text("#!/bin/sh\necho 'slurm_load_jobs error: down' >&2\nexit 1\n")
        (slurm / name).chmod(0o755)
    path = f"{slurm}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    return subprocess.Popen(
        [sys.executable, "-m", "slurm_mig", *args],
        env={**os.environ, "PYTHONPATH": str(ROOT), "PATH": path, **(env or {})},
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


def test_planner_process_notifies_systemd_and_a_second_one_exits_3(tmp_path, notify_socket):
    path, sock = notify_socket
    cfg = write_config(tmp_path, {"g1": ["A100-40GB"]}, metrics="", cycle=0.5)
    first = _cli(
        "planner",
        "--config",
        str(cfg),
        env={"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "1000000"},
        slurm=tmp_path / "bin",
    )
    try:
        got: list[str] = []
        deadline = time.monotonic() + 60
        while got.count("WATCHDOG=1") < 2 and time.monotonic() < deadline:
            got += _received(sock)
            assert first.poll() is None, first.communicate()
        assert got[0].startswith("READY=1\n") and got.count("WATCHDOG=1") >= 2, got
        holder = read_holder(tmp_path / "state" / LEASE_FILE)
        assert holder.pid == first.pid and not holder.released

        second = _cli("planner", "--config", str(cfg), "--once", slurm=tmp_path / "bin")
        _, err = second.communicate(timeout=60)
        assert second.returncode == 3, err
        assert err.count("\n") == 1 and err.startswith("slurm-mig: error: another planner")
        assert f"pid {first.pid}, since " in err and f"host {holder.host}" in err
    finally:
        first.send_signal(signal.SIGTERM)
        _, err = first.communicate(timeout=30)
    assert first.returncode == 0, err
    assert "STOPPING=1" in _received(sock)
    assert read_holder(tmp_path / "state" / LEASE_FILE).released


# ---------------------------------------------------------------------------
# Stale status: status and explain


def test_staleness_threshold_and_message():
    assert staleness(1000.0, 5.0, 1000.0 + 3 * 5 + 60) is None
    text = staleness(1000.0, 5.0, 1000.0 + 720)
    assert text == (
        "the planner's last cycle ended 12 min ago (expected every 5 s): is "
        "slurm-mig-planner running? (systemctl status slurm-mig-planner)"
    )
    assert staleness(None, 5.0, 1e9) is None


def _status_config(tmp_path, finished: float | None):
    cfg = write_config(tmp_path, {"g1": ["A100-40GB"]}, metrics="", cycle=5.0)
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    if finished is not None:
        (state / STATUS_FILE).write_text(json.dumps({"cycle": 7, "finished": finished}))
    return cfg


def test_status_view_says_when_the_planner_is_stale_and_who_holds_the_lease(tmp_path):
    from slurm_mig.cli.status import load_view

    now = 50_000.0
    client = FakeSlurm([])
    cfg = _status_config(tmp_path, now - 3600)
    view = load_view(load_config(cfg), None, client, now=now)
    assert view.stale.startswith("the planner's last cycle ended 60 min ago (expected every 5 s)")
    assert "systemctl status slurm-mig-planner" in view.stale and view.problems[0] == view.stale
    assert view.stale.endswith("no planner holds the lease")
    # a daemon renews the lease but its cycles stopped: status names it
    clock = Clock(now - 10)
    _liveness(tmp_path / "state", "ctl1", 101, clock).start_up()
    view = load_view(load_config(cfg), None, client, now=now)
    assert view.stale.endswith(
        "lease: " + read_holder(tmp_path / "state" / LEASE_FILE).describe(now)
    )
    assert "host ctl1, pid 101" in view.stale and "(renewed 10 s ago)" in view.stale

    fresh = load_view(load_config(_status_config(tmp_path, now - 30)), None, client, now=now)
    assert fresh.stale == "" and not fresh.problems
    (tmp_path / "state" / STATUS_FILE).unlink()
    missing = load_view(load_config(cfg), None, client, now=now)
    assert (
        missing.stale.startswith("no planner status in ")
        and "is slurm-mig-planner running?" in missing.stale
    )


@pytest.mark.parametrize("age,code", [(3600.0, 3), (1.0, 0)])
def test_status_exits_3_when_stale(tmp_path, monkeypatch, capsys, age, code):
    from slurm_mig.cli import main
    from slurm_mig.slurm import client as client_module

    monkeypatch.setattr(client_module, "SlurmClient", lambda *a, **k: FakeSlurm([]))
    cfg = _status_config(tmp_path, time.time() - age)
    assert main(["status", "--config", str(cfg), "--json"]) == code
    shown = json.loads(capsys.readouterr().out)
    assert bool(shown["stale"]) == (code == 3)
    assert main(["status", "--config", str(cfg)]) == code
    out = " ".join(capsys.readouterr().out.split())  # rich wraps at the terminal's width
    assert ("is slurm-mig-planner running?" in out) == (code == 3)


def test_status_and_planner_help_name_the_exit_codes(capsys):
    from slurm_mig.cli import build_parser

    parser = build_parser()
    for command, words in (
        ("status", ("3 stale", "3 x [planner] cycle + 60 s")),
        ("planner", ("--standby", "3 when another planner holds the lease")),
    ):
        with pytest.raises(SystemExit):
            parser.parse_args([command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        for w in words:
            assert w in text, (command, w)


def test_explain_says_first_that_the_planner_seems_stopped():
    now = 50_000.0
    held = job("9", reason="JobHeldUser")
    old = {"updated": now - 600, "jobs": {}}
    got = explain(held, old, now, cycle=5.0)
    assert got["stale"] == got["lines"][0]
    assert got["lines"][0].startswith(
        "the planner's last cycle ended 10 min ago (expected every 5 s)"
    )
    fresh = explain(held, {"updated": now - 2, "jobs": {}}, now, cycle=5.0)
    assert fresh["stale"] is None and not any("last cycle" in x for x in fresh["lines"])
    assert explain(held, old, now)["stale"] is None  # no cycle known: no claim


# ---------------------------------------------------------------------------
# Config and metrics


def test_config_standby_and_lease_ttl():
    c = config_from_dict({"nodes": {"x": ["A30"]}, "planner": {"standby": True, "lease_ttl": 12}})
    assert c.standby is True and c.lease_ttl == 12.0
    d = config_from_dict({"nodes": {"x": ["A30"]}})
    assert d.standby is False and d.lease_ttl == 30.0
    with pytest.raises(ConfigError, match="planner.lease_ttl: must be >= 3"):
        config_from_dict({"nodes": {"x": ["A30"]}, "planner": {"lease_ttl": 1}})


def _samples(m: PlannerMetrics) -> dict[tuple, float]:
    out = {}
    for f in text_string_to_metric_families(m.text().decode()):
        for s in f.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_metrics_for_the_alert_rules():
    from cyclesite import NOW, observed_cycle

    jobs = [job("1", comment="mig:time=100", submit_time=NOW - 500), job("2", submit_time=NOW - 90)]
    jobs.append(job("3", state="RUNNING", held=False, submit_time=NOW - 9000))
    _, _, report = observed_cycle(jobs)
    m = PlannerMetrics("far", "batch", 0.0, host="ctl1")
    m.site(5.0, ["gpu01", "gpu09"])
    m.observe(report, jobs)
    got = _samples(m)
    p = "slurm_mig_planner_"
    assert got[(p + "cycle_interval_seconds", ())] == 5.0
    assert got[(p + "active", (("host", "ctl1"),))] == 1.0
    assert got[(p + "oldest_held_job_seconds", ())] == pytest.approx(report.finished - (NOW - 500))
    usable = p + "node_usable_timestamp_seconds"
    assert got[(usable, (("node", "gpu01"),))] == report.finished
    assert got[(usable, (("node", "gpu09"),))] == 0.0  # configured, never seen usable
    m.set_active(False)
    assert _samples(m)[(p + "active", (("host", "ctl1"),))] == 0.0
