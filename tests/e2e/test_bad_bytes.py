"""Issue 34, hole 1: one byte that is not UTF-8 in a job's name or comment stopped all
planning (every cycle failed decoding squeue's output) until that job left the queue.

Performed on a real loopback Slurm with the whole installation, on every release the
suite runs (22.05 reads the whole queue as JSON, every partition, once a name in the
MIG partition is too long for the fixed width; 24.11 and 26.05 read one partition):

- with such a job in another partition and a name in the MIG partition too long for
  the fixed-width read, another user's job is released within two cycles.
"""

from __future__ import annotations

import pytest

from slurm_mig.demo.live import LiveCluster

from .conftest import live_cluster, wait_until

CYCLE = 0.5
BAD_NAME = "bad\udcff"  # passed to sbatch as the byte 0xff (surrogateescape)
VICTIM = "1"  # daemon: a second unprivileged user every Debian root has


@pytest.fixture(scope="module")
def lc():
    with live_cluster("slurm-mig-bytes-", planner={"cycle": CYCLE, "batch_window": 0.0}) as cluster:
        cluster.start_planner()
        wait_until(lambda: cluster.status().get("cycle", 0) >= 2, 60, "the first cycles")
        yield cluster


def test_a_bad_byte_in_the_queue_delays_no_other_job(lc: LiveCluster):
    cluster = lc.cluster
    bad = cluster.sbatch("sleep 600", "--hold", partition="debug", name=BAD_NAME)
    long_name = "n" * 250  # fills the fixed-width Name: 22.05 reads the whole queue as JSON
    long_job = cluster.sbatch("sleep 1", partition="mig", comment="mig:mem=4G", name=long_name)
    try:
        start = lc.status().get("cycle", 0)
        victim = cluster.sbatch("sleep 1", partition="mig", comment="mig:mem=4G", user=VICTIM)

        def released():
            job = lc.jobs().get(victim)
            return job is not None and not job.held and lc.status().get("cycle", 0)

        at = wait_until(released, 60, "the other user's job released")
        print(f"released after {at - start} cycles")
        assert at - start <= 2 + 1  # two cycles, and the one running when it was submitted
        log = lc.log_file.read_text(errors="replace")
        assert "codec can't decode" not in log and "cannot read Slurm" not in log
    finally:
        cluster.run("scancel", bad, long_job, check=False)
