"""Completion-time objectives (slurm_mig.planner.sequencing) and the ``objective``
option of the far and auto policies: valid plans, the makespan bound held, mean
completion no worse than FAR's, the input plan untouched."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_mig.geometry import get_model
from slurm_mig.job import Job
from slurm_mig.plan import validate_plan
from slurm_mig.planner.batch import Batch, get_planner
from slurm_mig.planner.concat import plan_batches
from slurm_mig.planner.far_planner import plan_far
from slurm_mig.planner.registry import UnknownPolicy, get_policy
from slurm_mig.planner.sequencing import (
    BALANCED_SLACK,
    DEFAULT_OBJECTIVE,
    OBJECTIVES,
    accepts_objective,
    check_objective,
    mean_completion,
    objective_options,
    sequence_plan,
)
from slurm_mig.workload import load_task_source

A100 = get_model("A100-40GB")
RODINIA = tuple(load_task_source("rodinia-a100", A100))


def wsum(plan, weights=None):
    return sum((weights or {}).get(t.id, 1.0) * t.end for t in plan.tasks if not t.running)


def synthetic(n: int, seed: int = 0) -> tuple[Job, ...]:
    """Jobs from seconds to hours that speed up on larger slices by varying amounts."""
    import random

    rng = random.Random(seed)
    out = []
    for i in range(n):
        base, par = rng.lognormvariate(5, 1.2), rng.random()
        out.append(Job(f"t{i}", 0.0, {s: base * (7 / s) ** par for s in A100.planner_sizes}))
    return tuple(out)


def check(plan, tasks, far, objective):
    assert validate_plan(plan.to_json(), tasks) == []
    assert {t.id for t in plan.tasks} == {t.id for t in tasks}
    assert wsum(plan) <= wsum(far) * (1 + 1e-12)
    if objective == "balanced":
        assert plan.makespan <= far.makespan * BALANCED_SLACK * (1 + 1e-9)


def test_the_names_and_the_default():
    assert OBJECTIVES == ("makespan", "jct", "balanced")
    assert DEFAULT_OBJECTIVE == "balanced"
    assert check_objective(" JCT ") == "jct"
    with pytest.raises(ValueError, match=r"objective 'fast': choose one of makespan, jct"):
        check_objective("fast")


@pytest.mark.parametrize("gpus", [1, 2])
def test_rodinia_short_jobs_first_at_no_cost_in_makespan(gpus):
    far = plan_far(Batch(RODINIA, A100, gpus))
    for objective in ("balanced", "jct"):
        plan = sequence_plan(far, RODINIA, objective)
        check(plan, RODINIA, far, objective)
        assert plan.stats["objective"] == objective
        assert plan.stats["input_makespan"] == far.makespan
    balanced = sequence_plan(far, RODINIA, "balanced")
    # LPT starts the long kernels first: shortest first on one GPU more than halves it
    if gpus == 1:
        assert mean_completion(balanced) < 0.5 * mean_completion(far)


def test_makespan_is_fars_plan_unchanged():
    far = plan_far(Batch(RODINIA, A100, 1))
    assert sequence_plan(far, RODINIA, "makespan") is far
    plan = get_planner("far", objective="makespan")(Batch(RODINIA, A100, 1))
    assert plan.to_json()["tasks"] == far.to_json()["tasks"]


def test_the_input_plan_is_not_changed():
    far = plan_far(Batch(RODINIA, A100, 1))
    before = far.to_json()
    tasks_before = [(t.id, dict(t.times)) for t in RODINIA]
    for objective in OBJECTIVES:
        sequence_plan(far, RODINIA, objective)
    assert far.to_json() == before
    assert [(t.id, dict(t.times)) for t in RODINIA] == tasks_before


def test_a_larger_batch_on_several_gpus_holds_the_bound():
    tasks = synthetic(60, seed=4)
    far = plan_far(Batch(tasks, A100, 4))
    balanced = sequence_plan(far, tasks, "balanced")
    check(balanced, tasks, far, "balanced")
    assert mean_completion(balanced) < mean_completion(far)
    tighter = sequence_plan(far, tasks, "balanced", slack=1.0)
    check(tighter, tasks, far, "jct")
    assert tighter.makespan <= far.makespan * (1 + 1e-9)


def test_a_plan_off_the_tree_is_reordered_within_each_instance_only():
    # concatenated batches use a slot twice on a GPU: only Smith's rule per instance
    far = plan_batches([RODINIA[:8], RODINIA[8:]], A100, 1)
    plan = sequence_plan(far, RODINIA, "jct")
    check(plan, RODINIA, far, "jct")
    assert plan.stats["sequencing"] == "smith"
    assert plan.makespan == pytest.approx(far.makespan)
    assert plan.reconfigurations == far.reconfigurations
    runs = {(t.gpu, t.slot) for t in far.tasks}
    assert runs == {(t.gpu, t.slot) for t in plan.tasks}


def test_weights_put_heavy_jobs_first():
    tasks = synthetic(12, seed=2)
    far = plan_far(Batch(tasks, A100, 1))
    heavy = max(tasks, key=lambda t: t.times[7]).id
    weights = {t.id: (50.0 if t.id == heavy else 1.0) for t in tasks}
    plan = sequence_plan(far, tasks, "jct", weights=weights)
    assert validate_plan(plan.to_json(), tasks) == []
    assert wsum(plan, weights) <= wsum(far, weights) * (1 + 1e-12)
    plain = sequence_plan(far, tasks, "jct")
    end = {t.id: t.end for t in plan.tasks}
    assert end[heavy] <= {t.id: t.end for t in plain.tasks}[heavy]
    weighted = tuple(Job(t.id, 0.0, t.times, weight=weights[t.id]) for t in tasks)
    assert sequence_plan(far, weighted, "jct").to_json() == plan.to_json()
    with pytest.raises(ValueError, match="positive"):
        sequence_plan(far, tasks, "jct", weights={tasks[0].id: 0.0})


def test_slack_below_one_is_refused():
    far = plan_far(Batch(RODINIA, A100, 1))
    with pytest.raises(ValueError, match="slack"):
        sequence_plan(far, RODINIA, "balanced", slack=0.9)


@pytest.mark.parametrize("name", ["far", "auto"])
def test_the_policies_take_the_objective(name):
    batch = Batch(RODINIA, A100, 1)
    base = get_policy(name).plan(batch)
    for objective in ("balanced", "jct"):
        plan = get_policy(name, objective=objective).plan(batch)
        check(plan, RODINIA, base, objective)
        assert plan.planner == name and plan.stats["objective"] == objective
    with pytest.raises(ValueError, match="objective 'fastest'"):
        get_policy(name, objective="fastest")
    with pytest.raises(ValueError, match="slack"):
        get_policy(name, objective="balanced", slack=0.5)


def test_which_policies_take_an_objective():
    assert accepts_objective("far", "balanced") and accepts_objective("auto", "jct")
    assert accepts_objective("far-pcie", "jct")  # its own names: makespan, jct, start...
    assert not accepts_objective("far-pcie", "balanced")
    assert not accepts_objective("exact", "balanced")
    assert not accepts_objective("baseline", "jct")
    assert objective_options("far", "jct") == {"objective": "jct"}
    assert objective_options("first-fit", "balanced") == {}
    assert objective_options("far", "") == {}
    with pytest.raises(UnknownPolicy):
        get_policy("exact", objective="jct")


def test_the_simulator_passes_the_option():
    from slurm_mig.sim.policies import get_policy as sim_policy

    assert sim_policy("far", objective="jct").name == "far"


def test_onto_busy_gpus_the_plan_stays_valid():
    from slurm_mig.planner.snapshot import ClusterSnapshot, Gpu, Instance

    slot7 = A100.tree[0].slot
    gpus = (Gpu(0, (Instance(slot7, "old", 0.0, 5.0),), 0.0), Gpu(1))
    start = ClusterSnapshot(0.0, A100, gpus)
    batch = Batch(RODINIA, A100, 2, start=start)
    far = get_policy("far").plan(batch)
    plan = get_policy("far", objective="balanced").plan(batch)
    assert validate_plan(plan.to_json()) == []
    assert plan.makespan <= far.makespan * (1 + 1e-9)  # the policies: step 1 only there
    assert wsum(plan) <= wsum(far) * (1 + 1e-12)
    # given the start, the whole plan is re-sequenced; the running job stays
    again = sequence_plan(far, RODINIA, "balanced", start=start)
    assert validate_plan(again.to_json()) == []
    assert [t for t in again.tasks if t.running] == [t for t in far.tasks if t.running]
    assert again.initial_instances == far.initial_instances
    assert again.makespan <= far.makespan * BALANCED_SLACK * (1 + 1e-9)
    assert wsum(again) <= wsum(far) * (1 + 1e-12)
    assert sequence_plan(far, RODINIA, "balanced").stats["sequencing"] == "smith"


@st.composite
def batches(draw):
    n = draw(st.integers(1, 9))
    gpus = draw(st.integers(1, 2))
    tasks = []
    for i in range(n):
        base = draw(st.floats(0.05, 500.0))
        par = draw(st.floats(0.0, 1.0))
        sizes = draw(st.sets(st.sampled_from(A100.planner_sizes), min_size=1))
        times = {s: (base * (7 / s) ** par if s in sizes else math.inf) for s in A100.planner_sizes}
        tasks.append(Job(f"j{i}", 0.0, times))
    return tuple(tasks), gpus


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches(), st.sampled_from(["balanced", "jct"]))
def test_property_valid_bounded_and_never_worse(batch, objective):
    tasks, gpus = batch
    far = plan_far(Batch(tasks, A100, gpus))
    before = far.to_json()
    plan = sequence_plan(far, tasks, objective)
    check(plan, tasks, far, objective)
    assert far.to_json() == before
