"""``slurm-mig report``: usage totals by user, account, MIG profile or job kind, from
the planner's accounting store (slurm_mig/slurm/accounting.py)."""

from __future__ import annotations

import argparse
import json
from datetime import datetime
from pathlib import Path

from ..safetext import printable
from .columns import (
    Column,
    Field,
    add_options,
    check_json,
    fields_help,
    format_lines,
    parse_format,
)
from .common import Formatter, wrap

# -o/--format; %k's header is the --by key (USER, ACCOUNT, PROFILE, KEY)
COLUMNS = (
    Column("k", "USER", "what the totals are by (--by: user, account, profile, key)"),
    Column("m", "MODEL", "GPU model"),
    Column("n", "RUNS", "finished runs"),
    Column("R", "RESTARTS", "of them, restarted runs"),
    Column("s", "SECONDS", "seconds run"),
    Column("c", "SLICE-S", "slice-seconds (compute slices x seconds)"),
    Column("h", "GPU-H", "GPU-hours (slice-seconds over the GPU's slices)"),
    Column(
        "e", "KWH*", "energy in kWh: measured where the GPU has an energy counter, else modelled"
    ),
    Column("S", "SOURCE", "what KWH is: measured, modelled, or mixed (some runs each)"),
    Column("E", "MODEL-KWH", "energy in kWh modelled from the GPU's power curve, for all runs"),
    Column("p", "PROFILES", "the MIG profiles the runs had"),
)
DEFAULT_FORMAT = "%k %m %.n %.R %.s %.c %.h %.e %S  %p"
FOOTNOTE = (
    "* energy modelled from the GPU's power curve where SOURCE is modelled; measured "
    "(the GPU's energy counter, split across its runs by compute slices and time) where "
    "it is measured"
)


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
            "Energy is measured where the GPU has an energy counter (NVML: the GPU's "
            "counter read at each Prolog and Epilog and split across the runs on it by "
            "compute slices), else modelled from the GPU's power curve; SOURCE says "
            "which. Nodes that "
            "have not reported (or not for a day) are named on stderr, with since when."
        ),
        epilog=fields_help(COLUMNS),
    )
    p.add_argument("--config", metavar="PATH", help="config file (default: as the planner)")
    p.add_argument("--by", choices=("user", "account", "profile", "key"), default="user")
    p.add_argument(
        "--since", metavar="DATE", help="runs that ended from DATE on (YYYY-MM-DD[THH:MM])"
    )
    fmt = add_options(p, DEFAULT_FORMAT, "and no footnote; with --csv, no CSV header")
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

    from ..daemon.receiver import ReportDB, silent_nodes
    from ..daemon.statusview import ago
    from ..slurm.accounting import node_logs

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


def rows(report_rows: list[dict], by: str) -> list[dict[str, str]]:
    """The totals as rows of cells (letter -> text) for -o/--format."""
    return [
        {
            "k": printable(r[by], 64),
            "m": printable(r["model"], 32),
            "n": str(r["runs"]),
            "R": str(r["restarts"]),
            "s": f"{r['seconds']:.1f}",
            "c": f"{r['slice_seconds']:.1f}",
            "h": f"{r['gpu_hours']:.4f}",
            "e": f"{r['energy_kwh']:.5f}",
            "S": printable(str(r.get("energy", "modelled")), 16),
            "E": f"{r.get('modelled_kwh', r['energy_kwh']):.5f}",
            "p": printable(r["profiles"], 200),
        }
        for r in report_rows
    ]


def run(args: argparse.Namespace) -> int:
    from ..config import load_config
    from ..slurm.accounting import report, rows_csv

    check_json(args)
    fmt = parse_format(getattr(args, "format", None) or DEFAULT_FORMAT, COLUMNS)
    config = load_config(args.config)
    since = _since(args.since)
    path = Path(config.state_dir)
    try:
        got = report(path, args.by, since)
    except PermissionError:
        raise ValueError(f"cannot read {path}: the accounting store is root's") from None
    _silent(config)
    header = not getattr(args, "noheader", False)
    if args.json:
        print(json.dumps(got, indent=1))
    elif args.csv:
        text = rows_csv([{k: _cell(v) for k, v in r.items()} for r in got])
        print(text if header else text.partition("\n")[2], end="")
    elif not got:
        if header:
            print("no finished runs recorded yet")
    else:
        heads = [c if c.letter != "k" else Column("k", args.by.upper(), "") for c in COLUMNS]
        for line in format_lines(fmt, rows(got, args.by), heads, header):
            print(line)
        if header and "e" in {f.letter for f in fmt if isinstance(f, Field)}:
            print(FOOTNOTE)
    return 0
