"""``slurm-mig node-flush``: deliver a node's spooled reports to the planner (a systemd
timer on every node runs it; the hooks deliver what they can themselves)."""

from __future__ import annotations

import argparse
import sys

from .common import Formatter, add_node_options, node_config, wrap


def add_parser(sub) -> None:
    p = sub.add_parser(
        "node-flush",
        formatter_class=Formatter,
        help="send this node's spooled reports to the planner (root, on a node)",
        description=wrap(
            "Deliver the reports the hooks of this node spooled in "
            "<run_dir>/private/reports (finished runs, MIG instances, memory needs) to "
            "[planner] reports, signed with key_file, until the spool is empty or the "
            "planner cannot be reached; delivered reports are removed from the spool. "
            "Exit status 0 when the spool is empty afterwards, 1 when reports are left. "
            "Run by contrib/slurm-mig-node-flush.timer (README: Node reports)."
        ),
    )
    add_node_options(p)
    p.add_argument(
        "--timeout",
        type=float,
        default=10.0,
        metavar="S",
        help="seconds one delivery may take (default 10)",
    )
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from ..config import parse_address
    from ..node.reports import Spool
    from ..slurm.assignment import load_key

    if not 0.1 <= args.timeout <= 600:
        raise ValueError(f"--timeout {args.timeout:g}: give 0.1 to 600 seconds")
    config, node = node_config(args)
    address = parse_address(config.reports)
    if address is None:
        raise ValueError("[planner] reports is off in the config: there is nowhere to send to")
    key = load_key(config.key_file)  # reports spooled before a key rotation go out re-signed
    warnings: list[str] = []
    spool = Spool(config.run_dir_for(node), warn=warnings.append)
    delivered, problem = 0, None
    while True:
        before = len(spool.pending())
        if not before:
            break
        sent, problem = spool.flush(
            address, seconds=args.timeout, connect_timeout=args.timeout, key=key
        )
        delivered += sent
        if problem or len(spool.pending()) >= before:
            break
    for text in warnings:
        print(f"slurm-mig node-flush: {text}", file=sys.stderr)
    left = len(spool.pending())
    print(f"{node}: {delivered} report(s) delivered, {left} left in {spool.dir}")
    if problem:
        print(f"slurm-mig node-flush: {problem}", file=sys.stderr)
    return 0 if left == 0 else 1
