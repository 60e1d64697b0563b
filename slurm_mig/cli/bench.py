"""``slurm-mig bench far``: the FAR paper's Tables 4-7."""

from __future__ import annotations

import argparse

from ..argtypes import count_at_most
from ..plan import PlanError
from .common import Formatter, wrap


def add_parser(sub) -> None:
    be = sub.add_parser(
        "bench",
        formatter_class=Formatter,
        help="reproduce the FAR paper's Tables 4-7 (plan quality and planning time)",
        description=wrap(
            "Reproduce Tables 4-7 of the FAR paper with our planners, our figure beside "
            "the paper's in every cell: rho of FAR, sigma of each baseline, planning "
            "time, and batch concatenation. Each cell is the mean over N seeded synthetic "
            "batches (the generator of Section 6.3). 'far' is the only benchmark; no GPU "
            "or Slurm is needed."
        ),
    )
    be.add_argument("which", choices=["far"], help="the benchmark to run")
    be.add_argument(
        "--reps",
        metavar="N",
        type=count_at_most(100_000, "batches"),
        default=None,
        help="seeded batches per table cell (default: the benchmark's own; the paper: 1000)",
    )
    be.add_argument("--json", action="store_true", help="print the results as JSON")
    be.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    try:
        from ..bench import run_far_bench
    except ImportError as exc:
        raise PlanError(f"the benchmark is not available in this installation ({exc})") from None
    if args.reps is None:  # the benchmark's own default
        return run_far_bench(as_json=args.json)
    return run_far_bench(reps=args.reps, as_json=args.json)
