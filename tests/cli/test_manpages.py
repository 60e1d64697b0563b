"""``make man`` and ``make completion``: the manual page and the bash and zsh completion,
generated from the argument parsers by argparse-manpage and shtab (the docs extra),
name every subcommand; troff reads the page without a warning and bash parses the
completion. The Makefile's own recipes run, into a temporary folder."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_mig.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
STAMP = ".venv/.installed-docs"  # the Makefile's pip install step, not rerun here


def _subcommands() -> list[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return list(sub.choices)


def _make(target: str, out: Path) -> None:
    for module, package in (("argparse_manpage", "argparse-manpage"), ("shtab", "shtab")):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{package} is not installed (pip install -e '.[docs]', or make docs)")
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    bin_dir = Path(sys.executable).parent
    done = subprocess.run(
        ["make", "-s", "-o", STAMP, target, f"DOCS_DIR={out}", f"BIN={bin_dir}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr


def test_the_man_page_names_every_subcommand(tmp_path):
    _make("man", tmp_path)
    page = (tmp_path / "man" / "man1" / "slurm-mig.1").read_text()
    assert page.startswith(".TH SLURM\\-MIG") and "slurm\\-mig \\- plan NVIDIA MIG" in page
    commands = _subcommands()
    assert {"status", "report", "avail", "explain", "planner"} <= set(commands)
    for name in commands:
        assert f".SH COMMAND \\fI\\,'slurm\\-mig {name.replace('-', chr(92) + '-')}'" in page, name
    assert "\\-\\-noheader" in page and "\\-\\-format" in page
    if shutil.which("groff") is not None:
        checked = subprocess.run(
            ["groff", "-man", "-Tutf8", "-ww", "-z", str(tmp_path / "man/man1/slurm-mig.1")],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert checked.returncode == 0 and checked.stderr == "", checked.stderr


def test_bash_and_zsh_completion_offer_every_subcommand(tmp_path):
    _make("completion", tmp_path)
    bash = tmp_path / "bash-completion" / "completions" / "slurm-mig"
    zsh = tmp_path / "zsh" / "site-functions" / "_slurm-mig"
    bash_text, zsh_text = bash.read_text(), zsh.read_text()
    assert zsh_text.startswith("#compdef slurm-mig")
    offered = bash_text.split("_subparsers=(")[1].split(")")[0].split()
    assert offered == _subcommands()
    for name in offered:
        assert re.search(rf"^\s+{re.escape(name)}:'", zsh_text, re.M), name
    assert "--noheader" in bash_text and "--profile" in bash_text
    # what a shell gets for 'slurm-mig st<TAB>'
    script = f"source {bash}; COMP_WORDS=(slurm-mig st); COMP_CWORD=1; "
    script += '_shtab_slurm_mig; printf "%s\\n" "${COMPREPLY[@]}"'
    got = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
    assert got.returncode == 0, got.stderr
    assert got.stdout.split() == ["status"]
