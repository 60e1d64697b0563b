"""An instance that cannot be destroyed after its job: the Epilog names the process that
holds it (issue 18), and says what the site must configure when it is outside any job."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hooksite import T0, make_site, run

from slurm_mig.devices.migcaps import minor
from slurm_mig.node.holders import MAX_HOLDERS, Holder, describe_holders, find_holders
from slurm_mig.node.hooks import epilog_main, prolog_main


def _proc(root: Path, pid: int, comm: str, cgroup: str, fds: dict[str, str]) -> None:
    d = root / str(pid)
    (d / "fd").mkdir(parents=True)
    (d / "comm").write_text(comm + "\n")
    (d / "cgroup").write_text(cgroup)
    for fd, target in fds.items():
        os.symlink(target, d / "fd" / fd)


def test_holders_are_found_by_their_open_capability_nodes(tmp_path):
    _proc(
        tmp_path,
        10,
        "python3",
        "0::/user.slice/session-4.scope\n",
        {"3": "/dev/nvidia-caps/nvidia-cap21"},
    )
    _proc(
        tmp_path,
        11,
        "train",
        "0::/system.slice/slurmstepd.scope/job_77/step_0/user/task_0\n",
        {"5": "/dev/nvidia-caps/nvidia-cap22"},
    )
    _proc(
        tmp_path,
        12,
        "bash",
        "0::/user.slice\n",
        {"0": "/dev/pts/0", "4": "/dev/nvidia-caps/nvidia-cap30"},
    )
    (tmp_path / "self").mkdir()  # not a pid
    got = find_holders({21, 22}, proc=tmp_path)
    assert [(h.pid, h.command, h.job) for h in got] == [(10, "python3", None), (11, "train", "77")]
    text = describe_holders(got)
    assert "pid 10 (python3, uid 0, outside any Slurm job)" in text
    assert "pid 11 (train, uid 0, in Slurm job 77)" in text
    assert "pam_slurm_adopt" in text


def test_a_hostile_command_name_is_bounded_and_printable(tmp_path):
    _proc(tmp_path, 10, "x\x1b]0;pwned\x07" + "y" * 100, "", {"3": "/dev/nvidia-caps/nvidia-cap21"})
    [h] = find_holders({21}, proc=tmp_path)
    assert h.command.isprintable() and len(h.command) <= 32 and "\x1b" not in h.command


def test_many_holders_are_counted_not_listed():
    many = [Holder(i, "p", 1000, "5") for i in range(MAX_HOLDERS + 3)]
    text = describe_holders(many)
    assert text.count("pid ") == MAX_HOLDERS and text.endswith("and 3 more")
    assert "pam_slurm_adopt" not in text  # every one is in a job
    assert "no process" in describe_holders([])


def test_the_drain_reason_names_the_process_outside_any_job(tmp_path, capsys):
    site = make_site(tmp_path)
    env = site.env("42", site.comment("42"))
    run(prolog_main, env, capsys)
    [inst] = site.backend().instances()
    # a process that reached the node without Slurm opens the instance's capability node
    caps = tmp_path / "nvidia-caps"
    caps.mkdir()
    node = caps / f"nvidia-cap{minor(inst.gpu, inst.gi_id, inst.ci_id)}"
    node.write_text("")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import sys, time; f = open({str(node)!r}); print(1, flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout.readline() == b"1\n"
        site.fault("destroy", "InstanceInUse", "In use by another client", times=1)
        rc, _, _ = run(epilog_main, env, capsys, t=T0 + 50.0)
    finally:
        holder.kill()
        holder.wait()
    assert rc == 1
    [call] = site.scontrol_calls()
    assert call[:3] == ["update", "NodeName=node1", "State=DRAIN"]
    assert f"held by pid {holder.pid} (python" in call[3]
    assert "outside any Slurm job" in call[3] and "pam_slurm_adopt" in call[3]
