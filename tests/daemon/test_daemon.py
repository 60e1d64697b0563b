"""The planner daemon's I/O layer: snapshots from config, sqlite and Slurm's records;
actions applied through a stand-in scontrol; the ``slurm-mig planner`` command, its dry
run, its status file and SIGTERM. The same against a real Slurm on loopback (cycles,
releases, a restart mid-cycle): tests/e2e/test_daemon_slurm.py."""

from __future__ import annotations

import errno
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import node, run_slurm_mig, uid_of, write_config
from support import squeue_job as job

from slurm_mig.config import load_config
from slurm_mig.daemon.cycle import Learn, plan_cycle
from slurm_mig.daemon.daemon import (
    STATUS_FILE,
    PlannerDaemon,
    apply_actions,
    build_cycle_input,
    usable_nodes,
)
from slurm_mig.geometry import Placement, get_model
from slurm_mig.limitevidence import LIMIT_RATIO
from slurm_mig.owner import owner_of
from slurm_mig.runtimes import RuntimeStore
from slurm_mig.slurm.assignment import Assignment, load_key
from slurm_mig.slurm.client import Job
from slurm_mig.slurm.jobrecord import admin_comment_for
from slurm_mig.slurm.notify import MIN_GAP

A100 = get_model("A100-40GB")
ALICE = owner_of(uid_of("alice"))  # whose runs alice's jobs are: her uid


# ---------------------------------------------------------------------------
# CycleInput and apply, without Slurm


def test_usable_nodes_drop_drained_down_and_unknown_nodes():
    configured = {"g1": ("A100-40GB",), "g2": ("A100-40GB",), "g3": ("A30",), "g4": ("A30",)}
    seen = [node("g1", "MIXED"), node("g2", "IDLE", "DRAIN"), node("g3", "DOWN", "NOT_RESPONDING")]
    assert usable_nodes(configured, seen) == {"g1": ("A100-40GB",)}


def test_snapshot_estimates_from_hints_time_limits_and_learned_runtimes(tmp_path):
    from slurm_mig.config import load_config

    config = load_config(write_config(tmp_path, {"g1": ["A100-40GB"], "g2": ["A30-24GB"]}))
    store = RuntimeStore(tmp_path / "state" / "profiles.sqlite")
    for i, secs in enumerate((100.0, 120.0, 110.0)):
        store.record("resnet", A100.name, 3, secs, f"9{i}", 0, 1000.0 + i)
    jobs = [
        job("1", comment="mig:key=resnet"),
        job("2", comment="mig:time=15m", time_limit=7200.0),
        job("3", time_limit=1800.0),
        job("4", name="x"),
        job("5", comment="mig:mem=12X"),
        job("6", state="RUNNING", held=False, comment="mig:key=bert"),
    ]
    snap = build_cycle_input(config, jobs, [node("g1"), node("g2")], store, 2000.0)
    est = snap.estimates
    assert est["1"].key == "resnet" and est["1"].times[A100.name][3] == 110.0  # the median
    assert set(est["1"].times) == {"A100-40GB", "A30-24GB"}
    smallest = min(A100.planner_sizes)
    assert est["2"].times[A100.name][smallest] == pytest.approx(900.0)  # the hint
    assert est["3"].times[A100.name][smallest] == pytest.approx(1800.0 / LIMIT_RATIO)  # limit
    assert est["4"].times[A100.name][smallest] == pytest.approx(600.0)  # default_runtime
    assert "mem=12X" in est["5"].problem and est["5"].times == {}
    assert est["6"].key == "bert" and est["6"].times == {}
    assert snap.nodes == {"g1": ("A100-40GB",), "g2": ("A30-24GB",)}
    assert (snap.partition, snap.batch_window, snap.algorithm) == ("mig", 0.0, "adaptive")
    # the bad hint becomes a note the user can read
    result = plan_cycle(snap)
    assert "5" not in result.planned and {"1", "2", "3", "4"} <= set(result.planned)
    note = next(a for a in result.actions if a.job_id == "5" and type(a).__name__ == "Note")
    assert "unknown unit 'X'" in note.text


def test_learning_is_recorded_once_per_run(tmp_path):
    store = RuntimeStore(tmp_path / "profiles.sqlite")
    learn = Learn("7", 0, "resnet", A100.name, 3, 95.0, 5000.0)
    first = apply_actions([learn], client=None, key=b"k" * 32, store=store)
    again = apply_actions([learn], client=None, key=b"k" * 32, store=store)
    assert (first.learned, again.learned) == (1, 0)
    assert store.observations("resnet", A100.name) == {3: [95.0]}


def test_a_finished_run_goes_to_the_store_once_while_squeue_still_shows_it(tmp_path):
    """squeue shows a finished job for minutes (MinJobAge): the daemon offers its
    runtime to the store in one cycle, not in every cycle until it leaves."""
    cfg = load_config(write_config(tmp_path, {"gpu01": ["A100-40GB"]}))
    a = admin_comment_for(
        Assignment("7", 0, "gpu01", 0, A100.name, "3g.20gb", Placement(0, 4), 0, 0, 90.0, 900.0)
    )
    done = job("7", state="COMPLETED", held=False, reason="None", admin_comment=a,
               start_time=1000.0, end_time=1095.0, exit_code=0)  # fmt: skip

    class Calls(RuntimeStore):
        offered = 0

        def record(self, *args, **kwargs):
            Calls.offered += 1
            return super().record(*args, **kwargs)

    class Slurm:
        shown = [done]

        def jobs(self, partition=None):
            return list(self.shown)

        def nodes(self, partition=None):
            return [node("gpu01", "MIXED")]

    slurm = Slurm()
    store = Calls(tmp_path / "profiles.sqlite")
    daemon = PlannerDaemon(cfg, slurm, store, b"k" * 32, clock=lambda: 2000.0)
    for _ in range(3):
        assert daemon.run_cycle().error is None
    assert Calls.offered == 1 and store.observations("train", A100.name) == {3: [95.0]}
    slurm.shown = []  # it left squeue: forgotten, the memory stays bounded
    daemon.run_cycle()
    assert daemon.stored == set()


def test_cli_errors_are_one_line(tmp_path):
    def cli(*args):
        return run_slurm_mig("planner", *args)

    res = cli("--config", str(tmp_path / "missing.toml"), "--once")
    assert res.returncode == 2 and res.stderr.count("\n") == 1
    assert res.stderr.startswith("slurm-mig: error: ") and "missing.toml" in res.stderr
    cfg = write_config(tmp_path, {"g1": ["A100-40GB"]})
    (tmp_path / "key").unlink()
    res = cli("--config", str(cfg), "--once")
    assert res.returncode == 2 and "keygen" in res.stderr and "Traceback" not in res.stderr


def test_hints_with_huge_numbers_are_noted_not_a_crash(tmp_path):
    # int() of 5000 digits (ValueError) and 400-digit hours (OverflowError) escaped the
    # Estimator: `slurm-mig planner` exited with a traceback and planned nothing.
    from slurm_mig.config import load_config

    config = load_config(write_config(tmp_path, {"g1": ["A100-40GB"]}))
    store = RuntimeStore(tmp_path / "state" / "profiles.sqlite")
    jobs = [
        job("1", comment="mig:time=" + "9" * 400 + ":00:00"),
        job("2", comment="mig:iters=" + "9" * 5000),
        job("3", comment="mig:time=" + "9" * 150 + ":00:00"),
        job("4", comment="mig:pcie=" + "9" * 300),
        job("5", comment="mig:time=10m"),
    ]
    snap = build_cycle_input(config, jobs, [node("g1")], store, 2000.0)
    for jid in ("1", "2", "3", "4"):
        assert snap.estimates[jid].problem.startswith("slurm-mig: hint '"), jid
    result = plan_cycle(snap)
    assert set(result.planned) == {"5"}
    noted = {a.job_id for a in result.actions if type(a).__name__ == "Note"}
    assert noted == {"1", "2", "3", "4"}


def _lock_store(path: Path) -> subprocess.Popen:
    """Another process holding the store exclusively (as a stuck sqlite3 shell would)."""
    locker = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sqlite3, sys, time\n"
            "db = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
            "db.execute('PRAGMA locking_mode=EXCLUSIVE')\n"
            "db.execute('BEGIN EXCLUSIVE')\n"
            "db.execute('CREATE TABLE IF NOT EXISTS held (a)')\n"
            "print('locked', flush=True)\n"
            "time.sleep(60)\n",
            str(path),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert locker.stdout.readline().strip() == "locked"
    return locker


@pytest.mark.parametrize("fault", ["locked", "corrupt"])
def test_an_unreadable_store_costs_a_short_wait_and_jobs_are_planned(tmp_path, caplog, fault):
    # A locked store cost 30 s per cycle and a corrupt one stopped every cycle: nothing
    # was held, planned or released. Now: hints and defaults, the error logged once.
    import logging

    from slurm_mig.config import load_config
    from slurm_mig.runtimes import DAEMON_BUSY_TIMEOUT_S, GuardedStore

    config = load_config(write_config(tmp_path, {"g1": ["A100-40GB"]}))
    path = tmp_path / "state" / "profiles.sqlite"
    RuntimeStore(path).record("resnet", A100.name, 3, 100.0, "9", 0, 1000.0, owner=ALICE)
    locker = None
    if fault == "locked":
        locker = _lock_store(path)
    else:
        path.write_bytes(b"not a database " * 100)
    now = [1000.0]
    store = GuardedStore(
        RuntimeStore(path, busy_timeout=DAEMON_BUSY_TIMEOUT_S), clock=lambda: now[0]
    )
    jobs = [job("1", comment="mig:key=resnet,time=10m"), job("2", comment="mig:key=bert")]
    try:
        with caplog.at_level(logging.ERROR, logger="slurm_mig.planner"):
            t0 = time.monotonic()
            snap = build_cycle_input(config, jobs, [node("g1")], store, 2000.0)
            first = time.monotonic() - t0
            now[0] += 1.0
            t0 = time.monotonic()
            again = build_cycle_input(config, jobs, [node("g1")], store, 2001.0)
            second = time.monotonic() - t0
            now[0] += 60.0  # a minute on: tried again, logged again
            build_cycle_input(config, jobs, [node("g1")], store, 2061.0)
    finally:
        if locker is not None:
            locker.kill()
            locker.wait()
    assert first < 1.0 and second < 0.2, (first, second)
    smallest = min(A100.planner_sizes)
    for s in (snap, again):
        assert s.estimates["1"].times[A100.name][smallest] == pytest.approx(600.0)  # the hint
        assert s.estimates["2"].times[A100.name][smallest] == pytest.approx(600.0)  # default
    assert set(plan_cycle(snap).planned) == {"1", "2"}
    logged = [r.getMessage() for r in caplog.records]
    assert len(logged) == 2 and all("cannot read the runtime store" in m for m in logged)
    assert str(path) in logged[0]
    # readable again: learned runtimes are back
    if fault == "corrupt":
        path.unlink()
        RuntimeStore(path).record("resnet", A100.name, 3, 100.0, "9", 0, 1000.0, owner=ALICE)
    now[0] += 10.0
    back = build_cycle_input(config, jobs, [node("g1")], store, 2100.0)
    assert back.estimates["1"].times[A100.name][3] == 100.0


def test_planner_refuses_a_signing_key_others_can_read(tmp_path):
    cfg = write_config(tmp_path, {"g1": ["A100-40GB"]})
    (tmp_path / "key").chmod(0o644)
    res = run_slurm_mig("planner", "--config", str(cfg), "--once")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr == (
        f"slurm-mig: error: {tmp_path / 'key'}: the signing key is readable or writable by "
        f"others (mode 0644); run 'chmod 600 {tmp_path / 'key'}' (anyone who can read it "
        "can forge any assignment)\n"
    )


class FakeTime:
    """The daemon's clock and wait: time passes only while the daemon waits, and what is
    scheduled (an Epilog's datagram) happens at its time."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self.events: list[tuple[float, object]] = []

    def clock(self) -> float:
        return self.now

    def at(self, t: float, fn) -> None:
        self.events.append((t, fn))
        self.events.sort(key=lambda e: e[0])

    def wait(self, event, timeout: float) -> bool:
        end = self.now + timeout
        while not event.is_set():
            if not self.events or self.events[0][0] > end:
                self.now = end
                return False
            t, fn = self.events.pop(0)
            self.now = max(self.now, t)
            fn()
        return True


class _Clocked(PlannerDaemon):
    """A daemon whose cycle only records when it ran (fake time) and what Slurm "showed"."""

    def __init__(self, config, completing: list[bool], cycles: int, fake: FakeTime) -> None:
        super().__init__(
            config, client=None, store=None, key=b"k" * 32, clock=fake.clock, wait=fake.wait
        )
        self.shown = completing
        self.times: list[float] = []
        self.limit = cycles

    def run_cycle(self):
        self.times.append(self.clock())
        self.completing = self.shown.pop(0) if self.shown else False
        if len(self.times) >= self.limit:
            self.stop.set()
        return None


@pytest.mark.parametrize("completing", [True, False])
def test_a_notification_while_a_job_completes_brings_quick_follow_up_cycles(tmp_path, completing):
    from slurm_mig.config import load_config
    from slurm_mig.daemon.daemon import FOLLOW_UP, FOLLOW_UPS

    cfg = write_config(tmp_path, {"g1": ["A100-40GB"]}, cycle=2.0, metrics="")
    cycles = FOLLOW_UPS + 3 if completing else 3
    fake = FakeTime()
    daemon = _Clocked(load_config(cfg), [completing] * 10, cycles, fake)
    fake.at(fake.now + 0.3, daemon.wake.set)  # an Epilog's datagram
    assert daemon.run() == 0
    gaps = [round(b - a, 6) for a, b in zip(daemon.times, daemon.times[1:])]
    assert gaps[0] == pytest.approx(0.3 + MIN_GAP)  # the first cycle waited for the wake
    if completing:  # then FOLLOW_UPS quick looks, then the timer again
        assert gaps[1 : 1 + FOLLOW_UPS] == [pytest.approx(FOLLOW_UP + MIN_GAP)] * FOLLOW_UPS
        assert gaps[1 + FOLLOW_UPS] == pytest.approx(2.0 + MIN_GAP), gaps
    else:  # nothing completing: the cycle timer alone
        assert gaps[1:] == [pytest.approx(2.0 + MIN_GAP)], gaps


class _NoGresSlurm:
    """scontrol as on a node without the MIG gres.conf: a TresPerNode update fails."""

    def __init__(self) -> None:
        self.released: list[str] = []
        self.updates: list[dict] = []

    def update_job(self, job_id: str, **fields: str) -> None:
        from slurm_mig.slurm.client import SlurmError

        self.updates.append(fields)
        if "TresPerNode" in fields:
            raise SlurmError(
                f"'scontrol update JobId={job_id}' failed: Invalid generic resource (gres) "
                f"specification for job {job_id}"
            )

    def release(self, job_id: str) -> None:
        self.released.append(job_id)


def test_release_sets_the_gres_record_and_a_node_without_it_is_named_with_the_fix():
    from dataclasses import replace as _replace

    from slurm_mig.daemon.cycle import Release
    from slurm_mig.geometry import Placement
    from slurm_mig.slurm.assignment import Assignment

    a = Assignment("7", 0, "gpu01", 1, "A100-40GB", "1g.5gb", Placement(3, 1), 0, 0, 60.0, 0.0)
    action = Release("7", a, "mig:time=60")
    slurm = _NoGresSlurm()
    report = apply_actions([action], slurm, key=b"k" * 32, gres=True, clock=lambda: 1000.0)
    assert slurm.updates[0]["TresPerNode"] == "gres:gpu:m1g10:1"  # 1g at memory slice 3
    assert slurm.released == [] and report.released == []
    [(job, text)] = report.failed
    assert job == "7" and "Invalid generic resource" in text
    assert "node gpu01 needs the gres.conf records and the mig_slice count" in text
    assert "GresTypes=gpu,mig_slice" in text and '[slurm] gres = "records"' in text
    # gres on with slices: the record and the instance's compute slices, in one update
    a3 = _replace(a, profile="3g.20gb", placement=Placement(4, 4))
    slurm = _NoGresSlurm()
    apply_actions([Release("7", a3, "")], slurm, key=b"k" * 32, gres=True, slices=True)
    assert slurm.updates[0]["TresPerNode"] == "gres:gpu:m1g2:1,gres:mig_slice:3"
    # gres off: no TresPerNode, released
    slurm = _NoGresSlurm()
    report = apply_actions([_replace(action)], slurm, key=b"k" * 32, clock=lambda: 1000.0)
    assert "TresPerNode" not in slurm.updates[0] and slurm.released == ["7"]


class _ListSlurm:
    """scontrol that takes job lists: counts every command, fails the jobs in ``bad``."""

    def __init__(self, bad: set[str] = frozenset(), tick=None) -> None:
        self.bad = set(bad)
        self.calls: list[tuple[str, tuple[str, ...]]] = []
        self.tick = tick

    def _call(self, verb: str, ids: tuple[str, ...]) -> None:
        from slurm_mig.slurm.client import SlurmError

        self.calls.append((verb, ids))
        if self.tick is not None:
            self.tick()
        if self.bad & set(ids):
            raise SlurmError(f"scontrol {verb} {','.join(ids)}: Invalid job id specified")

    def update_job(self, job_id: str, **fields: str) -> None:
        self._call("update", (job_id,))

    def hold(self, job_id: str) -> None:
        self._call("hold", (job_id,))

    def release(self, job_id: str) -> None:
        self._call("release", (job_id,))

    def _many(self, verb: str, ids) -> dict[str, str]:
        try:
            self._call(verb, tuple(ids))
            return {}
        except Exception:
            failed = {}
            for jid in ids:
                try:
                    self._call(verb, (jid,))
                except Exception as exc:
                    failed[jid] = str(exc)
            return failed

    def hold_jobs(self, ids) -> dict[str, str]:
        return self._many("hold", ids)

    def release_jobs(self, ids) -> dict[str, str]:
        return self._many("release", ids)


def _releases(n: int):
    from slurm_mig.daemon.cycle import Release
    from slurm_mig.geometry import Placement
    from slurm_mig.slurm.assignment import Assignment

    out = []
    for i in range(n):
        jid = str(100 + i)
        a = Assignment(
            jid, 0, "gpu01", i % 8, "A100-40GB", "1g.5gb", Placement(i % 7, 1), 0, 0, 60, 0.0
        )
        out.append(Release(jid, a, "mig:time=60", (), (("AdminComment", "x"),)))
    return out


def test_holds_and_releases_go_out_as_job_lists_one_update_per_release():
    from slurm_mig.daemon.cycle import Hold
    from slurm_mig.daemon.daemon import RELEASE_CHUNK

    slurm = _ListSlurm()
    holds = [Hold(str(i), "not planned yet") for i in range(1, 6)]
    releases = _releases(RELEASE_CHUNK + 3)
    report = apply_actions([*holds, *releases], slurm, key=b"k" * 32, workers=4)
    verbs = [v for v, _ in slurm.calls]
    assert verbs.count("hold") == 1 and slurm.calls[0] == ("hold", ("1", "2", "3", "4", "5"))
    assert verbs.count("update") == len(releases)  # one update per released job
    assert verbs.count("release") == 2  # one list per slice of RELEASE_CHUNK jobs
    assert len(slurm.calls) == report.calls == 1 + len(releases) + 2
    assert sorted(report.released) == sorted(r.job_id for r in releases)
    assert not report.failed and report.applied == len(holds) + len(releases)


def test_a_failing_job_in_a_list_fails_alone():
    releases = _releases(5)
    slurm = _ListSlurm(bad={"102"})
    report = apply_actions(releases, slurm, key=b"k" * 32)
    # 102's update failed: never released; the others went out in one list
    assert [j for j, _ in report.failed] == ["102"]
    assert ("release", ("100", "101", "103", "104")) in slurm.calls
    assert "102" not in report.released and len(report.released) == 4


def test_a_long_apply_stops_at_its_budget_and_leaves_the_rest_for_a_fresh_read():
    from slurm_mig.daemon.daemon import RELEASE_CHUNK

    clock = [0.0]
    slurm = _ListSlurm(tick=lambda: clock.__setitem__(0, clock[0] + 0.01))
    releases = _releases(4 * RELEASE_CHUNK)
    report = apply_actions(releases, slurm, key=b"k" * 32, budget=1.0, elapsed=lambda: clock[0])
    # each slice costs RELEASE_CHUNK + 1 ticks of 10 ms: the second slice ends past 1 s
    assert len(report.released) == 2 * RELEASE_CHUNK
    assert report.cut == 2 * RELEASE_CHUNK and not report.failed
    assert all(v != "update" or ids[0] in report.released for v, ids in slurm.calls)


class _QueueSlurm(_ListSlurm):
    """squeue/sinfo over held jobs; a release makes a job pending (Slurm does not start
    it here); every write is counted."""

    def __init__(self, jobs: list[Job], nodes: list[str]) -> None:
        super().__init__()
        self.queue = {j.job_id: j for j in jobs}
        self.node_names = nodes

    def jobs(self, partition=None):
        return list(self.queue.values())

    def nodes(self, partition=None):
        return [node(n) for n in self.node_names]

    def _call(self, verb, ids):
        super()._call(verb, ids)
        from dataclasses import replace as _replace

        for jid in ids:
            if verb == "release":
                self.queue[jid] = _replace(self.queue[jid], held=False, reason="None")

    def update_job(self, job_id: str, **fields: str) -> None:
        from dataclasses import replace as _replace

        self._call("update", (job_id,))
        j = self.queue[job_id]
        self.queue[job_id] = _replace(
            j,
            admin_comment=fields.get("AdminComment", j.admin_comment),
            comment=fields.get("Comment", j.comment),
            required_nodes=fields.get("ReqNodeList", j.required_nodes),
            dependency=fields.get("Dependency", j.dependency).replace("0", "") or "",
        )


def test_a_cycle_cut_by_its_budget_reports_and_the_next_one_goes_on_from_a_fresh_read(
    tmp_path, monkeypatch
):
    from slurm_mig.config import load_config
    from slurm_mig.daemon import apply as apply_module

    monkeypatch.setattr(apply_module, "RELEASE_CHUNK", 2)
    nodes = {f"g{i}": ["A100-40GB"] * 2 for i in range(1, 5)}
    cfg = write_config(tmp_path, nodes, apply_budget=1e-6, metrics="", release_ahead=0.0)
    jobs = [job(str(i), reason="JobHeldUser", comment="mig:time=600,mem=4G") for i in range(1, 41)]
    slurm = _QueueSlurm(jobs, list(nodes))
    d = PlannerDaemon(load_config(cfg), slurm, None, load_key(tmp_path / "key"))
    first = d.run_cycle()
    status = json.loads((tmp_path / "state" / STATUS_FILE).read_text())
    assert first.apply.cut > 0 and status["cut"] == first.apply.cut
    assert len(first.apply.released) == 2  # one slice, then the budget was spent
    planned = set(first.result.released)
    released = set(first.apply.released)
    for _ in range(40):  # each cycle reads afresh and releases the next slice
        report = d.run_cycle()
        released |= set(report.apply.released)
        if not report.apply.cut:
            break
    assert planned <= released and not any(
        j.held for j in slurm.queue.values() if j.job_id in released
    )
    updates = sum(1 for v, _ in slurm.calls if v == "update")
    assert updates == len(released)  # one update per released job, no rewrites
    assert all(slurm.queue[j].admin_comment == "" for j in slurm.queue if j not in released)


class _Cut(_Clocked):
    """A daemon whose first cycles spent their apply budget."""

    def run_cycle(self):
        super().run_cycle()
        from types import SimpleNamespace

        return SimpleNamespace(apply=SimpleNamespace(cut=1 if len(self.times) < 3 else 0))


def test_a_cut_cycle_is_followed_at_once_not_after_the_cycle_time(tmp_path):
    from slurm_mig.config import load_config

    cfg = write_config(tmp_path, {"g1": ["A100-40GB"]}, cycle=5.0, metrics="")
    fake = FakeTime()
    daemon = _Cut(load_config(cfg), [], 4, fake)
    assert daemon.run() == 0
    gaps = [b - a for a, b in zip(daemon.times, daemon.times[1:])]
    assert gaps == [0.0, 0.0, pytest.approx(5.0 + MIN_GAP)], "cut cycles wait for nothing"


class _NoFiles:
    """squeue that fails as a process out of descriptors does, then recovers."""

    def __init__(self, failures: int) -> None:
        self.failures = failures

    def jobs(self, partition=None):
        if self.failures:
            self.failures -= 1
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))
        return []

    def nodes(self, partition=None):
        return [node("g1")]


@pytest.mark.parametrize("where", ["squeue", "after planning"])
def test_a_cycle_out_of_descriptors_fails_alone_and_the_next_one_runs(tmp_path, caplog, where):
    from slurm_mig.config import load_config

    cfg = write_config(tmp_path, {"g1": ["A100-40GB"]}, cycle=1.0, metrics="")
    fake = FakeTime()
    client = _NoFiles(1 if where == "squeue" else 0)
    daemon = PlannerDaemon(
        load_config(cfg), client, None, b"k" * 32, clock=fake.clock, wait=fake.wait
    )
    reports = []
    run_cycle, write_public = daemon.run_cycle, daemon._write_public

    def counted():
        try:
            reports.append(run_cycle())
        finally:
            if daemon.cycles >= 2:
                daemon.stop.set()
        return reports[-1]

    def public(report):
        if daemon.cycles == 1:
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))
        write_public(report)

    daemon.run_cycle = counted
    if where == "after planning":
        daemon._write_public = public
    caplog.set_level(logging.INFO, logger="slurm_mig.planner")
    assert daemon.run() == 0  # it did not exit with the error
    assert daemon.cycles == 2 and fake.now == pytest.approx(1001.0 + MIN_GAP)
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and errors[0].exc_info is None
    line = errors[0].getMessage()
    assert "cycle 1 failed: Too many open files (EMFILE)" in line and "LimitNOFILE" in line
    assert "\n" not in line
    assert reports[-1].error is None  # the next cycle ran through
    status = json.loads((tmp_path / "state" / STATUS_FILE).read_text())
    assert status["cycle"] == 2 and status["error"] is None


def test_a_failed_hold_keeps_this_cycles_releases_back():
    from slurm_mig.daemon.cycle import Hold

    # the held job may still hold the slices this cycle's plan gives to others
    slurm = _ListSlurm(bad={"9"})
    report = apply_actions([Hold("9", "not started"), *_releases(3)], slurm, key=b"k" * 32)
    assert [j for j, _ in report.failed] == ["9"]
    assert report.released == [] and report.skipped == 3
    assert not [c for c in slurm.calls if c[0] in ("update", "release")]


def test_a_job_released_ahead_of_a_job_whose_release_failed_stays_held():
    from dataclasses import replace as _replace

    first, second, other = _releases(3)
    ahead = _replace(second, after=(first.job_id,))  # waits for `first` on its slices
    slurm = _ListSlurm(bad={first.job_id})
    report = apply_actions([first, ahead, other], slurm, key=b"k" * 32)
    assert [j for j, _ in report.failed] == [first.job_id]
    assert report.released == [other.job_id] and report.skipped == 1
    assert ("release", (other.job_id,)) in slurm.calls


def test_the_daemon_builds_its_policies_once_per_run_not_per_cycle(tmp_path):
    """One policy per group of GPUs for the daemon's whole run, kept across cycles as
    the simulator keeps one (10 cycles, two GPU models: two built); a group whose GPUs
    change gets a fresh one, a group that stays keeps its own."""
    from slurm_mig.planner.baseline import Baseline
    from slurm_mig.planner.registry import PolicyInfo, register_policy, unregister_policy

    made: list[Baseline] = []

    def counted(**options):
        policy = Baseline(**options)
        made.append(policy)
        return policy

    register_policy(PolicyInfo("counted", "online", "Baseline, counted", ""), counted)
    try:
        nodes = {"gpu01": ["A100-40GB"], "gpu02": ["A30-24GB"]}
        cfg = load_config(write_config(tmp_path, nodes, algorithm="counted"))

        class Slurm:
            shown_nodes = [node("gpu01"), node("gpu02")]

            def jobs(self, partition=None):
                return [job("5", comment="mig:mem=4G,time=60")]

            def nodes(self, partition=None):
                return list(self.shown_nodes)

            def update_job(self, job_id, **fields):
                pass

            def release(self, *job_ids):
                pass

        slurm = Slurm()
        daemon = PlannerDaemon(cfg, slurm, None, b"k" * 32, clock=lambda: 2000.0)
        for _ in range(10):
            assert daemon.run_cycle().error is None
        assert len(made) == 2 == daemon.policies.built
        slurm.shown_nodes = [node("gpu01"), node("gpu02", "DOWN")]
        daemon.run_cycle()
        slurm.shown_nodes = [node("gpu01"), node("gpu02")]
        daemon.run_cycle()
        assert len(made) == 3  # gpu02's group anew; gpu01's kept throughout
    finally:
        unregister_policy("counted")
