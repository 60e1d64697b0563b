"""A cluster's stop ends every process it started: slurmstepds (24.11's and 26.05's
show /proc no environment and live in sessions of their own) and jobs included, also
those of a slurmd that was crashed and started again (issue 40)."""

from __future__ import annotations

from slurm_mig.demo import procfs

from .cluster import LocalSlurm


def _ours(cluster: LocalSlurm) -> list[procfs.Found]:
    return procfs.find([f"SLURM_CONF={cluster.conf}"], [cluster.root])


def test_stop_ends_the_slurmstepds_and_jobs_of_every_node(slurm) -> None:
    cluster: LocalSlurm = slurm(nodes=("n1", "n2"))
    jobs = [cluster.sbatch("sleep 300", "-w", n, partition="mig") for n in ("n1", "n2")]
    jobs.append(cluster.sbatch("sleep 300", "-w", "n1", partition="mig", user="0"))
    for job in jobs:
        cluster.wait_job(job, ("RUNNING",), 30)
    cluster.crash_slurmd("n1")  # its slurmstepds run on, as on a node whose slurmd died
    cluster.start_slurmd("n1")
    cluster.wait_for(
        lambda: sum(f.command.startswith("slurmstepd: [") for f in _ours(cluster)) >= 3,
        30,
        "the jobs' slurmstepds",
    )
    before = _ours(cluster)
    root = cluster.root
    cluster.stop()
    assert [str(f) for f in before if procfs.running(f)] == []
    assert procfs.find([f"SLURM_CONF={cluster.conf}"], [root]) == []
