"""The daemon's read-only web page (``[planner] web = true``): a Gantt chart per GPU
model of what ran (solid) and what is planned (faded, hatched), parted by a "now" line,
its panels named as the tables name the GPUs (the Gantt drawing, as SVG), and the
status table,
refreshed every few seconds. Served by `slurm_mig.daemon.httpserver` on ``[planner] metrics``.

Built from the daemon's last cycle: its projections (`jobtimes.project_jobs`), the
jobs squeue showed and the nodes' records as they reported them. What
ran is remembered from cycle to cycle (a job that left the busy set ended then), at
most `HISTORY` jobs. It shows MIG UUIDs and job owners: off by default.
"""

from __future__ import annotations

import html
import json
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

REFRESH_S = 5
HISTORY = 500
RENDER_MIN_S = 2.0  # the page is drawn at most this often (and at most once a cycle)
RENDER_MAX_S = float(REFRESH_S)  # and again when this old, even without a new cycle
QUEUE_ROWS = 1000  # rows of the queue table (the page stays bounded at any queue)


class WebState:
    """What the page draws, kept between cycles: each job's GPU, slot and times."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ran: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self.cycle = -1
        self.svg: bytes = b""

    def update(self, projected: dict[str, dict[str, Any]], now: float) -> None:
        """Jobs running now are recorded; those that left since end now. The lock is
        held for this update only: the page copies under it and renders outside."""
        with self.lock:
            for job, rec in list(self.ran.items()):
                if job not in projected and rec["end"] is None:
                    rec["end"] = now
            for job, p in projected.items():
                if p.get("state") == "running":
                    keys = ("node", "gpu", "profile", "placement", "start", "region")
                    rec = {k: p.get(k) for k in keys}
                    self.ran[job] = {**self.ran.get(job, {}), **rec, "end": None}
            while len(self.ran) > HISTORY:
                self.ran.popitem(last=False)


@dataclass(frozen=True)
class GanttView:
    """One GPU model group's chart: its `Plan` (times from ``clock``), the panels' names
    as the tables give them ("node2 gpu 0") and "now" in the plan's time."""

    plan: Any
    names: tuple[str, ...]
    now: float
    clock: float


def gantt_views(
    status: dict[str, Any], ran: dict[str, dict[str, Any]], now: float
) -> list[GanttView]:
    """A chart per GPU model group, in the status's order: what ran (finished and
    running) and what is planned on its GPUs, times from the earliest start shown (the
    same origin for every group); empty when nothing has a start."""
    from ..geometry import Placement, Slot, get_model
    from ..plan import Plan, PlannedTask
    from ..safetext import printable
    from .statusview import SHORT

    groups = []
    where: dict[tuple[Any, Any], tuple[int, int]] = {}
    for g in status.get("state") or []:
        try:
            model = get_model(g["gpu_model"])
        except Exception:
            continue
        gpus = g.get("gpus") or []
        for i, gpu in enumerate(gpus):
            where.setdefault((gpu.get("node"), gpu.get("local")), (len(groups), i))
        names = tuple(
            f"{printable(str(gpu.get('node', '')), SHORT)} gpu {int(gpu.get('local', 0))}"
            for gpu in gpus
        )
        groups.append((model, names))
    if not where:
        return []
    projected = status.get("projected") or {}
    items = []
    for job, r in ran.items():
        if job not in projected:
            items.append((job, r, r.get("end") or now, True))
    for job, p in projected.items():
        end = p.get("end")
        items.append((job, p, end if end is not None else now, p.get("state") == "running"))
    starts = [r.get("start") for _, r, _, _ in items if r.get("start") is not None]
    if not starts:
        return []
    t0 = min(starts)
    tasks: list[list] = [[] for _ in groups]
    for job, r, end, running in items:
        at = where.get((r.get("node"), r.get("gpu")))
        if at is None or r.get("start") is None:
            continue
        model = groups[at[0]][0]
        try:
            # a job of several slices is drawn on its region (its label names the tasks)
            size = model.profile(r.get("region") or r["profile"]).compute_slices
            start, length = r["placement"]
            slot = Slot(Placement(start, length), size)
        except Exception:
            continue
        tasks[at[0]].append(
            PlannedTask(job, at[1], slot, r["start"] - t0, max(end, r["start"]) - t0, 0, running)
        )
    views = []
    for (model, names), shown in zip(groups, tasks):
        if not names:
            continue
        # the area bound of what is shown: its slice-seconds spread over every slice
        area = sum(t.slot.size * (t.end - t.start) for t in shown)
        bound = area / (model.compute_slices * len(names))
        plan = Plan(model, len(names), tuple(shown), (), bound, status.get("policy", ""))
        views.append(GanttView(plan, names, now - t0, t0))
    return views


def gantt_svg(views: list[GanttView]) -> bytes:
    """Every group's chart as SVG, one after another (the page inlines them)."""
    from ..gantt import draw_gantt

    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for k, v in enumerate(views):
            title = f"{v.plan.model.name}: what ran and what is planned"
            path = draw_gantt(
                v.plan,
                Path(tmp) / f"gantt{k}.svg",
                title=title,
                gpu_names=v.names,
                now=v.now,
                clock=v.clock,
                bounds=False,
            )
            text = path.read_bytes()
            out.append(text[text.find(b"<svg") :])
    return b"\n".join(out)


def _cell(x: object) -> str:
    return f"<td>{html.escape(str(x))}</td>"


def page_html(view, svg: bytes) -> bytes:
    """The page: header, Gantt chart (inline SVG), GPU tables and the queue."""
    from .statusview import ago as _ago
    from .statusview import left_text
    from .statusview import when as _when

    now = view.now
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<meta http-equiv='refresh' content='{REFRESH_S}'>",
        "<title>slurm-mig</title><style>body{font-family:sans-serif;margin:1em}"
        "table{border-collapse:collapse;margin:.3em 0 1em}td,th{border:1px solid #bbb;"
        "padding:2px 6px;font-size:13px}th{background:#eee}h2{font-size:15px;margin:.6em 0 0}"
        "svg{max-width:100%;height:auto}</style></head><body>",
        f"<h1>slurm-mig · cycle {view.cycle} at {html.escape(_ago(view.updated, now))} · "
        f"policy {html.escape(view.policy or '-')}</h1>",
    ]
    if view.error:
        parts.append(f"<p style='color:red'>last cycle failed: {html.escape(view.error)}</p>")
    parts.append("<div id='gantt'>")
    svg_text = svg.decode("utf-8", "replace")
    parts.append(svg_text[svg_text.find("<svg") :] if svg else "<p>nothing has run yet</p>")
    parts.append("</div>")
    for g in view.gpus:
        parts.append(
            f"<h2>{html.escape(g.node)} gpu {g.gpu} · {html.escape(g.model)} · busy {g.busy}/"
            f"{g.slices} slices · free {g.free} · largest free "
            f"{html.escape(g.largest_free or 'none')} · fragmentation {g.fragmentation:.2f}</h2>"
        )
        parts.append(
            "<table class='gpu'><tr><th>Profile</th><th>Placement</th><th>UUID</th><th>Job</th>"
            "<th>User</th><th>Since</th><th>Left</th></tr>"
        )
        for i in g.instances:
            left = left_text(i.drift)
            parts.append(
                f"<tr class='job' data-job='{html.escape(i.job)}'>"
                + _cell(i.profile)
                + _cell(f"{i.placement[0]}:{i.placement[1]}")
                + _cell(i.uuid or "-")
                + _cell(i.job or i.note)
                + _cell(i.user or "-")
                + _cell(_ago(i.since, now) if i.since else "-")
                + _cell(left)
                + "</tr>"
            )
        parts.append("</table>")
    parts.append(
        "<h2>Queue</h2><table id='queue'><tr><th>Job</th><th>User</th><th>Name</th>"
        "<th>State</th><th>Node</th><th>GPU</th><th>Profile</th><th>Start</th><th>Why</th></tr>"
    )
    for r in view.queue[:QUEUE_ROWS]:
        why = r.why
        if not why and r.free_at is not None:
            why = f"slices busy until {time.strftime('%H:%M:%S', time.localtime(r.free_at))}"
        parts.append(
            "<tr>"
            + "".join(
                _cell(x)
                for x in (
                    r.job,
                    r.user or "-",
                    r.name or "-",
                    r.state,
                    r.node or "-",
                    "-" if r.gpu is None else r.gpu,
                    r.profile or "-",
                    _when(r.start, now),
                    why,
                )
            )
            + "</tr>"
        )
    if len(view.queue) > QUEUE_ROWS:
        parts.append(f"<tr><td colspan='9'>and {len(view.queue) - QUEUE_ROWS} more</td></tr>")
    parts.append("</table></body></html>")
    return "".join(parts).encode()


class WebSource(Protocol):
    """What the page reads of the daemon (a `PlannerDaemon` is one): its config, its last
    cycle's report and the jobs squeue showed then."""

    config: Any
    last_report: Any  # `cyclereport.CycleReport` or None
    last_jobs: list


def pages(
    daemon: WebSource, state: WebState, monotonic: Callable[[], float] = time.monotonic
) -> dict[str, Any]:
    """The web routes of ``daemon``, with ``state`` the history the cycle keeps for the
    page (`WebState.update`). Both are built together from
    the daemon's last cycle by one thread at a time (`serve.Cached`), at most every
    `RENDER_MIN_S` seconds and again after `RENDER_MAX_S` (the "ago" of the header); the
    Gantt is drawn once a cycle at most, outside the lock the cycle takes: the cycle never
    waits for a page, and any number of clients cost one drawing a cycle."""
    from .httpserver import Cached
    from .receiver import node_records

    drawn: dict[str, Any] = {"cycle": None, "svg": b""}  # Cached's one thread at a time

    def render() -> tuple[bytes, bytes]:
        from .statusview import build_view

        report = daemon.last_report
        status = report.to_json() if report is not None else {}
        view = build_view(status, daemon.last_jobs, node_records(daemon.config), time.time())
        if drawn["cycle"] is not report:
            with state.lock:  # the cycle's `update` waits for this copy only
                ran = {job: dict(rec) for job, rec in state.ran.items()}
            views = [v for v in gantt_views(status, ran, view.now) if v.plan.tasks]
            drawn["svg"] = gantt_svg(views) if views else b""
            drawn["cycle"] = report
        return page_html(view, drawn["svg"]), json.dumps(view.to_json()).encode()

    built = Cached(
        render,
        lambda: daemon.last_report,
        min_age=RENDER_MIN_S,
        max_age=RENDER_MAX_S,
        monotonic=monotonic,
    )

    def index() -> tuple[str, bytes]:
        return "text/html; charset=utf-8", built()[0]

    def status_json() -> tuple[str, bytes]:
        return "application/json", built()[1]

    return {"/": index, "/status.json": status_json}
