"""Node-local hook records: round trips, root-only modes (and the one file the job's
user may read), atomic writes, the locks (one per GPU, a short node lock, the version
gate; root-only, bounded wait), the runtime log (tail reads, rotation, a full disk), and
unreadable records reported instead of raised."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest
from support import FakeClock, fill_disk, open_tmp_dir

from slurm_mig.geometry import Placement
from slurm_mig.node import nodestate
from slurm_mig.node.nodestate import (
    JobRecord,
    KeptInstance,
    LockBusyError,
    NodeState,
    NodeStateError,
    Refusal,
)

OTHER_UID = 4242  # a user who is neither root nor the job's owner
SYSTEM_PYTHON = "/usr/bin/python3"  # reachable by any user (the venv's may sit under /root)
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (chown, other users)")

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
    path = tmp_path / "run" / "node1" / "private" / "jobs" / "42.json"
    data = json.loads(path.read_text())
    assert data["placement"] == {"start": 4, "size": 4}
    assert data["uuid"] == REC.uuid and data["keep_for"] == "43"
    assert state.remove_job("42") is True
    assert state.remove_job("42") is False
    assert state.job("42") is None


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o077])
def test_records_are_root_only_whatever_the_umask(tmp_path, umask):
    old = os.umask(umask)
    try:
        state = NodeState(tmp_path / "run" / "node1")
        state.put_job(REC)
        state.put_refusal(Refusal("7", "fail", "forged"))
        state.put_task(REC, uid=None)
        with state.lock(), state.gpu_lock(3):
            pass
        state.append_runtime({"job_id": "1"})
    finally:
        os.umask(old)
    run = tmp_path / "run" / "node1"
    assert _mode(run) == 0o711  # users may pass through to their own task record
    assert _mode(run / "private") == 0o700
    for d in ("jobs", "refused", "locks"):
        assert _mode(run / "private" / d) == 0o700, d
    for f in (
        "jobs/42.json",
        "refused/7.json",
        "lock",
        "locks/gpu3",
        "locks/node",
        "runtimes.jsonl",
    ):
        assert _mode(run / "private" / f) == 0o600, f
    assert _mode(run / "task") == 0o711
    assert _mode(run / "task" / "42.json") == 0o400


@as_root
def test_the_task_record_belongs_to_the_jobs_user_alone(tmp_path):
    state = NodeState(tmp_path / "run")
    state.put_task(REC, uid=OTHER_UID)
    state.put_task(Refusal("43", "requeue", "slices in use"), uid=OTHER_UID + 1)
    st = os.stat(tmp_path / "run" / "task" / "42.json")
    # root's, so the user can neither make it writable nor keep it with a hard link; the
    # user reads it by an ACL entry (the group bits show the ACL mask, r)
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, 0, 0o440)
    acl = os.getxattr(tmp_path / "run" / "task" / "42.json", "system.posix_acl_access")
    assert OTHER_UID.to_bytes(4, "little") in acl  # an ACL_USER entry for the job's user
    assert state.task("42") == REC
    assert state.task("43") == Refusal("43", "requeue", "slices in use")
    assert state.remove_task("42") and state.task("42") is None


def test_writes_leave_no_temporary_files(tmp_path):
    state = NodeState(tmp_path)
    for i in range(5):
        state.put_job(JobRecord(**{**REC.__dict__, "ready": float(i)}))
    assert [p.name for p in (tmp_path / "private" / "jobs").iterdir()] == ["42.json"]
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
    assert all("/" not in p.name for p in (tmp_path / "private" / "kept").iterdir())
    assert state.remove_kept(old_style)
    assert state.kept() == [k2]


def test_unreadable_records_are_reported_and_skipped(tmp_path):
    warnings: list[str] = []
    state = NodeState(tmp_path / "run", warn=warnings.append)
    state.put_job(REC)
    jobs = tmp_path / "run" / "private" / "jobs"
    (jobs / "43.json").write_text("{not json")
    (jobs / "44.json").write_text(json.dumps({"job_id": "44"}))
    (jobs / "45.json").write_text(json.dumps({**REC.to_json(), "ready": 10**400}))
    (jobs / "46.json").write_text("[" * 100_000 + "]" * 100_000)
    assert state.jobs() == [REC]
    assert state.job("43") is None
    assert len(warnings) == 5
    assert "43.json is not a valid record" in warnings[0]
    assert "44.json" in warnings[1]
    assert "45.json is not a valid record (OverflowError" in warnings[2]
    assert "46.json is not a valid record (RecursionError" in warnings[3]


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
    assert state.finished_jobs() == {"1", "2"}


def _fill_runtimes(state: NodeState, count: int, first: int = 0) -> None:
    state.runtimes_path.parent.mkdir(parents=True, exist_ok=True)
    with open(state.runtimes_path, "a") as f:
        f.writelines(
            json.dumps({"job_id": str(i), "seconds": 1.0}) + "\n"
            for i in range(first, first + count)
        )


def test_finished_jobs_reads_only_the_tail(tmp_path, monkeypatch):
    state = NodeState(tmp_path)
    _fill_runtimes(state, 200_000)  # about 6 MB
    reads: list[int] = []
    real_open = open

    class Counting:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def seek(self, *a):
            return self.f.seek(*a)

        def read(self, n=-1):
            data = self.f.read(n)
            reads.append(len(data))
            return data

    monkeypatch.setattr(
        nodestate, "open", lambda *a, **k: Counting(real_open(*a, **k)), raising=False
    )
    done = state.finished_jobs(last=1000)
    assert done == {str(i) for i in range(199_000, 200_000)}
    assert sum(reads) <= nodestate.TAIL_MAX_BYTES


def test_runtime_log_is_rotated_and_both_files_are_read(tmp_path, monkeypatch):
    monkeypatch.setattr(nodestate, "RUNTIMES_MAX_BYTES", 10_000)
    state = NodeState(tmp_path)
    for i in range(1000):
        state.append_runtime({"job_id": str(i), "seconds": 1.0})
    current = state.runtimes_path
    old = current.with_name("runtimes.jsonl.1")
    assert current.stat().st_size <= 10_100 and old.stat().st_size <= 10_100
    assert sorted(p.name for p in current.parent.iterdir() if "runtimes" in p.name) == [
        "runtimes.jsonl",
        "runtimes.jsonl.1",
    ]
    in_current = len(current.read_text().splitlines())
    # the last jobs are found across the rotation
    assert state.finished_jobs(last=in_current + 5) == {
        str(i) for i in range(1000 - in_current - 5, 1000)
    }
    # without the lock (rotate=False) the file only grows
    size = current.stat().st_size
    state.append_runtime({"job_id": "x"}, rotate=False)
    assert current.stat().st_size > size


@as_root
def test_a_full_disk_is_a_node_state_error(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)])
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        state = NodeState(disk / "run")
        state.append_runtime({"job_id": "1"})
        fill_disk(disk / "filler")
        with pytest.raises(
            NodeStateError,
            match="cannot write .*runtimes.jsonl: (No space left|short write: the disk is full)",
        ):
            state.append_runtime({"job_id": "2", "pad": "y" * 8192})
    finally:
        subprocess.run(["umount", str(disk)], check=True)


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
    lock = str(tmp_path / "run" / "private" / "lock")
    with state.lock():
        held = subprocess.run([sys.executable, "-c", probe, lock], capture_output=True, text=True)
    after = subprocess.run([sys.executable, "-c", probe, lock], capture_output=True, text=True)
    assert held.stdout.strip() == "held"
    assert after.stdout.strip() == "free"


def _hold_lock(path) -> subprocess.Popen:
    """Another process (a stuck hook) holding the lock until its stdin is closed."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys\n"
            "fd = os.open(sys.argv[1], os.O_RDWR)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\n"
            "print('locked', flush=True)\n"
            "sys.stdin.read()\n",
            str(path),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "locked"
    return holder


def _let_go(holder: subprocess.Popen) -> None:
    holder.stdin.close()
    holder.wait(timeout=30)  # its exit releases the flock


def test_lock_waits_for_the_holder(tmp_path, monkeypatch):
    state = NodeState(tmp_path)
    with state.lock():  # creates the lock file
        pass
    holder = _hold_lock(tmp_path / "private" / "lock")
    # the lock's clock: each poll takes no time; the holder lets go during the third
    clock = FakeClock(on_sleep=lambda c: len(c.slept) == 3 and _let_go(holder))
    monkeypatch.setattr(nodestate, "time", clock)
    try:
        with state.lock(timeout=10, poll=0.02):
            waited = clock.now
    finally:
        holder.kill()
        holder.wait()
    assert clock.slept == [0.02, 0.02, 0.02]  # tried while it was held, took it at once after
    assert waited == pytest.approx(0.06)


def test_lock_wait_is_bounded(tmp_path, monkeypatch):
    state = NodeState(tmp_path)
    with state.lock():
        pass
    holder = _hold_lock(tmp_path / "private" / "lock")  # never lets go
    clock = FakeClock(on_sleep=lambda c: c.now < 60 or pytest.fail("the wait never ends"))
    monkeypatch.setattr(nodestate, "time", clock)
    try:
        with pytest.raises(LockBusyError, match=r"not free within 0\.5 s .*lock_timeout"):
            with state.lock(timeout=0.5, poll=0.02):
                pass
    finally:
        holder.kill()
        holder.wait()
    # gave up at the first try past the timeout, having polled all along
    assert 0.5 <= clock.now <= 0.5 + 0.02 + 1e-9
    assert set(clock.slept) == {0.02}


@as_root
@pytest.mark.skipif(not os.path.exists(SYSTEM_PYTHON), reason=f"no {SYSTEM_PYTHON}")
def test_a_user_cannot_open_the_lock_or_read_the_records():
    # The attack: a job opened <run_dir>/lock (0644) read-only, flocked it and stalled
    # every hook of the node. Now the lock and the records are root's alone; the user
    # reaches only their own task record.
    with open_tmp_dir() as tmp:
        _user_probe(tmp / "run")


def _user_probe(run) -> None:
    state = NodeState(run)
    state.put_job(REC)
    state.put_task(REC, uid=OTHER_UID)
    state.put_task(JobRecord(**{**REC.__dict__, "job_id": "43"}), uid=None)
    with state.lock(), state.gpu_lock(1):
        pass
    probe = (
        "import fcntl, os, sys\n"
        "for op, path in zip(sys.argv[1::2], sys.argv[2::2]):\n"
        "    try:\n"
        "        if op == 'list':\n"
        "            os.listdir(path)\n"
        "        else:\n"
        "            fd = os.open(path, os.O_RDONLY)\n"
        "            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
        "        print('ok', path)\n"
        "    except OSError as exc:\n"
        "        print(errno.errorcode[exc.errno], path)\n"
    )
    tries = [
        ("open", run / "private" / "lock"),
        ("open", run / "private" / "locks" / "gpu1"),
        ("list", run / "private" / "locks"),
        ("open", run / "private" / "jobs" / "42.json"),
        ("list", run / "private"),
        ("list", run),
        ("list", run / "task"),
        ("open", run / "task" / "43.json"),  # another job's
        ("open", run / "task" / "42.json"),  # its own
    ]
    done = subprocess.run(
        [SYSTEM_PYTHON, "-c", "import errno\n" + probe, *(str(x) for t in tries for x in t)],
        capture_output=True,
        text=True,
        user=OTHER_UID,
        group=OTHER_UID,
        extra_groups=[],
        cwd="/",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        *(f"EACCES {path}" for _, path in tries[:-1]),
        f"ok {run / 'task' / '42.json'}",
    ]


@as_root
def test_a_lock_or_directory_of_another_owner_is_refused(tmp_path):
    state = NodeState(tmp_path / "run")
    with state.lock():
        pass
    lock = tmp_path / "run" / "private" / "lock"
    os.chown(lock, OTHER_UID, OTHER_UID)
    with pytest.raises(
        NodeStateError, match=f"unsafe lock file: {lock} is owned by uid {OTHER_UID}"
    ):
        with state.lock():
            pass
    lock.unlink()
    os.chown(tmp_path / "run" / "private", OTHER_UID, OTHER_UID)
    with pytest.raises(NodeStateError, match=f"owned by uid {OTHER_UID}, not root"):
        with state.lock():
            pass
    # a run_dir a user made beforehand (e.g. under /tmp) is refused, not used
    mine = tmp_path / "planted"
    mine.mkdir()
    os.chown(mine, OTHER_UID, OTHER_UID)
    with pytest.raises(NodeStateError, match=f"{mine} is owned by uid {OTHER_UID}"):
        NodeState(mine).put_job(REC)


@as_root
def test_a_gpu_lock_or_locks_directory_of_another_owner_is_refused(tmp_path):
    state = NodeState(tmp_path / "run")
    with state.gpu_lock(0):
        pass
    lock = tmp_path / "run" / "private" / "locks" / "gpu0"
    os.chown(lock, OTHER_UID, OTHER_UID)
    with pytest.raises(
        NodeStateError, match=f"unsafe lock file: {lock} is owned by uid {OTHER_UID}"
    ):
        with state.gpu_lock(0):
            pass
    lock.unlink()
    os.chown(lock.parent, OTHER_UID, OTHER_UID)
    with pytest.raises(NodeStateError, match=f"{lock.parent} is owned by uid {OTHER_UID}"):
        with state.gpu_lock(0):
            pass


def test_a_symlinked_gpu_lock_or_locks_directory_is_refused(tmp_path):
    state = NodeState(tmp_path / "run")
    with state.gpu_lock(0):
        pass
    locks = tmp_path / "run" / "private" / "locks"
    (locks / "gpu0").unlink()
    (locks / "gpu0").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(NodeStateError, match="cannot open the lock file"):
        with state.gpu_lock(0):
            pass
    locks.rename(tmp_path / "moved")
    locks.symlink_to(tmp_path / "moved")
    with pytest.raises(NodeStateError, match="is not a directory"):
        with state.gpu_lock(0):
            pass
    assert not (tmp_path / "elsewhere").exists()


class LockClock:
    """nodestate's clock for lock waits: each poll of a busy lock moves it on at once."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_gpu_locks_are_independent_and_each_is_exclusive(tmp_path, monkeypatch):
    clock = LockClock()
    monkeypatch.setattr(nodestate, "time", clock)
    state = NodeState(tmp_path / "run")
    with state.gpu_lock(0):
        with state.gpu_lock(1), state.node_lock():
            pass  # another GPU and the node lock are free meanwhile
        assert clock.now == 0.0
        with pytest.raises(LockBusyError, match=r"lock of gpu 0 .*gpu0 was not free within 5 s"):
            with state.gpu_lock(0, timeout=5):
                pass
        assert clock.now >= 5.0
        clock.now = 0.0
        with pytest.raises(LockBusyError, match="not free within 0 s"):
            with state.gpu_lock(0, timeout=0):  # a try-lock: one try, no wait
                pass
        assert clock.now == 0.0


def test_the_version_gate_is_shared_by_new_hooks_and_excludes_an_old_one(tmp_path, monkeypatch):
    monkeypatch.setattr(nodestate, "time", LockClock())
    state = NodeState(tmp_path / "run")
    with state.lock(shared=True), state.lock(shared=True):
        with pytest.raises(LockBusyError):
            with state.lock(timeout=1):  # a hook before the GPU locks takes it exclusively
                pass
    with state.lock():
        with pytest.raises(LockBusyError, match="the node's slurm-mig lock"):
            with state.lock(timeout=1, shared=True):
                pass


def test_a_symlinked_lock_or_private_dir_is_refused(tmp_path):
    state = NodeState(tmp_path / "run")
    with state.lock():
        pass
    lock = tmp_path / "run" / "private" / "lock"
    lock.unlink()
    lock.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(NodeStateError, match="cannot open the lock file"):
        with state.lock():
            pass
    lock.unlink()
    (tmp_path / "run" / "private").rename(tmp_path / "moved")
    (tmp_path / "run" / "private").symlink_to(tmp_path / "moved")
    with pytest.raises(NodeStateError, match="is not a directory"):
        with state.lock():
            pass


def test_too_open_modes_are_repaired_and_reported(tmp_path):
    warnings: list[str] = []
    state = NodeState(tmp_path / "run", warn=warnings.append)
    with state.lock():
        pass
    run = tmp_path / "run"
    (run / "private").chmod(0o755)
    (run / "private" / "lock").chmod(0o644)
    run.chmod(0o777)
    with state.lock():
        pass
    assert (_mode(run), _mode(run / "private"), _mode(run / "private" / "lock")) == (
        0o711,
        0o700,
        0o600,
    )
    assert warnings == [
        f"repaired: {run} had mode 0777; set it to 0711",
        f"repaired: {run / 'private'} had mode 0755; set it to 0700",
        f"repaired: {run / 'private' / 'lock'} had mode 0644; set it to 0600",
    ]


def test_records_of_the_old_layout_are_moved_in(tmp_path):
    run = tmp_path / "run"
    (run / "jobs").mkdir(parents=True)
    (run / "jobs" / "42.json").write_text(json.dumps(REC.to_json()))
    (run / "runtimes.jsonl").write_text('{"job_id": "7"}\n')
    (run / "lock").write_text("")
    state = NodeState(run)
    with state.lock():
        assert state.job("42") == REC
    assert state.finished_jobs() == {"7"}
    assert not (run / "jobs").exists() and not (run / "lock").exists()


def test_unwritable_run_dir_names_the_path(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    state = NodeState(blocker / "run")
    with pytest.raises(NodeStateError, match=str(blocker)):
        state.put_job(REC)
