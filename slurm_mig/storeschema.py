"""Schema versions of slurm-mig's sqlite stores, and their migration.

Each store file says which layout it has in SQLite's ``PRAGMA user_version`` (0 in a
file that predates versioning). Opening a store first reads that number without writing
(a read-only connection): a file of a *newer* version than this slurm-mig knows is
refused with one line and never written, so that going back to an older slurm-mig cannot
damage what a newer one wrote. An older file is then migrated in place, every step from
its version to the current one and the new version number in one transaction (all or
nothing; a second process waits for it and finds the work done). Steps are idempotent
(``CREATE ... IF NOT EXISTS``, a column added only when missing), so a file of version 0
whose tables are already those of a later step is stamped without change.

Stdlib only: the runtime store is opened on the planner's and the nodes' paths.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

Step = Callable[[sqlite3.Connection, str], None]  # (connection, schema prefix "" or "acct.")


class SchemaError(ValueError):
    """A store file of a newer schema than this slurm-mig knows (or not a store)."""


@dataclass(frozen=True)
class Schema:
    """The layouts of one store: ``steps[v]`` takes a file of version v - 1 to v."""

    what: str  # "runtime store", as messages name it
    steps: Mapping[int, Step]

    @property
    def version(self) -> int:
        """The version this slurm-mig writes."""
        return max(self.steps)


def script(sql: str) -> Step:
    """A step of ``;``-separated statements; ``{schema}`` in them is the prefix."""

    def run(db: sqlite3.Connection, prefix: str) -> None:
        for statement in sql.format(schema=prefix).split(";"):
            if statement.strip():
                db.execute(statement)

    return run


def add_column(table: str, column: str, decl: str) -> Step:
    """A step that adds ``column`` to ``table`` unless it is there already."""

    def run(db: sqlite3.Connection, prefix: str) -> None:
        have = {row[1] for row in db.execute(f"PRAGMA {prefix}table_info({table})")}
        if column not in have:
            db.execute(f"ALTER TABLE {prefix}{table} ADD COLUMN {column} {decl}")

    return run


def steps(*parts: Step) -> Step:
    """Several steps as one."""

    def run(db: sqlite3.Connection, prefix: str) -> None:
        for part in parts:
            part(db, prefix)

    return run


def too_new(path: Path | str, schema: Schema, version: int) -> SchemaError:
    """The one-line refusal of a file of ``version`` (newer than ``schema.version``)."""
    return SchemaError(
        f"{path}: {schema.what} schema version {version} is newer than this slurm-mig "
        f"understands ({schema.version}); not opened, not written (upgrade slurm-mig or "
        "move the file away)"
    )


def file_version(path: Path | str, timeout: float = 5.0) -> int | None:
    """The ``user_version`` of an existing store file, read without writing anything,
    waiting at most ``timeout`` seconds for a lock (then sqlite3.OperationalError, as
    the store's own connection would); None when there is no file (or an empty one:
    SQLite makes a new store of it)."""
    p = Path(path)
    try:
        if p.stat().st_size == 0:
            return None
    except FileNotFoundError:
        return None
    db = sqlite3.connect(f"{p.resolve().as_uri()}?mode=ro", uri=True, timeout=timeout)
    try:
        return int(db.execute("PRAGMA user_version").fetchone()[0])
    except sqlite3.OperationalError:  # locked, or unreadable: not a verdict on the file
        raise
    except sqlite3.DatabaseError as exc:
        raise SchemaError(f"{p}: not a slurm-mig store ({exc}; move the file away)") from None
    finally:
        db.close()


def check_file(path: Path | str, schema: Schema, timeout: float = 5.0) -> int | None:
    """``file_version``, refusing a file newer than ``schema`` (``SchemaError``)."""
    version = file_version(path, timeout)
    if version is not None and version > schema.version:
        raise too_new(path, schema, version)
    return version


def migrate(db: sqlite3.Connection, schema: Schema, path: Path | str, prefix: str = "") -> int:
    """Bring the store on ``db`` (``prefix``: an attached one, "acct.") to
    ``schema.version`` in one transaction; returns the version it had. Refuses a newer
    one (``SchemaError``), writing nothing. A file at the version takes one read."""
    (old,) = db.execute(f"PRAGMA {prefix}user_version").fetchone()
    if old == schema.version:
        return int(old)
    db.execute("BEGIN IMMEDIATE")  # then read again: another process may have migrated
    try:
        (old,) = db.execute(f"PRAGMA {prefix}user_version").fetchone()
        if old > schema.version:
            raise too_new(path, schema, old)
        for version in range(old + 1, schema.version + 1):
            schema.steps[version](db, prefix)
        if old != schema.version:
            db.execute(f"PRAGMA {prefix}user_version = {int(schema.version)}")
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    return int(old)
