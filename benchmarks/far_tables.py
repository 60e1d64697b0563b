"""Reproduce Tables 4-7 of the FAR paper (ours beside the paper's value in every cell).

Same as `slurm-mig bench far`. Usage: python benchmarks/far_tables.py [--reps N] [--json]
"""

from __future__ import annotations

import argparse

from slurm_mig.bench import run_far_bench

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=100, help="seeded batches per cell (paper: 1000)")
    ap.add_argument("--json", action="store_true", help="print JSON instead of tables")
    args = ap.parse_args()
    raise SystemExit(run_far_bench(reps=args.reps, as_json=args.json))
