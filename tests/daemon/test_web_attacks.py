"""Issue 18, hole 4: clients of the web page must not stall planning. The daemon's cycle
calls `WebState.update` once a cycle; the page (`web.pages`) draws the Gantt of up to
`web.HISTORY` jobs, which takes a second or more. Here 8 clients load the page without
pause while a "cycle" updates the state: the update never waits for a render, and the
Gantt is drawn at most once a cycle however many clients ask."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest
from cyclesite import NOW, observed_cycle, planned_jobs

from slurm_mig.daemon import receiver, web


def _history(state: web.WebState, jobs: int) -> None:
    """``jobs`` finished jobs in the page's memory, on both GPUs' seven 1g slots."""
    for i in range(jobs):
        slot = i % 14
        rec = {
            "state": "running",
            "node": "gpu01",
            "gpu": slot // 7,
            "profile": "1g.5gb",
            "placement": [slot % 7, 1],
            "start": NOW - 20_000 + 10 * (i // 14),
        }
        state.update({f"h{i}": rec}, rec["start"])
        state.update({}, rec["start"] + 9)


@pytest.fixture
def site(monkeypatch):
    """A daemon as the page sees it: its last cycle, the jobs squeue showed, 300 jobs of
    history; renders timed."""
    monkeypatch.setattr(receiver, "node_records", lambda config, only=None: {})
    jobs = planned_jobs()
    _, _, report = observed_cycle(jobs)
    daemon = SimpleNamespace(config=None, last_report=report, last_jobs=jobs, web_state=None)
    daemon.web_state = web.WebState()
    routes = web.pages(daemon, daemon.web_state)
    _history(daemon.web_state, 300)
    renders: list[float] = []
    draw = web.gantt_svg

    def timed(plan):
        t0 = time.perf_counter()
        try:
            return draw(plan)
        finally:
            renders.append(time.perf_counter() - t0)

    monkeypatch.setattr(web, "gantt_svg", timed)
    return SimpleNamespace(daemon=daemon, routes=routes, renders=renders, report=report)


def test_eight_page_clients_never_hold_the_cycles_update(site):
    assert b"<svg" in site.routes["/"]()[1]  # the first render, before the clients
    state, projected = site.daemon.web_state, site.report.extra["projected"]
    stop = threading.Event()
    served = [0] * 8

    def client(i: int) -> None:
        while not stop.is_set():
            site.routes["/" if i % 2 else "/status.json"]()
            served[i] += 1

    clients = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(8)]
    for t in clients:
        t.start()
    waits = []
    began = time.monotonic()
    try:
        for cycle in range(12):  # each cycle: a new report (the page is stale) and update
            report = observed_cycle(planned_jobs())[2]
            report.number = 2 + cycle
            site.daemon.last_report = report
            t0 = time.perf_counter()
            state.update(projected, NOW + cycle)
            waits.append(time.perf_counter() - t0)
            stop.wait(0.25)
    finally:
        stop.set()
        for t in clients:
            t.join(30)
    took = time.monotonic() - began
    render = max(site.renders)
    assert min(served) >= 1, served
    # under the old lock an update waited for a whole render whenever one was under way
    assert max(waits) < render / 4, (max(waits), render)
    # 12 new cycles in `took` seconds: at most one render per cycle and per RENDER_MIN_S
    assert len(site.renders) <= 2 + took / web.RENDER_MIN_S, (len(site.renders), took)
    print(
        f"\nrender {render:.2f} s; the cycle's update waited at most {max(waits) * 1000:.1f} ms "
        f"with 8 clients ({sum(served)} pages, {len(site.renders)} renders in {took:.1f} s)"
    )


def test_concurrent_first_requests_share_one_render(site):
    results: list[bytes] = []
    clients = [
        threading.Thread(target=lambda: results.append(site.routes["/"]()[1])) for _ in range(8)
    ]
    for t in clients:
        t.start()
    for t in clients:
        t.join(60)
    assert len(results) == 8 and len(set(results)) == 1 and len(site.renders) == 1


def test_the_gantt_is_drawn_once_a_cycle_and_the_page_at_most_every_few_seconds(monkeypatch):
    monkeypatch.setattr(receiver, "node_records", lambda config, only=None: {})
    jobs = planned_jobs()
    report = observed_cycle(jobs)[2]
    daemon = SimpleNamespace(config=None, last_report=report, last_jobs=jobs)
    clock = [0.0]
    routes = web.pages(daemon, web.WebState(), monotonic=lambda: clock[0])
    drawn, pages = [], []
    monkeypatch.setattr(web, "gantt_svg", lambda plan: drawn.append(plan) or b"<svg/>")
    page_html = web.page_html
    monkeypatch.setattr(web, "page_html", lambda *a: pages.append(1) or page_html(*a))
    for step in range(60):  # a minute of one cycle, a request every second
        clock[0] = float(step)
        routes["/"]()
        routes["/status.json"]()
    assert len(drawn) == 1  # the same cycle: the same Gantt
    assert len(pages) == 60 // web.RENDER_MAX_S  # the header's "ago" kept fresh
    for step in range(60, 70):  # a new cycle every second: the page every RENDER_MIN_S
        clock[0] = float(step)
        daemon.last_report = observed_cycle(jobs)[2]
        routes["/"]()
    assert len(drawn) == 1 + 10 // web.RENDER_MIN_S
