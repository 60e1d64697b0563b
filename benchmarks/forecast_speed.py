"""Time ``slurm-mig forecast`` on long traces: the whole command (read the CSV, replay every
row through the online decision, print), per row.

Two traces of ``--rows`` rows (default 20,000) on a 10 GiB slice: *flat* (5 GiB with 1 %
noise: it fits, so every row is a decision) and *growing* (linear growth that reaches the
slice at 80 % of the rows: decided early, the rest of the rows only feed the final
forecast). ``--tree`` times another checkout's slurm_mig (e.g. the commit before a change,
extracted with ``git archive``), so that the two figures come from the same script.

    python benchmarks/forecast_speed.py [--rows 20000] [--tree PATH] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

GIB = 2**30


def write_trace(path: Path, kind: str, rows: int, seed: int = 5) -> None:
    rng = np.random.default_rng(seed)
    t = np.arange(1, rows + 1, dtype=float)
    if kind == "flat":
        level = np.full(rows, 5.0 * GIB)
    else:  # from 4 GiB to the 10 GiB slice at 80 % of the rows
        level = 4.0 * GIB + 6.0 * GIB * t / (0.8 * rows)
    y = (level * (1 + rng.normal(0, 0.01, rows))).astype(np.int64)
    lines = ["iteration,requested_bytes"] + [f"{i},{v}" for i, v in zip(t.astype(int), y)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def time_cli(path: Path, rows: int) -> tuple[float, dict]:
    """Wall seconds of one ``slurm-mig forecast --json`` in this process, and its output."""
    from slurm_mig.cli import main

    out = io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(out):
        code = main(
            [
                "forecast",
                str(path),
                "--capacity",
                "10GiB",
                "--iterations",
                str(rows),
                "--json",
            ]
        )
    wall = time.perf_counter() - t0
    if code != 0:
        raise SystemExit(f"forecast exited {code}")
    return wall, json.loads(out.getvalue())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=20000, help="rows per trace (default 20000)")
    p.add_argument("--tree", help="a checkout whose slurm_mig to time (default: this one)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if args.rows < 10:
        p.error("--rows must be >= 10")
    tree = Path(args.tree).resolve() if args.tree else Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(tree))
    # imports (numpy, scipy) and their first-call set-up are not per-row costs
    with tempfile.TemporaryDirectory() as tmp:
        warm = Path(tmp) / "warm.csv"
        write_trace(warm, "growing", 200)
        time_cli(warm, 200)
        results = {}
        for kind in ("flat", "growing"):
            path = Path(tmp) / f"{kind}.csv"
            write_trace(path, kind, args.rows)
            wall, out = time_cli(path, args.rows)
            results[kind] = {
                "rows": args.rows,
                "seconds": round(wall, 2),
                "ms_per_row": round(1000 * wall / args.rows, 3),
                "restart_at": out["restart_at"],
                "predicted_peak": out["predicted_peak"],
            }
    if args.json:
        print(json.dumps({"tree": str(tree), **results}, indent=2))
        return 0
    print(f"slurm-mig forecast --json, slurm_mig from {tree}")
    for kind, r in results.items():
        print(
            f"  {kind:<8} {r['rows']} rows: {r['seconds']:.1f} s, {r['ms_per_row']:.3f} ms per "
            f"row (restart_at {r['restart_at']}, predicted_peak {r['predicted_peak']})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
