"""The check `make test` ends with (slurm_mig.demo.leftovers): it names, ends and fails
on what the run left running, and leaves alone what is not the run's."""

from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_mig.demo import leftovers, procfs

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]


@pytest.fixture
def run() -> Iterator[str]:
    """A fresh test run id (never this session's own), its registry removed afterwards."""
    rid = f"unit{uuid.uuid4().hex[:12]}"
    yield rid
    leftovers.registry(rid).unlink(missing_ok=True)


@pytest.fixture
def start() -> Iterator:
    """Start a sleeping process with a run mark (or none) in its environment; each is
    killed afterwards whatever the test did."""
    procs: list[subprocess.Popen] = []

    def spawn(
        mark: str | None, argv=SLEEPER, cwd: Path | None = None, ready: str = "time.sleep(120)"
    ) -> subprocess.Popen:
        env = {k: v for k, v in os.environ.items() if k != leftovers.RUN_VAR}
        if mark is not None:
            env[leftovers.RUN_VAR] = mark
        proc = subprocess.Popen(argv, env=env, cwd=cwd)
        procs.append(proc)
        _wait(lambda: ready in procfs.command(proc.pid))  # exec'd
        return proc

    yield spawn
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def _wait(ok, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        assert time.monotonic() < deadline, "the process did not start"
        time.sleep(0.01)


def _check(run: str) -> tuple[int, str]:
    out = io.StringIO()
    return leftovers.check(run, grace=0.5, out=out), out.getvalue()


def test_a_process_with_the_runs_mark_is_named_ended_and_fails_the_check(run, start) -> None:
    proc = start(run)
    status, out = _check(run)
    assert status == 1
    line = next(ln for ln in out.splitlines() if f"pid {proc.pid}:" in ln)
    assert "time.sleep(120)" in line and f"{leftovers.RUN_VAR}={run}" in line
    assert proc.wait(5) == -signal.SIGTERM  # a SIGTERM it does not ignore was enough
    assert "left 1 process(es) running; 1 ended" in out


def test_unmarked_processes_and_another_runs_are_left_alone(run, start) -> None:
    mine = start(run)
    others = [start(None), start(f"{run}x"), start(f"other{run}")]
    status, out = _check(run)
    assert status == 1 and mine.wait(5) < 0
    for proc in others:
        assert proc.poll() is None, f"pid {proc.pid} was ended"
        assert f"pid {proc.pid}:" not in out


def test_nothing_left_passes_and_removes_the_registry(run, start) -> None:
    start(None)
    leftovers.registry(run).write_text("/tmp/nowhere-such-dir\n")
    status, out = _check(run)
    assert (status, out.strip()) == (0, f"leftovers: test run {run} left no process running")
    assert not leftovers.registry(run).exists()


def test_a_process_in_a_registered_directory_is_the_runs(run, start, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(leftovers.RUN_VAR, run)
    leftovers.register(tmp_path)
    elsewhere = start(None)
    inside = start(None, cwd=tmp_path)  # no mark in its environment (as 24.11's slurmstepd)
    status, out = _check(run)
    assert status == 1
    assert f"pid {inside.pid}: " in out and f"cwd is {tmp_path}, in {tmp_path}" in out
    assert inside.wait(5) < 0 and elsewhere.poll() is None


def test_control_characters_of_a_command_line_are_not_printed(run, start) -> None:
    proc = start(run, [*SLEEPER, "\x1b[2J\rgone\x07"])
    status, out = _check(run)
    assert status == 1 and proc.wait(5) < 0
    assert "?[2J?gone?" in out
    assert not any(c != "\n" and not c.isprintable() for c in out)


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare"
)
def test_a_process_sharing_a_private_mount_namespace_with_one_of_the_runs_is_the_runs(
    run, start
) -> None:
    script = f"env {leftovers.RUN_VAR}={run} sleep 120 & exec env -i sleep 121"
    argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script]
    proc = start(None, argv, ready="sleep 121")
    _wait(lambda: procfs.command(proc.pid) == "sleep 121")
    space = procfs.mount_ns(proc.pid)
    _wait(
        lambda: any(
            procfs.command(p) == "sleep 120" and procfs.mount_ns(p) == space for p in procfs.pids()
        )
    )
    status, out = _check(run)
    assert status == 1
    assert f"pid {proc.pid}: sleep 121: shares a node's mount namespace" in out
    assert proc.wait(5) < 0


def test_without_a_run_id_the_command_refuses(monkeypatch, capsys) -> None:
    monkeypatch.delenv(leftovers.RUN_VAR, raising=False)
    assert leftovers.main([]) == 2
    assert leftovers.main(["--run", "../x"]) == 2
    assert "no valid test run id" in capsys.readouterr().err
