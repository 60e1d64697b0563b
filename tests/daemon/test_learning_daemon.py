"""The planner daemon learns each finished run once, under its owner, and plans another
user's job of the same kind from that job's own hint (issue 18, hole 5; the daemon's
side of tests/daemon/test_learning_attacks.py: `build_cycle_input`, `PlannerDaemon.run_cycle` and
the apply, with a fake squeue and the real runtime store)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import completed, squeue_job, uid_of, write_config

from slurm_mig.config import load_config
from slurm_mig.daemon.cycle import Learn
from slurm_mig.daemon.daemon import PlannerDaemon, build_cycle_input
from slurm_mig.geometry import Placement, get_model
from slurm_mig.owner import owner_of
from slurm_mig.runtimes import PRIOR, GuardedStore, RuntimeStore, estimate_times
from slurm_mig.slurm.assignment import Assignment
from slurm_mig.slurm.client import Job, Node

A100 = get_model("A100-40GB")
NOW = 1_700_000_000.0
MALLORY = owner_of(uid_of("mallory"))  # whose runs mallory's are: her uid


def config(tmp: Path):
    # cycle = 5.0 is the default, which write_config would set to 0.5
    opts = {"cycle": 5.0, "default_runtime": 3600.0, "serial_fraction": 0.3}
    return load_config(write_config(tmp, {"gpu01": ["A100-40GB"]}, **opts))


def job(jid: str, user: str, **kw) -> Job:
    """``user``'s pending ``resnet50`` job, submitted 100 s ago, with its kind's key."""
    defaults = {"name": "resnet50", "user": user, "comment": "mig:key=resnet50"}
    return squeue_job(jid, **{**defaults, "submit_time": NOW - 100.0, **kw})


def instant(jid: str, user: str) -> Job:
    a = Assignment(jid, 0, "gpu01", 0, A100.name, "1g.5gb", Placement(0, 1), 0, 0, 60.0, NOW)
    return completed(job(jid, user), a, NOW - 60.0, NOW - 59.0)


class Squeue:
    """squeue and sinfo as the daemon reads them; nothing for it to write."""

    def __init__(self, jobs: list[Job]) -> None:
        self.shown = jobs

    def jobs(self, partition=None):
        return list(self.shown)

    def nodes(self, partition=None):
        return [Node("gpu01", frozenset({"IDLE"}), "", 16, ("mig",))]


def test_the_daemon_learns_each_run_once_under_its_owner(tmp_path):
    """Every cycle repeated one learn action per finished job still in squeue: now the
    runs the store holds go into the next snapshot and no action names them again."""
    cfg = config(tmp_path)
    store = GuardedStore(RuntimeStore(cfg.state_dir / "profiles.sqlite"))
    slurm = Squeue([instant(str(i), "mallory") for i in (11, 12, 13)])
    daemon = PlannerDaemon(cfg, slurm, store, b"k" * 32, clock=lambda: NOW)
    learns, status_actions = [], []
    for _ in range(4):
        report = daemon.run_cycle()
        assert report.error is None
        learns += [a for a in report.result.actions if isinstance(a, Learn)]
        status_actions.append(json.loads(daemon.status_path().read_text())["actions"])
    assert sorted((a.job_id, a.owner, a.key) for a in learns) == [
        (j, MALLORY, "resnet50") for j in ("11", "12", "13")
    ]
    assert status_actions == [3, 0, 0, 0]
    assert store.observations("resnet50", A100.name, MALLORY) == {1: [1.0, 1.0, 1.0]}
    assert store.observations("resnet50", A100.name, PRIOR) == {}
    slurm.shown = []  # they left squeue: forgotten, the memory stays bounded
    daemon.run_cycle()
    assert daemon.stored == set()


def test_another_users_instant_runs_leave_a_hinted_job_at_its_hint(tmp_path):
    cfg = config(tmp_path)
    store = GuardedStore(RuntimeStore(cfg.state_dir / "profiles.sqlite"))
    attack = [instant(str(i), "mallory") for i in (11, 12, 13)]
    daemon = PlannerDaemon(cfg, Squeue(attack), store, b"k" * 32, clock=lambda: NOW)
    assert daemon.run_cycle().apply.learned == 3
    victim = job("20", "alice", comment="mig:key=resnet50,time=600")
    own = job("21", "mallory")
    nodes = Squeue([]).nodes()
    snap = build_cycle_input(cfg, [*attack, victim, own], nodes, store, NOW)
    alone = estimate_times({}, A100, serial_fraction=0.3, fallback=600.0)
    assert snap.estimates["20"].times[A100.name] == pytest.approx(alone)
    assert snap.estimates["21"].times[A100.name][1] == 1.0  # mallory's own: learned
    assert (snap.estimates["11"].key, snap.estimates["11"].owner) == ("resnet50", MALLORY)


def test_a_dry_run_prints_each_learn_once(tmp_path):
    import io

    cfg = config(tmp_path)
    out = io.StringIO()
    slurm = Squeue([instant(str(i), "mallory") for i in (11, 12, 13)])
    daemon = PlannerDaemon(cfg, slurm, None, None, dry_run=True, out=out, clock=lambda: NOW)
    for _ in range(3):
        assert daemon.run_cycle().error is None
    learned = [line for line in out.getvalue().splitlines() if "learned resnet50" in line]
    assert len(learned) == 3 and all(f"of {MALLORY}" in line for line in learned)
