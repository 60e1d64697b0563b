"""Taking slurm-mig out of a cluster: which held jobs to release, which MIG instances
may be destroyed, and the checklist of Slurm lines and files an admin removes.

What the planner holds: job_submit.lua holds every job of the MIG partition at
submission (priority 0, Slurm's reason JobHeldUser), and the planner holds again
(``scontrol hold``, JobHeldAdmin) a released job it plans anew, writing its record
(``slurm-mig:{...}``) in the AdminComment of each job it plans. So a pending, held job of
the partition is the planner's when it is held by that user hold or carries that record;
another held job (an admin's own hold, no record) is left alone and named.

Pure functions over the client's ``Job`` records and the backends' ``MigInstance``es; the
command (``cli/uninstall.py``) does the I/O.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..devices.base import MigInstance
from .client import LIST_CHUNK, Job
from .jobrecord import ADMIN_TAG, job_phase

__all__ = ["JobChoice", "checklist", "choose_jobs", "in_use", "release_calls"]


@dataclass(frozen=True)
class JobChoice:
    """The partition's held jobs: those to release, and those held by someone else."""

    release: tuple[Job, ...]
    other: tuple[Job, ...]


def _ours(job: Job) -> bool:
    return job.reason == "JobHeldUser" or job.admin_comment.startswith(ADMIN_TAG)


def choose_jobs(jobs: Sequence[Job], partition: str) -> JobChoice:
    """Of ``jobs``, the pending held ones of ``partition``, split by who holds them."""
    held = [
        j for j in jobs if j.partition == partition and j.held and job_phase(j.state) == "pending"
    ]
    return JobChoice(tuple(j for j in held if _ours(j)), tuple(j for j in held if not _ours(j)))


def release_calls(n: int) -> int:
    """``scontrol release`` calls the client makes for ``n`` jobs (one per chunk)."""
    return math.ceil(n / LIST_CHUNK)


def in_use(
    instances: Sequence[MigInstance], holders_of: Callable[[MigInstance], list]
) -> list[tuple[MigInstance, list]]:
    """The instances some process uses, with those processes (``holders_of``)."""
    out = []
    for inst in instances:
        found = holders_of(inst)
        if found:
            out.append((inst, found))
    return out


def describe(inst: MigInstance) -> str:
    """``GPU 0 3g.20gb at 4:4 (MIG-...)``."""
    return f"GPU {inst.gpu} {inst.profile} at {inst.placement.start}:{inst.placement.size} ({inst.uuid})"


def checklist(partition: str, state_dir: str, run_dir: str, config: str) -> list[str]:
    """The steps of an uninstall in order, one command or edit each (printed, never run):
    the planner stops, the partition's MIG jobs end, each node's leftover instances are
    destroyed, then the GRES records go, and only then job_submit.lua and the hooks
    (which keep refusing slice records and cleaning up until no record is left), the
    held jobs are released, and the files go."""
    return [
        "On the controller (and the backup controller):",
        "  1. systemctl disable --now slurm-mig-planner slurm-mig-planner-standby "
        f"(jobs of partition {partition} now stay held: none gets a slice)",
        "  2. jobs the planner released ahead that have not started carry a MIG GRES record "
        "(TresPerNode=gres:gpu:m<N>g<g>:1): cancel or requeue them; wait for the running "
        f"jobs of partition {partition} to end (squeue -p {partition} -t R)",
        "On each GPU node, once its MIG jobs have ended:",
        "  3. systemctl disable --now slurm-mig-node-flush.timer slurm-mig-caps",
        "  4. slurm-mig uninstall --destroy-instances --dry-run, then without --dry-run: "
        "the MIG instances no process uses are destroyed (refused while one is in use)",
        "  5. gres.conf: remove the lines of 'slurm-mig gres-conf' (NodeName=<node> "
        "AutoDetect=off, the Name=gpu Type=m<N>g<g> records and Name=mig_slice); "
        "slurm.conf: remove Gres=gpu:m0g0:1,...,mig_slice:<n> from the node's NodeName "
        "line (and mig_slice from GresTypes and AccountingStorageTRES once no node has "
        "it); scontrol reconfigure and "
        "restart slurmd (before step 6: the hooks stay while a slice record exists, to "
        "refuse and clean up its use)",
        "On the controller, once no node has a slice record:",
        "  6. slurm.conf: remove JobSubmitPlugins=lua (or lua from the list) and delete "
        "job_submit.lua beside it; remove Prolog=, Epilog=, TaskProlog= of slurm-mig (and "
        "PrologFlags=Alloc if nothing else needs it); scontrol reconfigure",
        f"  7. slurm-mig uninstall --release-jobs --dry-run, then without --dry-run: the "
        f"jobs of partition {partition} the planner holds are released (they then run "
        "without a MIG slice: move them to another partition or cancel them first if "
        "they need a GPU)",
        f"  8. on each GPU node: rm -r {run_dir}; nvidia-smi -i N -mig 0 on idle GPUs if MIG "
        "is no longer wanted (the capability nodes under /dev/nvidia-caps are the "
        "driver's: leave them)",
        "Then on every host:",
        "  9. rm /etc/systemd/system/slurm-mig-*; systemctl daemon-reload",
        f" 10. keep or remove {state_dir} (profiles.sqlite: learned runtimes; "
        "accounting.sqlite: accounting by MIG profile; reports.sqlite: node reports), "
        f"{config} and the signing key; rm -r /opt/slurm-mig (the virtualenv)",
        " 11. Prometheus and Grafana: remove the slurm-mig alert rules and dashboard",
    ]
