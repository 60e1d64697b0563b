"""A memory trace replayed through the online forecaster (``slurm-mig forecast``,
benchmarks), and its plot (matplotlib, imported only to draw)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .forecaster import Forecaster
from .trace import Sample, human

__all__ = ["plot_forecast", "replay", "run_trace"]


def run_trace(
    samples: Sequence[Sample],
    capacity: int,
    *,
    iterations: int | None = None,
    context: int = 0,
    **options,
) -> Forecaster:
    """A Forecaster fed every sample of a trace, in order: every one decided up to the first
    restart, then only the last, from a forecast fitted to every row (the rows between
    cannot change the first restart, and the last forecast depends only on the samples).
    Linear in the rows: a forecast fits at most ``window`` samples."""
    fc = Forecaster(capacity, context=context, horizon=iterations, **options)
    for i, s in enumerate(samples):
        if i == len(samples) - 1:
            fc.update(s, fit=True)  # the final forecast is from every row
        elif fc.first_restart is None:
            fc.update(s)
        else:
            fc.feed(s)
    return fc


def replay(
    samples: Sequence[Sample],
    capacity: int,
    *,
    iterations: int | None = None,
    context: int = 0,
    **options,
) -> tuple[int | None, int | None]:
    """Run a trace through the online decision: (the first iteration at which it would
    restart or None, the predicted peak at the horizon from all samples or None)."""
    fc = run_trace(samples, capacity, iterations=iterations, context=context, **options)
    first = fc.first_restart
    last = fc.decisions[-1] if fc.decisions else None
    return (first.iteration if first else None), (last.predicted_peak if last else None)


def plot_forecast(
    fc: Forecaster, samples: Sequence[Sample], path: str | Path, title: str | None = None
) -> Path:
    """Draw the trace, the fitted trend with its upper bound to the horizon, the capacity
    and the restart decision to a PNG file (imports matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    gib = float(2**30)
    it = [s.iteration for s in samples]
    fig, ax = plt.subplots(figsize=(9, 4.8))
    ax.plot(it, [s.requested_peak / gib for s in samples], ".", ms=3, label="requested peak")
    if any(s.reserved_peak for s in samples):
        ax.plot(
            it,
            [s.reserved_peak / gib for s in samples],
            ".",
            ms=2,
            alpha=0.5,
            label="reserved peak",
        )
    f = fc.last_forecast
    if f is not None:
        ax.plot(f.curve_t, f.curve_mean / gib, "-", lw=1.2, label=f"trend ({f.model})")
        ax.fill_between(
            f.curve_t,
            f.curve_mean / gib,
            f.curve_upper / gib,
            alpha=0.25,
            label=f"{round(100 * fc.confidence)}% bound" + (" + spikes" if f.spikes else ""),
        )
    last = fc.decisions[-1] if fc.decisions else None
    if last is not None and last.predicted_peak is not None and last.horizon is not None:
        ax.plot(
            [last.horizon],
            [last.predicted_peak / gib],
            "v",
            color="purple",
            label=f"predicted peak {human(last.predicted_peak)}",
        )
        ax.plot(
            [last.horizon],
            [last.need / gib],
            "_",
            ms=14,
            mew=2,
            color="purple",
            label=f"need (+ context, margin) {human(last.need)}",
        )
    ax.axhline(fc.capacity / gib, color="red", lw=1, ls="--", label="capacity")
    if fc.context:
        ax.axhline(
            (fc.capacity - fc.context) / gib,
            color="red",
            lw=0.8,
            ls=":",
            label="capacity - context",
        )
    first = fc.first_restart
    if first is not None:
        ax.axvline(first.iteration, color="black", lw=1, label=f"restart at {first.iteration}")
    ax.set_xlabel("iteration")
    ax.set_ylabel("GiB")
    ax.set_title(title or "peak memory forecast")
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(alpha=0.3)
    out = Path(path)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
