"""Workload (b): MLP training whose batch grows every step (the optimizer step hook
counts iterations). Activation memory grows linearly with the batch."""

import argparse
import time

import torch
from torch import nn


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--iters", type=int, default=120)
    p.add_argument("--batch", type=int, default=32, help="first batch")
    p.add_argument("--growth", type=int, default=16, help="rows added per step")
    p.add_argument("--width", type=int, default=256)
    p.add_argument(
        "--sleep", type=float, default=0.0, help="seconds of pause per step (a slower device)"
    )
    args = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(
        nn.Linear(256, args.width), nn.ReLU(), nn.Linear(args.width, args.width), nn.ReLU(),
        nn.Linear(args.width, 10),
    )  # fmt: skip
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    it = -1
    for it in range(args.iters):
        n = args.batch + args.growth * it
        x, y = torch.randn(n, 256), torch.randint(0, 10, (n,))
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        time.sleep(args.sleep)
    print(f"final iteration {it}", flush=True)


if __name__ == "__main__":
    main()
