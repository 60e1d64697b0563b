"""The one job type of the planning core (``slurm_mig.job``): what a task file, a
snapshot, the simulator and the batch planners all hold."""

from __future__ import annotations

import math
from dataclasses import FrozenInstanceError, replace

import pytest

from slurm_mig.geometry import get_model
from slurm_mig.job import Job
from slurm_mig.planner.driver import task_of
from slurm_mig.planner.snapshot import ClusterSnapshot, Gpu, runnable_sizes
from slurm_mig.sim import SimJob
from slurm_mig.workload import parse_csv, parse_json

A100 = get_model("A100-40GB")
TIMES = {1: 100.0, 2: 60.0, 3: 45.0, 4: 40.0, 7: 30.0}


def test_a_size_without_a_time_cannot_run_there():
    job = Job("a", 0.0, {2: 10.0, 4: 6.0})
    assert job.time(2) == 10.0
    assert math.isinf(job.time(1)) and math.isinf(job.time(7))


def test_work_and_the_least_work_are_slice_seconds():
    job = Job("a", 0.0, TIMES)
    assert job.work(2) == 120.0
    assert job.work(7) == 210.0
    assert job.min_work() == 100.0  # 1 x 100 beats 2 x 60, 3 x 45 ...
    assert math.isinf(Job("b", 0.0, {1: math.inf, 2: 5.0}).work(1))


def test_defaults_are_a_plain_job():
    job = Job("a", 3.0, TIMES)
    assert (job.memory, job.pcie_demand, job.alpha, job.weight) == (0, 0.0, 1.0, 1.0)
    assert (job.size, job.deadline, job.priority, job.restartable) == (None, None, 0.0, False)
    assert not job.pcie_bound
    assert Job("b", 0.0, TIMES, pcie_demand=5.7).pcie_bound


def test_frozen_hashable_and_equal_by_value():
    a = Job("a", 0.0, dict(TIMES), memory=5)
    b = Job("a", 0.0, dict(TIMES), memory=5)
    assert a == b and hash(a) == hash(b)  # times do not enter the hash: a dict
    assert a != replace(a, weight=2.0)
    with pytest.raises(FrozenInstanceError):
        a.memory = 1  # type: ignore[misc]


def test_every_loader_and_the_simulator_hold_the_same_type():
    (csv_task,) = parse_csv("id,1,2,3,4,7\na,9,5,4,3,2\n")
    (json_task,) = parse_json('[{"id": "b", "times": {"1": 4, "7": 1}, "memory_bytes": 7}]')
    assert type(csv_task) is Job and type(json_task) is Job
    assert (csv_task.arrival, json_task.memory) == (0.0, 7)
    assert SimJob is Job


def test_a_batch_task_is_the_job_with_the_times_it_may_run_with():
    job = Job("j", 5.0, TIMES, memory=15 * 2**30, pcie_demand=5.7, alpha=1.25, priority=3.0)
    snap = ClusterSnapshot(10.0, A100, (Gpu(0),), {"j": job})
    task = task_of(job, snap)
    assert type(task) is Job
    assert (task.id, task.memory, task.pcie_demand, task.alpha, task.priority) == (
        "j",
        job.memory,
        5.7,
        1.25,
        3.0,
    )
    ok = set(runnable_sizes(job, A100))
    assert ok == {3, 4, 7}  # 15 GiB: not on 1g.5gb or 2g.10gb
    assert {s for s, t in task.times.items() if t < math.inf} == ok
    assert set(task.times) == set(A100.planner_sizes)
