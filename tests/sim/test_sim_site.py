"""Site conditions in the simulator: users' time limits (drawn from the traces),
Slurm's multifactor priority (age, Fair Tree) and what a policy knows of runtimes
(the daemon's own estimator, fed by the runs the simulation finished), while the
engine runs the true times."""

from __future__ import annotations

import math
import statistics

import pytest
from support import supercloud_previous_job_factors, trace_limit_ratios

from slurm_mig.geometry import get_model
from slurm_mig.limitevidence import LIMIT_RATIO
from slurm_mig.sim import SimJob, simulate
from slurm_mig.sim.knowledge import (
    SITE_ESTIMATE_OFF_P50,
    SITE_WITHIN_2X,
    LearnedRuntimes,
    learned_times,
    limit_times,
)
from slurm_mig.sim.limits import (
    GRID,
    RATIO_LEVELS,
    RATIO_QUANTILES,
    limit_for,
    reference_runtime,
    with_site_fields,
)
from slurm_mig.sim.priority import DAY, SitePriority, Usage, fair_tree, job_priority
from slurm_mig.sim.site import SiteConditions

A100 = get_model("A100-40GB")


def job(jid, arrival=0.0, t=100.0, **kw) -> SimJob:
    """A job running ``t`` seconds on 7g and ``t`` x 7 / s on s slices."""
    times = {s: t * 7 / s for s in A100.planner_sizes}
    return SimJob(jid, arrival, times, **kw)


# -- users' time limits ---------------------------------------------------------


def test_the_ratio_table_is_what_the_two_traces_give():
    points = trace_limit_ratios()
    classes = sorted(RATIO_QUANTILES)
    for k, low in enumerate(classes):
        high = classes[k + 1] if k + 1 < len(classes) else math.inf
        ratios = sorted(r for t, r in points if low <= t < high)
        got = statistics.quantiles(ratios, n=100, method="inclusive")
        for level, want in zip(RATIO_LEVELS[1:], RATIO_QUANTILES[low][1:]):
            assert got[round(level * 100) - 1] == pytest.approx(want, rel=0.02), (low, level)
        assert ratios[0] == pytest.approx(RATIO_QUANTILES[low][0], rel=0.02)


def test_a_limit_is_a_value_users_pick_and_covers_the_run():
    assert limit_for(100.0, 0.5) in GRID and limit_for(100.0, 0.5) >= 100 * 59
    assert limit_for(20000.0, 0.0) == 21600.0  # the next round value above 1.0 x
    assert limit_for(10 * DAY, 0.5) == 10 * DAY  # past the grid: never below the run
    # longer runs ask relatively less: a 5-hour run's median ratio is about 1.3
    assert limit_for(18000.0, 0.5) / 18000.0 < limit_for(300.0, 0.5) / 300.0
    with pytest.raises(ValueError, match="runtime"):
        limit_for(math.inf, 0.5)


def test_site_fields_are_seeded_and_keep_what_a_job_names():
    jobs = [job(f"j{i}", i, 100 + i) for i in range(50)]
    a, b = with_site_fields(jobs, 3), with_site_fields(jobs, 3)
    assert a == b and a != with_site_fields(jobs, 4)
    assert {j.user for j in a} <= {f"user{k}" for k in range(1, 9)} and len({j.user for j in a}) > 3
    assert all(j.time_limit >= reference_runtime(j) and j.time_limit in GRID for j in a)
    mine = with_site_fields([job("x", user="alice", time_limit=999.0)], 0)[0]
    assert (mine.user, mine.time_limit) == ("alice", 999.0)


# -- Slurm's priority -------------------------------------------------------------


def test_age_priority_truncates_as_slurm_does():
    site = SitePriority("age")
    assert job_priority(site, 0.0, 0.0) == 1  # priority 0 is a hold: at least 1
    step = 14 * DAY / 1000  # one point per 1209.6 s of waiting
    assert job_priority(site, 0.0, 5 * step + 1) == 5
    assert job_priority(site, 0.0, 5 * step - 1) == 4
    assert job_priority(site, 0.0, 100 * DAY) == 1000  # PriorityMaxAge caps it
    assert job_priority(site, 0.0, 0.0, factor=1.0) == 1  # no fairshare under age
    assert job_priority(SitePriority("fairshare"), 0.0, step, factor=0.5) == 5001


def test_fair_tree_ranks_users_by_level_fairshare():
    got = fair_tree({"a": 10.0, "b": 30.0, "c": 10.0}, ["a", "b", "c", "d"])
    assert got["d"] == 1.0  # no usage: first
    assert got["a"] == got["c"] == 0.75  # equal Level FS share a rank
    assert got["b"] == pytest.approx(0.25)
    assert fair_tree({}, []) == {}


def test_usage_decays_with_the_half_life():
    usage = Usage(half_life=100.0, start=0.0)
    usage.ran("a", 50.0)
    usage.tick(10.0)
    assert usage.used["a"] == 50.0
    usage.tick(110.0)
    assert usage.used["a"] == pytest.approx(25.0)
    with pytest.raises(ValueError, match="mode"):
        SitePriority("lottery")


class Record:
    """A policy that starts the first waiting job in the order it is offered,
    one at a time on one 7g instance, and records that order (a test double)."""

    name = "record"
    kind = "online"

    def __init__(self) -> None:
        self.seen: list[tuple[str, float]] = []
        self.times: dict[str, dict[int, float]] = {}

    def decide(self, snap):
        from slurm_mig.geometry import Placement, Slot
        from slurm_mig.planner.decisions import Decisions, Place

        for j in snap.pending.values():
            self.times[j.id] = dict(j.times)
        if snap.running or not snap.pending:
            return Decisions(())
        top = min(snap.pending.values(), key=lambda j: (-j.priority, j.arrival))
        self.seen.append((top.id, top.priority))
        return Decisions((Place(top.id, 0, Slot(Placement(0, 8), 7), snap.now),))


def test_fairshare_puts_a_light_users_job_before_a_heavy_users_earlier_ones():
    heavy = [job(f"h{i}", float(i), 2000.0, user="heavy", time_limit=1e6) for i in range(4)]
    light = [job("l0", 10.0, 10.0, user="light", time_limit=1e6)]
    policy = Record()
    simulate(heavy + light, policy, priority="fairshare", knowledge="oracle", check=True)
    order = [jid for jid, _ in policy.seen]
    assert order[0] == "h0" and order[1] == "l0"  # light has no usage: top factor
    policy = Record()
    simulate(heavy + light, policy, priority="age", knowledge="oracle")
    assert [jid for jid, _ in policy.seen] == ["h0", "h1", "h2", "h3", "l0"]


# -- what a policy knows -------------------------------------------------------------


def test_learned_times_start_from_the_limit_then_follow_the_users_runs():
    store = LearnedRuntimes()
    j = job("a", kind="train", user="u", time_limit=7200.0)
    first = learned_times(j, A100, store, owner="u")
    assert first[1] == pytest.approx(7200.0 / LIMIT_RATIO)  # the limit's share, on 1g
    assert first[7] < first[1]  # the Amdahl prior elsewhere
    for _ in range(3):  # runs that agree: their median, whatever the limit
        store.record("u", "train", A100.name, 7, 120.0)
    assert learned_times(j, A100, store, owner="u")[7] == 120.0
    assert learned_times(j, A100, store, owner="v") == first  # another user's: not
    assert dict(limit_times(j)) == {s: 7200.0 for s in A100.planner_sizes}


def test_the_policy_sees_estimates_while_the_engine_runs_true_times():
    jobs = [job(f"j{i}", 10.0 * i, 50.0, kind="k", user="u", time_limit=3600.0) for i in range(3)]
    policy = Record()
    r = simulate(jobs, policy, priority="none", knowledge="learned", check=True)
    assert policy.times["j0"][1] == pytest.approx(3600.0 / LIMIT_RATIO)  # no run yet
    # after j0 ran 50 s on 7g: between what it ran and what the limit alone suggested
    assert 50.0 < policy.times["j2"][7] < policy.times["j0"][7]
    assert [f - s for f, s in zip(r.finish, r.start)] == pytest.approx([50.0] * 3)
    # the run reports what each job was planned with on its 7g against what it ran
    assert r.alone_s == pytest.approx([50.0] * 3)
    assert r.planned_s == pytest.approx([policy.times[f"j{i}"][7] for i in range(3)])
    off = sorted(max(p / 50.0, 50.0 / p) for p in r.planned_s)
    assert r.estimate_error() == (pytest.approx(off[1]), sum(x <= 2 for x in off) / 3)
    assert off[0] > 1.0 and r.summary()["estimate_off_p50"] == pytest.approx(off[1])
    oracle = Record()
    exact = simulate(jobs, oracle, knowledge="oracle")
    assert oracle.times["j0"][1] == 350.0
    assert exact.estimate_error() == (1.0, 1.0)


def test_a_real_sites_per_user_history_is_what_the_trace_gives():
    off = sorted(supercloud_previous_job_factors())
    assert len(off) == 1292
    assert off[math.ceil(len(off) / 2) - 1] == pytest.approx(SITE_ESTIMATE_OFF_P50, abs=0.005)
    assert sum(x <= 2 for x in off) / len(off) == pytest.approx(SITE_WITHIN_2X, abs=0.005)


class Watch(Record):
    """Record, plus each decision's view of busy instances (busy_until)."""

    def __init__(self) -> None:
        super().__init__()
        self.until: list[tuple[float, float]] = []

    def decide(self, snap):
        for g in snap.gpus:
            for inst in g.instances:
                if inst.job is not None and inst.busy_until is not None:
                    self.until.append((snap.now, inst.busy_until))
        return super().decide(snap)


def test_a_job_past_its_planned_end_is_expected_to_run_to_its_time_limit():
    # three runs of 10 s plan j0 (starting at 30 s) at 10 s; it runs 100 s, and the
    # late arrivals' decisions see it busy until its limit, as the daemon does
    runs = [job("j0", 0.0, 100.0, kind="k", user="u", time_limit=36000.0)]
    first = [job(f"p{i}", 0.0, 10.0, kind="k", user="u", time_limit=36000.0) for i in range(3)]
    arrivals = [job(f"a{i}", 50.0 + i, 1.0, kind="z", user="v", time_limit=600.0) for i in (0, 1)]
    policy = Watch()
    simulate(first + runs + arrivals, policy, knowledge="learned", check=True)
    assert policy.times["j0"][7] == pytest.approx(10.0)
    late = [until for now, until in policy.until if now >= 50.0]
    assert late and late[0] == pytest.approx(30.0 + 36000.0, abs=1.0)  # its start + limit


def test_conditions_are_named_and_checked():
    assert SiteConditions.of("age", "learned").describe() == "priority age, knowledge learned"
    assert SiteConditions().plain and not SiteConditions.of("age").plain
    with pytest.raises(ValueError, match="knowledge"):
        SiteConditions.of("age", "psychic")


class Spy:
    """A simulator policy that records the events of every snapshot it is given."""

    def __init__(self, inner) -> None:
        self.inner, self.name, self.events = inner, inner.name, []

    @property
    def planned(self):
        return self.inner.planned

    @property
    def batches(self):
        return self.inner.batches

    def decide(self, snap):
        self.events.extend(e for e in snap.events if e not in self.events)
        return self.inner.decide(snap)


def test_runs_off_their_plan_are_events_for_the_standing_plans_as_the_daemon_sends():
    from slurm_mig.sim.policies import get_policy

    # a batch planned from the limit (450 s on 1g): short runs end early, long ones run
    # late, each named with its GPU while plans stand (the driver re-plans them)
    short = [job(f"s{i}", 0.0, 5.0, kind="k", user="u", time_limit=3600.0) for i in range(8)]
    long = [job(f"l{i}", 0.0, 400.0, kind="k", user="u", time_limit=3600.0) for i in range(40)]
    spy = Spy(get_policy("adaptive"))
    simulate(short + long, spy, 1, 2, knowledge="learned", check=True)
    early = [e for e in spy.events if e.what.endswith("ended early")]
    late = [e for e in spy.events if e.what.endswith("runs late")]
    assert early and late
    assert all(e.gpu in (0, 1) for e in early + late)
    assert any(e.what.startswith("job s") for e in early)  # 5 s against 450 s planned
    assert all(e.what.startswith("job l") for e in late)
    exact = Spy(get_policy("adaptive"))
    simulate(short + long, exact, 1, 2, knowledge="oracle", check=True)
    assert exact.events == []  # true runtimes: every run ends as planned
