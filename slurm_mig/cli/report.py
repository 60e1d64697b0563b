"""``slurm-mig report``: usage totals by user, account, MIG profile or job kind, from
the planner's accounting store (slurm_mig/slurm/accounting.py)."""

from __future__ import annotations

import argparse
import json
from datetime import datetime
from pathlib import Path

from ..safetext import printable
from .common import Formatter, wrap


def add_parser(sub) -> None:
    p = sub.add_parser(
        "report",
        formatter_class=Formatter,
        help="usage totals to bill by: runs, slice-seconds, GPU-hours, energy (admins)",
        description=wrap(
            "Totals of the finished runs the nodes' Epilogs reported to the planner "
            "(<state_dir>/accounting.sqlite): runs, restarted runs, seconds, "
            "slice-seconds, GPU-hours (slice-seconds over the GPU's slices) and energy, "
            "per user, account, MIG profile or job kind (hint key) and GPU model. "
            "Energy is modelled from the GPU's power curve, not measured. Nodes that "
            "have not reported (or not for a day) are named on stderr, with since when."
        ),
    )
    p.add_argument("--config", metavar="PATH", help="config file (default: as the planner)")
    p.add_argument("--by", choices=("user", "account", "profile", "key"), default="user")
    p.add_argument(
        "--since", metavar="DATE", help="runs that ended from DATE on (YYYY-MM-DD[THH:MM])"
    )
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--csv", action="store_true", help="CSV with a header line")
    fmt.add_argument("--json", action="store_true", help="a JSON list")
    p.set_defaults(handler=run)


def _since(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        raise ValueError(f"--since {text[:40]!r} is not a date; give e.g. 2026-11-01") from None


def _silent(config) -> None:
    """One line on stderr per configured node the totals may lack: with ``[planner]
    reports`` on, each node that has sent no report (since the receiver started keeping
    them) or none for a day; off, each node whose accounting log this host cannot see."""
    import sys
    import time

    from ..slurm.accounting import node_logs
    from ..slurm.receiver import ReportDB, silent_nodes
    from ..statusview import ago

    now = time.time()
    if not config.reports:
        seen = node_logs(config)
        for node in config.nodes:
            if node not in seen:
                print(
                    f"slurm-mig report: node {node}: no accounting log readable here "
                    "(set [planner] reports so that nodes report to the planner)",
                    file=sys.stderr,
                )
        return
    try:
        started = ReportDB(config.state_dir).started()
        silent = silent_nodes(config, now)
    except Exception as exc:  # an unreadable store: the totals say so themselves
        print(f"slurm-mig report: node reports not readable: {exc}", file=sys.stderr)
        return
    for node, last in silent:
        if last is None:
            since = f"since {ago(started, now)}" if started else "yet (no report received)"
            print(f"slurm-mig report: node {node}: no report {since}", file=sys.stderr)
        else:
            print(
                f"slurm-mig report: node {node}: silent, last report {ago(last, now)}",
                file=sys.stderr,
            )


def _cell(value: object) -> object:
    """A CSV cell: strings with their control characters escaped (`printable`)."""
    return printable(value) if isinstance(value, str) else value


def run(args: argparse.Namespace) -> int:
    from ..config import load_config
    from ..slurm.accounting import report, rows_csv

    config = load_config(args.config)
    since = _since(args.since)
    path = Path(config.state_dir)
    try:
        rows = report(path, args.by, since)
    except PermissionError:
        raise ValueError(f"cannot read {path}: the accounting store is root's") from None
    _silent(config)
    if args.json:
        print(json.dumps(rows, indent=1))
    elif args.csv:
        print(rows_csv([{k: _cell(v) for k, v in r.items()} for r in rows]), end="")
    else:
        if not rows:
            print("no finished runs recorded yet")
            return 0
        head = f"{args.by.upper():<16} {'MODEL':<10} {'RUNS':>5} {'RESTARTS':>8} {'SECONDS':>10} "
        head += f"{'SLICE-S':>10} {'GPU-H':>8} {'KWH*':>9}  PROFILES"
        print(head)
        for r in rows:
            who, model = printable(r[args.by], 64), printable(r["model"], 32)
            print(
                f"{who:<16} {model:<10} {r['runs']:>5} {r['restarts']:>8} "
                f"{r['seconds']:>10.1f} {r['slice_seconds']:>10.1f} {r['gpu_hours']:>8.4f} "
                f"{r['energy_kwh']:>9.5f}  {r['profiles']}"
            )
        print("* energy modelled from the GPU's power curve (no energy counter read)")
    return 0
