"""Gantt chart of a plan, in the style of Fig. 12 of the FAR paper.

One panel per GPU: time in seconds across, compute slices S0.. down. Each task is a
box over its compute slices for [start, end]. A strip above the slices shows the
GPU's reconfiguration channel (create in cyan, destroy in red; they run one at a
time per GPU), and the same colours mark, faintly, the slices of the instance being
created or destroyed. A compute slice that an instance blocks without computing on
it (S3 under a 3g instance at placement 0) is hatched grey while the instance
exists. The makespan is a solid line and the lower bound a dashed one.

matplotlib is imported here only, inside ``draw_gantt``, with the Agg canvas.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

from .geometry import Slot
from .plan import Plan, PlanError

CREATE = "#00bcd4"  # cyan
DESTROY = "#e53935"  # red
BLOCKED = "#9e9e9e"
STRIP = (-0.95, -0.25)  # y-range of the reconfiguration strip (slices are at y = s .. s+1)


def _palette(n: int) -> list[tuple[float, float, float]]:
    """n distinguishable colours; neighbours in start order get different hues."""
    from matplotlib import colormaps

    # tab20 without its red, grey and cyan pairs, which mean destroy, memory-only, create
    tab20 = colormaps["tab20"]
    base = [tab20(i)[:3] for i in (0, 2, 4, 8, 10, 12, 16)]
    base += [tab20(i)[:3] for i in (1, 3, 5, 9, 11, 13, 17)]
    base += [colormaps["tab20b"](i)[:3] for i in range(20)]
    return [base[i % len(base)] for i in range(n)]


def _text_colour(rgb: tuple[float, float, float]) -> str:
    r, g, b = rgb
    return "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "white"


def instance_lifetimes(plan: Plan, until: float) -> list[tuple[int, Slot, float, float]]:
    """(gpu, slot, from, to) for every instance: from its create to its destroy.

    Instances the plan starts with live from time 0; instances never destroyed
    live until ``until``.
    """
    live: dict[tuple[int, Slot], float] = {}
    for gpu, slot in plan.initial_instances:
        live[(gpu, slot)] = 0.0
    out = []
    for r in sorted(plan.reconfigurations, key=lambda r: (r.start, r.end)):
        key = (r.gpu, r.slot)
        if r.op == "create":
            live[key] = r.start
        elif key in live:
            out.append((r.gpu, r.slot, live.pop(key), r.end))
    out.extend((gpu, slot, t0, until) for (gpu, slot), t0 in live.items())
    return out


def blocked_slices(plan: Plan, slot: Slot) -> range:
    """Compute slices an instance holds in memory but does not compute on."""
    p = slot.placement
    return range(p.start + slot.size, min(p.end, plan.model.compute_slices))


def draw_gantt(plan: Plan, path: str | Path, title: str | None = None) -> Path:
    """Draw ``plan`` to a PNG (an SVG where ``path`` ends in .svg); return the path."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch, Rectangle

    model = plan.model
    slices = model.compute_slices
    makespan = plan.makespan
    end_of_ops = max((r.end for r in plan.reconfigurations), default=0.0)
    horizon = max(makespan, plan.lower_bound, end_of_ops, 1e-9)
    xmax = horizon * 1.02

    width_in = 13.0
    row_in = 0.42
    panel_in = (slices + 1) * row_in + 0.35
    head_in = 1.05
    fig = Figure(figsize=(width_in, head_in + plan.gpus * panel_in + 0.45), dpi=150)
    axes = fig.subplots(plan.gpus, 1, sharex=True, squeeze=False)[:, 0]
    top = 1 - head_in / fig.get_figheight()
    fig.subplots_adjust(left=0.075, right=0.985, top=top, bottom=0.5 / fig.get_figheight())
    axis_w_in = width_in * (0.985 - 0.075)

    order = sorted(plan.tasks, key=lambda t: (t.start, t.gpu, t.slot.placement.start))
    colours = dict(zip((t.id for t in order), _palette(len(order))))
    lifetimes = instance_lifetimes(plan, horizon)

    per_gpu_tasks = defaultdict(list)
    for t in order:
        per_gpu_tasks[t.gpu].append(t)

    for gpu, ax in enumerate(axes):
        ax.set_xlim(0, xmax)
        ax.set_ylim(slices, STRIP[0] - 0.1)  # S0 at the top, the strip above it
        ax.set_yticks([sum(STRIP) / 2] + [s + 0.5 for s in range(slices)])
        ax.set_yticklabels(["reconf."] + [f"S{s}" for s in range(slices)], fontsize=8)
        ax.tick_params(axis="y", length=0)
        for s in range(slices + 1):
            ax.axhline(s, color="#e0e0e0", lw=0.6, zorder=0)
        ax.axhline(STRIP[1] + 0.12, color="#bdbdbd", lw=0.8, zorder=0)
        ax.set_ylabel(f"GPU {gpu}", fontsize=9)
        ax.grid(axis="x", color="#eeeeee", lw=0.6)
        ax.set_axisbelow(True)

        # memory-only slices, hatched while their instance exists
        for g, slot, t0, t1 in lifetimes:
            if g != gpu:
                continue
            for s in blocked_slices(plan, slot):
                ax.add_patch(
                    Rectangle(
                        (t0, s),
                        t1 - t0,
                        1,
                        facecolor="#f2f2f2",
                        edgecolor=BLOCKED,
                        hatch="////",
                        lw=0,
                        zorder=1,
                    )
                )

        # reconfigurations: the sequential channel strip, and a tint on the slices
        min_w = xmax * 0.002  # keep sub-pixel operations visible in the strip
        for r in plan.reconfigurations:
            if r.gpu != gpu:
                continue
            colour = CREATE if r.op == "create" else DESTROY
            ax.add_patch(
                Rectangle(
                    (r.start, STRIP[0]),
                    max(r.end - r.start, min_w),
                    STRIP[1] - STRIP[0],
                    facecolor=colour,
                    edgecolor="white",
                    lw=0.6,
                    zorder=3,
                )
            )
            p = r.slot.placement
            lo, hi = p.start, min(p.end, slices)
            ax.add_patch(
                Rectangle(
                    (r.start, lo),
                    r.end - r.start,
                    hi - lo,
                    facecolor=colour,
                    alpha=0.35,
                    edgecolor="none",
                    zorder=2,
                )
            )

        # tasks
        x_per_in = xmax / axis_w_in
        for t in per_gpu_tasks.get(gpu, []):
            lo, n = t.slot.slices[0], len(t.slot.slices)
            rgb = colours[t.id]
            ax.add_patch(
                Rectangle(
                    (t.start, lo),
                    t.end - t.start,
                    n,
                    facecolor=rgb,
                    edgecolor="white",
                    lw=0.8,
                    zorder=4,
                )
            )
            _label(ax, t.id, t.start, t.end, lo, n, x_per_in, row_in, rgb)

        ax.axvline(makespan, color="black", lw=1.4, zorder=6)
        if plan.lower_bound > 0 and math.isfinite(plan.lower_bound):
            ax.axvline(plan.lower_bound, color="black", lw=1.1, ls=(0, (4, 3)), zorder=6)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)

    axes[-1].set_xlabel("time (s)", fontsize=9)
    for ax in axes:
        ax.tick_params(axis="x", labelsize=8)

    if title is None:
        gpus = "one" if plan.gpus == 1 else str(plan.gpus)
        title = f"{plan.planner} plan on {gpus} {model.name}"
    rho = f"{plan.rho:.3f}" if math.isfinite(plan.rho) else "inf"
    fig.suptitle(
        f"{title}\nmakespan {makespan:.3f} s, lower bound {plan.lower_bound:.3f} s, "
        f"\u03c1 = {rho}, {len(plan.reconfigurations)} reconfigurations",
        fontsize=10,
        y=1 - 0.08 / fig.get_figheight(),
        va="top",
    )
    handles = [
        Patch(facecolor=CREATE, label="create instance"),
        Patch(facecolor=DESTROY, label="destroy instance"),
        Patch(facecolor="#f2f2f2", edgecolor=BLOCKED, hatch="////", label="memory-only slice"),
        Line2D([], [], color="black", lw=1.4, label="makespan"),
        Line2D([], [], color="black", lw=1.1, ls=(0, (4, 3)), label="lower bound"),
    ]
    fig.legend(
        handles=handles,
        loc="upper center",
        ncol=len(handles),
        fontsize=8,
        frameon=False,
        bbox_to_anchor=(0.5, 1 - 0.62 / fig.get_figheight()),
    )
    out = Path(path)
    fig.savefig(out, format="svg" if out.suffix.lower() == ".svg" else "png")
    return out


def _label(ax, text, start, end, lo, n, x_per_in, row_in, rgb) -> None:
    """Write the task id in its box when it fits, across or upright."""
    w_in = (end - start) / x_per_in
    h_in = n * row_in
    for size in (8, 7, 6, 5):
        text_in = len(text) * size * 0.62 / 72 + 0.06
        line_in = size * 1.3 / 72
        if text_in <= w_in and line_in <= h_in:
            rotation = 0
        elif text_in <= h_in and line_in <= w_in:
            rotation = 90
        else:
            continue
        ax.text(
            (start + end) / 2,
            lo + n / 2,
            text,
            ha="center",
            va="center",
            rotation=rotation,
            fontsize=size,
            color=_text_colour(rgb),
            clip_on=True,
            zorder=5,
        )
        return


def write_gantt(plan: Plan, path: str | Path, title: str | None = None) -> Path:
    """Draw ``plan`` to ``path``; PlanError (one line) when matplotlib is missing."""
    out = Path(path)
    try:
        draw_gantt(plan, out, title=title)
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] != "matplotlib":
            raise
        raise PlanError("Gantt charts need matplotlib; pip install matplotlib") from None
    return out
