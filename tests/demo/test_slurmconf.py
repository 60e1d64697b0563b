"""slurm_mig.demo.slurmconf's gres.conf of a fixed MIG layout (a site without
slurm-mig) and LiveCluster's layout of its nodes, without a Slurm (the probe on 22.05,
24.11 and 26.05: tracejob's doc)."""

from __future__ import annotations

from pathlib import Path

from slurm_mig.demo.live import LiveCluster
from slurm_mig.demo.slurmconf import LayoutInstance, layout_gres_conf, layout_gres_term


def test_layout_gres_conf_names_each_instance_typed_by_profile_in_order(
    mig_layout: list[LayoutInstance],
) -> None:
    text = layout_gres_conf("n1", mig_layout, "/dev")
    lines = text.splitlines()
    assert lines[1] == "NodeName=n1 AutoDetect=off"
    records = [ln for ln in lines if "Name=gpu" in ln]
    assert [r.split("Type=")[1].split()[0] for r in records] == ["2g.10gb", "3g.20gb", "7g.40gb"]
    # the parent device and the instance's GI and CI capability nodes
    files = records[0].split("MultipleFiles=")[1].split(",")
    assert files[0] == "/dev/nvidia1" and len(files) == 3
    assert all(f.startswith("/dev/nvidia-caps/nvidia-cap") for f in files[1:])
    assert len({r.split("MultipleFiles=")[1] for r in records}) == 3
    assert layout_gres_term(mig_layout) == "Gres=gpu:2g.10gb:1,gpu:3g.20gb:1,gpu:7g.40gb:1"


def test_live_cluster_layout_cycles_partitions_over_all_gpus_smallest_first() -> None:
    lc = LiveCluster(Path("/tmp/x"), nodes=("n1", "n2"), gpus=3, static_layout="7/2-2-3")
    layout = lc.layout()
    # GPU k of the cluster (nodes in order) gets partition k mod 2: n1 7, 2-2-3, 7;
    # n2 2-2-3, 7, 2-2-3
    assert [(i.gpu, i.profile) for i in layout["n1"]] == [
        (1, "2g.10gb"), (1, "2g.10gb"), (1, "3g.20gb"), (0, "7g.40gb"), (2, "7g.40gb"),
    ]  # fmt: skip
    assert [i.gpu for i in layout["n2"] if i.profile == "7g.40gb"] == [1]
    assert sorted(i.placement.start for i in layout["n2"] if i.gpu == 0) == [0, 2, 4]
    assert layout_gres_term(layout["n2"]) == "Gres=gpu:2g.10gb:4,gpu:3g.20gb:2,gpu:7g.40gb:1"


def test_live_cluster_config_keeps_the_named_objective_and_omits_an_unset_one(tmp_path) -> None:
    from slurm_mig.config import load_config
    from slurm_mig.demo.tracerun import planner_settings

    def written(planner) -> str:
        lc = LiveCluster(tmp_path, planner=planner)
        lc.config_path.parent.mkdir(parents=True, exist_ok=True)
        lc._write_config(tmp_path / "key")
        return lc.config_path.read_text()

    text = written(planner_settings([]))
    assert 'objective = "balanced"' in text and "makespan" not in text
    assert load_config(tmp_path / "etc" / "config.toml").objective == "balanced"
    assert "objective" not in written(planner_settings(["algorithm=far-pcie"]))
    assert 'objective = "makespan"' in written({"algorithm": "far"})  # the demo's own choice
