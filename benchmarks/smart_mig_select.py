"""Choose a trained SMART-MIG controller the way the shipped one is chosen: each
candidate's ET over static CEDF's on the calibration days (seeds 1000-1004: a day of
Fig. 5's pattern at 20x on 8 A100s; never the figure seeds 2000+ nor the training
seeds 10000+), run as in production (top-k sampling, `sim.controller_train.run_episode`
with the training's defaults); the lowest mean ratio wins. Prints one row per
candidate and the winner.

Usage: PYTHONPATH=. .venv/bin/python benchmarks/smart_mig_select.py CTRL.npz|DIR ...
       [--seeds 5]
(a DIR stands for its ``*.npz`` files; ``shipped`` for the packaged controller)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from slurm_mig.planner.smartmig import Controller
from slurm_mig.sim.controller_train import TrainSettings, run_episode

CALIBRATION_SEED = 1000


def candidates(args: list[str]) -> list[str]:
    """The files named, a directory's ``*.npz`` in name order, ``shipped`` as given."""
    out: list[str] = []
    for a in args:
        p = Path(a)
        out.extend(str(f) for f in sorted(p.glob("*.npz"))) if p.is_dir() else out.append(a)
    return out


def ratio(name: str, seeds: int) -> float:
    """Mean ET over static CEDF's of controller ``name`` on the calibration days."""
    ctrl = Controller.load(None if name == "shipped" else name)
    days = range(CALIBRATION_SEED, CALIBRATION_SEED + seeds)
    return statistics.fmean(run_episode(ctrl, TrainSettings(), s).et_ratio for s in days)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("controllers", nargs="+", help="checkpoints, directories or 'shipped'")
    ap.add_argument("--seeds", type=int, default=5, help="calibration days (default 5)")
    args = ap.parse_args(argv)
    names = candidates(args.controllers)
    if not names:
        print("smart_mig_select: no controller given", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    scores = {}
    for name in names:
        scores[name] = ratio(name, args.seeds)
        print(f"{name}: ET {scores[name]:.3f} x static CEDF", flush=True)
    best = min(scores, key=scores.__getitem__)
    print(f"best: {best} ({scores[best]:.3f}; {args.seeds} calibration days, "
          f"{time.perf_counter() - t0:.0f} s)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
