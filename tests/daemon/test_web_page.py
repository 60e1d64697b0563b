"""The daemon's web page drawn from a fixed state of two GPU model groups: a Gantt per
group, a "now" line between what ran and what is planned, panels named as the tables
name the GPUs; its screenshot in headless Chromium kept under test-artifacts/."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from support import ROOT
from support import squeue_job as job

from slurm_mig.daemon.statusview import build_view
from slurm_mig.daemon.web import WebState, gantt_svg, gantt_views, page_html
from slurm_mig.gantt import gantt_figure

NOW = 1_700_000_000.0
ARTIFACTS = Path(os.environ.get("SLURM_MIG_ARTIFACTS", ROOT / "test-artifacts"))


def _inst(profile, start, size, job_id):
    return {"profile": profile, "placement": {"start": start, "size": size}, "job": job_id}


def _rec(node, gpu, profile, placement, state, start, end):
    return {"node": node, "gpu": gpu, "profile": profile, "placement": placement,
            "state": state, "start": start, "end": end}  # fmt: skip


def fixture_state():
    """Two A100s on node1 and an A30 on node2: jobs that ran, run and are planned."""
    status = {
        "policy": "adaptive",
        "state": [
            {
                "gpu_model": "A100-40GB",
                "gpus": [
                    {"node": "node1", "local": 0, "instances": [_inst("3g.20gb", 0, 4, "11")]},
                    {"node": "node1", "local": 1, "instances": [_inst("4g.20gb", 0, 4, "14")]},
                ],
            },
            {
                "gpu_model": "A30-24GB",
                "gpus": [
                    {"node": "node2", "local": 0, "instances": [_inst("2g.12gb", 0, 2, "21")]},
                ],
            },
        ],  # fmt: skip
        "projected": {
            "11": _rec("node1", 0, "3g.20gb", [0, 4], "running", NOW - 300, NOW + 200),
            "14": _rec("node1", 1, "4g.20gb", [0, 4], "running", NOW - 120, NOW + 420),
            "12": _rec("node1", 1, "3g.20gb", [4, 4], "planned", NOW + 60, NOW + 700),
            "13": _rec("node1", 0, "4g.20gb", [4, 4], "planned", NOW + 30, NOW + 500),
            "21": _rec("node2", 0, "2g.12gb", [0, 2], "running", NOW - 500, NOW + 100),
            "22": _rec("node2", 0, "1g.6gb", [2, 1], "planned", NOW + 10, NOW + 400),
            "23": _rec("node2", 0, "1g.6gb", [3, 1], "planned", NOW + 120, NOW + 260),
        },
    }
    state = WebState()
    # jobs that ran and left: one per group
    state.update({"5": _rec("node1", 1, "1g.5gb", [6, 1], "running", NOW - 900, None)}, NOW - 900)
    state.update({"6": _rec("node2", 0, "2g.12gb", [2, 2], "running", NOW - 800, None)}, NOW - 800)
    state.update({}, NOW - 350)
    state.update(status["projected"], NOW)
    running = {"11", "14", "21"}
    jobs = [
        job(j, state="RUNNING" if j in running else "PENDING", nodes="node1", start_time=NOW - 60)
        for j in status["projected"]
    ]
    return status, state, jobs


def _page():
    status, state, jobs = fixture_state()
    views = gantt_views(status, dict(state.ran), NOW)
    svg = gantt_svg(views)
    return views, svg, page_html(build_view(status, jobs, {}, NOW), svg).decode()


def test_every_model_group_has_its_chart_and_the_jobs_it_ran_and_plans():
    views, _, page = _page()
    assert [v.plan.model.name for v in views] == ["A100-40GB", "A30-24GB"]
    assert {t.id for t in views[0].plan.tasks} == {"5", "11", "12", "13", "14"}
    assert {t.id for t in views[1].plan.tasks} == {"6", "21", "22", "23"}
    assert page.count("<svg") == 2
    assert "A100-40GB: what ran and what is planned" in page
    assert "A30-24GB: what ran and what is planned" in page


def test_panels_are_named_as_the_tables_name_the_gpus():
    views, _, page = _page()
    tables = re.findall(r"<h2>(\S+ gpu \d+) · ", page)
    assert tables == ["node1 gpu 0", "node1 gpu 1", "node2 gpu 0"]
    assert [n for v in views for n in v.names] == tables
    for name in tables:  # the SVG's text is drawn as glyphs: the name is its comment
        assert f"<!-- {name} -->" in page
    assert "GPU 0" not in page and "GPU 1" not in page


def test_the_now_line_parts_what_ran_from_what_is_planned():
    views, svg, page = _page()
    v = views[0]
    assert v.now == pytest.approx(900.0)  # from the first start shown, job 5 at NOW - 900
    fig = gantt_figure(v.plan, gpu_names=v.names, now=v.now, clock=v.clock, bounds=False)
    lines = [ln for ax in fig.axes for ln in ax.lines if (ln.get_gid() or "").startswith("now")]
    assert len(lines) == len(fig.axes) == 2
    assert all(list(ln.get_xdata()) == [v.now, v.now] for ln in lines)
    # in the SVG: at the x of now on the panel's axis (SVG units are points)
    fig.canvas.draw()
    ax = fig.axes[0]
    want = ax.transData.transform((v.now, 0))[0] * 72 / fig.dpi
    block = page[page.index('<g id="now-0">') :]
    x = float(re.search(r'd="M ([\d.]+) ', block).group(1))
    assert x == pytest.approx(want, abs=0.5)
    # job 11 ran until now and is planned after: two parts; 12 is only planned; 5 only ran
    for part in ("task-11", "task-11-planned", "task-12-planned", "task-5"):
        assert f'id="{part}"' in page, part
    assert 'id="task-12"' not in page and 'id="task-5-planned"' not in page


def test_no_chart_before_anything_started():
    status, _, _ = fixture_state()
    status["projected"] = {}
    assert gantt_views(status, {}, NOW) == []


def test_screenshot_of_the_page_in_headless_chromium(tmp_path):
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("chromium is not installed")
    _, _, page = _page()
    html = tmp_path / "page.html"
    html.write_text(page)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    # the first screen as an operator opens it, and the whole page (every group)
    for name, size in (("web-view-fixture.png", "1400,1000"), ("web-view-fixture-full.png",
                                                              "1400,2600")):  # fmt: skip
        shot = ARTIFACTS / name
        shot.unlink(missing_ok=True)
        run = subprocess.run(
            [browser, "--headless", "--no-sandbox", "--disable-gpu",
             "--disable-background-networking", "--disable-component-update",
             "--disable-sync", "--no-first-run", f"--user-data-dir={tmp_path / name}",
             f"--screenshot={shot}", f"--window-size={size}", html.as_uri()],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert shot.exists() and shot.stat().st_size > 10_000, run.stderr[-2000:]
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
