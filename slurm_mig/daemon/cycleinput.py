"""The cycle's input from Slurm's and the store's records: the configured nodes sinfo
shows usable, the job records the nodes last reported, and a `cycle.CycleInput` with each
job's runtime estimates."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

from ..config import Config
from ..geometry import get_model
from ..slurm.jobrecord import in_partition, job_phase
from .cycle import CycleInput, NodeRecord, configured_objective
from .estimates import Estimator

__all__ = ["build_cycle_input", "reported_records", "usable_nodes"]

log = logging.getLogger("slurm_mig.planner")


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


def build_cycle_input(
    config: Config,
    jobs: Sequence[Any],
    nodes: Sequence[Any],
    store: Any,
    now: float,
    previous_nodes: frozenset[str] | None = None,
    plans: Mapping[str, Any] | None = None,
    learned: AbstractSet[tuple[str, int]] = frozenset(),
    policy: Any = None,
    limited: Mapping[str, str] | None = None,
    throttles: Mapping[str, int] | None = None,
    node_records: Sequence[NodeRecord] = (),
    refused: Mapping[str, Mapping[tuple[str, int, int, int], str]] | None = None,
    sent: AbstractSet[str] | None = None,
    moved_up: Mapping[str, tuple[int, int]] | None = None,
) -> CycleInput:
    """The cycle's input from what squeue and sinfo said and the learned runtimes;
    ``learned``: the finished runs the store already holds (no learn action again)."""
    configured = {name: tuple(models) for name, models in config.nodes.items()}
    all_models = sorted({get_model(m).name for ms in configured.values() for m in ms})
    estimator = Estimator(config, store, now=now, jobs=jobs)
    estimates = {}
    for job in jobs:
        if job.partition and not in_partition(job, config.partition):
            continue
        if job_phase(job.state) == "pending":
            estimates[job.job_id] = estimator(job, all_models)
        else:  # running or finished: only its kind and owner, to learn its runtime
            estimates[job.job_id] = estimator.identity(job)
    return CycleInput(
        now=now,
        jobs=tuple(jobs),
        nodes=usable_nodes(configured, nodes),
        estimates=estimates,
        partition=config.partition,
        algorithm=config.algorithm,
        batch_window=config.batch_window,
        batch_size=config.batch_size,
        max_planned=config.max_planned,
        previous_nodes=previous_nodes,
        release_ahead=config.release_ahead,
        start_timeout=config.start_timeout,
        plans=plans,
        learned=frozenset(learned),
        policy=policy,
        reorder=config.reorder,
        objective=configured_objective(config.algorithm, config.objective),
        upsize=config.upsize,
        limited=dict(limited or {}),
        throttles=dict(throttles or {}),
        node_records=tuple(node_records),
        refused=dict(refused or {}),
        sent=None if sent is None else frozenset(sent),
        moved_up=dict(moved_up or {}),
    )


def reported_records(config: Config) -> tuple[NodeRecord, ...]:
    """The job records of the configured nodes' latest ``instances`` reports
    (``<state_dir>/reports.sqlite``); none with ``[planner] reports`` off (the
    controller never reads a node's disk) or while the store cannot be read."""
    if not getattr(config, "reports", ""):
        return ()
    from .receiver import ReportDB

    try:
        snaps = ReportDB(config.state_dir).snapshots()
    except (sqlite3.Error, OSError) as exc:
        log.debug("node reports not read: %s", exc)
        return ()
    out = []
    for node in config.nodes:
        for r in snaps.get(node, {}).get("jobs", ()):
            out.append(
                NodeRecord(
                    node, r.gpu, r.job_id, r.restart, r.profile, r.placement, r.ready, r.tasks
                )
            )
    return tuple(out)
