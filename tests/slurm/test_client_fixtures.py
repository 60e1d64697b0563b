"""The client's reading of real JSON of every supported Slurm release: squeue, sinfo
and scontrol output captured from 22.05, 24.11 and 26.05 daemons
(tests/fixtures/slurm/<release>/, made by capture.py there), and the pyslurm path
checked against the same records."""

from __future__ import annotations

import sys
import types

import pytest
from slurmfixtures import FIXTURES, RELEASES, jobs_of, load

from slurm_mig.slurm import jobparse
from slurm_mig.slurm.client import (
    UNUSABLE_NODE_STATES,
    Node,
    PyslurmDisagrees,
    SlurmClient,
    SlurmError,
    nodes_from_json,
    reason_from_pyslurm,
)


def roles(release: str) -> dict[str, str]:
    return load(release, "expected.json")["jobs"]


def test_every_supported_release_has_fixtures() -> None:
    assert RELEASES == ["22.05", "24.11", "26.05"]
    assert len(NODE_SOURCES) == 5
    for release in RELEASES:
        assert load(release, "expected.json")["slurm"].startswith(release)


@pytest.mark.parametrize("release", RELEASES)
def test_pending_jobs_held_by_user_admin_and_requeue(release: str) -> None:
    jobs, role = jobs_of(release), roles(release)
    held = jobs[role["held"]]
    assert (held.name, held.user, held.partition, held.state) == ("held", "root", "mig", "PENDING")
    assert (held.held, held.reason, held.reason_detail) == (True, "JobHeldUser", "")
    assert held.owner_can_release
    assert (held.comment, held.admin_comment) == ("mig:key=a  two", "slurm-mig:{}")
    assert held.time_limit == 600.0 and held.submit_time is not None
    assert (held.start_time, held.end_time, held.exit_code, held.restart_count) == (
        None,
        None,
        None,
        0,
    )
    admin = jobs[role["admin_held"]]
    assert (admin.user, admin.held, admin.reason) == ("nobody", True, "JobHeldAdmin")
    assert not admin.owner_can_release
    requeued = jobs[role["requeued"]]
    assert (requeued.state, requeued.held, requeued.reason) == ("PENDING", True, "JobHeldUser")
    assert requeued.reason_detail == "job requeued in held state"
    assert (requeued.restart_count, requeued.start_time, requeued.end_time) == (1, None, None)
    assert requeued.owner_can_release and not requeued.finished


@pytest.mark.parametrize("release", RELEASES)
def test_running_and_finished_jobs(release: str) -> None:
    jobs, role = jobs_of(release), roles(release)
    running = jobs[role["running"]]
    assert (running.state, running.held, running.nodes, running.required_nodes) == (
        "RUNNING",
        False,
        "n1",
        "n1",
    )
    assert running.admin_comment == "slurm-mig:running"
    assert running.start_time is not None and running.end_time is None
    assert running.exit_code is None and running.time_limit is None  # unlimited
    ok, bad, killed = (jobs[role[k]] for k in ("completed", "failed", "killed"))
    assert (ok.state, ok.exit_code, ok.finished) == ("COMPLETED", 0, True)
    assert 1 <= ok.end_time - ok.start_time <= 5  # sleep 1, whole seconds
    assert (bad.state, bad.exit_code) == ("FAILED", 3)
    assert (killed.state, killed.exit_code) == ("FAILED", 128 + 9)
    submitted = [j.submit_time for j in jobs.values()]
    assert all(t is not None and t > 1.7e9 for t in submitted)


@pytest.mark.parametrize("release", [r for r in RELEASES if r >= "23.02"])
def test_scontrol_show_job_reads_like_squeue(release: str) -> None:
    assert jobs_of(release, "scontrol-jobs.json") == jobs_of(release)


NODE_SOURCES = [
    (release, source)
    for release in RELEASES
    for source in ("sinfo-N.json", "scontrol-nodes.json")  # scontrol --json: 23.02+
    if (FIXTURES / release / source).exists()
]


@pytest.mark.parametrize(("release", "source"), NODE_SOURCES)
def test_nodes_per_node_reason_cpus_and_state(release: str, source: str) -> None:
    nodes = {n.name: n for n in nodes_from_json(load(release, source))}
    drained = load(release, "expected.json")["drained"]
    assert set(nodes) == {"n1", *drained}
    assert nodes["n1"].usable and not nodes["n1"].drained and nodes["n1"].reason == ""
    assert nodes["n1"].state & {"MIXED", "ALLOCATED"}  # the running job is there
    for name, reason in drained.items():
        n = nodes[name]
        assert (n.drained, n.usable, n.reason) == (True, False, reason)
        assert "DRAIN" in n.state
    assert {n.cpus for n in nodes.values()} == {16}
    assert all(set(n.partitions) == {"mig", "debug"} for n in nodes.values())


@pytest.mark.parametrize("release", [r for r in RELEASES if r >= "23.11"])
def test_grouped_sinfo_gives_one_reason_to_a_group(release: str) -> None:
    """Why nodes() asks for -N: plain sinfo --json of 23.11+ lumps n2 and n3 together."""
    grouped = {n.name: n.reason for n in nodes_from_json(load(release, "sinfo.json"))}
    drained = load(release, "expected.json")["drained"]
    assert grouped["n2"] == grouped["n3"]
    assert grouped != {"n1": "", **drained}


def test_unusable_states_cover_slurms_flags() -> None:
    for state in ("INVALID_REG", "POWER_DRAIN", "BLOCKED", "POWERING_UP", "ERROR", "DRAIN"):
        assert not Node("g", frozenset({"IDLE", state}), "", 8, ("mig",)).usable
    for state in ("RESERVED", "PLANNED", "COMPLETING", "CLOUD", "DYNAMIC_NORM"):
        assert state not in UNUSABLE_NODE_STATES
        assert Node("g", frozenset({"MIXED", state}), "", 8, ("mig",)).usable


# --- pyslurm: the same records through the pyslurm path --------------------------------
def pyslurm_view(rec: dict) -> types.SimpleNamespace:
    """One squeue record as pyslurm's Job presents it: ``state_reason`` is the state
    description when there is one, numbers are plain, unset times are None."""
    num = jobparse._number
    exit_raw = rec.get("exit_code")
    if isinstance(exit_raw, dict):
        signal = (exit_raw.get("signal") or {}).get("id")
        exit_code, exit_signal = num(exit_raw.get("return_code")) or 0, num(signal) or 0
    else:
        exit_code, exit_signal = (exit_raw or 0) >> 8, (exit_raw or 0) & 0x7F
    return types.SimpleNamespace(
        id=rec["job_id"], name=rec["name"], user_name=rec["user_name"],
        partition=rec["partition"], state=jobparse._job_state(rec["job_state"]),
        state_reason=rec.get("state_description") or rec["state_reason"],
        priority=num(rec["priority"]), comment=rec.get("comment") or None,
        admin_comment=rec.get("admin_comment") or None, allocated_nodes=rec["nodes"] or None,
        required_nodes=rec["required_nodes"] or None, time_limit=num(rec["time_limit"]),
        submit_time=num(rec["submit_time"]) or None, start_time=num(rec["start_time"]) or None,
        end_time=num(rec["end_time"]) or None, requeue_count=rec["restart_cnt"],
        exit_code=exit_code, exit_code_signal=exit_signal,
        eligible_time=num(rec.get("eligible_time")) or None,
        deadline=num(rec.get("deadline")) or None,
        dependencies={"after": rec["dependency"]} if rec.get("dependency") else {},
        account=rec.get("account") or "", qos=rec.get("qos") or "",
        nice=num(rec.get("nice")) or 0, reservation=rec.get("resv_name") or "",
        user_id=rec.get("user_id"),
    )  # fmt: skip


def install_fake_pyslurm(monkeypatch: pytest.MonkeyPatch, records: list[dict]) -> None:
    fake = types.ModuleType("pyslurm")
    views = {r["job_id"]: pyslurm_view(r) for r in records}
    fake.Jobs = types.SimpleNamespace(load=lambda: views)
    monkeypatch.setitem(sys.modules, "pyslurm", fake)
    monkeypatch.setenv("PATH", "/nonexistent")  # squeue would fail: pyslurm must be used


@pytest.mark.parametrize("release", RELEASES)
def test_pyslurm_path_reads_the_same_jobs_as_squeue(
    release: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = [r for r in load(release, "squeue.json")["jobs"] if not r.get("dependency")]
    install_fake_pyslurm(monkeypatch, records)
    via_pyslurm = {j.job_id: j for j in SlurmClient().jobs()}
    assert via_pyslurm == {k: v for k, v in jobs_of(release).items() if not v.dependency}
    assert len(via_pyslurm) == len(records) >= 9
    # the requeue hold keeps its code: the planner must see a hold its owner can lift
    assert via_pyslurm[roles(release)["requeued"]].reason == "JobHeldUser"


@pytest.mark.parametrize("release", RELEASES)
def test_pyslurm_job_with_a_dependency_falls_back_to_squeue(
    release: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = load(release, "squeue.json")["jobs"]
    assert any(r.get("dependency") for r in records)
    install_fake_pyslurm(monkeypatch, records)
    with pytest.raises(SlurmError, match="not installed"):  # it asked squeue instead
        SlurmClient().jobs()


@pytest.mark.parametrize("release", RELEASES)
def test_begin_time_dependency_and_deadline(release: str) -> None:
    jobs, role = jobs_of(release), roles(release)
    later, after, due = jobs[role["later"]], jobs[role["after"]], jobs[role["deadline"]]
    submitted = later.submit_time
    assert later.eligible_time == pytest.approx(submitted + 7200, abs=5)
    assert (later.dependency, later.deadline) == ("", None)
    assert after.dependency == f"afterok:{role['running']}(unfulfilled)"
    assert after.eligible_time is None and after.deadline is None
    assert due.deadline == pytest.approx(due.submit_time + 3 * 3600, abs=5)
    assert due.eligible_time is None and due.dependency == ""
    assert jobs[role["held"]].eligible_time is None  # held from submission: never eligible


def test_pyslurm_description_without_known_code_falls_back_to_squeue(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    record = dict(load("26.05", "squeue.json")["jobs"][0])
    record["state_description"] = "Job is at or exceeds QOS normal's group wall limit"
    install_fake_pyslurm(monkeypatch, [record])
    with pytest.raises(SlurmError, match="not installed"):  # it asked squeue instead
        SlurmClient().jobs()


def test_reason_from_pyslurm() -> None:
    assert reason_from_pyslurm("JobHeldAdmin") == ("JobHeldAdmin", "")
    assert reason_from_pyslurm("launch failed requeued held") == (
        "JobHeldUser",
        "launch failed requeued held",
    )
    assert reason_from_pyslurm("launch failure limit exceeded requeued held")[0] == (
        "JobHoldMaxRequeue"
    )
    assert reason_from_pyslurm("RaisedSignal:9(Killed)") == (
        "RaisedSignal",
        "RaisedSignal:9(Killed)",
    )
    with pytest.raises(PyslurmDisagrees, match="no reason code"):
        reason_from_pyslurm("held by a site script")
