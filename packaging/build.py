#!/usr/bin/env python3
"""Build slurm-mig's Debian and RPM packages from a source tree (``make deb``, ``make rpm``).

Both packages hold the same tree: the application in a private virtual environment at
/opt/slurm-mig (the path of the README's pip install, which the systemd units, the
slurm.conf lines and `site-files` name), with the dependencies' wheels as tested here;
the units, the man page and completion, /etc/slurm-mig/config.toml as a config file
that upgrades keep, and maintainer scripts that start nothing.

The environment is laid out for the target's Python (``--python 3.13``: Debian 13),
not this interpreter's: pip installs wheels for that version into its site-packages
(``pip install --target --python-version``) and the environment's ``bin/python`` is a
link to the target's ``/usr/bin/python3.X``, as ``python3 -m venv`` would make it there.
Nothing is compiled here; the postinst byte-compiles with the installed interpreter.

    python3 packaging/build.py deb --python 3.13 --out dist/
    python3 packaging/build.py rpm --python 3.11 --out dist/
"""

from __future__ import annotations

import argparse
import configparser
import gzip
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TREE = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
PREFIX = "/opt/slurm-mig"
NAME = "slurm-mig"
# what pip may install for the target: CPython wheels for x86_64 glibc 2.28 and older
# (Debian 10+, EL 8+)
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
UNITS = (
    "slurm-mig-planner.service",
    "slurm-mig-planner-standby.service",
    "slurm-mig-caps.service",
    "slurm-mig-node-flush.service",
    "slurm-mig-node-flush.timer",
)
EXAMPLES = ("job_submit.lua", "slurm-mig-alerts.yml", "grafana-slurm-mig.json")
CONFIG = "/etc/slurm-mig/config.toml"
SUMMARY = "MIG repartitioning planner for Slurm GPU jobs"
SPEC = HERE / "slurm-mig.spec"


def description() -> str:
    """The package's long description: the spec's %description (one text for both)."""
    lines = SPEC.read_text().split("%description\n", 1)[1].split("\n\n", 1)[0]
    return lines.strip()


class BuildError(RuntimeError):
    """A step of the build failed; the message says which and what to do."""


def metadata() -> dict[str, str]:
    """Name, version and console scripts of the tree (setup.cfg)."""
    cfg = configparser.ConfigParser()
    cfg.read(TREE / "setup.cfg")
    scripts = {}
    for line in cfg["options.entry_points"]["console_scripts"].strip().splitlines():
        name, _, target = line.partition("=")
        scripts[name.strip()] = target.strip()
    return {"version": cfg["metadata"]["version"], "scripts": scripts}


def _run(argv: list[str], what: str, **kw) -> None:
    try:
        res = subprocess.run(argv, capture_output=True, text=True, **kw)
    except OSError as exc:
        raise BuildError(f"{what}: cannot run {argv[0]}: {exc.strerror}") from None
    if res.returncode != 0:
        tail = "\n".join((res.stdout + res.stderr).strip().splitlines()[-15:])
        raise BuildError(f"{what} failed (exit {res.returncode}):\n{tail}")


def script(target: str) -> str:
    """A console script of the environment: ``module:function`` run by its python, in
    isolated mode (-I: no PYTHON* variables, no user site, no current directory on the
    path, whoever runs it: the Prolog and Epilog run as root)."""
    module, _, func = target.partition(":")
    return (
        f"#!{PREFIX}/bin/python -I\n"
        f"import sys\nfrom {module} import {func}\n\n"
        f"if __name__ == '__main__':\n    sys.exit({func}())\n"
    )


def docs(stage: Path) -> None:
    """The man page and completion (``make docs``), installed where Debian and Fedora
    look for them."""
    _run(["make", "-C", str(TREE), "docs"], "make docs (the man page and completion)")
    built = TREE / "build" / "share"
    man = stage / "usr/share/man/man1"
    man.mkdir(parents=True)
    data = (built / "man/man1/slurm-mig.1").read_bytes()
    with open(man / "slurm-mig.1.gz", "wb") as raw:
        with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9, mtime=0, filename="") as gz:
            gz.write(data)
    bash = stage / "usr/share/bash-completion/completions"
    bash.mkdir(parents=True)
    shutil.copyfile(built / "bash-completion/completions/slurm-mig", bash / "slurm-mig")
    zsh = stage / "usr/share/zsh/vendor-completions"
    zsh.mkdir(parents=True)
    shutil.copyfile(built / "zsh/site-functions/_slurm-mig", zsh / "_slurm-mig")


def tidy(site: Path) -> None:
    """Leave out of the dependencies what only their own builds and test suites use, and
    give their files the modes of a library: test folders, byte code of this
    interpreter and static libraries go; a module keeps no ``#!`` line (blanked, so
    tracebacks keep their line numbers) and no execute bit; identical files become one
    (hard links), as the package formats keep them."""
    for path in sorted(site.rglob("*"), reverse=True):
        if path.is_dir() and not path.is_symlink():
            ours = path.relative_to(site).parts[0] == "slurm_mig"
            if path.name == "__pycache__" or (path.name == "tests" and not ours):
                shutil.rmtree(path)
    seen: dict[tuple[int, str], Path] = {}
    for path in sorted(site.rglob("*")):
        if path.is_symlink() or not path.is_file():
            continue
        if path.suffix == ".a":
            path.unlink()
            continue
        with open(path, "rb") as f:
            head = f.read(4)
        if head == b"\x7fELF":
            path.chmod(0o755 if ".so" in path.name else 0o644)
        else:
            if head[:2] == b"#!":
                data = path.read_bytes()
                end = data.find(b"\n")
                path.write_bytes(b"" if end < 0 else b"\n" + data[end + 1 :])
            path.chmod(0o644)
        size = path.stat().st_size
        if size == 0:
            continue
        key = (size, hashlib.sha256(path.read_bytes()).hexdigest())
        first = seen.setdefault(key, path)
        if first is not path and first.stat().st_mode == path.stat().st_mode:
            path.unlink()
            os.link(first, path)


def environment(stage: Path, python: str, wheels: Path, pip: str) -> None:
    """/opt/slurm-mig: a virtual environment for ``/usr/bin/python<python>`` holding the
    slurm-mig wheel and its dependencies."""
    root = stage / PREFIX.lstrip("/")
    site = root / "lib" / f"python{python}" / "site-packages"
    site.mkdir(parents=True)
    (root / "lib64").symlink_to("lib")
    wheel = next(wheels.glob("slurm_mig-*.whl"))
    abi = "cp" + python.replace(".", "")
    argv = [pip, "install", "--quiet", "--disable-pip-version-check", "--no-compile",
            "--target", str(site), "--python-version", python, "--implementation", "cp",
            "--abi", abi, *(f"--platform={p}" for p in PLATFORMS),
            "--only-binary=:all:", str(wheel)]  # fmt: skip
    _run(argv, f"pip install of slurm-mig and its dependencies for Python {python}")
    shutil.rmtree(site / "bin", ignore_errors=True)  # pip's scripts name this interpreter
    tidy(site)
    bin_dir = root / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(f"/usr/bin/python{python}")
    (bin_dir / "python3").symlink_to("python")
    for name, target in metadata()["scripts"].items():
        path = bin_dir / name
        path.write_text(script(target))
        path.chmod(0o755)
    (root / "pyvenv.cfg").write_text(
        f"home = /usr/bin\ninclude-system-site-packages = false\nversion = {python}\n"
        f"# laid out by packaging/build.py for Python {python}\n"
    )


def clean_copy(dest: Path) -> Path:
    """The tree's files as git sees them (tracked, and untracked ones it does not
    ignore) copied to ``dest``: a wheel built there holds no stale file of an earlier
    build (setuptools' build/ keeps modules the tree no longer has)."""
    listed = subprocess.run(
        ["git", "-C", str(TREE), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
    )
    if listed.returncode != 0:
        raise BuildError("git ls-files failed: build from a git checkout of slurm-mig")
    for name in sorted(set(listed.stdout.decode().split("\0")) - {""}):
        src = TREE / name
        if src.is_file():
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target, follow_symlinks=False)
    return dest


def stage_tree(stage: Path, python: str, pip: str) -> None:
    """Every file of the package under ``stage``, laid out as installed."""
    with tempfile.TemporaryDirectory() as tmp:
        source = clean_copy(Path(tmp) / "source")
        wheels = Path(tmp) / "wheels"
        _run([pip, "wheel", "--quiet", "--no-deps", "-w", str(wheels), str(source)],
             "building the wheel")  # fmt: skip
        environment(stage, python, wheels, pip)
    usr_bin = stage / "usr/bin"
    usr_bin.mkdir(parents=True)
    for name in ("slurm-mig", "mig-run"):
        (usr_bin / name).symlink_to(f"{PREFIX}/bin/{name}")
    units = stage / "usr/lib/systemd/system"
    units.mkdir(parents=True)
    for unit in UNITS:
        shutil.copyfile(TREE / "contrib" / unit, units / unit)
    etc = stage / CONFIG.lstrip("/")
    etc.parent.mkdir(parents=True)
    shutil.copyfile(TREE / "contrib/config.toml", etc)
    etc.chmod(0o644)
    doc = stage / "usr/share/doc" / NAME
    (doc / "examples").mkdir(parents=True)
    for name in ("README.md", "SECURITY.md"):
        shutil.copyfile(TREE / name, doc / name)
    for name in EXAMPLES:
        shutil.copyfile(TREE / "contrib" / name, doc / "examples" / name)
    docs(stage)


def _installed_kib(stage: Path) -> int:
    total = 0
    for path in stage.rglob("*"):
        if path.is_file() and not path.is_symlink():
            total += path.stat().st_size
    return total // 1024 + 1


def deb(out: Path, python: str, version: str, pip: str) -> Path:
    """The .deb of this tree for Debian's ``python<python>``."""
    with tempfile.TemporaryDirectory() as tmp:
        stage = Path(tmp) / "stage"
        stage_tree(stage, python, pip)
        doc = stage / "usr/share/doc" / NAME
        shutil.copyfile(TREE / "LICENSE", doc / "copyright")
        changelog = (
            f"{NAME} ({version}) unstable; urgency=medium\n\n"
            f"  * Built from the source tree by packaging/build.py; CHANGELOG.md has the\n"
            f"    changes.\n\n"
            f" -- slurm-mig developers <slurm-mig@localhost>  "
            f"{time.strftime('%a, %d %b %Y %H:%M:%S +0000', time.gmtime(0))}\n"
        )
        with gzip.GzipFile(doc / "changelog.Debian.gz", "wb", 9, mtime=0) as gz:
            gz.write(changelog.encode())
        control = stage / "DEBIAN"
        control.mkdir()
        long_text = "\n".join(f" {ln}" if ln else " ." for ln in description().splitlines())
        (control / "control").write_text(
            f"Package: {NAME}\nVersion: {version}\nArchitecture: amd64\n"
            f"Maintainer: slurm-mig developers <slurm-mig@localhost>\n"
            f"Installed-Size: {_installed_kib(stage)}\n"
            f"Depends: python{python}, libc6 (>= 2.28)\n"
            f"Recommends: slurm-client\n"
            f"Section: admin\nPriority: optional\n"
            f"Description: {SUMMARY}\n{long_text}\n"
        )
        (control / "conffiles").write_text(f"{CONFIG}\n")
        for name in ("postinst", "prerm", "postrm"):
            shutil.copyfile(HERE / "debian" / name, control / name)
            (control / name).chmod(0o755)
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"{NAME}_{version}_amd64.deb"
        _run(["dpkg-deb", "--root-owner-group", "-Zzstd", "--build", str(stage), str(path)],
             "dpkg-deb --build")  # fmt: skip
    return path


def rpm(out: Path, python: str, version: str, pip: str) -> Path:
    """The .rpm of this tree for a distribution whose Python is ``python<python>``."""
    if shutil.which("rpmbuild") is None:
        raise BuildError("rpmbuild is not installed (Debian: apt-get install rpm)")
    upstream, _, release = version.partition("-")
    with tempfile.TemporaryDirectory() as tmp:
        top = Path(tmp)
        stage = top / "stage"
        stage_tree(stage, python, pip)
        for name in ("LICENSE",):
            shutil.copyfile(TREE / name, stage / "usr/share/doc" / NAME / name)
        argv = ["rpmbuild", "-bb", str(SPEC),
                "--define", f"_topdir {top / 'rpmbuild'}",
                "--define", f"stage {stage}",
                "--define", f"upstream {upstream}",
                "--define", f"pkgrelease {release or '1'}",
                "--define", f"python {python}",
                "--define", f"changelog_date {time.strftime('%a %b %d %Y')}",
                "--define", "_build_id_links none"]  # fmt: skip
        _run(argv, "rpmbuild")
        built = next((top / "rpmbuild" / "RPMS").rglob("*.rpm"))
        out.mkdir(parents=True, exist_ok=True)
        path = out / built.name
        shutil.copyfile(built, path)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="packaging/build.py",
        description="Build the slurm-mig .deb or .rpm (a private environment in /opt/slurm-mig).",
    )
    parser.add_argument("kind", choices=["deb", "rpm"], help="which package")
    parser.add_argument(
        "--python",
        default=f"{sys.version_info[0]}.{sys.version_info[1]}",
        help="the target distribution's Python, X.Y (default: this one's; Debian 12: 3.11, "
        "Debian 13: 3.13, EL 9 with python3.11: 3.11)",
    )
    parser.add_argument("--version", help="the package version (default: setup.cfg's, release 1)")
    parser.add_argument("--out", type=Path, default=TREE / "dist", help="where the package goes")
    parser.add_argument("--pip", default=str(Path(sys.executable).parent / "pip"),
                        help="the pip that fetches the wheels (default: this environment's)")  # fmt: skip
    args = parser.parse_args(argv)
    if not all(p.isdigit() for p in args.python.split(".")) or args.python.count(".") != 1:
        parser.error(f"--python {args.python!r}: give the target's Python as X.Y, e.g. 3.13")
    version = args.version or f"{metadata()['version']}-1"
    build = deb if args.kind == "deb" else rpm
    try:
        path = build(args.out, args.python, version, args.pip)
    except BuildError as e:
        print(f"packaging/build.py: {e}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    os.umask(0o022)
    sys.exit(main())
