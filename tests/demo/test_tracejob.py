"""slurm_mig.demo.tracejob without a Slurm: how a trace job finds its MIG profile (its
MIG instance on the simulated GPUs, or its GRES record's type in gres.conf, as Slurm
22.05, 24.11 and 26.05 number them), its times on the command line, and what it
sleeps and records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurm_mig.demo import tracejob
from slurm_mig.demo.slurmconf import LayoutInstance, layout_gres_conf
from slurm_mig.devices.simulated import SimulatedBackend
from slurm_mig.geometry import Placement

A100 = "A100-40GB"


def test_gres_profile_is_the_type_of_the_nodes_record_at_the_index(
    mig_layout: list[LayoutInstance],
) -> None:
    conf = layout_gres_conf("n1", mig_layout, "/dev") + layout_gres_conf(
        "n2", mig_layout[::-1], "/d"
    )
    assert tracejob.gres_profile(conf, "n1", 0) == "2g.10gb"
    assert tracejob.gres_profile(conf, "n1", 2) == "7g.40gb"
    assert tracejob.gres_profile(conf, "n2", 0) == "7g.40gb"
    assert tracejob.gres_profile(conf, "n1", 3) is None
    assert tracejob.gres_profile(conf, "n3", 0) is None


def test_profile_of_reads_slurms_gres_index(
    tmp_path: Path, mig_layout: list[LayoutInstance]
) -> None:
    (tmp_path / "gres.conf").write_text(layout_gres_conf("n1", mig_layout, "/dev"))
    env = {"SLURMD_NODENAME": "n1", "SLURM_CONF": str(tmp_path / "slurm.conf")}
    assert tracejob.profile_of({**env, "SLURM_JOB_GPUS": "1"}, tmp_path) == ("3g.20gb", "gres")
    assert tracejob.profile_of({**env, "CUDA_VISIBLE_DEVICES": "2"}, tmp_path) == (
        "7g.40gb",
        "gres",
    )
    assert tracejob.profile_of(env, tmp_path) == (None, "none")


def test_profile_of_finds_its_mig_instance_on_the_simulated_gpus(tmp_path: Path) -> None:
    backend = SimulatedBackend(tmp_path / "n1", [A100])
    inst = backend.create(0, "3g.20gb", Placement(4, 4))
    env = {"SLURMD_NODENAME": "n1", "CUDA_VISIBLE_DEVICES": inst.uuid}
    assert tracejob.profile_of(env, tmp_path) == ("3g.20gb", "mig")
    env["CUDA_VISIBLE_DEVICES"] = "MIG-00000000-0000-0000-0000-000000000000"
    assert tracejob.profile_of(env, tmp_path) == (None, "mig")


def test_times_round_trip_the_command_line() -> None:
    text = tracejob.format_times({7: 100.0, 1: 400.25, 3: float("inf")})
    assert text == "1=400.25,7=100"
    assert tracejob.parse_times(text) == {1: 400.25, 7: 100.0}


def test_the_job_sleeps_its_compressed_time_and_records_it(
    tmp_path, monkeypatch, mig_layout: list[LayoutInstance]
) -> None:
    (tmp_path / "gres.conf").write_text(layout_gres_conf("n1", mig_layout, "/dev"))
    log = tmp_path / "jobs.jsonl"
    slept = []
    monkeypatch.setattr(tracejob.time, "sleep", slept.append)
    monkeypatch.setattr(tracejob.os, "environ", {
        "SLURMD_NODENAME": "n1", "SLURM_CONF": str(tmp_path / "slurm.conf"),
        "SLURM_JOB_GPUS": "0", "SLURM_JOB_ID": "42", "SLURM_MIG_T0": "5.5",
    })  # fmt: skip
    argv = [A100, "1=400,2=250", str(1 << 30), "20", str(tmp_path), str(log)]
    assert tracejob.main(argv) == 0
    assert slept == [12.5]  # 250 s on the 2g / 20
    rec = json.loads(log.read_text())
    assert (rec["job"], rec["profile"], rec["size"], rec["how"]) == ("42", "2g.10gb", 2, "gres")
    assert rec["launched"] == 5.5 and "error" not in rec
    # a 3g it has no time for: it fails at once, saying why
    tracejob.os.environ["SLURM_JOB_GPUS"] = "1"
    assert tracejob.main(argv) == 3
    assert "no time for 3g.20gb" in json.loads(log.read_text().splitlines()[1])["error"]


def test_a_restartable_job_checkpoints_and_a_run_after_a_requeue_does_the_rest(
    tmp_path, monkeypatch, mig_layout: list[LayoutInstance]
) -> None:
    (tmp_path / "gres.conf").write_text(layout_gres_conf("n1", mig_layout, "/dev"))
    log, progress = tmp_path / "jobs.jsonl", tmp_path / "progress"
    progress.mkdir()
    slept: list[float] = []
    monkeypatch.setattr(tracejob.time, "sleep", slept.append)
    monkeypatch.setattr(tracejob.os, "environ", {
        "SLURMD_NODENAME": "n1", "SLURM_CONF": str(tmp_path / "slurm.conf"),
        "SLURM_JOB_GPUS": "0", "SLURM_JOB_ID": "42",
    })  # fmt: skip
    argv = [A100, "1=400,2=20", str(1 << 30), "20", str(tmp_path), str(log), str(progress)]
    # an earlier run did 40 % of the work (its last checkpoint) before its requeue
    (progress / "42").write_text("0.4")
    assert tracejob.main(argv) == 0
    assert sum(slept) == pytest.approx(0.6)  # 60 % of 20 s on the 2g / 20
    assert max(slept) <= tracejob.CHECKPOINT_S
    rec = json.loads(log.read_text())
    assert rec["done_before"] == 0.4 and rec["size"] == 2
    assert float((progress / "42").read_text()) == pytest.approx(1.0)
    # a checkpoint that is no share of the work counts as none
    for junk in ("x", "1.5", "-0.1", ""):
        (progress / "42").write_text(junk)
        assert tracejob.read_progress(progress / "42") == 0.0
    assert tracejob.read_progress(None) == tracejob.read_progress(progress / "none") == 0.0
