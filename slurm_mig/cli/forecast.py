"""``slurm-mig forecast``: replay a memory trace through mig-run's decision
(slurm_mig/memory/forecast.py)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .common import PROG, Formatter, size_option, wrap

FORECAST_HELP = """\
trace (TRACE.csv):
  One row per iteration, with a header. Either the short form
    iteration,requested_bytes[,reserved_bytes]
  or the full form that 'mig-run --trace' writes (iteration,requested_peak,...).
  Sizes (--capacity, --context) are bytes or a binary size: 10GiB, 12G, 512M.
"""


def add_parser(sub) -> None:
    fo = sub.add_parser(
        "forecast",
        formatter_class=Formatter,
        help="replay a memory trace through the peak forecast and the restart decision",
        description=wrap(
            "Feed a recorded per-iteration memory trace, one row at a time, to the same "
            "online forecaster mig-run uses, and print restart_at (the first iteration at "
            "which the job would have been restarted on a larger slice, or null) and "
            "predicted_peak (the 99 % upper bound of the peak up to the horizon, from all "
            "rows). The horizon is --iterations when given, else 1000 iterations past the "
            "last row."
        ),
        epilog=FORECAST_HELP,
    )
    fo.add_argument("trace", metavar="TRACE.csv", help="the memory trace")
    fo.add_argument("--capacity", metavar="BYTES", required=True, help="the slice's memory")
    fo.add_argument("--iterations", metavar="N", help="the job's total number of iterations")
    fo.add_argument(
        "--context", metavar="BYTES", default="0", help="CUDA context overhead (default: 0)"
    )
    fo.add_argument("--json", action="store_true", help="print the result as JSON")
    fo.add_argument("--plot", metavar="OUT.png", help="draw the trace and the forecast band")
    fo.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from ..memory.forecast import human, plot_forecast, run_trace
    from ..memory.trace import read_trace

    capacity = size_option("--capacity", args.capacity)
    context = size_option("--context", args.context, zero=True)
    iterations = None
    if args.iterations is not None:
        text = args.iterations.strip()
        if not (text.isascii() and text.isdigit() and int(text) > 0):
            raise ValueError(f"--iterations: {args.iterations!r} is not a whole number above 0")
        iterations = int(text)
    if context >= capacity:
        raise ValueError(
            f"--capacity {human(capacity)} is not above --context {human(context)}; "
            "give the slice's whole memory as --capacity"
        )
    samples = read_trace(args.trace)
    if not samples:
        raise ValueError(f"{args.trace}: no rows after the header")
    fc = run_trace(samples, capacity, iterations=iterations, context=context)
    last, first = fc.decisions[-1], fc.first_restart
    if args.plot:
        out = plot_forecast(fc, samples, args.plot, title=f"{Path(args.trace).name}: peak forecast")
        print(f"{PROG}: forecast plot written to {out}", file=sys.stderr)
    if args.json:
        result = {
            "restart_at": first.iteration if first else None,
            "predicted_peak": last.predicted_peak,
            "trend": last.trend,
            "capacity": capacity,
            "context": context,
            "need": last.need,
            "expected_peak": last.expected_peak,
            "horizon": last.horizon,
            "samples": len(samples),
            "reason": (first or last).reason,
        }
        print(json.dumps(result, indent=2))
        return 0
    model = fc.last_forecast.model if fc.last_forecast else "-"
    rows = [
        ("samples", f"{len(samples)} (iterations {samples[0].iteration}-{samples[-1].iteration})"),
        ("capacity", f"{capacity} bytes ({human(capacity)}), context {human(context)}"),
        ("horizon", f"iteration {last.horizon}" if last.horizon is not None else "-"),
        ("trend", f"{last.trend} (fitted: {model})"),
        ("restart_at", str(first.iteration) if first else "null"),
        ("predicted_peak", "null" if last.predicted_peak is None
         else f"{last.predicted_peak} bytes ({human(last.predicted_peak)})"),
        ("need", "null" if last.need is None else f"{last.need} bytes ({human(last.need)})"),
        ("reason", (first or last).reason),
    ]  # fmt: skip
    for key, value in rows:
        print(f"{key:<15} {value}")
    return 0
