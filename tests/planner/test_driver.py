"""The driver every batch planner runs through (daemon and simulator alike): batch
formation, standing plans, re-plans tied to the GPUs that changed, the release gate,
and the projection a new batch is planned onto."""

from __future__ import annotations

import math

import pytest

from slurm_mig.geometry import Placement, Slot, can_coexist, get_model
from slurm_mig.planner.decisions import Destroy, Place
from slurm_mig.planner.driver import BatchSettings, gate, project, projected_end, step, step_groups
from slurm_mig.planner.registry import get_policy
from slurm_mig.planner.snapshot import ClusterSnapshot, Event, Gpu, Instance, Job, Planned

A100 = get_model("A100-40GB")
A30 = get_model("A30-24GB")
G1 = [Slot(Placement(i, 1), 1) for i in range(7)]
G3 = [Slot(Placement(0, 4), 3), Slot(Placement(4, 4), 3)]
G7 = Slot(Placement(0, 8), 7)
TIMES = {1: 40.0, 2: 21.0, 3: 15.0, 4: 12.0, 7: 8.0}
NOW = 1000.0


def jobs(n, arrival=NOW - 60.0, times=TIMES, prefix="j"):
    return {f"{prefix}{i}": Job(f"{prefix}{i}", arrival + i, times) for i in range(n)}


def snap(
    gpus=2, pending=None, planned=None, instances=None, events=(), model=A100, now=NOW, batch=0
):
    return ClusterSnapshot(
        now=now,
        model=model,
        gpus=tuple(
            Gpu(k, tuple((instances or {}).get(k, ())), node="n", local=k) for k in range(gpus)
        ),
        pending=pending or {},
        planned=planned or {},
        events=tuple(events),
        next_batch=batch,
    )


FAR = get_policy("far")


def test_a_batch_forms_once_the_oldest_waited_the_window_or_it_is_full():
    young = jobs(3, arrival=NOW - 5.0)
    got = step(snap(pending=young), FAR, BatchSettings(window=30.0))
    assert got.ops == () and not got.planned and got.stats["waiting"] == 3
    old = jobs(3, arrival=NOW - 31.0)
    got = step(snap(pending=old), FAR, BatchSettings(window=30.0))
    assert len(got.places) + len(got.planned) == 3 and got.stats["batches"] == 1
    full = step(snap(pending=young), FAR, BatchSettings(window=30.0, size=2))
    assert full.stats["batches"] == 1 and full.stats["waiting"] == 1  # 2 planned, 1 waits
    eager = step(snap(pending=young), FAR, BatchSettings(window=math.inf, eager=True))
    assert eager.stats["batches"] == 1


def test_numbers_and_orders_of_a_new_batch():
    got = step(snap(pending=jobs(10), batch=7), FAR, BatchSettings(window=0.0))
    plans = {**{p.job: p for p in got.places}, **got.planned}
    assert {p.batch for p in plans.values()} == {7}
    for g in (0, 1):
        orders = sorted(p.order for p in plans.values() if p.gpu == g)
        assert orders == list(range(len(orders)))


def test_the_gate_releases_in_order_and_never_two_overlapping():
    planned = {
        "a": Planned("a", 0, G3[0], 1, 0, 10.0),
        "b": Planned("b", 0, G1[1], 1, 1, 5.0),  # overlaps a (slices 0-3): waits for it
        "c": Planned("c", 0, G3[1], 1, 2, 10.0),
        "d": Planned("d", 1, G7, 0, 0, 10.0),
    }
    busy = {1: (Instance(G1[2], "x", NOW - 5, NOW + 5),)}  # d waits for x
    s = snap(pending=jobs(0), planned=planned, instances=busy)
    ops = gate(s, planned)
    assert [op.job for op in ops if type(op) is Place] == ["a", "c"]
    assert all(op.start == NOW for op in ops)


def test_the_gate_destroys_idle_instances_in_the_way_once():
    planned = {
        "a": Planned("a", 0, G1[0], 0, 0, 10.0),
        "b": Planned("b", 0, G1[1], 0, 1, 10.0),
        "c": Planned("c", 0, G1[4], 0, 2, 10.0),
    }
    idle = {0: (Instance(G3[0]), Instance(G1[4]))}  # an idle 3g over a and b; c reuses
    ops = gate(snap(planned=planned, instances=idle), planned)
    assert ops[0] == Destroy(0, G3[0])
    assert [type(op) for op in ops].count(Destroy) == 1
    assert [op.job for op in ops if type(op) is Place] == ["a", "b", "c"]


def test_standing_plans_stay_until_an_event_after_them_and_the_window():
    planned = {"a": Planned("a", 0, G7, 0, 0, 30.0, issued=NOW - 100.0)}
    pending = {"a": Job("a", NOW - 200.0, TIMES)}
    busy = {0: (Instance(G7, "x", NOW - 10, NOW + 50),), 1: (Instance(G7, "y", NOW - 10, NOW + 5),)}
    base = snap(pending=pending, planned=planned, instances=busy)
    kept = step(base, FAR, BatchSettings(window=30.0))
    assert dict(kept.planned) == planned and not kept.stats["replanned"]
    early = snap(
        pending=pending,
        planned=planned,
        instances=busy,
        events=[Event(NOW - 20.0, "job w ended early", 0)],
    )
    moved = step(early, FAR, BatchSettings(window=30.0))
    assert moved.stats["replanned"] == ["job w ended early"]
    # planned again: onto GPU 1, which frees first, or GPU 0 as before - a fresh plan
    new = {**{p.job: p for p in moved.places}, **moved.planned}["a"]
    assert new.gpu == 1 and new.issued == NOW
    # an event older than the plan, or a plan younger than the window, changes nothing
    stale = snap(
        pending=pending, planned=planned, instances=busy, events=[Event(NOW - 150.0, "old", 0)]
    )
    assert dict(step(stale, FAR, BatchSettings(window=30.0)).planned) == planned
    young = {"a": Planned("a", 0, G7, 0, 0, 30.0, issued=NOW - 10.0)}
    fresh = snap(pending=pending, planned=young, instances=busy, events=early.events)
    assert dict(step(fresh, FAR, BatchSettings(window=30.0)).planned) == young


def test_an_event_on_one_gpu_replans_only_the_jobs_planned_there():
    planned = {
        "a": Planned("a", 0, G7, 0, 0, 30.0, issued=NOW - 100.0),
        "b": Planned("b", 1, G7, 0, 0, 30.0, issued=NOW - 100.0),
    }
    pending = {k: Job(k, NOW - 200.0, TIMES) for k in "ab"}
    busy = {g: (Instance(G7, f"x{g}", NOW - 10, NOW + 50),) for g in (0, 1)}
    one = snap(pending=pending, planned=planned, instances=busy, events=[Event(NOW - 5, "e", 1)])
    got = step(one, FAR, BatchSettings(window=30.0))
    assert got.planned["a"] == planned["a"]  # untouched
    assert got.planned["b"].issued == NOW  # planned again
    every = snap(pending=pending, planned=planned, instances=busy, events=[Event(NOW - 5, "e")])
    got = step(every, FAR, BatchSettings(window=30.0))
    assert all(p.issued == NOW for p in got.planned.values())


def test_the_projection_runs_busy_jobs_then_standing_plans():
    busy = {0: (Instance(G3[0], "x", NOW - 10, NOW + 20),)}
    planned = {
        "a": Planned("a", 0, G1[0], 0, 0, 30.0),  # after x, created, 30 s
        "b": Planned("b", 0, G3[1], 0, 1, 10.0),  # free slices: at once
    }
    s = snap(gpus=1, pending=jobs(0), instances=busy)
    (gpu,) = project(s, planned.values())
    by_job = {i.job: i for i in gpu.instances}
    c1, c3 = A100.create_time(1), A100.create_time(3)
    assert by_job["a"].busy_until == pytest.approx(NOW + 20 + c1 + 30)
    assert by_job["b"].busy_until == pytest.approx(NOW + c3 + 10)
    assert projected_end(s, planned.values()) == pytest.approx(NOW + 20 + c1 + 30)


def test_two_models_share_a_batch_and_plans_never_overlap():
    a100 = snap(gpus=2, pending=jobs(12))
    a30_times = {1: 50.0, 2: 26.0, 4: 14.0}
    a30 = snap(
        gpus=2, model=A30, pending={k: Job(k, j.arrival, a30_times) for k, j in jobs(12).items()}
    )
    got = step_groups([a100, a30], [FAR, FAR], BatchSettings(window=0.0))
    seen: dict[str, int] = {}
    for g, d in enumerate(got):
        for p in [*d.places, *d.planned.values()]:
            assert p.job not in seen
            seen[p.job] = g
    assert len(seen) == 12 and set(seen.values()) == {0, 1}
    for g, d in enumerate(got):
        for k in range(2):
            now = [p.slot.placement for p in d.places if p.gpu == k]
            assert can_coexist((A100, A30)[g], now)


def test_online_policies_are_offered_the_jobs_group_by_group():
    one = snap(gpus=1, pending=jobs(9, times={1: 10.0, 2: 10.0, 3: 10.0, 4: 10.0, 7: 10.0}))
    two = snap(gpus=1, pending=dict(one.pending))
    got = step_groups([one, two], [get_policy("baseline"), get_policy("baseline")])
    first = {p.job for p in got[0].places}
    second = {p.job for p in got[1].places}
    assert len(first) == 7 and len(second) == 2 and not first & second
