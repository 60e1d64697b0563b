"""FAR phases 1-3 against the paper, the authors' simulator and hand computations."""

from __future__ import annotations

import json
import math
import random

import pytest
from support import A30_FIVE, shared_file

from slurm_mig.geometry import get_model
from slurm_mig.job import Job
from slurm_mig.plan import lower_bound, validate_plan
from slurm_mig.planner import Batch
from slurm_mig.planner.far import Forest, far_schedule, time_assignment
from slurm_mig.planner.far_phases import allocation_family, list_schedule
from slurm_mig.planner.far_planner import plan_far
from slurm_mig.workload import generate, load_tasks

A30 = get_model("A30-24GB")
A100 = get_model("A100-40GB")
H100 = get_model("H100-80GB")
INF = math.inf


def pinned(tid: str, size: int, t: float, model=A30) -> Job:
    """A task that can run on one size only: FAR's allocation is forced."""
    return Job(tid, 0.0, {s: (t if s == size else INF) for s in model.planner_sizes})


def _valid(plan, tasks):
    errors = validate_plan(json.loads(json.dumps(plan.to_json())), tasks)
    assert errors == [], errors


def _by_id(plan):
    return {t.id: t for t in plan.tasks}


# ---------------------------------------------------------------------------
# Rodinia on the A100 (the authors' Python simulator: README of far-reference)


@pytest.fixture(scope="module")
def rodinia():
    return load_tasks(shared_file("far-reference/rodinia_A100_mean_long.csv"), A100)


def test_rodinia_lower_bound(rodinia):
    assert len(rodinia) == 16
    assert lower_bound(rodinia, A100) == pytest.approx(10.365, abs=1e-3)


def test_rodinia_phase2(rodinia):
    res = far_schedule(rodinia, A100, refine_phase=False)
    assert res.phase2_makespan == pytest.approx(12.685, abs=1e-3)
    plan = plan_far(Batch(tuple(rodinia), A100), refine_phase=False)
    assert plan.makespan == pytest.approx(12.685, abs=1e-3)
    assert plan.area_rho == pytest.approx(1.224, abs=1e-3)  # the paper's rho: vs the area
    _valid(plan, rodinia)


def test_rodinia_final(rodinia):
    plan = plan_far(Batch(tuple(rodinia), A100))
    assert plan.makespan == pytest.approx(12.609, abs=1e-3)
    assert plan.area_rho == pytest.approx(1.217, abs=1e-3)
    assert plan.stats["phase2_makespan"] == pytest.approx(12.685, abs=1e-3)
    assert plan.stats["refinement_moves"] + plan.stats["refinement_swaps"] >= 1
    assert plan.planner == "far"
    _valid(plan, rodinia)


def test_rodinia_chosen_allocation_is_in_the_family(rodinia):
    res = far_schedule(rodinia, A100, refine_phase=False, prune=False)
    fam = allocation_family(rodinia, A100)
    assert res.walked == len(fam)
    assert res.allocation == fam[res.chosen_index]
    for task, size in zip(rodinia, res.allocation):
        assert math.isfinite(task.times[size])


# ---------------------------------------------------------------------------
# Phase 1: the family of allocations (Section 3.1), by hand on the A30

# works (s * t(s)) in comments
PHASE1 = [
    Job("T0", 0.0, {1: 9.0, 2: 6.0, 4: 2.5}),  # 9, 12, 10: size 1; next above 1 is 4 (10 < 12)
    Job("T1", 0.0, {1: 8.0, 2: 4.2, 4: 3.0}),  # 8, 8.4, 12: size 1
    Job("T2", 0.0, {1: 3.0, 2: 1.5, 4: 1.5}),  # 3, 3, 6: tie -> the smaller size, 1
    Job("T3", 0.0, {1: 20.0, 2: 7.9, 4: 5.0}),  # 20, 15.8, 20: size 2 (not the smallest)
]


def test_phase1_family_by_hand():
    fam = allocation_family(PHASE1, A30)
    assert fam == [
        [1, 1, 1, 2],  # minimum work, smallest size on the T2 tie; times 9, 8, 3, 7.9
        [4, 1, 1, 2],  # longest T0 (9) -> min work above 1 is 4; times 2.5, 8, 3, 7.9
        [4, 2, 1, 2],  # longest T1 (8) -> 2; times 2.5, 4.2, 3, 7.9
        [4, 2, 1, 4],  # longest T3 (7.9) -> 4; times 2.5, 4.2, 3, 5
    ]  # longest is T3 at 4, the largest size: the family ends


def test_phase1_family_invariants():
    rng = random.Random(5)
    for model in (A30, A100):
        for _ in range(30):
            tasks = generate(rng.randint(1, 12), model, p_sup=0.5, seed=rng.randrange(10**6))
            fam = allocation_family(tasks, model)
            first = fam[0]
            for t, s in zip(tasks, first):
                works = {z: z * t.times[z] for z in model.planner_sizes}
                best = min(works.values())
                assert works[s] == pytest.approx(best)
                # no smaller size has (numerically) the same minimum work
                assert all(works[z] > best * (1 + 1e-12) for z in works if z < s)
            for prev, nxt in zip(fam, fam[1:]):
                changed = [i for i in range(len(tasks)) if prev[i] != nxt[i]]
                assert len(changed) == 1
                i = changed[0]
                longest = max(tasks[j].times[prev[j]] for j in range(len(tasks)))
                assert tasks[i].times[prev[i]] == longest  # the longest task grows
                assert nxt[i] > prev[i]
            # the family ends when the longest task cannot grow
            last = fam[-1]
            tlong = max(tasks[j].times[last[j]] for j in range(len(tasks)))
            i = next(j for j in range(len(tasks)) if tasks[j].times[last[j]] == tlong)
            assert last[i] == model.planner_sizes[-1]


def test_phase2_picks_from_the_family():
    res = far_schedule(PHASE1, A30, refine_phase=False, prune=False)
    fam = allocation_family(PHASE1, A30)
    assert res.walked == len(fam) == res.evaluated
    assert res.allocation == fam[res.chosen_index]
    # the chosen allocation has the smallest Algorithm-1 makespan of the family
    forest = Forest.build(A30, 1)
    spans = []
    for alloc in fam:
        dur = [t.times[s] for t, s in zip(PHASE1, alloc)]
        groups = {s: sorted((-dur[i], i) for i in range(4) if alloc[i] == s) for s in (1, 2, 4)}
        spans.append(list_schedule(forest, groups, dur, 4)[0])
    assert res.phase2_makespan == pytest.approx(min(spans))
    assert res.chosen_index == spans.index(min(spans))


# ---------------------------------------------------------------------------
PHASE2 = A30_FIVE  # tests/hand_batches.py says why


def test_phase2_algorithm1_by_hand():
    res = far_schedule(PHASE2, A30, refine_phase=False)
    assert res.walked == 1
    assert res.allocation == [4, 1, 1, 2, 1]
    # root 4g: create [0, .13], A [.13, 8.13]; no 4-slice task left: destroy
    # [8.13, 8.23]; 2g@0 created [8.23, 8.35], D [8.35, 11.35]; 2g@2 has no
    # 2-slice task: its 1g children take B (LPT) and C: creates [8.35, 8.46] and
    # [8.46, 8.57]; then 2g@0 is split: destroy [11.35, 11.45], create 1g@0
    # [11.45, 11.56], E [11.56, 13.56]. Makespan: B ends at 8.46 + 6 = 14.46.
    assert res.phase2_makespan == pytest.approx(14.46)
    plan = plan_far(Batch(tuple(PHASE2), A30), refine_phase=False)
    assert plan.makespan == pytest.approx(14.46)
    got = {t.id: (t.slot.size, t.slot.placement.start, t.start, t.end) for t in plan.tasks}
    expected = {
        "A": (4, 0, 0.13, 8.13),
        "D": (2, 0, 8.35, 11.35),
        "B": (1, 2, 8.46, 14.46),
        "C": (1, 3, 8.57, 13.57),
        "E": (1, 0, 11.56, 13.56),
    }
    assert set(got) == set(expected)
    for tid, (size, start, b, f) in expected.items():
        assert got[tid][:2] == (size, start), tid
        assert got[tid][2] == pytest.approx(b), tid
        assert got[tid][3] == pytest.approx(f), tid
    ops = sorted(
        (r.start, r.end, r.op, r.slot.size, r.slot.placement.start) for r in plan.reconfigurations
    )
    want = [
        (0.0, 0.13, "create", 4, 0),
        (8.13, 8.23, "destroy", 4, 0),
        (8.23, 8.35, "create", 2, 0),
        (8.35, 8.46, "create", 1, 2),
        (8.46, 8.57, "create", 1, 3),
        (11.35, 11.45, "destroy", 2, 0),
        (11.45, 11.56, "create", 1, 0),
    ]
    assert len(ops) == len(want)
    for g, w in zip(ops, want):
        assert g[2:] == w[2:]
        assert g[0] == pytest.approx(w[0]) and g[1] == pytest.approx(w[1])
    _valid(plan, PHASE2)


def test_phase2_two_gpus_have_two_roots():
    tasks = [pinned(f"t{i}", 4, 10.0 - i) for i in range(4)]
    res = far_schedule(tasks, A30, gpus=2, refine_phase=False)
    # LPT over two 4g roots, each created at time 0 (one channel per GPU)
    # gpu0: t0 [.13, 10.13], t3 [10.13, 17.13]; gpu1: t1 [.13, 9.13], t2 [9.13, 17.13]
    assert res.phase2_makespan == pytest.approx(17.13)
    plan = plan_far(Batch(tuple(tasks), A30, gpus=2), refine_phase=False)
    assert {t.gpu for t in plan.tasks} == {0, 1}
    assert plan.makespan == pytest.approx(17.13)
    got = _by_id(plan)
    assert got["t0"].gpu == got["t3"].gpu != got["t1"].gpu == got["t2"].gpu
    _valid(plan, tasks)


def test_list_schedule_stop_at():
    forest = Forest.build(A30, 1)
    dur = [8.0, 6.0, 5.0, 3.0, 2.0]
    groups = {4: [(-8.0, 0)], 2: [(-3.0, 3)], 1: [(-6.0, 1), (-5.0, 2), (-2.0, 4)]}
    ms, assign = list_schedule(forest, groups, dur, 5)
    assert ms == pytest.approx(14.46)
    assert sorted(i for node in assign for i in node) == [0, 1, 2, 3, 4]
    assert list_schedule(forest, groups, dur, 5, stop_at=14.0) is None
    assert list_schedule(forest, groups, dur, 5, stop_at=15.0)[0] == pytest.approx(14.46)


# ---------------------------------------------------------------------------
# Phase 3: Fig. 5 (move) and Fig. 6 (swap) with concrete numbers on the A30


def test_fig5_move():
    """Y (2 slices) ends first, so LPT puts the long 1-slice K in Y's subtree, after Y;
    moving Y onto the other 2-slice instance (after X) lets K start at once."""
    tasks = [pinned("X", 2, 10.0), pinned("Y", 2, 8.0), pinned("K", 1, 20.0), pinned("L", 1, 1.0)]
    batch = Batch(tuple(tasks), A30)
    flawed = plan_far(batch, refine_phase=False)
    # X on 2g@0 [.12, 10.12]; Y on 2g@2 [.24, 8.24]; 2g@2 destroyed [8.24, 8.34];
    # K on 1g@2 [8.45, 28.45]; L on 1g@3 [8.56, 9.56]
    assert flawed.makespan == pytest.approx(28.45)
    k, y = _by_id(flawed)["K"], _by_id(flawed)["Y"]
    assert k.start >= y.end and set(k.slot.slices) <= set(y.slot.slices)

    res = far_schedule(tasks, A30)
    assert (res.moves, res.swaps) == (1, 0)
    refined = plan_far(batch)
    assert refined.stats["refinement_moves"] == 1
    assert refined.stats["refinement_swaps"] == 0
    # X, Y on 2g@0 [.12, 18.12]; K on 1g@2 [.23, 20.23]; L on 1g@3 [.34, 1.34]
    assert refined.makespan == pytest.approx(20.23)
    got = _by_id(refined)
    assert got["Y"].slot == got["X"].slot
    assert got["K"].start == pytest.approx(0.23)
    assert flawed.makespan / refined.makespan > 1.4
    _valid(flawed, tasks)
    _valid(refined, tasks)


def test_fig6_swap():
    """Two 2-slice instances and LPT on 30, 30, 20, 20, 20: 30+20+20 | 30+20. No task
    fits the 20 s margin, but swapping a 30 for a 20 gives 20+20+20 | 30+30."""
    tasks = [pinned(n, 2, t) for n, t in zip("ABCDE", (30.0, 30.0, 20.0, 20.0, 20.0))]
    batch = Batch(tuple(tasks), A30)
    flawed = plan_far(batch, refine_phase=False)
    assert flawed.makespan == pytest.approx(70.12)
    res = far_schedule(tasks, A30)
    assert (res.moves, res.swaps) == (0, 1)
    refined = plan_far(batch)
    assert refined.stats["refinement_swaps"] == 1
    assert refined.makespan == pytest.approx(60.24)
    groups: dict = {}
    for t in refined.tasks:
        groups.setdefault(t.slot, set()).add(t.id)
    assert sorted(map(sorted, groups.values())) == [["A", "B"], ["C", "D", "E"]]
    _valid(flawed, tasks)
    _valid(refined, tasks)


def test_refine_needs_more_than_one_task():
    tasks = [pinned("solo", 1, 5.0)]
    plan = plan_far(Batch(tuple(tasks), A30))
    assert plan.makespan == pytest.approx(5.11)
    _valid(plan, tasks)


def _random_batches(count, seed):
    rng = random.Random(seed)
    models = [A30, A100, H100]
    for _ in range(count):
        model = rng.choice(models)
        n = rng.choice([1, 2, 3, 5, 8, 12, 20, 35])
        gpus = rng.randint(1, 3)
        scaling = rng.choice(["POORSCALING", "MIXEDSCALING", "GOODSCALING"])
        if model is A30:
            scaling = rng.choice([{1: 0.5, 2: 0.5}, {1: 0.3, 2: 0.3, 4: 0.4}, {4: 1.0}])
        times = rng.choice(["WIDETIMES", "NARROWTIMES", (0.05, 2.0)])
        tasks = generate(
            n, model, scaling, times, p_sup=rng.choice([0, 0.5, 1]), seed=rng.randrange(10**9)
        )
        if rng.random() < 0.3:  # some tasks cannot run on the smallest sizes
            sizes = model.planner_sizes
            for i, t in enumerate(tasks):
                k = rng.randint(0, len(sizes) - 1)
                times = {s: (INF if j < k else t.times[s]) for j, s in enumerate(sizes)}
                tasks[i] = Job(t.id, 0.0, times)
        if rng.random() < 0.2:  # duplicated jobs: exact ties everywhere
            tasks = tasks + [Job(t.id + "-dup", 0.0, t.times) for t in tasks]
        yield tasks, model, gpus


def test_phase3_never_worse():
    for tasks, model, gpus in _random_batches(150, seed=11):
        batch = Batch(tuple(tasks), model, gpus)
        before = plan_far(batch, refine_phase=False)
        after = plan_far(batch)
        assert after.makespan <= before.makespan + 1e-9
        _valid(after, tasks)


def test_pruning_is_exact():
    for tasks, model, gpus in _random_batches(200, seed=7):
        pruned = far_schedule(tasks, model, gpus, refine_phase=False, prune=True)
        full = far_schedule(tasks, model, gpus, refine_phase=False, prune=False)
        assert pruned.chosen_index == full.chosen_index
        assert pruned.allocation == full.allocation
        assert pruned.phase2_makespan == full.phase2_makespan
        assert pruned.evaluated <= full.evaluated


def test_pruned_walk_stops_early_but_unpruned_walks_the_whole_family():
    """Without pruning phase 2 visits the whole family of Section 3.1; with it, the walk
    may stop early (the area bound only grows) and the plan reports how far it went."""
    stopped_early = False
    for seed in range(5):
        tasks = generate(30, A100, seed=seed)
        fam = allocation_family(tasks, A100)
        full = far_schedule(tasks, A100, refine_phase=False, prune=False)
        pruned = far_schedule(tasks, A100, refine_phase=False, prune=True)
        assert full.walked == len(fam)
        assert pruned.walked <= len(fam)
        stopped_early |= pruned.walked < len(fam)
        plan = plan_far(Batch(tuple(tasks), A100))
        assert plan.stats["allocations_walked"] == pruned.walked
    assert stopped_early


def test_pruning_exact_on_ties():
    """Identical tasks give many equal makespans: the earliest best allocation wins."""
    for n in (1, 2, 3, 7, 8, 14):
        for model in (A30, A100):
            tasks = [
                Job(f"t{i}", 0.0, {s: 10.0 / s for s in model.planner_sizes}) for i in range(n)
            ]
            for gpus in (1, 2):
                a = far_schedule(tasks, model, gpus, refine_phase=False, prune=True)
                b = far_schedule(tasks, model, gpus, refine_phase=False, prune=False)
                assert (a.chosen_index, a.phase2_makespan) == (b.chosen_index, b.phase2_makespan)


def test_time_assignment_matches_plan():
    tasks = generate(15, A100, seed=3, p_sup=0.5)
    res = far_schedule(tasks, A100, 2)
    timeline, nodes = time_assignment(res.forest, tasks, res.assign)
    plan = plan_far(Batch(tuple(tasks), A100, 2))
    assert timeline.makespan == pytest.approx(plan.makespan)
    assert len(nodes) == len({(t.gpu, t.slot) for t in plan.tasks})
    # every task sits on a forest node of its allocated size
    sizes = {tasks[i].id: res.forest.size[v] for v, a in enumerate(res.assign) for i in a}
    assert sizes == {t.id: t.slot.size for t in plan.tasks}
    assert sorted(sizes) == sorted(t.id for t in tasks)


def test_forest_build():
    f = Forest.build(A100, 3)
    T = len(A100.tree)
    assert f.nodes == 3 * T
    assert f.roots == [0, T, 2 * T]
    assert sorted(f.by_size) == [1, 2, 3, 4, 7]
    assert len(f.by_size[1]) == 21 and len(f.by_size[3]) == 6
    for v in range(f.nodes):
        assert all(s // 7 == f.gpu[v] for s in f.covers[v])
        if f.parent[v] >= 0:
            assert set(f.covers[v]) <= set(f.covers[f.parent[v]])
    three_at_0 = next(v for v in range(T) if f.size[v] == 3 and 0 in f.covers[v])
    assert f.covers[three_at_0] == (0, 1, 2, 3)  # holds slice 3's memory


def test_far_deterministic():
    tasks = generate(20, A100, seed=9, p_sup=0.5)
    a = plan_far(Batch(tuple(tasks), A100, 2)).to_json()
    b = plan_far(Batch(tuple(tasks), A100, 2)).to_json()
    a["stats"].pop("planning_seconds")
    b["stats"].pop("planning_seconds")
    assert a == b
