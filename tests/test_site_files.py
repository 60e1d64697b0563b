"""``slurm-mig site-files``: the site files ship as package data and are written with
this install's paths, the site's partition and its largest MIG profile filled in; never
over an existing file without --force; bad input is one line."""

from __future__ import annotations

import configparser
import shutil
import sysconfig
from pathlib import Path

import pytest

from slurm_mig import config as config_module
from slurm_mig import sitefiles
from slurm_mig.cli import main
from slurm_mig.cli import site_files as cli_site_files
from slurm_mig.geometry import get_model
from slurm_mig.sitefiles import (
    NAMES,
    lua_string,
    max_mig_memory,
    render_lua,
    render_unit,
    site_dir,
    site_file,
)

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sysconfig.get_path("scripts"))
UNITS = [n for n in NAMES if n.endswith((".service", ".timer"))]
SITE = """\
[slurm]
partition = "gpu-mig"
[nodes]
"a[1-2]" = ["A100-40GB", "A100-40GB"]
"h1" = ["H100-80GB"]
"""


@pytest.fixture(autouse=True)
def no_site_config(tmp_path, monkeypatch):
    """No config at the default path nor in the environment, whatever this host has."""
    monkeypatch.delenv("SLURM_MIG_CONFIG", raising=False)
    monkeypatch.setattr(config_module, "DEFAULT_CONFIG_PATH", tmp_path / "absent.toml")


@pytest.fixture
def lua_with_limit(tmp_path, monkeypatch) -> Path:
    """Templates whose job_submit.lua has the MAX_MIG_MEM line, whether or not the
    shipped one has it yet."""
    templates = tmp_path / "templates"
    shutil.copytree(site_dir(), templates)
    lua = templates / "job_submit.lua"
    text = lua.read_text()
    if not sitefiles.MAX_MIG_MEM_LINE.search(text):
        text = text.replace(
            'local MIG_PARTITION = "mig"\n',
            'local MIG_PARTITION = "mig"\nlocal MAX_MIG_MEM = 0\n',
        )
    lua.write_text(text)
    monkeypatch.setattr(cli_site_files, "site_dir", lambda: templates)
    return templates


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_every_site_file_ships_as_package_data_and_contrib_links_there():
    shipped = site_dir()
    assert shipped == Path(sitefiles.__file__).parent / "contrib"
    assert sorted(p.name for p in shipped.iterdir()) == sorted(NAMES)
    # setup.cfg ships contrib/*: a subfolder would be left out of the wheel
    assert all(p.is_file() for p in shipped.iterdir())
    assert (ROOT / "contrib").resolve() == shipped.resolve()
    assert site_file("job_submit.lua").read_text().startswith("--[[")
    with pytest.raises(ValueError, match="no site file"):
        site_file("../setup.cfg")


def test_writes_every_file_with_this_installs_bin_dir(tmp_path, capsys, lua_with_limit):
    out_dir = tmp_path / "site" / "new"
    rc, out, err = run(capsys, "site-files", str(out_dir))
    assert rc == 0 and err == ""
    for name in NAMES:
        path = out_dir / name
        assert f"  {path}\n" in out
        assert path.stat().st_mode & 0o777 == 0o644
    assert "Next steps" in out and f"Prolog={BIN}/slurm-mig-prolog" in out
    flat = " ".join(out.split())
    assert "GresTypes=gpu,mig_slice" in flat and "gres/mig_slice" in flat
    assert "GRES/mig_slice=<w>" in flat  # how fairshare charges by slices
    assert "MAX_MIG_MEM = 0" in out  # no site config: says how to get the limit
    for name in UNITS:
        text = (out_dir / name).read_text()
        assert "/opt/slurm-mig" not in text
        assert "Documentation=man:slurm-mig(1)" in text
        if name.endswith(".service"):
            assert "\n#Environment=SLURM_MIG_CONFIG=/etc/slurm-mig/config.toml\n" in text
    caps = (out_dir / "slurm-mig-caps.service").read_text()
    assert f"ExecStart={BIN}/slurm-mig gres-conf --check-ids" in caps
    assert (BIN / "slurm-mig").is_file()
    # files without paths are the shipped ones
    for name in ("config.toml", "slurm-mig-alerts.yml", "grafana-slurm-mig.json"):
        assert (out_dir / name).read_text() == (site_dir() / name).read_text()
    assert "\nlocal MAX_MIG_MEM = 0\n" in (out_dir / "job_submit.lua").read_text()


def test_a_site_config_fills_in_partition_memory_limit_and_units(tmp_path, capsys, lua_with_limit):
    site = tmp_path / "site.toml"
    site.write_text(SITE)
    rc, out, err = run(capsys, "site-files", "--config", str(site), str(tmp_path / "out"))
    assert rc == 0, err
    lua = (tmp_path / "out" / "job_submit.lua").read_text()
    h100 = get_model("H100-80GB").memory_bytes
    assert h100 > get_model("A100-40GB").memory_bytes  # the largest of the site's models
    assert f"\nlocal MAX_MIG_MEM = {h100}\n" in lua
    assert '\nlocal MIG_PARTITION = "gpu-mig"\n' in lua
    assert f"more than {h100} bytes" in " ".join(out.split())
    for name in UNITS:
        if name.endswith(".service"):
            text = (tmp_path / "out" / name).read_text()
            assert f"\nEnvironment=SLURM_MIG_CONFIG={site}\n" in text
    assert f"the units read {site}" in " ".join(out.split())


def test_the_config_in_the_environment_is_the_site_config(tmp_path, capsys, monkeypatch):
    site = tmp_path / "env.toml"
    site.write_text(SITE.replace("gpu-mig", "envpart"))
    monkeypatch.setenv("SLURM_MIG_CONFIG", str(site))
    assert run(capsys, "site-files", str(tmp_path / "out"))[0] == 0
    assert 'local MIG_PARTITION = "envpart"' in (tmp_path / "out" / "job_submit.lua").read_text()


def test_never_overwrites_without_force_and_never_writes_through_a_link(tmp_path, capsys):
    out_dir = tmp_path / "out"
    assert run(capsys, "site-files", str(out_dir))[0] == 0
    (out_dir / "slurm-mig-planner.service").write_text("mine\n")
    rc, out, err = run(capsys, "site-files", str(out_dir))
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("slurm-mig: error: ")
    assert "--force" in err and "9 of the 9" in err
    assert (out_dir / "slurm-mig-planner.service").read_text() == "mine\n"
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    (out_dir / "config.toml").unlink()
    (out_dir / "config.toml").symlink_to(victim)
    assert run(capsys, "site-files", "--force", str(out_dir))[0] == 0
    assert victim.read_text() == "keep\n"
    assert not (out_dir / "config.toml").is_symlink()
    assert (out_dir / "slurm-mig-planner.service").read_text() != "mine\n"


@pytest.mark.parametrize(
    "make,expect",
    [
        (lambda d: (d.write_text("x"), d)[1], "not a directory"),
        (lambda d: (d.write_text("x"), d / "sub")[1], "is a file"),
    ],
)
def test_a_bad_dir_is_one_line(tmp_path, capsys, make, expect):
    target = make(tmp_path / "f")
    rc, out, err = run(capsys, "site-files", str(target))
    assert rc == 2 and out == "" and err.count("\n") == 1
    assert expect in err and str(target) in err


def test_a_bad_or_missing_config_is_one_line_naming_the_fix(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text(SITE + "[planner]\nbatch_size = -1\ncycle = 0\n")
    rc, out, err = run(capsys, "site-files", "--config", str(bad), str(tmp_path / "o"))
    assert rc == 2 and err.count("\n") == 1
    assert f"'slurm-mig check-config {bad}'" in err and "2 problems" in err
    missing = tmp_path / "missing.toml"
    rc, _, err = run(capsys, "site-files", "--config", str(missing), str(tmp_path / "o"))
    assert rc == 2 and err.count("\n") == 1 and "site-files DIR" in err
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())


def test_render_lua_sets_the_limit_line_or_leaves_the_file_alone():
    text = 'local A = 1\nlocal MAX_MIG_MEM = 0 -- bytes, 0 = no limit\nlocal B = "x"\n'
    assert render_lua(text, 42_000) == 'local A = 1\nlocal MAX_MIG_MEM = 42000\nlocal B = "x"\n'
    without = 'local A = 1\n-- local MAX_MIG_MEM = 0\nlocal B = "x"\n'
    assert render_lua(without, 42_000) == without
    with pytest.raises(ValueError):
        render_lua(text, -1)


def test_the_largest_profile_is_the_whole_gpu_of_the_largest_model():
    assert max_mig_memory([]) == 0
    assert max_mig_memory(["A100", "A30-24GB"]) == get_model("A100-40GB").memory_bytes
    a100 = get_model("A100-40GB")
    assert max(p.memory_bytes for p in a100.profiles) == a100.profile("7g.40gb").memory_bytes
    assert 39 * 2**30 < max_mig_memory(["A100-40GB"]) < 40 * 2**30


def test_lua_strings_and_unit_paths_are_escaped_or_refused():
    assert lua_string('a"b\\c\n') == '"a\\"b\\\\c\\010"'
    unit = "[Service]\nExecStart=/opt/slurm-mig/bin/slurm-mig planner\n"
    assert "ExecStart=/srv/50%%/bin/slurm-mig planner" in render_unit(
        unit, Path("/srv/50%/bin"), None
    )
    with pytest.raises(ValueError, match="without blanks"):
        render_unit(unit, Path("/srv/my venv/bin"), None)
    with pytest.raises(ValueError, match="absolute"):
        render_unit(unit, Path("venv/bin"), None)


def test_each_option_has_one_line_of_help(capsys):
    with pytest.raises(SystemExit):
        main(["site-files", "--help"])
    out = capsys.readouterr().out
    options = out.split("options:\n", 1)[1]
    lines = [ln for ln in options.splitlines() if ln.strip()]
    assert len(lines) == 3 and all(ln.startswith("  -") for ln in lines), lines


def test_the_written_units_parse_as_ini(tmp_path, capsys):
    assert run(capsys, "site-files", str(tmp_path))[0] == 0
    for name in UNITS:
        unit = configparser.ConfigParser(strict=False, interpolation=None)
        unit.read(tmp_path / name)
        assert unit["Unit"]["Description"].startswith("slurm-mig")
        kind = name.rsplit(".", 1)[1].capitalize()  # [Service] or [Timer]
        assert unit.has_section(kind), name
    # the flush service is started by its timer alone; every other unit is enabled
    installable = [n for n in UNITS if n != "slurm-mig-node-flush.service"]
    assert all("[Install]" in (tmp_path / n).read_text() for n in installable)
