"""Upsizing (`planner.upsize`, ``adaptive:upsize=S``): a restartable job that runs past
its estimate moves to a whole GPU that would idle, only when nothing waits."""

from __future__ import annotations

import math
from dataclasses import replace
from types import MappingProxyType

import pytest

from slurm_mig.geometry import Placement, Slot, get_model
from slurm_mig.planner.adaptive import Adaptive
from slurm_mig.planner.decisions import Destroy, Move, Place
from slurm_mig.planner.registry import UnknownPolicy
from slurm_mig.planner.snapshot import ClusterSnapshot, Gpu, Instance, Job, Planned, Running
from slurm_mig.planner.upsize import next_upsize, reserve_gpus, upsizes
from slurm_mig.sim import simulate
from slurm_mig.sim.api import SimJob
from slurm_mig.sim.policies import get_policy as sim_policy

A100 = get_model("A100-40GB")
# planned from a short run of its kind: 100 s on a 1g
SHORT = MappingProxyType({1: 100.0, 2: 60.0, 3: 45.0, 4: 40.0, 7: 30.0})
ONE_G = Slot(Placement(0, 1), 1)


def running(jid: str, started: float, restartable: bool = True, slot: Slot = ONE_G, **kw):
    job = Job(jid, 0.0, SHORT, restartable=restartable, **kw)
    return Running(job, 0, slot, started, 1.0, 1.0, started + job.time(slot.size))


def snap(runs, now: float, idle_gpus: int = 1, pending=(), **kw) -> ClusterSnapshot:
    gpus = [Gpu(0, tuple(Instance(r.slot, r.job.id, busy_until=now + 1.0) for r in runs))]
    gpus += [Gpu(k) for k in range(1, 1 + idle_gpus)]
    return ClusterSnapshot(
        now=now,
        model=A100,
        gpus=tuple(gpus),
        pending=MappingProxyType({j.id: j for j in pending}),
        running=MappingProxyType({r.job.id: r for r in runs}),
        **kw,
    )


def moves(ops) -> list[Move]:
    return [op for op in ops if isinstance(op, Move)]


def test_an_overrunning_restartable_job_moves_to_an_idle_whole_gpu():
    got = upsizes(snap([running("j", 0.0)], now=400.0), (), min_run=300.0)
    (mv,) = moves(got)
    assert (mv.job, mv.src, mv.dst, mv.slot.size) == ("j", 0, 1, 7)


def test_the_daemons_running_job_is_judged_by_the_seconds_its_assignment_planned():
    # the daemon estimates no times for a running job (all inf): its Running carries
    # what its assignment planned, and the whole GPU is not ruled out for that
    job = Job("j", 0.0, MappingProxyType(dict.fromkeys(SHORT, math.inf)), restartable=True)
    run = Running(job, 0, ONE_G, 0.0, 1.0, 1.0, 1e9, planned=500.0)
    assert run.planned_seconds == 500.0 and SHORT[1] != 500.0
    assert upsizes(snap([run], now=400.0), (), min_run=300.0) == ()  # within its plan
    (mv,) = moves(upsizes(snap([run], now=600.0), (), min_run=300.0))
    assert (mv.job, mv.slot.size) == ("j", 7)
    # a job whose times say it cannot run on a whole GPU stays
    never = Job("k", 0.0, MappingProxyType({1: 100.0, 7: math.inf}), restartable=True)
    stuck = Running(never, 0, ONE_G, 0.0, 1.0, 1.0, 1e9)
    assert upsizes(snap([stuck], now=600.0), (), min_run=300.0) == ()


def test_idle_instances_on_the_target_are_destroyed_before_the_move():
    s = snap([running("j", 0.0)], now=400.0, idle_gpus=0)
    idle = (Instance(Slot(Placement(0, 4), 4)), Instance(Slot(Placement(4, 4), 3)))
    s = replace(s, gpus=(*s.gpus, Gpu(1, idle)))
    got = upsizes(s, (), min_run=300.0)
    assert [type(op) for op in got] == [Destroy, Destroy, Move]
    assert {op.slot for op in got[:2]} == {i.slot for i in idle}


@pytest.mark.parametrize(
    ("why", "run", "now"),
    [
        ("not restartable", running("j", 0.0, restartable=False), 400.0),
        ("within its estimate", running("j", 350.0), 400.0),
        ("past it but under min_run", running("j", 250.0), 400.0),
        ("already on a whole GPU", running("j", 0.0, slot=Slot(Placement(0, 8), 7)), 400.0),
        ("a job of several slices", running("j", 0.0, tasks=2), 400.0),
        ("not started yet", replace(running("j", 0.0), started=None), 400.0),
    ],
)
def test_jobs_that_do_not_move(why, run, now):
    assert moves(upsizes(snap([run], now=now), (), min_run=300.0)) == [], why


def test_nothing_moves_while_a_job_waits_unplaced():
    waiting = Job("w", 300.0, SHORT)
    assert upsizes(snap([running("j", 0.0)], 400.0, pending=[waiting]), (), 300.0) == ()
    placed = (Place("w", 1, ONE_G, 400.0),)  # placed this decision: nothing waits
    got = upsizes(snap([running("j", 0.0)], 400.0, idle_gpus=2, pending=[waiting]), placed, 300.0)
    assert [mv.dst for mv in moves(got)] == [2]  # not the GPU the placement uses


def test_nothing_moves_while_a_standing_plan_holds_gpus():
    plan = {"p": Planned("p", 1, Slot(Placement(0, 8), 7), seconds=500.0)}
    s = snap([running("j", 0.0)], 400.0, planned=MappingProxyType(plan))
    assert upsizes(s, (), 300.0) == ()


def test_a_gpu_with_an_instance_kept_for_a_job_is_not_a_target():
    s = snap([running("j", 0.0)], now=400.0, idle_gpus=0)
    s = replace(s, gpus=(*s.gpus, Gpu(1, (Instance(ONE_G, keep_for="next"),))))
    assert upsizes(s, (), 300.0) == ()


def test_the_longest_running_move_first_one_per_idle_gpu():
    runs = [running("a", 100.0), running("b", 0.0, slot=Slot(Placement(1, 1), 1))]
    runs.append(running("c", 50.0, slot=Slot(Placement(2, 1), 1)))
    got = moves(upsizes(snap(runs, now=1000.0, idle_gpus=2), (), 300.0))
    assert [(mv.job, mv.dst) for mv in got] == [("b", 1), ("c", 2)]


def test_the_option_is_off_by_default_and_checked():
    s = snap([running("j", 0.0)], now=400.0)
    assert moves(Adaptive().decide(s).ops) == []
    on = Adaptive(upsize=300)
    assert [mv.job for mv in moves(on.decide(s).ops)] == ["j"]
    assert on.moved == 1
    assert Adaptive(upsize=-1).upsize is None
    with pytest.raises(UnknownPolicy, match="upsize"):
        Adaptive(upsize="soon")


def test_in_the_simulator_a_long_run_of_a_short_kind_ends_sooner_upsized():
    # 28 runs of one kind teach 100 s on a 1g; an hour later a run 40 times longer
    # arrives with 13 more, and the queue puts each on a 1g; once the short ones end,
    # a GPU idles (and the arrival rate, over the last hour, leaves nothing in reserve)
    fast = {1: 100.0, 2: 60.0, 3: 45.0, 4: 40.0, 7: 30.0}
    slow = {s: 40 * t for s, t in fast.items()}
    kw = {"kind": "k", "restartable": True, "time_limit": 300.0}  # as users' limits are
    jobs = [SimJob(f"a{i}", 0.0, fast, **kw) for i in range(28)]
    jobs.append(SimJob("long", 3600.0, slow, kind="k", restartable=True))
    jobs += [SimJob(f"b{i}", 3600.0, fast, **kw) for i in range(13)]
    kw = {"knowledge": "learned", "check": True}
    off = simulate(jobs, sim_policy("adaptive"), 1, 2, A100, **kw)
    on = simulate(jobs, sim_policy("adaptive", upsize=300), 1, 2, A100, **kw)
    assert on.migrations == 1 and off.migrations == 0
    i = on.ids.index("long")
    assert off.finish[i] - off.start[i] == pytest.approx(slow[1])  # ran on its 1g
    assert on.finish[i] < off.finish[i] - 1000.0
    assert on.jct[:i] == off.jct[:i]  # the short ones are not delayed


def test_the_policy_asks_to_decide_again_when_the_next_job_may_move():
    runs = [running("a", 100.0), running("b", 0.0, restartable=False)]
    s = snap(runs, now=200.0)
    assert next_upsize(s, 300.0) == 400.0  # a: started 100, may move from 100 + 300
    assert Adaptive(upsize=300).decide(s).wake_at == 400.0
    assert next_upsize(snap(runs, now=400.0), 300.0) is None  # due now: none later


def test_whole_gpus_are_kept_for_the_arrivals_expected():
    runs = [running("a", 0.0), running("b", 0.0, slot=Slot(Placement(1, 1), 1))]
    s = snap(runs, now=400.0, idle_gpus=3)
    # 0.1 jobs/s of 100 s at the running jobs' mean size (1): 10 slices busy expected,
    # 2 are: 8 more, two whole GPUs
    assert reserve_gpus(s, 0.1, 100.0) == 2
    assert reserve_gpus(s, 0.01, 100.0) == 0
    assert [mv.dst for mv in moves(upsizes(s, (), 300.0, reserve=2))] == [1]
    assert upsizes(s, (), 300.0, reserve=3) == ()
