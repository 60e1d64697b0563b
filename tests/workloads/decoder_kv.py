"""Workload (a): autoregressive decoding with a KV cache that grows by one token per step.

Inference only (no optimizer): mig-run's probe counts iterations at the start of each
outermost module forward. Memory grows linearly: every step appends one key and one
value per layer and head (torch.cat makes the cache anew, so the peak holds two copies).
"""

import argparse
import math
import time

import torch
from torch import nn


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x, k_cache, v_cache):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        k_cache = torch.cat([k_cache, k.transpose(1, 2)], dim=2)
        v_cache = torch.cat([v_cache, v.transpose(1, 2)], dim=2)
        att = (q.transpose(1, 2) @ k_cache.transpose(2, 3)) / math.sqrt(d // self.heads)
        y = att.softmax(-1) @ v_cache
        return self.out(y.transpose(1, 2).reshape(b, t, d)), k_cache, v_cache


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, k_cache, v_cache):
        a, k_cache, v_cache = self.attn(self.norm1(x), k_cache, v_cache)
        x = x + a
        return x + self.mlp(self.norm2(x)), k_cache, v_cache


class Decoder(nn.Module):
    def __init__(self, vocab: int, dim: int, heads: int, layers: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens, cache):
        x = self.embed(tokens)
        new_cache = []
        for block, (k, v) in zip(self.blocks, cache):
            x, k, v = block(x, k, v)
            new_cache.append((k, v))
        return self.head(x), new_cache


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--iters", type=int, default=200, help="tokens to decode")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument(
        "--sleep", type=float, default=0.0, help="seconds of pause per step (a slower device)"
    )
    args = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = Decoder(256, args.dim, args.heads, args.layers).eval()
    hd = args.dim // args.heads
    empty = torch.zeros(args.batch, args.heads, 0, hd)
    cache = [(empty, empty) for _ in range(args.layers)]
    tokens = torch.randint(0, 256, (args.batch, 1))
    final = -1
    with torch.no_grad():
        for it in range(args.iters):
            logits, cache = model(tokens, cache)
            tokens = logits[:, -1:].argmax(-1)
            time.sleep(args.sleep)
            final = it
    print(f"final iteration {final}", flush=True)


if __name__ == "__main__":
    main()
