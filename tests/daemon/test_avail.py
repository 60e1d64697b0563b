"""``slurm-mig avail``: the free capacity per GPU that the planner publishes in its public
summary (`public.capacity`), read by anyone: the table, --noheader, -o, --json,
``--profile`` with its exit status, a stale summary, a missing one."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pytest
from cyclesite import StubConfig
from support import squeue_job as job
from support import write_config

from slurm_mig.cli import avail, main
from slurm_mig.daemon.cycle import CycleInput, plan_cycle
from slurm_mig.daemon.daemon import CycleReport, Estimator
from slurm_mig.daemon.jobtimes import project_jobs
from slurm_mig.daemon.public import capacity, summary, write_public
from slurm_mig.geometry import Placement, Slot, get_model

A100 = get_model("A100-40GB")
NOW = 10_000.0


def _gpu(node, local, *instances):
    insts = [
        SimpleNamespace(slot=Slot(Placement(start, mem), size), job=j, keep_for=k)
        for start, mem, size, j, k in instances
    ]
    return SimpleNamespace(node=node, local=local, instances=insts)


def test_capacity_counts_jobs_kept_instances_and_plans_as_taken():
    snap = SimpleNamespace(
        model=A100,
        gpus=[
            _gpu("n1", 0, (0, 4, 3, "7", None)),  # a 3g.20gb runs job 7
            _gpu("n1", 1, (0, 4, 4, None, None)),  # an idle 4g.20gb: free for the planner
            _gpu("n2", 0, (4, 4, 3, None, "9")),  # a 3g.20gb kept for job 9
        ],
    )
    planned = {"8": {"node": "n2", "gpu": 0, "profile": "2g.10gb", "placement": [0, 2]}}
    got = {(g["node"], g["gpu"]): g for g in capacity([snap], planned)}
    assert got["n1", 0]["free"] == 4 and got["n1", 0]["fits"][-1] == "3g.20gb"
    assert "4g.20gb" not in got["n1", 0]["fits"]  # 4g sits at slice 0 only
    assert got["n1", 1]["free"] == 7 and got["n1", 1]["fits"][-1] == "7g.40gb"
    assert got["n2", 0]["free"] == 2 and got["n2", 0]["fits"] == ["1g.5gb", "1g.10gb", "2g.10gb"]
    assert all(set(g) == {"node", "gpu", "model", "slices", "free", "fits"} for g in got.values())


def _report(jobs, nodes):
    est = Estimator(StubConfig(), None)
    snap = CycleInput(
        now=NOW,
        jobs=tuple(jobs),
        nodes=nodes,
        estimates={j.job_id: est(j, ["A100-40GB"]) for j in jobs},
        batch_window=0.0,
        release_ahead=0.0,
        algorithm="far",
    )
    result = plan_cycle(snap)
    report = CycleReport(1, NOW, NOW + 0.25, result, None, policy="far", batch_window=0.0)
    report.extra = {"projected": project_jobs(result.snapshots, result.decisions)}
    return report


def test_the_public_summary_carries_each_usable_gpus_capacity(tmp_path):
    jobs = [job(str(i), user="alice", comment=f"secret mig:time={100 + i}") for i in (1, 2)]
    report = _report(jobs, {"gpu01": ("A100-40GB",), "gpu02": ("A100-40GB",)})
    gpus = summary(report)["gpus"]
    assert [(g["node"], g["gpu"], g["model"]) for g in gpus] == [
        ("gpu01", 0, "A100-40GB"),
        ("gpu02", 0, "A100-40GB"),
    ]
    planned = {(p.node, p.gpu) for p in report.result.planned.values()}
    for g in gpus:  # a GPU the plan leaves alone is free; one it plans onto is not whole
        whole = (g["node"], g["gpu"]) not in planned
        assert (g["free"] == 7 and g["fits"][-1] == "7g.40gb") == whole
    path = tmp_path / "plan.json"
    assert write_public(path, report) is None
    text = path.read_text()
    assert "alice" not in text and "secret" not in text and "MIG-" not in text


def _publish(tmp_path, gpus, age=1.0):
    path = tmp_path / "plan.json"
    data = {"updated": time.time() - age, "cycle": 9, "jobs": {}, "gpus": gpus}
    path.write_text(json.dumps(data))
    return path


GPUS = [
    {"node": "n2", "gpu": 0, "model": "A100-40GB", "slices": 7, "free": 0, "fits": []},
    {
        "node": "n1",
        "gpu": 1,
        "model": "A100-40GB",
        "slices": 7,
        "free": 4,
        "fits": ["1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb"],
    },
    {
        "node": "h1",
        "gpu": 0,
        "model": "H100-80GB",
        "slices": 7,
        "free": 2,
        "fits": ["1g.10gb", "1g.20gb", "2g.20gb"],
    },
]


@pytest.fixture
def summary_file(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_MIG_CONFIG", str(tmp_path / "absent.toml"))
    return _publish(tmp_path, GPUS)


def test_avail_prints_a_table_like_sinfo(summary_file, capsys):
    assert main(["avail", "--file", str(summary_file)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "NODE MODEL     GPU FREE LARGEST",
        "h1   H100-80GB   0    2 2g.20gb",
        "n1   A100-40GB   1    4 3g.20gb",
        "n2   A100-40GB   0    0 -",
    ]


def test_avail_noheader_format_and_json(summary_file, capsys):
    assert main(["avail", "--file", str(summary_file), "--noheader", "--model", "a100-40gb"]) == 0
    assert [x.split() for x in capsys.readouterr().out.splitlines()] == [
        ["n1", "A100-40GB", "1", "4", "3g.20gb"],
        ["n2", "A100-40GB", "0", "0", "-"],
    ]
    assert main(["avail", "--file", str(summary_file), "-o", "%N/%g %f/%s %p", "--node", "n1"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "NODE/GPU FREE/SLICES PROFILES",
        "n1  /1   4   /7      1g.5gb,1g.10gb,2g.10gb,3g.20gb",
    ]
    assert main(["avail", "--file", str(summary_file), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["stale"] == "" and [g["largest"] for g in data["gpus"]] == [
        "2g.20gb",
        "3g.20gb",
        "",
    ]
    assert main(["avail", "--file", str(summary_file), "-o", "%N %x"]) == 2
    assert "unknown field %x" in capsys.readouterr().err


def test_avail_profile_answers_with_its_exit_status(summary_file, capsys):
    assert main(["avail", "--file", str(summary_file), "--profile", "3g.20gb"]) == 0
    assert capsys.readouterr().out == "3g.20gb could start now on 1 GPU: n1 gpu 1\n"
    assert main(["avail", "--file", str(summary_file), "--profile", "4g.20gb"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("4g.20gb: no GPU could start it now (of 2 A100-40GB GPUs, the largest")
    assert "3g.20gb" in out and out.count("\n") == 1
    assert main(["avail", "--file", str(summary_file), "--profile", "1g.18gb"]) == 1
    assert "no GPU here is a GH200-144GB or H200-141GB" in capsys.readouterr().out
    assert main(["avail", "--file", str(summary_file), "--profile", "3g.21gb"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no GPU model has a MIG profile '3g.21gb'" in err
    assert main(["avail", "--file", str(summary_file), "--profile", "2g.20gb", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["could_start"] and [g["node"] for g in data["gpus"]] == ["h1"]


def test_avail_says_how_old_a_stale_summary_is(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SLURM_MIG_CONFIG", str(tmp_path / "absent.toml"))
    path = _publish(tmp_path, GPUS, age=3600)
    assert main(["avail", "--file", str(path)]) == avail.EXIT_STALE
    captured = capsys.readouterr()
    assert "NODE" in captured.out
    assert captured.err.startswith(f"slurm-mig avail: {path} is 60m00s old (last written at ")
    assert "is slurm-mig-planner running?" in captured.err


def test_avail_missing_or_unset_summary_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SLURM_MIG_CONFIG", str(tmp_path / "absent.toml"))
    missing = tmp_path / "nope.json"
    assert main(["avail", "--file", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(missing) in err and "planner daemon" in err
    (tmp_path / "old.json").write_text(json.dumps({"updated": time.time(), "jobs": {}}))
    assert main(["avail", "--file", str(tmp_path / "old.json")]) == 2
    assert "an older slurm-mig planner wrote it" in capsys.readouterr().err
    cfg = write_config(tmp_path, {"g1": ["A100-40GB"]})
    assert main(["avail", "--config", str(cfg)]) == 2
    assert "[paths] public_file is off" in capsys.readouterr().err
    published = tmp_path / "pub" / "plan.json"
    cfg.write_text(cfg.read_text().replace("[planner]", f'public_file = "{published}"\n[planner]'))
    assert main(["avail", "--config", str(cfg)]) == 2
    assert f"no planner summary at {published}" in capsys.readouterr().err
    published.parent.mkdir()
    _publish(published.parent, GPUS)
    assert main(["avail", "--config", str(cfg), "--noheader"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3


def test_avail_unreadable_summary_names_the_mode(tmp_path, monkeypatch):
    path = _publish(tmp_path, GPUS)
    monkeypatch.setattr(avail, "open", _denied, raising=False)  # as a user meets a 0600 file
    with pytest.raises(ValueError, match=f"cannot read {path}: it should be 0644"):
        avail.load(path)


def _denied(*args, **kwargs):
    raise PermissionError(13, "Permission denied")
