"""Wall time, plan quality and memory of the planner daemon's cycle at cluster scale
(``slurm_mig.daemon.cycle.plan_cycle``, the pure function the daemon runs each cycle).

Held jobs with MIXEDSCALING / WIDETIMES runtimes (the FAR paper's generator, seconds
x 60 so that jobs run 1-100 minutes) on nodes of 8 A100-40GB, all waiting past the batch
window. "first" is the cycle that plans them all and releases the first wave; "steady"
is the next one, with the first wave running and every plan written to the jobs (what
the daemon does every few seconds); "replan" is a cycle after one running job ended
early (the GPU it ran on is planned again). Makespan = projected end of all planned work,
from now. Two bounds: "area" = least work / all compute slices (Section 6.4 of the FAR
paper); "T*" = the moldable bound (``planner.allotment``): no schedule beats the least
makespan at which every task fits at a size where it takes at most that long and the
work fits the slices. On wide clusters the longest task, not the area, decides, so the
area bound is unreachable there (T* > area); rho* = makespan / T* is the honest ratio.

Targets (issue 9): first cycle of 10,000 jobs on 1,000 GPUs <= 1 s, of 100,000 on
10,000 <= 15 s; a steady cycle <= 0.2 s at 10,000 / 1,000; rho <= 1.15 from 1,000 jobs
up; <= 1 GB RSS at 100,000 jobs.

Usage: python benchmarks/planner_cycle.py [--reps R] [--big] [--algorithm NAME]
"""

from __future__ import annotations

import argparse
import gc
import resource
import statistics
import time
from dataclasses import replace

from slurm_mig import job as planner_job
from slurm_mig.daemon.cycle import CycleInput, Estimate, Release, plan_cycle
from slurm_mig.geometry import get_model
from slurm_mig.planner.allotment import moldable_bound
from slurm_mig.slurm.client import Job
from slurm_mig.workload import generate

MODEL = get_model("A100-40GB")
NOW = 1_700_000_000.0
PER_NODE = 8

# (jobs, GPUs) and the first-cycle target in seconds (None: none set)
SCENARIOS = (
    (1000, 64, 1.0),
    (5000, 512, None),
    (10000, 1000, 1.0),
)
BIG = ((100000, 10000, 15.0),)


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


def snapshot(
    n: int, gpus: int, algorithm: str, seed: int = 0
) -> tuple[CycleInput, list[planner_job.Job]]:
    tasks = generate(n, MODEL, "MIXEDSCALING", "WIDETIMES", 0.0, seed)
    tasks = [planner_job.Job(t.id, 0.0, {s: 60.0 * x for s, x in t.times.items()}) for t in tasks]
    jobs = tuple(held_job(str(i + 1)) for i in range(n))
    estimates = {j.job_id: Estimate("bench", {MODEL.name: t.times}) for j, t in zip(jobs, tasks)}
    nodes = -(-gpus // PER_NODE)
    layout = {
        f"gpu{k:05d}": (MODEL.name,) * min(PER_NODE, gpus - k * PER_NODE) for k in range(nodes)
    }
    snap = CycleInput(
        now=NOW,
        jobs=jobs,
        nodes=layout,
        estimates=estimates,
        algorithm=algorithm,
        batch_window=30.0,
        batch_size=0,
    )
    return snap, tasks


def applied(snap: CycleInput, result, dt: float = 5.0) -> CycleInput:
    """The snapshot after the actions were applied and the first wave started; the
    held jobs' plans stay with the daemon (the next snapshot's ``plans``)."""
    jobs = {j.job_id: j for j in snap.jobs}
    for a in result.actions:
        j = jobs[a.job_id]
        if isinstance(a, Release):
            f = dict(a.fields)
            jobs[a.job_id] = replace(
                j,
                state="RUNNING",
                held=False,
                start_time=NOW + 1,
                admin_comment=f.get("AdminComment", j.admin_comment),
                required_nodes=f.get("ReqNodeList", j.required_nodes),
                nodes=f.get("ReqNodeList", j.required_nodes),
            )
    released = set(result.released)
    plans = {j: a for j, a in result.planned.items() if j not in released}
    return replace(snap, now=NOW + dt, jobs=tuple(jobs.values()), plans=plans)


def ended_early(snap: CycleInput) -> CycleInput:
    """One running job has completed long before its plan said (a re-plan event)."""
    jobs = list(snap.jobs)
    for i, j in enumerate(jobs):
        if j.state == "RUNNING":
            jobs[i] = replace(j, state="COMPLETED", end_time=NOW + 2, exit_code=0)
            break
    return replace(snap, now=NOW + 40.0, jobs=tuple(jobs))


def timed(snap: CycleInput, reps: int):
    runs, result = [], None
    for _ in range(reps):
        gc.collect()
        t0 = time.perf_counter()
        result = plan_cycle(snap)
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs), result


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3, help="runs per cycle, median (default 3)")
    ap.add_argument("--big", action="store_true", help="also 100,000 jobs on 10,000 GPUs")
    ap.add_argument("--algorithm", default="far", help="policy name (default far)")
    args = ap.parse_args()
    print(
        f"{'JOBS':>6} {'GPUS':>6} {'FIRST S':>8} {'STEADY S':>8} {'REPLAN S':>8} "
        f"{'RELEASED':>8} {'MAKESPAN':>9} {'AREA':>7} {'T*':>7} {'RHO':>6} {'RHO*':>6} "
        f"{'RSS MB':>7}"
    )
    for n, gpus, target in SCENARIOS + (BIG if args.big else ()):
        reps = args.reps if n <= 10000 else 1
        snap, tasks = snapshot(n, gpus, args.algorithm)
        first_s, first = timed(snap, reps)
        assert len(first.planned) == n, (len(first.planned), n)
        steady_snap = applied(snap, first)
        steady_s, steady = timed(steady_snap, reps)
        assert steady.actions == (), steady.actions[:3]
        replan_s, replan = timed(ended_early(applied(steady_snap, steady)), reps)
        area = sum(t.min_work() for t in tasks) / (gpus * MODEL.compute_slices)
        star = moldable_bound(tasks, MODEL.planner_sizes, gpus * MODEL.compute_slices)
        mark = ""
        if target is not None and first_s > target:
            mark = f"  (over the {target:.0f} s target)"
        print(
            f"{n:>6} {gpus:>6} {first_s:>8.3f} {steady_s:>8.3f} {replan_s:>8.3f} "
            f"{len(first.released):>8} {first.makespan:>9.0f} {area:>7.0f} {star:>7.0f} "
            f"{first.makespan / area:>6.3f} {first.makespan / star:>6.3f} {rss_mb():>7.0f}{mark}",
            flush=True,
        )


if __name__ == "__main__":
    main()
