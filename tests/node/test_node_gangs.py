"""Jobs of several slices (``mig:tasks=N``, issue 36) on the node: the Prolog creates a
gang's N instances inside its region (all or nothing), task i's TaskProlog gets
instance i, the Epilog destroys them all, and every hook that reads job records sees
every instance of a gang (none is taken for an orphan; a stale gang goes whole)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from hooksite import NODE, T0, Site, run

from slurm_mig.config import load_config
from slurm_mig.devices.base import DeviceUnavailable, InvalidRequest
from slurm_mig.devices.open import open_backend
from slurm_mig.geometry import Placement
from slurm_mig.node import recordsweep
from slurm_mig.node.admission import gres_indexes
from slurm_mig.node.hookenergy import busy_slices
from slurm_mig.node.hookoutcome import Outcome
from slurm_mig.node.hooks import epilog_main, prolog_main, task_prolog_main
from slurm_mig.node.jobenv import JobEnv
from slurm_mig.node.nodestate import JobRecord, KeptInstance, NodeState, NodeStateError
from slurm_mig.node.prolog import prolog
from slurm_mig.node.reclaim import kept_records

REGION = (0, 4)  # the A100's 4g.20gb at 0: room for four 1g.5gb
SLOTS = [Placement(s, 1) for s in range(4)]


def gang_env(site: Site, job: str = "50", tasks: int = 4, **fields) -> dict[str, str]:
    fields = {"profile": "1g.5gb", "placement": REGION, "tasks": tasks, **fields}
    return site.env(job, site.comment(job, text="mig:key=w", **fields))


def on_gpu(site: Site) -> list[tuple[str, Placement, str]]:
    """The simulated GPU's instances (profile, placement, uuid) by placement."""
    found = sorted(site.backend().instances(), key=lambda i: (i.gpu, i.placement.start))
    return [(i.profile, i.placement, i.uuid) for i in found]


def task_env(site: Site, env: dict[str, str], local: str | None) -> dict[str, str]:
    out = site.task_env(env)
    if local is not None:
        out["SLURM_LOCALID"] = local
    return out


@pytest.fixture
def gang(site, capsys) -> JobRecord:
    """Job 50: four tasks on four 1g.5gb in the 4g region at 0 of gpu 1."""
    rc, out, err = run(prolog_main, gang_env(site), capsys)
    assert rc == 0 and out == [], err
    return site.state.job("50")


class Failing:
    """The node's backend, but creating the ``at``-th instance raises ``error`` or (with
    ``gi``) gets that GPU-instance id."""

    def __init__(self, real, at: int, error: Exception | None = None, gi: int | None = None):
        self.real, self.at, self.error, self.gi, self.made = real, at, error, gi, 0

    def create(self, gpu, profile, placement, job_id=None):
        self.made += 1
        if self.made == self.at and self.error is not None:
            raise self.error
        inst = self.real.create(gpu, profile, placement, job_id=job_id)
        return replace(inst, gi_id=self.gi) if self.made == self.at and self.gi else inst

    def __getattr__(self, name):
        return getattr(self.real, name)


def with_backend(site: Site, env: dict, capsys, **failing) -> tuple[int, list[str]]:
    rc = prolog_main(
        env,
        clock=lambda: T0 + 5,
        open_backend=lambda c, n: Failing(open_backend(c, n), **failing),
    )
    return rc, capsys.readouterr().err


# -- the whole life of a gang ----------------------------------------------------------------


def test_a_gang_gets_four_instances_in_its_region_and_one_record(site, gang, capsys):
    found = on_gpu(site)
    assert [(p, pl) for p, pl, _ in found] == [("1g.5gb", pl) for pl in SLOTS]
    uuids = tuple(u for _, _, u in found)
    assert gang.profile == "1g.5gb" and gang.placement == Placement(*REGION)
    assert gang.uuids == uuids and gang.members == uuids[1:] and gang.tasks == 4
    assert site.state.task("50") == gang  # the TaskProlog's copy names them all
    assert site.ops() == [("create", "50")] * 4


def test_each_task_gets_its_own_instance(site, gang, capsys):
    env = gang_env(site)
    for i in range(4):
        rc, out, err = run(task_prolog_main, task_env(site, env, str(i)), capsys)
        assert rc == 0 and out == [f"export CUDA_VISIBLE_DEVICES={gang.uuids[i]}"], err
    assert site.scontrol_calls() == []


@pytest.mark.parametrize("local", ["4", "7", None, "1x", "-1", "99999"])
def test_a_task_beyond_the_gang_runs_without_a_gpu(site, gang, capsys, local):
    rc, out, _ = run(task_prolog_main, task_env(site, gang_env(site), local), capsys)
    assert rc == 0 and site.scontrol_calls() == []  # no error, no requeue
    assert out[0] == "export CUDA_VISIBLE_DEVICES="
    [line] = out[1:]
    assert line.startswith("print slurm-mig: job 50 asked for tasks=4")
    assert line.endswith("has no slice and runs without a GPU")
    assert (f"task {local}" in line) == (local in ("4", "7"))


def test_the_epilog_destroys_every_instance_and_reports_one_row(site, gang, capsys):
    rc, _, err = run(epilog_main, gang_env(site), capsys, t=T0 + 65.0)
    assert rc == 0, err
    assert on_gpu(site) == [] and site.state.job("50") is None and site.state.kept() == []
    assert site.ops() == [("create", "50")] * 4 + [("destroy", "50")] * 4
    assert "destroyed 4 x 1g.5gb in 0:4 on gpu 1" in err[0]
    [row] = [json.loads(x) for x in site.state.runtimes_path.read_text().splitlines()]
    assert (row["job_id"], row["profile"], row["seconds"]) == ("50", "1g.5gb", 60.0)


def test_an_epilog_that_cannot_destroy_one_keeps_it_on_record_and_drains(site, gang, capsys):
    site.fault("destroy", "DeviceUnavailable", "the GPU fell off the bus", times=1)
    rc, _, err = run(epilog_main, gang_env(site), capsys, t=T0 + 65.0)
    assert rc == 1 and site.scontrol_calls()[0][2] == "State=DRAIN", err
    [kept] = site.state.kept()  # task 0's, at its own placement; the others are gone
    assert (kept.uuid, kept.placement, kept.for_job) == (gang.uuid, SLOTS[0], None)
    assert [u for _, _, u in on_gpu(site)] == [gang.uuid]


def test_a_retried_prolog_reuses_a_complete_gang(site, gang, capsys):
    rc, _, err = run(prolog_main, gang_env(site), capsys, t=T0 + 6)
    assert rc == 0 and "reusing 4 x 1g.5gb in 0:4" in err[0]
    assert site.ops() == [("create", "50")] * 4 and site.state.job("50") == gang


def test_a_retried_prolog_remakes_an_incomplete_gang(site, gang, capsys):
    site.backend().destroy(1, gang.members[1])  # task 2's instance vanished
    rc, _, err = run(prolog_main, gang_env(site), capsys, t=T0 + 6)
    assert rc == 0, err
    rec = site.state.job("50")
    assert set(rec.uuids).isdisjoint(gang.uuids)  # all four made again
    assert [u for _, _, u in on_gpu(site)] == list(rec.uuids)
    assert site.state.kept() == []


def test_a_new_run_clears_the_last_runs_gang(site, gang, capsys):
    env = site.env(
        "50", site.comment("50", profile="1g.5gb", placement=REGION, tasks=4, restart=1), restart=1
    )
    rc, _, err = run(prolog_main, env, capsys, t=T0 + 6)
    assert rc == 0, err
    rec = site.state.job("50")
    assert rec.restart == 1 and set(rec.uuids).isdisjoint(gang.uuids)
    assert [u for _, _, u in on_gpu(site)] == list(rec.uuids) and site.state.kept() == []


def test_kept_records_of_a_gang_sit_at_each_instance(gang):
    kept = kept_records(gang, "9", T0, ("A100-40GB", "A100-40GB"))
    assert [(k.uuid, k.placement) for k in kept] == list(zip(gang.uuids, SLOTS, strict=True))


# -- nothing left behind -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "drains"),
    [(InvalidRequest("GPU 1: no room"), False), (DeviceUnavailable("GPU 1: gone"), True)],
    ids=["job-fault", "node-fault"],
)
def test_a_failure_on_the_third_instance_leaves_nothing(site, capsys, error, drains):
    rc, err = with_backend(site, gang_env(site), capsys, at=3, error=error)
    assert on_gpu(site) == [] and site.state.jobs() == [], err
    assert site.ops() == [("create", "50")] * 2 + [("destroy", "50")] * 2
    if drains:
        assert rc == 1 and site.scontrol_calls()[0][2] == "State=DRAIN"
    else:
        assert rc == 0 and site.state.refusal("50").action == "requeue"
        assert "cannot create task 2's 1g.5gb at 2:1 on gpu 1" in err


def test_a_wrong_gpu_instance_id_on_the_third_instance_leaves_nothing(site, capsys):
    rc, err = with_backend(site, gang_env(site), capsys, at=3, gi=14)
    assert rc == 0 and on_gpu(site) == [] and site.state.jobs() == [], err
    refusal = site.state.refusal("50")
    assert refusal.action == "requeue" and "task 2's 1g.5gb at 2:1" in refusal.reason
    assert "destroyed the job's 3 instance(s)" in refusal.reason


def test_no_room_for_the_record_destroys_the_whole_gang(site, capsys, monkeypatch):
    def put_job(self, rec):
        raise NodeStateError("cannot write jobs/50.json: No space left on device", 28)

    monkeypatch.setattr(NodeState, "put_job", put_job)
    rc, _, err = run(prolog_main, gang_env(site), capsys)
    assert rc == 0 and site.scontrol_calls() == [["requeuehold", "50"]], err
    assert on_gpu(site) == [] and site.state.jobs() == []


@pytest.mark.parametrize("field", ["keep_for", "reuse_from"])
def test_a_gang_that_would_keep_or_reuse_instances_fails(site, capsys, field):
    rc, _, err = run(prolog_main, gang_env(site, **{field: "77"}), capsys)
    assert rc == 0 and on_gpu(site) == [], err
    refusal = site.state.refusal("50")
    assert refusal.action == "fail" and "never reuses nor keeps instances" in refusal.reason


def test_a_region_that_does_not_hold_the_gang_fails(site, capsys):
    rc, _, _ = run(prolog_main, gang_env(site, tasks=5), capsys)  # five 1g in a 4g
    assert rc == 0 and on_gpu(site) == []
    assert site.state.refusal("50").action == "fail"


# -- the job's GRES ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gpus", "ok"),
    [
        ("reversed", True),
        ("last", True),  # what Slurm 22.05 gives a Prolog: the last record's value
        ("first", True),
        ("missing", False),
        ("extra", False),
        ("other", False),
        ("twice", False),
        ("region", False),
        ("", False),
    ],
)
def test_the_gres_must_be_the_gangs_records(site, capsys, gpus, ok):
    env = gang_env(site)
    mine = env["SLURM_JOB_GPUS"].split(",")
    region = site.env("9", site.comment("9", profile="4g.20gb", placement=REGION))
    env["SLURM_JOB_GPUS"] = {
        "reversed": ",".join(reversed(mine)),
        "last": mine[-1],
        "first": mine[0],
        "missing": ",".join(mine[:3]),
        "extra": ",".join([*mine, "0"]),
        "other": "0",
        "twice": ",".join([*mine, mine[0]]),
        "region": region["SLURM_JOB_GPUS"],
        "": "",
    }[gpus]
    rc, _, err = run(prolog_main, env, capsys)
    assert rc == 0, err
    if ok:
        assert len(on_gpu(site)) == 4 and site.state.refusal("50") is None
    else:
        assert on_gpu(site) == []
        refusal = site.state.refusal("50")
        assert refusal.action == "requeue" and "not the GRES records" in refusal.reason


def test_gres_index_lists_are_read_strictly():
    assert gres_indexes("3,1,2") == {1, 2, 3} and gres_indexes("4-6,9") == {4, 5, 6, 9}
    assert gres_indexes("") == set()
    for bad in ("1,1", "2-4,3", "1,", ",1", "a", "5-3", "1--2", "0-99999", "12345"):
        assert gres_indexes(bad) is None, bad


# -- what is in the region, and the gang in others' way --------------------------------------


def test_kept_and_orphan_instances_in_the_region_are_cleared(site, capsys):
    backend = open_backend(load_config(str(site.config)), NODE)
    kept = backend.create(1, "1g.5gb", Placement(1, 1), job_id="40")
    orphan = backend.create(1, "2g.10gb", Placement(2, 2), job_id="41")
    outside = backend.create(1, "3g.20gb", Placement(4, 4), job_id="42")
    site.state.put_kept(KeptInstance(1, kept.profile, kept.placement, kept.uuid, "77", T0 + 900))
    rc, _, err = run(prolog_main, gang_env(site), capsys)
    assert rc == 0, err
    uuids = [u for _, _, u in on_gpu(site)]
    assert outside.uuid in uuids and kept.uuid not in uuids and orphan.uuid not in uuids
    assert len(uuids) == 5 and site.state.kept() == []
    assert site.state.job("50").uuids == tuple(uuids[:4])


def test_a_live_single_job_in_the_region_blocks_the_gang(site, capsys):
    single = site.env("41", site.comment("41", profile="1g.5gb", placement=(3, 1)))
    assert run(prolog_main, single, capsys)[0] == 0
    before = on_gpu(site)
    rc, _, err = run(prolog_main, gang_env(site), capsys)
    assert rc == 0 and on_gpu(site) == before, err
    refusal = site.state.refusal("50")
    assert refusal.action == "requeue"
    assert refusal.reason.startswith("slices still in use by job 41: 1g.5gb at 3:1")
    assert refusal.reason.endswith("overlaps the planned 4 x 1g.5gb in 0:4 on gpu 1")


def test_another_jobs_prolog_never_takes_a_gang_member_for_an_orphan(site, gang, capsys):
    # job 60's 2g.10gb at 2:2 overlaps tasks 2 and 3, not task 0 (the record's uuid)
    other = site.env("60", site.comment("60", profile="2g.10gb", placement=(2, 2)))
    rc, _, err = run(prolog_main, other, capsys)
    assert rc == 0, err
    assert [u for _, _, u in on_gpu(site)] == list(gang.uuids)
    assert site.state.refusal("60").reason.startswith("slices still in use by job 50: 4 x")


def direct_prolog(site: Site, env: dict, ask) -> Outcome:
    config = load_config(str(site.config))
    return prolog(JobEnv.from_env(env), config, site.backend(), lambda: T0 + 5, ask)


def test_a_stale_gang_in_the_way_is_destroyed_whole(site, gang, capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(recordsweep, "PROC", tmp_path / "noproc")
    other = site.env("60", site.comment("60", profile="2g.10gb", placement=(2, 2)))
    out = direct_prolog(site, other, lambda ids: {i: None for i in ids})  # Slurm forgot 50
    assert out.started, out.log
    [(profile, placement, uuid)] = on_gpu(site)  # tasks 0 and 1 went with 2 and 3
    assert (profile, placement) == ("2g.10gb", Placement(2, 2))
    assert site.state.job("50") is None and site.state.job("60").uuid == uuid


def test_the_sweep_drops_a_stale_gang_with_all_its_instances(site, gang, monkeypatch, tmp_path):
    monkeypatch.setattr(recordsweep, "PROC", tmp_path / "noproc")
    out = Outcome()
    dropped, fault = recordsweep.sweep(
        site.state, site.backend(), NODE, out, boot=True, ask=None, wait=1.0
    )
    assert (dropped, fault) == (1, None) and on_gpu(site) == [], out.log
    assert site.state.job("50") is None and site.state.task("50") is None


# -- what the node reports -----------------------------------------------------------------


def test_busy_slices_count_every_instance_of_a_gang(gang):
    models = ("A100-40GB", "A100-40GB")
    assert list(busy_slices([gang], models, 1).values()) == [4]
    assert busy_slices([gang], models, 1, but="50") == {}


def test_the_node_metrics_count_every_instance_of_a_gang(site, gang):
    text = Path(load_config(str(site.config)).metrics_file_for(NODE)).read_text()
    line = next(x for x in text.splitlines() if x.startswith("slurm_mig_node_instances{"))
    assert 'profile="1g.5gb"' in line and 'state="job"' in line and line.endswith(" 4")
    busy = next(x for x in text.splitlines() if "slices_busy" in x and 'gpu="1"' in x)
    assert busy.endswith(" 4")
