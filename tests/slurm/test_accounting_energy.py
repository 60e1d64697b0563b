"""Measured energy in accounting (issue 22): the split rule of ``energysplit``, the NVML
energy counter, the accounting store's measured column and its migration, and the report
that says which figure is measured and which modelled."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import fake_pynvml as fake
import pytest

from slurm_mig.cli import main
from slurm_mig.devices.base import DeviceUnavailable
from slurm_mig.devices.nvml import NvmlBackend
from slurm_mig.devices.simulated import SimulatedBackend
from slurm_mig.slurm import accounting
from slurm_mig.slurm import energysplit as es

W = 400.0  # an A100's largest board power (power.MAX_W)


# -- the split rule -----------------------------------------------------------------------


def test_the_energy_between_two_readings_goes_to_the_runs_by_slices():
    ledger, problem = es.advance(None, 1_000, 0.0, {}, W)
    assert problem is None and ledger == es.Ledger(1_000, 0.0, {})
    ledger = es.start(ledger, "a.0")
    ledger, _ = es.advance(ledger, 8_000, 10.0, {"a.0": 1}, W)
    ledger = es.start(ledger, "b.0")
    # 7000 mJ while a (1 slice), b (2 slices) and c (4 slices, no entry: it started
    # before the ledger) ran: c counts in the sum but accrues nothing
    ledger, _ = es.advance(ledger, 15_000, 20.0, {"a.0": 1, "b.0": 2, "c.0": 4}, W)
    ledger, a = es.finish(ledger, "a.0")
    assert a == 7_000 + 1_000 and dict(ledger.runs) == {"b.0": 2_000}
    ledger, c = es.finish(ledger, "c.0")
    assert c is None  # not seen whole: modelled
    # an entry of a run no longer on the GPU (its Epilog ran without the lock) is dropped
    ledger, _ = es.advance(ledger, 16_000, 21.0, {}, W)
    assert dict(ledger.runs) == {}


@pytest.mark.parametrize(
    ("now_mj", "what"), [(500, "went back"), (1_000 + int(2 * W * 12 * 1000) + 1, "jumped")]
)
def test_a_counter_that_goes_back_or_jumps_starts_the_ledger_afresh(now_mj, what):
    ledger = es.start(es.Ledger(1_000, 0.0), "a.0")
    after, problem = es.advance(ledger, now_mj, 11.0, {"a.0": 3}, W)
    assert what in problem and after == es.Ledger(now_mj, 11.0, {})
    assert es.measured_joules(3_000.0, 1_000, now_mj, 11.0, W)[0] is None


def test_a_run_is_never_given_more_than_its_window_nor_a_negative_energy():
    assert es.measured_joules(5_000.0, 1_000, 4_000, 10.0, W) == (3.0, None)
    assert es.measured_joules(-5.0, 1_000, 4_000, 10.0, W) == (0.0, None)
    assert es.measured_joules(None, 1_000, 4_000, 10.0, W) == (None, None)


@pytest.mark.parametrize("value", [-1, 2**64, True, 1.5, "7", None])
def test_a_counter_reading_is_a_64_bit_unsigned_count(value):
    assert es.reading(value) is None
    assert es.reading(2**64 - 1) == 2**64 - 1


@pytest.mark.parametrize(
    "data",
    [{"mj": -1, "t": 0, "runs": {}}, {"mj": 1, "t": 0, "runs": {"a.0": -2.0}}, {"mj": 1}],
)
def test_a_damaged_ledger_is_refused(data):
    with pytest.raises((ValueError, KeyError)):
        es.Ledger.from_json(data)


# -- the counter from the backends ------------------------------------------------------


def test_the_nvml_backend_reads_the_gpus_energy_counter():
    fake.fake_reset(["A100-40GB", "T4"])
    fake._sys.gpus[0].energy_mj = 123_456_789
    backend = NvmlBackend(fake)
    assert backend.energy_mj(0) == 123_456_789
    assert backend.energy_mj(1) is None  # NOT_SUPPORTED: no counter
    fake.fake_fail("nvmlDeviceGetTotalEnergyConsumption", fake.NVML_ERROR_GPU_IS_LOST)
    with pytest.raises(DeviceUnavailable, match="read the energy counter"):
        backend.energy_mj(0)
    assert fake.fake_init_depth() == 0


def test_a_simulated_gpu_has_no_energy_counter(tmp_path):
    backend = SimulatedBackend(tmp_path / "sim", models=["A100-40GB"])
    assert backend.energy_mj(0) is None


# -- the store and the report --------------------------------------------------------------


def _line(job: str, **extra) -> str:
    record = {
        "job_id": job,
        "restart": 0,
        "key": "k",
        "gpu": 0,
        "model": "A100-40GB",
        "profile": "3g.20gb",
        "seconds": 100.0,
        "end": 1000.0,
        "user": extra.pop("user", "alice"),
        "account": "phys",
        **extra,
    }
    return json.dumps(record) + "\n"


def test_measured_and_modelled_runs_are_stored_and_reported_as_such(tmp_path, capsys):
    log = tmp_path / "accounting.jsonl"
    log.write_text(
        _line("1", measured_j=36_000.0)
        + _line("2", measured_j=7_200.0)
        + _line("3", user="bob")
        + _line("4", user="carol", measured_j=3_600.0)
        + _line("5", user="carol")
        + _line("6", user="dave", measured_j=1e9)  # beyond twice 400 W for 100 s
    )
    assert accounting.gather(tmp_path, {"n1": log}) == 6
    got = {r["user"]: r for r in accounting.report(tmp_path, "user")}
    model = accounting.energy_joules("A100-40GB", 3, 100.0)
    assert got["alice"]["energy"] == "measured" and got["alice"]["measured_runs"] == 2
    assert got["alice"]["energy_kwh"] == round(43_200.0 / 3.6e6, 6)
    assert got["alice"]["modelled_kwh"] == round(2 * model / 3.6e6, 6)
    assert got["bob"]["energy"] == "modelled"
    assert got["bob"]["energy_kwh"] == got["bob"]["modelled_kwh"] == round(model / 3.6e6, 6)
    assert got["carol"]["energy"] == "mixed"
    assert got["carol"]["energy_kwh"] == round((3_600.0 + model) / 3.6e6, 6)
    assert got["dave"]["energy"] == "modelled"  # an implausible figure is not kept

    cfg = tmp_path / "config.toml"
    cfg.write_text(
        f'[nodes]\n"n1" = ["A100-40GB"]\n[paths]\nstate_dir = "{tmp_path}"\n'
        f'run_dir = "{tmp_path}/run"\nkey_file = "{tmp_path}/key"\n'
        '[device]\nbackend = "simulated"\n'
    )
    assert main(["report", "--config", str(cfg), "-o", "%k %.e %S %.E"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["USER", "KWH*", "SOURCE", "MODEL-KWH"]
    rows = {line.split()[0]: line.split()[1:] for line in lines[1:] if not line.startswith("*")}
    assert rows["alice"] == ["0.01200", "measured", f"{2 * model / 3.6e6:.5f}"]
    assert rows["bob"][1] == "modelled" and rows["carol"][1] == "mixed"
    assert lines[-1].startswith("* energy modelled") and "measured" in lines[-1]


# accounting.sqlite as slurm-mig wrote it at schema version 1 (before measured energy)
ACCOUNTING_V1 = f"""
{accounting.RUNS_TABLE.format(schema="")};
{accounting.OFFSETS_TABLE.format(schema="")};
CREATE INDEX runs_by_end ON runs (end);
INSERT INTO runs VALUES ('7', 0, 'n1', 'alice', 'phys', 'k', 'A100-40GB', 0, '3g.20gb',
    3, 100.0, 300.0, 5000.0, 'modelled', 1000.0);
INSERT INTO runs VALUES ('8', 0, 'n1', 'bob', 'chem', 'k', 'A100-40GB', 1, '1g.5gb',
    1, 50.0, 50.0, 900.0, 'modelled', 2000.0);
PRAGMA user_version = 1;
"""


def _columns(path: Path) -> list[str]:
    db = sqlite3.connect(path)
    try:
        return [r[1] for r in db.execute("PRAGMA table_info(runs)")]
    finally:
        db.close()


def test_a_store_of_version_1_is_migrated_and_its_rows_stay_modelled(tmp_path):
    path = tmp_path / accounting.STORE
    db = sqlite3.connect(path)
    db.executescript(ACCOUNTING_V1)
    db.close()
    assert "measured_j" not in _columns(path)
    got = {r["user"]: r for r in accounting.report(tmp_path, "user")}
    assert {u: (r["runs"], r["energy"], r["energy_kwh"]) for u, r in got.items()} == {
        "alice": (1, "modelled", round(5000.0 / 3.6e6, 6)),
        "bob": (1, "modelled", round(900.0 / 3.6e6, 6)),
    }
    assert _columns(path)[-1] == "measured_j"
    db = sqlite3.connect(path)
    try:
        assert db.execute("PRAGMA user_version").fetchone()[0] == accounting.schema().version
        assert accounting.schema().version == 2
        assert db.execute(
            "SELECT job_id, energy_source, measured_j FROM runs ORDER BY job_id"
        ).fetchall() == [("7", "modelled", None), ("8", "modelled", None)]
    finally:
        db.close()
    # and a new run goes in beside them with its measured figure
    log = tmp_path / "accounting.jsonl"
    log.write_text(_line("9", measured_j=1_000.0))
    assert accounting.gather(tmp_path, {"n1": log}) == 1
    assert {r["user"]: r["energy"] for r in accounting.report(tmp_path, "user")} == {
        "alice": "mixed",
        "bob": "modelled",
    }
