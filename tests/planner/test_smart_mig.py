"""SMART-MIG's schedulers and controller on small hand-checked cases: Fig. 2's
configurations, the slot Alg. 1 picks, MET's marginal energy, CEDF's classes and GPU
order, the controller's matrix and top-k, and the smart-mig policy end to end."""

from __future__ import annotations

import random
import sys

import numpy as np
import pytest

from slurm_mig.geometry import get_model
from slurm_mig.planner.decisions import Create, Destroy, Place
from slurm_mig.planner.edf import DeadlinePolicy, marginal_energy, throughput_class
from slurm_mig.planner.mig_configs import configs_for, realise
from slurm_mig.planner.registry import get_policy
from slurm_mig.planner.smartmig import (
    N_CONFIGS,
    STATE_SIZE,
    Controller,
    SmartMigPolicy,
    features,
    top_k,
)
from slurm_mig.planner.snapshot import ClusterSnapshot, Gpu, Instance, Job
from slurm_mig.power import A100_CURVE_W
from slurm_mig.sim.deadline_workload import deadline_jobs
from slurm_mig.sim.engine import simulate

A100 = get_model("A100-40GB")
CFG = {c.number: c for c in configs_for(A100)}
LINEAR = {1: 700.0, 2: 350.0, 3: 700 / 3, 4: 175.0, 7: 100.0}


def test_fig2_configurations_from_geometry():
    sizes = [CFG[n].sizes for n in range(1, 13)]
    assert sizes == [
        (7,), (4, 3), (4, 2, 1), (4, 1, 1, 1), (3, 3), (3, 2, 2), (3, 2, 1, 1),
        (3, 1, 1, 1, 1), (2, 2, 2, 1), (2, 2, 1, 1, 1), (2, 1, 1, 1, 1, 1), (1,) * 7,
    ]  # fmt: skip


def _gpu(index: int, config: int, running: dict[int, str] | None = None) -> Gpu:
    """A GPU in ``config`` with jobs on some of its slots (by position in the layout)."""
    part = CFG[config].realisations[0]
    running = running or {}
    inst = tuple(
        Instance(s, running.get(k), busy_until=1e9 if k in running else None)
        for k, s in enumerate(part)
    )
    return Gpu(index, inst)


def _snap(gpus, jobs, now=0.0) -> ClusterSnapshot:
    return ClusterSnapshot(now=now, model=A100, gpus=tuple(gpus), pending={j.id: j for j in jobs})


def _places(decisions):
    return [(op.job, op.gpu, op.slot.size) for op in decisions.ops if isinstance(op, Place)]


@pytest.mark.parametrize(
    ("due", "want"),
    [
        (120.0, (1, 1)),  # the 1g of the packed GPU meets it: slowest slot that does
        (50.0, (1, 3)),  # 1g (100 s) late, the packed GPU's 3g (35 s) meets it
        (10.0, (0, 7)),  # nothing meets it: the slot that finishes first, the 7g
    ],
)
def test_alg1_edf_most_packed_picks(due, want):
    # GPU 0: config 1 (7g) idle; GPU 1: config 8 (3g + four 1g), a job on its first 1g
    gpus = [_gpu(0, 1), _gpu(1, 8, {0: "busy"})]
    job = Job("j", 0.0, {1: 100.0, 2: 50.0, 3: 35.0, 4: 27.0, 7: 15.0}, deadline=due)
    pol = DeadlinePolicy("edf", configs="1,8")
    assert _places(pol.decide(_snap(gpus, [job]))) == [("j", *want)]


def test_alg1_takes_jobs_earliest_deadline_first():
    gpus = [_gpu(0, 1)]  # one 7g: only one job starts
    early = Job("early", 5.0, LINEAR, deadline=300.0)
    late = Job("late", 0.0, LINEAR, deadline=900.0)
    got = _places(DeadlinePolicy("edf", configs="1").decide(_snap(gpus, [late, early], 10.0)))
    assert got == [("early", 0, 7)]


def test_cedf_classes():
    top = {7: 100.0}
    # 4g at >= 80 % of 7g's throughput but 2g below: class 2, etc.
    linear = Job("a", 0, {1: 700.0, 2: 350.0, 3: 233.0, 4: 175.0, **top})
    cls2 = Job("b", 0, {1: 400.0, 2: 200.0, 3: 130.0, 4: 120.0, **top})
    cls3 = Job("c", 0, {1: 200.0, 2: 110.0, 3: 105.0, 4: 100.0, **top})
    cls4 = Job("d", 0, {1: 110.0, 2: 105.0, 3: 100.0, 4: 100.0, **top})
    assert [throughput_class(j, A100) for j in (linear, cls2, cls3, cls4)] == [1, 2, 3, 4]


def test_cedf_orders_by_class_then_deadline_and_gpus_by_mean_size():
    # GPU 0: config 12 (seven 1g, mean 1); GPU 1: config 1 (7g, mean 7)
    gpus = [_gpu(0, 12), _gpu(1, 1)]
    capped = Job("capped", 0, {1: 110.0, 2: 105.0, 3: 100.0, 4: 100.0, 7: 100.0}, deadline=50.0)
    linear = Job("linear", 0, LINEAR, deadline=2000.0)
    got = _places(DeadlinePolicy("cedf", configs="12,1").decide(_snap(gpus, [capped, linear])))
    # class 1 (linear) goes first despite its later deadline, onto the largest-slot GPU's
    # slowest slot meeting it (the 7g, the only one); the capped job then misses its
    # deadline everywhere and takes the fastest slot left (a 1g, 110 s)
    assert got == [("linear", 1, 7), ("capped", 0, 1)]
    # EDF (most packed) takes the capped job first instead
    got_edf = _places(DeadlinePolicy("edf", configs="12,1").decide(_snap(gpus, [capped, linear])))
    assert got_edf[0] == ("capped", 1, 7)


def test_met_marginal_energy_hand_case():
    curve = A100_CURVE_W
    # a 3g job of 100 s on a GPU where a 1g job ends in 40 s:
    # 40 s x (P4 - P1) + 60 s x (P3 - P0)
    want = 40 * (curve[4] - curve[1]) + 60 * (curve[3] - curve[0])
    assert marginal_energy([(40.0, 1)], 0.0, 3, 100.0, curve) == pytest.approx(want)


def test_met_prefers_the_busy_gpu_when_both_meet_the_deadline():
    # a 1g on the GPU already running 6 slices costs P7 - P6 = 0.8 W; on the idle one
    # P1 - P0 = 79 W
    gpus = [_gpu(0, 12), _gpu(1, 12, {k: f"r{k}" for k in range(6)})]
    job = Job("j", 0.0, LINEAR, deadline=1000.0)
    got = _places(DeadlinePolicy("met", configs="12").decide(_snap(gpus, [job])))
    assert got == [("j", 1, 1)]


# -- the controller -----------------------------------------------------------


def _random_controller(seed: int) -> Controller:
    rng = np.random.default_rng(seed)
    w = {
        "w1": rng.normal(size=(STATE_SIZE, 16)),
        "b1": rng.normal(size=16),
        "w2": rng.normal(size=(16, 16)),
        "b2": rng.normal(size=16),
        "wa": rng.normal(size=(16, N_CONFIGS * N_CONFIGS)) * 3,
        "ba": rng.normal(size=N_CONFIGS * N_CONFIGS),
    }
    return Controller(w)


@pytest.mark.parametrize("seed", range(5))
def test_controller_output_is_row_stochastic(seed):
    ctrl = _random_controller(seed)
    state = np.random.default_rng(seed + 100).random(STATE_SIZE)
    h = ctrl.matrix(state)
    assert h.shape == (N_CONFIGS, N_CONFIGS)
    assert np.all(h >= 0)
    np.testing.assert_allclose(h.sum(axis=1), 1.0, rtol=0, atol=1e-12)


def test_shipped_controller_loads_and_is_row_stochastic():
    ctrl = Controller.load()
    h = ctrl.matrix(np.full(STATE_SIZE, 0.1))
    np.testing.assert_allclose(h.sum(axis=1), 1.0, atol=1e-9)


@pytest.mark.parametrize("k", [1, 2, 3, 5, 12])
def test_top_k_keeps_k_entries(k):
    row = np.random.default_rng(k).dirichlet(np.ones(N_CONFIGS))
    out = top_k(row, k)
    assert np.count_nonzero(out) == k
    assert out.sum() == pytest.approx(1.0)
    kept = np.flatnonzero(out)
    assert set(kept) == set(np.argsort(-row)[:k])
    # renormalised in proportion
    np.testing.assert_allclose(out[kept], row[kept] / row[kept].sum())


def test_top_k_respects_allowed():
    row = np.linspace(1, 12, 12)
    row /= row.sum()
    allowed = np.zeros(12, dtype=bool)
    allowed[[0, 3]] = True
    out = top_k(row, 3, allowed)
    assert np.flatnonzero(out).tolist() == [0, 3]


def test_features_hand_case():
    gpus = [_gpu(0, 1), _gpu(1, 8, {0: "busy"})]
    jobs = [Job("a", 0.0, {7: 100.0}, deadline=50.0), Job("b", 0.0, {7: 5000.0}, deadline=9000)]
    v = features(_snap(gpus, jobs), [CFG[1], CFG[8]], penalty_s=0.0)
    assert v.shape == (STATE_SIZE,)
    assert v[0] == 0.5 and v[7] == 0.5 and v[:12].sum() == 1.0
    dur = v[12:20]  # 100 s in [60, 120); 5000 s beyond 3840
    assert dur[1] == 0.5 and dur[-1] == 0.5
    assert v[-1] == pytest.approx(1 / 14)  # one busy compute slice of 14


class _Always(Controller):
    """A controller that sends every configuration to ``target``."""

    def __init__(self, target: int) -> None:
        super().__init__({})
        object.__setattr__(self, "target", target)

    def matrix(self, state):
        h = np.full((N_CONFIGS, N_CONFIGS), 1e-6)
        h[:, self.target - 1] = 1.0
        return h / h.sum(axis=1, keepdims=True)


def test_smart_mig_repartitions_only_where_no_job_is_in_the_way():
    # GPU 0 idle in config 1: goes to 12 (seven 1g). GPU 1 runs a job on its 3g at slice
    # 4 (config 8); config 12 cannot hold it, so its row is cut to the configurations
    # that can, and top-1 takes the likeliest of those (all tie: the lowest, 2 = 4g + 3g)
    gpus = [_gpu(0, 1), _gpu(1, 8, {4: "busy"})]
    pol = SmartMigPolicy(k=1, every=1, configs="1,8", controller=_Always(12))
    d = pol.decide(_snap(gpus, []))
    assert d.stats["repartitions"] == ((0, 1, 12), (1, 8, 2))
    created = sorted((op.gpu, op.slot.size, op.slot.placement.start) for op in d.ops
                     if isinstance(op, Create))  # fmt: skip
    destroyed = sorted((op.gpu, op.slot.size, op.slot.placement.start) for op in d.ops
                       if isinstance(op, Destroy))  # fmt: skip
    assert created == [(0, 1, s) for s in range(7)] + [(1, 4, 0)]
    assert destroyed == [(0, 7, 0)] + [(1, 1, s) for s in range(4)]  # never the busy 3g


def test_smart_mig_policy_runs_in_the_simulator():
    jobs = deadline_jobs(A100, rate_multiplier=20.0, jobs=150, seed=3, daily=False)
    pol = get_policy("smart-mig")
    r = simulate(jobs, pol, 1, 4, A100, 0, check=True)
    assert r.jobs == 150 and all(f >= a for f, a in zip(r.finish, r.arrival))
    assert pol.repartitions >= 0


def test_smart_mig_draws_are_seeded():
    gpus = [_gpu(i, 1) for i in range(8)]
    jobs = deadline_jobs(A100, rate_multiplier=20.0, jobs=20, seed=1, daily=False)
    snap = _snap(gpus, jobs)
    ctrl = _random_controller(3)
    a = SmartMigPolicy(k=3, controller=ctrl).draw(snap, [CFG[1]] * 8, random.Random(5))
    b = SmartMigPolicy(k=3, controller=ctrl).draw(snap, [CFG[1]] * 8, random.Random(5))
    assert a.after == b.after
    assert all(row.sum() == pytest.approx(1.0) and np.count_nonzero(row) <= 3 for row in a.probs)


def test_realise_keeps_running_instances():
    g = _gpu(0, 8, {4: "busy"})  # 3g at slot 4 busy
    lay = realise(CFG[2], g)  # 4g + 3g: the 3g at 4 holds it
    assert {(s.size, s.placement.start) for s in lay.slots} == {(4, 0), (3, 4)}
    assert [(s.size, s.placement.start) for s in lay.free] == [(4, 0)]


def test_smart_mig_inference_imports_no_torch():
    import subprocess

    code = (
        "import sys; from slurm_mig.planner.registry import get_policy; "
        "p = get_policy('smart-mig'); import numpy as np; "
        "from slurm_mig.planner.smartmig import STATE_SIZE; "
        "p.controller.matrix(np.zeros(STATE_SIZE)); print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_train_controller_cli_writes_a_loadable_seeded_checkpoint(tmp_path, capsys):
    from slurm_mig.cli import main

    outs = []
    for run in ("a", "b"):
        out = tmp_path / run / "ctrl.npz"
        argv = ["train-controller", "--out", str(out), "--iterations", "2", "--episodes", "1",
                "--gpus", "2", "--rate-multiplier", "4", "--seed", "3", "--save-every", "1"]  # fmt: skip
        assert main(argv) == 0, capsys.readouterr().err
        outs.append(out)
    text = capsys.readouterr().out
    assert "controller:" in text and "reward curve:" in text
    a, b = (Controller.load(p) for p in outs)
    for k in a.weights:  # seeded: the same options give the same controller
        np.testing.assert_array_equal(a.weights[k], b.weights[k])
    base = outs[0].parent
    assert (base / "ctrl-it0001.npz").exists() and (base / "ctrl-it0002.npz").exists()
    assert (base / "ctrl-state.pt").exists() and (base / "ctrl.png").exists()
    rows = (base / "ctrl.csv").read_text().splitlines()
    assert rows[0].startswith("iteration,") and len(rows) == 3
    h = a.matrix(np.full(STATE_SIZE, 0.2))
    np.testing.assert_allclose(h.sum(axis=1), 1.0, atol=1e-6)


@pytest.mark.parametrize("policy", ["edf", "met", "cedf", "smart-mig"])
def test_a_job_asking_for_a_size_no_configuration_has_still_runs(policy):
    # one GPU in configuration 1 (7g only); j0 asks for a 1g: it runs on a 1g outside
    # the configuration once the GPU is free instead of waiting forever
    jobs = [
        Job("j0", 0.0, {s: 1.0 for s in (1, 2, 3, 4, 7)}, size=1),
        Job("j1", 0.0, {3: 1.0, 4: 1.0, 7: 1.0}),
    ]
    pol = get_policy(policy, configs="1")
    r = simulate(jobs, pol, 1, 1, A100, 0, check=True)
    assert r.jobs == 2 and all(f > 0 for f in r.finish)


def test_smart_mig_on_a_model_without_the_12_configurations_runs_as_cedf():
    a30 = get_model("A30-24GB")
    jobs = [
        Job(f"j{i}", float(i), {1: 40.0, 2: 22.0, 4: 12.0}, deadline=i + 30.0) for i in range(6)
    ]
    r = simulate(jobs, get_policy("smart-mig"), 1, 2, a30, 0, check=True)
    c = simulate(jobs, get_policy("cedf"), 1, 2, a30, 0, check=True)
    assert r.finish == c.finish


def _train(out, iterations, *extra):
    from slurm_mig.cli import main

    argv = ["train-controller", "--out", str(out), "--iterations", str(iterations),
            "--episodes", "1", "--gpus", "2", "--rate-multiplier", "4", "--seed", "5",
            "--save-every", "1", "--no-plot", *extra]  # fmt: skip
    return main(argv)


def _curve(path):
    import csv

    rows = list(csv.DictReader(path.open()))
    return [{k: v for k, v in r.items() if k != "wall_s"} for r in rows]


def test_train_controller_resumed_in_stages_equals_one_run(tmp_path, capsys):
    whole, staged = tmp_path / "whole" / "c.npz", tmp_path / "staged" / "c.npz"
    assert _train(whole, 3) == 0
    assert _train(staged, 1) == 0
    assert _train(staged, 3, "--resume") == 0, capsys.readouterr().err
    for name in ("c-it0003.npz", "c.npz"):
        a, b = Controller.load(whole.parent / name), Controller.load(staged.parent / name)
        for k in a.weights:
            np.testing.assert_array_equal(a.weights[k], b.weights[k])
    assert _curve(whole.with_suffix(".csv")) == _curve(staged.with_suffix(".csv"))
    assert len(_curve(staged.with_suffix(".csv"))) == 3


def test_train_controller_resume_refuses_a_missing_or_foreign_state(tmp_path, capsys):
    out = tmp_path / "c.npz"
    assert _train(out, 2, "--resume") != 0
    err = capsys.readouterr().err
    assert "no " in err and "c-state.pt" in err and "Traceback" not in err
    assert _train(out, 1) == 0
    capsys.readouterr()
    assert _train(out, 1, "--resume") != 0  # already there
    err = capsys.readouterr().err
    assert "already at iteration 1" in err and "Traceback" not in err
    from slurm_mig.cli import main

    other = ["train-controller", "--out", str(out), "--iterations", "2", "--episodes", "1",
             "--gpus", "3", "--rate-multiplier", "4", "--seed", "5", "--no-plot", "--resume"]  # fmt: skip
    assert main(other) != 0
    err = capsys.readouterr().err
    assert "another run" in err and "Traceback" not in err


def test_the_vs_cedf_reward_is_each_steps_cost_less_cedfs_and_adds_up_to_the_gap():
    from dataclasses import replace

    from slurm_mig.sim.controller_train import TrainSettings, run_episode

    ctrl = Controller.load()  # the shipped controller
    s = TrainSettings(gpus=2, rate_multiplier=4.0)
    assert s.reward == "vs-cedf"  # the default
    plain = run_episode(ctrl, replace(s, reward="absolute"), 10_003)
    diff = run_episode(ctrl, s, 10_003)
    assert (plain.et, plain.et_cedf) == (diff.et, diff.et_cedf)  # the same day, the same runs
    assert len(diff.rewards) == len(plain.rewards) > 10
    # a day's steps add up to its ET (CEDF's = 100), less the cost before the first draw
    assert sum(plain.rewards) == pytest.approx(-100 * plain.et / plain.et_cedf, abs=0.5)
    assert sum(diff.rewards) == pytest.approx(
        100 * (diff.et_cedf - diff.et) / diff.et_cedf, abs=0.5
    )
    # step by step: the same draws, each less what CEDF's run cost over its interval
    assert any(abs(d - p) > 1e-9 for d, p in zip(diff.rewards, plain.rewards))
