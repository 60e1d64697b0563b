"""Jobs of several slices in the simulator: a job file's ``tasks`` column, the gang
planned as one job on a region, learned per instance size as the daemon learns it."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from slurm_mig.geometry import get_model
from slurm_mig.job import Job
from slurm_mig.sim.engine import simulate
from slurm_mig.sim.jobrows import job_from_row
from slurm_mig.sim.jobs import load_jobs
from slurm_mig.sim.knowledge import LearnedRuntimes, learned_times
from slurm_mig.workload import WorkloadError

A100 = get_model("A100-40GB")
TASK = {1: 400.0, 2: 210.0, 3: 150.0, 4: 120.0, 7: 70.0}


def _file(tmp_path, rows: list[str], header: str = "id,arrival,1,2,3,4,7,tasks,kind"):
    path = tmp_path / "jobs.csv"
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


def test_a_gang_row_becomes_a_job_on_the_regions_that_hold_it(tmp_path):
    path = _file(
        tmp_path, ["a,0,400,210,150,120,70,4,k", "b,0,400,210,150,120,70,2,k", "c,0,1,1,1,1,1,,k"]
    )
    a, b, c = load_jobs(path, A100)
    assert a.tasks == 4 and dict(a.times) == {
        1: math.inf,
        2: math.inf,
        3: math.inf,
        4: 400.0,
        7: 400.0,
    }
    assert b.tasks == 2 and dict(b.times) == {1: math.inf, 2: 400.0, 3: 400.0, 4: 210.0, 7: 150.0}
    assert c.tasks == 1 and dict(c.times) == {1: 1.0, 2: 1.0, 3: 1.0, 4: 1.0, 7: 1.0}


@pytest.mark.parametrize(
    "value,says",
    [
        ("0", "from 1 to 8"),
        ("9", "from 1 to 8"),
        ("2.5", "from 1 to 8"),
        ("four", "from 1 to 8"),
        ("8", "holds at most 7 instances"),
    ],
)
def test_a_bad_tasks_field_is_one_line_naming_the_row(tmp_path, value, says):
    path = _file(tmp_path, [f"a,0,400,210,150,120,70,{value},k"])
    with pytest.raises(WorkloadError, match=says) as info:
        load_jobs(path, A100)
    assert "job 'a'" in str(info.value) and "\n" not in str(info.value)


def test_a_gang_with_a_requested_size_is_refused(tmp_path):
    path = _file(tmp_path, ["a,0,100,1,2"], header="id,arrival,runtime,size,tasks")
    with pytest.raises(WorkloadError, match="requested size"):
        load_jobs(path, A100)


def test_a_gang_runs_its_task_time_on_a_region_and_every_invariant_holds(tmp_path):
    path = _file(tmp_path, ["a,0,400,210,150,120,70,4,k", "b,0,400,210,150,120,70,3,k"])
    jobs = load_jobs(path, A100)
    # the dynamic policies (a static layout runs a gang on N instances of its own:
    # test_sim_static_gangs.py)
    for policy in ("adaptive", "far", "frag-aware"):
        r = simulate(jobs, policy, 1, 1, A100, check=True)
        # 4 x 1g on the 4g region and 3 x 1g on the 3g region fit side by side
        assert r.exec_s == pytest.approx([400.0, 400.0]), policy
        assert max(r.start) < 10.0, policy


def test_learned_knowledge_learns_a_gang_per_instance_size():
    store = LearnedRuntimes()
    store.record("u", "k", A100.name, 1, 500.0)  # one task of an earlier gang on its 1g
    gang = Job("g", 0.0, {1: math.inf, 2: 400.0, 3: 400.0, 4: 210.0, 7: 150.0}, kind="k", tasks=2)
    seen = learned_times(gang, A100, store, owner="u")
    assert seen[2] == pytest.approx(500.0) and seen[3] == pytest.approx(500.0)
    assert seen[1] == math.inf and seen[4] < seen[2]


def test_a_finished_gang_is_recorded_under_its_task_size(tmp_path, monkeypatch):
    path = _file(tmp_path, ["a,0,400,210,150,120,70,4,k", "b,9000,400,210,150,120,70,4,k"])
    jobs = [replace(j, user="u") for j in load_jobs(path, A100)]
    seen = []
    record = LearnedRuntimes.record

    def spy(self, owner, key, model, size, seconds):
        seen.append((owner, key, size, seconds))
        record(self, owner, key, model, size, seconds)

    monkeypatch.setattr(LearnedRuntimes, "record", spy)
    r = simulate(jobs, "adaptive", 1, 1, A100, knowledge="learned", check=True)
    assert r.exec_s == pytest.approx([400.0, 400.0])
    assert seen and all(size == 1 for _, _, size, _ in seen)  # 1g, not the 4g region
    assert seen[0][:2] == ("u", "k") and seen[0][3] == pytest.approx(400.0)


def test_a_gangs_regions_are_only_those_whose_instances_hold_a_tasks_memory():
    # 7.5 GiB a task: a 1g.5gb holds none (a single job would get a 1g.10gb; a gang's
    # instances are each size's own profile), so 3 tasks run on 2g.10gb in a 7g only
    a100 = get_model("A100-40GB")
    row = {"id": "g", "arrival": 0, "tasks": 3, "memory_mib": 7680,
           "times": {1: 400.0, 2: 250.0, 3: 180.0, 4: 170.0, 7: 140.0}}  # fmt: skip
    job = job_from_row(row, "row 1", a100)
    assert {s for s, t in job.times.items() if math.isfinite(t)} == {7}
    assert job.times[7] == 250.0 and job.task_times[1] == 400.0
    with pytest.raises(WorkloadError, match="3 of its sizes with 30000 MiB each"):
        job_from_row({**row, "memory_mib": 30000}, "row 1", a100)
