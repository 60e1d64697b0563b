"""Slurm accounting in the loopback clusters (LocalSlurm(accounting=True)): a private
MariaDB and the release's own slurmdbd, associations with fairshare, a QOS whose limit
holds a second job back, and nothing of either left running after ``stop()``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from slurm_mig.geometry import get_model
from slurm_mig.workload import load_task_source

from .cluster import LocalSlurm
from .conftest import JOB_USER, live_cluster, require_accounting, wait_until

# what slurmctld multifactor needs for FairShare; the weights do not matter here
PRIORITY = ["PriorityType=priority/multifactor", "PriorityWeightFairshare=10000"]


@pytest.fixture
def accounting(slurm):
    """``slurm`` with accounting on."""
    require_accounting()
    return lambda **kwargs: slurm(accounting=True, **kwargs)


def _two_accounts(cluster: LocalSlurm) -> None:
    cluster.add_account("a", fairshare=10)
    cluster.add_account("b", fairshare=30)
    cluster.add_user("nobody", "a")
    cluster.add_user("nobody", "b")


def _sshare(cluster: LocalSlurm) -> dict[tuple[str, str], dict[str, str]]:
    """(account, user) -> sshare's row (RawShares, FairShare, ...)."""
    lines = cluster.run("sshare", "-a", "-P").stdout.splitlines()
    head = lines[0].split("|")
    rows = [dict(zip(head, line.split("|"))) for line in lines[1:]]
    return {(r["Account"].strip(), r["User"]): r for r in rows}


def _processes_of(root: Path) -> dict[int, str]:
    """pid -> name of each process whose command line or environment names ``root``."""
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            text = (proc / "cmdline").read_bytes() + (proc / "environ").read_bytes()
            if str(root).encode() in text:
                found[int(proc.name)] = (proc / "comm").read_text().strip()
        except OSError:
            continue
    return found


def test_associations_fairshare_from_raw_shares_and_usage(accounting):
    """Accounts made before slurmctld starts are listed with their RawShares; nobody's job
    in b is charged to b and, once slurmctld recalculates, b's FairShare drops below a's."""
    cluster = accounting(extra_conf=PRIORITY, accounting_setup=_two_accounts)
    out = cluster.sacctmgr("-n", "-P", "show", "assoc", "format=account,user,share")
    rows = {tuple(line.split("|")) for line in out.splitlines()}
    assert {("a", "", "10"), ("b", "", "30"), ("a", JOB_USER, "1"), ("b", JOB_USER, "1")} <= rows
    mgr = cluster.run("scontrol", "show", "assoc_mgr", "flags=assoc", f"users={JOB_USER}").stdout
    assert mgr.count(f"UserName={JOB_USER}({JOB_USER})") == 2  # slurmctld knows the uid
    share = _sshare(cluster)
    assert (share[("a", "")]["RawShares"], share[("b", "")]["RawShares"]) == ("10", "30")

    job = cluster.sbatch("sleep 2", "--account=b")
    assert cluster.job_field(job, "Account") == "b"
    assert cluster.wait_job(job) == "COMPLETED"
    cluster.restart_slurmctld()

    def fairshares() -> tuple[float, float] | None:
        share = _sshare(cluster)
        a, b = (float(share[(acct, JOB_USER)]["FairShare"] or 0) for acct in ("a", "b"))
        return (a, b) if b < a else None

    a, b = wait_until(fairshares, 15, "b's FairShare below a's")
    assert float(_sshare(cluster)[("b", JOB_USER)]["RawUsage"]) > 0
    assert a > b


def test_qos_max_jobs_per_user_holds_the_second_job(accounting):
    """Associations and a QOS added while slurmctld runs take effect: a job with
    --account=a --qos=q runs to COMPLETED, a second waits with QOSMaxJobsPerUserLimit
    until the first is done; an account nobody belongs to is refused at submission."""
    cluster = accounting()
    cluster.add_account("a")
    cluster.add_qos("q", MaxJobsPerUser=1)
    cluster.add_user("nobody", "a", qos=["normal", "q"])
    first = cluster.sbatch("sleep 4", "--account=a", "--qos=q")
    cluster.wait_job(first, ("RUNNING",))
    second = cluster.sbatch("true", "--account=a", "--qos=q")
    wait_until(
        lambda: cluster.job_field(second, "Reason") == "QOSMaxJobsPerUserLimit",
        10,
        "the second job to wait on its QOS",
    )
    assert cluster.job_state(second) == "PENDING"
    assert cluster.wait_job(first) == "COMPLETED"
    assert cluster.wait_job(second) == "COMPLETED"

    refused = cluster.try_sbatch("true", "--account=nosuch")
    assert refused.returncode != 0
    assert "Invalid account" in refused.stderr


def test_stop_leaves_no_database_or_slurmdbd(accounting):
    """MariaDB and slurmdbd run for the cluster and are gone, with its directory, after
    stop()."""
    cluster = accounting()
    root = cluster.root
    running = set(_processes_of(root).values())
    assert {"mariadbd", "slurmdbd", "slurmctld"} <= running
    cluster.stop()
    assert _processes_of(root) == {}
    assert not root.exists()


def test_live_cluster_job_runs_under_its_association():
    """A whole installation (LiveCluster(accounting=True): hooks, job_submit.lua, planner)
    runs nobody's job once nobody has an association, charged to its default account."""
    require_accounting()
    task = load_task_source("rodinia-a100", get_model("A100-40GB"))[0]
    with live_cluster("slurm-mig-acct-", accounting=True, gpus=1) as lc:
        assert lc.cluster is not None
        lc.cluster.add_account("a")
        lc.cluster.add_user("nobody", "a")
        lc.learn([task], 0.2)
        job = lc.submit(task.id, 0.2)
        lc.start_planner()
        jobs = lc.wait_done([job], 40)
        assert jobs[job].state == "COMPLETED"
        assert lc.cluster.job_field(job, "Account") == "a"
