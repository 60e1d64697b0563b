"""``slurm-mig simulate``: run a workload under one or more policies and compare them.

Kept out of ``cli.py`` (which only registers it) so that the simulator is imported
only when the command runs.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from dataclasses import replace

from ..argtypes import count_at_most, int_at_least, number_within, rate_multiplier
from ..argtypes import positive_int as _positive_int

# --priority / --knowledge: sim.priority.PRIORITY_MODES, sim.knowledge.KNOWLEDGE_MODES
# (kept here: a cheap --help)
PRIORITY_MODES = ("none", "age", "fairshare")
KNOWLEDGE_MODES = ("learned", "oracle")
LOAD_RANGE = (0.05, 20.0)  # --load, as sim.jobs.LOAD_RANGE (kept here: a cheap --help)
BATCH_ONLY = {
    "miso-opt": "miso-opt is FAR Section 6.5's batch reading of MISO's optimizer (for "
    "plan and bench), not MISO's online scheduler: in a stream each batch is planned "
    "for idle GPUs and appended behind the work already on them, and the next batch "
    "waits until its last job starts (on miso-trace, 40 A100s, load 0.5-1.5: 24-28 % "
    "utilisation, 1.4-4.3 x the mean JCT of no-mig); compare with no-mig or "
    "static:layout=... (README: Baselines)",
}

PROG = "slurm-mig"

EPILOG = """\
workloads (--workload) and how each trace becomes MIG jobs (seconds per size):
  miso-trace  MISO's 100 template jobs repeated (1000 jobs): per-size times from
              MISO's measured MIG throughput of each model (sizes where it did not
              fit: cannot run); Poisson gaps of mean 10 s (5 s the first third)
  alibaba     Alibaba openb single-GPU pods in creation order, sized to the smallest
              profile covering gpu_milli: the same time on every size that fits (the
              trace has no per-size speed: larger slices never speed a job up)
  philly      Philly runtimes as full-GPU times (1000 jobs); the per-size speed-up is
              synthetic, t(s) = r (7/s)^b with b ~ U(0.3, 1.0) per job; Poisson
              arrivals at 85 % of the compute slices
  smart-mig   SMART-MIG's training and inference jobs with deadlines and its
              sub-linear curves, a day of Fig. 5's arrival pattern x --rate-multiplier
              (default 20)
  smart-mig-poisson  the same jobs at a fixed rate (base x multiplier), 1000 jobs
  pcie-paper  Table 2 of the PCIe paper: ResNet50 (MISO's resnet speed per size),
              Bloom560m, Bloom7b1 (transfer-bound: the same time on every size);
              --pcie-bound sets the share of Bloom jobs (default 0.4); 85 % load;
              1400 jobs per 60 GPUs unless --jobs
  FILE        CSV or JSON jobs; columns id, arrival, per-size times 1,2,3,4,7 (or
              runtime + size), optional size, memory_mib, pcie_demand, alpha,
              restartable, kind, deadline, priority (Slurm's: higher first)
  --load X multiplies every workload's arrival rate (MISO: gaps / X; alibaba:
  creation times / X; philly, pcie-paper: 85 % x X; smart-mig: multiplier x X; a
  file: arrivals / X). Trace presets read the shared data folder
  ($SLURM_MIG_SHARED_DATA, or ../shared/data beside the checkout).

baselines (what a site runs instead of repartitioning; README "Baselines"):
  no-mig                  whole GPUs: every job on a full GPU, no MIG
  static:layout=4-3       a fixed MIG layout on every GPU, never repartitioned
                          (layout=7, 4-3, 2-2-3, 1-1-1-1-1-1-1, ...)
  static:layout=7/4-3     a mixed layout, cycled over the GPUs (7,4-3 works too)
  static:...:match=exact  typed GRES requests (default): a job waits for its own
                          size, else the smallest larger size the layout has
  static:...:match=fit    untyped requests: any idle instance it runs on, smallest
                          first
  miso-opt is FAR's batch reading of MISO's optimizer (plan, bench) and is refused
  here: in a stream it is not MISO's scheduler. fixpart-best repartitions between
  batches and fixpart-SIZES queues each batch behind the last: not a static site.

policies (--policy, comma-separated; options as NAME:KEY=VALUE:KEY=VALUE; a comma
followed by a digit continues a layout, so static:layout=7,4-3 is one policy):
{policies}

site conditions (--priority, --knowledge; every figure states them in its header):
  Each job gets a user (the trace's, else one of 8 drawn with Zipf weights) and a
  time limit as users ask for them (sim.limits: several times the runtime on the
  job's smallest size, drawn from the ThetaGPU and MIT Supercloud traces, rounded
  up to the values users pick).
  --priority none       the workload's priorities (equal unless a job file sets
                        them): a policy orders jobs of one priority as it likes
  --priority age        Slurm's age factor, int(1000 x wait / 14 days), as Slurm's
                        documented example weights give it: arrival order, up to
                        the ties of one point per 20 minutes
  --priority fairshare  age + 10000 x the Fair Tree factor of the job's user
                        (usage decayed with a 14-day half-life, one unit per job-
                        second); priorities recomputed every 5 minutes, as Slurm's
  --knowledge learned   a policy sees what the daemon would: its estimator's
                        figures from the finished runs of the job's user and kind,
                        else the time limit on the smallest size and the Amdahl
                        prior; static layouts and no-mig (Slurm itself) plan with the
                        time limits; the simulator runs the true times
  --knowledge oracle    every policy sees each job's true seconds on every size
                        (the earlier figures' condition)

The table shows per policy: jobs, sum and mean job completion time (finish -
arrival), mean wait (first start - arrival), makespan, energy from the A100 power
curve by busy slices (SMART-MIG), mean utilisation of the compute slices,
create/destroy operations and the simulation's own run time. With --json also
wait_p95, wait_p99, wait_max (the longest wait), tardiness_mean (s, every job
counted, 0 for jobs without a deadline), et, SMART-MIG's
Eq. 4 with a = t/(2e) over the policies compared (et_a), and what the policy knew:
estimate_off_p50, the median factor between the seconds it planned a job with and
the job's true seconds alone on the size it started on (1.0: exact, as under
oracle; a real site's per-user history, the user's previous GPU job, is off by 1.40,
MIT Supercloud 2021), and estimate_within_2x, the share of jobs within a factor 2
(there: 0.66).
"""


def add_parser(sub, formatter) -> argparse.ArgumentParser:
    from ..planner.registry import describe

    si = sub.add_parser(
        "simulate",
        formatter_class=formatter,
        help="simulate a MIG cluster under placement policies and compare them",
        description=textwrap.fill(
            "Simulate a cluster of MIG GPUs receiving a stream of jobs, once per policy, "
            "and compare job completion time, wait, makespan, energy and utilisation. "
            "Jobs that stream data over PCIe slow each other down while they share a "
            "GPU (Eq. 2 of the PCIe paper); creating and destroying instances takes "
            "Table 1's times, one operation at a time per GPU. No GPU is needed.",
            width=79,
        ),
        epilog=EPILOG.format(policies=describe(width=14, columns=84)),
    )
    si.add_argument("--gpus", metavar="N", type=count_at_most(10_000, "GPUs"), required=True,
                    help="number of GPUs in the cluster")  # fmt: skip
    si.add_argument("--nodes", metavar="M", type=_positive_int, default=1,
                    help="nodes the GPUs are spread over, N/M each (default: 1)")  # fmt: skip
    si.add_argument("--gpu-model", metavar="MODEL", default="A100-40GB",
                    help="GPU model (default: A100-40GB)")  # fmt: skip
    si.add_argument("--workload", metavar="PRESET|FILE", required=True,
                    help="a preset (miso-trace, alibaba, philly, smart-mig, smart-mig-poisson, "
                    "pcie-paper) or a job file")  # fmt: skip
    si.add_argument("--load", metavar="X", type=_load, default=1.0,
                    help="arrival rate as a multiple of the workload's own, "
                    f"{LOAD_RANGE[0]:g}..{LOAD_RANGE[1]:g} (default: 1)")  # fmt: skip
    si.add_argument("--pcie-bound", metavar="F", type=_share,
                    help="pcie-paper: share of PCIe-bound jobs, 0..1 (default: 0.4)")  # fmt: skip
    si.add_argument("--rate-multiplier", metavar="K", type=rate_multiplier,
                    help="smart-mig presets: arrival rate as a multiple of the base rate (default: 20)")  # fmt: skip
    si.add_argument("--jobs", metavar="K", type=count_at_most(1_000_000, "jobs"),
                    help="number of jobs (presets) or the first K of a file")  # fmt: skip
    si.add_argument("--policy", metavar="P1,P2,...", default="baseline,far",
                    help="policies to compare (default: baseline,far)")  # fmt: skip
    si.add_argument("--reorder", metavar="N|none", type=_reorder, default=None,
                    help="batch policies: jobs a batch may reorder past a job of higher "
                    "priority (0: strict priority order; default: none, unbounded)")  # fmt: skip
    si.add_argument("--priority", choices=PRIORITY_MODES, default="none",
                    help="Slurm's job priority: none (the workload's, default: equal "
                    "priorities), age (the multifactor age factor), fairshare (age + "
                    "Fair Tree); see 'site conditions' below")  # fmt: skip
    si.add_argument("--knowledge", choices=KNOWLEDGE_MODES, default="learned",
                    help="what a policy knows of runtimes: learned (default: what the "
                    "daemon would know) or oracle (every job's true seconds per size)")  # fmt: skip
    si.add_argument("--cycle", metavar="S", type=_cycle, default=0.0,
                    help="pace the dynamic policies as the planner daemon ([planner] "
                    "cycle): each decides at every job start and end (the hooks' "
                    "notifications) and otherwise at most every S seconds; the baselines "
                    "(Slurm alone) are not paced (default: 0, every policy decides at "
                    "every event)")  # fmt: skip
    si.add_argument("--start-delay", metavar="S", type=_start_delay, default=0.0,
                    help="seconds from a dynamic policy's placement to its job's start "
                    "besides creating the instance: the daemon's release through Slurm "
                    "and the Prolog (default: 0; the baselines are not delayed)")  # fmt: skip
    si.add_argument("--seed", metavar="S", type=int, default=0,
                    help="seed of the workload's random draws (default: 0)")  # fmt: skip
    si.add_argument("--json", action="store_true",
                    help='print {"policies": {NAME: {jct_sum, jct_mean, wait_mean, makespan, energy_j, ...}}}')  # fmt: skip
    si.add_argument("--plot", metavar="OUT.png",
                    help="draw the JCT CDF and the utilisation over time to this PNG")  # fmt: skip
    si.add_argument("--check", action="store_true",
                    help="assert the simulator's invariants after every event (slower)")  # fmt: skip
    si.set_defaults(handler=run)
    return si


_reorder_count = int_at_least(
    0, ">= 0 (0: strict priority order)", otherwise="; give N >= 0 or none"
)


def _reorder(text: str) -> int | None:
    """``--reorder``: a whole number >= 0, or ``none`` (unbounded)."""
    if text.strip().lower() in ("none", "unbounded"):
        return None
    return _reorder_count(text)


_load = number_within(
    *LOAD_RANGE,
    f"within {LOAD_RANGE[0]:g}..{LOAD_RANGE[1]:g} (1 = the workload's own arrival rate)",
)

_share = number_within(0.0, 1.0, "a share within 0..1 (e.g. 0.6)")

_cycle = number_within(0.0, 86400.0, "seconds within 0..86400 (0: no pacing; the daemon's is 5)")
_start_delay = number_within(0.0, 3600.0, "seconds within 0..3600")


def _value(text: str):
    low = text.strip().lower()
    if low in ("true", "yes", "on"):
        return True
    if low in ("false", "no", "off"):
        return False
    if low in ("none", "null"):
        return None
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def parse_policies(spec: str) -> list[tuple[str, str, dict]]:
    """``"baseline,far:moldable=false"`` -> [(label, name, options), ...].

    Policies are split on the commas that start a new policy name: a piece that starts
    with a digit continues the one before (``static:layout=7,4-3`` is one policy, a
    mixed layout)."""
    from ..sim.policies import UnknownPolicy

    out = []
    for part in split_policies(spec):
        label = part.strip()
        if not label:
            continue
        name, *opts = label.split(":")
        options = {}
        for o in opts:
            key, eq, val = o.partition("=")
            if not eq or not key.strip():
                raise UnknownPolicy(
                    f"policy option {o!r} of {label!r} must be KEY=VALUE, e.g. far:max_batch=100"
                )
            options[key.strip().replace("-", "_")] = _value(val)
        out.append((label, name.strip(), options))
    if not out:
        raise UnknownPolicy("--policy is empty; give one or more, e.g. baseline,far")
    labels = [x[0] for x in out]
    if len(set(labels)) != len(labels):
        raise UnknownPolicy("--policy names a policy twice; give each once")
    return out


def split_policies(spec: str) -> list[str]:
    """``spec`` cut at the commas that start a policy name (names never start with a
    digit; layouts do): ``"static:layout=7,4-3,no-mig"`` -> two policies."""
    parts: list[str] = []
    for piece in spec.split(","):
        if parts and piece.strip()[:1].isdigit():
            parts[-1] += "," + piece
        else:
            parts.append(piece)
    return parts


def run(args: argparse.Namespace) -> int:
    from ..geometry import get_model
    from ..planner.registry import policy_info
    from ..sim.api import PolicyError
    from ..sim.cluster import InvariantError
    from ..sim.engine import SimInputError, simulate
    from ..sim.jobs import build_workload
    from ..sim.limits import with_site_fields
    from ..sim.policies import SIM_SETTINGS, UnknownPolicy, get_policy
    from ..sim.progress import Progress
    from ..sim.site import SiteConditions

    model = get_model(args.gpu_model)
    if args.gpus % args.nodes:
        raise SimInputError(
            f"--gpus {args.gpus} does not split evenly over --nodes {args.nodes}; "
            "give a multiple of the node count"
        )
    specs = parse_policies(args.policy)
    for label, name, _ in specs:
        why = BATCH_ONLY.get(policy_info(name).name)
        if why:
            raise UnknownPolicy(f"--policy {label}: {why}")
    # --reorder: the batch driver's default (a policy's own reorder= option wins)
    base = replace(SIM_SETTINGS, reorder=getattr(args, "reorder", None))
    policies = [(label, get_policy(name, base, **opts)) for label, name, opts in specs]
    jobs = build_workload(
        args.workload,
        model,
        args.gpus,
        args.jobs,
        args.seed,
        args.pcie_bound,
        getattr(args, "rate_multiplier", None),
        load=getattr(args, "load", 1.0),
    )
    site = SiteConditions.of(
        getattr(args, "priority", "none"), getattr(args, "knowledge", "oracle")
    )
    if not site.plain:
        jobs = with_site_fields(jobs, args.seed)
    results = []
    for label, policy in policies:
        bar = Progress(f"{PROG} simulate {label}")
        try:
            r = simulate(
                jobs,
                policy,
                args.nodes,
                args.gpus // args.nodes,
                model,
                args.seed,
                check=args.check,
                progress=bar,
                priority=site.priority.mode,
                knowledge=site.knowledge,
                cycle=getattr(args, "cycle", 0.0),
                start_delay=getattr(args, "start_delay", 0.0),
            )
        except (PolicyError, InvariantError) as exc:
            bar.close()
            kind = "policy error" if isinstance(exc, PolicyError) else "invariant broken"
            print(f"{PROG}: error: {label}: {kind}: {' '.join(str(exc).split())}", file=sys.stderr)
            return 1
        bar.close()
        r.policy = label
        results.append(r)
    if args.plot:
        _plot(results, args)
    header = f"{_header(args, jobs, model)}; {site.describe()}"
    if getattr(args, "cycle", 0.0):
        header += f"; dynamic policies paced by a {args.cycle:g} s cycle"
    if getattr(args, "start_delay", 0.0):
        header += f"; dynamic policies' jobs start {args.start_delay:g} s after release"
    if args.json:
        print(json.dumps(to_json(results, args, header, model.name), indent=2))
    else:
        print(format_table(results, header, args.check))
    return 0


def _plot(results, args) -> None:
    from ..plan import PlanError
    from ..sim.plot import draw

    try:
        out = draw(results, args.plot, title=f"{args.workload} on {args.gpus} x {args.gpu_model}")
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] != "matplotlib":
            raise
        raise PlanError("--plot needs matplotlib; pip install matplotlib") from None
    print(f"{PROG}: plot written to {out}", file=sys.stderr)


def _header(args, jobs, model) -> str:
    bound = sum(1 for j in jobs if j.pcie_demand > 0)
    share = f", {100 * bound / len(jobs):.0f} % PCIe-bound" if bound else ""
    if any(j.deadline is not None for j in jobs):
        from ..sim.deadline_workload import job_curve, sublinearity_score

        ss = sublinearity_score(job_curve(j) for j in jobs)
        rate = getattr(args, "rate_multiplier", None)
        share += f", deadlines, ss {ss:.2f}" + (f", rate x{rate:g}" if rate else "")
    load = getattr(args, "load", 1.0)
    if load != 1.0:
        share += f", load x{load:g}"
    nodes = f" on {args.nodes} nodes" if args.nodes > 1 else ""
    return (
        f"{args.workload}: {len(jobs)} jobs{share}; {args.gpus} x {model.name}{nodes}; "
        f"seed {args.seed}"
    )


def to_json(results, args, header: str, model_name: str) -> dict:
    from ..sim.metrics import et_value, et_weight

    a = et_weight(results)
    policies = {}
    for r in results:
        s = r.summary()
        s["et"] = et_value(s["energy_j"], s["tardiness_mean"], a)
        policies[r.policy] = s
    return {
        "workload": args.workload,
        "gpu_model": model_name,
        "gpus": args.gpus,
        "nodes": args.nodes,
        "seed": args.seed,
        "priority": getattr(args, "priority", "none"),
        "knowledge": getattr(args, "knowledge", "oracle"),
        "cycle": getattr(args, "cycle", 0.0),
        "start_delay": getattr(args, "start_delay", 0.0),
        "description": header,
        "et_a": a,
        "policies": policies,
    }


def format_table(results, header: str, checked: bool = False) -> str:
    rows = [
        ["POLICY", "JOBS", "JCT SUM s", "JCT MEAN s", "WAIT MEAN s", "MAKESPAN s",
         "ENERGY kWh", "UTIL", "CREATE/DESTROY", "VS FIRST", "SIM s"]
    ]  # fmt: skip
    base = None
    for r in results:
        s = r.summary()
        if base is None:
            base = s["jct_sum"]
        rel = f"{100 * (s['jct_sum'] / base - 1):+.1f} %" if base else "-"
        rows.append(
            [
                r.policy,
                str(s["jobs"]),
                f"{s['jct_sum']:.1f}",
                f"{s['jct_mean']:.2f}",
                f"{s['wait_mean']:.2f}",
                f"{s['makespan']:.1f}",
                f"{s['energy_j'] / 3.6e6:.3f}",
                f"{100 * s['utilization']:.0f} %",
                f"{s['creates']}/{s['destroys']}",
                rel,
                f"{s['wall_s']:.2f}",
            ]
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [header, ""]
    for row in rows:
        cells = [c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))]
        lines.append("  ".join(cells).rstrip())
    lines.append("")
    lines.append("VS FIRST = JCT sum relative to the first policy; SIM s = simulator run time.")
    if checked:
        lines.append("--check: every invariant held after every event.")
    return "\n".join(lines)
