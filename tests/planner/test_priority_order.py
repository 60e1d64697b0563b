"""The planning core plans by Slurm's priority (issue 19): strict order with
``reorder=0``, backfill that delays no higher-priority job, the ``reorder`` bound,
standing plans of lower priority dropped for a higher-priority arrival, today's plan
with equal priorities, and the simulator under priorities. Time is the snapshots'
``now``."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_mig.cli import main
from slurm_mig.geometry import Placement, Slot, get_model, slot_mask
from slurm_mig.planner.driver import BatchSettings, by_priority, step
from slurm_mig.planner.registry import get_policy
from slurm_mig.planner.snapshot import (
    ClusterSnapshot,
    Gpu,
    Instance,
    Job,
    Planned,
    SnapshotError,
    snapshot_from_json,
)
from slurm_mig.sim import simulate
from slurm_mig.sim.policies import get_policy as sim_policy

A100 = get_model("A100-40GB")
NOW = 1000.0
G3 = Slot(Placement(0, 4), 3)
G7 = Slot(Placement(0, 8), 7)
WHOLE = {7: 50.0}  # runs on the whole GPU only: two such jobs always share slices
FAR = get_policy("far")
STRICT = BatchSettings(window=0.0, reorder=0)


def snap(pending, gpus=1, instances=None, planned=None, batch=0):
    return ClusterSnapshot(
        now=NOW,
        model=A100,
        gpus=tuple(
            Gpu(k, tuple((instances or {}).get(k, ())), node="n", local=k) for k in range(gpus)
        ),
        pending=pending,
        planned=planned or {},
        next_batch=batch,
    )


def starts(s, got):
    """Each job's start (and slot, GPU, end) as the plan has it: released jobs now, the
    standing plans in (batch, order) after the work on their slices (the projection)."""
    ends = [[NOW] * A100.memory_slices for _ in s.gpus]
    for g in s.gpus:
        for inst in g.instances:
            if inst.job is not None:
                p = inst.slot.placement
                for i in range(p.start, p.end):
                    ends[g.index][i] = max(ends[g.index][i], inst.busy_until)
    out = {}
    for p in got.places:
        out[p.job] = (p.start, p.gpu, p.slot, p.end)
    for p in sorted(got.planned.values(), key=lambda p: (p.batch, p.order, p.job)):
        pl = p.slot.placement
        begin = max(ends[p.gpu][pl.start : pl.end]) + A100.create_time(p.slot.size)
        for i in range(pl.start, pl.end):
            ends[p.gpu][i] = begin + p.seconds
        out[p.job] = (begin, p.gpu, p.slot, begin + p.seconds)
    return out


def batch_of(got):
    return {**{p.job: p.batch for p in got.places}, **{j: p.batch for j, p in got.planned.items()}}


def test_strict_order_a_later_higher_priority_job_starts_no_later():
    busy = {0: (Instance(G7, "x", NOW - 10, NOW + 100),)}
    pending = {
        "low": Job("low", NOW - 50, {7: 80.0}, priority=1.0),  # longer: LPT puts it first
        "high": Job("high", NOW - 10, {7: 20.0}, priority=9.0),
    }
    got = step(snap(pending, instances=busy), FAR, STRICT)
    at = starts(snap(pending, instances=busy), got)
    assert at["high"][0] < at["low"][0]
    assert at["low"][0] >= at["high"][3]  # they share the GPU's slices: low waits for high


def test_backfill_takes_free_slices_without_delaying_the_higher_job():
    busy = {0: (Instance(G3, "x", NOW - 10, NOW + 100),)}  # slices 0-3 busy until +100
    high = Job("high", NOW - 50, {4: 50.0}, priority=9.0)  # 4g: slices 0-3 only
    low = Job("low", NOW - 10, {1: 30.0}, priority=1.0)
    s = snap({"high": high, "low": low}, instances=busy)
    got = step(s, FAR, STRICT)
    at = starts(s, got)
    assert [p.job for p in got.places] == ["low"]  # backfilled: starts now
    assert at["low"][0] == NOW and at["low"][3] == NOW + 30.0
    assert at["high"][0] == NOW + 100 + A100.create_time(4)  # as early as it can
    alone = snap({"high": high}, instances=busy)
    assert starts(alone, step(alone, FAR, STRICT))["high"][0] == at["high"][0]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    k=st.integers(0, 3),
    gpus=st.integers(1, 2),
    spec=st.lists(
        st.tuples(
            st.integers(0, 4),  # priority
            st.integers(0, 100),  # seconds waited
            st.sampled_from([1, 2, 3, 4, 7]),  # smallest size it runs on
            st.integers(5, 200),  # seconds at that size
        ),
        min_size=1,
        max_size=10,
    ),
)
def test_no_job_is_overtaken_by_more_than_k_lower_priority_jobs(k, gpus, spec):
    pending = {}
    for i, (prio, waited, size, secs) in enumerate(spec):
        times = {s: secs * size / s for s in A100.planner_sizes if s >= size}
        pending[str(i)] = Job(str(i), NOW - waited, times, priority=float(prio))
    s = snap(pending, gpus=gpus)
    got = step(s, FAR, BatchSettings(window=0.0, reorder=k))
    batch, at = batch_of(got), starts(s, got)
    assert set(batch) == set(pending)
    for j, job in pending.items():
        ahead = [
            i
            for i, other in pending.items()
            if other.priority < job.priority and batch[i] <= batch[j]
        ]
        assert len(ahead) <= k, (j, ahead)
        start, gpu, slot, _ = at[j]
        for i, other in pending.items():
            if other.priority >= job.priority or batch[i] <= batch[j]:
                continue
            s_i, g_i, slot_i, end_i = at[i]
            if s_i < start and g_i == gpu and slot_mask(slot_i) & slot_mask(slot):
                assert end_i <= start  # a backfilled job ends before j needs its slices


def test_a_lower_priority_standing_plan_is_dropped_for_a_higher_priority_arrival():
    busy = {0: (Instance(G7, "x", NOW - 10, NOW + 100),)}
    pending = {
        "low": Job("low", NOW - 50, WHOLE, priority=1.0),
        "high": Job("high", NOW - 1, WHOLE, priority=900.0),
    }
    standing = {"low": Planned("low", 0, G7, 3, 0, 50.0, NOW - 40)}
    s = snap(pending, instances=busy, planned=standing, batch=4)
    got = step(s, FAR, BatchSettings(window=0.0, reorder=0))
    assert got.stats["replanned"] == [
        "job high (priority 900) goes before planned jobs of lower priority"
    ]
    at = starts(s, got)
    assert at["high"][0] < at["low"][0]
    assert got.planned["low"].batch > got.planned["high"].batch >= 4
    unbounded = step(s, FAR, BatchSettings(window=0.0))  # today's rule: standing plans stay
    assert unbounded.planned["low"] == standing["low"] and unbounded.stats["replanned"] == []


@pytest.mark.parametrize("reorder", [None, 0, 3])
def test_equal_priorities_give_todays_plan(reorder):
    rng = random.Random(5)
    jobs = [
        Job(
            str(i),
            NOW - rng.randrange(60),
            {s: rng.uniform(20, 90) * 7 / s for s in (1, 2, 3, 4, 7)},
        )
        for i in range(12)
    ]
    today = step(snap({j.id: j for j in jobs}, gpus=2), FAR, BatchSettings(window=0.0))
    same = [Job(j.id, j.arrival, j.times, priority=42.0) for j in jobs]
    got = step(
        snap({j.id: j for j in same}, gpus=2), FAR, BatchSettings(window=0.0, reorder=reorder)
    )
    assert got.ops == today.ops and dict(got.planned) == dict(today.planned)


def test_online_policies_are_offered_jobs_in_priority_order():
    pending = {
        "a": Job("a", 1.0, WHOLE, priority=1.0),
        "b": Job("b", 2.0, WHOLE, priority=5.0),
        "c": Job("c", 3.0, WHOLE, priority=5.0),
    }
    s = snap(pending)
    assert list(by_priority(s).pending) == ["b", "c", "a"]
    same = snap({j: Job(j, job.arrival, WHOLE) for j, job in pending.items()})
    assert by_priority(same) is same


def test_priority_in_snapshot_json_is_read_and_checked():
    base = {"now": NOW, "gpu_model": "A100-40GB", "gpus": [{}]}
    job = {"id": "7", "arrival": 1.0, "times": {"7": 10.0}}
    got = snapshot_from_json({**base, "pending": [{**job, "priority": 4294}]})
    assert got.pending["7"].priority == 4294.0
    assert snapshot_from_json(got.to_json()).pending["7"].priority == 4294.0
    for bad in ("high", float("nan"), 1e300, True):
        with pytest.raises(SnapshotError, match=r"pending\[0\]\.priority"):
            snapshot_from_json({**base, "pending": [{**job, "priority": bad}]})


def sim_jobs(n=9, seed=3):
    rng = random.Random(seed)
    out = [Job("first", 0.0, {7: 100.0})]  # holds the GPU while the others arrive
    for i in range(n):
        out.append(
            Job(f"j{i}", 10.0 + i, {7: rng.uniform(10, 40)}, priority=float(rng.randrange(5)))
        )
    return out


def test_the_simulator_runs_priorities_in_strict_order():
    jobs = sim_jobs()
    r = simulate(jobs, sim_policy("far", reorder=0), 1, 1, A100, check=True)
    assert all(f == f for f in r.finish)  # every job finished
    prio = {j.id: j.priority for j in jobs}
    start = dict(zip(r.ids, r.start))
    arrival = dict(zip(r.ids, r.arrival))
    for j in start:
        for i in start:
            if prio[i] > prio[j] and arrival[i] <= start[j]:
                assert start[i] <= start[j], (i, j)  # no inversion
    order = sorted((j for j in start if j != "first"), key=lambda j: start[j])
    assert [prio[j] for j in order] == sorted((prio[j] for j in order), reverse=True)
    unbounded = simulate(jobs, sim_policy("far"), 1, 1, A100)
    assert dict(zip(unbounded.ids, unbounded.start)) != start  # the bound changed the order


def test_simulate_takes_reorder_and_priorities_from_a_job_file(tmp_path, capsys):
    path = tmp_path / "jobs.json"
    path.write_text(
        json.dumps(
            [
                {
                    "id": j.id,
                    "arrival": j.arrival,
                    "times": {"7": j.times[7]},
                    "priority": j.priority,
                }
                for j in sim_jobs()
            ]
        )  # fmt: skip
    )
    rc = main(["simulate", "--gpus", "1", "--workload", str(path), "--policy", "far",
               "--reorder", "0", "--json"])  # fmt: skip
    out, err = capsys.readouterr()
    assert rc == 0 and json.loads(out)["policies"]["far"]["jobs"] == 10
    with pytest.raises(SystemExit):
        main(["simulate", "--gpus", "1", "--workload", str(path), "--reorder", "-1"])
    assert "--reorder" in capsys.readouterr().err
