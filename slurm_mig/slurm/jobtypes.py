"""Slurm's jobs and nodes as slurm-mig reads them: the `Job` and `Node` records and
the state and reason names that say what a job or node may still do."""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "HELD_REASONS",
    "OWNER_RELEASABLE_REASONS",
    "REASON_CODE_RE",
    "STATE_DESCRIPTIONS",
    "UNFINISHED_STATES",
    "UNUSABLE_NODE_STATES",
    "Job",
    "Node",
]

# Jobs in these states have not ended: no end time, no exit code.
UNFINISHED_STATES = frozenset(
    {
        "PENDING",
        "RUNNING",
        "CONFIGURING",
        "SUSPENDED",
        "REQUEUED",
        "REQUEUE_HOLD",
        "REQUEUE_FED",
        "RESIZING",
        "STOPPED",
    }
)
HELD_REASONS = frozenset(
    {
        "JobHeldUser",
        "JobHeldAdmin",
        "JobHoldMaxRequeue",
        "job_requeued_in_held_state",
        "launch_failed_requeued_held",
    }
)
# Holds the job's owner may lift with `scontrol release` (slurmctld's job_mgr.c lets
# a user release WAIT_HELD_USER and WAIT_RESV_DELETED, nothing else).
OWNER_RELEASABLE_REASONS = frozenset({"JobHeldUser", "ReservationDeleted"})
# The fixed descriptions slurmctld (job_mgr.c, job_scheduler.c; 22.05-26.05) gives
# pending jobs, by the reason code it sets with them: squeue's Reason and pyslurm show
# the description instead of the code.
STATE_DESCRIPTIONS = {
    "job requeued in held state": "JobHeldUser",
    "job requeued in special exit state": "JobHeldUser",
    "launch failed requeued held": "JobHeldUser",
    "user env retrieval failed requeued held": "JobHeldUser",
    "launch failure limit exceeded requeued held": "JobHoldMaxRequeue",
    # the partition has too few usable nodes (seen when a node drained)
    "Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority "
    "partitions": "Resources",
}
# Node states (base states and flags, as the JSON of 22.05-26.05 names them) in which
# no new job should be planned onto the node. Left out as usable: IDLE, MIXED,
# ALLOCATED, COMPLETING, RESERVED, PLANNED, CLOUD, EXTERNAL, DYNAMIC_NORM, UNDRAIN,
# REBOOT_CANCELED.
UNUSABLE_NODE_STATES = frozenset(
    {
        "BLOCKED",  # 25.11+: blocked by an exclusive topology allocation
        "DOWN",
        "DRAIN",
        "DRAINED",
        "DRAINING",
        "DYNAMIC_FUTURE",
        "ERROR",
        "FAIL",
        "FAILING",
        "FUTURE",
        "INVAL",
        "INVALID_REG",  # registered with a configuration that does not match slurm.conf
        "MAINT",
        "MAINTENANCE",
        "NOT_RESPONDING",
        "NO_RESPOND",
        "POWERED_DOWN",
        "POWER_DOWN",
        "POWER_DRAIN",
        "POWERING_DOWN",
        "POWERING_UP",
        "POWER_UP",
        "REBOOT_REQUESTED",
        "REBOOT_ISSUED",
        "UNKNOWN",
    }
)
REASON_CODE_RE = re.compile(r"[A-Za-z0-9_]+")  # every job_state_reason_string, 22.05-26.05


@dataclass(frozen=True)
class Job:
    """One job as slurmctld reports it (times in epoch seconds, None when unknown)."""

    job_id: str
    name: str
    user: str
    partition: str
    state: str  # PENDING RUNNING CONFIGURING COMPLETING COMPLETED FAILED CANCELLED ...
    reason: str  # state_reason, e.g. JobHeldAdmin, JobHeldUser, None
    held: bool  # pending with priority 0 (held by an admin, the user, or a requeue)
    comment: str
    admin_comment: str
    nodes: str  # allocated nodes ("" when pending)
    required_nodes: str  # ReqNodeList
    time_limit: float | None  # seconds; None = unlimited
    submit_time: float | None
    start_time: float | None  # None while pending
    end_time: float | None  # None until the job ended
    restart_count: int
    exit_code: int | None  # exit status, 128 + signal when killed; None until ended
    reason_detail: str = ""  # state_description, e.g. "launch failed requeued held"
    dependency: str = ""  # e.g. "afterany:41(unfulfilled)"; "" when none (or fulfilled)
    eligible_time: float | None = None  # --begin (or when it became eligible); None: unset
    deadline: float | None = None  # --deadline, absolute; None: none
    account: str = ""  # the account (association) the job runs under
    qos: str = ""  # its QOS ("" when unknown)
    nice: int = 0  # its nice value (lowers the priority)
    reservation: str = ""  # the reservation it asked for ("" when none)
    priority: int = 0  # Slurm's priority (0 while held: Slurm does not compute it then)
    uid: int | None = None  # the job's user id (None when unknown)
    # the most tasks of its job array Slurm runs at once (``--array=...%N``; 0: no
    # limit); None when unknown: squeue's fixed-width output does not show it
    array_throttle: int | None = None
    het_job: bool = False  # a component of a heterogeneous job (sbatch ... : ...)
    node_count: int = 1  # the nodes it asks for (pending) or holds

    @property
    def finished(self) -> bool:
        """True once the job ended (COMPLETING included)."""
        return self.state not in UNFINISHED_STATES

    @property
    def owner_can_release(self) -> bool:
        """Held in a way the job's owner may undo with ``scontrol release``."""
        return self.held and self.reason in OWNER_RELEASABLE_REASONS


@dataclass(frozen=True)
class Node:
    """One node: its state names (upper case, base state and flags), drain reason,
    CPU count and partitions."""

    name: str
    state: frozenset[str]
    reason: str
    cpus: int
    partitions: tuple[str, ...]

    @property
    def drained(self) -> bool:
        return bool(self.state & {"DRAIN", "DRAINED", "DRAINING"})

    @property
    def usable(self) -> bool:
        """False when the node is down, drained, failing or not responding."""
        return not (self.state & UNUSABLE_NODE_STATES)
