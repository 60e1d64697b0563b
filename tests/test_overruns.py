"""Overruns of time= hints (slurm_mig.overruns, issue 34 hole 3): when a run counts as
one, how the runtime store keeps them (per owner and kind, for OVERRUN_MEMORY_S), the
runs squeue shows past their hint, and the guarded store the daemon reads through."""

from __future__ import annotations

import pytest
from support import FakeClock

from slurm_mig import overruns as ov
from slurm_mig.overruns import (
    OVERRUN_FACTOR,
    OVERRUN_GRACE_S,
    OVERRUN_MEMORY_S,
    live_overruns,
    merge,
    overran,
)
from slurm_mig.runtimes import MAX_KEY, MAX_OWNER, GuardedStore, RuntimeStore, StoreError

NOW = 1_700_000_000.0


@pytest.fixture
def store(tmp_path) -> RuntimeStore:
    return RuntimeStore(tmp_path / "state" / "profiles.sqlite")


def limit(hint: float) -> float:
    """The longest run that does not overrun ``hint``."""
    return OVERRUN_FACTOR * hint + OVERRUN_GRACE_S


@pytest.mark.parametrize("hint", [1.0, 60.0, 7200.0])
def test_a_run_overruns_only_past_factor_times_its_hint_plus_the_grace(hint):
    assert not overran(limit(hint), hint)
    assert overran(limit(hint) + 0.01, hint)
    assert not overran(hint, hint) and not overran(0.0, hint)


@pytest.mark.parametrize("hint", [None, 0.0, -5.0, float("inf"), float("nan")])
def test_no_usable_hint_means_no_overrun(hint):
    assert not overran(1e9, hint)


def test_the_limits_are_the_stores(store):
    assert (ov.MAX_KEY, ov.MAX_OWNER) == (MAX_KEY, MAX_OWNER)


def test_the_store_keeps_overruns_per_owner_and_kind_the_longest_counting(store):
    assert store.record_overrun("quick", "1", 0, 30.0, 1.0, NOW - 10, owner="uid:7")
    assert store.record_overrun("quick", "2", 0, 45.0, 1.0, NOW - 5, owner="uid:7")
    assert store.record_overrun("other", "3", 1, 300.0, 60.0, NOW - 5, owner="uid:7")
    assert store.record_overrun("quick", "4", 0, 12.0, 1.0, NOW - 5, owner="uid:8")
    got = store.overruns_since(NOW - 60)
    assert got == {"uid:7": {"quick": 45.0, "other": 300.0}, "uid:8": {"quick": 12.0}}
    assert store.overruns_since(NOW - 7) == {
        "uid:7": {"quick": 45.0, "other": 300.0},
        "uid:8": {"quick": 12.0},
    }
    assert store.overruns_since(NOW) == {}


def test_a_run_is_recorded_once_and_only_when_it_overran(store):
    assert store.record_overrun("k", "1", 0, 30.0, 1.0, NOW, owner="uid:7")
    assert not store.record_overrun("k", "1", 0, 30.0, 1.0, NOW, owner="uid:7")  # again
    assert not store.record_overrun("k", "2", 0, limit(10.0), 10.0, NOW, owner="uid:7")
    assert not store.record_overrun("k", "3", 0, 30.0, 1.0, NOW, owner="")  # no owner
    assert store.overruns_since(0.0) == {"uid:7": {"k": 30.0}}


def test_records_older_than_the_memory_are_dropped_as_new_ones_come(store):
    old = NOW - OVERRUN_MEMORY_S - 1.0
    assert store.record_overrun("k", "1", 0, 99.0, 1.0, old, owner="uid:7")
    assert store.overruns_since(0.0) == {"uid:7": {"k": 99.0}}
    assert store.record_overrun("k", "2", 0, 20.0, 1.0, NOW, owner="uid:7")
    assert store.overruns_since(0.0) == {"uid:7": {"k": 20.0}}


@pytest.mark.parametrize(
    ("key", "owner", "field"),
    [("", "uid:7", "kind"), ("x" * (MAX_KEY + 1), "uid:7", "kind"), ("k\n", "uid:7", "kind"),
     ("k", "u" * (MAX_OWNER + 1), "owner"), ("k", "uid:\x1b", "owner")],
)  # fmt: skip
def test_a_bad_kind_or_owner_is_refused_naming_it(store, key, owner, field):
    with pytest.raises(ValueError, match=field):
        store.record_overrun(key, "1", 0, 30.0, 1.0, NOW, owner=owner)


def test_the_guarded_store_reads_no_overruns_while_the_store_is_unreadable(tmp_path):
    bad = tmp_path / "state" / "profiles.sqlite"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"not a database" * 100)
    clock = FakeClock(100.0)
    guarded = GuardedStore(RuntimeStore(bad, busy_timeout=0.1), clock=clock.monotonic)
    assert guarded.overruns_since(0.0) == {}
    assert not guarded.record_overrun("k", "1", 0, 30.0, 1.0, NOW, owner=None)
    with pytest.raises(StoreError):
        guarded.record_overrun("k", "1", 0, 30.0, 1.0, NOW, owner="uid:7")


def test_the_guarded_store_passes_overruns_through(store):
    guarded = GuardedStore(store)
    assert guarded.record_overrun("k", "1", 0, 30.0, 1.0, NOW, owner="uid:7")
    assert guarded.overruns_since(0.0) == {"uid:7": {"k": 30.0}}


def test_squeue_shows_overruns_of_running_and_finished_runs():
    runs = [
        ("uid:7", "quick", 1.0, NOW - 30.0, None),  # running for 30 s past 1 s
        ("uid:7", "quick", 1.0, NOW - 100.0, NOW - 80.0),  # ran 20 s
        ("uid:8", "train", 60.0, NOW - 60.0, None),  # within its hint
        ("uid:9", "x", 1.0, None, None),  # never started
        ("", "x", 1.0, NOW - 500.0, None),  # no owner: nothing to hold it against
        ("uid:10", "y", None, NOW - 500.0, None),  # no hint
    ]
    assert live_overruns(runs, NOW) == {"uid:7": {"quick": 30.0}}


def test_merge_keeps_the_longest_overrun_of_each_owner_and_kind():
    a = {"uid:7": {"k": 10.0, "j": 5.0}}
    b = {"uid:7": {"k": 20.0}, "uid:8": {"k": 1.0}}
    assert merge(a, b) == {"uid:7": {"k": 20.0, "j": 5.0}, "uid:8": {"k": 1.0}}
    assert a == {"uid:7": {"k": 10.0, "j": 5.0}}  # inputs untouched
