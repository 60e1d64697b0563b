"""The owner rule (`slurm_mig.owner`): a job's uid, the same on the nodes and the
controller, and the runtime store's migration of owners stored as user names."""

from __future__ import annotations

import sqlite3

from slurm_mig.owner import MAX_UID, PRIOR, owner_of, valid_uid
from slurm_mig.runtimes import SCHEMA_VERSION, RuntimeStore

GIB = 1 << 30


def test_an_owner_is_a_uid_and_anything_else_is_no_owner():
    assert owner_of(0) == "uid:0" and owner_of(MAX_UID) == f"uid:{MAX_UID}"
    for bad in (None, -1, MAX_UID + 1, True, "1000", 1000.0, "CAMPUS\\mallory"):
        assert not valid_uid(bad) and owner_of(bad) == PRIOR, bad


def test_owners_stored_as_names_become_uids_and_unknown_names_never_the_prior(tmp_path):
    path = tmp_path / "profiles.sqlite"
    RuntimeStore(path).record_memory("warm", 1, "0")  # a store of the current layout
    db = sqlite3.connect(path)
    rows = [("root", 4 * GIB), ("no-such-user-slurm-mig", 39 * GIB), ("uid:7", GIB)]
    for i, (owner, need) in enumerate(rows):
        db.execute(
            "INSERT INTO memory (key, job_id, need_bytes, recorded, owner) VALUES (?, ?, ?, 1.0, ?)",
            ("resnet", str(i), need, owner),
        )
        db.execute(
            "INSERT INTO runtimes (job_id, restart, key, model, size, seconds, finished, owner) "
            "VALUES (?, 0, 'resnet', 'A100-40GB', 1, 60.0, 1.0, ?)",
            (str(i), owner),
        )
    db.execute("PRAGMA user_version = 3")  # as schema 3 left it: owners by user name
    db.commit()
    db.close()
    store = RuntimeStore(path)
    assert store.memory_need("resnet", owner_of(0)) == 4 * GIB  # root's, by this host's users
    assert store.observations("resnet", "A100-40GB", owner_of(0)) == {1: [60.0]}
    assert store.memory_need("resnet", owner_of(7)) == GIB  # already a uid: as it was
    assert store.memory_need("resnet", PRIOR) is None  # an unknown name is nobody's prior
    db = sqlite3.connect(path)
    try:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        left = db.execute("SELECT owner FROM memory WHERE need_bytes = ?", (39 * GIB,))
        assert left.fetchall() == [("no-such-user-slurm-mig",)]
    finally:
        db.close()
