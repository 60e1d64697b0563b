"""The site files for liveness: the Prometheus alert rules (contrib/slurm-mig-alerts.yml)
checked and unit-tested with promtool on tests/alerts_test.yml, their metrics against
those the daemon and the hooks export, and the systemd units' notify and watchdog
settings."""

from __future__ import annotations

import configparser
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from slurm_mig.cli.planner import EXIT_LEASE_HELD
from slurm_mig.daemon.metrics import PlannerMetrics
from slurm_mig.node import nodemetrics

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "contrib" / "slurm-mig-alerts.yml"
RULE_TESTS = ROOT / "tests" / "alerts_test.yml"


def _promtool() -> str:
    """promtool, or skip (outside CI) / fail (on CI): `make test` installs it."""
    found = shutil.which("promtool")
    if found:
        return found
    text = "promtool is not installed (make test installs Debian's prometheus package: make alert-packages)"
    if os.environ.get("CI"):
        pytest.fail(text)
    pytest.skip(text)


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_alert_rules_pass_promtool_check_and_unit_tests():
    promtool = _promtool()
    checked = _run(promtool, "check", "rules", str(RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 12 rules found" in checked.stdout
    tested = _run(promtool, "test", "rules", str(RULE_TESTS))
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_every_alert_has_a_firing_case_in_the_rule_tests():
    names = set(re.findall(r"- alert: (\w+)", RULES.read_text()))
    text = RULE_TESTS.read_text()
    firing = set(re.findall(r"alertname: (\w+)\n\s+exp_alerts:\n\s+- exp_labels", text))
    assert len(names) == 12 and firing == names, names - firing


def test_alert_rules_use_only_metrics_that_exist():
    names = {"up"}
    m = PlannerMetrics("far", "batch", 0.0)
    m.site(5.0, ["gpu01"])
    for f in text_string_to_metric_families(m.text().decode()):
        names |= {s.name for s in f.samples} | {f.name}
    counters = nodemetrics.add_events({}, [(e, "x", 0.1) for e in nodemetrics.EVENTS])
    text = nodemetrics.render("n", ["A100-40GB"], [(0, "3g.20gb", "job")], counters, 0.0)
    for f in text_string_to_metric_families(text):
        names |= {s.name for s in f.samples} | {f.name}
    exprs = re.findall(r"expr: (?:>-\n)?((?:.+\n)+?)\s+(?:for|labels):", RULES.read_text())
    used = set()
    for expr in exprs:
        used |= set(re.findall(r"\bslurm_mig_[a-z_]+", expr))
    assert len(exprs) == 12 and used and used <= names, used - names


def _unit(name: str) -> configparser.ConfigParser:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # keys are case-sensitive
    unit.read(ROOT / "contrib" / name)
    return unit


@pytest.mark.parametrize(
    "name,argv",
    [
        ("slurm-mig-planner.service", "slurm-mig planner"),
        ("slurm-mig-planner-standby.service", "slurm-mig planner --standby"),
    ],
)
def test_planner_units_notify_have_a_watchdog_and_do_not_loop_on_a_held_lease(name, argv):
    service = _unit(name)["Service"]
    assert service["Type"] == "notify" and service["NotifyAccess"] == "main"
    assert int(service["WatchdogSec"]) >= 60  # cycles of 100,000 jobs take about 10 s
    assert service["Restart"] == "on-failure"
    assert service["RestartPreventExitStatus"] == str(EXIT_LEASE_HELD)
    assert service["ExecStart"].endswith(argv)
