"""Jobs no MIG slice can run as Slurm holds them (issue 34, holes 5 and 7): a
heterogeneous job's component and a job on more than one node. job_submit.lua refuses
both (tests/e2e/test_job_submit.py); one that got in anyway (queued before the Lua, let
in by an admin) is held with one reason that explain shows, never planned, never
released, and a job held again loses the token and GRES record of its earlier plan."""

from __future__ import annotations

from dataclasses import replace

import pytest
from support import plan_jobs
from support import squeue_job as job

from slurm_mig import jobcomment as comments
from slurm_mig.daemon.cycle import Hold, Note, Release, admin_comment_for
from slurm_mig.daemon.cycle.actions import held_again
from slurm_mig.daemon.cycle.problems import shape_problem
from slurm_mig.explain import explain
from slurm_mig.geometry import Placement
from slurm_mig.slurm.assignment import Assignment, sign

NOW = 10_000.0
MODELS = ("A100-40GB",)
HET = "it is a component of a heterogeneous job, which cannot run on MIG slices"
MULTI = "it asks for 2 nodes and a MIG slice is on one"


def _cycle(jobs):
    return plan_jobs(jobs, nodes=("gpu01", "gpu02"), now=NOW)


def _released(job_id: str) -> tuple[str, str]:
    """The Comment (with a token) and AdminComment a release of ``job_id`` left."""
    a = Assignment(
        job_id, 0, "gpu02", 0, "A100-40GB", "7g.40gb", Placement(0, 8), 1, 0, 60.0, NOW - 5
    )
    comment = comments.parse("run mig:time=1m").with_token(sign(a, b"k" * 32)).render()
    return comment, admin_comment_for(a)


def _of(result, kind):
    return {a.job_id: a for a in result.actions if isinstance(a, kind)}


def test_shape_problem_names_the_fix() -> None:
    assert shape_problem(job("1")) is None
    assert shape_problem(job("1", het_job=True)).startswith(HET)
    assert "submit each component as a job of its own" in shape_problem(job("1", het_job=True))
    assert shape_problem(job("1", node_count=2)).startswith(MULTI)
    assert "-N 1" in shape_problem(job("1", node_count=2))


@pytest.mark.parametrize(("fields", "why"), [({"het_job": True}, HET), ({"node_count": 2}, MULTI)])
def test_a_held_job_no_slice_can_run_is_noted_never_planned(fields, why) -> None:
    bad, good = job("7", comment="mig:time=1m", **fields), job("8", comment="mig:time=1m")
    result = _cycle([bad, good])
    assert "8" in result.planned and "7" not in result.planned
    assert "7" not in _of(result, Release) and "7" not in _of(result, Hold)
    note = _of(result, Note)["7"]
    assert note.text.startswith(why)
    fields = dict(note.fields)
    noted = replace(bad, comment=fields["Comment"], admin_comment=fields["AdminComment"])
    assert f"not planned: {note.text}" in explain(noted, None, NOW)["lines"]
    again = _cycle([noted, good])  # steady: nothing more to write, no loop
    assert "7" not in again.planned and not _of(again, Note) and "7" not in _of(again, Hold)


@pytest.mark.parametrize("fields", [{"het_job": True}, {"node_count": 2}])
def test_a_released_or_requeued_one_is_held_again_without_its_token(fields) -> None:
    """Hole 7: a multi-node job requeued by the Prolog of its second node came back
    pending with the same token and record, and went out again on them."""
    comment, record = _released("7")
    for state in ({}, {"restart_count": 1}):  # released and not started; requeued
        bad = job(
            "7", held=False, reason="None", comment=comment, admin_comment=record,
            required_nodes="gpu02", **fields, **state,
        )  # fmt: skip
        result = _cycle([bad])
        hold = _of(result, Hold)["7"]
        assert "7" not in result.planned and "7" not in _of(result, Release)
        assert hold.reason == shape_problem(bad) and hold.scrub
        assert hold.comment == "run mig:time=1m"  # the token gone, the user's text kept


def test_held_again_scrubs_only_a_job_with_an_earlier_plan() -> None:
    comment, record = _released("5")
    plain = Hold("5", "not planned yet")
    assert held_again(plain, job("5", comment="mig:time=1m")) is plain
    with_token = held_again(plain, job("5", comment=comment + " [slurm-mig: a note]"))
    assert with_token == plain  # the same hold, whatever it clears
    assert with_token.scrub and with_token.comment == "run mig:time=1m [slurm-mig: a note]"
    # a token its owner removed: the record says it was released (its GRES may remain)
    record_only = held_again(plain, job("5", comment="run", admin_comment=record))
    assert record_only.scrub and record_only.comment is None
    assert "token and GRES record cleared" in record_only.describe()
