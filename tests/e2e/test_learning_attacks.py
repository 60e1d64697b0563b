"""One user's jobs cannot poison another user's plans (issue 18, hole 5), on a real
loopback Slurm with the whole installation (hooks, planner daemon, runtime store).

As found on 22.05: three instant ``resnet50`` jobs of one user made another user's
``resnet50`` job, whose own hint said ``time=600``, plan as 1.0 s. The attacker here is
nobody (65534, the e2e job user), the victim uid 1 (``daemon``: a second unprivileged
user that every Debian root has, by number as 26.05 wants)."""

from __future__ import annotations

import pytest

from slurm_mig.config import load_config
from slurm_mig.demo.live import LiveCluster
from slurm_mig.geometry import get_model
from slurm_mig.runtimes import PRIOR, RuntimeStore, estimate_times

from .conftest import live_cluster
from .conftest import wait_until as _wait

ATTACKER = "65534"
VICTIM = "1"
KIND = "mig:key=resnet50"


@pytest.fixture
def lc():
    with live_cluster("slurm-mig-learn-", planner={"batch_window": 0.5}) as cluster:
        yield cluster


def _submit(lc: LiveCluster, wrap: str, user: str, comment: str = KIND) -> str:
    return lc.cluster.sbatch(wrap, partition="mig", comment=comment, name="resnet50", user=user)


def test_another_users_instant_jobs_do_not_shorten_a_hinted_job(lc):
    model = get_model(lc.model)
    store = RuntimeStore(lc.state_dir / "profiles.sqlite")
    lc.start_planner()
    attack = [_submit(lc, "sleep 1", ATTACKER) for _ in range(3)]
    lc.wait_done(attack, 120)

    def learned():
        runs = store.observations("resnet50", model.name, "nobody")
        return sum(len(v) for v in runs.values()) == 3 and runs

    runs = _wait(learned, 60, "the attacker's three runs learned")
    assert max(t for v in runs.values() for t in v) <= 3.0, runs  # instant
    assert store.observations("resnet50", model.name, PRIOR) == {}  # nothing pooled

    victim = _submit(lc, "sleep 60", VICTIM, f"{KIND},time=600")
    own = _submit(lc, "sleep 60", ATTACKER)
    plans = _wait(lambda: len(got := lc.assignments([victim, own])) == 2 and got, 90, "plans")
    a, b = plans[victim], plans[own]
    size = model.profile(a.profile).compute_slices
    serial = load_config(lc.config_path).serial_fraction
    hint = estimate_times({}, model, serial_fraction=serial, fallback=600.0)[size]
    # the victim is planned from its own hint, as if the attacker had never run
    assert a.planned_seconds == pytest.approx(hint, rel=1e-6), (a, hint)
    assert a.planned_seconds > 60.0
    # the attacker's own next job is planned from her runs (at most 3 s on some size,
    # at most 3 / 0.4 s on 1g by the prior's shape): learning works for its owner
    assert b.planned_seconds < 10.0, (b, runs)
    jobs = lc.jobs()
    assert (jobs[victim].user, jobs[own].user) == ("daemon", "nobody")
