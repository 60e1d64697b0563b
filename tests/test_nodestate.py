"""Node-local hook records: round trips, modes the TaskProlog can read, atomic writes,
the node lock, and unreadable records reported instead of raised."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time

import pytest

from slurm_mig.geometry import Placement
from slurm_mig.slurm.nodestate import (
    JobRecord,
    KeptInstance,
    NodeState,
    NodeStateError,
    Refusal,
)

REC = JobRecord(
    job_id="42",
    restart=1,
    gpu=1,
    profile="3g.20gb",
    placement=Placement(4, 4),
    uuid="MIG-0d1f1c1e-0000-4000-8000-000000000042",
    created=1000.5,
    ready=1000.75,
    reused=False,
    keep_for="43",
)


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_job_record_round_trip_and_file_layout(tmp_path):
    state = NodeState(tmp_path / "run" / "node1")
    assert state.job("42") is None
    state.put_job(REC)
    assert state.job("42") == REC
    assert state.jobs() == [REC]
    path = tmp_path / "run" / "node1" / "jobs" / "42.json"
    data = json.loads(path.read_text())
    assert data["placement"] == {"start": 4, "size": 4}
    assert data["uuid"] == REC.uuid and data["keep_for"] == "43"
    assert state.remove_job("42") is True
    assert state.remove_job("42") is False
    assert state.job("42") is None


def test_records_are_readable_by_everyone_whatever_the_umask(tmp_path):
    old = os.umask(0o077)
    try:
        state = NodeState(tmp_path / "run" / "node1")
        state.put_job(REC)
        state.put_refusal(Refusal("7", "fail", "forged"))
    finally:
        os.umask(old)
    for d in ("run", "run/node1", "run/node1/jobs", "run/node1/refused"):
        assert _mode(tmp_path / d) == 0o755, d
    assert _mode(tmp_path / "run/node1/jobs/42.json") == 0o644
    assert _mode(tmp_path / "run/node1/refused/7.json") == 0o644


def test_writes_leave_no_temporary_files(tmp_path):
    state = NodeState(tmp_path)
    for i in range(5):
        state.put_job(JobRecord(**{**REC.__dict__, "ready": float(i)}))
    assert [p.name for p in (tmp_path / "jobs").iterdir()] == ["42.json"]
    assert state.job("42").ready == 4.0


def test_refusal_round_trip_and_action_checked(tmp_path):
    state = NodeState(tmp_path)
    r = Refusal("42", "requeue", "slices still in use by job 41")
    state.put_refusal(r)
    assert state.refusal("42") == r
    assert state.remove_refusal("42") and state.refusal("42") is None
    with pytest.raises(ValueError, match="action"):
        Refusal("42", "retry", "x")


def test_kept_instances_with_old_style_uuids(tmp_path):
    state = NodeState(tmp_path)
    old_style = "MIG-GPU-5c9d/1/0"  # drivers before R470 named MIG devices like this
    k1 = KeptInstance(0, "1g.5gb", Placement(6, 1), old_style, "43", 2000.0, created=1000.0)
    k2 = KeptInstance(1, "7g.40gb", Placement(0, 8), "MIG-abc", None, 1500.0)
    state.put_kept(k1)
    state.put_kept(k2)
    assert sorted(state.kept(), key=lambda k: k.gpu) == [k1, k2]
    assert all("/" not in p.name for p in (tmp_path / "kept").iterdir())
    assert state.remove_kept(old_style)
    assert state.kept() == [k2]


def test_unreadable_records_are_reported_and_skipped(tmp_path):
    warnings: list[str] = []
    state = NodeState(tmp_path, warn=warnings.append)
    state.put_job(REC)
    (tmp_path / "jobs" / "43.json").write_text("{not json")
    (tmp_path / "jobs" / "44.json").write_text(json.dumps({"job_id": "44"}))
    assert state.jobs() == [REC]
    assert state.job("43") is None
    assert len(warnings) == 3
    assert "43.json is not a valid record" in warnings[0]
    assert "44.json" in warnings[1]


def test_names_that_are_not_plain_file_names_are_rejected(tmp_path):
    state = NodeState(tmp_path)
    for bad in ("../etc/passwd", ".hidden", "", "a/b"):
        with pytest.raises(ValueError, match="not a plain file name"):
            state.job(bad)


def test_runtime_lines_are_appended(tmp_path):
    state = NodeState(tmp_path)
    state.append_runtime({"job_id": "1", "seconds": 1.5})
    state.append_runtime({"job_id": "2", "seconds": 2.5})
    lines = state.runtimes_path.read_text().splitlines()
    assert [json.loads(x)["job_id"] for x in lines] == ["1", "2"]


def test_lock_is_exclusive_across_processes(tmp_path):
    state = NodeState(tmp_path / "run")
    probe = (
        "import fcntl, os, sys\n"
        "fd = os.open(sys.argv[1], os.O_RDWR)\n"
        "try:\n"
        "    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
        "    print('free')\n"
        "except BlockingIOError:\n"
        "    print('held')\n"
    )
    lock = str(tmp_path / "run" / "lock")
    with state.lock():
        held = subprocess.run([sys.executable, "-c", probe, lock], capture_output=True, text=True)
    after = subprocess.run([sys.executable, "-c", probe, lock], capture_output=True, text=True)
    assert held.stdout.strip() == "held"
    assert after.stdout.strip() == "free"


def test_lock_waits_for_the_holder(tmp_path):
    state = NodeState(tmp_path)
    state.put_job(REC)  # creates the directory
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time\n"
            "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\n"
            "print('locked', flush=True)\n"
            "time.sleep(0.5)\n",
            str(tmp_path / "lock"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "locked"
    t0 = time.monotonic()
    with state.lock():
        waited = time.monotonic() - t0
    holder.wait()
    assert waited >= 0.3


def test_unwritable_run_dir_names_the_path(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    state = NodeState(blocker / "run")
    with pytest.raises(NodeStateError, match=str(blocker)):
        state.put_job(REC)
