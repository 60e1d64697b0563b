"""The planner daemon: every ``cycle`` seconds read Slurm, plan, apply through scontrol.

Each cycle builds a `cycle.Snapshot` from ``squeue``/``sinfo`` (SlurmClient), the config
and the learned runtimes (RuntimeStore), calls the pure `cycle.plan_cycle` and applies
its actions in order. One failing scontrol logs an error and the others still run,
except later actions of the same job (a release never follows a failed AdminComment
write). The daemon keeps nothing between cycles that safety depends on: killed at any
moment and restarted, it rebuilds its view from Slurm. SIGTERM/SIGINT end it between
actions; SIGHUP starts the next cycle at once.

After every cycle it writes ``<state_dir>/planner-status.json`` (cycle count, when it
finished, what it did) for monitoring and tests.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol, TextIO

from ..geometry import get_model
from . import comment as comments
from .assignment import AssignmentError, load_key, sign
from .cycle import (
    Action,
    CycleResult,
    Estimate,
    Hold,
    Learn,
    Note,
    Release,
    Requeue,
    Snapshot,
    UpdateJob,
    job_phase,
    parse_admin_comment,
    plan_cycle,
)

log = logging.getLogger("slurm_mig.planner")

STATUS_FILE = "planner-status.json"
METRICS_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _planner_metrics(config: Any):
    from ..planner.registry import policy_info
    from .metrics import PlannerMetrics

    algorithm = getattr(config, "algorithm", "far")
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


class _CycleStore:
    """The runtime store's reads, remembered for one cycle (jobs of a kind share them)."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self._obs: dict[tuple[str, str], dict[int, list[float]]] = {}
        self._mem: dict[str, int | None] = {}

    def observations(self, key: str, model: str) -> dict[int, list[float]]:
        if (key, model) not in self._obs:
            self._obs[(key, model)] = self.store.observations(key, model)
        return self._obs[(key, model)]

    def memory_need(self, key: str) -> int | None:
        if key not in self._mem:
            self._mem[key] = self.store.memory_need(key)
        return self._mem[key]


class Estimator:
    """Runtime estimates of jobs (`profiles.estimate_for_job`: learned runtimes of the
    job's kind, else its ``time=`` hint, else its time limit, else default_runtime)."""

    def __init__(self, config: Any, store: Any) -> None:
        self.config = config
        self.store = _CycleStore(store) if store is not None else None
        self._memo: dict[tuple, Estimate] = {}

    @staticmethod
    def key_of(job: Any) -> tuple[str, Any]:
        """The job's kind (hint ``key``, else its name) and its hints (or the HintError)."""
        from .hints import HintError, parse_hints

        try:
            hints = parse_hints(job.comment)
        except HintError as exc:
            return job.name or f"job-{job.job_id}", exc
        return hints.key or job.name or f"job-{job.job_id}", hints

    def __call__(self, job: Any, models: Iterable[str]) -> Estimate:
        key, hints = self.key_of(job)
        if isinstance(hints, Exception):
            return Estimate(key, problem=" ".join(str(hints).split()))
        names = tuple(sorted({get_model(m).name for m in models}))
        memo = (
            key,
            names,
            hints.time,
            job.time_limit,
            hints.mem,
            hints.pcie,
            hints.alpha,
            hints.restartable,
        )
        if memo not in self._memo:
            try:
                self._memo[memo] = self._estimate(job, key, hints, names)
            except (ValueError, ArithmeticError) as exc:  # one job's data, not the daemon's
                text = " ".join(str(exc).split()) or type(exc).__name__
                return Estimate(key, problem=f"cannot estimate its runtime: {text}")
        return self._memo[memo]

    def _estimate(self, job: Any, key: str, hints: Any, names: tuple[str, ...]) -> Estimate:
        from ..profiles import estimate_for_job

        times = {
            name: estimate_for_job(
                self.store,
                key,
                get_model(name),
                hint_seconds=hints.time,
                time_limit=job.time_limit,
                min_memory=hints.mem,
                default_runtime=self.config.default_runtime,
                serial_fraction=self.config.serial_fraction,
            )
            for name in names
        }
        learned = self.store.memory_need(key) if self.store is not None else None
        mem = max(hints.mem or 0, learned or 0) or None
        return Estimate(
            key,
            times,
            mem,
            pcie=hints.pcie or 0.0,
            alpha=hints.alpha if hints.alpha is not None else 1.0,
            restartable=bool(hints.restartable),
        )


def build_snapshot(
    config: Any,
    jobs: Sequence[Any],
    nodes: Sequence[Any],
    store: Any,
    now: float,
    previous_nodes: frozenset[str] | None = None,
) -> Snapshot:
    """The cycle's input from what squeue and sinfo said and the learned runtimes."""
    configured = {name: tuple(models) for name, models in config.nodes.items()}
    all_models = sorted({get_model(m).name for ms in configured.values() for m in ms})
    estimator = Estimator(config, store)
    estimates = {}
    for job in jobs:
        if job.partition and config.partition not in job.partition.split(","):
            continue
        if job_phase(job.state) == "pending":
            estimates[job.job_id] = estimator(job, all_models)
        else:  # running or finished: only the key, to learn its runtime
            estimates[job.job_id] = Estimate(estimator.key_of(job)[0])
    return Snapshot(
        now=now,
        jobs=tuple(jobs),
        nodes=usable_nodes(configured, nodes),
        estimates=estimates,
        partition=config.partition,
        algorithm=config.algorithm,
        batch_window=config.batch_window,
        batch_size=config.batch_size,
        previous_nodes=previous_nodes,
        release_ahead=config.release_ahead,
        start_timeout=config.start_timeout,
    )


# ---------------------------------------------------------------------------
# Applying actions


@dataclass
class ApplyReport:
    applied: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)  # (job id, error)
    skipped: int = 0  # later actions of a job whose earlier action failed, or stopped
    learned: int = 0
    released: list[str] = field(default_factory=list)  # jobs whose release went through


def apply_actions(
    actions: Sequence[Action],
    client: Client,
    *,
    key: bytes,
    store: Any = None,
    clock: Callable[[], float] = time.time,
    stop: threading.Event | None = None,
    gres: bool = False,
) -> ApplyReport:
    """Apply ``actions`` in order; a failure is logged and skips only that job's later
    actions. Stops between actions once ``stop`` is set. ``gres``: a released job gets
    its instance's GRES record (``slurm.gres``) in the update that writes its token."""
    from .client import SlurmError

    report = ApplyReport()
    failed_jobs: set[str] = set()
    for i, action in enumerate(actions):
        if stop is not None and stop.is_set():
            report.skipped += len(actions) - i
            log.info("stopping: %d actions left for the next run", len(actions) - i)
            break
        if action.job_id in failed_jobs:
            report.skipped += 1
            log.warning("%s: skipped (an earlier action on the job failed)", action.describe())
            continue
        try:
            if isinstance(action, Learn):
                if store is not None and store.record(
                    action.key,
                    action.model,
                    action.size,
                    action.seconds,
                    action.job_id,
                    action.restart,
                    action.finished,
                ):
                    report.learned += 1
                    log.info("%s", action.describe())
                continue
            _apply_one(action, client, key, clock, gres)
            report.applied += 1
            if isinstance(action, Release):
                report.released.append(action.job_id)
            log.log(
                logging.WARNING if isinstance(action, Note) else logging.INFO,
                "%s",
                action.describe(),
            )
        except (SlurmError, OSError, comments.CommentTooLong, AssignmentError) as exc:
            failed_jobs.add(action.job_id)
            text = " ".join(str(exc).split()) or exc.__class__.__name__
            report.failed.append((action.job_id, text))
            log.error("%s: failed: %s", action.describe(), text)
        except Exception as exc:  # e.g. sqlite errors while learning: log, go on
            if not isinstance(action, Learn):
                raise
            log.error("%s: not recorded: %s", action.describe(), exc)
    return report


def _apply_one(
    action: Action, client: Client, key: bytes, clock: Callable[[], float], gres: bool = False
) -> None:
    from .client import SlurmError

    if isinstance(action, Hold):
        client.hold(action.job_id)
        if action.clear_dependency:  # "0": Slurm's word for none (an empty value is ignored)
            client.update_job(action.job_id, Dependency="0")
    elif isinstance(action, UpdateJob | Note):
        client.update_job(action.job_id, **dict(action.fields))
    elif isinstance(action, Release):
        a = action.assignment
        token = sign(replace(a, issued=clock()), key)
        fields_ = {"Comment": comments.parse(action.comment).with_token(token).render()}
        if gres:  # Slurm's device cgroup then lets the job open this instance only
            from ..devices.migcaps import gi_id_for
            from ..geometry import get_model
            from .gres import Record, tres_per_node

            record = Record(a.gpu, gi_id_for(get_model(a.model), a.placement))
            fields_["TresPerNode"] = tres_per_node(record)
        if action.after:  # released ahead: Slurm starts it once those jobs have left
            fields_["Dependency"] = "afterany:" + ":".join(action.after)
        try:
            client.update_job(action.job_id, **fields_)
        except SlurmError as exc:
            if gres and "gres" in str(exc).lower():
                raise SlurmError(
                    f"{exc}; node {a.node} needs the gres.conf records of "
                    "'slurm-mig gres-conf' (README: Site set-up), or set [slurm] gres = \"off\"",
                    exc.command,
                    exc.stderr,
                ) from None
            raise
        client.release(action.job_id)
    elif isinstance(action, Requeue):
        client.requeue(action.job_id, hold=True)
    else:  # pragma: no cover - every Action type is handled above
        raise TypeError(f"unknown action {action!r}")


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
            "learned": a.learned if a else 0,
            "planned": len(r.planned) if r else 0,
            # what Slurm took (a failed update is no release); a dry run: what it would
            "released": (a.released if a else list(r.released)) if r else [],
            "deferred": dict(r.deferred) if r else {},
            "batches": list(r.batches) if r else [],
            "replanned": list(r.replanned) if r else [],
            "busy": r.busy if r else 0,
            "waiting": r.waiting if r else 0,
            "noted": r.noted if r else 0,
            "makespan": round(r.makespan, 3) if r else 0.0,
            "nodes": sorted(r.nodes) if r else [],
            "policy": self.policy,
            "batch_window": self.batch_window,
            "batch_size": self.batch_size,
            "state": [s.to_json() for s in r.snapshots] if r else [],
        }


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
    ) -> None:
        self.config = config
        self.client = client
        self.store = store
        self.key = key
        self.dry_run = dry_run
        self.out = out or sys.stdout
        self.clock = clock
        self.stop = threading.Event()
        self.wake = threading.Event()
        self.cycles = 0
        self.previous_nodes: frozenset[str] | None = None
        self.metrics = _planner_metrics(config)
        self.last_report: CycleReport | None = None
        self.last_jobs: list = []  # squeue's jobs of the partition, last cycle
        self.web_state = None  # `web.WebState` while the web page is served
        self.server = None
        self.completing = False  # the last cycle saw a job of the partition COMPLETING

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
            snap = build_snapshot(self.config, jobs, nodes, self.store, now, self.previous_nodes)
            result = plan_cycle(snap)
        except (SlurmError, StoreError) as exc:
            text = " ".join(str(exc).split())
            what = "Slurm" if isinstance(exc, SlurmError) else "the runtime store"
            log.error("cycle %d: cannot read %s: %s", self.cycles, what, text)
            report = self._report(started, None, None, text)
            self.metrics.observe(report)
            self._write_status(report)
            return report
        _log_repartitions(self.cycles, result)
        if self.dry_run:
            for action in result.actions:
                print(action.describe(), file=self.out)
            applied = None
        else:
            assert self.key is not None, "a key is needed to release jobs"
            applied = apply_actions(
                result.actions,
                self.client,
                key=self.key,
                store=self.store,
                clock=self.clock,
                stop=self.stop,
                gres=self.config.gres == "on",
            )
            self.previous_nodes = result.nodes
        report = self._report(started, result, applied, None)
        log.info(
            "cycle %d done in %.2f s: %d actions, %d failed; %d planned, %d released, "
            "%d waiting, %d noted, %d busy; plan ends in %.0f s%s",
            self.cycles,
            report.finished - report.started,
            len(result.actions),
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
        if path:
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
        )

    def _write_status(self, report: CycleReport) -> None:
        self.last_report = report
        path = self.status_path()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}")
            tmp.write_text(json.dumps(report.to_json(), indent=1) + "\n")
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
        follow_ups = 0
        try:
            while True:
                self.wake.clear()
                report = self.run_cycle()
                if once:
                    if report.error:
                        return 1
                    return 1 if report.apply is not None and report.apply.failed else 0
                if self.stop.is_set():
                    break
                timeout = self.config.cycle
                if follow_ups and self.completing:
                    # the hook that woke us may not have exited yet: Slurm still shows
                    # its job COMPLETING, its slices busy; look again shortly
                    timeout = min(timeout, FOLLOW_UP)
                    follow_ups -= 1
                if self.wake.wait(timeout):
                    follow_ups = FOLLOW_UPS
                if self.stop.is_set():
                    break
                self.stop.wait(MIN_GAP)  # a burst of notifications: one cycle
                if self.stop.is_set():
                    break
        finally:
            if listener is not None:
                listener.close()
            if self.server is not None:
                self.server.close()
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
        try:
            listener = Listener(address, self.wake.set).start()
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
        from .serve import Server

        address = parse_address(getattr(self.config, "metrics", ""))
        if address is None:
            return None
        pages = {"/metrics": lambda: (METRICS_TYPE, self.metrics.text())}
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
) -> int:
    """``slurm-mig planner``: load config, key and runtime store, then run."""
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
    # a dry run writes nothing, not even a new runtime store; a store that cannot be
    # read costs a cycle at most one short busy timeout and plans go on from hints
    store = (
        GuardedStore(RuntimeStore(path, busy_timeout=DAEMON_BUSY_TIMEOUT_S))
        if path.exists() or not dry_run
        else None
    )
    daemon = PlannerDaemon(config, client, store, key, dry_run=dry_run, out=out)
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
    path = getattr(config, "log_file", None)
    if not path:
        return
    root = logging.getLogger("slurm_mig")
    if any(getattr(h, "_slurm_mig_planner", False) for h in root.handlers):
        return
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s slurm-mig planner: %(message)s"))
    handler._slurm_mig_planner = True  # type: ignore[attr-defined]
    root.addHandler(handler)
