"""Out-of-memory forms recognised from real message texts, the bounded stderr tail, and
the kernel's OOM-kill counters read from files laid out as /proc and cgroup v1/v2 show them."""

from __future__ import annotations

from pathlib import Path

import pytest
from oomtexts import OOM_TEXTS

from slurm_mig.memory.oom import FORMS, Tail, classify_tail, classify_text, oom_kills


@pytest.mark.parametrize("kind", sorted(OOM_TEXTS))
def test_every_form_is_recognised_in_its_real_text(kind):
    form = classify_text(OOM_TEXTS[kind])
    assert form is not None and form.kind == kind and form.gpu
    assert form.what == FORMS[kind][1]


def test_other_errors_are_not_out_of_memory():
    for text in (
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        "RuntimeError: NVML_SUCCESS == DriverAPI::get()->nvmlInit_v2_() failed",
        "MemoryError",
        "",
    ):
        assert classify_text(text) is None


def test_only_the_last_lines_of_the_tail_count():
    early = OOM_TEXTS["cuda"].encode() + b"\n" + b"step ok\n" * 100
    assert classify_tail(early) is None
    assert classify_tail(early + OOM_TEXTS["cupy"].encode()).kind == "cupy"
    assert classify_tail(b"\xff\xfe garbage " * 1000 + b"\nCUDA error: out of memory").kind == (
        "cuda"
    )


def test_the_tail_keeps_only_its_limit():
    tail = Tail(limit=10)
    for i in range(100):
        tail.add(str(i % 10).encode() * 7)
    assert tail.bytes() == b"8889999999"


def _proc(tmp_path: Path, cgroup: str, vmstat: str | None) -> Path:
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "cgroup").write_text(cgroup)
    if vmstat is not None:
        (proc / "vmstat").write_text(vmstat)
    return proc


def test_oom_kills_from_cgroup_v2_memory_events(tmp_path):
    proc = _proc(tmp_path, "0::/slurm/uid_0/job_7/step_0\n", "oom_kill 40\n")
    events = tmp_path / "cg" / "slurm/uid_0/job_7/step_0" / "memory.events"
    events.parent.mkdir(parents=True)
    events.write_text("low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\noom_group_kill 0\n")
    assert oom_kills(proc, tmp_path / "cg") == 2


def test_oom_kills_from_cgroup_v1_oom_control(tmp_path):
    proc = _proc(tmp_path, "4:memory:/slurm/job_7\n3:cpuset:/\n0::/\n", None)
    control = tmp_path / "cg" / "memory" / "slurm/job_7" / "memory.oom_control"
    control.parent.mkdir(parents=True)
    control.write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 5\n")
    assert oom_kills(proc, tmp_path / "cg") == 5


def test_oom_kills_fall_back_to_vmstat_and_to_unknown(tmp_path):
    proc = _proc(tmp_path, "0::/\n", "pgfault 9\noom_kill 7\n")
    assert oom_kills(proc, tmp_path / "none") == 7
    assert oom_kills(_proc(tmp_path / "b", "0::/\n", None), tmp_path / "none") == -1
