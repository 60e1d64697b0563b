"""Hook locks no coarser than the resource (issue 17): a Prolog or Epilog holds only the
lock of its GPU, so hooks on different GPUs of a node never wait for each other, while
two hooks on one GPU still take turns. A create that is "in progress" is a simulated
create whose Table 1 latency is an Event the test opens; each hook gets its own backend
object on the node's simulated GPUs, as separate hook processes would."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from hooksite import T0, Site, clock_at

from slurm_mig.config import load_config
from slurm_mig.devices.simulated import SimulatedBackend
from slurm_mig.geometry import Placement
from slurm_mig.node import nodestate
from slurm_mig.node.hooks import JobEnv, Outcome, epilog, prolog
from slurm_mig.node.nodestate import KeptInstance

MODELS = ("A100-40GB", "A100-40GB")


class Gate:
    """A simulated device operation that takes until the test opens the gate."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.opened = threading.Event()

    def sleep(self, _seconds: float) -> None:
        self.entered.set()
        assert self.opened.wait(30), "the test never opened the gate"


class LockClock:
    """nodestate's clock for lock waits. Each poll of a busy lock sets ``waited``; it
    moves the clock on at once (a wait times out without taking time), or with
    ``frozen`` yields for a moment and leaves it (a wait never times out)."""

    def __init__(self, frozen: bool = False) -> None:
        self.now = 0.0
        self.frozen = frozen
        self.waited = threading.Event()

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.waited.set()
        if self.frozen:
            time.sleep(0.001)  # let the holder run; the lock's clock stays put
        else:
            self.now += seconds


def backend(site: Site, gate: Gate | None = None) -> SimulatedBackend:
    if gate is None:
        return SimulatedBackend(site.sim_dir, MODELS)
    return SimulatedBackend(site.sim_dir, MODELS, latency_scale=1.0, sleep=gate.sleep)


def hook(
    fn: Callable[..., Outcome], site: Site, job: str, gate: Gate | None = None, **fields
) -> Outcome:
    """Run the prolog or epilog ``fn`` of ``job`` (assignment ``fields``) in-process."""
    env = site.env(job, site.comment(job, **fields))
    return fn(JobEnv.from_env(env), load_config(site.config), backend(site, gate), clock_at(T0 + 5))


@contextmanager
def creating(site: Site, job: str, **fields) -> Iterator[list[Outcome]]:
    """The Prolog of ``job`` in a thread, inside its create until the block ends; then
    the list holds its outcome."""
    gate, done = Gate(), []
    thread = threading.Thread(target=lambda: done.append(hook(prolog, site, job, gate, **fields)))
    thread.start()
    try:
        assert gate.entered.wait(30), "the prolog never reached its create"
        yield done
    finally:
        gate.opened.set()
        thread.join(30)
    assert not thread.is_alive() and len(done) == 1


def gpu_of(site: Site, gpu: int) -> list[tuple[str, Placement]]:
    return [(i.profile, i.placement) for i in backend(site).instances(gpu)]


GPU0 = {"gpu": 0, "profile": "3g.20gb", "placement": (0, 4)}
GPU1 = {"gpu": 1, "profile": "3g.20gb", "placement": (4, 4)}


def test_a_prolog_on_gpu_1_finishes_while_gpu_0_is_being_created(site, monkeypatch):
    monkeypatch.setattr(nodestate, "time", LockClock())  # a wait would time out at once
    backend(site)
    with creating(site, "42", **GPU0) as first:
        other = hook(prolog, site, "43", **GPU1)
        assert other.started and gpu_of(site, 1) == [("3g.20gb", Placement(4, 4))]
        assert gpu_of(site, 0) == [] and first == []  # gpu 0's create is still going on
    assert first[0].started and gpu_of(site, 0) == [("3g.20gb", Placement(0, 4))]
    assert {r.job_id: r.gpu for r in site.state.jobs()} == {"42": 0, "43": 1}


def test_a_destroy_on_gpu_1_is_not_held_up_by_a_create_on_gpu_0(site, monkeypatch):
    monkeypatch.setattr(nodestate, "time", LockClock())
    assert hook(prolog, site, "50", **GPU1).started
    with creating(site, "42", **GPU0) as first:
        out = hook(epilog, site, "50", **GPU1)
        assert out.exit_code == 0 and any(
            "destroyed 3g.20gb at 4:4 on gpu 1" in t for _, t in out.log
        )
        assert gpu_of(site, 1) == [] and site.state.job("50") is None
        assert site.state.finished_jobs() == {"50"}
        assert gpu_of(site, 0) == [] and first == []
    assert first[0].started and [r.job_id for r in site.state.jobs()] == ["42"]


def test_a_hook_on_the_same_gpu_waits_and_times_out_without_taking_slices(site, monkeypatch):
    clock = LockClock()
    monkeypatch.setattr(nodestate, "time", clock)
    with creating(site, "42", **GPU0) as first:
        # other slices of gpu 0, free on the device: the GPU's lock still makes it wait
        other = hook(prolog, site, "43", gpu=0, profile="3g.20gb", placement=(4, 4))
        assert clock.waited.is_set() and not other.started
    assert first[0].started
    r = site.state.refusal("43")
    assert r.action == "requeue"
    assert "the slurm-mig lock of gpu 0" in r.reason and "was not free within 60 s" in r.reason
    assert gpu_of(site, 0) == [("3g.20gb", Placement(0, 4))]


def test_two_prologs_on_one_gpu_take_turns_and_never_double_book(site, monkeypatch):
    clock = LockClock(frozen=True)
    monkeypatch.setattr(nodestate, "time", clock)
    second: list[Outcome] = []
    with creating(site, "42", **GPU0) as first:
        waiting = threading.Thread(
            target=lambda: second.append(
                hook(prolog, site, "43", gpu=0, profile="4g.20gb", placement=(0, 4))
            )
        )
        waiting.start()
        assert clock.waited.wait(30), "the second prolog never waited for gpu 0's lock"
        assert second == []
    waiting.join(30)
    assert first[0].started and not second[0].started
    r = site.state.refusal("43")
    # it decided after the first had recorded its instance, not beside its create
    assert r.action == "requeue" and "slices still in use by job 42" in r.reason
    assert gpu_of(site, 0) == [("3g.20gb", Placement(0, 4))]
    assert [r.job_id for r in site.state.jobs()] == ["42"]


def test_reclaiming_leaves_a_busy_gpu_to_the_hook_that_holds_it(site, monkeypatch):
    clock = LockClock()
    monkeypatch.setattr(nodestate, "time", clock)
    old = backend(site).create(0, "1g.5gb", Placement(6, 1))
    site.state.put_kept(KeptInstance(0, "1g.5gb", Placement(6, 1), old.uuid, None, until=T0))
    with creating(site, "42", **GPU0) as first:
        other = hook(prolog, site, "43", **GPU1)
        assert other.started and not clock.waited.is_set()  # tried gpu 0 once, did not wait
        assert any("gpu 0 is busy" in t for _, t in other.log)
        assert [k.uuid for k in site.state.kept()] == [old.uuid]
    # the hook on gpu 0 reclaims it once its create is done
    assert any("reclaimed 1g.5gb at 6:1 on gpu 0" in t for _, t in first[0].log)
    assert site.state.kept() == [] and gpu_of(site, 0) == [("3g.20gb", Placement(0, 4))]
