"""Wall time of the real Prolog, TaskProlog and Epilog executables, run as Slurm runs them.

Each run is one job: a fresh signed token, ``prolog/slurm-mig-prolog`` (creates a 3g
instance on a simulated A100), ``prolog/slurm-mig-taskprolog``, ``epilog/slurm-mig-epilog``
(destroys it), each executed as slurmd does: a new process from the script's
``#!/usr/bin/env python3`` line with no PATH (so /usr/bin/python3). With latency_scale 0
the figure is the hooks' own cost (interpreter start, imports, token check, records);
with 1.0 the simulated create/destroy sleep Table 1's times (A100 3g: create 0.20 s,
destroy 0.21 s). Wall time is what delays the job; CPU time (user + system of the
process) shows the cost apart from waiting on a busy machine. The first row times a
bare interpreter start for comparison.
Target: prolog and epilog p95 <= 150 ms at latency_scale 0.

``--lines 1000,100000,1000000`` repeats the latency-0 runs on a node whose runtime log
(``runtimes.jsonl``, one line per finished job, written by the epilog and read by every
prolog and epilog) already holds that many lines, as on a node that has run jobs for
months.

Usage: python benchmarks/hook_latency.py [--runs N] [--scales 0,1] [--lines N,...]
       [--python PATH]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from slurm_mig.geometry import Placement  # noqa: E402
from slurm_mig.node.nodestate import NodeState  # noqa: E402
from slurm_mig.slurm.assignment import Assignment, generate_key, load_key, sign  # noqa: E402

HOOKS = {
    "prolog": ROOT / "prolog" / "slurm-mig-prolog",
    "taskprolog": ROOT / "prolog" / "slurm-mig-taskprolog",
    "epilog": ROOT / "epilog" / "slurm-mig-epilog",
}
TARGET_P95_MS = 150.0
NODE = "node1"


def write_config(tmp: Path, scale: float) -> Path:
    key = generate_key(tmp / "key")
    path = tmp / "config.toml"
    path.write_text(
        f"""[slurm]
partition = "mig"
gres = "off"
[nodes]
"{NODE}" = ["A100-40GB"]
[paths]
state_dir = "{tmp}/state"
run_dir = "{tmp}/run/%n"
key_file = "{key}"
[device]
backend = "simulated"
simulated_dir = "{tmp}/sim/%n"
latency_scale = {scale}
"""
    )
    return path


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float, subprocess.CompletedProcess]:
    """(wall ms, CPU ms of the child, result) of one process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True)
    wall = (time.perf_counter() - t0) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000
    return wall, cpu, done


def prefill_runtimes(run_dir: Path, lines: int) -> None:
    """Give the node a runtime log of ``lines`` finished jobs (as the epilog writes them)."""
    path = NodeState(run_dir).runtimes_path
    path.parent.mkdir(parents=True, exist_ok=True)
    line = (
        '{{"end": 1700000000.0, "gpu": 0, "job_id": "{}", "key": "bench", '
        '"model": "A100-40GB", "profile": "3g.20gb", "restart": 0, "seconds": 60.0}}\n'
    )
    with open(path, "w", encoding="utf-8") as f:
        for start in range(0, lines, 10_000):
            f.write("".join(line.format(i) for i in range(start, min(lines, start + 10_000))))


def measure(
    scale: float, runs: int, python: str | None, lines: int = 0
) -> dict[str, list[tuple[float, float]]]:
    """(wall ms, CPU ms) per hook over ``runs`` jobs, each hook a new process."""
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in HOOKS}
    with tempfile.TemporaryDirectory(prefix="slurm-mig-bench-") as d:
        tmp = Path(d)
        config = write_config(tmp, scale)
        key = load_key(tmp / "key")
        if lines:
            prefill_runtimes(tmp / "run" / NODE, lines)
        for i in range(runs):
            job = str(1000 + i)
            a = Assignment(
                job, 0, NODE, 0, "A100-40GB", "3g.20gb", Placement(4, 4), 0, 0, 60.0, time.time()
            )
            env = {
                "SLURM_JOB_ID": job,
                "SLURMD_NODENAME": NODE,
                "SLURM_JOB_PARTITION": "mig",
                "SLURM_JOB_UID": str(os.getuid()),
                "SLURM_JOB_COMMENT": f"mig:key=bench migplan={sign(a, key)}",
                "SLURM_MIG_CONFIG": str(config),
                "SLURM_MIG_SCONTROL": "/bin/true",  # never touch a real cluster
            }
            for name, exe in HOOKS.items():
                argv = [python, str(exe)] if python else [str(exe)]
                wall, cpu, done = timed(argv, env)
                times[name].append((wall, cpu))
                if done.returncode != 0 or b"refused" in done.stderr:
                    raise SystemExit(f"{name} of job {job} failed: {done.stderr.decode()}")
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=200, help="jobs per latency scale (200)")
    ap.add_argument("--scales", default="0,1", help="simulated latency scales (0,1)")
    ap.add_argument(
        "--lines",
        default="",
        help="also time latency 0 with a runtime log of this many lines (e.g. 1000,100000)",
    )
    ap.add_argument("--python", help="run the hooks with this interpreter, not their #! line")
    args = ap.parse_args()
    python = args.python or "/usr/bin/python3 (#!/usr/bin/env python3, no PATH)"
    print(f"hook time in ms over {args.runs} jobs; {os.cpu_count()} CPUs; {python}")
    print(f"{'latency_scale':>13} {'hook':>12} {'p50':>7} {'p95':>7} {'max':>7} {'cpu p50':>8}")
    bare = [args.python or "/usr/bin/python3", "-c", "pass"]
    print(_row("-", "python start", [timed(bare, {})[:2] for _ in range(min(args.runs, 50))]))
    verdicts = []
    for scale in (float(x) for x in args.scales.split(",")):
        for name, samples in measure(scale, args.runs, args.python).items():
            print(_row(f"{scale:g}", name, samples))
            p95 = percentile([wall for wall, _ in samples], 0.95)
            if scale == 0 and name != "taskprolog":
                verdicts.append(
                    f"{name} p95 {p95:.1f} ms" + (" OVER" if p95 > TARGET_P95_MS else "")
                )
    if verdicts:
        print(f"target p95 <= {TARGET_P95_MS:.0f} ms at latency_scale 0: " + ", ".join(verdicts))
    sizes = [int(x) for x in args.lines.split(",") if x.strip()]
    if sizes:
        print(
            f"latency_scale 0, runtime log prefilled; {'lines':>9} {'hook':>12} "
            f"{'p50':>7} {'p95':>7} {'max':>7} {'cpu p50':>8}"
        )
    for lines in sizes:
        for name, samples in measure(0.0, args.runs, args.python, lines).items():
            print(_row(f"{lines}", name, samples, width=41))


def _row(scale: str, name: str, samples: list[tuple[float, float]], width: int = 13) -> str:
    wall = [w for w, _ in samples]
    cpu = percentile([c for _, c in samples], 0.5)
    return (
        f"{scale:>{width}} {name:>12} {percentile(wall, 0.5):7.1f} {percentile(wall, 0.95):7.1f} "
        f"{max(wall):7.1f} {cpu:8.1f}"
    )


if __name__ == "__main__":
    main()
