"""What upsizing (``adaptive:upsize=S``, `slurm_mig.planner.upsize`) gains where jobs
are restartable, in value.py's conditions: Slurm's age priority, learned knowledge,
load 1x, one seed; every job declares ``mig:restartable=yes`` (MISO's own assumption:
its scheduler checkpoints and migrates every job). The static layouts never move a
job, so their figures are value.py's.

    PYTHONPATH=. .venv/bin/python benchmarks/upsize_value.py [--seed 0] [--restart-s 60]

Prints mean and p95 JCT of ``adaptive`` and ``adaptive:upsize=300`` per workload (value.py's
`run_case`), and
the site_value trace (MISO's first 200 jobs on 40 A100s, one user) at seeds 0 and 1
beside Slurm alone's 4-3 layout there. ``--restart-s``: the seconds a move costs
(requeue, restart, reading the checkpoint; the simulator's default is MISO's 5 s).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import replace

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import site_value  # noqa: E402
import value  # noqa: E402

LABELS = ("adaptive", "adaptive:upsize=300")
STATIC = "static:layout=4-3:match=fit"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=0, help="seed of the workloads (0)")
    ap.add_argument("--restart-s", type=float, default=60.0, help="seconds a move costs (60)")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    print(f"uptime at start: {value.uptime()}")
    print(f"priority age, knowledge learned, load 1x, seed {args.seed}, every job restartable, "
          f"{args.restart_s:g} s per move\n")  # fmt: skip
    print(f"{'workload':<14} {'policy':<22} {'JCT s':>9} {'p95 s':>9}")
    condition = ("age", "learned", args.restart_s)
    for wl in value.WORKLOADS:
        for label in LABELS:
            s = value.run_case((wl, 1.0, args.seed, label, condition))[4]
            print(f"{wl.key:<14} {label:<22} {s['jct_mean']:>9,.0f} {s['jct_p95']:>9,.0f}")
    print("\nsite_value's trace (200 jobs, 40 A100s on 5 nodes, 1/20, unpaced):")
    for seed in (0, 1):
        jobs = [replace(j, restartable=True) for j in site_value.trace_jobs(200, seed, 20.0)]
        for label in (STATIC, *LABELS):
            s = site_value.simulate_label(jobs, label, 5, seed, migration_s=args.restart_s)[0]
            print(f"seed {seed} {label:<30} {s['jct_mean']:>9,.0f} {s['jct_p95']:>9,.0f}")
    print(f"\nrun time {time.monotonic() - t0:.0f} s; uptime at end: {value.uptime()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
