"""``--plot``: the JCT CDF and the cluster's utilisation over time, one line per policy."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .metrics import SimResult

_MAX_POINTS = 4000  # utilisation bins drawn per policy


def binned_mean(
    t: Sequence[float], v: Sequence[float], t_end: float, bins: int | None = None
) -> tuple[list[float], list[float]]:
    """Bin centres and the time-weighted mean of a step function over equal bins.

    ``v[i]`` holds from ``t[i]`` to ``t[i + 1]`` (the last to ``t_end``). Each bin gets
    the part of every interval that lies inside it, divided by the bin's width, so a
    bin's value never leaves the range of ``v`` and the bins' mean is the mean over
    the whole span. ``bins`` defaults to one per step, at most ``_MAX_POINTS``.
    """
    import numpy as np

    if not len(t):
        return [], []
    tt = np.asarray(t, dtype=float)
    vv = np.asarray(v, dtype=float)
    t0 = float(tt[0])
    t_end = max(float(t_end), float(tt[-1]))
    if t_end <= t0:  # nothing elapsed: the value at t0 is the mean
        return [t0], [float(vv[-1])]
    n = bins if bins is not None else min(_MAX_POINTS, len(tt))
    n = max(1, int(n))
    # the integral of the step function at each change, then at each bin edge
    knots = np.append(tt, t_end)
    cum = np.concatenate(([0.0], np.cumsum(vv * np.diff(knots))))
    edges = np.linspace(t0, t_end, n + 1)
    area = np.diff(np.interp(edges, knots, cum))
    # a mean lies within the values it averages: clip the last bits of float rounding
    means = np.clip(area / np.diff(edges), vv.min(), vv.max())
    return ((edges[:-1] + edges[1:]) / 2).tolist(), means.tolist()


def utilisation_percent(r: SimResult, bins: int | None = None) -> tuple[list[float], list[float]]:
    """Hours since the first arrival and the share of compute slices busy (%) per bin."""
    xs, ys = binned_mean(r.util_t, r.util_busy, r.t_end, bins)
    return [(x - r.t0) / 3600 for x in xs], [100 * y / r.slices_total for y in ys]


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
        hours, percent = utilisation_percent(r)
        ax2.plot(hours, percent, label=r.policy, linewidth=0.8, drawstyle="steps-mid")
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
