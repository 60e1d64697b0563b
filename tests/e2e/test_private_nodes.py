"""The e2e nodes are hosts of their own (LocalSlurm ``private_nodes``, on in every e2e
fixture): what a job or a hook writes under a node-local path stays on that node, out
of sight of the host (where the controller, the planner daemon and the tests run) and
of the other nodes; and jobs run as an unprivileged user unless a test asks for root."""

from __future__ import annotations

import os
import pwd
import shutil
import tempfile
from pathlib import Path

from .cluster import LocalSlurm


def test_a_jobs_file_on_a_node_stays_on_that_node(slurm) -> None:
    # the node-local directory: a scratch space every user may write, like /run/user
    scratch = Path(tempfile.mkdtemp(prefix="slurm-e2e-scratch-"))
    os.chmod(scratch, 0o1777)
    try:
        cluster: LocalSlurm = slurm(nodes=("pn1", "pn2"), node_dirs=(scratch,))
        assert cluster.private_nodes and cluster.job_user not in (None, "0", "root")
        write = cluster.sbatch(
            f"id -u > {scratch}/mine && echo $SLURMD_NODENAME >> {scratch}/mine",
            "--nodelist=pn1",
            partition="debug",
        )
        assert cluster.wait_job(write) == "COMPLETED", cluster.job_output(write)
        on_node1 = cluster.node_path("pn1", scratch / "mine")
        uid, node = on_node1.read_text().split()
        assert node == "pn1"
        assert int(uid) == pwd.getpwnam("nobody").pw_uid != 0  # not root's job
        assert on_node1.stat().st_uid == int(uid)
        # the host sees the mount point empty; node2 has its own, empty directory
        assert list(scratch.iterdir()) == []
        assert not cluster.node_path("pn2", scratch / "mine").exists()
        look = cluster.sbatch(
            f"ls -A {scratch}; echo listed; cat {scratch}/mine", "--nodelist=pn2", partition="debug"
        )
        cluster.wait_job(look, ["COMPLETED", "FAILED"])
        out = cluster.job_output(look)
        assert "listed" in out and "pn1" not in out, out
        # slurmd's own spool is node-local too: the same configured path, one per node
        assert list(cluster.spool_dir.iterdir()) == []
        spool1 = {p.name for p in cluster.node_path("pn1", cluster.spool_dir).iterdir()}
        assert spool1, "slurmd wrote nothing in pn1's SlurmdSpoolDir"
        # an admin's command on the node sees the node's files at the configured path
        res = cluster.run_on("pn1", "cat", str(scratch / "mine"))
        assert res.stdout.split() == [uid, "pn1"]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def test_shared_nodes_stay_possible_for_the_demo(slurm) -> None:
    cluster: LocalSlurm = slurm(nodes=("sh1",), private_nodes=False)
    assert cluster.node_path("sh1", cluster.spool_dir) == cluster.spool_dir
    assert cluster.wait_job(cluster.sbatch("true")) == "COMPLETED"
    assert (cluster.spool_dir / "sh1").is_dir()
