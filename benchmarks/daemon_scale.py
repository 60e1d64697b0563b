"""What the planner daemon costs a real Slurm at cluster scale: a loopback slurmctld with
``--nodes`` slurmds of ``--gpus`` simulated A100-40GB each, the Prolog/TaskProlog/Epilog
hooks and job_submit.lua installed as in the e2e suite (``slurm_mig.demo.live.LiveCluster``),
``--jobs`` short jobs (``sleep --job-seconds``, a mix of ``mig:mem=`` hints of 4G / 8G /
16G / 32G in the ratio 4:3:2:1, so the planner picks 1g to 7g profiles) and the planner
daemon run in this process (``run_planner`` with a timing proxy around its SlurmClient).

By default every job is submitted first (job_submit.lua holds them), then the daemon
starts: its first cycle sees the whole queue. ``--planner-first`` starts the daemon
before the submissions instead (jobs arrive while it cycles). sbatch runs
``--submit-parallel`` at a time (Slurm job arrays are not used: the planner plans each
job by its own id). The run ends when every job has ended, after ``--plan-only-seconds``
of cycling (for 10,000 jobs: the first cycles' cost, without running them all), or at
``--timeout``; Slurm (slurmctld, slurmds, munged, job processes) is always stopped.
Needs root and Slurm (``--slurm host``, or ``trixie`` / ``sid``: a root built by
``python3 -m slurm_mig.demo.slurmroot build SUITE``, as $SLURM_MIG_SLURM of the e2e
suite); prints why and exits 0 where it cannot run.

Figures:

- submit: seconds from the first sbatch until the last sbatch returned (and sbatch
  failures);
- all released: seconds from the first sbatch (and from the daemon's start) until every
  job was released (a release call of the daemon returned, or squeue showed it no
  longer held); all planned: until every job had an assignment (an AdminComment write
  returned, or squeue showed one) or was released;
- cycles: each cycle's wall time (the daemon's "cycle N done in S s" log record: read,
  plan and apply, not the status file written after it) split into read (the proxy's
  ``jobs``/``nodes`` calls: squeue + sinfo), plan (``plan_cycle``, timed by wrapping it
  in slurm_mig.daemon.daemon), apply (every other client call: scontrol hold / update /
  release / requeue, or whatever methods a newer client has; summed over the
  ``write_concurrency`` threads, so above the apply's wall time) and other (the rest:
  building the snapshot, the runtime store, logging); the daemon thread's CPU seconds
  in the cycle and plan_cycle's (what the cycle costs whatever the load); p50 and max
  over all cycles, over those that wrote to Slurm, and over the steady ones (no write;
  split into those that re-planned for an event, such as a job running late, and those
  with nothing new), and the first cycle that saw jobs on its own line; the three slowest cycles;
- CPUs: the nodes (slurmds, hooks, jobs) run in a cgroup limited to ``--node-cpus``
  (half the machine's by default), so that slurmctld and the daemon have the other
  half, as on a controller host of their own (`slurm_mig.demo.cpugroup`; where no
  cgroup can be made, the output says why and all share every CPU); as the nodes
  share so few CPUs, ``MessageTimeout`` is 30 s (Slurm's default 10 s drained
  nodes whose slurmd waited over 20 s for the prolog-launch message);
- RPCs: slurmctld's "Remote Procedure Call statistics by message type" from ``sdiag``
  (reset when the daemon starts, read before it stops) per job that started and per job
  submitted, with their average time in slurmctld. They include every client's RPCs of the run: the daemon's,
  slurmd's, the hooks' and, with ``--planner-first``, sbatch's; ``sdiag`` and the final
  squeue of this script come after the read;
- processes: the programs the daemon ran (squeue, sinfo, ``scontrol <verb>``), counted
  by wrapping subprocess.Popen in this process (the script's own sbatch and sdiag are not
  counted), in all and per started job;
- status gap: the longest time between two writes of ``planner-status.json`` (its
  ``finished`` field, polled every 0.2 s), counting from the daemon's start; with
  ``--cycle`` C an idle daemon writes every C s;
- requeues: jobs whose restart count is above 0, the hooks' log lines about a GPU's
  lock not being free in time (``[hooks] lock_timeout``; each node's own log), and the
  jobs slurmctld requeued because their batch step had not started
  ``BatchStartTimeout`` + 10 s after allocation (its log's "missing from batch node");
  ``BatchStartTimeout`` is 60 s here (``--batch-start-timeout``; Slurm's default 10):
  a burst of starts queues tens of prologs a node on the nodes' one CPU;
- throughput: jobs completed per minute from the first job's start to the last one's end,
  and whether every job completed (state COMPLETED; ``MinJobAge`` is the run's timeout
  + 10 minutes so that the final squeue still lists every completed job);
- load: os.getloadavg() when the cluster is up (before submitting) and at the end.

A cycle the stop interrupted (``--plan-only-seconds``, or the last one, whose runtime
learning is cut short when every job has ended) is named with the actions it left.
``make bench`` runs this with its defaults (1,000 jobs: minutes, and a Slurm) where it
runs as root.

``--json`` adds one machine-readable line (``{"daemon_scale": {...}}``). Set
$SLURM_MIG_E2E_KEEP or ``--keep`` to keep the cluster's directory (logs, config).

Usage: python benchmarks/daemon_scale.py [--jobs 1000] [--nodes 8] [--gpus 8]
       [--job-seconds 5] [--cycle 1] [--timeout 1800] [--plan-only-seconds S]
       [--planner-first] [--slurm host|trixie|sid] [--json]
Every run that starts a Slurm on the shared development machine goes under
``flock /tmp/slurm-mig-e2e.lock``, e.g.
    flock /tmp/slurm-mig-e2e.lock python benchmarks/daemon_scale.py --jobs 200 --job-seconds 5
    flock /tmp/slurm-mig-e2e.lock python benchmarks/daemon_scale.py --jobs 10000 \\
        --plan-only-seconds 120
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from slurm_mig.daemon import daemon as daemon_module  # noqa: E402
from slurm_mig.daemon.cycle import parse_admin_comment  # noqa: E402
from slurm_mig.demo.live import LiveCluster  # noqa: E402
from slurm_mig.demo.localslurm import skip_reason  # noqa: E402
from slurm_mig.demo.slurmroot import SlurmInstall, find_install  # noqa: E402
from slurm_mig.slurm.client import SlurmClient  # noqa: E402

MODEL = "A100-40GB"
# (key, mig:mem hint, weight): the smallest fitting A100-40GB profiles are 1g.5gb,
# 2g.10gb (or 1g.10gb), 3g.20gb, 7g.40gb
MIX = (("s1g", "4G", 4), ("s2g", "8G", 3), ("s3g", "16G", 2), ("s7g", "32G", 1))
# what the cycle reads (site_policy: associations, QOS, reservations, shares; issue 19)
READ_METHODS = frozenset({"jobs", "nodes", "site_policy", "version"})
LOCK_MESSAGE = "was not free within"  # NodeState.lock's LockBusyError
STARTED_STATES = frozenset(
    {"RUNNING", "COMPLETING", "COMPLETED", "FAILED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL"}
)
SBATCH_TIMEOUT = 120.0
_STOPPING = re.compile(r"stopping: (\d+) actions left")
_CYCLE_DONE = re.compile(r"cycle (\d+) done in ([0-9.]+) s")
# seconds (--message-timeout); see main(): simulated nodes that share a CPU answer slowly
MESSAGE_TIMEOUT = 30
# seconds (--batch-start-timeout): a job's launch waits for its Prolog, and prologs of
# 8 nodes on one CPU queue for longer than Slurm's default 10 s
BATCH_START_TIMEOUT = 60
# slurmctld.log: Slurm requeued a job whose batch step had not started in time
BATCH_MISSING = "missing from batch node"
_LOCAL = threading.local()  # .bench: a thread of this script (its processes not counted)


class Interrupted(Exception):
    """SIGTERM or SIGINT outside the daemon's own handlers."""


def bench_thread() -> None:
    _LOCAL.bench = True


def now() -> float:
    return time.time()


# ---------------------------------------------------------------------------
# What the daemon did, seen through its client, its log and its plan_cycle


@dataclass
class Cycle:
    number: int = 0
    seconds: float = 0.0  # the daemon's own figure ("cycle N done in S s")
    read: float = 0.0
    plan: float = 0.0
    apply: float = 0.0
    cpu: float = 0.0  # the daemon's main thread's CPU seconds (planning, snapshot, status)
    plan_cpu: float = 0.0
    reads: int = 0
    writes: int = 0
    jobs_seen: int = 0
    unplanned: int = 0  # held jobs without an assignment in this cycle's squeue
    started: float = 0.0
    replanned: bool = False  # the daemon re-planned its standing plans (an event)

    @property
    def other(self) -> float:
        return max(0.0, self.seconds - self.read - self.plan - self.apply)

    @property
    def busy(self) -> bool:
        """It wrote to Slurm (held jobs past [planner] max_planned stay unplanned by design:
        they do not make a cycle busy)."""
        return self.writes > 0


@dataclass
class Tracker:
    """Per-cycle time split and per-job progress, fed by the proxy, the plan_cycle wrapper
    and the daemon's log records."""

    cycles: list[Cycle] = field(default_factory=list)
    current: Cycle = field(default_factory=Cycle)
    calls: Counter = field(default_factory=Counter)  # client method -> calls
    call_seconds: Counter = field(default_factory=Counter)
    planned_at: dict[str, float] = field(default_factory=dict)
    released_at: dict[str, float] = field(default_factory=dict)
    done_at: dict[str, float] = field(default_factory=dict)
    completed: set[str] = field(default_factory=set)
    final_jobs: dict[str, Any] = field(default_factory=dict)  # id -> last Job seen
    cut_short: list[tuple[int, int]] = field(default_factory=list)  # (cycle, actions left)
    overhead: float = 0.0  # this script's own bookkeeping inside the daemon's cycles
    cpu_mark: float | None = None  # the main thread's CPU clock at the last cycle's end
    lock: threading.Lock = field(default_factory=threading.Lock)

    def call(self, name: str, args: tuple, kwargs: dict, t0: float, t1: float, result: Any):
        dt = t1 - t0
        with self.lock:
            self.calls[name] += 1
            self.call_seconds[name] += dt
            c = self.current
            if not c.started:
                c.started = t0
            if name in READ_METHODS:
                c.read += dt
                c.reads += 1
            else:
                c.apply += dt
                c.writes += 1
        b0 = time.perf_counter()
        if name == "jobs" and isinstance(result, list):
            self._saw_jobs(result, t0)
        elif name not in READ_METHODS:
            self._saw_write(name, args, kwargs, t1)
        self.overhead += time.perf_counter() - b0

    def _saw_jobs(self, jobs: list, at: float) -> None:
        unplanned = 0
        with self.lock:
            for j in jobs:
                jid = str(getattr(j, "job_id", ""))
                self.final_jobs[jid] = j
                state = getattr(j, "state", "")
                if jid not in self.released_at and (
                    state != "PENDING" or not getattr(j, "held", True)
                ):
                    self.released_at[jid] = at
                if jid not in self.planned_at:
                    if (
                        state != "PENDING"
                        or not getattr(j, "held", True)
                        or parse_admin_comment(getattr(j, "admin_comment", "")) is not None
                    ):
                        self.planned_at[jid] = at
                    elif state == "PENDING":
                        unplanned += 1
                if jid not in self.done_at and getattr(j, "finished", False):
                    if state != "COMPLETING":  # the Epilog has run
                        self.done_at[jid] = at
                        if state == "COMPLETED":
                            self.completed.add(jid)
            self.current.jobs_seen = len(jobs)
            self.current.unplanned = unplanned

    def _saw_write(self, name: str, args: tuple, kwargs: dict, at: float) -> None:
        ids: list[str] = []
        if args:
            first = args[0]
            if isinstance(first, str | int):
                ids = [x for x in str(first).split(",") if x]
            elif isinstance(first, Iterable):
                ids = [str(x) for x in first]
        released = "release" in name.lower()
        planned = released or any(
            parse_admin_comment(str(v)) is not None
            for k, v in kwargs.items()
            if k.lower() == "admincomment"
        )
        if planned:
            with self.lock:
                for jid in ids:
                    self.planned_at.setdefault(jid, at)
                    if released:
                        self.released_at.setdefault(jid, at)

    def plan(self, seconds: float, cpu: float) -> None:
        with self.lock:
            self.current.plan += seconds
            self.current.plan_cpu += cpu

    def cycle_done(self, number: int, seconds: float, replanned: bool = False) -> None:
        """Called on the daemon's (main) thread: its CPU time since the last cycle's end
        is this cycle's (waiting between cycles costs none)."""
        cpu = time.thread_time()
        with self.lock:
            c = self.current
            c.number, c.seconds, c.replanned = number, seconds, replanned
            if self.cpu_mark is not None:
                c.cpu = cpu - self.cpu_mark
            self.cpu_mark = cpu
            self.cycles.append(c)
            self.current = Cycle()


class TimingClient:
    """Stands in for the daemon's SlurmClient: every public method of the wrapped client
    (also ones added later) is timed and counted; attributes pass through."""

    def __init__(self, inner: Any, tracker: Tracker) -> None:
        self._inner = inner
        self._tracker = tracker

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name.startswith("_") or not callable(attr):
            return attr
        tracker = self._tracker

        @functools.wraps(attr)
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = now()
            result = None
            try:
                result = attr(*args, **kwargs)
                return result
            finally:
                tracker.call(name, args, kwargs, t0, now(), result)

        return timed


class CycleLog(logging.Handler):
    """Ends a cycle in the tracker at the daemon's "cycle N done in S s" record."""

    def __init__(self, tracker: Tracker) -> None:
        super().__init__(logging.INFO)
        self.tracker = tracker

    def emit(self, record: logging.LogRecord) -> None:
        msg = str(record.msg)
        m = _STOPPING.match(record.getMessage())
        if m:  # the daemon was stopped between two actions of this cycle
            with self.tracker.lock:
                number = len(self.tracker.cycles) + 1
                self.tracker.cut_short.append((number, int(m[1])))
            return
        text = record.getMessage()
        replanned = "; re-planned: " in text
        if not msg.startswith("cycle %d done in"):
            m = _CYCLE_DONE.match(text)
            if m:
                self.tracker.cycle_done(int(m[1]), float(m[2]), replanned)
            return
        try:  # the unrounded seconds
            self.tracker.cycle_done(int(record.args[0]), float(record.args[1]), replanned)
        except (TypeError, IndexError, ValueError):
            m = _CYCLE_DONE.match(text)
            if m:
                self.tracker.cycle_done(int(m[1]), float(m[2]), replanned)


def wrap_plan_cycle(tracker: Tracker) -> Callable[[], None]:
    """Time the daemon's plan_cycle calls; returns the undo."""
    original = getattr(daemon_module, "plan_cycle", None)
    if original is None:
        return lambda: None

    @functools.wraps(original)
    def timed(*args: Any, **kwargs: Any) -> Any:
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            return original(*args, **kwargs)
        finally:
            tracker.plan(time.perf_counter() - t0, time.thread_time() - c0)

    daemon_module.plan_cycle = timed
    return lambda: setattr(daemon_module, "plan_cycle", original)


class ProcessCounter:
    """Counts the programs this process starts (subprocess.Popen), except from the
    script's own threads: the daemon's squeue, sinfo and scontrol calls."""

    def __init__(self) -> None:
        self.counts: Counter = Counter()
        self._original = subprocess.Popen
        self._lock = threading.Lock()

    def install(self) -> None:
        counter, original = self, self._original

        class Counted(original):  # type: ignore[misc, valid-type]
            def __init__(self, args: Any, *rest: Any, **kwargs: Any) -> None:
                if not getattr(_LOCAL, "bench", False):
                    counter.add(args)
                super().__init__(args, *rest, **kwargs)

        subprocess.Popen = Counted  # type: ignore[misc]

    def uninstall(self) -> None:
        subprocess.Popen = self._original  # type: ignore[misc]

    def add(self, args: Any) -> None:
        argv = [args] if isinstance(args, str | bytes) else list(args)
        name = os.path.basename(str(argv[0])) if argv else "?"
        if name == "scontrol" and len(argv) > 1:
            name = f"scontrol {argv[1]}"
        with self._lock:
            self.counts[name] += 1


class StatusWatch:
    """Polls planner-status.json every 0.2 s: when each write happened (its ``finished``)."""

    def __init__(self, path: Path, interval: float = 0.2) -> None:
        self.path = path
        self.interval = interval
        self.writes: list[tuple[int, float]] = []  # (cycle, finished)
        self.stop = threading.Event()
        self._mtime = 0
        self.thread = threading.Thread(target=self._run, name="status-watch", daemon=True)

    def _run(self) -> None:
        bench_thread()
        while not self.stop.wait(self.interval):
            self.poll()

    def poll(self) -> None:
        try:
            mtime = self.path.stat().st_mtime_ns
        except OSError:
            return
        if mtime == self._mtime:
            return
        self._mtime = mtime
        try:
            data = json.loads(self.path.read_text())
            cycle, finished = int(data.get("cycle", 0)), float(data["finished"])
        except (OSError, ValueError, KeyError, TypeError):
            cycle, finished = 0, mtime / 1e9
        if not self.writes or self.writes[-1] != (cycle, finished):
            self.writes.append((cycle, finished))

    def longest_gap(self, since: float, until: float) -> tuple[float, int]:
        """(seconds, cycle whose write ended the gap; 0: none yet at the end)."""
        best, after, last = 0.0, 0, since
        for cycle, finished in self.writes:
            if finished - last > best:
                best, after = finished - last, cycle
            last = max(last, finished)
        if until - last > best:
            best, after = until - last, 0
        return best, after


# ---------------------------------------------------------------------------
# Slurm side


def parse_sdiag(text: str) -> dict[str, tuple[int, float]]:
    """sdiag's "Remote Procedure Call statistics by message type": name -> (count,
    average microseconds)."""
    out: dict[str, tuple[int, float]] = {}
    inside = False
    for line in text.splitlines():
        if line.startswith("Remote Procedure Call statistics by message type"):
            inside = True
            continue
        if inside and line.startswith("Remote Procedure Call statistics"):
            break
        if inside:
            m = re.match(r"\s*(\S+)\s+\(\s*\d+\)\s+count:(\d+)\s+ave_time:(\d+)", line)
            if m:
                out[m[1]] = (int(m[2]), float(m[3]))
    return out


def job_comment(i: int, seconds: float) -> str:
    weights = [w for _, _, w in MIX]
    k = i % sum(weights)
    for key, mem, w in MIX:
        if k < w:
            return f"mig:key={key},mem={mem},time={seconds:g}"
        k -= w
    raise AssertionError


def submit_all(
    lc: LiveCluster,
    n: int,
    seconds: float,
    parallel: int,
    stop: threading.Event,
    deadline: float,
) -> tuple[list[str], list[str], float, float]:
    """(job ids, sbatch errors, first sbatch, last return): ``parallel`` sbatch at a time."""
    assert lc.cluster is not None
    cluster = lc.cluster
    first: list[float] = []
    done = [0]

    def one(i: int) -> str | Exception:
        if stop.is_set() or time.monotonic() > deadline:
            return RuntimeError("not submitted (stopped)")
        if not first:
            first.append(now())
        try:  # LocalSlurm.try_sbatch's command, with a longer timeout: a slurmctld
            # holding 10,000 jobs may keep an sbatch waiting for half a minute
            res = cluster.run(
                "sbatch",
                "--parsable",
                f"--output={cluster.out_dir}/%j.out",
                f"--chdir={cluster.out_dir}",
                "--partition=mig",
                f"--comment={job_comment(i, seconds)}",
                f"--job-name=b{i}",
                f"--wrap=sleep {seconds:g}",
                check=False,
                timeout=SBATCH_TIMEOUT,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return RuntimeError(f"sbatch: {exc}")
        if res.returncode != 0:
            return RuntimeError(res.stderr.strip() or f"sbatch exited {res.returncode}")
        done[0] += 1
        if done[0] % 1000 == 0:
            print(f"daemon_scale: {done[0]} jobs submitted", file=sys.stderr, flush=True)
        return res.stdout.strip().split(";")[0]

    t0 = now()
    with ThreadPoolExecutor(max_workers=parallel, initializer=bench_thread) as pool:
        results = list(pool.map(one, range(n)))
    ids = [r for r in results if isinstance(r, str)]
    errors = [str(r) for r in results if not isinstance(r, str)]
    return ids, errors, (first[0] if first else t0), now()


# ---------------------------------------------------------------------------
# Report


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def split_rows(cycles: list[Cycle]) -> list[tuple[str, list[Cycle]]]:
    rows = []
    first = next((c for c in cycles if c.jobs_seen), None)
    if first is not None:
        rows.append((f"first (#{first.number})", [first]))
    rows.append(("with writes, after first", [c for c in cycles if c.busy and c is not first]))
    quiet = [c for c in cycles if not c.busy and c is not first]
    rows.append(("steady (no writes)", quiet))
    rows.append(("  of them re-planning", [c for c in quiet if c.replanned]))
    rows.append(("  of them nothing new", [c for c in quiet if not c.replanned]))
    rows.append(("all", cycles))
    return rows


def report(fig: dict, tracker: Tracker, as_json: bool) -> None:
    p = print
    p(
        f"daemon_scale: {fig['jobs']} jobs of {fig['job_seconds']:g} s on {fig['nodes']} nodes "
        f"x {fig['gpus']} simulated {MODEL} (Slurm {fig['slurm']}), cycle {fig['cycle']:g} s, "
        f"{os.cpu_count()} CPUs; ended: {fig['ended']}"
    )
    if fig["node_cpus"]:
        p(
            f"nodes (slurmds, hooks, jobs) limited to {fig['node_cpus']:g} CPUs together (a "
            "cgroup); slurmctld and the daemon have the rest, as on a host of their own; "
            f"MessageTimeout={fig['message_timeout']}, BatchStartTimeout="
            f"{fig['batch_start_timeout']} (Slurm's defaults: 10, 10)"
        )
    else:
        why = fig["node_cpu_group_error"] or "--node-cpus 0"
        p(f"nodes share every CPU with slurmctld and the daemon ({why})")
    p(
        f"load average 1/5/15 min: start {'/'.join(f'{x:.2f}' for x in fig['load_start'])}, "
        f"end {'/'.join(f'{x:.2f}' for x in fig['load_end'])}"
    )
    errs = fig["sbatch_errors"]
    p(
        f"submit: {fig['submitted']} jobs in {fig['submit_s']:.1f} s "
        f"({fig['submit_parallel']} sbatch at a time)"
        + (f"; {fig['sbatch_refused']} not submitted, first: {errs[0]}" if errs else "")
    )
    if fig["all_released_s"] is not None:
        p(
            f"all released: {fig['all_released_s']:.1f} s after the first sbatch, "
            f"{fig['all_released_after_start_s']:.1f} s after the daemon's start"
        )
    else:
        p(f"all released: not reached ({fig['released']} of {fig['submitted']} released)")
    if fig["all_planned_s"] is not None:
        p(
            f"all planned: {fig['all_planned_s']:.1f} s after the first sbatch, "
            f"{fig['all_planned_after_start_s']:.1f} s after the daemon's start"
        )
    else:
        p(f"all planned: not reached ({fig['planned']} of {fig['submitted']} planned)")
    p(
        f"cycles: {len(tracker.cycles)}; seconds per part (p50 / max); other = snapshot, "
        "runtime store, logging; cpu = the daemon thread's CPU seconds in the cycle (status "
        "file included), plan cpu = plan_cycle's"
    )
    p(
        f"{'cycles':>22} {'n':>4} {'total':>13} {'read':>13} {'plan':>13} {'apply':>13} "
        f"{'other':>13} {'cpu':>13} {'plan cpu':>13} {'writes':>7} {'jobs':>6}"
    )
    for label, cs in split_rows(tracker.cycles):
        if not cs:
            p(f"{label:>22} {0:>4}")
            continue
        cells = []
        for part in ("seconds", "read", "plan", "apply", "other", "cpu", "plan_cpu"):
            vals = [getattr(c, part) for c in cs]
            cells.append(f"{pct(vals, 0.5):>6.2f} /{max(vals):>6.2f}")
        writes = max(c.writes for c in cs)
        seen = max(c.jobs_seen for c in cs)
        p(f"{label:>22} {len(cs):>4} {' '.join(cells)} {writes:>7} {seen:>6}")
    slow = sorted(tracker.cycles, key=lambda c: -c.seconds)[:3]
    p(
        "slowest cycles: "
        + "; ".join(
            f"#{c.number} {c.seconds:.2f} s (read {c.read:.2f}, plan {c.plan:.2f}, "
            f"apply {c.apply:.2f}, {c.writes} writes, {c.jobs_seen} jobs)"
            for c in slow
        )
    )
    for number, left in tracker.cut_short:
        p(f"cycle #{number} was cut short by the stop: {left} actions left undone")
    started = fig["started"] or max(1, fig["submitted"])
    per = "per started job" if fig["started"] else "per submitted job (none started)"
    subs = max(1, fig["submitted"])
    p(f"client calls: {', '.join(f'{k} {v}' for k, v in sorted(fig['client_calls'].items()))}")
    procs = fig["processes"]
    p(
        f"processes the daemon ran: {sum(procs.values())} "
        f"({sum(procs.values()) / started:.2f} {per}): "
        + ", ".join(f"{k} {v} ({v / started:.2f})" for k, v in sorted(procs.items()))
    )
    rpcs = fig["rpcs"]
    if rpcs:
        total = sum(c for c, _ in rpcs.values())
        p(
            f"slurmctld RPCs (sdiag, since the daemon's start): {total}, "
            f"{total / started:.1f} {per} ({fig['started']} started)"
        )
        p(f"{'message type':>40} {'count':>8} {'/started':>9} {'/submitted':>10} {'ave ms':>8}")
        for name, (count, ave) in sorted(rpcs.items(), key=lambda kv: -kv[1][0]):
            p(
                f"{name:>40} {count:>8} {count / started:>9.2f} {count / subs:>10.2f} "
                f"{ave / 1000:>8.2f}"
            )
    else:
        p(f"slurmctld RPCs: sdiag gave none ({fig['sdiag_error'] or 'empty'})")
    gap, after = fig["status_gap_s"], fig["status_gap_cycle"]
    p(
        f"longest gap between status-file writes: {gap:.2f} s "
        + (f"(ended by cycle {after})" if after else "(still open at the end)")
    )
    p(
        f"requeues: {fig['restarted']} jobs restarted; {fig['lock_timeouts']} lock-timeout "
        f"lines in the hooks' logs; {fig['batch_missing']} jobs requeued by slurmctld "
        "because their batch step had not started within BatchStartTimeout"
    )
    p(
        f"completed: {fig['completed']} of {fig['submitted']} "
        f"({'all' if fig['all_completed'] else 'NOT all'}); "
        f"{fig['per_minute']:.1f} jobs per minute (first start to last end)"
    )
    p(f"this script's bookkeeping inside the daemon's cycles: {tracker.overhead:.2f} s in all")
    if as_json:
        print(json.dumps({"daemon_scale": fig}, sort_keys=True))


# ---------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1000, help="jobs to submit (1000)")
    ap.add_argument("--nodes", type=int, default=8, help="slurmd nodes (8)")
    ap.add_argument("--gpus", type=int, default=8, help="simulated A100-40GB per node (8)")
    ap.add_argument("--job-seconds", type=float, default=5.0, help="each job's sleep (5)")
    ap.add_argument("--cycle", type=float, default=1.0, help="[planner] cycle seconds (1.0)")
    ap.add_argument(
        "--algorithm",
        default="adaptive",
        help="[planner] algorithm (adaptive, the daemon's default; far before issue 20)",
    )
    ap.add_argument(
        "--batch-window", type=float, default=2.0, help="[planner] batch_window seconds (2.0)"
    )
    ap.add_argument(
        "--latency-scale",
        type=float,
        default=1.0,
        help="simulated MIG create/destroy time, x Table 1's (1.0)",
    )
    ap.add_argument(
        "--timeout",
        type=float,
        default=1800.0,
        help="seconds for the whole run, Slurm start included (1800); then it stops",
    )
    ap.add_argument(
        "--plan-only-seconds",
        type=float,
        default=None,
        metavar="S",
        help="stop S seconds after the daemon's start, whether or not the jobs ran",
    )
    ap.add_argument(
        "--planner-first",
        action="store_true",
        help="start the daemon before submitting (default: submit all, then start it)",
    )
    ap.add_argument("--submit-parallel", type=int, default=8, help="sbatch processes at a time (8)")
    ap.add_argument(
        "--node-cpus",
        type=float,
        default=max(1.0, (os.cpu_count() or 2) / 2),
        metavar="N",
        help="CPUs the nodes (slurmds, hooks, jobs) use at most together, in a cgroup "
        "(default: half the machine's, at least 1): slurmctld and the daemon have the rest, "
        "as on a controller host of their own; 0: no cgroup, all share every CPU",
    )
    ap.add_argument(
        "--message-timeout",
        type=int,
        default=MESSAGE_TIMEOUT,
        metavar="S",
        help=f"slurm.conf MessageTimeout ({MESSAGE_TIMEOUT}; Slurm's default 10 drains "
        "nodes that share one CPU: a node failure run)",
    )
    ap.add_argument(
        "--batch-start-timeout",
        type=int,
        default=BATCH_START_TIMEOUT,
        metavar="S",
        help=f"slurm.conf BatchStartTimeout ({BATCH_START_TIMEOUT}; with Slurm's default 10, "
        "jobs whose Prolog waits 20 s for the nodes' shared CPU are requeued as node failures)",
    )
    ap.add_argument("--slurm", default="host", help="host (default), trixie or sid")
    ap.add_argument("--keep", action="store_true", help="keep the cluster's directory")
    ap.add_argument("--json", action="store_true", help="also print one JSON line")
    args = ap.parse_args()
    deadline = time.monotonic() + args.timeout

    reason = skip_reason(args.slurm)
    if reason is not None:
        print(f"daemon_scale: skipped: {reason}")
        return 0
    install = find_install(args.slurm)
    assert isinstance(install, SlurmInstall)

    def interrupted(signum: int, _frame: object) -> None:
        raise Interrupted(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGINT, interrupted)

    root = Path(tempfile.mkdtemp(prefix="slurm-mig-scale-"))
    os.chmod(root, 0o755)
    nodes = tuple(f"node{i + 1}" for i in range(args.nodes))
    lc = LiveCluster(
        root,
        nodes=nodes,
        gpus=args.gpus,
        model=MODEL,
        latency_scale=args.latency_scale,
        planner={
            "cycle": args.cycle,
            "batch_window": args.batch_window,
            "algorithm": args.algorithm,
        },
        slurm=install,
        # Slurm's default MaxJobCount (10,000) would make the last sbatch wait forever.
        # MessageTimeout: the nodes share a CPU or two, and a slurmd that waits longer
        # than 2 x MessageTimeout for slurmctld's prolog-launch message fails the job
        # and drains itself (seen at 1,000 jobs with 8 nodes on one CPU: 39 requeues).
        # BatchStartTimeout: slurmctld requeues a job whose batch step has not started
        # BatchStartTimeout + 10 s after its allocation; a burst of starts queues ~30
        # prologs a node on the nodes' one CPU (seen: 86-208 of 1,000 jobs requeued)
        slurm_options={
            "extra_conf": [
                f"MaxJobCount={max(10_000, 2 * args.jobs + 100)}",
                f"MessageTimeout={args.message_timeout}",
                f"BatchStartTimeout={args.batch_start_timeout}",
                # completed jobs stay in squeue until the run's final read counts them
                f"MinJobAge={int(args.timeout) + 600}",
            ],
            "node_cpus": args.node_cpus,
        },
    )
    tracker = Tracker()
    procs = ProcessCounter()
    stop = threading.Event()  # ends submissions and the watcher
    submitted = threading.Event()
    daemon_started = threading.Event()
    state: dict[str, Any] = {"ended": "?", "ids": [], "errors": [], "t_first": None}
    state["t_submitted"] = None
    lock = threading.Lock()
    daemon_running = [False]
    undo_plan = lambda: None  # noqa: E731
    watch: StatusWatch | None = None
    handler = CycleLog(tracker)
    fig: dict[str, Any] = {}
    try:
        lc.start()
        assert lc.cluster is not None
        load_start = os.getloadavg()
        watch = StatusWatch(lc.state_dir / daemon_module.STATUS_FILE)

        def request_stop(why: str) -> None:
            with lock:
                if state["ended"] == "?":
                    state["ended"] = why
                stop.set()
                submitted.set()
                if daemon_running[0]:
                    os.kill(os.getpid(), signal.SIGTERM)  # the daemon's own way to stop

        def orchestrate() -> None:
            bench_thread()
            try:
                if args.planner_first:
                    daemon_started.wait(max(0.0, deadline - time.monotonic()))
                ids, errors, first, last = submit_all(
                    lc, args.jobs, args.job_seconds, args.submit_parallel, stop, deadline
                )
                state.update(ids=ids, errors=errors, t_first=first, t_submitted=last)
                submitted.set()
                while not daemon_started.wait(0.2):
                    if stop.is_set():
                        return
                want = set(ids)
                while not stop.wait(0.2):
                    if time.monotonic() > deadline:
                        request_stop(f"--timeout {args.timeout:g} s")
                        return
                    if (
                        args.plan_only_seconds is not None
                        and now() - state["t_daemon"] >= args.plan_only_seconds
                    ):
                        request_stop(f"--plan-only-seconds {args.plan_only_seconds:g}")
                        return
                    if want <= tracker.done_at.keys():
                        request_stop("every job ended")
                        return
            except BaseException as exc:  # noqa: BLE001 - reported, and the run stops
                request_stop(f"error: {exc!r}")

        boss = threading.Thread(target=orchestrate, name="orchestrate", daemon=True)
        boss.start()
        if not args.planner_first:
            while not submitted.wait(0.2):
                if time.monotonic() > deadline:
                    request_stop(f"--timeout {args.timeout:g} s (submitting)")
        if not stop.is_set():
            sdiag_reset = lc.cluster.run("sdiag", "--reset", check=False)
            logger = logging.getLogger("slurm_mig")
            logger.setLevel(logging.INFO)
            logger.addHandler(handler)
            if args.keep or os.environ.get("SLURM_MIG_E2E_KEEP"):  # the daemon's log too
                kept = logging.FileHandler(lc.root / "planner.log")
                kept.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
                logger.addHandler(kept)
            undo_plan = wrap_plan_cycle(tracker)
            client = TimingClient(SlurmClient(env=lc.env), tracker)
            watch.thread.start()
            procs.install()
            state["t_daemon"] = now()
            with lock:  # a stop asked for from now on reaches the daemon as SIGTERM
                daemon_running[0] = not stop.is_set()
            daemon_started.set()
            try:
                if daemon_running[0]:
                    daemon_module.run_planner(lc.config_path, client=client)
            except Interrupted as exc:  # before the daemon's handlers were in place
                state["ended"] = state["ended"] if state["ended"] != "?" else str(exc)
            finally:
                with lock:
                    daemon_running[0] = False
                procs.uninstall()
                signal.signal(signal.SIGTERM, interrupted)
                signal.signal(signal.SIGINT, interrupted)
            if state["ended"] == "?":
                state["ended"] = "the daemon stopped (signal)"
            t_end = now()
            # the RPC counts first: nothing of this script's read-out is in them
            bench_thread()
            sdiag = lc.cluster.run("sdiag", check=False)
            watch.stop.set()
            watch.poll()
            fig = figures(args, lc, install, tracker, procs, watch, state, t_end)
            fig["sdiag_error"] = (
                "" if sdiag.returncode == 0 else sdiag.stderr.strip() or "sdiag failed"
            )
            if sdiag_reset.returncode != 0:
                fig["sdiag_error"] += f"; sdiag --reset: {sdiag_reset.stderr.strip()}"
            fig["rpcs"] = parse_sdiag(sdiag.stdout)
            fig["load_start"] = list(load_start)
            fig["load_end"] = list(os.getloadavg())
    except Interrupted as exc:
        print(f"daemon_scale: interrupted ({exc}); stopping Slurm", file=sys.stderr)
        return 1
    finally:
        stop.set()
        if watch is not None:
            watch.stop.set()
        undo_plan()
        logging.getLogger("slurm_mig").removeHandler(handler)
        lc.stop()  # slurmds, slurmctld, munged and every job process
        if args.keep or os.environ.get("SLURM_MIG_E2E_KEEP"):
            print(f"daemon_scale: kept {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)
    if not fig:
        print(f"daemon_scale: the daemon never started ({state['ended']})")
        return 1
    report(fig, tracker, args.json)
    return 0


def _hook_logs(lc: LiveCluster) -> list[Path]:
    """The hooks' log files: each node's own (private nodes), else the one shared file."""
    paths = {lc.log_file.resolve()}
    for node in lc.nodes:
        paths.add(lc.node_path(node, lc.log_file).resolve())
    return sorted(paths)


def _lines(path: Path, text: str) -> int:
    """Lines of ``path`` that hold ``text`` (0 when it cannot be read)."""
    try:
        with path.open(errors="replace") as f:
            return sum(text in ln for ln in f)
    except OSError:
        return 0


def figures(
    args: argparse.Namespace,
    lc: LiveCluster,
    install: SlurmInstall,
    tracker: Tracker,
    procs: ProcessCounter,
    watch: StatusWatch,
    state: dict[str, Any],
    t_end: float,
) -> dict[str, Any]:
    ids: list[str] = state["ids"]
    t_first = state["t_first"] or state["t_daemon"]
    # the jobs as Slurm has them at the end (after the sdiag read)
    try:
        final = {j.job_id: j for j in SlurmClient(env=lc.env).jobs("mig")}
    except Exception:  # noqa: BLE001 - then the daemon's last view
        final = dict(tracker.final_jobs)
    jobs = [final[i] for i in ids if i in final]
    started = [j for j in jobs if j.state in STARTED_STATES or j.restart_count > 0]
    completed = [j for j in jobs if j.state == "COMPLETED"]
    planned = [i for i in ids if i in tracker.planned_at]
    all_planned = len(planned) == len(ids) and ids
    last_planned = max((tracker.planned_at[i] for i in ids), default=0.0) if all_planned else 0
    released = [i for i in ids if i in tracker.released_at]
    all_released = len(released) == len(ids) and ids
    last_released = max((tracker.released_at[i] for i in ids), default=0.0) if all_released else 0
    starts = [j.start_time for j in completed if j.start_time]
    ends = [j.end_time for j in completed if j.end_time]
    span = (max(ends) - min(starts)) if starts and ends else 0.0
    lock_lines = sum(_lines(path, LOCK_MESSAGE) for path in _hook_logs(lc))
    batch_missing = _lines(lc.root / "slurm" / "log" / "slurmctld.log", BATCH_MISSING)
    gap, after = watch.longest_gap(state["t_daemon"], t_end)
    return {
        "jobs": args.jobs,
        "nodes": args.nodes,
        "gpus": args.gpus,
        "job_seconds": args.job_seconds,
        "cycle": args.cycle,
        "slurm": f"{install.name} {install.version_text}",
        "ended": state["ended"],
        "submitted": len(ids),
        "submit_parallel": args.submit_parallel,
        "sbatch_refused": len(state["errors"]),
        "sbatch_errors": state["errors"][:3],
        "submit_s": (state["t_submitted"] or t_first) - t_first,
        "planned": len(planned),
        "all_planned_s": (last_planned - t_first) if all_planned else None,
        "all_planned_after_start_s": (last_planned - state["t_daemon"]) if all_planned else None,
        "released": len(released),
        "all_released_s": (last_released - t_first) if all_released else None,
        "all_released_after_start_s": (
            (last_released - state["t_daemon"]) if all_released else None
        ),
        "cycles": [
            {
                "cycle": c.number,
                "seconds": round(c.seconds, 4),
                "read": round(c.read, 4),
                "plan": round(c.plan, 4),
                "apply": round(c.apply, 4),
                "cpu": round(c.cpu, 4),
                "plan_cpu": round(c.plan_cpu, 4),
                "writes": c.writes,
                "jobs": c.jobs_seen,
                "unplanned": c.unplanned,
            }
            for c in tracker.cycles
        ],
        "cut_short": [list(x) for x in tracker.cut_short],
        "client_calls": dict(tracker.calls),
        "processes": dict(procs.counts),
        "started": len(started),
        "status_gap_s": gap,
        "status_gap_cycle": after,
        "restarted": sum(1 for j in jobs if j.restart_count > 0),
        "lock_timeouts": lock_lines,
        "batch_missing": batch_missing,
        "completed": len(completed),
        "all_completed": bool(ids) and len(completed) == len(ids),
        "per_minute": (60.0 * len(completed) / span) if span > 0 else 0.0,
        "daemon_seconds": t_end - state["t_daemon"],
        "node_cpus": args.node_cpus if lc.cluster and lc.cluster.cpu_group else 0,
        "message_timeout": args.message_timeout,
        "batch_start_timeout": args.batch_start_timeout,
        "node_cpu_group_error": lc.cluster.cpu_group_error if lc.cluster else "",
    }


if __name__ == "__main__":
    sys.exit(main())
