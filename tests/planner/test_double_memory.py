"""The double-memory 1g (``1g.20gb`` of the A100-80GB/H100, ``1g.35gb`` of the H200): a
job whose memory needs two memory slices runs on one compute slice where that costs
fewer slice-seconds than a 2g, and a job that fits a plain 1g never takes one."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from slurm_mig.daemon.cycle.slots import legal_slot
from slurm_mig.geometry import (
    GIB,
    GeometryError,
    Placement,
    Slot,
    blocked_compute,
    get_model,
    mask_tables,
    memory_slots,
    planner_slots,
)
from slurm_mig.plan import validate_plan
from slurm_mig.planner.adaptive import Adaptive
from slurm_mig.planner.decisions import Place
from slurm_mig.planner.snapshot import (
    ClusterSnapshot,
    Gpu,
    Instance,
    Job,
    snapshot_from_json,
    snapshot_to_json,
)
from slurm_mig.runtimes import estimate_times

H100 = get_model("H100-80GB")
# 15 GiB: more than 1g.10gb (9.75 GiB), less than 1g.20gb (19.62 GiB)
NEED = 15 * GIB
# barely faster on 2 slices: 1g on its own costs fewer slice-seconds than a 2g
FLAT = {1: 100.0, 2: 90.0, 3: 85.0, 4: 80.0, 7: 75.0}


def job(jid: str, memory: int = NEED, times=None, arrival: float = 0.0) -> Job:
    return Job(jid, arrival, MappingProxyType(dict(times or FLAT)), memory=memory)


def busy(jid: str, start: int, size: int, end: float) -> Instance:
    return Instance(Slot(Placement(start, size), size), jid, busy_until=end)


def decide(jobs, gpus, model=H100) -> dict[str, Place]:
    snap = ClusterSnapshot(
        now=0.0,
        model=model,
        gpus=tuple(gpus),
        pending=MappingProxyType({j.id: j for j in jobs}),
    )
    return {op.job: op for op in Adaptive().decide(snap).ops if isinstance(op, Place)}


def test_the_geometry_knows_the_double_memory_slots_apart_from_the_lattice():
    double = H100.double_memory
    assert double is not None and double.name == "1g.20gb"
    slots = memory_slots(H100)
    assert [(s.placement.start, s.placement.size, s.size) for s in slots] == [
        (0, 2, 1),
        (2, 2, 1),
        (4, 2, 1),
        (6, 2, 1),
    ]
    assert not set(slots) & set(planner_slots(H100))  # the lattice planners never see them
    assert [H100.profile_for_slot(s).name for s in slots] == ["1g.20gb"] * 4
    assert H100.profile_for_slot(Slot(Placement(4, 2), 2)).name == "2g.20gb"
    # at 6:2 the second memory slice has no compute slice: it keeps one from others
    assert [blocked_compute(H100, s) for s in slots] == [2, 2, 2, 1]
    tables = mask_tables(H100)
    assert tables.memory_of(slots[3]) == double.memory_bytes
    assert H100.most_memory(1) == double.memory_bytes
    assert get_model("A30").double_memory is None and memory_slots(get_model("A30")) == ()
    with pytest.raises(GeometryError, match="no instance of 1 compute slices on 4"):
        H100.profile_for_slot(Slot(Placement(0, 4), 1))


def test_a_job_needing_two_memory_slices_takes_the_double_memory_1g_under_load():
    # slices 0-5 busy a long time and a queue behind it: the newcomer starts now on
    # 1g.20gb at 6:2 (100 slice-seconds) rather than waiting for a 2g (180)
    gpu = Gpu(0, (busy("a", 0, 2, 1e5), busy("b", 2, 2, 1e5), busy("c", 4, 2, 1e5)))
    got = decide([job("m"), job("q1"), job("q2")], [gpu])
    assert got["m"].slot == Slot(Placement(6, 2), 1)
    assert H100.profile_for_slot(got["m"].slot).name == "1g.20gb"


def test_on_an_idle_gpu_with_a_queue_the_double_memory_1g_beats_a_2g_per_slice():
    # seven such jobs on one idle GPU: three 2g and one 1g.20gb at 6:2 (the 2g at 4:2
    # and a 1g.20gb at 4:2 hold the same memory; only 6:2 is a slice the 2g cannot use)
    # (the list rule: a batch on idle GPUs goes to FAR, whose tree is the lattice's)
    jobs = [job(f"j{i}") for i in range(7)]
    snap = ClusterSnapshot(
        now=0.0, model=H100, gpus=(Gpu(0),), pending=MappingProxyType({j.id: j for j in jobs})
    )
    ops = Adaptive(batches=False).decide(snap).ops
    got = {op.job: op for op in ops if isinstance(op, Place)}
    doubles = [p.slot for p in got.values() if p.slot.size == 1]
    assert Slot(Placement(6, 2), 1) in doubles
    assert all(p.slot.placement.size == 2 for p in got.values())


def test_a_job_that_scales_takes_the_2g_and_one_that_fits_a_plain_1g_never_a_double():
    gpu = Gpu(0, (busy("a", 0, 2, 1e5), busy("b", 2, 2, 1e5)))
    scales = {1: 100.0, 2: 40.0, 3: 30.0, 4: 25.0, 7: 20.0}
    got = decide([job("fast", times=scales)], [gpu])
    assert got["fast"].slot.size >= 2  # 80 slice-seconds on 2g beat 100 on a 1g
    only_1g = {1: 100.0}
    small = decide(
        [job("s", memory=4 * GIB, times=only_1g), job("q")], [Gpu(0, (busy("a", 0, 4, 1e5),))]
    )
    assert small["s"].slot.placement.size == 1  # a plain 1g, not a double


def test_models_without_a_double_memory_1g_plan_as_before():
    a30 = get_model("A30")
    mem = 10 * GIB  # more than 1g.6gb: 2g only
    got = decide([job("m", memory=mem, times={1: 100.0, 2: 90.0, 4: 80.0})], [Gpu(0)], a30)
    assert got["m"].slot.size in (2, 4)


def test_runtime_estimates_keep_size_1_for_a_job_the_double_memory_1g_holds():
    got = estimate_times({1: [100.0]}, H100, serial_fraction=0.5, fallback=None, min_memory=NEED)
    assert got[1] < float("inf")
    too_big = estimate_times(
        {2: [100.0]}, H100, serial_fraction=0.5, fallback=100.0, min_memory=30 * GIB
    )
    assert too_big[1] == float("inf") and too_big[2] == float("inf")


def test_a_double_memory_instance_is_a_planner_instance_in_snapshots_and_cycles():
    slot = legal_slot("H100-80GB", "1g.20gb", Placement(6, 2))
    assert slot == Slot(Placement(6, 2), 1)
    assert legal_slot("H100-80GB", "1g.10gb+me", Placement(6, 1)) is None
    snap = ClusterSnapshot(
        now=0.0,
        model=H100,
        gpus=(Gpu(0, (Instance(Slot(Placement(6, 2), 1), None),)),),
        pending=MappingProxyType({}),
    )
    data = snapshot_to_json(snap)
    assert data["gpus"][0]["instances"][0]["profile"] == "1g.20gb"
    (inst,) = snapshot_from_json(data).gpus[0].instances
    assert inst.slot == Slot(Placement(6, 2), 1)


def _plan(profile: str, start: int, size: int, memory: int) -> tuple[dict, list[Job]]:
    plan = {
        "gpu_model": "H100-80GB",
        "gpus": 1,
        "tasks": [
            {
                "id": "t",
                "gpu": 0,
                "profile": profile,
                "placement": {"start": start, "size": size},
                "slices": [start],
                "start": 0.16,
                "end": 100.16,
            }
        ],
        "reconfigurations": [
            {
                "gpu": 0,
                "op": "create",
                "profile": profile,
                "placement": {"start": start, "size": size},
                "start": 0.0,
                "end": 0.16,
            }
        ],
    }
    return plan, [Job("t", 0.0, {1: 100.0}, memory)]


def test_the_plan_validator_accepts_a_double_memory_1g_and_refuses_too_little_memory():
    plan, tasks = _plan("1g.20gb", 6, 2, NEED)
    assert validate_plan(plan, tasks) == []
    plan, tasks = _plan("1g.10gb", 6, 1, NEED)
    errors = validate_plan(plan, tasks)
    assert any("memory" in e and "1g.10gb" in e for e in errors), errors
