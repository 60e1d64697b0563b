"""Issue 18, holes 7 to 9: a job name, comment or reason is the user's text. Shown on the
admin's terminal (``status``, ``status --watch``, ``explain``) it carries no escape
sequence and no rich markup takes effect; in the planner's and the hooks' logs it
cannot start a line of its own; the log files are created 0600 and one that others
may read is refused. Also: the public summary keeps a waiting job's projection, and
``explain`` as a user does not say public_file is off when it is set."""

from __future__ import annotations

import argparse
import io
import logging
import os
import re
from dataclasses import replace
from types import SimpleNamespace

import pytest
from cyclesite import observed_cycle
from hypothesis import given
from hypothesis import strategies as st
from support import node, run_slurm_mig, write_config
from support import squeue_job as job

from slurm_mig.daemon.daemon import PlannerDaemon
from slurm_mig.daemon.daemonlog import log_to_file
from slurm_mig.daemon.public import read_public, write_public
from slurm_mig.explain import explain
from slurm_mig.node import hooks
from slurm_mig.safetext import UnsafeLogFile, open_private_log, printable
from slurm_mig.slurm.jobrecord import admin_comment_for

NOW = 10_000.0
# what a hostile job name carries: a title (OSC 0), a clear screen and home (CSI), a
# C1 CSI, an OSC 8 hyperlink, bidi override, DEL, and rich markup and emoji codes
TITLE = "\x1b]0;pwned\x07"
CLEAR = "\x1b[2J\x1b[H\x9b31m"
LINK = "\x1b]8;;https://evil.example\x1b\\click\x1b]8;;\x1b\\"
MARKUP = "[bold red]RED[/bold red]"
MARKUP_LINK = "[link=https://evil.example]L[/link]"
HOSTILE_NAME = f"n{TITLE}{CLEAR}{MARKUP}"
HOSTILE_WHY = f"w{LINK}\u202e{MARKUP_LINK}\x7f:skull:"
# rich's own sequences: colours (SGR), and for Live: cursor up, erase line, hide/show
RICH_OWN = re.compile(r"\x1b\[[0-9;]*m|\x1b\[[0-9]*A|\x1b\[2K|\x1b\[\?25[lh]|\r")


def _unsafe(text: str) -> list[str]:
    """The characters of ``text`` that a terminal acts on, other than line breaks."""
    return [
        repr(c)
        for c in text
        if c != "\n" and (ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 or not c.isprintable())
    ]


@given(st.text(max_size=200))
def test_printable_leaves_nothing_a_terminal_acts_on(text):
    got = printable(text)
    assert got.isprintable() and "\n" not in got
    if text.isprintable():
        assert got == text
    assert len(printable(text, 20)) <= 20


def test_printable_writes_controls_as_their_escapes():
    assert printable("a\nb\x1b[2J\x9b\u202ec\x7f") == "a\\nb\\x1b[2J\\x9b\\u202ec\\x7f"
    assert printable("x" * 50, 10) == "x" * 9 + "…"


# ---------------------------------------------------------------------------
# status and explain on a terminal


def _status_view():
    """A status view whose queue holds a job named HOSTILE_NAME, deferred for HOSTILE_WHY."""
    from slurm_mig.daemon.statusview import build_view

    hostile = job("41", name=HOSTILE_NAME, user="mallory")
    status = {"cycle": 3, "finished": NOW - 1, "policy": "far", "deferred": {"41": HOSTILE_WHY}}
    return build_view(status, [hostile, job("42", name="plain")], {}, NOW)


def _console():
    from rich.console import Console

    return Console(
        file=io.StringIO(), force_terminal=True, color_system="truecolor", width=300, record=True
    )


def _check_screen(out: str, shown: str) -> None:
    assert "pwned" in out or "pwned" in shown  # the name was drawn at all
    assert _unsafe(RICH_OWN.sub("", out)) == []
    assert "\x1b]" not in out and "\x07" not in out and "\x1b[2J" not in out
    assert MARKUP in shown and MARKUP_LINK in shown and ":skull:" in shown
    assert "\\x1b]0;pwned\\x07" in shown  # what the name carried, visible as escapes


@pytest.mark.parametrize("watch", [False, True])
def test_status_draws_a_hostile_job_name_as_text(monkeypatch, watch):
    from slurm_mig.cli import status

    console = _console()
    view = _status_view()
    assert view.queue[0].name == printable(HOSTILE_NAME)
    monkeypatch.setattr(status, "_console", lambda: console)
    monkeypatch.setattr(status, "load_view", lambda config, node: view)
    monkeypatch.setattr("slurm_mig.config.load_config", lambda path: SimpleNamespace())
    sleeps = []

    def sleep(seconds: float) -> None:  # one refresh of --watch, then Ctrl-C
        sleeps.append(seconds)
        if len(sleeps) > 1:
            raise KeyboardInterrupt

    monkeypatch.setattr(status.time, "sleep", sleep)
    args = argparse.Namespace(config=None, node=None, json=False, watch=watch, interval=0.5)
    assert status.run(args) == 0
    assert len(sleeps) == (2 if watch else 0)
    out = console.file.getvalue()
    _check_screen(out, console.export_text())


def test_status_json_escapes_the_name_too():
    from slurm_mig.cli.status import json

    text = json.dumps(_status_view().to_json())
    assert _unsafe(text) == [] and "\\u001b" not in text  # printable before JSON


def test_explain_prints_a_hostile_job_as_text(monkeypatch, capsys):
    from slurm_mig.cli import explain as cli
    from slurm_mig.config import ConfigError

    hostile = job(
        "41",
        name=HOSTILE_NAME,
        state="PENDING",
        held=False,
        reason=HOSTILE_WHY,
        comment=f"mig:time=1{TITLE} [slurm-mig: {HOSTILE_WHY}]",
        admin_comment=f"slurm-mig: not planned: {HOSTILE_WHY}",
    )

    class Slurm:
        def jobs(self, partition=None):
            return [hostile]

    def no_config(path):
        raise ConfigError("no config")

    monkeypatch.setattr("slurm_mig.slurm.client.SlurmClient", Slurm)
    monkeypatch.setattr("slurm_mig.config.load_config", no_config)
    assert cli.run(argparse.Namespace(job="41", config=None, json=False)) == 0
    out = capsys.readouterr().out
    assert _unsafe(out) == []
    assert out.startswith("job 41 (n\\x1b]0;pwned\\x07") and "not planned: w\\x1b]8" in out
    got = explain(hostile, None, NOW)
    assert all(line.isprintable() for line in got["lines"])
    assert any("its hint is invalid" in line for line in got["lines"])


# ---------------------------------------------------------------------------
# logs: one record, one line


FORGED = "\n2030-01-01 00:00:00,000 slurm-mig planner: job 9: released on gpu01 gpu 0\r"


@pytest.fixture
def planner_logging():
    """The package logger as it was: the test's handlers closed and removed after it."""
    logger = logging.getLogger("slurm_mig")
    before, level = list(logger.handlers), logger.level
    filters = {h: list(h.filters) for h in before}
    logger.setLevel(logging.INFO)
    yield logger
    for h in logger.handlers:
        if h not in before:
            h.close()
    logger.handlers[:] = before
    for h, fs in filters.items():
        h.filters[:] = fs
    logger.setLevel(level)


def test_a_job_name_with_a_newline_writes_one_planner_log_line(tmp_path, planner_logging):
    """A finished job whose name says "...\\n<stamp> ... released ...": the daemon logs
    its learned runtime (its name is its kind) as one line of the log file and of the
    stderr handler; no line starts with the forged text."""
    cfg = write_config(tmp_path, {"gpu01": ["A100-40GB"]})
    log_file = tmp_path / "log" / "planner.log"
    log_file.parent.mkdir()
    config = replace(_load(cfg), log_file=log_file)
    stderr = io.StringIO()
    planner_logging.addHandler(logging.StreamHandler(stderr))
    log_to_file(config)
    assert oct(log_file.stat().st_mode & 0o777) == "0o600"
    from slurm_mig.geometry import Placement
    from slurm_mig.slurm.assignment import Assignment

    a = Assignment("7", 0, "gpu01", 0, "A100-40GB", "3g.20gb", Placement(0, 4), 0, 0, 90.0, 9.0)
    done = job("7", name=f"resnet{FORGED}", state="COMPLETED", held=False, reason="None",
               admin_comment=admin_comment_for(a), start_time=1000.0, end_time=1095.0,
               exit_code=0)  # fmt: skip

    class Slurm:
        def jobs(self, partition=None):
            return [done]

        def nodes(self, partition=None):
            return [node("gpu01", "MIXED")]

    from slurm_mig.runtimes import RuntimeStore

    store = RuntimeStore(tmp_path / "profiles.sqlite")
    daemon = PlannerDaemon(config, Slurm(), store, b"k" * 32, clock=lambda: 2000.0)
    assert daemon.run_cycle().error is None
    for text in (log_file.read_text(), stderr.getvalue()):
        learned = [line for line in text.splitlines() if "learned" in line]
        assert len(learned) == 1, text
        # the kind is cleaned before it is logged, the line escaped whatever it holds
        assert "resnet" in learned[0]
        assert not any(line.startswith("2030-01-01") for line in text.splitlines())


def test_a_traceback_in_the_planner_log_starts_no_line_of_its_own(tmp_path, planner_logging):
    log_file = tmp_path / "planner.log"
    log_to_file(SimpleNamespace(log_file=log_file, source=None))
    try:
        raise RuntimeError(f"squeue said{FORGED}")
    except RuntimeError:
        logging.getLogger("slurm_mig.planner").exception("cycle 1 failed")
    lines = log_file.read_text().splitlines()
    assert "cycle 1 failed" in lines[0]
    assert all(line.startswith("    | ") for line in lines[1:]), lines
    assert "    | 2030-01-01 00:00:00,000 slurm-mig planner: job 9: released" in lines[-1]


def _load(path):
    from slurm_mig.config import load_config

    return load_config(path)


def test_hook_log_lines_stay_one_line_each(tmp_path, capsys):
    config = SimpleNamespace(log_file=tmp_path / "hooks.log")
    hooks.emit("prolog", "7", "node1", [(hooks.WARNING, f"job name resnet{FORGED}")], config)
    lines = (tmp_path / "hooks.log").read_text().splitlines()
    assert len(lines) == 1 and "resnet\\n2030-01-01" in lines[0]
    assert oct((tmp_path / "hooks.log").stat().st_mode & 0o777) == "0o600"
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("slurm-mig prolog job 7: job name resnet\\n")


def test_hooks_skip_a_log_file_others_can_read_and_say_so(tmp_path, capsys):
    path = tmp_path / "hooks.log"
    path.write_text("old\n")
    path.chmod(0o644)
    hooks.emit("epilog", "8", "node1", [(hooks.INFO, "destroyed MIG-abc")], SimpleNamespace(
        log_file=path))  # fmt: skip
    assert path.read_text() == "old\n"  # no UUID written where others read
    err = capsys.readouterr().err
    assert "slurm-mig epilog job 8: destroyed MIG-abc" in err
    assert f"log file not written: [paths] log_file: {path}: group or others" in err
    assert f"chmod 600 {path}" in err


def test_planner_refuses_a_log_file_others_can_read(tmp_path):
    cfg = write_config(tmp_path, {"g1": ["A100-40GB"]})
    log_file = tmp_path / "planner.log"
    cfg.write_text(cfg.read_text().replace("[planner]", f'log_file = "{log_file}"\n[planner]'))
    log_file.write_text("")
    log_file.chmod(0o644)
    res = run_slurm_mig("planner", "--config", str(cfg), "--once")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr == (
        f"slurm-mig: error: {cfg}: [paths] log_file: {log_file}: group or others may read "
        f"it (mode 0644) and it holds MIG UUIDs and jobs' reasons; run 'chmod 600 "
        f"{log_file}'\n"
    )
    assert log_file.read_text() == ""


def test_log_files_are_created_0600_never_through_a_link(tmp_path):
    old = os.umask(0)
    try:
        os.close(open_private_log(tmp_path / "a.log"))
    finally:
        os.umask(old)
    assert oct((tmp_path / "a.log").stat().st_mode & 0o777) == "0o600"
    (tmp_path / "link.log").symlink_to(tmp_path / "a.log")
    with pytest.raises(UnsafeLogFile, match="is a symbolic link"):
        open_private_log(tmp_path / "link.log")
    with pytest.raises(UnsafeLogFile, match="not a plain file"):
        open_private_log(os.devnull)
    if os.geteuid() == 0:
        (tmp_path / "b.log").write_text("")
        os.chown(tmp_path / "b.log", 65534, 65534)
        (tmp_path / "b.log").chmod(0o600)
        with pytest.raises(UnsafeLogFile, match="owned by uid 65534, not root"):
            open_private_log(tmp_path / "b.log")


# ---------------------------------------------------------------------------
# the public summary and explain


def _report(jobs, number: int, now: float, plans=None):
    _, result, report = observed_cycle(jobs, now, number, plans)
    return result, report


def test_a_waiting_jobs_projection_survives_cycles_until_it_starts_or_leaves(tmp_path):
    path = tmp_path / "plan.json"
    jobs = [job(str(i), comment=f"mig:time={100 + 10 * i},mem=15G") for i in range(1, 12)]
    r1, rep1 = _report(jobs, 1, NOW)
    assert write_public(path, rep1) is None
    first = read_public(path)["jobs"]
    released = [j for j in r1.released]
    assert released and set(first) == set(r1.planned)
    # the next cycle: released jobs pend (not held) for their slices; nothing re-planned
    later = [
        replace(j, held=False, reason="Resources", admin_comment=admin_comment_for(r1.planned[
            j.job_id])) if j.job_id in released else j
        for j in jobs
    ]  # fmt: skip
    _, rep2 = _report(later, 2, NOW + 5, plans=r1.planned)
    held = next(j for j in first if j not in released)
    del rep2.extra["projected"][held]  # a cycle whose projection left this job out
    assert write_public(path, rep2) is None
    second = read_public(path)["jobs"]
    assert set(second) == set(first)
    assert second[held] == first[held] and second[released[0]]["state"] == "released"
    # explain of a released job: a projected start, not "public_file is off"
    pending = next(j for j in later if j.job_id == released[0])
    text = "\n".join(explain(pending, read_public(path), NOW + 5)["lines"])
    assert "projected start:" in text and "unknown" not in text
    # then the held job started and a released one left the queue: both dropped
    gone = [j for j in later if j.job_id not in (held, released[0])]
    started = replace(next(j for j in later if j.job_id == held), state="RUNNING",
                      held=False, start_time=NOW + 6,
                      admin_comment=admin_comment_for(r1.planned[held]))  # fmt: skip
    _, rep3 = _report([*gone, started], 3, NOW + 10, plans=None)
    rep3.extra["projected"].pop(held, None)
    assert write_public(path, rep3) is None
    third = read_public(path)["jobs"]
    assert held not in third and released[0] not in third


def test_explain_says_what_is_missing_when_the_summary_is_set(monkeypatch, capsys, tmp_path):
    """A released job the summary does not name: not "public_file is off" when it is
    set; when the file cannot be read, explain names it."""
    from slurm_mig.cli import explain as cli
    from slurm_mig.geometry import Placement
    from slurm_mig.slurm.assignment import Assignment

    a = Assignment("5", 0, "gpu01", 0, "A100-40GB", "3g.20gb", Placement(0, 4), 0, 0, 90.0, 9.0)
    released = job("5", held=False, reason="Resources", admin_comment=admin_comment_for(a))
    text = "\n".join(explain(released, {"jobs": {}}, NOW)["lines"])
    assert "public_file is off" not in text and "no projection for it yet" in text
    public = tmp_path / "plan.json"

    class Slurm:
        def jobs(self, partition=None):
            return [released]

    config = SimpleNamespace(partition="mig", cycle=5.0, public_file=public)
    monkeypatch.setattr("slurm_mig.slurm.client.SlurmClient", Slurm)
    monkeypatch.setattr("slurm_mig.config.load_config", lambda path: config)
    assert cli.run(argparse.Namespace(job="5", config=None, json=False)) == 0
    out = capsys.readouterr().out
    assert "public_file is off" not in out
    assert f"projected start: unknown (cannot read the planner's summary {public})" in out
    config.public_file = None
    assert cli.run(argparse.Namespace(job="5", config=None, json=False)) == 0
    assert "[paths] public_file is off" in capsys.readouterr().out
