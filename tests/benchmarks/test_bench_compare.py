"""The comparison step of ``make bench`` (benchmarks/tracked/compare.py): figures more
than the threshold worse than stored are named and fail; better, equal, new and missing
ones do not; the median is shown but not judged; stored runs keep no per-round data."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "bench_compare", ROOT / "benchmarks" / "tracked" / "compare.py"
)
compare = importlib.util.module_from_spec(_spec)
sys.modules["bench_compare"] = compare
_spec.loader.exec_module(compare)


def run(figs: dict[str, tuple[float, float, dict]], load: float = 0.5) -> dict:
    """A pytest-benchmark JSON: name -> (min, median, quality figures)."""
    return {
        "machine_info": {"loadavg": [load, load, load], "cpus": 2},
        "commit_info": {"id": "0" * 40, "dirty": False},
        "datetime": "2026-01-01T00:00:00",
        "benchmarks": [
            {
                "name": name,
                "stats": {"min": lo, "median": med, "data": [lo, med]},
                "extra_info": {"quality": q, "note": "context"},
            }
            for name, (lo, med, q) in figs.items()
        ],
    }


BASE = run(
    {
        "a": (0.010, 0.011, {"jct_mean_s": 100.0}),
        "b": (1.0, 1.0, {"makespan_over_bound": 1.1}),
        "gone": (1.0, 1.0, {}),
    }
)


def test_names_every_figure_more_than_the_threshold_worse() -> None:
    cur = run(
        {
            "a": (0.013, 0.050, {"jct_mean_s": 119.0}),  # +30 % time, +19 % JCT, median x5
            "b": (0.5, 0.5, {"makespan_over_bound": 1.5}),  # faster, quality +36 %
            "new": (1.0, 1.0, {"x": 1.0}),
        }
    )
    text, status = compare.report(BASE, cur, 0.20)
    assert status == 1
    named = text.split("worse than stored:")[1].split("If the change")[0].strip().splitlines()
    assert [line.strip() for line in named] == [
        "a: time min +30.0 %",
        "b: makespan_over_bound +36.4 %",
    ]
    assert "make bench-save" in text
    verdicts = {(r.bench, r.figure): compare.verdict(r, 0.2) for r in compare.compare(BASE, cur)}
    assert verdicts[("b", "time min")] == "better"
    assert verdicts[("a", "jct_mean_s")] == "ok"
    assert verdicts[("new", "x")] == "new"
    assert verdicts[("gone", "time min")] == "missing"


def test_passes_within_the_threshold_and_says_the_load() -> None:
    cur = run({"a": (0.0119, 0.02, {"jct_mean_s": 110.0}), "b": (1.0, 1.0, {})}, load=3.0)
    text, status = compare.report(BASE, cur, 0.20)
    assert status == 0
    assert "no figure more than 20 % worse" in text
    assert "load 3.00 3.00 3.00 on 2 CPUs" in text
    assert "timings may be inflated" in text


def test_save_drops_per_round_data(tmp_path: Path) -> None:
    src, dst = tmp_path / "run.json", tmp_path / "baseline" / "figures.json"
    src.write_text(json.dumps(BASE))
    assert compare.main(["--save", str(src), str(dst)]) == 0
    stored = json.loads(dst.read_text())
    assert all("data" not in b["stats"] for b in stored["benchmarks"])
    assert compare.main([str(dst), str(src)]) == 0
