"""The tail repair's search made cheaper (issue 38, ``planner.far_rebalance``): each
step it picks is the one the exhaustive search (every peer, node and task read again,
as before the receivers' summaries) picks; its caches follow the moves; a step of
several moves ends as its moves one by one; and the low start's step budget and peers."""

from __future__ import annotations

import copy
import json

import pytest

from slurm_mig.geometry import get_model
from slurm_mig.plan import validate_plan
from slurm_mig.planner import Batch, far_tail
from slurm_mig.planner import far_rebalance as fr
from slurm_mig.planner.bounds import makespan_bounds
from slurm_mig.planner.far import far_schedule, time_assignment
from slurm_mig.planner.far_phases import LowStart, _phase2_ladder
from slurm_mig.planner.far_planner import plan_far
from slurm_mig.planner.far_rebalance import _Shape, _State, _Summary, rebalance
from slurm_mig.planner.far_tail import LOW_STEPS, low_budget
from slurm_mig.planner.far_tree import Forest
from slurm_mig.workload import generate

A100 = get_model("A100-40GB")
CASES = [
    ("GOODSCALING", "WIDETIMES", 0.5, 600, 48),
    ("POORSCALING", "NARROWTIMES", 0.5, 500, 40),
    ("GOODSCALING", "NARROWTIMES", 0.5, 600, 48),
]


def _batch(scaling, times, p_sup, n, gpus, seed=0):
    tasks = tuple(generate(n, A100, scaling, times, p_sup, seed))
    return tasks, far_schedule(tasks, A100, gpus, pairs=False)


def _ref_swap(st, g, i, v, need, peers, tau):
    """The exhaustive swap search: every peer's every node and task."""
    ti, sv, best = st.tasks[i].times, st.shape.size[v], None
    for h in peers:
        cap = tau - st.pen[h]
        for w in range(st.shape.T):
            sw = st.shape.size[w]
            free = cap - st.top[h][w] - ti[sw]
            if not st.local[h][w] or free + st.dsum[h][w] < 0:
                continue
            for j in st.local[h][w]:
                tj = st.tasks[j].times
                room = free + tj[sw]
                if room < 0 or ti[sv] <= tj[sv]:
                    continue
                gain = -min(ti[sv] - tj[sv], need)
                key = (sv * tj[sv] + sw * ti[sw] - sv * ti[sv] - sw * tj[sw], gain, room)
                if best is None or key < best[0]:
                    best = (key, [(i, g, v, h, w, sw), (j, h, w, g, v, sv)])
    return best


def _ref_task(st, g, v, i, tau, hosts, sizes, banned, best):
    """The exhaustive moves of task ``i`` (node ``v`` of ``g``) and ``best`` before."""
    sh, pc, times = st.shape, st.pc[g], st.tasks[i].times
    sv, di = sh.size[v], times[sh.size[v]]
    st.local[g][v].remove(i)
    st.dsum[g][v] -= di
    gone = di if st.local[g][v] else st.dsum[g][v] + di + sh.oh[v]
    own = st._tops([c - gone if v in p else c for c, p in zip(pc, sh.paths)])
    gain = -min(di, _need(st, g, tau)[v])
    for s in sizes:
        key0 = s * times[s] - sv * di
        if not times[s] <= tau or (best and key0 > best[0][0]):
            continue
        for h in hosts:
            tops = own if h == g else st.top[h]
            got = None if (i, h) in banned else fr._fit(st, h, tops, times[s], s, tau - st.pen[h])
            if got is not None and (best is None or (key0, gain, got[0]) < best[0]):
                best = ((key0, gain, got[0]), [(i, g, v, h, got[1], s)])
    st.local[g][v].append(i)
    st.dsum[g][v] += di
    return best, gain


def _need(st, g, tau):
    need = [0.0] * st.shape.T
    for k, p in enumerate(st.shape.paths):
        over = st.pc[g][k] + st.pen[g] - tau
        for v in p if over > 0 else ():
            need[v] = max(need[v], over)
    return need


def _ref_move(st, g, tau, receivers, peers, sizes, banned, spread=fr.SPREAD):
    """The step as the exhaustive search picks it (the search before the summaries)."""
    rest = receivers[peers :: max(1, (len(receivers) - peers) // (spread * peers) + 1)]
    peers_g = [h for _, h in receivers[:peers] + rest if h != g]
    need, best, seen = _need(st, g, tau), None, set()
    for v in (v for v in range(st.shape.T) if need[v]):
        for i in list(st.local[g][v]):
            di = st.tasks[i].times[st.shape.size[v]]
            if (v, di) in seen:
                continue
            seen.add((v, di))
            best, gain = _ref_task(st, g, v, i, tau, [g, *peers_g], sizes, banned, best)
            if best is not None and best[0][0] <= 0 and best[0][1] <= gain:
                continue
            ok = [h for h in peers_g if (i, h) not in banned]
            got = _ref_swap(st, g, i, v, need[v], ok, tau)
            if got is not None and (best is None or got[0] < best[0]):
                best = got
    return None if best is None else best[1]


@pytest.mark.parametrize("scaling,times,p_sup,n,gpus", CASES)
def test_each_step_is_the_one_the_exhaustive_search_picks(
    monkeypatch, scaling, times, p_sup, n, gpus
):
    tasks, base = _batch(scaling, times, p_sup, n, gpus)
    fast, steps = fr._best_move, []

    def both(st, g, *args):
        saved = [list(a) for a in st.local[g]], list(st.dsum[g])
        want = _ref_move(st, g, *args)
        for v, a in enumerate(saved[0]):  # the order of each node's tasks, as it was
            st.local[g][v][:] = a
        st.dsum[g][:] = saved[1]
        got = fast(st, g, *args)
        steps.append(got)
        assert got == want
        return got

    monkeypatch.setattr(fr, "_best_move", both)
    plan_far(Batch(tasks, A100, gpus=gpus))  # every tail repair of the plan, as planned
    assert any(steps)


def test_the_caches_follow_the_moves():
    tasks, base = _batch("GOODSCALING", "WIDETIMES", 0.5, 600, 48)
    st = _State(_Shape(base.forest), tasks, base.assign, 48)
    for h in range(48):
        st.summary(h)
    fr.repair(st, max(st.end) * 0.99, budget=200)
    for h in range(48):
        fresh, got = _Summary(st, h), st.summary(h)
        assert (got.most, got.used, got.short) == (fresh.most, fresh.used, fresh.short)
    for (g, v), info in st.info.items():
        times = [st.times[j] for j in st.local[g][v]]
        assert info == ([min(c) for c in zip(*times)], max(t[st.shape.size[v]] for t in times))


def test_a_step_of_several_moves_ends_as_its_moves_one_by_one():
    tasks, base = _batch("POORSCALING", "NARROWTIMES", 0.5, 500, 40)
    one = _State(_Shape(base.forest), tasks, base.assign, 40)
    two = copy.deepcopy(one)
    g, h = 0, 1
    (v, i), (w, j) = [(v, a[0]) for x in (g, h) for v, a in enumerate(one.local[x]) if a][:1] + [
        (w, a[0]) for w, a in enumerate(one.local[h]) if a
    ][:1]
    step = [(i, g, v, h, w, one.shape.size[w]), (j, h, w, g, v, one.shape.size[v])]
    one.moves(step)
    for m in step:
        two.move(*m)
    assert (one.local, one.dsum, one.pc, one.top, one.end, one.pen) == (
        two.local,
        two.dsum,
        two.pc,
        two.top,
        two.end,
        two.pen,
    )


def test_the_low_start_budget_is_capped_and_shrinks_on_more_gpus():
    assert low_budget(256) == low_budget(1000) == LOW_STEPS
    assert low_budget(1000) >= 3000  # GOOD-WIDE 10,000 / 1,000 within 1.10 x the bound
    assert fr.STEPS <= low_budget(4000) < LOW_STEPS and low_budget(10**6) == fr.STEPS


def test_wide_plans_stay_valid_deterministic_and_no_longer():
    tasks, base = _batch("GOODSCALING", "WIDETIMES", 0.5, 600, 48)
    kept = copy.deepcopy(base.assign)
    plan = plan_far(Batch(tasks, A100, gpus=48))
    assert validate_plan(json.loads(json.dumps(plan.to_json())), tasks) == []
    assert plan.makespan <= time_assignment(base.forest, tasks, base.assign)[0].makespan
    assert base.assign == kept
    again = plan_far(Batch(tasks, A100, gpus=48))
    assert [(t.id, t.gpu, t.start) for t in again.tasks] == [
        (t.id, t.gpu, t.start) for t in plan.tasks
    ]


@pytest.mark.parametrize("thin,peers", [(4, fr.REPAIR_PEERS), (100, far_tail.LOW_THIN_PEERS)])
def test_the_low_start_looks_at_fewer_peers_where_its_steps_are_thin(monkeypatch, thin, peers):
    tasks, gpus = tuple(generate(600, A100, "GOODSCALING", "WIDETIMES", 0.5, 0)), 48
    forest = Forest.build(A100, gpus)
    low: LowStart = []
    _phase2_ladder(tasks, forest, None, low)
    kept, calls = copy.deepcopy(low[0][1]), []

    def spy(*args, **kw):
        calls.append((kw["peers"], kw["budget"]))
        return rebalance(*args, **kw)

    monkeypatch.setattr(far_tail, "LOW_THIN_STEPS", thin)
    monkeypatch.setattr(far_tail, "rebalance", spy)
    bound = makespan_bounds(tasks, A100, gpus)["dual"]
    ms = low[0][0] * 1.05
    found = far_tail._from_low(forest, tasks, ms, bound, *low[0], far_schedule)
    assert calls == [(peers, low_budget(gpus))] and low[0][1] == kept
    assert all(top < ms for top, _, _ in found)
