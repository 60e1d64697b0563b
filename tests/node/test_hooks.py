"""The Prolog, TaskProlog and Epilog on a simulated node: real config file, real signed
tokens, real simulated GPUs on disk, and a real ``scontrol`` stand-in that records its
arguments. Most tests call the ``*_main`` entry points in-process; some run the thin
executables in prolog/ and epilog/ as Slurm would."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hooksite import (
    EPILOG,
    NODE,
    PROLOG,
    T0,
    TASK_PROLOG,
    Site,
    clock_at,
    exe,
    run,
)
from support import FakeClock

from slurm_mig.geometry import Placement
from slurm_mig.node import hookmain
from slurm_mig.node.hooks import epilog_main, prolog_main, reclaim_main, task_prolog_main

# -- the lifecycle -------------------------------------------------------------------------


def test_full_lifecycle_creates_exports_and_destroys(site, capsys):
    comment = site.comment("42", text="train mig:key=resnet,time=2m")
    env = site.env("42", comment)

    rc, out, err = run(prolog_main, env, capsys)
    assert rc == 0 and out == []
    [inst] = site.backend().instances()
    assert (inst.gpu, inst.profile, inst.placement) == (1, "3g.20gb", Placement(4, 4))
    assert err == [
        f"slurm-mig prolog job 42: created 3g.20gb at 4:4 on gpu 1 ({inst.uuid}) in 0.00 s; "
        "planned 120 s (batch 3, order 0)"
    ]
    rec = site.state.job("42")
    assert rec.uuid == inst.uuid and rec.restart == 0 and not rec.reused
    assert stat.S_IMODE((site.run_dir / "private" / "jobs" / "42.json").stat().st_mode) == 0o600
    task = (site.run_dir / "task" / "42.json").stat()  # the TaskProlog's copy: the user's
    assert (stat.S_IMODE(task.st_mode), task.st_uid) == (0o400, os.getuid())

    rc, out, err = run(task_prolog_main, site.task_env(env), capsys)
    assert rc == 0
    assert out == [f"export CUDA_VISIBLE_DEVICES={inst.uuid}"]
    assert err == [
        f"slurm-mig taskprolog job 42: CUDA_VISIBLE_DEVICES={inst.uuid}: 3g.20gb at 4:4 on gpu 1"
    ]

    rc, out, err = run(epilog_main, env, capsys, t=T0 + 65.0)
    assert rc == 0 and out == []
    assert err == [
        f"slurm-mig epilog job 42: destroyed 3g.20gb at 4:4 on gpu 1 ({inst.uuid}) after 60.0 s"
    ]
    assert site.backend().instances() == []
    assert site.ops() == [("create", "42"), ("destroy", "42")]
    assert site.audit()[1]["uuid"] == inst.uuid
    assert site.state.job("42") is None and site.state.task("42") is None
    [runtime] = [json.loads(x) for x in site.state.runtimes_path.read_text().splitlines()]
    assert runtime == {
        "job_id": "42",
        "restart": 0,
        "key": "resnet",
        "gpu": 1,
        "model": "A100-40GB",
        "profile": "3g.20gb",
        "seconds": 60.0,
        "end": T0 + 65.0,
        "freed": T0 + 65.0,
    }
    assert site.scontrol_calls() == []
    logged = (site.tmp / "hooks.log").read_text().splitlines()
    assert len(logged) == 3
    assert re.match(r"^\S+ node1 slurm-mig prolog job 42: created 3g\.20gb", logged[0])
    assert re.match(r"^\S+ node1 slurm-mig taskprolog job 42: CUDA_VISIBLE_DEVICES=", logged[1])
    assert re.match(r"^\S+ node1 slurm-mig epilog job 42: destroyed 3g\.20gb", logged[2])


def test_retried_prolog_reuses_the_jobs_instance(site, capsys):
    env = site.env("42", site.comment("42"))
    assert run(prolog_main, env, capsys)[0] == 0
    uuid = site.state.job("42").uuid
    rc, _, err = run(prolog_main, env, capsys, t=T0 + 30.0)
    assert rc == 0
    assert "reusing 3g.20gb at 4:4 on gpu 1" in err[0]
    assert "earlier try of this prolog" in err[0]
    assert site.ops() == [("create", "42")]
    assert site.state.job("42").uuid == uuid


def test_retried_prolog_recreates_an_instance_that_vanished(site, capsys):
    env = site.env("42", site.comment("42"))
    run(prolog_main, env, capsys)
    old = site.state.job("42").uuid
    site.backend().destroy(1, old, job_id="admin")
    rc, _, err = run(prolog_main, env, capsys)
    assert rc == 0
    assert "which is gone; preparing it again" in err[0]
    new = site.state.job("42").uuid
    assert new != old and [i.uuid for i in site.backend().instances()] == [new]


def test_kept_instance_is_adopted_by_the_next_job(site, capsys):
    env1 = site.env("41", site.comment("41", keep_for="42"))
    run(prolog_main, env1, capsys)
    uuid = site.state.job("41").uuid
    rc, _, err = run(epilog_main, env1, capsys, t=T0 + 20.0)
    assert rc == 0
    assert err[0].startswith(
        f"slurm-mig epilog job 41: kept 3g.20gb at 4:4 on gpu 1 ({uuid}) for job 42"
    )
    [kept] = site.state.kept()
    assert (kept.for_job, kept.until) == ("42", T0 + 20.0 + 300.0)

    env2 = site.env("42", site.comment("42", reuse_from="41"))
    rc, _, err = run(prolog_main, env2, capsys, t=T0 + 21.0)
    assert rc == 0
    assert "adopted 3g.20gb at 4:4 on gpu 1" in err[0] and "kept for job 42" in err[0]
    rec = site.state.job("42")
    assert rec.uuid == uuid and rec.reused
    assert site.state.kept() == []
    rc, out, _ = run(task_prolog_main, site.task_env(env2), capsys)
    assert out == [f"export CUDA_VISIBLE_DEVICES={uuid}"]
    # One create, no destroy + create between the two jobs.
    assert site.ops() == [("create", "41")]
    run(epilog_main, env2, capsys, t=T0 + 40.0)
    assert site.ops() == [("create", "41"), ("destroy", "42")]


def test_expired_kept_instance_is_reclaimed_by_the_next_epilog(site, capsys):
    env1 = site.env("41", site.comment("41", keep_for="42"))
    run(prolog_main, env1, capsys)
    run(epilog_main, env1, capsys, t=T0 + 10.0)
    assert len(site.state.kept()) == 1
    # Job 50 runs on gpu 0; its epilog comes after job 41's instance waited too long.
    env3 = site.env("50", site.comment("50", gpu=0, profile="1g.5gb", placement=(0, 1)))
    run(prolog_main, env3, capsys, t=T0 + 20.0)
    assert len(site.state.kept()) == 1  # not expired yet at T0 + 20
    rc, _, err = run(epilog_main, env3, capsys, t=T0 + 311.0)
    assert rc == 0
    assert any("reclaimed 3g.20gb at 4:4 on gpu 1" in line for line in err)
    assert site.state.kept() == []
    assert site.backend().instances() == []
    assert site.ops() == [("create", "41"), ("create", "50"), ("destroy", "50"), ("destroy", "50")]


def test_expired_kept_instance_is_reclaimed_by_the_next_prolog(site, capsys):
    env1 = site.env("41", site.comment("41", keep_for="42"))
    run(prolog_main, env1, capsys)
    run(epilog_main, env1, capsys, t=T0 + 10.0)
    env3 = site.env(
        "50", site.comment("50", gpu=0, profile="7g.40gb", placement=(0, 8), issued=T0 + 400)
    )
    rc, _, err = run(prolog_main, env3, capsys, t=T0 + 400.0)
    assert rc == 0
    assert "created 7g.40gb" in err[0] and "reclaimed 3g.20gb at 4:4 on gpu 1" in err[1]
    assert [(i.gpu, i.profile) for i in site.backend().instances()] == [(0, "7g.40gb")]


def test_overlapping_kept_and_orphan_instances_are_destroyed(site, capsys):
    env1 = site.env("41", site.comment("41", keep_for="42"))
    run(prolog_main, env1, capsys)
    run(epilog_main, env1, capsys, t=T0 + 10.0)  # 3g at 4:4 kept for job 42
    orphan = site.backend().create(1, "1g.5gb", Placement(0, 1), job_id="lost")
    env2 = site.env("43", site.comment("43", profile="7g.40gb", placement=(0, 8)))
    rc, _, err = run(prolog_main, env2, capsys, t=T0 + 11.0)
    assert rc == 0
    assert any(
        f"destroyed orphan instance (no job record) 1g.5gb at 0:1 on gpu 1 ({orphan.uuid})" in x
        for x in err
    )
    assert any("destroyed instance kept for job 42 3g.20gb at 4:4" in x for x in err)
    assert [(i.profile, i.placement) for i in site.backend().instances()] == [
        ("7g.40gb", Placement(0, 8))
    ]
    assert site.state.kept() == []


def test_requeued_job_adopts_the_instance_of_its_earlier_run(site, capsys):
    run(prolog_main, site.env("42", site.comment("42")), capsys)
    uuid = site.state.job("42").uuid
    # Run 0's epilog never ran (slurmd died); run 1 is planned on the same instance.
    env = site.env("42", site.comment("42", restart=1), restart=1)
    rc, _, err = run(prolog_main, env, capsys)
    assert rc == 0
    assert "run 0 of this job left" in err[0] and "adopted" in err[1]
    rec = site.state.job("42")
    assert (rec.restart, rec.uuid, rec.reused) == (1, uuid, True)
    assert site.ops() == [("create", "42")]


# -- refusals ------------------------------------------------------------------------------


def _refusal_cases(site: Site) -> dict[str, tuple[dict[str, str], str, str]]:
    """name -> (prolog env, action, text the reason contains)."""
    other_key = bytes(range(32))
    return {
        "missing": (site.env("42", "just a comment"), "requeue", "no assignment token"),
        "no comment": (site.env("42"), "requeue", "no assignment token"),
        "garbage": (site.env("42", "migplan=xyz"), "fail", "malformed"),
        "garbage payload": (site.env("42", "migplan=v1.!!!.abc"), "fail", "signature is wrong"),
        "forged": (
            site.env("42", site.comment("42", key=other_key)),
            "fail",
            "signature is wrong",
        ),
        "altered": (
            site.env("42", site.comment("42")[:-3] + "AAA"),
            "fail",
            "signature is wrong",
        ),
        "another job's": (site.env("42", site.comment("41")), "fail", "for job 41, not job 42"),
        "stale restart": (
            site.env("42", site.comment("42", restart=0), restart=1),
            "requeue",
            "stale after a requeue",
        ),
        "other node": (
            site.env("42", site.comment("42", node="node2")),
            "requeue",
            "for node node2",
        ),
        "expired": (
            site.env("42", site.comment("42", issued=T0 - 7200)),
            "requeue",
            "over the 3600 s limit",
        ),
        "profile not on model": (
            site.env("42", site.comment("42", profile="3g.40gb")),
            "fail",
            "no profile '3g.40gb'",
        ),
        "model mismatch": (
            site.env("42", site.comment("42", model="H100-80GB", profile="3g.40gb")),
            "fail",
            "is for a H100-80GB but gpu 1 of node1 is a A100-40GB",
        ),
        "gpu out of range": (site.env("42", site.comment("42", gpu=5)), "fail", "names gpu 5"),
        "illegal placement": (
            site.env("42", site.comment("42", placement=(2, 4))),
            "fail",
            "allows 0:4, 4:4",
        ),
        "bad hint": (
            site.env("42", site.comment("42", text="mig:mem=12X")),
            "fail",
            "hint 'mem=12X': unknown unit",
        ),
        "bad restart count": (
            site.env("42", site.comment("42"), SLURM_JOB_RESTART_COUNT="two"),
            "fail",
            "restart count 'two'",
        ),
    }


REFUSAL_NAMES = list(_refusal_cases(Site(Path("/x"), Path("/x"), b"k" * 32, Path("/x"))))


@pytest.mark.parametrize("name", REFUSAL_NAMES)
def test_bad_tokens_are_refused_with_the_right_action(site, capsys, name):
    env, action, text = _refusal_cases(site)[name]
    rc, out, err = run(prolog_main, env, capsys)
    assert rc == 0 and out == []
    refusal = site.state.refusal("42")
    assert refusal is not None and refusal.action == action
    assert text in refusal.reason
    assert err == [f"slurm-mig prolog job 42: refused (action {action}): {refusal.reason}"]
    assert site.backend().instances() == [] and site.audit() == []
    assert site.state.job("42") is None

    rc, out, _ = run(task_prolog_main, site.task_env(env), capsys)
    assert rc == 1
    assert out[:2] == ["export CUDA_VISIBLE_DEVICES=", f"print slurm-mig: {refusal.reason}"]
    if action == "requeue":
        assert out[2] == "print slurm-mig: job 42 is requeued and held for the planner"
        assert site.scontrol_calls() == [["requeuehold", "42"]]
    else:
        assert out[2] == "print slurm-mig: job 42 cannot run as submitted"
        assert site.scontrol_calls() == []

    rc, _, err = run(epilog_main, env, capsys)
    assert rc == 0 and site.state.refusal("42") is None
    assert err == ["slurm-mig epilog job 42: no instance recorded for this job; nothing to destroy"]


def test_slices_of_a_live_job_are_not_taken(site, capsys):
    run(prolog_main, site.env("41", site.comment("41")), capsys)
    env = site.env("42", site.comment("42", profile="7g.40gb", placement=(0, 8)))
    rc, _, err = run(prolog_main, env, capsys)
    assert rc == 0
    refusal = site.state.refusal("42")
    assert refusal.action == "requeue"
    assert refusal.reason.startswith("slices still in use by job 41: 3g.20gb at 4:4 on gpu 1")
    assert site.ops() == [("create", "41")]
    rc, out, _ = run(task_prolog_main, site.task_env(env), capsys)
    assert rc == 1 and out[1] == f"print slurm-mig: {refusal.reason}"
    assert site.scontrol_calls() == [["requeuehold", "42"]]


def test_a_successful_retry_clears_an_earlier_refusal(site, capsys):
    run(prolog_main, site.env("42", "no token yet"), capsys)
    assert site.state.refusal("42").action == "requeue"
    env = site.env("42", site.comment("42"))
    assert run(prolog_main, env, capsys)[0] == 0
    assert site.state.refusal("42") is None
    rc, out, _ = run(task_prolog_main, site.task_env(env), capsys)
    assert rc == 0 and out[0].startswith("export CUDA_VISIBLE_DEVICES=MIG-")


# -- device faults -------------------------------------------------------------------------


def test_device_fault_on_create_drains_the_node(site, capsys):
    site.fault("create", "DeviceUnavailable", "Unknown Error (NVML 999)")
    rc, out, err = run(prolog_main, site.env("42", site.comment("42")), capsys)
    assert rc == 1
    text = "GPU 1: Unknown Error (NVML 999)"
    assert err[0] == f"slurm-mig prolog job 42: node fault, draining the node: {text}"
    assert site.scontrol_calls() == [
        ["update", "NodeName=node1", "State=DRAIN", f"Reason=slurm-mig: {text}"]
    ]
    assert site.state.job("42") is None and site.backend().instances() == []


def test_conflict_reported_by_the_device_requeues_without_draining(site, capsys):
    site.fault("create", "PlacementConflict", "Insufficient Resources", times=1)
    rc, _, _ = run(prolog_main, site.env("42", site.comment("42")), capsys)
    assert rc == 0
    refusal = site.state.refusal("42")
    assert refusal.action == "requeue" and "Insufficient Resources" in refusal.reason
    assert site.scontrol_calls() == []


def test_epilog_run_twice_destroys_once(site, capsys):
    env = site.env("42", site.comment("42"))
    run(prolog_main, env, capsys)
    assert run(epilog_main, env, capsys)[0] == 0
    rc, out, err = run(epilog_main, env, capsys)
    assert rc == 0 and out == []
    assert err == ["slurm-mig epilog job 42: no instance recorded for this job; nothing to destroy"]
    assert site.ops() == [("create", "42"), ("destroy", "42")]


def test_device_fault_on_destroy_drains_and_is_retried_later(site, capsys):
    env = site.env("42", site.comment("42"))
    run(prolog_main, env, capsys)
    uuid = site.state.job("42").uuid
    site.fault("destroy", "InstanceInUse", "In use by another client", times=1)
    rc, _, err = run(epilog_main, env, capsys, t=T0 + 50.0)
    assert rc == 1
    assert "node fault, draining the node: cannot destroy 3g.20gb at 4:4 on gpu 1" in err[0]
    [call] = site.scontrol_calls()
    assert call[:3] == ["update", "NodeName=node1", "State=DRAIN"]
    assert call[3].startswith("Reason=slurm-mig: cannot destroy") and "In use" in call[3]
    # The instance is remembered as expired-kept, so the next hook reclaims it.
    assert site.state.job("42") is None
    [kept] = site.state.kept()
    assert kept.uuid == uuid and kept.until == T0 + 50.0
    rc, _, err = run(epilog_main, site.env("77", site.comment("77")), capsys, t=T0 + 60.0)
    assert rc == 0 and any("reclaimed" in x for x in err)
    assert site.backend().instances() == [] and site.state.kept() == []


# -- not ours, no record, broken setup -----------------------------------------------------


def test_job_outside_the_partition_is_left_alone(site, capsys):
    env = site.env("42", site.comment("42"), partition="debug")
    rc, out, err = run(prolog_main, env, capsys)
    assert rc == 0 and out == []
    assert err == ["slurm-mig prolog job 42: partition debug is not mig; nothing to do"]
    assert run(task_prolog_main, site.task_env(env), capsys)[:2] == (0, [])
    assert run(epilog_main, env, capsys)[0] == 0
    assert not site.run_dir.exists() and not site.sim_dir.exists()
    assert site.scontrol_calls() == []


def test_task_prolog_without_record_requeues_the_job_never_runs_it_without_its_slice(site, capsys):
    """Issue 39: a job of the partition whose Prolog did not run is requeued and held."""
    rc, out, _ = run(task_prolog_main, site.env("42"), capsys)
    assert rc == 1
    assert out[0] == "export CUDA_VISIBLE_DEVICES="
    assert "no MIG instance was prepared for run 0 of job 42 on node1" in out[1]
    assert out[2] == "print slurm-mig: job 42 is requeued and held for the planner"
    assert site.scontrol_calls()[-1][0] == "requeuehold"


def test_missing_config_drains_the_node_but_not_the_task(site, capsys):
    env = site.env("42", site.comment("42"), SLURM_MIG_CONFIG=str(site.tmp / "none.toml"))
    rc, _, err = run(prolog_main, env, capsys)
    assert rc == 1
    assert "no config file there" in err[0]
    [call] = site.scontrol_calls()
    assert call[3].startswith(f"Reason=slurm-mig: slurm-mig config: {site.tmp / 'none.toml'}")
    rc, out, _ = run(task_prolog_main, site.task_env(env), capsys)
    assert rc == 0 and out[0] == "export CUDA_VISIBLE_DEVICES="


def test_unreadable_key_drains_the_node(site, capsys):
    (site.tmp / "key").unlink()
    rc, _, err = run(prolog_main, site.env("42", site.comment("42")), capsys)
    assert rc == 1 and "no signing key" in err[0]
    assert site.scontrol_calls()[0][2] == "State=DRAIN"


def test_node_not_in_config_drains(site, capsys):
    env = site.env("42", site.comment("42", node="gpu07"), SLURMD_NODENAME="gpu07")
    rc, _, err = run(prolog_main, env, capsys)
    assert rc == 1 and "node 'gpu07' is not configured" in err[0]
    assert site.scontrol_calls()[0][1] == "NodeName=gpu07"


def test_without_slurm_environment_nothing_happens(site, capsys):
    rc, out, err = run(prolog_main, {"SLURM_MIG_CONFIG": str(site.config)}, capsys)
    assert rc == 0 and out == []
    assert err == [
        "slurm-mig prolog job ?: no SLURM_JOB_ID in the environment; install this as Slurm's "
        "Prolog, Epilog or TaskProlog (slurm.conf), it is not meant to be run by hand"
    ]


def test_failed_drain_is_logged(site, capsys):
    site.fault("create", "NoPermission", "Insufficient Permissions")
    env = site.env("42", site.comment("42"), SLURM_MIG_SCONTROL=str(site.tmp / "no-scontrol"))
    rc, _, err = run(prolog_main, env, capsys)
    assert rc == 1
    assert "could not drain the node" in err[-1] and "no-scontrol" in err[-1]


# -- the thin executables, as Slurm runs them -------------------------------------------------


def test_thin_executables_run_the_lifecycle(site):
    comment = site.comment("42", issued=time.time())
    env = site.env("42", comment)
    p = exe(PROLOG, env)
    assert p.returncode == 0, p.stderr
    assert p.stderr.startswith("slurm-mig prolog job 42: created 3g.20gb at 4:4 on gpu 1")
    uuid = site.state.job("42").uuid
    t = exe(TASK_PROLOG, site.task_env(env))
    assert (t.returncode, t.stdout) == (0, f"export CUDA_VISIBLE_DEVICES={uuid}\n")
    e = exe(EPILOG, env)
    assert e.returncode == 0, e.stderr
    assert e.stderr.startswith(
        f"slurm-mig epilog job 42: destroyed 3g.20gb at 4:4 on gpu 1 ({uuid})"
    )
    e2 = exe(EPILOG, env)
    assert e2.returncode == 0 and "nothing to destroy" in e2.stderr
    assert site.ops() == [("create", "42"), ("destroy", "42")]


def test_thin_executables_are_executable_python_scripts():
    for path in (PROLOG, TASK_PROLOG, EPILOG):
        assert os.access(path, os.X_OK), path
        assert path.read_text().startswith("#!/usr/bin/env python3\n")


def test_thin_prolog_drains_on_a_device_fault(site):
    site.fault("create", "MigDisabled", "MIG mode is off")
    p = exe(PROLOG, site.env("42", site.comment("42", issued=time.time())))
    assert p.returncode == 1
    assert site.scontrol_calls() == [
        ["update", "NodeName=node1", "State=DRAIN", "Reason=slurm-mig: GPU 1: MIG mode is off"]
    ]


def test_thin_taskprolog_requeues_a_refused_job(site):
    env = site.env("42", "no token")
    assert exe(PROLOG, env).returncode == 0
    t = exe(TASK_PROLOG, site.task_env(env))
    assert t.returncode == 1
    assert t.stdout.splitlines()[1].startswith("print slurm-mig: no assignment token")
    assert site.scontrol_calls() == [["requeuehold", "42"]]


def test_a_taskprolog_signalled_by_the_requeue_it_asked_for_still_tells_the_job_why(site):
    """Slurm signals the job's step once the requeue is done, while the TaskProlog that
    asked for it still runs; slurmstepd passes its print lines on only if it exits."""
    kill = "import os, signal\nif sys.argv[1] == 'requeuehold':\n    os.kill(os.getppid(), signal.SIGTERM)\n"
    site.scontrol.write_text(site.scontrol.read_text() + kill)
    t = exe(TASK_PROLOG, site.env("42"))  # no record of run 0: its Prolog was skipped
    assert t.returncode == 1, (t.returncode, t.stderr)
    lines = t.stdout.splitlines()
    assert lines[0] == "export CUDA_VISIBLE_DEVICES="
    assert lines[1].startswith("print slurm-mig: no MIG instance was prepared for run 0 of job 42")
    assert site.scontrol_calls() == [["requeuehold", "42"]]


def test_concurrent_prologs_never_take_each_others_slices(site):
    # Job 41 wants 3g at 4:4, job 42 the whole GPU: whichever prolog takes the node lock
    # first creates its instance; the other must see it as live, not as an orphan to
    # destroy (its record is written under the same lock), and is requeued.
    text = site.config.read_text().replace("latency_scale = 0.0", "latency_scale = 1.0")
    site.config.write_text(text)
    now = time.time()
    envs = {
        "41": site.env("41", site.comment("41", issued=now)),
        "42": site.env("42", site.comment("42", issued=now, profile="7g.40gb", placement=(0, 8))),
    }
    procs = {
        job: subprocess.Popen(
            [sys.executable, str(PROLOG)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for job, env in envs.items()
    }
    for p in procs.values():
        p.communicate(timeout=60)
        assert p.returncode == 0
    placed = {r.job_id for r in site.state.jobs()}
    refused = {j for j in envs if site.state.refusal(j) is not None}
    assert len(placed) == 1 and placed | refused == {"41", "42"}
    [loser] = refused
    assert site.state.refusal(loser).reason.startswith(f"slices still in use by job {placed.pop()}")
    assert [op for op, _ in site.ops()] == ["create"]


HEAVY = ("numpy", "torch", "statsmodels", "matplotlib", "scipy", "pandas", "slurm_mig.planner")


@pytest.mark.parametrize("hook", ["prolog", "taskprolog", "epilog"])
def test_hooks_import_nothing_heavy(site, hook):
    env = site.env("42", site.comment("42", issued=time.time()))
    exe(PROLOG, env)  # so that the TaskProlog and Epilog take their full path
    path = {"prolog": PROLOG, "taskprolog": TASK_PROLOG, "epilog": EPILOG}[hook]
    p = exe(path, env, "-X", "importtime")
    assert p.returncode == 0, p.stderr
    modules = {
        line.rsplit("|", 1)[1].strip()
        for line in p.stderr.splitlines()
        if line.startswith("import time:") and line.count("|") == 2
    }
    assert "slurm_mig.node.hooks" in modules
    if hook != "taskprolog":
        assert "slurm_mig.devices.simulated" in modules  # the hook did its real work
    heavy = sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))
    assert heavy == []


def test_instance_kept_for_a_job_that_started_elsewhere_is_reclaimed_at_once(site, capsys):
    # a re-plan sent job 42 to gpu 0 after job 41's instance was kept for it
    env1 = site.env("41", site.comment("41", keep_for="42"))
    run(prolog_main, env1, capsys)
    run(epilog_main, env1, capsys, t=T0 + 10.0)
    assert len(site.state.kept()) == 1
    env2 = site.env("42", site.comment("42", gpu=0, profile="1g.5gb", placement=(0, 1)))
    rc, _, err = run(prolog_main, env2, capsys, t=T0 + 11.0)  # long before reuse_wait ends
    assert rc == 0
    assert any("reclaimed 3g.20gb at 4:4 on gpu 1" in line for line in err)
    assert site.state.kept() == []
    assert [(i.gpu, i.profile) for i in site.backend().instances()] == [(0, "1g.5gb")]


def test_no_instance_is_kept_for_a_job_that_already_finished(site, capsys):
    env2 = site.env("42", site.comment("42", gpu=0, profile="1g.5gb", placement=(0, 1)))
    run(prolog_main, env2, capsys)
    run(epilog_main, env2, capsys, t=T0 + 5.0)  # job 42 ran and ended first
    env1 = site.env("41", site.comment("41", keep_for="42"))
    run(prolog_main, env1, capsys, t=T0 + 6.0)
    rc, _, err = run(epilog_main, env1, capsys, t=T0 + 9.0)
    assert rc == 0 and "destroyed 3g.20gb at 4:4 on gpu 1" in err[0]
    assert site.state.kept() == [] and site.backend().instances() == []


def _short_reuse_wait(site: Site) -> None:
    site.config.write_text(
        site.config.read_text().replace("reuse_wait = 300.0", "reuse_wait = 0.5")
    )


def _reclaims_started(monkeypatch) -> list[tuple[list[str], dict]]:
    """The detached reclaims a hook starts, recorded (argv, Popen keywords) instead of
    started; every other process starts as usual."""
    started, real = [], subprocess.Popen

    def popen(args, *rest, **kw):
        if any("reclaim_main" in str(a) for a in args):
            started.append((list(args), kw))
            return None
        return real(args, *rest, **kw)

    monkeypatch.setattr(subprocess, "Popen", popen)
    return started


def test_a_kept_instance_no_hook_comes_for_is_reclaimed_when_its_wait_ends(
    site, capsys, monkeypatch
):
    """Under slurmd the Epilog that keeps an instance starts a detached reclaim: when the
    wait is over it is destroyed, also when its job went to another node and no hook
    runs here again (the gap the planner-restart e2e test hit)."""
    _short_reuse_wait(site)
    env1 = site.env("41", site.comment("41", keep_for="42"))
    assert run(prolog_main, env1, capsys)[0] == 0
    real_popen = subprocess.Popen
    started = _reclaims_started(monkeypatch)
    env = {**env1, "SLURM_SCRIPT_CONTEXT": "epilog_slurmd"}
    rc, _, err = run(epilog_main, env, capsys, t=T0 + 10.0)
    assert rc == 0 and "kept 3g.20gb at 4:4 on gpu 1" in err[0]
    [(argv, kw)] = started
    assert argv[3:] == [NODE, "1.5"]  # reuse_wait and a second: its wait is over by then
    assert kw["start_new_session"] and kw["stdin"] == subprocess.DEVNULL  # outlives the hook
    # run that command as started, less its wait: the kept record's wait (until T0 + 10.5)
    # is long over on the real clock it reads
    p = real_popen([*argv[:3], NODE, "0"], env=kw["env"], stderr=subprocess.PIPE, text=True)
    _, said = p.communicate(timeout=60)
    assert p.returncode == 0 and said.startswith("slurm-mig reclaim job -: reclaimed"), said
    assert site.backend().instances() == [] and site.state.kept() == []
    log = (site.tmp / "hooks.log").read_text()
    assert "slurm-mig reclaim job -: reclaimed 3g.20gb at 4:4 on gpu 1" in log


def test_the_reclaim_waits_and_then_destroys_only_what_has_run_out(site, capsys, monkeypatch):
    _short_reuse_wait(site)
    env1 = site.env("41", site.comment("41", keep_for="42"))
    run(prolog_main, env1, capsys)
    run(epilog_main, env1, capsys, t=T0 + 10.0)  # kept until T0 + 10.5
    clock = FakeClock(T0 + 10.0)
    monkeypatch.setattr(hookmain, "time", clock)  # reclaim_main sleeps and reads the time
    env = {"SLURM_MIG_CONFIG": str(site.config)}
    assert reclaim_main([NODE, "0.2"], env) == 0  # too early
    assert clock.slept == [0.2] and len(site.state.kept()) == 1
    assert len(site.backend().instances()) == 1
    assert reclaim_main([NODE, "1.5"], env) == 0
    assert clock.slept == [0.2, 1.5]
    assert site.backend().instances() == [] and site.state.kept() == []
    log = (site.tmp / "hooks.log").read_text()
    assert "slurm-mig reclaim job -: reclaimed 3g.20gb at 4:4 on gpu 1" in log


@pytest.mark.parametrize("context", [None, "epilog_slurmctld"], ids=["by-hand", "slurmctld"])
def test_an_epilog_outside_slurmd_starts_no_reclaim(site, capsys, monkeypatch, context):
    _short_reuse_wait(site)
    env1 = site.env("41", site.comment("41", keep_for="42"))
    run(prolog_main, env1, capsys)
    started = _reclaims_started(monkeypatch)
    env = env1 if context is None else {**env1, "SLURM_SCRIPT_CONTEXT": context}
    rc, _, err = run(epilog_main, env, capsys, t=T0 + 10.0)  # run by hand or by a test
    assert rc == 0 and "kept 3g.20gb" in err[0]
    assert started == []
    assert len(site.backend().instances()) == 1 and len(site.state.kept()) == 1


@pytest.mark.parametrize(
    ("gpus", "said"),
    [
        ("16", "the job has SLURM_JOB_GPUS=16, not the GRES record m1g2 (index 16)"),
        ("2", "the job has SLURM_JOB_GPUS=2, not the GRES record m1g2 (index 16)"),
        ("", "the job has no GRES, not the GRES record m1g2 (index 16)"),
    ],
)
def test_prolog_checks_the_jobs_gres_against_its_assignment(site, capsys, gpus, said):
    """The planner's current plan reaches the Prolog as the job's GRES record: a token
    of another plan (or a job released by hand) does not match it and is requeued."""
    comment = site.comment("42")  # 3g.20gb at 4:4 on gpu 1: record m1g2, index 14 + 2
    env = site.env("42", comment, SLURM_JOB_GPUS=gpus)
    rc, out, err = run(prolog_main, env, capsys)
    if gpus == "16":
        assert rc == 0 and len(site.backend().instances()) == 1
        return
    assert rc == 0 and site.backend().instances() == []
    assert any(f"refused (action requeue): {said}" in line for line in err), err
    assert site.scontrol_calls() == []  # no drain


def test_gres_check_off_accepts_a_job_without_gres(site, capsys):
    site.config.write_text(
        site.config.read_text().replace('partition = "mig"', 'partition = "mig"\ngres = "off"')
    )
    env = site.env("42", site.comment("42"), SLURM_JOB_GPUS="")
    assert run(prolog_main, env, capsys)[0] == 0
    assert len(site.backend().instances()) == 1


def test_an_instance_with_another_gpu_instance_id_is_destroyed_and_the_job_requeued(site, capsys):
    """A driver that numbers GPU instances otherwise than the gres.conf records: the
    job's device cgroup would open another instance's capability nodes."""
    site.sim_dir.mkdir(parents=True, exist_ok=True)
    (site.sim_dir / "gi-numbering").write_text("creation\n")
    rc, out, err = run(prolog_main, site.env("42", site.comment("42")), capsys)
    assert rc == 0 and site.backend().instances() == []
    assert any(
        "refused (action requeue): the driver gave 3g.20gb at 4:4 on gpu 1" in line
        and "GPU-instance id 1" in line
        and "capability nodes of id 2" in line
        for line in err
    ), err
    assert [op for op, _ in site.ops()] == ["create", "destroy"]
    assert site.scontrol_calls() == []  # the node is not drained
    rc, out, _ = run(task_prolog_main, site.task_env(site.env("42", site.comment("42"))), capsys)
    assert rc == 1 and "print slurm-mig: job 42 is requeued and held for the planner" in out


# -- measured energy: the GPU's energy counter split across its runs (issue 22) ----------------


def _on_fake_nvml(site: Site):
    """The hooks on fake NVML GPUs (two A100-40GB, as the site's config says); returns
    (fake module, a setter of GPU 1's energy counter in mJ, the backend opener)."""
    import fake_pynvml as fake

    from slurm_mig.devices.nvml import NvmlBackend

    fake.fake_reset(["A100-40GB", "A100-40GB"])
    # the fake numbers GPU instances in creation order, not as the GRES records expect
    text = site.config.read_text()
    site.config.write_text(text.replace('partition = "mig"', 'partition = "mig"\ngres = "off"'))

    def counter(mj: int) -> None:
        fake._sys.gpus[1].energy_mj = mj

    return fake, counter, lambda config, node: NvmlBackend(fake)


def _hook(main, env, capsys, t: float, opener) -> tuple[int, list[str]]:
    rc = main(env, clock=clock_at(t), open_backend=opener)
    return rc, capsys.readouterr().err.splitlines()


def _accounted(site: Site) -> dict[str, dict]:
    """job id -> its accounting line (the Epilog's record for the planner)."""
    path = site.run_dir / "private" / "accounting.jsonl"
    return {d["job_id"]: d for d in map(json.loads, path.read_text().splitlines())}


def test_a_run_on_a_gpu_with_an_energy_counter_gets_its_measured_energy(site, capsys):
    _, counter, opener = _on_fake_nvml(site)
    env = site.env("42", site.comment("42"))
    counter(5_000_000)
    assert _hook(prolog_main, env, capsys, T0 + 5.0, opener)[0] == 0
    assert site.state.job("42").energy_mj == 5_000_000  # the reading at the Prolog
    counter(5_000_000 + 60 * 250_000)  # 60 s at 250 W: 15 kJ, the run alone on the GPU
    rc, err = _hook(epilog_main, env, capsys, T0 + 65.0, opener)
    assert rc == 0 and not any("energy" in line for line in err)
    assert _accounted(site)["42"]["measured_j"] == 15_000.0
    runtime = json.loads(site.state.runtimes_path.read_text().splitlines()[-1])
    assert runtime["measured_j"] == 15_000.0
    ledger = site.state.energy_ledger(1)
    assert ledger.mj == 20_000_000 and dict(ledger.runs) == {}  # nothing left behind


def test_two_overlapping_runs_split_the_gpus_energy_by_slices_and_time(site, capsys):
    """A (3g, 3 slices) alone for 10 s, then with B (4g, 4 slices) for 10 s, then B
    alone for 20 s: A gets its first interval and 3/7 of the second, B 4/7 of the
    second and its last; together exactly what the counter advanced."""
    _, counter, opener = _on_fake_nvml(site)
    env_a = site.env("51", site.comment("51", gpu=1, profile="3g.20gb", placement=(4, 4)))
    env_b = site.env("52", site.comment("52", gpu=1, profile="4g.20gb", placement=(0, 4)))
    counter(1_000_000)
    assert _hook(prolog_main, env_a, capsys, T0 + 5.0, opener)[0] == 0
    counter(2_000_000)  # 1000 J while A ran alone
    assert _hook(prolog_main, env_b, capsys, T0 + 15.0, opener)[0] == 0
    counter(3_400_000)  # 1400 J while both ran
    assert _hook(epilog_main, env_a, capsys, T0 + 25.0, opener)[0] == 0
    counter(4_400_000)  # 1000 J while B ran alone
    assert _hook(epilog_main, env_b, capsys, T0 + 45.0, opener)[0] == 0
    got = _accounted(site)
    assert got["51"]["measured_j"] == 1000.0 + 1400.0 * 3 / 7  # 1600 J
    assert got["52"]["measured_j"] == 1400.0 * 4 / 7 + 1000.0  # 1800 J
    assert got["51"]["measured_j"] + got["52"]["measured_j"] == 3400.0


def test_an_energy_counter_that_goes_back_leaves_the_run_modelled_with_a_warning(site, capsys):
    _, counter, opener = _on_fake_nvml(site)
    env = site.env("61", site.comment("61"))
    counter(9_000_000)
    assert _hook(prolog_main, env, capsys, T0 + 5.0, opener)[0] == 0
    counter(1_000)  # the driver was reloaded: the counter starts again
    rc, err = _hook(epilog_main, env, capsys, T0 + 65.0, opener)
    assert rc == 0  # never a failed hook, never a drain
    assert any("energy counter went back" in line and "modelled" in line for line in err)
    assert "measured_j" not in _accounted(site)["61"]
    assert site.scontrol_calls() == []


def test_an_energy_counter_that_jumps_implausibly_leaves_the_run_modelled(site, capsys):
    _, counter, opener = _on_fake_nvml(site)
    env = site.env("62", site.comment("62"))
    counter(0)
    assert _hook(prolog_main, env, capsys, T0 + 5.0, opener)[0] == 0
    counter(2**63)  # far beyond twice an A100's 400 W for 60 s
    rc, err = _hook(epilog_main, env, capsys, T0 + 65.0, opener)
    assert rc == 0 and any("jumped" in line for line in err)
    assert "measured_j" not in _accounted(site)["62"]


def test_a_simulated_gpu_has_no_energy_counter_and_its_runs_are_modelled(site, capsys):
    env = site.env("71", site.comment("71"))
    assert run(prolog_main, env, capsys)[0] == 0
    assert site.state.job("71").energy_mj is None
    assert "energy_mj" not in json.loads((site.run_dir / "private/jobs/71.json").read_text())
    rc, _, err = run(epilog_main, env, capsys, t=T0 + 65.0)
    assert rc == 0 and not any("energy" in line for line in err)
    assert "measured_j" not in _accounted(site)["71"]
    assert not (site.run_dir / "private" / "energy").exists()
