"""Released jobs Slurm will not start (`slurm_mig.daemon.cycle.waiting.kept_pending`,
`slurm_mig.daemon.cycle.backoff`): held again, at once for a reason Slurm does not lift
by itself, after start_timeout for one that is normal for a while, and left unplanned
for a delay that doubles each time, bounded, never re-released in a loop."""

from __future__ import annotations

import pytest
from support import node, squeue_job, write_config

from slurm_mig.config import load_config
from slurm_mig.daemon.cycle import (
    BACKOFF_BASE,
    BACKOFF_MAX,
    Backoff,
    CycleInput,
    Estimate,
    Hold,
    Release,
    plan_cycle,
)
from slurm_mig.daemon.cycle.backoff import THROTTLE_TTL, backoff_delay
from slurm_mig.daemon.cycle.waiting import kept_pending

T0 = 1_700_000_000.0
NODES = {"gpu01": ("A100-40GB",)}


def snapshot(jobs, **kw) -> CycleInput:
    est = {j.job_id: Estimate("train", {"A100-40GB": {7: 200.0}}) for j in jobs}
    opts = {"now": T0, "batch_window": 0.0, "nodes": NODES, **kw}
    return CycleInput(jobs=tuple(jobs), estimates=est, **opts)


def released(jid: str = "1", **fields):
    """Job ``jid`` planned and released by a first cycle, as squeue then shows it."""
    first = plan_cycle(snapshot([squeue_job(jid)]))
    [release] = [a for a in first.actions if isinstance(a, Release)]
    record = dict(release.fields)
    return squeue_job(
        jid,
        held=False,
        admin_comment=record["AdminComment"],
        comment=record.get("Comment", ""),
        **{"reason": "None", **fields},
    )


@pytest.mark.parametrize(
    "reason",
    ["JobArrayTaskLimit", "Licenses", "BadConstraints", "QOSMaxJobsPerUserLimit",
     "AssocGrpGRES", "MaxJobsPerAccount", "NodeDown", "BurstBufferResources"],
)  # fmt: skip
def test_reasons_slurm_does_not_lift_by_itself_are_kept_pending(reason):
    assert kept_pending(reason)


@pytest.mark.parametrize(
    "reason", ["None", "Priority", "Resources", "Prolog", "", "Dependency", "ReqNodeNotAvail"]
)
def test_reasons_normal_for_a_released_job_are_not(reason):
    """ReqNodeNotAvail is also Slurm's reason while the job's required node is busy (its
    CPUs, the last job on its slices leaving): holding it at once sent every released
    job of a loaded cluster round the back-off (benchmarks/daemon_scale.py)."""
    assert not kept_pending(reason)


def test_a_released_job_kept_pending_for_licenses_is_held_at_once_and_not_planned():
    job = released(reason="Licenses")
    result = plan_cycle(snapshot([job], now=T0 + 5))
    assert [a.job_id for a in result.actions if isinstance(a, Hold)] == ["1"]
    assert result.limited == {"1": "Licenses"} and "1" not in result.planned


def test_a_released_job_waiting_for_resources_keeps_its_slices_until_start_timeout():
    job = released(reason="Resources")
    early = plan_cycle(snapshot([job], now=T0 + 60))
    assert not [a for a in early.actions if isinstance(a, Hold)] and early.busy == 1
    late = plan_cycle(snapshot([job], now=T0 + 200))  # start_timeout 120 s
    assert [a.job_id for a in late.actions if isinstance(a, Hold)] == ["1"]
    assert "Resources" in late.limited["1"] and "1" not in late.planned
    assert "not started" in late.deferred["1"]


def test_the_delay_doubles_each_time_and_is_bounded():
    delays = [backoff_delay(n) for n in range(1, 12)]
    assert delays[0] == BACKOFF_BASE and delays[1] == 2 * BACKOFF_BASE
    assert all(a <= b for a, b in zip(delays, delays[1:], strict=False))
    assert max(delays) == BACKOFF_MAX and backoff_delay(10**9) == BACKOFF_MAX


def test_a_job_backs_off_longer_each_time_and_is_forgotten_once_it_leaves_the_queue():
    b = Backoff()
    b.update({"1": "Licenses"}, {}, {"1", "2"}, T0)
    assert "Licenses" in b.waiting(T0 + BACKOFF_BASE - 1)["1"]
    assert b.waiting(T0 + BACKOFF_BASE) == {}
    t = T0 + BACKOFF_BASE
    b.update({"1": "Licenses"}, {}, {"1", "2"}, t)  # released again, kept again
    assert "1" in b.waiting(t + 2 * BACKOFF_BASE - 1) and "2x" in b.waiting(t)["1"]
    b.update({}, {}, {"2"}, t + 1)  # started (or gone): forgotten, strikes too
    assert "1" not in b and b.waiting(t + 1) == {}
    b.update({"1": "Licenses"}, {}, {"1"}, t + 2)
    assert b.waiting(t + 2 + BACKOFF_BASE) == {}


def test_a_learned_throttle_lasts_while_its_array_is_queued_and_not_past_its_ttl():
    b = Backoff()
    b.update({}, {"5": 1}, {"5_3", "9"}, T0)
    assert b.throttles(T0 + THROTTLE_TTL - 1) == {"5": 1}
    assert b.throttles(T0 + THROTTLE_TTL) == {}  # its owner may have raised it
    b.update({}, {"5": 2}, {"5_3"}, T0 + 10)
    b.update({}, {}, {"9"}, T0 + 20)  # the array left the queue
    assert b.throttles(T0 + 20) == {}


def test_the_daemon_backs_a_job_off_longer_each_time_slurm_keeps_it(tmp_path):
    """A released job Slurm keeps pending for Licenses every time: held, planned again
    after BACKOFF_BASE, held again, then after twice that; no release in between."""
    from slurm_mig.daemon.daemon import PlannerDaemon

    cfg = load_config(write_config(tmp_path, {"node1": ["A100-40GB"]}))
    clock = [T0 + 10]

    class Slurm:
        shown = squeue_job("2")
        released: list[float] = []

        def jobs(self, partition=None):
            return [self.shown]

        def nodes(self, partition=None):
            return [node("node1", "IDLE")]

        def hold_jobs(self, ids):
            self.shown = squeue_job("2", admin_comment=self.shown.admin_comment)
            return {}

        def update_job(self, job_id, **fields):
            self.shown = squeue_job("2", admin_comment=fields.get("AdminComment", ""))

        def release_jobs(self, ids):
            self.released.append(clock[0])
            self.shown = squeue_job(
                "2", held=False, reason="Licenses", admin_comment=self.shown.admin_comment
            )
            return {}

    slurm = Slurm()
    daemon = PlannerDaemon(cfg, slurm, None, b"k" * 32, clock=lambda: clock[0])
    seen = []
    for _ in range(80):  # 80 cycles of 10 s
        report = daemon.run_cycle()
        if "2" in report.result.deferred:
            seen.append(report.result.deferred["2"])
        clock[0] += 10
    gaps = [b - a for a, b in zip(slurm.released, slurm.released[1:], strict=False)]
    assert len(gaps) >= 3 and all(b > a for a, b in zip(gaps, gaps[1:], strict=False))
    assert any("Licenses" in s for s in seen)
