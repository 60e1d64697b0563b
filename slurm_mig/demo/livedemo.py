"""``slurm-mig demo --live``: the Rodinia batch through a real Slurm on loopback with
simulated MIG A100s, the hooks and the planner daemon; prints what ran against what
was planned and draws what ran as a Gantt chart."""

from __future__ import annotations

import shutil
import statistics
import tempfile
from pathlib import Path

from ..geometry import Placement, Slot, get_model
from ..plan import Plan, PlannedTask, Reconfiguration, lower_bound
from .live import (
    LiveCluster,
    chain_length,
    handoff_gaps,
    overlapping_lifetimes,
    slice_handoffs,
)
from .localslurm import skip_reason

MODEL = "A100-40GB"


def live_unavailable() -> str | None:
    """Why the live demo cannot run here (not root, no Slurm), or None."""
    return skip_reason()


def realized_plan(records: list[dict], audit: list[dict], t0: float, tasks) -> Plan:
    """What ran, in the plan format (times from ``t0``), so the Gantt chart can draw it."""
    model = get_model(MODEL)
    ran = [
        PlannedTask(
            r["kernel"] + f" ({r['job']})",
            r["gpu"],
            Slot(Placement(*r["placement"]), r["size"]),
            r["start"] - t0,
            r["end"] - t0,
        )
        for r in sorted(records, key=lambda r: r["start"])
    ]
    ops = [
        Reconfiguration(
            e["gpu"],
            e["op"],
            Slot(
                Placement(e["placement"]["start"], e["placement"]["size"]),
                model.profile(e["profile"]).compute_slices,
            ),
            e["start"] - t0,
            e["end"] - t0,
        )
        for e in audit
    ]
    return Plan(
        model=model,
        gpus=2,
        tasks=tuple(ran),
        reconfigurations=tuple(ops),
        lower_bound=lower_bound(tasks, model, 2),
        planner="far (as run on Slurm)",
    )


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[int(0.95 * (len(ordered) - 1))]


def run_live_demo(gantt: str, scale: float = 2.0, copies: int = 24) -> int:
    """Run the demo batch on a loopback Slurm; 0 when every job ran as planned."""
    from ..gantt import write_gantt
    from ..workload import load_task_source

    model = get_model(MODEL)
    tasks = load_task_source("rodinia-a100", model)
    kernels = [tasks[i % len(tasks)] for i in range(copies)]
    root = Path(tempfile.mkdtemp(prefix="slurm-mig-demo-"))
    root.chmod(0o755)
    print(f"Starting Slurm on loopback with 2 simulated {MODEL} GPUs in {root} ...", flush=True)
    try:
        # the daemon's default 5 s cycle: hand-offs come from the Epilogs' notifications
        # and from jobs released ahead, not from fast polling
        with LiveCluster(root, nodes=("node1",), gpus=2, planner={"cycle": 5.0}) as lc:
            lc.learn(tasks, scale)
            ids = [lc.submit(t.id, scale) for t in kernels]
            print(
                f"Submitted {len(ids)} jobs with sbatch (Rodinia kernels, {scale:g}x their time)."
            )
            lc.start_planner()
            plan = lc.wait_plan(len(ids))
            jobs = lc.wait_done(ids, 600)
            records = {r["job"]: r for r in lc.records()}
            planned = lc.assignments(ids)
            audit = lc.audit()
            t0 = plan["started"]
            print()
            row = "{:>4} {:<15} {:>3} {:<9} {:>5} {:>8} {:>8} {:>7} {:<10}"
            print(
                row.format(
                    "JOB", "KERNEL", "GPU", "PROFILE", "AT", "START", "END", "SECONDS", "STATE"
                )
            )
            for j in sorted(ids, key=lambda x: records.get(x, {}).get("start", 0)):
                a, r = planned.get(j), records.get(j, {})
                print(
                    row.format(
                        j,
                        r.get("kernel", "?"),
                        a.gpu if a else "-",
                        a.profile if a else "-",
                        f"{a.placement.start}:{a.placement.size}" if a else "-",
                        f"{r['start'] - t0:.2f}" if r else "-",
                        f"{r['end'] - t0:.2f}" if r else "-",
                        f"{r['end'] - r['start']:.2f}" if r else "-",
                        jobs[j].state,
                    )
                )
            realized = max(r["end"] for r in records.values()) - t0
            gaps = handoff_gaps(list(records.values()))
            slices = slice_handoffs(list(records.values()), lc.runtimes())
            ok = (
                all(jobs[j].state == "COMPLETED" for j in ids)
                and not overlapping_lifetimes(audit)
                and not lc.live_instances()
                and all(
                    (records[j]["profile"], records[j]["gpu"])
                    == (planned[j].profile, planned[j].gpu)
                    for j in ids
                    if j in records and j in planned
                )
            )
            print()
            print(f"planned makespan   {plan['makespan']:.2f} s (FAR, first plan of the batch)")
            print(f"realized makespan  {realized:.2f} s (from that plan to the last job's end)")
            if slices:
                print(
                    f"slice hand-off     median {statistics.median(slices):.2f} s, p95 "
                    f"{_p95(slices):.2f} s from a slice freeing (Epilog done) to the next "
                    "job on it running (its batch script begun)"
                )
            if gaps:
                print(
                    f"job to job         median {statistics.median(gaps):.2f} s from a job's "
                    "last line to the next one's first (with both jobs' start-up and exit); "
                    f"{chain_length(planned)} jobs at most one after another on a slice"
                )
            print(
                f"instances left     {len(lc.live_instances())}; overlapping slices: "
                f"{len(overlapping_lifetimes(audit))}; creates/destroys: {len(audit)}"
            )
            print(
                "every job ran on its planned slice" if ok else "SOMETHING DID NOT RUN AS PLANNED"
            )
            out = write_gantt(
                realized_plan(list(records.values()), audit, t0, tasks),
                gantt,
                title=f"{len(ids)} Rodinia jobs as run by Slurm on 2 simulated {MODEL}",
            )
            print(f"Gantt chart of what ran: {out.resolve()}")
            return 0 if ok else 1
    finally:
        shutil.rmtree(root, ignore_errors=True)
