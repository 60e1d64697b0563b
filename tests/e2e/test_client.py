"""SlurmClient against a real Slurm 22.05 on loopback, its JSON reading for newer Slurm
versions, and the Slurm behaviour the hooks rely on (pinned here so an upgrade that
changes it fails loudly)."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_mig.daemon.cycle import Release, admin_comment_for, parse_admin_comment
from slurm_mig.daemon.daemon import apply_actions
from slurm_mig.geometry import Placement
from slurm_mig.slurm.assignment import Assignment
from slurm_mig.slurm.client import (
    Job,
    Node,
    SlurmClient,
    SlurmError,
    job_from_json,
    nodes_from_json,
)

from .cluster import LocalSlurm
from .conftest import squeue_job


@pytest.fixture(scope="module")
def cluster(slurm_shared) -> LocalSlurm:
    return slurm_shared(nodes=("n1", "n2"), requeue_delay=5)


def wait_job(cluster: LocalSlurm, client: SlurmClient, job_id: str, cond, what: str) -> Job:
    cluster.wait_for(lambda: cond(squeue_job(client, job_id)), 30, f"job {job_id}: {what}")
    return squeue_job(client, job_id)


# --- reading jobs ----------------------------------------------------------------------
def test_held_pending_job_fields(cluster: LocalSlurm, client: SlurmClient) -> None:
    before = time.time()
    jid = cluster.sbatch(
        "true", "--hold", "--time=10", partition="mig", name="held", comment="mig:key=a  two"
    )
    j = squeue_job(client, jid)
    assert (j.name, j.user, j.partition) == ("held", "nobody", "mig")  # the e2e job_user
    assert (j.state, j.reason, j.held) == ("PENDING", "JobHeldUser", True)
    assert j.comment == "mig:key=a  two"
    assert (j.admin_comment, j.nodes, j.required_nodes) == ("", "", "")
    assert j.time_limit == 600.0
    assert j.submit_time is not None and before - 2 <= j.submit_time <= time.time() + 1
    assert (j.start_time, j.end_time, j.exit_code, j.restart_count) == (None, None, None, 0)
    assert not j.finished
    cluster.run("scancel", jid)


def test_finished_jobs_stay_listed_with_times_and_exit_codes(
    cluster: LocalSlurm, client: SlurmClient
) -> None:
    ok = cluster.sbatch("sleep 1", partition="debug")
    bad = cluster.sbatch("exit 3", partition="debug")
    killed = cluster.sbatch("kill -9 $$", partition="debug")
    for jid in (ok, bad, killed):
        cluster.wait_job(jid, ["COMPLETED", "FAILED"])
    j = squeue_job(client, ok)
    assert (j.state, j.exit_code, j.held, j.nodes) == ("COMPLETED", 0, False, j.nodes)
    assert j.nodes in ("n1", "n2") and j.finished
    assert j.start_time is not None and j.end_time is not None
    assert 0.5 <= j.end_time - j.start_time <= 5
    assert j.time_limit is None  # unlimited (22.05 says 365 days once it started)
    assert (squeue_job(client, bad).state, squeue_job(client, bad).exit_code) == ("FAILED", 3)
    assert (squeue_job(client, killed).state, squeue_job(client, killed).exit_code) == (
        "FAILED",
        128 + 9,
    )


def test_running_job_and_partition_filter(cluster: LocalSlurm, client: SlurmClient) -> None:
    jid = cluster.sbatch("sleep 30", "--nodelist=n1", partition="mig")
    j = wait_job(cluster, client, jid, lambda j: j.state == "RUNNING", "running")
    assert (j.nodes, j.required_nodes, j.held) == ("n1", "n1", False)
    assert j.start_time is not None and j.end_time is None and j.exit_code is None
    assert jid in {j.job_id for j in client.jobs("mig")}
    assert jid not in {j.job_id for j in client.jobs("debug")}
    assert all(j.partition == "mig" for j in client.jobs("mig"))
    cluster.run("scancel", jid)


def _same_jobs_both_ways(cluster: LocalSlurm, partition: str | None) -> dict[str, Job]:
    """The jobs squeue's fixed-width output gives, after checking they equal the JSON
    path's field by field (read until two fixed-width reads around the JSON agree)."""
    fast = SlurmClient(env=cluster.env, fast_read=True)
    slow = SlurmClient(env=cluster.env, fast_read=False)
    for _ in range(10):
        before = fast.jobs(partition)
        assert fast.last_read == "fixed-width"
        by_json = slow.jobs(partition)
        assert slow.last_read == "json"
        if fast.jobs(partition) == before:  # nothing changed meanwhile
            break
        time.sleep(0.5)
    else:
        pytest.fail("the jobs kept changing")
    assert [j.job_id for j in before] == [j.job_id for j in by_json]
    diffs = [
        f"job {a.job_id} {name}: fixed-width {getattr(a, name)!r} != JSON {getattr(b, name)!r}"
        for a, b in zip(before, by_json, strict=True)
        for name in Job.__dataclass_fields__
        if getattr(a, name) != getattr(b, name)
        # squeue pads with spaces: a comment's trailing ones cannot be seen
        and not (name == "comment" and a.comment == b.comment.rstrip(" "))
        # squeue -r -O has no field for an array's throttle (the planner learns it from
        # JobArrayTaskLimit instead: slurm_mig.daemon.cycle.arrays)
        and not (name == "array_throttle" and a.array_throttle is None)
    ]
    assert not diffs, "\n".join(diffs)
    return {j.job_id: j for j in before}


def test_fixed_width_reader_equals_json_field_by_field(
    cluster: LocalSlurm, client: SlurmClient
) -> None:
    evil = "x\ny AdminComment=evil | tab\there NodeList=n2 mig:mem=1G"
    name = "a b\tc  |d"
    ids = {
        "held": cluster.sbatch(
            "true", "--hold", "--time=30:00", partition="mig", name=name, comment=evil
        ),
        "released": cluster.sbatch("sleep 300", "--hold", "--time=1-00:00:00", partition="mig"),
        "ok": cluster.sbatch("true", partition="debug"),
        "failed": cluster.sbatch("exit 3", partition="debug"),
        "killed": cluster.sbatch("kill -9 $$", partition="debug"),
        "array": cluster.sbatch("true", "--array=1-3", "--hold", partition="mig"),
        "spaces": cluster.sbatch("true", "--hold", partition="mig", comment="  lead trail  "),
    }
    ids["dep"] = cluster.sbatch(
        "true", f"--dependency=afterok:{ids['released']}", "--begin=now+1hour",
        "--deadline=now+3hours", "--time=90", partition="mig",
    )  # fmt: skip
    client.update_job(ids["held"], AdminComment='slurm-mig:{"gpu": 1} \n x')
    client.release(ids["released"])
    for key in ("ok", "failed", "killed"):
        cluster.wait_job(ids[key], ["COMPLETED", "FAILED"])
    ids["requeued"] = cluster.sbatch("true", "--nodelist=n2", partition="mig")
    cluster.wait_job(ids["requeued"], ["COMPLETED"])
    client.requeue(ids["requeued"], hold=True)
    wait_job(cluster, client, ids["released"], lambda j: j.state == "RUNNING", "running")
    wait_job(cluster, client, ids["requeued"], lambda j: j.state == "PENDING", "requeued")

    jobs = _same_jobs_both_ways(cluster, None)
    assert _same_jobs_both_ways(cluster, "mig").keys() <= jobs.keys()
    held = jobs[ids["held"]]
    assert (held.comment, held.name, held.held) == (evil, name, True)
    assert held.admin_comment == 'slurm-mig:{"gpu": 1} \n x' and held.time_limit == 1800.0
    assert jobs[ids["released"]].state == "RUNNING" and jobs[ids["released"]].nodes
    assert (jobs[ids["killed"]].exit_code, jobs[ids["failed"]].exit_code) == (137, 3)
    requeued = jobs[ids["requeued"]]
    assert (requeued.restart_count, requeued.held, requeued.reason_detail) == (
        1, True, "job requeued in held state",
    )  # fmt: skip
    dep = jobs[ids["dep"]]
    assert dep.dependency == f"afterok:{ids['released']}(unfulfilled)"
    assert dep.eligible_time and dep.deadline and dep.time_limit == 5400.0
    # a pending array (one record in slurmctld) is a job per task both ways (test_job_ids)
    tasks = [f"{ids['array']}_{t}" for t in (1, 2, 3)]
    assert sorted(j for j in jobs if j.startswith(f"{ids['array']}_")) == tasks
    assert all(jobs[t].held for t in tasks)
    # the one difference: squeue pads with spaces, so a comment's trailing ones are lost
    assert jobs[ids["spaces"]].comment == "  lead trail"
    assert squeue_job(SlurmClient(env=cluster.env, fast_read=False), ids["spaces"]).comment == (
        "  lead trail  "
    )
    for jid in (ids["released"], ids["dep"], ids["held"], ids["array"], ids["spaces"]):
        cluster.run("scancel", jid)
    cluster.run("scancel", ids["requeued"])


def test_a_comment_too_long_for_the_narrow_fields_is_read_wide(
    cluster: LocalSlurm, client: SlurmClient, caplog: pytest.LogCaptureFixture
) -> None:
    long = ("mig:mem=1G " + "w\n|" * 300)[:1024]  # the most Slurm takes
    name = "n\t" * 70 + "x"  # longer than the narrow field too
    jid = cluster.sbatch("true", "--hold", partition="mig", comment=long, name=name)
    with caplog.at_level("WARNING", logger="slurm_mig.slurm.client"):
        jobs = _same_jobs_both_ways(cluster, "mig")
    assert (jobs[jid].comment, jobs[jid].name) == (long, name)
    assert not caplog.messages  # read wide, not as JSON
    cluster.run("scancel", jid)


# --- changing jobs ---------------------------------------------------------------------
def test_hold_and_release(cluster: LocalSlurm, client: SlurmClient) -> None:
    jid = cluster.sbatch("echo ran", "--begin=now+1hour", partition="mig")
    assert not squeue_job(client, jid).held
    client.hold(jid)
    j = squeue_job(client, jid)
    assert (j.held, j.reason, j.state) == (True, "JobHeldAdmin", "PENDING")
    client.release(jid)
    assert not squeue_job(client, jid).held
    cluster.run("scancel", jid)


def test_a_move_in_place_is_one_update_of_a_pending_unheld_job(
    cluster: LocalSlurm, client: SlurmClient
) -> None:
    """What the daemon sends when a released job's plan breaks (Slurm requeued the job
    it was released ahead of): one update of the pending, unheld job, its new record,
    node and token, its afterany cleared; Slurm starts it there, no hold or release."""
    blocker = cluster.sbatch("sleep 300", "--nodelist=n1", partition="mig")
    wait_job(cluster, client, blocker, lambda j: j.state == "RUNNING", "running")
    jid = cluster.sbatch("true", "--hold", partition="mig")
    client.update_job(jid, ReqNodeList="n1", Dependency=f"afterany:{blocker}")
    client.release(jid)  # released ahead of the blocker
    j = squeue_job(client, jid)
    assert (j.state, j.held, j.required_nodes) == ("PENDING", False, "n1") and j.dependency
    a = Assignment(jid, 0, "n2", 0, "A100-40GB", "7g.40gb", Placement(0, 8), 0, 0, 60.0, 1.0)
    moved = Release(
        jid,
        a,
        "",
        fields=(("AdminComment", admin_comment_for(a)), ("ReqNodeList", "n2"), ("Dependency", "0")),
        in_place="released ahead of a job that went back to the queue",
    )
    report = apply_actions([moved], client, key=bytes(range(32)))
    assert (report.released, report.failed, report.calls) == ([jid], [], 1)
    j = wait_job(cluster, client, jid, lambda j: j.state == "COMPLETED", "completed on n2")
    assert (j.nodes, j.required_nodes, j.dependency) == ("n2", "n2", "")
    assert parse_admin_comment(j.admin_comment) == parse_admin_comment(admin_comment_for(a))
    cluster.run("scancel", blocker)


def test_update_nodelist_comment_and_admin_comment(
    cluster: LocalSlurm, client: SlurmClient
) -> None:
    jid = cluster.sbatch("true", "--hold", partition="mig", comment="mig:mem=1G")
    comment = """mig:mem=1G note "quoted" 'single' $HOME \\ tab\there migplan=v1.a-b_c.d"""
    admin = 'slurm-mig:{"gpu": 1, "profile": "3g.20gb", "node": "n2"}'
    client.update_job(jid, NodeList="n2", Comment=comment, AdminComment=admin)
    j = squeue_job(client, jid)
    assert (j.required_nodes, j.comment, j.admin_comment) == ("n2", comment, admin)
    client.update_job(jid, NodeList="", AdminComment="")
    j = squeue_job(client, jid)
    assert (j.required_nodes, j.admin_comment, j.comment) == ("", "", comment)
    client.update_job(jid, NodeList="n1")
    client.release(jid)
    j = wait_job(cluster, client, jid, lambda j: j.state == "COMPLETED", "completed")
    assert j.nodes == "n1"


def test_requeue_held_and_requeue(cluster: LocalSlurm, client: SlurmClient) -> None:
    jid = cluster.sbatch("sleep 30", partition="mig")
    wait_job(cluster, client, jid, lambda j: j.state == "RUNNING", "running")
    client.requeue(jid, hold=True)
    j = wait_job(cluster, client, jid, lambda j: j.state == "PENDING", "requeued")
    assert (j.held, j.restart_count, j.start_time, j.end_time) == (True, 1, None, None)
    cluster.run("scancel", jid)

    done = cluster.sbatch("echo run", partition="mig")
    wait_job(cluster, client, done, lambda j: j.state == "COMPLETED", "completed")
    client.requeue(done)  # a finished batch job runs again (after requeue_delay)
    j = squeue_job(client, done)
    assert (j.state, j.held, j.restart_count) == ("PENDING", False, 1)
    assert j.reason in ("None", "BeginTime")  # BeginTime once the scheduler looked
    j = wait_job(cluster, client, done, lambda j: j.state == "COMPLETED", "second run")
    assert j.restart_count == 1 and j.exit_code == 0


# --- nodes -----------------------------------------------------------------------------
def test_nodes_and_drain(cluster: LocalSlurm, client: SlurmClient) -> None:
    nodes = {n.name: n for n in client.nodes("mig")}
    assert set(nodes) == {"n1", "n2"}
    n2 = nodes["n2"]
    assert (n2.cpus, set(n2.partitions), n2.usable, n2.drained) == (
        16,
        {"mig", "debug"},
        True,
        False,
    )
    assert n2.state <= {"IDLE", "MIXED", "ALLOCATED"}
    assert client.nodes("nosuch") == []
    try:
        client.drain_node("n2", "slurm-mig: NVML error: Insufficient Permissions")
        n2 = {n.name: n for n in client.nodes()}["n2"]
        assert n2.drained and not n2.usable and "DRAIN" in n2.state
        assert n2.reason == "slurm-mig: NVML error: Insufficient Permissions"
    finally:
        client.resume_node("n2")
    # RESUME leaves the node NOT_RESPONDING until slurmctld's next ping reaches it
    cluster.wait_for(lambda: {n.name: n for n in client.nodes()}["n2"].usable, 20, "n2 usable")
    n2 = {n.name: n for n in client.nodes()}["n2"]
    assert not n2.drained
    # 22.05 and 26.05 clear the reason on RESUME, 24.11 keeps showing the last one;
    # slurm-mig reads a node's reason only while it is drained
    assert n2.reason in ("", "slurm-mig: NVML error: Insufficient Permissions")


def test_two_drained_nodes_keep_their_own_reasons(cluster: LocalSlurm, client: SlurmClient) -> None:
    """23.11+ group nodes of one state in plain ``sinfo --json``: each must keep its reason."""
    reasons = {"n1": "slurm-mig: NVML error on n1", "n2": "slurm-mig: other fault"}
    try:
        for name, reason in reasons.items():
            client.drain_node(name, reason)
        nodes = {n.name: n for n in client.nodes("mig")}
        assert {name: n.reason for name, n in nodes.items()} == reasons
        assert not any(n.usable for n in nodes.values())
    finally:
        for name in reasons:
            client.resume_node(name)
    cluster.wait_for(lambda: all(n.usable for n in client.nodes()), 20, "nodes usable")


def test_squeue_reads_one_partition_where_slurm_honours_it(
    cluster: LocalSlurm, tmp_path: Path
) -> None:
    """From 24.05 squeue honours -p (slurmctld then packs only that partition's jobs)."""
    real = shutil.which("squeue", path=cluster.env["PATH"])
    log = tmp_path / "argv"
    (tmp_path / "squeue").write_text(f'#!/bin/sh\necho "$@" >> {log}\nexec {real} "$@"\n')
    os.chmod(tmp_path / "squeue", 0o755)
    env = {**cluster.env, "PATH": f"{tmp_path}:{cluster.env['PATH']}"}
    jid = cluster.sbatch("true", "--hold", partition="debug")
    client = SlurmClient(env=env, fast_read=False)  # the JSON path (-O always passes -p)
    assert jid not in {j.job_id for j in client.jobs("mig")}
    assert jid in {j.job_id for j in client.jobs()}
    asked = log.read_text().splitlines()
    honoured = cluster.install.version >= (24, 5)
    assert asked == [
        "--json --states=all" + (" --partition=mig" if honoured else ""),
        "--json --states=all",
    ]
    assert client.jobs("nosuch") == []  # an unknown partition is no error, as before
    cluster.run("scancel", jid)


# --- errors ----------------------------------------------------------------------------
def test_failing_command_raises_with_command_and_stderr(client: SlurmClient) -> None:
    with pytest.raises(SlurmError) as err:
        client.hold("999999")
    assert err.value.command == ("scontrol", "hold", "999999")
    assert "Invalid job id" in err.value.stderr and "scontrol hold 999999" in str(err.value)
    with pytest.raises(SlurmError, match="Invalid node name"):
        client.drain_node("nosuch", "x")
    with pytest.raises(SlurmError, match="Bogus"):
        client.update_job("1", Bogus="1")


def test_bad_arguments_never_reach_slurm(client: SlurmClient) -> None:
    with pytest.raises(ValueError, match="not a Slurm job id"):
        client.hold("12 Priority=1")
    with pytest.raises(ValueError, match="not a Slurm job field name"):
        client.update_job("12", **{"Comment=x Priority": "1"})
    with pytest.raises(ValueError, match="needs a reason"):
        client.drain_node("n1", " ")
    with pytest.raises(ValueError, match="at least one field"):
        client.update_job("12")


def test_missing_slurm_commands_say_so(tmp_path: Path) -> None:
    client = SlurmClient(env={"PATH": str(tmp_path)})
    with pytest.raises(SlurmError, match="Slurm's client tools are not installed"):
        client.jobs()
    with pytest.raises(SlurmError, match="'scontrol' not found"):
        client.release("1")


def test_unreachable_controller_is_an_error(tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"
    conf.write_text(
        "ClusterName=x\nSlurmctldHost=nohost(127.0.0.1)\nSlurmctldPort=9\nMessageTimeout=1\n"
    )
    env = {"PATH": os.environ["PATH"] + ":/usr/sbin", "SLURM_CONF": str(conf)}
    if not any(Path(d, "squeue").exists() for d in env["PATH"].split(":")):
        pytest.skip("squeue not installed")
    with pytest.raises(SlurmError) as err:
        SlurmClient(env=env, timeout=20).jobs()
    # squeue --json exits 0 here, with the failure in its JSON "errors"
    assert str(err.value).startswith("'squeue --json --states=all' failed: Failed while looking")


# --- JSON of other Slurm versions (no Slurm needed) -------------------------------------
def _set(n):
    return {"set": True, "infinite": False, "number": n}


UNSET = {"set": False, "infinite": False, "number": 0}
INFINITE = {"set": False, "infinite": True, "number": 0}


def test_job_json_of_slurm_24() -> None:
    record = {
        "job_id": 42,
        "name": "train",
        "user_name": "alice",
        "partition": "mig",
        "job_state": ["PENDING"],
        "state_reason": "JobHeldAdmin",
        "hold": True,
        "priority": _set(0),
        "comment": "mig:mem=4G",
        "admin_comment": "slurm-mig:{}",
        "nodes": "",
        "required_nodes": "gpu01",
        "time_limit": _set(90),
        "submit_time": _set(1700000000),
        "start_time": _set(1700000500),  # an estimate: not reported
        "end_time": _set(1700005900),
        "restart_cnt": 2,
        "exit_code": {"status": ["PENDING"], "return_code": _set(0), "signal": {"id": UNSET}},
    }
    j = job_from_json(record)
    assert j == Job(
        job_id="42",
        name="train",
        user="alice",
        partition="mig",
        state="PENDING",
        reason="JobHeldAdmin",
        held=True,
        comment="mig:mem=4G",
        admin_comment="slurm-mig:{}",
        nodes="",
        required_nodes="gpu01",
        time_limit=5400.0,
        submit_time=1700000000.0,
        start_time=None,
        end_time=None,
        restart_count=2,
        exit_code=None,
    )
    done = job_from_json(
        {
            **record,
            "job_state": ["COMPLETED", "COMPLETING"],
            "hold": False,
            "priority": _set(100),
            "time_limit": INFINITE,
            "exit_code": {
                "status": ["SIGNALED"],
                "return_code": UNSET,
                "signal": {"id": _set(15), "name": "TERM"},
            },
        }
    )
    assert (done.state, done.held, done.time_limit, done.exit_code) == (
        "COMPLETING",
        False,
        None,
        143,
    )
    assert done.start_time == 1700000500.0 and done.end_time == 1700005900.0 and done.finished
    exited = job_from_json(
        {**record, "job_state": ["FAILED"], "exit_code": {"status": ["EXITED"], "return_code": 3}}
    )
    assert exited.exit_code == 3


def test_job_json_of_slurm_22_raw_values() -> None:
    base = {"job_id": 7, "job_state": "FAILED", "priority": 1, "time_limit": 5, "restart_cnt": 0}
    assert job_from_json({**base, "exit_code": 768}).exit_code == 3
    assert job_from_json({**base, "exit_code": 9}).exit_code == 137
    assert job_from_json({**base, "time_limit": 525600}).time_limit is None
    assert job_from_json({**base, "time_limit": None}).time_limit is None
    assert job_from_json({**base, "time_limit": 4294967294}).time_limit is None
    assert job_from_json({**base, "job_state": "RUNNING", "exit_code": 0}).exit_code is None
    held = job_from_json({**base, "job_state": "PENDING", "priority": 0})
    assert held.held
    assert not job_from_json({**base, "job_state": "RUNNING", "priority": 0}).held


def test_node_json_of_slurm_22_and_24() -> None:
    old = nodes_from_json(
        {
            "nodes": [
                {
                    "name": "a",
                    "state": "idle",
                    "state_flags": ["DRAIN"],
                    "reason": "r",
                    "cpus": 8,
                    "partitions": ["mig"],
                },
                {
                    "name": "b",
                    "state": "down",
                    "state_flags": ["NOT_RESPONDING"],
                    "reason": "",
                    "cpus": 8,
                    "partitions": [],
                },
            ]
        }
    )
    assert old[0] == Node("a", frozenset({"IDLE", "DRAIN"}), "r", 8, ("mig",))
    assert old[0].drained and not old[0].usable and not old[1].usable
    new = nodes_from_json(
        {
            "sinfo": [
                {
                    "nodes": {"nodes": ["g1", "g2"]},
                    "node": {"state": ["MIXED"]},
                    "partition": {"name": "mig"},
                    "cpus": {"maximum": 64, "minimum": 64},
                    "reason": {"description": ""},
                },
                {
                    "nodes": {"nodes": ["g1"]},
                    "node": {"state": ["MIXED"]},
                    "partition": {"name": "debug"},
                    "cpus": {"maximum": 64},
                    "reason": {"description": ""},
                },
                {
                    "nodes": {"nodes": ["g3"]},
                    "node": {"state": ["IDLE", "DRAIN"]},
                    "partition": {"name": "mig"},
                    "cpus": {"maximum": 32},
                    "reason": {"description": "slurm-mig: NVML"},
                },
            ]
        }
    )
    by_name = {n.name: n for n in new}
    assert by_name["g1"] == Node("g1", frozenset({"MIXED"}), "", 64, ("mig", "debug"))
    assert by_name["g2"].partitions == ("mig",) and by_name["g2"].usable
    assert by_name["g3"].drained and by_name["g3"].reason == "slurm-mig: NVML"


def test_pyslurm_is_used_when_it_imports(monkeypatch: pytest.MonkeyPatch) -> None:
    record = types.SimpleNamespace(
        id=5, name="n", user_name="bob", partition="mig", state="RUNNING", state_reason="None",
        priority=10, comment="c", admin_comment="", allocated_nodes="g1", required_nodes="g1",
        time_limit=30, submit_time=100, start_time=200, end_time=None, requeue_count=1,
        exit_code=0, exit_code_signal=0,
    )  # fmt: skip
    fake = types.ModuleType("pyslurm")
    fake.Jobs = types.SimpleNamespace(load=lambda: {5: record})
    monkeypatch.setitem(sys.modules, "pyslurm", fake)
    monkeypatch.setenv("PATH", "/nonexistent")  # squeue would fail: pyslurm must be used
    (j,) = SlurmClient().jobs()
    assert (j.job_id, j.user, j.state, j.nodes, j.time_limit) == (
        "5",
        "bob",
        "RUNNING",
        "g1",
        1800.0,
    )
    assert (j.start_time, j.end_time, j.restart_count) == (200.0, None, 1)
    # an explicit environment means another cluster: the commands, never pyslurm
    with pytest.raises(SlurmError, match="not installed"):
        SlurmClient(env={"PATH": "/nonexistent"}).jobs()


# --- Slurm 22.05 behaviour the hooks rely on ------------------------------------------
HOOK = """#!/bin/sh
D={dump}
R=${{SLURM_JOB_RESTART_COUNT:-${{SLURM_RESTART_COUNT:-none}}}}
/usr/bin/env > $D/.{kind}.$$ && mv $D/.{kind}.$$ $D/{kind}.$SLURM_JOB_ID.$R
{body}
"""
PROLOG_BODY = """case "$SLURM_JOB_COMMENT" in
  *drain-me*) /usr/bin/scontrol update NodeName=$SLURMD_NODENAME State=DRAIN Reason="slurm-mig: test drain"; exit 1;;
  *fail-prolog*) exit 1;;
  *slow-hooks*) sleep 2;;
esac
exit 0"""
TASK_PROLOG_BODY = """echo "print hello from the task prolog"
case "$SLURM_JOB_NAME" in
  tp-fail) exit 3;;
  tp-requeuehold) scontrol requeuehold $SLURM_JOB_ID > $D/.rqh.$$ 2>&1; echo "rc=$?" >> $D/.rqh.$$; mv $D/.rqh.$$ $D/rqh.$SLURM_JOB_ID; exit 1;;
esac
echo "export FROM_TASK_PROLOG=yes"
exit 0"""


@pytest.fixture(scope="module")
def hooked(slurm_shared) -> Iterator[tuple[LocalSlurm, Path]]:
    # not under pytest's tmp_path: that is root-only, and the TaskProlog runs as nobody
    base = Path(tempfile.mkdtemp(prefix="slurm-mig-hooks-"))
    dump = base / "dump"
    dump.mkdir()
    os.chmod(dump, 0o1777)
    os.chmod(base, 0o755)
    paths = {}
    for kind, body in (
        ("prolog", PROLOG_BODY),
        ("epilog", 'case "$SLURM_JOB_COMMENT" in *slow-hooks*) sleep 2;; esac'),
        ("taskprolog", TASK_PROLOG_BODY),
    ):
        paths[kind] = base / kind
        paths[kind].write_text(HOOK.format(dump=dump, kind=kind, body=body))
        os.chmod(paths[kind], 0o755)
    cluster = slurm_shared(
        nodes=("h1", "h2"),
        prolog=paths["prolog"],
        epilog=paths["epilog"],
        task_prolog=paths["taskprolog"],
        slurmd_env={"SLURM_MIG_CONFIG": "/given/to/slurmd"},
        requeue_delay=5,
    )
    yield cluster, dump
    shutil.rmtree(base, ignore_errors=True)


def read_env(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def test_hook_environments(hooked: tuple[LocalSlurm, Path]) -> None:
    cluster, dump = hooked
    jid = cluster.sbatch(
        "echo FROM=$FROM_TASK_PROLOG",
        "--nodelist=h1",
        partition="mig",
        comment="mig:mem=1G x",
        name="envjob",
    )
    cluster.wait_job(jid, ["COMPLETED"])
    assert cluster.job_output(jid) == "hello from the task prolog\nFROM=yes\n"
    cluster.wait_for(lambda: (dump / f"epilog.{jid}.0").exists(), 10, "the epilog")
    prolog = read_env(dump / f"prolog.{jid}.0")
    assert "PATH" not in prolog and "SLURM_MIG_CONFIG" not in prolog  # clean environment
    assert prolog["SLURM_JOB_COMMENT"] == "mig:mem=1G x"
    assert prolog["SLURM_JOB_RESTART_COUNT"] == "0"
    assert (prolog["SLURMD_NODENAME"], prolog["SLURM_JOB_PARTITION"]) == ("h1", "mig")
    assert (prolog["SLURM_JOB_ID"], prolog["SLURM_JOB_UID"], prolog["SLURM_JOB_USER"]) == (
        jid,
        "65534",
        "nobody",
    )
    assert prolog["SLURM_SCRIPT_CONTEXT"] == "prolog_slurmd"
    assert "SLURM_JOB_NAME" not in prolog
    epilog = read_env(dump / f"epilog.{jid}.0")
    assert epilog["SLURM_JOB_COMMENT"] == "mig:mem=1G x" and epilog["SLURM_JOB_EXIT_CODE"] == "0"
    assert "PATH" not in epilog
    task = read_env(dump / f"taskprolog.{jid}.none")  # no restart count on the first run
    assert "SLURM_JOB_COMMENT" not in task and "SLURM_JOB_RESTART_COUNT" not in task
    assert (task["SLURM_JOB_ID"], task["SLURM_JOB_NAME"], task["SLURMD_NODENAME"]) == (
        jid,
        "envjob",
        "h1",
    )
    assert task["SLURM_JOB_PARTITION"] == "mig" and "PATH" in task

    no_comment = cluster.sbatch("true", "--nodelist=h1", partition="mig")
    cluster.wait_job(no_comment, ["COMPLETED"])
    assert "SLURM_JOB_COMMENT" not in read_env(dump / f"prolog.{no_comment}.0")

    # after a requeue: the prolog's count goes up, the TaskProlog gets SLURM_RESTART_COUNT
    SlurmClient(env=cluster.env).requeue(jid)
    cluster.wait_for(lambda: (dump / f"taskprolog.{jid}.1").exists(), 30, "the second run")
    assert read_env(dump / f"prolog.{jid}.1")["SLURM_JOB_RESTART_COUNT"] == "1"
    assert read_env(dump / f"taskprolog.{jid}.1")["SLURM_RESTART_COUNT"] == "1"


def test_hook_env_reaches_the_hooks_through_a_wrapper(slurm, tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o755)
    out = tmp_path / "seen"
    prolog = tmp_path / "prolog"
    prolog.write_text(f'#!/bin/sh\necho "$SLURM_MIG_CONFIG" > {out}\n')
    os.chmod(prolog, 0o755)
    cluster = slurm(prolog=prolog, hook_env={"SLURM_MIG_CONFIG": "/etc/x y/config.toml"})
    cluster.wait_job(cluster.sbatch("true"), ["COMPLETED"])
    assert out.read_text() == "/etc/x y/config.toml\n"


def test_task_prolog_failure_fails_the_job_without_running_it(hooked) -> None:
    cluster, _ = hooked
    jid = cluster.sbatch("echo script-ran", partition="mig", name="tp-fail")
    assert cluster.wait_job(jid, ["FAILED", "COMPLETED"]) == "FAILED"
    assert cluster.job_field(jid, "ExitCode") == "3:0"
    assert cluster.job_field(jid, "Reason") == "NonZeroExitCode"
    assert cluster.job_field(jid, "Restarts") == "0"
    out = cluster.job_output(jid)
    assert "hello from the task prolog" in out and "TaskProlog failed status=3" in out
    assert "script-ran" not in out
    j = squeue_job(SlurmClient(env=cluster.env), jid)
    assert (j.state, j.exit_code) == ("FAILED", 3)


def test_task_prolog_as_the_user_can_requeuehold_its_job(hooked) -> None:
    cluster, dump = hooked
    jid = cluster.sbatch("echo script-ran", partition="mig", name="tp-requeuehold", user="nobody")
    client = SlurmClient(env=cluster.env)
    j = wait_job(cluster, client, jid, _requeued, "requeued")
    assert (j.held, j.reason, j.user) == (True, "JobHeldUser", "nobody")
    assert j.reason_detail == "job requeued in held state"
    cluster.wait_for((dump / f"rqh.{jid}").exists, 10, "the TaskProlog's record")
    assert (dump / f"rqh.{jid}").read_text().strip().endswith("rc=0")
    assert "script-ran" not in cluster.job_output(jid)
    cluster.run("scancel", jid)


def _requeued(job) -> bool:
    return job.restart_count == 1 and job.state == "PENDING"


def test_prolog_drain_keeps_our_reason_and_requeues_the_job_held(hooked) -> None:
    cluster, dump = hooked
    client = SlurmClient(env=cluster.env)
    try:
        jid = cluster.sbatch("true", "--nodelist=h2", partition="mig", comment="drain-me")
        # restart_count turns 1 while the Epilog still runs (COMPLETING); wait for the requeue
        j = wait_job(cluster, client, jid, _requeued, "requeued")
        assert (j.state, j.held, j.reason) == ("PENDING", True, "JobHeldUser")
        assert j.reason_detail == "launch failed requeued held"
        h2 = {n.name: n for n in client.nodes()}["h2"]
        assert h2.drained and h2.reason == "slurm-mig: test drain"
        # the epilog after the failed prolog already sees the next restart count
        cluster.wait_for(lambda: (dump / f"epilog.{jid}.1").exists(), 10, "the epilog")
        assert not (dump / f"epilog.{jid}.0").exists()
        cluster.run("scancel", jid)

        client.resume_node("h2")
        plain = cluster.sbatch("true", "--nodelist=h2", partition="mig", comment="fail-prolog")
        wait_job(cluster, client, plain, _requeued, "requeued")
        h2 = {n.name: n for n in client.nodes()}["h2"]
        assert h2.drained and h2.reason == "Prolog error"
        cluster.run("scancel", plain)
    finally:
        client.resume_node("h2")


def test_slow_command_times_out(tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"  # squeue retries an unreachable slurmctld for ~9 s
    conf.write_text("ClusterName=x\nSlurmctldHost=nohost(127.0.0.1)\nSlurmctldPort=9\n")
    env = {"PATH": os.environ["PATH"] + ":/usr/sbin", "SLURM_CONF": str(conf)}
    if not any(Path(d, "squeue").exists() for d in env["PATH"].split(":")):
        pytest.skip("squeue not installed")
    with pytest.raises(SlurmError, match=r"did not finish within 1 s \(is slurmctld up"):
        SlurmClient(env=env, timeout=1).jobs()


def test_two_clusters_run_side_by_side(slurm) -> None:
    one = slurm(nodes=("a1",), partition="mig")
    two = slurm(nodes=("a1", "b1"), partition="gpu")
    jid_one = one.sbatch("echo one", partition="mig")
    jid_two = two.sbatch("echo two", partition="gpu")
    assert one.wait_job(jid_one) == two.wait_job(jid_two) == "COMPLETED"
    assert (one.job_output(jid_one), two.job_output(jid_two)) == ("one\n", "two\n")
    assert [j.partition for j in SlurmClient(env=one.env).jobs()] == ["mig"]
    assert {n.name for n in SlurmClient(env=two.env).nodes("gpu")} == {"a1", "b1"}


def test_running_while_the_prolog_runs_completing_while_the_epilog_runs(hooked) -> None:
    """22.05 reports RUNNING (never CONFIGURING) during the Prolog (PrologFlags=Alloc)
    and COMPLETING during the Epilog."""
    cluster, _ = hooked
    client = SlurmClient(env=cluster.env)
    jid = cluster.sbatch("true", "--nodelist=h1", partition="mig", comment="slow-hooks")
    first_seen: dict[str, float] = {}

    def record() -> bool:
        state = squeue_job(client, jid).state
        first_seen.setdefault(state, time.monotonic())
        return state == "COMPLETED"

    cluster.wait_for(record, 20, f"job {jid} to complete", interval=0.05)
    assert "CONFIGURING" not in first_seen
    # the script is `true`: RUNNING lasted as long as the 2 s Prolog, COMPLETING the Epilog
    assert first_seen["COMPLETING"] - first_seen["RUNNING"] > 1.5
    assert first_seen["COMPLETED"] - first_seen["COMPLETING"] > 1.5
    j = squeue_job(client, jid)
    assert j.start_time is not None and j.end_time is not None and j.exit_code == 0
