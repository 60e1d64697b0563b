"""The plan Gantt stays readable at 16 and 64 GPUs: a bounded height, a time axis on
every panel, an id on every task box wide enough for it (the rest in the key). The
PNGs are kept under test-artifacts/ to be looked at."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.font_manager import FontProperties
from support import ROOT

from slurm_mig.gantt import DPI, FONT_SIZES, KEY_COLS, KEY_LINES, MAX_HEIGHT_IN, gantt_figure
from slurm_mig.geometry import get_model
from slurm_mig.planner import Batch
from slurm_mig.planner.far_planner import plan_far
from slurm_mig.workload import generate

A100 = get_model("A100-40GB")
ARTIFACTS = Path(os.environ.get("SLURM_MIG_ARTIFACTS", ROOT / "test-artifacts"))


def _plan(gpus: int):
    return plan_far(Batch(tuple(generate(5 * gpus, A100, seed=1)), A100, gpus))


@pytest.fixture(scope="module", params=[16, 64])
def drawn(request):
    plan = _plan(request.param)
    fig = gantt_figure(plan)
    FigureCanvasAgg(fig)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    out = ARTIFACTS / f"gantt-{request.param}-gpus.png"
    fig.savefig(out)  # draws the figure: tick labels and extents are known after
    return plan, fig, out


def test_the_png_is_bounded_in_height(drawn):
    plan, fig, out = drawn
    width, height = struct.unpack(">II", out.read_bytes()[16:24])
    assert height <= MAX_HEIGHT_IN * DPI and fig.get_figheight() <= MAX_HEIGHT_IN
    assert height < 9129 / 2  # the old drawing of 16 GPUs: 9,129 px
    assert width == round(fig.get_figwidth() * DPI)


def test_every_panel_has_a_time_axis_and_names_its_gpus(drawn):
    plan, fig, _ = drawn
    names = []
    for ax in fig.axes:
        assert [t.get_text() for t in ax.get_xticklabels() if t.get_text()], "no time labels"
        assert all(t.get_visible() for t in ax.get_xticklabels())
        names += [t.get_text() for t in ax.get_yticklabels()]
    assert names == [f"GPU {g}" for g in range(plan.gpus)]


def test_every_task_wide_enough_has_its_id_inside_its_box(drawn):
    plan, fig, _ = drawn
    renderer = fig.canvas.get_renderer()
    boxes, labels = {}, {}
    for ax in fig.axes:
        for p in ax.patches:
            if (p.get_gid() or "").startswith("task-"):
                boxes[p.get_gid()[5:]] = p.get_window_extent(renderer)
        for t in ax.texts:
            if (t.get_gid() or "").startswith("label-"):
                labels[t.get_gid()[6:]] = t.get_window_extent(renderer)
    keyed = {t.get_gid()[4:] for t in fig.texts if (t.get_gid() or "").startswith("key-")}
    assert set(boxes) == {t.id for t in plan.tasks}
    font = FontProperties(size=min(FONT_SIZES))
    pt = DPI / 72
    for tid, box in boxes.items():
        # measured by the renderer: the id at the smallest size, and a line's height
        w, _, _ = renderer.get_text_width_height_descent(tid, font, ismath=False)
        need_w, need_h = w + 3 * pt, 1.25 * min(FONT_SIZES) * pt
        roomy = (box.width >= need_w and box.height >= need_h) or (
            box.height >= need_w and box.width >= need_h
        )
        if roomy:
            assert tid in labels, f"{tid}: {box.width:.0f} x {box.height:.0f} px, no label"
        if tid in labels:  # inside its box, a pixel or two of slack for antialiasing
            lab = labels[tid]
            assert lab.x0 >= box.x0 - 1 and lab.x1 <= box.x1 + 1, tid
            assert lab.y0 >= box.y0 - 2 and lab.y1 <= box.y1 + 2, tid
    unlabelled = [tid for tid in boxes if tid not in labels]
    if len(unlabelled) <= KEY_COLS * KEY_LINES:
        assert set(unlabelled) == keyed
    else:  # the key is full: it says how many more
        assert len(keyed) == KEY_COLS * KEY_LINES
        assert any("more" in t.get_text() for t in fig.texts)
    assert labels, "no task labelled at all"
