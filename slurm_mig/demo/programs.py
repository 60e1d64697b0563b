"""Where a LocalSlurm cluster's programs are (Slurm's and munge's daemons and clients,
the host's MariaDB server) and why a cluster cannot start here (`skip_reason`)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from .slurmroot import SlurmInstall, find_install

SLURM_BINARIES = ("slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "scontrol", "munged")
SBIN_PATHS = ("/usr/sbin", "/usr/local/sbin", "/sbin")
# Client programs a root's cluster puts on PATH as wrappers (daemons are started directly).
CLIENT_PROGRAMS = ("sbatch", "squeue", "sinfo", "scontrol", "scancel", "sacct", "srun", "sprio")
CLIENT_PROGRAMS += ("sacctmgr", "sshare")  # accounting
# The host's MariaDB server (Debian's mariadb-server) for every release's slurmdbd.
MARIADB_SERVERS = ("mariadbd", "mysqld")
MARIADB_INSTALLERS = ("mariadb-install-db", "mysql_install_db")


def find_binary(name: str) -> str | None:
    """Path of a Slurm or munge program, also where sbin is not on PATH."""
    path = os.pathsep.join([os.environ.get("PATH", ""), *SBIN_PATHS])
    return shutil.which(name, path=path)


def first_binary(names: Iterable[str]) -> str | None:
    """The first of ``names`` that `find_binary` finds (alternative names of a program)."""
    return next(filter(None, map(find_binary, names)), None)


def skip_reason(slurm: str | SlurmInstall | None = None, accounting: bool = False) -> str | None:
    """Why LocalSlurm cannot run here with that Slurm (not root, programs or root
    missing), or None. ``slurm``: "host" (the default) or a root's suite;
    ``accounting``: also slurmdbd (of that release) and the host's MariaDB server."""
    if os.geteuid() != 0:
        return "LocalSlurm needs root (it starts munged, slurmctld and slurmd)"
    if isinstance(slurm, SlurmInstall):
        slurm = slurm.name
    missing = _missing_slurm(slurm, accounting)
    if isinstance(missing, str):
        return missing
    if accounting and first_binary(MARIADB_SERVERS) is None:
        missing.append("mariadbd")
    if accounting and first_binary(MARIADB_INSTALLERS) is None:
        missing.append("mariadb-install-db")
    if missing:
        return (
            f"Slurm is not installed ({', '.join(missing)} missing); apt-get install "
            f"slurmctld slurmd slurm-client munge{' slurmdbd mariadb-server' * accounting}"
            " (make slurm-packages; a root's: make slurm-roots)"
        )
    return None


def _missing_slurm(slurm: str | None, accounting: bool) -> list[str] | str:
    """Slurm's programs missing from the host or from root ``slurm`` (with slurmdbd
    for ``accounting``), or why that root cannot be used."""
    missing = []
    if slurm not in (None, "host"):
        found = find_install(slurm)
        if isinstance(found, str):
            return found
        if accounting and not (found.root / "usr" / "sbin" / "slurmdbd").exists():
            missing.append(f"slurmdbd in the {slurm} root")
    else:
        missing = [name for name in SLURM_BINARIES if find_binary(name) is None]
        if accounting and find_binary("slurmdbd") is None:
            missing.append("slurmdbd")
    return missing


def munged_argv(munged: str | None, mdir: Path, socket: Path) -> list[str | None]:
    """munged's command line in the foreground, its key, pid, log and seed files in
    ``mdir``, listening on ``socket`` (``munged`` None when not found)."""
    return [
        munged,
        "--foreground",
        "--force",
        f"--socket={socket}",
        f"--key-file={mdir / 'munge.key'}",
        f"--pid-file={mdir / 'munged.pid'}",
        f"--log-file={mdir / 'munged.log'}",
        f"--seed-file={mdir / 'munged.seed'}",
    ]
