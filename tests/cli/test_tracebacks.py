"""The tracebacks an admin met (issue 21) are one line ``slurm-mig: error: <what> (<the
fix>)`` and exit status 2: gres-conf on a node without the NVIDIA driver (every mode the
boot unit runs, which must still fail), the exact planner on a batch of thousands of tasks
(recursion), and ``plan`` on a count without bound."""

from __future__ import annotations

import random
import sys

import fake_pynvml as fake
import pytest

from slurm_mig.cli import main
from slurm_mig.cli import plan as plan_cli
from slurm_mig.geometry import get_model
from slurm_mig.job import Job
from slurm_mig.planner import Batch, exact_search, get_planner
from slurm_mig.planner import exact as exact_mod
from slurm_mig.planner.far import Forest

GRES_MODES = [[], ["--make-nodes"], ["--check-ids"], ["--caps-major", "240"]]


def _nvml_config(tmp_path) -> str:
    cfg = tmp_path / "config.toml"
    cfg.write_text(
        '[nodes]\n"n1" = ["A100-40GB"]\n'
        f'[paths]\nstate_dir = "{tmp_path}/state"\nrun_dir = "{tmp_path}/run"\n'
        f'key_file = "{tmp_path}/key"\n[device]\nbackend = "nvml"\n'
    )
    return str(cfg)


@pytest.fixture
def no_driver(monkeypatch, tmp_path):
    """A node without the NVIDIA driver: no libnvidia-ml.so.1 and no mig-minors table."""
    fake.fake_reset(["A100-40GB"])
    fake.fake_set_driver("missing")
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(
        "slurm_mig.devices.migcaps.MIG_MINORS", str(tmp_path / "nvidia-caps" / "mig-minors")
    )
    return _nvml_config(tmp_path)


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("slurm-mig: error: gres-conf: "), err
    assert "Traceback" not in err
    return err


@pytest.mark.parametrize("mode", GRES_MODES, ids=lambda m: " ".join(m) or "default")
def test_gres_conf_without_the_driver_is_one_line_and_fails(no_driver, capsys, mode):
    rc = main(["gres-conf", "--config", no_driver, "--node", "n1", "--dev", "/nonexistent", *mode])
    assert rc == 2  # the boot unit's ExecStart fails: slurmd stays down (fail closed)
    err = _one_error_line(capsys)
    if mode == ["--check-ids"]:
        assert "NVML Shared Library Not Found" in err and "NVML NVML" not in err
        assert "install the NVIDIA driver" in err
    else:
        assert "mig-minors" in err and "load the NVIDIA driver" in err


def test_gres_conf_check_ids_names_a_driver_not_loaded(no_driver, capsys):
    fake.fake_set_driver("not_loaded")
    assert main(["gres-conf", "--config", no_driver, "--node", "n1", "--check-ids"]) == 2
    assert "load the nvidia kernel module" in _one_error_line(capsys)


def test_gres_conf_check_ids_without_pynvml(no_driver, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml fails
    assert main(["gres-conf", "--config", no_driver, "--node", "n1", "--check-ids"]) == 2
    assert "pip install nvidia-ml-py" in _one_error_line(capsys)


def test_gres_conf_check_ids_without_permission(no_driver, capsys):
    fake.fake_set_driver("ok")
    fake.fake_set_user("alice")  # create/destroy need root
    assert main(["gres-conf", "--config", no_driver, "--node", "n1", "--check-ids"]) == 2
    assert "run as root" in _one_error_line(capsys)


def _tasks(n: int, seed: int = 1) -> list[Job]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        b = rng.uniform(50, 500)
        out.append(Job(f"t{i}", 0.0, {1: b, 2: b / 1.8, 3: b / 2.5, 4: b / 3.1, 7: b / 4.5}))
    return out


def test_exact_plans_a_batch_deeper_than_the_recursion_limit():
    """The search is as deep as the batch has tasks: 1,500 tasks used to end in a
    RecursionError (in the search, and in FAR's pair refinement it starts from)."""
    n = sys.getrecursionlimit() + 500
    model = get_model("A100-40GB")
    plan = exact_mod.plan_exact(Batch(tuple(_tasks(n)), model, 2), time_budget=0.5)
    assert len(plan.tasks) == n and plan.stats["searched"]
    assert plan.makespan <= plan.stats["far_makespan"] * (1 + 1e-9)
    # the daemon's path: [planner] algorithm = "exact" takes the same planner
    daemon_plan = get_planner("exact", time_budget=0.5)(Batch(tuple(_tasks(n)), model, 2))
    assert len(daemon_plan.tasks) == n


def test_far_pair_refinement_of_large_pairs_ends():
    """far on 1,200 tasks and 2 GPUs: each pair re-planned holds >= 256 tasks, which
    used to refine itself again without end."""
    plan = get_planner("far")(Batch(tuple(_tasks(1200)), get_model("A100-40GB"), 2))
    assert len(plan.tasks) == 1200


def test_exact_keeps_fars_plan_above_its_option_limit(monkeypatch, caplog):
    model = get_model("A100-40GB")
    tasks = _tasks(40)
    nodes = Forest.build(model, 1).nodes
    monkeypatch.setattr(exact_search, "EXACT_MAX_OPTIONS", 40 * nodes - 1)
    plan = exact_mod.plan_exact(Batch(tuple(tasks), model, 1), time_budget=5.0)
    assert plan.stats["searched"] is False and plan.stats["explored"] == 0
    assert plan.makespan == pytest.approx(plan.stats["far_makespan"])
    assert "FAR's plan is kept" in caplog.text


def test_exact_search_is_the_same_as_before_it_was_a_loop():
    """The explicit stack visits the nodes the recursive search visited, in order: the
    makespans, proofs and node counts the recursive search gave (measured before the
    change) for one batch on one and on two GPUs."""
    tasks = [Job("a", 0.0, {1: 9.0, 2: 5.0, 3: 3.5, 4: 2.8, 7: 2.0}), *_tasks(7, seed=5)]
    tasks = [Job(f"x{i}", 0.0, dict(t.times)) for i, t in enumerate(tasks)]
    model = get_model("A100-40GB")
    for gpus, want_ms, want_explored in ((1, 395.540705013835, 780), (2, 226.94616916920194, 1303)):
        assign, ms, optimal, explored = exact_mod.exact_schedule(tasks, model, gpus)
        assert (optimal, explored) == (True, want_explored)
        assert ms == pytest.approx(want_ms, rel=1e-12)
        assert sorted(i for a in assign for i in a) == list(range(len(tasks)))


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--gpus", "1000000"], "more than 10,000 GPUs"),
        (["--gpus", "0"], "must be at least 1"),
        (["--planner", "exact", "--time-budget", "1e9"], "at most 3600 s"),
    ],
)
def test_plan_refuses_counts_without_bound(capsys, argv, words):
    with pytest.raises(SystemExit) as stop:  # argparse's error exit
        main(["plan", "rodinia-a100", *argv])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err and err.startswith("slurm-mig: error: plan:")


def test_plan_refuses_more_tasks_than_it_takes(monkeypatch, capsys):
    monkeypatch.setattr(plan_cli, "MAX_TASKS", 15)  # rodinia-a100 has 16
    assert main(["plan", "rodinia-a100"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "16 tasks, more than the 15 one plan takes" in err
    monkeypatch.setattr(plan_cli, "MAX_TASKS", 16)
    assert main(["plan", "rodinia-a100"]) == 0


@pytest.mark.parametrize(
    "argv, words",
    [
        (["simulate", "--workload", "miso-trace", "--gpus", "1000000"], "more than 10,000 GPUs"),
        (
            ["simulate", "--workload", "miso-trace", "--gpus", "2", "--jobs", "10000000"],
            "more than 1,000,000 jobs",
        ),
        (["bound", "miso-trace", "--gpus", "2", "--jobs", "10000000"], "more than 1,000,000 jobs"),
        (["bench", "far", "--reps", "100000000"], "more than 100,000 batches"),
    ],
)
def test_other_commands_refuse_counts_without_bound(capsys, argv, words):
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err and err.startswith(f"slurm-mig: error: {argv[0]}:")
