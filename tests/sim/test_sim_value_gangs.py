"""benchmarks/value.py's jobs of several slices: the opt-in ``miso-40-gangs`` workload
makes a seeded share of jobs gangs (deterministic by seed), and the static sweep skips,
with the reason, layouts that cannot host a gang on one node."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from slurm_mig.geometry import get_model
from slurm_mig.job import Job
from slurm_mig.planner.snapshot import runnable_sizes
from slurm_mig.sim.gangworkload import with_gangs

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("value_gangs", ROOT / "benchmarks" / "value.py")
value = importlib.util.module_from_spec(_spec)
sys.modules["value_gangs"] = value
_spec.loader.exec_module(value)

A100 = get_model("A100-40GB")
GIB = 1024**3


def _jobs(n: int = 400) -> list[Job]:
    times = {1: 400.0, 2: 210.0, 3: 150.0, 4: 120.0, 7: 70.0}
    return [Job(f"j{i}", float(i), times, kind="k") for i in range(n)]


def test_the_gang_workload_is_opt_in_and_listed():
    keys = [w.key for w in value.WORKLOADS]
    assert "miso-40-gangs" not in keys
    assert [w.key for w in value.OPT_IN] == ["miso-40-gangs"]
    assert "miso-40-gangs" in value._parser().format_help()
    assert "miso-40-gangs" in value.__doc__


def test_with_gangs_is_seeded_and_makes_about_its_share_gangs():
    jobs = _jobs()
    a, b = with_gangs(jobs, 0.25, 1, A100), with_gangs(jobs, 0.25, 1, A100)
    assert [(j.id, j.tasks) for j in a] == [(j.id, j.tasks) for j in b]
    assert [j.tasks for j in a] != [j.tasks for j in with_gangs(jobs, 0.25, 2, A100)]
    gangs = [j for j in a if j.tasks > 1]
    assert 0.15 < len(gangs) / len(jobs) < 0.35
    assert {j.tasks for j in gangs} <= set(value.GANG_TASKS)
    for j in gangs:  # each task with the job's per-size times, runnable on a region
        assert dict(j.task_times) == dict(jobs[int(j.id[1:])].times)
        assert runnable_sizes(j, A100)


def test_a_job_no_region_holds_stays_single():
    # a task needs the whole GPU's memory: no region holds two of them
    big = Job("big", 0.0, {4: 90.0, 7: 50.0}, memory=21 * GIB)
    (out,) = with_gangs([big], 1.0, 0, A100)
    assert out.tasks == 1 and out == big


def test_a_layout_with_too_few_instances_for_a_gang_is_skipped_with_the_reason():
    gang = next(j for j in with_gangs(_jobs(), 1.0, 0, A100) if j.tasks == 3)
    whole = "static:layout=7:match=fit"
    assert "runs 3 tasks" in value.unhosted(whole, [gang], 2)
    assert value.unhosted(whole, [gang], 3) is None
    # typed: three 1g on two 4-2-1 GPUs are two; untyped: any of their six instances
    assert "the layout has 2" in value.unhosted("static:layout=4-2-1:match=exact", [gang], 2)
    assert value.unhosted("static:layout=4-2-1:match=fit", [gang], 2) is None
    # whole GPUs: one a task
    assert "runs 3 tasks" in value.unhosted(value.WHOLE, [gang], 2)
    assert value.unhosted(value.WHOLE, [gang], 3) is None
