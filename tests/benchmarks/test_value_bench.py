"""benchmarks/value.py on a tiny workload (30 MISO jobs on 2 GPUs): the table has the
whole-GPU, a-priori, best-static and dynamic rows with every column; layouts that cannot
host a job are skipped, not run; the done-when checks judge the default policy."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("value_bench", ROOT / "benchmarks" / "value.py")
value = importlib.util.module_from_spec(_spec)
sys.modules["value_bench"] = value
_spec.loader.exec_module(value)


@pytest.fixture(scope="module")
def tiny() -> list[dict]:
    from slurm_mig.sim.jobs import WorkloadError

    wl = value.Workload("miso-40", "miso-trace", 2, 30)
    try:
        value.build_jobs(wl, 1.0, 0)
    except WorkloadError as exc:  # no shared data here
        pytest.skip(str(exc))
    return value.run_tables([wl], (1.0,), (0, 1), 1, dynamic=("adaptive", "baseline"))


def test_static_sweep_is_every_partition_and_7_mixed_both_matches():
    sweep = value.static_sweep()
    assert len(sweep) == 46 and len(set(sweep)) == 46
    assert "static:layout=7:match=fit" in sweep and "static:layout=4-3:match=exact" in sweep
    assert "static:layout=7/1-1-1-1-1-1-1:match=fit" in sweep
    assert all(value.layout_sizes(s, 2) for s in sweep)


def test_table_has_every_row_and_column(tiny):
    (table,) = tiny
    kinds = [r["kind"] for r in table["rows"]]
    assert kinds == [
        "whole GPUs",
        "a-priori",
        "best static",
        "best static, short 1st",
        "dynamic",
        "dynamic",
    ]
    short = table["rows"][3]
    assert short["policy"] == table["best_static"] + value.SHORT_FIRST
    assert [r["policy"] for r in table["rows"]][-2:] == ["adaptive", "baseline"]
    assert table["best_static"] in value.static_sweep() and table["seeds"] == [0, 1]
    for r in table["rows"]:
        for col in (*value.METRICS, "jct_min", "jct_max", "vs_static", "vs_whole"):
            assert col in r, (r["policy"], col)
        assert r["jct_min"] <= r["jct_mean"] <= r["jct_max"]
    best = next(r for r in table["rows"] if r["kind"] == "best static")
    assert best["vs_static"] == 1.0
    sweep = [a for lab, a in table["all"].items() if lab in value.static_sweep()]
    assert best["jct_mean"] == min(a["jct_mean"] for a in sweep if "jct_mean" in a)
    # MISO jobs that do not fit 1g: the 1g-only layout is skipped, never run
    assert "skipped" in table["all"]["static:layout=1-1-1-1-1-1-1:match=fit"]
    text = value.format_table(table)
    for head in ("JCT MEAN s", "JCT P95 s", "MAKESPAN s", "WAIT MEAN s", "UTIL", "RECONF",
                 "/BEST STATIC", "/NO-MIG"):  # fmt: skip
        assert head in text
    assert "miso-40" in value.format_summary(tiny)


def test_done_when_judges_the_default(tiny):
    checks = value.done_when(tiny)
    names = [c["check"] for c in checks]
    assert "miso-40 1x JCT <= 0.9 x best static" in names
    assert "miso-40 1x JCT <= 1 x best static" in names
    assert "miso-40 1x p95 JCT <= 1.1 x best static" in names
    assert not any("baseline's" in n for n in names)  # only with equal priorities
    assert all(c["ok"] in (True, False) for c in checks)
    assert all(
        line.split()[0] in ("PASS", "FAIL") for line in value.format_checks(checks).split("\n")
    )


def test_the_conditions_reach_every_case_and_equal_priorities_add_the_fcfs_checks(tiny):
    wl = value.Workload("miso-40", "miso-trace", 2, 30)
    todo = value.cases([wl], (1.0,), (0,), ("adaptive",), ("none", "oracle"))
    assert {c[4] for c in todo} == {("none", "oracle")}
    assert value.cases([wl], (1.0,), (0,), ("adaptive",))[0][4] == ("age", "learned")
    # the site fields (time limit; user where the trace names none) are drawn only where
    # the condition needs them (MISO's trace names each template's owner)
    plain = value.build_jobs(wl, 1.0, 0)
    site = value.build_jobs(wl, 1.0, 0, True)
    assert all(j.time_limit == math.inf for j in plain) and all(j.user for j in site)
    assert [j.user for j in plain] == [j.user for j in site]
    assert all(j.time_limit >= max(j.times.values()) for j in site if j.time_limit)
    # under age priority the default's figures differ from the equal-priority oracle's
    _, _, _, _, oracle = value.run_case(next(c for c in todo if c[3] == "adaptive"))
    _, _, _, _, learned = value.run_case((wl, 1.0, 0, "adaptive", ("age", "learned")))
    assert oracle["jct_mean"] != learned["jct_mean"]
    checks = value.done_when(tiny, equal_priorities=True)
    names = {c["check"] for c in checks}
    assert "miso-40 1x longest wait <= 1.2 x baseline's" in names
    assert "miso-40 1x makespan <= 1.05 x baseline's" in names


def test_restartable_jobs_reach_the_cases_and_only_the_upsized_policy_moves_them(tiny):
    wl = value.Workload("miso-40", "miso-trace", 2, 30)
    assert not any(j.restartable for j in value.build_jobs(wl, 1.0, 0, True))
    assert all(j.restartable for j in value.build_jobs(wl, 1.0, 0, True, True))
    condition = ("age", "learned", 180.0)
    todo = value.cases([wl], (1.0,), (0,), ("adaptive", value.UPSIZE), condition)
    assert {c[4] for c in todo} == {condition}
    got = {c[3]: value.run_case(c)[4] for c in todo if c[3] in ("adaptive", value.UPSIZE)}
    assert "error" not in got["adaptive"] and "error" not in got[value.UPSIZE]
    plain = value.run_case((wl, 1.0, 0, "adaptive", ("age", "learned")))[4]
    assert got["adaptive"]["jct_mean"] == plain["jct_mean"]  # adaptive alone never moves


@pytest.mark.parametrize("bad", ["-1", "nan", "4000"])
def test_restart_seconds_out_of_range_are_one_line(bad, capsys):
    with pytest.raises(SystemExit):
        value.main(["--restartable", "--restart-s", bad])
    assert "--restart-s must be seconds within 0..3600" in capsys.readouterr().err
