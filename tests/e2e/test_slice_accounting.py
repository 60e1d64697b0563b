"""Slices in Slurm's own accounting (issue 36): with ``[slurm] gres = "on"`` each job the
planner releases carries its instance's compute slices as the count-only GRES
``mig_slice``. On a real Slurm with slurmdbd, ``sacct`` shows every job's slices and
fairshare charges a 3g job three times a 1g job of the same length
(``TRESBillingWeights=GRES/mig_slice=1``); and Slurm itself never starts a job whose
slices its node no longer has free, whatever it is told (the planner's own write, made
by hand for slices the node does not have)."""

from __future__ import annotations

import time

import pytest

from slurm_mig.devices.migcaps import gi_id_for
from slurm_mig.geometry import get_model
from slurm_mig.slurm.gres import Record, tres_per_node

from .cluster import LocalSlurm
from .conftest import live_cluster, require_accounting, wait_until

A100 = get_model("A100-40GB")
SLURM_CONF = [
    "PriorityType=priority/multifactor",
    "PriorityWeightFairshare=10000",
    "PriorityCalcPeriod=1",
    "PriorityUsageResetPeriod=NONE",  # usage is billing x seconds (a 7-day half-life)
    "AccountingStorageTRES=gres/gpu,gres/mig_slice",
]
BILLING = 'TRESBillingWeights="GRES/mig_slice=1.0"'  # the MIG partition's: slices alone
SECONDS = 20


def _rows(text: str) -> list[dict[str, str]]:
    lines = text.splitlines()
    head = lines[0].split("|")
    return [dict(zip(head, line.split("|"))) for line in lines[1:] if line]


def _tres(value: str) -> dict[str, str]:
    """``billing=3,cpu=1,gres/mig_slice=3`` -> {name: value}."""
    return dict(term.split("=", 1) for term in value.split(",") if "=" in term)


def test_sacct_shows_each_jobs_slices_and_fairshare_charges_by_slices():
    """A 3g job, a 1g job and a job of two 1g slices (``tasks=2``) of the same length in
    three accounts: sacct's AllocTRES holds gres/mig_slice=3, =1 and =2 (billing the
    same; the gang's gres/gpu=2, one record per instance), and sshare's RawUsage per
    second of each job is 3:1:2."""
    require_accounting()
    planner = {"algorithm": "baseline", "batch_window": 0.0, "release_ahead": 0.0}
    with live_cluster(
        "slurm-mig-slices-",
        nodes=("node1",),
        gpus=2,  # room for the three side by side, whatever the placement
        accounting=True,
        planner=planner,
        slurm_options={"extra_conf": SLURM_CONF, "partition_options": BILLING},
    ) as lc:
        c = lc.cluster
        c.add_account("three", fairshare=10)
        c.add_account("one", fairshare=10)
        c.add_user("nobody", "three")
        c.add_user("nobody", "one")
        c.add_account("gang", fairshare=10)
        c.add_user("nobody", "gang")
        lc.start_planner()
        # baseline gives a job the smallest size its memory fits: 15G a 3g.20gb, 4G a 1g.5gb
        jobs = {
            "three": c.sbatch(f"sleep {SECONDS}", "--account=three", partition="mig",
                              comment=f"mig:mem=15G,time={SECONDS}", user="nobody"),
            "one": c.sbatch(f"sleep {SECONDS}", "--account=one", partition="mig",
                            comment=f"mig:mem=4G,time={SECONDS}", user="nobody"),
            "gang": c.sbatch(f"sleep {SECONDS}", "--account=gang", "-n", "2", partition="mig",
                             comment=f"mig:mem=4G,tasks=2,time={SECONDS}", user="nobody"),
        }  # fmt: skip
        done = lc.wait_done(list(jobs.values()), 180)
        assert all(done[j].state == "COMPLETED" for j in jobs.values()), done
        ids = ",".join(jobs.values())
        fields = "JobID,Account,Elapsed,ElapsedRaw,AllocTRES"
        sacct = c.run("sacct", "-X", "-P", "-j", ids, "-o", fields).stdout
        print(sacct)
        by_account = {r["Account"]: r for r in _rows(sacct)}
        tres = {a: _tres(by_account[a]["AllocTRES"]) for a in jobs}
        assert tres["three"]["gres/mig_slice"] == "3" and tres["one"]["gres/mig_slice"] == "1"
        assert tres["three"]["billing"] == "3" and tres["one"]["billing"] == "1"
        assert (tres["gang"]["gres/mig_slice"], tres["gang"]["gres/gpu"]) == ("2", "2")
        assert tres["gang"]["billing"] == "2"
        c.restart_slurmctld()  # priority/multifactor counts the usage at its start
        elapsed = {a: int(by_account[a]["ElapsedRaw"]) for a in jobs}

        seen = [""]

        def usage() -> dict[str, float] | None:
            text = seen[0] = c.run("sshare", "-a", "-P", "-A", "three,one,gang", "-o",
                                   "Account,User,RawUsage,GrpTRESRaw").stdout  # fmt: skip
            rows = [r for r in _rows(text) if r["User"]]  # the user's rows (nobody, by uid)
            got = {r["Account"].strip(): float(r["RawUsage"] or 0) for r in rows}
            return got if len(got) == 3 and all(got.values()) else None

        try:
            raw = wait_until(usage, 90, "sshare to show both accounts' usage", 2.0)
        except TimeoutError as exc:
            raise AssertionError(f"{exc}:\n{seen[0]}") from None
        print(seen[0])
        per_second = {a: raw[a] / max(1, elapsed[a]) for a in jobs}
        assert per_second["three"] / per_second["one"] == pytest.approx(3.0, rel=0.1), (
            raw,
            elapsed,
        )
        assert per_second["gang"] / per_second["one"] == pytest.approx(2.0, rel=0.1), raw


def _slices_job(cluster: LocalSlurm, gpu: int, profile: str, seconds: float) -> str:
    """A held job given, by hand, the TresPerNode the planner writes for ``profile`` at
    its first placement on ``gpu``, then released: as a planner gone wrong would."""
    p = A100.profile(profile)
    job = cluster.sbatch(f"sleep {seconds}", "-H", partition="mig")
    tres = tres_per_node(Record(gpu, gi_id_for(A100, p.placements[0])), p.compute_slices)
    cluster.run("scontrol", "update", f"JobId={job}", f"TresPerNode={tres}")
    cluster.run("scontrol", "release", job)
    return job


def test_slurm_never_starts_more_slices_than_a_node_has(slurm):
    """Two jobs on one A100 told a 4g and a 7g instance's records (distinct GRES types:
    Slurm alone would start both) and their slices: the second waits for Resources
    until the first has ended, then runs."""
    cluster = slurm(nodes=("n1",), gres={"n1": ["A100-40GB"]})
    cluster.wait_idle(30)
    first = _slices_job(cluster, 0, "4g.20gb", 15)
    cluster.wait_job(first, ("RUNNING",), 30)
    second = _slices_job(cluster, 0, "7g.40gb", 1)
    reasons = set()
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline:  # Slurm's scheduler passes over it, again and again
        assert cluster.job_state(second) == "PENDING"
        reasons.add(cluster.job_field(second, "Reason"))
        time.sleep(1)
    assert cluster.job_state(first) == "RUNNING"
    assert reasons & {"Resources", "Priority"}, reasons
    assert cluster.wait_job(first, ("COMPLETED",), 60) == "COMPLETED"
    assert cluster.wait_job(second, ("COMPLETED",), 60) == "COMPLETED"
