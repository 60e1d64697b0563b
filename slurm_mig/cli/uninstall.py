"""``slurm-mig uninstall``: take slurm-mig out of a cluster, one command per step.

Without an action it prints the checklist (``slurm.uninstall.checklist``): what to stop,
which slurm.conf and gres.conf lines and files to remove, in order; it edits nothing.
``--release-jobs`` (controller, planner stopped) releases the jobs the planner holds in
as few ``scontrol release`` calls as the client makes; ``--destroy-instances`` (each GPU
node) destroys the MIG instances no process uses, and refuses while one is in use.
"""

from __future__ import annotations

import argparse
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path

from .common import PROG, Formatter, wrap


def add_parser(sub) -> None:
    p = sub.add_parser(
        "uninstall",
        formatter_class=Formatter,
        help="take slurm-mig out: release held jobs, destroy instances, list what to remove",
        description=wrap(
            "Without an action, print the steps of an uninstall in order: stop the "
            "planner, let the MIG jobs end, destroy each node's leftover MIG instances, "
            "remove the gres.conf records and the Gres= terms, and only then take the "
            "hooks and job_submit.lua out of slurm.conf, release the held jobs and remove "
            "the units and the files (printed, never edited). "
            "--release-jobs (on the controller, the planner stopped) releases every job "
            "the planner holds in the MIG partition; --destroy-instances (on a GPU node) "
            "destroys the MIG instances no process uses. --dry-run prints what either "
            "would do."
        ),
    )
    p.add_argument("--config", metavar="CONFIG", help="slurm-mig config (default as elsewhere)")
    act = p.add_mutually_exclusive_group()
    act.add_argument("--plan", action="store_true", help="print the checklist (the default)")
    act.add_argument(
        "--release-jobs",
        action="store_true",
        help="release the jobs the planner holds in the MIG partition (controller)",
    )
    act.add_argument(
        "--destroy-instances",
        action="store_true",
        help="destroy the MIG instances no process uses (GPU node, as root)",
    )
    p.add_argument("--node", metavar="NAME", help="node name (default: this host's short name)")
    p.add_argument("--dry-run", action="store_true", help="print what it would do, do nothing")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from ..config import load_config

    config = load_config(args.config)
    if args.release_jobs:
        from ..slurm.client import SlurmClient

        return release_jobs(config, SlurmClient(), args.dry_run)
    if args.destroy_instances:
        from ..devices.open import open_backend

        node = args.node or socket.gethostname().split(".")[0]
        config.gpu_models(node)  # an unknown node: one line naming it
        return destroy_instances(open_backend(config, node), args.dry_run, node=node)
    from ..slurm.uninstall import checklist

    source = str(config.source) if config.source else "/etc/slurm-mig/config.toml"
    run_dir = str(config.run_dir).replace("%n", "<node>")
    for line in checklist(config.partition, str(config.state_dir), run_dir, source):
        print(line)
    return 0


def _planner_running(state_dir: Path, now: float) -> str | None:
    """The live planner's lease holder in words, or None (no lease, released, expired)."""
    from ..daemon.lease import LEASE_FILE, read_holder

    holder = read_holder(state_dir / LEASE_FILE)
    if holder is None or holder.released or now - holder.renewed_at > holder.ttl:
        return None
    return holder.describe(now)


def release_jobs(config, client, dry_run: bool = False, now: float | None = None) -> int:
    """Release the partition's jobs the planner holds (``choose_jobs``) with the client's
    batched ``release_jobs``; 0, or 1 when some could not be released (named)."""
    from ..slurm.client import SlurmError
    from ..slurm.uninstall import choose_jobs, release_calls

    now = time.time() if now is None else now
    live = _planner_running(Path(config.state_dir), now)
    if live:
        raise ValueError(
            f"the planner daemon holds its lease ({live}): it would hold the jobs again "
            "(stop it first: systemctl stop slurm-mig-planner, and the standby unit)"
        )
    try:
        jobs = client.jobs(config.partition)
    except SlurmError as exc:
        raise ValueError(f"cannot read the jobs of partition {config.partition}: {exc}") from None
    choice = choose_jobs(jobs, config.partition)
    for job in choice.other:
        print(
            f"{PROG}: job {job.job_id} ({job.user}) is held by someone else ({job.reason}, "
            "no slurm-mig record): left held",
            file=sys.stderr,
        )
    ids = [j.job_id for j in choice.release]
    verb = "would release" if dry_run else "releasing"
    for job in choice.release:
        print(f"{verb} job {job.job_id} ({job.user}, {job.reason or 'held'})")
    calls = release_calls(len(ids))
    if dry_run or not ids:
        done = "would release" if dry_run else "released"
        print(
            f"{done} {len(ids)} job(s) of partition {config.partition} in {calls} "
            f"'scontrol release' call(s); {len(choice.other)} held by someone else"
        )
        return 0
    failed = client.release_jobs(ids)
    for jid, why in sorted(failed.items()):
        print(f"{PROG}: job {jid}: not released: {' '.join(why.split())}", file=sys.stderr)
    print(
        f"released {len(ids) - len(failed)} of {len(ids)} job(s) of partition "
        f"{config.partition} in {calls} 'scontrol release' call(s)"
    )
    return 1 if failed else 0


def _holders(inst) -> list:
    """The processes with the instance's capability nodes open (``node.holders``)."""
    from ..devices.migcaps import minor
    from ..node.holders import find_holders

    minors = {minor(inst.gpu, inst.gi_id)}
    if inst.ci_id >= 0:
        minors.add(minor(inst.gpu, inst.gi_id, inst.ci_id))
    return find_holders(minors)


def destroy_instances(
    backend, dry_run: bool = False, node: str = "", holders_of: Callable | None = None
) -> int:
    """Destroy every MIG instance of the node, none if any is in use (one line naming
    it and who uses it); a device fault is one line too."""
    from ..devices.base import DeviceError
    from ..node.holders import describe_holders
    from ..slurm.uninstall import describe, in_use

    try:
        instances = backend.instances()
        busy = in_use(instances, holders_of or _holders)
        if busy:
            inst, found = busy[0]
            more = f" (and {len(busy) - 1} more instance(s) in use)" if len(busy) > 1 else ""
            raise ValueError(
                f"{describe(inst)} is in use, {describe_holders(found)}{more}; nothing "
                "destroyed (let its job end or stop those processes, then run it again)"
            )
        where = f" on {node}" if node else ""
        for inst in instances:
            if dry_run:
                print(f"would destroy {describe(inst)}")
                continue
            backend.destroy(inst.gpu, inst.uuid, job_id="uninstall")
            print(f"destroyed {describe(inst)}")
    except DeviceError as exc:
        raise ValueError(exc.line()) from None
    done = "would destroy" if dry_run else "destroyed"
    print(f"{done} {len(instances)} MIG instance(s){where}")
    return 0
