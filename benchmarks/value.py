"""The value benchmark: slurm-mig's policies against what a site runs instead.

What a site runs instead of repartitioning MIG is a fixed layout (mig-parted, exposed
as Slurm GRES) or whole GPUs. This script simulates, per workload and load, whole
GPUs (``no-mig``), a site's a-priori layout (``A_PRIORI``, chosen before seeing the
jobs), the hindsight-best static layout of a sweep, and every dynamic policy
(``DYNAMIC``), and prints mean and p95 job completion time (JCT = finish - arrival),
makespan, mean wait, utilisation of the compute slices and reconfigurations (creates
+ destroys; a static layout's are its initial instances). Its "done when" summary
checks issue 35's targets for the policy named ``DEFAULT`` (the daemon's default).

Site conditions (``--priority``, ``--knowledge``; README "Site conditions"): by default
Slurm's age priority (``int(1000 x wait / 14 days)``: arrival order up to ties) and
``learned`` knowledge: every job gets a user and a time limit (``sim.limits``), the
dynamic policies plan with the daemon's own estimates from the runs finished so far,
the static layouts and whole GPUs (Slurm itself) with the time limits; the engine runs
the true times. ``--priority none --knowledge oracle`` is issue 20's condition (equal
priorities, every job's true seconds), whose figures the README keeps, labelled.
``--restartable`` (any condition): every job says ``mig:restartable=yes``, a move costs
``--restart-s`` (180 s), and ``adaptive:upsize=300`` (`slurm_mig.planner.upsize`) joins
the dynamic policies, with done-when checks of its own.

Other conditions (all in the simulator, no GPU): A100-40GB GPUs on one node; creating and
destroying instances takes Table 1's times, one operation at a time per GPU. Streams
of arriving jobs, each at 0.5x, 1x and 1.5x its arrival rate (``--load``):

  miso-30/40/60  MISO's trace (SoCC'22, ``miso-trace``): 1000 jobs from 100 templates,
                 per-size times from MISO's measured MIG throughput, Poisson gaps of
                 10 s (5 s the first third); on 30 (overloaded), 40 (MISO's setting) and
                 60 A100s (light).
  philly-16      Philly runtimes (``philly``, 1000 jobs) as full-GPU times, synthetic
                 per-size speed-up t(s) = r (7/s)^b, b ~ U(0.3, 1); arrivals at 85 % of
                 the compute slices; 16 GPUs.
  smart-mig-8    SMART-MIG's generator (``smart-mig``, one day of Fig. 5's arrival
                 pattern at rate x20, ~1000 jobs, sub-linear curves); 8 GPUs: on 16 every
                 policy is idle (whole GPUs wait 0.6 s on average at 1x), on 8 whole GPUs
                 queue (mean wait ~70 % of JCT at 1x) and a 4-3 layout barely does.
  alibaba-32     Alibaba openb single-GPU pods (``alibaba``), the first 2000 in creation
                 order; no per-size speed (a larger slice never speeds a pod up) and 79 %
                 need a whole A100; 32 GPUs: on 20 whole GPUs' mean wait is 24 days (96 %
                 of JCT), on 32 it is 29 % of JCT, on 48 none. The whole trace (6129
                 pods) takes ~60 s per adaptive run, hence the prefix.
Opt-in (``--workloads``; not in the default run, which is long already):
  miso-40-gangs  miso-40 with jobs of several slices: a seeded 1 in 4 jobs asks for
                 2, 3 or 4 instances (``mig:tasks=N``; a count some region holds, by
                 times and memory: ~24 % of the jobs), each task with its template's
                 per-size times. The dynamic policies plan such a job on
                 a region; static layouts and whole GPUs run it on N instances of the
                 node (``--gres=gpu[:type]:N``, typed with ``match=exact``), as Slurm
                 does; layouts with too few instances for a gang are skipped.
Batches (every job at t = 0, no load knob, one run):
  miso-100-8     MISO's 100 templates (``miso-trace`` with 100 jobs, seed 0) on 8 A100s.
  rodinia-1      the 16 Rodinia kernels (``rodinia-a100``, FAR's Table) on one A100.

Seeds: ``SEEDS`` (0, 1, 2) for the random presets (MISO, Philly, SMART-MIG; the seed
draws the workload and seeds the simulator); Alibaba and the batches are deterministic
(seed 0). Figures are means over the seeds; JCT's spread is min-max over the seeds.

Static sweep (hindsight-best): every full A100 partition (the 12 maximal
configurations, 7 ... 1-1-1-1-1-1-1) on every GPU, plus the mixed ``7/<partition>``
(cycled over the GPUs, so traces that need 7g have layouts), each with typed requests
(``match=exact``) and untyped (``match=fit``): 46 layouts. A layout with no instance
some job runs on is skipped (a job of several slices: fewer than its tasks on the node). Best = lowest mean JCT averaged over the seeds (batches:
also the lowest makespan, for the makespan target).

A-priori layout: ``7/1-1-2-3`` untyped: half the GPUs whole (for jobs that need one),
half NVIDIA mig-parted's documented ``all-balanced`` A100-40GB configuration (2 x
1g.5gb, 1 x 2g.10gb, 1 x 3g.20gb), which a site can choose without seeing its jobs;
untyped requests, the more favourable reading for the site. On one GPU (Rodinia):
``1-1-2-3`` alone (a mixed layout needs as many GPUs as partitions; the sweep skips
mixed layouts there too).

Usage:
  python benchmarks/value.py                 # full: ~50 workload x load x seed cases
  python benchmarks/value.py --quick         # seed 0, load 1x only
  python benchmarks/value.py --json OUT.json --jobs 2
  python benchmarks/value.py --workloads miso-40,rodinia-1 --seeds 1
  python benchmarks/value.py --workloads miso-40-gangs --quick   # jobs of several slices
Run time (2 processes on 2 shared cores, load average 1-4): --quick ~1.5 min, full
~12 min (2702 simulations; 16 min under the default learned knowledge); figures are deterministic given the seeds and the code
(only the simulators' own run times vary; the output names the commit and a digest of
the planner and simulator source).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache

from slurm_mig.cli.simulate import parse_policies
from slurm_mig.geometry import get_model, partition_name
from slurm_mig.planner.mig_configs import configs_for
from slurm_mig.planner.online import parse_layout
from slurm_mig.planner.online_placement import task_sizes
from slurm_mig.planner.snapshot import runnable_sizes
from slurm_mig.sim.api import SimJob
from slurm_mig.sim.engine import simulate
from slurm_mig.sim.gangworkload import GANG_TASKS, with_gangs
from slurm_mig.sim.jobs import build_workload
from slurm_mig.sim.knowledge import KNOWLEDGE_MODES, SITE_ESTIMATE_OFF_P50
from slurm_mig.sim.limits import with_site_fields
from slurm_mig.sim.policies import get_policy
from slurm_mig.sim.priority import PRIORITY_MODES
from slurm_mig.sim.site import SiteConditions

MODEL = "A100-40GB"
DEFAULT = "adaptive"  # the daemon's candidate default: the policy the targets judge
DYNAMIC = (
    "adaptive",
    "adaptive:objective=jct",
    "far:objective=balanced",
    "frag-aware",
    "migm-a",
    "baseline",
)
UPSIZE = "adaptive:upsize=300"  # --restartable: adaptive moving overrunning jobs up
RESTART_S = 180.0  # --restartable: a move's cost (Slurm's requeue delay, 121 s, + restart)
BATCH_EXTRA = ("far:objective=makespan",)  # batches only: FAR as the paper plans them
WHOLE = "no-mig"
A_PRIORI = "static:layout=7/1-1-2-3:match=fit"
A_PRIORI_ONE_GPU = "static:layout=1-1-2-3:match=fit"  # a site with a single A100
MATCHES = ("fit", "exact")
LOADS = (0.5, 1.0, 1.5)
SEEDS = (0, 1, 2)
SHORT_FIRST = ":order=short"  # the best static layout, jobs offered shortest first
QUEUE_SHARE = 0.05  # whole GPUs "queue" when their mean wait exceeds this share of JCT
# the condition of every figure (issue 35): Slurm's priority and what a policy knows;
# ("none", "oracle") is the equal-priority, true-runtime condition of issue 20
PRIORITY = "age"
KNOWLEDGE = "learned"
# done-when targets (issue 35): DEFAULT's mean JCT / the best static's at 1x load
JCT_TARGETS = {
    "miso-30": 0.9,
    "miso-40": 0.9,
    "miso-60": 0.9,
    "philly-16": 0.9,
    "smart-mig-8": 0.9,
    "alibaba-32": 1.0,
}
WHOLE_TARGET = 0.6  # DEFAULT / no-mig at 1x where no-mig queues
FLOOR_SLACK = 1.05  # ... or within 5 % of the no-wait floor where that is above it
ANY_LOAD_TARGET = 1.0  # DEFAULT / best static at every load
P95_TARGET = 1.1  # DEFAULT's p95 JCT / the best static's, at every load
# with equal priorities (--priority none): DEFAULT / baseline (first come first served)
LONGEST_WAIT_TARGET = 1.2
MAKESPAN_FCFS_TARGET = 1.05
MAKESPAN_TARGET = 0.7  # the MISO-100 batch's makespan / the best static's
MAKESPAN_POLICIES = (DEFAULT, "far:objective=makespan")
METRICS = (
    "jct_mean",
    "jct_p95",
    "makespan",
    "wait_mean",
    "wait_max",
    "utilization",
    "reconfigurations",
    "estimate_off_p50",
)


@dataclass(frozen=True)
class Workload:
    """One row group: ``preset`` (a ``build_workload`` preset, or ``miso-100`` /
    ``rodinia`` for the batches) on ``gpus`` A100s; ``jobs`` caps the job count;
    ``gangs``: the share of jobs made jobs of several slices (`with_gangs`)."""

    key: str
    preset: str
    gpus: int
    jobs: int | None = None
    seeded: bool = True
    batch: bool = False
    gangs: float = 0.0

    def describe(self, jobs: int | None = None) -> str:
        """``key: preset, N jobs, G x MODEL, stream|batch``; ``jobs``: the count built."""
        kind = "batch at t=0" if self.batch else "stream"
        n = jobs or self.jobs
        count = f"{n} jobs" if n else "all jobs"
        if self.gangs:
            count += f" (~{100 * self.gangs:.0f} % of {'/'.join(map(str, GANG_TASKS))} tasks)"
        return f"{self.key}: {self.preset}, {count}, {self.gpus} x {MODEL}, {kind}"


WORKLOADS = (
    Workload("miso-30", "miso-trace", 30, 1000),
    Workload("miso-40", "miso-trace", 40, 1000),
    Workload("miso-60", "miso-trace", 60, 1000),
    Workload("philly-16", "philly", 16, 1000),
    Workload("smart-mig-8", "smart-mig", 8),
    Workload("alibaba-32", "alibaba", 32, 2000, seeded=False),
    Workload("miso-100-8", "miso-100", 8, 100, seeded=False, batch=True),
    Workload("rodinia-1", "rodinia", 1, seeded=False, batch=True),
)
# opt-in workloads (``--workloads``), not in the default run
OPT_IN = (Workload("miso-40-gangs", "miso-trace", 40, 1000, gangs=0.25),)


# ---------------------------------------------------------------------------
# Building blocks


@lru_cache(maxsize=8)
def build_jobs(
    wl: Workload, load: float, seed: int, site: bool = False, restartable: bool = False
) -> tuple[SimJob, ...]:
    """The jobs of ``wl`` at ``load`` and ``seed`` (cached per process); ``site``:
    with users and time limits (``sim.limits``); ``restartable``: every job declares
    ``mig:restartable=yes``."""
    jobs = _build_jobs(wl, load, seed)
    if restartable:
        jobs = tuple(replace(j, restartable=True) for j in jobs)
    return tuple(with_site_fields(jobs, seed)) if site else jobs


def _build_jobs(wl: Workload, load: float, seed: int) -> tuple[SimJob, ...]:
    model = get_model(MODEL)
    if wl.preset == "miso-100":
        jobs = build_workload("miso-trace", model, wl.gpus, wl.jobs or 100, seed)
        return tuple(replace(j, arrival=0.0) for j in jobs)
    if wl.preset == "rodinia":
        from slurm_mig.bench import rodinia_tasks

        tasks = rodinia_tasks()[: wl.jobs] if wl.jobs else rodinia_tasks()
        return tuple(replace(t, arrival=0.0) for t in tasks)  # a batch's tasks are jobs
    jobs = tuple(build_workload(wl.preset, model, wl.gpus, wl.jobs, seed, load=load))
    return with_gangs(jobs, wl.gangs, seed, model) if wl.gangs else jobs


def static_sweep(model_name: str = MODEL) -> list[str]:
    """Every maximal full partition uniform, then ``7/<partition>`` mixed, each
    untyped (``fit``) and typed (``exact``), as ``static:...`` policy labels."""
    model = get_model(model_name)
    names = [partition_name(c.realisations[0]) for c in configs_for(model)]
    whole = str(model.compute_slices)
    layouts = names + [f"{whole}/{n}" for n in names if n != whole]
    return [f"static:layout={lay}:match={m}" for lay in layouts for m in MATCHES]


def layout_sizes(label: str, gpus: int, model_name: str = MODEL) -> set[int] | None:
    """The instance sizes a ``static`` label's layout has on ``gpus`` GPUs (partition k
    mod n on GPU k); None for other policies."""
    (_, name, opts), *_ = parse_policies(label)
    if name != "static":
        return None
    parts = parse_layout(opts.get("layout", "auto"), get_model(model_name))
    return {slot.size for k in range(gpus) for slot in parts[k % len(parts)]}


def unhosted(label: str, jobs: Sequence[SimJob], gpus: int, model_name: str = MODEL) -> str | None:
    """Why a static layout is skipped on ``gpus`` GPUs: a mixed layout with more
    partitions than GPUs (not mixed there), or a job it has no runnable instance for
    (a gang: too few, `gang_unhosted`; whole GPUs too); None if it can host ``jobs``."""
    sizes = layout_sizes(label, gpus, model_name)
    if sizes is None:
        if parse_policies(label)[0][1] != WHOLE:
            return None
        gangs = (gang_unhosted(label, j, gpus, model_name) for j in jobs if j.tasks > 1)
        return next((why for why in gangs if why), None)
    layout = str(parse_policies(label)[0][2].get("layout", ""))
    if len(parse_layout(layout, get_model(model_name))) > gpus:
        return f"layout {layout} has more partitions than the {gpus} GPU(s)"
    model = get_model(model_name)
    for job in jobs:
        if job.tasks > 1:
            why = gang_unhosted(label, job, gpus, model_name)
            if why:
                return why
        elif not sizes & set(runnable_sizes(job, model)):
            return f"job {job.id} runs on {runnable_sizes(job, model)} only"
    return None


def gang_unhosted(label: str, job: SimJob, gpus: int, model_name: str = MODEL) -> str | None:
    """Why a static layout (or whole GPUs) on ``gpus`` GPUs of one node cannot run
    ``job``'s tasks, each on an instance of its own (the policy's rule: ``match=fit``
    any size a task runs on, ``exact`` its smallest that the layout has); None if it
    can."""
    model = get_model(model_name)
    (_, name, opts), *_ = parse_policies(label)
    if name == WHOLE:
        opts = {"layout": "whole", "match": "fit"}
    parts = parse_layout(opts.get("layout", "auto"), model)
    count: dict[int, int] = {}
    for k in range(gpus):
        for slot in parts[k % len(parts)]:
            count[slot.size] = count.get(slot.size, 0) + 1
    usable = [s for s in task_sizes(job, model) if s in count]
    if opts.get("match", "exact") != "fit":
        usable = usable[:1]
    have = sum(count[s] for s in usable)
    if have < job.tasks:
        on = "/".join(map(str, usable)) or "-"
        return f"job {job.id} runs {job.tasks} tasks on size {on}; the layout has {have}"
    return None


# (priority, knowledge), or with a third member: every job restartable, a move costing
# that many seconds (--restartable)
Condition = tuple[str, str] | tuple[str, str, float]
Case = tuple[Workload, float, int, str, Condition]


def run_case(case: Case) -> tuple[str, float, int, str, dict]:
    """Simulate one (workload, load, seed, policy, `Condition`): its metrics, or
    ``skipped`` (a layout that cannot host a job) or ``error`` (the exception's last
    line)."""
    wl, load, seed, label, condition = case
    priority, knowledge = condition[:2]
    restart_s = condition[2] if len(condition) > 2 else None
    try:
        site = SiteConditions.of(priority, knowledge)
        jobs = build_jobs(wl, load, seed, not site.plain, restart_s is not None)
        why = unhosted(label, jobs, wl.gpus)
        if why:
            return wl.key, load, seed, label, {"skipped": why}
        ((_, name, opts),) = parse_policies(label)
        r = simulate(
            jobs,
            get_policy(name, **opts),
            1,
            wl.gpus,
            MODEL,
            seed,
            priority=priority,
            knowledge=knowledge,
            **({} if restart_s is None else {"migration_s": restart_s}),
        )
        s = r.summary()
        keep = ("jct_mean", "jct_p95", "makespan", "wait_mean", "wait_max", "utilization")
        out = {k: s[k] for k in keep}
        off = s["estimate_off_p50"]
        out["estimate_off_p50"] = math.nan if off is None else off
        out["reconfigurations"] = s["creates"] + s["destroys"]
        out["wall_s"] = s["wall_s"]
        return wl.key, load, seed, label, out
    except Exception as exc:  # a policy crash is reported, not fatal
        text = " ".join(str(exc).split()) or "-"
        return wl.key, load, seed, label, {"error": f"{type(exc).__name__}: {text}"[:300]}


def a_priori(wl: Workload) -> str:
    """The site's a-priori layout for ``wl``: ``A_PRIORI``, or ``A_PRIORI_ONE_GPU``
    where the mixed layout has more partitions than GPUs."""
    return A_PRIORI if wl.gpus > 1 else A_PRIORI_ONE_GPU


def policies_for(wl: Workload, dynamic: Sequence[str] = DYNAMIC) -> list[str]:
    """Every policy label a workload runs: whole GPUs, a-priori, the sweep, dynamic."""
    extra = BATCH_EXTRA if wl.batch else ()
    out = [WHOLE, a_priori(wl), *static_sweep(), *dynamic, *extra]
    return list(dict.fromkeys(out))


def cases(
    workloads: Iterable[Workload],
    loads: Sequence[float],
    seeds: Sequence[int],
    dynamic: Sequence[str] = DYNAMIC,
    condition: Condition = (PRIORITY, KNOWLEDGE),
) -> list[Case]:
    """Every case to simulate, the slowest first (dynamic policies on big streams)."""
    out = []
    for wl in workloads:
        for load in (1.0,) if wl.batch else loads:
            for seed in seeds if wl.seeded else seeds[:1]:
                out.extend((wl, load, seed, p, condition) for p in policies_for(wl, dynamic))

    def cost(c: Case) -> float:
        wl, load, _, label, _ = c
        heavy = 20.0 if label.split(":")[0] in ("adaptive", "far", "migm-a") else 1.0
        return -(wl.jobs or 1000) * heavy * load

    return sorted(out, key=cost)


def run_all(
    todo: Sequence[Case],
    processes: int,
    log: Callable[[str], None] = lambda s: None,
) -> dict[tuple[str, float], dict[str, dict[int, dict]]]:
    """Run the cases (in a Pool of ``processes``, in-process if 1): results by
    (workload key, load) -> policy label -> seed -> metrics."""
    out: dict[tuple[str, float], dict[str, dict[int, dict]]] = {}
    t0 = time.monotonic()
    for label in dict.fromkeys(c[3] for c in todo):  # import every policy's code once,
        try:  # before the workers fork: one version of it even while it is edited
            ((_, name, opts),) = parse_policies(label)
            get_policy(name, **opts)
        except Exception:  # reported per case by run_case
            pass
    if processes > 1:
        from multiprocessing import Pool

        with Pool(processes) as pool:
            done = list(_progress(pool.imap_unordered(run_case, todo), len(todo), t0, log))
    else:
        done = list(_progress(map(run_case, todo), len(todo), t0, log))
    for key, load, seed, label, res in done:
        out.setdefault((key, load), {}).setdefault(label, {})[seed] = res
    return out


def _progress(it, total: int, t0: float, log: Callable[[str], None]):
    step = max(1, total // 20)
    for i, item in enumerate(it, 1):
        if i % step == 0 or i == total:
            log(f"value: {i}/{total} cases, {time.monotonic() - t0:.0f} s")
        yield item


# ---------------------------------------------------------------------------
# Tables


def _mean(xs: list[float]) -> float:
    return statistics.fmean(xs) if xs else math.nan


def aggregate(runs: dict[int, dict]) -> dict:
    """Mean over seeds of each metric, JCT's min-max; ``error``/``skipped`` if any
    seed has one."""
    for seed in sorted(runs):
        bad = {k: v for k, v in runs[seed].items() if k in ("error", "skipped")}
        if bad:
            return {**bad, "seeds": len(runs), "seed": seed}
    ok = [runs[s] for s in sorted(runs)]
    row = {m: _mean([r[m] for r in ok]) for m in METRICS}
    row["jct_min"] = min(r["jct_mean"] for r in ok)
    row["jct_max"] = max(r["jct_mean"] for r in ok)
    row["seeds"] = len(ok)
    return row


def best_static(by_label: dict[str, dict], metric: str = "jct_mean") -> str | None:
    """The sweep's label with the lowest mean ``metric`` (ties: sweep order)."""
    cands = [
        lab for lab in static_sweep() if lab in by_label and metric in by_label[lab]
    ]  # only layouts that ran on every seed
    return min(cands, key=lambda lab: by_label[lab][metric]) if cands else None


def short(label: str) -> str:
    """``static:layout=4-3:match=fit`` -> ``4-3 fit``."""
    if not label.startswith("static:"):
        return label
    _, _, opts = parse_policies(label)[0]
    return f"{opts.get('layout')} {opts.get('match', 'exact')}"


def jct_floor(jobs: Sequence[SimJob], model_name: str = MODEL) -> float:
    """The least mean JCT any policy could reach: every job at once on its fastest
    size (no wait, no reconfiguration)."""
    model = get_model(model_name)

    def fastest(j: SimJob) -> float:
        best = min(j.time(s) for s in runnable_sizes(j, model))
        if j.tasks > 1:  # a static layout's instances of its own may be larger
            per = j.per_task(model)
            best = min(best, min(per[s] for s in task_sizes(j, model)))
        return best

    return statistics.fmean(fastest(j) for j in jobs)


def build_table(
    wl: Workload,
    load: float,
    results: dict[str, dict[int, dict]],
    dynamic: Sequence[str] = DYNAMIC,
) -> dict:
    """One workload x load: every policy's aggregate, the best static layouts and the
    printed rows (kind, label, metrics, ratios), in ``policies_for``'s order."""
    order = [lab for lab in policies_for(wl, dynamic) if lab in results]
    agg = {lab: aggregate(results[lab]) for lab in order}
    best = best_static(agg)
    if best and best + SHORT_FIRST in results:
        agg[best + SHORT_FIRST] = aggregate(results[best + SHORT_FIRST])
    best_mk = best_static(agg, "makespan") if wl.batch else None
    ref = agg[best]["jct_mean"] if best else math.nan
    whole = agg.get(WHOLE, {}).get("jct_mean", math.nan)
    rows = [("whole GPUs", WHOLE), ("a-priori", a_priori(wl))]
    if best:
        rows.append(("best static", best))
        if best + SHORT_FIRST in agg:
            rows.append(("best static, short 1st", best + SHORT_FIRST))
    if best_mk:
        rows.append(("best static (makespan)", best_mk))
    rows += [("dynamic", lab) for lab in order if not lab.startswith("static:") and lab != WHOLE]
    out_rows = []
    for kind, lab in rows:
        a = dict(agg.get(lab, {"error": "not run"}))
        if "jct_mean" in a:
            a["vs_static"] = a["jct_mean"] / ref if ref > 0 else math.nan
            a["vs_whole"] = a["jct_mean"] / whole if whole > 0 else math.nan
        out_rows.append({"kind": kind, "policy": lab, **a})
    seeds = sorted({s for runs in results.values() for s in runs})
    try:
        n_jobs = len(build_jobs(wl, load, seeds[0])) if seeds else None
        floor = statistics.fmean(jct_floor(build_jobs(wl, load, seed)) for seed in seeds)
    except Exception:  # reported by the cases
        n_jobs, floor = None, math.nan
    return {
        "workload": wl.key,
        "description": wl.describe(n_jobs),
        "load": load,
        "seeds": seeds,
        "best_static": best,
        "best_static_makespan": best_mk,
        "floor": floor,
        "rows": out_rows,
        "all": agg,
    }


def _num(x: float, digits: int = 0) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:,.{digits}f}"


def format_table(table: dict) -> str:
    """The printed table of one workload x load."""
    head = ["ROW", "POLICY", "JCT MEAN s", "(MIN-MAX)", "JCT P95 s", "MAKESPAN s",
            "WAIT MEAN s", "UTIL", "RECONF", "EST OFF", "/BEST STATIC", "/NO-MIG"]  # fmt: skip
    lines = [head]
    for r in table["rows"]:
        name = short(r["policy"])
        if "jct_mean" not in r:
            why = r.get("error") or f"skipped: {r.get('skipped')}"
            lines.append([r["kind"], name, why] + [""] * (len(head) - 3))
            continue
        spread = (
            f"({_num(r['jct_min'])}-{_num(r['jct_max'])})" if r["seeds"] > 1 else ""
        )  # fmt: skip
        lines.append(
            [
                r["kind"],
                name,
                _num(r["jct_mean"]),
                spread,
                _num(r["jct_p95"]),
                _num(r["makespan"]),
                _num(r["wait_mean"]),
                f"{100 * r['utilization']:.0f} %",
                _num(r["reconfigurations"]),
                _num(r.get("estimate_off_p50"), 2) + "x",
                f"{r['vs_static']:.2f}",
                f"{r['vs_whole']:.2f}",
            ]
        )
    seeds = table["seeds"]
    title = (
        f"## {table['description']}, load {table['load']:g}x, seed(s) {','.join(map(str, seeds))}"
    )
    return title + "\n\n" + _columns(lines)


def _columns(rows: list[list[str]]) -> str:
    def note(row: list[str]) -> bool:  # an error or skip line: its text runs on
        return len(row) > 3 and row[3:] == [""] * (len(row) - 3)

    full = [r for r in rows if not note(r)]
    widths = [max(len(r[i]) for r in full) for i in range(len(rows[0]))]
    widths[:2] = [max(len(r[i]) for r in rows) for i in range(2)]
    out = []
    for row in rows:
        if note(row):
            out.append("  ".join([row[0].ljust(widths[0]), row[1].ljust(widths[1]), row[2]]))
            continue
        cells = [c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))]
        out.append("  ".join(cells).rstrip())
    return "\n".join(out)


def format_summary(tables: list[dict]) -> str:
    """One line per workload x load: best static, no-mig, DEFAULT and the best dynamic."""
    rows = [["WORKLOAD", "LOAD", "BEST STATIC", "JCT s", "SHORT 1ST", "NO-MIG JCT s",
             f"{DEFAULT} JCT s", "/STATIC", "/SHORT 1ST", "/NO-MIG", "BEST DYNAMIC",
             "/STATIC"]]  # fmt: skip
    for t in tables:
        by = {r["policy"]: r for r in t["rows"]}
        best = t["best_static"]
        dflt = by.get(DEFAULT, {})
        sjf = by.get(f"{best}{SHORT_FIRST}", {}) if best else {}
        dyn = [r for r in t["rows"] if r["kind"] == "dynamic" and "jct_mean" in r]
        top = min(dyn, key=lambda r: r["jct_mean"]) if dyn else {}
        rows.append(
            [
                t["workload"],
                f"{t['load']:g}x",
                short(best) if best else "-",
                _num(by[best]["jct_mean"]) if best else "-",
                _num(sjf.get("jct_mean", math.nan)),
                _num(by.get(WHOLE, {}).get("jct_mean", math.nan)),
                _num(dflt.get("jct_mean", math.nan)),
                f"{dflt['vs_static']:.2f}" if "vs_static" in dflt else "-",
                f"{dflt['jct_mean'] / sjf['jct_mean']:.2f}"
                if "jct_mean" in dflt and sjf.get("jct_mean")
                else "-",
                f"{dflt['vs_whole']:.2f}" if "vs_whole" in dflt else "-",
                top.get("policy", "-"),
                f"{top['vs_static']:.2f}" if top else "-",
            ]
        )
    return _columns(rows)


# ---------------------------------------------------------------------------
# Done when


def done_when(
    tables: list[dict], default: str = DEFAULT, equal_priorities: bool = False
) -> list[dict]:
    """Issue 35's targets for ``default``: one dict per check (name, ok, text); ok is
    None where the figures are missing (not run, crashed). ``equal_priorities``: the
    condition is ``--priority none``, where the longest wait and the makespan are
    held against first come first served (``baseline``)."""
    checks = []
    index = {(t["workload"], t["load"]): t for t in tables}

    def row(t: dict, label: str | None) -> dict:
        return next((r for r in t["rows"] if r["policy"] == label), {})

    def add(name: str, ok: bool | None, text: str) -> None:
        checks.append({"check": name, "ok": ok, "text": text})

    for key, target in JCT_TARGETS.items():
        t = index.get((key, 1.0))
        if t is None:
            continue
        d, b = row(t, default), row(t, t["best_static"])
        if "jct_mean" not in d or "jct_mean" not in b:
            add(f"{key} 1x JCT <= {target:g} x best static", None, f"missing: {d or b}")
            continue
        ratio = d["jct_mean"] / b["jct_mean"]
        add(
            f"{key} 1x JCT <= {target:g} x best static",
            ratio <= target,
            f"{default} {_num(d['jct_mean'])} s / {short(t['best_static'])} "
            f"{_num(b['jct_mean'])} s = {ratio:.3f}",
        )
    checks += whole_checks(tables, default)
    for metric, what, target in (
        ("jct_mean", "JCT", ANY_LOAD_TARGET),
        ("jct_p95", "p95 JCT", P95_TARGET),
    ):
        for t in tables:
            d, b = row(t, default), row(t, t["best_static"])
            name = f"{t['workload']} {t['load']:g}x {what} <= {target:g} x best static"
            if metric not in d or metric not in b:
                add(name, None, "missing figures")
                continue
            ratio = d[metric] / b[metric]
            add(
                name,
                ratio <= target,
                f"{default} {_num(d[metric])} s / {short(t['best_static'])} "
                f"{_num(b[metric])} s = {ratio:.3f}",
            )
    if equal_priorities:
        checks += fcfs_checks(tables, default)
    t = index.get(("miso-100-8", 1.0))
    if t is not None:
        b = row(t, t["best_static_makespan"])
        for label in MAKESPAN_POLICIES:
            d = row(t, label)
            name = f"miso-100-8 makespan of {label} <= {MAKESPAN_TARGET:g} x best static"
            if "makespan" not in d or "makespan" not in b:
                add(name, None, "missing figures")
                continue
            ratio = d["makespan"] / b["makespan"]
            add(
                name,
                ratio <= MAKESPAN_TARGET,
                f"{_num(d['makespan'])} s / {short(t['best_static_makespan'])} "
                f"{_num(b['makespan'])} s = {ratio:.3f} ({_below(ratio)})",
            )
    return checks


def whole_checks(tables: list[dict], default: str = DEFAULT) -> list[dict]:
    """``default`` against whole GPUs at 1x where whole GPUs queue: at most
    `WHOLE_TARGET` x, or within 5 % of the no-wait floor where that is above it."""
    checks: list[dict] = []

    def row(t: dict, label: str | None) -> dict:
        return next((r for r in t["rows"] if r["policy"] == label), {})

    def add(name: str, ok: bool | None, text: str) -> None:
        checks.append({"check": name, "ok": ok, "text": text})

    for t in tables:
        if t["load"] != 1.0:
            continue
        w, d = row(t, WHOLE), row(t, default)
        if "jct_mean" not in w or "jct_mean" not in d:
            continue
        share = w["wait_mean"] / w["jct_mean"] if w["jct_mean"] > 0 else 0.0
        if share <= QUEUE_SHARE:
            add(
                f"{t['workload']} 1x JCT <= {WHOLE_TARGET:g} x no-mig",
                True,
                f"n/a: no-mig does not queue (wait {100 * share:.0f} % of JCT)",
            )
            continue
        ratio = d["jct_mean"] / w["jct_mean"]
        floor = t.get("floor", math.nan)
        near_floor = floor / w["jct_mean"] > WHOLE_TARGET and d["jct_mean"] <= FLOOR_SLACK * floor
        add(
            f"{t['workload']} 1x JCT <= {WHOLE_TARGET:g} x no-mig (or within 5 % of the floor)",
            ratio <= WHOLE_TARGET or near_floor,
            f"{default} {_num(d['jct_mean'])} s / no-mig {_num(w['jct_mean'])} s = "
            f"{ratio:.3f} (no-mig waits {100 * share:.0f} % of its JCT; no policy can go "
            f"below {_num(floor)} s = {floor / w['jct_mean']:.2f} x: every job at once on "
            "its fastest size)",
        )
    return checks


def fcfs_checks(tables: list[dict], default: str = DEFAULT) -> list[dict]:
    """With equal priorities: ``default``'s longest wait and makespan against
    ``baseline`` (first come first served) on every stream, at every load."""
    out = []
    for t in tables:
        d = next((r for r in t["rows"] if r["policy"] == default), {})
        f = next((r for r in t["rows"] if r["policy"] == "baseline"), {})
        where = f"{t['workload']} {t['load']:g}x"
        if "wait_max" not in d or "wait_max" not in f:
            out.append({"check": f"{where} longest wait", "ok": None, "text": "missing"})
            continue
        for what, key, target in (
            ("longest wait", "wait_max", LONGEST_WAIT_TARGET),
            ("makespan", "makespan", MAKESPAN_FCFS_TARGET),
        ):
            base = f[key]
            ratio = d[key] / base if base > 0 else (1.0 if d[key] <= 0 else math.inf)
            out.append(
                {
                    "check": f"{where} {what} <= {target:g} x baseline's",
                    "ok": ratio <= target,
                    "text": f"{_num(d[key])} s / {_num(base)} s = {ratio:.3f}",
                }
            )
    return out


def _below(ratio: float) -> str:
    pct = 100 * (1 - ratio)
    return f"{pct:.0f} % below" if pct >= 0 else f"{-pct:.0f} % above"


def format_checks(checks: list[dict]) -> str:
    out = []
    for c in checks:
        mark = {True: "PASS", False: "FAIL", None: "MISSING"}[c["ok"]]
        out.append(f"{mark:7s} {c['check']}: {c['text']}")
    return "\n".join(out)


def errors(tables: list[dict]) -> list[str]:
    """Crashed policies: one line per workload x load x policy."""
    out = []
    for t in tables:
        for lab, a in t["all"].items():
            if "error" in a:
                out.append(f"{t['workload']} {t['load']:g}x seed {a['seed']} {lab}: {a['error']}")
    return out


# ---------------------------------------------------------------------------
# Main


def code_version() -> str:
    """The commit and the digest of the policies' source, as the run imported them."""
    import hashlib
    from pathlib import Path

    import slurm_mig

    root = Path(slurm_mig.__file__).resolve().parent
    digest = hashlib.sha1()
    for path in sorted((root / "planner").glob("*.py")) + sorted((root / "sim").glob("*.py")):
        digest.update(path.read_bytes())
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        head = "unknown"
    return f"commit {head}, planner+sim source sha1 {digest.hexdigest()[:12]}"


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "load average: " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="value.py",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=textwrap.fill(
            "Simulate slurm-mig's policies against whole GPUs, a site's a-priori "
            "MIG layout and the hindsight-best static layout on MISO, Philly, SMART-MIG and "
            "Alibaba streams (0.5x, 1x, 1.5x load) and the MISO-100 and Rodinia batches; "
            "at Slurm's age priority with the runtimes the daemon learns (--priority, --knowledge); "
            "print the tables, a summary and issue 35's done-when checks (PASS/FAIL) for "
            f"the default policy ({DEFAULT}).",
            width=79,
        ),
        epilog=__doc__.split("\n\n", 2)[2],
    )
    ap.add_argument("--quick", action="store_true", help="seed 0 and load 1x only")
    ap.add_argument("--jobs", metavar="N", type=int, default=os.cpu_count() or 1,
                    help="worker processes (default: os.cpu_count(); 1 = in-process)")  # fmt: skip
    ap.add_argument("--json", metavar="OUT", help="also write every figure to this JSON file")
    ap.add_argument("--seeds", metavar="K", type=int, default=len(SEEDS),
                    help=f"seeds 0..K-1 for the random presets (default: {len(SEEDS)})")  # fmt: skip
    ap.add_argument("--priority", choices=PRIORITY_MODES, default=PRIORITY,
                    help=f"Slurm's job priority (default: {PRIORITY}; none: equal priorities)")  # fmt: skip
    ap.add_argument("--knowledge", choices=KNOWLEDGE_MODES, default=KNOWLEDGE,
                    help=f"what a policy knows of runtimes (default: {KNOWLEDGE})")  # fmt: skip
    ap.add_argument("--restartable", action="store_true",
                    help="every job declares mig:restartable=yes (MISO's assumption), and "
                    f"{UPSIZE} joins the dynamic policies")  # fmt: skip
    ap.add_argument("--restart-s", metavar="S", type=float, default=RESTART_S,
                    help=f"with --restartable: seconds a move costs (default: {RESTART_S:g}: "
                    "Slurm's requeue delay of 121 s and a restart)")  # fmt: skip
    ap.add_argument("--workloads", metavar="A,B",
                    help="only these workloads: " + ", ".join(w.key for w in WORKLOADS)
                    + "; opt-in: " + ", ".join(w.key for w in OPT_IN))  # fmt: skip
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    ap = _parser()
    args = ap.parse_args(argv)
    if args.jobs < 1 or args.seeds < 1:
        ap.error("--jobs and --seeds must be at least 1")
    if not 0 <= args.restart_s <= 3600:  # NaN fails too
        ap.error(f"--restart-s must be seconds within 0..3600, not {args.restart_s:g}")
    workloads = list(WORKLOADS)
    if args.workloads:
        keys = [k.strip() for k in args.workloads.split(",") if k.strip()]
        known = (*WORKLOADS, *OPT_IN)
        unknown = sorted(set(keys) - {w.key for w in known})
        if unknown:
            ap.error(f"unknown workloads {', '.join(unknown)}")
        workloads = [w for w in known if w.key in keys]
    seeds = (0,) if args.quick else tuple(range(args.seeds))
    loads = (1.0,) if args.quick else LOADS
    start = uptime()
    version = code_version()
    print(f"uptime at start: {start}\ncode: {version}")
    t0 = time.monotonic()
    condition: Condition = (args.priority, args.knowledge)
    dynamic: tuple[str, ...] = DYNAMIC
    if args.restartable:
        condition = (args.priority, args.knowledge, args.restart_s)
        dynamic = (*DYNAMIC, UPSIZE)
    tables = run_tables(
        workloads,
        loads,
        seeds,
        args.jobs,
        dynamic=dynamic,
        log=lambda s: print(s, file=sys.stderr),
        condition=condition,
    )
    wall = time.monotonic() - t0
    print(
        f"\nvalue benchmark: {MODEL}; loads {', '.join(f'{x:g}x' for x in loads)}; seeds "
        f"{', '.join(map(str, seeds))} (Alibaba and batches: seed 0); default {DEFAULT}; "
        f"a-priori {short(A_PRIORI)}; sweep of {len(static_sweep())} static layouts\n"
        f"condition: priority {args.priority}, knowledge {args.knowledge} (static layouts "
        "and no-mig plan as Slurm does: "
        + ("with the time limits" if args.knowledge == "learned" else "with true times")
        + ")"
        + (f"; every job restartable, {args.restart_s:g} s per move" if args.restartable else "")
        + "\n"
        "JCT = finish - arrival, means over seeds (min-max of the seeds' means); UTIL = "
        "busy compute slices; RECONF = creates + destroys; EST OFF = median factor "
        "between the seconds a policy planned a job with and its true seconds alone where "
        f"it started (1.00x: exact; a real site's per-user history: {SITE_ESTIMATE_OFF_P50:.2f}x, "
        "MIT Supercloud 2021); /BEST STATIC and /NO-MIG = mean JCT ratios\n"
    )
    for t in tables:
        print(format_table(t) + "\n")
    print("## Summary (mean JCT)\n\n" + format_summary(tables) + "\n")
    crashed = errors(tables)
    if crashed:
        print("## Policies that crashed\n\n" + "\n".join(crashed) + "\n")
    checks = done_when(tables, equal_priorities=args.priority == "none")
    print(f"## Done when ({DEFAULT})\n\n" + format_checks(checks) + "\n")
    if args.restartable:
        upsized = done_when(tables, UPSIZE, equal_priorities=args.priority == "none")
        print(f"## Done when ({UPSIZE}, every job restartable)\n\n" + format_checks(upsized))
        print()
    end = uptime()
    print(f"run time {wall:.0f} s with {args.jobs} processes")
    print(f"uptime at start: {start}\nuptime at end:   {end}")
    if args.json:
        doc = {
            "model": MODEL,
            "default": DEFAULT,
            "a_priori": A_PRIORI,
            "dynamic": list(DYNAMIC),
            "priority": args.priority,
            "knowledge": args.knowledge,
            "restart_s": args.restart_s if args.restartable else None,
            "loads": list(loads),
            "seeds": list(seeds),
            "code": version,
            "uptime_start": start,
            "uptime_end": end,
            "wall_s": wall,
            "tables": tables,
            "checks": checks,
            "errors": crashed,
        }
        with open(args.json, "w") as fh:
            json.dump(_finite(doc), fh, indent=1)
    return 0


def run_tables(
    workloads: Sequence[Workload],
    loads: Sequence[float],
    seeds: Sequence[int],
    processes: int,
    dynamic: Sequence[str] = DYNAMIC,
    log: Callable[[str], None] = lambda s: None,
    condition: Condition = (PRIORITY, KNOWLEDGE),
) -> list[dict]:
    """Simulate every case and build one table per workload x load, in order."""
    results = run_all(cases(workloads, loads, seeds, dynamic, condition), processes, log)
    keys = [(wl, load) for wl in workloads for load in ((1.0,) if wl.batch else loads)]
    # the best static layout again, its jobs offered shortest first: what the order
    # alone is worth (DEFAULT takes jobs of one priority shortest first)
    again = []
    for wl, load in keys:
        best = build_table(wl, load, results.get((wl.key, load), {}), dynamic)["best_static"]
        if best:
            runs = seeds if wl.seeded else seeds[:1]
            again += [(wl, load, seed, best + SHORT_FIRST, condition) for seed in runs]
    for key, by_label in run_all(again, processes, log).items():
        results.setdefault(key, {}).update(by_label)
    return [build_table(wl, load, results.get((wl.key, load), {}), dynamic) for wl, load in keys]


def _finite(x):
    """``x`` with NaN and infinities as None (strict JSON)."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {str(k): _finite(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_finite(v) for v in x]
    return x


if __name__ == "__main__":
    raise SystemExit(main())
