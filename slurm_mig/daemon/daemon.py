"""The planner daemon: every ``cycle`` seconds read Slurm, plan, apply through scontrol.

Each cycle builds a `cycle.CycleInput` from ``squeue``/``sinfo`` (SlurmClient), the config,
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
finished, what it did) for monitoring and tests, 0640: it names every job's owner.
"""

from __future__ import annotations

import errno
import json
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from ..config import Config
from ..safefs import write_atomic
from ..slurm.assignment import load_key
from ..slurm.jobrecord import job_phase, parse_admin_comment
from .applier import Applier, DryRunApplier, SlurmApplier
from .apply import RELEASE_CHUNK, Client, apply_actions
from .cycle import (
    BACKOFF_BASE,
    Backoff,
    CycleInput,
    CycleResult,
    Learn,
    PolicySet,
    Refusals,
    configured_objective,
    moved_up_after,
    plan_cycle,
    requeued_by_slurm,
    requeued_runs,
    stale_job,
)
from .cycleinput import build_cycle_input, reported_records, usable_nodes
from .cyclereport import ApplyReport, CycleReport
from .daemonlog import log_cycle, log_repartitions, log_to_file, os_hint
from .endpoints import METRICS_TYPE, listen, serve
from .estimates import Estimator

if TYPE_CHECKING:
    from .metrics import PlannerMetrics

__all__ = [
    "FOLLOW_UP",
    "FOLLOW_UPS",
    "LIMIT_RETRY",
    "METRICS_TYPE",
    "RELEASE_CHUNK",
    "STATUS_FILE",
    "ApplyReport",
    "Client",
    "CycleReport",
    "Estimator",
    "PlannerDaemon",
    "apply_actions",
    "build_cycle_input",
    "run_planner",
    "usable_nodes",
]

log = logging.getLogger("slurm_mig.planner")

STATUS_FILE = "planner-status.json"
STATUS_MODE = 0o640  # every job's instances, comments and owners: root (and its group) only
LIMIT_RETRY = BACKOFF_BASE  # seconds a job Slurm kept pending first waits to be planned again


def _planner_metrics(config: Config) -> PlannerMetrics:
    """The daemon's Prometheus metrics, labelled with its policy and batch window."""
    from ..planner.registry import policy_info
    from .metrics import PlannerMetrics

    try:
        kind = policy_info(config.algorithm).kind
    except Exception:  # an unknown name fails planning itself, with its own message
        kind = ""
    return PlannerMetrics(config.algorithm, kind, float(config.batch_window))


def _wait_on(event: threading.Event, timeout: float) -> bool:
    """``event.wait(timeout)``: the daemon's wait in production."""
    return event.wait(timeout)


FOLLOW_UPS = 4  # quick cycles after a notification while a job is still COMPLETING
FOLLOW_UP = 0.25  # seconds between them


class PlannerDaemon:
    """Runs cycles: snapshot, plan, apply (or print, in a dry run), status file."""

    def __init__(
        self,
        config: Config,
        client: Client,
        store: Any,
        key: bytes | None,
        *,
        dry_run: bool = False,
        out: TextIO | None = None,
        clock: Callable[[], float] = time.time,
        liveness: Any = None,
        wait: Callable[[threading.Event, float], bool] | None = None,
        applier: Applier | None = None,
    ) -> None:
        """``dry_run``: print the actions (`applier.DryRunApplier`) instead of writing
        them to Slurm; ``applier`` another strategy, chosen by the caller."""
        from .liveness import StopEvent

        self.config = config
        self.client = client
        self.store = store
        self.key = key
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
        self.metrics.site(config.cycle, list(config.nodes))
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
        # released jobs Slurm kept pending (a limit, licenses, not started), deferred
        # for a back-off that doubles each time; array throttles learned
        self.limited = Backoff()
        # the policies, built once for the run (a group of GPUs that changes gets anew)
        objective = configured_objective(config.algorithm, config.objective)
        self.policies = PolicySet(config.algorithm, objective, config.upsize)
        # slots a job was requeued from in a row (refused by its node), barred for it
        self.refusals = Refusals()
        # jobs a policy moved up (requeued to a larger slice): job id -> (the run, the
        # least size it is planned on), until that run starts (lost on a restart: the
        # job is then planned afresh, and may be moved again)
        self.moved_up: dict[str, tuple[int, int]] = {}
        self.sent: set[str] = set()  # jobs this daemon released, of those squeue shows
        self.stale_seen: set[str] = set()  # the nodes' stale records logged
        self.status_trouble: str | None = None  # why the last status was not written
        self.receiver = None  # `receiver.Receiver` of node reports while the daemon runs
        self.notify_refused = None  # refused notifications: a Counter (`endpoints.listen`)
        # where actions go, chosen once: Slurm, or printed in a dry run
        self.applier: Applier = applier or (
            DryRunApplier(self.out)
            if dry_run
            else SlurmApplier(
                client,
                key,
                store,
                clock,
                self.stop,
                gres=config.gres != "off",
                slices=config.gres == "on",
                workers=config.write_concurrency,
                budget=config.apply_budget,
            )
        )

    def status_path(self) -> Path:
        return Path(self.config.state_dir) / STATUS_FILE

    def run_cycle(self) -> CycleReport:
        """One cycle; Slurm errors are reported in the result, not raised."""
        self.cycles += 1
        started = self.clock()
        planned = self._plan(started)
        if isinstance(planned, CycleReport):
            return planned
        now, jobs, snap, result = planned
        log_repartitions(self.cycles, result)
        actions = [
            a
            for a in result.actions
            if not (isinstance(a, Learn) and (a.job_id, a.restart) in self.stored)
        ]
        applied = self.applier.apply(actions, result, self.previous_nodes, self.plans)
        self.previous_nodes, self.plans = applied.nodes, applied.plans
        sent = applied.report.released if applied.report is not None else ()
        self._remember(jobs, result, applied.stored, now, sent)
        report = self._report(started, result, applied.report, None)
        log_cycle(report, result, len(actions))
        self._observe(report, snap, now)
        self.applier.publish(self, report)
        return report

    def _plan(self, started: float) -> tuple[float, list, CycleInput, CycleResult] | CycleReport:
        """Read Slurm, build the snapshot, plan: (now, jobs, snapshot, result), or the
        report of a cycle that could not read Slurm or the store (status written)."""
        from ..runtimes import StoreError
        from ..slurm.client import SlurmError

        try:
            now = self.clock()  # before squeue: anything it shows happened by then
            jobs = self.client.jobs(self.config.partition)
            self.completing = any(j.state == "COMPLETING" for j in jobs)
            nodes = self.client.nodes()
            policy = self._site_policy()
            self._count_refusals(jobs, now)
            snap = build_cycle_input(
                self.config,
                jobs,
                nodes,
                self.store,
                now,
                self.previous_nodes,
                self.plans,
                self.stored,
                policy,
                self.limited.waiting(now),
                self.limited.throttles(now),
                node_records=reported_records(self.config),
                refused=self.refusals.avoid(now),
                sent=self.sent,
                moved_up=self.moved_up,
            )
            result = plan_cycle(snap, self.policies)
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
        return now, jobs, snap, result

    def _remember(
        self,
        jobs: list,
        result: CycleResult,
        done: set[tuple[str, int]],
        now: float,
        sent: Sequence[str] = (),
    ) -> None:
        """The runs the store holds, the jobs released (``sent``), those Slurm keeps
        pending for a limit, the slots jobs were requeued from, of the jobs squeue still
        shows (the others are forgotten: the memory stays bounded); the nodes' stale
        records logged once each."""
        seen = {j.job_id for j in jobs}
        self.stored = {r for r in self.stored if r[0] in seen} | done
        self.sent = {j for j in self.sent if j in seen} | set(sent)
        pending = {j.job_id for j in jobs if job_phase(j.state) == "pending"}
        self.limited.update(result.limited, result.throttles, pending, now)
        self.moved_up = moved_up_after(self.moved_up, result.actions, jobs)
        for jid, reason in result.limited.items():
            log.info("job %s: Slurm keeps it pending (%s); planned again later", jid, reason)
        for sid in sorted(result.stale.keys() - self.stale_seen):
            job = stale_job(sid)
            # a run this planner requeued to move its job up: expected until the next report
            log.log(
                logging.INFO if job in self.moved_up else logging.WARNING, "%s", result.stale[sid]
            )
        self.stale_seen = set(result.stale)
        barred = sum(len(v) for v in self.refusals.avoid(now).values())
        self.metrics.node_trouble(sorted(result.stale), barred)

    def _count_refusals(self, jobs: list, now: float) -> None:
        """The jobs requeued from a slot since the last cycle, counted before planning
        (a slot barred now is not planned in this cycle); unfinished jobs kept. Those
        Slurm requeued itself (not held: its node failed) are no refusals."""
        unfinished = {j.job_id for j in jobs if job_phase(j.state) != "done"}
        by_slurm = requeued_by_slurm(jobs)
        for line in self.refusals.update(requeued_runs(jobs), unfinished, now, by_slurm):
            log.warning("%s", line)

    def publish(self, report: CycleReport) -> None:
        """What a cycle that wrote to Slurm leaves: the status file, the public summary,
        the accounting gathered (`applier.SlurmApplier`; a dry run writes none)."""
        self._write_status(report)
        self._write_public(report)
        self._gather_accounting()

    def _site_policy(self) -> Any:
        """Slurm's priority weights, limits and reservations (`sitepolicy`), or None
        when ``[planner] site_policy`` is off or the client cannot read them; a read that
        fails leaves this cycle without them (one log line), it does not stop it."""
        read = getattr(self.client, "site_policy", None)
        if self.config.site_policy != "on" or read is None:
            return None
        from ..slurm.client import SlurmError

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
        log.error("cycle %d failed: %s; %s", self.cycles, text, os_hint(exc))
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
        from ..slurm.accounting import gather, node_logs

        receiver = self.receiver
        if receiver is not None:
            got = receiver.take_counts()
            if any(got.values()):
                log.info("node reports: %s", ", ".join(f"{n} {k}" for k, n in got.items() if n))
            return
        if self.config.reports:
            return  # the nodes report to the receiver (not running in a single cycle)
        try:
            added = gather(Path(self.config.state_dir), node_logs(self.config))
        except Exception as exc:  # sqlite or file errors: accounting waits, planning goes on
            log.warning("accounting not gathered: %s", exc)
            return
        if added:
            log.info("accounting: %d finished runs gathered", added)

    def _observe(self, report: CycleReport, snap: CycleInput, now: float) -> None:
        """Projections into the report, the cycle into the metrics."""
        from .jobtimes import next_batch_at, project_jobs, running_drift

        r = report.result
        assert r is not None
        jobs = [j for j in snap.jobs if j.job_id in snap.estimates]
        drift = running_drift(jobs, now)
        report.extra = {
            "projected": project_jobs(r.snapshots, r.decisions),
            "drift": drift,
            "next_batch_at": next_batch_at(r.decisions, now),
        }
        learned = {a.job_id for a in r.actions if isinstance(a, Learn) and a.ok}
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

        path = self.config.public_file
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
            c.max_planned,
            reorder=c.reorder,
        )

    def _write_status(self, report: CycleReport) -> None:
        """The status file; while it cannot be written, one line says why (again only
        when the reason changes), and one more once it is written again."""
        self.last_report = report
        if not self.stop.allowed():  # not confirmed ours: another daemon may write it
            why = getattr(self.liveness, "not_allowed", lambda: "")() or (
                "the planner lease is not ours"
            )
            self._status_trouble(report, f"status not written: {why}")
            return
        path = self.status_path()
        try:
            path.parent.mkdir(mode=0o750, parents=True, exist_ok=True)
            # compact: json's C encoder (indent= falls back to the pure-Python one, the
            # costliest step of a cycle at 10,000 jobs); `slurm-mig status --json` pretty-prints
            text = json.dumps(report.to_json(), separators=(",", ":")) + "\n"
            write_atomic(path, text, STATUS_MODE)  # root's: users read the public summary
        except OSError as exc:
            what = exc.strerror or errno.errorcode.get(exc.errno or 0, "") or str(exc)
            self._status_trouble(report, f"cannot write {path}: {what}")
            return
        if self.status_trouble is not None:
            log.info("cycle %d: status written again (%s)", report.number, path)
            self.status_trouble = None

    def _status_trouble(self, report: CycleReport, text: str) -> None:
        """``text`` logged once while it stays the reason no status is written."""
        if text != self.status_trouble:
            log.warning("cycle %d: %s; written again once it can be", report.number, text)
            self.status_trouble = text

    def run(self, once: bool = False) -> int:
        """Cycle until stopped (or once); exit status 0, or 1 when ``once`` failed. A
        notification from an Epilog (``[planner] notify``) or SIGHUP starts the next
        cycle at once (at most every ``notify.MIN_GAP`` seconds)."""
        from ..slurm.notify import MIN_GAP

        listener = None if once else listen(self)
        if not once:
            self.server = serve(self)
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
            if self.receiver is not None:
                self.receiver.close()
        log.info("planner stopped after %d cycles", self.cycles)
        return 0

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
    from ..runtimes import DAEMON_BUSY_TIMEOUT_S, GuardedStore, RuntimeStore, prepare_state_dir

    config = load_config(config_path)
    log_to_file(config)
    key = None if dry_run else load_key(config.key_file)
    if client is None:
        from ..slurm.client import SlurmClient

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
