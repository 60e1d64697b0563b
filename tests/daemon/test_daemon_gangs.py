"""Jobs of several slices (``mig:tasks=N``, issue 36 part 2) in the planner daemon: the
planner's job of a gang (times keyed by region size from one task's estimate, memory
per task), its assignment (each instance's profile, the region's placement, N), its
release (one GRES record per instance, N times the slices), no instance reuse, its
runtime learned per instance size, and how status and explain name it."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from cyclesite import NOW, StubConfig, cycle_snapshot, observed_cycle
from support import plan_jobs
from support import squeue_job as job

from slurm_mig.daemon.apply import apply_actions
from slurm_mig.daemon.cycle import CycleInput, Release, plan_cycle
from slurm_mig.daemon.cycle.actions import Learn, Note
from slurm_mig.daemon.cycle.classify import Busy, classify
from slurm_mig.daemon.cycle.clusters import cluster_snapshots
from slurm_mig.daemon.cycle.reuse import link_reuse
from slurm_mig.daemon.estimates import Estimator
from slurm_mig.daemon.gangview import region_size, slice_name, slice_slices, split_slice
from slurm_mig.daemon.statusview import build_view
from slurm_mig.explain import explain
from slurm_mig.geometry import Placement, gang_times, get_model
from slurm_mig.slurm.assignment import Assignment
from slurm_mig.slurm.jobrecord import admin_comment_for

A100 = get_model("A100-40GB")
GiB = 2**30


def _estimate(comment: str):
    return Estimator(StubConfig(), None)(job("1", comment=comment), ["A100-40GB"])


def _gang(job_id: str = "1", profile: str = "1g.5gb", start: int = 0, size: int = 4, **kw):
    """A planned gang's record: 4 instances of ``profile`` in the region start:size."""
    fields = dict(tasks=4, planned_seconds=100.0, issued=0.0)
    fields.update(kw)
    return Assignment(
        job_id, 0, "gpu01", 0, "A100-40GB", profile, Placement(start, size), 0, 0, **fields
    )


def test_a_gangs_estimate_is_one_tasks_by_region_size():
    one = _estimate("mig:time=100,mem=4G").times["A100-40GB"]
    four = _estimate("mig:time=100,mem=4G,tasks=4")
    assert four.tasks == 4 and four.mem == 4 * GiB  # one task's memory
    # regions that hold 4 instances: 4g (four 1g) and 7g (four 1g); one task's seconds
    assert dict(four.times["A100-40GB"]) == gang_times(A100, one, 4) == {4: one[1], 7: one[1]}
    two = _estimate("mig:time=100,tasks=2").times["A100-40GB"]
    assert set(two) == {2, 3, 4, 7} and two[4] == one[2] and two[7] == one[3]


def test_the_planners_job_of_a_gang_is_one_job_on_its_region_with_each_tasks_memory():
    jobs = [job("1", comment="mig:time=100,mem=4G,tasks=4")]
    est = Estimator(StubConfig(), None)
    snap = CycleInput(
        now=NOW,
        jobs=tuple(jobs),
        nodes={"gpu01": ("A100-40GB",)},
        estimates={j.job_id: est(j, ["A100-40GB"]) for j in jobs},
        batch_window=0.0,
    )
    [group] = cluster_snapshots(snap, classify(snap))
    planner_job = group.pending["1"]
    assert planner_job.tasks == 4 and planner_job.memory == 4 * GiB
    assert [s for s in A100.planner_sizes if math.isfinite(planner_job.time(s))] == [4, 7]


def test_a_gang_no_gpu_holds_is_noted_with_one_clear_line():
    result = plan_jobs([job("1", comment="mig:time=60,tasks=8"), job("2", comment="mig:time=60")])
    assert "2" in result.planned and "1" not in result.planned
    [note] = [a for a in result.actions if isinstance(a, Note)]
    assert note.job_id == "1"
    assert note.text == (
        "tasks=8: no GPU here holds 8 MIG instances (A100-40GB: at most 7); lower tasks= "
        "in the job's --comment"
    )


def test_a_gangs_tasks_memory_above_its_instances_is_noted_per_task():
    result = plan_jobs([job("1", comment="mig:time=60,mem=8G,tasks=5")])
    [note] = [a for a in result.actions if isinstance(a, Note)]
    assert note.text.startswith("memory need 8.0 GiB per task is more than each of 5 instances")
    assert "1g.5gb" in note.text and "lower mem= or tasks=" in note.text


def test_a_planned_gang_gets_its_instances_profile_its_regions_placement_and_n():
    result = plan_jobs([job("1", comment="mig:time=100,mem=4G,tasks=4")])
    a = result.planned["1"]
    assert (a.profile, a.placement, a.tasks) == ("1g.5gb", Placement(0, 4), 4)
    assert a.instance_placements() == tuple(Placement(i, 1) for i in range(4))
    assert "1" in result.released
    [release] = [x for x in result.actions if isinstance(x, Release)]
    assert release.assignment.tasks == 4 and "4x1g.5gb@0" in release.describe()
    # a single job exactly as before: its own slot, no count in its record
    single = plan_jobs([job("2", comment="mig:time=100,mem=4G")]).planned["2"]
    assert single.tasks == 1 and single.placement in A100.profile(single.profile).placements
    assert "tasks" not in single.to_json()


def test_a_gangs_release_writes_one_gres_record_per_instance_and_all_its_slices():
    class Slurm:
        def __init__(self) -> None:
            self.updates: list[tuple[str, dict]] = []

        def update_job(self, job_id, **fields):
            self.updates.append((job_id, fields))

        def release_jobs(self, ids):
            return {}

    a = _gang()
    slurm = Slurm()
    report = apply_actions(
        [Release("1", a, "mig:tasks=4")], slurm, key=b"k" * 32, gres=True, slices=True
    )
    [(jid, fields)] = slurm.updates  # a gang is one job: one update
    assert jid == "1" and report.released == ["1"]
    assert fields["TresPerNode"] == (
        "gres:gpu:m0g7:1,gres:gpu:m0g8:1,gres:gpu:m0g9:1,gres:gpu:m0g10:1,gres:mig_slice:4"
    )
    two = _gang(profile="2g.10gb", tasks=2)  # two 2g in the 4g region
    slurm = Slurm()
    apply_actions([Release("1", two, "")], slurm, key=b"k" * 32, gres=True, slices=True)
    assert slurm.updates[0][1]["TresPerNode"] == "gres:gpu:m0g3:1,gres:gpu:m0g4:1,gres:mig_slice:4"


def test_a_gang_neither_reuses_nor_keeps_nor_hands_over_an_instance():
    single = replace(_gang("2", tasks=1, size=1), batch=1)
    after = replace(_gang("3", tasks=1, size=1), batch=2)
    linked = link_reuse({"2": single, "3": after}, [])
    assert (linked["2"].keep_for, linked["3"].reuse_from) == ("3", "2")  # single jobs do
    gang, gang2 = _gang("4"), replace(_gang("5"), batch=1)
    linked = link_reuse({"4": gang, "5": gang2}, [])
    assert all((a.keep_for, a.reuse_from) == (None, None) for a in linked.values())
    # a running gang's region is no instance the next job of that slot could take over
    region = A100.profile_for_size(4).name
    next_one = _gang("6", profile=region, tasks=1)
    busy_gang = Busy("7", "gpu01", 0, _slot(_gang("7")), 0.0, 50.0, True, tasks=4)
    busy_single = replace(busy_gang, tasks=1)
    assert link_reuse({"6": next_one}, [busy_single])["6"].reuse_from == "7"
    assert link_reuse({"6": next_one}, [busy_gang])["6"].reuse_from is None
    next_gang = replace(next_one, profile="1g.5gb", tasks=4)
    assert link_reuse({"6": next_gang}, [busy_single])["6"].reuse_from is None


def _slot(a: Assignment):
    from slurm_mig.daemon.cycle.slots import model_slot

    return model_slot(a)


def test_a_running_gang_holds_its_region_and_a_finished_one_teaches_its_instance_size():
    region = _slot(_gang())
    assert (region.placement, region.size) == (Placement(0, 4), 4)
    three = _slot(_gang(tasks=3))  # 3 x 1g at 0:4: the smallest region, 3g
    assert (three.placement, three.size) == (Placement(0, 4), 3)
    a = _gang(planned_seconds=100.0)
    running = job(
        "1", state="RUNNING", held=False, start_time=NOW - 10, admin_comment=admin_comment_for(a)
    )
    est = Estimator(StubConfig(), None)
    snap = CycleInput(
        now=NOW,
        jobs=(running,),
        nodes={"gpu01": ("A100-40GB",)},
        estimates={"1": est.identity(running)},
    )
    [busy] = classify(snap).busy
    assert (busy.slot, busy.tasks) == (region, 4)
    done = replace(running, state="COMPLETED", end_time=NOW - 1.0, exit_code=0)
    snap = replace(snap, jobs=(done,), estimates={"1": est.identity(done)})
    [learn] = classify(snap).learns
    assert isinstance(learn, Learn) and learn.size == 1 and learn.seconds == pytest.approx(9.0)


def test_status_and_explain_name_a_gang_as_n_times_its_instance():
    other = job("1", comment="mig:time=300,mem=30G")  # the whole GPU first
    gang = job("2", comment="mig:time=100,mem=4G,tasks=4")  # then planned, held
    snap, result, report = observed_cycle([other, gang])
    p = report.extra["projected"]["2"]
    assert (p["profile"], p["tasks"], p["region"], p["placement"]) == (
        "4x1g.5gb",
        4,
        "4g.20gb",
        [0, 4],
    )
    assert p["state"] == "planned" and "tasks" not in report.extra["projected"]["1"]
    status = {"projected": report.extra["projected"]}
    rows = {r.job: r for r in build_view(status, [gang, other], {}, NOW).queue}
    assert rows["2"].profile == "4x1g.5gb" and rows["1"].profile == "7g.40gb"
    # a held job's plan as its owner reads it from the public summary
    from slurm_mig.daemon.public import summary

    public = summary(report)
    told = explain(gang, public, NOW)
    assert told["where"]["profile"] == "4x1g.5gb" and told["where"]["tasks"] == 4
    line = next(x for x in told["lines"] if x.startswith("planned on"))
    assert "as 4x1g.5gb (4 instances of 1g.5gb in region 4g at placement 0:4)" in line
    assert any(x.startswith("runs 4 tasks side by side") for x in told["lines"])
    # running, from its record
    a = result.planned["2"]
    running = replace(
        gang, state="RUNNING", held=False, start_time=NOW, admin_comment=admin_comment_for(a)
    )
    told = explain(running, None, NOW + 5)
    first = told["lines"][0]
    assert first.startswith("running on gpu01 gpu 0 as 4x1g.5gb (4 instances of 1g.5gb in ")
    assert "in region 4g at placement 0:4)" in first
    assert "needs 4.0 GiB of GPU memory per task" in " ".join(told["lines"])


def test_a_running_gangs_row_in_status_counts_its_instances_once():
    gang = job("1", comment="mig:time=100,tasks=2")
    _, result, report = observed_cycle([gang])
    a = result.planned["1"]
    assert (a.profile, a.placement, a.tasks) == ("3g.20gb", Placement(0, 8), 2)  # in 7g
    running = replace(
        gang, state="RUNNING", held=False, start_time=NOW, admin_comment=admin_comment_for(a)
    )
    _, _, report = observed_cycle([running], now=NOW + 1, number=2)
    status = {"projected": report.extra["projected"], "state": report.to_json()["state"]}
    [g] = build_view(status, [running], {}, NOW + 1).gpus
    [row] = [r for r in g.instances if r.job == "1"]
    # two 3g once: not the region's 7 slices, nor each instance twice
    assert row.profile == "2x3g.20gb" and g.busy == 6 and g.free == 1


def test_the_spelling_round_trips_and_names_the_region():
    assert slice_name("1g.5gb") == "1g.5gb" and slice_name("1g.5gb", 4) == "4x1g.5gb"
    assert split_slice("4x1g.5gb") == ("1g.5gb", 4) and split_slice("1g.5gb") == ("1g.5gb", 1)
    assert split_slice("9x1g.5gb") == ("9x1g.5gb", 1)  # no such gang
    assert slice_slices(A100, "4x1g.5gb") == 4 and slice_slices(A100, "3g.20gb") == 3
    assert region_size("A100-40GB", "1g.5gb", Placement(0, 4), 4) == 4
    assert region_size("A100-40GB", "1g.5gb", Placement(4, 4), 4) is None
    assert region_size("A100-40GB", "2g.10gb", Placement(0, 8), 3) == 7


def test_an_invalid_tasks_hint_keeps_the_job_from_planning_with_the_fix():
    result = plan_cycle(
        CycleInput(
            now=NOW,
            jobs=(job("1", comment="mig:tasks=9"),),
            nodes={"gpu01": ("A100-40GB",)},
            estimates={"1": _estimate("mig:tasks=9")},
            batch_window=0.0,
        )
    )
    [note] = [a for a in result.actions if isinstance(a, Note)]
    assert "'tasks=9'" in note.text and "write a whole number from 1 to 8" in note.text


def test_a_standing_plan_for_another_count_of_tasks_is_made_again():
    first = job("1", comment="mig:time=300,mem=30G")
    gang = job("2", comment="mig:time=100,mem=4G,tasks=4")
    _, result, _ = observed_cycle([first, gang])
    plans = {"2": result.planned["2"]}
    assert plans["2"].tasks == 4
    # its owner asks for 5 while it is held: its 4g region cannot hold them
    more = replace(gang, comment="mig:time=100,mem=4G,tasks=5")
    _, again, _ = observed_cycle([first, more], plans=plans)
    got = again.planned["2"]
    assert (got.tasks, got.profile, got.placement) == (5, "1g.5gb", Placement(0, 8))
    kept = observed_cycle([first, gang], plans=plans)[1].planned["2"]
    assert kept == plans["2"]  # unchanged: its plan stands, record and all


def test_a_gangs_task_memory_is_its_sizes_own_profile_never_the_double_memory_1g():
    # 7 GiB a task: a single job runs on a 1g.10gb, a gang's tasks never do (the Prolog
    # creates each size's own profile), so the hint is its runtime on 2g instances
    single = _estimate("mig:time=100,mem=7G").times["A100-40GB"]
    assert single[1] == 100.0
    gang = _estimate("mig:time=100,mem=7G,tasks=3").times["A100-40GB"]
    assert set(gang) == {7} and gang[7] == pytest.approx(100.0)  # three 2g.10gb in a 7g


def test_a_gang_whose_time_limit_rules_out_its_learned_sizes_is_still_planned(tmp_path):
    from slurm_mig.owner import owner_of
    from slurm_mig.runtimes import RuntimeStore

    store = RuntimeStore(tmp_path / "profiles.sqlite")
    owner = owner_of(job("0").uid)
    for n, (size, seconds) in enumerate([(1, 200.0)] * 3 + [(2, 500.0)] * 3):
        store.record("fit", "A100-40GB", size, seconds, f"r{n}", 0, 1.0, owner=owner)
    j = job("1", comment="mig:key=fit,mem=7G,tasks=3", time_limit=300.0)
    est = Estimator(StubConfig(), store)(j, ["A100-40GB"]).times["A100-40GB"]
    # 1g runs (a single job's, on 1g.10gb) do not fit a gang's task; the 2g ones pass
    # the limit, which then rules out nothing: the gang is planned on 2g instances
    assert set(est) == {7} and math.isfinite(est[7])


@pytest.mark.parametrize("algorithm", ["static", "no-mig", "first-fit", "ff+lb"])
def test_an_algorithm_of_fixed_instances_holds_a_gang_with_the_fix(algorithm):
    # such a policy runs a gang on N instances (Place.more), which the hooks cannot
    # create: the job is noted, never released; a single job beside it is planned
    jobs = [job("1", comment="mig:time=100,mem=4G,tasks=2"), job("2", comment="mig:time=100")]
    snap = replace(cycle_snapshot(jobs), algorithm=algorithm, plans=None)
    result = plan_cycle(snap)
    notes = [a for a in result.actions if isinstance(a, Note)]
    assert [n.job_id for n in notes] == ["1"]
    assert f"algorithm {algorithm}" in notes[0].text and "adaptive" in notes[0].text
    assert "1" not in result.released and "2" in result.released


def test_a_repartitioning_algorithm_plans_a_gang_on_a_region():
    jobs = [job("1", comment="mig:time=100,mem=4G,tasks=2")]
    result = plan_jobs(jobs)
    assert result.released == ("1",)
    assert not [a for a in result.actions if isinstance(a, Note)]
