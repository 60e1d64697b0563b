"""What Slurm does with the planner's writes when a job it read as pending has started
meanwhile (the race behind the planner's start_timeout re-hold, a move in place and a
note). Pinned on 22.05, 24.11 and 26.05 so that an upgrade that changes it fails here:
the cycle (`slurm_mig.daemon.cycle`) relies on it to keep a started job's record."""

from __future__ import annotations

import pytest

from slurm_mig.slurm.client import SlurmClient, SlurmError

from .cluster import LocalSlurm
from .conftest import squeue_job


@pytest.fixture(scope="module")
def cluster(slurm_shared) -> LocalSlurm:
    return slurm_shared(nodes=("n1",))


def running(cluster: LocalSlurm, client: SlurmClient, record: str) -> str:
    """A running job whose AdminComment is ``record`` (as the planner's release left it)."""
    jid = cluster.sbatch("sleep 300", partition="mig")
    client.update_job(jid, AdminComment=record)
    cluster.wait_job(jid, ("RUNNING",))
    return jid


def test_a_hold_of_a_started_job_is_taken(cluster: LocalSlurm, client: SlurmClient) -> None:
    """``scontrol hold`` of a running job succeeds (its priority becomes 0, it runs on):
    a hold that lands after a slow start is no sign that the job is still pending."""
    jid = running(cluster, client, "slurm-mig:{}")
    assert client.hold_jobs([jid]) == {}
    j = squeue_job(client, jid)
    assert (j.state, j.held) == ("RUNNING", False)
    assert cluster.job_field(jid, "Priority") == "0"
    cluster.run("scancel", jid)


def test_a_started_jobs_record_is_rewritten_by_an_update_without_a_pending_only_field(
    cluster: LocalSlurm, client: SlurmClient
) -> None:
    """AdminComment and Comment change on a running job (a note, or a move in place
    without GRES, would replace the record of the slice it runs on); a Dependency in
    the same update is refused only after they were written."""
    jid = running(cluster, client, "slurm-mig:{old}")
    with pytest.raises(SlurmError, match="(?i)pending"):
        client.update_job(jid, AdminComment="slurm-mig:{new}", Comment="c", Dependency="0")
    assert squeue_job(client, jid).admin_comment == "slurm-mig:{new}"
    cluster.run("scancel", jid)


def test_a_started_job_refuses_the_whole_update_with_tres_per_node(
    cluster: LocalSlurm, client: SlurmClient
) -> None:
    """With TresPerNode (a release's GRES record) in the update, Slurm refuses all of it
    on a running job before it reads AdminComment: the record stays."""
    jid = running(cluster, client, "slurm-mig:{old}")
    with pytest.raises(SlurmError, match="(?i)pending"):
        client.update_job(jid, AdminComment="slurm-mig:{new}", TresPerNode="gres/gpu:1")
    assert squeue_job(client, jid).admin_comment == "slurm-mig:{old}"
    cluster.run("scancel", jid)
