"""The site files an admin installs beside the package (config example, job_submit.lua,
systemd units, alert rules, Grafana dashboard): where the installed package keeps them,
and how they are filled in with the paths and sizes of one site.

They ship in the wheel as package data (``slurm_mig/contrib``; the source tree's
``contrib`` links there). The templates name the README's install (``/opt/slurm-mig``);
:func:`render` puts this install's paths in their place. Pure functions, but for
:func:`site_dir`, which asks the import system where the package is.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from .hints import largest_profile_memory

PACKAGE_FOLDER = "contrib"  # inside slurm_mig/
TEMPLATE_BIN = "/opt/slurm-mig/bin"  # the bin directory the templates name
DEFAULT_CONFIG = "/etc/slurm-mig/config.toml"
CONFIG_LINE = f"#Environment=SLURM_MIG_CONFIG={DEFAULT_CONFIG}"
MAX_MIG_MEM_LINE = re.compile(r"^local MAX_MIG_MEM = .*$", re.MULTILINE)
MIG_PARTITION_LINE = re.compile(r'^local MIG_PARTITION = ".*"$', re.MULTILINE)
# characters a path may not have in a unit file line (systemd splits and unquotes them)
_UNIT_UNSAFE = re.compile(r"[\s\"'\\;]")


@dataclass(frozen=True)
class SiteFile:
    """One site file: its name and where an admin puts it (operator wording)."""

    name: str
    where: str


SITE_FILES: tuple[SiteFile, ...] = (
    SiteFile(
        "config.toml",
        "annotated example: /etc/slurm-mig/config.toml on the planner host and every GPU "
        "node (the same file); list your [nodes], then 'slurm-mig check-config'",
    ),
    SiteFile(
        "job_submit.lua",
        "beside slurm.conf as job_submit.lua on the slurmctld host(s); "
        "JobSubmitPlugins=lua in slurm.conf, then 'scontrol reconfigure'",
    ),
    SiteFile(
        "slurm-mig-caps.service",
        "/etc/systemd/system/ on every GPU node; 'systemctl daemon-reload && systemctl "
        "enable slurm-mig-caps' (slurmd then starts only once it succeeded)",
    ),
    SiteFile(
        "slurm-mig-planner.service",
        "/etc/systemd/system/ on the slurmctld host; 'systemctl daemon-reload && "
        "systemctl enable --now slurm-mig-planner'",
    ),
    SiteFile(
        "slurm-mig-planner-standby.service",
        "/etc/systemd/system/ on Slurm's backup controller instead of the planner unit; "
        "'systemctl enable --now slurm-mig-planner-standby'",
    ),
    SiteFile(
        "slurm-mig-node-flush.service",
        "/etc/systemd/system/ on every GPU node, with its timer",
    ),
    SiteFile(
        "slurm-mig-node-flush.timer",
        "/etc/systemd/system/ on every GPU node; 'systemctl daemon-reload && systemctl "
        "enable --now slurm-mig-node-flush.timer'",
    ),
    SiteFile(
        "slurm-mig-alerts.yml",
        "Prometheus: add it to rule_files (e.g. /etc/prometheus/slurm-mig-alerts.yml)",
    ),
    SiteFile("grafana-slurm-mig.json", "Grafana: Dashboards > Import"),
)
NAMES = tuple(f.name for f in SITE_FILES)


@dataclass(frozen=True)
class Install:
    """What one site's files are filled in with."""

    bin_dir: Path  # where this install's slurm-mig and hook scripts are
    config: Path | None = None  # a config path other than the default, for the units
    max_mig_mem: int = 0  # bytes of the largest MIG profile of the site's GPUs (0: no limit)
    partition: str | None = None  # the MIG partition of the site's config


def site_dir() -> Path:
    """The installed package's folder of site templates (a directory on disk)."""
    folder = resources.files("slurm_mig") / PACKAGE_FOLDER
    path = Path(str(folder))
    if not path.is_dir():
        raise FileNotFoundError(
            f"{path}: this slurm-mig install has no site files; reinstall it from a "
            "wheel or source tree of slurm-mig"
        )
    return path


def site_file(name: str) -> Path:
    """The installed template ``name`` (e.g. ``job_submit.lua``), as shipped."""
    if name not in NAMES:
        raise ValueError(f"no site file {name!r}; site files: {', '.join(NAMES)}")
    return site_dir() / name


def max_mig_memory(models: Iterable[str]) -> int:
    """Bytes of the largest MIG profile among ``models`` (0 when there are none): no job
    of the partition can get more memory than that (the hint parser's own bound)."""
    return largest_profile_memory(models)


def render(name: str, text: str, install: Install) -> str:
    """Template ``name`` with ``install`` filled in."""
    if name.endswith((".service", ".timer")):
        return render_unit(text, install.bin_dir, install.config)
    if name == "job_submit.lua":
        return render_lua(text, install.max_mig_mem, install.partition)
    return text


def render_unit(text: str, bin_dir: Path, config: Path | None) -> str:
    """A unit with ``bin_dir`` for the templates' bin directory and, for a config that is
    not at the default path, ``Environment=SLURM_MIG_CONFIG=...`` switched on."""
    text = text.replace(TEMPLATE_BIN + "/", _unit_path(bin_dir) + "/")
    if config is not None and str(config) != DEFAULT_CONFIG:
        text = text.replace(CONFIG_LINE, f"Environment=SLURM_MIG_CONFIG={_unit_path(config)}")
    return text


def render_lua(text: str, max_mig_mem: int, partition: str | None = None) -> str:
    """job_submit.lua with its ``MAX_MIG_MEM`` line set to ``max_mig_mem`` bytes and, if
    given, its ``MIG_PARTITION``; a line that is absent is left so."""
    if max_mig_mem < 0:
        raise ValueError(f"MAX_MIG_MEM must be >= 0 bytes, not {max_mig_mem}")
    text = MAX_MIG_MEM_LINE.sub(f"local MAX_MIG_MEM = {int(max_mig_mem)}", text, count=1)
    if partition is not None:
        line = f"local MIG_PARTITION = {lua_string(partition)}"
        text = MIG_PARTITION_LINE.sub(lambda _m: line, text, count=1)
    return text


def lua_string(value: str) -> str:
    """``value`` as a Lua 5.1 string literal (quotes, backslashes and control bytes
    escaped)."""
    out = []
    for byte in value.encode("utf-8"):
        ch = chr(byte)
        if ch in '"\\':
            out.append("\\" + ch)
        elif 32 <= byte < 127:
            out.append(ch)
        else:
            out.append(f"\\{byte:03d}")
    return '"' + "".join(out) + '"'


def _unit_path(path: Path) -> str:
    """``path`` as a unit file may hold it: absolute, no blank or quote, % doubled."""
    text = str(path)
    if not text.startswith("/") or _UNIT_UNSAFE.search(text):
        raise ValueError(
            f"{text}: systemd units need an absolute path without blanks or quotes; "
            "install slurm-mig (and its config) under such a path"
        )
    return text.replace("%", "%%")
