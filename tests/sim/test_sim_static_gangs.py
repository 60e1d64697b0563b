"""Jobs of several slices on a static layout or whole GPUs, as Slurm runs them
(``--gres=gpu[:type]:N``): N instances of the layout on one node, each anywhere on it,
all held from the start to the end of the job (its slowest task); the engine's checks
of a placement on several instances (`Place.more`)."""

from __future__ import annotations

import math

import pytest

from slurm_mig.geometry import Placement, Slot, get_model
from slurm_mig.job import Job
from slurm_mig.planner.decisions import Decisions, Move, Place
from slurm_mig.power import power_curve
from slurm_mig.sim import PolicyError, simulate
from slurm_mig.sim.jobrows import job_from_row
from slurm_mig.sim.knowledge import LearnedRuntimes
from slurm_mig.sim.policies import get_policy

A100 = get_model("A100-40GB")
TASK = {1: 400.0, 2: 210.0, 3: 150.0, 4: 120.0, 7: 70.0}  # one task's seconds
G1 = [Slot(Placement(i, 1), 1) for i in range(7)]  # 1g at memory slice i
G2 = Slot(Placement(0, 2), 2)
G3 = Slot(Placement(4, 4), 3)


def gang(jid: str, tasks: int, arrival: float = 0.0, **kw) -> Job:
    """A job of ``tasks`` slices as a job file's row makes it (one task's ``TASK``)."""
    row = {"id": jid, "arrival": arrival, "times": TASK, "tasks": tasks, **kw}
    return job_from_row(row, "test", A100)


def single(jid: str, arrival: float = 0.0, t: float = 100.0, size: int | None = None) -> Job:
    return Job(jid, arrival, {s: t for s in A100.planner_sizes}, size=size)


class Spy:
    """A registry policy as the simulator runs it, recording its snapshots' GPUs and
    its placements (the policy and the engine are real)."""

    def __init__(self, name: str, **options) -> None:
        self.inner = get_policy(name, **options)
        self.name = self.inner.name
        self.kind = self.inner.kind
        self.models_slurm = self.inner.models_slurm
        self.places: list[Place] = []
        self.snaps: list[tuple[float, list, dict]] = []

    def decide(self, snap):
        pending = dict(snap.pending)
        self.snaps.append((snap.now, list(snap.gpus), pending))
        got = self.inner.decide(snap)
        self.places += got.places
        return got

    def place_of(self, job: str) -> Place:
        return next(p for p in self.places if p.job == job)


class Script:
    """A policy that plays fixed operations (functions of the snapshot) at given
    instants; ``models_slurm`` False: it sees learned estimates, as a dynamic policy."""

    name = "script"
    kind = "online"
    models_slurm = False

    def __init__(self, plan) -> None:
        self.plan = sorted(plan, key=lambda x: x[0])

    def decide(self, snap) -> Decisions:
        ops = []
        while self.plan and self.plan[0][0] <= snap.now + 1e-12:
            ops.extend(op(snap) for op in self.plan.pop(0)[1])
        wake = self.plan[0][0] if self.plan else None
        return Decisions(tuple(ops), wake_at=wake)


def where(p: Place) -> list[tuple[int, Slot]]:
    return [(p.gpu, p.slot), *p.more]


def by_id(r) -> dict[str, tuple[float, float, float]]:
    return {i: (s, f, e) for i, s, f, e in zip(r.ids, r.start, r.finish, r.exec_s)}


def test_a_gang_runs_at_once_on_n_instances_of_gpus_of_one_node_and_frees_them_all():
    spy = Spy("static", layout="4-2-1")  # one 1g per GPU
    later = single("later", arrival=1000.0, size=1)
    r = simulate([gang("g", 3), later], spy, 1, 3, A100, check=True)
    got = where(spy.place_of("g"))
    assert sorted(k for k, _ in got) == [0, 1, 2] and {s.size for _, s in got} == {1}
    s, f, e = by_id(r)["g"]
    assert e == pytest.approx(TASK[1]) and f == pytest.approx(s + TASK[1])
    during = [gpus for t, gpus, _ in spy.snaps if s <= t < f]
    assert during, "the policy was asked while the gang ran"
    for gpus in during:  # every one of its instances shows the job and its end
        for k, slot in got:
            inst = gpus[k].instance(slot)
            assert inst.job == "g" and inst.busy_until == pytest.approx(f)
    # once it ended, its instances are free again: the later 1g job starts at once
    assert by_id(r)["later"][0] == pytest.approx(1000.0)


def test_typed_requests_wait_for_n_of_their_size_untyped_ones_take_any_smallest_first():
    # a 1g job holds GPU 0's 1g; a gang of 2 then finds one 1g free (GPU 1) and 2g ones
    jobs = [single("s", size=1, t=1000.0), gang("g", 2, arrival=1.0)]
    exact, fit = Spy("static", layout="4-2-1"), Spy("static", layout="4-2-1", match="fit")
    r_exact = simulate(jobs, exact, 1, 2, A100, check=True)
    r_fit = simulate(jobs, fit, 1, 2, A100, check=True)
    assert {s.size for _, s in where(exact.place_of("g"))} == {1}
    assert by_id(r_exact)["g"][0] >= by_id(r_exact)["s"][1]  # waited for the second 1g
    sizes = sorted(s.size for _, s in where(fit.place_of("g")))
    assert sizes == [1, 2]  # the free 1g, then the smallest larger size
    s, f, e = by_id(r_fit)["g"]
    assert s < 10.0 and e == pytest.approx(max(TASK[1], TASK[2]))  # its slowest task


def test_a_typed_gang_of_a_size_the_layout_lacks_takes_the_next_larger_size():
    row = {"id": "g", "times": {2: 210.0, 3: 150.0, 4: 120.0, 7: 70.0}, "tasks": 2}
    spy = Spy("static", layout="4-3")
    r = simulate([job_from_row(row, "test", A100)], spy, 1, 2, A100, check=True)
    assert sorted(s.size for _, s in where(spy.place_of("g"))) == [3, 3]
    assert by_id(r)["g"][2] == pytest.approx(150.0)


def test_a_gang_waits_for_n_free_instances_while_a_later_single_job_backfills():
    jobs = [
        single("a", t=100.0),
        single("b", t=100.0),
        gang("g", 6, arrival=1.0),
        single("c", arrival=2.0, t=500.0),  # the same sizes as the gang's tasks
    ]
    spy = Spy("static", layout="1-1-1-1-1-1-1")
    r = simulate(jobs, spy, 1, 1, A100, check=True)
    t = by_id(r)
    assert t["c"][0] == pytest.approx(2.0)  # it passed the waiting gang
    assert t["g"][0] == pytest.approx(max(t["a"][1], t["b"][1]))  # when six were free
    assert len(where(spy.place_of("g"))) == 6


def test_a_gang_never_spans_two_nodes():
    # 2 nodes x 2 whole GPUs; a job holds GPU 0 (node 0) when a gang of 2 arrives
    spy = Spy("no-mig")
    jobs = [single("s", t=1000.0), gang("g", 2, arrival=1.0)]
    r = simulate(jobs, spy, 2, 2, A100, check=True)
    assert sorted(k for k, _ in where(spy.place_of("g"))) == [2, 3]  # node 1
    s, _, e = by_id(r)["g"]
    assert s < 10.0 and e == pytest.approx(TASK[7])


@pytest.mark.parametrize(
    "policy,options,nodes,per_node",
    [
        ("no-mig", {}, 2, 2),  # 2 whole GPUs per node for a gang of 3
        ("static", {"layout": "4-2-1"}, 1, 2),  # typed: 2 x 1g
        ("static", {"layout": "4-3", "match": "fit"}, 1, 1),  # untyped: 2 instances
    ],
)
def test_a_layout_that_can_never_host_a_gang_is_a_value_error(policy, options, nodes, per_node):
    with pytest.raises(ValueError, match="3 tasks.*at most 2 such instance"):
        simulate([gang("g", 3)], get_policy(policy, **options), nodes, per_node, A100)


def test_utilisation_and_energy_count_every_instance_of_a_gang():
    r = simulate([gang("g", 3)], get_policy("static", layout="4-2-1"), 1, 3, A100, check=True)
    s, f, _ = by_id(r)["g"]
    assert max(r.util_busy) == 3  # three 1g instances busy at once
    curve = power_curve(A100)
    expect = 3 * (curve[0] * s + curve[1] * (f - s))  # each GPU: idle, then 1 slice
    assert r.energy_j == pytest.approx(expect)
    assert r.summary()["utilization"] == pytest.approx(3 * (f - s) / (21 * f))


def _place_gang(jid: str, *where: tuple[int, Slot]):
    (gpu, slot), *more = where
    return lambda snap: Place(jid, gpu, slot, snap.now, more=tuple(more))


def test_a_placement_on_several_instances_is_checked():
    run1 = (0.0, [lambda snap: Place("s", 1, G1[0], snap.now)])
    cases = [
        ((0, G1[0]), (1, G1[0]), "busy with job 's'"),
        ((0, G1[0]), (2, G1[0]), "is on node 1, not 0"),
        ((0, G1[0]), (0, G1[0]), "overlap"),
        ((0, G1[0]), (0, G2), "overlap"),
    ]
    for a, b, says in cases:
        pol = Script([run1, (1.0, [_place_gang("g", a, b)])])
        jobs = [single("s", t=1000.0, size=1), gang("g", 2)]
        with pytest.raises(PolicyError, match=says):
            simulate(jobs, pol, 2, 2, A100)
    pol = Script([(0.0, [_place_gang("g", (0, G1[0]), (0, G1[1]), (0, G1[2]))])])
    with pytest.raises(PolicyError, match="has 2 task"):
        simulate([gang("g", 2)], pol, 1, 1, A100)


def test_a_job_on_several_instances_cannot_move():
    g = gang("g", 2, restartable=True)
    pol = Script(
        [
            (0.0, [_place_gang("g", (0, G1[0]), (1, G1[0]))]),
            (100.0, [lambda snap: Move("g", 0, 0, G1[3])]),
        ]
    )
    with pytest.raises(PolicyError, match="several instances; it cannot move"):
        simulate([g], pol, 1, 2, A100)


def test_a_gang_starts_once_every_instance_exists_and_runs_its_slowest_task():
    pol = Script([(0.0, [_place_gang("g", (0, G2), (1, G3))])])  # both to be created
    r = simulate([gang("g", 2)], pol, 1, 2, A100, check=True)
    s, f, e = by_id(r)["g"]
    assert s == pytest.approx(max(A100.create_time(2), A100.create_time(3)))
    assert e == pytest.approx(max(TASK[2], TASK[3])) and f == pytest.approx(s + e)


def test_a_gang_on_several_instances_is_learned_under_its_slowest_instance_size(monkeypatch):
    seen: list[tuple[str, int, float]] = []
    record = LearnedRuntimes.record

    def spy(self, owner, key, model, size, seconds):
        seen.append((key, size, seconds))
        record(self, owner, key, model, size, seconds)

    monkeypatch.setattr(LearnedRuntimes, "record", spy)
    jobs = [gang("g", 2, kind="k"), gang("h", 2, arrival=5000.0, kind="k")]
    pol = Script(
        [
            (0.0, [_place_gang("g", (0, G2), (1, G3))]),
            (5000.0, [_place_gang("h", (0, G2), (1, G3))]),
        ]
    )
    simulate(jobs, pol, 1, 2, A100, knowledge="learned", check=True)
    # a task of each ran on a 2g (the slower of 2g and 3g), as it ran: not task_size(2)
    assert [(k, size) for k, size, _ in seen] == [("k", 2), ("k", 2)]
    assert seen[0][2] == pytest.approx(TASK[2])


def test_under_learned_knowledge_the_static_layout_sees_the_time_limit_per_task_size():
    g = gang("g", 2)
    limited = Job(g.id, 0.0, g.times, tasks=2, task_times=g.task_times, time_limit=3600.0)
    spy = Spy("static", layout="4-2-1")
    simulate([limited], spy, 1, 2, A100, knowledge="learned", check=True)
    seen = next(p["g"] for _, _, p in spy.snaps if "g" in p)
    assert dict(seen.task_times) == {s: 3600.0 for s in TASK}
    assert all(t == 3600.0 for t in seen.times.values() if math.isfinite(t))
