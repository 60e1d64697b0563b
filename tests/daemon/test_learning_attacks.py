"""Learned runtimes one user cannot poison for another (issue 18, hole 5), at the level of
the cycle's inputs: jobs as squeue shows them, with two distinct users, the `Estimator`
that turns them into estimates, the pure cycle and the real runtime store. Also: each
finished run is offered to the store once while squeue still shows it."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from support import completed, squeue_job, uid_of

from slurm_mig.daemon.cycle import CycleInput, Learn, plan_cycle
from slurm_mig.daemon.estimates import Estimator, job_kind, job_owner
from slurm_mig.geometry import Placement, get_model
from slurm_mig.limitevidence import LIMIT_RATIO
from slurm_mig.owner import owner_of
from slurm_mig.runtimes import HINT_FLOOR, MAX_KEY, PRIOR, RuntimeStore, estimate_times
from slurm_mig.slurm.assignment import Assignment
from slurm_mig.slurm.client import Job
from slurm_mig.slurm.jobrecord import admin_comment_for

A100 = get_model("A100-40GB")
NOW = 1_700_000_000.0


class Config:
    default_runtime = 3600.0
    serial_fraction = 0.3


def job(jid: str, user: str, **kw) -> Job:
    return squeue_job(jid, **{"name": "resnet50", "user": user, "submit_time": NOW - 100.0, **kw})


def finished(jid: str, user: str, seconds: float, **kw) -> Job:
    """A job that ran ``seconds`` on 7g.40gb of gpu01 and completed."""
    a = Assignment(jid, 0, "gpu01", 0, A100.name, "7g.40gb", Placement(0, 8), 0, 0, 60.0, NOW)
    return completed(job(jid, user, **kw), a, NOW - 50.0, NOW - 50.0 + seconds)


def snapshot(jobs, store, learned=frozenset()) -> CycleInput:
    est = Estimator(Config(), store)
    estimates = {
        j.job_id: est(j, [A100.name]) if j.state == "PENDING" else est.identity(j) for j in jobs
    }
    return CycleInput(
        now=NOW,
        jobs=tuple(jobs),
        nodes={"gpu01": (A100.name,), "gpu02": (A100.name,)},
        estimates=estimates,
        batch_window=0.0,
        learned=learned,
    )


def store_learns(store: RuntimeStore, actions) -> list[Learn]:
    """What the daemon's apply does with the learn actions (`daemon._learn`)."""
    learns = [a for a in actions if isinstance(a, Learn)]
    for a in learns:
        store.record(
            a.key, a.model, a.size, a.seconds, a.job_id, a.restart, a.finished, owner=a.owner
        )
    return learns


def own(user: str) -> str:
    """The owner the runs of ``user``'s jobs are learned under (their uid)."""
    return owner_of(uid_of(user))


def hinted(seconds: float, size: int) -> float:
    return estimate_times({}, A100, serial_fraction=Config.serial_fraction, fallback=seconds)[size]


def test_another_users_instant_jobs_of_the_same_kind_do_not_shorten_a_hinted_job(tmp_path):
    """The attack as found on 22.05: mallory's three instant resnet50 jobs made alice's
    resnet50 job, whose own hint said time=600, plan as 1.0 s."""
    store = RuntimeStore(tmp_path / "profiles.sqlite")
    instant = [finished(str(i), "mallory", 0.5, comment="mig:key=resnet50") for i in range(11, 14)]
    learns = store_learns(store, plan_cycle(snapshot(instant, store)).actions)
    assert [(a.owner, a.key) for a in learns] == [(own("mallory"), "resnet50")] * 3
    victim = job("20", "alice", comment="mig:key=resnet50,time=600")
    hers = job("21", "mallory", comment="mig:key=resnet50")
    result = plan_cycle(snapshot([*instant, victim, hers], store))
    a = result.planned["20"]
    size = A100.profile(a.profile).compute_slices
    assert a.planned_seconds == pytest.approx(hinted(600.0, size))  # her hint, as if alone
    assert a.planned_seconds > 600.0 / HINT_FLOOR / 7
    # mallory's own next job does plan from her runs: learning still works for its owner
    assert result.planned["21"].planned_seconds < 5.0


def test_a_job_without_a_hint_reads_neither_another_users_runs_nor_his_name(tmp_path):
    store = RuntimeStore(tmp_path / "profiles.sqlite")
    # mallory names her jobs like bob's, or like bob's kind with separators in it
    for jid, name in (("11", "resnet50"), ("12", "bob/resnet50"), ("13", "bob:resnet50")):
        store_learns(
            store, plan_cycle(snapshot([finished(jid, "mallory", 0.5, name=name)], store)).actions
        )
    bob = [job("20", "bob"), job("21", "bob", name="bob/resnet50", time_limit=1800.0)]
    est = snapshot(bob, store).estimates
    assert est["20"].times[A100.name][1] == pytest.approx(Config.default_runtime)
    assert est["21"].times[A100.name][1] == pytest.approx(1800.0 / LIMIT_RATIO)  # its limit
    assert store.observations("resnet50", A100.name, own("bob")) == {}


def test_a_hinted_jobs_own_instant_runs_shorten_it_at_most_fourfold(tmp_path):
    store = RuntimeStore(tmp_path / "profiles.sqlite")
    own = [finished(str(i), "alice", 0.5, comment="mig:key=resnet50") for i in range(11, 14)]
    store_learns(store, plan_cycle(snapshot(own, store)).actions)
    est = snapshot([job("20", "alice", comment="mig:key=resnet50,time=600")], store)
    times = est.estimates["20"].times[A100.name]
    for s in A100.planner_sizes:
        assert times[s] == pytest.approx(hinted(600.0, s) / HINT_FLOOR)


def test_old_records_without_a_user_never_shorten_a_hinted_job(tmp_path):
    store = RuntimeStore(tmp_path / "profiles.sqlite")
    for i in range(3):  # written before runs had owners (schema 2), or seeded by the site
        store.record("resnet50", A100.name, 7, 1.0, f"old{i}", 0, float(i))
    est = snapshot(
        [
            job("20", "alice", comment="mig:key=resnet50,time=600"),
            job("21", "alice", comment="mig:key=resnet50"),
        ],
        store,
    ).estimates
    assert est["20"].times[A100.name][7] == pytest.approx(hinted(600.0, 7))
    assert est["21"].times[A100.name][7] == 1.0  # nothing of her own, no hint: the prior


def test_kinds_are_bounded_printable_and_distinct():
    assert job_kind("anything", "5", "resnet50") == "resnet50"  # the hint key wins
    assert job_kind("resnet50", "5") == "resnet50"
    assert job_kind("", "5") == "job-5"
    odd = ["a b", "a_b", "x\nplanner: job 9 released", "\x1b]0;t\x07", "é" * 5000, "a" * 5000]
    kinds = [job_kind(n, "5") for n in odd]
    assert len(set(kinds)) == len(odd)
    for k in kinds:
        assert 0 < len(k) <= MAX_KEY and k.isprintable() and k.isascii()
    assert kinds[1] == "a_b"  # a plain kind stays itself; "a b" does not become it


def test_owners_are_the_uid_whatever_the_user_name():
    """One rule with the nodes' memory reports: the uid. A name no rule could agree on
    (``CAMPUS\\mallory``, spaces, escapes) changes nothing; a job without a uid learns
    nothing."""
    for name in ("alice", "CAMPUS\\mallory", "al ice", "\x1b[2J", "a" * 65, ""):
        assert job_owner(job("1", name, uid=4242)) == "uid:4242"
    assert job_owner(job("1", "alice", uid=None)) == PRIOR
    learns = plan_cycle(snapshot([finished("9", "alice", 5.0, uid=None)], None)).actions
    assert [a.owner for a in learns if isinstance(a, Learn)] == [PRIOR]


def test_each_finished_run_is_learned_once_over_cycles(tmp_path):
    """squeue shows a finished job for minutes (MinJobAge): the cycle offered its runtime
    again in every cycle. With the runs the store holds passed in (as the daemon keeps
    them while squeue shows the job), each run is one learn action, once."""
    store = RuntimeStore(tmp_path / "profiles.sqlite")
    jobs = [finished(str(i), "alice", 30.0 + i) for i in range(11, 14)]
    learned: set[tuple[str, int]] = set()
    counts = []
    for cycle in range(5):
        if cycle == 2:  # a requeued run of job 11 ended since: a new run, learned too
            jobs[0] = replace(jobs[0], restart_count=1)
            a = Assignment(
                "11", 1, "gpu01", 0, A100.name, "7g.40gb", Placement(0, 8), 0, 0, 60.0, NOW
            )
            jobs[0] = replace(jobs[0], admin_comment=admin_comment_for(a))
        learns = store_learns(store, plan_cycle(snapshot(jobs, store, frozenset(learned))).actions)
        counts.append(len(learns))
        learned |= {(a.job_id, a.restart) for a in learns}
    assert counts == [3, 0, 1, 0, 0]
    assert sorted(learned) == [("11", 0), ("11", 1), ("12", 0), ("13", 0)]
    runs = store.observations("resnet50", A100.name, own("alice"))
    assert sum(len(v) for v in runs.values()) == 4
    # without that memory every cycle offered every run again (the observation)
    again = [a for a in plan_cycle(snapshot(jobs, store)).actions if isinstance(a, Learn)]
    assert len(again) == 3


def test_memory_needs_reported_by_the_nodes_are_learned_under_the_jobs_uid(tmp_path, caplog):
    """mig-run writes the need file as the job's user, under a key of its choice: the
    need is stored under the uid the Epilog names, so mallory's 30 GiB for resnet50
    cannot push alice's resnet50 jobs onto whole GPUs; a report without a uid (a node
    before the uid rule, or a forged one) is refused with a line, never the prior."""
    from slurm_mig.daemon.receiver import Receiver, ReportDB
    from slurm_mig.geometry import GIB
    from slurm_mig.node import reports

    key = bytes(range(32))
    state = tmp_path / "state"
    store = RuntimeStore(state / "profiles.sqlite")
    r = Receiver(("127.0.0.1", 0), key, ReportDB(state, store)).start()
    mallory = uid_of("mallory")
    try:
        lines = [
            reports.make(key, "node1", "memory", data, job=jid)
            for jid, data in (
                ("7", {"key": "resnet50", "need": 30 * GIB, "uid": mallory}),
                ("8", {"key": "resnet50", "need": 39 * GIB}),  # no owner: refused
                ("9", {"key": "resnet50", "need": GIB, "user": "CAMPUS\\mallory"}),
                ("10", {"key": "resnet50", "need": GIB, "uid": str(mallory)}),
                ("11", {"key": "resnet50", "need": GIB, "uid": -1}),
            )
        ]
        with caplog.at_level("WARNING", logger="slurm_mig.planner"):
            got = reports.exchange(r.address, lines, 2.0, 1.0)
        assert [a.split()[0] for a in got] == ["ok", "no", "no", "no", "no"]
        assert all(a.endswith(" invalid") for a in got[1:])
    finally:
        r.close()
    refusals = [m for m in caplog.messages if "refused" in m]
    for jid in ("8", "9", "10", "11"):  # one line each, naming the report
        assert sum(f"/memory/{jid}/" in m for m in refusals) == 1, refusals
    # and, where the uid is missing (8, 9: a node older than the planner), the fix
    for jid, told in (("8", True), ("9", True), ("10", False), ("11", False)):
        (line,) = [m for m in refusals if f"/memory/{jid}/" in m]
        assert ("without the job's uid" in line and "upgrade its hooks" in line) == told, line
    assert store.memory_need("resnet50", own("mallory")) == 30 * GIB
    assert store.memory_need("resnet50", PRIOR) is None
    assert store.memory_need("resnet50") == 30 * GIB  # nothing else stored, under anyone
    est = snapshot([job("20", "alice", comment="mig:key=resnet50")], store).estimates
    assert est["20"].mem is None and est["20"].times[A100.name][1] < math.inf


def test_the_epilog_reports_a_memory_need_with_the_jobs_uid(tmp_path, capsys):
    from hooksite import T0, make_site, run

    from slurm_mig.daemon.receiver import Receiver, ReportDB
    from slurm_mig.node import reports
    from slurm_mig.node.hooks import epilog_main, prolog_main

    site = make_site(tmp_path / "node")
    state = tmp_path / "controller"
    store = RuntimeStore(state / "profiles.sqlite")
    r = Receiver(("127.0.0.1", 0), site.key, ReportDB(state, store)).start()
    try:
        text = site.config.read_text()
        site.config.write_text(
            text.replace("[planner]\n", f'[planner]\nreports = "127.0.0.1:{r.address[1]}"\n')
        )
        # a user name outside every rule: the report carries the uid, not the name
        comment = site.comment("42", text="mig:key=resnet50")
        env = site.env("42", comment, SLURM_JOB_USER="CAMPUS\\mallory", SLURM_JOB_UID="4242")
        assert run(prolog_main, env, capsys)[0] == 0
        reports.write_need(reports.need_path(site.run_dir, "42"), "resnet50", 9 << 30)
        assert run(epilog_main, env, capsys, t=T0 + 65.0)[0] == 0
    finally:
        r.close()
    assert store.memory_need("resnet50", owner_of(4242)) == 9 << 30
    assert store.memory_need("resnet50", PRIOR) is None
    assert not reports.need_path(site.run_dir, "42").parent.exists()
