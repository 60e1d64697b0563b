"""``--plot``: the JCT CDF and the cluster's utilisation over time, one line per policy."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .metrics import SimResult

_MAX_POINTS = 4000  # utilisation steps drawn per policy


def _downsample(t: Sequence[float], v: Sequence[float], t_end: float) -> tuple[list, list]:
    """Time-weighted means over at most _MAX_POINTS equal bins."""
    if not t:
        return [], []
    t0 = t[0]
    span = max(t_end - t0, 1e-9)
    bins = min(_MAX_POINTS, max(1, len(t)))
    width = span / bins
    area = [0.0] * bins
    for i in range(len(t)):
        a = t[i]
        b = t[i + 1] if i + 1 < len(t) else t_end
        while a < b:
            k = min(bins - 1, int((a - t0) / width))
            edge = min(b, t0 + (k + 1) * width)
            if edge <= a:  # float edge case: step to the next bin
                edge = b
            area[k] += v[i] * (edge - a)
            a = edge
    xs = [t0 + (k + 0.5) * width for k in range(bins)]
    return xs, [x / width for x in area]


def draw(results: Sequence[SimResult], path: str | Path, title: str = "") -> Path:
    """Write a PNG with the JCT CDF (left) and busy compute slices over time (right)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for r in results:
        jct = sorted(r.jct)
        n = len(jct)
        ax1.step(jct, [(i + 1) / n for i in range(n)], where="post", label=r.policy)
        xs, ys = _downsample(r.util_t, r.util_busy, r.t_end)
        ax2.plot([(x - r.t0) / 3600 for x in xs], [100 * y / r.slices_total for y in ys],
                 label=r.policy, linewidth=0.8)  # fmt: skip
    ax1.set_xscale("log")
    ax1.set_xlabel("job completion time (s)")
    ax1.set_ylabel("share of jobs")
    ax1.set_title("JCT CDF")
    ax1.grid(alpha=0.3)
    ax1.legend()
    ax2.set_xlabel("time (h)")
    ax2.set_ylabel("compute slices busy (%)")
    ax2.set_ylim(0, 105)
    ax2.set_title("utilisation")
    ax2.grid(alpha=0.3)
    ax2.legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
