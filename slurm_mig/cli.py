"""The ``slurm-mig`` command: plan a batch, validate a plan, run the demo, benchmark.

Results go to stdout, diagnostics (``-v``) and errors to stderr. Bad input of any
kind ends with one line ``slurm-mig: error: <message>`` and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import textwrap
import time
from collections.abc import Sequence
from importlib import metadata, resources
from pathlib import Path

from .argtypes import positive_int as _positive_int
from .geometry import MODELS, GeometryError, GpuModel, get_model
from .plan import Plan, PlanError, sigma, validate_plan
from .planner import Batch, UnknownPlanner, get_planner
from .workload import Task, WorkloadError, load_tasks, parse_csv, validate

log = logging.getLogger("slurm_mig")

PROG = "slurm-mig"
BUILTIN_TASKS = {"rodinia-a100": ("rodinia_a100.csv", "A100-40GB")}
DEFAULT_PLANNER = "auto"
DEFAULT_GANTT = "rodinia-far-gantt.png"

# Section 6.4.1 of the FAR paper (Villarrubia et al., JPDC 2025), Rodinia on an A100.
PAPER_FAR_RHO = 1.22
DEMO_PLANNERS: tuple[tuple[str, str, float | None], ...] = (
    # (planner name, the paper's name for it, the paper's sigma)
    ("far", "FAR", None),
    ("miso-opt", "MISO-OPT", 2.10),
    ("fixpart-1-1-1-1-1-1-1", "FIXPART(1,...,1)", 2.18),
    ("fixpart-best", "FIXPARTBEST", 1.16),
    ("fixpart-7", "FIXPART(7)", 1.26),
    ("auto", "auto", None),
    ("exact", "exact", None),
)

# The demo's exact search stops here; the Rodinia batch is too large to prove optimal.
DEMO_EXACT_BUDGET = 2.0

# Errors that are the operator's input, not a bug: one line, exit 2.
INPUT_ERRORS = (WorkloadError, GeometryError, UnknownPlanner, PlanError, OSError, ValueError)

TASKS_HELP = """\
task input (TASKS):
  A CSV or JSON file with one runtime in seconds per task and MIG instance size
  (compute slices); 'inf' means the task cannot run on that size. Every task
  needs a time for every size of the GPU model (A30: 1,2,4; the others: 1,2,3,4,7).
    wide CSV   id,1,2,3,4,7            one row per task
    long CSV   kernel,size,seconds     one row per task and size
    JSON       [{"id": "job-17", "times": {"1": 310.0, "2": 160.5, ...}}, ...]
  The name rodinia-a100 selects the embedded table of 16 Rodinia kernels profiled
  on an A100 (FAR paper, Section 6.4.1); its GPU model defaults to A100-40GB.
"""

MODELS_HELP = "GPU models: " + ", ".join(MODELS) + " (A30, A100, H100 are short names)."

PLANNERS_HELP = """\
planners (--planner):
  auto          FAR, plus an exact search where the batch is small enough (default)
  far           FAR phases 1-3: allotment family, LPT list scheduling over the
                repartitioning tree, moves and swaps
  far-pcie      FAR candidates ranked under the PCIe slowdown model (Eq. 2) for
                tasks with alpha/pcie_demand in their meta (the simulator's
                far-pcie policy); plain FAR for task files, which carry none
  exact         branch and bound over FAR's search space (small batches only)
  miso-opt      MISO's optimizer: per step the partition that maximises summed speedup
  fixpart-best  the best fixed partition, never reconfigured
  fixpart-SIZES one fixed partition, sizes left to right, e.g. fixpart-7,
                fixpart-4-3, fixpart-1-1-1-1-1-1-1
"""


class _Formatter(argparse.RawDescriptionHelpFormatter):
    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=30)


def _wrap(text: str) -> str:
    return textwrap.fill(text, width=79)


def _version() -> str:
    try:
        return metadata.version("slurm-mig")
    except metadata.PackageNotFoundError:
        return "0.1.0 (source tree, not installed)"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        formatter_class=_Formatter,
        description=_wrap(
            "Plan NVIDIA MIG repartitioning for a batch of GPU jobs: how many compute "
            "slices each job gets, on which GPU and instance placement it runs, in which "
            "order, and when instances are created and destroyed."
        ),
        epilog=f"Run '{PROG} COMMAND --help' for the inputs and defaults of a command.",
    )
    p.add_argument("--version", action="version", version=f"{PROG} {_version()}")
    p.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="log diagnostics to stderr (-vv for debug detail)",
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    pl = sub.add_parser(
        "plan",
        formatter_class=_Formatter,
        help="plan a batch of tasks and print the schedule",
        description=_wrap(
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
        type=_positive_int,
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
        type=_positive_int,
        help="split the tasks, in file order, into batches of K and plan them one after "
        "another with FAR, every other batch reversed so that each overlaps the one before "
        "(Section 4 of the FAR paper); planner far or auto only",
    )
    pl.add_argument(
        "--time-budget",
        metavar="SECONDS",
        type=_positive_float,
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
    pl.set_defaults(handler=cmd_plan)

    va = sub.add_parser(
        "validate",
        formatter_class=_Formatter,
        help="check a plan JSON file against the MIG constraints",
        description=_wrap(
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
    va.set_defaults(handler=cmd_validate)

    de = sub.add_parser(
        "demo",
        formatter_class=_Formatter,
        help="plan the embedded Rodinia A100 batch with FAR and the baselines",
        description=_wrap(
            "Plan the embedded batch of 16 Rodinia kernels on one A100-40GB with FAR and "
            "with each baseline, and compare them: makespan, rho, sigma = makespan / FAR's "
            "makespan, the paper's figure beside ours (Villarrubia et al., JPDC 2025, "
            "Section 6.4.1) and the planning time. Draws FAR's schedule as a Gantt chart. "
            "No GPU or Slurm is needed. With --live (root, Slurm installed): then runs "
            "24 of these kernels as sbatch jobs on a Slurm started on loopback with two "
            "simulated A100-40GB GPUs, the hooks and the planner daemon, and shows what ran "
            "against what was planned; its Gantt chart is written beside FAR's with -live "
            "in the name. Where the live run cannot start it says why and stops after the plan."
        ),
    )
    de.add_argument(
        "--live",
        action="store_true",
        help="also run the batch through a real Slurm on loopback (needs root)",
    )
    de.add_argument(
        "--gantt",
        metavar="OUT.png",
        default=DEFAULT_GANTT,
        help=f"where to write FAR's Gantt chart (default: ./{DEFAULT_GANTT})",
    )
    de.set_defaults(handler=cmd_demo)

    be = sub.add_parser(
        "bench",
        formatter_class=_Formatter,
        help="reproduce the FAR paper's Tables 4-7 (plan quality and planning time)",
        description=_wrap(
            "Reproduce Tables 4-7 of the FAR paper with our planners, our figure beside "
            "the paper's in every cell: rho of FAR, sigma of each baseline, planning "
            "time, and batch concatenation. Each cell is the mean over N seeded synthetic "
            "batches (the generator of Section 6.3). 'far' is the only benchmark; no GPU "
            "or Slurm is needed."
        ),
    )
    be.add_argument("which", choices=["far"], help="the benchmark to run")
    be.add_argument(
        "--reps",
        metavar="N",
        type=_positive_int,
        default=None,
        help="seeded batches per table cell (default: the benchmark's own; the paper: 1000)",
    )
    be.add_argument("--json", action="store_true", help="print the results as JSON")
    be.set_defaults(handler=cmd_bench)

    cc = sub.add_parser(
        "check-config",
        formatter_class=_Formatter,
        help="check a slurm-mig config file and summarise it",
        description=_wrap(
            "Read a slurm-mig config file and check every section and key: types, ranges, "
            "GPU models, hostlists, paths. Prints 'PATH: ok' and a summary (partition, "
            "nodes, GPUs by model, device backend) and exits 0, or prints one line per "
            "problem (file, section.key, the fix) and exits 1. The annotated example is "
            "contrib/config.toml."
        ),
    )
    cc.add_argument(
        "path",
        metavar="PATH",
        nargs="?",
        help="config file (default: $SLURM_MIG_CONFIG, else /etc/slurm-mig/config.toml)",
    )
    cc.set_defaults(handler=cmd_check_config)

    kg = sub.add_parser(
        "keygen",
        formatter_class=_Formatter,
        help="write a new key for signing job assignments",
        description=_wrap(
            "Write a new random HMAC key (hex, mode 0600) that the planner signs job "
            "assignments with and the prolog checks them with. Copy the same file to "
            "every node, owner root. An existing key is never overwritten: remove it "
            "first to replace it."
        ),
    )
    kg.add_argument(
        "path",
        metavar="PATH",
        nargs="?",
        help="where to write the key (default: key_file of the config, else /etc/slurm-mig/key)",
    )
    kg.add_argument(
        "--config",
        metavar="CONFIG",
        help="config file whose key_file is the default PATH "
        "(default: $SLURM_MIG_CONFIG, else /etc/slurm-mig/config.toml)",
    )
    kg.set_defaults(handler=cmd_keygen)
    _add_forecast_parser(sub)
    _add_planner_parser(sub)
    from .sim.command import add_parser as _add_simulate_parser  # pure Python, no numpy

    _add_simulate_parser(sub, _Formatter)
    return p


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text} must be a positive number of seconds")
    return value


# ---------------------------------------------------------------------------
# Inputs


def load_task_source(source: str, model: GpuModel) -> list[Task]:
    """Tasks from a file, or from the embedded table named ``source``."""
    key = source.strip().lower()
    if key in BUILTIN_TASKS and not Path(source).exists():
        filename, _ = BUILTIN_TASKS[key]
        text = resources.files("slurm_mig").joinpath("data", filename).read_text()
        tasks = parse_csv(text, key)
        validate(tasks, model, key)
        return tasks
    return load_tasks(source, model)


def _model_for(source: str, name: str | None) -> GpuModel:
    if name is not None:
        return get_model(name)
    builtin = BUILTIN_TASKS.get(source.strip().lower())
    if builtin is not None and not Path(source).exists():
        return get_model(builtin[1])
    raise GeometryError(f"give --gpu-model for {source}; models: {', '.join(MODELS)}")


def run_planner(
    name: str,
    tasks: Sequence[Task],
    model: GpuModel,
    gpus: int,
    time_budget: float | None = None,
) -> tuple[Plan, float]:
    """Plan with the named planner; returns the plan and the wall time in seconds.

    ``time_budget`` bounds the exact planner's search (seconds); others ignore it."""
    planner = get_planner(name)
    if time_budget is not None and name.strip().lower() == "exact":
        from .planner.exact import plan_exact

        def planner(batch: Batch) -> Plan:
            return plan_exact(batch, time_budget=time_budget)

    t0 = time.perf_counter()
    plan = planner(Batch(tuple(tasks), model, gpus))
    return plan, time.perf_counter() - t0


# ---------------------------------------------------------------------------
# Output helpers


def _slices(slices: Sequence[int]) -> str:
    if not slices:
        return "-"
    return str(slices[0]) if len(slices) == 1 else f"{slices[0]}-{slices[-1]}"


def _table(rows: Sequence[Sequence[str]], right: set[int]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for row in rows:
        cells = [
            c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))
        ]
        out.append("  ".join(cells).rstrip())
    return out


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
                _slices(t["slices"]),
                f"{t['start']:.3f}",
                f"{t['end']:.3f}",
            ]
        )
    ops = plan_json["reconfigurations"]
    creates = sum(1 for r in ops if r["op"] == "create")
    lines = _table(rows, right={1, 5, 6})
    lines += [
        "",
        f"makespan          {plan_json['makespan']:.3f} s",
        f"lower bound       {plan_json['lower_bound']:.3f} s",
        f"rho               {_ratio(plan_json['makespan'], plan_json['lower_bound'])}",
        f"reconfigurations  {len(ops)} ({creates} create, {len(ops) - creates} destroy)",
        f"planning time     {wall_s * 1000:.1f} ms",
        f"planner           {plan_json.get('planner', '?')} on {plan_json['gpus']} x "
        f"{plan_json['gpu_model']}",
    ]
    return "\n".join(lines)


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.3f}" if b > 0 and math.isfinite(a) else "inf"


def _write_gantt(plan: Plan, path: str, title: str | None = None) -> Path:
    from .gantt import draw_gantt  # imports matplotlib only when a chart is asked for

    out = Path(path)
    try:
        draw_gantt(plan, out, title=title)
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] != "matplotlib":
            raise
        raise PlanError("Gantt charts need matplotlib; pip install matplotlib") from None
    return out


# ---------------------------------------------------------------------------
# Commands


def cmd_plan(args: argparse.Namespace) -> int:
    model = _model_for(args.tasks, args.gpu_model)
    tasks = load_task_source(args.tasks, model)
    log.info("%d tasks from %s, %d x %s", len(tasks), args.tasks, args.gpus, model.name)
    if args.batch_size:
        if args.planner.strip().lower() not in ("far", "auto"):
            raise UnknownPlanner(
                f"--batch-size concatenates FAR batches; use --planner far or auto, "
                f"not {args.planner!r}"
            )
        from .planner.concat import plan_batches

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
        out = _write_gantt(plan, args.gantt)
        print(f"{PROG}: Gantt chart written to {out}", file=sys.stderr)
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        print(format_plan(data, wall))
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    try:
        data = json.loads(Path(args.plan).read_text())
    except FileNotFoundError:
        raise PlanError(f"{args.plan}: no such file") from None
    except json.JSONDecodeError as exc:
        raise PlanError(f"{args.plan}: not valid JSON ({exc.msg}, line {exc.lineno})") from None
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


def cmd_demo(args: argparse.Namespace) -> int:
    model = get_model("A100-40GB")
    tasks = load_task_source("rodinia-a100", model)
    print(f"Rodinia on one {model.name}: {len(tasks)} kernels (FAR paper, Section 6.4.1)")
    print()
    # fixed widths, so that each row shows as soon as its planner is done
    row = "{:<22} {:>10} {:>6} {:>6}  {:<29} {:<13} {:>7}"
    print(row.format("PLANNER", "MAKESPAN", "RHO", "SIGMA", "PAPER", "CHECK", "PLAN MS"))
    far_plan: Plan | None = None
    for name, label, paper_sigma in DEMO_PLANNERS:
        if name == "far":
            paper = f"{label}: rho {PAPER_FAR_RHO:.2f}"
        else:
            paper = f"{label}: sigma {paper_sigma:.2f}" if paper_sigma is not None else ""
        try:
            plan, wall = run_planner(name, tasks, model, 1, DEMO_EXACT_BUDGET)
        except Exception as exc:  # one failing baseline must not end the comparison
            log.info("planner %s failed", name, exc_info=True)
            reason = " ".join(str(exc).split()) or exc.__class__.__name__
            print(f"{name:<22} n/a ({reason})", flush=True)
            continue
        if name == "far":
            far_plan = plan
        errors = validate_plan(plan.to_json(), tasks)
        print(
            row.format(
                name,
                f"{plan.makespan:.3f} s",
                f"{plan.rho:.3f}",
                f"{sigma(plan.makespan, far_plan.makespan):.3f}" if far_plan else "n/a",
                paper,
                "valid" if not errors else f"INVALID ({len(errors)})",
                f"{wall * 1000:.1f}",
            ),
            flush=True,
        )
    print()
    print("rho = makespan / lower bound; sigma = makespan / FAR's makespan; PAPER = the")
    print("figure Villarrubia et al. report for the same kernels; CHECK = validate_plan.")
    if far_plan is None:
        raise PlanError("FAR failed on the Rodinia batch; no Gantt chart")
    out = _write_gantt(far_plan, args.gantt, title="FAR on the 16 Rodinia kernels, one A100-40GB")
    print(f"FAR Gantt chart: {out.resolve()}")
    if not getattr(args, "live", False):
        return 0
    from .slurm.livedemo import live_unavailable, run_live_demo

    why = live_unavailable()
    if why:
        print(f"\nNo live run: {why}. The plan above is the demo.")
        return 0
    print()
    live_png = Path(args.gantt).with_name(Path(args.gantt).stem + "-live.png")
    return run_live_demo(str(live_png))


def cmd_bench(args: argparse.Namespace) -> int:
    try:
        from .bench import run_far_bench
    except ImportError as exc:
        raise PlanError(f"the benchmark is not available in this installation ({exc})") from None
    if args.reps is None:  # the benchmark's own default
        return run_far_bench(as_json=args.json)
    return run_far_bench(reps=args.reps, as_json=args.json)


def cmd_check_config(args: argparse.Namespace) -> int:
    from .config import ConfigError, config_path, load_config

    path = config_path(args.path)
    try:
        config = load_config(args.path)
    except ConfigError as exc:
        for problem in exc.problems:
            print(problem)
        n = len(exc.problems)
        print(f"{path}: {n} problem{'s' if n != 1 else ''}", file=sys.stderr)
        return 1
    counts: dict[str, int] = {}
    for models in config.nodes.values():
        for m in models:
            counts[m] = counts.get(m, 0) + 1
    gpus = sum(counts.values())
    order = list(MODELS)
    by_model = ", ".join(f"{counts[m]} x {m}" for m in sorted(counts, key=order.index))
    print(f"{path}: ok")
    print(f"partition  {config.partition}")
    print(f"nodes      {len(config.nodes)}")
    print(f"gpus       {gpus} ({by_model})")
    print(f"backend    {config.backend}")
    return 0


def cmd_keygen(args: argparse.Namespace) -> int:
    from .config import DEFAULT_CONFIG_PATH, DEFAULT_KEY_FILE, ConfigError, config_path, load_config
    from .slurm.assignment import generate_key

    if args.path:
        path = Path(args.path)
    else:
        source = config_path(args.config)
        if source != DEFAULT_CONFIG_PATH or source.exists():  # a chosen config must load
            try:
                path = load_config(args.config).key_file
            except ConfigError as exc:
                if len(exc.problems) == 1:
                    raise
                raise ConfigError(
                    f"{source}: cannot take key_file from this config ({len(exc.problems)} "
                    f"problems; run '{PROG} check-config {source}'), or give the key PATH"
                ) from None
        else:
            path = DEFAULT_KEY_FILE
    try:
        written = generate_key(path)
    except FileExistsError:
        raise FileExistsError(
            f"{path} already exists; not overwriting a signing key (remove it first to "
            "replace it, then copy the new key to every node)"
        ) from None
    except PermissionError:
        raise PermissionError(
            f"{path}: permission denied; run as root or give another PATH"
        ) from None
    print(f"{written}: new signing key written (mode 0600); copy it to every node, owner root")
    return 0


# ---------------------------------------------------------------------------
# planner: the daemon that holds, plans and releases jobs (slurm_mig/slurm/daemon.py)


def _add_planner_parser(sub) -> None:
    pn = sub.add_parser(
        "planner",
        formatter_class=_Formatter,
        help="run the planner daemon: hold, plan (FAR) and release MIG partition jobs",
        description=_wrap(
            "Every [planner] cycle seconds: read the MIG partition's jobs (squeue) and "
            "nodes (sinfo), hold new jobs, plan held ones in batches with FAR onto the "
            "GPUs of the usable nodes, write each job's assignment (AdminComment, "
            "ReqNodeList) and release a job once its slices are free, with a signed "
            "token in its Comment. Logs one line per action. All its state is in Slurm: "
            "it can be stopped (SIGTERM) and restarted at any time. SIGHUP plans at once. "
            "After each cycle it writes <state_dir>/planner-status.json. Run it as root "
            "on the slurmctld host (contrib/slurm-mig-planner.service)."
        ),
    )
    pn.add_argument(
        "--config",
        metavar="PATH",
        help="config file (default: $SLURM_MIG_CONFIG, else /etc/slurm-mig/config.toml)",
    )
    pn.add_argument(
        "--once",
        action="store_true",
        help="run one cycle and exit: 0 when every action applied, 1 when one failed or "
        "Slurm could not be read",
    )
    pn.add_argument(
        "--dry-run",
        action="store_true",
        help="print the actions one cycle would take, one per line, and apply none "
        "(implies --once; needs no signing key)",
    )
    pn.add_argument(
        "-v",
        "--verbose",
        dest="planner_verbose",
        action="count",
        default=0,
        help="debug detail (actions and a summary per cycle are logged without it)",
    )
    pn.set_defaults(handler=cmd_planner)


def cmd_planner(args: argparse.Namespace) -> int:
    from .slurm.daemon import run_planner

    verbose = args.verbose + args.planner_verbose
    log.setLevel(logging.DEBUG if verbose else logging.INFO)
    return run_planner(args.config, once=args.once, dry_run=args.dry_run)


# ---------------------------------------------------------------------------
# forecast: replay a memory trace through mig-run's decision (slurm_mig/memory/forecast.py)

FORECAST_HELP = """\
trace (TRACE.csv):
  One row per iteration, with a header. Either the short form
    iteration,requested_bytes[,reserved_bytes]
  or the full form that 'mig-run --trace' writes (iteration,requested_peak,...).
  Sizes (--capacity, --context) are bytes or a binary size: 10GiB, 12G, 512M.
"""


def _add_forecast_parser(sub) -> None:
    fo = sub.add_parser(
        "forecast",
        formatter_class=_Formatter,
        help="replay a memory trace through the peak forecast and the restart decision",
        description=_wrap(
            "Feed a recorded per-iteration memory trace, one row at a time, to the same "
            "online forecaster mig-run uses, and print restart_at (the first iteration at "
            "which the job would have been restarted on a larger slice, or null) and "
            "predicted_peak (the 99 % upper bound of the peak up to the horizon, from all "
            "rows). The horizon is --iterations when given, else 1000 iterations past the "
            "last row."
        ),
        epilog=FORECAST_HELP,
    )
    fo.add_argument("trace", metavar="TRACE.csv", help="the memory trace")
    fo.add_argument("--capacity", metavar="BYTES", required=True, help="the slice's memory")
    fo.add_argument("--iterations", metavar="N", help="the job's total number of iterations")
    fo.add_argument(
        "--context", metavar="BYTES", default="0", help="CUDA context overhead (default: 0)"
    )
    fo.add_argument("--json", action="store_true", help="print the result as JSON")
    fo.add_argument("--plot", metavar="OUT.png", help="draw the trace and the forecast band")
    fo.set_defaults(handler=cmd_forecast)


def _size_option(option: str, text: str, zero: bool = False) -> int:
    from .slurm.hints import parse_size

    if zero and text.strip() == "0":
        return 0
    try:
        return parse_size(text.strip())
    except ValueError as exc:
        raise ValueError(f"{option}: {exc}") from None


def cmd_forecast(args: argparse.Namespace) -> int:
    from .memory.forecast import human, plot_forecast, run_trace
    from .memory.trace import read_trace

    capacity = _size_option("--capacity", args.capacity)
    context = _size_option("--context", args.context, zero=True)
    iterations = None
    if args.iterations is not None:
        text = args.iterations.strip()
        if not (text.isascii() and text.isdigit() and int(text) > 0):
            raise ValueError(f"--iterations: {args.iterations!r} is not a whole number above 0")
        iterations = int(text)
    if context >= capacity:
        raise ValueError(
            f"--capacity {human(capacity)} is not above --context {human(context)}; "
            "give the slice's whole memory as --capacity"
        )
    samples = read_trace(args.trace)
    if not samples:
        raise ValueError(f"{args.trace}: no rows after the header")
    fc = run_trace(samples, capacity, iterations=iterations, context=context)
    last, first = fc.decisions[-1], fc.first_restart
    if args.plot:
        out = plot_forecast(fc, samples, args.plot, title=f"{Path(args.trace).name}: peak forecast")
        print(f"{PROG}: forecast plot written to {out}", file=sys.stderr)
    if args.json:
        result = {
            "restart_at": first.iteration if first else None,
            "predicted_peak": last.predicted_peak,
            "trend": last.trend,
            "capacity": capacity,
            "context": context,
            "need": last.need,
            "expected_peak": last.expected_peak,
            "horizon": last.horizon,
            "samples": len(samples),
            "reason": (first or last).reason,
        }
        print(json.dumps(result, indent=2))
        return 0
    model = fc.last_forecast.model if fc.last_forecast else "-"
    rows = [
        ("samples", f"{len(samples)} (iterations {samples[0].iteration}-{samples[-1].iteration})"),
        ("capacity", f"{capacity} bytes ({human(capacity)}), context {human(context)}"),
        ("horizon", f"iteration {last.horizon}" if last.horizon is not None else "-"),
        ("trend", f"{last.trend} (fitted: {model})"),
        ("restart_at", str(first.iteration) if first else "null"),
        ("predicted_peak", "null" if last.predicted_peak is None
         else f"{last.predicted_peak} bytes ({human(last.predicted_peak)})"),
        ("need", "null" if last.need is None else f"{last.need} bytes ({human(last.need)})"),
        ("reason", (first or last).reason),
    ]  # fmt: skip
    for key, value in rows:
        print(f"{key:<15} {value}")
    return 0


# ---------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = (
        logging.WARNING
        if not args.verbose
        else (logging.INFO if args.verbose == 1 else logging.DEBUG)
    )
    _setup_logging(level)
    try:
        status = args.handler(args)
        sys.stdout.flush()  # a closed pipe shows here, not in an exit-time warning
        return status
    except BrokenPipeError:
        return _broken_pipe()
    except INPUT_ERRORS as exc:
        message = " ".join(str(exc).split()) or exc.__class__.__name__
        print(f"{PROG}: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


def _setup_logging(level: int) -> None:
    """Diagnostics of the whole package to the current stderr, once per call of main."""
    for handler in list(log.handlers):
        if getattr(handler, "_slurm_mig_cli", False):
            log.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"{PROG}: %(levelname)s: %(message)s"))
    handler._slurm_mig_cli = True  # type: ignore[attr-defined]
    log.addHandler(handler)
    log.setLevel(level)
    log.propagate = False


def _broken_pipe() -> int:
    """The reader went away (e.g. '| head'): stop quietly, as other Unix tools do."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return 141  # 128 + SIGPIPE, the status a shell shows for a tool killed by the pipe


if __name__ == "__main__":
    sys.exit(main())
