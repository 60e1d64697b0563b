"""The planner daemon: every ``cycle`` seconds read Slurm, plan, apply through scontrol.

Each cycle builds a `cycle.Snapshot` from ``squeue``/``sinfo`` (SlurmClient), the config,
the learned runtimes (RuntimeStore) and the standing plans of held jobs from the last
cycle, calls the pure `cycle.plan_cycle` and applies its actions (`apply_actions`).
Slurm hears of a plan only when its job is released: one ``scontrol update`` (record,
token, GRES, node list, dependency) and the release, which goes out with others' in
one ``scontrol release a,b,...``; holds too go out as one list. Writes per cycle thus
grow with the jobs that start, not with the queue. One failing write logs an error
and the others still run, except later actions of the same job (a release never
follows a failed update). A cycle spends at most ``[planner] apply_budget`` seconds
writing; what is left is done by the next cycle, which starts at once from a fresh
read, so the status file and metrics never go stale for longer.

The standing plans are the daemon's only state between cycles, and safety does not
depend on them: killed at any moment and restarted, it plans held jobs again from
Slurm's view (released jobs keep their records in Slurm). SIGTERM/SIGINT end it
between slices of writes; SIGHUP starts the next cycle at once. A cycle that meets an
OSError (out of descriptors, memory or processes) fails alone, with one log line and a
hint; the next cycle runs as usual.

After every cycle it writes ``<state_dir>/planner-status.json`` (cycle count, when it
finished, what it did) for monitoring and tests.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol, TextIO

from ..geometry import get_model
from . import comment as comments
from .assignment import AssignmentError, load_key, sign
from .cycle import (
    Action,
    CycleResult,
    Hold,
    Learn,
    Note,
    Release,
    Requeue,
    Snapshot,
    plan_cycle,
)
from .estimates import Estimator
from .jobrecord import in_partition, job_phase, parse_admin_comment

log = logging.getLogger("slurm_mig.planner")

STATUS_FILE = "planner-status.json"
METRICS_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _planner_metrics(config: Any):
    from ..planner.registry import policy_info
    from .metrics import PlannerMetrics

    algorithm = getattr(config, "algorithm", "adaptive")
    try:
        kind = policy_info(algorithm).kind
    except Exception:  # an unknown name fails planning itself, with its own message
        kind = ""
    return PlannerMetrics(algorithm, kind, float(getattr(config, "batch_window", 0.0)))


class Client(Protocol):
    """What the daemon needs of `slurm_mig.slurm.client.SlurmClient`."""

    def jobs(self, partition: str | None = None) -> list: ...
    def nodes(self, partition: str | None = None) -> list: ...
    def hold(self, job_id: str) -> None: ...
    def release(self, job_id: str) -> None: ...
    # optional: hold_jobs(ids) / release_jobs(ids) -> {job id: error}, one call for many
    def requeue(self, job_id: str) -> None: ...
    def update_job(self, job_id: str, **fields: str) -> None: ...


# ---------------------------------------------------------------------------
# Snapshot


def usable_nodes(
    configured: Mapping[str, Sequence[str]], nodes: Iterable[Any]
) -> dict[str, tuple[str, ...]]:
    """Configured nodes that sinfo shows and that take jobs, with their GPU models."""
    seen = {n.name: n for n in nodes}
    out = {}
    for name, models in configured.items():
        node = seen.get(name)
        if node is None:
            continue
        if not node.usable:
            continue
        out[name] = tuple(models)
    return out


def build_snapshot(
    config: Any,
    jobs: Sequence[Any],
    nodes: Sequence[Any],
    store: Any,
    now: float,
    previous_nodes: frozenset[str] | None = None,
    plans: Mapping[str, Any] | None = None,
    learned: AbstractSet[tuple[str, int]] = frozenset(),
    policy: Any = None,
    limited: Mapping[str, str] | None = None,
) -> Snapshot:
    """The cycle's input from what squeue and sinfo said and the learned runtimes;
    ``learned``: the finished runs the store already holds (no learn action again)."""
    configured = {name: tuple(models) for name, models in config.nodes.items()}
    all_models = sorted({get_model(m).name for ms in configured.values() for m in ms})
    estimator = Estimator(config, store)
    estimates = {}
    for job in jobs:
        if job.partition and not in_partition(job, config.partition):
            continue
        if job_phase(job.state) == "pending":
            estimates[job.job_id] = estimator(job, all_models)
        else:  # running or finished: only its kind and owner, to learn its runtime
            estimates[job.job_id] = estimator.identity(job)
    return Snapshot(
        now=now,
        jobs=tuple(jobs),
        nodes=usable_nodes(configured, nodes),
        estimates=estimates,
        partition=config.partition,
        algorithm=config.algorithm,
        batch_window=config.batch_window,
        batch_size=config.batch_size,
        max_planned=getattr(config, "max_planned", 0),
        previous_nodes=previous_nodes,
        release_ahead=config.release_ahead,
        start_timeout=config.start_timeout,
        plans=plans,
        learned=frozenset(learned),
        policy=policy,
        reorder=getattr(config, "reorder", 0),
        objective=getattr(config, "objective", ""),
        limited=dict(limited or {}),
    )


# ---------------------------------------------------------------------------
# Applying actions


@dataclass
class ApplyReport:
    applied: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)  # (job id, error)
    skipped: int = 0  # later actions of a job whose earlier action failed, or stopped
    learned: int = 0
    # (job id, restart) of the runs whose runtime the store now holds (new or known)
    stored: list[tuple[str, int]] = field(default_factory=list)
    released: list[str] = field(default_factory=list)  # jobs whose release went through
    cut: int = 0  # actions left for the next cycle: the apply budget was spent
    calls: int = 0  # Slurm commands run


LIMIT_RETRY = 60.0  # seconds a job Slurm kept pending for a limit waits to be planned again
RELEASE_CHUNK = 64  # releases per slice: their updates at once, then one release call


def apply_actions(
    actions: Sequence[Action],
    client: Client,
    *,
    key: bytes,
    store: Any = None,
    clock: Callable[[], float] = time.time,
    stop: threading.Event | None = None,
    gres: bool = False,
    workers: int = 1,
    budget: float | None = None,
    elapsed: Callable[[], float] = time.monotonic,
) -> ApplyReport:
    """Apply ``actions`` with few Slurm calls: holds as one list call, the updates of
    jobs re-planned in place one by one, notes and the releases' updates ``workers``
    at a time, the releases of each slice of `RELEASE_CHUNK` jobs as one list call
    after their updates went through. A failure is logged and skips only that job's
    later actions (a release never follows a failed update); a failed hold or move
    skips every release. Stops between slices once ``stop`` is set, or once ``budget``
    seconds are spent (``report.cut``: the next cycle reads Slurm afresh and goes on).
    ``gres``: a released job gets its instance's GRES record (``slurm.gres``) in the
    update that writes its token."""
    report = ApplyReport()
    began = elapsed()
    holds = [a for a in actions if isinstance(a, Hold)]
    notes = [a for a in actions if isinstance(a, Note)]
    releases = [a for a in actions if isinstance(a, Release)]
    requeues = [a for a in actions if isinstance(a, Requeue)]
    learns = [a for a in actions if isinstance(a, Learn)]
    failed_jobs: set[str] = set()

    def over(first: bool) -> int | None:
        if stop is not None and stop.is_set():
            return 0
        if budget is not None and not first and elapsed() - began > budget:
            return 1  # every cycle gets at least one slice through: no livelock
        return None

    def fail(job_id: str, what: str, exc: BaseException) -> None:
        failed_jobs.add(job_id)
        text = " ".join(str(exc).split()) or exc.__class__.__name__
        report.failed.append((job_id, text))
        log.error("%s: failed: %s", what, text)

    moved = [a for a in releases if a.in_place]
    releases = [a for a in releases if not a.in_place]
    pool = _Pool(workers)
    try:
        _apply_holds(holds, client, report, fail)
        if not report.failed:
            _apply_in_place(moved, client, key, clock, gres, report, fail)
        elif moved:
            report.skipped += len(moved)
            log.warning("a hold failed: %d moves wait for the next cycle's fresh read", len(moved))
        if report.failed and releases:
            # a job that was to give its slices back still holds them: this cycle's
            # plan may have handed them on, so its releases wait for a fresh read
            report.skipped += len(releases)
            log.warning(
                "a hold or move failed: %d releases wait for the next cycle's fresh read",
                len(releases),
            )
            releases = []
        slices: list[list[Action]] = [list(notes)] if notes else []
        slices += [releases[i : i + RELEASE_CHUNK] for i in range(0, len(releases), RELEASE_CHUNK)]
        for i, part in enumerate(slices):
            why = over(i == 0)
            if why is not None:
                left = sum(len(p) for p in slices[i:]) + len(requeues)
                if why:
                    report.cut += left
                    log.info("apply budget spent: %d actions for the next cycle", left)
                else:
                    report.skipped += left
                    log.info("stopping: %d actions left for the next run", left)
                requeues = []
                break
            _apply_slice(part, client, key, clock, gres, pool, report, fail, failed_jobs)
        for action in requeues:
            if action.job_id in failed_jobs:
                report.skipped += 1
                continue
            try:
                report.calls += 1
                client.requeue(action.job_id, hold=True)
                report.applied += 1
                log.info("%s", action.describe())
            except _WRITE_ERRORS as exc:
                fail(action.job_id, action.describe(), exc)
    finally:
        pool.close()
    for action in learns:
        _learn(action, store, report)
    return report


_WRITE_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    comments.CommentTooLong,
    AssignmentError,
)


def _write_errors() -> tuple[type[BaseException], ...]:
    from .client import SlurmError

    return (SlurmError, *_WRITE_ERRORS)


class _Pool:
    """``map`` over a thread pool of ``workers`` (in the caller's thread for one)."""

    def __init__(self, workers: int) -> None:
        self.workers = max(1, int(workers))
        self._executor = None

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
        if self.workers == 1 or len(items) <= 1:
            return [fn(x) for x in items]
        if self._executor is None:
            from concurrent.futures import ThreadPoolExecutor

            self._executor = ThreadPoolExecutor(self.workers, thread_name_prefix="slurm-write")
        return list(self._executor.map(fn, items))

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True)


def _apply_holds(holds: Sequence[Hold], client: Client, report: ApplyReport, fail) -> None:
    """Every hold in one list call, then the dependencies the planner set, cleared."""
    if not holds:
        return
    errors = _write_errors()
    failed = _list_or_all_failed(
        client, "hold", list(dict.fromkeys(h.job_id for h in holds)), report
    )
    for h in holds:
        if h.job_id in failed:
            fail(h.job_id, h.describe(), RuntimeError(failed[h.job_id]))
            continue
        if h.clear_dependency:  # "0": Slurm's word for none (an empty value is ignored)
            try:
                report.calls += 1
                client.update_job(h.job_id, Dependency="0")
            except errors as exc:
                # a job Slurm started since squeue was read: its afterany was met and
                # its hold only set its priority; nothing to clear, nothing failed
                if "no longer pending" not in str(exc).lower():
                    fail(h.job_id, h.describe(), exc)
                    continue
        report.applied += 1
        log.info("%s", h.describe())


def _apply_in_place(
    moved: Sequence[Release],
    client: Client,
    key: bytes,
    clock: Callable[[], float],
    gres: bool,
    report: ApplyReport,
    fail,
) -> None:
    """Jobs re-planned in place (pending, not held): each new plan in one update, one
    after another in the order given (`cycle.in_place_order`), before any release, as
    holds would go. At a failed update the job is held, so that it does not start on
    the plan it had, and the rest wait for the next cycle's fresh read."""
    errors = _write_errors()
    for i, action in enumerate(moved):
        try:
            report.calls += 1
            client.update_job(action.job_id, **_release_fields(action, key, clock, gres))
        except errors as exc:
            fail(action.job_id, action.describe(), exc)
            report.skipped += len(moved) - i - 1
            for jid, text in _list_or_all_failed(client, "hold", [action.job_id], report).items():
                log.error("job %s: not held after its failed update either: %s", jid, text)
            return
        report.applied += 1
        report.released.append(action.job_id)
        log.info("%s", action.describe())


def _list_or_all_failed(
    client: Client, verb: str, ids: Sequence[str], report: ApplyReport
) -> dict[str, str]:
    """`_list_call`, counted; an error of the call itself fails every job of it."""
    report.calls += 1
    try:
        return _list_call(client, verb, ids)
    except _write_errors() as exc:
        return {jid: str(exc) for jid in ids}


def _list_call(client: Client, verb: str, ids: Sequence[str]) -> dict[str, str]:
    """``client.<verb>_jobs(ids)`` where the client takes a list, else one call per job;
    {job id: error} of those that failed."""
    many = getattr(client, f"{verb}_jobs", None)
    if many is not None:
        return many(ids)
    errors = _write_errors()
    failed = {}
    one = getattr(client, verb)
    for jid in ids:
        try:
            one(jid)
        except errors as exc:
            failed[jid] = str(exc)
    return failed


def _apply_slice(
    part: Sequence[Action],
    client: Client,
    key: bytes,
    clock: Callable[[], float],
    gres: bool,
    pool: _Pool,
    report: ApplyReport,
    fail,
    failed_jobs: set[str],
) -> None:
    """Notes or releases: the updates at once, then the releases as one list call. A
    job released ahead of jobs whose release failed stays held (``failed_jobs``): it
    would wait for a job that does not run."""
    errors = _write_errors()
    todo = []
    for a in part:
        if a.job_id in failed_jobs or (isinstance(a, Release) and failed_jobs & set(a.after)):
            failed_jobs.add(a.job_id)
            report.skipped += 1
            log.info("%s: not now (a job before it was not released)", a.describe())
        else:
            todo.append(a)

    def update(action: Action) -> BaseException | None:
        try:
            if isinstance(action, Release):
                client.update_job(action.job_id, **_release_fields(action, key, clock, gres))
            else:
                client.update_job(action.job_id, **dict(action.fields))
        except errors as exc:
            if gres and isinstance(action, Release) and "gres" in str(exc).lower():
                return RuntimeError(
                    f"{exc}; node {action.assignment.node} needs the gres.conf records of "
                    "'slurm-mig gres-conf' (README: Site set-up), or set [slurm] gres = \"off\""
                )
            return exc
        return None

    results = pool.map(update, todo)
    report.calls += len(todo)
    to_release = []
    for action, exc in zip(todo, results):
        if exc is not None:
            fail(action.job_id, action.describe(), exc)
        elif isinstance(action, Release) and failed_jobs & set(action.after):
            failed_jobs.add(action.job_id)  # its predecessor's update failed just now
            report.skipped += 1
        elif isinstance(action, Release):
            to_release.append(action)
        else:
            report.applied += 1
            log.warning("%s", action.describe())
    if not to_release:
        return
    failed = _list_or_all_failed(client, "release", [a.job_id for a in to_release], report)
    for action in to_release:
        if action.job_id in failed:
            fail(action.job_id, action.describe(), RuntimeError(failed[action.job_id]))
            continue
        report.applied += 1
        report.released.append(action.job_id)
        log.info("%s", action.describe())


def _release_fields(
    action: Release, key: bytes, clock: Callable[[], float], gres: bool
) -> dict[str, str]:
    """The one update before a release: the record fields that changed, the signed
    token in the Comment, the GRES record, the planner's dependency."""
    a = action.assignment
    token = sign(replace(a, issued=clock()), key)
    fields_ = dict(action.fields)
    fields_["Comment"] = comments.parse(action.comment).with_token(token).render()
    if gres:  # Slurm's device cgroup then lets the job open this instance only
        from ..devices.migcaps import gi_id_for
        from .gres import Record, tres_per_node

        record = Record(a.gpu, gi_id_for(get_model(a.model), a.placement))
        fields_["TresPerNode"] = tres_per_node(record)
    if action.after:  # released ahead: Slurm starts it once those jobs have left
        fields_["Dependency"] = "afterany:" + ":".join(action.after)
    return fields_


def _learn(action: Learn, store: Any, report: ApplyReport) -> None:
    """A finished run's runtime into the store (sqlite errors are logged, not raised)."""
    if store is None:
        return
    try:
        if store.record(
            action.key,
            action.model,
            action.size,
            action.seconds,
            action.job_id,
            action.restart,
            action.finished,
            owner=action.owner,
        ):
            report.learned += 1
            log.info("%s", action.describe())
        report.stored.append((action.job_id, action.restart))
    except Exception as exc:  # e.g. sqlite errors while learning: log, go on
        log.error("%s: not recorded: %s", action.describe(), exc)


# ---------------------------------------------------------------------------
# The daemon


@dataclass
class CycleReport:
    number: int
    started: float
    finished: float
    result: CycleResult | None
    apply: ApplyReport | None
    error: str | None = None
    policy: str = ""
    batch_window: float = 30.0
    batch_size: int = 0
    max_planned: int = 0
    reorder: int = -1  # [planner] reorder (-1: no bound)
    # per job projections, running drift, next batch (`projection`); status and explain
    extra: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        r, a = self.result, self.apply
        return {
            **self.extra,
            "cycle": self.number,
            "pid": os.getpid(),
            "started": self.started,
            "finished": self.finished,
            "seconds": round(self.finished - self.started, 6),
            "error": self.error,
            "actions": len(r.actions) if r else 0,
            "applied": a.applied if a else 0,
            "failed": [list(f) for f in a.failed] if a else [],
            "skipped": a.skipped if a else 0,
            "cut": a.cut if a else 0,
            "slurm_calls": a.calls if a else 0,
            "learned": a.learned if a else 0,
            "planned": len(r.planned) if r else 0,
            # what Slurm took (a failed update is no release); a dry run: what it would
            "released": (a.released if a else list(r.released)) if r else [],
            "deferred": dict(r.deferred) if r else {},
            "priority": dict(r.priority) if r else {},
            "batches": list(r.batches) if r else [],
            "replanned": list(r.replanned) if r else [],
            "busy": r.busy if r else 0,
            "waiting": r.waiting if r else 0,
            "beyond": r.beyond if r else 0,
            "noted": r.noted if r else 0,
            "makespan": round(r.makespan, 3) if r else 0.0,
            "nodes": sorted(r.nodes) if r else [],
            "policy": self.policy,
            "batch_window": self.batch_window,
            "batch_size": self.batch_size,
            "max_planned": self.max_planned,
            "reorder": self.reorder,
            "state": [s.to_json() for s in r.snapshots] if r else [],
        }


def _wait_on(event: threading.Event, timeout: float) -> bool:
    """``event.wait(timeout)``: the daemon's wait in production."""
    return event.wait(timeout)


def _os_hint(exc: OSError) -> str:
    """What to do about an OSError that failed a cycle."""
    if exc.errno in (errno.EMFILE, errno.ENFILE):
        return (
            "the planner is out of file descriptors: raise LimitNOFILE in its unit, or see "
            "what holds them (ls -l /proc/<pid>/fd, ss -tnp); the next cycle tries again"
        )
    if exc.errno in (errno.ENOMEM, errno.EAGAIN):
        return (
            "cannot start squeue or scontrol (memory or process limit); the next cycle tries again"
        )
    return "the next cycle tries again"


FOLLOW_UPS = 4  # quick cycles after a notification while a job is still COMPLETING
FOLLOW_UP = 0.25  # seconds between them


def _log_repartitions(cycle: int, result: Any) -> None:
    """One log line per GPU whose configuration a policy changed (SMART-MIG's
    controller: ``stats["repartitions"]`` of (gpu, from, to) configuration numbers);
    the hooks realise it as jobs start on the new configuration's slots."""
    for snap, got in zip(result.snapshots, result.decisions):
        stats = got.stats or {}
        moves = stats.get("repartitions", ())
        for gpu, before, after in moves:
            g = snap.gpus[gpu]
            log.info(
                "cycle %d: repartition %s gpu %d (%s): configuration %d -> %d",
                cycle, g.node, g.local, snap.model.name, before, after,
            )  # fmt: skip
        if stats.get("controller") and not moves:
            log.info("cycle %d: repartition: the controller kept every configuration", cycle)


class PlannerDaemon:
    """Runs cycles: snapshot, plan, apply (or print, in a dry run), status file."""

    def __init__(
        self,
        config: Any,
        client: Client,
        store: Any,
        key: bytes | None,
        *,
        dry_run: bool = False,
        out: TextIO | None = None,
        clock: Callable[[], float] = time.time,
        liveness: Any = None,
        wait: Callable[[threading.Event, float], bool] | None = None,
    ) -> None:
        from .liveness import StopEvent

        self.config = config
        self.client = client
        self.store = store
        self.key = key
        self.dry_run = dry_run
        self.out = out or sys.stdout
        self.clock = clock
        # waits for an event or a timeout, True when it is set: tests pass one that
        # advances their fake ``clock`` instead of sleeping
        self.wait = wait or _wait_on
        self.stop = StopEvent()  # also set while the lease is not ours (`liveness`)
        self.wake = threading.Event()
        self.cycles = 0
        self.previous_nodes: frozenset[str] | None = None
        self.metrics = _planner_metrics(config)
        self.metrics.site(getattr(config, "cycle", 0.0), list(getattr(config, "nodes", ())))
        self.liveness = liveness  # `liveness.Liveness`: the lease and systemd's watchdog
        self.last_report: CycleReport | None = None
        self.last_jobs: list = []  # squeue's jobs of the partition, last cycle
        self.web_state = None  # `web.WebState` while the web page is served
        self.server = None
        self.completing = False  # the last cycle saw a job of the partition COMPLETING
        # held jobs' standing plans (Slurm hears of a plan at release only); None until
        # the first cycle: a restarted daemon plans them again
        self.plans: dict[str, Any] | None = None
        # finished runs whose runtime the store holds: squeue shows a finished job for
        # minutes (MinJobAge), and each cycle would offer it to the store again
        self.stored: set[tuple[str, int]] = set()
        # released jobs Slurm kept pending for a limit: job id -> (limit, when seen);
        # deferred for LIMIT_RETRY seconds, then planned again
        self.limited: dict[str, tuple[str, float]] = {}

    def status_path(self) -> Path:
        return Path(self.config.state_dir) / STATUS_FILE

    def run_cycle(self) -> CycleReport:
        """One cycle; Slurm errors are reported in the result, not raised."""
        from ..profiles import StoreError
        from .client import SlurmError

        self.cycles += 1
        started = self.clock()
        try:
            now = self.clock()  # before squeue: anything it shows happened by then
            jobs = self.client.jobs(self.config.partition)
            self.completing = any(j.state == "COMPLETING" for j in jobs)
            nodes = self.client.nodes()
            policy = self._site_policy()
            limited = {j: r for j, (r, t) in self.limited.items() if now - t < LIMIT_RETRY}
            snap = build_snapshot(
                self.config,
                jobs,
                nodes,
                self.store,
                now,
                self.previous_nodes,
                self.plans,
                self.stored,
                policy,
                limited,
            )
            result = plan_cycle(snap)
        except (SlurmError, StoreError) as exc:
            text = " ".join(str(exc).split())
            what = "Slurm" if isinstance(exc, SlurmError) else "the runtime store"
            log.error("cycle %d: cannot read %s: %s", self.cycles, what, text)
            report = self._report(started, None, None, text)
            self.metrics.observe(report)
            self._write_status(report)
            return report
        except OSError as exc:
            return self._cycle_failed(exc, started)
        _log_repartitions(self.cycles, result)
        actions = [
            a
            for a in result.actions
            if not (isinstance(a, Learn) and (a.job_id, a.restart) in self.stored)
        ]
        if self.dry_run:
            for action in actions:
                print(action.describe(), file=self.out)
            applied = None
            done = {(a.job_id, a.restart) for a in actions if isinstance(a, Learn)}
        else:
            assert self.key is not None, "a key is needed to release jobs"
            applied = apply_actions(
                actions,
                self.client,
                key=self.key,
                store=self.store,
                clock=self.clock,
                stop=self.stop,
                gres=self.config.gres == "on",
                workers=getattr(self.config, "write_concurrency", 1),
                budget=getattr(self.config, "apply_budget", None),
            )
            self.previous_nodes = result.nodes
            took = set(applied.released)
            self.plans = {j: a for j, a in result.planned.items() if j not in took}
            done = set(applied.stored)
        seen = {j.job_id for j in jobs}  # runs of jobs squeue no longer shows: forgotten
        self.stored = {r for r in self.stored if r[0] in seen} | done
        self.limited = {
            j: v for j, v in self.limited.items() if j in seen and now - v[1] < LIMIT_RETRY
        }
        for jid, reason in result.limited.items():
            self.limited[jid] = (reason, now)
            log.info("job %s: Slurm keeps it pending for %s; planned again later", jid, reason)
        report = self._report(started, result, applied, None)
        log.info(
            "cycle %d done in %.2f s: %d actions, %d failed; %d planned, %d released, "
            "%d waiting, %d noted, %d busy; plan ends in %.0f s%s",
            self.cycles,
            report.finished - report.started,
            len(actions),
            len(applied.failed) if applied else 0,
            len(result.planned),
            len(applied.released) if applied else len(result.released),
            result.waiting,
            result.noted,
            result.busy,
            result.makespan,
            f"; re-planned: {', '.join(result.replanned)}" if result.replanned else "",
        )
        self._observe(report, snap, now)
        if not self.dry_run:
            self._write_status(report)
            self._write_public(report)
            self._gather_accounting()
        return report

    def _site_policy(self) -> Any:
        """Slurm's priority weights, limits and reservations (`sitepolicy`), or None
        when ``[planner] site_policy`` is off or the client cannot read them; a read that
        fails leaves this cycle without them (one log line), it does not stop it."""
        read = getattr(self.client, "site_policy", None)
        if getattr(self.config, "site_policy", "on") != "on" or read is None:
            return None
        from .client import SlurmError

        try:
            return read()
        except SlurmError as exc:
            log.warning(
                "cycle %d: cannot read Slurm's priorities and limits (%s); planning by "
                "submission order this cycle",
                self.cycles,
                " ".join(str(exc).split())[:300],
            )
            return None

    def _cycle_failed(self, exc: OSError, started: float | None = None) -> CycleReport:
        """A cycle that an OSError ended (out of descriptors, memory, processes): one log
        line with the error and a hint, the error in the status; the next cycle runs."""
        text = f"{exc.strerror or exc} ({errno.errorcode.get(exc.errno or 0, 'OSError')})"
        log.error("cycle %d failed: %s; %s", self.cycles, text, _os_hint(exc))
        report = self._report(self.clock() if started is None else started, None, None, text)
        try:
            self.metrics.observe(report)
            self._write_status(report)
        except OSError:
            pass  # the status waits for a cycle that can write it; logged above
        return report

    def _gather_accounting(self) -> None:
        """What the nodes reported since the last cycle (`receiver`), logged; with
        ``[planner] reports`` off, the accounting lines of the nodes whose run
        directory this host can read (one host, or a shared run_dir)."""
        from .accounting import gather, node_logs

        receiver = getattr(self, "receiver", None)
        if receiver is not None:
            got = receiver.take_counts()
            if any(got.values()):
                log.info("node reports: %s", ", ".join(f"{n} {k}" for k, n in got.items() if n))
            return
        if getattr(self.config, "reports", ""):
            return  # the nodes report to the receiver (not running in a single cycle)
        try:
            added = gather(Path(self.config.state_dir), node_logs(self.config))
        except Exception as exc:  # sqlite or file errors: accounting waits, planning goes on
            log.warning("accounting not gathered: %s", exc)
            return
        if added:
            log.info("accounting: %d finished runs gathered", added)

    def _observe(self, report: CycleReport, snap: Snapshot, now: float) -> None:
        """Projections into the report, the cycle into the metrics."""
        from .projection import next_batch_at, project_jobs, running_drift

        r = report.result
        assert r is not None
        jobs = [j for j in snap.jobs if j.job_id in snap.estimates]
        drift = running_drift(jobs, now)
        report.extra = {
            "projected": project_jobs(r.snapshots, r.decisions),
            "drift": drift,
            "next_batch_at": next_batch_at(r.decisions, now),
        }
        learned = {getattr(a, "job_id", "") for a in r.actions if isinstance(a, Learn)}
        planned = {}
        for job in jobs:
            if job.job_id in learned:
                rec = parse_admin_comment(job.admin_comment)
                if rec is not None:
                    planned[job.job_id] = rec.planned_seconds
        self.metrics.observe(report, jobs, drift, planned)
        self.last_jobs = jobs
        if self.web_state is not None:
            self.web_state.update(report.extra["projected"], now)

    def _write_public(self, report: CycleReport) -> None:
        """The summary anyone may read (``[paths] public_file``), for ``explain``."""
        from .public import write_public

        path = getattr(self.config, "public_file", None)
        if path and self.stop.allowed():
            failed = write_public(Path(path), report)
            if failed:
                log.warning("%s", failed)

    def _report(
        self,
        started: float,
        result: CycleResult | None,
        applied: ApplyReport | None,
        error: str | None,
    ) -> CycleReport:
        c = self.config
        return CycleReport(
            self.cycles,
            started,
            self.clock(),
            result,
            applied,
            error,
            c.algorithm,
            c.batch_window,
            c.batch_size,
            getattr(c, "max_planned", 0),
            reorder=getattr(c, "reorder", -1),
        )

    def _write_status(self, report: CycleReport) -> None:
        self.last_report = report
        if not self.stop.allowed():  # the lease is not ours: another daemon writes it
            log.warning(
                "cycle %d: status not written: the planner lease is not ours", report.number
            )
            return
        path = self.status_path()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}")
            # compact: json's C encoder (indent= falls back to the pure-Python one, the
            # costliest step of a cycle at 10,000 jobs); `slurm-mig status --json` pretty-prints
            tmp.write_text(json.dumps(report.to_json(), separators=(",", ":")) + "\n")
            tmp.replace(path)
        except OSError as exc:
            log.warning("cannot write %s: %s", path, exc)

    def run(self, once: bool = False) -> int:
        """Cycle until stopped (or once); exit status 0, or 1 when ``once`` failed. A
        notification from an Epilog (``[planner] notify``) or SIGHUP starts the next
        cycle at once (at most every ``notify.MIN_GAP`` seconds)."""
        from .notify import MIN_GAP

        listener = None if once else self._listen()
        if not once:
            self.server = self._serve()
            from .receiver import start_receiver

            self.receiver = start_receiver(self.config, self.key)  # node reports
        if self.liveness is not None:
            self.liveness.start(self)
        follow_ups = 0
        try:
            while True:
                self.wake.clear()
                if self.liveness is not None and not self.liveness.may_plan(self.stop):
                    break
                if getattr(self.liveness, "took_over", False):
                    self.plans = None  # another daemon planned meanwhile: plan again
                    self.liveness.took_over = False
                try:
                    report = self.run_cycle()
                except OSError as exc:  # EMFILE, ENOMEM...: this cycle fails, not the daemon
                    report = self._cycle_failed(exc)
                if self.liveness is not None:
                    self.liveness.cycle_done()
                if once:
                    if report.error:
                        return 1
                    return 1 if report.apply is not None and report.apply.failed else 0
                if self.stop.requested():
                    break
                if getattr(getattr(report, "apply", None), "cut", 0):
                    continue  # the apply budget was spent: read afresh and go on now
                timeout = self.config.cycle
                if follow_ups and self.completing:
                    # the hook that woke us may not have exited yet: Slurm still shows
                    # its job COMPLETING, its slices busy; look again shortly
                    timeout = min(timeout, FOLLOW_UP)
                    follow_ups -= 1
                if self.wait(self.wake, timeout):
                    follow_ups = FOLLOW_UPS
                if self.stop.requested():
                    break
                self.wait(self.stop, MIN_GAP)  # a burst of notifications: one cycle
                if self.stop.requested():
                    break
        finally:
            if listener is not None:
                listener.close()
            if self.server is not None:
                self.server.close()
            if self.liveness is not None:
                self.liveness.close()
            if getattr(self, "receiver", None) is not None:
                self.receiver.close()
        log.info("planner stopped after %d cycles", self.cycles)
        return 0

    def _listen(self):
        """The notification listener on ``[planner] notify``, or None (off, or the
        address cannot be bound: then the cycle timer alone drives the daemon)."""
        from ..config import parse_address
        from .notify import Listener

        address = parse_address(getattr(self.config, "notify", ""))
        if address is None:
            return None
        if self.key is None:
            log.warning("no signing key: Epilog notifications are not heard (dry run)")
            return None
        refused = getattr(self, "_notify_refused", None)
        if refused is None:  # once per registry, however often `run` is called
            from prometheus_client import Counter

            refused = self._notify_refused = Counter(
                "slurm_mig_planner_notify_refused",
                "Notification datagrams refused, by reason (forged, stale, replayed, limited...)",
                ["reason"],
                registry=self.metrics.registry,
            )
        try:
            listener = Listener(
                address, self.wake.set, self.key, refused=lambda why: refused.labels(why).inc()
            ).start()
        except OSError as exc:
            log.warning(
                "cannot listen for Epilog notifications on %s:%d (%s); planning every "
                "%.1f s instead",
                *address,
                exc.strerror or exc,
                self.config.cycle,
            )
            return None
        log.info("listening for Epilog notifications on %s:%d (UDP)", *listener.address)
        return listener

    def _serve(self):
        """The HTTP endpoint on ``[planner] metrics`` (/metrics; the web page too with
        ``[planner] web``), or None (off, or the address cannot be bound)."""
        from ..config import parse_address
        from .serve import Cached, Server

        address = parse_address(getattr(self.config, "metrics", ""))
        if address is None:
            return None
        # at most once a cycle (and a second): many scrapers cost one
        metrics = Cached(
            lambda: (METRICS_TYPE, self.metrics.text()), lambda: self.last_report, max_age=1.0
        )
        pages = {"/metrics": metrics}
        if getattr(self.config, "web", False):
            from .web import pages as web_pages

            pages.update(web_pages(self))
        try:
            server = Server(address, pages).start()
        except OSError as exc:
            log.warning(
                "cannot serve metrics on %s:%d (%s); change [planner] metrics",
                *address,
                exc.strerror or exc,
            )
            return None
        host, port = server.address
        what = "metrics and the web page" if len(pages) > 1 else "metrics"
        log.info("serving %s on http://%s:%d/", what, host, port)
        return server

    def install_signals(self) -> None:
        """SIGTERM/SIGINT: stop between actions; SIGHUP: next cycle now."""

        def _stop(signum: int, _frame: object) -> None:
            log.info("signal %s: stopping", signal.Signals(signum).name)
            self.stop.set()
            self.wake.set()

        def _wake(_signum: int, _frame: object) -> None:
            self.wake.set()

        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
        signal.signal(signal.SIGHUP, _wake)


def run_planner(
    config_path: str | Path | None = None,
    *,
    once: bool = False,
    dry_run: bool = False,
    client: Client | None = None,
    out: TextIO | None = None,
    standby: bool | None = None,
) -> int:
    """``slurm-mig planner``: load config, key and runtime store, take the lease (or
    wait for it, a standby; `lease.LeaseHeld` when another daemon holds it), then run."""
    from ..config import load_config
    from ..profiles import DAEMON_BUSY_TIMEOUT_S, GuardedStore, RuntimeStore, prepare_state_dir

    config = load_config(config_path)
    _log_to_file(config)
    key = None if dry_run else load_key(config.key_file)
    if client is None:
        from .client import SlurmClient

        client = SlurmClient()
    path = Path(config.state_dir) / "profiles.sqlite"
    if not dry_run:
        prepare_state_dir(path.parent)  # 0750: the store and the status file are root's
    from .liveness import for_planner

    liveness = for_planner(config, dry_run=dry_run, once=once, standby=standby)
    # a dry run writes nothing, not even a new runtime store; a store that cannot be
    # read costs a cycle at most one short busy timeout and plans go on from hints
    store = (
        GuardedStore(RuntimeStore(path, busy_timeout=DAEMON_BUSY_TIMEOUT_S))
        if path.exists() or not dry_run
        else None
    )
    daemon = PlannerDaemon(config, client, store, key, dry_run=dry_run, out=out, liveness=liveness)
    if threading.current_thread() is threading.main_thread():
        daemon.install_signals()
    log.info(
        "planner: partition %s, %d nodes, %s, cycle %.1f s%s",
        config.partition,
        len(config.nodes),
        config.algorithm,
        config.cycle,
        " (dry run)" if dry_run else "",
    )
    return daemon.run(once=once or dry_run)


def _log_to_file(config: Any) -> None:
    """Every record of the planner one printable line on each of its handlers (stderr
    too: `safetext.LogEscaper`), and ``[paths] log_file`` appended to, created 0600;
    ConfigError with the fix when that file exists and others may read it."""
    from ..config import ConfigError
    from ..safetext import UnsafeLogFile, install_escaper, open_private_log

    root = logging.getLogger("slurm_mig")
    path = getattr(config, "log_file", None)
    if path and not any(getattr(h, "_slurm_mig_planner", False) for h in root.handlers):
        where = f"{getattr(config, 'source', None) or '<config>'}: [paths] log_file"
        try:
            fd = open_private_log(path)
        except UnsafeLogFile as exc:
            raise ConfigError(f"{where}: {exc}") from None
        except OSError as exc:
            raise ConfigError(
                f"{where}: {path}: cannot open it ({exc.strerror or exc}); fix the path, "
                'or set log_file = "" to log to stderr only'
            ) from None
        stream = open(fd, "a", encoding="utf-8", errors="backslashreplace")  # noqa: SIM115
        handler = logging.StreamHandler(stream)
        handler.setFormatter(logging.Formatter("%(asctime)s slurm-mig planner: %(message)s"))
        handler._slurm_mig_planner = True  # type: ignore[attr-defined]
        root.addHandler(handler)
    install_escaper(root.handlers)
