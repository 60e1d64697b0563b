"""``slurm-mig site-files``: write the site files (config example, job_submit.lua,
systemd units, alert rules, Grafana dashboard) with this install's paths filled in."""

from __future__ import annotations

import argparse
import sys
import sysconfig
import textwrap
from pathlib import Path

from ..sitefiles import (
    DEFAULT_CONFIG,
    MAX_MIG_MEM_LINE,
    NAMES,
    SITE_FILES,
    Install,
    max_mig_memory,
    render,
    site_dir,
)
from .common import PROG, Formatter, wrap


def add_parser(sub) -> None:
    p = sub.add_parser(
        "site-files",
        formatter_class=Formatter,
        help="write the config example, job_submit.lua and systemd units for this install",
        description=wrap(
            "Write the site files an admin installs beside slurm-mig into DIR: the "
            "annotated config.toml, job_submit.lua, the systemd units (boot-time MIG "
            "capability nodes, planner, standby planner, node report flush and its "
            "timer), the Prometheus alert rules and the Grafana dashboard. The units run "
            "this install's slurm-mig; job_submit.lua gets the partition of the site "
            "config and, as MAX_MIG_MEM, the memory of the largest MIG profile of its "
            "GPU models (jobs that ask for more are refused at submission). Prints the "
            "files written and where each goes."
        ),
    )
    p.add_argument("dir", metavar="DIR", help="directory to write them into (created if missing)")
    p.add_argument(
        "--config",
        metavar="CONFIG",
        help="site config to fill in (default as elsewhere, if it exists)",
    )
    p.add_argument("--force", action="store_true", help="overwrite files that exist in DIR")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    install = _install(args.config)
    target = _target_dir(Path(args.dir))
    source = site_dir()
    if not args.force:
        present = [name for name in NAMES if (target / name).exists()]
        if present:
            raise FileExistsError(
                f"{target / present[0]} exists ({len(present)} of the {len(NAMES)} site "
                "files are there); give --force to overwrite them, or another DIR"
            )
    texts = {name: render(name, (source / name).read_text(), install) for name in NAMES}
    written = []
    for name, text in texts.items():
        path = target / name
        try:
            path.unlink(missing_ok=True)  # never write through a link left there
            path.write_text(text)
            path.chmod(0o644)
        except IsADirectoryError:
            raise IsADirectoryError(
                f"{path}: is a directory; remove it or give another DIR"
            ) from None
        except PermissionError:
            raise PermissionError(f"{path}: permission denied; give a DIR you may write") from None
        written.append(path)
    limit = install.max_mig_mem if MAX_MIG_MEM_LINE.search(texts["job_submit.lua"]) else None
    _report(target, written, install, limit)
    return 0


def _install(config_arg: str | None) -> Install:
    """This install: its bin directory, and what the site config says, if there is one."""
    from ..config import DEFAULT_CONFIG_PATH, ConfigError, config_path, load_config

    bin_dir = _bin_dir()
    source = config_path(config_arg)
    if config_arg is None and source == DEFAULT_CONFIG_PATH and not source.exists():
        return Install(bin_dir)  # no site config yet: write the files as shipped
    try:
        config = load_config(source)
    except ConfigError as exc:
        if len(exc.problems) == 1:
            raise
        raise ConfigError(
            f"{source}: cannot fill in the site files from this config "
            f"({len(exc.problems)} problems; run '{PROG} check-config {source}')"
        ) from None
    models = {m for gpus in config.nodes.values() for m in gpus}
    return Install(
        bin_dir,
        config=source.absolute(),
        max_mig_mem=max_mig_memory(models),
        partition=config.partition,
    )


def _bin_dir() -> Path:
    """The directory of this install's console scripts (slurm-mig, the hooks)."""
    candidates = [Path(sysconfig.get_path("scripts"))]
    user = sysconfig.get_preferred_scheme("user")
    candidates.append(Path(sysconfig.get_path("scripts", user)))
    candidates.append(Path(sys.argv[0]).absolute().parent)
    for path in candidates:
        if (path / PROG).is_file():
            return path
    raise FileNotFoundError(
        f"no {PROG} script in {candidates[0]} (the scripts directory of "
        f"{sys.executable}); install slurm-mig with pip and run that install's "
        f"'{PROG} site-files'"
    )


def _target_dir(path: Path) -> Path:
    """DIR, created if missing; one line naming the problem if it cannot be."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise NotADirectoryError(
            f"{path}: not a directory; give a directory for the site files"
        ) from None
    except NotADirectoryError:
        raise NotADirectoryError(
            f"{path}: a part of this path is a file; give another DIR"
        ) from None
    except PermissionError:
        raise PermissionError(f"{path}: permission denied; give a DIR you may write") from None
    return path


def _report(target: Path, written: list[Path], install: Install, limit: int | None) -> None:
    """The files written, then where each goes and what was filled in."""
    print(f"{len(written)} site files written to {target}:")
    for path in written:
        print(f"  {path}")
    print()
    print("Next steps (as root; README, 'Install'):")
    for f in SITE_FILES:
        print(_item(f"{f.name}: {f.where}"))
    if limit:
        print(
            _item(
                f"job_submit.lua refuses MIG jobs that ask for more than {limit} bytes "
                f"({limit / 2**30:.2f} GiB: the largest MIG profile of the site's GPUs)"
            )
        )
    elif limit == 0 and install.partition is None:
        print(
            _item(
                "job_submit.lua has no memory limit (MAX_MIG_MEM = 0): no site config was "
                f"read; run '{PROG} site-files --config CONFIG --force DIR' once its "
                "[nodes] lists your GPUs"
            )
        )
    b = install.bin_dir
    print(
        _item(
            f"slurm.conf: Prolog={b}/slurm-mig-prolog Epilog={b}/slurm-mig-epilog "
            f"TaskProlog={b}/slurm-mig-taskprolog PrologFlags=Alloc JobSubmitPlugins=lua"
        )
    )
    print(
        _item(
            "slurm.conf: GresTypes=gpu,mig_slice, each MIG node's Gres= from "
            f"'{PROG} gres-conf --node-gres' (its gres.conf from '{PROG} gres-conf'); "
            "with slurmdbd, AccountingStorageTRES=gres/gpu,gres/mig_slice (sacct then "
            "shows each job's slices) and the MIG partition's TRESBillingWeights=\"...,"
            'GRES/mig_slice=<w>" (fairshare charges by slices)'
        )
    )
    if install.config is not None and str(install.config) != DEFAULT_CONFIG:
        print(
            _item(
                f"the units read {install.config}; Slurm starts the hooks without "
                "SLURM_MIG_CONFIG: wrap each hook in a script that exports it "
                "(README, 'Install')"
            )
        )


def _item(text: str) -> str:
    """One entry of the next steps, wrapped under its first line."""
    return textwrap.fill(
        text,
        width=79,
        initial_indent="  ",
        subsequent_indent="      ",
        break_on_hyphens=False,
        break_long_words=False,
    )
