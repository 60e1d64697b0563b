"""Speed of the cluster simulator: wall and CPU seconds, events and the event rate.

Targets (issue 5, on the project's 2-core machine):
  pcie-paper, 1400 jobs on 60 A100-40GB GPUs (60 % PCIe-bound)   <= 2 s
  pcie-paper, 1,000,000 jobs on 1000 GPUs, baseline policy         <= 300 s
An event is an arrival or a popped heap event (job end, instance ready, wake-up,
stale ends included); a decision is one call of the policy. Workload generation is
timed apart from the simulation. CPU seconds are less disturbed than wall seconds
when other processes share the machine.

Usage: python benchmarks/sim_speed.py [--quick] [--json] [--policies baseline,far]
  --quick: 100,000 jobs instead of 1,000,000 for the large case.
"""

from __future__ import annotations

import argparse
import json
import time

from slurm_mig.geometry import get_model
from slurm_mig.sim import simulate
from slurm_mig.sim.jobs import build_workload
from slurm_mig.sim.policies import get_policy

TARGETS = {"1400 jobs / 60 GPUs": 2.0, "1000000 jobs / 1000 GPUs": 300.0}


def measure(label: str, jobs: int, gpus: int, policy: str, seed: int = 1) -> dict:
    model = get_model("A100-40GB")
    t0 = time.perf_counter()
    work = build_workload("pcie-paper", model, gpus, jobs, seed, 0.6)
    gen = time.perf_counter() - t0
    cpu0 = time.process_time()
    r = simulate(work, get_policy(policy), 1, gpus, model, seed)
    cpu = time.process_time() - cpu0
    return {
        "case": label,
        "policy": policy,
        "jobs": jobs,
        "gpus": gpus,
        "generate_s": gen,
        "wall_s": r.wall_s,
        "cpu_s": cpu,
        "events": r.events,
        "decisions": r.decisions,
        "events_per_s": r.events / r.wall_s,
        "events_per_cpu_s": r.events / cpu if cpu > 0 else float("inf"),
        "target_s": TARGETS.get(label),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="100k jobs for the large case")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    ap.add_argument("--policies", default="baseline,far", help="policies of the small case")
    args = ap.parse_args()
    rows = [measure("1400 jobs / 60 GPUs", 1400, 60, p) for p in args.policies.split(",")]
    big = 100_000 if args.quick else 1_000_000
    rows.append(measure(f"{big} jobs / 1000 GPUs", big, 1000, "baseline"))
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    head = "{:<26} {:<9} {:>9} {:>8} {:>8} {:>9} {:>9} {:>10} {:>7}"
    print(head.format("CASE", "POLICY", "GEN s", "SIM s", "CPU s", "EVENTS", "DECIDE",
                      "EVENTS/s", "TARGET"))  # fmt: skip
    for r in rows:
        tgt = r["target_s"]
        mark = "-" if tgt is None else f"{tgt:.0f} s " + ("ok" if r["wall_s"] <= tgt else "OVER")
        print(
            head.format(
                r["case"],
                r["policy"],
                f"{r['generate_s']:.2f}",
                f"{r['wall_s']:.2f}",
                f"{r['cpu_s']:.2f}",
                r["events"],
                r["decisions"],
                f"{r['events_per_s']:.0f}",
                mark,
            )
        )


if __name__ == "__main__":
    main()
