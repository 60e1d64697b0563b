"""Node reports (slurm_mig/node/reports.py, receiver.py): the codec, the node's spool,
delivery to a real receiver on 127.0.0.1 under loss, duplication and restart, forged
reports, slow clients, and the real Epilog path with the planner's state dir apart from
the node's run dir."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from support import attempts_as, open_tmp_dir

from slurm_mig.daemon.receiver import Receiver, ReportDB, node_records, silent_nodes
from slurm_mig.node import reports
from slurm_mig.node.reports import ReportError, Spool, make, open_report
from slurm_mig.runtimes import RuntimeStore
from slurm_mig.slurm import reportcodec
from slurm_mig.slurm.accounting import report as accounting_report

KEY = bytes(range(32))
NODE = "node1"


def run_data(job: str = "7", restart: int = 0, **extra) -> dict:
    return {
        "job_id": job,
        "restart": restart,
        "key": "resnet",
        "gpu": 1,
        "model": "A100-40GB",
        "profile": "3g.20gb",
        "seconds": 120.0,
        "end": 1_700_000_100.0,
        "user": "alice",
        "account": "phys",
        **extra,
    }


def run_line(job: str = "7", restart: int = 0, key: bytes = KEY, **extra) -> str:
    return make(key, NODE, "run", run_data(job, restart, **extra), job=job, restart=restart)


def runs(state: Path) -> list[tuple]:
    path = state / "accounting.sqlite"
    if not path.exists():
        return []
    db = sqlite3.connect(path)
    try:
        return db.execute("SELECT job_id, restart, node, user FROM runs ORDER BY job_id").fetchall()
    finally:
        db.close()


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def receiver(state: Path):
    r = Receiver(("127.0.0.1", 0), KEY, ReportDB(state, RuntimeStore(state / "profiles.sqlite")))
    r.start()
    yield r
    r.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- the codec ------------------------------------------------------------------------------


def test_a_report_opens_with_the_key_it_was_signed_with():
    body = open_report(run_line(), KEY)
    assert body["id"] == f"{NODE}/run/7/0/0"
    assert body["data"]["user"] == "alice"
    with pytest.raises(ReportError) as err:
        open_report(run_line(), bytes(32))
    assert err.value.reason == "mac"


@pytest.mark.parametrize("where", [3, 20, -3])
def test_a_tampered_report_is_refused_before_its_payload_is_read(where):
    line = run_line()
    i = where % len(line)
    if line[i] == " ":
        i += 1
    altered = line[:i] + ("A" if line[i] != "A" else "B") + line[i + 1 :]
    with pytest.raises(ReportError) as err:
        open_report(altered, KEY)
    assert err.value.reason in ("mac", "invalid")


def test_a_truncated_or_oversized_report_is_refused():
    line = run_line()
    for cut in (line[:10], line[: len(line) // 2], line.rsplit(" ", 1)[0], "", "R1"):
        with pytest.raises(ReportError):
            open_report(cut, KEY)
    with pytest.raises(ReportError) as err:
        open_report("R1 " + "A" * reports.MAX_REPORT + " AAAA", KEY)
    assert err.value.reason == "oversize"
    with pytest.raises(ValueError):
        make(KEY, NODE, "run", {"x": "y" * reports.MAX_REPORT}, job="7")


def test_a_genuine_mac_over_a_payload_that_is_not_a_report_is_refused():
    import hashlib
    import hmac

    payload = json.dumps({"id": "x", "node": NODE}).encode()
    mac = hmac.new(KEY, b"slurm-mig report 1\0" + payload, hashlib.sha256).digest()[:16]
    line = f"R1 {reportcodec._b64(payload)} {reportcodec._b64(mac)}"
    with pytest.raises(ReportError) as err:
        open_report(line, KEY)
    assert err.value.reason == "invalid"


def test_an_assignment_token_is_no_report():
    from hooksite import assignment

    from slurm_mig.slurm.assignment import sign

    token = sign(assignment("7"), KEY)
    with pytest.raises(ReportError):
        open_report(f"R1 {token[1:]} AAAAAAAAAAAAAAAAAAAAAA", KEY)


# -- the spool ------------------------------------------------------------------------------


def test_the_spool_survives_a_restart_and_a_report_spooled_twice_is_one_file(tmp_path):
    Spool(tmp_path).put("run.7.0", run_line())
    Spool(tmp_path).put("run.7.0", run_line())  # the same hook again
    again = Spool(tmp_path)  # another process
    assert [p.name for p in again.pending()] == ["run.7.0"]
    assert (tmp_path / "private" / "reports").stat().st_mode & 0o777 == 0o700
    assert again.pending()[0].stat().st_mode & 0o777 == 0o600


def test_a_newer_instances_snapshot_replaces_the_unsent_older_ones(tmp_path):
    box = Spool(tmp_path)
    box.put("run.7.0", run_line())
    for seq in (1, 2, 3):
        box.put(f"instances.{seq:020d}", make(KEY, NODE, "instances", {}, seq=seq), "instances.")
    assert sorted(p.name for p in box.pending()) == ["instances.00000000000000000003", "run.7.0"]


def test_the_spool_is_bounded_and_drops_the_oldest_with_a_line(tmp_path, monkeypatch):
    monkeypatch.setattr(reports, "MAX_FILES", 5)
    said: list[str] = []
    box = Spool(tmp_path, warn=said.append)
    for job in range(8):
        box.put(f"run.{job}.0", run_line(str(job)))
        stamp = (job + 1) * 10**9  # a second apart: "oldest" whatever the clock's grain
        os.utime(box.dir / f"run.{job}.0", ns=(stamp, stamp))
    assert [p.name for p in box.pending()] == [f"run.{j}.0" for j in range(3, 8)]
    assert len(said) == 3 and "LOST 1 run" in said[0] and "node-flush" in said[0]


def test_a_full_spool_drops_accounting_rows_last_and_says_so_loudly(tmp_path, monkeypatch):
    """Issue 34, hole 4: memory needs and instances snapshots go before any run row,
    whatever their age; each drop is a warning and a node-metrics event per report."""
    monkeypatch.setattr(reports, "MAX_FILES", 4)
    said: list[str] = []
    events: list[tuple[str, str]] = []
    box = Spool(tmp_path, warn=said.append, event=lambda *e: events.append(e))
    names = ["run.1.0", "memory.1.0", "run.2.0", "memory.2.0", "run.3.0"]
    names += ["instances.00000000000000000009", "run.4.0"]
    for i, name in enumerate(names):
        kind, job = name.split(".")[:2]
        if kind == "instances":
            line = make(KEY, NODE, "instances", {"jobs": [], "kept": []}, seq=9)
        else:
            line = make(KEY, NODE, kind, {"key": "k", "need": 1}, job=job)
        box.put(name, line)
        stamp = (i + 1) * 10**9  # the runs are the oldest files
        if (box.dir / name).exists():  # an instances snapshot is the first to go
            os.utime(box.dir / name, ns=(stamp, stamp))
    assert sorted(p.name for p in box.pending()) == [f"run.{j}.0" for j in range(1, 5)]
    assert sorted(events) == [("report_drop", "instances")] + [("report_drop", "memory")] * 2
    assert all("LOST" in line and "accounting rows last" in line for line in said)
    box.put("run.5.0", run_line("5"))  # only runs left: the oldest run goes
    assert sorted(p.name for p in box.pending()) == [f"run.{j}.0" for j in range(2, 6)]
    assert events[-1] == ("report_drop", "run") and "LOST 1 run" in said[-1]


# -- delivery -------------------------------------------------------------------------------


def _bounded_exchanges(monkeypatch) -> list[tuple[float, float]]:
    """Every report exchange's (seconds, connect timeout), as the spool asks for them:
    what bounds a hook's wait, whatever the machine's load (no wall clock)."""
    asked: list[tuple[float, float]] = []
    real = reports.exchange

    def exchange(address, lines, seconds, connect_timeout):
        asked.append((seconds, connect_timeout))
        return real(address, lines, seconds, connect_timeout)

    monkeypatch.setattr(reports, "exchange", exchange)
    return asked


def test_reports_wait_while_the_planner_is_away_and_are_delivered_once(
    tmp_path, state, monkeypatch
):
    port = free_port()
    box = Spool(tmp_path / "run")
    box.put("run.7.0", run_line())
    asked = _bounded_exchanges(monkeypatch)
    sent, problem = box.flush(("127.0.0.1", port))
    assert asked == [(reports.FLUSH_SECONDS, reports.CONNECT_TIMEOUT)]  # 1 s, 0.3 s at most
    assert sent == 0 and "cannot reach the planner" in problem
    assert len(box.pending()) == 1
    r = Receiver(("127.0.0.1", port), KEY, ReportDB(state)).start()
    try:
        assert box.flush(("127.0.0.1", port)) == (1, None)
        assert box.pending() == []
        assert box.flush(("127.0.0.1", port)) == (0, None)
    finally:
        r.close()
    assert runs(state) == [("7", 0, NODE, "alice")]
    assert accounting_report(state, "user")[0]["runs"] == 1


def test_the_same_report_twice_is_one_row_and_other_content_under_its_id_is_refused(
    receiver, state
):
    address = receiver.address
    line = run_line()
    for _ in range(2):
        assert reports.exchange(address, [line], 2.0, 1.0) == [f"ok {NODE}/run/7/0/0"]
    assert reports.exchange(address, [line, line], 2.0, 1.0) == [f"ok {NODE}/run/7/0/0"] * 2
    assert len(runs(state)) == 1
    other = run_line(seconds=9999.0)
    assert reports.exchange(address, [other], 2.0, 1.0) == [f"no {NODE}/run/7/0/0 conflict"]
    counts = receiver.take_counts()
    assert counts == {"run": 4, "instances": 0, "memory": 0, "refused": 1, "closed": 0}
    db = sqlite3.connect(state / "accounting.sqlite")
    assert db.execute("SELECT seconds FROM runs").fetchall() == [(120.0,)]


def test_stored_reports_survive_a_planner_restart(tmp_path, state):
    box = Spool(tmp_path / "run")
    line = run_line()
    box.put("run.7.0", line)
    port = free_port()
    r = Receiver(("127.0.0.1", port), KEY, ReportDB(state)).start()
    assert box.flush(("127.0.0.1", port)) == (1, None)
    r.close()
    r = Receiver(("127.0.0.1", port), KEY, ReportDB(state)).start()
    try:
        # the same spool file re-sent after the restart (its ack was lost): stored once
        answers = reports.exchange(r.address, [line], 2.0, 1.0)
        assert answers == [f"ok {NODE}/run/7/0/0"]
    finally:
        r.close()
    assert len(runs(state)) == 1


def test_no_ack_before_the_commit(tmp_path, receiver, state, monkeypatch):
    def broken(bodies, now=None):
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(receiver.db, "store", broken)
    box = Spool(tmp_path / "run")
    box.put("run.7.0", run_line())
    sent, problem = box.flush(receiver.address)
    assert sent == 0 and "store" in problem
    assert len(box.pending()) == 1 and runs(state) == []
    monkeypatch.undo()
    assert box.flush(receiver.address) == (1, None)


def test_a_flooding_node_is_answered_busy_and_keeps_its_reports(tmp_path, receiver, monkeypatch):
    monkeypatch.setattr("slurm_mig.daemon.receiver.BURST", 3.0)
    receiver.rate = 0.0
    box = Spool(tmp_path / "run")
    for job in range(5):
        box.put(f"run.{job}.0", run_line(str(job)))
    sent, problem = box.flush(receiver.address)
    assert sent == 3 and "busy" in problem
    assert len(box.pending()) == 2


def test_a_forged_report_from_a_user_is_refused(tmp_path, receiver, state):
    """A local user without the key (unreadable to them) signs with a guess: refused."""
    python = "/usr/bin/python3"  # the venv's may lie under a directory only root enters
    if os.geteuid() != 0 or not os.path.exists(python):
        pytest.skip("needs root and /usr/bin/python3 to run a process as another user")
    key_file = tmp_path / "key"
    key_file.write_text(KEY.hex() + "\n")
    key_file.chmod(0o600)
    code = f"""
import sys
sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
from slurm_mig.node import reports
from slurm_mig.slurm import reportcodec
from slurm_mig.slurm.assignment import KeyFileError, load_key
try:
    load_key({str(key_file)!r})
    print("read the key")
except KeyFileError:
    pass
data = {json.dumps(run_data("666", user="mallory", seconds=0.1))}
line = reports.make(b"guess" * 7, "node1", "run", data, job="666")
print(reports.exchange(("127.0.0.1", {receiver.address[1]}), [line], 3.0, 1.0))
"""
    done = subprocess.run(
        [python, "-c", code],
        capture_output=True,
        text=True,
        timeout=30,
        user=65534,
        group=65534,
        cwd="/",
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["['no - mac']"]
    assert runs(state) == []
    assert receiver.take_counts()["refused"] == 1


def test_a_refusal_is_logged_on_one_line_without_control_characters(receiver, caplog):
    evil = run_line(key=b"x" * 32).replace("R1 ", "R1 ", 1)
    with caplog.at_level("WARNING", logger="slurm_mig.planner"):
        reports.exchange(receiver.address, [evil, "R1 \x1b[31mred\rX Y"], 2.0, 1.0)
    lines = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(lines) == 2
    assert all("\x1b" not in x and "\r" not in x and "\n" not in x for x in lines)


def test_idle_clients_past_every_cap_neither_delay_a_node_nor_keep_their_sockets(tmp_path, state):
    """Issue 34, hole 4: more idle connections than the receiver holds. Each node's
    connection closes the idlest one and is answered; the idle ones that stay are closed
    at the first-byte (or request) timeout; the receiver never holds more than its cap."""
    r = Receiver(
        ("127.0.0.1", 0), KEY, ReportDB(state), max_connections=6, per_source=3, timeout=3.0
    ).start()
    idle: list[socket.socket] = []
    try:
        for i in range(20):  # connect, then nothing (half of them send one byte)
            s = socket.create_connection(r.address, timeout=10)
            if i % 2:
                s.sendall(b"R")
            idle.append(s)
        _until(lambda: r.evicted >= 20 - 6)  # the rest waited in the backlog till then
        assert r.connections <= 6
        for i in range(5):
            box = Spool(tmp_path / f"run{i}")
            box.put(f"run.{i}.0", run_line(job=str(10 + i)))
            assert box.flush(r.address, seconds=5.0) == (1, None)
        assert r.connections <= 6
        _until(lambda: r.connections == 0, 10.0)  # the idle ones: closed within FIRST_BYTE
        counts = r.take_counts()
    finally:
        for s in idle:
            s.close()
        r.close()
    assert len(runs(state)) == 5
    assert counts["run"] == 5 and counts["refused"] == 0 and counts["closed"] >= 20


def _until(ok, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not ok():
        assert time.monotonic() < deadline, "not within the time"
        time.sleep(0.02)


def test_the_need_file_is_read_as_untrusted_input(tmp_path):
    uid = os.getuid()
    run_dir = tmp_path / "run"
    (run_dir / "task").mkdir(parents=True)
    path = reports.need_path(run_dir, "7")
    reports.make_need_file(run_dir, "7", uid)
    assert reports.read_need(path, uid, 40 << 30, None) == (None, None)  # empty
    reports.write_need(path, "resnet", 12 << 30)
    assert reports.read_need(path, uid, 40 << 30, "resnet") == (
        {"key": "resnet", "need": 12 << 30},
        None,
    )
    for text, why in (
        ('{"key": "resnet", "need": 12}', "is not the job's"),  # another key than the hint
        ('{"key": "resnet", "need": 99999999999999}', "out of range"),
        ('{"key": "res net", "need": 12}', "not a job kind"),
        ('{"key": "resnet", "need": 12, "x": 1}', "not {key, need}"),
        ("x" * 600, "over 512 bytes"),
        ("[1, 2", "not JSON"),
    ):
        path.write_text(text)
        got, problem = reports.read_need(path, uid, 40 << 30, "other" if "12}" in text else None)
        assert got is None and why in problem, (text, problem)
    if os.geteuid() == 0:  # a file of a third user (not the hooks', not the job's)
        os.chown(path, 4343, 4343)
        assert "not the job user's" in reports.read_need(path, 4242, 40 << 30, None)[1]
    path.unlink()
    target = tmp_path / "secret"
    target.write_text('{"key": "resnet", "need": 12}')
    path.symlink_to(target)
    got, problem = reports.read_need(path, uid, 40 << 30, None)
    assert got is None and "not read" in problem  # O_NOFOLLOW


@pytest.mark.real_mount
@pytest.mark.skipif(
    os.geteuid() != 0 or not os.path.exists("/usr/bin/python3"),
    reason="needs root and /usr/bin/python3 to run a process as another user",
)
def test_the_need_file_is_writable_by_its_user_but_not_theirs_to_keep(tmp_path):
    # The need file was the user's (0600): like the task record, they could fill the run
    # directory's disk through it and keep the space with a hard link after the job.
    with open_tmp_dir() as tmp:
        run_dir = tmp / "run"
        (run_dir / "task").mkdir(parents=True, mode=0o711)
        (run_dir / "task").chmod(0o711)
        (tmp / "drop").mkdir(mode=0o1777)
        (tmp / "drop").chmod(0o1777)
        path = reports.need_path(run_dir, "7")
        reports.make_need_file(run_dir, "7", 4242)
        st = path.stat()
        assert (st.st_uid, st.st_gid) == (0, 0)
        write = (  # as reports.write_need does it
            "def write():\n"
            "    fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK)\n"
            '    os.write(fd, b\'{"key": "resnet", "need": 9663676416}\\n\')\n'
            "    os.close(fd)\n"
        )
        ops = {
            "fill": "[os.write(fd, b'x' * 65536) for fd in [os.open(path, os.O_WRONLY)] * 16]",
            "beside": "open(os.path.join(os.path.dirname(path), 'more'), 'w').close()",
            "write": "write()",
            "read": "open(path).read()",
            "chmod": "os.chmod(path, 0o666)",
            "link": "os.link(path, os.path.join(drop, 'kept'))",
        }
        try:
            got = attempts_as(4242, ops, setup=write, path=path, drop=tmp / "drop")
            need, problem = reports.read_need(path, 4242, 40 << 30, "resnet")
        finally:
            reports.drop_need_area(run_dir, "7")
        # its own file system of one page: a megabyte does not fit, nothing fits beside it
        assert (got.pop("fill"), got.pop("beside")) == ("ENOSPC", "EACCES")
        assert got.pop("link") in ("EPERM", "EXDEV")  # and no link leaves its file system
        assert got == {"write": "ok", "read": "EACCES", "chmod": "EPERM"}, got
        assert problem is None and need == {"key": "resnet", "need": 9 << 30}
        assert not path.parent.exists()


def test_a_reported_memory_need_reaches_the_runtime_store(receiver, state):
    need = {"key": "resnet", "need": 12 << 30, "uid": 1000}
    line = make(KEY, NODE, "memory", need, job="7", restart=1)
    assert (
        reports.exchange(receiver.address, [line, line], 2.0, 1.0)
        == [f"ok {NODE}/memory/7/1/0"] * 2
    )
    assert RuntimeStore(state / "profiles.sqlite").memory_need("resnet", "uid:1000") == 12 << 30


def test_the_newest_instances_snapshot_wins(receiver, state):
    from slurm_mig.geometry import Placement
    from slurm_mig.node.nodestate import KeptInstance

    kept = KeptInstance(0, "1g.5gb", Placement(0, 1), "MIG-aaa", "8", 1e9).to_json()
    new = make(KEY, NODE, "instances", {"jobs": [], "kept": [kept]}, seq=2)
    old = make(KEY, NODE, "instances", {"jobs": [], "kept": []}, seq=1)
    assert reports.exchange(receiver.address, [new, old], 2.0, 1.0)[1].startswith("ok ")
    config = SimpleNamespace(nodes={NODE: ("A100-40GB",), "node2": ()}, state_dir=state)
    config.reports = "127.0.0.1:1"
    got = node_records(config)
    assert [k.uuid for k in got[NODE]["kept"]] == ["MIG-aaa"] and got["node2"] == {}
    assert [n for n, _ in silent_nodes(config, time.time())] == ["node2"]


# -- the real hooks, the planner's state apart from the node's run dir -------------------------


def test_the_epilog_reports_to_a_planner_that_cannot_read_the_node(tmp_path, capsys):
    from hooksite import T0, make_site, run

    from slurm_mig.cli import main
    from slurm_mig.config import load_config
    from slurm_mig.node.hooks import epilog_main, prolog_main

    site = make_site(tmp_path / "node")
    planner_state = tmp_path / "controller" / "state"  # not the node's run dir
    r = Receiver(
        ("127.0.0.1", 0),
        site.key,
        ReportDB(planner_state, RuntimeStore(planner_state / "profiles.sqlite")),
    ).start()
    try:
        text = site.config.read_text()
        text = text.replace(f'state_dir = "{site.tmp}/state"', f'state_dir = "{planner_state}"')
        text = text.replace("[planner]\n", f'[planner]\nreports = "127.0.0.1:{r.address[1]}"\n')
        site.config.write_text(text)
        env = site.env("42", site.comment("42", text="mig:key=resnet"), SLURM_JOB_USER="alice")
        assert run(prolog_main, env, capsys)[0] == 0
        uuid = site.state.job("42").uuid
        need = reports.need_path(site.run_dir, "42")
        assert need.exists() and need.stat().st_uid == os.getuid()
        reports.write_need(need, "resnet", 9 << 30)  # what mig-run does, as the user
        config = load_config(site.config)
        shown = node_records(config)[NODE]
        assert [j.uuid for j in shown["jobs"]] == [uuid]  # status: the UUID, reported
        assert run(epilog_main, env, capsys, t=T0 + 65.0)[0] == 0
        assert not need.exists()
        assert Spool(site.run_dir).pending() == []  # all delivered by the hooks
    finally:
        r.close()
    assert node_records(config)[NODE] == {"jobs": [], "kept": []}  # destroyed
    [row] = accounting_report(planner_state, "user")
    assert row["user"] == "alice" and row["runs"] == 1
    assert RuntimeStore(planner_state / "profiles.sqlite").memory_need("resnet") == 9 << 30
    capsys.readouterr()
    assert main(["report", "--config", str(site.config), "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)[0]["user"] == "alice"
    assert "node node2: no report since" in err and "node1" not in err


# -- wiring: config, daemon, mig-run ----------------------------------------------------------


def test_the_reports_address_must_be_one_the_nodes_can_reach(tmp_path):
    from slurm_mig.config import ConfigError, config_from_dict

    base = {"nodes": {NODE: ["A100-40GB"]}}
    assert config_from_dict(base).reports == ""
    got = config_from_dict({**base, "planner": {"reports": "10.0.0.1:9765"}})
    assert got.reports == "10.0.0.1:9765"
    for bad in ("0.0.0.0:9765", "10.0.0.1", "10.0.0.1:0"):
        with pytest.raises(ConfigError) as err:
            config_from_dict({**base, "planner": {"reports": bad}})
        assert "reports" in str(err.value)


def test_the_daemon_starts_the_receiver_and_logs_what_arrived(state, caplog):
    from slurm_mig.daemon.daemon import PlannerDaemon
    from slurm_mig.daemon.receiver import start_receiver

    port = free_port()
    config = SimpleNamespace(
        reports=f"127.0.0.1:{port}", state_dir=state, nodes={NODE: ("A100-40GB",)}
    )
    assert start_receiver(config, None) is None  # a dry run has no key
    r = start_receiver(config, KEY)
    assert r is not None and r.address == ("127.0.0.1", port)
    try:
        with caplog.at_level("WARNING", logger="slurm_mig.planner"):
            assert start_receiver(config, KEY) is None  # the port is taken: a warning
        assert "cannot listen for node reports" in caplog.text
        assert reports.exchange(r.address, [run_line()], 2.0, 1.0)[0].startswith("ok ")
        daemon = SimpleNamespace(receiver=r, config=config)
        with caplog.at_level("INFO", logger="slurm_mig.planner"):
            PlannerDaemon._gather_accounting(daemon)
        assert "node reports: 1 run" in caplog.text
    finally:
        r.close()


def test_mig_run_writes_its_need_into_the_jobs_need_file(tmp_path):
    from hooksite import make_site

    from slurm_mig.memory.runner import Runner

    site = make_site(tmp_path)
    (site.run_dir / "task").mkdir(parents=True)
    reports.make_need_file(site.run_dir, "42", os.getuid())
    said: list[str] = []
    runner = SimpleNamespace(
        opts=SimpleNamespace(config=str(site.config)),
        env={"SLURM_JOB_ID": "42", "SLURMD_NODENAME": NODE},
        say=said.append,
    )
    Runner._record_need(runner, "resnet", 12 << 30, "42")
    assert said == []
    path = reports.need_path(site.run_dir, "42")
    assert reports.read_need(path, os.getuid(), 40 << 30, "resnet")[0] == {
        "key": "resnet",
        "need": 12 << 30,
    }
    assert not (tmp_path / "state" / "profiles.sqlite").exists()  # not the store


def test_an_epilog_with_the_planner_away_is_quick_and_node_flush_delivers_later(
    tmp_path, capsys, monkeypatch
):
    from hooksite import T0, make_site, run

    from slurm_mig.cli import main
    from slurm_mig.node.hooks import epilog_main, prolog_main

    site = make_site(tmp_path)
    port = free_port()  # nobody listens there yet
    text = site.config.read_text().replace(
        "[planner]\n", f'[planner]\nreports = "127.0.0.1:{port}"\n'
    )
    site.config.write_text(text)
    env = site.env("42", site.comment("42"), SLURM_JOB_USER="bob")
    assert run(prolog_main, env, capsys)[0] == 0
    asked = _bounded_exchanges(monkeypatch)
    rc, _, err = run(epilog_main, env, capsys, t=T0 + 65.0)
    assert rc == 0 and asked  # one try, bounded as a hook's must be
    assert all(s <= reports.FLUSH_SECONDS and c <= reports.CONNECT_TIMEOUT for s, c in asked)
    assert any("reports kept for later: cannot reach the planner" in line for line in err)
    names = sorted(p.name.split(".")[0] for p in Spool(site.run_dir).pending())
    assert names == ["instances", "run"]  # the prolog's snapshot superseded
    state = tmp_path / "state"
    r = Receiver(("127.0.0.1", port), site.key, ReportDB(state)).start()
    try:
        assert main(["node-flush", "--config", str(site.config), "--node", NODE]) == 0
    finally:
        r.close()
    out = capsys.readouterr().out
    assert f"{NODE}: 2 report(s) delivered, 0 left" in out
    assert [row["user"] for row in accounting_report(state, "user")] == ["bob"]
    assert main(["node-flush", "--config", str(site.config), "--node", NODE]) == 0
    assert f"{NODE}: 0 report(s) delivered, 0 left" in capsys.readouterr().out


def test_reports_spooled_before_a_key_rotation_are_delivered_signed_with_the_new_key(
    tmp_path, capsys
):
    from hooksite import T0, make_site, run

    from slurm_mig.cli import main
    from slurm_mig.node.hooks import epilog_main, prolog_main
    from slurm_mig.slurm.assignment import generate_key, load_key

    site = make_site(tmp_path)
    port = free_port()  # the planner is away while the old key signs
    text = site.config.read_text().replace(
        "[planner]\n", f'[planner]\nreports = "127.0.0.1:{port}"\n'
    )
    site.config.write_text(text)
    env = site.env("42", site.comment("42"), SLURM_JOB_USER="bob")
    assert run(prolog_main, env, capsys)[0] == 0
    assert run(epilog_main, env, capsys, t=T0 + 65.0)[0] == 0
    assert len(Spool(site.run_dir).pending()) == 2
    key_file = tmp_path / "key"
    key_file.unlink()
    new_key = load_key(generate_key(key_file))  # the site key rotated on node and planner
    assert new_key != site.key
    state = tmp_path / "state"
    r = Receiver(("127.0.0.1", port), new_key, ReportDB(state)).start()
    try:
        for line in (p.read_text().strip() for p in Spool(site.run_dir).pending()):
            assert reports.exchange(r.address, [line], 2.0, 1.0) == ["no - mac"]  # as spooled
        assert main(["node-flush", "--config", str(site.config), "--node", NODE]) == 0
    finally:
        r.close()
    assert f"{NODE}: 2 report(s) delivered, 0 left" in capsys.readouterr().out
    assert [row["user"] for row in accounting_report(state, "user")] == ["bob"]


def test_a_report_signed_again_keeps_its_payload_and_verifies_only_under_the_new_key():
    other = bytes(range(1, 33))
    line = make(KEY, NODE, "memory", {"key": "resnet", "need": 4 << 30}, job="7", at=1.0)
    again = reports.signed(line, other)
    assert again.split(" ")[1] == line.split(" ")[1]
    assert reports.open_report(again, other) == reports.open_report(line, KEY)
    with pytest.raises(reports.ReportError):
        reports.open_report(again, KEY)
    assert reports.signed(line, KEY) == line
    assert reports.signed("not a report", other) == "not a report"


def test_a_memory_need_replayed_with_other_content_changes_nothing(receiver, state):
    need = {"key": "resnet", "need": 4 << 30, "uid": 1000}
    first = make(KEY, NODE, "memory", need, job="7", at=1.0)
    other = make(KEY, NODE, "memory", {**need, "need": 30 << 30}, job="7", at=1.0)
    assert reports.exchange(receiver.address, [first], 2.0, 1.0)[0].startswith("ok ")
    assert reports.exchange(receiver.address, [other], 2.0, 1.0) == [
        f"no {NODE}/memory/7/0/0 conflict"
    ]
    assert RuntimeStore(state / "profiles.sqlite").memory_need("resnet") == 4 << 30


def test_a_burst_of_more_nodes_than_slots_is_served_not_refused(tmp_path, state):
    """Epilogs of many jobs ending at once: the ones over the bound wait for a slot."""
    r = Receiver(("127.0.0.1", 0), KEY, ReportDB(state), max_connections=2, timeout=1.0)
    r.start()
    results = []
    try:

        def send(i: int) -> None:
            box = Spool(tmp_path / f"run{i}")
            box.put(f"run.{i}.0", run_line(job=str(100 + i)))
            results.append(box.flush(r.address, seconds=5.0))

        threads = [threading.Thread(target=send, args=(i,)) for i in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        counts = r.take_counts()
    finally:
        r.close()
    assert results == [(1, None)] * 12
    assert counts["refused"] == 0 and len(runs(state)) == 12


# -- measured energy in the run report (issue 22) ---------------------------------------------


def test_a_run_report_carries_the_measured_energy_and_the_store_says_which(receiver, state):
    finished = {**run_data("81"), "measured_j": 15_000.0}
    line = reports.run_report(KEY, NODE, finished, {"SLURM_JOB_USER": "alice"})
    assert open_report(line, KEY)["data"]["measured_j"] == 15_000.0
    modelled = reports.run_report(KEY, NODE, run_data("82"), {"SLURM_JOB_USER": "alice"})
    assert "measured_j" not in open_report(modelled, KEY)["data"]
    # 2 MJ in 120 s is far more than twice an A100's 400 W: the store keeps the model
    forged = reports.run_report(
        KEY, NODE, {**run_data("83"), "measured_j": 2e6}, {"SLURM_JOB_USER": "alice"}
    )
    assert reports.exchange(receiver.address, [line, modelled, forged], 2.0, 1.0)[1].startswith(
        "ok "
    )
    db = sqlite3.connect(state / "accounting.sqlite")
    try:
        got = db.execute(
            "SELECT job_id, energy_source, measured_j, energy_j > 0 FROM runs ORDER BY job_id"
        ).fetchall()
    finally:
        db.close()
    assert got == [("81", "measured", 15_000.0, 1), ("82", "modelled", None, 1),
                   ("83", "modelled", None, 1)]  # fmt: skip
    [row] = accounting_report(state, "user")
    assert row["energy"] == "mixed" and row["measured_runs"] == 1
