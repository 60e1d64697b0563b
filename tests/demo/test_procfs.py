"""/proc's view of our processes (slurm_mig.demo.procfs): paths under our directories as
a chrooted or deleted file shows them, printable command lines, ancestors, finding."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from slurm_mig.demo import procfs


def test_within_sees_chrooted_and_deleted_paths_but_no_neighbours() -> None:
    d = "/tmp/slurm-e2e-abc"
    assert procfs.within("/tmp/slurm-e2e-abc/log/slurmd-n1.log", d)
    assert procfs.within("/tmp/slurm-e2e-abc", d)
    assert procfs.within("/var/cache/slurm-mig/roots/sid/tmp/slurm-e2e-abc/out/3.out (deleted)", d)
    assert not procfs.within("/tmp/slurm-e2e-abcd/log", d)
    assert not procfs.within("/tmp/slurm-e2e-ab", d)


def test_printable_replaces_control_characters_and_cuts() -> None:
    assert procfs.printable("a\x1b[31mb\r\n\x00c") == "a?[31mb???c"
    assert procfs.printable("x" * 300, 10) == "xxxxxxx..."


def test_ancestors_and_start_time_of_this_process() -> None:
    assert {os.getpid(), os.getppid()} <= procfs.ancestors(os.getpid())
    assert procfs.start_time(os.getpid()) is not None
    assert procfs.start_time(2**22 + 1) is None  # beyond pid_max: no such process


def test_find_by_environment_entry_and_end() -> None:
    entry = f"PROCFS_TEST={os.getpid()}-{time.monotonic_ns()}"
    env = {**os.environ, entry.split("=")[0]: entry.split("=", 1)[1]}
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
    try:
        deadline = time.monotonic() + 10
        while not (found := procfs.find([entry], [])):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert [f.pid for f in found] == [proc.pid]
        assert found[0].reason == f"its environment has {entry}"
        assert procfs.end(found) == []  # SIGKILL at once without grace
        assert proc.wait(5) == -9
    finally:
        proc.kill()
        proc.wait()
