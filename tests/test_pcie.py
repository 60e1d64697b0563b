"""The PCIe contention model (Eq. 1-3 of Tang et al.): values by hand, alpha recovered
from synthetic profiling runs with its fit quality, PCIe demand measured through the
fake NVML's throughput counters, and per-job demand/alpha from hints and the store."""

from __future__ import annotations

import math
import random
import sqlite3
import subprocess
import sys

import fake_pynvml as fake
import pytest

from slurm_mig.devices.base import DeviceUnavailable
from slurm_mig.devices.nvml import NvmlBackend
from slurm_mig.devices.simulated import SimulatedBackend
from slurm_mig.geometry import get_model
from slurm_mig.hints import parse_hints
from slurm_mig.pcie import (
    PCIE_MAX_A100,
    PcieError,
    ProfileRun,
    contention,
    fit_alpha,
    job_pcie,
    max_sharers,
    measure_demand,
    pcie_max_for,
    predicted_slowdowns,
    remaining_time,
    share,
    slowdown,
)
from slurm_mig.runtimes import SCHEMA_VERSION, RuntimeStore

# Table 2 of the paper
BLOOM560M = (1.25, 5.7)  # (alpha, GB/s)
BLOOM7B1 = (1.07, 17.65)


# ---------------------------------------------------------------------------
# Eq. 1-3 by hand


def test_eq2_by_hand_for_the_papers_jobs():
    # Bloom560m: 1.25 * 5.7 * n / 30.08 = 0.23687 n -> saturates past four copies
    assert slowdown(*BLOOM560M, 4) == 1.0  # 0.9475: within its share
    assert slowdown(*BLOOM560M, 5) == pytest.approx(1.25 * 5.7 * 5 / 30.08)  # 1.1844
    assert slowdown(*BLOOM560M, 5) == pytest.approx(1.18434, abs=1e-5)
    assert slowdown(*BLOOM560M, 7) == pytest.approx(1.65808, abs=1e-5)
    # Bloom7b1: 1.07 * 17.65 / 30.08 = 0.62784 per copy
    assert slowdown(*BLOOM7B1, 1) == 1.0
    assert slowdown(*BLOOM7B1, 2) == pytest.approx(1.25569, abs=1e-5)
    assert slowdown(*BLOOM7B1, 3) == pytest.approx(1.88353, abs=1e-5)


def test_eq2_jobs_that_are_not_pcie_bound_never_slow_down():
    assert slowdown(1.0, 0.0, 7) == 1.0
    assert slowdown(5.0, 30.0, 0) == 1.0  # nobody on the link


def test_eq2_scales_with_the_link():
    # twice the link (PCIe 5.0): the same n hurts half as much
    assert slowdown(*BLOOM7B1, 4, pcie_max=2 * PCIE_MAX_A100) == pytest.approx(
        slowdown(*BLOOM7B1, 2)
    )
    assert pcie_max_for(get_model("A100-40GB")) == PCIE_MAX_A100
    assert pcie_max_for(get_model("H100-80GB")) == 2 * PCIE_MAX_A100


def test_eq1_share_and_regressor_and_eq3():
    assert share(1) == PCIE_MAX_A100
    assert share(4) == pytest.approx(7.52)
    assert contention(5.7, 4) == pytest.approx(5.7 / 7.52)
    # Eq. 3: 1000 tokens left at 20 tokens/s alone, slowed 1.5x -> 75 s
    assert remaining_time(1000.0, 20.0, 1.5) == pytest.approx(75.0)


def test_predicted_slowdowns_count_only_pcie_bound_jobs():
    got = predicted_slowdowns([BLOOM7B1, BLOOM560M, (1.0, 0.0), (1.0, 0.0)])
    # n = 2 (the ResNets do not count)
    assert got == [pytest.approx(1.25569, abs=1e-5), 1.0, 1.0, 1.0]


@pytest.mark.parametrize("alpha,demand", [BLOOM560M, BLOOM7B1, (2.0, 3.0)])
@pytest.mark.parametrize("threshold", [1.0, 1.3, 2.0])
def test_max_sharers_is_the_largest_n_within_the_threshold(alpha, demand, threshold):
    k = max_sharers(alpha, demand, threshold)
    assert k >= 1
    assert slowdown(alpha, demand, k) <= threshold + 1e-12
    assert slowdown(alpha, demand, k + 1) > threshold


def test_max_sharers_by_hand_and_edges():
    assert max_sharers(*BLOOM560M) == 4  # Fig. 2a: the knee at four copies
    assert max_sharers(*BLOOM7B1) == 1
    assert max_sharers(*BLOOM7B1, threshold=1.3) == 2
    assert max_sharers(*BLOOM560M, threshold=0.9) == 0  # a slowdown is never below 1
    assert max_sharers(1.0, 0.0) > 10**6  # not PCIe-bound: no limit
    assert max_sharers(1.0, 40.0) == 0  # more than the link alone


def test_the_model_module_imports_no_heavy_dependency():
    code = (
        "import sys, slurm_mig.pcie as p; p.slowdown(1.25, 5.7, 5); "
        "print(sorted(m for m in ('numpy', 'statsmodels', 'pynvml', 'scipy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ---------------------------------------------------------------------------
# alpha by OLS (Eq. 1)


def _profiling_runs(alpha, demand, base=50.0, noise=0.02, reps=5, seed=0, top=7):
    """Runtimes of n = 1..top copies at once, as Eq. 2 says, with multiplicative noise."""
    rng = random.Random(seed)
    runs = []
    for n in range(1, top + 1):
        for _ in range(reps):
            ideal = base * slowdown(alpha, demand, n)
            runs.append(ProfileRun(n, ideal * math.exp(rng.gauss(0.0, noise))))
    return runs


@pytest.mark.parametrize("alpha,demand", [BLOOM560M, BLOOM7B1])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fit_alpha_recovers_alpha_from_noisy_profiling(alpha, demand, seed):
    runs = _profiling_runs(alpha, demand, seed=seed)
    fit = fit_alpha(runs, demand)
    assert fit.alpha == pytest.approx(alpha, abs=0.04)
    lo, hi = fit.ci95
    assert lo < alpha < hi  # the true value lies in the reported interval
    assert 0 < fit.stderr < 0.02
    assert fit.r2 > 0.9 and fit.r2_uncentered > 0.99
    # the uncontended copies (Bloom560m n <= 4, Bloom7b1 n = 1) are left out, but
    # for a rare noisy one that reads as slowed down
    left_out = 4 * 5 if alpha == BLOOM560M[0] else 5
    assert fit.n + fit.dropped == 35 and left_out - 2 <= fit.dropped <= left_out
    assert "alpha" in fit.summary() and "R^2" in fit.summary()


def test_fit_alpha_is_exact_on_noise_free_runs():
    runs = _profiling_runs(*BLOOM7B1, noise=0.0, reps=1)
    fit = fit_alpha(runs, BLOOM7B1[1])
    assert fit.alpha == pytest.approx(1.07, rel=1e-12)
    assert fit.stderr == pytest.approx(0.0, abs=1e-9)
    assert fit.r2 == pytest.approx(1.0)
    assert fit.base_runtime == pytest.approx(50.0)


def test_fit_alpha_takes_pairs_and_mappings_and_a_given_base():
    pairs = [(5, 59.217), (6, 71.06), (7, 82.904)]  # Bloom560m, base 50 s, alpha 1.25
    a = fit_alpha(pairs, 5.7, base_runtime=50.0)
    b = fit_alpha([{"n": n, "runtime": r} for n, r in pairs], 5.7, base_runtime=50.0)
    assert a.alpha == pytest.approx(1.25, abs=1e-3)
    assert a == b


def test_fit_alpha_with_every_run_regresses_on_the_clamped_points_too():
    runs = _profiling_runs(*BLOOM560M, noise=0.0, reps=1)
    clean = fit_alpha(runs, 5.7)
    everything = fit_alpha(runs, 5.7, min_slowdown=0.0)
    assert everything.n == 7 and everything.dropped == 0
    # the max(1, .) floor biases a straight line through the origin: worse fit
    assert everything.r2 < clean.r2


def test_fit_alpha_errors_name_the_fix():
    with pytest.raises(PcieError, match="base_runtime"):
        fit_alpha([(5, 60.0), (6, 70.0)], 5.7)
    with pytest.raises(PcieError, match="more copies"):
        fit_alpha([(1, 50.0), (2, 50.0), (7, 80.0)], 5.7)
    with pytest.raises(PcieError, match="demand"):
        fit_alpha([(1, 50.0)], 0.0)
    with pytest.raises(PcieError, match="sample #2"):
        fit_alpha([(1, 50.0), (0, 50.0)], 5.7)
    with pytest.raises(PcieError, match="'n'"):
        fit_alpha([{"copies": 1}], 5.7)


# ---------------------------------------------------------------------------
# PCIe demand through NVML (the fake)


@pytest.fixture
def nvml():
    fake.fake_reset(["A100-40GB", "A100-40GB"])
    yield NvmlBackend(fake)
    assert fake.fake_init_depth() == 0


def _no_sleep(_s):
    pass


def test_measure_demand_averages_the_counters_in_gb_per_s(nvml):
    # host to device 5.7 GB/s on average (KB/s as NVML reports), little back
    rx = [5_000_000, 6_000_000, 6_100_000, 5_700_000]
    tx = [100_000, 300_000, 200_000, 200_000]
    fake.fake_set_pcie_throughput(1, tx_kbps=tx, rx_kbps=rx)
    fake.fake_clear_calls()
    d = measure_demand(nvml, seconds=0.4, interval=0.1, gpu=1, sleep=_no_sleep)
    assert d.samples == 4
    assert d.rx_gbps == pytest.approx(5.7)
    assert d.tx_gbps == pytest.approx(0.2)
    assert d.gbps == pytest.approx(5.7)  # the busier direction
    assert d.peak_gbps == pytest.approx(6.1)
    assert fake.fake_calls().count("nvmlDeviceGetPcieThroughput") == 8


def test_measure_demand_directions(nvml):
    fake.fake_set_pcie_throughput(0, tx_kbps=[1_000_000, 4_000_000], rx_kbps=2_000_000)
    got = {
        d: measure_demand(nvml, seconds=0.2, interval=0.1, direction=d, sleep=_no_sleep).gbps
        for d in ("max", "rx", "tx", "sum")
    }
    # samples (tx, rx) GB/s: (1, 2) then (4, 2) for every later reading
    assert got["max"] == pytest.approx((2 + 4) / 2)
    assert got["rx"] == pytest.approx(2.0)
    assert got["tx"] == pytest.approx(4.0)  # the queue is spent: 4, 4
    assert got["sum"] == pytest.approx(6.0)


def test_measure_demand_sleeps_between_samples(nvml):
    slept = []
    measure_demand(nvml, seconds=1.0, interval=0.25, sleep=slept.append)
    assert slept == [0.25, 0.25, 0.25]  # 4 samples, a pause between each


def test_measure_demand_on_a_raw_handle():
    fake.fake_reset(["A100-40GB"])
    fake.fake_set_pcie_throughput(0, tx_kbps=0, rx_kbps=17_650_000)
    fake.nvmlInit()
    try:
        h = fake.nvmlDeviceGetHandleByIndex(0)
        d = measure_demand(h, seconds=0.1, interval=0.1, nvml=fake, sleep=_no_sleep)
    finally:
        fake.nvmlShutdown()
    assert d.gbps == pytest.approx(17.65)


def test_measure_demand_maps_nvml_errors(nvml):
    fake.fake_fail("nvmlDeviceGetPcieThroughput", fake.NVML_ERROR_GPU_IS_LOST)
    with pytest.raises(DeviceUnavailable) as err:
        measure_demand(nvml, seconds=0.1, interval=0.1, sleep=_no_sleep)
    assert "PCIe" in str(err.value) and err.value.hint


def test_the_fake_counters_are_per_gpu_not_per_mig_device():
    fake.fake_reset(["A100-40GB"])
    fake.nvmlInit()
    try:
        h = fake.nvmlDeviceGetHandleByIndex(0)
        with pytest.raises(fake.NVMLError) as err:
            fake.nvmlDeviceGetPcieThroughput(h, 2)  # NVML_PCIE_UTIL_COUNT is no counter
        assert err.value.value == fake.NVML_ERROR_INVALID_ARGUMENT
        backend = NvmlBackend(fake)
        backend.create(0, "1g.5gb", get_model("A100-40GB").profile("1g.5gb").placements[0])
        mig = fake.nvmlDeviceGetMigDeviceHandleByIndex(h, 0)
        with pytest.raises(PcieError, match="NVML"):
            measure_demand(mig, seconds=0.1, interval=0.1, nvml=fake, sleep=_no_sleep)
    finally:
        fake.nvmlShutdown()


def test_measure_demand_refuses_what_it_cannot_measure(tmp_path):
    sim = SimulatedBackend(tmp_path, ["A100-40GB"])
    with pytest.raises(PcieError, match="no PCIe counters"):
        measure_demand(sim, seconds=0.1, interval=0.1)
    with pytest.raises(PcieError, match="20 ms|0.02"):
        measure_demand(NvmlBackend(fake), seconds=1.0, interval=0.001)
    with pytest.raises(PcieError, match="direction"):
        measure_demand(NvmlBackend(fake), direction="up")


# ---------------------------------------------------------------------------
# Per-job demand and alpha: learned first, then hints


def test_job_pcie_from_hints():
    p = job_pcie(parse_hints("train mig:pcie=5.7,alpha=1.25"))
    assert (p.demand, p.alpha, p.demand_source, p.alpha_source) == (5.7, 1.25, "hint", "hint")
    assert p.bound and p.slowdown(5) == pytest.approx(slowdown(*BLOOM560M, 5))
    none = job_pcie(parse_hints("no hints here"))
    assert (none.demand, none.alpha, none.bound) == (0.0, 1.0, False)


def test_job_pcie_learned_beats_hints_per_field(tmp_path):
    store = RuntimeStore(tmp_path / "profiles.sqlite")
    hints = parse_hints("mig:key=bloom,pcie=9.0,alpha=2.0")
    store.record_pcie_demand("bloom", "A100-40GB", 5.5, job_id="1")
    store.record_pcie_demand("bloom", "A100-40GB", 5.9, job_id="2")
    store.record_pcie_demand("bloom", "A100-40GB", 5.7, job_id="3")
    p = job_pcie(hints, store, "bloom", "A100-40GB")
    assert (p.demand, p.demand_source) == (5.7, "learned")  # the median
    assert (p.alpha, p.alpha_source) == (2.0, "hint")  # no alpha learned yet
    store.record_pcie_alpha("bloom", "A100-40GB", 1.25, stderr=0.01, r2=0.99, runs=15)
    p = job_pcie(hints, store, "bloom", "A100-40GB")
    assert (p.alpha, p.alpha_source) == (1.25, "learned")
    # another GPU model learned nothing: the hints hold there
    assert job_pcie(hints, store, "bloom", "H100-80GB").demand_source == "hint"


def test_store_upgrades_a_schema_1_file_keeping_its_runtimes(tmp_path):
    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path)
    db.executescript(
        "CREATE TABLE runtimes (job_id TEXT NOT NULL, restart INTEGER NOT NULL, key TEXT "
        "NOT NULL, model TEXT NOT NULL, size INTEGER NOT NULL, seconds REAL NOT NULL, "
        "finished REAL NOT NULL, PRIMARY KEY (job_id, restart));"
        "CREATE TABLE memory (key TEXT NOT NULL, job_id TEXT NOT NULL, need_bytes INTEGER "
        "NOT NULL, recorded REAL NOT NULL, PRIMARY KEY (key, job_id));"
        "INSERT INTO runtimes VALUES ('7', 0, 'bloom', 'A100-40GB', 1, 50.0, 1.0);"
        "PRAGMA user_version = 1;"
    )
    db.close()
    store = RuntimeStore(path)
    assert store.pcie_demand("bloom", "A100-40GB") is None
    store.record_pcie_demand("bloom", "A100-40GB", 5.7, job_id="7")
    assert store.pcie_demand("bloom", "A100-40GB") == 5.7
    assert store.observations("bloom", "A100-40GB") == {1: [50.0]}
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_store_rejects_bad_pcie_values(tmp_path):
    store = RuntimeStore(tmp_path / "p.sqlite")
    with pytest.raises(ValueError, match="gbps"):
        store.record_pcie_demand("k", "A100-40GB", -1.0, job_id="1")
    with pytest.raises(ValueError, match="alpha"):
        store.record_pcie_alpha("k", "A100-40GB", 0.0)
