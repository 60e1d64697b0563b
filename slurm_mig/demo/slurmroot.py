"""Other Slurm releases for the end-to-end tests: Debian roots built with debootstrap.

A root is a ``debootstrap --variant=minbase`` of a Debian suite (trixie: Slurm 24.11,
sid: 26.05) with slurmctld, slurmd, slurmdbd, slurm-client, munge and python3 (the
MariaDB server of accounting is always the host's), kept in a cache directory outside
any checkout (``/var/cache/slurm-mig/roots/<suite>``; $SLURM_MIG_ROOTS moves it) so
that every clone on the machine reuses it. A root counts
only once its stamp file is written: a build is made in ``<suite>.partial`` and renamed
when complete, under a lock, so an interrupted or concurrent build never leaves a root
that looks usable.

Every process that runs in a root (a daemon, a client command, the build's apt-get)
gets its own private mount namespace (``unshare --mount``): proc, sys, dev, /tmp and
the host paths the tests use are mounted there at the same paths and vanish with the
process, so nothing is ever left mounted on the host, whatever happens to the caller.

    python -m slurm_mig.demo.slurmroot build trixie sid
"""

from __future__ import annotations

import argparse
import fcntl
import functools
import json
import os
import pwd
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

DEFAULT_CACHE = Path("/var/cache/slurm-mig/roots")
HOST_USR = Path("/run/slurm-mig-host-usr")  # the host's /usr, inside a root
SUITES = {"trixie": "Debian 13, Slurm 24.11", "sid": "Debian unstable, Slurm 26.05"}
PACKAGES = ("slurmctld", "slurmd", "slurmdbd", "slurm-client", "munge", "python3", "libstdc++6")
STAMP = ".slurm-mig-root"  # at the top of a finished root; /.slurm-mig-root inside it
FORMAT = 2  # bump when a root needs rebuilding (other packages, other layout)
CHECKOUT = Path(__file__).resolve().parents[2]


class RootError(RuntimeError):
    """A root could not be built or used; the message says why and what to do."""


def cache_dir() -> Path:
    return Path(os.environ.get("SLURM_MIG_ROOTS") or DEFAULT_CACHE)


def _inside(path: Path, dirs: Iterable[Path]) -> bool:
    return any(path == d or d in path.parents for d in dirs)


def python_in_usr() -> bool:
    """This interpreter is a system one (/usr/bin/python3.11): a root has its own /usr,
    so jobs there reach this one under HOST_USR, through `make_job_python`'s venv."""
    return Path(sys.base_prefix).resolve().is_relative_to("/usr")


def in_root(path: Path) -> Path:
    """Where a host path is seen inside a root (/usr under HOST_USR, shared paths as they are)."""
    path = Path(path)
    return HOST_USR / path.relative_to("/usr") if path.is_relative_to("/usr") else path


def make_job_python(venv: Path) -> Path:
    """A venv at ``venv`` (under /tmp: shared) for jobs inside a root: this interpreter
    as a root sees it, with this environment's packages; its python's path."""
    exe = Path(getattr(sys, "_base_executable", sys.executable)).resolve()
    major, minor, micro = sys.version_info[:3]
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    site = venv / "lib" / f"python{major}.{minor}" / "site-packages"
    site.parent.mkdir(parents=True, exist_ok=True)
    for link, target in ((venv / "bin" / "python", exe), (site, sysconfig.get_paths()["purelib"])):
        if not link.is_symlink():
            link.symlink_to(in_root(Path(target)))
    (venv / "pyvenv.cfg").write_text(
        f"home = {in_root(exe.parent)}\ninclude-system-site-packages = false\n"
        f"version = {major}.{minor}.{micro}\n"
    )
    return venv / "bin" / "python"


def shared_paths() -> tuple[Path, ...]:
    """Host directories visible at the same path inside a root: /tmp (the clusters'
    directories), the checkout (hooks, job scripts) and this interpreter's prefixes (so
    a job may run ``sys.executable`` with the test environment's packages)."""
    paths = [Path("/tmp"), CHECKOUT]
    for prefix in (sys.prefix, sys.base_prefix):
        p = Path(prefix).resolve()
        system = p == Path("/") or p.is_relative_to("/usr")  # /usr: see HOST_USR
        if not system and not _inside(p, paths):
            paths.append(p)
    return tuple(paths)


def _enter_script(root: Path, shared: Sequence[Path]) -> str:
    """Shell that mounts what a root process needs, then chroots: ``sh -c SCRIPT sh
    UID:GID ARGV...`` run under ``unshare --mount --propagation private``."""
    r = shlex.quote(str(root))
    lines = [
        "set -e",
        "user=$1; shift",
        f"mount -t proc proc {r}/proc",
        f"mount --rbind /sys {r}/sys",
        f"mount --rbind /dev {r}/dev",
        f"touch {r}/etc/hosts && mount --bind /etc/hosts {r}/etc/hosts",  # today's host name
    ]
    for path in shared:
        q = shlex.quote(str(path))
        lines.append(f"mkdir -p {r}{q} && mount --rbind {q} {r}{q}")
    if python_in_usr():
        lines.append(f"mkdir -p {r}{HOST_USR} && mount --rbind /usr {r}{HOST_USR}")
    lines.append(f'exec chroot --userspec="$user" {r} "$@"')
    return "\n".join(lines)


@dataclass(frozen=True)
class SlurmInstall:
    """Where a Slurm release runs: the host's own (``root`` None) or a Debian root."""

    name: str  # "host", or the suite
    version: tuple[int, ...]  # (24, 11, 5)
    root: Path | None = None

    @property
    def version_text(self) -> str:
        return format_version(self.version)

    def argv(self, argv: Sequence[str], user: str | None = None) -> list[str]:
        """The command line that runs ``argv`` (names resolved in the release's PATH)
        with this release, as ``user`` (root when None)."""
        if self.root is None:
            return list(argv) if user is None else ["runuser", "-u", user, "--", *argv]
        ids = "0:0"
        if user is not None:
            pw = pwd.getpwnam(user)
            ids = f"{pw.pw_uid}:{pw.pw_gid}"
        script = _enter_script(self.root, shared_paths())
        return [
            "unshare", "--mount", "--propagation", "private",
            "/bin/sh", "-c", script, "sh", ids, *argv,
        ]  # fmt: skip

    def wrapper(self, program: str) -> str:
        """A /bin/sh script that runs ``program`` of this release from the host, and
        the release's own where it already runs inside the root (a job's PATH)."""
        inner = f"/usr/bin/{program}"
        outer = " ".join(shlex.quote(a) for a in self.argv([inner]))
        return (
            f"#!/bin/sh\n# {program} of Slurm {self.version_text} ({self.name})\n"
            f'[ -e /{STAMP} ] && exec {inner} "$@"\n'
            f'exec {outer} "$@"\n'
        )


@functools.cache
def host_install() -> SlurmInstall:
    """The host's Slurm (its version from ``slurmd -V``, which needs no slurm.conf,
    unlike 22.05's ``sinfo --version``; (0,) when unknown)."""
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/local/sbin"])
    slurmd = shutil.which("slurmd", path=path)
    try:
        out = subprocess.run([slurmd or "slurmd", "-V"], capture_output=True, text=True).stdout
    except OSError:
        return SlurmInstall("host", (0,))
    return SlurmInstall("host", parse_version(out) or (0,))


def format_version(version: Sequence[int]) -> str:
    """Slurm's spelling: (26, 5, 5) -> "26.05.5"."""
    head = [str(version[0]), *(f"{v:02d}" for v in version[1:2])]
    return ".".join([*head, *map(str, version[2:])])


def parse_version(text: str) -> tuple[int, ...] | None:
    """(24, 11, 5) from "slurm 24.11.5" or "slurm-wlm 24.11.5"; None if absent."""
    m = re.search(r"\b(\d+)\.(\d+)(?:\.(\d+))?", text)
    return tuple(int(g) for g in m.groups() if g is not None) if m else None


def root_path(suite: str) -> Path:
    return cache_dir() / suite


def read_stamp(root: Path) -> dict | None:
    """The stamp of a finished root of the current format, else None."""
    try:
        stamp = json.loads((root / STAMP).read_text())
    except (OSError, ValueError):
        return None
    return stamp if isinstance(stamp, dict) and stamp.get("format") == FORMAT else None


def find_install(name: str) -> SlurmInstall | str:
    """The release called ``name`` ("host" or a suite), or why it is not there."""
    if name == "host":
        return host_install()
    if name not in SUITES:
        return f"unknown Slurm {name!r} (host, {', '.join(SUITES)})"
    root = root_path(name)
    stamp = read_stamp(root)
    if stamp is None:
        return (
            f"no {name} root at {root} ({SUITES[name]}); build it with "
            f"'python3 -m slurm_mig.demo.slurmroot build {name}' (make test does)"
        )
    return SlurmInstall(name, tuple(stamp["version"]), root)


# --- building -------------------------------------------------------------------------
def debian_mirror() -> str:
    """The Debian mirror apt already uses here ($SLURM_MIG_DEBIAN_MIRROR overrides)."""
    if os.environ.get("SLURM_MIG_DEBIAN_MIRROR"):
        return os.environ["SLURM_MIG_DEBIAN_MIRROR"]
    texts = []
    for path in [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]:
        try:
            texts.append((path.suffix, path.read_text()))
        except OSError:
            continue
    mirror = mirror_from_sources(texts)
    if mirror is None:
        raise RootError("no Debian mirror in /etc/apt/sources.list*; set SLURM_MIG_DEBIAN_MIRROR")
    return mirror


def mirror_from_sources(texts: Iterable[tuple[str, str]]) -> str | None:
    """The first non-security Debian URI of apt source files, given as (suffix, text):
    one-line ``deb URI SUITE ...`` or deb822 ``.sources`` stanzas."""
    for suffix, text in texts:
        if suffix == ".sources":
            for stanza in re.split(r"\n\s*\n", text):
                fields = dict(
                    (k.strip().lower(), v.strip())
                    for k, _, v in (ln.partition(":") for ln in stanza.splitlines())
                    if not k.startswith("#") and v
                )
                suites = fields.get("suites", "")
                if "deb" in fields.get("types", "").split() and "-security" not in suites:
                    for uri in fields.get("uris", "").split():
                        return uri
        elif suffix in ("", ".list"):
            for line in text.splitlines():
                words = re.sub(r"\[[^]]*\]", "", line).split()
                if len(words) >= 3 and words[0] == "deb" and "-security" not in words[2]:
                    return words[1]
    return None


def _run_logged(argv: Sequence[str], log: Path, what: str) -> None:
    with open(log, "ab") as out:
        res = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    if res.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        raise RootError(f"{what} failed (exit {res.returncode}); last lines of {log}:\n{tail}")


def build(suite: str, log=print) -> SlurmInstall:
    """The root of ``suite``, built when missing or incomplete (as root, needs
    debootstrap and the network to the Debian mirror)."""
    if suite not in SUITES:
        raise RootError(f"unknown suite {suite!r} (known: {', '.join(SUITES)})")
    if os.geteuid() != 0:
        raise RootError("building a Slurm root needs root (debootstrap, chroot)")
    if shutil.which("debootstrap", path=os.environ.get("PATH", "") + ":/usr/sbin") is None:
        raise RootError("debootstrap is not installed (apt-get install debootstrap)")
    cache = cache_dir()
    if _inside(cache.resolve(), [Path("/tmp"), CHECKOUT]):
        raise RootError(f"{cache}: the roots must live outside /tmp and the checkout")
    cache.mkdir(parents=True, exist_ok=True)
    final = cache / suite
    with open(cache / f".{suite}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = find_install(suite)
        if isinstance(found, SlurmInstall):
            log(f"{suite}: Slurm {found.version_text} in {final} (cached)")
            return found
        started = time.monotonic()
        partial = cache / f"{suite}.partial"
        logfile = cache / f"{suite}.log"
        for stale in (partial, final):
            if stale.exists():
                shutil.rmtree(stale)
        logfile.write_text("")
        mirror = debian_mirror()
        log(f"{suite}: building {final} from {mirror} (log: {logfile})")
        _run_logged(
            ["debootstrap", "--variant=minbase", suite, str(partial), mirror],
            logfile,
            f"debootstrap {suite}",
        )
        policy = partial / "usr" / "sbin" / "policy-rc.d"
        policy.write_text("#!/bin/sh\nexit 101\n")  # no service starts inside the root
        policy.chmod(0o755)
        for name in ("hosts", "resolv.conf"):
            if Path("/etc", name).exists():
                shutil.copyfile(Path("/etc", name), partial / "etc" / name)
        staging = SlurmInstall(suite, (0,), partial)
        apt = ["env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "-q", "-y"]
        _run_logged(
            staging.argv([*apt, "-o", "Acquire::Check-Valid-Until=false", "update"]),
            logfile,
            f"apt-get update in the {suite} root",
        )
        _run_logged(
            staging.argv([*apt, "install", "--no-install-recommends", *PACKAGES]),
            logfile,
            f"apt-get install in the {suite} root",
        )
        _run_logged(staging.argv(["apt-get", "clean"]), logfile, "apt-get clean")
        out = subprocess.run(
            staging.argv(["/usr/sbin/slurmd", "-V"]), capture_output=True, text=True
        ).stdout
        version = parse_version(out)
        if version is None:
            raise RootError(f"slurmd -V in the {suite} root printed {out!r}")
        stamp = {"format": FORMAT, "suite": suite, "version": version, "packages": PACKAGES}
        (partial / STAMP).write_text(json.dumps(stamp) + "\n")
        partial.rename(final)
        log(f"{suite}: Slurm {format_version(version)} built in {time.monotonic() - started:.0f} s")
        return SlurmInstall(suite, version, final)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="slurmroot", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build the roots that are missing (as root)")
    b.add_argument("suites", nargs="+", choices=sorted(SUITES))
    args = parser.parse_args(argv)
    status = 0
    for suite in args.suites:
        try:
            build(suite)
        except RootError as exc:
            print(f"slurmroot: {suite}: {exc}", file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
