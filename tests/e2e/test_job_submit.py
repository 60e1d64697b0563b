"""contrib/job_submit.lua in a real slurmctld: it refuses malformed hints and over-long
comments with Python's message, strips planner tokens users write (at sbatch and at
scontrol update), holds MIG jobs and leaves other jobs alone. The case table of
tests/test_hints.py drives both parsers."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from test_hints import BAD, GOOD, fuzz_comments

from slurm_mig.geometry import Placement
from slurm_mig.memory.wrapper import with_mem_hint
from slurm_mig.slurm import comment as comments
from slurm_mig.slurm.assignment import Assignment, sign
from slurm_mig.slurm.comment import without_tokens
from slurm_mig.slurm.hints import MAX_USER_COMMENT, HintError, comment_problem, parse_hints

from .cluster import LocalSlurm

LUA = Path(__file__).resolve().parents[2] / "contrib" / "job_submit.lua"
USER = "nobody"
USER_UID = "65534"  # sbatch --uid takes a number (26.05 refuses a name)


@pytest.fixture(scope="module")
def cluster(slurm_shared) -> LocalSlurm:
    # a MIG node's gres.conf: Slurm itself then accepts --gres=gpu and the Lua must refuse it
    return slurm_shared(nodes=("n1",), job_submit_lua=LUA, gres={"n1": ["A100-40GB"]})


def python_verdict(comment: str) -> str | None:
    """None when Python accepts the comment, else its message (the Lua's order: tokens
    removed, then the length, then the hint)."""
    clean = without_tokens(comment)
    problem = comment_problem(clean)
    if problem:
        return problem
    try:
        parse_hints(clean, now=time.time())  # sbatch's check: a deadline date in the past
    except HintError as exc:
        return str(exc)
    return None


def lua_verdict(cluster: LocalSlurm, comment: str) -> str | None:
    """None when sbatch accepted a MIG job with this comment, else the Lua's message."""
    res = cluster.try_sbatch("true", partition="mig", comment=comment, user=USER_UID)
    if res.returncode == 0:
        return None
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("sbatch: error: slurm-mig:")]
    assert lines, res.stderr
    assert "Batch job submission failed" in res.stderr
    return lines[0].removeprefix("sbatch: error: ")


def comment_of(cluster: LocalSlurm, job_id: str) -> str:
    """The job's whole Comment ("(null)" when it has none)."""
    res = cluster.run("squeue", "-h", "--states=all", "-j", job_id, "-O", "Comment:1100")
    return res.stdout.strip()


def token(job_id: str, profile: str, placement: tuple[int, int], issued: float) -> str:
    """A genuine token (the key does not matter to Slurm)."""
    a = Assignment(
        job_id, 0, "n1", 0, "A100-40GB", profile, Placement(*placement), 1, 0, 60.0, issued
    )
    return sign(a, b"k" * 32)


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
    res = cluster.try_sbatch("true", partition="mig", comment=comment, user=USER_UID)
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
        "true", partition="mig", comment="run 7 mig:mem=1G migplan=v1.forged.x end", user=USER_UID
    )
    assert show(cluster, job)["Comment"] == "run"  # scontrol -o splits at spaces
    out = cluster.run("squeue", "-h", "-j", job, "-O", "Comment:200").stdout.strip()
    assert out == "run 7 mig:mem=1G end"
    only = cluster.sbatch("true", partition="mig", comment="migplan=v1.a.b", user=USER_UID)
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
    job = cluster.sbatch("echo released", partition="mig", comment="mig:time=1m", user=USER_UID)
    assert show(cluster, job)["JobState"] == "PENDING"
    cluster.run("scontrol", "release", job)
    assert cluster.wait_job(job, ["COMPLETED"]) == "COMPLETED"
    assert cluster.job_output(job) == "released\n"


def test_modify_refuses_a_malformed_hint_on_a_mig_job(cluster: LocalSlurm) -> None:
    job = cluster.sbatch("true", partition="mig", comment="mig:mem=1G", user=USER_UID)
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


def test_lua_hold_is_a_user_hold_only_the_planner_lifts(cluster: LocalSlurm) -> None:
    mine = cluster.sbatch("true", partition="mig", user="nobody")
    assert show(cluster, mine)["Reason"] == "JobHeldUser"
    # the owner cannot release it: the planner need not make it an admin hold
    res = cluster.run("scontrol", "release", mine, user="nobody", check=False)
    assert res.returncode != 0
    assert show(cluster, mine)["JobState"] == "PENDING"
    assert show(cluster, mine)["Reason"] == "JobHeldUser"
    if cluster.install.version >= (23, 2):  # from 23.02 the user reads why
        assert "released by the slurm-mig planner" in res.stderr
    # the owner may still hold it, change its comment and cancel it
    cluster.run("scontrol", "hold", mine, user="nobody")
    cluster.run("scontrol", "update", f"JobId={mine}", "Comment=mig:time=1m", user="nobody")
    res = cluster.run("scontrol", "release", mine, user="nobody", check=False)
    assert res.returncode != 0 and show(cluster, mine)["JobState"] == "PENDING"
    # the planner (root) releases it, in a list with others
    other = cluster.sbatch("true", partition="mig", user="nobody")
    cluster.run("scontrol", "release", f"{mine},{other}")
    assert cluster.wait_job(mine, ["COMPLETED"]) == "COMPLETED"
    assert cluster.wait_job(other, ["COMPLETED"]) == "COMPLETED"


def test_mig_as_the_default_partition_is_checked_too(slurm_shared) -> None:
    cluster = slurm_shared(nodes=("d1",), job_submit_lua=LUA, default_partition="mig")
    res = cluster.try_sbatch("true", comment="mig:mem=12X", user=USER_UID)
    assert res.returncode != 0
    assert f"sbatch: error: {python_verdict('mig:mem=12X')}" in res.stderr
    job = cluster.sbatch("true", comment="mig:mem=12G", user=USER_UID)
    assert (show(cluster, job)["Partition"], show(cluster, job)["Priority"]) == ("mig", "0")


def test_over_long_comment_is_refused_at_sbatch_with_the_limit(cluster: LocalSlurm) -> None:
    # A 913-character comment left no room for the planner's token: the update failed
    # every cycle and the job (and those behind it) never ran.
    long = "x" * (MAX_USER_COMMENT + 1)
    assert lua_verdict(cluster, long) == python_verdict(long) == comment_problem(long)
    assert "more than 512 in the mig partition" in python_verdict(long)
    assert lua_verdict(cluster, "y" * 913) == comment_problem("y" * 913)
    fits = "z" * MAX_USER_COMMENT
    job = cluster.sbatch("true", partition="mig", comment=fits, user=USER_UID)
    assert comment_of(cluster, job) == fits
    # tokens a user writes are removed before the comment is measured
    padded = "w" * 500 + " migplan=" + "t" * 300
    job = cluster.sbatch("true", partition="mig", comment=padded, user=USER_UID)
    assert comment_of(cluster, job) == "w" * 500
    # other partitions keep Slurm's own limit
    other = cluster.sbatch("true", "--hold", partition="debug", comment="v" * 900)
    assert comment_of(cluster, other) == "v" * 900
    cluster.run("scancel", other)


def test_a_user_cannot_write_an_older_token_back(cluster: LocalSlurm) -> None:
    # The replay: a released job is held again and re-planned (smaller slice) at the
    # same restart count; its owner writes the first token (larger slice) back into the
    # Comment with scontrol update. job_modify removes every migplan= word a user writes.
    job = cluster.sbatch("sleep 60", partition="mig", comment="train", user=USER_UID)
    first = token(job, "7g.40gb", (0, 8), 1000.0)
    second = token(job, "3g.20gb", (4, 4), 2000.0)
    cluster.run("scontrol", "update", f"JobId={job}", f"Comment=train migplan={first}")
    assert comment_of(cluster, job) == f"train migplan={first}"  # the planner's write
    cluster.run("scontrol", "update", f"JobId={job}", f"Comment=train migplan={second}")
    res = cluster.run(
        "scontrol", "update", f"JobId={job}", f"Comment=train migplan={first}", user=USER
    )
    assert res.returncode == 0
    assert comment_of(cluster, job) == "train"  # no token: the Prolog requeues it
    cluster.run("scontrol", "update", f"JobId={job}", f"Comment=train migplan={second}")
    cluster.run(
        "scontrol", "update", f"JobId={job}", f"Comment=a migplan={first} b migplan=x", user=USER
    )
    assert comment_of(cluster, job) == "a b"
    # the owner may still change the rest of the comment, hints included
    cluster.run("scontrol", "update", f"JobId={job}", "Comment=mig:mem=2G now", user=USER)
    assert comment_of(cluster, job) == "mig:mem=2G now"
    cluster.run("scancel", job)


def test_modify_refuses_an_over_long_comment_from_the_user(cluster: LocalSlurm) -> None:
    job = cluster.sbatch("sleep 60", partition="mig", comment="short", user=USER_UID)
    long = "u" * (MAX_USER_COMMENT + 1)
    res = cluster.run(
        "scontrol", "update", f"JobId={job}", f"Comment={long}", user=USER, check=False
    )
    assert res.returncode != 0
    assert comment_of(cluster, job) == "short"
    if cluster.install.version >= (23, 2):  # from 23.02 the user reads why
        assert comment_problem(long) in res.stderr
    else:  # 22.05: the admin reads why in slurmctld's log
        assert comment_problem(long) in (cluster.root / "log" / "slurmctld.log").read_text()
    # the planner (root) writes past the user's limit: token and note
    note = f"short migplan={token(job, '3g.20gb', (4, 4), 1.0)} [slurm-mig: " + "n" * 180 + "]"
    cluster.run("scontrol", "update", f"JobId={job}", f"Comment={note}")
    assert comment_of(cluster, job) == note
    cluster.run("scancel", job)


def test_a_job_moved_into_the_mig_partition_loses_its_tokens(cluster: LocalSlurm) -> None:
    job = cluster.sbatch(
        "true", "--hold", partition="debug", comment="mine migplan=2abc", user=USER_UID
    )
    for _ in range(20):  # 26.05 may answer EAGAIN ("temporarily unavailable"): try again
        res = cluster.run(
            "scontrol", "update", f"JobId={job}", "Partition=mig", user=USER, check=False
        )
        if "temporarily unavailable" not in res.stderr:
            break
        time.sleep(0.5)
    assert res.returncode == 0, res.stderr
    assert cluster.job_field(job, "Partition") == "mig"
    assert comment_of(cluster, job) == "mine"
    cluster.run("scancel", job)


def test_comments_python_writes_pass_the_lua_unchanged(cluster: LocalSlurm) -> None:
    # The writes: mig-run's mem= update (as the job's user, through job_modify) and the
    # planner's note. Each Comment Python would write is accepted by the Lua as it is.
    sources = [c for c, _ in GOOD if c] + [
        c for c in fuzz_comments(40, seed=5) if python_verdict(c) is None
    ]
    job = cluster.sbatch("true", "--hold", partition="mig", comment="start", user=USER_UID)
    written = []
    for c in sources:
        for new in (
            with_mem_hint(c, 24 << 30),
            comments.parse(c).with_note("not planned yet: begin time").render(),
        ):
            if python_verdict(new) is not None:
                continue  # mig-run refuses to write it and says why (tests/test_wrapper.py)
            written.append(new)
            res = cluster.run(
                "scontrol", "update", f"JobId={job}", f"Comment={new}", user=USER, check=False
            )
            assert res.returncode == 0, (new, res.stderr)
            assert comment_of(cluster, job) == without_tokens(new)  # a user's token goes
    assert len(written) > len(sources)


@pytest.mark.parametrize(
    "option",
    ["--gres=gpu:1", "--gpus=1", "--gpus-per-node=1", "--gres=gpu:m0g2:1"],
)
def test_a_mig_job_asking_for_gres_is_refused(cluster: LocalSlurm, option: str) -> None:
    """The planner gives each job its instance's GRES record; a user's own --gres or
    --gpus would open other devices (or ask for another job's instance)."""
    res = cluster.try_sbatch("true", option, partition="mig", comment="mig:mem=1G", user=USER_UID)
    assert res.returncode != 0
    assert "sbatch: error: slurm-mig: the mig partition gives each job its MIG slice" in (
        res.stderr
    )
    assert "remove --gres/--gpus" in res.stderr
    # the same option outside the MIG partition is Slurm's business
    other = cluster.try_sbatch("true", option, partition="debug", user=USER_UID)
    assert "slurm-mig" not in other.stderr


def test_a_user_cannot_add_gres_to_a_mig_job_later(cluster: LocalSlurm) -> None:
    job = cluster.sbatch("true", partition="mig", comment="mig:mem=1G", user=USER_UID)
    res = cluster.run(
        "scontrol", "update", f"JobId={job}", "TresPerNode=gres:gpu:1", user=USER, check=False
    )
    assert res.returncode != 0
    shown = cluster.run("scontrol", "show", "job", "-o", job).stdout
    assert "TresPerNode=" not in shown and "gres" not in shown.lower()
    cluster.run("scancel", job)


def test_root_jobs_are_refused_in_the_mig_partition(cluster: LocalSlurm) -> None:
    res = cluster.try_sbatch("true", partition="mig", comment="mig:mem=1G", user="0")
    assert res.returncode != 0
    assert "sbatch: error: slurm-mig: jobs of root cannot run in the mig partition" in res.stderr
    res = cluster.try_sbatch("true", partition="mig", user="0")
    assert res.returncode != 0 and "jobs of root" in res.stderr
    assert cluster.sbatch("true", partition="debug", user="0")  # root elsewhere: untouched


def test_a_passed_deadline_date_is_refused_at_sbatch_but_not_at_a_later_update(
    cluster: LocalSlurm,
) -> None:
    # mig-run writes mem= into the hint of a running job whose deadline may have passed
    past = "mig:key=x,deadline=2001-01-01T00:00"
    assert "is in the past" in (lua_verdict(cluster, past) or "")
    job = cluster.sbatch("true", "--hold", partition="mig", comment="mig:key=x", user=USER_UID)
    res = cluster.run(
        "scontrol", "update", f"JobId={job}", f"Comment={past},mem=2G", user=USER, check=False
    )
    assert res.returncode == 0, res.stderr
    assert comment_of(cluster, job) == f"{past},mem=2G"
