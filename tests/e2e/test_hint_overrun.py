"""A ``time=`` hint is evidence, not a promise (issue 34, hole 3), on a real loopback
Slurm with the whole installation (hooks, planner daemon, runtime store).

As found on 22.05: a job of 30 s that declared ``time=1`` started ahead of honest jobs
submitted before it (the adaptive policy plans one priority shortest first), and the
next such job was again planned at 1 s, since learning stayed within the hint. Here the
liar is nobody (65534, the e2e job user), the honest user uid 1 (``daemon``)."""

from __future__ import annotations

import time

import pytest

from slurm_mig.demo.live import LiveCluster
from slurm_mig.overruns import OVERRUN_FACTOR, OVERRUN_GRACE_S
from slurm_mig.runtimes import RuntimeStore

from .conftest import host_release_only, live_cluster
from .conftest import wait_until as _wait

LIAR = "65534"
HONEST = "1"
WHOLE = "mem=30G"  # every job here needs the whole A100-40GB (7g.40gb): one at a time


@pytest.fixture
def lc():
    with live_cluster(
        "slurm-mig-overrun-", gpus=1, planner={"algorithm": "adaptive", "objective": "balanced"}
    ) as cluster:
        yield cluster


def _submit(lc: LiveCluster, seconds: int, user: str, hints: str) -> str:
    return lc.cluster.sbatch(
        f"sleep {seconds}", partition="mig", comment=f"mig:{hints},{WHOLE}", user=user
    )


@host_release_only
def test_a_time_1_liar_does_not_start_ahead_of_honest_jobs_after_an_overrun(lc):
    lc.start_planner()
    first = _submit(lc, 20, LIAR, "key=quick,time=1")
    overrun = OVERRUN_FACTOR * 1.0 + OVERRUN_GRACE_S + 2.0  # and a cycle's slack

    def overran():
        job = lc.jobs()[first]
        return job.start_time and time.time() - job.start_time > overrun

    _wait(overran, 120, "the liar's first job past its hint")
    # submitted together, while the liar's first job runs past its hint: the honest
    # jobs (5 s, said so) first, then the liar's second, which says 1 s again
    honest = [_submit(lc, 5, HONEST, "key=train,time=5") for _ in range(2)]
    second = _submit(lc, 1, LIAR, "key=quick,time=1")
    jobs = lc.wait_done([first, *honest, second], 180)
    assert {jobs[j].state for j in (first, *honest, second)} == {"COMPLETED"}
    assert (jobs[first].user, jobs[second].user, jobs[honest[0]].user) == (
        "nobody",
        "nobody",
        "daemon",
    )
    starts = {j: jobs[j].start_time for j in (*honest, second)}
    assert all(starts[second] >= starts[h] for h in honest), starts
    plans = lc.assignments([second, *honest])
    assert plans[second].planned_seconds > 5.0, plans[second]  # not its hint of 1 s
    # the overrun is on record against the liar alone, and its next job is planned
    # from what it ran (20 s on the whole GPU), not from its hint
    store = RuntimeStore(lc.state_dir / "profiles.sqlite")
    record = _wait(lambda: store.overruns_since(0.0), 60, "the overrun recorded")
    assert set(record) == {"uid:65534"} and record["uid:65534"]["quick"] >= 20.0, record
    third = _submit(lc, 1, LIAR, "key=quick,time=1")
    plan = _wait(lambda: lc.assignments([third]).get(third), 60, "the third job planned")
    assert plan.planned_seconds >= 20.0, plan
