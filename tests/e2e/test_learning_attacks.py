"""One user's jobs cannot poison another user's plans (issue 18, hole 5), on a real
loopback Slurm with the whole installation (hooks, planner daemon, runtime store).

As found on 22.05: three instant ``resnet50`` jobs of one user made another user's
``resnet50`` job, whose own hint said ``time=600``, plan as 1.0 s. The attacker here is
nobody (65534, the e2e job user), the victim uid 1 (``daemon``: a second unprivileged
user that every Debian root has, by number as 26.05 wants)."""

from __future__ import annotations

import pytest

from slurm_mig.config import load_config
from slurm_mig.daemon.estimates import Estimator
from slurm_mig.demo.live import LiveCluster
from slurm_mig.geometry import get_model
from slurm_mig.owner import owner_of
from slurm_mig.runtimes import PRIOR, RuntimeStore, estimate_times

from .conftest import host_release_only, live_cluster
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
        runs = store.observations("resnet50", model.name, owner_of(int(ATTACKER)))
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


BADNAME = "CAMPUS\\mallory"  # a directory-service name outside [A-Za-z0-9_.@+-]
WRITE_NEED = (
    "/usr/bin/python3 -c 'import json, os, sys; "
    'p = os.path.join(sys.argv[1], "task", os.environ["SLURM_JOB_ID"] + ".need", "need"); '
    "fd = os.open(p, os.O_WRONLY | os.O_TRUNC); "
    'os.write(fd, json.dumps({"key": "resnet50", "need": int(sys.argv[2])}).encode())\''
)


@pytest.fixture
def badname_uid():
    """A local user named ``CAMPUS\\mallory`` (useradd --badname), removed afterwards."""
    import pwd
    import subprocess

    uid = next(u for u in range(4343, 4443) if not _uid_taken(pwd, u))
    made = subprocess.run(
        ["useradd", "--badname", "-M", "-N", "-u", str(uid), "-s", "/usr/sbin/nologin", BADNAME],
        capture_output=True,
        text=True,
    )
    if made.returncode != 0:
        pytest.skip(f"cannot create the user {BADNAME!r}: {made.stderr.strip()}")
    try:
        yield uid
    finally:
        subprocess.run(["userdel", BADNAME], capture_output=True, check=False)


def _uid_taken(pwd, uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True


@host_release_only
def test_a_user_named_outside_every_rule_never_sizes_another_users_job(lc, badname_uid):
    """Issue 34, hole 9: the Epilog dropped a user name like ``CAMPUS\\mallory`` from the
    memory report, the receiver stored it as the site-wide prior, and another user's
    job without ``mem=`` was planned with 39 GiB. The report carries the uid now."""
    model = get_model(lc.model)
    need = model.memory_bytes - (1 << 30)
    store = RuntimeStore(lc.state_dir / "profiles.sqlite")
    lc.start_planner()
    attack = _submit(lc, f"{WRITE_NEED} {lc.run_root} {need}", str(badname_uid))
    assert lc.wait_done([attack], 120)[attack].state == "COMPLETED", lc.cluster.logs()
    assert lc.jobs()[attack].user == BADNAME
    mine = owner_of(badname_uid)
    _wait(lambda: store.memory_need("resnet50", mine) == need, 60, "the need, under her uid")
    assert store.memory_need("resnet50", PRIOR) is None  # never the prior
    victim = _submit(lc, "true", VICTIM)  # mig:key=resnet50 and no mem=
    listed = _wait(lambda: lc.jobs().get(victim), 60, "the victim in squeue")
    # the planner's estimate of the victim, from the real store: no memory need at all
    estimate = Estimator(load_config(lc.config_path), store)(listed, [model.name])
    assert estimate.mem is None and estimate.owner == owner_of(int(VICTIM)), estimate
    assert lc.wait_done([victim], 120)[victim].state == "COMPLETED"
