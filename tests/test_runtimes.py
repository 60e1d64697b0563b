"""Learned runtimes (slurm_mig.runtimes): the real SQLite store, written by several
processes at once, and the runtime estimates checked against hand-computed values."""

from __future__ import annotations

import math
import os
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from slurm_mig.geometry import GIB, get_model
from slurm_mig.limitevidence import LIMIT_RATIO
from slurm_mig.runtimes import (
    HINT_FLOOR,
    MAX_KEY,
    MAX_OWNER,
    PRIOR,
    SCHEMA_VERSION,
    GuardedStore,
    RuntimeStore,
    StoreError,
    estimate_for_job,
    estimate_times,
)

ROOT = Path(__file__).resolve().parents[1]
A100 = get_model("A100-40GB")  # sizes 1 2 3 4 7; 1g 5gb, 2g 10gb, 3g/4g 20gb, 7g 40gb
A30 = get_model("A30-24GB")  # sizes 1 2 4
approx = pytest.approx


@pytest.fixture
def store(tmp_path) -> RuntimeStore:
    return RuntimeStore(tmp_path / "state" / "deep" / "profiles.sqlite")


# ---------------------------------------------------------------------------
# RuntimeStore


def test_store_is_created_on_first_use_with_wal_and_a_schema_version(store):
    assert not store.path.parent.exists()  # nothing happens before the first use
    assert store.observations("k", "A100-40GB") == {}
    assert store.path.exists()
    db = sqlite3.connect(store.path)
    try:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    finally:
        db.close()


def test_record_is_idempotent_per_job_and_restart(store):
    assert store.record("train", "A100-40GB", 3, 120.0, "42", 0, 1000.0) is True
    # the same run reported again (daemon restart): not counted twice, even with other data
    assert store.record("train", "A100-40GB", 3, 999.0, "42", 0, 2000.0) is False
    assert store.record("train", "A100-40GB", 7, 80.0, "42", 1, 3000.0) is True  # requeued run
    assert store.observations("train", "A100-40GB") == {3: [120.0], 7: [80.0]}


def test_observations_are_grouped_by_size_oldest_first_and_kept_apart_by_kind_and_model(store):
    store.record("a", "A100-40GB", 1, 30.0, "3", 0, 30.0)
    store.record("a", "A100-40GB", 1, 10.0, "1", 0, 10.0)
    store.record("a", "A100-40GB", 2, 20.0, "2", 0, 20.0)
    store.record("a", "H100-80GB", 1, 5.0, "4", 0, 40.0)
    store.record("b", "A100-40GB", 1, 7.0, "5", 0, 50.0)
    assert store.observations("a", "A100-40GB") == {1: [10.0, 30.0], 2: [20.0]}
    assert store.observations("a", "H100-80GB") == {1: [5.0]}
    assert store.observations("b", "A100-40GB") == {1: [7.0]}
    assert store.observations("c", "A100-40GB") == {}
    # another store on the same file (another process, a restarted daemon) sees it all
    again = RuntimeStore(store.path)
    assert again.observations("a", "A100-40GB") == {1: [10.0, 30.0], 2: [20.0]}


@pytest.mark.parametrize(
    "args, fragment",
    [
        (("", "A100-40GB", 1, 1.0), "key"),
        (("k", "A100-40GB", 0, 1.0), "size"),
        (("k", "A100-40GB", True, 1.0), "size"),
        (("k", "A100-40GB", 1, 0.0), "seconds"),
        (("k", "A100-40GB", 1, -3.0), "seconds"),
        (("k", "A100-40GB", 1, math.nan), "seconds"),
        (("k", "A100-40GB", 1, math.inf), "seconds"),
    ],
)
def test_record_rejects_values_that_would_poison_the_estimates(store, args, fragment):
    with pytest.raises(ValueError, match=fragment):
        store.record(*args, job_id="1", restart=0, finished=0.0)
    assert store.observations("k", "A100-40GB") == {}


def test_memory_need_is_the_largest_recorded(store):
    assert store.memory_need("llm") is None
    store.record_memory("llm", 12 * GIB, "1")
    store.record_memory("llm", 30 * GIB, "2")
    store.record_memory("llm", 8 * GIB, "3")
    assert store.memory_need("llm") == 30 * GIB
    store.record_memory("llm", 40 * GIB, "1")  # same job again, larger: kept
    store.record_memory("llm", 1, "2")  # same job again, smaller: the larger stays
    assert store.memory_need("llm") == 40 * GIB
    assert store.memory_need("other") is None
    with pytest.raises(ValueError, match="need_bytes"):
        store.record_memory("llm", -1, "9")


def test_a_store_of_a_newer_schema_is_refused_with_the_fix(tmp_path):
    path = tmp_path / "p.sqlite"
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(StoreError, match=r"newer than this slurm-mig understands.*upgrade"):
        RuntimeStore(path).observations("k", "A30-24GB")


def test_a_store_that_cannot_be_created_names_the_file(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(StoreError, match=str(blocker / "profiles.sqlite")):
        RuntimeStore(blocker / "profiles.sqlite").record("k", "A30-24GB", 1, 1.0, "1", 0, 0.0)


WRITER = textwrap.dedent(
    """
    import sys, time
    from slurm_mig.runtimes import RuntimeStore
    path, name, start_at = sys.argv[1], sys.argv[2], float(sys.argv[3])
    store = RuntimeStore(path)
    while time.time() < start_at:
        time.sleep(0.001)
    new = 0
    for i in range(150):
        # jobs s0..s149 are reported by both processes, each once
        new += store.record("shared", "A100-40GB", 1 + i % 7 // 2, 10.0 + i, f"s{i}", 0, i)
        store.record(name, "A100-40GB", 2, 5.0 + i, f"{name}{i}", 0, i)
        store.record_memory("shared", 1000 + i, f"{name}{i}")
    print(new)
    """
)


def test_two_processes_writing_at_once_lose_nothing_and_count_nothing_twice(tmp_path):
    path = tmp_path / "fresh" / "profiles.sqlite"  # both also race to create the schema
    start_at = time.time() + 1.0
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), name, str(start_at)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for name in ("p", "q")
    ]
    results = [p.communicate(timeout=120) for p in procs]
    for p, (_, err) in zip(procs, results):
        assert p.returncode == 0, err
    new = [int(out) for out, _ in results]
    assert sum(new) == 150  # every shared run counted exactly once, by one of them
    store = RuntimeStore(path)
    shared = store.observations("shared", "A100-40GB")
    assert sum(len(v) for v in shared.values()) == 150
    assert sorted(t for v in shared.values() for t in v) == [10.0 + i for i in range(150)]
    assert len(store.observations("p", "A100-40GB")[2]) == 150
    assert len(store.observations("q", "A100-40GB")[2]) == 150
    assert store.memory_need("shared") == 1149


# ---------------------------------------------------------------------------
# estimate_times


def test_measured_sizes_keep_their_median():
    obs = {1: [100.0, 300.0, 110.0], 7: [30.0, 10.0]}
    times = estimate_times(obs, A100, serial_fraction=0.3, fallback=None)
    assert times[1] == 110.0  # median of three
    assert times[7] == 20.0  # median of two: their mean
    assert set(times) == {1, 2, 3, 4, 7}


def test_two_sizes_fix_the_amdahl_curve_exactly():
    # a + b = 100, a + b/7 = 20  ->  b = 280/3, a = 20/3
    times = estimate_times({1: [100.0], 7: [20.0]}, A100, serial_fraction=0.9, fallback=None)
    assert times == approx({1: 100.0, 2: 160 / 3, 3: 340 / 9, 4: 30.0, 7: 20.0})


def test_three_sizes_are_fitted_by_least_squares():
    # x = 1/s = 1, 1/2, 1/4; t = 100, 60, 30. Means x 7/12, t 190/3;
    # Sxx = 7/24, Sxt = 80/3  ->  b = 640/7, a = 190/3 - (640/7)(7/12) = 10.
    obs = {1: [100.0], 2: [60.0], 4: [30.0]}
    times = estimate_times(obs, A100, serial_fraction=0.3, fallback=None)
    assert times[3] == approx(10 + 640 / 21)
    assert times[7] == approx(10 + 640 / 49)
    assert (times[1], times[2], times[4]) == (100.0, 60.0, 30.0)  # measured, not fitted


def test_a_job_slower_on_more_slices_is_fitted_with_b_at_zero():
    # unconstrained slope is negative; edges: a=0 gives b = 12.6 (SSE 338),
    # b=0 gives a = mean = 15 (SSE 50), the better one
    times = estimate_times({1: [10.0], 7: [20.0]}, A100, serial_fraction=0.3, fallback=None)
    assert times == approx({1: 10.0, 2: 15.0, 3: 15.0, 4: 15.0, 7: 20.0})


def test_a_perfectly_parallel_job_is_fitted_with_a_at_zero():
    # t = 84/s measured on 1, 2 and 4 (with noise pulling a below zero)
    obs = {1: [84.0], 2: [43.0], 4: [20.0]}
    times = estimate_times(obs, A100, serial_fraction=0.5, fallback=None)
    # unconstrained: b = 84.86, a = -0.5 < 0 -> a = 0, b = sum(x t)/sum(x^2)
    b = (84 + 43 / 2 + 20 / 4) / (1 + 1 / 4 + 1 / 16)
    assert times[3] == approx(b / 3)
    assert times[7] == approx(b / 7)


def test_one_size_uses_the_prior_serial_fraction():
    # f = 0.5, t(4) = 50  ->  T1 = 50 / (0.5 + 0.5/4) = 80; t(s) = 80 (0.5 + 0.5/s)
    times = estimate_times({4: [50.0]}, A100, serial_fraction=0.5, fallback=999.0)
    assert times == approx({1: 80.0, 2: 60.0, 3: 160 / 3, 4: 50.0, 7: 80 * (0.5 + 0.5 / 7)})
    parallel = estimate_times({1: [70.0]}, A100, serial_fraction=0.0, fallback=None)
    assert parallel == approx({1: 70.0, 2: 35.0, 3: 70 / 3, 4: 17.5, 7: 10.0})
    serial = estimate_times({2: [70.0]}, A100, serial_fraction=1.0, fallback=None)
    assert serial == approx(dict.fromkeys((1, 2, 3, 4, 7), 70.0))


def test_no_observation_takes_the_fallback_on_the_smallest_size_that_fits():
    times = estimate_times({}, A100, serial_fraction=0.3, fallback=600.0)
    t1 = 600.0  # smallest size: 1g
    assert times == approx({s: t1 * (0.3 + 0.7 / s) for s in (1, 2, 3, 4, 7)})
    # 15 GiB: 1g.5gb and 2g.10gb too small; the fallback is the runtime on 3g.20gb
    fit = estimate_times({}, A100, serial_fraction=0.3, fallback=3600.0, min_memory=15 * GIB)
    t1 = 3600.0 / (0.3 + 0.7 / 3)  # 6750
    assert fit[1] == math.inf and fit[2] == math.inf
    assert fit[3] == approx(3600.0)
    assert fit[4] == approx(3206.25) and fit[4] == approx(t1 * (0.3 + 0.7 / 4))
    assert fit[7] == approx(2700.0)


def test_memory_need_makes_small_sizes_impossible_even_when_measured():
    a30 = get_model("A30")
    obs = {1: [100.0], 2: [55.0], 4: [30.0]}
    times = estimate_times(obs, a30, serial_fraction=0.3, fallback=None, min_memory=9 * GIB)
    assert times[1] == math.inf  # 1g.6gb < 9 GiB although a run was measured there
    assert times[2] == 55.0 and times[4] == 30.0
    # on the A100 the double-memory 1g.10gb (9.62 GiB) holds 9 GiB: size 1 stays
    times = estimate_times(
        obs | {7: [20.0]}, A100, serial_fraction=0.3, fallback=None, min_memory=9 * GIB
    )
    assert times[1] == 100.0 and times[2] == 55.0


def test_a_job_larger_than_the_whole_gpu_gets_inf_everywhere():
    times = estimate_times(
        {7: [10.0]}, A100, serial_fraction=0.3, fallback=5.0, min_memory=41 * GIB
    )
    assert times == dict.fromkeys((1, 2, 3, 4, 7), math.inf)


def test_sizes_the_model_does_not_have_are_ignored():
    times = estimate_times({3: [30.0], 4: [20.0]}, A30, serial_fraction=0.5, fallback=None)
    # A30 has no size 3: one measured size (4) and the prior: T1 = 20/(0.5+0.125) = 32
    assert times == approx({1: 32.0, 2: 24.0, 4: 20.0})


def test_no_observation_and_no_fallback_is_an_error_and_inputs_are_untouched():
    with pytest.raises(ValueError, match="no observation and no fallback"):
        estimate_times({}, A100, serial_fraction=0.3, fallback=None)
    with pytest.raises(ValueError, match="serial_fraction"):
        estimate_times({}, A100, serial_fraction=1.5, fallback=1.0)
    obs = {1: [3.0, 1.0, 2.0]}
    estimate_times(obs, A100, serial_fraction=0.3, fallback=None)
    assert obs == {1: [3.0, 1.0, 2.0]}


# ---------------------------------------------------------------------------
# estimate_for_job: which evidence wins


def kw(**over):
    base = dict(
        hint_seconds=None,
        time_limit=None,
        min_memory=None,
        default_runtime=1000.0,
        serial_fraction=0.0,
    )
    base.update(over)
    return base


def test_the_owners_runs_beat_the_hint_and_the_time_limit(store):
    store.record("k", "A100-40GB", 1, 70.0, "1", 0, 1.0, owner="alice")
    store.record("k", "H100-80GB", 1, 7.0, "2", 0, 1.0, owner="alice")  # another model
    # within [hint / 4, hint] = [50 / s, 200 / s]: the learned runs as they are
    times = estimate_for_job(
        store, "k", A100, owner="alice", **kw(hint_seconds=200.0, time_limit=900.0)
    )
    assert times == approx({1: 70.0, 2: 35.0, 3: 70 / 3, 4: 17.5, 7: 10.0})
    # without a hint, one run weighs as much as what the time limit suggests (900 / 8):
    # the geometric mean, on the runs' curve
    times = estimate_for_job(store, "k", A100, owner="alice", **kw(time_limit=900.0))
    mid = math.sqrt(70.0 * 900.0 / LIMIT_RATIO)
    assert times == approx({1: mid, 2: mid / 2, 3: mid / 3, 4: mid / 4, 7: mid / 7})
    # three runs that agree keep their times: the limit is weak evidence against them
    for i in range(2):
        store.record("k", "A100-40GB", 1, 70.0, f"1{i}", 0, 2.0, owner="alice")
    times = estimate_for_job(store, "k", A100, owner="alice", **kw(time_limit=900.0))
    assert times == approx({1: 70.0, 2: 35.0, 3: 70 / 3, 4: 17.5, 7: 10.0})


def test_then_the_hint_then_the_time_limit_then_the_default(store):
    def on_1g(**over):
        return estimate_for_job(store, "unseen", A100, **kw(**over))[1]

    assert on_1g(hint_seconds=500.0, time_limit=900.0) == 500.0
    assert on_1g(time_limit=900.0) == approx(900.0 / LIMIT_RATIO)  # what a limit suggests
    assert on_1g(time_limit=math.inf) == 1000.0  # unlimited: the default
    assert on_1g() == 1000.0
    assert estimate_for_job(None, None, A100, **kw(hint_seconds=70.0))[7] == approx(10.0)


def test_learned_memory_need_raises_the_hint(store):
    store.record_memory("big", 15 * GIB, "1", owner="alice")
    times = estimate_for_job(
        store, "big", A100, owner="alice", **kw(min_memory=GIB, hint_seconds=300.0)
    )
    assert times[1] == times[2] == math.inf
    assert times[3] == 300.0  # the hint is the runtime on the smallest size that fits


def test_sizes_over_the_time_limit_become_impossible(store):
    # hint 400 s on 1g, perfectly parallel: 400, 200, 133, 100, 57; limit 150 s
    times = estimate_for_job(store, "x", A100, **kw(hint_seconds=400.0, time_limit=150.0))
    assert times[1] == math.inf and times[2] == math.inf
    assert times[3] == approx(400 / 3) and times[7] == approx(400 / 7)
    # when no size would finish in time, the estimate is left as it is (runs that agree:
    # the limit does not move them)
    for i in range(3):
        store.record("slow", "A100-40GB", 7, 500.0, f"{i}", 0, 1.0)
    times = estimate_for_job(store, "slow", A100, **kw(time_limit=100.0))
    assert times[7] == 500.0 and times[1] == approx(3500.0)


# ---------------------------------------------------------------------------
# Whose runs count: per owner, bounded by the job's own hint, the old records a prior


def test_runs_and_memory_needs_are_kept_apart_by_owner(store):
    store.record("resnet50", "A100-40GB", 1, 1.0, "1", 0, 1.0, owner="mallory")
    store.record("resnet50", "A100-40GB", 1, 500.0, "2", 0, 2.0, owner="alice")
    store.record("resnet50", "A100-40GB", 1, 300.0, "3", 0, 3.0)  # the prior
    store.record_memory("resnet50", 40 * GIB, "1", owner="mallory")
    store.record_memory("resnet50", 4 * GIB, "2", owner="alice")
    assert store.observations("resnet50", "A100-40GB", "alice") == {1: [500.0]}
    assert store.observations("resnet50", "A100-40GB", "mallory") == {1: [1.0]}
    assert store.observations("resnet50", "A100-40GB", PRIOR) == {1: [300.0]}
    assert store.observations("resnet50", "A100-40GB", "bob") == {}
    assert store.observations("resnet50", "A100-40GB") == {1: [1.0, 500.0, 300.0]}  # everyone's
    assert store.memory_need("resnet50", "alice") == 4 * GIB
    assert store.memory_need("resnet50", "bob") is None
    assert store.memory_need("resnet50") == 40 * GIB


@pytest.mark.parametrize(
    "key, owner, fragment",
    [
        ("k" * (MAX_KEY + 1), "alice", "key"),
        ("resnet50\nplanner: job 9 released", "alice", "key"),
        ("\x1b]0;owned\x07", "alice", "key"),
        ("k", "a" * (MAX_OWNER + 1), "owner"),
        ("k", "alice\nbob", "owner"),
        ("k", None, "owner"),
    ],
)
def test_kinds_and_owners_are_bounded_and_printable(store, key, owner, fragment):
    with pytest.raises(ValueError, match=fragment):
        store.record(key, "A100-40GB", 1, 1.0, "1", 0, 1.0, owner=owner)
    with pytest.raises(ValueError, match=fragment):
        store.record_memory(key, GIB, "1", owner=owner)
    assert store.observations("k", "A100-40GB") == {}


def test_another_users_instant_runs_do_not_shorten_a_job(store):
    """The attack of issue 18 hole 5: mallory's three instant resnet50 jobs made alice's
    resnet50 job, whose own hint said time=600, plan as 1.0 s."""
    for i in range(3):
        store.record("resnet50", "A100-40GB", 7, 1.0, f"m{i}", 0, float(i), owner="mallory")
        store.record_memory("resnet50", 30 * GIB, f"m{i}", owner="mallory")
    hinted = estimate_for_job(store, "resnet50", A100, owner="alice", **kw(hint_seconds=600.0))
    alone = estimate_for_job(None, None, A100, **kw(hint_seconds=600.0))
    assert hinted == alone and hinted[1] == 600.0  # nor made to need the whole GPU
    # without a hint: the time limit, not mallory's runs
    limited = estimate_for_job(store, "resnet50", A100, owner="alice", **kw(time_limit=900.0))
    assert limited == estimate_for_job(None, None, A100, **kw(time_limit=900.0))
    assert limited[1] == approx(900.0 / LIMIT_RATIO)
    # mallory's own next resnet50 job does learn from her runs
    assert estimate_for_job(store, "resnet50", A100, owner="mallory", **kw())[7] == 1.0


def test_the_owners_runs_stay_within_a_quarter_of_the_hint_and_the_hint(store):
    # serial fraction 0: the hint's curve is 600 / s, its floor 150 / s
    for i in range(3):
        store.record("fast", "A100-40GB", 1, 1.0, f"f{i}", 0, float(i), owner="alice")
        store.record("slow", "A100-40GB", 1, 5000.0, f"s{i}", 0, float(i), owner="alice")
    fast = estimate_for_job(store, "fast", A100, owner="alice", **kw(hint_seconds=600.0))
    assert fast == approx({s: 600.0 / HINT_FLOOR / s for s in (1, 2, 3, 4, 7)})
    slow = estimate_for_job(store, "slow", A100, owner="alice", **kw(hint_seconds=600.0))
    assert slow == approx({s: 600.0 / s for s in (1, 2, 3, 4, 7)})
    # 15 GiB: runs on sizes too small for the job do not count, the bound keeps each inf
    store.record("fast", "A100-40GB", 7, 1.0, "f7", 0, 9.0, owner="alice")
    big = estimate_for_job(
        store, "fast", A100, owner="alice", **kw(hint_seconds=600.0, min_memory=15 * GIB)
    )
    assert big[1] == big[2] == math.inf  # the hint's 600 s are on 3g, the smallest that fits
    assert big[7] == approx(600.0 * 3 / 7 / HINT_FLOOR) and big[3] == approx(150.0)


def test_old_records_are_a_prior_that_never_shortens_a_hinted_job(store):
    store.record("bert", "A100-40GB", 1, 2.0, "1", 0, 1.0)  # no owner: the prior
    store.record_memory("bert", 30 * GIB, "1")
    # no runs of her own, no hint: the prior is all there is (30 GiB: 7g only)
    prior = estimate_for_job(store, "bert", A100, owner="alice", **kw())
    assert prior[4] == math.inf and prior[7] == 1000.0
    assert estimate_for_job(store, "bert", A100, owner="alice", **kw(min_memory=GIB))[1] == 2.0
    # a hint wins over the prior, for the runtime and for the memory need
    hinted = estimate_for_job(
        store, "bert", A100, owner="alice", **kw(hint_seconds=600.0, min_memory=GIB)
    )
    assert hinted[1] == 600.0
    # the owner's own runs win over the prior's, her own memory need over its
    store.record("bert", "A100-40GB", 1, 400.0, "2", 0, 2.0, owner="alice")
    store.record_memory("bert", GIB, "2", owner="alice")
    assert estimate_for_job(store, "bert", A100, owner="alice", **kw())[1] == 400.0
    # an unknown owner reads the prior only
    assert estimate_for_job(store, "bert", A100, owner=PRIOR, **kw(min_memory=GIB))[1] == 2.0
    # a caller that knows no owners (a daemon of before): everyone's, as before
    legacy = estimate_for_job(store, "bert", A100, **kw())
    assert legacy[4] == math.inf and legacy[7] == 1000.0  # the prior's 30 GiB need


V2_SCHEMA = """
CREATE TABLE runtimes (job_id TEXT NOT NULL, restart INTEGER NOT NULL, key TEXT NOT NULL,
    model TEXT NOT NULL, size INTEGER NOT NULL, seconds REAL NOT NULL,
    finished REAL NOT NULL, PRIMARY KEY (job_id, restart));
CREATE INDEX runtimes_by_kind ON runtimes (key, model, size);
CREATE TABLE memory (key TEXT NOT NULL, job_id TEXT NOT NULL, need_bytes INTEGER NOT NULL,
    recorded REAL NOT NULL, PRIMARY KEY (key, job_id));
CREATE TABLE pcie (key TEXT NOT NULL, model TEXT NOT NULL, job_id TEXT NOT NULL,
    gbps REAL NOT NULL, recorded REAL NOT NULL, PRIMARY KEY (key, model, job_id));
CREATE TABLE pcie_alpha (key TEXT NOT NULL, model TEXT NOT NULL, alpha REAL NOT NULL,
    stderr REAL, r2 REAL, runs INTEGER, recorded REAL NOT NULL, PRIMARY KEY (key, model));
INSERT INTO runtimes VALUES ('resnet50', 'A100-40GB', 7, 1.0, 5.0)
"""


def test_a_store_of_schema_2_keeps_its_runs_as_the_prior(tmp_path):
    path = tmp_path / "profiles.sqlite"
    db = sqlite3.connect(path)
    db.executescript(
        V2_SCHEMA.replace("VALUES ('resnet50'", "VALUES ('41', 0, 'resnet50'")
        + ";INSERT INTO memory VALUES ('resnet50', '41', 1073741824, 5.0);PRAGMA user_version = 2;"
    )
    db.close()
    store = RuntimeStore(path)
    assert store.observations("resnet50", "A100-40GB", PRIOR) == {7: [1.0]}
    assert store.observations("resnet50", "A100-40GB", "alice") == {}
    assert store.memory_need("resnet50", PRIOR) == GIB
    assert store.memory_need("resnet50", "alice") is None
    assert store.record("resnet50", "A100-40GB", 7, 90.0, "42", 0, 6.0, owner="alice")
    assert store.observations("resnet50", "A100-40GB", "alice") == {7: [90.0]}
    db = sqlite3.connect(path)
    try:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 5
    finally:
        db.close()
    # an old record never shortens a hinted job of anyone
    times = estimate_for_job(store, "resnet50", A100, owner="bob", **kw(hint_seconds=600.0))
    assert times[1] == 600.0


def test_the_daemons_store_adds_no_run_without_an_owner_to_the_prior(store):
    guarded = GuardedStore(store)
    assert guarded.record("k", "A100-40GB", 1, 1.0, "2", 0, 1.0, owner=PRIOR) is False
    assert store.observations("k", "A100-40GB") == {}
    assert guarded.record("k", "A100-40GB", 1, 5.0, "3", 0, 1.0, owner="alice") is True
    assert guarded.observations("k", "A100-40GB", "alice") == {1: [5.0]}
    assert guarded.observations("k", "A100-40GB", PRIOR) == {}
    # a caller that knows no owners (a daemon of before) stores as it did: the prior
    assert guarded.record("k", "A100-40GB", 1, 7.0, "4", 0, 1.0) is True
    assert guarded.observations("k", "A100-40GB", PRIOR) == {1: [7.0]}
