"""A throttled job array does not idle the partition (issue 34, hole 2), on a real
loopback Slurm with the whole installation.

The attack as found on 22.05: ``--array=0-19%1`` of 1g jobs on two A100s (14 slices).
The planner read the array without its throttle (squeue's fixed-width output does not
show it), released 13 tasks onto 13 slices, and Slurm ran one and kept the others
pending (JobArrayTaskLimit); every start_timeout they were held, planned again and
released again, and another user's job was never planned. Now the tasks Slurm keeps
back are held at once, the throttle is learned, at most that many tasks are planned,
and the other user's job starts on the free slices."""

from __future__ import annotations

import pytest

from slurm_mig.slurm.client import SlurmClient

from .conftest import live_cluster, wait_until

TASKS = 20
VICTIM = "1"  # daemon: a second unprivileged user every Debian root has, by number
STARTED = {"RUNNING", "COMPLETING", "COMPLETED"}


@pytest.fixture(scope="module")
def lc():
    # start_timeout far beyond the test: a task Slurm keeps back must be held for its
    # reason, not after a timeout
    planner = {"cycle": 1.0, "batch_window": 0.0, "start_timeout": 900.0}
    with live_cluster("slurm-mig-throttle-", planner=planner) as cluster:
        cluster.start_planner()
        yield cluster


def _tasks(lc, array: str) -> dict:
    return {j: v for j, v in lc.jobs().items() if j.startswith(f"{array}_")}


def test_a_throttled_array_leaves_the_free_slices_to_another_users_job(lc):
    array = lc.cluster.sbatch(
        "sleep 300", f"--array=0-{TASKS - 1}%1", partition="mig", comment="mig:mem=4G"
    )
    # what each read shows of the throttle (every task carries its array's)
    json_read = SlurmClient(env=lc.env, fast_read=False).jobs("mig")
    assert {j.array_throttle for j in json_read if j.job_id.startswith(f"{array}_")} == {1}

    def one_runs() -> bool:
        return sum(j.state == "RUNNING" for j in _tasks(lc, array).values()) == 1

    wait_until(one_runs, 90, "one task of the array to run")
    victim = lc.cluster.sbatch("sleep 1", partition="mig", comment="mig:mem=4G", user=VICTIM)
    wait_until(
        lambda: victim in lc.jobs() and lc.jobs()[victim].state in STARTED,
        90,
        "the other user's job to start while the array is queued",
    )
    tasks = _tasks(lc, array)
    assert sum(j.state == "RUNNING" for j in tasks.values()) == 1  # the throttle holds
    assert all(j.state in ("PENDING", "RUNNING") for j in tasks.values())

    # the tasks Slurm would keep back are not planned, and say why
    def throttled(st: dict) -> bool:
        return any("throttle" in why for jid, why in st.get("deferred", {}).items()
                   if jid.startswith(f"{array}_"))  # fmt: skip

    lc.wait_status(throttled, 30)

    # none is left released on free slices: a pending task is held again, or released
    # ahead to follow the running one on its slices (afterany: Reason Dependency)
    def settled() -> bool:
        pending = [j for j in _tasks(lc, array).values() if j.state == "PENDING"]
        return all(j.held or j.reason == "Dependency" for j in pending)

    wait_until(settled, 30, "the pending tasks to be held")
