"""squeue's fixed-width job list (`jobs_from_fixed_width`): records cut by length, never
split on a delimiter; anything that does not fit falls back to the JSON."""

from __future__ import annotations

import json
import logging
import os
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from fastreadsite import record
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_mig.slurm.client import (
    FAST_FIELDS,
    MAX_WIDE_IDS,
    NARROW,
    RECORD_SIZE,
    WIDE,
    FastReadError,
    FieldFilled,
    Job,
    SlurmClient,
    jobs_from_fixed_width,
)

WIDTHS = dict(FAST_FIELDS)
BASE_JOB = Job(
    job_id="41",
    name="train",
    user="root",
    partition="mig",
    state="PENDING",
    reason="JobHeldUser",
    held=True,
    comment="mig:mem=4G",
    admin_comment="",
    nodes="",
    required_nodes="",
    time_limit=600.0,
    submit_time=1795633577.0,
    start_time=None,
    end_time=None,
    restart_count=0,
    exit_code=None,
    qos="normal",
    uid=0,
)


def test_the_format_names_every_field_once() -> None:
    names = [n for n, _ in FAST_FIELDS]
    assert len(set(names)) == len(names) and WIDE.format.count(",") == len(names) - 1
    assert RECORD_SIZE == WIDE.record_size == sum(WIDTHS.values()) + 1
    assert [n for n, _ in NARROW.fields] == names and NARROW.record_size < RECORD_SIZE * 0.6
    # squeue cuts no node list or time limit: those come after every text field
    assert names[-3:] == ["TimeLimit", "ReqNodes", "NodeList"]
    assert jobs_from_fixed_width(record(NARROW), NARROW) == [BASE_JOB]
    with pytest.raises(FieldFilled, match="Comment fills its 384"):
        jobs_from_fixed_width(record(NARROW, Comment="c" * 500), NARROW)


def test_a_held_job() -> None:
    assert jobs_from_fixed_width(record()) == [BASE_JOB]
    assert jobs_from_fixed_width(b"") == []


def test_spaces_bars_tabs_newlines_and_a_fake_field_stay_in_the_comment() -> None:
    evil = "x\ny AdminComment=evil | \t NodeList=n9 JobID=7\n\n"
    name = "a b\tc | d\n"
    out = record(Comment=evil, Name=name) + record(JobID="42")
    one, two = jobs_from_fixed_width(out)
    assert one == replace(BASE_JOB, comment=evil, name=name)
    assert two == replace(BASE_JOB, job_id="42")
    # a comment that holds a whole record of its own is still one comment
    fake = "\n" + record(JobID="99", Name="fake").decode()[: WIDTHS["Comment"] - 10] + "|"
    (job,) = jobs_from_fixed_width(record(Comment=fake))
    assert job == replace(BASE_JOB, comment=fake)


def test_a_running_finished_and_requeued_job() -> None:
    running = record(
        State="RUNNING", Reason="None", PriorityLong="4294901756", StartTime="1795633578",
        EndTime="1795719978", TimeLimit="1-00:00:00", NodeList="n1", ReqNodes="n1",
        EligibleTime="1795633577",
    )  # fmt: skip
    (j,) = jobs_from_fixed_width(running)
    assert (j.state, j.held, j.start_time, j.end_time, j.exit_code) == (
        "RUNNING", False, 1795633578.0, None, None,
    )  # fmt: skip
    assert (j.time_limit, j.nodes, j.required_nodes) == (86400.0, "n1", "n1")
    done = dict(State="FAILED", Reason="NonZeroExitCode", StartTime="1795633578")
    done |= dict(EndTime="1795633579", TimeLimit="365-00:00:00", PriorityLong="7")
    assert jobs_from_fixed_width(record(**done, exit_code="768"))[0].exit_code == 3
    assert jobs_from_fixed_width(record(**done, exit_code="9"))[0].exit_code == 137
    assert jobs_from_fixed_width(record(**done, exit_code="3:0"))[0].exit_code == 3
    assert jobs_from_fixed_width(record(**done, exit_code="0:15"))[0].exit_code == 143
    (j,) = jobs_from_fixed_width(record(**done, exit_code="0"))
    assert (j.time_limit, j.end_time, j.finished) == (None, 1795633579.0, True)
    requeued = record(Reason="job requeued in held state", RestartCnt="1", StartTime="1795633578")
    (j,) = jobs_from_fixed_width(requeued)
    assert (j.reason, j.reason_detail, j.held, j.restart_count, j.start_time) == (
        "JobHeldUser", "job requeued in held state", True, 1, None,
    )  # fmt: skip
    (j,) = jobs_from_fixed_width(record(Reason="RaisedSignal:9(Killed)", PriorityLong="3"))
    assert (j.reason, j.reason_detail, j.held) == ("RaisedSignal", "RaisedSignal:9(Killed)", False)
    # the scheduler's own description when the partition lacks usable nodes (a drain)
    few = "Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority partitions"
    (j,) = jobs_from_fixed_width(record(State="PENDING", Reason=few, PriorityLong="3"))
    assert (j.reason, j.reason_detail, j.held) == ("Resources", few, False)


def test_times_limits_dependency_and_deadline() -> None:
    (j,) = jobs_from_fixed_width(
        record(
            Dependency="afterok:5(unfulfilled)", EligibleTime="1795637177",
            Deadline="1795644377", TimeLimit="UNLIMITED", PriorityLong="12",
            Reason="Dependency",
        )
    )  # fmt: skip
    assert (j.dependency, j.eligible_time, j.deadline, j.time_limit, j.held) == (
        "afterok:5(unfulfilled)", 1795637177.0, 1795644377.0, None, False,
    )  # fmt: skip
    for text, seconds in (("30:00", 1800.0), ("2:00:00", 7200.0), ("0:00", 0.0)):
        assert jobs_from_fixed_width(record(TimeLimit=text))[0].time_limit == seconds
    for text in ("INVALID", "NOT_SET"):
        assert jobs_from_fixed_width(record(TimeLimit=text))[0].time_limit is None


def test_a_pending_array_printed_per_task_is_one_record() -> None:
    out = record(JobID="7") * 3 + record(JobID="8")
    assert [j.job_id for j in jobs_from_fixed_width(out)] == ["7", "8"]
    with pytest.raises(FastReadError, match="listed twice"):
        jobs_from_fixed_width(record(JobID="7") + record(JobID="7", Name="other"))


@pytest.mark.parametrize(
    "out, why",
    [
        (record()[:-1], "whole number"),
        (record() + b"x", "whole number"),
        (record()[:-1] + b" ", "newline"),
        (record(Comment="c" * WIDTHS["Comment"]), "Comment fills"),
        (record(admin_comment="a" * 5000), "admin_comment fills"),
        (record(Name="n" * 300), "Name fills"),
        (record(Dependency="afterok:1," * 120), "Dependency fills"),
        (record(Partition="p" * 31), "buffer"),
        (record(JobID="7_1"), "JobID"),
        (record(State="pending"), "State"),
        (record(PriorityLong="-1"), "PriorityLong"),
        (record(SubmitTime="Unknown"), "SubmitTime"),
        (record(SubmitTime="2026-11-25T18:50:21"), "SubmitTime"),
        (record(TimeLimit="1:2:3:4"), "TimeLimit"),
        (record(TimeLimit="0:30"), "whole minutes"),
        (record(State="FAILED", exit_code="x"), "exit_code"),
        (record(Reason="some free text"), "reason code"),
        (record(UserName="nobody", UserID="1234"), "user name"),
    ],
)
def test_what_falls_back(out: bytes, why: str) -> None:
    with pytest.raises(FastReadError, match=why):
        jobs_from_fixed_width(out)


@pytest.mark.parametrize("overflow", [1, 5, 300])
def test_a_node_list_longer_than_its_field_is_caught_in_its_own_record(overflow: int) -> None:
    """squeue never cuts a node list: the record grows. A newline planted in a comment
    where the record should end cannot line up, since nothing after the comment holds
    one."""
    nodes = "n" * (WIDTHS["NodeList"] + overflow)
    comment = "\n" * 1000
    out = record(NodeList=nodes, Comment=comment) + record(JobID="42") * overflow
    with pytest.raises(FastReadError):
        jobs_from_fixed_width(out)
    grown = record(NodeList=nodes)
    with pytest.raises(FastReadError):
        jobs_from_fixed_width(grown + record(JobID="42")[overflow:])


_NO_NUL = st.binary(max_size=1024).map(lambda b: b.replace(b"\0", b""))


@settings(max_examples=400, deadline=None)
@given(comment=_NO_NUL, name=st.binary(max_size=300).map(lambda b: b.replace(b"\0", b"")))
def test_any_comment_round_trips_or_falls_back(comment: bytes, name: bytes) -> None:
    """Any comment up to job_submit's 1024 bytes (and any name): read back as it was,
    less the trailing spaces squeue's padding hides, or refused; never a change to
    another field or another job."""
    out = record(JobID="1") + record(JobID="2", Comment=comment, Name=name) + record(JobID="3")
    assert len(out) == 3 * RECORD_SIZE
    try:
        one, two, three = jobs_from_fixed_width(out)
    except FastReadError:
        return
    assert one == replace(BASE_JOB, job_id="1") and three == replace(BASE_JOB, job_id="3")
    unpad = comment.rstrip(b" ").decode("utf-8", "replace")
    assert two.comment == ("" if unpad == "(null)" else unpad)
    unpad = name.rstrip(b" ").decode("utf-8", "replace")
    assert two.name == ("" if unpad == "(null)" else unpad)
    assert replace(two, comment=BASE_JOB.comment, name=BASE_JOB.name) == replace(
        BASE_JOB, job_id="2"
    )


@pytest.mark.parametrize(
    "field, raw, read",
    [
        ("Name", b"bad\xff", "bad\ufffd"),
        ("Comment", "mig:time=30,mem=4G café".encode("latin-1"), "mig:time=30,mem=4G caf\ufffd"),
    ],
)
def test_a_byte_that_is_not_utf8_costs_only_its_own_field(field, raw, read) -> None:
    """Issue 34, hole 1: a job name or comment in Latin-1 is read with U+FFFD in place of
    the bad byte; its record and every other job read as they are (no fall-back to the
    JSON, which would carry the same byte)."""
    out = record(JobID="1") + record(JobID="2", **{field: raw}) + record(JobID="3")
    one, two, three = jobs_from_fixed_width(out)
    assert getattr(two, field.lower()) == read
    assert one == replace(BASE_JOB, job_id="1") and three == replace(BASE_JOB, job_id="3")


# --- SlurmClient: which path reads -----------------------------------------------------
JSON_JOBS = {"jobs": [{"job_id": 41, "name": "train", "job_state": "PENDING", "priority": 0}]}


def fake_squeue(
    tmp_path: Path, fixed: bytes, narrow: bytes | None = None
) -> tuple[dict[str, str], Path]:
    """A squeue that prints ``narrow`` (default: ``fixed``) for the narrow -O format,
    ``fixed`` for the wide one and JSON for --json, logging its argv."""
    bin_dir, log = tmp_path / "bin", tmp_path / "argv"
    bin_dir.mkdir()
    (tmp_path / "wide").write_bytes(fixed)
    (tmp_path / "narrow").write_bytes(fixed if narrow is None else narrow)
    (bin_dir / "squeue").write_text(
        f"#!{sys.executable}\nimport json, os, sys\n"
        f"open({str(log)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
        "if '--json' in sys.argv:\n"
        f"    print({json.dumps(json.dumps(JSON_JOBS))})\n"
        "else:\n"
        "    assert os.environ['SLURM_TIME_FORMAT'] == '%s'\n"
        "    assert 'SQUEUE_USERS' not in os.environ\n"
        f"    which = 'narrow' if {NARROW.format!r} in sys.argv else 'wide'\n"
        f"    sys.stdout.buffer.write(open({str(tmp_path)!r} + '/' + which, 'rb').read())\n"
    )
    (bin_dir / "squeue").chmod(0o755)
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "SQUEUE_USERS": "nobody"}
    return env, log


def calls(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_client_reads_the_fixed_width_output(tmp_path: Path) -> None:
    env, log = fake_squeue(tmp_path, b"", record(NARROW, Comment="from -O"))
    client = SlurmClient(env=env)
    (j,) = client.jobs("mig")
    assert j.comment == "from -O" and client.last_read == "fixed-width"
    assert calls(log) == [["-h", "--states=all", "-r", "-O", NARROW.format, "--partition=mig"]]


@pytest.mark.parametrize("narrow", [{"Comment": "c" * 400}, {"NodeList": "n" * 70}])
def test_a_value_too_long_for_the_narrow_layout_is_read_again_wide(
    tmp_path: Path, narrow: dict[str, str]
) -> None:
    env, log = fake_squeue(tmp_path, record(**narrow, Name="wide"), record(NARROW, **narrow))
    client = SlurmClient(env=env)
    assert client.jobs()[0].name == "wide" and client.last_read == "fixed-width"
    assert [c[4] for c in calls(log)] == [NARROW.format, WIDE.format]


def test_only_the_jobs_whose_value_filled_a_narrow_field_are_read_again_wide(
    tmp_path: Path,
) -> None:
    """At 10,000 jobs the wide layout is 30 MB: one job's long dependency (a job
    released ahead of several) costs a squeue of that job alone, by id."""
    long = ",".join(f"afterany:{n}(unfulfilled)" for n in range(100, 112))
    narrow = (
        record(NARROW, JobID="40") + record(NARROW, Dependency=long) + record(NARROW, JobID="42")
    )
    env, log = fake_squeue(tmp_path, record(Dependency=long), narrow)
    client = SlurmClient(env=env)
    jobs = client.jobs()
    assert [j.job_id for j in jobs] == ["40", "41", "42"] and jobs[1].dependency == long
    assert client.last_read == "fixed-width"
    assert calls(log) == [
        ["-h", "--states=all", "-r", "-O", NARROW.format],
        ["-h", "--states=all", "-r", "-O", WIDE.format, "--jobs=41"],
    ]
    # the next cycle reads the same bytes: the same jobs, from the memo, no parse
    assert client.jobs() == jobs


def test_many_filled_records_are_read_again_all_wide(tmp_path: Path) -> None:
    many = MAX_WIDE_IDS + 1
    narrow = b"".join(record(NARROW, JobID=str(n), Comment="c" * 400) for n in range(many))
    wide = b"".join(record(JobID=str(n), Comment="c" * 400) for n in range(many))
    env, log = fake_squeue(tmp_path, wide, narrow)
    assert len(SlurmClient(env=env).jobs()) == many
    assert calls(log)[1] == ["-h", "--states=all", "-r", "-O", WIDE.format]


def test_client_falls_back_to_json_with_one_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    env, log = fake_squeue(tmp_path, record(Comment="c" * 2000))
    client = SlurmClient(env=env)
    with caplog.at_level(logging.WARNING, logger="slurm_mig.slurm.client"):
        (j,) = client.jobs()
    assert (j.job_id, j.comment, client.last_read) == ("41", "", "json")
    assert [c[:2] for c in calls(log)] == [["-h", "--states=all"]] * 2 + [
        ["--json", "--states=all"]
    ]
    (line,) = caplog.messages
    assert "read as JSON instead" in line and "Comment fills its 1025" in line


def test_a_field_no_wider_in_the_wide_layout_goes_to_json_without_a_wide_read(
    tmp_path: Path,
) -> None:
    """A field as wide in both layouts that fills its width (State): reading it wide
    again would cost a squeue of 30 MB at 10,000 jobs for nothing."""
    env, log = fake_squeue(tmp_path, b"", record(NARROW, State="P" * 20))
    client = SlurmClient(env=env)
    assert [j.job_id for j in client.jobs()] == ["41"] and client.last_read == "json"
    assert [c[:2] for c in calls(log)] == [["-h", "--states=all"], ["--json", "--states=all"]]


def test_a_long_reason_is_read_whole_from_the_wide_layout(tmp_path: Path) -> None:
    """A pending job's Reason names the nodes it cannot have (seen at 1,000 jobs when a
    node drained: every cycle read 31 MB of JSON at 10,000 jobs): longer than the
    narrow field, it is read again wide, never cut and never JSON."""
    reason = "ReqNodeNotAvail, UnavailableNodes:" + ",".join(f"gpu-node-{i:03d}" for i in range(9))
    assert 96 <= len(reason) < 1024
    env, log = fake_squeue(tmp_path, record(WIDE, Reason=reason), record(NARROW, Reason=reason))
    client = SlurmClient(env=env)
    (j,) = client.jobs()
    assert (j.reason, j.reason_detail, client.last_read) == (
        "ReqNodeNotAvail",
        reason,
        "fixed-width",
    )
    assert len(calls(log)) == 2 and not any("--json" in c for c in calls(log))


def test_an_end_time_of_none_is_no_end_time() -> None:
    """squeue prints EndTime NONE for a job with no time limit whose end is ahead (a
    job a node failure ended while Slurm requeues it): no end, not a fallback."""
    (j,) = jobs_from_fixed_width(record(State="NODE_FAIL", EndTime="NONE", StartTime="1795633578"))
    assert j.state == "NODE_FAIL" and j.end_time is None


def test_client_falls_back_when_squeue_refuses_the_format(tmp_path: Path) -> None:
    env, log = fake_squeue(tmp_path, b"")
    script = (tmp_path / "bin" / "squeue").read_text()
    script = script.replace("else:\n", "else:\n    sys.exit('Invalid job format specification')\n")
    (tmp_path / "bin" / "squeue").write_text(script)
    client = SlurmClient(env=env)
    assert [j.job_id for j in client.jobs()] == ["41"] and client.last_read == "json"


def test_the_switch_forces_either_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env, log = fake_squeue(tmp_path, b"", record(NARROW, Comment="from -O"))
    assert SlurmClient(env=env, fast_read=False).jobs()[0].comment == ""
    assert calls(log) == [["--json", "--states=all"]]
    monkeypatch.setattr(SlurmClient, "fast_read", False)
    assert SlurmClient(env=env).last_read == "" and SlurmClient(env=env).jobs()[0].comment == ""
    assert SlurmClient(env=env, fast_read=True).jobs()[0].comment == "from -O"


def test_a_record_read_before_is_not_parsed_again_and_a_changed_one_is() -> None:
    first = record(JobID="41") + record(JobID="42", Comment="mig:mem=8G")
    keep: dict[bytes, Job] = {}
    jobs = jobs_from_fixed_width(first, WIDE, None, keep)
    assert len(keep) == 2
    again: dict[bytes, Job] = {}
    changed = record(JobID="41") + record(JobID="42", Comment="mig:mem=16G", State="RUNNING")
    later = jobs_from_fixed_width(changed, WIDE, keep, again)
    assert later[0] is jobs[0]  # the same bytes: the same job, not parsed anew
    assert later[1] is not jobs[1] and later[1].comment == "mig:mem=16G"
    assert later == jobs_from_fixed_width(changed)  # what a fresh parse gives
    assert set(again) == {changed[:RECORD_SIZE], changed[RECORD_SIZE:]}  # only this read's
    # a record that fills a field is refused whatever was read before
    with pytest.raises(FieldFilled):
        jobs_from_fixed_width(record(Comment="c" * 2000), WIDE, again, {})


def test_the_json_read_takes_a_name_that_is_not_utf8(tmp_path: Path) -> None:
    """Issue 34, hole 1, on the JSON path (22.05 reads it when any name in the queue is
    too long for the fixed width): Slurm prints the name's bytes as they are; the job
    is read with U+FFFD in place of the bad byte and the other jobs as they are."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    jobs = [
        {"job_id": 41, "name": "NAME", "job_state": "PENDING", "priority": 0},
        {"job_id": 42, "name": "honest", "job_state": "PENDING", "priority": 0},
    ]
    out = json.dumps({"jobs": jobs}).encode().replace(b"NAME", b"bad\xff\xe9")
    (tmp_path / "out").write_bytes(out)
    (bin_dir / "squeue").write_text(
        f"#!{sys.executable}\nimport sys\n"
        f"sys.stdout.buffer.write(open({str(tmp_path / 'out')!r}, 'rb').read())\n"
    )
    (bin_dir / "squeue").chmod(0o755)
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    got = SlurmClient(env=env, fast_read=False).jobs()
    assert [(j.job_id, j.name) for j in got] == [("41", "bad\ufffd\ufffd"), ("42", "honest")]
