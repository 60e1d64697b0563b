"""Workload (d): constant-memory training with a periodic evaluation on a larger batch:
every --eval-every steps memory spikes and comes back down; the trend stays flat."""

import argparse
import time

import torch
from torch import nn


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--iters", type=int, default=120)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--eval-batch", type=int, default=1024)
    p.add_argument(
        "--sleep", type=float, default=0.0, help="seconds of pause per step (a slower device)"
    )
    args = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    it = -1
    for it in range(args.iters):
        x, y = torch.randn(args.batch, 256), torch.randint(0, 10, (args.batch,))
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if (it + 1) % args.eval_every == 0:
            with torch.no_grad():
                xe = torch.randn(args.eval_batch, 256)
                model(xe).argmax(-1).float().mean().item()
        time.sleep(args.sleep)
    print(f"final iteration {it}", flush=True)


if __name__ == "__main__":
    main()
