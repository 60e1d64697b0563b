"""The simulator's engine on cases small enough to work out by hand: reconfiguration
times, the PCIe slowdown of Eq. 2 while jobs overlap, energy, migration, and the
errors a faulty policy gets."""

from __future__ import annotations

import math

import pytest

from slurm_mig.geometry import Placement, Slot, get_model
from slurm_mig.pcie import PCIE_MAX_A100, slowdown
from slurm_mig.planner.decisions import Create, Decisions, Destroy, Move, Place
from slurm_mig.power import A100_CURVE_W, power_curve
from slurm_mig.sim import PolicyError, SimInputError, SimJob, simulate

A100 = get_model("A100-40GB")
A30 = get_model("A30-24GB")
C1, D1 = A100.create_time(1), A100.destroy_time(1)
C7, D7 = A100.create_time(7), A100.destroy_time(7)
G1 = [Slot(Placement(i, 1), 1) for i in range(7)]  # 1g at memory slice i
G7 = Slot(Placement(0, 8), 7)
BLOOM7B1 = {"pcie_demand": 17.65, "alpha": 1.07}
BLOOM560M = {"pcie_demand": 5.7, "alpha": 1.25}


def job(jid, arrival=0.0, t=100.0, size=1, **kw) -> SimJob:
    times = {s: t for s in A100.planner_sizes if s >= size}
    return SimJob(jid, arrival, times, size=size, **kw)


def Start(job, gpu, slot):
    """Start ``job`` now (the operation is made at the snapshot's time)."""
    return lambda snap: Place(job, gpu, slot, snap.now)


def Migrate(job, gpu, slot):
    """Move running ``job`` to ``slot`` of ``gpu``."""
    return lambda snap: Move(job, snap.running[job].gpu, gpu, slot)


class Wake(float):
    """Ask to be called again at this time."""


def decisions(snap, items) -> Decisions:
    ops, wake = [], None
    for it in items:
        if isinstance(it, Wake):
            wake = float(it) if wake is None else min(wake, float(it))
        else:
            ops.append(it(snap) if callable(it) else it)
    return Decisions(tuple(ops), wake_at=wake)


class Script:
    """A policy that plays fixed operations at given instants (a test double of a
    policy only: the engine under test is real)."""

    name = "script"
    kind = "online"

    def __init__(self, plan):
        self.plan = sorted(plan, key=lambda x: x[0])  # (at, [operations])
        self.calls = []

    def decide(self, snap):
        self.calls.append(snap.now)
        out = []
        while self.plan and self.plan[0][0] <= snap.now + 1e-12:
            out.extend(self.plan.pop(0)[1])
        if self.plan:
            out.append(Wake(self.plan[0][0]))
        return decisions(snap, out)


def by_id(result):
    return {
        i: (a, s, f) for i, a, s, f in zip(result.ids, result.arrival, result.start, result.finish)
    }


# ---------------------------------------------------------------------------
# reconfiguration


def test_a_job_waits_for_its_instance_to_be_created():
    r = simulate([job("a", t=10.0)], "baseline", 1, 1, A100, check=True)
    a, s, f = by_id(r)["a"]
    assert s == pytest.approx(C1) and f == pytest.approx(C1 + 10.0)
    assert (r.creates, r.destroys) == (1, 0)
    assert r.summary()["wait_mean"] == pytest.approx(C1)


def test_creates_on_one_gpu_run_one_after_another():
    jobs = [job(f"j{i}", t=10.0) for i in range(7)]
    r = simulate(jobs, "baseline", 1, 1, A100, check=True)
    starts = sorted(r.start)
    assert starts == pytest.approx([C1 * (k + 1) for k in range(7)])


def test_creates_on_different_gpus_run_at_once():
    jobs = [job(f"j{i}", t=10.0, size=7) for i in range(3)]
    r = simulate(jobs, "baseline", 1, 3, A100, check=True)
    assert r.start == pytest.approx([C7] * 3)


def test_reconfiguration_is_charged_destroy_then_create():
    # a 7g job holds the GPU; a 1g job waits, then the idle 7g must go first
    jobs = [job("big", 0.0, 10.0, size=7), job("small", 1.0, 5.0, size=1)]
    r = simulate(jobs, "baseline", 1, 1, A100, check=True)
    t = by_id(r)
    assert t["big"][2] == pytest.approx(C7 + 10.0)
    assert t["small"][1] == pytest.approx(C7 + 10.0 + D7 + C1)
    assert (r.creates, r.destroys) == (2, 1)


def test_an_idle_instance_of_the_right_size_is_reused_for_free():
    jobs = [job("a", 0.0, 10.0, size=3), job("b", 20.0, 10.0, size=3)]
    r = simulate(jobs, "baseline", 1, 1, A100, check=True)
    assert by_id(r)["b"][1] == pytest.approx(20.0)
    assert r.creates == 1


def test_destroy_waits_for_the_gpus_earlier_operations():
    # create 1g@0, then destroy it at once: the destroy starts when the create ends
    pol = Script([(0.0, [Create(0, G1[0]), Destroy(0, G1[0]), Start("a", 0, G1[1])])])
    r = simulate([job("a", t=1.0)], pol, 1, 1, A100, check=True)
    assert by_id(r)["a"][1] == pytest.approx(C1 + D1 + C1)


# ---------------------------------------------------------------------------
# PCIe slowdown (Eq. 2) while jobs overlap


def eq2(kind: dict, n: int) -> float:
    return max(1.0, kind["alpha"] * kind["pcie_demand"] / (PCIE_MAX_A100 / n))


def test_eq2_is_the_papers_formula():
    assert slowdown(1.07, 17.65, 2) == pytest.approx(1.07 * 17.65 * 2 / 30.08)
    assert slowdown(1.25, 5.7, 4) == 1.0  # Bloom560m saturates the link only past 4
    assert slowdown(1.25, 5.7, 5) == pytest.approx(1.25 * 5.7 * 5 / 30.08)
    assert slowdown(1.0, 0.0, 7) == 1.0


def _together(kinds, times):
    jobs = [job(f"j{i}", t=t, **k) for i, (k, t) in enumerate(zip(kinds, times))]
    ready = C1 * len(jobs)
    pol = Script(
        [(0.0, [Create(0, G1[i]) for i in range(len(jobs))])]
        + [(ready, [Start(j.id, 0, G1[i]) for i, j in enumerate(jobs)])]
    )
    return simulate(jobs, pol, 1, 1, A100, check=True), ready


def test_two_pcie_bound_jobs_on_one_gpu_take_longer_than_apart_by_eq2():
    together, t0 = _together([BLOOM7B1, BLOOM7B1], [100.0, 100.0])
    sd = eq2(BLOOM7B1, 2)
    assert sd == pytest.approx(1.2557, abs=1e-4)
    for _, s, f in by_id(together).values():
        assert s == pytest.approx(t0)
        assert f - s == pytest.approx(100.0 * sd)
    jobs = [job(f"j{i}", t=100.0, **BLOOM7B1) for i in range(2)]
    apart = simulate(
        jobs, Script([(0.0, [Start("j0", 0, G1[0]), Start("j1", 1, G1[0])])]), 1, 2, A100
    )
    for _, s, f in by_id(apart).values():
        assert f - s == pytest.approx(100.0)
    # the PCIe-unaware baseline packs both on the first GPU: slowed
    packed = simulate(jobs, "baseline", 1, 2, A100, check=True)
    assert max(packed.finish) > max(apart.finish) + 20.0


def test_rates_change_when_a_pcie_bound_job_leaves():
    # both slowed by sd until the short one ends; the long one then runs alone
    together, t0 = _together([BLOOM7B1, BLOOM7B1], [100.0, 50.0])
    sd = eq2(BLOOM7B1, 2)
    t = by_id(together)
    short_end = t0 + 50.0 * sd
    assert t["j1"][2] == pytest.approx(short_end)
    done = (short_end - t0) / (100.0 * sd)  # share of the long job's work done by then
    assert t["j0"][2] == pytest.approx(short_end + (1 - done) * 100.0)


def test_jobs_that_are_not_pcie_bound_are_not_slowed():
    together, t0 = _together([{}, BLOOM7B1, {}], [100.0, 100.0, 100.0])
    t = by_id(together)
    assert t["j0"][2] - t0 == pytest.approx(100.0)
    assert t["j1"][2] - t0 == pytest.approx(100.0)  # alone among PCIe-bound jobs: n = 1
    together, t0 = _together([BLOOM560M] * 5, [100.0] * 5)
    for _, s, f in by_id(together).values():
        assert f - s == pytest.approx(100.0 * eq2(BLOOM560M, 5))


# ---------------------------------------------------------------------------
# energy


def test_energy_integrates_the_power_curve_by_busy_slices():
    r = simulate([job("a", t=10.0, size=3)], "baseline", 1, 2, A100, check=True)
    p = A100_CURVE_W
    want = 2 * p[0] * A100.create_time(3) + (p[3] + p[0]) * 10.0
    assert r.energy_j == pytest.approx(want)
    assert r.energy_j >= r.idle_energy_j


def test_power_curve_of_other_models_is_scaled_and_concave_enough():
    a30 = power_curve(A30)
    assert len(a30) == 5 and a30[0] == pytest.approx(40.0 * 165 / 250)
    assert a30[-1] == pytest.approx(248.5 * 165 / 250)
    assert power_curve(A100) == A100_CURVE_W
    assert all(x <= y for x, y in zip(a30, a30[1:]))


# ---------------------------------------------------------------------------
# migration


def test_migration_keeps_progress_and_pays_the_overhead():
    a = SimJob("a", 0.0, {1: 100.0, 7: 20.0}, restartable=True)
    pol = Script([(0.0, [Start("a", 0, G1[0])]), (10.0 + C1, [Migrate("a", 1, G7)])])
    r = simulate([a], pol, 1, 2, A100, migration_s=5.0, check=True)
    # 10 s of 100 done on 1g; 90 % left on 7g (20 s) after max(create, overhead)
    resume = (10.0 + C1) + max(C7, 5.0)
    assert r.finish == pytest.approx([resume + 0.9 * 20.0])
    assert r.migrations == 1 and r.exec_s == pytest.approx([10.0 + 18.0])


def test_only_restartable_running_jobs_migrate():
    pol = Script([(0.0, [Start("a", 0, G1[0])]), (1.0, [Migrate("a", 0, G1[1])])])
    with pytest.raises(PolicyError, match="not restartable"):
        simulate([job("a")], pol, 1, 1, A100)


# ---------------------------------------------------------------------------
# a faulty policy is stopped with a message


@pytest.mark.parametrize(
    ("cmds", "needle"),
    [
        ([Start("a", 0, G1[0]), Start("b", 0, G1[0])], "busy with job 'a'"),
        ([Start("a", 0, G7), Start("b", 0, G1[3])], "overlap live instance"),
        ([Start("a", 3, G1[0])], "no gpu 3"),
        ([Start("zz", 0, G1[0])], "no job 'zz'"),
        ([Start("a", 0, Slot(Placement(1, 2), 2))], "not a legal instance"),
        ([Start("a", 0, G1[0]), Start("a", 0, G1[1])], "already started"),
        ([Start("a", 0, G1[0]), Destroy(0, G1[0])], "holds job 'a'"),
        ([Destroy(0, G1[2])], "no instance"),
        (["start a"], "not an operation"),
    ],
)
def test_illegal_commands_raise_policy_error(cmds, needle):
    with pytest.raises(PolicyError, match=needle):
        simulate([job("a"), job("b")], Script([(0.0, cmds)]), 1, 1, A100)


def test_a_job_cannot_start_on_a_size_it_cannot_run_on():
    big = SimJob("a", 0.0, {7: 10.0})
    with pytest.raises(PolicyError, match="cannot run on size 1"):
        simulate([big], Script([(0.0, [Start("a", 0, G1[0])])]), 1, 1, A100)


def test_a_policy_that_leaves_jobs_waiting_is_reported():
    class Idle:
        name = "idle"
        kind = "online"

        def decide(self, snap):
            return Decisions()

    with pytest.raises(PolicyError, match="left 2 job"):
        simulate([job("a"), job("b")], Idle(), 1, 1, A100)


def test_the_policy_is_called_on_arrivals_departures_creations_and_wakes():
    pol = Script([(0.0, [Create(0, G1[0])]), (5.0, [Start("a", 0, G1[0])])])
    simulate([job("a", 2.0, 10.0)], pol, 1, 1, A100)
    assert pol.calls == pytest.approx([2.0, 2.0 + C1, 5.0, 15.0])


def test_snapshots_show_instances_jobs_and_predicted_ends():
    seen = []

    class Look:
        name = "look"
        kind = "online"

        def decide(self, snap):
            g = snap.gpus[0]
            seen.append(
                {
                    "now": snap.now,
                    "inst": g.instances,
                    "masks": (g.busy_mask, g.held_mask, g.pcie_jobs),
                    "running": dict(snap.running),
                    "pending": list(snap.pending),
                    "arrived": None if snap.arrived is None else [j.id for j in snap.arrived],
                    "changed": snap.changed,
                }
            )
            if snap.now == 0.0:
                return decisions(snap, [Start("a", 0, G1[2])])
            if "b" in snap.pending:
                return decisions(snap, [Start("b", 0, G1[3])])
            return Decisions()

    simulate([job("a", t=10.0, **BLOOM7B1), job("b", 0.0, 1.0)], Look(), 1, 1, A100, check=True)
    first, second = seen[0], seen[1]
    assert first["arrived"] is None and first["changed"] is None  # the first: all new
    assert first["pending"] == ["a", "b"] and first["inst"] == () and first["running"] == {}
    assert second["now"] == pytest.approx(C1)  # a's instance is ready
    (inst,) = second["inst"]
    assert inst.slot == G1[2] and inst.job == "a" and inst.pcie
    assert inst.busy_until == pytest.approx(C1 + 10.0)
    assert second["masks"] == (0b100, 0b100, 1)
    run = second["running"]["a"]
    assert run.started == pytest.approx(C1) and run.finish_at == pytest.approx(C1 + 10)
    assert second["pending"] == ["b"] and second["arrived"] == [] and second["changed"] == {0}


# ---------------------------------------------------------------------------
# input


@pytest.mark.parametrize(
    ("jobs", "needle"),
    [
        ([job("a"), job("a")], "duplicate job id"),
        ([SimJob("a", -1.0, {1: 1.0})], "must be >= 0"),
        ([SimJob("a", 0.0, {5: 1.0})], "size 5"),
        ([SimJob("a", 0.0, {1: 0.0})], "must be > 0"),
        ([SimJob("a", 0.0, {1: math.inf})], "no size"),
        ([SimJob("a", 0.0, {1: 1.0}, size=7)], "requested size 7"),
        ([SimJob("a", 0.0, {1: 1.0}, memory=10 * 2**30)], "more memory"),
        ([SimJob("a", 0.0, {1: 1.0}, alpha=0.0)], "alpha"),
    ],
)
def test_bad_jobs_are_refused_with_the_job_named(jobs, needle):
    with pytest.raises(SimInputError, match=needle):
        simulate(jobs, "baseline", 1, 1, A100)


def test_an_empty_workload_is_an_empty_result():
    r = simulate([], "baseline", 1, 1, A100)
    assert r.jobs == 0 and r.energy_j == 0.0 and r.summary()["jct_sum"] == 0.0


def test_repeated_wake_ups_for_one_time_call_the_policy_once():
    calls = []

    class Nag:
        name = "nag"
        kind = "online"

        def decide(self, snap):
            calls.append(snap.now)
            if snap.now < 5.0:
                return decisions(snap, [Wake(5.0), Wake(5.0)])
            return decisions(snap, [Start("a", 0, G1[0])] if "a" in snap.pending else [])

    simulate([job("a", 0.0, 1.0)], Nag(), 1, 1, A100)
    assert calls == pytest.approx([0.0, 5.0, 5.0 + C1, 5.0 + C1 + 1.0])  # wake, ready, end


# ---------------------------------------------------------------------------
# pacing: the daemon decides at job ends and otherwise once per cycle


class Greedy:
    """Starts every pending job at once on the next 1g slot (a test double of a
    policy); records when it was asked."""

    name = "greedy"
    kind = "online"

    def __init__(self, models_slurm: bool = False) -> None:
        self.models_slurm = models_slurm
        self.calls: list[float] = []
        self.next = 0

    def decide(self, snap):
        self.calls.append(snap.now)
        ops = []
        for jid in sorted(snap.pending):
            ops.append(Place(jid, 0, G1[self.next], snap.now))
            self.next += 1
        return Decisions(tuple(ops))


def test_a_paced_policy_decides_at_job_starts_and_ends_and_otherwise_once_per_cycle():
    pol = Greedy()
    r = simulate([job("a", 0.0, 50.0), job("b", 3.0, 50.0)], pol, 1, 1, A100, cycle=10.0)
    # a's arrival; a's start (the Prolog's call, before b arrives); b's arrival (at 3)
    # waits for the cycle 10 s after that decision; b's start; each end (the Epilog's)
    b_start = C1 + 10.0 + C1
    want = [0.0, C1, C1 + 10.0, b_start, C1 + 50.0, b_start + 50.0]
    assert pol.calls == pytest.approx(want)
    assert by_id(r)["b"][1] == pytest.approx(b_start)
    unpaced = Greedy()
    r0 = simulate([job("a", 0.0, 50.0), job("b", 3.0, 50.0)], unpaced, 1, 1, A100)
    assert by_id(r0)["b"][1] == pytest.approx(3.0 + C1)  # at once, unpaced


def test_an_arrival_before_a_job_start_is_seen_at_that_start_not_the_next_cycle():
    pol = Greedy()
    r = simulate([job("a", 0.0, 50.0), job("b", C1 / 2, 50.0)], pol, 1, 1, A100, cycle=100.0)
    assert by_id(r)["b"][1] == pytest.approx(C1 + C1)  # a's start decides b's place


def test_a_start_delay_passes_between_a_placement_and_the_start():
    pol = Greedy()
    r = simulate([job("a", 0.0, 50.0), job("b", 3.0, 50.0)], pol, 1, 1, A100, start_delay=7.0)
    # the instance is made at once; the job starts once the delay has passed too
    assert by_id(r)["a"][1] == pytest.approx(7.0)
    assert by_id(r)["b"][1] == pytest.approx(10.0)
    assert by_id(r)["b"][2] == pytest.approx(60.0)
    slurm = Greedy(models_slurm=True)
    r1 = simulate([job("a", 0.0, 50.0)], slurm, 1, 1, A100, start_delay=7.0)
    assert by_id(r1)["a"][1] == pytest.approx(C1)  # Slurm's own scheduling: not delayed


@pytest.mark.parametrize("delay", [-1.0, math.nan, math.inf, "5"])
def test_a_start_delay_is_seconds_at_least_zero(delay):
    with pytest.raises(SimInputError, match="start_delay must be seconds >= 0"):
        simulate([job("a")], Greedy(), 1, 1, A100, start_delay=delay)


def test_an_arrival_after_a_job_end_is_seen_at_that_end_not_the_next_cycle():
    pol = Greedy()
    jobs = [job("a", 0.0, 5.0), job("b", 0.0 + C1 + 4.0, 5.0)]  # b just before a ends
    r = simulate(jobs, pol, 1, 1, A100, cycle=100.0)
    assert by_id(r)["b"][1] == pytest.approx(C1 + 5.0 + C1)  # a's end decides b's start


def test_policies_that_model_slurm_are_not_paced():
    jobs = [job("a", 0.0, 50.0), job("b", 3.0, 50.0), job("c", 7.5, 1.0)]
    paced = Greedy(models_slurm=True)
    simulate(jobs, paced, 1, 1, A100, cycle=30.0)
    plain = Greedy(models_slurm=True)
    simulate(jobs, plain, 1, 1, A100)
    assert paced.calls == plain.calls and 3.0 in paced.calls and 7.5 in paced.calls


@pytest.mark.parametrize("cycle", [-1.0, math.nan, math.inf, "5"])
def test_a_cycle_is_seconds_at_least_zero(cycle):
    with pytest.raises(SimInputError, match="cycle must be seconds >= 0"):
        simulate([job("a")], Greedy(), 1, 1, A100, cycle=cycle)


@pytest.mark.parametrize("delay", [0.0, 3.0])
def test_a_paced_run_holds_every_invariant_at_every_instant(delay):
    jobs = [job(f"j{i}", 1.5 * i, 7.0 + i % 3) for i in range(12)]
    r = simulate(jobs, "adaptive", 1, 2, A100, check=True, cycle=4.0, start_delay=delay)
    assert r.jobs == 12 and all(math.isfinite(f) for f in r.finish)
    assert all(s - a >= delay for s, a in zip(r.start, r.arrival))
