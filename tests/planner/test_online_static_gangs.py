"""A static layout's jobs of several slices in the planning core: N idle instances of
one node (`choose_gang`), sized per task (`task_sizes`, `pick_size`), one `Place`
with its other instances (`Place.more`, in `decisions_to_json` too), and the job's
per-task times (`Job.task_times`, `Job.per_task`)."""

from __future__ import annotations

import math
import pickle
from dataclasses import replace

from slurm_mig.geometry import Placement, Slot, gang_times, get_model, region_sizes
from slurm_mig.job import Job
from slurm_mig.planner.decisions import Decisions, decisions_to_json
from slurm_mig.planner.online import POLICIES, pick_size
from slurm_mig.planner.online_placement import choose_gang, task_sizes
from slurm_mig.planner.snapshot import ClusterSnapshot, Gpu, Instance

A100 = get_model("A100-40GB")
TASK = {1: 400.0, 2: 210.0, 3: 150.0, 4: 120.0, 7: 70.0}
G1 = [Slot(Placement(i, 1), 1) for i in range(7)]
G2 = Slot(Placement(4, 2), 2)
G4 = Slot(Placement(0, 4), 4)
GIB = 1024**3


def gang(jid: str, tasks: int, memory: int = 0, arrival: float = 0.0) -> Job:
    times = gang_times(A100, TASK, tasks)
    full = {s: times.get(s, math.inf) for s in A100.planner_sizes}
    return Job(jid, arrival, full, memory=memory, tasks=tasks, task_times=dict(TASK))


def layout_gpu(index: int, node: str, busy: dict[Slot, str] | None = None) -> Gpu:
    """A 4-2-1 GPU (4g at 0, 2g at 4, 1g at 6); ``busy``: slot -> its job."""
    busy = busy or {}
    slots = (G4, G2, G1[6])
    return Gpu(index, tuple(Instance(s, busy.get(s)) for s in slots), node=node)


def test_choose_gang_takes_the_first_node_with_n_of_the_smallest_size():
    gpus = [
        layout_gpu(0, "a", {G1[6]: "x"}),
        layout_gpu(1, "a"),
        layout_gpu(2, "b"),
        layout_gpu(3, "b"),
    ]
    # node a has one idle 1g, node b two: two 1g go to node b
    assert choose_gang(gpus, (1,), 2) == ((2, G1[6]), (3, G1[6]))
    # 1g or 2g: node a has 1g + 2g + 2g; the 1g first, then the lower GPUs
    assert choose_gang(gpus, (1, 2), 3) == ((1, G1[6]), (0, G2), (1, G2))
    assert choose_gang(gpus, (1,), 3) is None  # never across nodes
    assert choose_gang(gpus, (4,), 2) == ((0, G4), (1, G4))


def test_task_sizes_and_pick_size_read_one_tasks_times_and_memory():
    job = gang("g", 2, memory=8 * GIB)  # a task needs 2g's memory
    assert task_sizes(job, A100) == (2, 3, 4, 7)
    assert pick_size(job, A100, "min", per_task=True) == (2, 3, 4, 7)
    assert pick_size(job, A100, "fastest", per_task=True)[0] == 7
    # planned on a region (dynamic policies): region sizes, not instance sizes
    assert pick_size(job, A100)[0] == min(r for r, s in region_sizes(A100, 2).items() if s >= 2)


def _snapshot(gpus: list[Gpu], *jobs: Job) -> ClusterSnapshot:
    return ClusterSnapshot(10.0, A100, gpus, {j.id: j for j in jobs})


def test_a_static_policy_places_a_gang_with_its_other_instances_in_one_place():
    pol = POLICIES["static"](layout="4-2-1")
    snap = _snapshot([layout_gpu(0, "0"), layout_gpu(1, "0"), layout_gpu(2, "0")], gang("g", 3))
    (place,) = pol.decide(snap).places
    assert (place.gpu, place.slot) == (0, G1[6])
    assert place.more == ((1, G1[6]), (2, G1[6]))
    doc = decisions_to_json(Decisions((place,)), snap)
    (item,) = doc["placements"]
    assert [(m["gpu"], m["profile"]) for m in item["more"]] == [(1, "1g.5gb"), (2, "1g.5gb")]


def test_a_waiting_gang_lets_a_later_single_job_of_its_sizes_pass():
    pol = POLICIES["static"](layout="4-2-1")
    gpus = [layout_gpu(0, "0", {G1[6]: "x"}), layout_gpu(1, "0")]
    single = Job("s", 5.0, dict.fromkeys(A100.planner_sizes, 100.0))
    (place,) = pol.decide(_snapshot(gpus, gang("g", 2), single)).places
    assert (place.job, place.gpu, place.slot, place.more) == ("s", 1, G1[6], ())
    strict = POLICIES["static"](layout="4-2-1", backfill=False)
    assert strict.decide(_snapshot(gpus, gang("g", 2), single)).places == ()


def test_a_dynamic_policy_still_plans_a_gang_on_one_region():
    pol = POLICIES["frag-aware"]()
    (place,) = pol.decide(_snapshot([Gpu(0, node="0")], gang("g", 3))).places
    assert place.more == () and region_sizes(A100, 3).get(place.slot.size) == 1


def test_task_times_are_kept_by_replace_and_pickle_and_left_out_of_equality():
    job = gang("g", 2)
    assert replace(job, priority=5.0).task_times == TASK
    assert pickle.loads(pickle.dumps(job)).task_times == TASK
    assert replace(job, task_times={}) == job and hash(replace(job, task_times={})) == hash(job)


def test_per_task_times_are_read_back_from_region_times_when_not_given():
    job = replace(gang("g", 2), task_times={})
    per = job.per_task(A100)
    for region, size in region_sizes(A100, 2).items():
        assert per[size] == job.times[region]
    single = Job("s", 0.0, {1: 5.0, 2: 3.0})
    assert single.per_task(A100) == single.times
