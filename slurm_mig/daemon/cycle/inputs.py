"""The cycle's input: the `CycleInput` of Slurm's view (jobs as `JobLike` records, usable
nodes, settings, standing plans) and each job's runtime `Estimate`."""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from ...geometry import Placement
from ...slurm.assignment import Assignment
from ...slurm.jobrecord import JobLike
from ...slurm.sitepolicy import SitePolicy

__all__ = ["Estimate", "JobLike", "NodeRecord", "CycleInput", "SlotKey"]

# a job's slot on a GPU as the refusal memory names it: (node, gpu, start, size)
SlotKey = tuple[str, int, int, int]


@dataclass(frozen=True)
class NodeRecord:
    """A job record a node reported in its latest ``instances`` snapshot (`receiver`):
    the MIG instance a run of a job was given there, as the node still holds it."""

    node: str
    gpu: int
    job_id: str
    restart: int
    profile: str
    placement: Placement
    ready: float  # epoch seconds the Prolog made it ready
    tasks: int = 1  # instances of ``profile`` in the region ``placement`` (a gang's)


@dataclass(frozen=True)
class Estimate:
    """A job's runtime estimate: seconds per instance size per GPU model (inf = cannot
    run there, e.g. too little memory), its learning key, its memory hint, its PCIe
    demand and alpha, whether it may be restarted elsewhere, a problem (e.g. a bad
    hint) that keeps it from being planned, and its owner: runs are learned per owner
    and key ("": unknown, nothing is learned)."""

    key: str
    times: Mapping[str, Mapping[int, float]] = field(default_factory=dict)
    mem: int | None = None
    problem: str | None = None
    pcie: float = 0.0
    alpha: float = 1.0
    restartable: bool = False
    owner: str = ""
    hint: float | None = None  # its time= hint (s): a run past it overruns (overruns.py)
    # instances it runs on, one per task (``tasks=``): ``times`` are then keyed by the
    # size of the region that holds them (`geometry.gang_times`), ``mem`` is one task's
    tasks: int = 1


@dataclass(frozen=True)
class CycleInput:
    """Everything one cycle decides from; ``nodes`` holds only the usable nodes."""

    now: float  # epoch seconds, taken before squeue ran
    jobs: tuple[JobLike, ...]
    nodes: Mapping[str, tuple[str, ...]]  # usable node -> GPU model names, index order
    estimates: Mapping[str, Estimate]  # job id -> estimate
    partition: str = "mig"
    algorithm: str = "adaptive"  # any registered policy name
    batch_window: float = 30.0
    batch_size: int = 0  # jobs per batch (0: every waiting job)
    # held jobs planned (standing plans) at most, the first by submission (0: no limit)
    max_planned: int = 0
    previous_nodes: frozenset[str] | None = None  # usable nodes of the last cycle, if any
    release_ahead: float = 0.0  # seconds (0: off); see `release_ahead`
    start_timeout: float = 120.0  # a released job not started this long after it could
    # the standing plans of held jobs, kept by the daemon between cycles (Slurm hears of
    # a plan only at release); None after a start: held jobs are planned again
    plans: Mapping[str, Assignment] | None = None
    # (job id, restart) of the finished runs the store already holds, kept by the daemon
    # while squeue shows them (minutes, MinJobAge): no learn action for them again
    learned: AbstractSet[tuple[str, int]] = frozenset()
    # Slurm's policy (priority weights and factors, limits, reservations); None: every
    # job priority 0, no limits read, no reservations (the planner's order is arrival)
    policy: SitePolicy | None = None
    reorder: int = 0  # lower-priority jobs that may go before a job (-1: no bound)
    # the objective the policy plans by ("": its own rule); the daemon's is
    # `policyset.configured_objective`: [planner] objective, else balanced where taken
    objective: str = ""
    # [planner] upsize: seconds before adaptive may move an overrunning restartable job
    # to an idle whole GPU (`planner.upsize`); 0: off
    upsize: float = 0.0
    # jobs a policy moved up (`Requeue.at_least`), kept by the daemon: job id -> (the
    # run, the least size): while it waits it is planned on that size or larger only,
    # as the move meant (a plan made afresh could put it back where it came from)
    moved_up: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    # held jobs that Slurm kept pending after their release (a limit, licenses, not
    # started in time), and why, while their back-off lasts (the daemon's `Backoff`)
    limited: Mapping[str, str] = field(default_factory=dict)
    # job arrays' throttles learned from tasks Slurm kept pending for JobArrayTaskLimit
    # (squeue's fixed-width output does not show them), by array id
    throttles: Mapping[str, int] = field(default_factory=dict)
    # the job records the nodes last reported (`NodeRecord`): one whose job Slurm shows
    # finished, requeued since or running elsewhere keeps its slices busy (`stale`)
    node_records: tuple[NodeRecord, ...] = ()
    # slots a job is not planned on again, kept by the daemon (`refused.Refusals`): job
    # id -> {(node, gpu, start, size): why}, after requeues from them in a row
    refused: Mapping[str, Mapping[SlotKey, str]] = field(default_factory=dict)
    # the jobs this daemon released (of those squeue shows); None: not known. A held job
    # with the planner's dependency that is not among them had its plan written by an
    # earlier planner that stopped before the release (or was released, then held)
    sent: AbstractSet[str] | None = None
