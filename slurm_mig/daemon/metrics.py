"""The planner daemon's Prometheus metrics (prometheus_client), updated once a cycle.

`PlannerMetrics` holds the daemon's own registry (not the library's global one, so that
several daemons in one test process keep apart) and turns each cycle's report into
metrics: cycle seconds, jobs by state, holds, releases, re-plans by reason, runtime
drift against the plan, the projected makespan and the policy in use; and for the
alert rules (contrib/slurm-mig-alerts.yml): the configured cycle, whether this daemon
holds the lease, how long the longest-held job has waited and when each configured node
was last seen usable. `httpserver` (with `slurm_mig.daemon.web`) exposes them on
``[planner] metrics``.
"""

from __future__ import annotations

import re
import socket
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    ProcessCollector,
    generate_latest,
)

PREFIX = "slurm_mig_planner"
JOB_STATES = ("held", "busy", "planned", "waiting", "noted", "deferred")
ACTIONS = ("hold", "update", "release", "note", "requeue", "learn")
CYCLE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
DRIFT_BUCKETS = (-600, -120, -60, -30, -10, -2, 0, 2, 10, 30, 60, 120, 600)
PENDING = ("PENDING", "REQUEUED", "REQUEUE_HOLD")
SEEN = 4096  # finished (job, run) pairs remembered so that each is observed once

_IDS = re.compile(r"\b(job|jobs|node|gpu)\s+[\w.,:-]+")


def replan_reason(text: str) -> str:
    """A re-plan's reason without job, node and GPU names (a bounded label):
    ``job 42 ended early`` -> ``job ended early``."""
    return " ".join(_IDS.sub(r"\1", text).split())[:60] or "unknown"


def _action_name(action: Any) -> str:
    name = type(action).__name__.lower()
    return "update" if name == "updatejob" else name


class PlannerMetrics:
    """The daemon's metrics; `observe` once per cycle, `text` for a scrape."""

    def __init__(
        self, policy: str = "", kind: str = "", batch_window: float = 0.0, host: str = ""
    ) -> None:
        self.registry = CollectorRegistry()
        self.host = host or socket.gethostname()
        ProcessCollector(registry=self.registry)
        # declared in this order, the order of a scrape
        self._cycle_metrics()
        self._job_metrics()
        self._drift_metrics()
        self._health_metrics()
        self.set_active(True)
        self.policy = Info(f"{PREFIX}_policy", "The planning policy in use", registry=self.registry)
        self.policy.info({"policy": policy, "kind": kind})
        self.window.set(batch_window)
        for state in JOB_STATES:
            self.jobs.labels(state)
        for action in ACTIONS:
            self.actions.labels(action)
            self.failures.labels(action)
        for result in ("ok", "error"):  # both series exist from the start, for the alerts
            self.cycles.labels(result)
        self._seen: OrderedDict[tuple[str, int], None] = OrderedDict()

    def _cycle_metrics(self) -> None:
        """How long cycles take and how many ended in an error."""
        r, p = self.registry, PREFIX
        self.cycle_seconds = Histogram(
            f"{p}_cycle_seconds",
            "Seconds one planner cycle took (squeue, planning, scontrol)",
            buckets=CYCLE_BUCKETS,
            registry=r,
        )
        self.cycles = Counter(f"{p}_cycles", "Planner cycles by result", ["result"], registry=r)

    def _job_metrics(self) -> None:
        """The partition's jobs by state and what the planner did to them."""
        r, p = self.registry, PREFIX
        self.jobs = Gauge(f"{p}_jobs", "Jobs of the MIG partition by state", ["state"], registry=r)
        self.held = Counter(f"{p}_jobs_held", "Jobs the planner held", registry=r)
        self.released = Counter(
            f"{p}_jobs_released", "Jobs the planner released (Slurm took it)", registry=r
        )
        self.actions = Counter(
            f"{p}_actions", "Actions applied through scontrol, by kind", ["action"], registry=r
        )
        self.failures = Counter(
            f"{p}_action_failures", "Actions Slurm refused, by kind", ["action"], registry=r
        )
        self.replans = Counter(
            f"{p}_replans", "Standing plans made again, by reason", ["reason"], registry=r
        )
        self.batches = Counter(f"{p}_batches", "Batches formed", registry=r)

    def _drift_metrics(self) -> None:
        """How far jobs run from the plan, and the plan's projected makespan."""
        r, p = self.registry, PREFIX
        self.drift = Histogram(
            f"{p}_plan_drift_seconds",
            "Finished jobs: seconds run minus seconds planned (negative: early)",
            buckets=DRIFT_BUCKETS,
            registry=r,
        )
        self.late = Gauge(
            f"{p}_running_late_jobs", "Running jobs past their planned runtime", registry=r
        )
        self.late_max = Gauge(
            f"{p}_running_drift_max_seconds",
            "Largest seconds a running job is past its planned runtime (0: none late)",
            registry=r,
        )
        self.makespan = Gauge(
            f"{p}_makespan_seconds", "Seconds until all busy and planned work ends", registry=r
        )

    def _health_metrics(self) -> None:
        """What the alert rules watch: nodes, the last cycle, the lease, held jobs' waits."""
        r, p = self.registry, PREFIX
        self.nodes = Gauge(f"{p}_usable_nodes", "Usable nodes of the last cycle", registry=r)
        self.last = Gauge(
            f"{p}_last_cycle_timestamp_seconds", "When the last cycle finished", registry=r
        )
        self.window = Gauge(
            f"{p}_batch_window_seconds", "The batch window of the policy in use", registry=r
        )
        self.interval = Gauge(
            f"{p}_cycle_interval_seconds",
            "Seconds between cycles ([planner] cycle): a last cycle older than a few of them "
            "is a stuck planner",
            registry=r,
        )
        self.active = Gauge(
            f"{p}_active",
            "1 while this daemon holds the planner lease and plans, 0 while it waits as a "
            "standby (host: the daemon's; a standby's /metrics redirects to the active one's)",
            ["host"],
            registry=r,
        )
        self.oldest_held = Gauge(
            f"{p}_oldest_held_job_seconds",
            "Seconds since submission of the longest-held pending job of the partition "
            "(0: none held)",
            registry=r,
        )
        self.node_usable = Gauge(
            f"{p}_node_usable_timestamp_seconds",
            "When the planner last saw the configured node usable in sinfo (0: not since "
            "this daemon started)",
            ["node"],
            registry=r,
        )

        self.stale_records = Gauge(
            f"{p}_stale_node_records",
            "Job records a node reports for jobs not running there (their slices are not "
            "planned until the node drops them)",
            ["node"],
            registry=r,
        )
        self._stale_nodes: set[str] = set()
        self.refused_slots = Gauge(
            f"{p}_refused_slots",
            "Slots barred for a job after it was requeued from them twice in a row (its "
            "node refused the plan)",
            registry=r,
        )

    def site(self, cycle: float, nodes: Sequence[str] = ()) -> None:
        """The configured cycle and nodes (each node's series starts at 0: not seen)."""
        self.interval.set(cycle)
        for name in nodes:
            self.node_usable.labels(name)
            self.stale_records.labels(name)
            self._stale_nodes.add(name)
        self.refused_slots.set(0)

    def node_trouble(self, stale: Sequence[str], refused: int) -> None:
        """The stale records by node (busy ids ``stale:<job>@<node>:<gpu>``) and the
        slots barred for jobs now."""
        counts: dict[str, int] = {}
        for sid in stale:
            node = sid.rpartition("@")[2].rpartition(":")[0]
            counts[node] = counts.get(node, 0) + 1
        for node in self._stale_nodes:  # a node whose records went: back to 0
            counts.setdefault(node, 0)
        self._stale_nodes |= counts.keys()
        for node, n in counts.items():
            self.stale_records.labels(node).set(n)
        self.refused_slots.set(refused)

    def set_active(self, active: bool) -> None:
        self.active.labels(self.host).set(1 if active else 0)

    def observe(
        self,
        report: Any,
        jobs: Sequence[Any] = (),
        drift: dict[str, float] | None = None,
        planned_seconds: dict[str, float] | None = None,
    ) -> None:
        """Count one cycle's `CycleReport`: ``jobs`` are squeue's jobs of the partition,
        ``drift`` the running jobs' drift, ``planned_seconds`` the finished jobs' plans."""
        self.cycle_seconds.observe(max(0.0, report.finished - report.started))
        self.last.set(report.finished)
        r, a = report.result, report.apply
        if r is None:
            self.cycles.labels("error").inc()
            return
        self.cycles.labels("ok").inc()
        held = sum(1 for j in jobs if getattr(j, "held", False))
        waited = [
            report.finished - j.submit_time
            for j in jobs
            if getattr(j, "held", False)
            and getattr(j, "state", "") in PENDING
            and isinstance(getattr(j, "submit_time", None), int | float)
        ]
        self.oldest_held.set(max(0.0, max(waited, default=0.0)))
        usable = {g.node for snap in r.snapshots for g in snap.gpus} or set(r.nodes)
        for name in usable:
            self.node_usable.labels(name).set(report.finished)
        for state, value in (
            ("held", held),
            ("busy", r.busy),
            ("planned", len(r.planned)),
            ("waiting", r.waiting),
            ("noted", r.noted),
            ("deferred", len(r.deferred)),
        ):
            self.jobs.labels(state).set(value)
        self.makespan.set(r.makespan)
        self.nodes.set(len(r.nodes))
        self.batches.inc(len(r.batches))
        for why in r.replanned:
            self.replans.labels(replan_reason(why)).inc()
        failed = {job for job, _ in a.failed} if a is not None else set()
        if a is not None:
            self.released.inc(len(a.released))
            for action in r.actions:
                name = _action_name(action)
                if name == "learn":
                    continue
                if action.job_id in failed:
                    self.failures.labels(name).inc()
                else:
                    self.actions.labels(name).inc()
                    if name == "hold":
                        self.held.inc()
            self.actions.labels("learn").inc(a.learned)
        late = [d for d in (drift or {}).values() if d > 0]
        self.late.set(len(late))
        self.late_max.set(max(late, default=0.0))
        planned_seconds = planned_seconds or {}
        for action in r.actions:
            if _action_name(action) != "learn":
                continue
            key = (action.job_id, action.restart)
            if key in self._seen or action.job_id not in planned_seconds:
                continue
            self._seen[key] = None
            if len(self._seen) > SEEN:
                self._seen.popitem(last=False)
            self.drift.observe(action.seconds - planned_seconds[action.job_id])

    def text(self) -> bytes:
        """The metrics in Prometheus' text format."""
        return generate_latest(self.registry)
