"""A node that failed must not make the planner loop (issue 39): a job record a node
still reports for a job that is not running there keeps its slices unplanned
(`cycle.stale`); a job requeued twice in a row from one slot is not planned there again
(`cycle.refused`); and the log says what is true after a takeover or while the state
directory is full."""

from __future__ import annotations

import errno
import logging

import pytest
from support import FakeClock, squeue_job, write_config

from slurm_mig.config import load_config
from slurm_mig.daemon.apply import apply_actions
from slurm_mig.daemon.cycle import (
    CycleInput,
    Estimate,
    Hold,
    Learn,
    NodeRecord,
    Refusals,
    Release,
    admin_comment_for,
    plan_cycle,
    requeued_by_slurm,
    requeued_runs,
)
from slurm_mig.daemon.cycle.backoff import backoff_delay
from slurm_mig.daemon.cycle.refused import REFUSED, slot_key
from slurm_mig.daemon.cycle.stale import STALE_GRACE, STALE_PREFIX, stale_why
from slurm_mig.daemon.liveness import StopEvent
from slurm_mig.daemon.public import public_reason
from slurm_mig.geometry import Placement
from slurm_mig.slurm.assignment import Assignment
from slurm_mig.slurm.jobrecord import parse_admin_comment

T0 = 1_700_000_000.0
ONE = {"gpu01": ("A100-40GB",)}
TWO = {"gpu01": ("A100-40GB", "A100-40GB")}
WHOLE = Placement(0, 8)  # 7g.40gb


def snapshot(jobs, nodes=ONE, **kw) -> CycleInput:
    """The jobs as squeue shows them, each able to run on a whole A100 only."""
    est = {j.job_id: Estimate("train", {"A100-40GB": {7: 200.0}}, owner="alice") for j in jobs}
    opts = {"now": T0, "batch_window": 0.0, "nodes": nodes, **kw}
    return CycleInput(jobs=tuple(jobs), estimates=est, **opts)


def releases(result) -> list[Release]:
    return [a for a in result.actions if isinstance(a, Release)]


def record(job_id="1", restart=0, gpu=0, ready=T0 - 900.0) -> NodeRecord:
    return NodeRecord("gpu01", gpu, job_id, restart, "7g.40gb", WHOLE, ready)


def finished(job_id="1", ended=T0 - 600.0):
    return squeue_job(
        job_id, state="COMPLETED", held=False, reason="None", nodes="gpu01",
        start_time=ended - 60.0, end_time=ended, exit_code=0,
    )  # fmt: skip


# --- 1. stale node records ---------------------------------------------------------


@pytest.mark.parametrize(
    "job,stale",
    [
        (None, "Slurm no longer shows job 1"),
        (finished(), "Slurm shows job 1 COMPLETED"),
        (finished(ended=T0 - STALE_GRACE / 2), None),  # its Epilog's report may be on its way
        (squeue_job("1", restart_count=1), "job 1 was requeued since"),
        (squeue_job("1", state="RUNNING", held=False, nodes="gpu02"), "runs on gpu02"),
        (squeue_job("1", state="RUNNING", held=False, nodes="gpu[01-02]"), None),
        (squeue_job("1", state="COMPLETING", held=False, nodes="gpu01"), None),
    ],
)
def test_a_record_is_stale_when_its_job_is_not_running_on_its_node(job, stale):
    why = stale_why(record(), job, T0)
    assert (why is None) if stale is None else (stale in why)


def test_a_stale_record_keeps_its_slices_from_being_planned_until_the_node_drops_it():
    jobs = [finished("1"), squeue_job("2")]
    free = plan_cycle(snapshot(jobs))
    assert [r.job_id for r in releases(free)] == ["2"]  # Slurm alone: the GPU is free
    got = plan_cycle(snapshot(jobs, node_records=(record("1"),)))
    assert releases(got) == []  # the Prolog would refuse it: slices still in use by job 1
    [(sid, why)] = got.stale.items()
    assert sid.startswith(STALE_PREFIX)
    assert "gpu01 gpu 0" in why and "job 1" in why and "next report" in why
    # the node's next report drops the record: planned there again
    assert [r.job_id for r in releases(plan_cycle(snapshot(jobs)))] == ["2"]


def test_a_stale_record_sends_the_job_to_another_gpu_never_after_it():
    jobs = [finished("1"), squeue_job("2")]
    got = plan_cycle(snapshot(jobs, nodes=TWO, node_records=(record("1"),), release_ahead=600.0))
    [rel] = releases(got)
    assert rel.assignment.gpu == 1 and rel.after == ()
    for a in got.planned.values():  # no plan reuses or waits for a stale instance
        assert not str(a.reuse_from or "").startswith(STALE_PREFIX)
    for action in got.actions:
        assert not any(str(x).startswith(STALE_PREFIX) for x in getattr(action, "after", ()))


def test_a_record_of_a_running_job_is_not_stale():
    a = Assignment("1", 0, "gpu01", 0, "A100-40GB", "7g.40gb", WHOLE, 0, 0, 300.0, T0 - 60)
    running = squeue_job(
        "1", state="RUNNING", held=False, reason="None", nodes="gpu01",
        start_time=T0 - 60, admin_comment=admin_comment_for(a),
    )  # fmt: skip
    got = plan_cycle(snapshot([running, squeue_job("2")], node_records=(record("1"),)))
    assert got.stale == {} and releases(got) == []  # busy on its own record


# --- 2. back-off from a slot its node refuses --------------------------------------


def requeued(jid: str, a: Assignment):
    """Job ``jid`` requeued and held by its TaskProlog after its release as ``a``."""
    return squeue_job(
        jid, reason="JobHeldUser", restart_count=a.restart + 1, admin_comment=admin_comment_for(a)
    )


def test_two_requeues_in_a_row_from_one_slot_bar_it_for_a_doubling_while():
    r = Refusals()
    a0 = Assignment("7", 0, "gpu01", 0, "A100-40GB", "7g.40gb", WHOLE, 0, 0, 60.0, T0)
    a1 = Assignment("7", 1, "gpu01", 0, "A100-40GB", "7g.40gb", WHOLE, 0, 0, 60.0, T0)
    assert r.update({"7": a0}, {"7"}, T0) == [] and r.avoid(T0) == {}
    assert r.update({"7": a0}, {"7"}, T0 + 1) == []  # the same requeue seen again: once
    [line] = r.update({"7": a1}, {"7"}, T0 + 2)
    assert line.startswith(f"job 7: {REFUSED} 2 times in a row on gpu01 gpu 0 7g.40gb@0")
    assert slot_key(a1) in r.avoid(T0 + 2)["7"]
    assert r.avoid(T0 + 2 + backoff_delay(1)) == {}  # tried there again after a while
    a2 = Assignment("7", 2, "gpu01", 0, "A100-40GB", "7g.40gb", WHOLE, 0, 0, 60.0, T0)
    r.update({"7": a2}, {"7"}, T0 + 100)  # refused again: barred twice as long
    assert "7" in r.avoid(T0 + 100 + backoff_delay(1) + 1)
    r.update({}, set(), T0 + 200)  # gone from squeue: forgotten
    assert r.avoid(T0 + 200) == {}


def test_a_requeue_by_slurm_itself_is_no_refusal_and_ends_a_row():
    """Slurm requeues a node's jobs when it declares it down (NODE_FAIL): the job comes
    back pending and not held, which a hook's refusal (requeue and hold at once) never
    does. Seen on 22.05: that requeue and the next one barred the slot for a minute."""
    r = Refusals()
    runs = [
        Assignment("7", n, "gpu01", 0, "A100-40GB", "7g.40gb", WHOLE, 0, 0, 60.0, T0)
        for n in range(3)
    ]
    by_slurm = squeue_job(
        "7", held=False, reason="None", restart_count=1, admin_comment=admin_comment_for(runs[0])
    )
    assert slot_key(requeued_by_slurm([by_slurm])["7"]) == slot_key(runs[0])
    assert requeued_runs([by_slurm]) == {}  # not held
    held = requeued("7", runs[0])  # held by the planner since: seen by both the next cycle
    assert r.update(requeued_runs([held]), {"7"}, T0, requeued_by_slurm([by_slurm])) == []
    assert r.update({"7": runs[1]}, {"7"}, T0 + 60) == []  # a refusal: one in a row
    assert r.avoid(T0 + 60) == {}
    [line] = r.update({"7": runs[2]}, {"7"}, T0 + 70)
    assert line.startswith(f"job 7: {REFUSED} 2 times in a row on gpu01")
    assert requeued_by_slurm([requeued("7", runs[2])]) == {}  # held: not Slurm's own


def _loop(nodes, cycles=8):
    """Cycles where the node refuses every release (the TaskProlog requeues and holds
    it): the slots the job was released on, in order."""
    refusals, clock = Refusals(), FakeClock(T0)
    job, slots = squeue_job("7", reason="JobHeldUser"), []
    for _ in range(cycles):
        now = clock.time()
        refusals.update(requeued_runs([job]), {"7"}, now)  # the daemon, before it plans
        result = plan_cycle(snapshot([job], nodes=nodes, now=now, refused=refusals.avoid(now)))
        got = releases(result)
        if got:
            slots.append(slot_key(got[0].assignment))
            record_ = parse_admin_comment(dict(got[0].fields)["AdminComment"])
            job = requeued("7", record_)
        clock.sleep(5.0)
    return slots, result


def test_a_refused_placement_is_released_at_most_twice_in_a_row_then_elsewhere():
    slots, _ = _loop(TWO)
    assert len(slots) >= 4
    for i in range(len(slots) - 2):
        assert not slots[i] == slots[i + 1] == slots[i + 2], slots
    assert {s[1] for s in slots} == {0, 1}  # the other GPU was tried


def test_with_no_other_slot_a_refused_job_waits_with_a_reason_explain_shows():
    slots, last = _loop(ONE)
    assert len(slots) == 2  # twice, then not in a loop (the back-off is 60 s)
    why = last.deferred["7"]
    assert why.startswith(REFUSED) and "no other free 7g.40gb slot" in why
    assert "7" not in last.planned
    assert public_reason(why).startswith("its node refused its planned slices twice")


# --- 3. log lines that say what is true --------------------------------------------


def _owner_held(jid_dep: str = "5"):
    """Job 5, released ahead of job 4 on gpu01 gpu 0 (its record, the planner's
    afterany), still held: its release never went out, or its owner held it again."""
    a4 = Assignment("4", 0, "gpu01", 0, "A100-40GB", "7g.40gb", WHOLE, 0, 0, 300.0, T0 - 30)
    a5 = Assignment("5", 0, "gpu01", 0, "A100-40GB", "7g.40gb", WHOLE, 0, 1, 300.0, T0 - 30)
    running = squeue_job(
        "4", state="RUNNING", held=False, reason="None", nodes="gpu01",
        start_time=T0 - 30, admin_comment=admin_comment_for(a4),
    )  # fmt: skip
    held = squeue_job(
        jid_dep, reason="JobHeldUser", admin_comment=admin_comment_for(a5),
        dependency="afterany:4(unfulfilled)",
    )  # fmt: skip
    return [running, held]


@pytest.mark.parametrize(
    "sent,reason",
    [
        (None, "held by its owner after release"),
        (frozenset({"5"}), "held by its owner after release"),
        (frozenset(), "plan written by an earlier planner, release not sent"),
    ],
)
def test_a_plan_written_but_not_released_is_not_called_held_by_its_owner(sent, reason):
    got = plan_cycle(snapshot(_owner_held(), sent=sent))
    [hold] = [a for a in got.actions if isinstance(a, Hold) and a.job_id == "5"]
    assert hold.reason.startswith(reason) and hold.clear_dependency


class _Client:
    def __init__(self) -> None:
        self.calls: list = []

    def hold_jobs(self, ids):
        self.calls.append(("hold", list(ids)))
        return {}

    def update_job(self, job_id, **fields):
        self.calls.append(("update", job_id))


def test_an_unconfirmed_lease_sends_nothing_and_does_not_say_stopping(caplog):
    stop = StopEvent()
    stop.guard = lambda: False  # the lease could not be renewed (state_dir full)
    client = _Client()
    with caplog.at_level(logging.DEBUG, logger="slurm_mig.planner"):
        report = apply_actions([Hold("1", "not planned yet")], client, key=b"k" * 32, stop=stop)
    assert client.calls == [] and report.skipped == 1
    assert not any("stopping" in r.getMessage() for r in caplog.records)
    stop.guard = None
    stop.set()  # SIGTERM: that is stopping
    with caplog.at_level(logging.INFO, logger="slurm_mig.planner"):
        apply_actions([Hold("1", "x")], client, key=b"k" * 32, stop=stop)
    assert any("stopping: 1 actions left" in r.getMessage() for r in caplog.records)


class _FullStore:
    def record_overrun(self, *a, **k):
        return False

    def record(self, *a, **k):
        raise OSError(errno.ENOSPC, "database or disk is full")


def test_an_unstored_runtime_is_logged_at_error_once_not_every_cycle(caplog):
    learn = Learn("9", 0, "train", "A100-40GB", 7, 120.0, T0, "alice")
    unstored: set = set()
    with caplog.at_level(logging.DEBUG, logger="slurm_mig.planner"):
        for _ in range(3):
            report = apply_actions(
                [learn], _Client(), key=b"k" * 32, store=_FullStore(), unstored=unstored
            )
            assert report.stored == []
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "not recorded" in errors[0].getMessage()
    apply_actions([], _Client(), key=b"k" * 32, store=_FullStore(), unstored=unstored)
    assert unstored == set()  # no longer offered: forgotten


class _Liveness:
    def not_allowed(self) -> str:
        return "the planner lease could not be renewed (No space left on device)"


def test_status_not_written_says_why_once_and_not_that_the_lease_is_anothers(tmp_path, caplog):
    from slurm_mig.daemon.daemon import PlannerDaemon

    cfg = load_config(write_config(tmp_path, {"g1": ["A100-40GB"]}, metrics=""))
    daemon = PlannerDaemon(cfg, client=None, store=None, key=b"k" * 32)
    daemon.liveness = _Liveness()
    daemon.stop.guard = lambda: False
    with caplog.at_level(logging.INFO, logger="slurm_mig.planner"):
        for n in range(3):
            daemon._write_status(daemon._report(T0 + n, None, None, None))
        daemon.stop.guard = None
        daemon._write_status(daemon._report(T0 + 9, None, None, None))
    said = [r.getMessage() for r in caplog.records]
    assert not any("not ours" in s for s in said), said
    assert sum("could not be renewed (No space left on device)" in s for s in said) == 1
    assert any("status written again" in s for s in said)
    assert daemon.status_path().exists()


# --- the daemon: node reports in, refusals counted, once-only log lines ------------


class _Slurm:
    def __init__(self, shown) -> None:
        self.shown = shown

    def jobs(self, partition=None):
        return list(self.shown)

    def nodes(self, partition=None):
        from support import node

        return [node("gpu01", "MIXED")]


def _daemon(tmp_path, shown):
    import io

    from slurm_mig.daemon.daemon import PlannerDaemon

    cfg = load_config(
        write_config(tmp_path, {"gpu01": ["A100-40GB"]}, metrics="", reports="127.0.0.1:9")
    )
    slurm, out = _Slurm(shown), io.StringIO()
    clock = FakeClock(T0)
    daemon = PlannerDaemon(cfg, slurm, None, b"k" * 32, dry_run=True, out=out, clock=clock.time)
    return daemon, slurm, out, clock


def test_the_daemon_reads_the_nodes_reports_and_logs_a_stale_record_once(tmp_path, caplog):
    from slurm_mig.daemon.receiver import ReportDB
    from slurm_mig.node.nodestate import JobRecord

    daemon, slurm, out, clock = _daemon(tmp_path, [finished("1"), squeue_job("2")])
    rec = JobRecord("1", 0, 0, "7g.40gb", WHOLE, "MIG-x", T0 - 900, T0 - 900, False)
    body = {"id": "i", "node": "gpu01", "kind": "instances", "digest": "d", "seq": 1,
            "at": T0 - 900, "data": {"jobs": [rec.to_json()], "kept": []}}  # fmt: skip
    assert ReportDB(daemon.config.state_dir).store([body], now=T0 - 900) == [None]
    with caplog.at_level(logging.WARNING, logger="slurm_mig.planner"):
        for _ in range(2):
            report = daemon.run_cycle()
            clock.sleep(5.0)
    assert "job 2: released" not in out.getvalue()
    said = [r.getMessage() for r in caplog.records if "still holds the instance" in r.getMessage()]
    assert len(said) == 1 and "job 1" in said[0]
    assert len(report.to_json()["stale"]) == 1
    text = daemon.metrics.text().decode()
    assert 'slurm_mig_planner_stale_node_records{node="gpu01"} 1.0' in text


def test_a_stale_record_of_a_run_the_planner_moved_up_is_logged_as_info(tmp_path, caplog):
    """A run the planner requeued to move its job up (`Requeue.at_least`) leaves its
    node's record until the next report: expected, so INFO, not a WARNING per move."""
    from slurm_mig.daemon.receiver import ReportDB
    from slurm_mig.node.nodestate import JobRecord

    daemon, slurm, out, clock = _daemon(tmp_path, [finished("1")])
    daemon.moved_up = {"1": (1, 7)}
    rec = JobRecord("1", 0, 0, "7g.40gb", WHOLE, "MIG-x", T0 - 900, T0 - 900, False)
    body = {"id": "i", "node": "gpu01", "kind": "instances", "digest": "d", "seq": 1,
            "at": T0 - 900, "data": {"jobs": [rec.to_json()], "kept": []}}  # fmt: skip
    assert ReportDB(daemon.config.state_dir).store([body], now=T0 - 900) == [None]
    with caplog.at_level(logging.INFO, logger="slurm_mig.planner"):
        daemon.run_cycle()
    said = [r for r in caplog.records if "still holds the instance" in r.getMessage()]
    assert [r.levelno for r in said] == [logging.INFO]


def test_the_daemon_bars_a_slot_after_two_requeues_from_it_before_planning(tmp_path, caplog):
    a0 = Assignment("7", 0, "gpu01", 0, "A100-40GB", "7g.40gb", WHOLE, 0, 0, 60.0, T0)
    daemon, slurm, out, clock = _daemon(tmp_path, [requeued("7", a0)])
    daemon.run_cycle()
    assert "job 7: released on gpu01 gpu 0 7g.40gb@0" in out.getvalue()  # tried once more
    slurm.shown = [requeued("7", Assignment(**{**a0.__dict__, "restart": 1}))]
    clock.sleep(5.0)
    out.truncate(0)
    with caplog.at_level(logging.WARNING, logger="slurm_mig.planner"):
        report = daemon.run_cycle()
    assert "released" not in out.getvalue()  # not a third time in a row
    assert report.result.deferred["7"].startswith(REFUSED)
    assert any(REFUSED in r.getMessage() for r in caplog.records)
    assert "slurm_mig_planner_refused_slots 1.0" in daemon.metrics.text().decode()
