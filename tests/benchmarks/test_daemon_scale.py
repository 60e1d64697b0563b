"""The measuring parts of benchmarks/daemon_scale.py without a Slurm: sdiag parsing, the
job mix's hints, the timing proxy (also for client methods it does not know), the cycle
split from the daemon's log record and the status-file gap."""

from __future__ import annotations

import importlib.util
import logging
import sys
from pathlib import Path
from types import SimpleNamespace

from slurm_mig.daemon.cycle import admin_comment_for
from slurm_mig.geometry import Placement
from slurm_mig.hints import parse_hints
from slurm_mig.slurm.assignment import Assignment

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "daemon_scale", ROOT / "benchmarks" / "daemon_scale.py"
)
scale = importlib.util.module_from_spec(_spec)
sys.modules["daemon_scale"] = scale
_spec.loader.exec_module(scale)

SDIAG = """\
*******************************************************
sdiag output at Wed Nov 25 18:40:00 2026 (1764096000)
Server thread count:  1
Remote Procedure Call statistics by message type
	REQUEST_UPDATE_JOB                      ( 3001) count:800    ave_time:764    total_time:611200
	REQUEST_JOB_INFO                        ( 2003) count:63     ave_time:2687   total_time:169281
	MESSAGE_EPILOG_COMPLETE                 ( 6012) count:200    ave_time:689    total_time:137800

Remote Procedure Call statistics by user
	root            (       0) count:1063   ave_time:862    total_time:918281
"""


def test_parse_sdiag_reads_the_message_types_only():
    got = scale.parse_sdiag(SDIAG)
    assert got == {
        "REQUEST_UPDATE_JOB": (800, 764.0),
        "REQUEST_JOB_INFO": (63, 2687.0),
        "MESSAGE_EPILOG_COMPLETE": (200, 689.0),
    }
    assert scale.parse_sdiag("") == {}


def test_job_mix_hints_parse_and_cover_every_size():
    comments = [scale.job_comment(i, 5) for i in range(10)]
    hints = [parse_hints(c) for c in comments]
    assert {h.key for h in hints} == {key for key, _, _ in scale.MIX}
    assert all(h.time == 5 for h in hints)
    assert sorted(h.mem for h in hints) == sorted(
        [4 << 30] * 4 + [8 << 30] * 3 + [16 << 30] * 2 + [32 << 30]
    )


class FakeClient:
    version_seen = (22, 5)

    def jobs(self, partition=None):
        held = SimpleNamespace(
            job_id="1", state="PENDING", held=True, admin_comment="", finished=False
        )
        done = SimpleNamespace(
            job_id="2", state="COMPLETED", held=False, admin_comment="", finished=True
        )
        return [held, done]

    def nodes(self, partition=None):
        return []

    def release_many(self, job_ids):  # a method a later client may have
        return len(job_ids)


def test_proxy_splits_reads_writes_and_tracks_jobs():
    tracker = scale.Tracker()
    client = scale.TimingClient(FakeClient(), tracker)
    assert client.version_seen == (22, 5)  # attributes pass through
    client.jobs("mig")
    client.nodes()
    assert client.release_many(["1", "3"]) == 2
    scale.CycleLog(tracker).emit(
        logging.LogRecord(
            "slurm_mig.planner", logging.INFO, "", 0, "cycle %d done in %.2f s: x", (1, 0.5), None
        )
    )
    (c,) = tracker.cycles
    assert (c.number, c.seconds, c.reads, c.writes, c.jobs_seen, c.unplanned) == (
        1,
        0.5,
        2,
        1,
        2,
        1,
    )
    assert c.busy and c.other >= 0
    assert tracker.calls == {"jobs": 1, "nodes": 1, "release_many": 1}
    assert set(tracker.released_at) == {"1", "2", "3"}  # by the call, or squeue's state
    assert set(tracker.done_at) == {"2"} and tracker.completed == {"2"}


def test_update_with_an_assignment_counts_as_planned():
    tracker = scale.Tracker()

    class Writer:
        def update_job(self, job_id, **fields):
            pass

    client = scale.TimingClient(Writer(), tracker)
    client.update_job("7", Comment="x")
    assert "7" not in tracker.planned_at
    client.update_job("7", AdminComment="not an assignment")
    assert "7" not in tracker.planned_at
    a = Assignment("7", 0, "node1", 0, "A100-40GB", "3g.20gb", Placement(4, 4), 0, 0, 60.0, 1.0)
    client.update_job("7", AdminComment=admin_comment_for(a))
    assert "7" in tracker.planned_at and "7" not in tracker.released_at


def test_status_gap_counts_from_the_start_and_to_the_end(tmp_path):
    watch = scale.StatusWatch(tmp_path / "planner-status.json")
    watch.writes = [(1, 103.0), (2, 104.0), (3, 110.0)]
    assert watch.longest_gap(100.0, 111.0) == (6.0, 3)
    assert watch.longest_gap(100.0, 120.0) == (10.0, 0)  # still open at the end
    watch.writes = []
    assert watch.longest_gap(100.0, 101.5) == (1.5, 0)


def test_quiet_cycles_are_split_by_whether_they_re_planned():
    """A cycle without writes that re-planned for an event (a job running late) is
    told apart from one with nothing new: the daemon's log line says which."""
    tracker = scale.Tracker()
    log = scale.CycleLog(tracker)
    for number, tail in ((1, ""), (2, "; re-planned: job 7 runs late"), (3, "")):
        record = logging.LogRecord(
            "slurm_mig.planner",
            logging.INFO,
            "",
            0,
            "cycle %d done in %.2f s: x%s",
            (number, 0.25 * number, tail),
            None,
        )
        log.emit(record)
    rows = dict(scale.split_rows(tracker.cycles))
    assert [c.number for c in rows["steady (no writes)"]] == [1, 2, 3]
    assert [c.number for c in rows["  of them re-planning"]] == [2]
    assert [c.number for c in rows["  of them nothing new"]] == [1, 3]


def test_requeue_counts_read_each_nodes_own_hooks_log_and_slurmctlds(tmp_path):
    shared = tmp_path / "log" / "slurm-mig.log"
    shared.parent.mkdir()
    shared.write_text("prolog job 1: ok\n")
    own = {}
    for node in ("node1", "node2"):
        own[node] = tmp_path / node / "slurm-mig.log"
        own[node].parent.mkdir()
    own["node1"].write_text(f"prolog job 2: gpu 0 lock {scale.LOCK_MESSAGE} 60 s\n" * 2)
    own["node2"].write_text(f"epilog job 3: {scale.LOCK_MESSAGE}\nprolog job 4: ok\n")
    lc = SimpleNamespace(log_file=shared, nodes=("node1", "node2"), node_path=lambda n, p: own[n])
    logs = scale._hook_logs(lc)
    assert set(logs) == {shared.resolve(), own["node1"].resolve(), own["node2"].resolve()}
    assert sum(scale._lines(p, scale.LOCK_MESSAGE) for p in logs) == 3
    ctld = tmp_path / "slurmctld.log"
    ctld.write_text(
        "[t] Batch JobId=37 missing from batch node node3 (not found BatchStartTime "
        "after startup), Requeuing job\n[t] _job_complete: JobId=37 done\n"
    )
    assert scale._lines(ctld, scale.BATCH_MISSING) == 1
    assert scale._lines(tmp_path / "absent.log", scale.BATCH_MISSING) == 0


def test_a_node_without_a_log_of_its_own_is_read_once(tmp_path):
    shared = tmp_path / "slurm-mig.log"
    lc = SimpleNamespace(log_file=shared, nodes=("a", "b"), node_path=lambda n, p: p)
    assert scale._hook_logs(lc) == [shared.resolve()]
