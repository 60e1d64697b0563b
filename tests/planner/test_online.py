"""The fragmentation-aware online scheduler: Eq. 3-5, placement on arrival, migration
on departure, and its policies run in the real simulator with every invariant checked."""

from __future__ import annotations

import math
import random

import pytest

from slurm_mig.geometry import Placement, Slot, get_model
from slurm_mig.planner.online import (
    FragAwarePolicy,
    choose_placement,
    fragmentation_cost,
    is_lazy,
    parse_layout,
    plan_departure,
    profile_terms,
)
from slurm_mig.planner.snapshot import Gpu, Instance
from slurm_mig.sim import SimJob, get_policy, simulate

A100 = get_model("A100-40GB")


def slot(start: int, size: int, model=A100) -> Slot:
    return Slot(Placement(start, model.profile_for_size(size).memory_slices), size)


def occ(job: str, start: int, size: int, end: float = 1e9) -> Instance:
    """A job on the instance at ``start`` of ``size`` slices, ending at ``end``."""
    return Instance(slot(start, size), job, busy_until=end)


def gpu(index: int, busy=(), idle=()) -> Gpu:
    insts = [*busy, *(Instance(s) for s in idle)]
    return Gpu(index, tuple(sorted(insts, key=lambda i: i.slot.placement.start)))


def movers(*jobs: str):
    """A can_move predicate: these jobs are restartable and running."""
    return lambda o: o.job in jobs


# ---------------------------------------------------------------------------
# Eq. 3-5


def test_fig1_same_free_slices_different_availability_different_cost():
    # Fig. 1: GPU 1 holds a 3g at index 0, GPU 2 a 3g at index 4. Both have 4 free
    # compute and 4 free memory slices, but only GPU 2 can still create a 4g.
    gpu1 = gpu(0, [occ("x", 0, 3)])
    gpu2 = gpu(1, [occ("y", 4, 3)])
    assert gpu1.compute_mask.bit_count() == gpu2.compute_mask.bit_count() == 3
    assert (8 - gpu1.busy_mask.bit_count()) == (8 - gpu2.busy_mask.bit_count()) == 4
    terms1 = {
        p: (ideal, valid)
        for p, ideal, valid in profile_terms(gpu1.busy_mask, gpu1.compute_mask, A100)
    }
    terms2 = {
        p: (ideal, valid)
        for p, ideal, valid in profile_terms(gpu2.busy_mask, gpu2.compute_mask, A100)
    }
    # Eq. 3 (N_ideal) is the same on both; Eq. 4 (N_valid) is not
    assert {p: t[0] for p, t in terms1.items()} == {p: t[0] for p, t in terms2.items()}
    assert terms1 == {
        "1g.5gb": (4, 3),  # index 3 is memory of the 3g
        "1g.10gb": (2, 2),
        "2g.10gb": (2, 1),  # a 2g cannot start at 6
        "3g.20gb": (1, 1),
        "4g.20gb": (1, 0),  # 4g only at index 0
        "7g.40gb": (0, 0),
    }
    assert all(ideal == valid for ideal, valid in terms2.values())
    # Eq. 5: mean over the six profiles of 1 - N_valid / N_ideal
    assert fragmentation_cost(gpu1, A100) == pytest.approx((1 / 4 + 1 / 2 + 1) / 6)
    assert fragmentation_cost(gpu2, A100) == 0.0
    # the cost follows the slots, whatever the job names
    assert fragmentation_cost([slot(0, 3)], A100) == fragmentation_cost(gpu1, A100)


def test_empty_and_full_gpus_cost_nothing():
    assert fragmentation_cost([], A100) == 0.0
    assert fragmentation_cost([slot(0, 7)], A100) == 0.0
    full = [slot(0, 2), slot(2, 2), slot(4, 2), slot(6, 1)]
    assert fragmentation_cost(full, A100) == 0.0


def test_cost_prefers_the_placement_nvidia_prefers():
    # Sec. III-A: a 2g goes to index 4, not 0 or 2, which would block a 4g
    costs = {s: fragmentation_cost([slot(s, 2)], A100) for s in (0, 2, 4)}
    assert costs[4] == 0.0 < costs[0] == costs[2]
    choice = choose_placement([gpu(0)], [2], A100)
    assert choice is not None and choice.slot == slot(4, 2) and choice.cost == 0.0


def test_cost_on_a30_uses_its_three_profiles():
    a30 = get_model("A30-24GB")
    one = Slot(Placement(0, 1), 1)
    # a 1g at 0 leaves 3 slices: 2g ideal 1 valid 1 (at 2), 4g ideal 0; 1g 3 of 3
    assert fragmentation_cost([one], a30) == 0.0
    one_at_1 = Slot(Placement(1, 1), 1)
    # a 1g at 1 blocks the 2g at 0: ideal 1, valid 1 (at 2) -> still 0; a second
    # 1g at 3 leaves 2 slices (0 and 2) but no 2g: 2g ideal 1, valid 0 -> 1/3
    assert fragmentation_cost([one_at_1, Slot(Placement(3, 1), 1)], a30) == pytest.approx(1 / 3)


# ---------------------------------------------------------------------------
# Arrival: conditional load balancing, exact size, reuse on ties


def test_load_balancing_switches_at_the_threshold():
    empty = gpu(1)
    two = gpu(0, [occ("a", 4, 2)])  # 2 of 7 slices: 0.29 < 0.4, lazy
    three = gpu(0, [occ("a", 4, 3)])  # 3 of 7: 0.43 >= 0.4, busy
    assert is_lazy(two, A100) and not is_lazy(three, A100)
    # lazy GPUs are packed: the job joins GPU 0 (tie on cost, lower index)
    assert choose_placement([two, empty], [1], A100).gpu == 0
    # once GPU 0 passes the threshold the next job spreads to the lazy GPU 1
    assert choose_placement([three, empty], [1], A100).gpu == 1
    # a higher threshold keeps packing; without load balancing cost decides alone
    assert choose_placement([three, empty], [1], A100, threshold=0.5).gpu == 0
    assert choose_placement([three, empty], [1], A100, load_balance=False).gpu == 0
    # a busy GPU is still used when no lazy GPU has room
    full_lazy = gpu(1, [occ("b", 0, 7)])
    assert is_lazy(gpu(1), A100) and not is_lazy(full_lazy, A100)
    assert choose_placement([three, full_lazy], [1], A100).gpu == 0


def test_exact_size_prefers_reusing_an_idle_instance_on_ties():
    # both GPUs can take a 1g at index 6 at cost 0; GPU 1 already has it (idle)
    gpus = [gpu(0), gpu(1, idle=(slot(6, 1),))]
    choice = choose_placement(gpus, [1], A100)
    assert (choice.gpu, choice.slot, choice.reuse, choice.destroy) == (1, slot(6, 1), True, ())
    # reuse does not beat a lower cost: an idle 1g at 5 costs more than a new one at 6
    gpus = [gpu(0, idle=(slot(5, 1),))]
    choice = choose_placement(gpus, [1], A100)
    assert choice.slot == slot(6, 1) and not choice.reuse and choice.destroy == ()
    # among equal costs, destroy the fewest idle instances
    gpus = [gpu(0, idle=(slot(4, 2),)), gpu(1)]
    choice = choose_placement(gpus, [3], A100)
    assert choice.slot == slot(4, 3)
    assert choice.gpu == 1 and choice.destroy == ()


def test_dynamic_placement_destroys_idle_instances_in_the_way():
    # the only 4g sits at 0, where two idle 2g instances are: they are destroyed
    g = gpu(0, idle=(slot(0, 2), slot(2, 2)))
    choice = choose_placement([g], [4], A100)
    assert choice.slot == slot(0, 4) and set(choice.destroy) == {slot(0, 2), slot(2, 2)}
    # a static layout never repartitions: no 4g instance, no placement
    assert choose_placement([g], [4], A100, dynamic=False) is None
    # ... and a job whose size is missing takes the next larger one it may run on
    got = choose_placement([g], [1, 2], A100, dynamic=False)
    assert got.slot == slot(0, 2) and got.reuse


# ---------------------------------------------------------------------------
# Departure: migration


def test_intra_gpu_migration_defragments_a_busy_gpu():
    # after a departure the GPU keeps a 1g at 3 and a 2g at 4 (3 slices: busy); the
    # 1g at 3 blocks the 3g at 0 although 4 compute and 5 memory slices are free
    g = gpu(0, [occ("small", 3, 1), occ("mid", 4, 2)])
    assert not is_lazy(g, A100)
    assert choose_placement([g], [3], A100) is None
    before = fragmentation_cost(g, A100)
    moves = plan_departure([g], 0, A100, can_move=movers("small", "mid"))
    assert [(m.job, m.src, m.dst) for m in moves] == [("small", 0, 0)]
    after = g.vacated("small", keep_instance=False).placed(Instance(moves[0].slot, "small"))
    assert fragmentation_cost(after, A100) == 0.0 < before
    # the 3g now fits
    assert choose_placement([after], [3], A100).slot == slot(0, 3)


def test_migration_moves_only_restartable_running_jobs():
    fixed = gpu(0, [occ("small", 3, 1), occ("mid", 4, 2)])
    moves = plan_departure([fixed], 0, A100, can_move=movers("mid"))
    assert all(m.job != "small" for m in moves)
    assert plan_departure([fixed], 0, A100) == []  # by default nothing moves
    g = gpu(0, [occ("small", 3, 1, end=10.0), occ("mid", 4, 2, end=50.0)])
    assert plan_departure([g], 0, A100, can_move=lambda o: o.busy_until > 100.0) == []


def test_inter_gpu_migration_balances_a_lazy_gpu():
    # GPU 1 became lazy (empty); GPU 0 is busy with 7 slices in four jobs
    busy = gpu(0, [occ("a", 0, 2), occ("b", 2, 2), occ("c", 4, 2), occ("d", 6, 1)])
    moves = plan_departure([busy, gpu(1)], 1, A100, can_move=movers("a", "b", "c", "d"))
    assert moves and all(m.src == 0 and m.dst == 1 for m in moves)
    # moves stop once GPU 1 would be at least as loaded as GPU 0 ...
    moved = sum(m.slot.size for m in moves)
    assert moved < 7 - moved
    # ... or GPU 1 is no longer lazy
    assert moved <= 3
    # moved jobs land where GPU 1's cost is lowest, on free slices
    slots = [m.slot for m in moves]
    assert len({(s.placement.start) for s in slots}) == len(slots)


# ---------------------------------------------------------------------------
# Static layouts and options


def test_parse_layout_cycles_full_partitions_and_names_the_fix():
    parts = parse_layout("4-3, 3-2-1", A100)
    assert [sorted(s.size for s in p) for p in parts] == [[3, 4], [1, 2, 3]]
    assert [sorted(s.size for s in p) for p in parse_layout("auto", A100)] == [[1, 2, 4]]
    with pytest.raises(ValueError, match="4-2-2.*not a full partition.*choose among"):
        parse_layout("4-2-2", A100)


def test_policy_options_are_checked():
    with pytest.raises(ValueError, match="threshold 1.5 must be in"):
        FragAwarePolicy(threshold=1.5)
    with pytest.raises(ValueError, match="size 'big' must be one of"):
        FragAwarePolicy(size="big")
    assert get_policy("frag-aware", migrate=False).migrate is False
    assert get_policy("ff+lb", threshold=0.6).threshold == 0.6


# ---------------------------------------------------------------------------
# In the simulator


def _workload(n: int = 60, seed: int = 3, gap: float = 6.0) -> list[SimJob]:
    rng = random.Random(seed)
    jobs, t = [], 0.0
    for i in range(n):
        t += rng.expovariate(1.0 / gap)
        size = rng.choice([1, 1, 2, 2, 3, 4])
        dur = rng.uniform(20.0, 120.0)
        demand = rng.choice([0.0, 5.7, 17.65])
        times = {s: dur for s in A100.planner_sizes if s >= size}
        jobs.append(SimJob(f"j{i}", t, times, pcie_demand=demand, restartable=True, size=size))
    return jobs


POLICIES = ["first-fit", "ff+lb", "ff+lb+dp", "ff+lb+dp+mig", "frag-aware"]


@pytest.mark.parametrize("name", POLICIES)
def test_policies_keep_the_simulator_invariants(name):
    jobs = _workload()
    policy = get_policy(name)
    res = simulate(jobs, policy, nodes=2, gpus_per_node=2, model=A100, check=True)
    assert res.jobs == len(jobs)
    assert all(s >= a for s, a in zip(res.start, res.arrival))
    assert all(f > s for f, s in zip(res.finish, res.start))
    if name in ("first-fit", "ff+lb"):
        # a static layout: 4-2-1 on every GPU, created once, never repartitioned
        assert (res.creates, res.destroys, res.migrations) == (12, 0, 0)
    if name in ("ff+lb+dp+mig", "frag-aware"):
        assert res.migrations == policy.migrations_intra + policy.migrations_inter > 0
    else:
        assert res.migrations == 0
    if name == "ff+lb+dp":
        assert policy.reused > 0 and res.destroys > 0


def test_dynamic_partitioning_waits_less_than_a_static_layout():
    jobs = _workload(n=80, gap=4.0)
    static = simulate(jobs, get_policy("ff+lb"), 1, 2, A100)
    dynamic = simulate(jobs, get_policy("ff+lb+dp"), 1, 2, A100)
    assert dynamic.summary()["wait_mean"] < static.summary()["wait_mean"]


def test_static_layout_names_the_missing_size():
    jobs = [SimJob("big", 0.0, {7: 10.0}, size=7)]
    with pytest.raises(ValueError, match="job 'big'.*static layout '4-2-1'.*layout="):
        simulate(jobs, get_policy("first-fit"), 1, 1, A100)
    res = simulate(jobs, get_policy("first-fit", layout="7"), 1, 1, A100, check=True)
    assert res.finish[0] == pytest.approx(10.0 + A100.create_time(7))


def test_migration_on_departure_in_the_simulator_pays_the_restart():
    # threshold 1.0: a GPU is lazy until full. big (4g), mid (2g) and small (1g) fill
    # GPU 0 as 4-2-1 at cost 0 each; "short" goes to GPU 1. When it leaves, GPU 1 is
    # lazy and GPU 0 busy: GPU 1 pulls mid (0 + 2 < 7 - 2, the lowest cost there);
    # then GPU 0 (5 of 7) is lazy too and gives nothing more. The move pays 7 s.
    jobs = [
        SimJob("big", 0.0, {4: 1000.0}, restartable=True, size=4),
        SimJob("mid", 0.0, {2: 1000.0}, restartable=True, size=2),
        SimJob("small", 0.0, {1: 1000.0}, restartable=True, size=1),
        SimJob("short", 0.0, {1: 5.0}, size=1),
    ]
    policy = get_policy("frag-aware", threshold=1.0)
    res = simulate(jobs, policy, 1, 2, A100, check=True, migration_s=7.0)
    assert (res.migrations, policy.migrations_inter, policy.migrations_intra) == (1, 1, 0)
    for i, jid in enumerate(res.ids):
        if jid == "short":
            continue
        # every job did its 1000 s of work; a moved one also waited the restart
        assert res.exec_s[i] == pytest.approx(1000.0)
        want = 1007.0 if jid == "mid" else 1000.0
        assert res.finish[i] - res.start[i] == pytest.approx(want)
    # without migration nothing moves and nobody pays
    res = simulate(jobs, get_policy("ff+lb+dp", threshold=1.0), 1, 2, A100, check=True)
    assert res.migrations == 0
    assert max(f - s for f, s in zip(res.finish, res.start)) == pytest.approx(1000.0)


# ---------------------------------------------------------------------------
# The baselines a site runs: static layouts and whole GPUs

GRADED = {1: 400.0, 2: 200.0, 3: 100.0, 4: 80.0, 7: 50.0}  # seconds alone per size


def _same(a, b) -> bool:
    drop = ("wall_s", "events_per_s", "policy")
    return {k: v for k, v in a.items() if k not in drop} == {
        k: v for k, v in b.items() if k not in drop
    }


def test_a_layout_may_be_a_number_a_name_with_g_or_its_sizes_in_any_order():
    seven = parse_layout("7", A100)
    assert parse_layout(7, A100) == seven == parse_layout("7g", A100)
    assert parse_layout("whole", A100) == seven
    assert parse_layout("3-2-2", A100) == parse_layout("2-2-3", A100)
    assert parse_layout("4g-3g", A100) == parse_layout("4-3", A100)
    with pytest.raises(ValueError, match="names 2 partitions.*left to right"):
        parse_layout("3-2-1-1", A100)


def test_mixed_layouts_take_a_slash_a_comma_or_a_plus_and_cycle_over_the_gpus():
    want = parse_layout("7", A100) + parse_layout("4-3", A100)
    assert parse_layout("7/4-3", A100) == want
    assert parse_layout("7,4-3", A100) == parse_layout("7+4-3", A100) == want
    # three GPUs: 7, 4-3, 7 -> four instances, made once, never repartitioned
    jobs = [SimJob(f"j{i}", 0.0, GRADED) for i in range(6)]
    res = simulate(jobs, get_policy("static", layout="7/4-3", match="fit"), 1, 3, A100)
    assert (res.creates, res.destroys, res.migrations) == (4, 0, 0)
    assert sorted(res.exec_s) == pytest.approx([50, 50, 50, 50, 80, 100])


def test_first_fit_and_static_take_layout_7_as_a_number():
    jobs = [SimJob("a", 0.0, GRADED)]
    for name in ("first-fit", "static"):
        res = simulate(jobs, get_policy(name, layout=7), 1, 1, A100, check=True)
        assert res.exec_s[0] == pytest.approx(50.0)


def test_static_is_first_fit_under_the_name_a_site_would_use():
    jobs = _workload()
    a = simulate(jobs, get_policy("static", layout="4-3"), 1, 2, A100, check=True)
    b = simulate(jobs, get_policy("first-fit", layout="4-3"), 1, 2, A100)
    assert _same(a.summary(), b.summary())


def test_match_exact_waits_for_its_size_and_match_fit_takes_any_idle_instance():
    # one GPU as 4-3; both jobs run on 1g upwards. Typed (exact): each asks for the
    # smallest size the layout has that it runs on (3g), so the second waits although
    # the 4g is idle. Untyped (fit): the second takes the 4g at once.
    jobs = [SimJob("a", 0.0, GRADED), SimJob("b", 0.0, GRADED)]
    exact = simulate(jobs, get_policy("static", layout="4-3"), 1, 1, A100, check=True)
    assert exact.exec_s == pytest.approx([100.0, 100.0])
    assert max(exact.start) >= min(exact.finish)
    fit = simulate(jobs, get_policy("static", layout="4-3", match="fit"), 1, 1, A100)
    assert sorted(fit.exec_s) == pytest.approx([80.0, 100.0])
    assert max(fit.start) < min(fit.finish)


def test_no_mig_runs_every_job_on_a_whole_gpu():
    jobs = [SimJob(f"j{i}", 0.0, GRADED, size=1 if i else None) for i in range(3)]
    res = simulate(jobs, get_policy("no-mig"), 1, 2, A100, check=True)
    assert res.exec_s == pytest.approx([50.0, 50.0, 50.0])
    assert (res.creates, res.destroys) == (2, 0)
    assert max(res.start) >= min(res.finish)  # two GPUs, three jobs: one waits
    a30 = get_model("A30-24GB")
    res = simulate([SimJob("a", 0.0, {1: 90.0, 4: 30.0})], get_policy("no-mig"), 1, 1, a30)
    assert res.exec_s == pytest.approx([30.0])


def test_no_mig_takes_neither_a_layout_nor_a_match():
    from slurm_mig.planner.registry import UnknownPolicy

    for opt in ({"layout": "4-3"}, {"match": "exact"}):
        with pytest.raises(UnknownPolicy, match="no-mig runs every job on a whole GPU"):
            get_policy("no-mig", **opt)


def test_a_mixed_layout_longer_than_the_cluster_waits_only_for_sizes_it_has():
    """``static:layout=7/4-3`` on one GPU has only the 7g: an exact-size job that asks
    for less waits for the 7g (the smallest larger size the GPU has), not for a 4g or
    3g that no GPU has (which would leave it pending for ever)."""
    jobs = [SimJob(f"j{i}", float(i), {3: 50.0, 4: 45.0, 7: 30.0}) for i in range(6)]
    result = simulate(jobs, get_policy("static", layout="7/4-3", match="exact"), 1, 1, A100)
    assert result.jobs == 6 and max(result.finish) < math.inf


def test_order_short_offers_shorter_jobs_first_and_arrival_order_is_the_default():
    # seven 1g instances, all busy; one frees at 100 s while "long" (first) and
    # "short" wait: arrival order gives it to "long", order=short to "short"
    jobs = [SimJob("fill0", 0.0, {1: 100.0})]
    jobs += [SimJob(f"fill{i}", 0.0, {1: 1000.0}) for i in range(1, 7)]
    jobs += [SimJob("long", 1.0, {1: 500.0}), SimJob("short", 2.0, {1: 5.0})]
    ends = {}
    for order in ("arrival", "short"):
        policy = get_policy("static", layout="1-1-1-1-1-1-1", order=order)
        result = simulate(jobs, policy, 1, 1, A100)
        ends[order] = dict(zip(result.ids, result.finish))
    assert ends["arrival"]["long"] < ends["arrival"]["short"]
    assert ends["short"]["short"] < ends["short"]["long"]
    default = simulate(jobs, get_policy("static", layout="1-1-1-1-1-1-1"), 1, 1, A100)
    assert dict(zip(default.ids, default.finish)) == ends["arrival"]
    with pytest.raises(ValueError, match="order"):
        get_policy("static", order="random")
