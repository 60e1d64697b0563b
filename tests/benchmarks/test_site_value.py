"""The pure parts of benchmarks/site_value.py without a Slurm: the trace as both runs
submit it (compression, time limits rounded up to Slurm's minutes, the static run's
GRES requests, slurm-mig's hints) and the figures."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

from slurm_mig.demo.tracejob import parse_times, seconds_on
from slurm_mig.hints import parse_hints
from slurm_mig.job import Job

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("site_value", ROOT / "benchmarks" / "site_value.py")
sv = importlib.util.module_from_spec(_spec)
sys.modules["site_value"] = sv
_spec.loader.exec_module(sv)

GIB = 1 << 30


def job(i: int, arrival: float, memory: int = GIB, limit: float = 1200.0, **times) -> Job:
    t = {int(k[1:]): v for k, v in times.items()} or {1: 400.0, 2: 250.0, 3: 200.0, 7: 100.0}
    return Job(f"j{i}", arrival, t, memory=memory, kind=f"k{i}", time_limit=limit)


@pytest.mark.parametrize(
    ("limit", "compress", "minutes"),
    [
        (1200.0, 20, 1),  # exactly one minute compressed
        (1201.0, 20, 2),  # a second over: the next minute
        (600.0, 20, 1),  # below a minute: at least 1
        (7200.0, 20, 6),
        (7200.0, 50, 3),  # 144 s
        (math.inf, 20, None),  # no limit: no --time
    ],
)
def test_limit_minutes_rounds_up_to_slurm_minutes(limit, compress, minutes):
    assert sv.limit_minutes(limit, compress) == minutes


def test_trace_is_a_prefix_of_the_thousand_job_trace_with_slurms_limits():
    jobs = sv.trace_jobs(30, seed=0, compress=20)
    longer = sv.trace_jobs(60, seed=0, compress=20)
    assert [j.id for j in jobs] == [j.id for j in longer[:30]]
    assert [j.arrival for j in jobs] == [j.arrival for j in longer[:30]]
    for j in jobs:
        assert j.user == "user1"  # one user: every real job runs as nobody
        # the limit Slurm holds (whole compressed minutes), in trace seconds, above the
        # longest runtime
        assert j.time_limit % (60 * 20) == 0
        assert j.time_limit >= max(t for t in j.times.values() if math.isfinite(t))


def test_submissions_compress_arrivals_and_carry_times_memory_and_hints():
    jobs = [job(2, 110.0, memory=8 * GIB, limit=3000.0), job(1, 10.0)]
    subs = sv.plan_submissions(jobs, compress=20, layout_sizes=[1, 2, 3], typed=False)
    assert [s.id for s in subs] == ["j1", "j2"]  # arrival order
    assert [s.at for s in subs] == [0.0, 5.0]  # (110 - 10) / 20
    assert [s.minutes for s in subs] == [1, 3]  # 3000 / 20 = 150 s -> 3 min
    assert parse_times(subs[0].times) == {1: 400.0, 2: 250.0, 3: 200.0, 7: 100.0}
    assert subs[1].memory == 8 * GIB
    hints = parse_hints(subs[1].comment)
    assert (hints.key, hints.mem) == ("k2", 8 * GIB)


def test_static_requests_untyped_where_every_instance_fits_else_typed():
    small, big = job(1, 0.0), job(2, 0.0, memory=8 * GIB)  # 8 GiB: not on a 1g.5gb
    assert sv.static_gres(small, [1, 2, 3], typed=False) == "gpu:1"
    assert sv.static_gres(small, [1, 2, 3], typed=True) == "gpu:1g.5gb:1"
    # Slurm's GRES cannot ask for "one of 2g, 3g": the smallest the job runs on
    assert sv.static_gres(big, [1, 2, 3], typed=False) == "gpu:2g.10gb:1"
    assert sv.static_gres(big, [2, 3], typed=False) == "gpu:1"
    only7 = job(3, 0.0, t7=50.0)
    assert sv.static_gres(only7, [3, 7], typed=False) == "gpu:7g.40gb:1"
    with pytest.raises(ValueError, match="runs on"):
        sv.static_gres(only7, [1, 2, 4], typed=False)


def test_layout_labels_and_sizes():
    label = sv.layout_label("7/2-2-3", typed=False)
    assert label == "static:layout=7/2-2-3:match=fit"
    assert sv.label_layout(label) == ("7/2-2-3", False)
    assert sv.label_layout("static:layout=4-3:match=exact") == ("4-3", True)
    assert sv.layout_sizes("7/2-2-3", 2) == [2, 3, 7]
    assert sv.layout_sizes("7/2-2-3", 1) == [7]


def test_summary_figures_of_job_rows():
    rows = [
        {"submit": 0.0, "start": 1.0, "end": 11.0, "size": 7, "state": "COMPLETED"},
        {"submit": 2.0, "start": 2.5, "end": 22.0, "size": 1, "state": "COMPLETED"},
        {"submit": 4.0, "start": 5.0, "end": 6.0, "size": 2, "state": "FAILED"},
        {"submit": 5.0, "start": None, "end": None, "size": None, "state": "PENDING"},
    ]
    fig = sv.summarise(rows, slices_total=14)
    assert (fig["jobs"], fig["completed"]) == (4, 2)
    assert fig["states"] == {"COMPLETED": 2, "FAILED": 1, "PENDING": 1}
    assert fig["jct_mean"] == pytest.approx((11 + 20) / 2)
    assert fig["jct_p95"] == 20.0
    assert fig["makespan"] == 22.0  # last end - first submit
    assert fig["wait_mean"] == pytest.approx((1 + 0.5) / 2)
    assert fig["utilization"] == pytest.approx((7 * 10 + 19.5 + 2) / (14 * 22))
    trace = sv.scaled(fig, 20)
    assert trace["jct_mean"] == pytest.approx(20 * fig["jct_mean"])
    assert trace["utilization"] == fig["utilization"] and trace["completed"] == 2
    assert sv.rel_error(110.0, 100.0) == pytest.approx(0.1)


def test_quantile_is_the_simulators():
    from slurm_mig.sim.metrics import _quantile

    xs = sorted([5.0, 1.0, 9.0, 3.0, 7.0, 2.0])
    assert all(sv.quantile(xs, q) == _quantile(xs, q) for q in (0.5, 0.95, 1.0))
    assert math.isnan(sv.quantile([], 0.95))


def test_job_program_seconds_follow_the_profile_and_the_memory():
    times = {1: 400.0, 2: 250.0, 7: 100.0}
    assert seconds_on("A100-40GB", "2g.10gb", times, GIB) == (2, 250.0)
    # the double-memory 1g: one compute slice, 10 GB
    assert seconds_on("A100-40GB", "1g.10gb", times, 8 * GIB) == (1, 400.0)
    assert seconds_on("A100-40GB", "1g.5gb", times, 8 * GIB) == (1, math.inf)
    assert seconds_on("A100-40GB", "3g.20gb", times, GIB) == (3, math.inf)  # no time
    assert seconds_on("A100-40GB", "m0g1", times, GIB) == (None, math.inf)
    assert seconds_on("A100-40GB", None, times, GIB) == (None, math.inf)


@pytest.mark.parametrize(
    "setting,says",
    [("algorithm=bogus", "--planner: unknown policy 'bogus'"), ("nonsense", "give KEY=VALUE")],
)
def test_a_bad_planner_setting_is_one_line_before_anything_runs(capsys, setting, says):
    with pytest.raises(SystemExit) as exc:
        sv.parse_args(["--planner", setting])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err


def test_the_simulator_paces_and_delays_slurm_mig_as_measured_in_trace_seconds():
    jobs = sv.trace_jobs(40, seed=0, compress=20)
    sims = {}
    for periods in ("default", "compressed"):
        args = sv.parse_args(["--layout", "4-3", "--jobs", "40", "--periods", periods])
        sims[periods], _ = sv.simulated(args, jobs)
    # the default 5 s cycle is 100 s of the trace at 1/20; compressed, 5 s; the 5 s
    # from a release to the start are 100 s of the trace either way
    assert sims["default"]["slurm-mig"]["how"].endswith(
        "else every 100 s, 100 s from release to start"
    )
    assert sims["compressed"]["slurm-mig"]["how"].endswith(
        "else every 5 s, 100 s from release to start"
    )
    assert "every" not in sims["default"]["static"]["how"]  # Slurm alone: neither
    static = [sims[p]["static"]["figures"] for p in ("default", "compressed")]
    assert static[0]["jct_mean"] == static[1]["jct_mean"]
    waits = [sims[p]["slurm-mig"]["figures"]["wait_mean"] for p in ("default", "compressed")]
    assert waits[0] > waits[1]
    args = sv.parse_args(["--layout", "4-3", "--jobs", "40", "--start-delay", "0"])
    undelayed, _ = sv.simulated(args, jobs)
    assert "release" not in undelayed["slurm-mig"]["how"]
    same = ("jct_mean", "wait_mean", "makespan")
    plain, default = undelayed["static"]["figures"], sims["default"]["static"]["figures"]
    assert [plain[k] for k in same] == [default[k] for k in same]  # Slurm alone: no delay
    delayed = sims["default"]["slurm-mig"]["figures"]["wait_mean"]
    assert delayed >= undelayed["slurm-mig"]["figures"]["wait_mean"] + 100.0 - 1e-6


@pytest.mark.parametrize("delay", ["-1", "nan", "3601"])
def test_a_start_delay_out_of_range_is_one_line(capsys, delay):
    with pytest.raises(SystemExit) as exc:
        sv.parse_args(["--start-delay", delay])
    assert exc.value.code == 2
    assert "--start-delay must be seconds within 0..3600" in capsys.readouterr().err


def test_stored_runs_of_slurm_mig_must_have_run_with_the_same_settings(tmp_path):
    doc = {
        "args": {"jobs": 200, "compress": 20.0, "gpus": 40, "seed": 0, "load": 1.0,
                 "periods": "compressed", "planner": []},
        "sims": {"static": {"label": "static:layout=4-3:match=fit"}},
        "runs": {"static": {"figures": {}}, "slurm-mig": {"figures": {}}},
    }  # fmt: skip
    f = tmp_path / "run.json"
    f.write_text(sv.json.dumps(doc))
    with pytest.raises(SystemExit, match="slurm-mig with other settings \\(--periods differ"):
        sv.stored_runs(sv.parse_args(["--real-json", str(f)]), "4-3")
    runs = sv.stored_runs(sv.parse_args(["--real-json", str(f), "--periods", "compressed"]), "4-3")
    assert set(runs) == {"static", "slurm-mig"}
    del doc["runs"]["slurm-mig"]  # Slurm alone does not depend on slurm-mig's settings
    f.write_text(sv.json.dumps(doc))
    assert set(sv.stored_runs(sv.parse_args(["--real-json", str(f)]), "4-3")) == {"static"}


def test_a_later_files_run_replaces_a_stored_run_that_would_be_refused(tmp_path):
    same = {"jobs": 200, "compress": 20.0, "gpus": 40, "seed": 0, "load": 1.0}
    sims = {"static": {"label": "static:layout=4-3:match=fit"}}
    old = {
        "args": {**same, "periods": "default"},
        "sims": sims,
        "runs": {"static": {"figures": {"n": 1}}, "slurm-mig": {"figures": {"n": 2}}},
    }
    new = {"args": {**same, "periods": "compressed"}, "sims": sims,
           "runs": {"slurm-mig": {"figures": {"n": 3}}}}  # fmt: skip
    (tmp_path / "old.json").write_text(sv.json.dumps(old))
    (tmp_path / "new.json").write_text(sv.json.dumps(new))
    argv = ["--real-json", str(tmp_path / "old.json"), "--real-json", str(tmp_path / "new.json")]
    runs = sv.stored_runs(sv.parse_args([*argv, "--periods", "compressed"]), "4-3")
    assert runs["static"]["figures"] == {"n": 1} and runs["slurm-mig"]["figures"] == {"n": 3}
    with pytest.raises(SystemExit, match="new.json ran slurm-mig with other settings"):
        sv.stored_runs(sv.parse_args(argv), "4-3")  # the kept run is compressed's


def test_a_record_folder_that_cannot_be_made_is_one_line(capsys, tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(SystemExit) as exc:
        sv.parse_args(["--record", str(tmp_path / "file" / "rec")])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--record: cannot make the folder" in err and "Traceback" not in err
    assert sv.parse_args(["--record", str(tmp_path / "rec")]).record == str(tmp_path / "rec")
    assert (tmp_path / "rec").is_dir()
