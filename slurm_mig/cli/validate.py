"""``slurm-mig validate``: check a plan JSON file against the MIG constraints."""

from __future__ import annotations

import argparse
import sys

from ..geometry import get_model
from ..inputs import InputError, parse_json, read_text
from ..plan import PlanError, validate_plan
from ..workload import load_task_source
from .common import TASKS_HELP, Formatter, wrap


def add_parser(sub) -> None:
    va = sub.add_parser(
        "validate",
        formatter_class=Formatter,
        help="check a plan JSON file against the MIG constraints",
        description=wrap(
            "Check a plan (the JSON printed by 'slurm-mig plan --json'): tasks sharing a "
            "compute slice never overlap in time; live instances of a GPU are disjoint, "
            "legal NVIDIA placements; create/destroy operations of a GPU run one at a time "
            "and take at least the hardware's time; every task runs on an instance that "
            "exists for its whole run. With --tasks (read for the plan's gpu_model), also "
            "that every task of the batch runs exactly once, for its own runtime on its "
            "instance size. Prints 'valid' and exits 0, or prints each violation and "
            "exits 1."
        ),
        epilog=TASKS_HELP,
    )
    va.add_argument("plan", metavar="PLAN.json", help="plan file")
    va.add_argument(
        "--tasks",
        metavar="TASKS",
        help="the batch the plan was made for (task file or rodinia-a100)",
    )
    va.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    try:
        data = parse_json(read_text(args.plan), args.plan)
    except InputError as exc:
        raise PlanError(str(exc)) from None
    if not isinstance(data, dict):
        raise PlanError(f"{args.plan}: expected a plan object, as 'slurm-mig plan --json' prints")
    tasks = None
    if args.tasks:
        model = get_model(str(data.get("gpu_model", "")))
        tasks = load_task_source(args.tasks, model)
    errors = validate_plan(data, tasks)
    if not errors:
        print("valid")
        return 0
    for e in errors:
        print(e)
    print(f"invalid: {len(errors)} violation{'s' if len(errors) != 1 else ''}", file=sys.stderr)
    return 1
