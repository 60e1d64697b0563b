"""Speed of SMART-MIG's energy lower bound (staircase makespan, Eq. 7): 10,000 jobs of
the smart-mig workload on 8 and 64 A100s; target <= 1 s. Prints the best of 5 runs.

Run: PYTHONPATH=. .venv/bin/python benchmarks/smart_mig_bounds_speed.py
"""

from __future__ import annotations

import time

from slurm_mig.geometry import get_model
from slurm_mig.sim.bounds import energy_bound
from slurm_mig.sim.deadline_workload import deadline_jobs


def main() -> None:
    model = get_model("A100-40GB")
    for n in (1_000, 10_000):
        jobs = deadline_jobs(model, rate_multiplier=20.0, jobs=n, seed=1, daily=False)
        for gpus in (8, 64):
            best = float("inf")
            for _ in range(5):
                t = time.perf_counter()
                b = energy_bound(jobs, gpus, model)
                best = min(best, time.perf_counter() - t)
            print(
                f"energy bound: {n:6d} jobs, {gpus:3d} GPUs: {best * 1e3:8.2f} ms "
                f"(target <= 1000 ms); {b.energy_j / 3.6e6:.1f} kWh, C* {b.makespan:.0f} s"
            )


if __name__ == "__main__":
    main()
