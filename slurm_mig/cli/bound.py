"""``slurm-mig bound``: SMART-MIG's lower bounds on the energy and the mean tardiness of
a job file (``sim.bounds``)."""

from __future__ import annotations

import argparse
import json
import math
import time

from ..argtypes import count_at_most, number_within, positive_float, positive_int, rate_multiplier
from .common import Formatter, wrap

MAX_BUDGET_S = 3600.0
_budget = number_within(0.0, MAX_BUDGET_S, f"in (0, {MAX_BUDGET_S:g}] s", above_low=True)


def add_parser(sub) -> None:
    bo = sub.add_parser(
        "bound",
        formatter_class=Formatter,
        help="lower bounds on energy and mean tardiness of a job file (SMART-MIG, Sec. V)",
        description=wrap(
            "Linearise the jobs of TRACE (a job file slurm-mig simulate accepts, or one of "
            "its presets) and bound what any schedule on N GPUs can achieve: energy_lb_j "
            "(Eq. 7: the least preemptive makespan on N whole GPUs by the staircase "
            "condition, joules from the A100 power curve) and tardiness_lb (the "
            "time-indexed MIP solved by HiGHS within --time-budget; its slot width eps, "
            "whether it was solved to optimality, else the proven dual bound)."
        ),
    )
    bo.add_argument("trace", metavar="TRACE", help="job file (CSV/JSON) or simulate preset")
    bo.add_argument("--gpus", metavar="N", type=positive_int, required=True,
                    help="number of GPUs")  # fmt: skip
    bo.add_argument("--gpu-model", metavar="MODEL", default="A100-40GB",
                    help="GPU model (default: A100-40GB)")  # fmt: skip
    bo.add_argument("--jobs", metavar="K", type=count_at_most(1_000_000, "jobs"),
                    help="the first K jobs (or K jobs of a preset)")  # fmt: skip
    bo.add_argument("--seed", metavar="S", type=int, default=0,
                    help="seed of a preset's draws (default: 0)")  # fmt: skip
    bo.add_argument("--rate-multiplier", metavar="K", type=rate_multiplier,
                    help="smart-mig presets: arrival rate multiple (default: 20)")  # fmt: skip
    bo.add_argument("--eps", metavar="SECONDS", type=positive_float,
                    help="MIP slot width (default: the horizon over --max-slots, >= 1 s)")  # fmt: skip
    bo.add_argument("--max-slots", metavar="K", type=positive_int, default=200,
                    help="slots of the MIP's horizon when --eps is not given (default: 200)")  # fmt: skip
    bo.add_argument("--time-budget", metavar="SECONDS", type=_budget, default=60.0,
                    help="HiGHS time limit; past it the proven dual bound is given (default: 60)")  # fmt: skip
    bo.add_argument("--no-tardiness", action="store_true",
                    help="only the energy bound (the MIP is skipped)")  # fmt: skip
    bo.add_argument("--json", action="store_true", help="print JSON")
    bo.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from ..geometry import get_model
    from ..sim.bounds import energy_bound, tardiness_bound
    from ..sim.jobs import build_workload

    if args.max_slots > 100_000:
        raise ValueError("--max-slots must be at most 100000")
    model = get_model(args.gpu_model)
    jobs = build_workload(
        args.trace, model, args.gpus, args.jobs, args.seed, None, args.rate_multiplier
    )
    t = time.perf_counter()
    eb = energy_bound(jobs, args.gpus, model)
    energy_s = time.perf_counter() - t
    out: dict = {
        "trace": args.trace,
        "jobs": len(jobs),
        "gpus": args.gpus,
        "gpu_model": model.name,
        "energy_lb_j": eb.energy_j,
        "energy_lb": {
            "makespan_s": eb.makespan,
            "active_j": eb.active_j,
            "idle_j": eb.idle_j,
            "seconds": energy_s,
        },
        "tardiness_lb": None,
    }
    if not args.no_tardiness:
        tb = tardiness_bound(
            jobs, args.gpus, model, eps=args.eps, max_slots=args.max_slots,
            time_budget=args.time_budget,
        )  # fmt: skip
        out["tardiness_lb"] = tb.tardiness_mean
        out["tardiness_mip"] = {
            "eps_s": tb.eps,
            "slots": tb.slots,
            "optimal": tb.optimal,
            "gap": None if math.isnan(tb.gap) else tb.gap,
            "seconds": tb.seconds,
            "time_budget_s": tb.time_budget,
            "max_underestimate_s": 2 * tb.eps,
            "status": tb.status,
        }
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"{args.trace}: {len(jobs)} jobs on {args.gpus} x {model.name}")
    print(
        f"energy_lb   {eb.energy_j:.1f} J  (makespan {eb.makespan:.1f} s, {energy_s * 1e3:.1f} ms)"
    )
    if out["tardiness_lb"] is not None:
        mip = out["tardiness_mip"]
        how = "optimal" if mip["optimal"] else f"dual bound at the {args.time_budget:g} s budget"
        print(
            f"tardiness_lb {out['tardiness_lb']:.3f} s mean  (MIP, eps {mip['eps_s']:.2f} s, "
            f"{mip['slots']} slots, {how}, {mip['seconds']:.1f} s; under-estimates by at "
            f"most {mip['max_underestimate_s']:.2f} s per job)"
        )
    return 0
