"""A time= hint is evidence, not a promise (issue 34, hole 3), at the level of the
cycle's inputs: jobs as squeue shows them, the `Estimator`, the pure cycle, the daemon's
apply and the real runtime store. Once a user's run overran its hint, that user's hints
(of any kind) are not read: their jobs are planned from what they ran, else their time
limit, else default_runtime; no other user's estimates change."""

from __future__ import annotations

from dataclasses import replace

import pytest
from support import completed, squeue_job, uid_of

from slurm_mig.daemon.apply import apply_actions
from slurm_mig.daemon.cycle import CycleInput, Learn, plan_cycle
from slurm_mig.daemon.estimates import Estimator
from slurm_mig.geometry import Placement, get_model
from slurm_mig.overruns import OVERRUN_MEMORY_S
from slurm_mig.owner import owner_of
from slurm_mig.runtimes import RuntimeStore, estimate_times
from slurm_mig.slurm.assignment import Assignment

A100 = get_model("A100-40GB")
NOW = 1_700_000_000.0
approx = pytest.approx


class Config:
    default_runtime = 3600.0
    serial_fraction = 0.3
    partition = "mig"


def own(user: str) -> str:
    return owner_of(uid_of(user))


def job(jid: str, user: str, comment: str, **kw):
    return squeue_job(jid, **{"user": user, "comment": comment, "submit_time": NOW - 100, **kw})


def ran(jid: str, user: str, comment: str, seconds: float, *, ok: bool = True, **kw):
    """``user``'s job that ran ``seconds`` on 7g.40gb and ended (exit 0, else 1)."""
    a = Assignment(jid, 0, "gpu01", 0, A100.name, "7g.40gb", Placement(0, 8), 0, 0, 1.0, NOW)
    done = completed(job(jid, user, comment, **kw), a, NOW - 50.0 - seconds, NOW - 50.0)
    return done if ok else replace(done, state="FAILED", exit_code=256)


def hinted(seconds: float) -> dict[int, float]:
    return estimate_times({}, A100, serial_fraction=Config.serial_fraction, fallback=seconds)


def times(store, jobs, pending) -> dict[int, float]:
    est = Estimator(Config(), store, now=NOW, jobs=jobs)
    return dict(est(pending, [A100.name]).times[A100.name])


@pytest.fixture
def store(tmp_path) -> RuntimeStore:
    return RuntimeStore(tmp_path / "profiles.sqlite")


def test_after_an_overrun_the_liar_is_planned_from_what_it_ran(store):
    """The attack: a 30 s job said time=1; learning stayed within the hint, so the
    next one was planned at 1 s again."""
    mallory = own("mallory")
    store.record("quick", A100.name, 7, 30.0, "1", 0, NOW - 60, owner=mallory)
    next_one = job("2", "mallory", "mig:key=quick,time=1")
    # no overrun on record: the hint bounds what was learned (1 s on 1g, 0.4 s on 7g)
    assert times(store, [], next_one)[7] == approx(hinted(1.0)[7])
    assert store.record_overrun("quick", "1", 0, 30.0, 1.0, NOW - 60, owner=mallory)
    got = times(store, [], next_one)
    assert got[7] == approx(30.0)  # what it ran
    assert min(got.values()) >= 30.0
    # alice's job of the same kind and hint is planned from her hint, as before
    assert times(store, [], job("3", "alice", "mig:key=quick,time=1")) == approx(hinted(1.0))


def test_an_overrun_counts_against_every_kind_of_its_owner(store):
    """A new key= per job sheds nothing: a kind never run is planned from the job's
    time limit, else default_runtime, not from its hint (nor the site-wide prior)."""
    mallory = own("mallory")
    store.record_overrun("quick", "1", 0, 30.0, 1.0, NOW - 60, owner=mallory)
    store.record("fresh", A100.name, 7, 0.5, "seed", 0, NOW - 600)  # the prior: instant
    limited = job("2", "mallory", "mig:key=fresh,time=1", time_limit=900.0)
    assert times(store, [], limited) == approx(hinted(900.0))
    unlimited = job("3", "mallory", "mig:key=fresh,time=1")
    assert times(store, [], unlimited) == approx(hinted(Config.default_runtime))
    # a job of hers without a time= hint is planned as any job without one
    plain = job("4", "mallory", "mig:key=fresh")
    assert times(store, [], plain)[7] == 0.5


def test_short_successes_do_not_hide_a_failed_overrun_of_the_kind(store):
    """The liar's runs of the kind that succeeded took 1 s; the one past its hint failed
    (not learned as a runtime): the plan is at least that overrun, up to the limit."""
    mallory = own("mallory")
    for i in range(3):
        store.record("quick", A100.name, 7, 1.0, f"ok{i}", 0, NOW - 600, owner=mallory)
    store.record_overrun("quick", "9", 0, 40.0, 1.0, NOW - 60, owner=mallory)
    assert min(times(store, [], job("2", "mallory", "mig:key=quick,time=1")).values()) == 40.0
    capped = job("3", "mallory", "mig:key=quick,time=1", time_limit=25.0)
    assert max(times(store, [], capped).values()) == 25.0  # Slurm ends it there


def test_a_run_squeue_shows_past_its_hint_counts_before_it_ends(store):
    """The liar's first job still runs, 30 s past its time=1: its next job is not
    planned from its hint in this very cycle (nothing is on record yet)."""
    running = job("1", "mallory", "mig:key=quick,time=1", state="RUNNING", held=False)
    running = replace(running, start_time=NOW - 30.0)
    second = job("2", "mallory", "mig:key=quick,time=1")
    got = times(store, [running, second], second)
    assert min(got.values()) >= 30.0 and got == approx(
        {s: max(t, 30.0) for s, t in hinted(Config.default_runtime).items()}
    )
    within = replace(running, start_time=NOW - 5.0)
    assert times(store, [within, second], second) == approx(hinted(1.0))
    # another user's running job past its own hint changes nothing for alice
    theirs = job("3", "alice", "mig:key=quick,time=1")
    assert times(store, [running, theirs], theirs) == approx(hinted(1.0))


def test_an_overrun_counts_for_the_memory_then_the_hint_is_read_again(store):
    mallory = own("mallory")
    old = NOW - OVERRUN_MEMORY_S - 1.0
    store.record("quick", A100.name, 7, 30.0, "1", 0, old, owner=mallory)
    store.record_overrun("quick", "1", 0, 30.0, 1.0, old, owner=mallory)
    assert times(store, [], job("2", "mallory", "mig:key=quick,time=1")) == approx(hinted(1.0))


def test_the_store_is_read_once_a_cycle_whatever_the_queue(store):
    class Counting:
        def __init__(self, inner):
            self.inner, self.reads = inner, 0

        def overruns_since(self, since):
            self.reads += 1
            return self.inner.overruns_since(since)

        def __getattr__(self, name):
            return getattr(self.inner, name)

    counting = Counting(store)
    est = Estimator(Config(), counting, now=NOW)
    for i in range(50):
        est(job(str(i), f"user{i % 7}", f"mig:key=k{i},time={i + 1}"), [A100.name])
    assert counting.reads == 1
    quiet = Counting(store)
    est = Estimator(Config(), quiet, now=NOW)
    est(job("1", "alice", "mig:key=k"), [A100.name])  # no time= hint: nothing to read
    assert quiet.reads == 0


def test_a_failed_run_past_its_hint_is_recorded_as_an_overrun_not_as_a_runtime(store):
    """The cycle offers the store a failed run that overran its hint (its overrun only)
    and a successful one (both); apply records them, each once."""
    failed = ran("1", "mallory", "mig:key=quick,time=1", 40.0, ok=False)
    success = ran("2", "mallory", "mig:key=quick,time=1", 30.0)
    honest = ran("3", "alice", "mig:key=quick,time=60", 50.0)
    short_fail = ran("4", "alice", "mig:key=quick,time=60", 5.0, ok=False)
    jobs = (failed, success, honest, short_fail)
    est = Estimator(Config(), store, now=NOW, jobs=jobs)
    snap = CycleInput(
        now=NOW,
        jobs=jobs,
        nodes={"gpu01": (A100.name,)},
        estimates={j.job_id: est.identity(j) for j in jobs},
        batch_window=0.0,
    )
    learns = {a.job_id: a for a in plan_cycle(snap).actions if isinstance(a, Learn)}
    assert sorted(learns) == ["1", "2", "3"]  # alice's short failure: nothing to learn
    assert (learns["1"].ok, learns["1"].hint) == (False, 1.0)
    assert "past its time= hint of 1 s" in learns["1"].describe()
    report = apply_actions(list(learns.values()), object(), key=b"k" * 32, store=store)
    assert sorted(report.stored) == [("1", 0), ("2", 0), ("3", 0)]
    assert store.overruns_since(0.0) == {own("mallory"): {"quick": approx(40.0)}}
    assert store.observations("quick", A100.name, own("mallory")) == {7: [approx(30.0)]}
    assert store.observations("quick", A100.name, own("alice")) == {7: [approx(50.0)]}
    assert report.learned == 2
