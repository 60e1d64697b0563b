"""Gantt chart of a plan, in the style of Fig. 12 of the FAR paper.

Up to `DETAIL_GPUS` GPUs, one panel per GPU: time in seconds across, compute slices
S0.. down. More GPUs make an overview: one row per GPU, each compute slice a thin lane,
`PANEL_GPUS` or more GPUs a panel, so that the figure's height stays under
`MAX_HEIGHT_IN` at any GPU count. Every panel has its own time axis. Each task is a
box over its compute slices for [start, end], labelled with its id where the id fits;
the ids that do not fit are listed in a key under the panels. A strip above the slices shows the
GPU's reconfiguration channel (create in cyan, destroy in red; they run one at a
time per GPU), and the same colours mark, faintly, the slices of the instance being
created or destroyed. A compute slice that an instance blocks without computing on
it (S3 under a 3g instance at placement 0) is hatched grey while the instance
exists. The makespan is a solid line and the lower bound a dashed one. Given ``now``
(the web page), a "now" line parts what ran (solid) from what is planned (faded and
hatched).

matplotlib is imported here only, inside ``draw_gantt``, with the Agg canvas.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .geometry import Slot
from .plan import Plan, PlanError, PlannedTask

CREATE = "#00bcd4"  # cyan
DESTROY = "#e53935"  # red
BLOCKED = "#9e9e9e"
STRIP = (-0.95, -0.25)  # y-range of the reconfiguration strip (slices are at y = s .. s+1)
GAP = 0.35  # y-units between a GPU's last slice and the next GPU's strip (overview)
DETAIL_GPUS = 4  # up to this many GPUs: a panel per GPU with its slices named
PANEL_GPUS = 8  # the overview: GPUs per panel, more when there would be > MAX_PANELS
MAX_PANELS = 8
ROW_IN = 0.42  # a compute slice's height where the figure has room
WIDTH_IN = 13.0
DPI = 150
HEAD_IN = 1.05  # title and legend
AXIS_IN = 0.45  # under each panel: its time axis
MAX_BODY_IN = 17.0  # the panels themselves, at any GPU count
KEY_COLS, KEY_LINES = 6, 50  # the key of tasks too small to label
KEY_LINE_IN = 0.1
MAX_HEIGHT_IN = HEAD_IN + MAX_BODY_IN + MAX_PANELS * AXIS_IN + 0.3 + KEY_LINES * KEY_LINE_IN + 0.5
FONT_SIZES = (8, 7, 6, 5, 4.5)  # a label's sizes, largest first, in points
PLANNED_ALPHA = 0.45
LEFT_IN, RIGHT_IN = 1.05, 0.2  # beside the panels: GPU names; a margin
AXIS_W_IN = WIDTH_IN - LEFT_IN - RIGHT_IN


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


def gpu_label(names: Sequence[str] | None, gpu: int) -> str:
    """The name a GPU goes by: ``names[gpu]`` (the web page: "node2 gpu 0") or "GPU n"."""
    return names[gpu] if names is not None and gpu < len(names) else f"GPU {gpu}"


@lru_cache(maxsize=4096)
def _text_width_pt(text: str) -> float:
    """Width of ``text`` at 1 pt, from its glyph outlines (the default sans font)."""
    from matplotlib.textpath import TextPath

    return TextPath((0, 0), text, size=10).get_extents().width / 10


def label_fits(text: str, w_in: float, h_in: float) -> tuple[float, int] | None:
    """The largest font size (and rotation) at which ``text`` fits a w x h inch box."""
    width = _text_width_pt(text)
    for size in FONT_SIZES:
        text_in = (width * size + 3) / 72
        line_in = size * 1.25 / 72
        if text_in <= w_in and line_in <= h_in:
            return size, 0
        if text_in <= h_in and line_in <= w_in:
            return size, 90
    return None


def _layout(plan: Plan) -> tuple[list[list[int]], float, bool]:
    """GPUs per panel, inches per y-unit, and whether each panel is one GPU in detail."""
    gpus, slices = plan.gpus, plan.model.compute_slices
    if gpus <= DETAIL_GPUS:
        return [[g] for g in range(gpus)], ROW_IN, True
    panels = min(MAX_PANELS, math.ceil(gpus / PANEL_GPUS))
    per = math.ceil(gpus / panels)
    groups = [list(range(g, min(g + per, gpus))) for g in range(0, gpus, per)]
    pitch = slices + 1 + GAP
    return groups, min(ROW_IN, MAX_BODY_IN / (gpus * pitch)), False


def _horizon(plan: Plan, bounds: bool, now: float | None) -> float:
    """The last time the chart shows: the makespan, the bound, the last operation or now."""
    end_of_ops = max((r.end for r in plan.reconfigurations), default=0.0)
    return max(plan.makespan, plan.lower_bound if bounds else 0.0, end_of_ops, now or 0.0, 1e-9)


@dataclass(frozen=True)
class _Frame:
    """The panels' layout: the GPUs of each, their heights and the axes' scales."""

    groups: list[list[int]]
    heights: list[float]
    unit_in: float  # inches per y-unit (a compute slice)
    detail: bool  # each panel one GPU in detail
    pitch: float  # y-units from one GPU to the next in the overview
    xmax: float


def _frame(plan: Plan, xmax: float) -> _Frame:
    """Lay out the panels of ``plan`` for a time axis up to ``xmax``."""
    slices = plan.model.compute_slices
    groups, unit_in, detail = _layout(plan)
    pitch = slices + 1 + GAP
    heights = [
        len(g) * pitch * unit_in if not detail else (slices + 1.05) * unit_in for g in groups
    ]
    return _Frame(groups, heights, unit_in, detail, pitch, xmax)


def _fit_labels(
    order: Sequence[PlannedTask], x_per_in: float, unit_in: float
) -> tuple[dict[str, tuple[float, int]], list[PlannedTask]]:
    """Each task's label size where its id fits its box, and the tasks (for the key) where not."""
    labels, unlabelled = {}, []
    for t in order:
        fit = label_fits(t.id, (t.end - t.start) / x_per_in, len(t.slot.slices) * unit_in)
        if fit is None:
            unlabelled.append(t)
        else:
            labels[t.id] = fit
    return labels, unlabelled


def _key_height(unlabelled: int) -> float:
    """Inches the key of ``unlabelled`` tasks takes under the panels (0 for none)."""
    key_lines = min(KEY_LINES, math.ceil(unlabelled / KEY_COLS))
    return 0.3 + key_lines * KEY_LINE_IN if unlabelled else 0.0


def _title(plan: Plan, title: str | None, bounds: bool) -> str:
    """The figure's title: ``title`` or the planner, GPUs and model; the bounds under it."""
    if title is None:
        gpus = "one" if plan.gpus == 1 else str(plan.gpus)
        title = f"{plan.planner} plan on {gpus} {plan.model.name}"
    if bounds:
        rho = f"{plan.rho:.3f}" if math.isfinite(plan.rho) else "inf"
        title += (
            f"\nmakespan {plan.makespan:.3f} s, lower bound {plan.lower_bound:.3f} s, "
            f"\u03c1 = {rho}, {len(plan.reconfigurations)} reconfigurations"
        )
    return title


def _legend_handles(now: float | None, bounds: bool) -> list:
    """The legend's entries: operations and memory-only slices, then what is drawn."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [
        Patch(facecolor=CREATE, label="create instance"),
        Patch(facecolor=DESTROY, label="destroy instance"),
        Patch(facecolor="#f2f2f2", edgecolor=BLOCKED, hatch="////", label="memory-only slice"),
    ]
    if now is not None:
        handles += [
            Patch(facecolor="#607d8b", label="ran"),
            Patch(
                facecolor="#607d8b",
                alpha=PLANNED_ALPHA,
                edgecolor="white",
                hatch="////",
                label="planned",
            ),  # fmt: skip
            Line2D([], [], color="#212121", lw=1.8, label="now"),
        ]
    if bounds:
        handles += [
            Line2D([], [], color="black", lw=1.4, label="makespan"),
            Line2D([], [], color="black", lw=1.1, ls=(0, (4, 3)), label="lower bound"),
        ]
    return handles


def gantt_figure(
    plan: Plan,
    title: str | None = None,
    gpu_names: Sequence[str] | None = None,
    now: float | None = None,
    clock: float | None = None,
    bounds: bool = True,
):
    """The Gantt chart of ``plan`` as a matplotlib Figure (Agg-free; no pyplot).

    ``gpu_names``: a name per GPU for the panels. ``now`` (plan time): a "now" line, and
    every box's part after it drawn as planned. ``clock``: the epoch of time 0, for
    wall-clock tick labels. ``bounds``: draw the makespan and lower bound lines.
    """
    from matplotlib.figure import Figure

    horizon = _horizon(plan, bounds, now)
    frame = _frame(plan, horizon * 1.02)
    order = sorted(plan.tasks, key=lambda t: (t.start, t.gpu, t.slot.placement.start))
    lifetimes = instance_lifetimes(plan, horizon)
    # the labels first: what does not fit goes to the key, whose height the figure needs
    labels, unlabelled = _fit_labels(order, frame.xmax / AXIS_W_IN, frame.unit_in)
    key_in = _key_height(len(unlabelled))
    fig_h = HEAD_IN + sum(frame.heights) + len(frame.groups) * AXIS_IN + key_in + 0.2
    fig = Figure(figsize=(WIDTH_IN, fig_h), dpi=DPI)
    top_in = _draw_panels(
        fig, plan, frame, fig_h, order, labels, lifetimes, gpu_names, now, clock, bounds
    )
    if unlabelled:
        _key(fig, unlabelled, gpu_names, 1 - (top_in + 0.02) / fig_h, fig_h)
    fig.suptitle(_title(plan, title, bounds), fontsize=10, y=1 - 0.08 / fig_h, va="top")
    handles = _legend_handles(now, bounds)
    fig.legend(
        handles=handles,
        loc="upper center",
        ncol=len(handles),
        fontsize=8,
        frameon=False,
        bbox_to_anchor=(0.5, 1 - 0.62 / fig_h),
    )
    return fig


def _draw_panels(
    fig,
    plan: Plan,
    frame: _Frame,
    fig_h: float,
    order: Sequence[PlannedTask],
    labels: dict[str, tuple[float, int]],
    lifetimes: list[tuple[int, Slot, float, float]],
    gpu_names: Sequence[str] | None,
    now: float | None,
    clock: float | None,
    bounds: bool,
) -> float:
    """Every panel, top to bottom, with its tasks; return the inches down to the last axis."""
    colours = dict(zip((t.id for t in order), _palette(len(order))))
    per_gpu_tasks = defaultdict(list)
    for t in order:
        per_gpu_tasks[t.gpu].append(t)
    fmt = _clock_formatter(clock)
    top_in = HEAD_IN
    for k, (group, h_in) in enumerate(zip(frame.groups, frame.heights)):
        ax = fig.add_axes(
            (LEFT_IN / WIDTH_IN, 1 - (top_in + h_in) / fig_h, AXIS_W_IN / WIDTH_IN, h_in / fig_h)
        )
        top_in += h_in + AXIS_IN
        _panel(
            ax,
            plan,
            group,
            frame.detail,
            frame.pitch,
            frame.xmax,
            lifetimes,
            gpu_names,
            frame.unit_in,
        )
        for j, gpu in enumerate(group):
            base = 0.0 if frame.detail else j * frame.pitch
            for t in per_gpu_tasks.get(gpu, []):
                _task(ax, t, base, colours[t.id], now, labels.get(t.id))
        _marks(ax, plan, k, now, bounds)
        ax.tick_params(axis="x", labelsize=8, labelbottom=True)
        if fmt is not None:
            ax.xaxis.set_major_formatter(fmt)
        if k == len(frame.groups) - 1:
            ax.set_xlabel("time" if clock is not None else "time (s)", fontsize=9)
    return top_in


def _clock_formatter(clock: float | None):
    """Wall-clock tick labels (H:M:S) for time 0 at epoch ``clock``; None for seconds."""
    from matplotlib.ticker import FuncFormatter

    if clock is None:
        return None
    return FuncFormatter(lambda x, _: time.strftime("%H:%M:%S", time.localtime(clock + x)))


def _marks(ax, plan: Plan, k: int, now: float | None, bounds: bool) -> None:
    """Panel ``k``'s vertical lines: the makespan and lower bound, and "now"."""
    if bounds:
        ax.axvline(plan.makespan, color="black", lw=1.4, zorder=6)
        if plan.lower_bound > 0 and math.isfinite(plan.lower_bound):
            ax.axvline(plan.lower_bound, color="black", lw=1.1, ls=(0, (4, 3)), zorder=6)
    if now is not None:
        ax.axvline(now, color="#212121", lw=1.8, zorder=7, gid=f"now-{k}")
        ax.text(now, 1.0, "now", transform=ax.get_xaxis_transform(), fontsize=7,
                va="bottom", ha="center", zorder=8, clip_on=False)  # fmt: skip


def draw_gantt(
    plan: Plan,
    path: str | Path,
    title: str | None = None,
    gpu_names: Sequence[str] | None = None,
    now: float | None = None,
    clock: float | None = None,
    bounds: bool = True,
) -> Path:
    """Draw ``plan`` to a PNG (an SVG where ``path`` ends in .svg); return the path.
    The options are `gantt_figure`'s."""
    fig = gantt_figure(plan, title, gpu_names, now, clock, bounds)
    out = Path(path)
    fig.savefig(out, format="svg" if out.suffix.lower() == ".svg" else "png")
    return out


def _panel(ax, plan, group, detail, pitch, xmax, lifetimes, gpu_names, unit_in) -> None:
    """One panel's frame: lanes, GPU names, reconfigurations, memory-only slices."""
    slices = plan.model.compute_slices
    last = 0.0 if detail else (len(group) - 1) * pitch
    ax.set_xlim(0, xmax)
    ax.set_ylim(last + slices + (0.0 if detail else GAP / 2), STRIP[0] - 0.1)
    ax.tick_params(axis="y", length=0)
    ax.grid(axis="x", color="#eeeeee", lw=0.6)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    if detail:
        _detail_lanes(ax, slices, gpu_label(gpu_names, group[0]))
    else:
        _overview_lanes(ax, group, slices, pitch, unit_in, gpu_names)
    row = {g: (0.0 if detail else j * pitch) for j, g in enumerate(group)}
    _blocked(ax, plan, lifetimes, row)
    _reconfigurations(ax, plan, row, xmax, detail)


def _detail_lanes(ax, slices: int, name: str) -> None:
    """One GPU's panel: the strip and each slice named on the y axis, lines between."""
    ax.set_yticks([sum(STRIP) / 2] + [s + 0.5 for s in range(slices)])
    ax.set_yticklabels(["reconf."] + [f"S{s}" for s in range(slices)], fontsize=8)
    ax.set_ylabel(name, fontsize=9)
    for s in range(slices + 1):
        ax.axhline(s, color="#e0e0e0", lw=0.6, zorder=0)
    ax.axhline(STRIP[1] + 0.12, color="#bdbdbd", lw=0.8, zorder=0)


def _overview_lanes(
    ax,
    group: Sequence[int],
    slices: int,
    pitch: float,
    unit_in: float,
    gpu_names: Sequence[str] | None,
) -> None:
    """An overview panel: a shaded band per GPU, named on the y axis."""
    size = max(4.0, min(8.0, pitch * unit_in * 72 * 0.7))
    ax.set_yticks([j * pitch + slices / 2 for j in range(len(group))])
    ax.set_yticklabels([gpu_label(gpu_names, g) for g in group], fontsize=size)
    for j in range(len(group)):
        base = j * pitch
        ax.axhspan(base, base + slices, color="#fafafa", lw=0, zorder=0)
        for s in (0, slices):
            ax.axhline(base + s, color="#d5d5d5", lw=0.5, zorder=0)


def _blocked(
    ax, plan: Plan, lifetimes: list[tuple[int, Slot, float, float]], row: dict[int, float]
) -> None:
    """Memory-only slices of the panel's GPUs, hatched while their instance exists."""
    from matplotlib.patches import Rectangle

    for g, slot, t0, t1 in lifetimes:
        if g not in row:
            continue
        for s in blocked_slices(plan, slot):
            ax.add_patch(
                Rectangle(
                    (t0, row[g] + s),
                    t1 - t0,
                    1,
                    facecolor="#f2f2f2",
                    edgecolor=BLOCKED,
                    hatch="////",
                    lw=0,
                    zorder=1,
                )
            )


def _reconfigurations(ax, plan: Plan, row: dict[int, float], xmax: float, detail: bool) -> None:
    """Reconfigurations of the panel's GPUs: the sequential channel strip, a tint on the slices."""
    from matplotlib.patches import Rectangle

    slices = plan.model.compute_slices
    min_w = xmax * 0.002  # keep sub-pixel operations visible in the strip
    for r in plan.reconfigurations:
        if r.gpu not in row:
            continue
        base = row[r.gpu]
        colour = CREATE if r.op == "create" else DESTROY
        ax.add_patch(
            Rectangle(
                (r.start, base + STRIP[0]),
                max(r.end - r.start, min_w),
                STRIP[1] - STRIP[0],
                facecolor=colour,
                edgecolor="white",
                lw=0.6 if detail else 0.2,
                zorder=3,
            )
        )
        p = r.slot.placement
        lo, hi = p.start, min(p.end, slices)
        ax.add_patch(
            Rectangle(
                (r.start, base + lo),
                r.end - r.start,
                hi - lo,
                facecolor=colour,
                alpha=0.35,
                edgecolor="none",
                zorder=2,
            )
        )


def _task(ax, t, base, rgb, now, fit) -> None:
    """A task's box (what ran solid, what is planned after ``now`` faded and hatched)
    and its id where it fits."""
    from matplotlib.patches import Rectangle

    lo, n = base + t.slot.slices[0], len(t.slot.slices)
    parts = [(t.start, t.end, False)]
    if now is not None and t.end > now:
        parts = [(t.start, now, False), (now, t.end, True)] if t.start < now else [
            (t.start, t.end, True)
        ]  # fmt: skip
    for a, b, planned in parts:
        ax.add_patch(
            Rectangle(
                (a, lo),
                b - a,
                n,
                facecolor=(*rgb, PLANNED_ALPHA) if planned else rgb,
                edgecolor="white",
                hatch="////" if planned else None,
                lw=0.8,
                zorder=4,
                gid=f"task-{t.id}-planned" if planned else f"task-{t.id}",
            )
        )
    if fit is None:
        return
    size, rotation = fit
    middle = (t.start + t.end) / 2
    if now is not None and middle >= now:  # on the faded part: the colour it shows
        rgb = tuple(PLANNED_ALPHA * c + (1 - PLANNED_ALPHA) for c in rgb)
    ax.text(
        middle,
        lo + n / 2,
        t.id,
        ha="center",
        va="center",
        rotation=rotation,
        fontsize=size,
        color=_text_colour(rgb),
        clip_on=True,
        zorder=5,
        gid=f"label-{t.id}",
    )


def _key(fig, tasks, gpu_names, top: float, fig_h: float) -> None:
    """The tasks too small to label, in columns under the panels: id, GPU, slices, times."""
    fig.text(
        0.012,
        top,
        "too small to label (id, GPU, slices, from-to s):",
        fontsize=7,
        va="top",
        weight="bold",
    )
    tasks = sorted(tasks, key=lambda t: (t.gpu, t.start, t.slot.slices[0]))
    shown = KEY_COLS * KEY_LINES
    lines = min(KEY_LINES, math.ceil(len(tasks) / KEY_COLS))
    col_w = (1 - 0.09) / KEY_COLS
    for i, t in enumerate(tasks[:shown]):
        col, line = divmod(i, lines)
        sl = t.slot.slices
        text = f"{t.id}  {gpu_label(gpu_names, t.gpu)} S{sl[0]}-{sl[-1]}  {t.start:.1f}-{t.end:.1f}"
        if i == shown - 1 and len(tasks) > shown:
            text = f"... and {len(tasks) - shown + 1} more"
        fig.text(
            0.08 + col * col_w,
            top - (0.2 + line * KEY_LINE_IN) / fig_h,
            text,
            fontsize=5.5,
            family="monospace",
            va="top",
            gid=f"key-{t.id}",
        )


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
