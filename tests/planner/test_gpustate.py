"""The one model of a GPU's live state (``planner.gpustate``) that the simulator and
the PCIe-aware FAR replay execute on: the reconfiguration channel, the running jobs and
Eq. 2's re-pacing."""

from __future__ import annotations

import math

import pytest

from slurm_mig.geometry import get_model, planner_slots, slot_mask
from slurm_mig.pcie import slowdown
from slurm_mig.planner.gpustate import GpuState, JobRun
from slurm_mig.sim.cluster import Gpu as SimGpu

A100 = get_model("A100-40GB")
ONE = [s for s in planner_slots(A100) if s.size == 1]
PMAX = 30.08


def _inst(gpu: GpuState, k: int, now: float = 0.0):
    slot = ONE[k]
    return gpu.create(k, slot, slot_mask(slot), now, 2.0)


def test_creates_and_destroys_take_turns_on_the_channel():
    gpu = GpuState(0, channel=5.0)
    a = _inst(gpu, 0, now=1.0)
    b = _inst(gpu, 1, now=1.0)
    assert (a.ready_at, b.ready_at, gpu.channel) == (7.0, 9.0, 9.0)
    assert gpu.held == a.mask | b.mask
    gone = gpu.destroy(0, now=20.0, seconds=0.5)
    assert gone == 20.5 and gpu.channel == 20.5
    assert 0 not in gpu.insts and gpu.held == b.mask


def test_an_instance_is_not_destroyed_before_it_exists():
    gpu = GpuState(0, channel=0.0)
    _inst(gpu, 0)  # ready at 2.0
    gpu.channel = 0.0
    assert gpu.destroy(0, now=1.0, seconds=0.5) == 2.5


def test_a_job_that_is_not_pcie_bound_ends_after_its_time():
    gpu = GpuState(0, 0.0)
    inst = gpu.found("a", ONE[0], slot_mask(ONE[0]), 0.0)
    run = JobRun(0, inst, 100.0, 1.0, 10.0)
    assert gpu.start(run, 10.0, PMAX) == [run]
    assert (run.finish, run.sd, inst.run) == (110.0, 1.0, run)
    assert gpu.stop(run, 50.0, PMAX) == []
    assert (inst.run, inst.job, gpu.runs, run.ver) == (None, -1, [], 1)


def test_pcie_bound_jobs_slow_each_other_and_are_repaced_when_one_leaves():
    gpu = GpuState(0, 0.0)
    a_inst, b_inst = (gpu.found(k, ONE[k], slot_mask(ONE[k]), 0.0) for k in (0, 1))
    a = JobRun(0, a_inst, 100.0, 1.0, 0.0, alpha=1.25, demand=17.65)
    b = JobRun(1, b_inst, 100.0, 1.0, 0.0, alpha=1.25, demand=17.65)
    assert gpu.start(a, 0.0, PMAX) == [a]
    assert a.finish == pytest.approx(100.0 * slowdown(1.25, 17.65, 1, PMAX))
    assert gpu.start(b, 10.0, PMAX) == [a, b]  # both re-predicted, a's old end stale
    two = slowdown(1.25, 17.65, 2, PMAX)
    assert two > 1.0 and b.sd == a.sd == two
    left = 1.0 - 10.0 / (100.0 * slowdown(1.25, 17.65, 1, PMAX))
    assert a.rem == pytest.approx(left) and a.finish == pytest.approx(10.0 + left * 100 * two)
    ver = b.ver
    assert gpu.stop(a, 20.0, PMAX) == [b]  # b alone again: faster
    assert b.ver == ver + 1 and b.finish < 10.0 + 100.0 * two
    assert gpu.pcie_n == 1 and gpu.runs == [b]


def test_a_job_already_running_resumes_at_its_slowdown():
    gpu = GpuState(0, 0.0)
    inst = gpu.found("a", ONE[0], slot_mask(ONE[0]), 0.0)
    run = gpu.resume(JobRun(-2, inst, 100.0, 0.5, 4.0, alpha=1.0, demand=5.7), 1.5)
    assert run.finish == 4.0 + 0.5 * 100.0 * 1.5
    assert gpu.pcie_n == 1 and run.remaining_at(4.0 + 75.0) == 0.0
    assert math.isclose(run.remaining_at(4.0 + 30.0), 0.3)


def test_the_simulator_keeps_its_gpus_in_this_model():
    gpu = SimGpu(3, node=1, memory_slices=8, t0=2.0)
    assert isinstance(gpu, GpuState)
    assert (gpu.index, gpu.channel, gpu.node, gpu.released) == (3, 2.0, 1, [-math.inf] * 8)
