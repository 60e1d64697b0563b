"""Priority order and the ``reorder`` bound (issue 19), measured in the simulator.

MISO's trace (``miso-trace`` preset: shared/data/traces/miso-socc22, which has no
users) with priorities as fairshare would give them: each job is one of 8 users by a
seeded draw, each user one priority drawn seeded. FAR with ``reorder`` in
{0, 1, 2, 4, 8, 16, 32, none}, on a cluster small enough that jobs queue, twice: on
the trace's arrival times (a stream) and with every job there at time 0 (one batch).
Per run: mean JCT, makespan, mean JCT of the top-priority quartile of jobs, and
priority inversions (jobs that started while a higher-priority job that had arrived
was still waiting; a backfilled job counts). Seeded and deterministic.

Usage: python benchmarks/priority_order.py [--jobs N] [--gpus G] [--seed S] [--distinct]
"""

from __future__ import annotations

import argparse
import bisect
import os
import random
import statistics
import time
from dataclasses import replace

from slurm_mig.geometry import get_model
from slurm_mig.planner.snapshot import Job
from slurm_mig.sim import simulate
from slurm_mig.sim.jobs import miso_trace
from slurm_mig.sim.metrics import SimResult
from slurm_mig.sim.policies import get_policy

REORDERS: tuple[int | None, ...] = (0, 1, 2, 4, 8, 16, 32, 128, 512, None)
USERS = 8
MODEL = get_model("A100-40GB")


def with_priorities(jobs: list[Job], seed: int, distinct: bool = False) -> list[Job]:
    """Each job one of ``USERS`` users, each user one priority (seeded draws); with
    ``distinct``, plus a per-job term below the gap between users (as Slurm's age and
    size factors make every job's priority its own)."""
    rng = random.Random(seed)
    per_user = [float(rng.randrange(1, 100) * 1000) for _ in range(USERS)]
    out = []
    for j in jobs:
        p = per_user[rng.randrange(USERS)]
        out.append(replace(j, priority=p + (rng.randrange(1000) if distinct else 0)))
    return out


def inversions(r: SimResult, prio: dict[str, float]) -> int:
    """Jobs that started while a job of higher priority that had arrived still waited."""
    rows = sorted(zip(r.start, r.arrival, (prio[i] for i in r.ids)))
    count = 0
    for s, _, p in rows:
        if any(
            q > p and a <= s < s2
            for s2, a, q in rows[bisect.bisect_right(rows, (s, float("inf"), float("inf"))) :]
        ):
            count += 1
    return count


def figures(r: SimResult, prio: dict[str, float]) -> dict[str, float]:
    jct = dict(zip(r.ids, r.jct))
    ranked = sorted(jct, key=lambda j: -prio[j])
    top = ranked[: max(1, len(ranked) // 4)]
    return {
        "jct": statistics.fmean(jct.values()),
        "span": r.makespan,
        "top": statistics.fmean(jct[j] for j in top),
        "inv": inversions(r, prio),
        "wall": r.wall_s,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=500, help="jobs of the trace (default 500)")
    ap.add_argument("--gpus", type=int, default=16, help="A100-40GB GPUs (default 16)")
    ap.add_argument("--seed", type=int, default=0, help="trace and priority seed")
    ap.add_argument("--distinct", action="store_true", help="a per-job term in each priority")
    args = ap.parse_args()
    t0 = time.perf_counter()
    stream = with_priorities(miso_trace(args.jobs, MODEL, args.seed), args.seed, args.distinct)
    batch = [replace(j, arrival=0.0) for j in stream]
    prio = {j.id: j.priority for j in stream}
    print(
        f"MISO trace, {args.jobs} jobs, {USERS} users "
        f"({'plus a per-job term' if args.distinct else 'one priority each'}), "
        f"{args.gpus} x {MODEL.name}, FAR, seed {args.seed}"
    )
    for label, jobs in (("stream (trace arrivals)", stream), ("one batch (all at 0)", batch)):
        rows = {
            k: figures(
                simulate(jobs, get_policy("far", reorder=k), 1, args.gpus, MODEL, args.seed), prio
            )
            for k in REORDERS
        }
        ref = rows[None]
        print(f"\n{label}")
        print(f"{'reorder':>8} {'mean JCT s':>11} {'vs none':>8} {'makespan s':>11} {'vs none':>8} "
              f"{'top-25% JCT':>12} {'inversions':>10} {'sim s':>6}")  # fmt: skip
        for k, f in rows.items():
            print(
                f"{'none' if k is None else k:>8} {f['jct']:11.0f} {100 * (f['jct'] / ref['jct'] - 1):+7.1f}% "
                f"{f['span']:11.0f} {100 * (f['span'] / ref['span'] - 1):+7.1f}% {f['top']:12.0f} "
                f"{f['inv']:10d} {f['wall']:6.1f}"
            )
    print(f"\ntotal {time.perf_counter() - t0:.0f} s; load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
