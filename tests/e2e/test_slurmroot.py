"""The Slurm release under test really runs (a root's daemons, not the host's), leaves
nothing mounted on the host, and its jobs see the paths the tests share with them."""

from __future__ import annotations

import sys
from pathlib import Path

from slurm_mig.demo.slurmroot import parse_version

from .cluster import LocalSlurm


def mounts() -> list[str]:
    return Path("/proc/self/mountinfo").read_text().splitlines()


def test_daemons_and_clients_are_the_release_under_test(slurm) -> None:
    cluster: LocalSlurm = slurm(nodes=("v1",))
    want = cluster.install.version
    assert want != (0,)
    assert parse_version(cluster.run("scontrol", "version").stdout) == want
    assert parse_version(cluster.run("sbatch", "--version").stdout) == want
    log = (cluster.root / "log" / "slurmctld.log").read_text()
    assert f"slurmctld version {cluster.install.version_text} started" in log
    jid = cluster.sbatch("cat /etc/debian_version", partition="mig")
    cluster.wait_job(jid)
    if cluster.install.root is not None:  # the job ran inside the root's Debian
        root_debian = (cluster.install.root / "etc" / "debian_version").read_text()
        assert cluster.job_output(jid) == root_debian


def test_nothing_stays_mounted_on_the_host(slurm) -> None:
    before = mounts()
    cluster: LocalSlurm = slurm(nodes=("m1",))
    assert mounts() == before  # each root process mounts in its own namespace
    cluster.wait_job(cluster.sbatch("true", partition="mig"))
    cluster.stop()
    assert mounts() == before
    assert not any(f" {cluster.root}" in line for line in mounts())


def test_jobs_run_this_python_with_the_checkouts_packages(slurm) -> None:
    cluster: LocalSlurm = slurm(nodes=("p1",))
    probe = "import sys, slurm_mig.memory.forecast; print(sys.version_info[:2])"
    # as root: this interpreter may live under root's home (0700), out of a user's reach
    jid = cluster.sbatch(f"{cluster.python} -c '{probe}'", partition="mig", user="0")
    assert cluster.wait_job(jid, ["COMPLETED", "FAILED"]) == "COMPLETED", cluster.job_output(jid)
    assert cluster.job_output(jid) == f"{sys.version_info[:2]}\n"


def test_cgroups_can_be_turned_on_for_a_test(slurm) -> None:
    """task/cgroup and proctrack/cgroup with a given cgroup.conf (a device-isolation
    test needs them); the job then runs in its own job cgroup, which stop() removes."""
    cluster: LocalSlurm = slurm(
        nodes=("cg1",),
        task_plugin="task/cgroup",
        proctrack_type="proctrack/cgroup",
        cgroup_conf=["CgroupPlugin=autodetect", "ConstrainDevices=yes", "IgnoreSystemd=yes"],
    )
    jid = cluster.sbatch("cat /proc/self/cgroup", partition="mig")
    assert cluster.wait_job(jid, ["COMPLETED", "FAILED"]) == "COMPLETED", cluster.logs()
    assert f"/job_{jid}/step_batch" in cluster.job_output(jid)
    cluster.stop()
    assert not list(Path("/sys/fs/cgroup").glob("*/slurm_cg1"))
