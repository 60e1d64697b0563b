"""What admins and users see, on a real loopback Slurm with simulated A100s, the hooks
and the planner daemon: /metrics scraped and parsed with prometheus_client's parser,
the hooks' node metrics, ``slurm-mig status --watch`` read off a tmux screen,
``slurm-mig explain`` run as the job's owner, and the web page loaded in headless
Chromium (its screenshot is kept under $SLURM_MIG_ARTIFACTS, default test-artifacts/)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from slurm_mig.demo.live import LiveCluster
from slurm_mig.geometry import get_model
from slurm_mig.workload import load_task_source

from .conftest import live_cluster
from .conftest import wait_until as _wait

A100 = get_model("A100-40GB")
RODINIA = load_task_source("rodinia-a100", A100)
ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("SLURM_MIG_ARTIFACTS", ROOT / "test-artifacts"))
CLI = [sys.executable, "-m", "slurm_mig"]
# what a user runs: this venv lives under root's home; explain needs the stdlib only
USER_CLI = [
    "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable,
    "-m",
    "slurm_mig",
]
# long enough that jobs are still running while the tests look (seconds per profiled s)
SCALE = 6.0
KERNELS = ["Gaussian", "Gaussian", "CFD", "CFD", "Gaussian", "CFD", "Gaussian"]


@pytest.fixture(scope="module")
def lc():
    with live_cluster("slurm-mig-obs-", planner={"batch_window": 1.0}) as cluster:
        cluster.learn(RODINIA, SCALE)
        cluster.ids = [cluster.submit(k, SCALE) for k in KERNELS]
        cluster.start_planner()
        cluster.wait_plan(len(KERNELS), 60)
        _wait(lambda: _running(cluster), 60, "a job to run")
        yield cluster


def _running(lc: LiveCluster) -> set[str]:
    return {j for j, job in lc.jobs().items() if job.state == "RUNNING"}


def _busy(lc: LiveCluster) -> set[str]:
    """The running jobs; when the module's jobs have all ended (a slow, busy machine
    runs the module's tests late), two more are submitted and waited for, so that a
    test about running jobs never finds none."""
    running = _running(lc)
    if running:
        return running
    if not any(job.state == "PENDING" for job in lc.jobs().values()):
        lc.ids += [lc.submit(k, SCALE) for k in KERNELS[:2]]
    return _wait(lambda: _running(lc), 90, "a job to run")


def _families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def _value(fam, **labels) -> float | None:
    for s in fam.samples:
        if s.name in (fam.name, fam.name + "_total", fam.name + "_info") and all(
            s.labels.get(k) == v for k, v in labels.items()
        ):
            return s.value
    return None


def test_daemon_metrics_scraped_and_parsed(lc):
    def scrape() -> dict | None:
        text = urllib.request.urlopen(lc.metrics_url, timeout=10).read().decode()
        fams = _families(text)
        return fams if _value(fams["slurm_mig_planner_jobs_released"]) >= 1 else None

    fams = _wait(scrape, 30, "a release in the metrics")
    cycle = fams["slurm_mig_planner_cycle_seconds"]
    assert cycle.type == "histogram"
    count = next(s.value for s in cycle.samples if s.name.endswith("_count"))
    assert count >= 1
    assert fams["slurm_mig_planner_cycles"].type == "counter"
    assert _value(fams["slurm_mig_planner_cycles"], result="ok") == count
    jobs = fams["slurm_mig_planner_jobs"]
    assert jobs.type == "gauge"
    assert {s.labels["state"] for s in jobs.samples} >= {"held", "busy", "planned", "waiting"}
    assert _value(fams["slurm_mig_planner_jobs_released"]) >= 1
    assert _value(fams["slurm_mig_planner_actions"], action="release") >= 1
    assert _value(fams["slurm_mig_planner_policy_info"], policy="far", kind="batch") == 1
    assert fams["slurm_mig_planner_plan_drift_seconds"].type == "histogram"
    assert fams["slurm_mig_planner_makespan_seconds"].type == "gauge"
    assert "process_cpu_seconds" in fams  # the process collector


def test_hooks_write_node_metrics_in_textfile_format(lc):
    path = lc.run_dir("node1") / "node-metrics.prom"  # node_exporter reads it on the node
    _wait(path.exists, 30, "the hooks' metrics file")
    fams = _families(path.read_text())
    creates = fams["slurm_mig_node_instance_creates"]
    assert creates.type == "counter" and sum(s.value for s in creates.samples) >= 1
    assert fams["slurm_mig_node_slices_total"].type == "gauge"
    assert _value(fams["slurm_mig_node_slices_total"], node="node1", gpu="0") == 7
    assert oct(path.stat().st_mode & 0o777) == "0o644"


def test_status_in_tmux_shows_every_running_job(lc, tmp_path):
    if shutil.which("tmux") is None:
        _missing("tmux")
    session = f"slurm-mig-status-{os.getpid()}"
    cmd = " ".join(
        [*CLI, "status", "--watch", "--interval", "0.5", "--config", str(lc.config_path)]
    )
    env = {**lc.env, "PYTHONPATH": str(ROOT), "COLUMNS": "220", "LINES": "80"}
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", session, "-x", "220", "-y", "80", cmd],
        env=env,
        check=True,
    )
    screen = ""
    try:

        def shows_all() -> bool:
            nonlocal screen
            before = _busy(lc)
            screen = subprocess.run(
                ["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True
            ).stdout
            after = _running(lc)
            steady = before & after
            shown = all(f" {j} " in screen for j in steady) and "Queue" in screen
            # the UUIDs come with the node records, signed reports sent after the start
            return bool(steady) and shown and "MIG-" in screen

        _wait(shows_all, 40, "status to show every running job and its UUID")
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], check=False)
    (ARTIFACTS).mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "status-screen.txt").write_text(screen)
    assert "node1 gpu 0" in screen and "A100-40GB" in screen
    assert "largest free" in screen and "fragmentation" in screen
    assert "MIG-" in screen  # the UUIDs from the node records


def test_status_json_matches_slurm(lc):
    def status_with_running_jobs() -> tuple[dict, set[str]] | None:
        _busy(lc)
        out = subprocess.run(
            [*CLI, "status", "--json", "--config", str(lc.config_path)],
            env={**lc.env, "PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        view = json.loads(out)
        shown = {i["job"] for g in view["gpus"] for i in g["instances"] if i["job"]}
        return (view, shown) if shown else None  # jobs hold slices

    view, shown = _wait(status_with_running_jobs, 90, "status to show running jobs")
    for g in view["gpus"]:
        busy = sum(A100.profile(i["profile"]).compute_slices for i in g["instances"] if i["job"])
        assert g["busy"] == busy and 0 <= g["free"] <= 7
    waiting = {q["job"] for q in view["queue"]}
    assert not shown & waiting


def test_report_and_status_from_what_the_nodes_reported(lc):
    """The planner's state dir is not the nodes' run dir, and with [planner] reports on
    it reads no node file: the runs in `report` and the UUIDs in `status` came as
    signed reports over TCP."""
    import sqlite3

    from slurm_mig.config import load_config

    config = load_config(lc.config_path)
    assert config.reports and lc.state_dir not in lc.run_root.parents
    assert not lc.run_root.is_relative_to(lc.state_dir)

    def reported() -> list:
        out = subprocess.run(
            [*CLI, "report", "--json", "--by", "profile", "--config", str(lc.config_path)],
            env={**lc.env, "PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
            check=True,
        )
        return json.loads(out.stdout)

    rows = _wait(reported, 90, "a finished run in slurm-mig report")
    assert sum(r["runs"] for r in rows) >= 1
    db = sqlite3.connect(lc.state_dir / "reports.sqlite")
    try:
        kinds = dict(db.execute("SELECT kind, COUNT(*) FROM received GROUP BY kind"))
        snapshots = db.execute("SELECT node FROM nodes WHERE seq >= 0").fetchall()
    finally:
        db.close()
    assert kinds.get("run", 0) >= 1 and snapshots == [("node1",)]
    spool = lc.run_dir("node1") / "private" / "reports"  # on the node: as an admin there
    _wait(lambda: not any(spool.iterdir()), 30, "the node's spool to empty")


def _as_user(lc: LiveCluster, args: list[str], user: str = "nobody"):
    """``slurm-mig ARGS`` as ``user``, where that user's Slurm commands work (inside a
    release's root) and with a Python the user can run (explain needs the stdlib only)."""
    install = lc.cluster.install
    if install.root is None:
        argv = ["runuser", "-u", user, "--", *USER_CLI, *args]
    else:
        # the release's own Python: the user cannot reach this venv (root's home)
        argv = install.argv(["/usr/bin/python3", "-m", "slurm_mig", *args], user)
    return subprocess.run(
        argv,
        env={**lc.env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_explain_as_the_jobs_owner_without_root(lc):
    jid = lc.cluster.sbatch(
        "sleep 1", partition="mig", comment="mig:key=late,time=30,mem=12G", user="nobody"
    )

    def planned() -> bool:
        return bool(lc.assignments([jid]))

    _wait(planned, 40, f"job {jid} to be planned")
    done = _as_user(lc, ["explain", jid, "--config", str(lc.config_path)])
    assert done.returncode == 0, done.stderr
    text = done.stdout
    a = lc.assignments([jid])[jid]
    assert f"job {jid}" in text
    assert f"{a.node} gpu {a.gpu} as {a.profile}" in text
    assert "its hint: mig:key=late,time=30,mem=12G" in text
    assert "needs 12.0 GiB of GPU memory (from its hint)" in text
    state = lc.jobs()[jid].state
    if state == "PENDING":
        assert "projected start:" in text
    assert "public_file is off" not in text  # it is set: a user reads it
    # the status file stays root's: a user cannot read it
    denied = _as_user(lc, ["status", "--config", str(lc.config_path)])
    assert denied.returncode == 2 and "it is root's" in denied.stderr
    assert "Traceback" not in denied.stderr
    public = json.loads((lc.root / "public" / "plan.json").read_text())
    assert "MIG-" not in json.dumps(public) and "nobody" not in json.dumps(public)


# issue 18, holes 7 and 8: a job name with a title change (OSC 0), a screen clear, rich
# markup and a hyperlink, and a line break followed by a forged planner log line
HOSTILE = (
    "n\x1b]0;pwned\x07\x1b[2J[bold red]RED[/bold red][link=https://evil.example]L[/link]"
    "\n2030-01-01 00:00:00,000 slurm-mig planner: job 9: released"
)
SHOWN = "n\\x1b]0;pwned\\x07\\x1b[2J[bold red]RED[/bold red]"  # as status/explain show it
# rich's own sequences when it draws to a terminal: colours, and for --watch cursor up,
# erase line, hide and show the cursor
RICH_OWN = re.compile(r"\x1b\[[0-9;]*m|\x1b\[[0-9]*A|\x1b\[2K|\x1b\[\?25[lh]|\r")


def _acted_on(text: str) -> list[str]:
    """What in ``text`` a terminal would act on, besides line breaks."""
    return [repr(c) for c in text if c != "\n" and not c.isprintable()]


def test_a_hostile_job_name_reaches_no_terminal_and_forges_no_log_line(lc):
    waits = lc.cluster.sbatch(
        "sleep 1", "--begin=now+600", partition="mig", comment="mig:time=5", name=HOSTILE,
        user="nobody",
    )  # fmt: skip
    runs = lc.cluster.sbatch(
        "sleep 1", partition="mig", comment="mig:time=5", name=HOSTILE, user="nobody"
    )
    assert "\x1b]0;pwned" in _wait(lambda: lc.jobs()[waits].name, 30, "squeue to show it")
    # status, drawn as to a terminal (rich's colours on)
    env = {**lc.env, "PYTHONPATH": str(ROOT), "COLUMNS": "400", "FORCE_COLOR": "1"}
    done = subprocess.run(
        [*CLI, "status", "--config", str(lc.config_path)], env=env, capture_output=True,
        text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert SHOWN in RICH_OWN.sub("", done.stdout)
    assert _acted_on(RICH_OWN.sub("", done.stdout)) == [] and "\x1b]" not in done.stdout
    # status --watch on a real terminal (tmux): the pane's title stays, the markup shows
    if shutil.which("tmux") is not None:
        session = f"slurm-mig-hostile-{os.getpid()}"
        cmd = " ".join([*CLI, "status", "--watch", "--interval", "0.5", "--config",
                        str(lc.config_path)])  # fmt: skip
        subprocess.run(
            ["tmux", "new-session", "-d", "-s", session, "-x", "400", "-y", "80", cmd],
            env={**lc.env, "PYTHONPATH": str(ROOT)},
            check=True,
        )
        try:

            def screen() -> str | None:
                got = subprocess.run(["tmux", "capture-pane", "-p", "-t", session],
                                     capture_output=True, text=True).stdout  # fmt: skip
                return got if SHOWN in got else None

            _wait(screen, 30, "status --watch to show the job")
            time.sleep(1.5)  # three more refreshes, each drawing the name again
            title = subprocess.run(
                ["tmux", "display-message", "-p", "-t", session, "#{pane_title}"],
                capture_output=True, text=True,
            ).stdout  # fmt: skip
        finally:
            subprocess.run(["tmux", "kill-session", "-t", session], check=False)
        assert "pwned" not in title
    # explain, as the job's owner
    done = _as_user(lc, ["explain", waits, "--config", str(lc.config_path)])
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"job {waits} ({SHOWN}") and _acted_on(done.stdout) == []
    assert "public_file is off" not in done.stdout
    # once it ran, the planner logs its runtime under its name (its kind, cleaned and
    # tagged): each such line whole, nothing in it a terminal acts on
    lc.cluster.wait_job(runs, ["COMPLETED"], timeout=180)

    def named() -> list[str]:
        lines = lc.log_file.read_text(errors="replace").splitlines()
        return [line for line in lines if f"job {runs}: " in line and "pwned" in line]

    for line in _wait(named, 60, f"the planner to log job {runs} by its name"):
        assert line.isprintable() and _acted_on(line) == [], line
    hooks_log = lc.node_path("node1", lc.log_file)
    for path in (lc.log_file, lc.daemon_log, hooks_log):
        text = path.read_text(errors="replace")
        assert not [x for x in text.splitlines() if x.startswith("2030-01-01")], path
    for path in (lc.log_file, hooks_log):  # hole 9: the logs are root's alone
        assert oct(path.stat().st_mode & 0o777) == "0o600", path
    lc.cluster.run("scancel", waits)


def _missing(command: str) -> None:
    """Skip, or on CI fail: `make test` installs the command (view-packages)."""
    text = f"{command} is not installed (make test installs it: make view-packages)"
    if os.environ.get("CI"):
        pytest.fail(text)
    pytest.skip(text)


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def test_web_page_in_headless_chromium(lc, tmp_path):
    browser = _chromium()
    if browser is None:
        _missing("chromium")
    url = lc.metrics_url.removesuffix("metrics")

    def page_has_all() -> str | None:
        before = _busy(lc)
        page = urllib.request.urlopen(url, timeout=30).read().decode()
        steady = before & _running(lc)
        if steady and all(f"data-job='{j}'" in page for j in steady):
            return page
        return None

    page = _wait(page_has_all, 40, "the page to show every running job")
    assert "<svg" in page and "http-equiv='refresh'" in page
    # a "now" line on every chart, and the panels named as the tables name the GPUs
    assert page.count('<g id="now-0">') == page.count("<svg") >= 1
    tables = re.findall(r"<h2>(\S+ gpu \d+) · ", page)
    assert tables and all(f"<!-- {name} -->" in page for name in tables), tables
    assert not re.search(r"<!-- GPU \d+ -->", page)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "web-view.png"
    shot.unlink(missing_ok=True)
    dom = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--window-size=1400,1600",
            f"--screenshot={shot}",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shot.exists() and shot.stat().st_size > 10_000, dom.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    dumped = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            f"--user-data-dir={tmp_path / 'profile2'}",
            "--dump-dom",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    assert "Queue" in dumped and "<svg" in dumped


def test_report_bills_finished_runs_gathered_from_the_epilogs(lc):
    def finished() -> set[str]:
        jobs = lc.jobs()
        return {j for j in lc.ids if j in jobs and jobs[j].state == "COMPLETED"}

    done = _wait(finished, 120, "a job to finish")

    def report() -> list | None:
        out = subprocess.run(
            [*CLI, "report", "--by", "profile", "--json", "--config", str(lc.config_path)],
            env={**lc.env, "PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        rows = json.loads(out)
        return rows if sum(r["runs"] for r in rows) >= len(done) else None

    rows = _wait(report, 30, "the daemon to gather the finished runs")
    assert all(r["energy"] == "modelled" and r["slice_seconds"] > 0 for r in rows)
    assert {r["model"] for r in rows} == {"A100-40GB"}
    csv = subprocess.run(
        [*CLI, "report", "--by", "user", "--csv", "--config", str(lc.config_path)],
        env={**lc.env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert csv[0].startswith("user,model,runs,restarts,seconds,slice_seconds,gpu_hours")
    assert any(line.startswith("nobody,A100-40GB,") for line in csv[1:])  # the jobs' user
