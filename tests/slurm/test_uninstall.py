"""``slurm-mig uninstall``: the checklist (printed, nothing edited), the release of the
jobs the planner holds through the client's batched release (jobs as squeue prints them
in tests/fixtures/slurm), and the destruction of a node's leftover instances on the
simulated backend, refused while a process uses one."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import pytest
from slurmfixtures import FIXTURES, RELEASES, jobs_of

from slurm_mig.cli import main
from slurm_mig.cli.uninstall import destroy_instances, release_jobs
from slurm_mig.config import load_config
from slurm_mig.daemon.lease import LEASE_FILE
from slurm_mig.devices.simulated import SimulatedBackend
from slurm_mig.geometry import Placement
from slurm_mig.node.holders import Holder
from slurm_mig.slurm import client as client_module
from slurm_mig.slurm.client import SlurmClient
from slurm_mig.slurm.uninstall import checklist, choose_jobs, release_calls


def _config(tmp_path: Path) -> Path:
    cfg = tmp_path / "config.toml"
    cfg.write_text(
        '[slurm]\npartition = "mig"\n[nodes]\n"n1" = ["A100-40GB", "A100-40GB"]\n'
        f'[paths]\nstate_dir = "{tmp_path}/state"\nrun_dir = "{tmp_path}/run/%n"\n'
        f'key_file = "{tmp_path}/key"\n[device]\nbackend = "simulated"\n'
        f'simulated_dir = "{tmp_path}/sim/%n"\nlatency_scale = 0\n'
    )
    return cfg


class RecordingClient(SlurmClient):
    """The real client on squeue JSON of a fixture; records the commands it runs."""

    fast_read = False

    def __init__(self, release: str, fail: set[str] = frozenset()) -> None:
        super().__init__(env={})
        self.squeue = (FIXTURES / release / "squeue.json").read_text()
        self.calls: list[tuple[str, ...]] = []
        self.fail = fail

    def _run(self, *argv: str) -> str:
        self.calls.append(argv)
        if argv[0] == "sinfo":
            return "slurm 24.11.0\n"
        if argv[0] == "squeue":
            return self.squeue
        if argv[:2] == ("scontrol", "release"):
            if set(argv[2].split(",")) & self.fail:
                raise client_module.SlurmError(f"'{' '.join(argv)}' failed: Invalid job id")
            return ""
        raise AssertionError(f"unexpected command {argv}")

    def releases(self) -> list[tuple[str, ...]]:
        return [c for c in self.calls if c[:2] == ("scontrol", "release")]


@pytest.mark.parametrize("release", RELEASES)
def test_the_planners_held_jobs_are_chosen_and_an_admins_hold_is_left(release):
    jobs = list(jobs_of(release).values())
    # a job the planner held again after releasing it: an admin hold with its record
    rehold = replace(jobs_of(release)["2"], job_id="11", admin_comment='slurm-mig:{"n":1}')
    choice = choose_jobs([*jobs, rehold], "mig")
    assert [j.job_id for j in choice.release] == ["1", "4", "8", "9", "10", "11"]
    assert [j.job_id for j in choice.other] == ["2"]  # JobHeldAdmin, no slurm-mig record
    assert choose_jobs(jobs, "other").release == ()


def test_release_calls_follow_the_clients_chunks():
    chunk = client_module.LIST_CHUNK
    assert [release_calls(n) for n in (0, 1, chunk, chunk + 1)] == [0, 1, 1, 2]


@pytest.mark.parametrize("release", ["22.05", "26.05"])
def test_release_jobs_releases_them_in_one_scontrol_call(tmp_path, capsys, release):
    config = load_config(_config(tmp_path))
    client = RecordingClient(release)
    assert release_jobs(config, client) == 0
    assert client.releases() == [("scontrol", "release", "1,4,8,9,10")]
    out, err = capsys.readouterr()
    assert "released 5 of 5 job(s) of partition mig in 1 'scontrol release' call(s)" in out
    assert "job 2 (" in err and "left held" in err


def test_release_jobs_dry_run_releases_nothing(tmp_path, capsys):
    config = load_config(_config(tmp_path))
    client = RecordingClient("24.11")
    assert release_jobs(config, client, dry_run=True) == 0
    assert client.releases() == []
    out = capsys.readouterr().out
    assert out.count("would release job ") == 5
    assert "would release 5 job(s) of partition mig in 1 'scontrol release' call(s)" in out


def test_a_job_that_cannot_be_released_is_named_and_the_status_is_1(tmp_path, capsys):
    config = load_config(_config(tmp_path))
    client = RecordingClient("24.11", fail={"8"})
    assert release_jobs(config, client) == 1
    # the list call failed: the client finds the one job by releasing one at a time
    assert client.releases()[0] == ("scontrol", "release", "1,4,8,9,10")
    assert len(client.releases()) == 6
    out, err = capsys.readouterr()
    assert "job 8: not released" in err and "released 4 of 5" in out


def test_release_jobs_refuses_while_the_planner_holds_its_lease(tmp_path, capsys):
    config = load_config(_config(tmp_path))
    state = Path(config.state_dir)
    state.mkdir(parents=True)
    now = time.time()
    record = {"host": "ctl1", "pid": 4242, "instance": "x", "since": now - 60,
              "renewed_at": now - 2, "ttl": 30.0}  # fmt: skip
    (state / LEASE_FILE).write_text(json.dumps(record))
    client = RecordingClient("24.11")
    with pytest.raises(ValueError, match="stop it first: systemctl stop slurm-mig-planner"):
        release_jobs(config, client, now=now)
    assert client.calls == []
    # stopped cleanly (released) or dead for longer than its ttl: go ahead
    (state / LEASE_FILE).write_text(json.dumps({**record, "released": True}))
    assert release_jobs(config, client, dry_run=True, now=now) == 0
    (state / LEASE_FILE).write_text(json.dumps(record))
    assert release_jobs(config, client, dry_run=True, now=now + 60) == 0


def _sim(tmp_path: Path) -> SimulatedBackend:
    sim = SimulatedBackend(tmp_path / "sim" / "n1", models=["A100-40GB", "A100-40GB"])
    sim.create(0, "3g.20gb", Placement(4, 4), job_id="41")
    sim.create(0, "1g.5gb", Placement(0, 1), job_id="42")
    sim.create(1, "7g.40gb", Placement(0, 8), job_id="43")
    return sim


def test_destroy_instances_destroys_every_idle_instance(tmp_path, capsys):
    sim = _sim(tmp_path)
    assert destroy_instances(sim, dry_run=True, node="n1", holders_of=lambda i: []) == 0
    assert len(sim.instances()) == 3
    assert "would destroy 3 MIG instance(s) on n1" in capsys.readouterr().out
    assert destroy_instances(sim, node="n1", holders_of=lambda i: []) == 0
    assert sim.instances() == []
    out = capsys.readouterr().out
    assert "destroyed GPU 0 3g.20gb at 4:4 (MIG-" in out and "destroyed 3 MIG instance(s)" in out


def test_destroy_instances_refuses_while_a_process_uses_one(tmp_path):
    sim = _sim(tmp_path)
    busy = next(i for i in sim.instances() if i.profile == "7g.40gb")

    def holders_of(inst):
        return [Holder(777, "python", 1000, "43")] if inst == busy else []

    with pytest.raises(ValueError) as err:
        destroy_instances(sim, node="n1", holders_of=holders_of)
    text = str(err.value)
    assert f"GPU 1 7g.40gb at 0:8 ({busy.uuid}) is in use" in text
    assert "pid 777 (python, uid 1000, in Slurm job 43)" in text and "nothing destroyed" in text
    assert len(sim.instances()) == 3  # none destroyed, not even the idle ones


def test_destroy_instances_cli_on_the_simulated_node(tmp_path, capsys):
    cfg = _config(tmp_path)
    _sim(tmp_path)
    argv = ["uninstall", "--config", str(cfg), "--destroy-instances", "--node", "n1"]
    assert main([*argv, "--dry-run"]) == 0
    assert "would destroy 3 MIG instance(s) on n1" in capsys.readouterr().out
    assert main(argv) == 0  # no process of this test holds the simulated capability nodes
    assert SimulatedBackend(tmp_path / "sim" / "n1").instances() == []
    assert main(["uninstall", "--config", str(cfg), "--destroy-instances", "--node", "nx"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'nx' is not configured" in err


def test_a_device_fault_is_one_line(tmp_path, capsys):
    cfg = _config(tmp_path)
    sim = _sim(tmp_path)
    (sim.state_dir / "fault.json").write_text(
        json.dumps({"op": "destroy", "error": "NoPermission", "message": "destroy: NVML "
                    "Insufficient Permissions", "hint": "run as root"})
    )  # fmt: skip
    argv = ["uninstall", "--config", str(cfg), "--destroy-instances", "--node", "n1"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err == "slurm-mig: error: GPU 0: destroy: NVML Insufficient Permissions (run as root)\n"


def test_the_default_prints_the_checklist_and_edits_nothing(tmp_path, capsys):
    cfg = _config(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["uninstall", "--config", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    steps = [
        line.split(".", 1)[0].strip() for line in out.splitlines() if line[:3].strip().isdigit()
    ]
    assert steps == [str(n) for n in range(1, len(steps) + 1)] and len(steps) >= 10
    assert out.index("systemctl disable --now slurm-mig-planner") < out.index("--destroy-instances")
    assert out.index("--destroy-instances") < out.index("gres.conf") < out.index("--release-jobs")
    assert "JobSubmitPlugins=lua" in out and "Prolog=, Epilog=, TaskProlog=" in out
    assert f"rm -r {tmp_path}/run/<node>" in out and "partition mig" in out
    assert main(["uninstall", "--config", str(cfg), "--plan"]) == 0
    assert capsys.readouterr().out == out


def test_the_gres_records_go_before_job_submit_lua_and_the_epilog():
    """Issue 34, hole 10: without job_submit.lua and the Epilog, a slice record left in
    gres.conf could be asked for by any user in any partition: the checklist removes the
    records (and restarts slurmd) in a step before the one that removes either."""
    lines = checklist("mig", "/var/lib/slurm-mig", "/run/slurm-mig", "/etc/slurm-mig/config.toml")

    def step(text: str) -> int:
        return next(i for i, line in enumerate(lines) if text in line)

    gres = step("Name=gpu Type=m<N>g<g>")
    assert gres == step("gres.conf") == step("restart slurmd")
    for later in (
        "delete job_submit.lua",
        "remove JobSubmitPlugins=lua",
        "Epilog=",
        "--release-jobs",
    ):
        assert step(later) > gres, later
    assert step("systemctl disable --now slurm-mig-planner") < step("cancel or requeue") < gres
    assert step("--destroy-instances") < gres
