"""A job's owner against the node's run directory, on a real loopback Slurm with the
hooks and the planner daemon (issue 18, hole 1): the job's own task record is root's, so
its owner can read it but not make it writable, grow it or keep it; and a run directory
whose disk is full makes the Prolog undo what it created and requeue the job, never
drain the node. Each node is a host of its own; jobs run as nobody."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from slurm_mig.demo.live import LiveCluster

from .conftest import LIVE_DEFAULTS, host_release_only, require_local_slurm

USER = "65534"  # nobody
NODE = "att1"
PROBE = """\
import errno, json, os, sys
path = os.path.join(sys.argv[1], "task", os.environ["SLURM_JOB_ID"] + ".json")
seen = {}
def attempt(name, op):
    try:
        op()
        seen[name] = "ok"
    except OSError as exc:
        seen[name] = errno.errorcode.get(exc.errno, str(exc.errno))
attempt("read", lambda: open(path).read())
attempt("chmod", lambda: os.chmod(path, 0o600))
attempt("append", lambda: open(path, "a").write("x" * (1 << 20)))
attempt("create", lambda: open(os.path.join(sys.argv[1], "task", "mine"), "w").close())
attempt("link", lambda: os.link(path, os.path.join(sys.argv[1], "task", "kept")))
need = path[: -len(".json")] + ".need/need"  # mig-run's memory-need file: write-only
attempt("need_write", lambda: open(need, "w").write('{"key": "att", "need": 1}'))
attempt("need_chmod", lambda: os.chmod(need, 0o600))
attempt("need_link", lambda: os.link(need, os.path.join(sys.argv[1], "task", "kept")))
attempt("need_beside", lambda: open(need + ".more", "w").close())
print("PROBE " + json.dumps(seen), flush=True)
"""


@pytest.fixture
def cluster():
    """Start a LiveCluster of one node (``start(tmpfs=...)`` puts the node's run
    directory on a tmpfs of that size); each is stopped and its mounts undone."""
    install = require_local_slurm()
    made: list[tuple[LiveCluster, Path | None]] = []

    def start(tmpfs: str | None = None) -> LiveCluster:
        root = Path(tempfile.mkdtemp(prefix="slurm-mig-att-"))
        os.chmod(root, 0o755)
        lc = LiveCluster(root, slurm=install, nodes=(NODE,), gpus=1, **LIVE_DEFAULTS)
        mount = None
        if tmpfs is not None:
            # the node's own run directory (LocalSlurm.node_path of run_root), made a
            # small file system before the node's namespace binds it
            mount = root / "slurm" / "nodes" / NODE / lc.run_root.name
            mount.mkdir(parents=True)
            options = f"size={tmpfs},mode=0755"
            if subprocess.run(
                ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mount)]
            ).returncode:
                pytest.skip("cannot mount a tmpfs here")
        made.append((lc, mount))
        return lc.start()

    yield start
    for lc, mount in made:
        lc.stop()
        if mount is not None:
            subprocess.run(["umount", "-l", str(mount)], check=False)
        if not os.environ.get("SLURM_MIG_E2E_KEEP"):
            shutil.rmtree(lc.root, ignore_errors=True)


def _node_state(lc: LiveCluster) -> str:
    return lc.cluster.node_states()[NODE]


def test_a_job_cannot_grow_or_keep_its_task_record(cluster):
    lc = cluster()
    probe = lc.root / "probe.py"
    probe.write_text(PROBE)
    os.chmod(probe, 0o644)
    wrap = f"/usr/bin/python3 {probe} {lc.run_root}"
    job = lc.cluster.sbatch(wrap, partition="mig", comment="mig:key=att,time=20", user=USER)
    nxt = lc.cluster.sbatch("true", partition="mig", comment="mig:key=next,time=20", user=USER)
    lc.start_planner()
    done = lc.wait_done([job, nxt], 120)
    assert {done[job].state, done[nxt].state} == {"COMPLETED"}, lc.cluster.logs()
    out = lc.cluster.job_output(job)
    [line] = [ln for ln in out.splitlines() if ln.startswith("PROBE ")]
    seen = json.loads(line.split(" ", 1)[1])
    # it reads its own record, and can do nothing else with it or beside it
    assert seen["read"] == "ok"
    assert (seen["chmod"], seen["append"], seen["create"]) == ("EPERM", "EACCES", "EACCES")
    assert seen["link"] in ("EACCES", "EPERM")  # no write access to task/ either way
    assert (seen["need_write"], seen["need_chmod"]) == ("ok", "EPERM")
    assert seen["need_link"] in ("EACCES", "EPERM", "EXDEV")
    assert seen["need_beside"] == "EACCES"
    assert "drain" not in _node_state(lc).lower()
    task = lc.run_dir(NODE) / "task"
    assert sorted(p.name for p in task.iterdir()) == []  # both records gone with their jobs
    assert lc.live_instances() == []


def test_a_full_run_directory_requeues_the_job_and_drains_nothing(cluster):
    lc = cluster(tmpfs="512k")
    first = lc.cluster.sbatch("true", partition="mig", comment="mig:key=a,time=5", user=USER)
    lc.start_planner()
    assert lc.wait_done([first], 120)[first].state == "COMPLETED", lc.cluster.logs()
    filler = lc.run_dir(NODE) / "filler"
    _fill(filler)
    job = lc.cluster.sbatch("echo ran", partition="mig", comment="mig:key=b,time=5", user=USER)
    lc.cluster.wait_for(
        lambda: int(lc.cluster.job_field(job, "Restarts") or 0) >= 1,
        120,
        "the Prolog's requeue",
    )
    assert "drain" not in _node_state(lc).lower(), lc.cluster.logs()
    assert lc.live_instances() == []  # what it created is undone
    log = lc.node_path(NODE, lc.log_file).read_text()
    assert "requeued and held for the planner" in log and "No space left on device" in log
    filler.unlink()  # room again: the planner releases it and it runs
    assert lc.wait_done([job], 180)[job].state == "COMPLETED", lc.cluster.logs()
    assert "ran" in lc.cluster.job_output(job)
    assert "drain" not in _node_state(lc).lower()
    assert lc.live_instances() == []


HUGE_NEED = """\
import errno, json, os, sys
run_dir = sys.argv[1]
need = os.path.join(run_dir, "task", os.environ["SLURM_JOB_ID"] + ".need", "need")
free = os.statvfs(run_dir).f_bfree
fd = os.open(need, os.O_WRONLY)
wrote, failed = 0, None
try:
    for _ in range(1024):  # 64 MiB, far more than the run directory's 512 KiB
        wrote += os.write(fd, b"x" * 65536)
except OSError as exc:
    failed = errno.errorcode.get(exc.errno, str(exc.errno))
seen = {"wrote": wrote, "failed": failed, "lost": free - os.statvfs(run_dir).f_bfree}
print("HUGE " + json.dumps(seen), flush=True)
"""


@host_release_only
def test_a_huge_need_file_cannot_fill_the_run_directory(cluster):
    """Issue 34, hole 6: a job filled the run directory through its need file, and the
    Epilog of a job that ended meanwhile lost its runtime, metrics and accounting row.
    The need file has a file system of one page of its own; every Epilog removes it."""
    lc = cluster(tmpfs="512k")
    probe = lc.root / "huge.py"
    probe.write_text(HUGE_NEED)
    os.chmod(probe, 0o644)
    wrap = f"/usr/bin/python3 {probe} {lc.run_root}; sleep 8"
    job = lc.cluster.sbatch(wrap, partition="mig", comment="mig:key=huge,time=20", user=USER)
    nxt = lc.cluster.sbatch("true", partition="mig", comment="mig:key=next,time=5", user=USER)
    lc.start_planner()
    done = lc.wait_done([job, nxt], 150)
    assert {done[job].state, done[nxt].state} == {"COMPLETED"}, lc.cluster.logs()
    [line] = [ln for ln in lc.cluster.job_output(job).splitlines() if ln.startswith("HUGE ")]
    seen = json.loads(line.split(" ", 1)[1])
    assert seen["failed"] == "ENOSPC" and seen["wrote"] <= 4096, seen
    assert seen["lost"] == 0, seen  # not a block of the run directory's file system
    assert lc.cluster.job_field(nxt, "Restarts") == "0"  # no Prolog short of room
    log = lc.node_path(NODE, lc.log_file).read_text()
    assert "No space left on device" not in log, log
    private = lc.run_dir(NODE) / "private"
    rows = [json.loads(r) for r in (private / "accounting.jsonl").read_text().splitlines()]
    assert {str(r["job_id"]) for r in rows} >= {job, nxt}  # both Epilogs wrote theirs
    assert (lc.run_dir(NODE) / "node-metrics.prom").stat().st_size > 0
    assert sorted(p.name for p in (lc.run_dir(NODE) / "task").iterdir()) == []  # areas gone


def _fill(path: Path) -> None:
    """Write ``path`` until its file system is full."""
    with open(path, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"x" * 4096)
        except OSError:
            pass
