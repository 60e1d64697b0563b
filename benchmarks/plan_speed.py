"""FAR planning time on MIXEDSCALING / WIDETIMES batches (A100-40GB), median of repeats.

Targets: n = 1000 in <= 100 ms, n = 15 in <= 2 ms on the project's 2-core machine.
Paper (authors' Python): 19.43 ms at n = 15, 1620.82 ms at n = 1000; their C++ tool,
-O2 with its phase-3 bugs patched: 0.2 ms and 90-118 ms on this machine
(shared/data/far-reference/far_harness_benchmark_summary.csv).

Usage: python benchmarks/plan_speed.py [--reps R] [--instances K]
"""

from __future__ import annotations

import argparse
import statistics
import time

from slurm_mig.geometry import get_model
from slurm_mig.planner import Batch
from slurm_mig.planner.far_planner import plan_far
from slurm_mig.workload import generate

TARGET_MS = {15: 2.0, 1000: 100.0}


def measure(n: int, instances: int, reps: int) -> tuple[float, float, float]:
    """Median over instances of each instance's median time (ms); also mean rho."""
    model = get_model("A100-40GB")
    per_instance, rhos = [], []
    for seed in range(instances):
        batch = Batch(tuple(generate(n, model, "MIXEDSCALING", "WIDETIMES", 0.0, seed)), model)
        runs = []
        for _ in range(reps):
            t0 = time.perf_counter()
            plan = plan_far(batch)
            runs.append((time.perf_counter() - t0) * 1000)
        per_instance.append(statistics.median(runs))
        rhos.append(plan.rho)
    per_instance.sort()
    p95 = per_instance[min(len(per_instance) - 1, int(0.95 * len(per_instance)))]
    return statistics.median(per_instance), p95, statistics.fmean(rhos)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=7, help="timed runs per instance")
    ap.add_argument("--instances", type=int, default=20, help="batches per size")
    args = ap.parse_args()
    print(f"{'n':>6} {'median ms':>10} {'p95 ms':>8} {'target ms':>10} {'rho':>7}")
    for n in (15, 100, 500, 1000):
        inst = args.instances if n <= 100 else max(5, args.instances // 4)
        med, p95, rho = measure(n, inst, args.reps)
        target = TARGET_MS.get(n)
        mark = "" if target is None else ("  ok" if med <= target else "  OVER")
        tgt = "-" if target is None else f"{target:.0f}"
        print(f"{n:>6} {med:>10.3f} {p95:>8.3f} {tgt:>10} {rho:>7.4f}{mark}")


if __name__ == "__main__":
    main()
