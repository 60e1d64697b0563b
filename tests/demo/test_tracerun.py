"""slurm_mig.demo.tracerun without a Slurm: a trace job's batch script and sbatch options
in either run, one row per job from squeue's records and the jobs' own, the settings
of a site compressed in time (slurm.conf's priority, slurm-mig's periods) and the
record of the planner's cycles."""

from __future__ import annotations

import shlex
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from slurm_mig.demo.tracerun import (
    PERIODS,
    Submission,
    job_rows,
    job_wrap,
    planner_settings,
    priority_lines,
    progress_dir,
    record_status,
    sbatch_args,
    slurm_duration,
)

A100 = "A100-40GB"
SUB = Submission("miso-3", "resnet", 2.5, 3, "gpu:3g.20gb:1", "mig:key=resnet", "1=40", 1 << 30)


def test_job_wrap_runs_the_job_program_with_its_arguments() -> None:
    wrap = job_wrap(SUB, A100, 20.0, Path("/x/sim"), Path("/x/jobs.jsonl"), "/usr/bin/python3")
    assert wrap.startswith("SLURM_MIG_T0=$(date +%s.%N) exec env PYTHONPATH=")
    argv = shlex.split(wrap)
    i = argv.index("slurm_mig.demo.tracejob")
    assert argv[i + 1 :] == [A100, "1=40", str(1 << 30), "20", "/x/sim", "/x/jobs.jsonl"]


def test_sbatch_args_per_run() -> None:
    assert sbatch_args(SUB, "static") == (
        ["--time=3", "--gres=gpu:3g.20gb:1"],
        {"partition": "mig", "name": "resnet"},
    )
    assert sbatch_args(SUB, "slurm-mig") == (
        ["--time=3"],
        {"partition": "mig", "name": "resnet", "comment": "mig:key=resnet"},
    )


def test_a_restartable_job_may_be_requeued_and_checkpoints_beside_the_log() -> None:
    sub = replace(SUB, restartable=True)
    wrap = job_wrap(sub, A100, 20.0, Path("/x/sim"), Path("/x/jobs.jsonl"), "/usr/bin/python3")
    assert shlex.split(wrap)[-1] == "/x/progress" == str(progress_dir(Path("/x/jobs.jsonl")))
    assert sbatch_args(sub, "slurm-mig")[0] == ["--time=3", "--requeue"]
    assert sbatch_args(sub, "static")[0] == ["--time=3", "--requeue", "--gres=gpu:3g.20gb:1"]


def test_job_rows_take_the_jobs_own_times_else_squeues() -> None:
    subs = [SUB, Submission("miso-4", "k", 3.0, None, "gpu:1", "mig:key=k", "1=4", 0)]
    submitted = {"miso-3": ("7", 100.0, 99.5), "miso-4": ("8", 101.0, 101.0), "errors": []}
    seen = {
        "7": SimpleNamespace(state="COMPLETED", start_time=101, end_time=140, restart_count=1),
        "8": SimpleNamespace(state="FAILED", start_time=102, end_time=103, restart_count=0),
    }
    records = [
        {"job": "7", "launched": 100.9, "end": 110.0, "size": 1, "profile": "1g.5gb"},
        {"job": "7", "launched": 120.2, "end": 139.8, "size": 3, "profile": "3g.20gb"},
    ]
    rows = job_rows(subs, submitted, seen, records)
    assert rows[0] == {
        "id": "miso-3", "job_id": "7", "submit": 100.0, "lag": 0.5, "start": 120.2,
        "end": 139.8, "size": 3, "profile": "3g.20gb", "state": "COMPLETED",
        "restarts": 1, "error": None,
    }  # fmt: skip
    assert (rows[1]["start"], rows[1]["end"], rows[1]["size"]) == (102, 103, None)


def test_priority_lines_compress_the_simulators_age_setting():
    lines = priority_lines(20)
    assert "PriorityType=priority/multifactor" in lines
    assert "PriorityWeightAge=1000" in lines
    assert "PriorityMaxAge=0-16:48:00" in lines  # 14 days / 20
    assert "PriorityCalcPeriod=1" in lines  # 5 min / 20, at least a minute
    assert "PriorityWeightFairshare=0" in lines
    assert slurm_duration(90061) == "1-01:01:01"


def test_planner_settings_are_the_sites_defaults_unless_overridden():
    from slurm_mig.config import SCHEMA

    got = planner_settings([])
    assert got["algorithm"] == "adaptive" == SCHEMA["planner"]["algorithm"].default
    assert got["cycle"] == SCHEMA["planner"]["cycle"].default
    got = planner_settings(["cycle=1", "algorithm=far"])
    assert (got["cycle"], got["algorithm"]) == (1, "far")
    got = planner_settings(["objective=jct"])
    assert got["objective"] == "jct"
    with pytest.raises(ValueError, match="KEY=VALUE"):
        planner_settings(["nonsense=1"])


def test_planner_settings_name_the_objective_the_daemon_plans_by():
    # LiveCluster plans by makespan where its settings name no objective (its demo's
    # choice): a run "with the site's defaults" must name balanced, as the daemon does
    from slurm_mig.daemon.cycle import configured_objective

    got = planner_settings([])
    assert got["objective"] == "balanced" == configured_objective("adaptive", "")
    assert planner_settings(["algorithm=far"])["objective"] == configured_objective("far", "")
    assert planner_settings(["algorithm=baseline"])["objective"] is None  # takes none
    assert planner_settings(["algorithm=far-pcie"])["objective"] is None  # its own rule


def test_planner_periods_compressed_with_the_trace():
    from slurm_mig.config import SCHEMA

    got = planner_settings([], scale=20)
    for key in PERIODS:
        assert got[key] == pytest.approx(float(SCHEMA["planner"][key].default) / 20)
    assert got["algorithm"] == "adaptive"


class ScriptedStop:
    """A stop event whose every wait runs the next step; set once the steps run out."""

    def __init__(self, steps) -> None:
        self.steps = list(steps)

    def is_set(self) -> bool:
        return not self.steps

    def wait(self, _timeout: float) -> bool:
        self.steps.pop(0)()
        return self.is_set()


def test_record_status_keeps_each_cycle_once_and_skips_unreadable_files(tmp_path) -> None:
    status, into = tmp_path / "planner-status.json", tmp_path / "rec"

    def write(text: str):
        return lambda: status.write_text(text)

    steps = [
        write('{"cycle": 1, "planned": 2}'),
        write('{"cycle": 1, "planned": 3}'),  # the same cycle rewritten: kept once
        write('{"cycle": 2, "plan'),  # half written: read again at the next poll
        write('{"cycle": 2, "planned": 5}'),
        write('["not", "a", "status"]'),
        write('{"cycle": "3"}'),
        status.unlink,
    ]
    kept = record_status(status, into, ScriptedStop(steps))  # type: ignore[arg-type]
    assert kept == 2
    assert sorted(p.name for p in into.iterdir()) == ["cycle-000001.json", "cycle-000002.json"]
    assert (into / "cycle-000001.json").read_text() == '{"cycle": 1, "planned": 2}'
    assert (into / "cycle-000002.json").read_text() == '{"cycle": 2, "planned": 5}'


def test_record_status_stops_with_one_line_when_it_cannot_write(tmp_path, capsys) -> None:
    status = tmp_path / "planner-status.json"
    (tmp_path / "file").write_text("")
    into = tmp_path / "file" / "rec"  # under a file: cannot be made
    steps = [lambda: status.write_text('{"cycle": 1}'), lambda: None, lambda: None]
    stop = ScriptedStop(steps)
    assert record_status(status, into, stop) == 0  # type: ignore[arg-type]
    assert len(stop.steps) == 2  # it returned at the first cycle, not at the stop
    err = capsys.readouterr().err
    assert err.startswith("record: stopped after 0 cycles: cannot write ")
    assert err.count("\n") == 1 and "Traceback" not in err
