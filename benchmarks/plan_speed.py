"""FAR planning time on MIXEDSCALING / WIDETIMES batches (A100-40GB), median of repeats,
and FAR at scale (issue 20): 5,000 jobs on 512 GPUs against the dual bound.

Targets: n = 1000 in <= 10 ms (also the first plan of a fresh process, as `slurm-mig
plan` times it), n = 15 in <= 2 ms on the project's 2-core machine; 5,000 jobs on 512
GPUs in <= 2 s and within 1.10 x the dual bound T* (``planner.bounds.makespan_bounds``).
Paper (authors' Python): 19.43 ms at n = 15, 1620.82 ms at n = 1000; their C++ tool,
-O2 with its phase-3 bugs patched: 0.2 ms and 90-118 ms on this machine
(shared/data/far-reference/far_harness_benchmark_summary.csv).

The 5,000-job batches come from the same generator: GOODSCALING / NARROWTIMES with
p_sup 0.5 is the issue's batch (median GPU ended at 128 s, the last at 147 s: 1.34 x);
MIXEDSCALING / WIDETIMES the generator's default.

Usage: python benchmarks/plan_speed.py [--reps R] [--instances K] [--scale-seeds S]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from slurm_mig.geometry import get_model
from slurm_mig.planner import Batch
from slurm_mig.planner.bounds import makespan_bounds
from slurm_mig.planner.far_planner import plan_far
from slurm_mig.workload import generate

TARGET_MS = {15: 2.0, 1000: 10.0}
SCALE = (5000, 512)
SCALE_TARGET_S, SCALE_TARGET_RHO = 2.0, 1.10
SCALE_CASES = (("GOODSCALING", "NARROWTIMES", 0.5), ("MIXEDSCALING", "WIDETIMES", 0.0))
MODEL = "A100-40GB"

COLD = """
import time
from slurm_mig.geometry import get_model
from slurm_mig.planner import Batch
from slurm_mig.planner.far_planner import plan_far
from slurm_mig.workload import generate
m = get_model({model!r})
b = Batch(tuple(generate(1000, m, "MIXEDSCALING", "WIDETIMES", 0.0, {seed})), m)
t0 = time.perf_counter()
plan_far(b)
print((time.perf_counter() - t0) * 1000)
"""


def measure(n: int, instances: int, reps: int) -> tuple[float, float, float]:
    """Median over instances of each instance's median time (ms); also mean rho."""
    model = get_model(MODEL)
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


def cold_ms(seeds: int) -> float:
    """Median time of the first 1,000-task plan of a fresh interpreter (ms)."""
    runs = []
    for seed in range(seeds):
        out = subprocess.run(
            [sys.executable, "-c", COLD.format(model=MODEL, seed=seed)],
            capture_output=True,
            text=True,
            check=True,
        )
        runs.append(float(out.stdout.strip().splitlines()[-1]))
    return statistics.median(runs)


def scale_case(scaling: str, times: str, p_sup: float, seed: int) -> dict:
    """One 5,000-job batch on 512 GPUs: planning seconds, makespan and its bounds."""
    n, gpus = SCALE
    model = get_model(MODEL)
    batch = Batch(tuple(generate(n, model, scaling, times, p_sup, seed)), model, gpus=gpus)
    t0 = time.perf_counter()
    plan = plan_far(batch)
    seconds = time.perf_counter() - t0
    bounds = makespan_bounds(batch.tasks, model, gpus)
    ends: dict[int, float] = {}
    for t in plan.tasks:
        ends[t.gpu] = max(ends.get(t.gpu, 0.0), t.end)
    order = sorted(ends.values())
    return {
        "seconds": seconds,
        "makespan": plan.makespan,
        "median_gpu_end": order[len(order) // 2],
        "dual": bounds["dual"],
        "area": bounds["area"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=7, help="timed runs per instance")
    ap.add_argument("--instances", type=int, default=20, help="batches per size")
    ap.add_argument("--scale-seeds", type=int, default=3, help="5,000-job batches per case")
    args = ap.parse_args()
    print(f"{'n':>6} {'median ms':>10} {'p95 ms':>8} {'target ms':>10} {'rho':>7}")
    for n in (15, 100, 500, 1000):
        inst = args.instances if n <= 100 else max(5, args.instances // 4)
        med, p95, rho = measure(n, inst, args.reps)
        target = TARGET_MS.get(n)
        mark = "" if target is None else ("  ok" if med <= target else "  OVER")
        tgt = "-" if target is None else f"{target:.0f}"
        print(f"{n:>6} {med:>10.3f} {p95:>8.3f} {tgt:>10} {rho:>7.4f}{mark}")
    cold = cold_ms(max(3, args.scale_seeds))
    mark = "ok" if cold <= TARGET_MS[1000] else "OVER"
    print(f"\nn = 1000, first plan of a fresh process: {cold:.1f} ms (target 10)  {mark}")

    n, gpus = SCALE
    print(f"\n{n} jobs on {gpus} GPUs (targets: {SCALE_TARGET_S:.0f} s, {SCALE_TARGET_RHO} x dual)")
    print(
        f"{'batch':<34} {'seed':>4} {'s':>6} {'makespan':>9} {'median':>7} {'dual':>7} "
        f"{'x dual':>7} {'x area':>7}"
    )
    for scaling, times, p_sup in SCALE_CASES:
        for seed in range(args.scale_seeds):
            r = scale_case(scaling, times, p_sup, seed)
            ratio = r["makespan"] / r["dual"]
            ok = r["seconds"] <= SCALE_TARGET_S and ratio <= SCALE_TARGET_RHO
            print(
                f"{f'{scaling}/{times}/{p_sup}':<34} {seed:>4} {r['seconds']:>6.2f} "
                f"{r['makespan']:>9.2f} {r['median_gpu_end']:>7.2f} {r['dual']:>7.2f} "
                f"{ratio:>7.3f} {r['makespan'] / r['area']:>7.3f}  {'ok' if ok else 'OVER'}"
            )


if __name__ == "__main__":
    main()
