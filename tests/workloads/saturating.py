"""Workload (e): training with a sequence-length curriculum that grows during warm-up and
saturates: length = max - (max - min) * exp(-step / warmup). Memory rises steeply at
first and flattens; a forecaster must not extrapolate the early slope."""

import argparse
import math
import time

import torch
from torch import nn


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--iters", type=int, default=120)
    p.add_argument("--warmup", type=float, default=15.0, help="steps of the exponential ramp")
    p.add_argument("--min-len", type=int, default=16)
    p.add_argument("--max-len", type=int, default=128)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument(
        "--sleep", type=float, default=0.0, help="seconds of pause per step (a slower device)"
    )
    args = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Embedding(256, 64), nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 256))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    span = args.max_len - args.min_len
    it = -1
    for it in range(args.iters):
        length = round(args.max_len - span * math.exp(-it / args.warmup))
        x = torch.randint(0, 256, (args.batch, length))
        logits = model(x)
        loss = nn.functional.cross_entropy(logits.view(-1, 256), x.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        time.sleep(args.sleep)
    print(f"final iteration {it}", flush=True)


if __name__ == "__main__":
    main()
