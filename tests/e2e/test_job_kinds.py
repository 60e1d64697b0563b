"""Job kinds a user submits to the MIG partition, on a real loopback Slurm with the
whole installation (planner daemon, hooks, job_submit.lua): a job array's tasks are
each planned and run as a job of their own (``<array id>_<task>`` to the planner and
the hooks, whatever number Slurm gives a task when it splits it out), a heterogeneous
job is refused at sbatch, and ``--begin``, ``--dependency`` and ``--deadline`` keep
Slurm's meaning."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from slurm_mig.daemon.cycle.waiting import BEGIN_SLACK
from slurm_mig.demo.live import DONE_STATES
from slurm_mig.geometry import get_model
from slurm_mig.slurm.client import SlurmClient
from slurm_mig.workload import load_task_source

from .conftest import live_cluster, wait_until

A100 = get_model("A100-40GB")
RODINIA = load_task_source("rodinia-a100", A100)
SCALE = 0.5
TASKS = 3
ENDED = DONE_STATES | {"DEADLINE"}  # COMPLETING is not: the Epilog still runs
# seconds to a --begin beyond the planner's BEGIN_SLACK by more than the submissions and
# a planner cycle take: one planned at once is caught (the test waits this long)
LATER = BEGIN_SLACK + 10


def _ids(lc, job_id: str) -> dict[str, str]:
    """{planner id: Slurm's JobID} of a job's records (an array's tasks each)."""
    out = lc.cluster.run(
        "squeue", "-h", "--states=all", "-r", f"--jobs={job_id}", "-O", "JobID:12,JobArrayID:24"
    ).stdout
    return {w[1]: w[0] for w in (line.split() for line in out.splitlines()) if len(w) == 2}


def _ended(lc, job_ids: list[str], timeout: float) -> dict:
    """The jobs once each has ended (DEADLINE included, which LiveCluster.wait_done
    does not wait for)."""

    def ended() -> dict | None:
        jobs = lc.jobs()
        return jobs if all(j in jobs and jobs[j].state in ENDED for j in job_ids) else None

    return wait_until(ended, timeout, f"jobs {job_ids} to end", poll=0.5)


@pytest.fixture(scope="module")
def lc():
    with live_cluster("slurm-mig-kinds-", planner={"batch_window": 1.0}) as cluster:
        cluster.learn(RODINIA, SCALE)
        # the array first, its tasks still one pending record: what squeue and the
        # client see of it before the planner splits any task out
        cluster.array = cluster.submit("Gaussian", SCALE, args=[f"--array=0-{TASKS - 1}"])
        cluster.tasks = [f"{cluster.array}_{t}" for t in range(TASKS)]
        cluster.unsplit = _ids(cluster, cluster.array)
        client = SlurmClient(env=cluster.env)
        cluster.reads = {
            "fast": sorted(j.job_id for j in client.jobs("mig")),
            "json": sorted(j.job_id for j in SlurmClient(env=cluster.env, fast_read=False).jobs()),
            "one task": _ids(cluster, cluster.tasks[1]),
        }
        cluster.start_planner()
        yield cluster


def test_a_pending_array_is_one_job_per_task_to_the_client(lc) -> None:
    # one record in slurmctld (every task's JobID the array's), a job per task here
    assert lc.unsplit == {t: lc.array for t in lc.tasks}
    assert lc.reads["fast"] == lc.reads["json"] == lc.tasks
    assert lc.reads["one task"] == {lc.tasks[1]: lc.array}  # the wide re-read's --jobs=


def test_each_array_task_runs_as_a_job_of_its_own_on_its_own_instance(lc) -> None:
    jobs = lc.wait_done(lc.tasks, 90)
    assert {t: jobs[t].state for t in lc.tasks} == {t: "COMPLETED" for t in lc.tasks}
    planned = lc.assignments(lc.tasks)
    assert sorted(planned) == lc.tasks and all(planned[t].job_id == t for t in lc.tasks)
    # split out, the tasks got JobIDs of their own: what the Prolog saw as SLURM_JOB_ID
    numbers = _ids(lc, lc.array)
    assert sorted(numbers) == lc.tasks and len(set(numbers.values())) == TASKS
    # each ran, on an instance (the module's other tests' jobs may have run before)
    records = {r["job"]: r for r in lc.records() if r["job"] in numbers.values()}
    assert sorted(records) == sorted(numbers.values())
    created = {e["job_id"]: e["uuid"] for e in lc.audit() if e["op"] == "create"}
    for task, number in numbers.items():
        rec = records[number]
        a = planned[task]
        assert (rec["gpu"], rec["placement"]) == (a.gpu, [a.placement.start, a.placement.size])
        assert created.get(task, created.get(a.reuse_from)) == rec["uuid"]
    runs = [(r["start"], r["end"], r["uuid"]) for r in records.values()]
    for s1, e1, u1 in runs:  # tasks that ran at once had instances of their own
        assert all(u1 != u2 for s2, e2, u2 in runs if (s1, e1) != (s2, e2) and s1 < e2 and s2 < e1)


def _hetjob_script(lc) -> Path:
    path = lc.root / "hetjob.sh"
    path.write_text(
        "#!/bin/sh\n#SBATCH --partition=mig\n#SBATCH --comment=mig:key=CFD\n"
        "#SBATCH hetjob\n#SBATCH --partition=mig\n#SBATCH --comment=mig:key=CFD\ntrue\n"
    )
    path.chmod(0o644)
    return path


def test_heterogeneous_jobs_are_refused_at_sbatch_with_the_fix(lc) -> None:
    user = "--uid=" + str(lc.job_user)
    colon = lc.cluster.run(
        "sbatch", user, "--partition=mig", "--comment=mig:key=CFD", "--wrap=true", ":",
        "--partition=mig", "--comment=mig:key=CFD", check=False,
    )  # fmt: skip
    script = lc.cluster.run(
        "sbatch", user, f"--chdir={lc.root}", str(_hetjob_script(lc)), check=False
    )
    for res in (colon, script):
        assert res.returncode != 0, res.stdout
        assert "slurm-mig: heterogeneous jobs cannot run in the mig partition" in res.stderr
        assert "submit each component as a job of its own" in res.stderr


def test_begin_dependency_and_deadline_keep_slurms_meaning(lc) -> None:
    lc.wait_done(lc.tasks, 90)  # the array's slices free: the planner's choices are simple
    submitted = time.time()
    soon = lc.submit("CFD", SCALE, args=["--begin=now+15"])
    later = lc.submit("CFD", SCALE, args=[f"--begin=now+{LATER:.0f}"])
    first = lc.submit("Gaussian", 3.0)  # 20 s or more on any slice
    then = lc.submit("CFD", SCALE, args=[f"--dependency=afterok:{first}"])
    ahead = lc.submit("CFD", SCALE, args=["--deadline=now+5minutes", "--time=1"])
    # Slurm cancels a job that can no longer end before its deadline (here: once its
    # dependency is met, more than 15 s on, with a time limit of 1 minute); the slices
    # planned for it go on to the others
    missed = lc.submit(
        "CFD", SCALE, args=["--deadline=now+75", "--time=1", f"--dependency=afterok:{first}"]
    )
    jobs = _ended(lc, [soon, later, first, then, ahead, missed], 150)
    assert {j: jobs[j].state for j in (soon, later, first, then, ahead)} == dict.fromkeys(
        (soon, later, first, then, ahead), "COMPLETED"
    )
    assert (jobs[missed].state, jobs[missed].reason) == ("DEADLINE", "DeadLine")
    assert jobs[soon].start_time >= int(submitted) + 15
    assert jobs[later].start_time >= int(submitted) + LATER
    # a begin time beyond the slack is not planned early: no slices kept idle for it
    assert lc.assignments([later])[later].issued >= submitted + LATER - BEGIN_SLACK - 1
    assert jobs[then].start_time >= jobs[first].end_time
    st = wait_until(lambda: lc.status().get("busy") == 0 and lc.status(), 30, "an idle planner")
    assert (st["waiting"], st["planned"]) == (0, 0)
