"""The pieces of slurm_mig.demo.slurmroot that need no root: mirror lookup, versions,
stamps, the commands that enter a root (tests/e2e/test_slurmroot.py runs them)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_mig.demo import slurmroot
from slurm_mig.demo.slurmroot import (
    FORMAT,
    STAMP,
    SlurmInstall,
    find_install,
    format_version,
    mirror_from_sources,
    parse_version,
    read_stamp,
    shared_paths,
)

DEB822 = """Types: deb
# http://snapshot.example/archive/debian/20250520T000000Z
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main
"""


def test_mirror_from_deb822_and_one_line_sources() -> None:
    assert mirror_from_sources([(".sources", DEB822)]) == "http://mirror.example/debian"
    security_first = DEB822.split("\n\n")[1] + "\n\n" + DEB822.split("\n\n")[0]
    assert mirror_from_sources([(".sources", security_first)]) == "http://mirror.example/debian"
    one_line = (
        "# comment\ndeb http://sec.example/debian-security bookworm-security main\n"
        "deb-src http://src.example/debian bookworm main\n"
        "deb [arch=amd64 signed-by=/k.gpg] http://deb.example/debian bookworm main\n"
    )
    assert mirror_from_sources([("", one_line)]) == "http://deb.example/debian"
    assert mirror_from_sources([(".disabled-by-farm", "deb http://x/ y main")]) is None
    assert mirror_from_sources([(".sources", "Types: deb-src\nURIs: http://x/\n")]) is None


def test_debian_mirror_prefers_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_MIG_DEBIAN_MIRROR", "http://given.example/debian")
    assert slurmroot.debian_mirror() == "http://given.example/debian"


def test_versions() -> None:
    assert parse_version("slurm 24.11.5\n") == (24, 11, 5)
    assert parse_version("slurm-wlm 22.05.8") == (22, 5, 8)
    assert parse_version("no version") is None
    assert format_version((26, 5, 5)) == "26.05.5"
    assert format_version((24, 11)) == "24.11"


def test_a_root_counts_only_with_a_stamp_of_this_format(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLURM_MIG_ROOTS", str(tmp_path))
    root = tmp_path / "trixie"
    root.mkdir()
    assert "no trixie root" in find_install("trixie")  # debootstrapped, never finished
    (root / STAMP).write_text(json.dumps({"format": FORMAT - 1, "version": [24, 11, 5]}))
    assert read_stamp(root) is None and isinstance(find_install("trixie"), str)
    (root / STAMP).write_text(json.dumps({"format": FORMAT, "version": [24, 11, 5]}))
    assert find_install("trixie") == SlurmInstall("trixie", (24, 11, 5), root)
    assert "unknown Slurm 'bullseye'" in find_install("bullseye")


def test_build_refuses_a_cache_inside_tmp(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_MIG_ROOTS", "/tmp/roots")
    monkeypatch.setattr(slurmroot.os, "geteuid", lambda: 0)
    monkeypatch.setattr(slurmroot.shutil, "which", lambda *a, **k: "/usr/sbin/debootstrap")
    with pytest.raises(slurmroot.RootError, match="outside /tmp and the checkout"):
        slurmroot.build("trixie")
    with pytest.raises(slurmroot.RootError, match="unknown suite"):
        slurmroot.build("bullseye")


def test_shared_paths_cover_tmp_the_checkout_and_this_python() -> None:
    paths = shared_paths()
    assert paths[:2] == (Path("/tmp"), slurmroot.CHECKOUT)
    for prefix in (sys.prefix, sys.base_prefix):
        p = Path(prefix).resolve()
        if not str(p).startswith(("/usr", "/bin", "/lib")):
            assert any(p == s or s in p.parents for s in paths), p


def test_host_install_runs_commands_as_given() -> None:
    host = SlurmInstall("host", (22, 5, 8))
    assert host.argv(["squeue", "--json"]) == ["squeue", "--json"]
    assert host.argv(["id"], user="nobody") == ["runuser", "-u", "nobody", "--", "id"]


def test_root_commands_run_in_a_private_mount_namespace() -> None:
    root = SlurmInstall("sid", (26, 5, 5), Path("/var/cache/x y/sid"))
    argv = root.argv(["sbatch", "--wrap=true"], user="nobody")
    assert argv[:4] == ["unshare", "--mount", "--propagation", "private"]
    assert argv[-4:] == ["sh", "65534:65534", "sbatch", "--wrap=true"]
    script = argv[argv.index("-c") + 1]
    assert "mount -t proc proc '/var/cache/x y/sid'/proc" in script
    assert script.rstrip().endswith('''exec chroot --userspec="$user" '/var/cache/x y/sid' "$@"''')
    wrapper = root.wrapper("squeue")
    assert wrapper.startswith("#!/bin/sh\n# squeue of Slurm 26.05.5 (sid)\n")
    assert f'[ -e /{STAMP} ] && exec /usr/bin/squeue "$@"' in wrapper


def test_the_enter_script_is_valid_shell() -> None:
    argv = SlurmInstall("sid", (26, 5, 5), Path("/r")).argv(["true"])
    script = argv[argv.index("-c") + 1]
    assert subprocess.run(["sh", "-n", "-c", script]).returncode == 0


def test_build_command_line_says_what_is_wrong(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        slurmroot.main(["build", "bullseye"])
    assert "invalid choice: 'bullseye'" in capsys.readouterr().err
