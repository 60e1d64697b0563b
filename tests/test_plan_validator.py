"""The independent plan validator (constraints 1-3 of Section 2.2) and the metrics."""

from __future__ import annotations

import copy
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import A30_FIVE, shared_file

from slurm_mig.geometry import get_model
from slurm_mig.job import Job
from slurm_mig.plan import PlanError, check_plan, lower_bound, rho, sigma, validate_plan
from slurm_mig.planner import Batch
from slurm_mig.planner.far_planner import plan_far
from slurm_mig.workload import load_tasks

A30 = get_model("A30-24GB")
A100 = get_model("A100-40GB")

TASKS = A30_FIVE  # tests/hand_batches.py says why


@pytest.fixture(scope="module")
def base() -> dict:
    plan = plan_far(Batch(tuple(TASKS), A30), refine_phase=False)
    data = json.loads(json.dumps(plan.to_json()))
    assert validate_plan(data, TASKS) == []
    return data


@pytest.fixture
def plan(base) -> dict:
    return copy.deepcopy(base)


def _task(data, tid):
    return next(t for t in data["tasks"] if t["id"] == tid)


def _op(data, op, profile, start):
    return next(
        r
        for r in data["reconfigurations"]
        if r["op"] == op and r["profile"] == profile and r["placement"]["start"] == start
    )


def _errors_with(data, phrase, tasks=TASKS):
    errors = validate_plan(data, tasks)
    assert errors, "the tampered plan was accepted"
    hits = [e for e in errors if phrase in e]
    assert hits, errors
    return errors


def test_base_plan_is_the_hand_schedule(base):
    got = {
        t["id"]: (t["profile"], t["placement"]["start"], t["start"], t["end"])
        for t in base["tasks"]
    }
    assert got == {
        "A": ("4g.24gb", 0, pytest.approx(0.13), pytest.approx(8.13)),
        "D": ("2g.12gb", 0, pytest.approx(8.35), pytest.approx(11.35)),
        "B": ("1g.6gb", 2, pytest.approx(8.46), pytest.approx(14.46)),
        "C": ("1g.6gb", 3, pytest.approx(8.57), pytest.approx(13.57)),
        "E": ("1g.6gb", 0, pytest.approx(11.56), pytest.approx(13.56)),
    }


def test_plan_json_contract(base):
    """The keys and meanings of DESIGN.md's plan contract."""
    assert base["gpu_model"] == "A30-24GB"
    assert base["gpus"] == 1
    assert base["makespan"] == pytest.approx(max(t["end"] for t in base["tasks"]))
    assert base["lower_bound"] == pytest.approx(lower_bound(TASKS, A30))
    for t in base["tasks"]:
        assert {"id", "gpu", "profile", "placement", "slices", "start", "end", "batch"} <= set(t)
        p = A30.profile(t["profile"])
        assert set(t["placement"]) == {"start", "size"}
        assert t["placement"]["size"] == p.memory_slices
        start = t["placement"]["start"]
        assert t["slices"] == list(range(start, start + p.compute_slices))
        assert t["batch"] == 0
    for r in base["reconfigurations"]:
        assert {"gpu", "op", "profile", "placement", "start", "end"} <= set(r)
        assert r["op"] in ("create", "destroy")


def test_far_plan_validates_rodinia():
    tasks = load_tasks(shared_file("far-reference/rodinia_A100_mean_long.csv"), A100)
    for gpus in (1, 2):
        for refine in (False, True):
            plan = plan_far(Batch(tuple(tasks), A100, gpus), refine_phase=refine)
            data = json.loads(json.dumps(plan.to_json()))
            assert validate_plan(data, tasks) == []
            check_plan(data, tasks)  # does not raise


def test_validator_without_tasks_accepts(base):
    assert validate_plan(base) == []


# --- constraint (1): one task per compute slice at a time ---------------------


def test_tasks_sharing_a_slice_overlap(plan):
    # D (2g@0, slices 0-1) and E (1g@0, slice 0): put E on D's instance, overlapping D
    e = _task(plan, "E")
    d = _task(plan, "D")
    e.update(profile="2g.12gb", placement={"start": 0, "size": 2}, slices=[0, 1])
    e["start"], e["end"] = d["start"] + 1.0, d["start"] + 1.0 + 1.5
    errors = _errors_with(plan, "overlap in time")
    assert any("'D'" in x and "'E'" in x for x in errors if "overlap in time" in x)


def test_overlap_on_shared_slice_of_different_instances(plan):
    # D runs on 2g@0 (slices 0-1) over [8.35, 11.35]; put E on 1g@1 at [9, 11]
    e = _task(plan, "E")
    e.update(placement={"start": 1, "size": 1}, slices=[1], start=9.0, end=11.0)
    errors = _errors_with(plan, "slice 1: tasks")
    assert any("'D'" in x and "'E'" in x for x in errors if "overlap in time" in x)


def test_same_instance_back_to_back_tasks_overlapping(plan):
    # C moves onto B's 1g@2 and starts before B ends
    c = _task(plan, "C")
    c.update(placement={"start": 2, "size": 1}, slices=[2])
    _errors_with(plan, "overlap in time")


# --- constraint (2): live instances are disjoint legal placements -------------


def test_create_overlapping_live_instance(plan):
    # 2g@0 is live over [8.35, 11.35]; creating 1g@1 at 9.0 overlaps it
    plan["reconfigurations"].append(
        {
            "gpu": 0,
            "op": "create",
            "profile": "1g.6gb",
            "placement": {"start": 1, "size": 1},
            "start": 9.0,
            "end": 9.11,
        }
    )
    errors = _errors_with(plan, "overlaps live instance")
    assert len(errors) == 1, errors


def test_missing_destroy_makes_creates_overlap(plan):
    plan["reconfigurations"].remove(_op(plan, "destroy", "4g.24gb", 0))
    errors = _errors_with(plan, "overlaps live instance")
    assert all("overlaps live instance" in e for e in errors)


def test_illegal_placement_for_profile(plan):
    b = _task(plan, "B")
    b["placement"] = {"start": 1, "size": 2}
    b["profile"] = "2g.12gb"
    _errors_with(plan, "not legal")


def test_illegal_placement_in_reconfiguration(plan):
    op = _op(plan, "create", "2g.12gb", 0)
    op["placement"] = {"start": 1, "size": 2}
    _errors_with(plan, "not legal")


def test_wrong_placement_size_for_profile(plan):
    _task(plan, "A")["placement"] = {"start": 0, "size": 2}
    _errors_with(plan, "not legal")


def test_unknown_profile(plan):
    _task(plan, "A")["profile"] = "3g.18gb"
    _errors_with(plan, "3g.18gb")


def test_slices_disagreeing_with_placement(plan):
    _task(plan, "D")["slices"] = [1, 2]
    _errors_with(plan, "slices")


# --- constraint (3): sequential reconfigurations, tasks on existing instances --


def test_reconfigurations_overlapping_in_time(plan):
    op = _op(plan, "create", "1g.6gb", 3)  # [8.46, 8.57] after 1g@2's [8.35, 8.46]
    op["start"], op["end"] = 8.40, 8.51
    errors = _errors_with(plan, "at the same time")
    assert len(errors) == 1, errors


def test_create_shorter_than_hardware(plan):
    op = _op(plan, "create", "1g.6gb", 3)
    op["end"] = op["start"] + 0.05  # hardware needs 0.11 s
    errors = _errors_with(plan, "hardware needs")
    assert len(errors) == 1, errors


def test_destroy_shorter_than_hardware(plan):
    op = _op(plan, "destroy", "2g.12gb", 0)
    op["end"] = op["start"] + 0.01
    _errors_with(plan, "hardware needs")


def test_task_starts_before_its_create_ends(plan):
    c = _task(plan, "C")  # its 1g@3 is created over [8.46, 8.57]
    c["start"], c["end"] = 8.50, 13.50
    errors = _errors_with(plan, "'C': no instance")
    assert len(errors) == 1, errors


def test_task_runs_after_its_instance_is_destroyed(plan):
    op = _op(plan, "destroy", "2g.12gb", 0)  # D runs until 11.35
    op["start"], op["end"] = 11.0, 11.1
    errors = _errors_with(plan, "'D': no instance")
    assert len(errors) == 1, errors


def test_task_on_instance_never_created(plan):
    plan["reconfigurations"].remove(_op(plan, "create", "1g.6gb", 2))
    _errors_with(plan, "'B': no instance")


def test_destroy_of_nonexistent_instance(plan):
    plan["reconfigurations"].append(
        {
            "gpu": 0,
            "op": "destroy",
            "profile": "1g.6gb",
            "placement": {"start": 1, "size": 1},
            "start": 20.0,
            "end": 20.1,
        }
    )
    errors = _errors_with(plan, "does not exist")
    assert len(errors) == 1, errors


def test_bad_op_name(plan):
    _op(plan, "create", "1g.6gb", 2)["op"] = "split"
    _errors_with(plan, "create or destroy")


def test_reconfiguration_on_gpu_outside_plan(plan):
    """A plan for 1 GPU may not reconfigure a GPU 3."""
    plan["reconfigurations"].append(
        {
            "gpu": 3,
            "op": "create",
            "profile": "4g.24gb",
            "placement": {"start": 0, "size": 4},
            "start": 0.0,
            "end": 0.13,
        }
    )
    _errors_with(plan, "gpu 3")


def test_task_on_gpu_outside_plan(plan):
    _task(plan, "B")["gpu"] = 1
    _errors_with(plan, "outside")


def test_negative_or_reversed_interval(plan):
    a = _task(plan, "A")
    a["start"], a["end"] = a["end"], a["start"]
    _errors_with(plan, "bad interval", tasks=None)


# --- the batch: every task once, for its time ------------------------------------


def test_missing_task(plan):
    plan["tasks"] = [t for t in plan["tasks"] if t["id"] != "E"]
    errors = _errors_with(plan, "'E': scheduled 0 times")
    assert len(errors) == 1, errors
    assert validate_plan(plan) == []  # without the batch the rest is fine


def test_duplicate_task(plan):
    plan["tasks"].append(copy.deepcopy(_task(plan, "B")))
    _errors_with(plan, "'B': scheduled 2 times")


def test_task_not_in_batch(plan):
    _task(plan, "E")["id"] = "Z"
    errors = validate_plan(plan, TASKS)
    assert any("'Z'" in e and "not in the batch" in e for e in errors), errors
    assert any("'E': scheduled 0 times" in e for e in errors), errors


def test_wrong_duration(plan):
    _task(plan, "B")["end"] -= 1.0
    errors = _errors_with(plan, "needs 6.000000s")
    assert len(errors) == 1, errors


def test_task_on_size_it_cannot_run(plan):
    tasks = [Job(t.id, 0.0, {**t.times, 1: math.inf}) if t.id == "B" else t for t in TASKS]
    _errors_with(plan, "cannot run on size 1", tasks=tasks)


def test_bad_header():
    assert validate_plan({"gpus": 1, "tasks": []})
    assert validate_plan({"gpu_model": "V100", "gpus": 1})


def test_check_plan_raises(plan):
    _task(plan, "B")["end"] -= 1.0
    with pytest.raises(PlanError, match="'B'"):
        check_plan(plan, TASKS)


# --- initial instances (static partitions) ------------------------------------


def _static(instances, tasks, ops=()):
    return {
        "gpu_model": "A30-24GB",
        "gpus": 2,
        "initial_instances": [
            {"gpu": g, "profile": p, "placement": {"start": s, "size": z}}
            for g, p, s, z in instances
        ],
        "tasks": [
            {
                "id": tid,
                "gpu": g,
                "profile": p,
                "placement": {"start": s, "size": z},
                "start": a,
                "end": b,
            }
            for tid, g, p, s, z, a, b in tasks
        ],
        "reconfigurations": [
            {
                "gpu": g,
                "op": op,
                "profile": p,
                "placement": {"start": s, "size": z},
                "start": a,
                "end": b,
            }
            for g, op, p, s, z, a, b in ops
        ],
    }


STATIC = [(0, "2g.12gb", 0, 2), (0, "2g.12gb", 2, 2), (1, "4g.24gb", 0, 4)]


def test_initial_instances_are_live_from_the_start():
    data = _static(
        STATIC,
        [
            ("a", 0, "2g.12gb", 0, 2, 0.0, 5.0),
            ("b", 0, "2g.12gb", 2, 2, 0.0, 3.0),
            ("c", 0, "2g.12gb", 2, 2, 3.0, 4.0),
            ("d", 1, "4g.24gb", 0, 4, 0.0, 9.0),
        ],
    )
    assert validate_plan(data) == []


def test_create_over_initial_instance_without_destroy():
    data = _static(
        STATIC,
        [("a", 0, "1g.6gb", 0, 1, 1.0, 2.0)],
        ops=[(0, "create", "1g.6gb", 0, 1, 0.0, 0.11)],
    )
    errors = validate_plan(data)
    assert any("overlaps live instance" in e for e in errors), errors


def test_destroy_initial_instance_then_create():
    data = _static(
        STATIC,
        [("a", 0, "1g.6gb", 0, 1, 0.21, 2.0), ("b", 0, "2g.12gb", 2, 2, 0.0, 9.0)],
        ops=[
            (0, "destroy", "2g.12gb", 0, 2, 0.0, 0.1),
            (0, "create", "1g.6gb", 0, 1, 0.1, 0.21),
        ],
    )
    assert validate_plan(data) == []
    # the task may not run on the destroyed initial instance afterwards
    data["tasks"].append(
        {
            "id": "c",
            "gpu": 0,
            "profile": "2g.12gb",
            "placement": {"start": 0, "size": 2},
            "start": 1.0,
            "end": 2.0,
        }
    )
    errors = validate_plan(data)
    assert any("'c': no instance" in e for e in errors), errors


def test_overlapping_initial_instances():
    data = _static([(0, "4g.24gb", 0, 4), (0, "1g.6gb", 3, 1)], [])
    errors = validate_plan(data)
    assert any("overlap" in e for e in errors), errors


# --- metrics ----------------------------------------------------------------


def test_lower_bound_rho_sigma():
    tasks = [Job("a", 0.0, {1: 10.0, 2: 4.0, 4: 3.0}), Job("b", 0.0, {1: math.inf, 2: 6.0, 4: 2.0})]
    # min works: a 8 (size 2), b 8 (size 4); 4 slices per A30
    assert lower_bound(tasks, A30) == pytest.approx(4.0)
    assert lower_bound(tasks, A30, gpus=2) == pytest.approx(2.0)
    assert rho(5.0, 4.0) == pytest.approx(1.25)
    assert sigma(6.0, 4.0) == pytest.approx(1.5)
    assert rho(1.0, 0.0) == math.inf


def test_rodinia_bound():
    tasks = load_tasks(shared_file("far-reference/rodinia_A100_mean_long.csv"), A100)
    assert lower_bound(tasks, A100) == pytest.approx(10.365, abs=1e-3)


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**400), 10**400)
    | st.floats()
    | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
_FIELDS = st.sampled_from(["id", "gpu", "profile", "placement", "slices", "start", "end", "op"])


@settings(max_examples=300, deadline=None)
@given(
    header=st.dictionaries(st.sampled_from(["gpu_model", "gpus"]), _JSON),
    items=st.lists(
        st.dictionaries(_FIELDS, _JSON | st.just({"start": 0.5, "size": 4})), max_size=4
    ),
    key=st.sampled_from(["tasks", "reconfigurations", "initial_instances"]),
)
def test_any_json_gets_a_list_of_violations_never_an_exception(header, items, key):
    # "tasks": 5, "tasks": [5], "gpu": 0.5 ... were tracebacks or were read as valid
    data = {"gpu_model": "A100-40GB", "gpus": 1, **header, key: items}
    errors = validate_plan(data)
    assert isinstance(errors, list) and all(isinstance(e, str) for e in errors)
    if items and key == "tasks" and header == {}:
        assert errors  # none of these random tasks is a valid one
