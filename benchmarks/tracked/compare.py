"""Compares a run of the tracked benchmarks with the stored figures (``make bench``), or
stores a run as the new figures (``make bench-save``).

Both files are pytest-benchmark JSON (``--benchmark-json``). Compared, per benchmark: the
timing's ``min`` over rounds (the statistic least disturbed by other processes; the
median is shown beside it) and every quality figure of ``extra_info["quality"]``, all
lower-is-better. A figure more than ``--threshold`` (default 20 %) above its stored
value is named, and the exit status is then 1. A benchmark without stored figures is
listed as new; a stored one that did not run, as missing (neither fails).

Usage: python benchmarks/tracked/compare.py BASELINE CURRENT [--threshold 0.2]
       python benchmarks/tracked/compare.py --save CURRENT BASELINE
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

STAT = "min"


@dataclass(frozen=True)
class Row:
    """One figure of one benchmark; ``base`` or ``cur`` is None where it is absent."""

    bench: str
    figure: str
    base: float | None
    cur: float | None
    unit: str  # "s" for timings, "" for quality figures

    @property
    def change(self) -> float | None:
        """Relative change, positive = worse; None when it cannot be computed."""
        if self.base is None or self.cur is None or self.base <= 0:
            return None
        return self.cur / self.base - 1.0


def load(path: Path) -> dict:
    with path.open() as f:
        return json.load(f)


def figures(run: dict) -> dict[str, dict[str, tuple[float, str]]]:
    """Per benchmark (its name), figure -> (value, unit): the timing statistics first,
    then the quality figures."""
    out: dict[str, dict[str, tuple[float, str]]] = {}
    for b in run.get("benchmarks", []):
        stats = b.get("stats", {})
        figs = {f"time {STAT}": (float(stats[STAT]), "s")}
        if "median" in stats:
            figs["time median"] = (float(stats["median"]), "s")
        for k, v in sorted(b.get("extra_info", {}).get("quality", {}).items()):
            figs[k] = (float(v), "")
        out[b["name"]] = figs
    return out


def compare(base: dict, cur: dict) -> list[Row]:
    """Rows for every figure of either run, in the current run's order, then missing."""
    fb, fc = figures(base), figures(cur)
    rows = []
    for name in list(fc) + [n for n in fb if n not in fc]:
        b, c = fb.get(name, {}), fc.get(name, {})
        for fig in list(c) + [f for f in b if f not in c]:
            unit = (c.get(fig) or b.get(fig))[1]
            bv = b[fig][0] if fig in b else None
            cv = c[fig][0] if fig in c else None
            rows.append(Row(name, fig, bv, cv, unit))
    return rows


def tracked(row: Row) -> bool:
    """Whether the row counts for the threshold (the median is shown, not judged)."""
    return row.figure != "time median"


def worse(rows: list[Row], threshold: float) -> list[Row]:
    return [r for r in rows if tracked(r) and r.change is not None and r.change > threshold]


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "s":
        return f"{value * 1000:.3f} ms" if value < 1 else f"{value:.3f} s"
    if value != 0 and (abs(value) >= 1e5 or abs(value) < 1e-3):
        return f"{value:.4g}"
    return f"{value:.4f}" if abs(value) < 10 else f"{value:.1f}"


def verdict(row: Row, threshold: float) -> str:
    if row.cur is None:
        return "missing"
    if row.base is None:
        return "new"
    ch = row.change
    if ch is None or not math.isfinite(ch):
        return "?"
    if not tracked(row):
        return "(shown)"
    return "WORSE" if ch > threshold else ("better" if ch < -threshold else "ok")


def table(rows: list[Row], threshold: float) -> str:
    head = ("BENCHMARK", "FIGURE", "STORED", "NOW", "CHANGE", "")
    lines = [head]
    last = None
    for r in rows:
        ch = r.change
        lines.append(
            (
                r.bench if r.bench != last else "",
                r.figure,
                fmt(r.base, r.unit),
                fmt(r.cur, r.unit),
                "-" if ch is None else f"{ch * 100:+.1f} %",
                verdict(r, threshold),
            )
        )
        last = r.bench
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    right = {2, 3, 4}
    return "\n".join(
        "  ".join(
            cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
            for i, cell in enumerate(line)
        ).rstrip()
        for line in lines
    )


def describe(run: dict) -> str:
    """When, at which commit and at which load a run was made."""
    mi, ci = run.get("machine_info", {}), run.get("commit_info", {})
    load = mi.get("loadavg")
    load_s = "load ?" if not load else "load " + " ".join(f"{x:.2f}" for x in load)
    commit = (ci.get("id") or "?")[:10] + (" (dirty)" if ci.get("dirty") else "")
    if ci.get("note"):
        commit += f" [{ci['note']}]"
    return (
        f"{run.get('datetime', '?')[:19]}, commit {commit}, {load_s} on {mi.get('cpus', '?')} "
        f"CPUs, {mi.get('cpu', {}).get('brand_raw', mi.get('processor', '?'))}, "
        f"Python {mi.get('python_version', '?')}"
    )


def report(base: dict, cur: dict, threshold: float) -> tuple[str, int]:
    """The text ``make bench`` prints and its exit status."""
    rows = compare(base, cur)
    bad = worse(rows, threshold)
    out = [
        f"stored figures: {describe(base)}",
        f"this run:       {describe(cur)}",
    ]
    mi = cur.get("machine_info", {})
    load, cpus = mi.get("loadavg"), mi.get("cpus") or 1
    if load and load[0] >= cpus:
        out.append(
            f"note: the 1-minute load ({load[0]:.2f}) is at least the CPU count ({cpus}): "
            "timings may be inflated; rerun on a quiet machine before trusting a slowdown"
        )
    out += [
        f"timings: {STAT} over rounds (median shown, not judged); quality figures are "
        f"lower-is-better; flagged: more than {threshold * 100:.0f} % worse than stored",
        "",
        table(rows, threshold),
        "",
    ]
    if bad:
        out.append(f"{len(bad)} figure(s) more than {threshold * 100:.0f} % worse than stored:")
        out += [f"  {r.bench}: {r.figure} {r.change * 100:+.1f} %" for r in bad]
        out.append(
            "If the change is intended, store the new figures with `make bench-save` "
            "(benchmarks/baseline/) and commit them."
        )
        return "\n".join(out), 1
    out.append(f"no figure more than {threshold * 100:.0f} % worse than stored")
    return "\n".join(out), 0


def stripped(run: dict) -> dict:
    """The run without the per-round timings (``stats.data``): what is stored."""
    out = dict(run)
    out["benchmarks"] = [
        {**b, "stats": {k: v for k, v in b.get("stats", {}).items() if k != "data"}}
        for b in run.get("benchmarks", [])
    ]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("first", type=Path, help="BASELINE (compare) or CURRENT (--save)")
    ap.add_argument("second", type=Path, help="CURRENT (compare) or BASELINE (--save)")
    ap.add_argument("--save", action="store_true", help="store CURRENT as the BASELINE")
    ap.add_argument("--threshold", type=float, default=0.20, help="default 0.20 (20 %%)")
    args = ap.parse_args(argv)
    if args.save:
        run = stripped(load(args.first))
        args.second.parent.mkdir(parents=True, exist_ok=True)
        args.second.write_text(json.dumps(run, indent=1, sort_keys=True) + "\n")
        print(f"stored {len(run['benchmarks'])} benchmarks in {args.second}: {describe(run)}")
        return 0
    if not args.second.exists():
        print(f"no run to compare: {args.second} was not written (see pytest's output above)")
        return 1
    cur = load(args.second)
    if not args.first.exists():
        print(f"no stored figures at {args.first}: `make bench-save` stores this run's")
        print(table(compare({}, cur), args.threshold))
        return 1
    text, status = report(load(args.first), cur, args.threshold)
    print(text)
    return status


if __name__ == "__main__":
    sys.exit(main())
