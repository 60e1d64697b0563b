"""The Slurm Prolog, TaskProlog and Epilog: create, hand out and destroy MIG instances.

The hooks decide from their environment and node-local records only (no Slurm calls on
the normal path): the Prolog (root) checks the job's signed assignment token, creates or
adopts its instance under its GPU's lock and writes a record, and a copy only the job's
user can read; the TaskProlog (that user) turns the copy into
``export CUDA_VISIBLE_DEVICES=<MIG uuid>``; the Epilog (root) destroys the instance or
keeps it for the next job. With ``[slurm] gres = "on"`` the Prolog also checks
the job's GRES record (SLURM_JOB_GPUS, set by the planner, see ``gres``) against the
token and the created instance's GPU-instance id against that record. An Epilog that
keeps an instance starts a detached `reclaim_main` that destroys it once its wait is
over, should no later hook come to the node. The only Slurm calls: draining the node on
a device fault, and ``scontrol requeuehold`` from the TaskProlog, or from a Prolog whose
run directory is out of room (it undoes what it created: a full disk is not the node's
fault, and a job's owner must not be able to drain a node).

`prolog`, `task_prolog` and `epilog` decide and return an `Outcome` (exit status, lines
to print, log lines, a drain reason, a requeue request); the ``*_main`` functions read the
environment and the config, run them and carry the outcome out. This module is on the job
start path: only the standard library, ``geometry``, ``config``, the assignment, the node
state and the device backends are imported (no numpy, no planner).

This module is the hooks' public face (the console scripts, the wrapper scripts and the
detached reclaim import it); the work is done in ``jobenv`` (the job's environment),
``hookoutcome`` (what a hook decided), ``admission`` (the token checks), ``prolog``,
``taskprolog``, ``epilog``, ``reclaim`` (destroying and reclaiming instances),
``hookenergy`` (the energy split), ``hookio`` (logs, scontrol, squeue) and ``hookmain``
(the entry points).
"""

from __future__ import annotations

from .admission import check_assignment, check_current, impossible, in_partition
from .epilog import epilog
from .hookio import array_task_of, as_array_task, emit, run_scontrol, scontrol_path
from .hookmain import (
    HOOKS,
    epilog_main,
    prolog_main,
    reclaim_main,
    task_prolog_main,
)
from .hookoutcome import ERR, INFO, WARNING, Clock, Outcome, describe
from .jobenv import MAX_ENV_COMMENT, HookInputError, JobEnv
from .prolog import prolog
from .taskprolog import NO_GPU, task_prolog

__all__ = [
    "ERR",
    "HOOKS",
    "INFO",
    "MAX_ENV_COMMENT",
    "NO_GPU",
    "WARNING",
    "Clock",
    "HookInputError",
    "JobEnv",
    "Outcome",
    "array_task_of",
    "as_array_task",
    "check_assignment",
    "check_current",
    "describe",
    "emit",
    "epilog",
    "epilog_main",
    "impossible",
    "in_partition",
    "prolog",
    "prolog_main",
    "reclaim_main",
    "run_scontrol",
    "scontrol_path",
    "task_prolog",
    "task_prolog_main",
]
