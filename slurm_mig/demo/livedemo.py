"""``slurm-mig demo --live``: the Rodinia batch through a real Slurm on loopback with
simulated MIG A100s, the hooks and the planner daemon; prints what ran against what
was planned and draws what ran as a Gantt chart."""

from __future__ import annotations

import shutil
import statistics
import tempfile
from pathlib import Path

from ..geometry import Placement, Slot, get_model
from ..plan import Plan, PlannedTask, Reconfiguration
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


def asked_bound(kernels, scale: float, model, gpus: int) -> float:
    """The area lower bound of what the jobs were asked to run: each job's kernel at
    ``scale`` times its profiled seconds (the demo's jobs sleep that long), its least
    slice-seconds spread over every slice of ``gpus`` GPUs."""
    return sum(scale * k.min_work() for k in kernels) / (model.compute_slices * gpus)


def realized_plan(
    records: list[dict], audit: list[dict], t0: float, kernels, scale: float = 1.0
) -> Plan:
    """What ran, in the plan format (times from ``t0``), so the Gantt chart can draw it;
    its lower bound is that of the jobs as submitted (``kernels`` at ``scale``)."""
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
        lower_bound=asked_bound(kernels, scale, model, 2),
        planner="far (as run on Slurm)",
    )


def status_text(lc: LiveCluster, width: int = 120) -> str:
    """``slurm-mig status`` of the live cluster, as text."""
    import io

    from rich.console import Console

    from ..cli.status import load_view, render
    from ..config import load_config
    from ..slurm.client import SlurmClient

    view = load_view(load_config(lc.config_path), None, SlurmClient(env=lc.env))
    console = Console(file=io.StringIO(), width=width, record=True, color_system=None)
    console.print(render(view))
    return console.export_text()


def status_while_running(lc: LiveCluster, timeout: float = 60.0) -> str:
    """The status once jobs run on every GPU (or after ``timeout``); "" on failure."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        running = [j for j in lc.jobs().values() if j.state == "RUNNING"]
        if len(running) >= 2:
            seen = lc.status().get("cycle", 0)
            try:  # a cycle that has seen them run
                lc.wait_status(
                    lambda st, seen=seen: st.get("cycle", 0) > seen,
                    max(1.0, deadline - time.monotonic()),
                )
            except TimeoutError:
                pass
            break
        time.sleep(0.2)
    try:
        return status_text(lc)
    except Exception as exc:  # the demo goes on without it
        return f"(status not available: {exc})"


def scrape_metrics(lc: LiveCluster) -> str:
    """A one-line summary of the daemon's /metrics, parsed with prometheus_client."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    try:
        text = urllib.request.urlopen(lc.metrics_url, timeout=10).read().decode()
    except OSError as exc:
        return f"(not reachable: {exc})"
    values = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if not sample.labels or sample.labels.get("result") == "ok":
                values[sample.name] = sample.value
    return (
        f"{values.get('slurm_mig_planner_cycles_total', 0):.0f} cycles, "
        f"{values.get('slurm_mig_planner_jobs_released_total', 0):.0f} releases, "
        f"mean cycle {values.get('slurm_mig_planner_cycle_seconds_sum', 0) / max(1, values.get('slurm_mig_planner_cycle_seconds_count', 1)):.3f} s, "
        f"{len(text.splitlines())} lines of metrics"
    )


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[int(0.95 * (len(ordered) - 1))]


def run_live_demo(gantt: str, scale: float = 2.0, copies: int = 24) -> int:
    """Run the demo batch on a loopback Slurm; 0 when every job ran as planned."""
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
            return _run_batch(lc, tasks, kernels, scale, gantt)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _run_batch(lc: LiveCluster, tasks, kernels, scale: float, gantt: str) -> int:
    """Submit ``kernels`` to the running cluster, wait for them and print what ran."""
    from ..gantt import write_gantt

    lc.learn(tasks, scale)
    ids = [lc.submit(t.id, scale) for t in kernels]
    print(f"Submitted {len(ids)} jobs with sbatch (Rodinia kernels, {scale:g}x their time).")
    lc.start_planner()
    plan = lc.wait_plan(len(ids))
    during = status_while_running(lc)
    jobs = lc.wait_done(ids, 600)
    scraped = scrape_metrics(lc)
    records = {r["job"]: r for r in lc.records()}
    planned = lc.assignments(ids)
    audit = lc.audit()
    t0 = plan["started"]
    print()
    _print_jobs(ids, records, planned, jobs, t0)
    ok = _print_outcome(lc, plan, ids, jobs, records, planned, audit, t0)
    out = write_gantt(
        realized_plan(list(records.values()), audit, t0, kernels, scale),
        gantt,
        title=f"{len(ids)} Rodinia jobs as run by Slurm on 2 simulated {MODEL}",
    )
    print(f"Gantt chart of what ran: {out.resolve()}")
    if during:
        print()
        print("slurm-mig status while the batch ran:")
        print(during.rstrip())
    print()
    print(f"Prometheus metrics of the planner: {lc.metrics_url} (served while the demo ran)")
    if scraped:
        print("  " + scraped)
    return 0 if ok else 1


def _print_jobs(
    ids: list[str], records: dict[str, dict], planned: dict, jobs: dict, t0: float
) -> None:
    """The table of jobs in start order: planned GPU, profile, placement; times that ran."""
    row = "{:>4} {:<15} {:>3} {:<9} {:>5} {:>8} {:>8} {:>7} {:<10}"
    print(row.format("JOB", "KERNEL", "GPU", "PROFILE", "AT", "START", "END", "SECONDS", "STATE"))
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


def _ran_as_planned(
    lc: LiveCluster,
    ids: list[str],
    jobs: dict,
    records: dict[str, dict],
    planned: dict,
    audit: list[dict],
) -> bool:
    """Every job completed on its planned profile and GPU, no instance overlapped or is left."""
    return (
        all(jobs[j].state == "COMPLETED" for j in ids)
        and not overlapping_lifetimes(audit)
        and not lc.live_instances()
        and all(
            (records[j]["profile"], records[j]["gpu"]) == (planned[j].profile, planned[j].gpu)
            for j in ids
            if j in records and j in planned
        )
    )


def _print_outcome(
    lc: LiveCluster,
    plan: dict,
    ids: list[str],
    jobs: dict,
    records: dict[str, dict],
    planned: dict,
    audit: list[dict],
    t0: float,
) -> bool:
    """Print the makespans, hand-off times and instances left; whether all ran as planned."""
    realized = max(r["end"] for r in records.values()) - t0
    gaps = handoff_gaps(list(records.values()))
    slices = slice_handoffs(list(records.values()), lc.runtimes())
    ok = _ran_as_planned(lc, ids, jobs, records, planned, audit)
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
    print("every job ran on its planned slice" if ok else "SOMETHING DID NOT RUN AS PLANNED")
    return ok
