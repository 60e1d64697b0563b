"""A node whose slurmd crashes loses neither its GPUs nor its jobs (issue 39), on a real
loopback Slurm with the whole installation.

As found on 22.05: a node's slurmd killed for 60 s (past SlurmdTimeout): a job that
ended meanwhile never got its Epilog, its record and MIG instance stayed, and every job
planned over those slices was refused and requeued without end; a relaunched job whose
Prolog slurmd skipped ran without a GPU. Here slurmd is SIGKILLed alone (its slurmstepds
and jobs run on, as on a real node) with SlurmdTimeout lowered to keep the tests short,
and started again with the same configuration. Each job prints, every run, the
CUDA_VISIBLE_DEVICES the TaskProlog gave it (its output is appended across runs)."""

from __future__ import annotations

import re
import sys
import time

import pytest

from slurm_mig.daemon.cycle.stale import STALE_GRACE
from slurm_mig.demo.live import ROOT, LiveCluster

from .conftest import host_release_only, live_cluster, wait_until

SLURMD_TIMEOUT = 10  # seconds (the harness's default is 60)
PLANNER = {"cycle": 0.5, "batch_window": 0.5}
SHOW = 'echo "run $SLURM_RESTART_COUNT on $SLURMD_NODENAME CVD=$CUDA_VISIBLE_DEVICES"'
STARTED = {"RUNNING", "COMPLETING", "COMPLETED"}


def _cluster(prefix: str, nodes: tuple[str, ...], gpus: int):
    return live_cluster(
        prefix,
        nodes=nodes,
        gpus=gpus,
        planner=PLANNER,
        slurm_options={"extra_conf": (f"SlurmdTimeout={SLURMD_TIMEOUT}",)},
    )


def _submit(lc: LiveCluster, seconds: float, mem: str) -> str:
    """A job that shows its GPU on every run, then sleeps ``seconds``."""
    return lc.cluster.sbatch(
        f"{SHOW}; sleep {seconds}", "--open-mode=append", partition="mig", comment=f"mig:mem={mem}"
    )


def _boot_sweep(lc: LiveCluster, node: str) -> list[str]:
    """What a site runs on ``node`` before slurmd starts (slurm-mig-caps.service):
    ``slurm-mig node-sweep --boot``."""
    return [
        "env", f"PYTHONPATH={ROOT}", sys.executable, "-m", "slurm_mig", "node-sweep",
        "--boot", "--node", node, "--config", str(lc.config_path),
    ]  # fmt: skip


def _stale_held(lc: LiveCluster) -> list[str]:
    """The planner's busy entries of stale node records (slices it will not plan on)."""
    return [k for k in lc.status().get("projected", {}) if k.startswith("stale:")]


def _runs(lc: LiveCluster, job: str) -> list[str]:
    """The lines the job's runs printed (one per run that reached its script)."""
    return [ln for ln in lc.cluster.job_output(job).splitlines() if ln.startswith("run ")]


def _without_slice(lc: LiveCluster, jobs: list[str]) -> dict[str, list[str]]:
    """The runs of ``jobs`` that had no MIG instance (job -> its lines)."""
    bad = {j: [ln for ln in _runs(lc, j) if "CVD=MIG-" not in ln] for j in jobs}
    return {j: lines for j, lines in bad.items() if lines}


def _hooks_log(lc: LiveCluster, node: str, tail: int = 40) -> str:
    path = lc.node_path(node, lc.log_file)
    lines = path.read_text(errors="replace").splitlines() if path.exists() else []
    return "\n".join(lines[-tail:])


def _planner_log(lc: LiveCluster, tail: int = 40) -> str:
    lines = lc.daemon_log.read_text(errors="replace").splitlines()
    return "\n".join(lines[-tail:])


def _diagnosis(lc: LiveCluster) -> str:
    hooks = "\n".join(f"--- hooks {n} ---\n{_hooks_log(lc, n)}" for n in lc.nodes)
    return f"{hooks}\n--- planner ---\n{_planner_log(lc)}"


def _wait_done(lc: LiveCluster, jobs: list[str], timeout: float) -> dict:
    try:
        return lc.wait_done(jobs, timeout)
    except TimeoutError as exc:
        pytest.fail(f"{exc}\n{_diagnosis(lc)}")


@host_release_only
def test_a_job_that_ends_while_slurmd_is_down_leaves_no_instance_behind():
    """The minimal case: job A ends while node1's slurmd is down (no Epilog), the
    planner holds A's slices as stale; slurmd starts again after ``node-sweep --boot``
    (as slurm-mig-caps.service runs it) and job B, which needs the whole GPU and so
    A's slices, then runs, refused at most twice."""
    with _cluster("slurm-mig-nodefail-a-", ("node1",), 1) as lc:
        lc.start_planner()
        a = _submit(lc, 6, "4G")
        wait_until(lambda: _runs(lc, a), 60, "job A to run")
        assert len(lc.live_instances()) == 1
        t_kill = time.monotonic()
        lc.cluster.crash_slurmd("node1")
        _, down_after = lc.cluster.wait_node_state("node1", "down", 4 * SLURMD_TIMEOUT)
        ended = lc.wait_done([a], 30)[a]
        assert ended.state == "COMPLETED"  # and Slurm ran no Epilog:
        assert len(lc.live_instances()) == 1  # A's instance, left behind
        t_back = time.monotonic()
        lc.cluster.start_slurmd("node1", before=_boot_sweep(lc, "node1"))
        assert lc.live_instances() == []  # swept before slurmd started
        # past the planner's grace for an ended job's Epilog report (STALE_GRACE): a
        # record the node still reported would now hold A's slices as stale
        time.sleep(max(0.0, ended.end_time + STALE_GRACE + 2 - time.time()))
        stale_then = _stale_held(lc)
        b = _submit(lc, 1, "30G")  # 7g: every slice of the GPU, A's among them
        jobs = _wait_done(lc, [b], 60)
        recovery = time.monotonic() - t_back
        left = lc.live_instances()
        figures = {
            "down_after_s": round(down_after, 1),
            "outage_s": round(t_back - t_kill, 1),
            "b_state": jobs[b].state,
            "b_restarts": jobs[b].restart_count,
            "instances_left": len(left),
            "stale_held_when_b_came": stale_then,
            "recovery_s": round(recovery, 1),
        }
        print(figures)
        diag = f"{figures}\n{_diagnosis(lc)}"
        assert jobs[b].state == "COMPLETED", diag
        assert jobs[b].restart_count <= 2, diag
        assert _without_slice(lc, [a, b]) == {}, diag
        assert "CVD=MIG-" in lc.cluster.job_output(b), diag
        lc.cluster.wait_for(lambda: lc.live_instances() == [], 30, f"no instance left\n{diag}")


def _prolog_skips(lc: LiveCluster, job: str) -> int:
    """How many runs of ``job`` its TaskProlog found without a record (Prolog skipped);
    the TaskProlog tells the job's output (it runs as the job's owner), and slurmstepd
    repeats it there."""
    runs = re.findall(r"no MIG instance was prepared for run (\d+)", lc.cluster.job_output(job))
    return len(set(runs))


@host_release_only
def test_a_relaunch_whose_prolog_slurmd_skips_never_runs_without_its_slice():
    """The second minimal case: node1 reboots while job A runs (slurmd stopped, saving
    its credential cache; every process killed); Slurm requeues A once the node is down
    (NODE_FAIL) and slurmctld is restarted meanwhile, losing the queued terminate that
    would have revoked A's credential on node1. slurmd, started again, still holds A's
    credential and launches A's next run without its Prolog. The TaskProlog requeues
    that run (it never runs without its slice); the next gets its Prolog and completes."""
    with _cluster("slurm-mig-nodefail-c-", ("node1",), 1) as lc:
        lc.start_planner()
        a = _submit(lc, 8, "4G")
        wait_until(lambda: _runs(lc, a), 60, "job A to run")
        t_kill = time.monotonic()
        killed = lc.cluster.crash_node("node1", reboot=True)
        _, down_after = lc.cluster.wait_node_state("node1", "down", 4 * SLURMD_TIMEOUT)
        wait_until(lambda: lc.jobs()[a].restart_count >= 1, 30, "Slurm to requeue job A")
        lc.cluster.restart_slurmctld()
        t_back = time.monotonic()
        lc.cluster.start_slurmd("node1", before=_boot_sweep(lc, "node1"))
        jobs = _wait_done(lc, [a], 150)
        recovery = time.monotonic() - t_back
        lc.cluster.wait_for(lambda: lc.live_instances() == [], 30, "no instance left", 0.5)
        figures = {
            "processes_killed": killed,
            "down_after_s": round(down_after, 1),
            "outage_s": round(t_back - t_kill, 1),
            "a_state": jobs[a].state,
            "a_restarts": jobs[a].restart_count,
            "runs_reaching_the_script": len(_runs(lc, a)),
            "prolog_skipped": _prolog_skips(lc, a),
            "recovery_s": round(recovery, 1),
        }
        print(figures)
        diag = f"{figures}\n{lc.cluster.job_output(a)}\n{_diagnosis(lc)}"
        assert figures["prolog_skipped"] >= 1, diag  # slurmd did skip it
        assert jobs[a].state == "COMPLETED", diag
        assert _without_slice(lc, [a]) == {}, diag
        # run 0, the NODE_FAIL requeue, the skipped run's requeue, then its last run
        assert jobs[a].restart_count <= 3, diag


def test_a_node_whose_slurmd_crashes_loses_no_job_and_no_gpu():
    """The full case: 2 nodes x 2 GPUs, 12 jobs of 6 or 35 s; node2's slurmd killed past
    SlurmdTimeout while its jobs run, then started again: every job completes on its
    slice, no instance is left, no job is refused more than twice in a row."""
    with _cluster("slurm-mig-nodefail-b-", ("node1", "node2"), 2) as lc:
        lc.start_planner()
        # half end while slurmd is down (no Epilog), half run until Slurm declares the
        # node down and requeues them (their first run goes on there meanwhile)
        ids = [_submit(lc, 6 if i % 2 else 35, "8G") for i in range(12)]

        def on_node2() -> list[str]:
            jobs = lc.jobs()
            there = [j for j in ids if jobs[j].state == "RUNNING" and jobs[j].nodes == "node2"]
            return there if len(there) >= 3 and all(_runs(lc, j) for j in there) else []

        victims = wait_until(on_node2, 60, "jobs running on node2")
        t_kill = time.monotonic()
        lc.cluster.crash_slurmd("node2")
        _, down_after = lc.cluster.wait_node_state("node2", "down", 4 * SLURMD_TIMEOUT)
        t_back = time.monotonic()
        lc.cluster.start_slurmd("node2", before=_boot_sweep(lc, "node2"))
        jobs = _wait_done(lc, ids, 90)
        done = time.monotonic()
        try:
            lc.cluster.wait_for(lambda: lc.live_instances() == [], 20, "no instance left", 0.5)
        except Exception:
            pass  # reported below, with the figures
        left = lc.live_instances()
        held = _stale_held(lc)
        # a job running on node2 at the crash is requeued once by Slurm (NODE_FAIL);
        # every restart beyond that is a refusal
        refusals = {j: jobs[j].restart_count - (j in victims) for j in ids}
        figures = {
            "completed": sum(jobs[j].state == "COMPLETED" for j in ids),
            "submitted": len(ids),
            "on_node2_at_crash": len(victims),
            "down_after_s": round(down_after, 1),
            "outage_s": round(t_back - t_kill, 1),
            "instances_left": len(left),
            "stale_held_by_planner": len(held),
            "max_restarts": max(jobs[j].restart_count for j in ids),
            "max_refusals": max(refusals.values()),
            "recovery_s": round(done - t_back, 1),
        }
        print(figures)
        diag = f"{figures}\n{_diagnosis(lc)}"
        assert figures["completed"] == len(ids), diag
        assert left == [], diag
        assert held == [], diag
        assert _without_slice(lc, ids) == {}, diag
        assert max(refusals.values()) <= 2, f"{refusals}\n{diag}"
