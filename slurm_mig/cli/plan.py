"""``slurm-mig plan``: plan a batch of tasks and print the schedule or its JSON."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time

from ..argtypes import positive_int
from ..gantt import write_gantt
from ..planner import UnknownPlanner
from ..workload import load_task_source
from .common import (
    DEFAULT_PLANNER,
    MODELS_HELP,
    PLANNERS_HELP,
    PROG,
    TASKS_HELP,
    Formatter,
    model_for,
    positive_float,
    ratio,
    run_planner,
    slices_text,
    table,
    wrap,
)

log = logging.getLogger("slurm_mig")


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
            "or Slurm is needed."
        ),
        epilog=TASKS_HELP + "\n" + PLANNERS_HELP + "\n" + MODELS_HELP,
    )
    pl.add_argument("tasks", metavar="TASKS", help="task file (CSV or JSON) or rodinia-a100")
    pl.add_argument(
        "--gpu-model",
        metavar="MODEL",
        help="GPU model, e.g. A100-40GB or H100-80GB (required unless TASKS is rodinia-a100)",
    )
    pl.add_argument(
        "--gpus",
        metavar="N",
        type=positive_int,
        default=1,
        help="number of GPUs of that model to plan on (default: 1)",
    )
    pl.add_argument(
        "--planner",
        metavar="NAME",
        default=DEFAULT_PLANNER,
        help=f"planning algorithm (default: {DEFAULT_PLANNER}); see the list below",
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
        type=positive_float,
        help="planner exact only: stop the search after this many seconds and keep the "
        "best plan found (default: 10); stats.optimal in the JSON says whether it is proven",
    )
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
    pl.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    model = model_for(args.tasks, args.gpu_model)
    tasks = load_task_source(args.tasks, model)
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
        plan, wall = run_planner(args.planner, tasks, model, args.gpus, args.time_budget)
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
        f"rho               {ratio(plan_json['makespan'], plan_json['lower_bound'])}",
        f"reconfigurations  {len(ops)} ({creates} create, {len(ops) - creates} destroy)",
        f"planning time     {wall_s * 1000:.1f} ms",
        f"planner           {plan_json.get('planner', '?')} on {plan_json['gpus']} x "
        f"{plan_json['gpu_model']}",
    ]
    return "\n".join(lines)
