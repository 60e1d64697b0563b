"""``slurm-mig node-sweep``: drop the node's stale job records with their MIG instances
(jobs that ended while slurmd was down never got their Epilog); run before slurmd
starts by contrib/slurm-mig-caps.service."""

from __future__ import annotations

import argparse
import os
import sys

from .common import Formatter, add_node_options, node_config, wrap


def add_parser(sub) -> None:
    p = sub.add_parser(
        "node-sweep",
        formatter_class=Formatter,
        help="destroy the MIG instances of jobs that no longer run here (root, on a node)",
        description=wrap(
            "Find the job records of this node whose jobs no longer run here (a job that "
            "ended while slurmd was down never got its Epilog), destroy their MIG "
            "instances and drop the records, one GPU's lock at a time. A job with a "
            "process on the node (in its cgroup, or its slurmstepd) is never touched. "
            "With --boot (before slurmd starts: contrib/slurm-mig-caps.service, or an "
            "ExecStartPre= of slurmd) every other record is stale; without it, Slurm is "
            "asked (one squeue call) and a record whose job Slurm cannot be asked about "
            "is kept. Exit status 0, or 1 when a device fault stopped the sweep."
        ),
    )
    add_node_options(p)
    p.add_argument(
        "--boot",
        action="store_true",
        help="slurmd is not running on this node: a record without a process is stale",
    )
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from ..devices.base import DeviceError
    from ..devices.open import open_backend
    from ..node.hookio import job_states
    from ..node.hookoutcome import Outcome
    from ..node.nodestate import LockBusyError, NodeState
    from ..node.recordsweep import sweep

    config, node = node_config(args)
    out = Outcome()
    state = NodeState(config.run_dir_for(node), warn=out.warn)
    env = dict(os.environ)
    fault: DeviceError | LockBusyError | None = None
    dropped = 0
    try:
        backend = open_backend(config, node)
        with state.lock(config.lock_timeout, shared=True):
            dropped, fault = sweep(
                state,
                backend,
                node,
                out,
                boot=args.boot,
                ask=None if args.boot else (lambda ids: job_states(ids, env)),
                wait=config.lock_timeout,
            )
    except (DeviceError, LockBusyError) as exc:
        fault = exc
    from ..node import reports

    # the node's instances as they are now: the planner holds a stale record's slices
    # until a report drops it, and no hook runs where it plans nothing
    reports.after_hook("reclaim", config, node, out, env)
    for _, text in out.log:
        print(f"slurm-mig node-sweep: {text}", file=sys.stderr)
    print(f"{node}: {dropped} stale job record(s) dropped, {len(state.jobs())} left")
    if fault is not None:
        print(f"slurm-mig node-sweep: stopped: {fault}", file=sys.stderr)
        return 1
    return 0
