"""The cluster snapshot: its JSON round trip, the one-line errors its reader gives, the
masks of a GPU and the pure updates placement algorithms use."""

from __future__ import annotations

import json
import math

import pytest

from slurm_mig.geometry import Placement, Slot, get_model
from slurm_mig.planner.snapshot import (
    ClusterSnapshot,
    Event,
    Gpu,
    Instance,
    Job,
    Planned,
    Running,
    SnapshotError,
    default_size,
    runnable_sizes,
    snapshot_from_json,
)

A100 = get_model("A100-40GB")
G1 = [Slot(Placement(i, 1), 1) for i in range(7)]
G3 = [Slot(Placement(0, 4), 3), Slot(Placement(4, 4), 3)]
G7 = Slot(Placement(0, 8), 7)
TIMES = {1: 40.0, 2: 21.0, 3: 15.0, 4: 12.0, 7: 8.0}


def sample() -> ClusterSnapshot:
    a = Job("a", 10.0, TIMES, pcie_demand=5.7, alpha=1.25, restartable=True, kind="bloom")
    b = Job("b", 20.0, {1: math.inf, 2: 30.0, 3: 20.0, 4: 15.0, 7: 9.0}, memory=9 * 2**30)
    c = Job("c", 30.0, TIMES, size=2, deadline=500.0)
    gpus = (
        Gpu(0, (Instance(G3[0], "a", 5.0, 95.0, True), Instance(G1[6])), 12.0, 1, "n1", 0),
        Gpu(1, (), -math.inf, 0, "n1", 1),
    )
    return ClusterSnapshot(
        now=50.0,
        model=A100,
        gpus=gpus,
        pending={"b": b, "c": c},
        running={"a": Running(a, 0, G3[0], 5.0, 0.5, 1.2, 95.0, planned=60.0)},
        planned={"b": Planned("b", 1, G3[1], 3, 0, 30.0, 40.0)},
        pcie_max=30.08,
        events=(Event(45.0, "job z ended early", 0), Event(46.0, "usable nodes changed")),
        finished=(("z", 0),),
    )


def test_json_round_trip_keeps_everything_a_policy_reads():
    snap = sample()
    data = json.loads(json.dumps(snap.to_json()))
    back = snapshot_from_json(data)
    assert back.now == snap.now and back.model is A100 and back.pcie_max == snap.pcie_max
    assert [g.instances for g in back.gpus] == [g.instances for g in snap.gpus]
    assert [(g.node, g.local, g.channel_free, g.pcie_jobs) for g in back.gpus] == [
        (g.node, g.local, g.channel_free, g.pcie_jobs) for g in snap.gpus
    ]
    assert dict(back.pending) == dict(snap.pending)
    assert list(back.pending) == ["b", "c"]  # arrival order kept
    assert dict(back.running) == dict(snap.running)
    assert dict(back.planned) == dict(snap.planned)
    assert back.events == snap.events and back.finished == snap.finished
    assert back.to_json() == snap.to_json()


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (lambda d: d.update(gpu_model="Z1"), "gpu_model: unknown GPU model 'Z1'"),
        (lambda d: d.pop("now"), "now: None is not a number"),
        (lambda d: d.update(gpus=[]), "needs at least one GPU"),
        (
            lambda d: d["gpus"][0]["instances"][0].update(placement={"start": 1, "size": 4}),
            "gpus[0].instances[0]: placement 1:4 is not legal for 3g.20gb",
        ),
        (
            lambda d: d["gpus"][0]["instances"].append(
                {"profile": "1g.5gb", "placement": {"start": 3, "size": 1}}
            ),
            "share a memory slice",
        ),
        (lambda d: d["pending"][0]["times"].update({"5": 1.0}), "size 5 is not an instance size"),
        (lambda d: d["pending"][0]["times"].update({"2": -1}), "must be > 0 seconds"),
        (lambda d: d["pending"][0].update(id=None), "pending[0].id: None must be a string"),
        (lambda d: d["pending"][0].update(id="x\ny"), "control characters"),
        (lambda d: d["planned"][0].update(job="zz"), "job 'zz' is not pending"),
        (lambda d: d["running"][0].update(gpu=9), "no gpu 9"),
        (lambda d: d["running"][0].update(planned="soon"), "running[0].planned"),
        (lambda d: d["running"][0].update(gpu=1), "has no instance"),
        (lambda d: d["running"].clear(), "not in running"),
        (lambda d: d["pending"].append(d["pending"][0]), "appears twice"),
        (lambda d: d["events"].append([1.0]), "expected [time, text]"),
    ],
)
def test_bad_json_names_the_field(change, needle):
    data = sample().to_json()
    change(data)
    with pytest.raises(SnapshotError) as err:
        snapshot_from_json(data, "state.json")
    assert str(err.value).startswith("state.json: ")
    assert needle in str(err.value)


def test_gpu_masks_and_pure_updates():
    g = Gpu(0, (Instance(G3[0], "a"), Instance(G1[6])))
    assert (g.busy_mask, g.held_mask, g.compute_mask) == (0b1111, 0b1001111, 0b111)
    assert g.idle == (Instance(G1[6]),) and g.busy_slices == 3
    placed = g.placed(Instance(G3[1], "b", pcie=True))  # the idle 1g at 6 is in its way
    assert [i.slot for i in placed.instances] == [G3[0], G3[1]]
    assert placed.pcie_jobs == 1 and placed.busy_mask == 0xFF
    left = placed.vacated("a")
    assert left.instance(G3[0]) == Instance(G3[0], None, -math.inf)
    assert left.busy_mask == 0b11110000 and left.held_mask == 0xFF
    gone = placed.vacated("b", keep_instance=False)
    assert gone.instance(G3[1]) is None and gone.pcie_jobs == 0
    assert g.instances == (Instance(G3[0], "a"), Instance(G1[6]))  # the original is untouched


def test_runnable_and_default_sizes_respect_memory_and_requests():
    big = Job("b", 0.0, TIMES, memory=15 * 2**30)  # more than 2g.10gb, less than 3g.20gb
    assert runnable_sizes(big, A100) == (3, 4, 7) and default_size(big, A100) == 3
    asked = Job("c", 0.0, TIMES, size=4)
    assert default_size(asked, A100) == 4
    assert runnable_sizes(Job("x", 0.0, {7: 1.0}), A100) == (7,)


def test_waited_and_job_lookups():
    snap = sample()
    assert snap.waited("b") == 30.0 and snap.job("a").kind == "bloom"
    with pytest.raises(KeyError):
        snap.job("zz")
    assert list(snap.changed_gpus()) == [0, 1] and len(snap.new_arrivals()) == 2
