"""``slurm-mig plan``: plan a batch of tasks and print the schedule or its JSON; with
``--start STATE.json``, decide onto a cluster's state (e.g. the planner daemon's status
file) what the daemon and the simulator decide for it, with any registered policy."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time

from ..argtypes import count_at_most, number_within, positive_int
from ..gantt import write_gantt
from ..planner import UnknownPlanner
from ..planner.sequencing import OBJECTIVES
from ..planner.snapshot import ClusterSnapshot, snapshot_from_json
from ..workload import load_task_source
from .common import (
    DEFAULT_PLANNER,
    MODELS_HELP,
    PLANNERS_HELP,
    PROG,
    TASKS_HELP,
    Formatter,
    model_for,
    ratio,
    run_planner,
    slices_text,
    table,
    wrap,
)

log = logging.getLogger("slurm_mig")

# Bounds on what one 'plan' call takes: planning time and memory grow with tasks x GPUs
# (far: 100,000 tasks on 10,000 GPUs in about 30 s and 0.4 GB on one core), and a typo
# (--gpus 1000000, --time-budget 1e9) must end in an error, not in a run without end.
MAX_GPUS = 10_000
MAX_TASKS = 100_000
MAX_BUDGET_S = 3600.0


gpu_count = count_at_most(MAX_GPUS, "GPUs, the most one plan takes")
time_budget = number_within(
    0.0,
    MAX_BUDGET_S,
    f"more than 0 and at most {MAX_BUDGET_S:g} s, the longest search plan runs "
    "(the search keeps its best plan when the budget runs out)",
    above_low=True,
)


def check_counts(tasks: int, gpus: int, source: str) -> None:
    """Refuse a batch above ``MAX_TASKS`` tasks or ``MAX_GPUS`` GPUs, naming ``source``."""
    if tasks > MAX_TASKS:
        raise ValueError(
            f"{source}: {tasks} tasks, more than the {MAX_TASKS} one plan takes "
            "(plan the first of them, or split the file)"
        )
    if gpus > MAX_GPUS:
        raise ValueError(
            f"{source}: {gpus} GPUs, more than the {MAX_GPUS} one plan takes "
            "(plan one GPU model or partition at a time)"
        )


def add_parser(sub) -> None:
    pl = sub.add_parser(
        "plan",
        formatter_class=Formatter,
        help="plan a batch of tasks and print the schedule",
        description=wrap(
            "Plan one batch of tasks on GPUs of one model and print the schedule: each "
            "task's GPU, MIG profile, placement, compute slices and start/end times, then "
            "the makespan, the lower bound, rho = makespan / lower bound, the number of "
            "create/destroy operations and the planning time. Nothing is executed; no GPU "
            "or Slurm is needed. With --start STATE.json, plan onto the GPUs as that state "
            "describes them (the planner daemon's <state_dir>/planner-status.json, or a "
            "cluster snapshot): the waiting jobs there, plus TASKS if given, decided by the "
            "policy exactly as the daemon and the simulator decide; any registered policy, "
            "batch or online."
        ),
        epilog=TASKS_HELP + "\n" + PLANNERS_HELP + "\n" + MODELS_HELP,
    )
    _add_batch_options(pl)
    _add_planner_options(pl)
    _add_output_options(pl)
    pl.set_defaults(handler=run, usage_error=pl.error)


def _add_batch_options(pl: argparse.ArgumentParser) -> None:
    """What is planned: TASKS, --start, and the GPUs' model and number."""
    pl.add_argument(
        "tasks",
        metavar="TASKS",
        nargs="?",
        help="task file (CSV or JSON) or rodinia-a100 (optional with --start)",
    )
    pl.add_argument(
        "--start",
        metavar="STATE.json",
        help="plan onto this cluster state (the daemon's status file, or a snapshot as "
        "'--start' prints it with --json); its waiting jobs join the batch",
    )
    pl.add_argument(
        "--gpu-model",
        metavar="MODEL",
        help="GPU model, e.g. A100-40GB or H100-80GB (required unless TASKS is rodinia-a100)",
    )
    pl.add_argument(
        "--gpus",
        metavar="N",
        type=gpu_count,
        default=1,
        help=f"number of GPUs of that model to plan on, 1..{MAX_GPUS} (default: 1)",
    )


def _add_planner_options(pl: argparse.ArgumentParser) -> None:
    """How it is planned: the planner, its objective, batches and time budget."""
    pl.add_argument(
        "--planner",
        metavar="NAME",
        default=DEFAULT_PLANNER,
        help=f"planning algorithm (default: {DEFAULT_PLANNER}); see the list below",
    )
    pl.add_argument(
        "--objective",
        metavar="NAME",
        choices=OBJECTIVES,
        help="what the plan minimises (planners far and auto; default: balanced, as the "
        "daemon's [planner] objective): makespan (FAR's plan), jct (the least mean "
        "completion time; the makespan may grow), balanced (the least mean completion "
        "time with the makespan at most 1.05 x FAR's)",
    )
    pl.add_argument(
        "--batch-size",
        metavar="K",
        type=positive_int,
        help="split the tasks, in file order, into batches of K and plan them one after "
        "another with FAR, every other batch reversed so that each overlaps the one before "
        "(Section 4 of the FAR paper); planner far or auto only",
    )
    pl.add_argument(
        "--time-budget",
        metavar="SECONDS",
        type=time_budget,
        help="planner exact only: stop the search after this many seconds (at most "
        f"{MAX_BUDGET_S:g}) and keep the best plan found (default: 10); stats.optimal in "
        "the JSON says whether it is proven",
    )


def _add_output_options(pl: argparse.ArgumentParser) -> None:
    """What is printed or drawn: JSON on stdout, a Gantt chart."""
    pl.add_argument(
        "--json",
        action="store_true",
        help="print the plan as JSON (the plan contract) and nothing else on stdout",
    )
    pl.add_argument(
        "--gantt",
        metavar="OUT.png",
        help="also draw the schedule as a Gantt chart to this PNG file",
    )


def run(args: argparse.Namespace) -> int:
    if args.start:
        return run_onto(args)
    if args.tasks is None:
        args.usage_error("give TASKS (a task file or rodinia-a100), or --start STATE.json")
    from ..planner.batch import get_planner

    get_planner(args.planner)  # an online policy plans no batch: refused before TASKS is read
    model = model_for(args.tasks, args.gpu_model)
    tasks = load_task_source(args.tasks, model)
    check_counts(len(tasks), args.gpus, args.tasks)
    log.info("%d tasks from %s, %d x %s", len(tasks), args.tasks, args.gpus, model.name)
    if args.batch_size:
        if args.planner.strip().lower() not in ("far", "auto"):
            raise UnknownPlanner(
                f"--batch-size concatenates FAR batches; use --planner far or auto, "
                f"not {args.planner!r}"
            )
        from ..planner.concat import plan_batches

        k = args.batch_size
        t0 = time.perf_counter()
        plan = plan_batches([tasks[i : i + k] for i in range(0, len(tasks), k)], model, args.gpus)
        wall = time.perf_counter() - t0
    else:
        plan, wall = run_objective(args, tasks, model)
    log.info("planner %s: makespan %.6f s in %.1f ms", args.planner, plan.makespan, wall * 1e3)
    log.debug("planner stats: %s", dict(plan.stats))
    data = plan.to_json()
    if args.gantt:  # before the output, so that a reader closing the pipe cannot stop it
        out = write_gantt(plan, args.gantt)
        print(f"{PROG}: Gantt chart written to {out}", file=sys.stderr)
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        print(format_plan(data, wall))
    return 0


def objective_option(name: str, objective: str | None) -> dict[str, str]:
    """``{"objective": ...}`` for planner ``name``: ``--objective`` (an error if the
    planner takes none), else the daemon's default where the planner takes one."""
    from ..planner.registry import policy_info
    from ..planner.sequencing import DEFAULT_OBJECTIVE, objective_options

    if not objective:
        return objective_options(name, DEFAULT_OBJECTIVE)
    try:
        return policy_info(name).objective_options(objective)
    except ValueError as exc:
        raise UnknownPlanner(f"--objective {objective}: {exc}") from None


def run_objective(args: argparse.Namespace, tasks, model) -> tuple:
    """``run_planner`` with the planner's objective option (`objective_option`)."""
    options = objective_option(args.planner, args.objective)
    if not options:
        return run_planner(args.planner, tasks, model, args.gpus, args.time_budget)
    from ..planner.batch import Batch, get_planner

    planner = get_planner(args.planner, **options)
    t0 = time.perf_counter()
    plan = planner(Batch(tuple(tasks), model, args.gpus))
    return plan, time.perf_counter() - t0


def format_plan(plan_json: dict, wall_s: float) -> str:
    """The readable form of a plan: one row per task, then a summary."""
    rows = [["TASK", "GPU", "PROFILE", "PLACEMENT", "SLICES", "START", "END"]]
    for t in sorted(plan_json["tasks"], key=lambda t: (t["start"], t["gpu"], t["slices"])):
        pl = t["placement"]
        rows.append(
            [
                str(t["id"]),
                str(t["gpu"]),
                t["profile"],
                f"{pl['start']}:{pl['size']}",
                slices_text(t["slices"]),
                f"{t['start']:.3f}",
                f"{t['end']:.3f}",
            ]
        )
    ops = plan_json["reconfigurations"]
    creates = sum(1 for r in ops if r["op"] == "create")
    lines = table(rows, right={1, 5, 6})
    lines += [
        "",
        f"makespan          {plan_json['makespan']:.3f} s",
        f"lower bound       {plan_json['lower_bound']:.3f} s",
        f"rho               {ratio(plan_json['makespan'], plan_json['lower_bound'])}"
        + (f" (vs the {plan_json['bound']} bound)" if plan_json.get("bound") else ""),
        f"reconfigurations  {len(ops)} ({creates} create, {len(ops) - creates} destroy)",
        f"planning time     {wall_s * 1000:.1f} ms",
        f"planner           {plan_json.get('planner', '?')} on {plan_json['gpus']} x "
        f"{plan_json['gpu_model']}",
    ]
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# --start: decide onto a cluster state


def load_state(path: str, model_name: str | None) -> tuple[ClusterSnapshot, dict]:
    """The cluster snapshot in ``path`` (a snapshot, or the daemon's status file with one
    per GPU model: ``model_name`` picks one) and the batch settings it records."""
    from ..geometry import get_model
    from .common import read_json

    data = read_json(path)
    settings: dict = {}
    if isinstance(data, dict) and "state" in data and "gpus" not in data:
        settings = {k: data[k] for k in ("policy", "batch_window", "batch_size") if k in data}
        groups = data.get("state") or []
        if not isinstance(groups, list) or not groups:
            raise ValueError(
                f"{path}: the status file holds no cluster state (has the daemon planned "
                "a cycle yet?)"
            )
        if model_name is not None:
            want = get_model(model_name).name
            groups = [g for g in groups if isinstance(g, dict) and g.get("gpu_model") == want]
            if not groups:
                raise ValueError(f"{path}: no GPUs of model {want} in the state")
        elif len(groups) > 1:
            models = ", ".join(str(g.get("gpu_model")) for g in groups if isinstance(g, dict))
            raise ValueError(
                f"{path}: the state has several GPU models ({models}); pick one with --gpu-model"
            )
        data = groups[0]
    return snapshot_from_json(data, path), settings


def run_onto(args: argparse.Namespace) -> int:
    """``plan --start``: the driver's decisions for the state (and TASKS)."""
    from dataclasses import replace
    from types import MappingProxyType

    from ..planner.decisions import decisions_to_json
    from ..planner.driver import BatchSettings, step
    from ..planner.registry import get_policy

    snap, settings = load_state(args.start, args.gpu_model)
    name = args.planner
    if args.tasks is not None:
        tasks = load_task_source(args.tasks, snap.model)
        jobs = dict(snap.pending)
        for t in tasks:
            if t.id in jobs or t.id in snap.running:
                raise ValueError(f"{args.tasks}: task {t.id!r} is already a job of the state")
            jobs[t.id] = replace(t, arrival=snap.now)
        snap = replace(snap, pending=MappingProxyType(jobs))
    check_counts(len(snap.pending) + len(snap.running), len(snap.gpus), args.start)
    options = {"time_budget": args.time_budget} if args.time_budget and name == "exact" else {}
    policy = get_policy(name, **options, **objective_option(name, args.objective))
    window = float(settings.get("batch_window", 0.0))
    size = int(settings.get("batch_size", 0) or 0)
    t0 = time.perf_counter()
    got = step(snap, policy, BatchSettings(window=window, size=size))
    wall = time.perf_counter() - t0
    data = decisions_to_json(got, snap)
    data["planner"] = policy.name
    data["planning_seconds"] = wall
    if args.gantt and got.plan is not None:
        out = write_gantt(got.plan, args.gantt)
        print(f"{PROG}: Gantt chart written to {out}", file=sys.stderr)
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    print(format_decisions(data, snap))
    return 0


def format_decisions(data: dict, snap: ClusterSnapshot) -> str:
    """The readable form of ``plan --start``'s decisions."""
    rows = [["JOB", "NODE", "GPU", "PROFILE", "PLACEMENT", "START", "STATE"]]
    now = snap.now
    for p in data["placements"]:
        pl = p["placement"]
        rows.append(
            [p["job"], p["node"], str(p["local"]), p["profile"], f"{pl['start']}:{pl['size']}",
             f"+{p['start'] - now:.1f} s", "start now"]
        )  # fmt: skip
    plan = data.get("plan")
    starts = {}
    if plan:
        starts = {t["id"]: t["start"] for t in plan["tasks"] if not t.get("running")}
    for p in data["planned"]:
        pl = p["placement"]
        at = starts.get(p["job"])
        rows.append(
            [p["job"], p["node"], str(p["local"]), p["profile"], f"{pl['start']}:{pl['size']}",
             "-" if at is None else f"+{at:.1f} s", f"planned (batch {p['batch']}, order {p['order']})"]
        )  # fmt: skip
    lines = table(rows, right={2}) if len(rows) > 1 else ["(nothing to start or plan)"]
    for m in data["moves"]:
        lines.append(f"move {m['job']} to {m['node']} gpu {m['local']} {m['profile']}")
    placed = {p["job"] for p in data["placements"]} | {p["job"] for p in data["planned"]}
    waiting = [j for j in snap.pending if j not in placed]
    lines += [
        "",
        f"planner           {data['planner']} onto {len(snap.gpus)} x {snap.model.name} "
        f"({len(snap.running)} running)",
        f"start now         {len(data['placements'])}",
        f"planned           {len(data['planned'])}",
        f"waiting           {len(waiting)}",
        f"planning time     {data['planning_seconds'] * 1000:.1f} ms",
    ]
    if plan:
        lines.insert(-1, f"makespan          {plan['makespan']:.3f} s (from now)")
    return "\n".join(lines)
