"""Issue 34, hole 10: the public summary (0644, for every user) names no account, user,
reservation or other job in a deferred job's reason: the planner's own reasons (which
name them, for root's status file) are reduced to their category
(`slurm_mig.daemon.public.public_reason`)."""

from __future__ import annotations

import json
from types import MappingProxyType, SimpleNamespace

import pytest
from support import squeue_job

from slurm_mig.daemon import public
from slurm_mig.daemon.cycle.waiting import cannot_start_yet
from slurm_mig.daemon.public import UNNAMED, public_reason, read_public, write_public
from slurm_mig.slurm import sitepolicy
from slurm_mig.slurm.client import Job

NOW = 1_700_000_000.0
NAMES = ("physics", "alice", "labgroup", "bobs_reservation", "4242")


def _assoc_mgr(max_jobs: str = "N(0)", grp_jobs: str = "N(0)", per_user: str = "N(0)") -> str:
    """``scontrol -o show assoc_mgr``: user alice (uid 1001) in account physics, under
    account labgroup; QOS one."""
    return (
        "ClusterName=c Account=labgroup UserName= Partition= Priority=0 ID=1 ParentAccount= "
        f"GrpJobs={grp_jobs}\n"
        "ClusterName=c Account=physics UserName= Partition= Priority=0 ID=2 "
        "ParentAccount=labgroup(1) GrpJobs=N(0)\n"
        "ClusterName=c Account=physics UserName=alice(1001) Partition= Priority=0 ID=3 "
        f"ParentAccount= MaxJobs={max_jobs}\n"
        f"QOS=one(2) GrpJobs=N(0) Priority=10 User Limits= 1001={{MaxJobsPU={per_user}}}\n"
    )


def job(jid: str, **kw) -> Job:
    """alice's job (uid 1001, account physics), held by its user, submitted at NOW."""
    fields = {"reason": "JobHeldUser", "submit_time": NOW, "account": "physics", "uid": 1001}
    return squeue_job(jid, **{**fields, **kw})


def _planners_reasons() -> dict[str, str]:
    """The reasons the planner gives, as its code words them: each limit of
    `sitepolicy.admit` (association, accounts above it, QOS), Slurm's own limit reason,
    a reservation, a dependency, a begin time."""
    out: dict[str, str] = {}
    for name, text in (
        ("assoc", _assoc_mgr(max_jobs="1(1)")),
        ("account", _assoc_mgr(grp_jobs="1(1)")),
        ("qos", _assoc_mgr(per_user="1(1)")),
    ):
        assocs, qos = sitepolicy.parse_assoc_mgr(text)
        policy = sitepolicy.SitePolicy(assocs=assocs, qos=MappingProxyType(qos))
        j = job(name, qos="one" if name == "qos" else "")
        out[name] = sitepolicy.admit(policy, [j])[name]
    out["slurm"] = (
        "waits for a limit: Slurm kept it pending for AssocMaxJobsLimit after its release"
    )
    out["resv"] = "waits for its reservation bobs_reservation to start"
    out["resv_nodes"] = "its reservation bobs_reservation holds no usable node of the partition"
    dep = cannot_start_yet(job("d", dependency="afterok:4242(unfulfilled)"), NOW)
    begin = cannot_start_yet(job("b", eligible_time=NOW + 3600), NOW)
    assert dep is not None and begin is not None
    out["dep"], out["begin"] = dep, begin
    out["other"] = "waits for alice of physics to say so"
    return out


def _report(deferred: dict[str, str]) -> SimpleNamespace:
    result = SimpleNamespace(deferred=deferred, priority={}, snapshots=(), beyond=0)
    return SimpleNamespace(
        result=result,
        extra={"projected": {}},
        finished=NOW,
        number=7,
        error=None,
        policy="far",
        batch_window=0.0,
        max_planned=100,
        reorder=None,
    )


def test_the_planners_reasons_name_them_but_the_public_summary_does_not(tmp_path):
    reasons = _planners_reasons()
    text = " ".join(reasons.values())
    assert all(name in text for name in NAMES)  # root's view (the status file) names them
    path = tmp_path / "plan.json"
    assert write_public(path, _report(reasons)) is None
    written = path.read_text()
    for name in NAMES:
        assert name not in written, (name, written)
    data = read_public(path)
    assert data is not None
    why = {jid: entry["why"] for jid, entry in data["jobs"].items()}
    assert why["assoc"] == "waits for a limit: its association MaxJobs=1 reached (1 in use)"
    assert why["account"].startswith("waits for a limit: an account it runs under GrpJobs=1")
    assert why["qos"] == "waits for a limit: QOS one MaxJobsPerUser=1 reached (1 in use)"
    assert "AssocMaxJobsLimit" in why["slurm"]
    assert why["resv"] == "waits for its reservation to start"
    assert why["dep"] == "waits for its dependency"
    assert why["begin"] == reasons["begin"]  # a time: the job's own, no name
    assert why["other"] == UNNAMED
    assert json.loads(written)["jobs"]["qos"]["state"] == "deferred"


@pytest.mark.parametrize(
    "hostile",
    [
        "waits for a limit: association alice/alice MaxJobs=\x1b[2J reached (1 in use)",
        "waits for a limit: QOS alice\u202e MaxJobs=1 reached (1 in use)",
        "waits for a limit: Slurm kept it pending for alice's job after its release",
        "waits for its begin time (alice)",
        "alice" * 100,
        "",
    ],
)
def test_a_reason_of_no_known_form_is_reduced_to_its_category(hostile):
    got = public_reason(hostile)
    assert "alice" not in got and got.isprintable() and len(got) <= 120


def test_public_summary_writes_the_reduced_reason():
    assert public.summary(_report({"1": "waits for alice"}))["jobs"]["1"]["why"] == UNNAMED
