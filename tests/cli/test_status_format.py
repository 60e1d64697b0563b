"""``status`` and ``report`` as operators use them at a shell: full columns when piped
(COLUMNS honoured), ``--watch`` into a pipe (each view printed and flushed), the "Left"
column, ``--noheader``, squeue-style ``-o/--format`` and ``--json``; the format parser
itself (slurm_mig/cli/columns.py)."""

from __future__ import annotations

import io
import json
import sys
from types import SimpleNamespace

import pytest
from support import squeue_job as job

from slurm_mig.cli import columns, main
from slurm_mig.cli import status as status_cli
from slurm_mig.daemon.statusview import build_view, left_text

NOW = 10_000.0
UUID = "MIG-0c6e1a4b-9d8f-5e2a-b7c3-123456789abc"


def _view(drift: float = -250.0):
    """One A100 with job 7 running on a 3g.20gb (``drift``: seconds past its plan), an
    idle 1g.5gb, and job 8 planned on a 2g.10gb after it."""
    status = {
        "cycle": 4,
        "finished": NOW - 1,
        "policy": "adaptive",
        "state": [
            {
                "gpu_model": "A100-40GB",
                "gpus": [
                    {
                        "node": "gpu01",
                        "local": 0,
                        "instances": [
                            {
                                "profile": "3g.20gb",
                                "placement": {"start": 0, "size": 4},
                                "job": "7",
                                "ready_at": NOW - 100,
                            },
                            {"profile": "1g.5gb", "placement": {"start": 4, "size": 1}},
                        ],
                    }
                ],
            }
        ],
        "projected": {
            "8": {
                "state": "planned",
                "node": "gpu01",
                "gpu": 0,
                "profile": "2g.10gb",
                "placement": [4, 2],
                "start": NOW + 50,
            }
        },
        "drift": {"7": drift},
    }
    jobs = [
        job("7", state="RUNNING", held=False, name="resnet-train", start_time=NOW - 100),
        job("8", name="bert", user="bob"),
    ]
    records = {"gpu01": {"jobs": [SimpleNamespace(gpu=0, job_id="7", uuid=UUID, ready=NOW - 99)]}}
    return build_view(status, jobs, records, NOW)


@pytest.fixture
def shown(monkeypatch):
    """status's view is `_view()`, its config a stand-in; returns a setter for the view."""
    state = {"view": _view()}
    monkeypatch.setattr(status_cli, "load_view", lambda config, node: state["view"])
    monkeypatch.setattr("slurm_mig.config.load_config", lambda path: SimpleNamespace())
    monkeypatch.delenv("COLUMNS", raising=False)
    return lambda view: state.update(view=view)


def test_left_is_the_time_left_and_late_once_past_the_plan():
    assert left_text(-250.0) == "4m10s"
    assert left_text(41.0) == "late 41s"
    assert left_text(None) == "-"
    row = _view().gpus[0].instances[0]
    assert row.left == 250.0 and _view().to_json()["gpus"][0]["instances"][0]["left"] == 250.0


def test_status_piped_draws_every_column_in_full(shown, capsys):
    assert main(["status"]) == 0
    out = capsys.readouterr().out
    assert "…" not in out
    for text in ("Profile", "Placement", "UUID", "Since", "Left", UUID, "4m10s", "Why"):
        assert text in out, text
    assert "Drift" not in out
    line = next(x for x in out.splitlines() if UUID in x)
    assert " 7 " in line and "alice" in line  # the row is one line, not folded


def test_status_piped_honours_columns(shown, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "60")
    assert main(["status"]) == 0
    out = capsys.readouterr().out
    assert max(len(x) for x in out.splitlines()) <= 60 and "…" in out


def test_status_late_job_shows_late(shown, capsys):
    shown(_view(drift=41.0))
    assert main(["status"]) == 0
    assert "late 41s" in capsys.readouterr().out


def test_status_watch_into_a_pipe_prints_and_flushes_each_view(shown, monkeypatch):
    class Pipe(io.StringIO):
        flushed = ""

        def flush(self):
            self.flushed = self.getvalue()

    from rich.console import Console

    pipe = Pipe()
    monkeypatch.setattr(status_cli, "_console", lambda: Console(file=pipe, width=200))
    seen = []

    def sleep(seconds):  # what the reader had when status went to sleep
        seen.append(pipe.flushed.count("slurm-mig status ·"))
        if len(seen) > 1:
            raise KeyboardInterrupt

    monkeypatch.setattr(status_cli.time, "sleep", sleep)
    assert main(["status", "--watch", "--interval", "0.5"]) == 0
    assert seen == [1, 2]
    assert "\x1b" not in pipe.getvalue()  # plain text: no cursor moves, no colours


def test_status_watch_ends_quietly_when_the_reader_goes(shown, monkeypatch):
    class Closed(io.StringIO):  # 'status --watch | head' once head has exited
        def write(self, text):
            raise BrokenPipeError

    monkeypatch.setattr(sys, "stdout", Closed())
    monkeypatch.setattr(status_cli.time, "sleep", lambda s: None)
    assert main(["status", "--watch"]) == 141  # as a tool killed by SIGPIPE, not 1


def test_status_noheader_prints_the_list_without_its_header(shown, capsys):
    assert main(["status", "--noheader"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [x.split()[0] for x in lines] == ["7", "-", "8"]
    assert not any("JOBID" in x for x in lines)
    assert lines[0].split()[1:4] == ["alice", "resnet-train", "running"]


def test_status_format_in_squeues_style(shown, capsys):
    assert main(["status", "-o", "%i|%T|%N|%g|%P|%l|%L|%U"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "JOBID|STATE  |NODE |GPU|PROFILE|PLACEMENT|LEFT |UUID",
        f"7    |running|gpu01|0  |3g.20gb|0:4      |4m10s|{UUID}",
        "-    |idle   |gpu01|0  |1g.5gb |4:1      |-    |-",
        "8    |planned|gpu01|0  |2g.10gb|-        |-    |-",
    ]
    assert main(["status", "--noheader", "--format", "%.4i %5u:%m"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "   7 alice:A100-40GB",
        "   - -    :A100-40GB",
        "   8 bob  :A100-40GB",
    ]


def test_status_format_unknown_letter_is_one_line(shown, capsys):
    assert main(["status", "-o", "%i %Z"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown field %Z" in err and "%i %u" in err


def test_status_json_and_its_exclusions(shown, capsys):
    assert main(["status", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    inst = data["gpus"][0]["instances"][0]
    assert (inst["job"], inst["name"], inst["left"], inst["drift"]) == (
        "7",
        "resnet-train",
        250.0,
        -250.0,
    )
    assert main(["status", "--json", "--noheader"]) == 2
    assert "JSON has no header" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["status", "--json", "-o", "%i"])
    assert exc.value.code == 2 and "not allowed with" in capsys.readouterr().err


def test_status_watch_list_repeats_with_the_time(shown, capsys, monkeypatch):
    sleeps = []

    def sleep(seconds):
        sleeps.append(seconds)
        if len(sleeps) > 1:
            raise KeyboardInterrupt

    monkeypatch.setattr(status_cli.time, "sleep", sleep)
    assert main(["status", "--watch", "-o", "%i %T"]) == 0
    out = capsys.readouterr().out
    assert out.count("JOBID STATE") == 2 and out.count("7     running") == 2
    sleeps.clear()
    assert main(["status", "--watch", "--noheader", "-o", "%i"]) == 0
    assert capsys.readouterr().out.split() == ["7", "-", "8"] * 2


# ---------------------------------------------------------------------------
# report


ROWS = [
    {
        "user": "alice",
        "model": "A100-40GB",
        "runs": 3,
        "restarts": 1,
        "seconds": 300.0,
        "slice_seconds": 900.0,
        "gpu_hours": 0.0357,
        "energy_kwh": 0.01234,
        "energy": "modelled",
        "profiles": "3g.20gb",
    },
    {
        "user": "bob",
        "model": "A100-40GB",
        "runs": 12,
        "restarts": 0,
        "seconds": 1200.5,
        "slice_seconds": 2401.0,
        "gpu_hours": 0.0953,
        "energy_kwh": 0.05,
        "energy": "modelled",
        "profiles": "1g.5gb,2g.10gb",
    },
]


@pytest.fixture
def totals(monkeypatch, tmp_path):
    config = SimpleNamespace(state_dir=tmp_path, reports="", nodes={})
    monkeypatch.setattr("slurm_mig.config.load_config", lambda path: config)

    def report(path, by, since):
        return [{by if k == "user" else k: v for k, v in r.items()} for r in ROWS]

    monkeypatch.setattr("slurm_mig.slurm.accounting.report", report)


def test_report_default_table_and_noheader(totals, capsys):
    assert main(["report"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == [
        "USER", "MODEL", "RUNS", "RESTARTS", "SECONDS", "SLICE-S", "GPU-H", "KWH*", "SOURCE",
        "PROFILES"
    ]  # fmt: skip
    assert lines[2].split() == [
        "bob", "A100-40GB", "12", "0", "1200.5", "2401.0", "0.0953", "0.05000", "modelled",
        "1g.5gb,2g.10gb"
    ]  # fmt: skip
    assert lines[-1].startswith("* energy modelled")
    assert main(["report", "--noheader"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [x.split()[0] for x in lines] == ["alice", "bob"]


def test_report_format_and_csv_without_header(totals, capsys):
    assert main(["report", "--by", "account", "-o", "%k:%.3n:%h"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "ACCOUNT:RUN:GPU-H",  # a width cuts the header too, as squeue's does
        "alice  :  3:0.0357",
        "bob    : 12:0.0953",
    ]
    assert main(["report", "--csv", "--noheader"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and out[0].startswith("alice,A100-40GB,3,1,")
    assert main(["report", "-o", "%k %q"]) == 2
    assert "unknown field %q" in capsys.readouterr().err


def test_report_json_is_the_rows(totals, capsys):
    assert main(["report", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == ROWS


# ---------------------------------------------------------------------------
# the format parser


COLS = (columns.Column("a", "AA", ""), columns.Column("b", "BBBB", ""))


def test_format_widths_justify_and_cut():
    fmt = columns.parse_format("%.5a|%3b|100%%", COLS)
    rows = [{"a": "1", "b": "long"}, {"a": "123456", "b": "x"}]
    assert columns.format_lines(fmt, rows, COLS) == [
        "   AA|BBB|100%",
        "    1|lon|100%",
        "12345|x  |100%",
    ]
    auto = columns.parse_format("%a %.b", COLS)
    assert columns.format_lines(auto, rows, COLS, header=False) == ["1      long", "123456    x"]


@pytest.mark.parametrize(
    "text,message",
    [
        ("%a %c", "unknown field %c"),
        ("%a %", "ends in a '%'"),
        ("plain", "names no field"),
        ("%.0a", "width 0 of %a"),
        ("%5000a", "width 5000 of %a"),
        ("%\x1b", "unknown field %'\\x1b'"),
    ],
)
def test_format_errors_name_the_problem(text, message):
    with pytest.raises(ValueError) as exc:
        columns.parse_format(text, COLS)
    assert message in str(exc.value) and str(exc.value).startswith("--format: ")
    if "field" in message:
        assert "(fields: %a %b" in str(exc.value)
