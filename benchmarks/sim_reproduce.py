"""Reproduce the simulated experiments of issue 5, our figure beside the paper's.

1. PCIe paper (Tang et al., HPCAsia 2025), Fig. 7/8: aggregate JCT (sum over jobs)
   of each policy relative to the PCIe-unaware baseline on the pcie-paper preset:
   4 A100 GPUs at 20/40/60 % PCIe-bound jobs, and 60 GPUs with 1400 jobs at 60 %.
   Paper (pcie-aware vs baseline): slightly better at 20 %, -18 % at 60 % (4 GPUs),
   -17 % at 60 % (60 GPUs).
2. MISO trace (SoCC'22): mean JCT of our policies on MISO's 1000-job trace replay
   (40 A100 GPUs) beside MISO's published simulator means over 100 seeds for full /
   static / miso / oracle (shared/data/traces/miso-socc22/results_monte_carlo).
   ``baseline:size=7`` gives every job a whole GPU: MISO's "full".

Policies: those given with --policies, else every registered policy that can be
loaded now among DEFAULT_POLICIES (owners P and O add theirs to the registry and,
with the paper's figure, to PAPER below). Figures are means over --seeds seeds.

Usage: python benchmarks/sim_reproduce.py [--seeds N] [--policies a,b] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from slurm_mig.cli.simulate import parse_policies
from slurm_mig.geometry import get_model
from slurm_mig.sim import simulate
from slurm_mig.sim.jobs import build_workload, shared_data_dir
from slurm_mig.sim.policies import UnknownPolicy, get_policy

DEFAULT_POLICIES = (
    "baseline",
    "far",
    "pcie-aware",
    "far-pcie",
    "frag-aware",
    "migm-a",
    "migm-b",
)
# (experiment, setting) -> {policy: the paper's figure, as text}
PAPER = {
    ("pcie", "4 GPUs, 20 %"): {"pcie-aware": "slightly better"},
    ("pcie", "4 GPUs, 40 %"): {"pcie-aware": "between (Fig. 7)"},
    ("pcie", "4 GPUs, 60 %"): {"pcie-aware": "-18 %"},
    ("pcie", "60 GPUs, 1400 jobs, 60 %"): {"pcie-aware": "-17 %"},
}
MISO_POLICIES = ("full", "static", "miso", "oracle")


def available(names) -> list[str]:
    out = []
    for label, name, opts in parse_policies(",".join(names)):
        try:
            get_policy(name, **opts)
        except UnknownPolicy:
            continue
        out.append(label)
    return out


def run(workload: str, gpus: int, jobs: int | None, share: float | None, labels, seeds: int):
    """Mean summary per policy label over ``seeds`` seeds."""
    model = get_model("A100-40GB")
    specs = parse_policies(",".join(labels))
    acc: dict[str, list[dict]] = {label: [] for label, _, _ in specs}
    for seed in range(seeds):
        work = build_workload(workload, model, gpus, jobs, seed, share)
        for label, name, opts in specs:
            r = simulate(work, get_policy(name, **opts), 1, gpus, model, seed)
            acc[label].append(r.summary())
    return {
        label: {k: statistics.fmean(s[k] for s in runs) for k in runs[0]}
        for label, runs in acc.items()
    }


def pcie_experiment(labels, seeds: int) -> list[dict]:
    rows = []
    settings = [("4 GPUs, 20 %", 4, None, 0.2), ("4 GPUs, 40 %", 4, None, 0.4),
                ("4 GPUs, 60 %", 4, None, 0.6), ("60 GPUs, 1400 jobs, 60 %", 60, 1400, 0.6)]  # fmt: skip
    for setting, gpus, jobs, share in settings:
        n_seeds = seeds if gpus <= 4 else max(1, seeds // 3)
        res = run("pcie-paper", gpus, jobs, share, labels, n_seeds)
        base = res.get("baseline", {}).get("jct_sum")
        for label, s in res.items():
            rows.append(
                {
                    "experiment": "pcie",
                    "setting": setting,
                    "seeds": n_seeds,
                    "policy": label,
                    "jct_sum": s["jct_sum"],
                    "jct_mean": s["jct_mean"],
                    "makespan": s["makespan"],
                    "vs_baseline": (s["jct_sum"] / base - 1) if base else None,
                    "paper": PAPER.get(("pcie", setting), {}).get(label, ""),
                }
            )
    return rows


def miso_published() -> dict[str, tuple[float, float]]:
    """MISO's simulator: (mean JCT, mean makespan) over its 100 seeds, per policy."""
    base = shared_data_dir() / "traces" / "miso-socc22" / "results_monte_carlo"
    out = {}
    for p in MISO_POLICIES:
        jct, span = Path(base) / f"{p}_jct.json", Path(base) / f"{p}_span.json"
        if jct.exists() and span.exists():
            out[p] = (
                statistics.fmean(json.loads(jct.read_text())),
                statistics.fmean(json.loads(span.read_text())),
            )
    return out


def miso_experiment(labels, seeds: int) -> list[dict]:
    labels = list(labels)
    if "baseline" in labels and "baseline:size=7" not in labels:
        labels.insert(labels.index("baseline") + 1, "baseline:size=7")
    res = run("miso-trace", 40, 1000, None, labels, max(1, seeds // 2))
    published = miso_published()
    rows = []
    for label, s in res.items():
        rows.append(
            {
                "experiment": "miso",
                "setting": "1000 jobs, 40 GPUs",
                "seeds": max(1, seeds // 2),
                "policy": label,
                "jct_mean": s["jct_mean"],
                "makespan": s["makespan"],
                "paper": "",
            }
        )
    for p, v in published.items():
        rows.append(
            {
                "experiment": "miso",
                "setting": "1000 jobs, 40 GPUs",
                "seeds": 100,
                "policy": f"MISO {p} (published)",
                "jct_mean": None,
                "makespan": None,
                "paper": f"JCT {v[0]:.0f} s, makespan {v[1]:.0f} s",
            }
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=6, help="seeds per 4-GPU setting")
    ap.add_argument("--policies", help="comma-separated policies (default: all available)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    labels = args.policies.split(",") if args.policies else available(DEFAULT_POLICIES)
    rows = pcie_experiment(labels, args.seeds) + miso_experiment(labels, args.seeds)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(
        "| experiment | setting | policy | seeds | JCT sum s | JCT mean s | makespan s "
        "| vs baseline | paper |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        vs = r.get("vs_baseline")
        print(
            f"| {r['experiment']} | {r['setting']} | {r['policy']} | {r['seeds']} | "
            f"{_f(r.get('jct_sum'), 0)} | {_f(r.get('jct_mean'), 1)} | "
            f"{_f(r.get('makespan'), 0)} | "
            f"{'' if vs is None else f'{100 * vs:+.1f} %'} | {r['paper']} |"
        )


def _f(x, digits: int) -> str:
    return "" if x is None else f"{x:.{digits}f}"


if __name__ == "__main__":
    main()
