"""The nodes' CPU cgroup of the loopback Slurm (`slurm_mig.demo.cpugroup`), on fake
cgroup v1 and v2 trees (the real one is used by benchmarks/daemon_scale.py)."""

from __future__ import annotations

import pytest

from slurm_mig.demo.cpugroup import CpuGroup, CpuGroupError


def test_v1_group_gets_its_cpu_quota_and_its_processes_go_back_on_removal(tmp_path):
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.shares").write_text("1024\n")
    (tmp_path / "cpu" / "cgroup.procs").write_text("")
    group = CpuGroup.create("nodes", 1.5, root=tmp_path)
    assert (group.version, group.path) == (1, tmp_path / "cpu" / "nodes")
    assert (group.path / "cpu.cfs_period_us").read_text() == "100000"
    assert (group.path / "cpu.cfs_quota_us").read_text() == "150000"  # 1.5 CPUs
    group.add(4242)
    assert (group.path / "cgroup.procs").read_text() == "4242"
    # a plain directory keeps its files, as a group keeps a dying process: given up
    # after the wait, its processes moved to the parent
    assert group.remove(wait=0.2) is False
    assert (tmp_path / "cpu" / "cgroup.procs").read_text() == "4242"


def test_a_group_is_removed_once_its_last_process_is_gone(tmp_path, monkeypatch):
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.shares").write_text("1024\n")
    group = CpuGroup.create("nodes", 1, root=tmp_path)
    for knob in group.path.iterdir():
        knob.unlink()
    (group.path / "cgroup.procs").write_text("")
    tries = []
    real_rmdir = type(group.path).rmdir

    def rmdir(path):  # busy twice (a process still exiting), then empty
        tries.append(path)
        if len(tries) < 3:
            raise OSError(16, "Device or resource busy")
        (path / "cgroup.procs").unlink()
        real_rmdir(path)

    monkeypatch.setattr(type(group.path), "rmdir", rmdir)
    assert group.remove(wait=5.0) is True and len(tries) == 3
    assert not group.path.exists()


def test_v2_group_enables_the_cpu_controller_and_sets_its_quota(tmp_path):
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (tmp_path / "cgroup.subtree_control").write_text("")
    group = CpuGroup.create("nodes", 1, root=tmp_path)
    assert group.version == 2
    assert (tmp_path / "cgroup.subtree_control").read_text() == "+cpu"
    assert (group.path / "cpu.max").read_text() == "100000 100000"


@pytest.mark.parametrize(
    ("layout", "cpus", "name", "why"),
    [
        ({"cgroup.controllers": "memory pids\n"}, 10, "nodes", "no cpu controller"),
        ({}, 10, "nodes", "no cpu controller"),
        ({"cgroup.controllers": "cpu\n"}, 0, "nodes", "not within 0.01-4096"),
        ({"cgroup.controllers": "cpu\n"}, 10, "../escape", "not a cgroup name"),
    ],
)
def test_where_no_group_can_be_made_the_error_says_why(tmp_path, layout, cpus, name, why):
    for file, text in layout.items():
        (tmp_path / file).write_text(text)
    with pytest.raises(CpuGroupError, match=why):
        CpuGroup.create(name, cpus, root=tmp_path)


def test_a_group_that_exists_already_is_an_error_not_a_takeover(tmp_path):
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.shares").write_text("1024\n")
    (tmp_path / "cpu" / "nodes").mkdir()
    with pytest.raises(CpuGroupError, match="cannot make"):
        CpuGroup.create("nodes", 10, root=tmp_path)
