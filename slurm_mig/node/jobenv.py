"""What a node hook knows of its job: `JobEnv`, read and bounded from the environment
Slurm gives it (a job's owner sets its Comment and may shape its environment).

Standard library only: on the job start path.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["ARRAY_TASK", "MAX_ENV_COMMENT", "HookInputError", "JobEnv", "digits"]

HOOKS = ("prolog", "epilog", "taskprolog")
MAX_ENV_COMMENT = 4096  # SLURM_JOB_COMMENT read at most (Slurm keeps 1024: jobcomment.MAX_COMMENT)
_JOB_ID = re.compile(r"^[0-9A-Za-z_-]{1,64}$")
ARRAY_TASK = re.compile(r"^[0-9]{1,10}_[0-9]{1,10}$")  # <array id>_<task>
_GPU_CHARS = frozenset("0123456789,-")  # SLURM_JOB_GPUS: GRES indices


class HookInputError(ValueError):
    """The hook's environment lacks what Slurm always sets (not run by Slurm?)."""


@dataclass(frozen=True)
class JobEnv:
    """What a hook knows of its job, from the environment Slurm gives it."""

    job_id: str
    restart: int
    node: str
    partition: str
    comment: str
    problem: str | None = None  # a malformed variable: the prolog refuses the job
    uid: int | None = None  # SLURM_JOB_UID: the job's user, who may read its task record
    gpus: str = ""  # SLURM_JOB_GPUS: the GRES Slurm gave the job (see check_current)
    # the array task SLURM_JOB_ID is could not be asked of slurmctld (`as_array_task`)
    array_unknown: bool = False
    # SLURM_JOB_ID where job_id is an array task's <array id>_<task> (`as_array_task`)
    slurm_id: str = ""
    # SLURM_LOCALID: the task's number on the node (TaskProlog); None: unset or malformed
    local_id: int | None = None

    @property
    def own_id(self) -> str:
        """SLURM_JOB_ID: what the job itself knows it by, which names the files it reads
        and writes on the node (its task record, mig-run's need file); ``job_id`` is the
        planner's (an array task's ``<array id>_<task>``: its token, records, reports).
        The TaskProlog's environment names no array task (a task submitted from an array
        task inherits the variables): it knows its job by this number alone."""
        return self.slurm_id or self.job_id

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> JobEnv:
        """Read SLURM_JOB_ID, SLURMD_NODENAME, SLURM_JOB_PARTITION, SLURM_JOB_COMMENT,
        SLURM_JOB_UID, SLURM_JOB_GPUS, SLURM_LOCALID (a task's) and the restart count
        (SLURM_JOB_RESTART_COUNT, or SLURM_RESTART_COUNT in a task); every value's length
        and form is bounded."""
        job_id = env.get("SLURM_JOB_ID", "").strip()
        if not job_id:
            raise HookInputError(
                "no SLURM_JOB_ID in the environment; install this as Slurm's Prolog, "
                "Epilog or TaskProlog (slurm.conf), it is not meant to be run by hand"
            )
        if not _JOB_ID.match(job_id):
            raise HookInputError(f"SLURM_JOB_ID {job_id!r} is not a Slurm job id")
        node = env.get("SLURMD_NODENAME", "").strip()
        if not node:
            raise HookInputError("no SLURMD_NODENAME in the environment (is slurmd running it?)")
        if len(node) > 255:
            raise HookInputError(f"SLURMD_NODENAME {node[:20]!r}... is not a node name")
        problem = None
        raw = env.get("SLURM_JOB_RESTART_COUNT", env.get("SLURM_RESTART_COUNT", "")).strip()
        restart = int(raw) if digits(raw, 9) else 0
        if raw and not digits(raw, 9):
            problem = f"the restart count {raw[:20]!r} from Slurm is not a whole number >= 0"
        comment = env.get("SLURM_JOB_COMMENT", "")
        if len(comment) > MAX_ENV_COMMENT:
            problem = problem or (
                f"the job comment has {len(comment)} characters; Slurm allows 1024"
            )
            comment = ""
        raw_uid = env.get("SLURM_JOB_UID", "").strip()
        gpus = env.get("SLURM_JOB_GPUS", "").strip()
        if len(gpus) > 256 or not _GPU_CHARS.issuperset(gpus):
            problem = problem or f"SLURM_JOB_GPUS {gpus[:20]!r} from Slurm is not a GRES index list"
            gpus = ""
        return cls(
            job_id=job_id,
            restart=restart,
            node=node,
            partition=env.get("SLURM_JOB_PARTITION", "").strip()[:255],
            comment=comment,
            problem=problem,
            uid=int(raw_uid) if digits(raw_uid, 10) and int(raw_uid) < 2**32 - 1 else None,
            gpus=gpus,
            local_id=_local_id(env.get("SLURM_LOCALID", "")),
        )


def _local_id(raw: str) -> int | None:
    """SLURM_LOCALID as a task number (0 to 4095: more tasks than a node runs), else None."""
    raw = raw.strip()
    return int(raw) if digits(raw, 4) and int(raw) < 4096 else None


def digits(text: str, most: int) -> bool:
    """1 to ``most`` ASCII digits."""
    return 0 < len(text) <= most and text.isascii() and text.isdigit()
