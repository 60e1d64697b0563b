"""The built-in policies (baseline, far), the registry P and O plug into, and the
helpers policies share."""

from __future__ import annotations

import pytest

from slurm_mig.geometry import Placement, Slot, get_model
from slurm_mig.sim import Destroy, SimJob, Start, simulate
from slurm_mig.sim.api import GpuView, InstanceView, Policy
from slurm_mig.sim.jobs import pcie_paper
from slurm_mig.sim.policies import (
    POLICIES,
    Baseline,
    FarBatches,
    UnknownPolicy,
    first_free_slot,
    get_policy,
    place_exact,
    policy_names,
    register_policy,
    start_commands,
)

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


def test_registry_knows_the_builtin_and_the_planned_policies():
    names = policy_names()
    for n in ("baseline", "far", "pcie-aware", "frag-aware", "ff+lb", "migm-a", "migm-b"):
        assert n in names
    assert POLICIES["pcie-aware"] == "slurm_mig.planner.gate"
    assert POLICIES["frag-aware"] == "slurm_mig.planner.online"
    assert POLICIES["migm-b"] == "slurm_mig.planner.partition_manager"
    assert isinstance(get_policy("baseline"), Policy)
    assert get_policy("FAR").name == "far"


def test_unknown_names_and_options_list_what_exists():
    with pytest.raises(UnknownPolicy, match="known policies: .*baseline.*far"):
        get_policy("greedy")
    with pytest.raises(UnknownPolicy, match="policy 'far'.*unexpected keyword"):
        get_policy("far", speed=3)
    with pytest.raises(UnknownPolicy, match="max_batch 0 must be at least 1"):
        get_policy("far", max_batch=0)


def test_a_registered_module_that_is_not_there_yet_is_reported(monkeypatch):
    monkeypatch.setitem(POLICIES, "later", "slurm_mig.planner.not_written_yet")
    with pytest.raises(UnknownPolicy, match="not available.*not_written_yet.*baseline"):
        get_policy("later")


def test_a_module_policy_is_built_by_its_make_policy(monkeypatch, tmp_path):
    pkg = tmp_path / "extra_policies.py"
    pkg.write_text(
        "from slurm_mig.sim.policies import Baseline\n"
        "def make_policy(name, **options):\n"
        "    p = Baseline(**options)\n"
        "    p.name = name\n"
        "    return p\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(POLICIES, "mine", "extra_policies")
    p = get_policy("mine", size=7)
    assert p.name == "mine" and p.size == 7


def test_register_policy_adds_a_factory():
    register_policy("baseline-7", lambda **kw: Baseline(size=7, **kw))
    assert get_policy("baseline-7").size == 7
    assert "baseline-7" in policy_names()


# ---------------------------------------------------------------------------
# helpers


def _gpu(*insts, busy=0, held=0):
    return GpuView(0, 0, tuple(insts), 0.0, 0, busy, held)


def test_start_commands_destroy_idle_instances_in_the_way_and_reuse_an_identical_one():
    idle3 = InstanceView(G3[0], None, 0.0, None, False)
    busy1 = InstanceView(G1[4], "x", 0.0, 9.0, False)
    gpu = _gpu(idle3, busy1, busy=0b10000, held=0b11111)
    assert start_commands(gpu, "a", G1[0], A100) == [Destroy(0, G3[0]), Start("a", 0, G1[0])]
    assert start_commands(gpu, "a", G3[0], A100) == [Start("a", 0, G3[0])]
    with pytest.raises(ValueError, match="busy"):
        start_commands(gpu, "a", G3[1], A100)


def test_place_exact_prefers_an_idle_instance_then_free_slices_then_destroys():
    idle1 = InstanceView(G1[6], None, 0.0, None, False)
    busy2 = InstanceView(G2[0], "x", 0.0, 9.0, False)
    gpu = _gpu(busy2, idle1, busy=0b11, held=0b1000011)
    assert place_exact(gpu, 1, A100) == G1[6]
    assert place_exact(gpu, 2, A100) == G2[1]
    assert place_exact(gpu, 3, A100) == G3[1]  # destroys the idle 1g at slice 6
    full = _gpu(busy=0xFF, held=0xFF)
    assert place_exact(full, 1, A100) is None
    assert first_free_slot(A100, 4, 0) == Slot(Placement(0, 4), 4)
    assert first_free_slot(A100, 4, 0b1) is None


# ---------------------------------------------------------------------------
# baseline


def test_baseline_takes_the_first_gpu_with_room_in_id_order():
    jobs = [job("a", size=4), job("b", 0.0, size=4), job("c", 0.0, size=3)]
    r = simulate(jobs, Baseline(), 1, 3, A100, check=True)
    # a: 4g on gpu 0; b: no room for 4g there (3g only) -> gpu 1; c: 3g beside a on gpu 0
    gpus = {}

    class Spy(Baseline):
        def decide(self, view):
            for c in super().decide(view):
                if isinstance(c, Start):
                    gpus[c.job] = (c.gpu, c.slot)
                yield c

    simulate(jobs, Spy(), 1, 3, A100)
    assert gpus == {
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
# far


def test_far_plans_a_batch_and_follows_the_plan():
    # all arrive at once: one batch; FAR packs them with its own sizes
    jobs = [SimJob(f"t{i}", 0.0, {1: 40.0, 2: 21.0, 3: 15.0, 4: 12.0, 7: 8.0}) for i in range(7)]
    p = FarBatches()
    r = simulate(jobs, p, 1, 1, A100, check=True)
    assert p.batches == 1
    assert r.makespan < 7 * 8.0  # better than one 7g job after another
    assert r.jobs == 7


def test_far_waits_for_a_batch_to_start_before_planning_the_next():
    jobs = [job("a", 0.0, 50.0, size=7), job("b", 1.0, 5.0), job("c", 2.0, 5.0)]
    p = FarBatches(moldable=False)
    r = where(simulate(jobs, p, 1, 1, A100, check=True))
    # {a}; {b}, which waits for a's whole GPU; {c} only once b has started
    assert p.batches == 3
    assert r["b"][0] >= r["a"][1] and r["c"][0] >= r["b"][0]

    calls = []

    class Spy(FarBatches):
        def _new_batch(self, view):
            calls.append((view.now, sorted(view.pending)))
            return super()._new_batch(view)

    simulate(jobs, Spy(moldable=False), 1, 1, A100)
    assert [c[1] for c in calls] == [["a"], ["b"], ["c"]]
    assert calls[2][0] == pytest.approx(r["b"][0])


def test_far_not_moldable_keeps_the_requested_sizes():
    jobs = [job(f"j{i}", 0.0, 10.0, size=1) for i in range(3)]
    seen = set()

    class Spy(FarBatches):
        def decide(self, view):
            for c in super().decide(view):
                if isinstance(c, Start):
                    seen.add(c.slot.size)
                yield c

    simulate(jobs, Spy(moldable=False), 1, 1, A100, check=True)
    assert seen == {1}


def test_far_max_batch_caps_the_batch():
    jobs = [job(f"j{i}", 0.0, 10.0) for i in range(10)]
    p = FarBatches(max_batch=4)
    simulate(jobs, p, 1, 2, A100, check=True)
    assert p.batches == 3


def test_policies_finish_the_pcie_paper_workload_under_check():
    jobs = pcie_paper(150, 0.6, 4, A100, seed=2)
    for name in ("baseline", "far"):
        r = simulate(jobs, name, 1, 4, A100, check=True)
        assert r.jobs == 150 and r.energy_j > r.idle_energy_j
