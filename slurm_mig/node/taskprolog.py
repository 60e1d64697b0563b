"""The Slurm TaskProlog's decision (run as the job's user): ``export
CUDA_VISIBLE_DEVICES=<MIG uuid>`` from the job's task record, or why it has no GPU.
Task i (SLURM_LOCALID) of a job of several slices (``mig:tasks=N``) gets instance i; a
task beyond the N it asked for gets none (not an error: it runs without a GPU).

A job of the partition runs only on its slice: every such job runs after the planner
released it with an assignment, and its Prolog leaves it a record or a refusal. No
record of its current run (SLURM_RESTART_COUNT) means its Prolog did not run (slurmd,
back after a crash, may launch a relaunched job without it): the job is requeued and
held for the planner, never run without its slice.
"""

from __future__ import annotations

from ..config import Config
from .admission import in_partition
from .hookoutcome import Outcome, describe
from .jobenv import JobEnv
from .nodestate import JobRecord, NodeState, Refusal

__all__ = ["NO_GPU", "task_prolog"]

NO_GPU = "export CUDA_VISIBLE_DEVICES="


def task_prolog(job: JobEnv, config: Config) -> Outcome:
    """``export CUDA_VISIBLE_DEVICES=<uuid>`` from the job's record; for a refused job
    print the reason, ask for a requeue (action requeue) and exit 1; a job without a
    record of its current run is requeued the same way."""
    if not in_partition(job, config):
        return Outcome()
    out = Outcome()
    state = NodeState(config.run_dir_for(job.node), warn=out.warn)
    item = state.task(job.own_id)  # the job's own record: root's are not readable here
    rec = item if isinstance(item, JobRecord) else None
    if rec is not None and rec.restart == job.restart and rec.members:
        return _gang_task(rec, job, out)
    if rec is not None and rec.restart == job.restart:
        out.stdout.append(f"export CUDA_VISIBLE_DEVICES={rec.uuid}")
        out.say(f"CUDA_VISIBLE_DEVICES={rec.uuid}: {describe(rec.profile, rec.placement, rec.gpu)}")
        return out
    refusal = item if isinstance(item, Refusal) else None
    if refusal is not None:
        out.stdout += [NO_GPU, f"print slurm-mig: {refusal.reason}"]
        if refusal.action == "requeue":
            out.stdout.append(
                f"print slurm-mig: job {job.job_id} is requeued and held for the planner"
            )
            out.requeue = True
        else:
            out.stdout.append(f"print slurm-mig: job {job.job_id} cannot run as submitted")
        out.exit_code = 1
        out.warn(f"refused (action {refusal.action}): {refusal.reason}")
        return out
    ran = f"run {rec.restart}" if rec is not None else "no run"
    text = (
        f"no MIG instance was prepared for run {job.restart} of job {job.job_id} on "
        f"{job.node} (the node's records name {ran} of it): its Prolog did not run (slurmd "
        "skipped it, e.g. after a restart, or Prolog= is not set in slurm.conf)"
    )
    out.stdout += [
        NO_GPU,
        f"print slurm-mig: {text}",
        f"print slurm-mig: job {job.job_id} is requeued and held for the planner",
    ]
    out.requeue = True
    out.exit_code = 1
    out.warn(f"requeued: {text}")
    return out


def _gang_task(rec: JobRecord, job: JobEnv, out: Outcome) -> Outcome:
    """Task SLURM_LOCALID of a job of several slices: its own instance, or no GPU (and
    one line saying why) for a task beyond the job's ``tasks`` or without a task number."""
    i = job.local_id
    if i is not None and i < rec.tasks:
        uuid = rec.uuids[i]
        out.stdout.append(f"export CUDA_VISIBLE_DEVICES={uuid}")
        out.say(f"task {i}: CUDA_VISIBLE_DEVICES={uuid}: {rec.profile} on gpu {rec.gpu}")
        return out
    which = f"task {i}" if i is not None else "a task without a valid SLURM_LOCALID"
    text = (
        f"job {job.job_id} asked for tasks={rec.tasks} (one MIG slice each, tasks 0 to "
        f"{rec.tasks - 1}); {which} has no slice and runs without a GPU"
    )
    out.stdout += [NO_GPU, f"print slurm-mig: {text}"]
    out.say(text)
    return out
