"""Slurm's policy in the planner: priorities from Slurm's factors, QOS and association
limits read before a job is planned, a job Slurm keeps pending for a limit after its
release, and reservations whose nodes are planned only for their jobs
(`slurm_mig.slurm.sitepolicy` and the cycle's use of it)."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

import pytest

from slurm_mig.config import expand_hostlist
from slurm_mig.daemon.cycle import CycleInput, Estimate, Hold, Release, plan_cycle
from slurm_mig.geometry import get_model
from slurm_mig.slurm import sitepolicy
from slurm_mig.slurm.client import Job
from slurm_mig.slurm.sitepolicy import (
    Limit,
    SitePolicy,
    admit,
    is_limit_reason,
    job_priority,
    parse_assoc_mgr,
    parse_config,
    parse_partitions,
    parse_reservations,
)

A100 = get_model("A100-40GB")
T0 = 1_700_000_000.0

# `scontrol -o show assoc_mgr flags=assoc,qos` as 22.05 prints it (user limits by uid)
ASSOC_MGR_2205 = """\
Current Association Manager state
Association Records
ClusterName=c Account=root UserName= Partition= Priority=0 ID=1 SharesRaw/Norm/Level/Factor=1/0.00/2/0.00 UsageRaw/Norm/Efctv=0.00/0.00/0.00 ParentAccount= Lineage= DefAssoc=No GrpJobs=N(1) GrpJobsAccrue=N(0) GrpSubmitJobs=N(3) GrpWall=N(0.00) GrpTRES=cpu=N(1),mem=N(0),energy=N(0),node=N(1),billing=N(1),fs/disk=N(0),vmem=N(0),pages=N(0),gres/gpu=N(1) GrpTRESMins=cpu=N(0) GrpTRESRunMins=cpu=N(0) MaxJobs= MaxJobsAccrue= MaxSubmitJobs= MaxWallPJ= MaxTRESPJ= MaxTRESPN= MaxTRESMinsPJ= MinPrioThresh=
ClusterName=c Account=physics UserName= Partition= Priority=0 ID=2 SharesRaw/Norm/Level/Factor=10/0.91/10/0.00 UsageRaw/Norm/Efctv=0.00/0.00/0.00 ParentAccount=root(1) Lineage= DefAssoc=No GrpJobs=2(1) GrpJobsAccrue=N(0) GrpSubmitJobs=N(2) GrpWall=N(0.00) GrpTRES=cpu=N(1),mem=N(0),energy=N(0),node=N(1),billing=N(1),fs/disk=N(0),vmem=N(0),pages=N(0),gres/gpu=N(1) GrpTRESMins=cpu=N(0) GrpTRESRunMins=cpu=N(0) MaxJobs= MaxJobsAccrue= MaxSubmitJobs= MaxWallPJ= MaxTRESPJ= MaxTRESPN= MaxTRESMinsPJ= MinPrioThresh=
ClusterName=c Account=physics UserName=nobody(65534) Partition= Priority=0 ID=3 SharesRaw/Norm/Level/Factor=1/0.91/1/0.83 UsageRaw/Norm/Efctv=0.00/0.00/0.00 ParentAccount= Lineage= DefAssoc=Yes GrpJobs=N(1) GrpJobsAccrue=N(0) GrpSubmitJobs=N(2) GrpWall=N(0.00) GrpTRES=cpu=N(1),mem=N(0),energy=N(0),node=N(1),billing=N(1),fs/disk=N(0),vmem=N(0),pages=N(0),gres/gpu=N(1) GrpTRESMins=cpu=N(0) GrpTRESRunMins=cpu=N(0) MaxJobs=3(1) MaxJobsAccrue= MaxSubmitJobs= MaxWallPJ= MaxTRESPJ= MaxTRESPN= MaxTRESMinsPJ= MinPrioThresh=
ClusterName=c Account=bio UserName= Partition= Priority=0 ID=4 SharesRaw/Norm/Level/Factor=1/0.09/1/0.00 UsageRaw/Norm/Efctv=0.00/0.00/0.00 ParentAccount=root(1) Lineage= DefAssoc=No GrpJobs=N(0) GrpJobsAccrue=N(0) GrpSubmitJobs=N(1) GrpWall=N(0.00) GrpTRES=cpu=N(0),gres/gpu=1(0) GrpTRESMins=cpu=N(0) GrpTRESRunMins=cpu=N(0) MaxJobs= MaxJobsAccrue= MaxSubmitJobs= MaxWallPJ= MaxTRESPJ= MaxTRESPN= MaxTRESMinsPJ= MinPrioThresh=
ClusterName=c Account=bio UserName=nobody(65534) Partition= Priority=0 ID=5 SharesRaw/Norm/Level/Factor=1/0.09/1/0.17 UsageRaw/Norm/Efctv=0.00/0.00/0.00 ParentAccount= Lineage= DefAssoc=No GrpJobs=N(0) GrpJobsAccrue=N(0) GrpSubmitJobs=N(1) GrpWall=N(0.00) GrpTRES=cpu=N(0),gres/gpu=N(0) GrpTRESMins=cpu=N(0) GrpTRESRunMins=cpu=N(0) MaxJobs= MaxJobsAccrue= MaxSubmitJobs= MaxWallPJ= MaxTRESPJ= MaxTRESPN= MaxTRESMinsPJ= MinPrioThresh=
QOS Records
QOS=normal(1) UsageRaw=0.000000 GrpJobs=N(1) GrpJobsAccrue=N(0) GrpSubmitJobs=N(3) GrpWall=N(0.00) GrpTRES=cpu=N(1),gres/gpu=N(1) GrpTRESMins=cpu=N(0) GrpTRESRunMins=cpu=N(0) MaxWallPJ= MaxTRESPJ= MaxTRESPN= MaxTRESMinsPJ= MinPrioThresh= MinTRESPJ= PreemptMode=OFF Priority=0 Account Limits= physics={MaxJobsPA=N(1) MaxJobsAccruePA=N(0) MaxSubmitJobsPA=N(2) MaxTRESPA=cpu=N(1)} User Limits= 65534={MaxJobsPU=N(1) MaxJobsAccruePU=N(0) MaxSubmitJobsPU=N(3) MaxTRESPU=cpu=N(1),gres/gpu=N(1)}
QOS=one(2) UsageRaw=0.000000 GrpJobs=N(1) GrpJobsAccrue=N(0) GrpSubmitJobs=N(2) GrpWall=N(0.00) GrpTRES=cpu=N(1) GrpTRESMins=cpu=N(0) GrpTRESRunMins=cpu=N(0) MaxWallPJ= MaxTRESPJ= MaxTRESPN= MaxTRESMinsPJ= MinPrioThresh= MinTRESPJ= PreemptMode=OFF Priority=10 Account Limits= No Accounts User Limits= 65534={MaxJobsPU=1(1) MaxJobsAccruePU=N(0) MaxSubmitJobsPU=N(2) MaxTRESPU=cpu=N(1),gres/gpu=N(1)}
QOS=high(3) UsageRaw=0.000000 GrpJobs=N(0) GrpJobsAccrue=N(0) GrpSubmitJobs=N(0) GrpWall=N(0.00) GrpTRES=cpu=N(0) GrpTRESMins=cpu=N(0) GrpTRESRunMins=cpu=N(0) MaxWallPJ= MaxTRESPJ= MaxTRESPN= MaxTRESMinsPJ= MinPrioThresh= MinTRESPJ= PreemptMode=OFF Priority=100 Account Limits= No Accounts User Limits= No Users
"""
# 24.05+ names the user of a per-user limit: name(uid)={...}
ASSOC_MGR_NAMED = ASSOC_MGR_2205.replace(" 65534={", " nobody(65534)={")

CONFIG = """\
Configuration data as of 2026-11-26T08:00:00
PriorityType            = priority/multifactor
PriorityMaxAge          = 1-00:00:00
PriorityWeightAge       = 1000
PriorityWeightAssoc     = 0
PriorityWeightFairShare = 10000
PriorityWeightJobSize   = 0
PriorityWeightPartition = 0
PriorityWeightQOS       = 5000
"""


def policy(text: str = ASSOC_MGR_2205, **kw) -> SitePolicy:
    assocs, qos = parse_assoc_mgr(text)
    return SitePolicy(
        weights=parse_config(CONFIG),
        assocs=assocs,
        qos=MappingProxyType(qos),
        partitions=MappingProxyType({"mig": (1, "")}),
        **kw,
    )


def job(jid: str, account: str = "physics", qos: str = "normal", **kw) -> Job:
    fields = {
        "job_id": jid,
        "name": "train",
        "user": "nobody",
        "partition": "mig",
        "state": "PENDING",
        "reason": "JobHeldUser",
        "held": True,
        "comment": "",
        "admin_comment": "",
        "nodes": "",
        "required_nodes": "",
        "time_limit": None,
        "submit_time": T0,
        "start_time": None,
        "end_time": None,
        "restart_count": 0,
        "exit_code": None,
        "account": account,
        "qos": qos,
    }
    fields.update(kw)
    return Job(**fields)


# ---------------------------------------------------------------------------
# Parsers


@pytest.mark.parametrize("text", [ASSOC_MGR_2205, ASSOC_MGR_NAMED])
def test_the_association_manager_is_read_with_limits_usage_and_fairshare(text):
    assocs, qos = parse_assoc_mgr(text)
    by = {(a.account, a.user): a for a in assocs}
    assert by[("physics", "nobody")].fairshare == pytest.approx(0.83)
    assert by[("bio", "nobody")].fairshare == pytest.approx(0.17)
    assert by[("physics", "nobody")].uid == 65534
    assert by[("physics", "nobody")].max_jobs == Limit(3, 1)
    assert by[("physics", "")].grp_jobs == Limit(2, 1)
    assert by[("physics", "")].parent == "root"
    assert by[("bio", "")].grp_tres == {"gres/gpu": Limit(1, 0)}
    assert qos["one"].priority == 10 and qos["high"].priority == 100
    assert qos["one"].users[65534][0] == Limit(1, 1)
    assert qos["high"].users == {}


def test_the_priority_weights_and_partitions_are_read():
    w = parse_config(CONFIG)
    assert w.multifactor and w.fairshare == 10000 and w.qos == 5000 and w.age == 1000
    assert w.max_age == 86400
    parts = parse_partitions(
        "PartitionName=mig AllowGroups=ALL PriorityJobFactor=10 PriorityTier=1 QoS=N/A\n"
        "PartitionName=debug PriorityJobFactor=1 QoS=part\n"
    )
    assert parts == {"mig": (10, ""), "debug": (1, "part")}


def test_only_active_reservations_count_and_their_host_lists_are_expanded():
    text = (
        "ReservationName=train StartTime=1 EndTime=99 Nodes=node[1-2] NodeCnt=2 "
        "Flags=SPEC_NODES State=ACTIVE\n"
        "ReservationName=later StartTime=99 EndTime=199 Nodes=node3 State=INACTIVE\n"
        "ReservationName=odd Nodes=node[9- State=ACTIVE\n"
    )
    got = parse_reservations(text, expand_hostlist)
    assert [(r.name, sorted(r.nodes)) for r in got] == [("train", ["node1", "node2"])]
    assert parse_reservations("No reservations in the system\n", expand_hostlist) == ()


def test_garbage_gives_nothing_rather_than_an_error():
    assocs, qos = parse_assoc_mgr("ClusterName=\x1b[2J Account= \nQOS=broken\nQOS=x(y)\n")
    assert assocs == () and qos == {}
    assert parse_config("nonsense\n").plugin == "priority/basic"
    assert parse_config("PriorityWeightQOS = 1e400\n").qos == 0.0


# ---------------------------------------------------------------------------
# Priority


def test_fairshare_qos_age_and_nice_order_jobs_as_slurm_weighs_them():
    p = policy()
    heavy = job("1", account="bio")  # fairshare 0.17
    light = job("2", account="physics")  # fairshare 0.83
    assert job_priority(p, light, T0) > job_priority(p, heavy, T0)
    assert job_priority(p, light, T0) == int(10000 * 0.83)
    high_qos = job("3", account="bio", qos="high")
    assert job_priority(p, high_qos, T0) == int(10000 * 0.17 + 5000)
    older = job("4", account="bio", submit_time=T0 - 43200)
    assert job_priority(p, older, T0) == int(10000 * 0.17 + 500)
    nice = job("5", account="physics", nice=100)
    assert job_priority(p, nice, T0) == int(10000 * 0.83) - 100


def test_basic_priority_leaves_the_order_to_submission():
    p = SitePolicy()
    assert job_priority(p, job("1"), T0) == 0


def test_a_begin_jobs_age_counts_from_its_begin_time_unless_accrue_always():
    # issue 34, hole 10: a job submitted a day early with --begin used to reach the
    # full age factor (1000) the moment its begin time came
    p = policy()
    base = job_priority(p, job("1", account="bio"), T0)  # fairshare 0.17, no age
    early = job("2", account="bio", submit_time=T0 - 86400, eligible_time=T0 + 3600)
    assert job_priority(p, early, T0) == base  # not eligible yet: no age at all
    assert job_priority(p, early, T0 + 3600) == base  # eligible just now
    assert job_priority(p, early, T0 + 3600 + 43200) == base + 500  # half of PriorityMaxAge
    flags = parse_config(
        CONFIG + "PriorityFlags           = ACCRUE_ALWAYS,SMALL_RELATIVE_TO_TIME\n"
    )
    always = replace(p, weights=flags)
    assert always.weights.accrue_always and not p.weights.accrue_always
    assert job_priority(always, early, T0) == base + 1000  # from submission, as Slurm does
    plain = job("3", account="bio", submit_time=T0 - 43200)  # no --begin: from submission
    assert job_priority(p, plain, T0) == base + 500


def _record(jid: str, issued: float) -> str:
    """The AdminComment the planner writes when it releases job ``jid``."""
    from slurm_mig.geometry import Placement
    from slurm_mig.slurm.assignment import Assignment
    from slurm_mig.slurm.jobrecord import admin_comment_for

    a = Assignment(jid, 0, "node1", 0, "A100-40GB", "4g.20gb", Placement(0, 4), 0, 0, 500.0, issued)
    return admin_comment_for(a)


def test_the_planners_release_stamp_is_not_taken_for_a_begin_time():
    # Slurm stamps EligibleTime when the planner releases a job; held again, the job
    # keeps the age it had from submission (the planner's hold is not the user's doing)
    p = policy()
    base = job_priority(p, job("1", account="bio"), T0)
    released = job("2", account="bio", submit_time=T0 - 43200, eligible_time=T0 - 300)
    released = replace(released, admin_comment=_record("2", T0 - 600))
    assert job_priority(p, released, T0) == base + 500
    begun = job("3", account="bio", submit_time=T0 - 43200, eligible_time=T0 - 21600)
    begun = replace(begun, admin_comment=_record("3", T0 - 600))
    assert job_priority(p, begun, T0) == base + 250  # its own --begin, before the plan


# ---------------------------------------------------------------------------
# Limits


def test_a_user_at_a_qos_job_limit_is_not_admitted():
    p = policy()
    out = admit(p, [job("1", qos="one"), job("2", qos="normal")])
    assert set(out) == {"1"}
    assert "QOS one MaxJobsPerUser=1" in out["1"] and "(1 in use)" in out["1"]


def test_admitted_jobs_use_up_the_room_in_priority_order():
    p = policy()
    # physics GrpJobs=2 with 1 running: one more fits, the second is kept back
    out = admit(p, [job("1"), job("2"), job("3")])
    assert set(out) == {"2", "3"}
    assert "account physics GrpJobs=2" in out["2"]
    # a job released and not yet started counts as Slurm will count it
    out = admit(p, [job("1")], started=[job("9", held=False)])
    assert set(out) == {"1"}


def test_a_gpu_tres_limit_counts_one_slice_per_job():
    p = policy()
    out = admit(p, [job("1", account="bio"), job("2", account="bio")])
    assert set(out) == {"2"} and "GrpTRES=gres/gpu=1" in out["2"]


@pytest.mark.parametrize(
    "reason,limit",
    [
        ("QOSMaxJobsPerUserLimit", True),
        ("AssocGrpJobsLimit", True),
        ("QOSGrpGRES", True),
        ("AssocMaxJobsLimit", True),
        ("AccountingPolicy", True),
        ("Resources", False),
        ("Priority", False),
        ("JobHeldUser", False),
        ("Dependency", False),
    ],
)
def test_limit_reasons_are_told_from_others(reason, limit):
    assert is_limit_reason(reason) is limit


# ---------------------------------------------------------------------------
# The cycle


def snapshot(jobs, nodes=None, **kw) -> CycleInput:
    nodes = nodes or {"node1": ("A100-40GB",)}
    est = {
        j.job_id: Estimate("train", {"A100-40GB": {s: 600.0 for s in (1, 2, 3, 4, 7)}})
        for j in jobs
    }
    opts = {"batch_window": 0.0, "policy": policy(), "reorder": 0, **kw}
    return CycleInput(now=T0 + 10, jobs=tuple(jobs), nodes=nodes, estimates=est, **opts)


def test_a_later_job_of_higher_priority_is_planned_first():
    # seven whole-GPU-sized jobs would fill the GPU; the one of the light account goes first
    # although the heavy account's were submitted earlier
    jobs = [job(str(i), account="bio", submit_time=T0 - 100 + i) for i in range(1, 4)]
    jobs.append(job("9", account="physics", submit_time=T0))
    result = plan_cycle(snapshot(jobs))
    assert result.priority["9"] > result.priority["1"]
    first = min(result.planned.values(), key=lambda a: (a.batch, a.order))
    assert first.job_id == "9" or "9" in result.released


def test_a_job_a_limit_keeps_back_holds_no_slices_and_says_which_limit():
    jobs = [job("1", qos="one"), job("2", qos="normal")]
    result = plan_cycle(snapshot(jobs))
    assert "1" not in result.planned
    assert "QOS one MaxJobsPerUser=1" in result.deferred["1"]
    assert "2" in result.planned


def test_a_released_job_slurm_keeps_pending_for_a_limit_is_held_and_remembered():
    first = plan_cycle(snapshot([job("2")]))
    assert "2" in first.released
    release = next(a for a in first.actions if isinstance(a, Release))
    admin = dict(release.fields)["AdminComment"]
    pending = job("2", held=False, reason="QOSMaxJobsPerUserLimit", admin_comment=admin)
    second = plan_cycle(snapshot([pending]))
    holds = [a for a in second.actions if isinstance(a, Hold)]
    assert [h.job_id for h in holds] == ["2"] and "QOSMaxJobsPerUserLimit" in holds[0].reason
    assert second.limited == {"2": "QOSMaxJobsPerUserLimit"}
    # held again, it waits (the daemon passes what it remembers) instead of being released
    third = plan_cycle(snapshot([job("2")], limited={"2": "QOSMaxJobsPerUserLimit"}))
    assert "2" not in third.planned and "QOSMaxJobsPerUserLimit" in third.deferred["2"]


def test_a_reservations_nodes_take_only_its_jobs():
    resv = sitepolicy.Reservation("train", frozenset({"node2"}), frozenset())
    p = policy(reservations=(resv,))
    nodes = {"node1": ("A100-40GB",), "node2": ("A100-40GB",)}
    jobs = [job(str(i), account="free", reservation="train" if i % 2 else "") for i in range(1, 9)]
    result = plan_cycle(snapshot(jobs, nodes=nodes, policy=p, reorder=-1))
    for jid, a in result.planned.items():
        assert a.node == ("node2" if int(jid) % 2 else "node1"), (jid, a.node)
    assert len(result.planned) == 8
    # a reservation that is not active (or not known) keeps its jobs back, with why
    other = plan_cycle(snapshot([job("1", reservation="later")], nodes=nodes, policy=p))
    assert "1" not in other.planned and "reservation later" in other.deferred["1"]


def test_a_job_that_backfills_ahead_of_higher_priority_is_named_with_why():
    from slurm_mig.daemon.daemon import CycleReport
    from slurm_mig.daemon.jobtimes import project_jobs
    from slurm_mig.daemon.public import summary
    from slurm_mig.daemon.statusview import build_view
    from slurm_mig.geometry import Placement
    from slurm_mig.slurm.assignment import Assignment
    from slurm_mig.slurm.jobrecord import admin_comment_for

    now = T0 + 10
    ran = Assignment("1", 0, "node1", 0, "A100-40GB", "4g.20gb", Placement(0, 4), 0, 0, 500.0, T0)
    running = job(
        "1", account="free", state="RUNNING", held=False, admin_comment=admin_comment_for(ran),
        start_time=now - 10,
    )  # fmt: skip
    high = job("2", account="physics")  # fairshare 0.83, needs the slices job 1 runs on
    low = job("3", account="bio")  # fairshare 0.17, fits in the free slices
    est = {
        "1": Estimate("train", {"A100-40GB": {4: 500.0}}),
        "2": Estimate("train", {"A100-40GB": {4: 600.0}}),
        "3": Estimate("train", {"A100-40GB": {1: 100.0, 2: 80.0, 3: 70.0}}),
    }
    snap = CycleInput(
        now=now, jobs=(running, high, low), nodes={"node1": ("A100-40GB",)}, estimates=est,
        batch_window=0.0, release_ahead=0.0, policy=policy(), reorder=0, algorithm="far",
    )  # fmt: skip
    result = plan_cycle(snap)
    assert result.priority["2"] > result.priority["3"]
    assert "3" in result.released and "2" not in result.released  # backfill, now
    report = CycleReport(1, now, now + 0.1, result, None, policy="far", reorder=0)
    report.extra = {"projected": project_jobs(result.snapshots, result.decisions)}
    pub = summary(report)
    assert pub["jobs"]["3"]["ahead_of"] == ["2"]
    assert pub["jobs"]["2"]["priority"] == result.priority["2"]
    assert pub["jobs"]["3"]["end"] <= pub["jobs"]["2"]["start"]  # it delays no one
    from slurm_mig.explain import explain

    released = job("3", account="bio", held=False, reason="None")
    released = Job(**{**released.__dict__, "admin_comment": admin_comment_for(result.planned["3"])})
    text = "\n".join(explain(released, pub, now)["lines"])
    assert f"priority: {result.priority['3']}" in text
    assert "starts before higher-priority job(s) 2" in text and "backfill" in text
    view = build_view(report.to_json(), [running, high, low], {}, now)
    prio = {q.job: q.priority for q in view.queue}
    assert prio["2"] == result.priority["2"] and prio["3"] == result.priority["3"]


def test_a_reservation_without_a_node_of_the_partition_says_so():
    resv = sitepolicy.Reservation("elsewhere", frozenset({"login1"}), frozenset())
    result = plan_cycle(
        snapshot([job("1", reservation="elsewhere")], policy=policy(reservations=(resv,)))
    )
    assert "1" not in result.planned
    assert "holds no usable node of the partition" in result.deferred["1"]


def test_the_daemon_holds_a_job_slurm_keeps_for_a_limit_and_retries_a_minute_later(tmp_path):
    from support import node, write_config

    from slurm_mig.config import load_config
    from slurm_mig.daemon.daemon import LIMIT_RETRY, PlannerDaemon
    from slurm_mig.slurm.jobrecord import admin_comment_for

    cfg = load_config(write_config(tmp_path, {"node1": ["A100-40GB"]}))
    first = plan_cycle(snapshot([job("2", account="free")]))
    record = admin_comment_for(first.planned["2"])
    clock = [T0 + 100]

    class Slurm:
        shown = job("2", account="free", held=False, reason="QOSMaxJobsPerUserLimit",
                    admin_comment=record)  # fmt: skip
        held: list[str] = []

        def jobs(self, partition=None):
            return [self.shown]

        def nodes(self, partition=None):
            return [node("node1", "IDLE")]

        def site_policy(self):
            return policy()

        def hold_jobs(self, ids):
            self.held += list(ids)
            self.shown = job("2", account="free", admin_comment=record)  # held again
            return {}

        def update_job(self, job_id, **fields):
            if fields.get("Priority") == "0":  # a hold that clears an earlier plan
                self.hold_jobs([job_id])

        def release_jobs(self, ids):
            return {}

    slurm = Slurm()
    daemon = PlannerDaemon(cfg, slurm, None, b"k" * 32, clock=lambda: clock[0])
    daemon.run_cycle()
    assert slurm.held == ["2"] and "2" in daemon.limited
    clock[0] += 10
    report = daemon.run_cycle()
    assert "QOSMaxJobsPerUserLimit" in report.result.deferred["2"]
    assert "2" not in report.result.planned
    clock[0] += LIMIT_RETRY
    report = daemon.run_cycle()
    assert "2" not in report.result.deferred and "2" in report.result.planned
