"""Slurm's policy stays in charge, end to end on a real Slurm with accounting (slurmdbd
and MariaDB on loopback): fairshare decides who goes first, a QOS limit keeps a job
from being given slices (and explain names the limit), a reservation's jobs run only on
its nodes, a node set to drain gets no new plans, and a job preempted by a QOS of
higher priority is planned again and completes."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from slurm_mig.demo.live import LiveCluster
from slurm_mig.geometry import get_model
from slurm_mig.slurm.client import SlurmClient
from slurm_mig.slurm.jobrecord import parse_admin_comment
from slurm_mig.slurm.sitepolicy import job_priority
from slurm_mig.workload import load_task_source

from .conftest import live_cluster, require_accounting, wait_until

A100 = get_model("A100-40GB")
RODINIA = load_task_source("rodinia-a100", A100)
KERNEL = RODINIA[0].id
SCALE = 2.0
WHOLE = "mem=30G"  # only 7g.40gb holds it: such jobs run one at a time on a GPU
SLURM_CONF = [
    "PriorityType=priority/multifactor",
    "PriorityWeightFairshare=10000",
    "PriorityWeightQOS=5000",
    "PriorityWeightAge=0",
    "PriorityCalcPeriod=1",  # minutes: fairshare follows usage within a minute
    "PreemptType=preempt/qos",
    "PreemptMode=REQUEUE",
]


@pytest.fixture(scope="module")
def lc():
    require_accounting()
    with live_cluster(
        "slurm-mig-policy-",
        nodes=("node1", "node2"),
        gpus=1,
        accounting=True,
        planner={"reorder": 0, "batch_window": 0.0, "release_ahead": 0.0},
        slurm_options={"extra_conf": SLURM_CONF},
    ) as lc:
        c = lc.cluster
        c.add_qos("one", MaxJobsPerUser=1)
        c.add_qos("high", Priority=100, Preempt="normal")
        c.add_account("light", fairshare=90)  # the other tests' jobs
        # the fairshare test's alone: no other test's usage counts against either
        c.add_account("favoured", fairshare=90)
        c.add_account("heavy", fairshare=10)
        c.add_account("ops", fairshare=1)
        c.add_user("nobody", "heavy", qos=["normal", "one"], default_qos="normal")
        c.add_user("nobody", "light", qos=["normal", "one"], default_qos="normal")
        c.add_user("nobody", "favoured", qos=["normal"], default_qos="normal")
        c.add_user("root", "ops", qos=["normal", "high"], default_qos="normal")
        lc.learn(RODINIA, SCALE)
        yield lc


@pytest.fixture
def planner(lc):
    """The planner daemon for one test; the nodes left idle and usable after it."""
    lc.start_planner()
    yield lc
    lc.stop_planner()
    c = lc.cluster
    c.run("scancel", "--partition=mig", check=False)
    c.run("scancel", "--partition=debug", check=False)
    for node in lc.nodes:
        c.run("scontrol", "update", f"NodeName={node}", "State=RESUME", check=False)
    c.wait_idle(60)


def submit(lc: LiveCluster, account: str, *args: str, hints: str = WHOLE, scale=SCALE) -> str:
    return lc.submit(
        KERNEL, scale, user="nobody", hints=hints, args=[f"--account={account}", *args]
    )


def start_times(lc: LiveCluster, ids) -> dict[str, float]:
    jobs = lc.wait_done(ids, 240)
    for j in ids:
        assert jobs[j].state == "COMPLETED", (j, jobs[j].state)
    return {j: jobs[j].start_time for j in ids}


def explain(lc: LiveCluster, job_id: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "slurm_mig", "explain", job_id, "--config", str(lc.config_path)],
        env=lc.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _charge(lc: LiveCluster, account: str) -> None:
    """Give ``account`` some usage, so that its fairshare falls below the favoured one's
    (with no usage every association has the same factor): a job of it runs, and
    slurmctld, restarted, counts it (otherwise it would at its next priority
    calculation, within PriorityCalcPeriod)."""
    c = lc.cluster
    job = c.sbatch("sleep 2", f"--account={account}", "-c", "2", partition="debug")
    assert c.wait_job(job, timeout=60) == "COMPLETED"
    c.restart_slurmctld()

    def charged():
        shares = SlurmClient(env=lc.env).site_policy(refresh=0).fairshare
        heavy = [f for (a, _), f in shares.items() if a == account]
        light = [f for (a, _), f in shares.items() if a == "favoured"]
        return heavy and light and max(heavy) < min(light)

    wait_until(charged, 90, f"account {account}'s fairshare to drop")


def test_the_account_with_more_fairshare_goes_first(lc, planner):
    # submitted first by the heavy account, then by the light one; all held until the
    # planner starts: fairshare, not submission, decides who gets the GPUs first
    lc.stop_planner()
    _charge(lc, "heavy")
    heavy = [submit(lc, "heavy") for _ in range(3)]
    light = [submit(lc, "favoured") for _ in range(2)]
    # the planner's sum of Slurm's factors is Slurm's own priority for a job not held
    probe = lc.cluster.sbatch("true", "--account=heavy", "--begin=now+3600", partition="debug")
    client = SlurmClient(env=lc.env)
    job = next(j for j in client.jobs() if j.job_id == probe)
    ours = job_priority(client.site_policy(refresh=0), job, time.time())
    assert job.priority > 1 and abs(ours - job.priority) <= 1, (ours, job.priority)
    lc.cluster.run("scancel", probe)
    lc.start_planner()
    status = lc.wait_status(lambda s: set(s.get("priority", {})) >= {*heavy, *light}, 60)
    prio = status["priority"]
    assert min(prio[j] for j in light) > max(prio[j] for j in heavy), prio
    # explain shows the priority it planned by
    assert f"priority: {prio[heavy[-1]]}" in explain(lc, heavy[-1])
    starts = start_times(lc, heavy + light)
    # every job needs a whole GPU: no backfill is possible, so the light jobs go first
    assert max(starts[j] for j in light) <= min(starts[j] for j in heavy), starts


def test_a_qos_limit_keeps_a_job_from_slices_and_explain_names_it(lc, planner):
    # the first runs long enough that the others come while it runs, however busy the
    # machine: the assertions are about order, not about when
    first = submit(lc, "light", "--qos=one", hints="", scale=SCALE * 40)
    wait_until(lambda: lc.jobs()[first].state == "RUNNING", 60, f"job {first} to run")
    second = submit(lc, "light", "--qos=one", hints="")
    status = lc.wait_status(lambda s: second in s.get("deferred", {}), 60)
    assert "QOS one MaxJobsPerUser=1" in status["deferred"][second]
    assert second not in status.get("released", [])
    text = explain(lc, second)
    assert "QOS one MaxJobsPerUser=1" in text, text
    # its slices are not held: a job of the normal QOS, submitted after it, runs first
    other = submit(lc, "light", hints="")
    starts = start_times(lc, [first, second, other])
    ended = lc.jobs()[first].end_time
    assert starts[other] < ended <= starts[second] + 1, (starts, ended)


def test_a_reservations_jobs_run_only_on_its_nodes(lc, planner):
    c = lc.cluster
    c.run(
        "scontrol", "create", "reservation", "ReservationName=train", "Nodes=node2",
        "Accounts=light", "StartTime=now", "Duration=30", "Flags=IGNORE_JOBS",
    )  # fmt: skip
    try:
        inside = [submit(lc, "light", "--reservation=train", hints="") for _ in range(2)]
        outside = [submit(lc, "light", hints="") for _ in range(2)]
        start_times(lc, inside + outside)
        got = lc.assignments(inside + outside)
        assert {got[j].node for j in inside} == {"node2"}, got
        assert {got[j].node for j in outside} == {"node1"}, got
    finally:
        c.run("scontrol", "delete", "ReservationName=train", check=False)


def test_a_node_set_to_drain_gets_no_new_plans_and_its_plans_move(lc, planner):
    lc.stop_planner()
    ids = [submit(lc, "light") for _ in range(4)]
    lc.start_planner()

    def planned_on_node2() -> str | None:
        projected = lc.status().get("projected", {})
        return next(
            (
                j
                for j in ids
                if (projected.get(j) or {}).get("state") == "planned"
                and projected[j].get("node") == "node2"
            ),
            None,
        )

    moved = wait_until(planned_on_node2, 60, "a held job planned on node2")
    drained_at = time.time()
    lc.cluster.run("scontrol", "update", "NodeName=node2", "State=DRAIN", "Reason=e2e")
    lc.wait_status(
        lambda s: (
            (s.get("projected", {}).get(moved) or {}).get("node") == "node1"
            or moved in s.get("released", [])
        ),
        60,
    )
    start_times(lc, ids)
    got = lc.assignments(ids)
    late = [j for j in ids if lc.jobs()[j].start_time > drained_at + 1]
    assert late and all(got[j].node == "node1" for j in late), (got, late)
    assert got[moved].node == "node1"


def test_a_job_preempted_by_a_higher_qos_is_planned_again_and_completes(lc, planner):
    victim = submit(lc, "light", hints="", scale=SCALE * 5)
    wait_until(lambda: lc.jobs()[victim].state == "RUNNING", 60, f"job {victim} to run")
    node = parse_admin_comment(lc.jobs()[victim].admin_comment).node
    boss = lc.cluster.sbatch(
        "sleep 3", "--qos=high", "--account=ops", "--exclusive", f"--nodelist={node}",
        partition="debug", user="0",
    )  # fmt: skip
    wait_until(lambda: lc.jobs()[victim].restart_count >= 1, 60, f"job {victim} preempted")
    lc.cluster.wait_job(boss, timeout=60)
    jobs = lc.wait_done([victim], 240)
    assert jobs[victim].state == "COMPLETED"
    assert jobs[victim].restart_count >= 1
    a = parse_admin_comment(jobs[victim].admin_comment)
    assert a is not None and a.restart == jobs[victim].restart_count
