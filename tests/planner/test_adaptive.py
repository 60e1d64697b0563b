"""The ``adaptive`` online policy: sizes by load, earliest completion on the MIG
timeline, backfilling before reservations, Slurm's priority first."""

from __future__ import annotations

import math
from dataclasses import replace
from types import MappingProxyType

import pytest

from slurm_mig.geometry import Placement, Slot, get_model
from slurm_mig.planner.adaptive import Adaptive
from slurm_mig.planner.decisions import Place
from slurm_mig.planner.registry import UnknownPolicy, get_policy
from slurm_mig.planner.snapshot import ClusterSnapshot, Gpu, Instance, Job, efficient_time, sizes_of
from slurm_mig.sim import simulate
from slurm_mig.sim.policies import get_policy as sim_policy

A100 = get_model("A100-40GB")
# resnet50 as a user met it: 3,100 s on 1g, 850 s on 4g
RESNET = {1: 3100.0, 2: 1700.0, 3: 1100.0, 4: 850.0, 7: 700.0}


def job(jid: str, times=None, arrival: float = 0.0, **kw) -> Job:
    return Job(jid, arrival, MappingProxyType(dict(times or RESNET)), **kw)


def busy(jid: str, start: int, size: int, end: float) -> Instance:
    return Instance(Slot(Placement(start, size), size), jid, busy_until=end)


def snapshot(jobs, gpus, now: float = 0.0) -> ClusterSnapshot:
    return ClusterSnapshot(
        now=now,
        model=A100,
        gpus=tuple(gpus),
        pending=MappingProxyType({j.id: j for j in jobs}),
    )


def places(decisions) -> dict[str, Place]:
    return {op.job: op for op in decisions.ops if isinstance(op, Place)}


def test_alone_on_an_idle_gpu_a_job_takes_the_size_that_ends_it_first():
    got = places(Adaptive().decide(snapshot([job("r")], [Gpu(0)])))
    assert got["r"].slot.size == 7  # 700 s beats 850 s on 4g and 3,100 s on 1g


def test_with_a_queue_jobs_take_their_most_efficient_size():
    # barely faster on larger slices: a queue of 40 on 14 slices gets 1g slices each,
    # not whole GPUs (idle GPUs with a queue are loaded, not idle)
    jobs = [job(f"j{i}", {1: 1000.0, 2: 900.0, 3: 850.0, 4: 800.0, 7: 700.0}) for i in range(40)]
    got = places(Adaptive().decide(snapshot(jobs, [Gpu(k) for k in range(2)])))
    assert got and all(p.slot.size == 1 for p in got.values())
    assert len(got) == 14


def test_light_load_uses_idle_slices_rather_than_the_smallest_size():
    # a GPU half busy for a long time: the newcomer takes the free 3g (1,100 s),
    # not a 1g (3,100 s), though 1g would be its most efficient size
    gpu = Gpu(0, (busy("long", 0, 4, 1e6),))
    got = places(Adaptive().decide(snapshot([job("r")], [gpu])))
    assert got["r"].slot.size == 3


def test_a_job_waits_for_a_larger_slice_when_that_ends_it_sooner():
    # the 4g frees in 10 s: 10 + 850 s beats 3,100 s on the only free slot, a 1g
    gpu = Gpu(0, (busy("a", 0, 4, 10.0), busy("b", 4, 2, 1e6)))
    jobs = [job("r")]
    assert places(Adaptive().decide(snapshot(jobs, [gpu]))) == {}  # it waits for the 4g


def test_backfill_uses_a_hole_before_a_reservation_but_never_delays_it():
    # the whole GPU frees in 100 s except 1g at slice 6, which is free now; the first
    # job (7g only) reserves the GPU from 100 s; a short 1g job fits before that, a
    # long one does not
    gpu = Gpu(0, (busy("a", 0, 4, 100.0), busy("b", 4, 2, 100.0)))
    whole = job("whole", {7: 500.0}, arrival=0.0, priority=10)
    short = job("short", {1: 50.0}, arrival=1.0)
    long_ = job("long", {1: 5000.0}, arrival=2.0)
    got = places(Adaptive().decide(snapshot([whole, short, long_], [gpu], now=0.0)))
    assert set(got) == {"short"}


def test_slurm_priority_comes_before_shortest_first():
    jobs = [
        job("short", {1: 10.0}, arrival=0.0, priority=1),
        job("long", {1: 1000.0}, arrival=0.0, priority=5),
    ]
    # one 1g slot free: the higher priority takes it although it is 100 times longer
    gpu = Gpu(0, (busy("x", 0, 4, 1e6), busy("y", 4, 2, 1e6)))
    got = places(Adaptive().decide(snapshot(jobs, [gpu])))
    assert set(got) == {"long"}


def test_within_a_priority_the_shorter_job_goes_first():
    jobs = [job("long", {1: 1000.0}, arrival=0.0), job("short", {1: 10.0}, arrival=5.0)]
    gpu = Gpu(0, (busy("x", 0, 4, 1e6), busy("y", 4, 2, 1e6)))
    got = places(Adaptive().decide(snapshot(jobs, [gpu], now=5.0)))
    assert set(got) == {"short"}
    # in arrival order (aging off: -1) the first comes first
    got = places(Adaptive(aging=-1).decide(snapshot(jobs, [gpu], now=5.0)))
    assert set(got) == {"long"}


def test_a_requested_size_is_a_floor_and_larger_sizes_need_a_gain():
    # Alibaba's jobs: the same time on every size from the requested one up
    flat = job("flat", dict.fromkeys((3, 4, 7), 600.0), size=3)
    assert sizes_of(flat, A100) == (3, 4, 7)
    assert efficient_time(flat, A100) == 600.0
    got = places(Adaptive().decide(snapshot([flat], [Gpu(0)])))
    assert got["flat"].slot.size == 3


def test_a_job_that_runs_nowhere_is_left_waiting():
    nowhere = job("x", {1: math.inf})
    assert places(Adaptive().decide(snapshot([nowhere], [Gpu(0)]))) == {}


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"objective": "fast"}, "objective"),
        ({"weight": "heavy"}, "weight"),
        ({"weight": -1}, "weight"),
        ({"weight": 1e9}, "weight"),
        ({"future": float("nan")}, "future"),
        ({"lookahead": 0}, "lookahead"),
        ({"lookahead": 2.5}, "lookahead"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_bad_options_are_one_line_naming_the_field(options, field):
    with pytest.raises(UnknownPolicy) as exc:
        get_policy("adaptive", **options)
    assert field in str(exc.value) and "\n" not in str(exc.value)


def test_a_fresh_policy_decides_as_one_that_saw_every_snapshot():
    """The daemon builds a fresh policy every cycle: one that reads the arrival rate
    from the jobs a snapshot holds decides as one that saw them arrive one by one."""
    arrivals = [job(f"p{i}", arrival=float(10 * i)) for i in range(6)]
    full = Gpu(0, (busy("x", 0, 8, 55.0),))
    seen = Adaptive()
    for i, j in enumerate(arrivals):  # nothing can start: the GPU is busy
        snap = snapshot(arrivals[: i + 1], [full], now=j.arrival)
        assert seen.decide(replace(snap, arrived=(j,))).ops == ()
    snap = snapshot(arrivals, [Gpu(0)], now=60.0)
    fresh = Adaptive()
    a = seen.decide(replace(snap, arrived=()))
    b = fresh.decide(snap)  # arrived=None: everything new
    assert seen._recent.rate(60.0) == fresh._recent.rate(60.0) > 0
    assert a.ops == b.ops and places(a)


def test_in_the_simulator_every_job_completes_and_no_instance_overlaps():
    jobs = [
        job(f"j{i}", {1: 100.0 + i, 2: 60.0 + i, 7: 30.0 + i}, arrival=float(3 * i))
        for i in range(60)
    ]
    result = simulate(jobs, sim_policy("adaptive"), 2, 1, A100, check=True)
    assert result.jobs == 60 and all(f < math.inf for f in result.finish)


def test_a_batch_on_idle_gpus_is_planned_by_far_and_held_to():
    batch = [
        job(f"b{i}", {1: 300.0 + 37 * i, 2: 170.0 + 20 * i, 3: 120.0 + 14 * i, 7: 60.0 + 7 * i})
        for i in range(30)
    ]
    got = simulate(batch, sim_policy("adaptive"), 2, 1, A100, check=True)
    far = simulate(batch, sim_policy("far", objective="balanced"), 2, 1, A100, check=True)
    assert got.makespan == pytest.approx(far.makespan)
    assert got.finish == pytest.approx(far.finish)
    # off: the list rule alone
    alone = simulate(batch, sim_policy("adaptive", batches=False), 2, 1, A100, check=True)
    assert alone.finish != pytest.approx(far.finish)


def test_an_arrival_while_a_plan_stands_takes_the_slices_the_plan_leaves_free():
    from slurm_mig.planner.snapshot import Planned

    # GPU 0 runs a job on its 4g and a standing plan holds its 3g (slices 4-7) for
    # "p"; GPU 1 has a 1g busy
    gpu = Gpu(0, (busy("run", 0, 4, 50.0),))
    three = Slot(Placement(4, 4), 3)
    planned = {"p": Planned("p", 0, three, batch=1, order=0, seconds=500.0)}
    waiting = job("p", {3: 500.0}, priority=5)
    newcomer = job("n", {1: 40.0, 2: 30.0, 3: 25.0, 7: 20.0}, arrival=1.0)
    snap = ClusterSnapshot(
        now=1.0,
        model=A100,
        gpus=(gpu, Gpu(1, (busy("one", 6, 1, 1e6),))),
        pending=MappingProxyType({"p": waiting, "n": newcomer}),
        planned=MappingProxyType(planned),
    )
    got = Adaptive().decide(snap)
    placed = places(got)
    assert "p" in placed and placed["p"].slot == three  # the plan is held to
    # the newcomer goes where the plan holds nothing: GPU 1
    assert placed["n"].gpu == 1


def test_an_arrival_fills_a_hole_before_a_standing_plan_begins_and_never_delays_it():
    from slurm_mig.planner.snapshot import Planned

    # GPU 0: a 4g runs until 100 s and "p" is planned on the whole GPU after it, so
    # slices 4-7 are free until then; GPU 1 is full
    gpu = Gpu(0, (busy("run", 0, 4, 100.0),))
    whole = Slot(Placement(0, 8), 7)
    planned = {"p": Planned("p", 0, whole, batch=1, order=0, seconds=500.0)}
    waiting = job("p", {7: 500.0}, priority=5)

    def decide(newcomer):
        snap = ClusterSnapshot(
            now=0.0,
            model=A100,
            gpus=(gpu, Gpu(1, (busy("big", 0, 8, 1e6),))),
            pending=MappingProxyType({"p": waiting, newcomer.id: newcomer}),
            planned=MappingProxyType(planned),
        )
        return places(Adaptive().decide(snap))

    short = decide(job("short", {1: 40.0}, arrival=0.0))
    assert set(short) == {"short"} and short["short"].slot.placement.start >= 4
    assert decide(job("long", {1: 400.0}, arrival=0.0)) == {}  # it would delay "p"


def test_a_standing_plan_is_dropped_when_a_gpu_idles_beside_it():
    from slurm_mig.planner.snapshot import Planned

    # "p" was planned on GPU 0 after "late", which runs past its plan; GPU 1 has
    # finished its share of the batch and idles: keeping to the plan would keep it idle
    whole = Slot(Placement(0, 8), 7)
    planned = {"p": Planned("p", 0, whole, batch=1, order=0, seconds=500.0)}

    def decide(gpu1: Gpu):
        snap = ClusterSnapshot(
            now=1000.0,
            model=A100,
            gpus=(Gpu(0, (busy("late", 0, 8, 1900.0),)), gpu1),
            pending=MappingProxyType({"p": job("p", {7: 500.0}, priority=5)}),
            planned=MappingProxyType(planned),
        )
        return Adaptive().decide(snap)

    got = decide(Gpu(1))
    assert places(got)["p"].gpu == 1 and not got.planned  # the list rule: at once
    # GPU 1 still busy with the batch: the plan stands
    held = decide(Gpu(1, (busy("other", 0, 4, 1500.0),)))
    assert not places(held) and set(held.planned) == {"p"}


def test_a_standing_plan_is_dropped_once_a_planned_run_ends_off_its_plan():
    from slurm_mig.planner.cluster_snapshot import Event
    from slurm_mig.planner.snapshot import Planned

    # "p" was planned at t=900 on GPU 0's whole 7g, after "late"; GPU 1 is busy, so no
    # GPU idles beside the plan, but a run on GPU 1 ended off its plan since (an event,
    # as the daemon and the simulator send): the batch's runtimes proved wrong, and the
    # list rule places "p" at once on the 4g that "late" leaves free (the driver alone
    # would re-plan only the jobs planned on GPU 1: none)
    whole = Slot(Placement(0, 8), 7)
    planned = {"p": Planned("p", 0, whole, batch=1, order=0, seconds=400.0, issued=900.0)}

    def decide(events):
        snap = ClusterSnapshot(
            now=1000.0,
            model=A100,
            gpus=(Gpu(0, (busy("late", 4, 3, 1900.0),)), Gpu(1, (busy("o", 0, 8, 5000.0),))),
            pending=MappingProxyType({"p": job("p", {4: 500.0, 7: 400.0}, priority=5)}),
            planned=MappingProxyType(planned),
            events=events,
        )
        return Adaptive().decide(snap)

    kept = decide((Event(800.0, "job x ended early", 1),))  # before the plan: seen by it
    assert not places(kept) and set(kept.planned) == {"p"}
    got = decide((Event(950.0, "job y ended early", 1),))
    assert places(got)["p"].slot.size == 4 and not got.planned
