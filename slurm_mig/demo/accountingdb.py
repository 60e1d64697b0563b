"""LocalSlurm's accounting database: a private MariaDB server (the host's, on a free
port of 127.0.0.1, small buffers, no durability, its datadir copied from one that
mariadb-install-db makes once per process) and the slurmdbd.conf that points the
release's slurmdbd at it."""

from __future__ import annotations

import atexit
import os
import secrets
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .processes import ClusterError, free_port
from .programs import MARIADB_INSTALLERS, MARIADB_SERVERS, first_binary, skip_reason
from .slurmroot import SlurmInstall

_TEMPLATE: list[Path] = []  # this process's freshly installed, never started datadir


@dataclass(frozen=True)
class Database:
    """A cluster's database server: its directory, port, slurm user's password and files."""

    dir: Path
    port: int
    password: str

    @property
    def cnf(self) -> Path:
        return self.dir / "my.cnf"

    @property
    def init(self) -> Path:
        """SQL the server runs before it accepts connections."""
        return self.dir / "init.sql"

    @property
    def datadir(self) -> Path:
        return self.dir / "data"


def mariadb_cnf(datadir: Path, port: int, run_dir: Path) -> str:
    """my.cnf of a private MariaDB server: root, 127.0.0.1:``port``, small buffers and
    no durability (the database lives as long as its cluster)."""
    return (
        f"[mysqld]\nuser=root\ndatadir={datadir}\nsocket={run_dir / 'mysqld.sock'}\n"
        f"pid-file={run_dir / 'mysqld.pid'}\nbind-address=127.0.0.1\nport={port}\n"
        "skip-name-resolve\nskip-log-bin\nperformance_schema=OFF\nkey_buffer_size=1M\n"
        "innodb_buffer_pool_size=32M\ninnodb_log_file_size=8M\ninnodb_lock_wait_timeout=900\n"
        "innodb_flush_log_at_trx_commit=0\ninnodb_doublewrite=0\ninnodb_flush_method=nosync\n"
    )


def init_sql(password: str) -> str:
    """The accounting database and slurmdbd's user (``password``) on 127.0.0.1: made
    here, as slurmdbd 24.11's own creation fails its first try (TLS) and retries in 5 s."""
    return (
        "CREATE DATABASE IF NOT EXISTS slurm_acct_db;\n"
        f"CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '{password}';\n"
        "GRANT ALL ON *.* TO 'slurm'@'127.0.0.1';\n"
    )


def slurmdbd_conf(munge_socket: Path, dbd_port: int, root: Path, db: Database) -> str:
    """slurmdbd.conf: slurmdbd on 127.0.0.1:``dbd_port`` (pid file and log under
    ``root``), storing in ``db``."""
    return (
        "AuthType=auth/munge\n"
        f"AuthInfo=socket={munge_socket}\n"
        f"DbdHost=localhost\nDbdAddr=127.0.0.1\nDbdPort={dbd_port}\nSlurmUser=root\n"
        f"PidFile={root / 'slurmdbd.pid'}\nLogFile={root / 'log' / 'slurmdbd.log'}\n"
        "DebugLevel=info\nStorageType=accounting_storage/mysql\n"
        f"StorageHost=127.0.0.1\nStoragePort={db.port}\nStorageUser=slurm\n"
        f"StoragePass={db.password}\nStorageLoc=slurm_acct_db\n"
    )


def mariadb_template() -> Path:
    """A datadir fresh from mariadb-install-db, made once per process (0.5 to 5 s) and
    copied for each cluster (a few ms); removed at exit."""
    if _TEMPLATE:
        return _TEMPLATE[0]
    installer = first_binary(MARIADB_INSTALLERS)
    if installer is None:
        raise ClusterError(f"accounting: {skip_reason(accounting=True)}")
    top = Path(tempfile.mkdtemp(prefix="slurm-e2e-mariadb-"))
    atexit.register(shutil.rmtree, top, ignore_errors=True)
    cnf = top / "my.cnf"
    cnf.write_text(mariadb_cnf(top / "data", free_port(), top))
    argv = [installer, f"--defaults-file={cnf}", "--auth-root-authentication-method=normal"]
    res = subprocess.run(
        [*argv, "--skip-test-db", "--skip-name-resolve"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if res.returncode != 0:
        raise ClusterError(f"{installer} exited {res.returncode}: {res.stdout}{res.stderr}")
    _TEMPLATE.append(top / "data")
    return _TEMPLATE[0]


def prepare_database(db_dir: Path, install: SlurmInstall) -> tuple[Database, list[str]]:
    """``db_dir`` (root's only) with my.cnf, init.sql and a datadir copied from
    `mariadb_template`, on a free port with a fresh password; the server's command line
    (ClusterError when the host has no MariaDB server)."""
    db_dir.mkdir(exist_ok=True)
    os.chmod(db_dir, 0o700)
    db = Database(db_dir, free_port(), secrets.token_hex(12))
    db.cnf.write_text(mariadb_cnf(db.datadir, db.port, db_dir))
    db.init.write_text(init_sql(db.password))
    server = first_binary(MARIADB_SERVERS)
    if server is None:
        raise ClusterError(f"accounting: {skip_reason(install, accounting=True)}")
    shutil.copytree(mariadb_template(), db.datadir, symlinks=True)
    return db, [server, f"--defaults-file={db.cnf}", f"--init-file={db.init}"]


def write_secret(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by its owner only (slurmdbd refuses a
    slurmdbd.conf others may read), never readable by others on the way."""
    path.touch(mode=0o600)
    os.chmod(path, 0o600)
    path.write_text(text)
