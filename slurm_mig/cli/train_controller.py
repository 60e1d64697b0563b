"""``slurm-mig train-controller``: train SMART-MIG's repartitioning controller with PPO
in the simulator and save it as numpy weights (``sim.controller_train``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..argtypes import positive_int, rate_multiplier
from .common import PROG, Formatter, wrap


def add_parser(sub) -> None:
    tc = sub.add_parser(
        "train-controller",
        formatter_class=Formatter,
        help="train SMART-MIG's repartitioning controller (PPO) in the simulator",
        description=wrap(
            "Train the mean-field controller of the smart-mig policy: each iteration "
            "simulates EPISODES days of the smart-mig workload at the rate multiplier on "
            "GPUS A100s under the current controller (and under static CEDF, the "
            "reference), then takes PPO steps. Seeded: the same options give the same "
            "controller. Writes OUT (the best controller, numpy weights; pass it to the "
            "policy as smart-mig:checkpoint=OUT), OUT-itNNNN.npz checkpoints, "
            "OUT-state.pt (torch state), OUT.csv (the reward curve) and OUT.png (its "
            "plot). --resume goes on from OUT-state.pt (written at each checkpoint) to "
            "--iterations, as if the run had not stopped: train in stages with the same "
            "options and a larger --iterations. Needs torch (pip install "
            "'slurm-mig[train]')."
        ),
    )
    tc.add_argument("--out", metavar="OUT.npz", required=True, help="where to write the controller")
    tc.add_argument("--iterations", metavar="N", type=positive_int, default=60,
                    help="PPO iterations (default: 60)")  # fmt: skip
    tc.add_argument("--episodes", metavar="E", type=positive_int, default=2,
                    help="simulated days per iteration (default: 2)")  # fmt: skip
    tc.add_argument("--gpus", metavar="N", type=positive_int, default=8,
                    help="A100s in the simulated node (default: 8)")  # fmt: skip
    tc.add_argument("--rate-multiplier", metavar="K", type=rate_multiplier, default=20.0,
                    help="arrival rate as a multiple of the base rate (default: 20)")  # fmt: skip
    tc.add_argument("--seed", metavar="S", type=int, default=0,
                    help="seed of the network and the training days (default: 0)")  # fmt: skip
    tc.add_argument("--save-every", metavar="N", type=positive_int, default=10,
                    help="write a checkpoint every N iterations (default: 10)")  # fmt: skip
    tc.add_argument("--reward", choices=("vs-cedf", "absolute"), default="vs-cedf",
                    help="a step's reward: minus its cost (Eq. 6) less static CEDF's over "
                    "the same interval of the same day (vs-cedf, default: the same "
                    "optimum, far less noise), or minus its cost alone (absolute)")  # fmt: skip
    tc.add_argument("--resume", action="store_true",
                    help="go on from OUT-state.pt, the last checkpoint of a run with the "
                    "same options, up to --iterations in all")  # fmt: skip
    tc.add_argument("--no-plot", action="store_true", help="do not draw OUT.png")
    tc.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    try:
        import torch  # noqa: F401
        from tqdm import tqdm
    except ModuleNotFoundError as exc:
        raise ValueError(
            f"train-controller needs {exc.name}; install it with pip install 'slurm-mig[train]'"
        ) from None
    from ..sim.controller_train import TrainSettings, plot_curve, state_path, train

    if args.iterations > 100_000 or args.episodes > 1000 or args.gpus > 4096:
        raise ValueError("--iterations <= 100000, --episodes <= 1000 and --gpus <= 4096")
    out = Path(args.out)
    if out.suffix != ".npz":
        raise ValueError(f"--out {out}: give a file name ending in .npz")
    if args.resume and not state_path(out).is_file():
        raise ValueError(f"--resume: no {state_path(out)} (a run with --out {out} writes it)")
    out.parent.mkdir(parents=True, exist_ok=True)
    settings = TrainSettings(
        iterations=args.iterations,
        episodes=args.episodes,
        gpus=args.gpus,
        rate_multiplier=args.rate_multiplier,
        seed=args.seed,
        save_every=args.save_every,
        reward=args.reward,
    )
    bar = tqdm(total=settings.iterations, desc=f"{PROG} train-controller", unit="it",
               file=sys.stderr, dynamic_ncols=True)  # fmt: skip
    first = [True]

    def progress(it: int, rec: dict) -> None:
        if first[0]:  # a resumed run starts where its checkpoint was
            bar.update(it)
            first[0] = False
        bar.set_postfix(
            ET_vs_CEDF=f"{rec['et_ratio']:.3f}", days=rec["days"], jobs=rec["jobs"], refresh=False
        )
        bar.update(1)

    try:
        curve = train(settings, out, progress, resume=args.resume)
    finally:
        bar.close()
    best = min(curve, key=lambda r: r["et_ratio"])
    print(
        f"controller: {out} (iteration {best['iteration']}, ET {best['et_ratio']:.3f} x static "
        f"CEDF on its training days); {curve[-1]['days']} days, {curve[-1]['jobs']} jobs, "
        f"{curve[-1]['wall_s']:.0f} s"
    )
    print(f"reward curve: {out.with_suffix('.csv')}")
    if not args.no_plot:
        print(f"plot: {plot_curve(curve, out.with_suffix('.png'))}")
    return 0
