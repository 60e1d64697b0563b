"""Speed of SMART-MIG's controller on the daemon's path (numpy weights, no torch):
per decision, the network alone (state -> 12x12 matrix), the draw for every GPU
(features + matrix + top-k sampling), and the whole smart-mig decision with CEDF placing
the waiting jobs, on 8 and 64 A100s with 50 waiting jobs. Target: <= 1 ms per controller
decision. Prints the median of 200 runs and whether torch was imported.

Run: PYTHONPATH=. .venv/bin/python benchmarks/smart_mig_controller_speed.py
"""

from __future__ import annotations

import random
import statistics
import sys
import time

from slurm_mig.geometry import get_model
from slurm_mig.planner.mig_configs import configs_for, infer_config
from slurm_mig.planner.smartmig import SmartMigPolicy, features
from slurm_mig.planner.snapshot import ClusterSnapshot, Gpu, Instance
from slurm_mig.sim.deadline_workload import deadline_jobs


def _median_ms(fn, runs: int = 200) -> float:
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return statistics.median(out) * 1e3


def main() -> None:
    model = get_model("A100-40GB")
    cfgs = configs_for(model)
    pol = SmartMigPolicy(every=1)
    jobs = deadline_jobs(model, rate_multiplier=20.0, jobs=50, seed=2, daily=False)
    for m in (8, 64):
        gpus = []
        for i in range(m):
            part = cfgs[(1, 1, 2, 3, 3, 5, 5, 10)[i % 8] - 1].realisations[0]
            gpus.append(
                Gpu(i, tuple(Instance(s, "r" if k == 0 else None) for k, s in enumerate(part)))
            )
        snap = ClusterSnapshot(now=100.0, model=model, gpus=tuple(gpus),
                               pending={j.id: j for j in jobs})  # fmt: skip
        current = [infer_config(g, cfgs, cfgs[0]) for g in gpus]
        state = features(snap, current)
        rng = random.Random(0)
        net = _median_ms(lambda st=state: pol.controller.matrix(st))
        draw = _median_ms(lambda s=snap, c=current, r=rng: pol.draw(s, c, r))
        whole = _median_ms(lambda s=snap: pol.decide(s))
        print(
            f"{m:3d} GPUs, {len(jobs)} waiting: network {net:.3f} ms, controller decision "
            f"(state + matrix + top-k draws) {draw:.3f} ms (target <= 1 ms), whole "
            f"smart-mig decision with CEDF {whole:.3f} ms"
        )
    print(f"torch imported: {'torch' in sys.modules}")


if __name__ == "__main__":
    main()
