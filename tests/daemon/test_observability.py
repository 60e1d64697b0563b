"""The observability pieces without Slurm: the daemon's metrics from real planner
cycles, the projections, the public summary, the status view, explain and the Grafana
dashboard's expressions against the metrics that exist."""

from __future__ import annotations

import json
import re
from pathlib import Path

from cyclesite import NOW, cycle_snapshot, observed_cycle, planned_jobs
from prometheus_client.parser import text_string_to_metric_families
from support import squeue_job as job

from slurm_mig.daemon.cycle import plan_cycle
from slurm_mig.daemon.daemon import CycleReport
from slurm_mig.daemon.jobtimes import project_jobs, running_drift
from slurm_mig.daemon.metrics import PlannerMetrics, replan_reason
from slurm_mig.daemon.public import read_public, summary, write_public
from slurm_mig.daemon.statusview import build_view, largest_free
from slurm_mig.explain import explain
from slurm_mig.geometry import Placement, get_model
from slurm_mig.node import nodemetrics
from slurm_mig.slurm.jobrecord import admin_comment_for, parse_admin_comment

ROOT = Path(__file__).resolve().parents[2]
A100 = get_model("A100-40GB")


def test_projection_orders_planned_jobs_after_the_work_on_their_slices():
    _, result, report = observed_cycle(planned_jobs())
    projected = report.extra["projected"]
    assert set(projected) == set(result.planned)
    for jid, a in result.planned.items():
        p = projected[jid]
        assert (p["node"], p["gpu"], p["profile"]) == (a.node, a.gpu, a.profile)
        assert p["end"] > p["start"] >= NOW
    # two jobs on overlapping slices of the GPU never overlap in time
    items = list(projected.values())
    for x in items:
        for y in items:
            if x is y:
                continue
            px, py = Placement(*x["placement"]), Placement(*y["placement"])
            if px.overlaps(py):
                assert x["end"] <= y["start"] + 1e-6 or y["end"] <= x["start"] + 1e-6


def test_running_drift_from_the_admin_comment():
    _, result, _ = observed_cycle(planned_jobs())
    a = next(iter(result.planned.values()))
    running = job(
        a.job_id,
        state="RUNNING",
        held=False,
        admin_comment=admin_comment_for(a),
        start_time=NOW - a.planned_seconds - 30,
    )
    assert running_drift([running], NOW) == {a.job_id: 30.0}
    assert parse_admin_comment(running.admin_comment) == a


def test_daemon_metrics_from_a_cycle_parse_with_the_client_parser():
    _, result, report = observed_cycle(planned_jobs())
    m = PlannerMetrics("far", "batch", 30.0)
    m.observe(report, [job("1"), job("2", held=False)], {"9": 12.0, "8": -3.0})
    fams = {f.name: f for f in text_string_to_metric_families(m.text().decode())}
    jobs = {s.labels["state"]: s.value for s in fams["slurm_mig_planner_jobs"].samples}
    assert jobs["planned"] == len(result.planned) and jobs["held"] == 1
    assert fams["slurm_mig_planner_cycle_seconds"].type == "histogram"
    count = [s for s in fams["slurm_mig_planner_cycle_seconds"].samples if s.name.endswith("_sum")]
    assert count[0].value == 0.25
    assert [s.value for s in fams["slurm_mig_planner_running_late_jobs"].samples] == [1.0]
    assert [s.value for s in fams["slurm_mig_planner_running_drift_max_seconds"].samples] == [12.0]
    [info] = fams["slurm_mig_planner_policy_info"].samples
    assert info.labels == {"policy": "far", "kind": "batch"}
    failed = CycleReport(2, NOW, NOW + 1, None, None, "Slurm is down")
    m.observe(failed)
    fams = {f.name: f for f in text_string_to_metric_families(m.text().decode())}
    cycles = {
        s.labels["result"]: s.value
        for s in fams["slurm_mig_planner_cycles"].samples
        if s.name.endswith("_total")
    }
    assert cycles == {"ok": 1.0, "error": 1.0}


def test_replan_reasons_drop_names():
    assert replan_reason("job 42 ended early") == "job ended early"
    assert replan_reason("node gpu07 lost") == "node lost"
    assert len(replan_reason("x" * 500)) == 60


def test_public_summary_holds_no_users_uuids_or_comments(tmp_path):
    jobs = [job(str(i), user="alice", comment=f"secret mig:time={60 + i}") for i in range(1, 4)]
    _, result, report = observed_cycle(jobs)
    path = tmp_path / "pub" / "plan.json"
    assert write_public(path, report) is None
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    assert oct(path.parent.stat().st_mode & 0o777) == "0o755"
    text = path.read_text()
    assert "alice" not in text and "secret" not in text and "MIG-" not in text
    data = read_public(path)
    assert set(data["jobs"]) == set(result.planned)
    assert data == json.loads(json.dumps(summary(report)))
    path.write_text("[1, 2]")
    assert read_public(path) is None


def test_status_view_counts_slices_and_the_largest_free_block():
    assert largest_free(A100, []) == ("7g.40gb", 7)
    assert largest_free(A100, [Placement(0, 4)]) == ("3g.20gb", 3)
    assert largest_free(A100, [Placement(0, 4), Placement(4, 4)]) == ("", 0)
    # 1g at slices 0 and 4: three and two free compute slices around them, none of 4 or 7
    assert largest_free(A100, [Placement(0, 1), Placement(4, 1)])[1] == 2
    jobs = planned_jobs()
    _, result, report = observed_cycle(jobs)
    status = report.to_json()
    view = build_view(status, jobs, {}, NOW)
    assert [g.node for g in view.gpus] == ["gpu01"]
    assert {q.job for q in view.queue} == {j.job_id for j in jobs}
    planned = [q for q in view.queue if q.state == "planned"]
    assert planned and all(q.start is not None and q.profile for q in planned)
    assert [q.start for q in planned] == sorted(q.start for q in planned)


def test_explain_a_planned_job_from_its_records_and_the_summary():
    jobs = planned_jobs()
    _, result, report = observed_cycle(jobs)
    pub = summary(report)
    jid, a = next((j, a) for j, a in result.planned.items() if j in pub["jobs"])
    j = job(jid, comment="mig:time=110,mem=15G", admin_comment=admin_comment_for(a))
    got = explain(j, pub, NOW)
    text = "\n".join(got["lines"])
    assert f"planned on gpu01 gpu {a.gpu} as {a.profile}" in text
    assert "its hint: mig:time=110,mem=15G" in text
    assert "needs 15.0 GiB of GPU memory (from its hint)" in text
    assert "projected start:" in text
    restarted = job(jid, comment="mig:mem=30G", admin_comment="", restart_count=1)
    text = "\n".join(explain(restarted, None, NOW)["lines"])
    assert "set by mig-run after a restart" in text and "restarted 1 time(s)" in text
    noted = job("77", comment="mig:mem=900G", admin_comment="slurm-mig: not planned: too big")
    assert "not planned: too big" in explain(noted, None, NOW)["lines"]
    bad = job("78", comment="mig:time=banana")
    assert any(line.startswith("its hint is invalid") for line in explain(bad, None, NOW)["lines"])


def test_explain_a_held_job_whose_plan_slurm_has_not_heard_of():
    jobs = planned_jobs()
    _, result, report = observed_cycle(jobs)
    pub = summary(report)
    held = [j for j, e in pub["jobs"].items() if e["state"] == "planned"]
    assert held, "some jobs wait for their slices"
    a = result.planned[held[0]]
    j = job(held[0], comment="mig:time=110,mem=15G", admin_comment="")  # no record yet
    got = explain(j, pub, NOW)
    text = "\n".join(got["lines"])
    assert f"planned on gpu01 gpu {a.gpu} as {a.profile}" in text
    assert "held by the planner until its slices are free" in text
    assert got["where"]["node"] == "gpu01" and got["where"]["profile"] == a.profile
    assert explain(j, None, NOW)["where"] is None  # no summary: nothing is made up


def test_explain_a_held_job_beyond_max_planned_says_it_waits_for_the_first_ones():
    from dataclasses import replace

    jobs = [job(str(i), comment="mig:time=600,mem=15G") for i in range(1, 21)]
    snap = replace(cycle_snapshot(jobs, NOW), max_planned=8)
    result = plan_cycle(snap)
    assert len(result.planned) == 8 and result.beyond == 12
    report = CycleReport(1, NOW, NOW + 0.25, result, None, policy="far", max_planned=8)
    report.extra = {"projected": project_jobs(result.snapshots, result.decisions)}
    pub = summary(report)
    assert (pub["max_planned"], pub["beyond"]) == (8, 12)
    waiting = next(j for j in jobs if j.job_id not in result.planned)
    text = "\n".join(explain(waiting, pub, NOW)["lines"])
    assert "keeps plans for the first 8 held jobs" in text and "12 more wait unplanned" in text
    # the summary is anyone's to write: a forged count is not repeated
    forged = {**pub, "beyond": "12; rm -rf /", "max_planned": 10**12}
    text = "\n".join(explain(waiting, forged, NOW)["lines"])
    assert "rm -rf" not in text and "keeps plans" not in text


def test_grafana_dashboard_uses_only_metrics_that_exist():
    dash = json.loads((ROOT / "contrib" / "grafana-slurm-mig.json").read_text())
    names = set()
    m = PlannerMetrics("far", "batch", 0.0)
    m.replans.labels("job ended early").inc()  # labelled families show once they have one
    for f in text_string_to_metric_families(m.text().decode()):
        names |= {s.name for s in f.samples} | {f.name}
    counters = nodemetrics.add_events({}, [(e, "x", 0.1) for e in nodemetrics.EVENTS])
    text = nodemetrics.render("n", ["A100-40GB"], [(0, "3g.20gb", "job")], counters, 0.0)
    for f in text_string_to_metric_families(text):
        names |= {s.name for s in f.samples} | {f.name}
    used = set()
    for panel in dash["panels"]:
        for target in panel["targets"]:
            used |= set(re.findall(r"slurm_mig_[a-z_]+", target["expr"]))
    assert used and used <= names, used - names


def test_web_page_draws_the_gantt_and_every_planned_job():
    from slurm_mig.daemon.web import WebState, gantt_svg, gantt_views, page_html

    jobs = planned_jobs()
    _, result, report = observed_cycle(jobs)
    status = report.to_json()
    state = WebState()
    state.update(status["projected"], NOW)
    (view,) = gantt_views(status, dict(state.ran), NOW)
    plan = view.plan
    assert {t.id for t in plan.tasks} == set(result.planned)
    assert plan.lower_bound > 0 and plan.makespan >= plan.lower_bound
    assert view.names == ("gpu01 gpu 0",)
    svg = gantt_svg([view])
    assert b"<svg" in svg
    page = page_html(build_view(status, jobs, {}, NOW), svg).decode()
    assert "http-equiv='refresh'" in page and "<svg" in page
    for j in jobs:
        assert f"<td>{j.job_id}</td>" in page
    hostile = job("99", name="<script>x</script>")
    page = page_html(build_view(status, [*jobs, hostile], {}, NOW), b"").decode()
    assert "<script>" not in page and "&lt;script&gt;" in page


def test_http_endpoint_serves_its_pages_only():
    import urllib.error
    import urllib.request

    from slurm_mig.daemon.httpserver import Server

    m = PlannerMetrics("far", "batch", 0.0)

    def broken():
        raise RuntimeError("a page's bug")

    server = Server(
        ("127.0.0.1", 0), {"/metrics": lambda: ("text/plain", m.text()), "/boom": broken}
    ).start()
    host, port = server.address
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/metrics?x=1", timeout=10) as r:
            assert r.status == 200 and b"slurm_mig_planner_cycle_seconds" in r.read()
        for path, code in (("/", 404), ("/boom", 500), ("/../etc/passwd", 404)):
            try:
                urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=10)
                raise AssertionError(f"{path} answered")
            except urllib.error.HTTPError as exc:
                assert exc.code == code, path
        req = urllib.request.Request(f"http://{host}:{port}/metrics", method="POST", data=b"")
        try:
            urllib.request.urlopen(req, timeout=10)
            raise AssertionError("POST answered")
        except urllib.error.HTTPError as exc:
            assert exc.code == 501
    finally:
        server.close()
