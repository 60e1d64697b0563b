"""The registry every policy is looked up in, the helpers online policies share, the
``baseline`` policy, and batch planners run in the simulator through the driver."""

from __future__ import annotations

import re
from dataclasses import replace
from functools import partial

import pytest

from slurm_mig.geometry import Placement, Slot, get_model, mask_tables
from slurm_mig.job import Job
from slurm_mig.planner.baseline import Baseline, place_exact, start_ops
from slurm_mig.planner.batch import Batch, UnknownPlanner, get_planner
from slurm_mig.planner.decisions import Destroy, Place
from slurm_mig.planner.registry import (
    FACTORIES,
    PolicyInfo,
    UnknownPolicy,
    describe,
    policy_info,
    policy_names,
    register_policy,
    unregister_policy,
)
from slurm_mig.planner.registry import get_policy as registry_policy
from slurm_mig.planner.snapshot import Gpu, Instance
from slurm_mig.sim import SimJob, get_policy, simulate
from slurm_mig.sim.jobs import pcie_paper
from slurm_mig.sim.policies import SIM_SETTINGS

A100 = get_model("A100-40GB")
G1 = [Slot(Placement(i, 1), 1) for i in range(7)]
G3 = [Slot(Placement(0, 4), 3), Slot(Placement(4, 4), 3)]
G2 = [Slot(Placement(i, 2), 2) for i in (0, 2, 4)]


def job(jid, arrival=0.0, t=10.0, size=1, **kw):
    return SimJob(jid, arrival, {s: t for s in A100.planner_sizes if s >= size}, size=size, **kw)


def where(result):
    """Per job: (start, finish)."""
    return {i: (s, f) for i, s, f in zip(result.ids, result.start, result.finish)}


# ---------------------------------------------------------------------------
# registry


def test_the_registry_holds_every_policy_with_its_kind():
    batch = policy_names("batch")
    online = policy_names("online")
    for n in ("auto", "far", "far-pcie", "exact", "miso-opt", "fixpart-best", "fixpart-SIZES"):
        assert n in batch
    for n in ("baseline", "pcie-aware", "first-fit", "ff+lb", "ff+lb+dp", "frag-aware"):
        assert n in online
    assert {"migm-a", "migm-b"} <= set(online)
    assert policy_info("fixpart-4-2-1").name == "fixpart-SIZES"
    assert policy_info("FAR").kind == "batch" and policy_info("Frag-Aware").kind == "online"
    for name in batch + online:
        if name == "fixpart-SIZES":
            name = "fixpart-7"
        p = registry_policy(name)
        assert p.kind == policy_info(name).kind
        assert name.lower() in p.name.lower() or p.name.startswith("fixpart")
    text = describe()
    assert all(f"  {n} " in text for n in batch + online)


def test_unknown_names_and_options_list_what_exists():
    with pytest.raises(UnknownPolicy, match="choose one of .*far.*baseline"):
        get_policy("greedy")
    with pytest.raises(UnknownPolicy, match="policy 'far'.*unexpected keyword"):
        get_policy("far", speed=3)
    with pytest.raises(UnknownPolicy, match="max_batch 0 must be at least 1"):
        get_policy("far", max_batch=0)
    with pytest.raises(UnknownPolicy, match="pcie-aware.*colour"):
        registry_policy("pcie-aware", colour="blue")


def test_driver_options_are_for_batch_planners_only():
    with pytest.raises(UnknownPolicy, match="'adaptive': window: an option of the batch driver"):
        get_policy("adaptive", window=5)
    with pytest.raises(UnknownPolicy, match="reorder -1 must be a whole number"):
        get_policy("far", reorder=-1)
    far = get_policy("far", window=5, reorder=2, max_batch=3)
    assert (far.settings.window, far.settings.reorder, far.settings.size) == (5.0, 2, 3)
    assert far.settings.eager and far.settings.moldable  # the simulator's own defaults
    base = replace(SIM_SETTINGS, reorder=1)  # simulate --reorder 1
    assert get_policy("far", base).settings.reorder == 1
    assert get_policy("far", base, reorder=4).settings.reorder == 4  # its own option wins
    jobs = pcie_paper(6, 0.5, 1, A100, seed=2)
    result = simulate(jobs, get_policy("adaptive", base), 1, 1, A100)
    assert result.jobs == 6 and all(f > 0 for f in result.finish)


def test_get_planner_refuses_every_online_policy_and_gives_every_batch_planner():
    for name in policy_names("online"):
        with pytest.raises(UnknownPlanner, match=re.escape(f"'{name}' is an online policy")):
            get_planner(name)
    for name in policy_names("batch"):
        plan = get_planner("fixpart-7" if name == "fixpart-SIZES" else name)
        job = Job("a", 0.0, {1: 30.0, 2: 16.0, 3: 11.0, 4: 9.0, 7: 5.0})
        assert plan(Batch((job,), A100)).makespan >= 5.0


def test_register_policy_adds_a_name_once_and_never_replaces_one():
    info = PolicyInfo("baseline-7", "online", "every job on a whole GPU", "")
    register_policy(info, lambda **kw: _named(Baseline(size=7, **kw), "baseline-7"))
    try:
        assert get_policy("baseline-7").size == 7
        assert "baseline-7" in policy_names("online")
        for taken in ("baseline-7", "adaptive", "far", "fixpart-4-3"):
            again = PolicyInfo(taken, "online", "a second one", "")
            with pytest.raises(ValueError, match="is registered already"):
                register_policy(again, lambda **kw: Baseline(**kw))
        assert get_policy("baseline-7").size == 7  # the first one stands
        with pytest.raises(ValueError, match="lower case"):
            register_policy(PolicyInfo("Baseline-8", "online", "", ""), Baseline)
    finally:
        unregister_policy("baseline-7")
    assert "baseline-7" not in policy_names("online")
    with pytest.raises(KeyError):
        unregister_policy("adaptive")  # built-ins stay


def test_each_policy_takes_exactly_the_objectives_its_entry_declares():
    """The registry's declarations (`PolicyInfo.objectives`, ``list_scheduled``) are
    what the factories do: a declared objective builds, any other one the factory
    refuses itself; FAR's family alone is list-scheduled."""
    candidates = {"makespan", "jct", "balanced", "start", "online"}
    for name in policy_names():
        factory = FACTORIES[name]
        if name == "fixpart-SIZES":
            factory = partial(factory, "4-3")
        name = "fixpart-4-3" if name == "fixpart-SIZES" else name
        info = policy_info(name)
        for objective in sorted(candidates):
            declared = objective in info.objectives
            try:
                built = factory(objective=objective)
            except (TypeError, ValueError):
                built = None
            assert (built is not None) == declared, (name, objective)
        with pytest.raises(UnknownPolicy, match=r"objective 'fastest'|takes no objective"):
            registry_policy(name, objective="fastest")
    listed = {n for n in policy_names() if n != "fixpart-SIZES" and policy_info(n).list_scheduled}
    assert listed == {"far", "auto", "exact"}


def _named(policy, name):
    policy.name = name
    return policy


# ---------------------------------------------------------------------------
# helpers


def _gpu(*insts):
    return Gpu(0, tuple(insts))


def test_start_ops_destroy_idle_instances_in_the_way_and_reuse_an_identical_one():
    idle3 = Instance(G3[0], None, 0.0)
    busy1 = Instance(G1[4], "x", 0.0, 9.0)
    gpu = _gpu(idle3, busy1)
    assert (gpu.busy_mask, gpu.held_mask) == (0b10000, 0b11111)
    assert start_ops(gpu, "a", G1[0], A100, 5.0) == [Destroy(0, G3[0]), Place("a", 0, G1[0], 5.0)]
    assert start_ops(gpu, "a", G3[0], A100, 5.0) == [Place("a", 0, G3[0], 5.0)]
    with pytest.raises(ValueError, match="busy"):
        start_ops(gpu, "a", G3[1], A100, 5.0)


def test_place_exact_prefers_an_idle_instance_then_free_slices_then_destroys():
    gpu = _gpu(Instance(G2[0], "x", 0.0, 9.0), Instance(G1[6], None, 0.0))
    assert place_exact(gpu, 1, A100) == G1[6]
    assert place_exact(gpu, 2, A100) == G2[1]
    assert place_exact(gpu, 3, A100) == G3[1]  # destroys the idle 1g at slice 6
    full = _gpu(Instance(Slot(Placement(0, 8), 7), "x", 0.0, 9.0))
    assert place_exact(full, 1, A100) is None
    tables = mask_tables(A100)
    assert tables.first_free(4, 0) == Slot(Placement(0, 4), 4)
    assert tables.first_free(4, 0b1) is None


# ---------------------------------------------------------------------------
# baseline


class Spy:
    """Wraps an online policy and records where it placed each job."""

    kind = "online"

    def __init__(self, inner):
        self.inner, self.name, self.seen = inner, inner.name, {}

    def decide(self, snap):
        got = self.inner.decide(snap)
        for op in got.places:
            self.seen[op.job] = (op.gpu, op.slot)
        return got


def test_baseline_takes_the_first_gpu_with_room_in_id_order():
    jobs = [job("a", size=4), job("b", 0.0, size=4), job("c", 0.0, size=3)]
    spy = Spy(Baseline())
    r = simulate(jobs, spy, 1, 3, A100, check=True)
    # a: 4g on gpu 0; b: no room for 4g there (3g only) -> gpu 1; c: 3g beside a on gpu 0
    assert spy.seen == {
        "a": (0, Slot(Placement(0, 4), 4)),
        "b": (1, Slot(Placement(0, 4), 4)),
        "c": (0, G3[1]),
    }
    assert r.creates == 3


def test_baseline_backfills_smaller_jobs_past_a_waiting_big_one():
    jobs = [job("a", 0.0, 10.0, size=4), job("big", 1.0, 10.0, size=7), job("s", 2.0, 5.0)]
    r = where(simulate(jobs, Baseline(), 1, 1, A100, check=True))
    assert r["s"][0] < r["a"][1]  # runs beside "a" while "big" waits for the whole GPU
    assert r["big"][0] >= r["s"][1]


def test_baseline_size_option_gives_every_job_that_size():
    jobs = [job("a", size=1), job("b", size=2)]
    r = where(simulate(jobs, Baseline(size=7), 1, 1, A100, check=True))
    assert r["b"][0] >= r["a"][1]  # one 7g at a time
    with pytest.raises(UnknownPolicy, match="size 5"):
        simulate(jobs, Baseline(size=5), 1, 1, A100)


def test_baseline_gives_a_job_without_a_size_the_smallest_it_can_run_on():
    free = SimJob("f", 0.0, {2: 10.0, 7: 2.0})
    r = simulate([free], Baseline(), 1, 1, A100, check=True)
    assert r.finish == pytest.approx([A100.create_time(2) + 10.0])


# ---------------------------------------------------------------------------
# batch planners in the simulator (planner.driver, as the daemon runs them)


def test_far_plans_a_batch_and_follows_the_plan():
    # all arrive at once: one batch; FAR packs them with its own sizes
    jobs = [SimJob(f"t{i}", 0.0, {1: 40.0, 2: 21.0, 3: 15.0, 4: 12.0, 7: 8.0}) for i in range(7)]
    p = get_policy("far")
    r = simulate(jobs, p, 1, 1, A100, check=True)
    assert p.batches == 1 and len(p.plans) == 1
    assert r.makespan < 7 * 8.0  # better than one 7g job after another
    assert r.jobs == 7
    # the simulator ran the plan: every job ended when the plan said
    planned = {t.id: t.end for t in p.plans[0].tasks}
    assert {i: f for i, f in zip(r.ids, r.finish)} == pytest.approx(planned)


def test_far_plans_the_next_batch_once_the_last_has_started():
    jobs = [job("a", 0.0, 50.0, size=7), job("b", 1.0, 5.0), job("c", 2.0, 5.0)]
    p = get_policy("far", moldable=False)
    r = where(simulate(jobs, p, 1, 1, A100, check=True))
    # {a}; {b}, which waits for a's whole GPU; {c} once b has started
    assert p.batches == 3
    assert r["b"][0] >= r["a"][1] and r["c"][0] >= r["b"][0]
    assert [sorted(t.id for t in plan.tasks if not t.running) for plan in p.plans] == [
        ["a"],
        ["b"],
        ["c"],
    ]


def test_a_finite_window_gathers_a_batch():
    jobs = [job("a", 0.0, 5.0), job("b", 1.0, 5.0), job("c", 2.0, 5.0), job("d", 30.0, 5.0)]
    p = get_policy("far", window=10.0, eager=False)
    r = where(simulate(jobs, p, 1, 1, A100, check=True))
    # a, b, c wait for the oldest to have waited 10 s and go together; d later alone
    assert p.batches == 2
    assert min(r[j][0] for j in "abc") >= 10.0 and r["d"][0] >= 40.0


def test_far_not_moldable_keeps_the_requested_sizes():
    jobs = [job(f"j{i}", 0.0, 10.0, size=1) for i in range(3)]
    p = get_policy("far", moldable=False)
    simulate(jobs, p, 1, 1, A100, check=True)
    assert {t.slot.size for plan in p.plans for t in plan.tasks} == {1}


def test_far_max_batch_caps_the_batch():
    jobs = [job(f"j{i}", 0.0, 10.0) for i in range(10)]
    p = get_policy("far", max_batch=4)
    simulate(jobs, p, 1, 2, A100, check=True)
    assert p.batches == 3


def test_policies_finish_the_pcie_paper_workload_under_check():
    jobs = pcie_paper(150, 0.6, 4, A100, seed=2)
    for name in ("baseline", "far"):
        r = simulate(jobs, name, 1, 4, A100, check=True)
        assert r.jobs == 150 and r.energy_j > r.idle_energy_j
