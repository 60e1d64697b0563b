"""contrib/job_submit.lua in a real slurmctld: it refuses malformed hints with
Python's message, strips planner tokens, holds MIG jobs and leaves other jobs alone.
The case table of tests/test_hints.py drives both parsers."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from test_hints import BAD, GOOD, fuzz_comments

from slurm_mig.slurm.hints import HintError, parse_hints

from .cluster import LocalSlurm

LUA = Path(__file__).resolve().parents[2] / "contrib" / "job_submit.lua"


@pytest.fixture(scope="module")
def cluster(slurm_shared) -> LocalSlurm:
    return slurm_shared(nodes=("n1",), job_submit_lua=LUA)


def python_verdict(comment: str) -> str | None:
    """None when Python accepts the comment, else its message."""
    try:
        parse_hints(comment, now=time.time())  # sbatch's check: a deadline date in the past
    except HintError as exc:
        return str(exc)
    return None


def lua_verdict(cluster: LocalSlurm, comment: str) -> str | None:
    """None when sbatch accepted a MIG job with this comment, else the Lua's message."""
    res = cluster.try_sbatch("true", partition="mig", comment=comment)
    if res.returncode == 0:
        return None
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("sbatch: error: slurm-mig:")]
    assert lines, res.stderr
    assert "Batch job submission failed" in res.stderr
    return lines[0].removeprefix("sbatch: error: ")


def show(cluster: LocalSlurm, job_id: str) -> dict[str, str]:
    out = cluster.run("scontrol", "show", "job", "-o", job_id).stdout
    fields = {}
    for word in out.split():
        key, _, value = word.partition("=")
        fields[key] = value
    return fields


@pytest.mark.parametrize(("comment", "shown", "fix"), BAD)
def test_malformed_hint_is_refused_at_sbatch_with_pythons_message(
    cluster: LocalSlurm, comment: str, shown: str, fix: str
) -> None:
    message = lua_verdict(cluster, comment)
    assert message is not None, f"job_submit.lua accepted {comment!r}"
    assert message == python_verdict(comment)
    assert shown in message and fix in message


@pytest.mark.parametrize("comment", [c for c, _ in GOOD if c])
def test_good_hint_is_accepted_and_the_job_held(cluster: LocalSlurm, comment: str) -> None:
    res = cluster.try_sbatch("true", partition="mig", comment=comment)
    assert res.returncode == 0, res.stderr
    assert res.stderr == ""  # nothing said to the user on success
    fields = show(cluster, res.stdout.strip())
    assert fields["JobState"] == "PENDING"
    assert fields["Priority"] == "0"
    assert fields["Reason"] == "JobHeldUser"


def test_lua_and_python_agree_on_near_miss_comments(cluster: LocalSlurm) -> None:
    comments = fuzz_comments(80, seed=11)
    disagreements = [
        (c, python_verdict(c), lua_verdict(cluster, c))
        for c in comments
        if python_verdict(c) != lua_verdict(cluster, c)
    ]
    assert not disagreements
    assert any(python_verdict(c) is None for c in comments)
    assert any(python_verdict(c) is not None for c in comments)


def test_planner_tokens_are_stripped_at_submit(cluster: LocalSlurm) -> None:
    job = cluster.sbatch(
        "true", partition="mig", comment="run 7 mig:mem=1G migplan=v1.forged.x end"
    )
    assert show(cluster, job)["Comment"] == "run"  # scontrol -o splits at spaces
    out = cluster.run("squeue", "-h", "-j", job, "-O", "Comment:200").stdout.strip()
    assert out == "run 7 mig:mem=1G end"
    only = cluster.sbatch("true", partition="mig", comment="migplan=v1.a.b")
    out = cluster.run("squeue", "-h", "-j", only, "-O", "Comment:200").stdout.strip()
    assert out == "(null)"  # emptied


def test_jobs_outside_the_mig_partition_are_untouched(cluster: LocalSlurm) -> None:
    job = cluster.sbatch("echo ran", partition="debug", comment="mig:mem=12X migplan=kept")
    assert cluster.wait_job(job, ["COMPLETED"]) == "COMPLETED"
    assert cluster.job_output(job) == "ran\n"
    out = cluster.run("squeue", "-h", "--states=all", "-j", job, "-O", "Comment:200").stdout
    assert out.strip() == "mig:mem=12X migplan=kept"
    default = cluster.sbatch("true", comment="mig:mem=12X")  # default partition: debug
    assert cluster.wait_job(default, ["COMPLETED"]) == "COMPLETED"


def test_mig_with_other_partitions_is_refused(cluster: LocalSlurm) -> None:
    res = cluster.try_sbatch("true", partition="mig,debug")
    assert res.returncode != 0
    assert (
        "sbatch: error: slurm-mig: the mig partition cannot be combined with others "
        "(mig,debug); submit to mig alone" in res.stderr
    )


def test_held_job_runs_once_released_by_root(cluster: LocalSlurm) -> None:
    job = cluster.sbatch("echo released", partition="mig", comment="mig:time=1m")
    assert show(cluster, job)["JobState"] == "PENDING"
    cluster.run("scontrol", "release", job)
    assert cluster.wait_job(job, ["COMPLETED"]) == "COMPLETED"
    assert cluster.job_output(job) == "released\n"


def test_modify_refuses_a_malformed_hint_on_a_mig_job(cluster: LocalSlurm) -> None:
    job = cluster.sbatch("true", partition="mig", comment="mig:mem=1G")
    res = cluster.run("scontrol", "update", f"JobId={job}", "Comment=mig:mem=12X", check=False)
    assert res.returncode != 0
    assert show(cluster, job)["Comment"] == "mig:mem=1G"
    verdict = python_verdict("mig:mem=12X")
    if cluster.install.version >= (23, 2):  # from 23.02 the user reads why
        assert verdict in res.stderr
    else:  # 22.05 tells the user nothing; the admin reads why in slurmctld's log
        log = (cluster.root / "log" / "slurmctld.log").read_text()
        assert verdict in log and verdict not in res.stderr
    # the planner's update (a good hint and a token) passes, token kept
    comment = "mig:mem=2G migplan=v1.payload.mac"
    cluster.run("scontrol", "update", f"JobId={job}", f"Comment={comment}")
    out = cluster.run("squeue", "-h", "-j", job, "-O", "Comment:200").stdout.strip()
    assert out == comment


def test_modify_leaves_other_partitions_alone(cluster: LocalSlurm) -> None:
    job = cluster.sbatch("true", "--hold", partition="debug")
    cluster.run("scontrol", "update", f"JobId={job}", "Comment=mig:mem=12X")
    out = cluster.run("squeue", "-h", "-j", job, "-O", "Comment:200").stdout.strip()
    assert out == "mig:mem=12X"
    # moving it into the MIG partition checks the comment it brings along
    res = cluster.run("scontrol", "update", f"JobId={job}", "Partition=mig", check=False)
    assert res.returncode != 0
    cluster.run("scancel", job)


def test_lua_hold_is_a_user_hold_that_root_can_make_an_admin_hold(cluster: LocalSlurm) -> None:
    mine = cluster.sbatch("true", partition="mig", user="nobody")
    theirs = cluster.sbatch("sleep 60", partition="mig", user="nobody")
    assert show(cluster, mine)["Reason"] == "JobHeldUser"
    # the owner can release a user hold ...
    cluster.run("scontrol", "release", mine, user="nobody")
    assert cluster.wait_job(mine, ["COMPLETED"]) == "COMPLETED"
    # ... but not the admin hold root puts on top
    cluster.run("scontrol", "hold", theirs)
    assert show(cluster, theirs)["Reason"] == "JobHeldAdmin"
    res = cluster.run("scontrol", "release", theirs, user="nobody", check=False)
    assert res.returncode != 0 and "Access/permission denied" in res.stderr
    assert show(cluster, theirs)["JobState"] == "PENDING"
    cluster.run("scancel", theirs)


def test_mig_as_the_default_partition_is_checked_too(slurm_shared) -> None:
    cluster = slurm_shared(nodes=("d1",), job_submit_lua=LUA, default_partition="mig")
    res = cluster.try_sbatch("true", comment="mig:mem=12X")
    assert res.returncode != 0
    assert f"sbatch: error: {python_verdict('mig:mem=12X')}" in res.stderr
    job = cluster.sbatch("true", comment="mig:mem=12G")
    assert (show(cluster, job)["Partition"], show(cluster, job)["Priority"]) == ("mig", "0")
