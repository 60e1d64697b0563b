"""gres.conf records per possible MIG instance, GPU-instance ids and capability minors."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from slurm_mig.cli import main
from slurm_mig.devices.migcaps import (
    MinorTableError,
    gi_id_for,
    gi_ids,
    minor,
    parse_minors,
    render_minors,
)
from slurm_mig.geometry import Placement, get_model
from slurm_mig.slurm import gres

A100, A30 = get_model("A100-40GB"), get_model("A30-24GB")


def test_gi_ids_by_placement_match_published_listings():
    assert [gi_id_for(A100, Placement(s, 1)) for s in range(7)] == [7, 8, 9, 10, 11, 12, 13]
    assert [gi_id_for(A100, Placement(s, 2)) for s in (0, 2, 4, 6)] == [3, 4, 5, 6]
    assert [gi_id_for(A100, Placement(s, 4)) for s in (0, 4)] == [1, 2]
    assert gi_id_for(A100, Placement(0, 8)) == 0
    assert gi_ids(A100) == tuple(range(14))  # no 1g at memory slice 7
    assert gi_ids(A30) == tuple(range(7))
    with pytest.raises(ValueError):
        gi_id_for(A100, Placement(1, 2))


def test_minor_table_round_trips_and_refuses_bad_lines():
    table = parse_minors(render_minors(2))
    assert table[(1, 13, 0)] == minor(1, 13, 0) == 3 + 135 + 13 * 9 + 1
    assert parse_minors("config 1\nmonitor 2\nfabric-imex-mgmt 1\ngpu0/gi2/access 21\n") == {
        (0, 2, None): 21
    }
    with pytest.raises(MinorTableError, match="line 1"):
        parse_minors("gpu0/gix/access 3\n")


def test_one_record_per_instance_and_its_index():
    models = ("A100-40GB", "A30-24GB")
    recs = gres.records(models)
    assert len(recs) == 14 + 7 and recs[0].type == "m0g0" and recs[14].type == "m1g0"
    rec = gres.record_for(models, 0, Placement(4, 4))
    assert rec.type == "m0g2" and gres.index_of(models, rec) == 2
    assert gres.index_of(models, gres.record_for(models, 1, Placement(3, 1))) == 14 + 6
    assert gres.tres_per_node(rec) == "gres:gpu:m0g2:1"
    assert gres.node_gres(models).startswith("Gres=gpu:m0g0:1,gpu:m0g1:1,")


def test_gres_conf_names_parent_gi_and_ci_nodes():
    text = gres.gres_conf("gpu01", ("A100-40GB",), parse_minors(render_minors(1)))
    lines = text.splitlines()
    assert "NodeName=gpu01 AutoDetect=off" in lines
    recs = [ln for ln in lines if "Type=" in ln]
    assert len(recs) == 14
    assert recs[2] == (
        "NodeName=gpu01 Name=gpu Type=m0g2 MultipleFiles=/dev/nvidia0,"
        "/dev/nvidia-caps/nvidia-cap21,/dev/nvidia-caps/nvidia-cap22"
    )


def _config(tmp_path: Path) -> Path:
    cfg = tmp_path / "config.toml"
    cfg.write_text(
        '[nodes]\n"n1" = ["A100-40GB", "A100-40GB"]\n[device]\nbackend = "simulated"\n'
        f'simulated_dir = "{tmp_path}/sim/%n"\nlatency_scale = 0.0\n'
    )
    return cfg


def test_cli_prints_gres_conf_from_the_simulated_table(tmp_path, capsys):
    cfg = _config(tmp_path)
    assert main(["gres-conf", "--config", str(cfg), "--node", "n1"]) == 0
    out = capsys.readouterr().out
    assert out.count("Name=gpu") == 28 and "Type=m1g13" in out
    assert out.splitlines()[-1] == "NodeName=n1 Name=mig_slice Count=14 Flags=CountOnly"
    assert main(["gres-conf", "--config", str(cfg), "--node", "n1", "--node-gres"]) == 0
    assert capsys.readouterr().out.strip().endswith("gpu:m1g13:1,mig_slice:14")
    # gres = "records": the records alone, as before slices were counted
    cfg.write_text(cfg.read_text() + '[slurm]\ngres = "records"\n')
    assert main(["gres-conf", "--config", str(cfg), "--node", "n1"]) == 0
    assert "mig_slice" not in capsys.readouterr().out
    assert main(["gres-conf", "--config", str(cfg), "--node", "n1", "--node-gres"]) == 0
    assert capsys.readouterr().out.strip().endswith("gpu:m1g13:1")


def test_cli_refuses_an_unknown_node_in_one_line(tmp_path, capsys):
    assert main(["gres-conf", "--config", str(_config(tmp_path)), "--node", "nx"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'nx' is not configured" in err


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_make_nodes_creates_root_only_read_nodes(tmp_path, capsys):
    cfg, dev = _config(tmp_path), tmp_path / "dev"
    argv = ["gres-conf", "--config", str(cfg), "--node", "n1", "--dev", str(dev)]
    assert main([*argv, "--make-nodes", "--caps-major", "240", "--gpu-major", "195"]) == 0
    caps = sorted((dev / "nvidia-caps").iterdir())
    assert len(caps) == 2 * 14 * 2
    st = (dev / "nvidia-caps" / "nvidia-cap21").stat()
    assert stat.S_ISCHR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o444
    assert (os.major(st.st_rdev), os.minor(st.st_rdev), st.st_uid) == (240, 21, 0)
    assert os.minor((dev / "nvidia1").stat().st_rdev) == 1
    # again: nothing to do
    assert main([*argv, "--make-nodes", "--caps-major", "240"]) == 0
    assert "0 device node(s)" in capsys.readouterr().err


def test_check_ids_on_idle_simulated_gpus(tmp_path, capsys):
    cfg = _config(tmp_path)
    assert main(["gres-conf", "--config", str(cfg), "--node", "n1", "--check-ids"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "GPU 0 (A100-40GB): 18 placements, ids as the records name",
        "GPU 1 (A100-40GB): 18 placements, ids as the records name",
    ]


def test_check_ids_reports_a_driver_numbering_by_creation_and_a_busy_gpu(tmp_path, capsys):
    from slurm_mig.devices.simulated import SimulatedBackend

    cfg = _config(tmp_path)
    sim = SimulatedBackend(tmp_path / "sim" / "n1", models=["A100-40GB", "A100-40GB"])
    (sim.state_dir / "gi-numbering").write_text("creation\n")
    sim.create(1, "7g.40gb", Placement(0, 8))
    assert main(["gres-conf", "--config", str(cfg), "--node", "n1", "--check-ids"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2
    assert err[0].startswith("slurm-mig: GPU 0 (A100-40GB): the driver numbers GPU instances")
    assert "1g.5gb at 0:1 got id 1, its record names 7" in err[0]
    assert err[1] == (
        "slurm-mig: GPU 1: 1 MIG instance(s) exist; check the ids on an idle GPU "
        "(at boot, before slurmd starts)"
    )
    assert [i.gpu for i in sim.instances()] == [1]  # what it made, it destroyed


# -- gres-conf --catalogue (issue 22) -----------------------------------------------------


def _nvml_config(tmp_path: Path, models: str) -> Path:
    cfg = tmp_path / "nvml.toml"
    cfg.write_text(f'[nodes]\n"n1" = [{models}]\n[device]\nbackend = "nvml"\n')
    return cfg


@pytest.fixture
def fake_nvml(monkeypatch):
    import sys

    sys.path.insert(0, str(Path(__file__).parents[1]))
    import fake_pynvml as fake

    monkeypatch.setitem(sys.modules, "pynvml", fake)
    fake.fake_reset(["H200-141GB", "H100-80GB"])
    yield fake
    fake.fake_reset()


def test_catalogue_of_the_simulated_gpus_is_the_offline_one(tmp_path, capsys):
    assert (
        main(["gres-conf", "--config", str(_config(tmp_path)), "--node", "n1", "--catalogue"]) == 0
    )
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "GPU 0 (A100-40GB): offline catalogue (no driver to ask)"
    assert any(line.split()[:3] == ["1g.10gb", "offline", "1"] for line in out)
    assert any(line.split()[0] == "1g.5gb+me" and "1x" in line for line in out)
    assert not any("driver wins" in line for line in out)


def test_catalogue_from_the_driver_lists_its_profiles_and_each_difference(
    fake_nvml, tmp_path, capsys
):
    cfg = _nvml_config(tmp_path, '"H200-141GB", "H100-80GB"')
    assert main(["gres-conf", "--config", str(cfg), "--node", "n1", "--catalogue"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "GPU 0 (NVIDIA H200 141GB HBM3e, H200-141GB): the driver's catalogue"
    row = next(line.split() for line in out if line.split()[0] == "1g.35gb")
    assert row[1:6] == ["id", "15", "1", "slices", "32.25"] and "{0,2,4,6}:2" in row[-1]
    # a B200 on its first driver: 22.00 GiB where the tables (a later driver) have 20.50
    cfg = _nvml_config(tmp_path, '"B200-180GB"')
    fake_nvml.fake_reset(["B200-180GB-first-driver"])
    assert main(["gres-conf", "--config", str(cfg), "--node", "n1", "--catalogue"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert "GPU 0: B200-180GB: 1g.23gb has 22.00 GiB on the driver, 20.50 GiB in the tables" in (
        "\n".join(out)
    )
    assert all(line.endswith("(the driver wins)") for line in out if line.startswith("GPU 0: "))


def test_catalogue_agreeing_with_the_tables_exits_0_and_a_rename_exits_1(
    fake_nvml, tmp_path, capsys
):
    cfg = _nvml_config(tmp_path, '"H100-80GB"')
    fake_nvml.fake_reset(["H100-80GB"])
    assert main(["gres-conf", "--config", str(cfg), "--node", "n1", "--catalogue"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "the driver and slurm-mig's tables agree"
    fake_nvml.fake_rename_profile(0, "1g.10gb", "1g.9gb", memory_mb=9216)  # a test scenario
    assert main(["gres-conf", "--config", str(cfg), "--node", "n1", "--catalogue"]) == 1
    out = capsys.readouterr().out
    assert "GPU 0: H100-80GB: the driver calls 1g.10gb 1g.9gb" in out and "driver wins" in out


def test_catalogue_without_a_driver_is_one_line_and_exit_2(fake_nvml, tmp_path, capsys):
    fake_nvml.fake_set_driver("missing")
    cfg = _nvml_config(tmp_path, '"H100-80GB"')
    assert main(["gres-conf", "--config", str(cfg), "--node", "n1", "--catalogue"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("slurm-mig: error: ")
    assert "libnvidia-ml.so.1" in err
