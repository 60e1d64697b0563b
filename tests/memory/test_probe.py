"""The in-job memory probe, with real torch on the CPU: the live-tensor count, the emulated
capacity, the iteration boundaries and their priority, the control file, the parsing of
CUDA allocator statistics, and the injection into unmodified scripts (real subprocesses).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import slurm_mig.memory
from slurm_mig.memory import probe as probe_mod
from slurm_mig.memory.live_tensors import planned_bytes
from slurm_mig.memory.probe import (
    LiveTensorTracker,
    Probe,
    ProbeConfig,
    cuda_context_bytes,
    is_spawned_child,
    sample_from_cuda_stats,
    tried_bytes,
)
from slurm_mig.memory.trace import read_trace

torch = pytest.importorskip("torch", reason="the probe's tests need torch (the test extra)")
nn = torch.nn

ROOT = Path(__file__).resolve().parents[2]
INJECT = ROOT / "slurm_mig" / "memory" / "inject"

# torch.cuda.memory_stats() as documented (core statistics per pool and metric, the event
# counters, requested_bytes), numbers as a 2-GiB training step could show them.
CUDA_STATS = {
    **{
        f"{stat}.{pool}.{metric}": value
        for stat, base in (
            ("allocated", 40),
            ("allocated_bytes", 1_610_612_736),
            ("segment", 9),
            ("reserved_bytes", 2_147_483_648),
            ("active", 41),
            ("active_bytes", 1_611_000_000),
            ("inactive_split", 3),
            ("inactive_split_bytes", 5_242_880),
            ("requested_bytes", 1_600_000_000),
        )
        for pool, share in (("all", 1.0), ("large_pool", 0.9), ("small_pool", 0.1))
        for metric, value in (
            ("current", int(base * share)),
            ("peak", int(base * share * 1.5)),
            ("allocated", int(base * share * 30)),
            ("freed", int(base * share * 29)),
        )
    },
    "num_alloc_retries": 2,
    "num_ooms": 1,
    "num_sync_all_streams": 0,
    "num_device_alloc": 11,
    "num_device_free": 2,
    "max_split_size": -1,
    "oversize_allocations.current": 0,
    "oversize_allocations.peak": 0,
    "oversize_segments.current": 0,
    "oversize_segments.peak": 0,
}

# The message of a real CUDA OOM (PyTorch 2.x).
CUDA_OOM = (
    "CUDA out of memory. Tried to allocate 2.50 GiB. GPU 0 has a total capacity of 9.75 GiB "
    "of which 1.12 GiB is free. Including non-PyTorch memory, this process has 8.62 GiB "
    "memory in use. Of the allocated memory 7.90 GiB is allocated by PyTorch, and 220.00 MiB "
    "is reserved by PyTorch but unallocated."
)


# ---------------------------------------------------------------------------
# CUDA statistics (pure)


def test_cuda_sample_takes_the_all_pool_peaks_currents_and_counters():
    s = sample_from_cuda_stats(7, CUDA_STATS, wall=12.5)
    assert s.iteration == 7 and s.wall == 12.5
    assert s.requested_peak == int(1_600_000_000 * 1.5)
    assert s.requested_current == 1_600_000_000
    assert s.allocated_peak == int(1_610_612_736 * 1.5)
    assert s.allocated_current == 1_610_612_736
    assert s.reserved_peak == int(2_147_483_648 * 1.5)
    assert s.reserved_current == 2_147_483_648
    assert (s.alloc_retries, s.ooms) == (2, 1)


def test_cuda_sample_of_an_allocator_without_requested_bytes_reads_zero():
    old = {k: v for k, v in CUDA_STATS.items() if not k.startswith("requested_bytes")}
    s = sample_from_cuda_stats(0, old, wall=0.0)
    assert s.requested_peak == 0 and s.allocated_peak > 0


def test_cuda_context_is_what_is_neither_free_nor_reserved():
    gib = 2**30
    assert cuda_context_bytes(free=7 * gib, total=10 * gib, reserved=2 * gib) == gib
    assert cuda_context_bytes(free=9 * gib, total=10 * gib, reserved=2 * gib) == 0


def test_oom_message_size_is_parsed():
    assert tried_bytes(CUDA_OOM) == int(2.5 * 2**30)
    assert tried_bytes("Tried to allocate 512.00 MiB.") == 512 * 2**20
    assert tried_bytes("some other error") == 0


# ---------------------------------------------------------------------------
# The live-tensor tracker


def test_tracker_counts_new_storages_once_and_subtracts_them_when_freed():
    t = LiveTensorTracker()
    with t:
        a = torch.empty(1000)  # 4000 bytes
        assert t.current == 4000
        v = a[10:].view(-1, 10)  # a view: same storage
        a.add_(1)  # in place: same storage
        b = a * 2  # new
        assert t.current == 8000
        del a
        assert t.current == 8000  # the view keeps the storage alive
        del v
        assert t.current == 4000
        del b
        assert t.current == 0
    assert t.peak == 8000


def test_tracker_peak_is_per_interval_and_restarts_from_current():
    t = LiveTensorTracker()
    with t:
        keep = torch.ones(256)  # 1 KiB
        tmp = torch.ones(1024)  # 4 KiB, freed before the boundary
        del tmp
        assert t.take_peak() == (1024 + 4096, 1024)
        assert t.take_peak() == (1024, 1024)
    del keep


def test_tracker_sees_autograd_and_optimizer_tensors():
    torch.manual_seed(0)
    model = nn.Linear(100, 100)  # made outside the mode: found when ops touch it
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    t = LiveTensorTracker()
    with t:
        loss = model(torch.randn(8, 100)).square().mean()
        loss.backward()
        opt.step()
        del loss
    params = sum(p.numel() * 4 for p in model.parameters())
    # the parameters (seen through weight.t() and bias.add_), their gradients and the
    # momentum buffers: three copies of the parameters
    assert t.current == 3 * params
    assert t.peak > t.current


def test_emulated_capacity_raises_oom_and_drops_the_output():
    t = LiveTensorTracker(capacity=64 * 1024, context=16 * 1024)
    with t:
        a = torch.ones(8 * 1024)  # 32 KiB: 48 KiB with the context
        with pytest.raises(torch.OutOfMemoryError, match="emulated device out of memory"):
            a.repeat(2)  # +64 KiB would pass 64 KiB
        assert t.current == 32 * 1024
        assert t.ooms == 1 and t.refused == 96 * 1024
        b = torch.ones(4 * 1024)  # 16 KiB fits exactly
    assert t.current == 48 * 1024
    del a, b


def test_emulated_capacity_refuses_a_factory_before_it_allocates():
    # 4 TiB cannot be allocated on this host: a check after the allocation would fail
    # with the allocator's RuntimeError instead of torch.OutOfMemoryError.
    t = LiveTensorTracker(capacity=2**30)
    with t, pytest.raises(torch.OutOfMemoryError, match="4096.00 GiB"):
        torch.empty(2**42, dtype=torch.uint8)
    assert t.current == 0 and t.ooms == 1


def test_emulated_oom_propagates_out_of_backward():
    model = nn.Linear(512, 512)
    x = torch.randn(256, 512)
    t = LiveTensorTracker()
    with t:
        loss = model(x).square().mean()
        t.capacity = t.current + 1024  # no room for the gradients
        with pytest.raises(torch.OutOfMemoryError):
            loss.backward()


def test_planned_bytes_of_factories():
    aten = torch.ops.aten
    x = torch.empty(3, 5, dtype=torch.float64)
    assert planned_bytes(aten.empty.memory_format, ([4, 8],), {}) == 128
    assert planned_bytes(aten.zeros.default, ([10],), {"dtype": torch.int8}) == 10
    assert planned_bytes(aten.randint.low, (0, 5, [3, 3]), {}) == 72
    assert planned_bytes(aten.zeros_like.default, (x,), {}) == 120
    assert planned_bytes(aten.new_empty.default, (x, [2]), {}) == 16
    assert planned_bytes(aten.empty_strided.default, ([10, 10], [20, 1]), {}) == 190 * 4


def test_rescan_counts_tensors_made_while_tracking_was_off():
    made_before = torch.ones(5000)  # 20000 bytes, made with the mode off
    t = LiveTensorTracker()
    added = t.rescan()
    assert added >= 20000 and t.current == added
    del made_before


# ---------------------------------------------------------------------------
# The probe in this process: boundaries, priority, control


@pytest.fixture
def make_probe(tmp_path):
    probes: list[Probe] = []

    def make(**kw) -> Probe:
        config = ProbeConfig(out=tmp_path / "probe.csv", control=tmp_path / "ctl", **kw)
        p = Probe(config).install()
        probes.append(p)
        return p

    yield make
    for p in probes:
        p.close()
    assert torch._C._len_torch_dispatch_stack() == 0
    assert slurm_mig.memory._active is None


def samples(p: Probe):
    return read_trace(p.config.out)


def train(steps: int, grow: int = 0) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for i in range(steps):
        loss = model(torch.randn(16 + grow * i, 32)).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


def test_optimizer_steps_are_the_iterations_of_training(make_probe):
    p = make_probe()
    train(6, grow=64)
    p.close()
    rows = samples(p)
    assert [s.iteration for s in rows] == list(range(6))
    peaks = [s.requested_peak for s in rows]
    assert all(b > a for a, b in zip(peaks[1:], peaks[2:]))  # a growing batch shows
    assert all(s.requested_peak >= s.requested_current > 0 for s in rows)
    meta = json.loads(Path(f"{p.config.out}.meta").read_text())
    assert meta == {
        "context_bytes": 0,
        "device": "cpu",
        "pid": os.getpid(),
        "source": "optimizer",
        "since": 0,
    }


def test_outermost_forwards_are_the_iterations_of_inference(make_probe):
    model = nn.Sequential(nn.Linear(16, 16), nn.Sequential(nn.ReLU(), nn.Linear(16, 16)))
    p = make_probe()
    with torch.no_grad():
        for _ in range(5):
            model(torch.randn(4, 16))
    assert p.iteration == 4  # the start of forwards 2..5; nested modules do not count
    p.close()
    assert [s.iteration for s in samples(p)] == [0, 1, 2, 3]


def test_explicit_step_wins_over_the_optimizer(make_probe):
    p = make_probe()
    torch.manual_seed(0)
    model = nn.Linear(8, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(6):  # two optimizer steps per script iteration
        for _ in range(2):
            model(torch.randn(2, 8)).sum().backward()
            opt.step()
        slurm_mig.step()
    p.close()
    # the first two optimizer steps end iterations 0 and 1; step() 1 takes over without
    # ending one (the rest of its iteration folds into the next); step() 2..6 end 2..6
    assert [s.iteration for s in samples(p)] == [0, 1, 2, 3, 4, 5, 6]
    assert p.source_rank == probe_mod.SOURCES["step"]


def test_import_slurm_mig_step_is_the_same_function():
    import slurm_mig as pkg

    assert pkg.step is slurm_mig.memory.step


def test_timer_makes_iterations_when_nothing_else_does(make_probe):
    p = make_probe(timer=0.05)  # counts from 10 periods = 0.5 s after start
    x = torch.ones(1000)  # the first op under the mode may take seconds (torch._dynamo loads)
    first = p.iteration
    deadline = time.monotonic() + 5
    while p.iteration < first + 4 and time.monotonic() < deadline:
        x = x + 1
        time.sleep(0.02)
    p.close()
    rows = samples(p)
    assert len(rows) >= 4
    assert rows[0].wall >= 0.5
    assert all(s.requested_peak >= 4000 for s in rows if s.iteration > first), rows
    assert p.source == "timer"


def test_a_source_taking_over_from_the_timer_ends_its_first_iteration(make_probe):
    p = make_probe(timer=0.05)
    deadline = time.monotonic() + 5
    while p.iteration < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    timer_samples = p.iteration
    train(3)
    p.close()
    meta = json.loads(Path(f"{p.config.out}.meta").read_text())
    since = meta["since"]
    assert meta["source"] == "optimizer" and since >= timer_samples >= 2
    assert [s.iteration for s in samples(p)] == list(range(since + 3))  # 3 steps, 3 samples


def test_control_file_switches_tracking_off_and_on(make_probe, monkeypatch):
    monkeypatch.setattr(probe_mod, "CONTROL_PERIOD", 0.0)
    p = make_probe()
    assert torch._C._len_torch_dispatch_stack() == 1
    p.config.control.write_text("off\n")
    train(3)
    assert not p.tracking and torch._C._len_torch_dispatch_stack() == 0
    rows_off = len(samples(p))
    kept = torch.ones(10_000)  # made untracked
    train(3)
    assert len(samples(p)) == rows_off  # no samples while off (CPU)
    p.config.control.write_text("on\n")
    train(2)
    assert p.tracking and torch._C._len_torch_dispatch_stack() == 1
    assert p.tracker.current >= 40_000  # the rescan found the untracked tensor
    del kept


def test_emulated_capacity_keeps_tracking_on_whatever_the_control_says(make_probe, monkeypatch):
    monkeypatch.setattr(probe_mod, "CONTROL_PERIOD", 0.0)
    p = make_probe(capacity=2**30)
    p.config.control.write_text("off\n")
    train(3)
    assert p.tracking


def test_excepthook_records_an_oom_and_chains(make_probe, capsys):
    p = make_probe(capacity=10_000)
    try:
        torch.empty(1_000_000)
    except torch.OutOfMemoryError:
        sys.excepthook(*sys.exc_info())
    record = json.loads(Path(f"{p.config.out}.exit").read_text())
    assert record["exception"] == "torch.OutOfMemoryError"
    assert record["requested_bytes"] == 4_000_000
    assert "Traceback" in capsys.readouterr().err  # the previous hook still printed it


def test_spawned_children_are_recognised():
    assert is_spawned_child(["python", "-c", "from multiprocessing.spawn import spawn_main"])
    assert is_spawned_child(["python", "-B", "-c", "x", "--multiprocessing-fork"])
    assert not is_spawned_child(["python", "train.py", "--lr", "0.1"])


def test_config_from_env_rejects_a_bad_capacity(tmp_path):
    assert ProbeConfig.from_env({}) is None
    with pytest.raises(ValueError, match="SLURM_MIG_CAPACITY_EMULATE='12G'"):
        ProbeConfig.from_env(
            {"SLURM_MIG_PROBE_OUT": str(tmp_path), "SLURM_MIG_CAPACITY_EMULATE": "12G"}
        )


# ---------------------------------------------------------------------------
# Injection into unmodified scripts (real subprocesses)


def run_injected(tmp_path: Path, script: str, *args: str, env: dict | None = None, **kw):
    path = tmp_path / "job.py"
    path.write_text(textwrap.dedent(script))
    full = dict(os.environ)
    full.update(
        PYTHONPATH=os.pathsep.join([str(INJECT), *(env or {}).pop("_extra_path", [])]),
        SLURM_MIG_PROBE_OUT=str(tmp_path / "probe.csv"),
        SLURM_MIG_PROBE_CTL=str(tmp_path / "ctl"),
    )
    full.update(env or {})
    return subprocess.run(
        [sys.executable, str(path), *args],
        capture_output=True,
        text=True,
        env=full,
        cwd=tmp_path,
        timeout=120,
        **kw,
    )


TRAIN_SCRIPT = """
    import sys, torch
    from torch import nn
    model = nn.Linear(16, 16)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for i in range(int(sys.argv[1])):
        model(torch.randn(8 * (i + 1), 16)).sum().backward()
        opt.step()
    print("final iteration", i)
"""


def test_injected_probe_samples_an_unmodified_script(tmp_path):
    done = run_injected(tmp_path, TRAIN_SCRIPT, "5")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "final iteration 4\n"
    rows = read_trace(tmp_path / "probe.csv")
    assert [s.iteration for s in rows] == [0, 1, 2, 3, 4]
    assert json.loads((tmp_path / "probe.csv.meta").read_text())["device"] == "cpu"


def test_injection_chain_loads_another_sitecustomize(tmp_path):
    other = tmp_path / "site"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import os\nos.environ['SITE_HOOK_RAN'] = 'yes'\n")
    script = TRAIN_SCRIPT.replace(
        'print("final iteration", i)', 'print(os.environ.get("SITE_HOOK_RAN"))'
    ).replace("import sys, torch", "import os, sys, torch")
    done = run_injected(tmp_path, script, "3", env={"_extra_path": [str(other)]})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "yes"
    assert len(read_trace(tmp_path / "probe.csv")) == 3


def test_no_probe_until_torch_is_imported(tmp_path):
    script = """
        import sys
        print("torch" in sys.modules, "slurm_mig.memory.probe" in sys.modules)
    """
    done = run_injected(tmp_path, script)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False False"
    assert not (tmp_path / "probe.csv").exists()


def test_no_probe_without_mig_run(tmp_path):
    done = run_injected(tmp_path, TRAIN_SCRIPT, "2", env={"SLURM_MIG_PROBE_OUT": ""})
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "probe.csv").exists()


def test_import_slurm_mig_and_step_stay_light(tmp_path):
    script = """
        import sys
        import slurm_mig
        slurm_mig.step()
        from slurm_mig import step
        step()
        heavy = [m for m in sys.modules if m.split(".")[0] in ("torch", "numpy", "statsmodels")]
        print(heavy)
    """
    done = run_injected(tmp_path, script, env={"SLURM_MIG_PROBE_OUT": ""})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


DATALOADER_SCRIPT = """
    import os, sys, torch
    from torch.utils.data import DataLoader, Dataset

    class Where(Dataset):
        def __len__(self):
            return 8
        def __getitem__(self, i):
            mem = sys.modules.get("slurm_mig.memory")
            probing = mem is not None and mem._active is not None
            return torch.tensor([os.getpid(), int(probing), int("SLURM_MIG_PROBE_OUT" in os.environ)])

    if __name__ == "__main__":
        loader = DataLoader(Where(), batch_size=2, num_workers=2,
                            multiprocessing_context=sys.argv[1])
        model = torch.nn.Linear(3, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        rows = []
        for batch in loader:
            rows.append(batch)
            model(batch.float()).sum().backward()
            opt.step()
        rows = torch.cat(rows)
        workers = sorted(set(rows[:, 0].tolist()) - {os.getpid()})
        print(len(workers), int(rows[:, 1].sum()), int(rows[:, 2].sum()))
"""


@pytest.mark.parametrize("start", ["spawn", "fork"])
def test_dataloader_workers_do_not_probe(tmp_path, start):
    done = run_injected(tmp_path, DATALOADER_SCRIPT, start)
    assert done.returncode == 0, done.stderr
    workers, probing, env_seen = map(int, done.stdout.split())
    assert workers == 2 and probing == 0 and env_seen == 0
    # four batches, one writer; a slow start (spawned workers importing torch) may add
    # timer samples before the optimizer takes over from iteration `since`
    meta = json.loads((tmp_path / "probe.csv.meta").read_text())
    assert meta["source"] == "optimizer"
    rows = read_trace(tmp_path / "probe.csv")
    assert [s.iteration for s in rows if s.iteration >= meta["since"]] == [
        meta["since"] + i for i in range(4)
    ]


def test_injected_emulated_oom_writes_the_exit_record(tmp_path):
    script = """
        import torch
        keep = [torch.ones(2**16) for _ in range(10)]  # 2.5 MiB
    """
    done = run_injected(tmp_path, script, env={"SLURM_MIG_CAPACITY_EMULATE": str(2**20)})
    assert done.returncode == 1
    assert "torch.OutOfMemoryError: emulated device out of memory" in done.stderr
    record = json.loads((tmp_path / "probe.csv.exit").read_text())
    assert record["requested_bytes"] == 5 * 2**18  # the fifth 256-KiB tensor was refused
    rows = read_trace(tmp_path / "probe.csv")
    assert rows and rows[-1].ooms == 1  # the last partial iteration carries the OOM
