"""Workload (c): a small CNN trained on fixed-size batches: memory is the same every
step after the first (the optimizer's state appears at the first step)."""

import argparse
import time

import torch
from torch import nn


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--iters", type=int, default=60)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument(
        "--sleep", type=float, default=0.0, help="seconds of pause per step (a slower device)"
    )
    args = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 8 * 8, 10),
    )  # fmt: skip
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    final = -1
    for it in range(args.iters):
        x, y = torch.randn(args.batch, 3, 32, 32), torch.randint(0, 10, (args.batch,))
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        time.sleep(args.sleep)
        final = it
    print(f"final iteration {final}", flush=True)


if __name__ == "__main__":
    main()
