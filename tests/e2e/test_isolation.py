"""Slurm enforces each job's MIG slice (real Slurm, task/cgroup, ConstrainDevices=yes).

The node's gres.conf comes from slurm_mig.slurm.gres (one gpu record per possible GPU
instance: parent device + GI and CI capability nodes), its device nodes are fake ones
made with mknod (GPU major 195, capabilities major 240; no driver answers, so an open
the device cgroup lets through ends in ENXIO, one it denies in EPERM). The planner
gives each job its instance's record before releasing it; each job then opens every
device node of the node, in the batch step and in an srun step, and reports the errno.
Also: a replayed token of an earlier plan is refused by the Prolog (the job's GRES is
the current plan's record).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from slurm_mig import jobcomment as comments
from slurm_mig.demo.live import LiveCluster
from slurm_mig.devices.migcaps import gi_id_for, minor
from slurm_mig.geometry import get_model
from slurm_mig.slurm import gres

from .conftest import LIVE_DEFAULTS, require_local_slurm

ROOT = Path(__file__).resolve().parents[2]
USER = "65534"  # nobody: root's jobs are refused in the MIG partition
MODEL = "A100-40GB"
PROBE = """\
import errno, json, os, sys
dev, step = sys.argv[1], sys.argv[2]
paths = sorted(os.path.join(d, f) for d, _, fs in os.walk(dev) for f in fs)
seen = {}
for p in paths:
    try:
        os.close(os.open(p, os.O_RDONLY))
        seen[p] = "opened"
    except OSError as exc:
        seen[p] = errno.errorcode.get(exc.errno, str(exc.errno))
print("PROBE " + json.dumps({"step": step, "stepid": os.environ.get("SLURM_STEP_ID"), "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
                             "uid": os.getuid(), "open": seen, "local": os.environ.get("SLURM_LOCALID")}), flush=True)
"""


def devices_cgroup_missing() -> str | None:
    """Why this machine cannot run the test (no devices cgroup), or None."""
    if Path("/sys/fs/cgroup/devices/devices.allow").exists():
        return None  # cgroup v1 with the devices controller
    if Path("/sys/fs/cgroup/cgroup.controllers").exists():
        return None  # pure cgroup v2: Slurm attaches an eBPF device program
    return "no devices cgroup on this machine (neither cgroup v1 devices nor cgroup v2)"


@pytest.fixture
def isolated():
    install = require_local_slurm()
    reason = devices_cgroup_missing()
    if reason:
        print(f"SKIP: {reason}")
        pytest.skip(reason)
    clusters: list[LiveCluster] = []

    def start(**kw) -> LiveCluster:
        root = Path(tempfile.mkdtemp(prefix="slurm-mig-iso-"))
        os.chmod(root, 0o755)
        lc = LiveCluster(
            root,
            slurm=install,
            model=MODEL,
            latency_scale=0.0,
            **LIVE_DEFAULTS,
            slurm_options={
                "task_plugin": "task/cgroup",
                "proctrack_type": "proctrack/cgroup",
                "cgroup_conf": [
                    "CgroupPlugin=autodetect",
                    "ConstrainDevices=yes",
                    "IgnoreSystemd=yes",
                ],
            },
            **kw,
        ).start()
        clusters.append(lc)
        return lc

    yield start
    for lc in clusters:
        lc.stop()
        if not os.environ.get("SLURM_MIG_E2E_KEEP"):
            shutil.rmtree(lc.root, ignore_errors=True)


def probes(lc: LiveCluster, job: str) -> dict[str, dict]:
    out = lc.cluster.job_output(job)
    found = [json.loads(ln.split(" ", 1)[1]) for ln in out.splitlines() if ln.startswith("PROBE ")]
    return {p["step"]: p for p in found}


def own_devices(lc: LiveCluster, node: str, gpu: int, gi: int) -> set[str]:
    dev = lc.cluster.dev_dir(node)
    return {
        str(dev / f"nvidia{gpu}"),
        gres.cap_path(minor(gpu, gi), str(dev)),
        gres.cap_path(minor(gpu, gi, 0), str(dev)),
    }


def test_each_job_opens_its_own_instance_only(isolated):
    lc = isolated(nodes=("iso1",), gpus=2)
    probe = lc.root / "probe.py"
    probe.write_text(PROBE)
    os.chmod(probe, 0o644)
    # the system's: the job's user (nobody) may not reach this checkout's interpreter
    python, dev = "/usr/bin/python3", lc.cluster.dev_dir("iso1")
    wrap = f"{python} {probe} {dev} batch; srun -n1 {python} {probe} {dev} srun; sleep 3"
    # root's jobs and a job's own GRES are refused at sbatch
    refused = lc.cluster.try_sbatch(wrap, partition="mig", comment="mig:time=20", user="0")
    assert refused.returncode != 0 and "jobs of root" in refused.stderr
    refused = lc.cluster.try_sbatch("true", "--gres=gpu:1", partition="mig", user=USER)
    assert refused.returncode != 0 and "remove --gres/--gpus" in refused.stderr

    jobs = [
        lc.cluster.sbatch(wrap, partition="mig", comment=f"mig:key=iso{i},time=20", user=USER)
        for i in range(3)
    ]
    # a job of another partition on the node, without GRES: none of the listed devices
    plain = lc.cluster.sbatch(f"{python} {probe} {dev} batch", partition="debug", user=USER)
    lc.start_planner()
    done = lc.wait_done(jobs, 120)
    assert {done[j].state for j in jobs} == {"COMPLETED"}, lc.cluster.logs()
    planned = lc.assignments(jobs)
    every = {str(p) for p in dev.rglob("*") if p.is_char_device()}
    assert len(every) == 2 + 2 * 14 * 2  # 2 GPUs, 14 GPU-instance ids, GI + CI node each
    creates = {e["uuid"]: e for e in lc.audit() if e["op"] == "create"}
    table = []
    for j in jobs:
        a = planned[j]
        gi = gi_id_for(get_model(MODEL), a.placement)
        mine = own_devices(lc, "iso1", a.gpu, gi)
        got = probes(lc, j)
        assert set(got) == {"batch", "srun"}, lc.cluster.job_output(j)
        assert got["srun"]["stepid"] == "0" != got["batch"]["stepid"]  # a step of its own
        for step, p in got.items():
            assert p["uid"] == int(USER)
            assert p["cuda"] in creates, p  # the instance the Prolog made for it
            opened = {path for path, what in p["open"].items() if what != "EPERM"}
            assert set(p["open"]) == every
            # allowed by the cgroup: ENXIO (no driver behind the fake node), never EPERM
            assert opened == mine, (j, step, sorted(opened), sorted(mine))
            assert {p["open"][path] for path in mine} == {errno.errorcode[errno.ENXIO]}
            table.append(
                f"job {j} ({a.profile}@{a.placement.start} gpu {a.gpu}, gres m{a.gpu}g{gi}) "
                f"{step}: open {', '.join(sorted(Path(m).name for m in mine))}; "
                f"EPERM on the other {len(every) - len(mine)}"
            )
    assert lc.cluster.wait_job(plain, ["COMPLETED"]) == "COMPLETED"
    other = probes(lc, plain)["batch"]
    assert set(other["open"]) == every and set(other["open"].values()) == {"EPERM"}
    table.append(f"job {plain} (partition debug, no GRES) batch: EPERM on all {len(every)}")
    print("\n".join(table))
    assert lc.live_instances() == []


def test_a_job_of_four_slices_runs_each_task_on_its_own_instance(isolated):
    """``mig:tasks=4``: the planner gives the job four 1g records of one region, the
    Prolog creates four instances, each task of an ``srun -n 4`` step sees its own
    (CUDA_VISIBLE_DEVICES by SLURM_LOCALID) and the job's device cgroup opens the four;
    a gang one of whose tasks fails leaves no instance behind."""
    lc = isolated(nodes=("iso3",), gpus=1)
    probe = lc.root / "probe.py"
    probe.write_text(PROBE)
    os.chmod(probe, 0o644)
    python, dev = "/usr/bin/python3", lc.cluster.dev_dir("iso3")
    hint = "mig:key=gang,tasks=4,time=20"
    gang = lc.cluster.sbatch(
        f"srun -n 4 --output=gang-%j-%t.out {python} {probe} {dev} srun; sleep 2", "-n", "4",
        partition="mig", comment=hint, user=USER,
    )  # fmt: skip
    fails = lc.cluster.sbatch(
        "srun -n 4 sh -c 'test $SLURM_LOCALID != 2 || exit 3; sleep 2'", "-n", "4",
        partition="mig", comment=hint, user=USER,
    )  # fmt: skip
    lc.start_planner()
    done = lc.wait_done([gang, fails], 120)
    assert done[gang].state == "COMPLETED", lc.cluster.logs()
    assert done[fails].state == "FAILED", lc.cluster.logs()
    a = lc.assignments([gang])[gang]
    assert (a.tasks, a.profile) == (4, "1g.5gb"), a
    places = a.instance_placements()
    creates = [e for e in lc.audit() if e["op"] == "create" and e["job_id"] == gang]
    assert sorted(e["placement"]["start"] for e in creates) == [p.start for p in places]
    uuid_at = {e["placement"]["start"]: e["uuid"] for e in creates}
    outputs = [lc.cluster.out_dir / f"gang-{gang}-{t}.out" for t in range(4)]  # one a task
    seen = [json.loads(o.read_text().split("PROBE ", 1)[1]) for o in outputs]
    assert [p["local"] for p in seen] == ["0", "1", "2", "3"], lc.cluster.job_output(gang)
    assert [p["cuda"] for p in seen] == [uuid_at[p.start] for p in places]  # task i: instance i
    model = get_model(MODEL)
    mine = set().union(*(own_devices(lc, "iso3", a.gpu, gi_id_for(model, p)) for p in places))
    for p in seen:  # the job's cgroup: its four instances, nothing else
        assert {path for path, what in p["open"].items() if what != "EPERM"} == mine
    tres = lc.cluster.job_field(gang, "TresPerNode")
    assert tres.count("gres:gpu:m0g") == 4 or tres.count("gres/gpu:m0g") == 4, tres
    # the failed gang: every instance it had was destroyed
    made = {e["uuid"] for e in lc.audit() if e["op"] == "create" and e["job_id"] == fails}
    gone = {e["uuid"] for e in lc.audit() if e["op"] == "destroy"}
    assert len(made) == 4 and made <= gone
    assert lc.live_instances() == []
    print(f"job {gang}: {a.tasks} x {a.profile} at {[p.start for p in places]}; {tres}")


def test_a_replayed_token_of_an_earlier_plan_is_refused(isolated):
    """The owner re-holds their released job and changes its hint; the planner plans
    it again on another slice; the first plan's token is written back into the Comment
    (the attack of issue 10 got an older, larger slice so; here the older plan is the
    smaller one, as FAR re-plans a lone job onto the whole GPU it can reuse). The Prolog refuses it (the job's GRES is the current plan's record), the
    job is requeued, not the node drained, and its next plan's token runs."""
    lc = isolated(nodes=("iso2",), gpus=1)
    busy = lc.cluster.sbatch(
        "sleep 60", partition="mig", comment="mig:key=busy,time=60,mem=30G", user=USER
    )
    job = lc.cluster.sbatch("echo ran", partition="mig", comment="mig:key=x,mem=12G", user=USER)
    lc.start_planner()
    lc.cluster.wait_job(busy, ["RUNNING"], timeout=60)
    # released ahead of the whole-GPU job: the first plan (3g, for 12G) and its token
    lc.cluster.wait_for(lambda: token_of(lc, job), 60, "the first token")
    first, a1 = token_of(lc, job), lc.assignments([job])[job]
    assert a1.profile == "3g.20gb"
    # the owner asks for more and puts its begin time ahead: the planner holds it and
    # drops its plan; back to now, it is planned anew
    user = {"user": "nobody"}
    lc.cluster.run("scontrol", "update", f"JobId={job}", "Comment=mig:key=x,mem=30G", **user)
    lc.cluster.run("scontrol", "update", f"JobId={job}", "StartTime=now+1hour", **user)
    lc.cluster.wait_for(  # held again: the plan is dropped (held jobs' are the planner's)
        lambda: lc.cluster.job_field(job, "Reason") == "JobHeldAdmin",
        60,
        "the plan dropped",
    )
    lc.cluster.run("scontrol", "update", f"JobId={job}", "StartTime=now", **user)
    lc.cluster.wait_for(
        lambda: (t := token_of(lc, job)) and t != first, 60, "the second plan's token"
    )
    a2 = lc.assignments([job])[job]
    assert a2.profile == "7g.40gb" and a2.restart == a1.restart == 0, a2
    lc.stop_planner()
    # the first token back in the Comment (job_submit.lua strips one a user writes, so
    # as root: here only the Prolog's check stands between the user and the 3g slice)
    replay = comments.parse("mig:key=x,mem=30G").with_token(first).render()
    lc.cluster.run("scontrol", "update", f"JobId={job}", f"Comment={replay}")
    lc.cluster.run("scancel", busy)  # the job starts now
    lc.cluster.wait_for(lambda: "the GRES record" in hooks_log(lc), 60, "the refusal")
    want = gres.index_of((MODEL,), gres.record_for((MODEL,), a2.gpu, a2.placement))
    assert (
        f"prolog job {job}: refused (action requeue): the job has SLURM_JOB_GPUS={want}, "
        f"not the GRES record m0g{gi_id_for(get_model(MODEL), a1.placement)}"
    ) in hooks_log(lc)
    lc.cluster.wait_for(lambda: lc.cluster.job_field(job, "Restarts") == "1", 60, "a requeue")
    assert not [e for e in lc.audit() if e["op"] == "create" and e["job_id"] == job]
    assert not lc.cluster.node_states()["iso2"].startswith("drain")
    # the planner plans run 1; its current token runs
    lc.start_planner()
    assert lc.cluster.wait_job(job, ["COMPLETED"], timeout=90) == "COMPLETED"
    assert "ran" in lc.cluster.job_output(job)
    [create] = [e for e in lc.audit() if e["op"] == "create" and e["job_id"] == job]
    assert (create["profile"], create["placement"]["start"]) == (a2.profile, a2.placement.start)


def token_of(lc: LiveCluster, job: str) -> str | None:
    res = lc.cluster.run("squeue", "-h", "--states=all", "-j", job, "-O", "Comment:1100")
    return comments.parse(res.stdout.strip()).token


def hooks_log(lc: LiveCluster, node: str = "iso2") -> str:
    path = lc.node_path(node, lc.log_file)  # the node's own log
    return path.read_text() if path.exists() else ""
