"""``slurm-mig demo``: FAR and the baselines on the Rodinia batch; with --live, the batch
through a real Slurm on loopback."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from ..gantt import write_gantt
from ..geometry import get_model
from ..plan import Plan, PlanError, sigma, validate_plan
from ..workload import load_task_source
from .common import Formatter, run_planner, wrap

log = logging.getLogger("slurm_mig")


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


def add_parser(sub) -> None:
    de = sub.add_parser(
        "demo",
        formatter_class=Formatter,
        help="plan the embedded Rodinia A100 batch with FAR and the baselines",
        description=wrap(
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
    de.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
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
    out = write_gantt(far_plan, args.gantt, title="FAR on the 16 Rodinia kernels, one A100-40GB")
    print(f"FAR Gantt chart: {out.resolve()}")
    if not getattr(args, "live", False):
        return 0
    try:
        from ..demo.livedemo import live_unavailable, run_live_demo
    except ModuleNotFoundError:  # an installed wheel leaves the loopback Slurm out
        print(
            "\nNo live run: the live demo runs from a source tree ('make demo'); an "
            "installed slurm-mig does not carry it. The plan above is the demo."
        )
        return 0
    why = live_unavailable()
    if why:
        print(f"\nNo live run: {why}. The plan above is the demo.")
        return 0
    print()
    live_png = Path(args.gantt).with_name(Path(args.gantt).stem + "-live.png")
    return run_live_demo(str(live_png))
