"""The ``slurm-mig`` command, driven as an operator would: in-process ``main([...])``
for speed, and the real ``python -m slurm_mig`` where the process boundary matters
(tracebacks, broken pipes, what gets imported)."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import shared_file

from slurm_mig.cli import common as cli_common
from slurm_mig.cli import demo as cli_demo
from slurm_mig.cli import main
from slurm_mig.geometry import get_model
from slurm_mig.plan import validate_plan
from slurm_mig.workload import generate, load_task_source, load_tasks, tasks_to_csv

ROOT = Path(__file__).resolve().parents[2]
A100 = get_model("A100-40GB")
RODINIA_IDS = {
    "Backprop", "BFS", "CFD", "Gaussian", "HeartWall", "HotSpot", "LavaMD", "LU",
    "Myocyte", "NN", "NW", "SRAD_V1", "SRAD_v2", "StreamCluster", "ParticleFilter",
    "PathFinder",
}  # fmt: skip
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def run_module(*argv: str, **kw) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "slurm_mig", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        **kw,
    )


def embedded_tasks():
    return load_task_source("rodinia-a100", A100)


# ---------------------------------------------------------------------------
# plan: the table


def test_plan_table_lists_every_task_sorted_by_start_then_the_summary(capsys):
    rc, out, err = run(capsys, "plan", "rodinia-a100", "--planner", "far")
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["TASK", "GPU", "PROFILE", "PLACEMENT", "SLICES", "START", "END"]
    rows = [ln.split() for ln in lines[1 : lines.index("")]]
    assert {r[0] for r in rows} == RODINIA_IDS
    starts = [float(r[5]) for r in rows]
    assert starts == sorted(starts)
    for r in rows:
        assert r[1] == "0"
        assert r[2] in {p.name for p in A100.profiles}
        assert float(r[6]) > float(r[5])
    summary = dict(ln.split(None, 1) for ln in lines[lines.index("") + 1 :] if ln)
    assert set(summary) >= {"makespan", "lower", "rho", "reconfigurations", "planning", "planner"}
    # the table's figures are the plan's
    rc, out, _ = run(capsys, "plan", "rodinia-a100", "--planner", "far", "--json")
    data = json.loads(out)
    assert summary["makespan"] == f"{data['makespan']:.3f} s"
    rho = data["makespan"] / data["lower_bound"]
    assert summary["rho"] == f"{rho:.3f} (vs the {data['bound']} bound)"
    n_ops = len(data["reconfigurations"])
    assert summary["reconfigurations"].startswith(f"{n_ops} (")
    assert summary["planner"].startswith("far on 1 x A100-40GB")
    assert max(float(r[6]) for r in rows) == pytest.approx(data["makespan"], abs=1e-3)


def test_plan_default_planner_is_auto_and_its_plan_is_valid(capsys):
    rc, out, err = run(capsys, "plan", "rodinia-a100", "--json")
    assert rc == 0, err
    data = json.loads(out)
    assert validate_plan(data, embedded_tasks()) == []
    assert cli_common.DEFAULT_PLANNER == "auto"


# ---------------------------------------------------------------------------
# plan --json: the contract


def test_plan_json_is_the_plan_contract_and_nothing_else(capsys):
    rc, out, err = run(
        capsys, "plan", "rodinia-a100", "--gpu-model", "A100", "--planner", "far", "--json"
    )
    assert rc == 0, err
    data = json.loads(out)  # the whole of stdout is one JSON document
    assert out.startswith("{\n  ")  # indent 2
    assert {"gpu_model", "gpus", "makespan", "lower_bound", "tasks", "reconfigurations"} <= set(
        data
    )
    assert data["gpu_model"] == "A100-40GB" and data["gpus"] == 1
    assert {t["id"] for t in data["tasks"]} == RODINIA_IDS
    for t in data["tasks"]:
        assert {"id", "gpu", "profile", "placement", "slices", "start", "end", "batch"} <= set(t)
        assert set(t["placement"]) == {"start", "size"}
        assert t["slices"] == list(
            range(t["placement"]["start"], t["placement"]["start"] + len(t["slices"]))
        )
    for r in data["reconfigurations"]:
        assert {"gpu", "op", "profile", "placement", "start", "end"} <= set(r)
        assert r["op"] in ("create", "destroy")
    assert data["makespan"] == pytest.approx(max(t["end"] for t in data["tasks"]))
    assert validate_plan(data, embedded_tasks()) == []


def test_verbose_logs_go_to_stderr_and_json_stays_clean(capsys):
    rc, out, err = run(capsys, "-v", "plan", "rodinia-a100", "--planner", "far", "--json")
    assert rc == 0
    json.loads(out)
    assert "slurm-mig: INFO:" in err


@pytest.mark.parametrize("fmt", ["wide", "long", "json"])
def test_plan_reads_every_input_format_and_honours_inf(tmp_path, capsys, fmt):
    model = get_model("A30")
    times = {
        "a": {1: 40.0, 2: 21.0, 4: 11.0},
        "b": {1: float("inf"), 2: 30.0, 4: 16.0},  # cannot run on one slice
        "c": {1: 9.0, 2: 5.0, 4: 4.0},
        "d": {1: 12.0, 2: 6.5, 4: 3.5},
    }
    path = tmp_path / ("tasks.json" if fmt == "json" else "tasks.csv")
    if fmt == "wide":
        rows = ["id,1,2,4"] + [f"{k},{v[1]},{v[2]},{v[4]}" for k, v in times.items()]
    elif fmt == "long":
        rows = ["kernel,size,seconds"] + [
            f"{k},{s},{t}" for k, v in times.items() for s, t in v.items()
        ]
    else:
        rows = [
            json.dumps(
                [
                    {
                        "id": k,
                        "times": {
                            str(s): (t if t != float("inf") else "inf") for s, t in v.items()
                        },
                    }
                    for k, v in times.items()
                ]
            )
        ]
    path.write_text("\n".join(rows) + "\n")
    rc, out, err = run(
        capsys,
        "plan",
        str(path),
        "--gpu-model",
        "A30-24GB",
        "--gpus",
        "2",
        "--planner",
        "far",
        "--json",
    )
    assert rc == 0, err
    data = json.loads(out)
    assert data["gpus"] == 2 and data["gpu_model"] == "A30-24GB"
    assert validate_plan(data, load_tasks(path, model)) == []
    b = next(t for t in data["tasks"] if t["id"] == "b")
    assert len(b["slices"]) != 1


# ---------------------------------------------------------------------------
# plan --gantt


def test_gantt_writes_a_png_and_says_where(tmp_path, capsys):
    png = tmp_path / "far.png"
    rc, out, err = run(capsys, "plan", "rodinia-a100", "--planner", "far", "--gantt", str(png))
    assert rc == 0, err
    data = png.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 20_000
    assert str(png) in err
    assert out.splitlines()[0].startswith("TASK")


def test_gantt_of_several_gpus(tmp_path, capsys):
    model = get_model("A30")
    csv_path = tmp_path / "syn.csv"
    csv_path.write_text(tasks_to_csv(generate(14, model, seed=3), model.planner_sizes))
    png = tmp_path / "two.png"
    rc, _, err = run(
        capsys,
        "plan",
        str(csv_path),
        "--gpu-model",
        "A30",
        "--gpus",
        "2",
        "--planner",
        "far",
        "--gantt",
        str(png),
        "--json",
    )
    assert rc == 0, err
    assert png.read_bytes().startswith(PNG_MAGIC)


def test_matplotlib_is_not_imported_without_gantt():
    code = (
        "import sys, io, contextlib; from slurm_mig.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    rc = main(['plan', 'rodinia-a100', '--planner', 'far'])\n"
        "print(rc, 'matplotlib' in sys.modules)\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        timeout=120,
    )
    assert res.stdout.split() == ["0", "False"], res.stderr


# ---------------------------------------------------------------------------
# bad input: one line on stderr, exit 2, never a traceback

WIDE = "id,1,2,3,4,7\n"
BAD_INPUTS = [
    ("unknown-model", None, ["--gpu-model", "V100"], "unknown GPU model 'V100'"),
    ("size-5", WIDE.replace(",7", ",5,7") + "a,1,1,1,1,1,1\n", [], "size 5"),
    ("size-3-on-a30", None, ["--gpu-model", "A30"], "size 3"),
    ("negative", WIDE + "a,4,-2,1,1,1\n", [], "must be > 0"),
    ("missing", WIDE + "a,4,,1,1,1\n", [], "missing time"),
    ("not-a-number", WIDE + "a,4,fast,1,1,1\n", [], "'fast' is not a number"),
    ("duplicate", WIDE + "a,4,3,2,1,1\na,4,3,2,1,1\n", [], "duplicate task id 'a'"),
    ("empty", "", [], "empty file"),
    ("header-only", WIDE, [], "no tasks"),
    ("bad-json", '[{"id": "a", "times": {"1": 3,}}]', [], "not valid JSON"),
    ("nonexistent", "<none>", [], "no such file"),
    (
        "unknown-planner",
        WIDE + "a,4,3,2,1,1\n",
        ["--planner", "greedy"],
        "unknown policy 'greedy'",
    ),
    ("no-model", WIDE + "a,4,3,2,1,1\n", ["<no-model>"], "--gpu-model"),
    # issue 10: each of these was a traceback or a forged table line
    ("deep-json", "[" * 3000 + "]" * 3000, [], "JSON nested too deeply"),
    (
        "big-int-json",
        '[{"id": "a", "times": {"1": ' + "9" * 400 + ', "2": 1, "3": 1, "4": 1, "7": 1}}]',
        [],
        "is more than 1e+12 seconds",
    ),
    ("big-int-csv", WIDE + "a," + "9" * 400 + ",1,1,1,1\n", [], "is more than 1e+12 seconds"),
    (
        "null-id-json",
        '[{"id": null, "times": {"1": 1, "2": 1, "3": 1, "4": 1, "7": 1}}]',
        [],
        "id null is not a task id; give a non-empty string or a whole number",
    ),  # fmt: skip
    (
        "bool-id-json",
        '[{"id": true, "times": {"1": 1, "2": 1, "3": 1, "4": 1, "7": 1}}]',
        [],
        "id true is not a task id",
    ),  # fmt: skip
    (
        "newline-id-csv",
        WIDE + '"a\nb  0  7g.40gb",1,1,1,1,1\n',
        [],
        "contains the control character '\\n'; ids are printed one per line",
    ),  # fmt: skip
]


def _bad_argv(tmp_path, name, content, extra):
    if content is None:
        source = "rodinia-a100"
    elif content == "<none>":
        source = str(tmp_path / "does-not-exist.csv")
    else:
        json_file = name == "bad-json" or name.endswith("json")
        source = str(tmp_path / (f"{name}.json" if json_file else f"{name}.csv"))
        Path(source).write_text(content)
    model = [] if "<no-model>" in extra or "--gpu-model" in extra else ["--gpu-model", "A100"]
    return ["plan", source, *model, *[x for x in extra if x != "<no-model>"]]


@pytest.mark.parametrize(
    ("name", "content", "extra", "needle"), BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS]
)
def test_bad_input_is_one_line_exit_2(tmp_path, capsys, name, content, extra, needle):
    rc, out, err = run(capsys, *_bad_argv(tmp_path, name, content, extra))
    assert rc == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("slurm-mig: error: ")
    assert needle in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "name", ["negative", "unknown-planner", "nonexistent", "deep-json", "big-int-json"]
)
def test_bad_input_from_the_real_command_has_no_traceback(tmp_path, name):
    _, content, extra, needle = next(b for b in BAD_INPUTS if b[0] == name)
    res = run_module(*_bad_argv(tmp_path, name, content, extra))
    assert res.returncode == 2
    assert res.stderr.startswith("slurm-mig: error: ") and res.stderr.count("\n") == 1
    assert needle in res.stderr and "Traceback" not in res.stderr


def test_unwritable_gantt_path_is_an_error_not_a_traceback(tmp_path, capsys):
    rc, _, err = run(
        capsys,
        "plan",
        "rodinia-a100",
        "--planner",
        "far",
        "--gantt",
        str(tmp_path / "no" / "such" / "dir.png"),
    )
    assert rc == 2 and err.startswith("slurm-mig: error: ") and err.count("\n") == 1


def test_closed_pipe_ends_quietly(tmp_path):
    model = get_model("A100")
    big = tmp_path / "big.csv"
    big.write_text(tasks_to_csv(generate(600, model, seed=1), model.planner_sizes))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "slurm_mig",
            "plan",
            str(big),
            "--gpu-model",
            "A100",
            "--planner",
            "far",
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    first = proc.stdout.readline()
    proc.stdout.close()  # like `| head -1`
    err = proc.stderr.read().decode()
    proc.wait(timeout=120)
    assert first == b"{\n"
    assert "Traceback" not in err and "Exception ignored" not in err and "BrokenPipe" not in err
    assert proc.returncode == 141  # the JSON (> 100 kB) cannot fit in the pipe's buffer


# ---------------------------------------------------------------------------
# validate


def _plan_file(tmp_path, capsys) -> tuple[Path, dict]:
    rc, out, _ = run(capsys, "plan", "rodinia-a100", "--planner", "far", "--json")
    assert rc == 0
    path = tmp_path / "plan.json"
    path.write_text(out)
    return path, json.loads(out)


def test_validate_accepts_a_planned_batch(tmp_path, capsys):
    path, _ = _plan_file(tmp_path, capsys)
    assert run(capsys, "validate", str(path)) == (0, "valid\n", "")
    assert run(capsys, "validate", str(path), "--tasks", "rodinia-a100") == (0, "valid\n", "")


def test_validate_reports_two_overlapping_tasks(tmp_path, capsys):
    path, data = _plan_file(tmp_path, capsys)
    a, b = data["tasks"][0], data["tasks"][1]
    for key in ("gpu", "profile", "placement", "slices", "start", "end"):
        b[key] = a[key]  # b now runs on a's instance at the same time
    path.write_text(json.dumps(data))
    rc, out, err = run(capsys, "validate", str(path))
    assert rc == 1
    assert "overlap" in out and repr(a["id"]) in out and repr(b["id"]) in out
    assert "violation" in err


def test_validate_with_tasks_catches_a_wrong_runtime_and_a_missing_task(tmp_path, capsys):
    path, data = _plan_file(tmp_path, capsys)
    dropped = data["tasks"].pop()
    data["tasks"][0]["end"] = data["tasks"][0]["start"] + 0.001
    path.write_text(json.dumps(data))
    rc, out, _ = run(capsys, "validate", str(path))
    assert rc == 0  # without the batch the shorter run is still a legal schedule
    rc, out, _ = run(capsys, "validate", str(path), "--tasks", "rodinia-a100")
    assert rc == 1
    assert f"task {dropped['id']!r}: scheduled 0 times" in out
    assert f"task {data['tasks'][0]['id']!r}: runs 0.001000s" in out


@pytest.mark.parametrize(
    ("content", "needle"), [("{not json", "not valid JSON"), ("[1, 2]", "expected a plan object")]
)
def test_validate_of_a_file_that_is_no_plan_is_exit_2(tmp_path, capsys, content, needle):
    path = tmp_path / "plan.json"
    path.write_text(content)
    rc, out, err = run(capsys, "validate", str(path))
    assert rc == 2 and out == "" and needle in err and err.count("\n") == 1


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (
            '{"gpu_model": "A100-40GB", "gpus": 1, "tasks": 5}',
            "plan: 'tasks' must be a list, got 5",
        ),
        (
            '{"gpu_model": "A100-40GB", "gpus": 1, "tasks": [5]}',
            "task #1: must be an object, got 5",
        ),
        (
            '{"gpu_model": "A100-40GB", "gpus": 1.5, "tasks": []}',
            "plan header: 'gpus' must be a whole number, got 1.5",
        ),
        (
            '{"gpu_model": "A100-40GB", "gpus": 1, "reconfigurations": {}}',
            "plan: 'reconfigurations' must be a list, got {}",
        ),
    ],
)
def test_validate_of_a_plan_of_the_wrong_shape_names_it(tmp_path, capsys, content, needle):
    path = tmp_path / "plan.json"
    path.write_text(content)
    rc, out, err = run(capsys, "validate", str(path))
    assert rc == 1 and out.splitlines() == [needle]
    assert err == "invalid: 1 violation\n"


def test_validate_refuses_a_fractional_gpu(tmp_path, capsys):
    data = json.loads(run(capsys, "plan", "rodinia-a100", "--planner", "far", "--json")[1])
    data["tasks"][0]["gpu"] = 0.5  # was read as gpu 0: "valid"
    data["reconfigurations"][0]["placement"]["start"] = 0.5
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    rc, out, _ = run(capsys, "validate", str(path))
    assert rc == 1
    assert f"task {data['tasks'][0]['id']!r}: 'gpu' must be a whole number, got 0.5" in out
    assert "reconfiguration #1: 'start' must be a whole number, got 0.5" in out


@pytest.mark.parametrize("command", ["plan", "validate"])
def test_deeply_nested_json_is_one_line(tmp_path, command):
    path = tmp_path / "deep.json"
    path.write_text("[" * 3000 + "]" * 3000)
    res = run_module(command, str(path), *(["--gpu-model", "A100"] if command == "plan" else []))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert (
        res.stderr == f"slurm-mig: error: {path}: JSON nested too deeply to be a slurm-mig input\n"
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["plan", "/dev/zero", "--gpu-model", "A100"],
        ["validate", "/dev/zero"],
        ["forecast", "/dev/zero", "--capacity", "40G"],
    ],
    ids=["plan", "validate", "forecast"],
)
def test_an_endless_input_is_cut_at_64_mib(tmp_path, argv):
    # `plan /dev/zero` reached 3 GB in 10 s
    # VmHWM, not ru_maxrss: Linux keeps ru_maxrss across execve, so a child of a large
    # pytest process would report the parent's size. CPU time, not wall: a loaded machine
    # cannot make it fail, reading on past the cut would.
    code = (
        "import re, sys, time\n"
        "from slurm_mig.cli import main\n"
        "t = time.process_time()\n"
        f"rc = main({argv!r})\n"
        "hwm = re.search(r'VmHWM:\\s+(\\d+) kB', open('/proc/self/status').read())\n"
        "print(rc, round(time.process_time() - t, 1), int(hwm.group(1)) // 1024)\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        timeout=60,
    )
    rc, seconds, mib = res.stdout.split()
    assert rc == "2" and float(seconds) < 5 and int(mib) < 400, res.stdout
    assert res.stderr == (
        "slurm-mig: error: /dev/zero: larger than 64 MiB, more than any input of slurm-mig "
        "needs; is it the right file?\n"
    )


ARG_ERRORS = [
    [],
    ["bogus"],
    ["plan"],
    ["plan", "rodinia-a100", "--gpus", "0"],
    ["validate"],
    ["validate", "p.json", "--what"],
    ["demo", "--nope"],
    ["bench"],
    ["check-config", "a", "b"],
    ["keygen", "--nope"],
    ["forecast", "t.csv"],
    ["planner", "--nope"],
    ["simulate", "--gpus", "x"],
]


@pytest.mark.parametrize("argv", ARG_ERRORS, ids=[" ".join(a) or "none" for a in ARG_ERRORS])
def test_usage_errors_are_one_line_for_every_command(argv):
    # argparse printed a usage block of up to five lines; the README promises one line
    res = run_module(*argv)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.count("\n") == 1 and res.stderr.startswith("slurm-mig: error: "), res.stderr
    command = argv[0] if argv and argv[0] != "bogus" else ""
    assert res.stderr.rstrip().endswith(f"(see 'slurm-mig {command} --help')".replace("  ", " "))


# ---------------------------------------------------------------------------
# demo


def test_demo_compares_every_planner_and_draws_far(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, out, err = run(capsys, "demo")
    assert rc == 0, err
    lines = out.splitlines()
    rows = {
        ln.split()[0]: ln
        for ln in lines
        if ln and ln.split()[0] in {p for p, _, _ in cli_demo.DEMO_PLANNERS}
    }
    assert set(rows) == {p for p, _, _ in cli_demo.DEMO_PLANNERS}
    far = rows["far"].split()
    assert far[4] == "1.000" and "valid" in far  # sigma of FAR against itself
    assert "FAR: rho 1.22" in rows["far"]
    for name, label, paper in cli_demo.DEMO_PLANNERS:
        if paper is not None:
            assert f"{label}: sigma {paper:.2f}" in rows[name]
        assert "INVALID" not in rows[name]
    png = tmp_path / cli_demo.DEFAULT_GANTT
    assert png.read_bytes().startswith(PNG_MAGIC)
    assert f"FAR Gantt chart: {png.resolve()}" in out


def test_demo_survives_a_failing_planner(tmp_path, capsys, monkeypatch):
    planners = (("far", "FAR", None), ("fixpart-9", "FIXPART(9)", 1.0))
    monkeypatch.setattr(cli_demo, "DEMO_PLANNERS", planners)
    rc, out, err = run(capsys, "demo", "--gantt", str(tmp_path / "g.png"))
    assert rc == 0, err
    row = next(ln for ln in out.splitlines() if ln.startswith("fixpart-9"))
    assert "n/a (" in row
    assert (tmp_path / "g.png").exists()


# ---------------------------------------------------------------------------
# help, version, data


@pytest.mark.parametrize("command", ["plan", "validate", "demo", "bench"])
def test_every_command_has_help(capsys, command):
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith(f"usage: slurm-mig {command}")
    if command in ("plan", "validate"):
        for needle in ("id,1,2,3,4,7", "kernel,size,seconds", '"times"', "'inf'", "rodinia-a100"):
            assert needle in text
    if command == "plan":
        assert "default: auto" in text and "A100-40GB" in text and "fixpart-1-1-1-1-1-1-1" in text


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.startswith("slurm-mig 0.1.0")


def test_no_command_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main([])
    assert exc.value.code == 2


def test_embedded_rodinia_table_is_the_mean_of_the_authors_runs():
    text = (ROOT / "slurm_mig" / "data" / "rodinia_a100.csv").read_text()
    wide = list(csv.DictReader(text.splitlines()))
    assert [r["id"] for r in wide] and {r["id"] for r in wide} == RODINIA_IDS
    src = shared_file("far-reference/rodinia_A100_mean_long.csv")
    if not src.exists():
        pytest.skip(f"{src} not present")
    long = {(r["kernel"], r["size"]): float(r["seconds"]) for r in csv.DictReader(src.open())}
    got = {(r["id"], s): float(r[s]) for r in wide for s in ("1", "2", "3", "4", "7")}
    assert got == long


def test_batch_size_concatenates_reversed_batches_into_one_valid_plan(capsys):
    code, out, _ = run(capsys, "plan", "rodinia-a100", "--batch-size", "5", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["planner"] == "far-multibatch"
    assert sorted({t["batch"] for t in data["tasks"]}) == [0, 1, 2, 3]
    assert validate_plan(data, embedded_tasks()) == []
    # each batch starts no earlier than the previous batch's first task
    first = {b: min(t["start"] for t in data["tasks"] if t["batch"] == b) for b in range(4)}
    assert first[0] <= first[1] <= first[2] <= first[3]


def test_batch_size_with_a_baseline_planner_is_refused(capsys):
    code, _, err = run(
        capsys, "plan", "rodinia-a100", "--batch-size", "5", "--planner", "fixpart-7"
    )
    assert code == 2
    assert "--batch-size" in err and "Traceback" not in err


@pytest.mark.parametrize("name", ["adaptive", "first-fit", "smart-mig"])
def test_plan_refuses_an_online_policy_without_a_state(capsys, name):
    code, out, err = run(capsys, "plan", "rodinia-a100", "--planner", name)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert f"{name!r} is an online policy" in err and "--start STATE.json" in err


def test_time_budget_bounds_the_exact_search_and_says_if_it_proved_optimality(capsys):
    # 16 kernels cannot be proven optimal in a quarter second: the plan is the best found
    code, out, _ = run(
        capsys, "plan", "rodinia-a100", "--planner", "exact", "--time-budget", "0.25", "--json"
    )
    assert code == 0
    data = json.loads(out)
    assert data["stats"]["optimal"] is False
    assert data["stats"]["planning_seconds"] < 2.0
    assert validate_plan(data, embedded_tasks()) == []
    far = json.loads(run(capsys, "plan", "rodinia-a100", "--planner", "far", "--json")[1])
    assert data["makespan"] <= far["makespan"] + 1e-9


@pytest.mark.parametrize("value", ["0", "-1", "soon", "inf"])
def test_time_budget_must_be_a_positive_number(capsys, value):
    with pytest.raises(SystemExit) as exc:
        main(["plan", "rodinia-a100", "--planner", "exact", "--time-budget", value])
    assert exc.value.code == 2
    assert "--time-budget" in capsys.readouterr().err


# ---------------------------------------------------------------------------
# plan --objective


def _mean_end(data: dict) -> float:
    return sum(t["end"] for t in data["tasks"]) / len(data["tasks"])


def test_plan_objective_balanced_is_the_default_and_beats_fars_mean_completion(capsys):
    far = json.loads(
        run(
            capsys, "plan", "rodinia-a100", "--planner", "far", "--objective", "makespan", "--json"
        )[1]
    )
    assert "objective" not in far["stats"]  # FAR's plan as published
    default = json.loads(run(capsys, "plan", "rodinia-a100", "--planner", "far", "--json")[1])
    assert default["stats"]["objective"] == "balanced"
    for objective in ("balanced", "jct"):
        rc, out, _ = run(
            capsys, "plan", "rodinia-a100", "--planner", "far", "--objective", objective, "--json"
        )
        data = json.loads(out)
        assert rc == 0 and validate_plan(data, embedded_tasks()) == []
        assert _mean_end(data) < _mean_end(far)
        if objective == "balanced":
            assert data["tasks"] == default["tasks"]
            assert data["makespan"] <= 1.05 * far["makespan"] + 1e-9


def test_plan_objective_names_a_planner_without_one_and_a_bad_name(capsys):
    code, _, err = run(capsys, "plan", "rodinia-a100", "--planner", "exact", "--objective", "jct")
    assert code == 2
    assert "--objective jct" in err and "'exact'" in err and "Traceback" not in err
    with pytest.raises(SystemExit) as exc:
        main(["plan", "rodinia-a100", "--objective", "fastest"])
    assert exc.value.code == 2
    assert "--objective" in capsys.readouterr().err
    # a planner without an objective still plans when none is asked for
    assert run(capsys, "plan", "rodinia-a100", "--planner", "fixpart-7", "--json")[0] == 0
