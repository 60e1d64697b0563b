"""contrib/job_submit.lua in a real slurmctld: it refuses malformed hints and over-long
comments with Python's message, strips planner tokens users write (at sbatch and at
scontrol update), holds MIG jobs, gives users no MIG GRES record outside the MIG
partition (GPU requests, --exclusive, moves out of it) and leaves other jobs alone. The
case table of tests/test_hints.py drives both parsers."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from hintcases import BAD, GOOD, fuzz_comments

from slurm_mig import jobcomment as comments
from slurm_mig.daemon.apply import apply_actions
from slurm_mig.daemon.cycle import Hold
from slurm_mig.daemon.cycle.actions import held_again
from slurm_mig.geometry import Placement
from slurm_mig.hints import (
    MAX_USER_COMMENT,
    HintError,
    comment_problem,
    largest_profile_memory,
    parse_hints,
)
from slurm_mig.jobcomment import without_tokens
from slurm_mig.memory.modes import with_mem_hint
from slurm_mig.sitefiles import site_file
from slurm_mig.slurm import gres
from slurm_mig.slurm.assignment import Assignment, sign
from slurm_mig.slurm.client import SlurmClient

from .cluster import LocalSlurm
from .conftest import squeue_job

LUA = site_file("job_submit.lua")  # the package data that `slurm-mig site-files` writes
USER = "nobody"
USER_UID = "65534"  # sbatch --uid takes a number (26.05 refuses a name)


@pytest.fixture(scope="module")
def cluster(slurm_shared) -> LocalSlurm:
    # a MIG node's gres.conf: Slurm itself then accepts --gres=gpu and the Lua must refuse it
    return slurm_shared(nodes=("n1",), job_submit_lua=LUA, gres={"n1": ["A100-40GB"]})


def python_verdict(comment: str, max_mem: int = 0) -> str | None:
    """None when Python accepts the comment, else its message (the Lua's order: tokens
    removed, then the length, then the hint; ``max_mem``: the Lua's MAX_MIG_MEM)."""
    clean = without_tokens(comment)
    problem = comment_problem(clean)
    if problem:
        return problem
    try:
        # sbatch's check: a deadline date in the past
        parse_hints(clean, now=time.time(), max_mem=max_mem)
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
                continue  # mig-run refuses to write it and says why (tests/memory/test_wrapper.py)
            written.append(new)
            res = cluster.run(
                "scontrol", "update", f"JobId={job}", f"Comment={new}", user=USER, check=False
            )
            assert res.returncode == 0, (new, res.stderr)
            assert comment_of(cluster, job) == without_tokens(new)  # a user's token goes
    assert len(written) > len(sources)


@pytest.mark.parametrize(
    "option",
    ["--gres=gpu:1", "--gpus=1", "--gpus-per-node=1", "--gres=gpu:m0g2:1", "--gres=mig_slice:1"],
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
    # outside it too: a MIG node's gpu records are all MIG slices (see below)
    other = cluster.try_sbatch("true", option, partition="debug", user=USER_UID)
    assert other.returncode != 0 and f"sbatch: error: {OUTSIDE}" in other.stderr


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


# --- MIG GRES outside the MIG partition (issue 18, hole 6) ------------------------------
# A MIG node's gres.conf holds only MIG instances' records (slurm_mig.slurm.gres), so any
# GPU GRES a job gets there is some instance's parent device and capability nodes. Every
# attack below runs as the job's user itself (sbatch/srun/scontrol under runuser).
OUTSIDE = "slurm-mig: a MIG node's GPUs are its MIG slices, which the mig partition alone"
OUTSIDE_FIX = "submit to mig without --gres/--gpus and let the planner choose the slice"
EXCLUSIVE = "would give the job every MIG slice of its node; remove --exclusive"
MOVE_OUT = "slurm-mig: a job of the mig partition stays there"
MODELS = ["A100-40GB"]
M0G3 = gres.index_of(MODELS, gres.Record(0, 3))  # the record most attacks name
ALL_RECORDS = ",".join(str(i) for i in range(len(gres.records(MODELS))))


def probe_script(cluster: LocalSlurm) -> Path:
    """A batch script (readable by the job's user) that prints the GRES the job got."""
    path = cluster.out_dir / "gpus.sh"
    if not path.exists():
        path.write_text('#!/bin/sh\necho "GPUS=$SLURM_JOB_GPUS"\n')
        path.chmod(0o755)
    return path


def sbatch_as_user(cluster: LocalSlurm, *args: str) -> subprocess.CompletedProcess:
    """sbatch run by the job's user (not root with --uid) of `probe_script`."""
    out = cluster.out_dir
    cmd = ["sbatch", "--parsable", f"--output={out}/%j.out", f"--chdir={out}", *args]
    return cluster.run(*cmd, str(probe_script(cluster)), user=USER, check=False)


def log_count(cluster: LocalSlurm, text: str) -> int:
    """How often slurmctld's log has ``text``."""
    return (cluster.root / "log" / "slurmctld.log").read_text().count(text)


def update(
    cluster: LocalSlurm, job: str, *fields: str, user: str | None = None
) -> subprocess.CompletedProcess:
    """``scontrol update JobId=job ...`` (as ``user``); 24.11 and later may answer a
    partition change with EAGAIN ("temporarily unavailable"): it is tried again."""
    for _ in range(20):
        res = cluster.run("scontrol", "update", f"JobId={job}", *fields, user=user, check=False)
        if "temporarily unavailable" not in res.stderr:
            break
        time.sleep(0.5)
    return res


def assert_user_update_refused(cluster: LocalSlurm, text: str, job: str, *fields: str) -> None:
    """``scontrol update JobId=job ...`` by the job's user fails with job_modify's
    message (containing ``text``): in its stderr from 23.02; 22.05 tells the user
    nothing and slurmctld's log has it."""
    before = log_count(cluster, text)
    res = update(cluster, job, *fields, user=USER)
    assert res.returncode != 0, (fields, res.stdout)
    if cluster.install.version >= (23, 2):
        assert text in res.stderr, (fields, res.stderr)
    else:
        assert log_count(cluster, text) > before, fields


def show_o(cluster: LocalSlurm, job: str) -> str:
    """``scontrol show job -o``'s line."""
    return cluster.run("scontrol", "show", "job", "-o", job).stdout


def user_jobs(cluster: LocalSlurm) -> set[str]:
    """The ids of every job of the job's user Slurm knows (finished ones too)."""
    res = cluster.run("squeue", "-h", "--states=all", "-u", USER, "-o", "%i")
    return set(res.stdout.split())


GPU_OPTIONS = [
    ("--gres=gpu:m0g3:1",),
    ("--gres=gpu:1",),
    ("--gres=gpu:60g37:1",),  # Slurm's id of type "60g37" is m0g3's (see below)
    ("--gres=gpu:m0g3:1", "--array=0-1"),
    ("--gpus=m0g3:1",),
    ("--gpus=1",),
    ("--gpus-per-node=m0g3:1",),
    ("--gpus-per-task=1", "--ntasks=1"),
    ("--gpus-per-socket=1", "--sockets-per-node=1"),
    ("--tres-per-task=gres/gpu:m0g3:1", "--ntasks=1"),  # 23.02 and later
    ("--gres=mig_slice:7",),  # the node's slice count: planned jobs could not start
]


@pytest.mark.parametrize("option", GPU_OPTIONS, ids=" ".join)
@pytest.mark.parametrize("partition", ["debug", None])
def test_a_user_gets_no_mig_gres_outside_the_mig_partition(
    cluster: LocalSlurm, option: tuple[str, ...], partition: str | None
) -> None:
    """sbatch -p debug --gres=gpu:m0g3:1 got that instance's devices (issue 18, hole 6):
    every field a GPU request reaches Slurm by is refused, in the default partition too."""
    if option[0].startswith("--tres-per-task") and cluster.install.version < (23, 2):
        pytest.skip("sbatch of 22.05 has no --tres-per-task")
    before = user_jobs(cluster)
    args = (f"--partition={partition}",) * (partition is not None) + option
    res = sbatch_as_user(cluster, *args)
    assert res.returncode != 0 and res.stdout == ""
    assert f"sbatch: error: {OUTSIDE}" in res.stderr and OUTSIDE_FIX in res.stderr
    assert "in partition 'debug'" in res.stderr
    assert len([ln for ln in res.stderr.splitlines() if "slurm-mig" in ln]) == 1
    assert user_jobs(cluster) == before  # no job, so nothing ever ran with the device


def test_srun_het_jobs_and_exclusive_get_no_mig_gres_outside_the_partition(
    cluster: LocalSlurm,
) -> None:
    before = user_jobs(cluster)
    res = cluster.run(
        "srun",
        "--immediate=10",
        "-p",
        "debug",
        "--gres=gpu:m0g3:1",
        "true",
        user=USER,
        check=False,
        timeout=60,
    )
    assert res.returncode != 0 and f"srun: error: {OUTSIDE}" in res.stderr
    # a heterogeneous job: its second component asks for the record
    res = sbatch_as_user(cluster, "-p", "debug", ":", "-p", "debug", "--gres=gpu:m0g3:1")
    assert res.returncode != 0 and OUTSIDE in res.stderr
    # a whole node brings every GRES record of it (see below)
    for partition, text in (
        ("debug", EXCLUSIVE),
        ("mig", "slurm-mig: the mig partition shares each node between MIG slices"),
    ):
        res = sbatch_as_user(cluster, "-p", partition, "--exclusive")
        assert res.returncode != 0 and text in res.stderr, res.stderr
    res = sbatch_as_user(cluster, "-p", "debug", ":", "-p", "debug", "--exclusive")
    assert res.returncode != 0 and EXCLUSIVE in res.stderr
    assert user_jobs(cluster) == before


def test_why_every_gpu_type_and_exclusive_are_refused(cluster: LocalSlurm) -> None:
    """The premises, as root (whose jobs the Lua lets through outside the MIG
    partition): Slurm matches a requested GRES type by a 32-bit sum of its bytes, so
    type "60g37" gets record m0g3, and a whole-node job gets every record of the node
    (--exclusive=user shares the node with the user's own jobs: no records)."""
    probe = "echo GPUS=$SLURM_JOB_GPUS"
    alias = cluster.sbatch(probe, "--gres=gpu:60g37:1", partition="debug", user="0")
    whole = cluster.sbatch(probe, "--exclusive", partition="debug", user="0")
    mine = cluster.sbatch(probe, "--exclusive=user", partition="debug", user="0")
    for job in (alias, whole, mine):
        assert cluster.wait_job(job, ["COMPLETED"], timeout=60) == "COMPLETED"
    assert cluster.job_output(alias) == f"GPUS={M0G3}\n"
    assert cluster.job_output(whole) == f"GPUS={ALL_RECORDS}\n"
    assert cluster.job_output(mine) == "GPUS=\n"
    # the Lua lets --exclusive=user through for users
    res = sbatch_as_user(cluster, "-p", "debug", "--exclusive=user", "--hold")
    assert res.returncode == 0, res.stderr
    cluster.run("scancel", res.stdout.strip())


def test_a_user_cannot_add_mig_gres_to_a_job_outside_the_mig_partition(
    cluster: LocalSlurm,
) -> None:
    res = sbatch_as_user(cluster, "-p", "debug", "--hold")
    assert res.returncode == 0, res.stderr
    job = res.stdout.strip()
    for field in (
        "Gres=gpu:m0g3:1",
        "TresPerNode=gres:gpu:m0g3:1",
        "TresPerNode=gres/gpu:m0g3:1",
        "TresPerNode=gres:gpu:60g37:1",
        "TresPerNode=license/x:1,gres/gpu:m0g3:1",
        "TresPerNode=gresx:gres:gpu:m0g3:1",  # 22.05 reads the name after "gres:"
        "TresPerNode=gresgpu:m0g3:1",  # 24.11 and later after "gres"
        "TresPerJob=gres:gpu:1",
        "TresPerTask=gres/gpu:1",
        "TresPerSocket=gres:gpu:1",
    ):
        assert_user_update_refused(cluster, OUTSIDE, job, field)
    long = ",".join(["gres/gpu:m0g3:1"] * 100)  # the Lua reads at most 1024 bytes
    assert_user_update_refused(cluster, "bytes, more than 1024", job, f"TresPerNode={long}")
    shown = show_o(cluster, job)
    assert "gres" not in shown.lower(), shown
    # the owner may still run it: it runs without any GPU record
    cluster.run("scontrol", "update", f"JobId={job}", "Comment=plain", user=USER)
    assert cluster.run("scontrol", "release", job, user=USER, check=False).returncode == 0
    assert cluster.wait_job(job, ["COMPLETED"], timeout=60) == "COMPLETED"
    assert cluster.job_output(job) == "GPUS=\n"


def test_a_user_cannot_move_a_released_job_out_of_the_mig_partition(
    cluster: LocalSlurm,
) -> None:
    """The planner's release, as root (the daemon's own updates: Comment with a token,
    TresPerNode, Dependency, then release) passes; the owner's move of the released job
    to another partition, which kept its record and skipped the Prolog's check, does not."""
    blocker = cluster.sbatch("sleep 60", partition="debug", user="0")
    cluster.wait_job(blocker, ["RUNNING"], timeout=60)
    job = cluster.sbatch(
        "echo GPUS=$SLURM_JOB_GPUS", partition="mig", comment="mig:time=1m", user=USER_UID
    )
    comment = f"mig:time=1m migplan={token(job, '2g.10gb', (0, 2), 1.0)}"  # record m0g3
    cluster.run(
        "scontrol",
        "update",
        f"JobId={job}",
        f"Comment={comment}",
        f"TresPerNode={gres.tres_per_node(gres.Record(0, 3))}",
        f"Dependency=afterany:{blocker}",
    )
    cluster.run("scontrol", "release", job)
    cluster.wait_for(lambda: show(cluster, job)["Reason"] == "Dependency", 30, "the dependency")
    for fields in (
        ("Partition=debug",),
        ("Partition=debug,mig",),
        ("Partition=debug", "Dependency=", "TresPerNode="),
    ):
        assert_user_update_refused(cluster, MOVE_OUT, job, *fields)
        assert show(cluster, job)["Partition"] == "mig"
    assert "m0g3" in show_o(cluster, job)
    assert comment_of(cluster, job) == comment
    # the daemon clears its dependency (as for a job it holds again); the job runs on
    # its record
    cluster.run("scontrol", "update", f"JobId={job}", "Dependency=0")
    assert cluster.wait_job(job, ["COMPLETED"], timeout=60) == "COMPLETED"
    assert cluster.job_output(job) == f"GPUS={M0G3}\n"
    cluster.run("scancel", blocker)


def test_a_user_cannot_move_a_held_job_or_array_task_out_of_the_mig_partition(
    cluster: LocalSlurm,
) -> None:
    # held: the planner may write its record between the owner's read and the move
    held = cluster.sbatch("true", partition="mig", user=USER_UID)
    array = cluster.sbatch("true", "--array=0-2", partition="mig", user=USER_UID)
    for job in (held, f"{array}_1", array):
        assert_user_update_refused(cluster, MOVE_OUT, job, "Partition=debug")
        assert cluster.job_field(job, "Partition") == "mig"
    # root (an admin) may move one; the owner may still cancel them
    moved = update(cluster, held, "Partition=debug")
    assert moved.returncode == 0, moved.stderr
    assert cluster.job_field(held, "Partition") == "debug"
    assert cluster.run("scancel", held, array, user=USER, check=False).returncode == 0


def test_site_lists_of_non_mig_gpu_types_and_partitions(slurm_shared, tmp_path: Path) -> None:
    """OTHER_GPU_TYPES: exact types users may ask for anywhere; NON_MIG_PARTITIONS: where
    GPU requests and --exclusive are Slurm's business, and whose jobs do not move out."""
    lua = tmp_path / "job_submit.lua"
    text = LUA.read_text()
    for line, site in (
        # "60g37" is m0g3 to Slurm: the Lua drops it from the list at load
        ("local OTHER_GPU_TYPES = {}", 'local OTHER_GPU_TYPES = { a100 = true, ["60g37"] = true }'),
        ("local NON_MIG_PARTITIONS = {}", 'local NON_MIG_PARTITIONS = { ["plain"] = true }'),
    ):
        assert line in text
        text = text.replace(line, site)
    lua.write_text(text)
    site = slurm_shared(nodes=("p1",), partition="plain", job_submit_lua=lua, gres={"p1": MODELS})
    assert (
        "OTHER_GPU_TYPES: Slurm takes '60g37' for a MIG record's type"
        in (site.root / "log" / "slurmctld.log").read_text()
    )
    # debug may hold MIG nodes: the listed type passes the Lua (this cluster has no
    # a100 record, so Slurm refuses it), any other type or none does not
    res = sbatch_as_user(site, "-p", "debug", "--gres=gpu:a100:1")
    assert res.returncode != 0 and "slurm-mig" not in res.stderr
    for option in ("--gres=gpu:A100:1", "--gres=gpu:60g37:1", "--gpus=1", "--gpus=a1000:1"):
        res = sbatch_as_user(site, "-p", "debug", option)
        assert res.returncode != 0 and OUTSIDE in res.stderr, option
    # plain is listed: its GPU and whole-node jobs are Slurm's business, and stay there
    gpu = sbatch_as_user(site, "-p", "plain", "--gres=gpu:m0g3:1", "--hold")
    whole = sbatch_as_user(site, "-p", "plain", "--exclusive", "--hold")
    assert gpu.returncode == 0 and whole.returncode == 0, (gpu.stderr, whole.stderr)
    for res in (gpu, whole):
        job = res.stdout.strip()
        text = "cannot move to 'debug', which may hold MIG nodes"
        assert_user_update_refused(site, text, job, "Partition=debug")
        assert site.job_field(job, "Partition") == "plain"
        site.run("scancel", job)


# --- jobs that can never run, and slips refused rather than misread (issue 21) ----------
def test_a_memory_need_above_the_largest_slice_is_refused_at_sbatch(
    slurm_shared, tmp_path: Path
) -> None:
    """MAX_MIG_MEM (what `slurm-mig site-files` writes: the largest MIG slice of the
    site's models): a mem= above it is refused at sbatch and at the owner's update with
    Python's message; the planner's own writes are not (a job queued before the limit
    keeps its note)."""
    limit = largest_profile_memory(MODELS)
    line = "local MAX_MIG_MEM = 0"
    text = LUA.read_text()
    assert text.count(line) == 1
    lua = tmp_path / "job_submit.lua"
    lua.write_text(text.replace(line, f"local MAX_MIG_MEM = {limit}"))
    site = slurm_shared(nodes=("m1",), job_submit_lua=lua, gres={"m1": MODELS})
    for comment in ("mig:mem=100G", "run mig:key=x,mem=40G", f"mig:mem={limit + 1}"):
        verdict = python_verdict(comment, max_mem=limit)
        assert verdict is not None and "exceeds the largest MIG slice" in verdict
        assert lua_verdict(site, comment) == verdict
    assert lua_verdict(site, "mig:mem=100G") == (
        "slurm-mig: hint 'mem=100G': '100G' exceeds the largest MIG slice of this "
        "partition (39.6G); ask for at most 39.6G"
    )
    for comment in ("mig:mem=39.6G", f"mig:mem={limit}", "mig:time=1h"):
        assert python_verdict(comment, max_mem=limit) is None
        assert lua_verdict(site, comment) is None, comment
    # the same grammar slips as without a limit
    for comment in ("mig:mem=12", "mig:time=2 hours", "MIG:mem=12G", "mig: mem=12G"):
        verdict = python_verdict(comment, max_mem=limit)
        assert verdict is not None and lua_verdict(site, comment) == verdict
    job = site.sbatch("true", partition="mig", comment="mig:mem=12G", user=USER_UID)
    assert_user_update_refused(site, "exceeds the largest MIG slice", job, "Comment=mig:mem=64G")
    assert comment_of(site, job) == "mig:mem=12G"
    site.run("scontrol", "update", f"JobId={job}", "Comment=mig:mem=64G [slurm-mig: noted]")
    assert comment_of(site, job) == "mig:mem=64G [slurm-mig: noted]"  # the planner's write
    site.run("scancel", job)


def test_slips_in_a_hint_are_refused_at_sbatch_with_the_fix(cluster: LocalSlurm) -> None:
    """mig:mem=12 was 12 bytes, mig:time=2 hours 2 s, MIG:mem=12G ignored: each is
    refused with one line that says what to write (the BAD table has them all)."""
    for comment, fix in (
        ("mig:mem=12", "'12' is 12 bytes; write 12G or 12MiB"),
        (
            "train mig:time=2 hours",
            "followed by 'hours': the unit must be part of the value; write time=2h",
        ),
        ("mig:deadline=3 days", "write deadline=3d"),
        ("MIG:mem=12G", "write the prefix in lower case: mig:mem=12G"),
        ("Mig:mem=12G", "write the prefix in lower case: mig:mem=12G"),
        ("mig: mem=12G", "a space inside the mig: word; write mig:mem=12G"),
        ("mig:mem = 12G", "a space inside the mig: word; write mig:mem=12G"),
    ):
        res = cluster.try_sbatch("true", partition="mig", comment=comment, user=USER_UID)
        assert res.returncode != 0
        lines = [ln for ln in res.stderr.splitlines() if "slurm-mig" in ln]
        assert len(lines) == 1 and fix in lines[0], res.stderr
    # what the fixes say is accepted
    for comment in ("mig:mem=12G", "train mig:time=2h", "mig:mem=1048576", "mig:time=2h hours"):
        assert lua_verdict(cluster, comment) is None, comment


# --- every way into the MIG partition (issue 34, holes 1, 5, 7, 8) ----------------------
NOT_UTF8 = "is not UTF-8 (byte 2 is 0xff); write it in UTF-8"
HET_MOVE = "slurm-mig: a heterogeneous job cannot move to the mig partition"
ONE_NODE = "slurm-mig: a job of the mig partition runs on one node"
NICE = "slurm-mig: nice cannot change while the slurm-mig planner holds the job"


def test_a_name_or_comment_that_is_not_utf8_is_refused_with_one_line(
    cluster: LocalSlurm,
) -> None:
    """One byte that is not UTF-8 in a job name or comment stopped every plan of the
    partition: refused at sbatch, at the owner's update and at a move into it."""
    bad = "a\udcffb"  # the byte 0xff, as sbatch's argument
    for kwargs, field in (({"comment": bad}, "comment"), ({"name": bad}, "job name")):
        res = cluster.try_sbatch("true", partition="mig", user=USER_UID, **kwargs)
        lines = [ln for ln in res.stderr.splitlines() if "slurm-mig" in ln]
        assert res.returncode != 0 and len(lines) == 1, res.stderr
        assert f"slurm-mig: the {field} {NOT_UTF8}" in lines[0]
    job = cluster.sbatch("true", partition="mig", comment="fine", user=USER_UID)
    for fields in (f"Comment={bad}", f"JobName={bad}"):
        assert_user_update_refused(cluster, NOT_UTF8, job, fields)
    assert comment_of(cluster, job) == "fine"
    named = cluster.sbatch("true", "--hold", partition="debug", name=bad, user=USER_UID)
    assert_user_update_refused(cluster, f"the job name {NOT_UTF8}", named, "Partition=mig")
    assert cluster.job_field(named, "Partition") == "debug"
    cluster.run("scancel", job, named)


def test_a_heterogeneous_job_cannot_move_into_the_mig_partition(cluster: LocalSlurm) -> None:
    """Hole 5: the hetjob check was at submit only; a move into the partition was
    taken, and the planner's release of the leader failed every cycle. job_modify reads
    job_rec.het_job_id (22.05 to 26.05): refused for its owner and for root alike."""
    res = sbatch_as_user(cluster, "-p", "debug", "--hold", ":", "-p", "debug")
    assert res.returncode == 0, res.stderr
    leader = res.stdout.strip().split(";")[0]
    assert_user_update_refused(cluster, HET_MOVE, leader, "Partition=mig")
    root = update(cluster, leader, "Partition=mig")
    assert root.returncode != 0
    if cluster.install.version >= (23, 2):
        assert HET_MOVE in root.stderr and "submit each component" in root.stderr
    assert cluster.job_field(leader, "Partition") == "debug"
    cluster.run("scancel", leader)


def test_a_job_on_more_than_one_node_cannot_enter_the_mig_partition(slurm_shared) -> None:
    """Hole 7: `sbatch -p mig -N 2` was taken and looped through requeues. job_desc's
    min_nodes/max_nodes at sbatch and update, job_rec's at a move (22.05 to 26.05)."""
    two = slurm_shared(nodes=("t1", "t2"), job_submit_lua=LUA)
    for nodes in ("-N2", "-N1-2"):
        res = sbatch_as_user(two, "-p", "mig", nodes)
        lines = [ln for ln in res.stderr.splitlines() if "slurm-mig" in ln]
        assert res.returncode != 0 and len(lines) == 1, res.stderr
        assert ONE_NODE in lines[0] and "remove -N/--nodes" in lines[0]
    held = two.sbatch("true", partition="mig", user=USER_UID)
    assert_user_update_refused(two, ONE_NODE, held, "NumNodes=2")
    assert update(two, held, "NumNodes=2").returncode != 0  # root too
    assert two.job_field(held, "NumNodes") in ("1", "1-1")  # 24.11 and later: "1-1"
    res = sbatch_as_user(two, "-p", "debug", "-N2", "--hold")
    assert res.returncode == 0, res.stderr
    wide = res.stdout.strip()
    assert_user_update_refused(two, "leave NumNodes at 1", wide, "Partition=mig")
    assert two.job_field(wide, "Partition") == "debug"
    two.run("scancel", held, wide)


def test_nice_cannot_lift_the_planners_hold(cluster: LocalSlurm) -> None:
    """Hole 8: under priority/basic `scontrol update nice=` set a held job's priority
    to 2, and Slurm could start it. Refused while it is held (job_rec.priority 0), for
    root too; a released job's owner may still lower its priority."""
    job = cluster.sbatch("sleep 60", partition="mig", comment="mig:time=1m", user=USER_UID)
    assert_user_update_refused(cluster, NICE, job, "Nice=100")
    assert update(cluster, job, "Nice=100").returncode != 0
    assert (show(cluster, job)["Priority"], show(cluster, job)["Nice"]) == ("0", "0")
    blocker = cluster.sbatch("sleep 60", partition="debug", user="0")
    cluster.run("scontrol", "update", f"JobId={job}", f"Dependency=afterany:{blocker}")
    cluster.run("scontrol", "release", job)
    assert update(cluster, job, "Nice=10", user=USER).returncode == 0
    assert show(cluster, job)["Nice"] == "10"
    cluster.run("scancel", job, blocker)


def test_a_job_the_planner_holds_again_loses_its_token_and_gres_record(
    cluster: LocalSlurm,
) -> None:
    """Hole 8's other half: a job held again after a release kept the token and GRES
    record of that plan, so any lift of the hold started it there. The planner's hold
    clears both in its one update (`Hold.scrub`), on every release."""
    blocker = cluster.sbatch("sleep 60", partition="debug", user="0")
    job = cluster.sbatch("true", partition="mig", comment="mig:time=1m", user=USER_UID)
    old = f"mig:time=1m migplan={token(job, '2g.10gb', (0, 2), 1.0)}"
    cluster.run(
        "scontrol", "update", f"JobId={job}", f"Comment={old}",
        f"TresPerNode={gres.tres_per_node(gres.Record(0, 3))}",
        f"Dependency=afterany:{blocker}",
    )  # fmt: skip
    cluster.run("scontrol", "release", job)
    assert "m0g3" in show_o(cluster, job)
    client = SlurmClient(env=cluster.env)
    hold = held_again(Hold(job, "released, but not started"), squeue_job(client, job))
    report = apply_actions([hold], client, key=b"k" * 32)
    assert not report.failed and report.calls == 1
    assert show(cluster, job)["Priority"] == "0"
    assert comment_of(cluster, job) == "mig:time=1m"
    assert "gpu" not in show_o(cluster, job).lower()
    cluster.run("scancel", job, blocker)


TIME_FIXED = "slurm-mig: time= cannot change once the planner has released the job"


def test_a_released_jobs_time_hint_cannot_be_raised_to_hide_an_overrun(
    cluster: LocalSlurm,
) -> None:
    """Issue 34, hole 3: an overrun is judged against the job's time=; raising it on a
    running job would hide it. Held, the owner may change it (the planner plans again);
    once released, time= is fixed and mem= may still change (mig-run writes it)."""
    blocker = cluster.sbatch("sleep 60", partition="debug", user="0")
    cluster.wait_job(blocker, ["RUNNING"], timeout=60)
    job = cluster.sbatch("true", partition="mig", comment="mig:time=1", user=USER_UID)
    assert update(cluster, job, "Comment=mig:time=2", user=USER).returncode == 0
    cluster.run("scontrol", "update", f"JobId={job}", "Dependency=afterany:" + blocker)
    cluster.run("scontrol", "release", job)  # as the planner does; it waits for blocker
    assert_user_update_refused(cluster, TIME_FIXED, job, "Comment=mig:time=600")
    assert_user_update_refused(cluster, TIME_FIXED, job, "Comment=mig:mem=4G")
    assert update(cluster, job, "Comment=mig:time=2,mem=8G", user=USER).returncode == 0
    assert comment_of(cluster, job) == "mig:time=2,mem=8G"
    cluster.run("scancel", job, blocker)
