"""Job ids of job arrays: the client reads an array task as ``<array id>_<task>`` (squeue's
fixed-width JobArrayID, the JSON's array fields, a pending array's one record expanded
into its tasks), the planner orders by it, and the hooks rebuild it (TaskProlog: its
environment; Prolog, Epilog: squeue, which is all Slurm gives them) so that the token the
planner signed for a task is the one the Prolog checks."""

from __future__ import annotations

import logging
import stat
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from fastreadsite import BASE, record
from hooksite import T0, make_site, run

from slurm_mig import jobcomment as comments
from slurm_mig.geometry import Placement
from slurm_mig.node.hooks import (
    JobEnv,
    as_array_task,
    check_assignment,
    epilog_main,
    prolog_main,
    task_prolog_main,
)
from slurm_mig.slurm.assignment import Assignment, generate_key, load_key, sign
from slurm_mig.slurm.client import (
    NARROW,
    FastReadError,
    array_task_ids,
    job_from_json,
    jobs_from_fixed_width,
    jobs_from_json,
)
from slurm_mig.slurm.jobrecord import job_sort_key

# -- squeue's fixed-width read ---------------------------------------------------------


def test_a_pending_arrays_tasks_are_jobs_of_their_own() -> None:
    # squeue -r prints the one pending record once per task, each with the array's JobID
    out = b"".join(record(JobID="7", JobArrayID=f"7_{t}") for t in (0, 1, 10, 2))
    assert [j.job_id for j in jobs_from_fixed_width(out)] == ["7_0", "7_1", "7_2", "7_10"]


def test_a_split_task_keeps_its_array_id_and_plain_and_het_jobs_their_jobid() -> None:
    out = (
        record(JobID="12", JobArrayID="7_3")  # split out: a JobID of its own
        + record(JobID="7", JobArrayID="7_4")  # the last task keeps the array's JobID
        + record(JobID="9", JobArrayID="9")
        + record(JobID="11", JobArrayID="10+1")  # a heterogeneous job's component
    )
    assert [j.job_id for j in jobs_from_fixed_width(out)] == ["7_3", "7_4", "9", "11"]


@pytest.mark.parametrize(
    ("job_id", "array_id"), [("7", "7_[0-3]"), ("7", "7_"), ("7_1", "7_1"), ("", "7_1")]
)
def test_an_id_that_does_not_parse_falls_back_to_the_json(job_id: str, array_id: str) -> None:
    with pytest.raises(FastReadError, match="JobArrayID|JobID"):
        jobs_from_fixed_width(record(JobID=job_id, JobArrayID=array_id))


def test_a_filled_array_task_is_read_again_by_its_task_id() -> None:
    filled: list[str] = []
    long = "c" * (dict(NARROW.fields)["Comment"] + 5)
    out = record(NARROW, JobID="7", JobArrayID="7_5", Comment=long) + record(NARROW)
    jobs = jobs_from_fixed_width(out, NARROW, filled=filled)
    assert filled == ["7_5"] and [j.job_id for j in jobs] == [BASE["JobID"]]


# -- squeue --json ----------------------------------------------------------------------

RECORD = {"job_id": 5, "job_state": "PENDING", "partition": "mig", "priority": 0}


@pytest.mark.parametrize(
    ("fields", "job_id"),
    [
        ({"array_job_id": 0, "array_task_id": None}, "5"),  # 22.05, no array
        ({"array_job_id": 1, "array_task_id": 3}, "1_3"),  # 22.05, a split task
        ({"array_job_id": {"set": True, "number": 1}, "array_task_id": 3}, "1_3"),
        (
            {
                "array_job_id": {"set": True, "infinite": False, "number": 1},
                "array_task_id": {"set": True, "infinite": False, "number": 0},
            },
            "1_0",
        ),  # 24.11, 26.05
        (
            {
                "array_job_id": {"set": True, "infinite": False, "number": 0},
                "array_task_id": {"set": False, "infinite": False, "number": 0},
            },
            "5",
        ),
        ({"array_job_id": 1, "array_task_id": 4294967294}, "5"),  # NO_VAL
    ],
)
def test_the_json_names_an_array_task_by_its_task_id(fields: dict, job_id: str) -> None:
    assert job_from_json({**RECORD, **fields}).job_id == job_id


def test_the_jsons_one_pending_array_record_is_one_job_per_task() -> None:
    data = {**RECORD, "job_id": 1, "array_job_id": 1, "array_task_string": "0,2-3%2"}
    jobs = jobs_from_json(data)
    assert [j.job_id for j in jobs] == ["1_0", "1_2", "1_3"]
    assert jobs == [replace(job_from_json(data), job_id=j.job_id) for j in jobs]
    assert jobs_from_json({**RECORD, "array_job_id": 0, "array_task_string": ""}) == [
        job_from_json(RECORD)
    ]


def test_a_task_list_squeue_cut_leaves_those_tasks_out_with_a_warning(caplog) -> None:
    data = {**RECORD, "job_id": 1, "array_job_id": 1, "array_task_string": "0-3,5,7,..."}
    with caplog.at_level(logging.WARNING):
        assert jobs_from_json(data) == []
    assert "SLURM_BITSTR_LEN" in caplog.text and "job array 1" in caplog.text


@pytest.mark.parametrize(
    ("text", "ids"),
    [
        ("0-3", [0, 1, 2, 3]),
        ("1,3-5", [1, 3, 4, 5]),
        ("0-15:4", [0, 4, 8, 12]),
        ("0-9%2", list(range(10))),
        ("7", [7]),
        ("3-1", None),
        ("0-3,5,...", None),
        ("0x1F", None),
        ("", None),
        ("0-99999999", None),  # more tasks than Slurm allows
    ],
)
def test_array_task_lists(text: str, ids: list[int] | None) -> None:
    assert array_task_ids(text) == ids


def test_job_order_puts_an_arrays_tasks_at_the_arrays_id_in_task_order() -> None:
    ids = ["12", "7_10", "x", "7_2", "8", "7", "²"]
    assert sorted(ids, key=job_sort_key) == ["7", "7_2", "7_10", "8", "12", "x", "²"]


# -- the hooks ----------------------------------------------------------------------------

ENV = {"SLURM_JOB_ID": "12", "SLURMD_NODENAME": "node1", "SLURM_JOB_PARTITION": "mig"}


def test_a_tasks_environment_does_not_make_it_an_array_task() -> None:
    # a job submitted from an array task inherits SLURM_ARRAY_*: the TaskProlog knows
    # its job by SLURM_JOB_ID alone (its task record is named by it)
    env = {**ENV, "SLURM_ARRAY_JOB_ID": "7", "SLURM_ARRAY_TASK_ID": "3"}
    job = JobEnv.from_env(env)
    assert (job.job_id, job.own_id) == ("12", "12")


def _assignment(job_id: str) -> Assignment:
    return Assignment(
        job_id, 0, "node1", 0, "A100-40GB", "3g.20gb", Placement(4, 4), 0, 0, 5.0, 0.0
    )


@pytest.fixture
def node(tmp_path: Path):
    """A key, a config naming it, and a fake squeue (beside SLURM_MIG_SCONTROL) that
    prints $tmp/squeue.out (exit $tmp/squeue.rc) and counts its calls."""
    key_file = generate_key(tmp_path / "key")
    squeue = tmp_path / "squeue"
    squeue.write_text(
        "#!/bin/sh\n"
        f'echo "$@" >> {tmp_path}/calls\n'
        f"cat {tmp_path}/squeue.out 2>/dev/null\n"
        f"exit $(cat {tmp_path}/squeue.rc 2>/dev/null || echo 0)\n"
    )
    squeue.chmod(squeue.stat().st_mode | stat.S_IXUSR)
    return SimpleNamespace(
        config=SimpleNamespace(key_file=key_file),
        key=load_key(key_file),
        env={**ENV, "SLURM_MIG_SCONTROL": str(tmp_path / "scontrol")},
        dir=tmp_path,
    )


def _job(node, token_for: str | None) -> JobEnv:
    token = None if token_for is None else sign(_assignment(token_for), node.key)
    env = {**node.env, "SLURM_JOB_COMMENT": comments.parse("").with_token(token).render()}
    return JobEnv.from_env(env)


def _calls(node) -> list[str]:
    path = node.dir / "calls"
    return path.read_text().splitlines() if path.exists() else []


def test_a_plain_jobs_own_token_costs_no_question_to_slurm(node) -> None:
    job = _job(node, "12")
    assert as_array_task(job, node.config, node.env) == job and _calls(node) == []


@pytest.mark.parametrize("token_for", ["7_3", None])
def test_the_prolog_asks_slurm_which_array_task_its_job_is(node, token_for) -> None:
    # -j 7 lists every task of array 7: only the line of JobID 12 counts
    (node.dir / "squeue.out").write_text("7           7_4\n12          7_3\n")
    job = as_array_task(_job(node, token_for), node.config, node.env)
    assert (job.job_id, job.own_id, job.array_unknown) == ("7_3", "12", False)
    assert _calls(node) == ["-h --states=all -r --jobs=12 -O JobID:12,JobArrayID:24"]
    if token_for is not None:
        a = check_assignment(job, node.key, ("A100-40GB",), 3600, 1.0)
        assert isinstance(a, Assignment) and a.job_id == "7_3"


def test_a_token_for_another_task_than_slurm_names_fails_the_job(node) -> None:
    (node.dir / "squeue.out").write_text("12          7_3\n")
    job = as_array_task(_job(node, "7_4"), node.config, node.env)
    refusal = check_assignment(job, node.key, ("A100-40GB",), 3600, 1.0)
    assert (refusal.action, refusal.job_id) == ("fail", "7_3")


@pytest.mark.parametrize("out", ["12          12\n", "13          7_3\n", "12  7_3  x\n"])
def test_a_job_slurm_names_no_array_task_keeps_its_number(node, out: str) -> None:
    (node.dir / "squeue.out").write_text(out)
    job = as_array_task(_job(node, "7_3"), node.config, node.env)
    assert job.job_id == "12"


def test_no_answer_from_slurm_requeues_an_array_tasks_job(node) -> None:
    (node.dir / "squeue.rc").write_text("1\n")
    job = as_array_task(_job(node, "7_3"), node.config, node.env)
    assert (job.job_id, job.array_unknown) == ("12", True)
    refusal = check_assignment(job, node.key, ("A100-40GB",), 3600, 1.0)
    assert (refusal.action, refusal.job_id) == ("requeue", "12")
    # a token for another plain job is another job's, answer or not
    job = as_array_task(_job(node, "13"), node.config, node.env)
    assert check_assignment(job, node.key, ("A100-40GB",), 3600, 1.0).action == "fail"


def test_an_array_tasks_prolog_taskprolog_and_epilog_agree_on_its_ids(tmp_path, capsys) -> None:
    """The Prolog and Epilog see SLURM_JOB_ID 12 only; Slurm (squeue) names it task 7_3,
    the id of its token, instance and records; its task record is named 12, the one
    number the TaskProlog (and the job) knows."""
    site = make_site(tmp_path)
    squeue = tmp_path / "squeue"
    squeue.write_text("#!/bin/sh\necho '7           7_4'\necho '12          7_3'\n")
    squeue.chmod(0o755)
    env = site.env("12", site.comment("7_3"))
    rc, out, err = run(prolog_main, env, capsys)
    assert rc == 0 and out == [] and "prolog job 7_3: created" in err[0]
    [inst] = site.backend().instances()
    assert site.state.job("7_3").uuid == inst.uuid and site.state.job("12") is None
    assert sorted(p.name for p in (site.run_dir / "task").glob("*.json")) == ["12.json"]
    rc, out, _ = run(task_prolog_main, site.task_env(env), capsys)
    assert (rc, out) == (0, [f"export CUDA_VISIBLE_DEVICES={inst.uuid}"])
    rc, _, err = run(epilog_main, env, capsys, t=T0 + 65.0)
    assert rc == 0 and "epilog job 7_3: destroyed" in err[0]
    assert site.backend().instances() == [] and site.ops() == [
        ("create", "7_3"),
        ("destroy", "7_3"),
    ]
    assert list((site.run_dir / "task").glob("*.json")) == []


def test_an_array_task_is_requeued_by_its_task_id_not_its_number(tmp_path, capsys) -> None:
    # Slurm gives the array's last task the array's number, which names every task
    site = make_site(tmp_path)
    squeue = tmp_path / "squeue"
    squeue.write_text("#!/bin/sh\necho '7           7_3'\necho '8           7_0'\n")
    squeue.chmod(0o755)
    env = site.env("7", "no token")  # refused for now: requeued for the planner
    run(prolog_main, env, capsys)
    rc, out, _ = run(task_prolog_main, site.task_env(env), capsys)
    assert rc == 1 and "print slurm-mig: job 7 is requeued and held for the planner" in out
    assert site.scontrol_calls() == [["requeuehold", "7_3"]]


def test_the_planners_afterany_on_an_array_task_is_read_as_its_own():
    from slurm_mig.daemon.cycle.waiting import PLANNER_DEP, dependency_ids

    dep = "afterany:7_0(unfulfilled),afterany:7_1:12(unfulfilled)"
    assert dependency_ids(dep) == ["7_0", "7_1", "12"]
    assert all(PLANNER_DEP.fullmatch(item) for item in dep.split(","))
    assert PLANNER_DEP.fullmatch("afterok:7_0") is None  # a user's own, not the planner's
