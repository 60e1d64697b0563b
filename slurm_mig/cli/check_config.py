"""``slurm-mig check-config``: check a config file and summarise it."""

from __future__ import annotations

import argparse
import os
import stat
import sys
from pathlib import Path

from ..geometry import MODELS
from .common import Formatter, wrap


def add_parser(sub) -> None:
    cc = sub.add_parser(
        "check-config",
        formatter_class=Formatter,
        help="check a slurm-mig config file and summarise it",
        description=wrap(
            "Read a slurm-mig config file and check every section and key: types, ranges, "
            "GPU models, hostlists, paths, and that the signing key (when it exists) is "
            "root's alone. Prints 'PATH: ok' and a summary (partition, nodes, GPUs by "
            "model, device backend, key, where the nodes report) and exits 0, or prints one line per problem "
            "(file, section.key, the fix) and exits 1. The annotated example is "
            "contrib/config.toml."
        ),
    )
    cc.add_argument(
        "path",
        metavar="PATH",
        nargs="?",
        help="config file (default: $SLURM_MIG_CONFIG, else /etc/slurm-mig/config.toml)",
    )
    cc.set_defaults(handler=run)


GRES_SUMMARY = {
    "on": "each job's instance record and its slices (slurm.conf: GresTypes=gpu,mig_slice; "
    "gres.conf and Gres= from 'slurm-mig gres-conf')",
    "records": "each job's instance record; no slice count (accounting: one gres/gpu a job)",
    "off": "none (any job on a node can open any instance: test clusters only)",
}


def run(args: argparse.Namespace) -> int:
    from ..config import ConfigError, config_path, load_config

    path = config_path(args.path)
    try:
        config = load_config(args.path)
        key = key_summary(config.key_file, path)
    except ConfigError as exc:
        for problem in exc.problems:
            print(problem)
        n = len(exc.problems)
        print(f"{path}: {n} problem{'s' if n != 1 else ''}", file=sys.stderr)
        return 1
    counts: dict[str, int] = {}
    for models in config.nodes.values():
        for m in models:
            counts[m] = counts.get(m, 0) + 1
    gpus = sum(counts.values())
    order = list(MODELS)
    by_model = ", ".join(f"{counts[m]} x {m}" for m in sorted(counts, key=order.index))
    print(f"{path}: ok")
    print(f"partition  {config.partition}")
    print(f"nodes      {len(config.nodes)}")
    print(f"gpus       {gpus} ({by_model})")
    print(f"backend    {config.backend}")
    print(f"gres       {GRES_SUMMARY[config.gres]}")
    print(f"key        {key}")
    if config.reports:
        print(f"reports    {config.reports} (TCP: the nodes send, the planner listens)")
    else:
        print("reports    off (the planner reads the node files it can see)")
    return 0


def key_summary(path: Path, source: Path) -> str:
    """How the signing key looks to the hooks (which run as root); ConfigError naming
    the fix when they would refuse it (readable by others, not root's, a symlink)."""
    from ..config import ConfigError
    from ..slurm.assignment import key_problem

    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return f"{path} (missing: create it with 'slurm-mig keygen {path}')"
    except OSError as exc:
        raise ConfigError(f"{source}: paths.key_file: {path}: {exc.strerror}") from None
    problem = key_problem(st, path, euid=0)
    if problem:
        raise ConfigError(f"{source}: paths.key_file: {problem}")
    return f"{path} (owner root, mode {stat.S_IMODE(st.st_mode):04o})"
