"""Wall time of one planner-daemon cycle (``slurm_mig.slurm.cycle.plan_cycle``).

Held jobs with MIXEDSCALING / WIDETIMES runtimes (the FAR paper's generator, seconds
x 60 so that jobs run 1-100 minutes) on A100-40GB nodes, all waiting past the batch
window. "first" is the cycle that plans them all (FAR per batch of ``batch_size``,
concatenated) and releases the first wave; "steady" is the next cycle with the first
wave running and every plan written to the jobs (what the daemon does every few
seconds). Makespan = projected end of all planned work, from now; bound = total
minimum work / all compute slices; rho = makespan / bound.

Target: the first cycle of 1000 jobs on 64 GPUs in <= 1 s.

Usage: python benchmarks/planner_cycle.py [--reps R]
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace

from slurm_mig.geometry import get_model
from slurm_mig.slurm.client import Job
from slurm_mig.slurm.cycle import Estimate, Release, Snapshot, UpdateJob, plan_cycle
from slurm_mig.workload import generate

MODEL = get_model("A100-40GB")
NOW = 1_700_000_000.0
TARGET_S = 1.0

# (jobs, nodes, GPUs per node, batch_size)
SCENARIOS = (
    (100, 1, 8, 64),
    (100, 1, 8, 100),
    (1000, 8, 8, 64),
    (1000, 8, 8, 1000),
    (1000, 16, 4, 64),
    (1000, 16, 4, 1000),
)


def held_job(jid: str) -> Job:
    return Job(
        job_id=jid,
        name="bench",
        user="alice",
        partition="mig",
        state="PENDING",
        reason="JobHeldAdmin",
        held=True,
        comment="",
        admin_comment="",
        nodes="",
        required_nodes="",
        time_limit=None,
        submit_time=NOW - 60,
        start_time=None,
        end_time=None,
        restart_count=0,
        exit_code=None,
    )


def snapshot(n: int, nodes: int, per_node: int, batch_size: int, seed: int = 0) -> Snapshot:
    tasks = generate(n, MODEL, "MIXEDSCALING", "WIDETIMES", 0.0, seed)
    jobs = tuple(held_job(str(i + 1)) for i in range(n))
    estimates = {
        j.job_id: Estimate("bench", {MODEL.name: {s: 60.0 * t for s, t in task.times.items()}})
        for j, task in zip(jobs, tasks)
    }
    return Snapshot(
        now=NOW,
        jobs=jobs,
        nodes={f"gpu{k:02d}": (MODEL.name,) * per_node for k in range(nodes)},
        estimates=estimates,
        batch_window=30.0,
        batch_size=batch_size,
    )


def applied(snap: Snapshot, result) -> Snapshot:
    """The snapshot after the actions were applied and the first wave started."""
    jobs = {j.job_id: j for j in snap.jobs}
    for a in result.actions:
        j = jobs[a.job_id]
        if isinstance(a, UpdateJob):
            f = dict(a.fields)
            jobs[a.job_id] = replace(
                j,
                admin_comment=f.get("AdminComment", j.admin_comment),
                required_nodes=f.get("ReqNodeList", j.required_nodes),
            )
        elif isinstance(a, Release):
            jobs[a.job_id] = replace(
                j, state="RUNNING", held=False, start_time=NOW + 1, nodes=j.required_nodes
            )
    return replace(snap, now=NOW + 5, jobs=tuple(jobs.values()))


def bound(snap: Snapshot) -> float:
    gpus = sum(len(m) for m in snap.nodes.values())
    work = sum(min(s * t for s, t in e.times[MODEL.name].items()) for e in snap.estimates.values())
    return work / (gpus * MODEL.compute_slices)


def timed(snap: Snapshot, reps: int):
    runs, result = [], None
    for _ in range(reps):
        t0 = time.perf_counter()
        result = plan_cycle(snap)
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs), result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3, help="runs per cycle, median (default 3)")
    args = ap.parse_args()
    print(
        f"{'JOBS':>5} {'GPUS':>9} {'BATCH':>5} {'FIRST S':>8} {'STEADY S':>8} "
        f"{'RELEASED':>8} {'MAKESPAN S':>10} {'BOUND S':>8} {'RHO':>6}"
    )
    for n, nodes, per_node, bs in SCENARIOS:
        snap = snapshot(n, nodes, per_node, bs)
        first_s, first = timed(snap, args.reps)
        steady_s, steady = timed(applied(snap, first), args.reps)
        assert len(first.planned) == n and steady.actions == ()
        lb = bound(snap)
        mark = "" if first_s <= TARGET_S or n < 1000 else f"  (over the {TARGET_S:.0f} s target)"
        print(
            f"{n:>5} {f'{nodes}x{per_node}':>9} {bs:>5} {first_s:>8.3f} {steady_s:>8.3f} "
            f"{len(first.released):>8} {first.makespan:>10.0f} {lb:>8.0f} "
            f"{first.makespan / lb:>6.3f}{mark}"
        )


if __name__ == "__main__":
    main()
