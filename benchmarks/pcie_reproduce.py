"""Reproduce the PCIe paper's experiments (Tang et al., HPCAsia 2025, Sections 5.3-5.4)
in our simulator, the paper's figure beside ours, and measure PCIe-aware FAR.

1. 4 A100 GPUs, PCIe-bound share 20 / 40 / 60 % (pcie-paper preset, its default 93
   jobs): aggregate JCT (sum over jobs) of ``pcie-aware`` vs ``baseline`` (paper:
   slightly better at 20 %, about 18 % lower at 60 %). Also the paper's own gate,
   which checks the newcomer only (``protect_others=False``).
2. 60 A100 GPUs, 1400 jobs, same shares (paper: about 17 % lower at 60 %).
3. ``far`` vs ``far-pcie``: one batch (every job at time 0; makespan, objective
   ``makespan``) and online batches under Poisson arrivals (aggregate JCT, the
   policy's default objective ``start``), the slowdown applied throughout.
--sweep: the gate's thresholds on separate seeds (100 up), how the defaults were set.

Reductions are 1 - ours/baseline of the seed-summed JCT; "per seed" is the mean and
standard deviation of the per-seed reductions. The workload's runtimes, sizes and
arrival rate are our assumptions (see ``slurm_mig.sim.jobs``): the paper gives none.

Usage: python benchmarks/pcie_reproduce.py [--seeds N] [--big-seeds N] [--procs N]
       [--quick] [--sweep] [--json]
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import statistics
import sys
import time
from multiprocessing import Pool

from slurm_mig.geometry import get_model
from slurm_mig.sim import simulate
from slurm_mig.sim.jobs import build_workload
from slurm_mig.sim.policies import get_policy

MODEL = "A100-40GB"
SHARES = (0.2, 0.4, 0.6)
PAPER = {
    (4, 0.2): "slightly better",
    (4, 0.4): "better (Fig. 6)",
    (4, 0.6): "-18 %",
    (60, 0.2): "better (Fig. 8)",
    (60, 0.4): "better (Fig. 8)",
    (60, 0.6): "-17 %",
}
POLICIES = {
    "baseline": ("baseline", {}),
    "pcie-aware": ("pcie-aware", {}),
    "pcie-aware (paper gate)": ("pcie-aware", {"protect_others": False}),
    "far": ("far", {}),
    "far-pcie": ("far-pcie", {}),
    "far-pcie (makespan)": ("far-pcie", {"objective": "makespan"}),
}


def _run(task):
    """One simulation: (gpus, jobs, share, seed, label, batch) -> summary fields."""
    gpus, n, share, seed, label, batch = task
    model = get_model(MODEL)
    jobs = build_workload("pcie-paper", model, gpus, n, seed, share)
    if batch:
        jobs = [dataclasses.replace(j, arrival=0.0) for j in jobs]
    name, opts = POLICIES[label]
    t0 = time.perf_counter()
    s = simulate(jobs, get_policy(name, **opts), 1, gpus, model, seed).summary()
    return task, {
        "jct_sum": s["jct_sum"],
        "makespan": s["makespan"],
        "wait_mean": s["wait_mean"],
        "exec_mean": s["exec_mean"],
        "wall_s": time.perf_counter() - t0,
    }


def _grid(pool, tasks):
    out = {}
    for task, res in pool.imap_unordered(_run, tasks):
        out[task] = res
    return out


def _compare(res, gpus, n, share, seeds, label, ref, batch, metric):
    """Reduction of ``metric`` (summed over seeds) of ``label`` against ``ref``."""
    ours = [res[(gpus, n, share, s, label, batch)][metric] for s in seeds]
    base = [res[(gpus, n, share, s, ref, batch)][metric] for s in seeds]
    per = [1 - o / b for o, b in zip(ours, base)]
    return {
        "ours": statistics.fmean(ours),
        "ref": statistics.fmean(base),
        "reduction": 1 - sum(ours) / sum(base),
        "per_seed_mean": statistics.fmean(per),
        "per_seed_sd": statistics.stdev(per) if len(per) > 1 else 0.0,
        "never_worse": all(o <= b + 1e-6 for o, b in zip(ours, base)),
        "seeds": len(seeds),
    }


def _pct(x: float) -> str:
    return f"{-100 * x:+.1f} %"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20, help="seeds for 4-GPU cells (20)")
    ap.add_argument("--big-seeds", type=int, default=5, help="seeds for 60-GPU cells (5)")
    ap.add_argument("--procs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--quick", action="store_true", help="3 and 1 seeds: a smoke run")
    ap.add_argument("--sweep", action="store_true", help="also sweep the gate's thresholds")
    ap.add_argument("--json", action="store_true", help="print JSON instead of tables")
    args = ap.parse_args(argv)
    small = range(3 if args.quick else args.seeds)
    big = range(1 if args.quick else args.big_seeds)
    t_start = time.perf_counter()
    tasks = []
    online = ("baseline", "pcie-aware", "pcie-aware (paper gate)", "far", "far-pcie")
    for gpus, n, seeds in ((4, None, small), (60, 1400, big)):
        for share, seed, label in itertools.product(SHARES, seeds, online):
            tasks.append((gpus, n, share, seed, label, False))
    for gpus, n, seeds in ((4, 60, small), (60, 1400, big)):
        for share, seed, label in itertools.product(SHARES, seeds, ("far", "far-pcie (makespan)")):
            tasks.append((gpus, n, share, seed, label, True))
    with Pool(max(1, args.procs)) as pool:
        res = _grid(pool, tasks)
        sweep = _sweep(pool, args.quick) if args.sweep else None
    report = {"paper": [], "far": [], "sweep": sweep}
    for gpus, n, seeds in ((4, None, small), (60, 1400, big)):
        for share in SHARES:
            row = {"gpus": gpus, "jobs": n or "93", "share": share, "paper": PAPER[(gpus, share)]}
            for label in ("pcie-aware", "pcie-aware (paper gate)"):
                row[label] = _compare(
                    res, gpus, n, share, seeds, label, "baseline", False, "jct_sum"
                )
            report["paper"].append(row)
    for gpus, n, seeds in ((4, 60, small), (60, 1400, big)):
        for share in SHARES:
            report["far"].append(
                {
                    "gpus": gpus,
                    "share": share,
                    "batch_makespan": _compare(res, gpus, n, share, seeds, "far-pcie (makespan)", "far", True, "makespan"),
                    "batch_jct": _compare(res, gpus, n, share, seeds, "far-pcie (makespan)", "far", True, "jct_sum"),
                    "online_jct": _compare(res, gpus, None if gpus == 4 else 1400, share, small if gpus == 4 else big, "far-pcie", "far", False, "jct_sum"),
                }
            )  # fmt: skip
    report["wall_s"] = time.perf_counter() - t_start
    if args.json:
        json.dump(report, sys.stdout, indent=1)
        print()
        return 0
    _print(report)
    return 0


def _print(report) -> None:
    print("## pcie-aware vs baseline: aggregate JCT (sum over jobs), change vs baseline")
    print()
    print(
        "| GPUs | jobs | PCIe-bound | paper | pcie-aware | per seed | paper's gate (newcomer only) | seeds |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in report["paper"]:
        a, p = r["pcie-aware"], r["pcie-aware (paper gate)"]
        print(
            f"| {r['gpus']} | {r['jobs']} | {r['share']:.0%} | {r['paper']} | "
            f"{_pct(a['reduction'])} | {_pct(a['per_seed_mean'])} ± {100 * a['per_seed_sd']:.1f} | "
            f"{_pct(p['reduction'])} | {a['seeds']} |"
        )
    print()
    print("## far vs far-pcie (slowdown applied), change vs far")
    print()
    print(
        "| GPUs | PCIe-bound | one batch: makespan | never worse | one batch: JCT | online: JCT (per seed) |"
    )
    print("|---|---|---|---|---|---|")
    for r in report["far"]:
        m, j, o = r["batch_makespan"], r["batch_jct"], r["online_jct"]
        print(
            f"| {r['gpus']} | {r['share']:.0%} | {_pct(m['reduction'])} | "
            f"{'yes' if m['never_worse'] else 'NO'} ({m['seeds']} seeds) | {_pct(j['reduction'])} | "
            f"{_pct(o['reduction'])} ({_pct(o['per_seed_mean'])} ± {100 * o['per_seed_sd']:.1f}, "
            f"{o['seeds']} seeds) |"
        )
    if report["sweep"]:
        print()
        print("## gate threshold sweep (seeds 100+): mean JCT change vs baseline")
        print()
        print("| delay_threshold | wait_time_threshold | protect_others | mean | cells |")
        print("|---|---|---|---|---|")
        for row in report["sweep"][:12]:
            cells = " ".join(f"{k}:{_pct(v)}" for k, v in row["cells"].items())
            print(
                f"| {row['delay_threshold']} | {row['wait_time_threshold']:g} | "
                f"{row['protect_others']} | {_pct(row['mean'])} | {cells} |"
            )
    print()
    print(f"wall time {report['wall_s']:.0f} s")


def _sweep_one(task):
    gpus, share, seed, dt, wt, po = task
    model = get_model(MODEL)
    jobs = build_workload("pcie-paper", model, gpus, None, seed, share)
    b = simulate(jobs, "baseline", 1, gpus, model, seed).summary()["jct_sum"]
    pol = get_policy("pcie-aware", delay_threshold=dt, wait_time_threshold=wt, protect_others=po)
    a = simulate(jobs, pol, 1, gpus, model, seed).summary()["jct_sum"]
    return task, (a, b)


def _sweep(pool, quick: bool) -> list[dict]:
    grid = list(itertools.product([1.0, 1.2, 1.3, 1.6, 2.0], [30.0, 120.0, 1e9], [True, False]))
    seeds = {4: range(100, 102 if quick else 108), 60: range(100, 101 if quick else 102)}
    tasks = [
        (g, sh, sd, dt, wt, po)
        for (dt, wt, po) in grid
        for g in (4, 60)
        for sh in SHARES
        for sd in seeds[g]
    ]
    acc: dict = {}
    for (g, sh, _sd, dt, wt, po), (a, b) in pool.imap_unordered(_sweep_one, tasks):
        cell = acc.setdefault((dt, wt, po), {}).setdefault(f"{g}/{sh:.0%}", [0.0, 0.0])
        cell[0] += a
        cell[1] += b
    rows = []
    for (dt, wt, po), cells in acc.items():
        red = {k: 1 - a / b for k, (a, b) in sorted(cells.items())}
        rows.append(
            {
                "delay_threshold": dt,
                "wait_time_threshold": wt,
                "protect_others": po,
                "mean": statistics.fmean(red.values()),
                "cells": red,
            }
        )
    rows.sort(key=lambda r: -r["mean"])
    return rows


if __name__ == "__main__":
    raise SystemExit(main())
