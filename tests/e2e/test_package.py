"""The .deb as a site installs it: built from this tree by `packaging/build.py`, installed
with dpkg in a copy of the Debian 13 root (Slurm 24.11), upgraded over the previous
package, and a subset of the suite run against the installed files (hooks, job_submit.lua,
planner from /opt/slurm-mig), not against this source tree.

Runs with SLURM_MIG_SLURM=trixie (CI's second pass): the package is laid out for the
root's Python. Needs dpkg-deb and the wheels of the dependencies (pip's index).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from slurm_mig.demo.live import INSTALLED_BIN, LiveCluster
from slurm_mig.demo.slurmroot import SlurmInstall, cache_dir
from slurm_mig.geometry import get_model
from slurm_mig.workload import load_task_source

from .conftest import SLURM, assert_ran_as_planned, live_cluster, require_local_slurm

TREE = Path(__file__).resolve().parents[2]
PREVIOUS, CURRENT = "0.1.0-0", "0.1.0-1"  # the upgrade: one package over an older one
RODINIA = load_task_source("rodinia-a100", get_model("A100-40GB"))
SCALE = 0.5

pytestmark = pytest.mark.skipif(
    SLURM != "trixie", reason="the .deb is installed in the trixie root: SLURM_MIG_SLURM=trixie"
)


def root_python(root: Path) -> str:
    """The X.Y of the root's python3 (the package's environment is laid out for it)."""
    found = sorted(
        p.name[len("python") :]
        for p in (root / "usr" / "bin").glob("python3.*")
        if re.fullmatch(r"python3\.\d+", p.name)
    )
    assert found, f"no python3.X in {root}/usr/bin"
    return found[-1]


@pytest.fixture(scope="module")
def packages() -> dict[str, Path]:
    """The previous and the current .deb of this tree, for the trixie root's Python."""
    install = require_local_slurm()
    assert install.root is not None
    out = Path(tempfile.mkdtemp(prefix="slurm-mig-debs-"))
    debs = {}
    for version in (PREVIOUS, CURRENT):
        res = subprocess.run(
            [sys.executable, str(TREE / "packaging" / "build.py"), "deb",
             "--python", root_python(install.root), "--version", version, "--out", str(out)],
            capture_output=True, text=True,
        )  # fmt: skip
        assert res.returncode == 0, res.stderr
        debs[version] = Path(res.stdout.strip())
    yield debs
    shutil.rmtree(out, ignore_errors=True)


@pytest.fixture
def site_root():
    """A scratch copy of the trixie root to install packages into (the cached root
    stays as it was); outside /tmp, which every root process gets mounted."""
    install = require_local_slurm()
    assert install.root is not None
    scratch = cache_dir() / "scratch"
    scratch.mkdir(parents=True, exist_ok=True)
    for stale in scratch.iterdir():  # left by a run that was killed
        shutil.rmtree(stale, ignore_errors=True)
    copy = scratch / f"{install.name}-{os.getpid()}"
    subprocess.run(["cp", "-a", "--reflink=auto", str(install.root), str(copy)], check=True)
    yield SlurmInstall(install.name, install.version, copy)
    shutil.rmtree(copy, ignore_errors=True)


def run(install: SlurmInstall, *argv: str) -> subprocess.CompletedProcess:
    """``argv`` as root inside the root, no terminal, no input (dpkg must not ask)."""
    return subprocess.run(
        install.argv(list(argv)), capture_output=True, text=True, stdin=subprocess.DEVNULL
    )


def ok(install: SlurmInstall, *argv: str) -> str:
    res = run(install, *argv)
    assert res.returncode == 0, f"{argv}: {res.stdout}{res.stderr}"
    return res.stdout


IMPORT_ALL = """
import importlib, pkgutil, slurm_mig
for m in pkgutil.walk_packages(slurm_mig.__path__, "slurm_mig."):
    if m.name != "slurm_mig.__main__":
        try:
            importlib.import_module(m.name)
        except ModuleNotFoundError as e:
            if e.name != "torch":
                raise
            print(m.name)
"""
STORE_WRITE = (
    "from slurm_mig.runtimes import RuntimeStore; "
    "RuntimeStore('/var/lib/slurm-mig/profiles.sqlite')"
    ".record('kernel', 'A100-40GB', 3, 42.0, 'run-1', 0, 1.0)"
)
STORE_READ = (
    "from slurm_mig.runtimes import RuntimeStore; "
    "print(RuntimeStore('/var/lib/slurm-mig/profiles.sqlite').observations('kernel', 'A100-40GB'))"
)


def test_the_deb_installs_upgrades_and_removes_as_a_site_expects(packages, site_root):
    """dpkg installs the previous package (nothing started, the files where a site looks
    for them), an upgrade keeps the admin's config and the planner's stores, removal
    leaves no file of the package behind, purge takes the config and keeps the stores."""
    root = site_root.root
    assert root is not None
    previous, current = packages[PREVIOUS], packages[CURRENT]
    out = ok(site_root, "dpkg", "-i", str(previous))
    assert "Setting up slurm-mig (0.1.0-0)" in out
    files = set(ok(site_root, "dpkg", "-L", "slurm-mig").split())
    for path in (
        f"{INSTALLED_BIN}/slurm-mig",
        f"{INSTALLED_BIN}/slurm-mig-prolog",
        f"{INSTALLED_BIN}/slurm-mig-epilog",
        f"{INSTALLED_BIN}/slurm-mig-taskprolog",
        f"{INSTALLED_BIN}/mig-run",
        "/usr/bin/slurm-mig",
        "/etc/slurm-mig/config.toml",
        "/usr/lib/systemd/system/slurm-mig-planner.service",
        "/usr/share/man/man1/slurm-mig.1.gz",
        "/usr/share/bash-completion/completions/slurm-mig",
        "/usr/share/doc/slurm-mig/copyright",
    ):
        assert path in files, path
    assert ok(site_root, "dpkg-query", "-W", "-f=${Conffiles}", "slurm-mig").split()[0] == (
        "/etc/slurm-mig/config.toml"
    )
    # the installed interpreter imports the installed package, not this tree
    where = ok(
        site_root,
        f"{INSTALLED_BIN}/python",
        "-I",
        "-c",
        "import slurm_mig; print(slurm_mig.__file__)",
    )
    assert where.startswith("/opt/slurm-mig/lib/python3."), where
    # every module of the package imports there: the dependencies are complete (torch
    # is the job's own, for mig-run's probes in the job's Python)
    out = ok(site_root, f"{INSTALLED_BIN}/python", "-I", "-c", IMPORT_ALL)
    assert out.split() == ["slurm_mig.memory.live_tensors", "slurm_mig.memory.probe"], out
    assert "/etc/slurm-mig/config.toml: ok" in ok(
        site_root, "slurm-mig", "check-config", "/etc/slurm-mig/config.toml"
    )

    # a site's edit and the planner's store, then the upgrade
    with open(root / "etc/slurm-mig/config.toml", "a") as f:
        f.write("# edited by the site\n")
    ok(site_root, "install", "-d", "-m", "0750", "/var/lib/slurm-mig")
    ok(site_root, f"{INSTALLED_BIN}/python", "-I", "-c", STORE_WRITE)
    out = ok(site_root, "dpkg", "-i", str(current))
    assert "Unpacking slurm-mig (0.1.0-1) over (0.1.0-0)" in out, out
    assert ok(site_root, "dpkg-query", "-W", "-f=${Version}", "slurm-mig") == CURRENT
    assert (root / "etc/slurm-mig/config.toml").read_text().endswith("# edited by the site\n")
    assert ok(site_root, f"{INSTALLED_BIN}/python", "-I", "-c", STORE_READ).strip() == "{3: [42.0]}"
    # dpkg --verify: only the edited config differs from the package
    verify = run(site_root, "dpkg", "--verify", "slurm-mig").stdout
    assert [ln.split() for ln in verify.splitlines()] == [
        ["??5??????", "c", "/etc/slurm-mig/config.toml"]
    ], verify

    ok(site_root, "dpkg", "-r", "slurm-mig")
    assert not (root / "opt/slurm-mig").exists(), list((root / "opt/slurm-mig").rglob("*"))[:5]
    assert (root / "etc/slurm-mig/config.toml").exists()  # removal keeps config files
    ok(site_root, "dpkg", "--purge", "slurm-mig")
    assert not (root / "etc/slurm-mig").exists()
    assert (root / "var/lib/slurm-mig/profiles.sqlite").exists()


def test_jobs_run_on_their_planned_slices_from_the_installed_package(packages, site_root):
    """The installed job_submit.lua holds MIG jobs and refuses a raw GRES request; the
    installed planner releases each job onto its slice; the installed Prolog creates it,
    the job sees its own instance only, and the Epilog leaves nothing behind, also for a
    job that fails."""
    ok(site_root, "dpkg", "-i", str(packages[CURRENT]))
    with live_cluster(
        "slurm-mig-live-", slurm=site_root, installed=True, nodes=("node1",), gpus=1,
        planner={"algorithm": "adaptive"},
    ) as lc:  # fmt: skip
        _run_jobs_through_the_installed_package(lc)


def _run_jobs_through_the_installed_package(lc: LiveCluster) -> None:
    conf = (lc.cluster.root / "etc" / "slurm.conf").read_text()
    assert f"{INSTALLED_BIN}/slurm-mig-prolog" in (lc.cluster.root / "hooks" / "prolog").read_text()
    assert "Prolog=" in conf and "TaskProlog=" in conf
    refused = lc.cluster.try_sbatch(
        "true", "--gres=gpu:1", partition="mig", comment="mig:mem=1G", user=lc.job_user
    )
    assert refused.returncode != 0
    assert "slurm-mig: the mig partition gives each job its MIG slice" in refused.stderr

    lc.learn(RODINIA, SCALE)
    kernels = [t.id for t in RODINIA[:4]]
    ids = [lc.submit(k, SCALE) for k in kernels]
    failing = lc.cluster.sbatch(
        "exit 3", partition="mig", comment="mig:mem=4G,time=30", name="fails", user=lc.job_user
    )
    assert all(j.held for j in lc.jobs().values())
    lc.start_planner()
    assert lc.daemon is not None and f"{INSTALLED_BIN}/slurm-mig" in lc.daemon.args
    jobs = lc.wait_done([*ids, failing], 240)
    assert {jobs[j].state for j in ids} == {"COMPLETED"}, lc.cluster.logs()
    assert jobs[failing].state == "FAILED"
    assert_ran_as_planned(lc, ids)
    assert lc.status().get("policy") == "adaptive"


def test_the_rpm_builds_and_rpmlint_finds_no_error(tmp_path):
    """`make rpm`'s steps: the RPM for EL 9's python3.11 holds the same files as the
    .deb, keeps /etc/slurm-mig/config.toml on upgrades (noreplace), and rpmlint, with
    the filters packaging/slurm-mig.rpmlintrc names and explains, reports no error."""
    for tool in ("rpmbuild", "rpmlint"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is missing: make rpm-packages installs it")
    res = subprocess.run(
        [sys.executable, str(TREE / "packaging" / "build.py"), "rpm", "--python", "3.11",
         "--out", str(tmp_path)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    rpm = Path(res.stdout.strip())
    files = set(
        subprocess.run(["rpm", "-qlp", str(rpm)], capture_output=True, text=True).stdout.split()
    )
    for path in (
        f"{INSTALLED_BIN}/slurm-mig-prolog",
        "/opt/slurm-mig/lib/python3.11/site-packages/slurm_mig/cli/__init__.py",
        "/usr/lib/systemd/system/slurm-mig-planner.service",
        "/usr/share/man/man1/slurm-mig.1.gz",
    ):
        assert path in files, path
    config = subprocess.run(
        ["rpm", "-qp", "--configfiles", str(rpm)], capture_output=True, text=True
    )
    assert config.stdout.split() == ["/etc/slurm-mig/config.toml"]
    lint = subprocess.run(
        ["rpmlint", "-r", str(TREE / "packaging" / "slurm-mig.rpmlintrc"), str(rpm)],
        capture_output=True, text=True,
    )  # fmt: skip
    summary = lint.stdout.strip().splitlines()[-1]
    assert " 0 errors," in summary, [ln for ln in lint.stdout.splitlines() if ": E: " in ln][:20]
