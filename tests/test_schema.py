"""Schema versions of the sqlite stores (profiles.sqlite, accounting.sqlite,
reports.sqlite): an older file is migrated in place, its rows kept, in one transaction;
a file of a newer version is refused with one line naming it, its version and the fix,
and is left byte-identical."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from slurm_mig import storeschema
from slurm_mig.cli import main
from slurm_mig.daemon.receiver import REPORTS_SCHEMA, ReportDB
from slurm_mig.runtimes import SCHEMA, SCHEMA_VERSION, RuntimeStore, StoreError
from slurm_mig.slurm import accounting

# profiles.sqlite as slurm-mig wrote it at schema 1 (no pcie tables, no owners)
PROFILES_V1 = """
CREATE TABLE runtimes (job_id TEXT NOT NULL, restart INTEGER NOT NULL, key TEXT NOT NULL,
    model TEXT NOT NULL, size INTEGER NOT NULL, seconds REAL NOT NULL,
    finished REAL NOT NULL, PRIMARY KEY (job_id, restart));
CREATE INDEX runtimes_by_kind ON runtimes (key, model, size);
CREATE TABLE memory (key TEXT NOT NULL, job_id TEXT NOT NULL, need_bytes INTEGER NOT NULL,
    recorded REAL NOT NULL, PRIMARY KEY (key, job_id));
INSERT INTO runtimes VALUES ('41', 0, 'resnet50', 'A100-40GB', 7, 100.0, 5.0);
INSERT INTO runtimes VALUES ('42', 1, 'resnet50', 'A100-40GB', 3, 180.0, 6.0);
INSERT INTO memory VALUES ('resnet50', '41', 1073741824, 5.0);
"""

# accounting.sqlite before it had a version (user_version 0)
ACCOUNTING_V0 = f"""
{accounting.RUNS_TABLE.format(schema="")};
{accounting.OFFSETS_TABLE.format(schema="")};
INSERT INTO runs VALUES ('7', 0, 'n1', 'alice', 'phys', 'k', 'A100-40GB', 0, '3g.20gb',
    3, 100.0, 300.0, 5000.0, 'modelled', 1000.0);
INSERT INTO runs VALUES ('8', 0, 'n1', 'bob', 'chem', 'k', 'A100-40GB', 1, '1g.5gb',
    1, 50.0, 50.0, 900.0, 'modelled', 2000.0);
INSERT INTO offsets VALUES ('/run/slurm-mig/n1/private/accounting.jsonl', 12, 345);
"""


def _make(path: Path, script: str, version: int | None = None) -> None:
    db = sqlite3.connect(path)
    db.executescript(script)
    if version is not None:
        db.execute(f"PRAGMA user_version = {version}")
    db.commit()
    db.close()


def _version(path: Path) -> int:
    db = sqlite3.connect(path)
    try:
        return db.execute("PRAGMA user_version").fetchone()[0]
    finally:
        db.close()


def _newer(path: Path, version: int) -> bytes:
    """A store of a future slurm-mig (a table of its own, a rollback journal: any write,
    even a journal-mode switch, would show in the bytes); returns its bytes."""
    _make(path, "CREATE TABLE future (x INTEGER); INSERT INTO future VALUES (1);", version)
    return path.read_bytes()


def _untouched(path: Path, before: bytes) -> None:
    assert path.read_bytes() == before
    for suffix in ("-wal", "-journal"):
        side = path.with_name(path.name + suffix)
        assert not side.exists() or side.stat().st_size == 0


@pytest.mark.parametrize("stamped", [0, 1], ids=["unversioned", "version-1"])
def test_a_profiles_store_of_schema_1_is_migrated_with_its_rows(tmp_path, stamped):
    path = tmp_path / "profiles.sqlite"
    _make(path, PROFILES_V1, stamped)
    store = RuntimeStore(path)
    assert store.observations("resnet50", "A100-40GB") == {3: [180.0], 7: [100.0]}
    assert store.memory_need("resnet50") == 1 << 30
    assert _version(path) == SCHEMA_VERSION == SCHEMA.version == 5
    # the later steps are there: owners (old rows are the site-wide prior) and PCIe
    assert store.observations("resnet50", "A100-40GB", "") == {3: [180.0], 7: [100.0]}
    store.record_pcie_demand("resnet50", "A100-40GB", 12.5, "41")
    assert store.pcie_demand("resnet50", "A100-40GB") == 12.5


def test_a_new_profiles_store_has_the_current_version(tmp_path):
    path = tmp_path / "state" / "profiles.sqlite"
    RuntimeStore(path).record("k", "A30-24GB", 1, 5.0, "1", 0, 1.0, owner="alice")
    assert _version(path) == SCHEMA_VERSION


def test_a_newer_profiles_store_is_refused_and_left_as_it_was(tmp_path):
    path = tmp_path / "profiles.sqlite"
    before = _newer(path, SCHEMA_VERSION + 1)
    store = RuntimeStore(path)
    with pytest.raises(StoreError) as err:
        store.record("k", "A30-24GB", 1, 5.0, "1", 0, 1.0, owner="alice")
    text = str(err.value)
    assert "\n" not in text and str(path) in text
    assert f"schema version {SCHEMA_VERSION + 1}" in text
    assert "upgrade slurm-mig or move the file away" in text
    with pytest.raises(StoreError):
        store.observations("k", "A30-24GB")
    _untouched(path, before)


@pytest.mark.parametrize("opener", ["report", "gather", "receiver"])
def test_an_unversioned_accounting_store_is_migrated_with_its_rows(tmp_path, opener):
    path = tmp_path / accounting.STORE
    _make(path, ACCOUNTING_V0)
    if opener == "report":
        rows = accounting.report(tmp_path, by="user")
        assert [(r["user"], r["runs"]) for r in rows] == [("alice", 1), ("bob", 1)]
    elif opener == "gather":
        assert accounting.gather(tmp_path, {}) == 0
    else:
        ReportDB(tmp_path).prune()
        assert _version(tmp_path / "reports.sqlite") == REPORTS_SCHEMA.version == 1
    assert _version(path) == accounting.schema().version == 2
    db = sqlite3.connect(path)
    try:
        assert db.execute("SELECT job_id FROM runs ORDER BY job_id").fetchall() == [("7",), ("8",)]
        assert db.execute("SELECT pos FROM offsets").fetchall() == [(345,)]
        indexes = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='index'")}
        assert "runs_by_end" in indexes
    finally:
        db.close()
    # and it is read as before
    assert [r["runs"] for r in accounting.report(tmp_path, by="profile", since=1500.0)] == [1]


@pytest.mark.parametrize("opener", ["report", "gather", "receiver"])
def test_a_newer_accounting_store_is_refused_and_left_as_it_was(tmp_path, opener):
    path = tmp_path / accounting.STORE
    before = _newer(path, 3)
    with pytest.raises(storeschema.SchemaError) as err:
        if opener == "report":
            accounting.report(tmp_path)
        elif opener == "gather":
            accounting.gather(tmp_path, {})
        else:
            ReportDB(tmp_path).store([])
    text = str(err.value)
    assert text.startswith(f"{path}: accounting store schema version 3 is newer")
    assert text.endswith("(upgrade slurm-mig or move the file away)")
    _untouched(path, before)
    assert not (tmp_path / "reports.sqlite").exists()  # refused before anything is made


def test_report_refuses_a_newer_accounting_store_in_one_line(tmp_path, capsys):
    cfg = tmp_path / "config.toml"
    cfg.write_text(
        f'[nodes]\n"n1" = ["A100-40GB"]\n[paths]\nstate_dir = "{tmp_path}"\n'
        f'run_dir = "{tmp_path}/run"\nkey_file = "{tmp_path}/key"\n'
        '[device]\nbackend = "simulated"\n'
    )
    before = _newer(tmp_path / accounting.STORE, 5)
    assert main(["report", "--config", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("slurm-mig: error: ")
    assert "schema version 5" in err and "move the file away" in err
    _untouched(tmp_path / accounting.STORE, before)


def test_a_newer_report_store_is_refused(tmp_path):
    path = tmp_path / "reports.sqlite"
    before = _newer(path, 9)
    with pytest.raises(storeschema.SchemaError, match="report store schema version 9"):
        ReportDB(tmp_path).prune()
    _untouched(path, before)


def test_a_migration_is_one_transaction(tmp_path):
    """A step that fails leaves the file at its old version with none of the steps
    before it applied; run again once fixed, every step runs."""
    path = tmp_path / "s.sqlite"
    _make(path, "CREATE TABLE kept (x INTEGER); INSERT INTO kept VALUES (1);")
    broken = {"fail": True}

    def step2(db, prefix):
        if broken["fail"]:
            raise sqlite3.OperationalError("disk I/O error")
        db.execute(f"CREATE TABLE {prefix}two (x INTEGER)")

    schema = storeschema.Schema(
        "test store", {1: storeschema.script("CREATE TABLE {schema}one (x INTEGER)"), 2: step2}
    )
    db = sqlite3.connect(path, isolation_level=None)
    with pytest.raises(sqlite3.OperationalError):
        storeschema.migrate(db, schema, path)
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert tables == {"kept"} and _version(path) == 0
    broken["fail"] = False
    assert storeschema.migrate(db, schema, path) == 0
    assert storeschema.migrate(db, schema, path) == 2  # nothing left to do
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    db.close()
    assert tables == {"kept", "one", "two"} and _version(path) == 2


def test_a_file_that_is_no_store_is_named(tmp_path):
    path = tmp_path / accounting.STORE
    path.write_bytes(b"not a database at all, just text " * 10)
    with pytest.raises(storeschema.SchemaError, match="not a slurm-mig store"):
        accounting.report(tmp_path)
