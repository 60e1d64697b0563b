"""Issue 39: a job that ended while its node's slurmd was down never got its Epilog. Its
record and instance are stale: the Prolog (when they are in the way, asking Slurm once),
the detached reclaim and ``slurm-mig node-sweep`` destroy them; a record whose job still
has a process on the node, or that Slurm cannot be asked about, stays. A relaunched job
whose Prolog slurmd skipped is requeued by its TaskProlog, never run without its slice.

The node is simulated: simulated GPUs, a fake ``/proc`` (`recordsweep.PROC`) and a fake
``squeue`` beside the fake ``scontrol`` that prints what the test says Slurm knows."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from support import FakeClock

from slurm_mig import cli
from slurm_mig.devices.simulated import SimulatedBackend
from slurm_mig.geometry import Placement
from slurm_mig.node import hookmain, recordsweep
from slurm_mig.node.hookio import SlurmJob, job_states
from slurm_mig.node.hooks import epilog_main, prolog_main, reclaim_main, task_prolog_main
from slurm_mig.node.nodestate import NodeState
from slurm_mig.slurm import gres
from slurm_mig.slurm.assignment import Assignment, generate_key, load_key, sign

NODE = "node1"
T0 = 1_700_000_000.0
MODELS = ("A100-40GB", "A100-40GB")


class Node:
    """One simulated node: config, key, GPUs, run dir, a fake /proc, scontrol and squeue."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        key_file = generate_key(tmp / "key")
        self.key = load_key(key_file)
        for name in ("scontrol", "squeue"):
            exe = tmp / name
            exe.write_text(
                f"#!{sys.executable}\n"
                "import json, pathlib, sys\n"
                f"d = pathlib.Path({str(tmp)!r})\n"
                f"with open(d / '{name}.log', 'a') as f:\n"
                "    f.write(json.dumps(sys.argv[1:]) + '\\n')\n"
                f"if {name == 'squeue'}:\n"
                "    sys.stdout.write((d / 'slurm.out').read_text())\n"
                "    sys.stderr.write((d / 'slurm.err').read_text())\n"
                "    sys.exit(int((d / 'slurm.rc').read_text()))\n"
            )
            exe.chmod(0o755)
        self.slurm_says("")
        (tmp / "proc").mkdir()
        self.config = tmp / "config.toml"
        self.config.write_text(
            f'[slurm]\npartition = "mig"\n\n[nodes]\n"node[1-2]" = ["A100-40GB", "A100-40GB"]\n\n'
            f'[paths]\nstate_dir = "{tmp}/state"\nrun_dir = "{tmp}/run/%n"\n'
            f'key_file = "{key_file}"\n\n[device]\nbackend = "simulated"\n'
            f'simulated_dir = "{tmp}/sim/%n"\nlatency_scale = 0.0\n'
        )
        self.state = NodeState(tmp / "run" / NODE)

    def backend(self) -> SimulatedBackend:
        return SimulatedBackend(self.tmp / "sim" / NODE)

    def env(self, job_id: str, restart: int = 0, placement: tuple[int, int] = (4, 4)) -> dict:
        a = Assignment(
            job_id=job_id,
            restart=restart,
            node=NODE,
            gpu=1,
            model="A100-40GB",
            profile="3g.20gb",
            placement=Placement(*placement),
            batch=1,
            order=0,
            planned_seconds=60.0,
            issued=T0,
        )
        record = gres.record_for(MODELS, 1, a.placement)
        return {
            "SLURM_JOB_ID": job_id,
            "SLURMD_NODENAME": NODE,
            "SLURM_JOB_PARTITION": "mig",
            "SLURM_JOB_UID": str(os.getuid()),
            "SLURM_JOB_COMMENT": f"migplan={sign(a, self.key)}",
            "SLURM_JOB_GPUS": str(gres.index_of(MODELS, record)),
            "SLURM_JOB_RESTART_COUNT": str(restart),
            "SLURM_MIG_CONFIG": str(self.config),
            "SLURM_MIG_SCONTROL": str(self.tmp / "scontrol"),
        }

    def slurm_says(self, out: str, rc: int = 0, err: str = "") -> None:
        """What the fake squeue prints (its -O columns: id, state, restarts, nodes)."""
        (self.tmp / "slurm.out").write_text(out)
        (self.tmp / "slurm.err").write_text(err)
        (self.tmp / "slurm.rc").write_text(str(rc))

    def runs_here(self, pid: int, *, cgroup: str = "", title: str = "", parent: int = 1) -> None:
        """A process in the fake /proc: its cgroup file, title (cmdline) and parent."""
        d = self.tmp / "proc" / str(pid)
        d.mkdir()
        (d / "cgroup").write_text(cgroup)
        (d / "cmdline").write_bytes(title.encode() + b"\0")
        name = (title.split() or ["sh"])[0][:15]
        (d / "stat").write_text(f"{pid} ({name}) S {parent} {pid} {pid} 0 -1 4194560\n")

    def calls(self, name: str) -> list[list[str]]:
        log = self.tmp / f"{name}.log"
        return [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []


@pytest.fixture
def node(tmp_path: Path, monkeypatch) -> Node:
    monkeypatch.setattr(recordsweep, "PROC", tmp_path / "proc")
    n = Node(tmp_path)
    assert prolog_main(n.env("41"), clock=lambda: T0 + 1) == 0  # job 41 on 3g.20gb at 4:4
    n.first = n.state.job("41")
    return n


def _next_job(node: Node, capsys) -> tuple[int, str]:
    """Job 43, planned over job 41's slices: its Prolog's exit status and log."""
    capsys.readouterr()
    rc = prolog_main(node.env("43"), clock=lambda: T0 + 100)
    return rc, capsys.readouterr().err


@pytest.mark.parametrize(
    ("slurm", "why"),
    [
        ("41 COMPLETED 0 node1\n", "job 41 is COMPLETED in Slurm"),
        ("41 RUNNING 0 node[2-3]\n", "job 41 runs on node[2-3] in Slurm, not on node1"),
        ("41 RUNNING 1 node1\n", "Slurm is at run 1 of job 41, the record is of run 0"),
        ("41 PENDING 1\n", "Slurm is at run 1 of job 41"),
        ("", "Slurm no longer knows job 41"),
    ],
    ids=["ended", "elsewhere", "later-restart", "requeued", "forgotten"],
)
def test_the_prolog_destroys_a_stale_record_in_its_way(node, capsys, slurm, why):
    node.slurm_says(slurm)
    rc, err = _next_job(node, capsys)
    assert rc == 0
    assert why in err and f"stale record of 3g.20gb at 4:4 on gpu 1 ({node.first.uuid})" in err
    assert node.state.job("41") is None and node.state.task("41") is None
    [inst] = node.backend().instances()
    assert inst.uuid == node.state.job("43").uuid != node.first.uuid
    [call] = node.calls("squeue")  # one question, naming the job in the way
    assert "--jobs=41" in call


def test_a_job_slurm_forgot_reads_as_invalid_id_too(node, capsys):
    node.slurm_says("", rc=1, err="slurm_load_jobs error: Invalid job id specified\n")
    assert _next_job(node, capsys)[0] == 0
    assert node.state.job("41") is None


@pytest.mark.parametrize(
    "slurm",
    [
        ("", 1, "squeue: error: Unable to contact slurm controller (connect failure)\n"),
        ("41 RUNNING 0 node1\n", 0, ""),
        ("41 COMPLETING 0 node1\n", 0, ""),  # its Epilog is on its way
    ],
    ids=["slurm-unreachable", "running-here", "completing"],
)
def test_a_record_slurm_does_not_call_ended_keeps_its_slices(node, capsys, slurm):
    node.slurm_says(*slurm)
    rc, err = _next_job(node, capsys)
    assert rc == 0  # refused: requeued by the TaskProlog
    assert node.state.refusal("43").reason.startswith("slices still in use by job 41")
    assert node.state.job("41") == node.first
    assert [i.uuid for i in node.backend().instances()] == [node.first.uuid]


@pytest.mark.parametrize(
    "process",
    [
        {"parent": 76},  # the batch script, a child of job 41's slurmstepd
        {"cgroup": "0::/system.slice/slurmstepd.scope/job_41/step_batch/user/task_0\n"},
        {"cgroup": "4:memory:/slurm/uid_1000/job_41/step_0\n"},
    ],
    ids=["slurmstepd-child", "cgroup-v2", "cgroup-v1"],
)
def test_a_job_with_a_process_here_is_never_stale_and_slurm_is_not_asked(node, capsys, process):
    node.runs_here(76, title="slurmstepd: [41.batch]")
    node.runs_here(77, **process)
    node.slurm_says("41 COMPLETED 0 node1\n")  # e.g. requeued while the node was cut off
    _next_job(node, capsys)
    assert node.state.job("41") == node.first and node.calls("squeue") == []
    assert "slices still in use by job 41" in node.state.refusal("43").reason


def test_no_record_in_the_way_asks_slurm_nothing(node, capsys):
    capsys.readouterr()
    env = node.env("44", placement=(0, 4))
    env["SLURM_JOB_GPUS"] = str(gres.index_of(MODELS, gres.record_for(MODELS, 1, Placement(0, 4))))
    assert prolog_main(env, clock=lambda: T0 + 100) == 0
    assert node.calls("squeue") == [] and node.state.job("44") is not None


def test_the_task_prolog_requeues_a_relaunch_whose_prolog_was_skipped(node, capsys):
    """Run 1 of job 41 launched without its Prolog: the record is of run 0."""
    env = {k: v for k, v in node.env("41").items() if k != "SLURM_JOB_COMMENT"}
    del env["SLURM_JOB_RESTART_COUNT"]
    env["SLURM_RESTART_COUNT"] = "1"
    capsys.readouterr()
    rc = task_prolog_main(env, clock=lambda: T0 + 50)
    out = capsys.readouterr().out.splitlines()
    assert rc == 1
    assert out[0] == "export CUDA_VISIBLE_DEVICES=" and node.first.uuid not in "".join(out)
    assert "no MIG instance was prepared for run 1 of job 41" in out[1]
    assert "records name run 0" in out[1]
    assert node.calls("scontrol")[-1][0] == "requeuehold"


@pytest.mark.parametrize("partition", [None, ""])
def test_an_epilog_without_a_partition_cleans_up_a_job_recorded_here(node, capsys, partition):
    """26.05 runs the Epilog of a job killed on a node back from a failure without
    SLURM_JOB_PARTITION: the node's record of the job makes it ours."""
    env = node.env("41")
    if partition is None:
        del env["SLURM_JOB_PARTITION"]
    else:
        env["SLURM_JOB_PARTITION"] = partition
    capsys.readouterr()
    assert epilog_main(env, clock=lambda: T0 + 30) == 0
    err = capsys.readouterr().err
    assert "Slurm named no partition; this node's record of job 41 makes it ours" in err
    assert node.state.job("41") is None and node.backend().instances() == []


def test_an_epilog_without_a_partition_or_a_record_is_not_ours(node, capsys):
    env = node.env("42")
    del env["SLURM_JOB_PARTITION"]
    capsys.readouterr()
    assert epilog_main(env, clock=lambda: T0 + 30) == 0
    assert "partition (none) is not mig; nothing to do" in capsys.readouterr().err
    assert node.state.job("41") == node.first  # another job's record is left alone


def test_node_sweep_at_boot_drops_records_of_jobs_without_a_process(node, capsys):
    env = node.env("42", placement=(0, 4))
    env["SLURM_JOB_GPUS"] = str(gres.index_of(MODELS, gres.record_for(MODELS, 1, Placement(0, 4))))
    assert prolog_main(env, clock=lambda: T0 + 2) == 0
    node.runs_here(99, title="slurmstepd: [42.0]")  # job 42's step 0 still runs here
    node.runs_here(100, title="python train.py", parent=99)
    # job 41's batch script has ended; its slurmstepd waits for slurmd (in v2, in the cgroup)
    cg = "0::/system.slice/slurmstepd.scope/job_41/step_batch/slurm\n"
    node.runs_here(101, title="slurmstepd: [41.batch]", cgroup=cg)
    capsys.readouterr()
    argv = ["node-sweep", "--boot", "--config", str(node.config), "--node", NODE]
    assert cli.main(argv) == 0
    out, err = capsys.readouterr()
    assert out == "node1: 1 stale job record(s) dropped, 1 left\n"
    assert "no process of job 41 runs on node1 and slurmd has not started" in err
    assert node.state.job("41") is None and node.state.job("42") is not None
    assert [i.uuid for i in node.backend().instances()] == [node.state.job("42").uuid]
    assert node.calls("squeue") == []  # at boot Slurm is not asked


def test_local_jobs_counts_a_slurmstepd_only_with_a_task(tmp_path):
    node = Node(tmp_path)
    node.runs_here(10, title="slurmstepd: [7.batch]")  # its script has ended
    node.runs_here(11, title="slurmstepd: [8.0]")
    node.runs_here(12, title="sleep 60", parent=11)
    node.runs_here(13, title="slurmstepd: [9.extern]", cgroup="0::/x/job_9/step_extern/slurm\n")
    node.runs_here(14, title="bash", cgroup="0::/x/job_10/step_batch/user/task_0\n", parent=1)
    (tmp_path / "proc" / "15").mkdir()  # a process that vanished mid-scan
    assert recordsweep.local_jobs(tmp_path / "proc") == {"8", "10"}


def test_node_sweep_without_boot_keeps_what_slurm_cannot_judge(node, capsys, monkeypatch):
    monkeypatch.setenv("SLURM_MIG_SCONTROL", str(node.tmp / "scontrol"))
    node.slurm_says("", rc=1, err="Unable to contact slurm controller\n")
    argv = ["node-sweep", "--config", str(node.config), "--node", NODE]
    capsys.readouterr()
    assert cli.main(argv) == 0
    out, err = capsys.readouterr()
    assert out == "node1: 0 stale job record(s) dropped, 1 left\n"
    assert "cannot ask Slurm" in err and node.state.job("41") == node.first


def test_the_detached_reclaim_sweeps_stale_records(node, monkeypatch):
    monkeypatch.setattr(hookmain, "time", FakeClock(T0 + 500))
    node.slurm_says("41 NODE_FAIL 0 node1\n")
    env = {"SLURM_MIG_CONFIG": str(node.config), "SLURM_MIG_SCONTROL": str(node.tmp / "scontrol")}
    assert reclaim_main([NODE, "1"], env) == 0
    assert node.state.job("41") is None and node.backend().instances() == []


def test_job_states_reads_numbers_and_states_only(tmp_path):
    n = Node(tmp_path)
    n.slurm_says("7_3     RUNNING   2   gpu[01-02]\n8  PENDING 0\n9 bogus line here x\n")
    env = {"SLURM_MIG_SCONTROL": str(tmp_path / "scontrol")}
    got = job_states(["7_3", "8", "9", "10", "x;rm"], env)
    assert got == {
        "7_3": SlurmJob("RUNNING", "gpu[01-02]", 2),
        "8": SlurmJob("PENDING", "", 0),
        "10": None,  # not listed: Slurm forgot it
    }  # 9's line does not read: left out, never judged stale
    [call] = n.calls("squeue")
    assert "--jobs=7_3,8,9,10" in call  # a name that is no job id is not asked


def test_an_invalid_job_id_among_several_judges_none(tmp_path):
    """squeue names no id when it refuses one of several: none is taken as forgotten
    (a live job's record would be destroyed), the error is what Slurm said."""
    n = Node(tmp_path)
    n.slurm_says("", rc=1, err="slurm_load_jobs error: Invalid job id specified\n")
    env = {"SLURM_MIG_SCONTROL": str(tmp_path / "scontrol")}
    got = job_states(["7", "8"], env)
    assert isinstance(got, str) and "Invalid job id" in got
    assert job_states(["7"], env) == {"7": None}
