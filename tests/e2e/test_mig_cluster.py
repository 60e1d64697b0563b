"""slurm-mig end to end on a real Slurm (loopback, temp dir): job_submit.lua holds MIG
jobs, the planner daemon plans and releases them, the Prolog creates each job's slice on
simulated A100s, the TaskProlog points the job at it, the Epilog destroys it."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from slurm_mig import jobcomment as comments
from slurm_mig.demo.live import (
    LiveCluster,
    chain_length,
    handoff_gaps,
    overlapping_lifetimes,
    slice_handoffs,
)
from slurm_mig.geometry import get_model
from slurm_mig.workload import load_task_source

from .conftest import (
    LIVE_DEFAULTS,
    assert_ran_as_planned,
    one_on_every_release,
    require_local_slurm,
)

A100 = get_model("A100-40GB")
RODINIA = load_task_source("rodinia-a100", A100)
SCALE = 2.0  # seconds of sleep per profiled second: above Slurm's 1 s time resolution
# an online policy plans no makespan to hold Slurm to: its tests need every job to run
# on its slice, not long (at SCALE, the longest kernel on a 1g slice sleeps 53 s)
ONLINE_SCALE = 0.5
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def live():
    install = require_local_slurm()
    clusters: list[LiveCluster] = []

    def start(**kw) -> LiveCluster:
        # not under pytest's 0700 tmp dirs: jobs of other users must read the config
        root = Path(tempfile.mkdtemp(prefix="slurm-mig-live-"))
        os.chmod(root, 0o755)
        lc = LiveCluster(root, slurm=install, **{**LIVE_DEFAULTS, **kw}).start()
        clusters.append(lc)
        return lc

    yield start
    for lc in clusters:
        lc.stop()
        if not os.environ.get("SLURM_MIG_E2E_KEEP"):
            shutil.rmtree(lc.root, ignore_errors=True)


@pytest.mark.parametrize(
    "policy",
    one_on_every_release(["far", "auto", "far-pcie", "frag-aware", "adaptive"], "adaptive"),
)
def test_batch_runs_as_planned_on_two_simulated_a100s(live, policy):
    """The Rodinia batch under a batch planner (its plan is then held to), adaptive (the
    daemon's default: a batch on idle GPUs goes to FAR, whose plan is held to) or an
    online policy (every job then runs on the slice it was released onto)."""
    batch = policy != "frag-aware"
    scale = SCALE if batch else ONLINE_SCALE
    lc = live(nodes=("node1",), gpus=2, planner={"algorithm": policy})
    lc.learn(RODINIA, scale)
    kernels = [t.id for t in RODINIA] + [t.id for t in RODINIA[:8]]
    ids = [lc.submit(k, scale) for k in kernels]
    assert len(ids) >= 20
    # job_submit.lua holds every MIG job until the planner releases it
    assert all(j.held for j in lc.jobs().values())
    lc.start_planner()
    plan = (
        lc.wait_plan(len(ids), 60) if batch else lc.wait_status(lambda st: st.get("released"), 60)
    )
    jobs = lc.wait_done(ids, 300)
    assert {jobs[j].state for j in ids} == {"COMPLETED"}, lc.cluster.logs()
    assert lc.status().get("policy") == policy

    records = {r["job"]: r for r in lc.records()}
    assert sorted(records) == sorted(ids, key=str)
    assert_ran_as_planned(lc, ids)
    planned = lc.assignments(ids)
    creates = {e["uuid"]: e for e in lc.audit() if e["op"] == "create"}
    for r in records.values():  # created before the job started, as planned
        assert creates[r["uuid"]]["end"] <= r["start"]
        assert creates[r["uuid"]]["profile"] == r["profile"]
    if not batch:
        return  # an online policy plans no makespan to hold to

    # realized against planned makespan, allowing Slurm's hand-off latency per step
    t_plan = plan["started"]
    realized = max(r["end"] for r in records.values()) - t_plan
    gaps = handoff_gaps(list(records.values()))
    slices = slice_handoffs(list(records.values()), lc.runtimes())
    assert len(slices) >= len(ids) // 2, "the Epilogs' runtime log names when slices freed"
    chain = chain_length(planned)
    allowance = statistics.median(gaps) * chain
    report = {
        "jobs": len(ids),
        "planned_makespan": plan["makespan"],
        "realized_makespan": round(realized, 2),
        "handoff_gap_median": round(statistics.median(gaps), 3),
        "handoff_gap_p95": round(sorted(gaps)[int(0.95 * (len(gaps) - 1))], 3),
        "chain": chain,
        "slice_handoff_median": round(statistics.median(slices), 3),
        "slice_handoff_p95": round(sorted(slices)[int(0.95 * (len(slices) - 1))], 3),
    }
    (ROOT / ".benchmarks").mkdir(exist_ok=True)
    out = ROOT / ".benchmarks" / f"e2e_makespan_{policy}.json"
    out.write_text(json.dumps(report, indent=2))
    print(report)
    assert realized <= 1.15 * plan["makespan"] + allowance, report


def test_adaptive_sizes_jobs_that_arrive_one_by_one_by_load(live):
    """The daemon's default on a stream: jobs submitted one at a time to an idle GPU
    start at once, each on the slice that ends it first (larger than its smallest:
    slices would idle), on the slice it was released onto, leaving nothing behind."""
    lc = live(nodes=("node1",), gpus=1, planner={"algorithm": "adaptive"})
    lc.learn(RODINIA, SCALE)
    lc.start_planner()
    kernels = [t for t in RODINIA if t.times[1] > 1.5 * t.times[max(t.times)]][:3]
    assert len(kernels) == 3, "Rodinia has kernels that speed up on larger slices"
    ids = []
    for t in kernels:
        ids.append(lc.submit(t.id, SCALE))
        deadline = time.monotonic() + 120
        while lc.jobs()[ids[-1]].state == "PENDING":  # started before the next arrives
            assert time.monotonic() < deadline, lc.cluster.logs()
            time.sleep(0.2)
    jobs = lc.wait_done(ids, 300)
    assert {jobs[j].state for j in ids} == {"COMPLETED"}, lc.cluster.logs()
    assert lc.status().get("policy") == "adaptive"
    records = {r["job"]: r for r in lc.records()}
    planned = lc.assignments(ids)
    sizes = []
    for j in ids:
        r, a = records[j], planned[j]
        assert (r["profile"], r["gpu"]) == (a.profile, a.gpu), (j, r, a)
        sizes.append(a.placement.size)
    assert max(sizes) > 1, sizes  # not every job on the smallest slice
    assert overlapping_lifetimes(lc.audit()) == []
    assert lc.live_instances() == []


@pytest.mark.parametrize(
    "policy", one_on_every_release(["edf", "met", "cedf", "smart-mig"], "smart-mig")
)
def test_deadline_policies_run_jobs_with_deadlines(live, policy):
    """SMART-MIG's online policies on real Slurm: jobs carry deadlines from sbatch
    --deadline (read back from squeue), a duration hint or a UTC date hint; every job
    completes on the slice it was released onto, no instances overlap or remain, and
    the daemon logs the controller's repartition decisions."""
    lc = live(nodes=("node1",), gpus=2, planner={"algorithm": policy})
    lc.learn(RODINIA, ONLINE_SCALE)
    later = time.strftime("%Y-%m-%dT%H:%M", time.gmtime(time.time() + 3 * 3600))
    kinds = [
        ((), ""),
        (("--deadline=now+2hours", "--time=30"), ""),
        ((), "deadline=10m"),
        ((), f"deadline={later}"),
    ]
    kernels = [t.id for t in RODINIA] + [t.id for t in RODINIA[:4]]
    ids, how = [], {}
    for i, k in enumerate(kernels):
        args, hint = kinds[i % len(kinds)]
        jid = lc.submit(k, ONLINE_SCALE, hints=hint, args=args)
        ids.append(jid)
        how[jid] = i % len(kinds)
    before = lc.jobs()
    for jid in ids:  # squeue reports sbatch's deadline; hints stay in the comment
        assert (before[jid].deadline is not None) == (how[jid] == 1), (jid, before[jid])
    lc.start_planner()
    jobs = lc.wait_done(ids, 300)
    assert {jobs[j].state for j in ids} == {"COMPLETED"}, lc.cluster.logs()
    assert lc.status().get("policy") == policy
    records = {r["job"]: r for r in lc.records()}
    assert sorted(records) == sorted(ids, key=str)
    planned = lc.assignments(ids)
    for j in ids:
        r, a = records[j], planned[j]
        assert (r["profile"], r["gpu"]) == (a.profile, a.gpu), (j, r, a)
        assert r["uuid"].startswith("MIG-") and r["alive_at_end"]
    assert overlapping_lifetimes(lc.audit()) == []
    assert lc.live_instances() == []
    log = lc.daemon_log.read_text()
    if policy == "smart-mig":
        assert re.search(r"cycle \d+: repartition", log), log[-2000:]


def test_malformed_hint_is_rejected_at_submit_with_its_message(live):
    lc = live()
    res = lc.cluster.try_sbatch("true", partition="mig", comment="mig:mem=12X")
    assert res.returncode != 0
    assert "hint 'mem=12X'" in res.stderr and "12G" in res.stderr


def test_forged_assignment_fails_the_job_and_the_node_stays_up(live):
    lc = live()  # no planner running: the job is released without it
    job = lc.cluster.sbatch("echo ran", partition="mig", comment="mig:key=x", user="65534")
    forged = comments.parse("mig:key=x").with_token("v1.eyJqb2JfaWQiOiAiMSJ9.AAAA").render()
    # job_submit.lua removes a token the user writes ...
    lc.cluster.run("scontrol", "update", f"JobId={job}", f"Comment={forged}", user="nobody")
    assert lc.cluster.job_field(job, "Comment") == "mig:key=x"
    # ... and refuses the user's release: put the token there and release as root, as
    # a site without the plugin would let the user
    assert lc.cluster.run("scontrol", "release", job, user="nobody", check=False).returncode
    lc.cluster.run("scontrol", "update", f"JobId={job}", f"Comment={forged}")
    lc.cluster.run("scontrol", "release", job)
    assert lc.cluster.wait_job(job, ["FAILED", "COMPLETED"], timeout=60) == "FAILED"
    out = lc.cluster.job_output(job)
    assert "slurm-mig:" in out and "ran" not in out
    assert "signature" in out or "malformed" in out
    assert lc.cluster.node_states()["node1"] in ("idle", "mixed")
    assert lc.live_instances() == []


def test_planner_killed_mid_run_and_restarted_loses_no_job(live):
    lc = live(nodes=("node1", "node2"), gpus=2)
    lc.learn(RODINIA, SCALE)
    ids = [lc.submit(t.id, SCALE) for t in RODINIA]
    lc.start_planner()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and sum(1 for _ in lc.records()) < 3:
        time.sleep(0.2)
    lc.stop_planner(signal.SIGKILL)  # mid-run, no clean-up
    time.sleep(2)
    lc.start_planner()
    jobs = lc.wait_done(ids, 300)
    assert {jobs[j].state for j in ids} == {"COMPLETED"}
    assert len(lc.records()) == len(ids)
    assert overlapping_lifetimes(lc.audit()) == []
    # an instance an Epilog kept for a job the restarted planner sent to another node
    # is reclaimed when its wait ([hooks] reuse_wait) runs out, though no hook comes
    lc.cluster.wait_for(lambda: lc.live_instances() == [], 60, "no instance left behind")
    assert lc.live_instances() == []


def test_device_error_on_create_drains_the_node_with_the_message(live):
    lc = live()
    lc.learn(RODINIA[:1], SCALE)
    fault = {"op": "create", "error": "DeviceUnavailable", "message": "GPU 0: NVML GPU is lost"}
    sim = lc.sim_dir("node1")  # the node's "hardware": an admin breaks it there
    sim.mkdir(parents=True, exist_ok=True)
    (sim / "fault.json").write_text(json.dumps(fault))
    job = lc.submit(RODINIA[0].id, SCALE)
    lc.start_planner()
    lc.cluster.wait_for(
        lambda: lc.cluster.node_states().get("node1", "").startswith("drain"), 60, "a drain"
    )
    reason = lc.cluster.run("sinfo", "-h", "-N", "-o", "%E").stdout
    assert "slurm-mig:" in reason and "GPU is lost" in reason
    # the job is not lost: Slurm requeued it (held) for when the node is back
    lc.stop_planner()
    assert lc.cluster.wait_job(job, ["PENDING"], timeout=60) == "PENDING"
    assert int(lc.cluster.job_field(job, "Restarts")) == 1


def test_epilog_run_twice_destroys_once(live):
    lc = live()
    lc.learn(RODINIA[:1], SCALE)
    job = lc.submit(RODINIA[0].id, SCALE)
    lc.start_planner()
    lc.wait_done([job], 120)
    destroys = [e for e in lc.audit() if e["op"] == "destroy"]
    assert len(destroys) == 1
    env = {
        "SLURM_MIG_CONFIG": str(lc.config_path),
        "SLURM_JOB_ID": job,
        "SLURM_JOB_PARTITION": "mig",
        "SLURMD_NODENAME": "node1",
        "SLURM_JOB_RESTART_COUNT": "0",
        "SLURM_JOB_COMMENT": "mig:key=x",
    }
    # the node's state is the node's: the host has none of it, the admin runs it there
    assert list(lc.run_root.iterdir()) == [] and lc.run_dir("node1").is_dir()
    res = subprocess.run(
        lc.cluster.node_argv("node1", [sys.executable, str(ROOT / "epilog" / "slurm-mig-epilog")]),
        env={**env, "PATH": os.environ.get("PATH", "")},
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr
    assert "nothing to destroy" in res.stderr
    assert [e for e in lc.audit() if e["op"] == "destroy"] == destroys


def test_mig_run_requeues_a_job_whose_forecast_outgrows_its_slice(live):
    """mig-run inside a planned Slurm job: the forecast says the job will outgrow its
    (emulated) memory, so it records the need, writes it into the job's hint and
    requeues the job; the Epilog reports the need to the planner, which plans the
    requeued run again."""
    from slurm_mig.runtimes import RuntimeStore

    # root's job: mig-run needs this venv's numpy, whose interpreter may live under
    # root's home (0700) here, out of a user's reach
    lc = live(job_user=None, allow_root_jobs=True)
    workload = ROOT / "tests" / "workloads" / "growing_batch.py"
    python = lc.cluster.python
    wrap = (
        f"env PYTHONPATH={ROOT} {python} -m slurm_mig.memory.wrapper --mode slurm "
        f"--config {lc.config_path} --capacity 48M --emulate -- "
        f"{python} {workload} --iters 400 --sleep 0.05"
    )
    job = lc.cluster.sbatch(
        wrap, partition="mig", comment="mig:key=grow,time=60,iters=400", name="grow"
    )
    lc.start_planner()
    lc.cluster.wait_for(
        lambda: int(lc.cluster.job_field(job, "Restarts")) >= 1, 180, "mig-run's requeue"
    )
    comment = lc.cluster.job_field(job, "Comment")
    assert "mem=" in comment and "key=grow" in comment
    # mig-run (the job) wrote the need into its need file; the Epilog reported it to
    # the planner, which keeps it in its runtime store (the job cannot write there)
    store = RuntimeStore(lc.state_dir / "profiles.sqlite")
    lc.cluster.wait_for(lambda: store.memory_need("grow") is not None, 60, "the need reported")
    assert store.memory_need("grow") > 48 * 2**20
    assert "requeued job" in lc.cluster.job_output(job)
    # the requeued run is planned again (a fresh assignment for run 1)
    lc.cluster.wait_for(
        lambda: (a := lc.assignments([job]).get(job)) is not None and a.restart >= 1,
        60,
        "the requeued run's new assignment",
    )
    lc.cluster.run("scancel", job)


def test_mig_run_takes_its_horizon_from_the_iters_hint(live):
    from slurm_mig.memory.wrapper import hinted_iterations

    lc = live()
    job = lc.cluster.sbatch("sleep 30", partition="mig", comment="mig:key=x,iters=777")
    assert hinted_iterations({**lc.env, "SLURM_JOB_ID": job}) == 777
    assert hinted_iterations(lc.env) is None  # not inside a job
    lc.cluster.run("scancel", job)


def test_an_instance_kept_for_a_job_that_never_comes_is_reclaimed_without_another_hook(live):
    """The Epilog keeps job A's instance for job 999 (a job re-planned onto another
    node); no hook comes to the node again, yet the instance is gone once reuse_wait is
    over: the Epilog's detached reclaim, under a real slurmd."""
    from slurm_mig.devices.migcaps import gi_id_for
    from slurm_mig.geometry import Placement
    from slurm_mig.slurm.assignment import Assignment, load_key, sign
    from slurm_mig.slurm.gres import Record, tres_per_node

    lc = live(reuse_wait=2.0)
    job = lc.cluster.sbatch("true", partition="mig", comment="mig:key=x")
    a = Assignment(job, 0, "node1", 0, "A100-40GB", "1g.5gb", Placement(2, 1), 0, 0, 5.0,
                   time.time(), keep_for="999")  # fmt: skip
    token = sign(a, load_key(lc.root / "etc" / "key"))
    record = Record(0, gi_id_for(A100, a.placement))
    comment = comments.parse("mig:key=x").with_token(token).render()
    lc.cluster.run(
        "scontrol", "update", f"JobId={job}", f"Comment={comment}",
        f"TresPerNode={tres_per_node(record)}",
    )  # fmt: skip
    lc.cluster.run("scontrol", "release", job)
    assert lc.cluster.wait_job(job, ["COMPLETED"], timeout=60) == "COMPLETED"
    hooks_log = lc.node_path("node1", lc.log_file)  # the node's own log

    def logged() -> str:
        return hooks_log.read_text() if hooks_log.exists() else ""

    lc.cluster.wait_for(lambda: "kept 1g.5gb at 2:1 on gpu 0" in logged(), 30, "a keep")
    assert len(lc.live_instances()) == 1
    lc.cluster.wait_for(lambda: lc.live_instances() == [], 30, "the kept instance reclaimed")
    # the reclaim logs once it is done, a moment after the instance is gone
    said = "slurm-mig reclaim job -: reclaimed 1g.5gb at 2:1 on gpu 0"
    lc.cluster.wait_for(lambda: said in logged(), 10, "its log line")


def test_upsize_requeues_an_overrunning_restartable_job_onto_a_whole_gpu(live):
    """[planner] upsize: a restartable Gaussian planned from runs 30 times shorter takes
    a 1g in a queue of 13 others; once they have left and a GPU idles, the planner
    requeues it (held), plans it again, and its next run is on a 7g. The others stay."""
    lc = live(nodes=("node1",), gpus=2, planner={"algorithm": "adaptive", "upsize": 5.0})
    scale = 3.0  # Gaussian: 62 s on a 1g, 26 s on a 7g; HeartWall 2.7 s on a 1g
    kernels = {t.id: t for t in RODINIA}
    lc.learn([kernels["HeartWall"]], scale)
    lc.learn([kernels["Gaussian"]], scale / 30)  # learned from runs 30 times shorter
    others = [lc.submit("HeartWall", scale) for _ in range(13)]
    long = lc.submit("Gaussian", scale, hints="restartable=yes", args=("--requeue",))
    lc.start_planner()
    jobs = lc.wait_done([*others, long], 600)  # a loaded node reports its slices late
    assert {jobs[j].state for j in [*others, long]} == {"COMPLETED"}, lc.cluster.logs()
    assert jobs[long].restart_count >= 1 and all(jobs[j].restart_count == 0 for j in others)
    runs = sorted((r for r in lc.records() if r["job"] == long), key=lambda r: r["end"])
    assert [r["profile"] for r in runs] == ["7g.40gb"]  # the requeue killed the 1g run
    log = lc.daemon_log.read_text()
    assert f"job {long}: requeued (adaptive moves it to a larger slice (7 slices))" in log
    assert log.count(f"job {long}: requeued") == 1  # planned on the 7g, not moved again
    assert lc.live_instances() == []
