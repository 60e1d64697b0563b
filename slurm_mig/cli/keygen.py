"""``slurm-mig keygen``: write a new key for signing job assignments."""

from __future__ import annotations

import argparse
from pathlib import Path

from .common import PROG, Formatter, wrap


def add_parser(sub) -> None:
    kg = sub.add_parser(
        "keygen",
        formatter_class=Formatter,
        help="write a new key for signing job assignments",
        description=wrap(
            "Write a new random HMAC key (hex, mode 0600) that the planner signs job "
            "assignments with and the prolog checks them with. Copy the same file to "
            "every node, owner root. An existing key is never overwritten: remove it "
            "first to replace it."
        ),
    )
    kg.add_argument(
        "path",
        metavar="PATH",
        nargs="?",
        help="where to write the key (default: key_file of the config, else /etc/slurm-mig/key)",
    )
    kg.add_argument(
        "--config",
        metavar="CONFIG",
        help="config file whose key_file is the default PATH "
        "(default: $SLURM_MIG_CONFIG, else /etc/slurm-mig/config.toml)",
    )
    kg.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from ..config import (
        DEFAULT_CONFIG_PATH,
        DEFAULT_KEY_FILE,
        ConfigError,
        config_path,
        load_config,
    )
    from ..slurm.assignment import generate_key

    if args.path:
        path = Path(args.path)
    else:
        source = config_path(args.config)
        if source != DEFAULT_CONFIG_PATH or source.exists():  # a chosen config must load
            try:
                path = load_config(args.config).key_file
            except ConfigError as exc:
                if len(exc.problems) == 1:
                    raise
                raise ConfigError(
                    f"{source}: cannot take key_file from this config ({len(exc.problems)} "
                    f"problems; run '{PROG} check-config {source}'), or give the key PATH"
                ) from None
        else:
            path = DEFAULT_KEY_FILE
    try:
        written = generate_key(path)
    except FileExistsError:
        raise FileExistsError(
            f"{path} already exists; not overwriting a signing key (remove it first to "
            "replace it, then copy the new key to every node)"
        ) from None
    except PermissionError:
        raise PermissionError(
            f"{path}: permission denied; run as root or give another PATH"
        ) from None
    print(f"{written}: new signing key written (mode 0600); copy it to every node, owner root")
    return 0
