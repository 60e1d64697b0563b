"""FAR's true optimality gap on small batches, and the default planner (auto) beside it.

The optimum is the exact planner's (slurm_mig/planner/exact.py): the minimum makespan
over FAR's own search space, task -> repartitioning-tree node assignments timed with
sequential reconfiguration, proven by branch and bound within --budget seconds. It is
an upper bound on the unrestricted optimum. Where the search ran out of time its best
makespan stands in for the optimum; the "proven" column counts the instances where it
did not. Batches: slurm_mig.workload.generate(n, model, scaling, "WIDETIMES", p_sup=0).

Columns: FAR/opt-1 and auto/opt-1 (mean and max over seeds), rho = makespan / area
lower bound (the paper's measure) for FAR and for the optimum, planning seconds of the
exact planner and of auto (median and 95th percentile).

Usage: python benchmarks/exact_gap.py [--seeds S] [--budget B] [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import time

from slurm_mig.geometry import get_model
from slurm_mig.planner import Batch
from slurm_mig.planner.exact import auto_budget, plan_auto, plan_exact
from slurm_mig.planner.far_planner import plan_far
from slurm_mig.workload import generate

# (model, scaling, n, gpus, seeds as a share of --seeds)
CASES = [
    ("A100-40GB", "MIXEDSCALING", 10, 1, 1.0),
    ("A100-40GB", "POORSCALING", 10, 1, 0.5),
    ("A100-40GB", "GOODSCALING", 10, 1, 0.5),
    ("A100-40GB", "MIXEDSCALING", 8, 1, 0.5),
    ("A100-40GB", "MIXEDSCALING", 12, 1, 0.5),
    ("A100-40GB", "MIXEDSCALING", 10, 2, 0.3),
    ("A30-24GB", "MIXEDSCALING", 10, 1, 0.5),
]


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def run_case(model_name: str, scaling: str, n: int, gpus: int, seeds: int, budget: float) -> dict:
    model = get_model(model_name)
    far_gap, auto_gap, rho_far, rho_opt, t_exact, t_auto = [], [], [], [], [], []
    proven = exact_wins = 0
    for seed in range(seeds):
        tasks = tuple(generate(n, model, scaling, "WIDETIMES", 0.0, seed))
        batch = Batch(tasks, model, gpus, seed)
        far = plan_far(batch)
        t0 = time.perf_counter()
        exact = plan_exact(batch, time_budget=budget)
        t_exact.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        auto = plan_auto(batch)
        t_auto.append(time.perf_counter() - t0)
        opt = min(exact.makespan, auto.makespan)  # auto can only match or beat it
        proven += bool(exact.stats["optimal"])
        exact_wins += auto.stats["winner"] == "exact"
        far_gap.append(far.makespan / opt - 1)
        auto_gap.append(auto.makespan / opt - 1)
        rho_far.append(far.rho)
        rho_opt.append(opt / exact.lower_bound)
    return {
        "case": f"{model_name} {scaling} n={n} gpus={gpus}",
        "seeds": seeds,
        "far_gap": (statistics.fmean(far_gap), max(far_gap)),
        "auto_gap": (statistics.fmean(auto_gap), max(auto_gap)),
        "proven": proven,
        "exact_wins": exact_wins,
        "rho": (statistics.fmean(rho_far), statistics.fmean(rho_opt)),
        "t_exact": (statistics.median(t_exact), pct(t_exact, 0.95), max(t_exact)),
        "t_auto": (statistics.median(t_auto), pct(t_auto, 0.95), max(t_auto)),
        "auto_budget": auto_budget(n),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=100, help="seeds of the main case (n = 10)")
    ap.add_argument("--budget", type=float, default=10.0, help="exact planner budget (s)")
    ap.add_argument("--quick", action="store_true", help="10 seeds, main case only")
    args = ap.parse_args()
    cases = CASES[:1] if args.quick else CASES
    seeds = 10 if args.quick else args.seeds
    print(f"exact budget {args.budget:g} s; auto adds exact search up to n = 12 (auto_budget)")
    head = (
        f"{'case':40} {'seeds':>5} {'FAR/opt-1 mean max':>19} {'proven':>7} "
        f"{'auto/opt-1 mean max':>20} {'rho FAR opt':>12} "
        f"{'exact s med p95 max':>20} {'auto s med p95 max':>19}"
    )
    print(head)
    print("-" * len(head))
    t0 = time.perf_counter()
    for model, scaling, n, gpus, share in cases:
        r = run_case(model, scaling, n, gpus, max(1, round(seeds * share)), args.budget)
        print(
            f"{r['case']:40} {r['seeds']:>5} "
            f"{r['far_gap'][0]:>9.2%} {r['far_gap'][1]:>8.2%} "
            f"{r['proven']:>3}/{r['seeds']:<3} "
            f"{r['auto_gap'][0]:>10.3%} {r['auto_gap'][1]:>8.2%} "
            f"{r['rho'][0]:>6.3f} {r['rho'][1]:>5.3f} "
            f"{r['t_exact'][0]:>6.3f} {r['t_exact'][1]:>6.3f} {r['t_exact'][2]:>6.2f} "
            f"{r['t_auto'][0]:>6.3f} {r['t_auto'][1]:>6.3f} {r['t_auto'][2]:>5.2f}",
            flush=True,
        )
    print(f"total {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
