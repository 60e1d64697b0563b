"""Replaying a job trace on a loopback Slurm (slurm_mig.demo.live.LiveCluster), for
benchmarks/site_value.py: each job submitted by sbatch at its (compressed) arrival as
the cluster's job user, running `slurm_mig.demo.tracejob` (it finds out its MIG size
and sleeps its time there), squeue polled until every job has ended, and one row per
job of when it was submitted, started and ended and on what size. Settings of a site
whose times are compressed with the trace's: slurm.conf's priority lines
(`priority_lines`) and slurm-mig's [planner] settings (`planner_settings`).

The same `Submission` serves Slurm alone on a fixed layout (``mode="static"``: its
``--gres``) and slurm-mig (``mode="slurm-mig"``: its ``--comment`` hints; job_submit.lua
holds it and the planner gives it its GRES). The caller starts and stops the cluster.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .live import LiveCluster

ROOT = Path(__file__).resolve().parents[2]
DONE = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"})
SBATCH_THREADS = 8  # sbatch calls at once: a slow one does not hold up the next arrival
POLL_S = 2.0  # seconds between squeue reads
RECORD_POLL_S = 0.1  # seconds between reads of the planner's status file when recording
LEAD_S = 1.0  # seconds from the call to the first submission
# slurm-mig's settings in seconds that shape its plans: `planner_settings` divides them
# by a scale (the trace's compression: its periods compressed as the jobs' times are)
PERIODS = ("cycle", "batch_window", "release_ahead", "default_runtime")


@dataclass(frozen=True)
class Submission:
    """One trace job as both kinds of run submit it."""

    id: str  # the trace's job id
    kind: str  # its job name
    at: float  # real seconds after the first submission
    minutes: int | None  # --time (None: no limit)
    gres: str  # --gres on a fixed layout (Slurm alone)
    comment: str  # --comment under slurm-mig (its hints)
    times: str  # tracejob's TIMES: trace seconds on each size
    memory: int  # bytes it needs (tracejob's MEMORY)
    restartable: bool = False  # sbatch --requeue; tracejob checkpoints (its PROGRESS)


# ---------------------------------------------------------------------------
# A compressed site's settings


def slurm_duration(seconds: float) -> str:
    """``D-HH:MM:SS`` (Slurm's time format) of ``seconds``, rounded to the second."""
    s = max(0, round(seconds))
    return f"{s // 86400}-{s % 86400 // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"


def priority_lines(compress: float) -> list[str]:
    """slurm.conf's priority lines: the simulator's ``age`` mode (sim.priority's
    weights, Slurm's documented example) with its times compressed: max age and
    PriorityCalcPeriod (whole minutes, at least 1) divided by ``compress``; no
    fairshare (no accounting)."""
    from slurm_mig.sim.priority import SitePriority

    site = SitePriority("age")
    return [
        "PriorityType=priority/multifactor",
        f"PriorityWeightAge={site.weight_age:.0f}",
        f"PriorityMaxAge={slurm_duration(site.max_age / compress)}",
        f"PriorityCalcPeriod={max(1, round(site.calc_period / compress / 60))}",
        "PriorityWeightFairshare=0",
    ]


def planner_settings(overrides: Sequence[str], scale: float = 1.0) -> dict[str, object]:
    """The [planner] settings LiveCluster's config names and ``release_ahead``, at the
    defaults a site gets (slurm_mig.config.SCHEMA), those of `PERIODS` divided by
    ``scale`` (--periods compressed), then ``KEY=VALUE`` overrides (JSON values, else
    strings). The objective is named as the daemon resolves it (`configured_objective`:
    balanced where the policy takes one; None where the policy plans by its own rule,
    which LiveCluster then leaves unset): LiveCluster, given no objective, plans by
    ``makespan``, its demo's choice, not a site's."""
    from slurm_mig.config import SCHEMA
    from slurm_mig.daemon.cycle import configured_objective

    keys = ("algorithm", "objective", "batch_window", "cycle", "default_runtime")
    out: dict[str, object] = {k: SCHEMA["planner"][k].default for k in (*keys, *PERIODS)}
    out.update({k: float(out[k]) / scale for k in PERIODS})  # type: ignore[arg-type]
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or key not in SCHEMA["planner"]:
            raise ValueError(f"--planner {item!r}: give KEY=VALUE with a [planner] key")
        try:
            out[key] = json.loads(text)
        except ValueError:
            out[key] = text
    out["objective"] = configured_objective(str(out["algorithm"]), str(out["objective"])) or None
    return out


# ---------------------------------------------------------------------------
# Submitting and watching


def progress_dir(log: Path) -> Path:
    """Where restartable trace jobs keep their checkpoints: beside the jobs' log."""
    return log.parent / "progress"


def job_wrap(
    sub: Submission, model: str, compress: float, sim_root: Path, log: Path, python: str
) -> str:
    """The batch script of one job: `slurm_mig.demo.tracejob` with its times (and, a
    restartable one, its checkpoints' folder)."""
    argv = [python, "-m", "slurm_mig.demo.tracejob", model, sub.times, str(sub.memory)]
    argv.append(f"{compress:g}")
    argv += [str(sim_root), str(log)]
    if sub.restartable:
        argv.append(str(progress_dir(log)))
    head = f"SLURM_MIG_T0=$(date +%s.%N) exec env PYTHONPATH={shlex.quote(str(ROOT))}"
    return " ".join([head, *(shlex.quote(a) for a in argv)])


def sbatch_args(sub: Submission, mode: str) -> tuple[list[str], dict[str, str]]:
    """sbatch's options of ``sub`` in a ``static`` or ``slurm-mig`` run: (arguments,
    `LocalSlurm.try_sbatch` keywords)."""
    args = [f"--time={sub.minutes}"] if sub.minutes else []
    if sub.restartable:
        args.append("--requeue")
    kwargs = {"partition": "mig", "name": sub.kind}
    if mode == "static":
        args.append(f"--gres={sub.gres}")
    else:
        kwargs["comment"] = sub.comment
    return args, kwargs


def submit_all(
    lc: LiveCluster, mode: str, subs: Sequence[Submission], compress: float, stop: threading.Event
) -> dict[str, Any]:
    """Submit ``subs`` at their times as the cluster's job user: trace id -> (job id,
    when sbatch was called, when it was due), and sbatch's refusals under ``"errors"``."""
    assert lc.cluster is not None
    user = lc.cluster.job_user
    python = lc.cluster.job_python(user)
    if any(sub.restartable for sub in subs):  # the job user writes its checkpoints there
        folder = progress_dir(lc.job_log)
        folder.mkdir(exist_ok=True)
        os.chmod(folder, 0o1777)
    t0 = time.time() + LEAD_S
    out: dict[str, Any] = {"errors": []}
    lock = threading.Lock()

    def one(sub: Submission) -> None:
        due = t0 + sub.at
        while not stop.is_set() and time.time() < due:
            time.sleep(min(0.05, max(0.0, due - time.time())))
        if stop.is_set():
            return
        wrap = job_wrap(sub, lc.model, compress, lc.sim_root, lc.job_log, python)
        args, kwargs = sbatch_args(sub, mode)
        at = time.time()
        res = lc.cluster.try_sbatch(wrap, *args, user=user, **kwargs)
        with lock:
            if res.returncode == 0:
                out[sub.id] = (res.stdout.strip().split(";")[0], at, due)
            else:
                out["errors"].append(f"{sub.id}: {res.stderr.strip()[:200]}")

    with ThreadPoolExecutor(SBATCH_THREADS) as pool:
        list(pool.map(one, subs))
    return out


def wait_done(
    lc: LiveCluster,
    submitted: Mapping[str, Any],
    ready: threading.Event,
    stop: threading.Event,
    deadline: float,
    on_poll: Callable[[], object] = lambda: None,
) -> tuple[dict[str, Any], str]:
    """Poll squeue until every submitted job has ended (once ``ready``: all are
    submitted), ``stop`` or the monotonic ``deadline``, calling ``on_poll`` each time:
    job id -> its last squeue record (kept after squeue forgets it), and why the wait
    ended."""
    seen: dict[str, Any] = {}
    while True:
        try:
            seen.update(lc.jobs())
        except Exception as exc:  # noqa: BLE001 - a slow squeue: the next poll
            print(f"tracerun: squeue: {exc}", file=sys.stderr)
        on_poll()
        ids = [v[0] for k, v in list(submitted.items()) if k != "errors"]
        if ready.is_set() and all(i in seen and seen[i].state in DONE for i in ids):
            return seen, "every job ended"
        if stop.is_set():
            return seen, "stopped"
        if time.monotonic() > deadline:
            return seen, "timeout"
        time.sleep(POLL_S)


def job_rows(
    subs: Sequence[Submission],
    submitted: Mapping[str, Any],
    seen: Mapping[str, Any],
    records: Sequence[Mapping[str, Any]],
) -> list[dict[str, Any]]:
    """One row per submitted job: submit (this side's clock at sbatch), start and end
    (the job's own record, its last run's; else squeue's), size and profile (its
    record), state and restarts (squeue), error (its record: a size it cannot run on)."""
    mine: dict[str, Mapping[str, Any]] = {}
    for r in records:
        if r.get("job") and (r["job"] not in mine or r["end"] > mine[r["job"]]["end"]):
            mine[r["job"]] = r
    rows = []
    for sub in subs:
        if sub.id not in submitted:
            continue
        job_id, at, due = submitted[sub.id]
        job, rec = seen.get(job_id), mine.get(job_id, {})
        rows.append(
            {
                "id": sub.id,
                "job_id": job_id,
                "submit": at,
                "lag": at - due,
                "start": rec.get("launched") or getattr(job, "start_time", None),
                "end": rec.get("end") or getattr(job, "end_time", None),
                "size": rec.get("size"),
                "profile": rec.get("profile"),
                "state": getattr(job, "state", None),
                "restarts": getattr(job, "restart_count", 0),
                "error": rec.get("error"),
            }
        )
    return rows


def record_status(status_file: Path, into: Path, stop: threading.Event) -> int:
    """Copy each cycle's status file (``slurm-mig plan --start`` replays one) to
    ``into``/cycle-NNNNNN.json until ``stop``: the number of cycles kept. A cycle that
    ends within `RECORD_POLL_S` of the next one may be missed; a file that cannot be
    written ends the record with one line on stderr (the run goes on)."""
    last, kept = None, 0
    while not stop.is_set():
        try:
            text = status_file.read_text()
            cycle = json.loads(text).get("cycle")
        except (OSError, ValueError, AttributeError):
            cycle = None
        if isinstance(cycle, int) and cycle != last:
            target = into / f"cycle-{cycle:06d}.json"
            try:
                into.mkdir(parents=True, exist_ok=True)
                target.write_text(text)
            except OSError as exc:
                print(f"record: stopped after {kept} cycles: cannot write {target}: "
                      f"{exc.strerror or exc}", file=sys.stderr)  # fmt: skip
                return kept
            last, kept = cycle, kept + 1
        stop.wait(RECORD_POLL_S)
    return kept


def replay(
    lc: LiveCluster,
    mode: str,
    subs: Sequence[Submission],
    compress: float,
    timeout: float,
    record: Path | None = None,
) -> dict[str, Any]:
    """Submit ``subs`` to the started ``lc`` at their times and wait until every job has
    ended or ``timeout`` seconds have passed: {"rows": `job_rows`, "ended": why,
    "sbatch_errors": [...], "deferred": the planner's reasons for deferring each job
    it deferred, as its status file gave them while the run went on}. Under slurm-mig,
    ``record`` keeps each cycle's status file there (`record_status`). A
    KeyboardInterrupt (or the caller's exception from a signal handler) stops the
    submissions too; the caller stops the cluster."""
    stop, ready = threading.Event(), threading.Event()
    submitted: dict[str, Any] = {"errors": []}
    deferred: dict[str, list[str]] = {}

    def watch() -> None:
        if lc.static_layout is None:
            for job_id, why in (lc.status().get("deferred") or {}).items():
                reasons = deferred.setdefault(str(job_id), [])
                if str(why) not in reasons:
                    reasons.append(str(why))

    def feed() -> None:
        try:
            submitted.update(submit_all(lc, mode, subs, compress, stop))
        finally:
            ready.set()

    feeder = threading.Thread(target=feed, name="submit", daemon=True)
    feeder.start()
    recorder = None
    if record is not None and lc.static_layout is None:
        status_file = lc.state_dir / "planner-status.json"
        recorder = threading.Thread(
            target=record_status, args=(status_file, record, stop), name="record", daemon=True
        )
        recorder.start()
    try:
        deadline = time.monotonic() + timeout
        seen, ended = wait_done(lc, submitted, ready, stop, deadline, watch)
    finally:
        stop.set()
        feeder.join(30)
        if recorder is not None:
            recorder.join(30)
    rows = job_rows(subs, dict(submitted), seen, lc.records())
    errors = list(submitted["errors"])
    return {"rows": rows, "ended": ended, "sbatch_errors": errors, "deferred": deferred}


def diagnostics(lc: LiveCluster, rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What went wrong, if anything: jobs requeued, jobs given a size they cannot run
    on, jobs that did not complete, sbatch's lag; under slurm-mig the planner's last
    status (planner-status.json, its long lists left out) and its log's warnings."""
    notes: dict[str, Any] = {
        "requeued": [r["job_id"] for r in rows if r["restarts"]],
        "wrong_size": [(r["job_id"], r["error"]) for r in rows if r["error"]],
        "not_completed": {r["job_id"]: r["state"] for r in rows if r["state"] != "COMPLETED"},
        "sbatch_lag_max": max((r["lag"] for r in rows), default=0.0),
    }
    if lc.static_layout is None:
        status = lc.status()
        notes["planner_status"] = {
            k: v for k, v in status.items() if not isinstance(v, list | dict) or len(v) < 50
        }
        try:
            log = lc.daemon_log.read_text(errors="replace").splitlines()
        except OSError:
            log = []
        notes["planner_warnings"] = [ln for ln in log if "WARNING" in ln or "ERROR" in ln][-20:]
    return notes
