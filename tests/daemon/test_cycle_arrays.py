"""Job arrays' throttles in the cycle (`slurm_mig.daemon.cycle.arrays`): at most the
throttle minus the tasks running or released of an array are planned, so that the
tasks Slurm would keep pending (JobArrayTaskLimit) hold no slices; the throttle is read
from squeue's JSON, or learned from the tasks Slurm kept back after their release."""

from __future__ import annotations

from support import squeue_job

from slurm_mig.daemon.cycle import CycleInput, Estimate, Hold, Release, plan_cycle
from slurm_mig.daemon.cycle.arrays import array_of, learned_throttle, throttle_of
from slurm_mig.slurm.jobparse import job_from_json, jobs_from_json

T0 = 1_700_000_000.0
NODES = {"gpu01": ("A100-40GB",), "gpu02": ("A100-40GB",)}


def task(array: int, n: int, **fields):
    """Task ``n`` of job array ``array`` (alice's, held, as job_submit.lua leaves it)."""
    return squeue_job(f"{array}_{n}", submit_time=T0 - 100 + n, **fields)


def snapshot(jobs, **kw) -> CycleInput:
    est = {j.job_id: Estimate("train", {"A100-40GB": {1: 600.0, 7: 200.0}}) for j in jobs}
    opts = {"now": T0, "batch_window": 0.0, "nodes": NODES, **kw}
    return CycleInput(jobs=tuple(jobs), estimates=est, **opts)


def tasks_of(result, array: int) -> list[str]:
    return [j for j in result.planned if array_of(j) == str(array)]


def released_fields(result) -> dict[str, dict[str, str]]:
    return {a.job_id: dict(a.fields) for a in result.actions if isinstance(a, Release)}


# --- reading the throttle -------------------------------------------------------------


def test_squeue_json_gives_each_task_its_arrays_throttle_on_every_release():
    old = {"job_id": 3, "array_job_id": 1, "array_task_id": 0, "array_max_tasks": 2}
    new = {
        "job_id": 3,
        "array_job_id": {"set": True, "infinite": False, "number": 1},
        "array_task_id": {"set": True, "infinite": False, "number": 0},
        "array_max_tasks": {"set": True, "infinite": False, "number": 2},
    }
    assert job_from_json(old).array_throttle == job_from_json(new).array_throttle == 2
    pending = {"job_id": 1, "array_job_id": 1, "array_max_tasks": 1, "array_task_string": "2-4%1"}
    assert [(j.job_id, j.array_throttle) for j in jobs_from_json(pending)] == [
        ("1_2", 1),
        ("1_3", 1),
        ("1_4", 1),
    ]
    assert job_from_json({**old, "array_max_tasks": 0}).array_throttle is None  # no limit
    plain = {"job_id": 7, "array_job_id": 0, "array_max_tasks": 0}
    assert job_from_json(plain).array_throttle is None  # not an array task


def test_the_throttle_is_the_lowest_known_and_a_learned_one_is_at_least_one():
    assert throttle_of([task(5, 0, array_throttle=3)], 2) == 2
    assert throttle_of([task(5, 0, array_throttle=0)], None) is None  # no limit
    assert throttle_of([task(5, 0)], None) is None  # unknown (fixed-width read)
    assert learned_throttle(0) == 1 and learned_throttle(4) == 4


# --- the cap --------------------------------------------------------------------------


def test_a_throttled_array_gets_one_task_planned_and_another_users_job_the_rest():
    jobs = [*(task(5, n, array_throttle=1) for n in range(20)), squeue_job("90", user="bob")]
    result = plan_cycle(snapshot(jobs))
    assert tasks_of(result, 5) == ["5_0"] and "90" in result.planned
    assert "throttle" in result.deferred["5_7"] and "%1" in result.deferred["5_7"]


def test_tasks_running_or_released_count_against_the_throttle():
    running = task(5, 0, array_throttle=2, state="RUNNING", held=False, start_time=T0 - 10)
    jobs = [running, *(task(5, n, array_throttle=2) for n in range(1, 6))]
    first = plan_cycle(snapshot(jobs))
    assert tasks_of(first, 5) == ["5_1"]
    # 5_1 released, not started yet: no room for another
    fields = released_fields(first)["5_1"]
    out = task(5, 1, array_throttle=2, held=False, reason="None", **_record(fields))
    again = plan_cycle(snapshot([running, out, *jobs[2:]]))
    assert not [a for a in again.actions if isinstance(a, Hold)]  # 5_1 stays out
    assert tasks_of(again, 5) == []
    assert "2 running or released" in again.deferred["5_2"]


def test_an_unthrottled_array_is_planned_like_other_jobs():
    jobs = [task(5, n, array_throttle=0) for n in range(4)]
    assert len(tasks_of(plan_cycle(snapshot(jobs)), 5)) == 4


def _record(fields: dict[str, str]) -> dict[str, str]:
    """The squeue fields a release wrote."""
    return {"admin_comment": fields["AdminComment"], "comment": fields.get("Comment", "")}


# --- learning it (the fixed-width read shows no throttle) ------------------------------


def test_tasks_slurm_keeps_back_are_held_the_throttle_learned_and_slices_go_to_others():
    """The attack of issue 34: ``--array=0-19%1`` read without its throttle. Slurm runs
    one released task and keeps the others pending; they are held again at once (no
    start_timeout wait), the throttle is learned, and bob's job is planned."""
    jobs = [task(5, n) for n in range(20)]
    first = plan_cycle(snapshot(jobs))
    out = released_fields(first)
    assert len(out) > 1  # unknown throttle: planned like any jobs
    runs = min(out, key=lambda j: int(j.split("_")[1]))  # the one Slurm starts
    shown = []
    for n in range(20):
        jid = f"5_{n}"
        if jid == runs:
            shown.append(task(5, n, state="RUNNING", held=False, reason="None",
                              start_time=T0 + 5, **_record(out[jid])))  # fmt: skip
        elif jid in out:
            shown.append(task(5, n, held=False, reason="JobArrayTaskLimit", **_record(out[jid])))
        else:
            shown.append(task(5, n))
    bob = squeue_job("90", user="bob", submit_time=T0 + 1)
    second = plan_cycle(snapshot([*shown, bob], now=T0 + 10))
    holds = {a.job_id for a in second.actions if isinstance(a, Hold)}
    assert holds == set(out) - {runs}
    assert second.throttles == {"5": 1} and not second.limited  # no back-off: the cap
    assert tasks_of(second, 5) == [] and "90" in second.planned
    # held again, with the throttle the daemon remembers: still none of them planned
    held = [j if j.state == "RUNNING" else task(5, int(j.job_id[2:])) for j in shown]
    third = plan_cycle(snapshot([*held, bob], now=T0 + 20, throttles={"5": 1}))
    assert tasks_of(third, 5) == [] and "throttle" in third.deferred["5_19"]


def test_once_a_task_ends_the_next_one_is_planned():
    done = task(5, 0, state="COMPLETED", held=False, start_time=T0 - 50, end_time=T0 - 5)
    jobs = [done, *(task(5, n) for n in range(1, 6))]
    result = plan_cycle(snapshot(jobs, throttles={"5": 1}))
    assert tasks_of(result, 5) == ["5_1"]


def test_a_learned_throttle_below_the_tasks_seen_running_is_raised():
    running = [task(5, n, state="RUNNING", held=False, start_time=T0 - 10) for n in range(3)]
    result = plan_cycle(snapshot([*running, task(5, 3)], throttles={"5": 1}))
    assert result.throttles == {"5": 3} and tasks_of(result, 5) == []
