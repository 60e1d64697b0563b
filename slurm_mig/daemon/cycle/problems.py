"""Why a job can never be planned as it stands (no MIG size runs it, its memory need,
more tasks than a GPU holds instances, a Comment too long for the planner's token, a
heterogeneous or multi-node job), and the GPU models that can run it."""

from __future__ import annotations

import math
from functools import lru_cache

from ... import jobcomment as comments
from ...geometry import GpuModel, get_model, most_tasks, region_sizes
from ...planner.registry import UnknownPolicy, policy_info
from .inputs import Estimate

__all__ = [
    "comment_too_long",
    "feasible",
    "gangs_unsupported",
    "shape_problem",
    "why_unplannable",
]


def _gib(n: int) -> str:
    return f"{n / 1024**3:.1f} GiB"


@lru_cache(maxsize=1 << 16)
def comment_too_long(raw: str) -> str | None:
    """Why the job's Comment leaves no room for the planner's token (a Comment written
    before job_submit.lua refused long ones, or by root), with the fix; or None.
    Memoised: a steady cycle reads the same comments again."""
    text = comments.parse(raw).text
    size = len(text.encode())
    if size <= comments.MAX_USER_COMMENT:
        return None
    return (
        f"its comment has {size} characters, more than the {comments.MAX_USER_COMMENT} "
        "that leave room for the planner's token; shorten it with scontrol update "
        "JobId=<id> Comment=..."
    )


def shape_problem(job: object) -> str | None:
    """Why a job of the partition can never run on one MIG slice as Slurm holds it (a
    heterogeneous job's component; a job on more than one node), with the fix; or None.
    job_submit.lua refuses both; one queued before it, or let in by an admin, is held
    with this reason instead of planned: its release would fail every cycle, or it would
    be requeued by the Prolog of each node it gets but the planned one."""
    if getattr(job, "het_job", False):
        return (
            "it is a component of a heterogeneous job, which cannot run on MIG slices; "
            "scancel it and submit each component as a job of its own"
        )
    nodes = getattr(job, "node_count", 1)
    if nodes > 1:
        return (
            f"it asks for {nodes} nodes and a MIG slice is on one; scancel it and submit it "
            "again with -N 1 (one job per node)"
        )
    return None


def feasible(est: Estimate | None) -> list[str]:
    """Models on which the job can run on some size."""
    if est is None:
        return []
    return [m for m, t in est.times.items() if any(math.isfinite(x) for x in t.values())]


def why_unplannable(est: Estimate | None) -> str | None:
    """Why a held job cannot be planned at all, or None."""
    if est is None:
        return None
    if est.problem:
        return est.problem
    if not est.times or feasible(est):
        return None
    models = [get_model(m) for m in sorted(est.times)]
    if est.tasks > 1 and models:
        return _gang_problem(est, models)
    if est.mem is not None and models:
        best = max(
            ((m.profile_for_size(max(m.planner_sizes)), m) for m in models),
            key=lambda pm: pm[0].memory_bytes,
        )
        return (
            f"memory need {_gib(est.mem)} is more than the largest MIG profile offers "
            f"({best[0].name} of {best[1].name}: {_gib(best[0].memory_bytes)}); lower mem= in "
            f"the job's --comment or submit it to a partition with larger GPUs"
        )
    return "no MIG instance size can run it (every runtime estimate is inf)"


def gangs_unsupported(est: Estimate | None, algorithm: str) -> str | None:
    """Why a job of several slices cannot be planned by ``algorithm``: one that runs
    such a job on N instances of a fixed layout (as Slurm does), which the hooks cannot
    carry out (they create a gang's instances in one region); or None."""
    if est is None or est.tasks <= 1:
        return None
    try:
        on_instances = policy_info(algorithm).gangs_on_instances
    except UnknownPolicy:
        return None
    if not on_instances:
        return None
    return (
        f"tasks={est.tasks}: [planner] algorithm {algorithm} runs a job of several "
        "slices on instances of a fixed layout, which the hooks cannot create; drop "
        "tasks= from the job's --comment (one job per slice), or set a repartitioning "
        "algorithm such as adaptive"
    )


def _gang_problem(est: Estimate, models: list[GpuModel]) -> str:
    """Why a job of ``est.tasks`` instances runs on none of ``models``: no GPU holds
    that many, or each task's memory need is more than its instances get."""
    n = est.tasks
    holding = [m for m in models if region_sizes(m, n)]
    if not holding:
        most = ", ".join(f"{m.name}: at most {most_tasks(m)}" for m in models)
        return (
            f"tasks={n}: no GPU here holds {n} MIG instances ({most}); lower tasks= in "
            "the job's --comment"
        )
    best = max(
        (m.profile_for_size(max(region_sizes(m, n).values())) for m in holding),
        key=lambda p: p.memory_bytes,
    )
    if est.mem is not None and est.mem > best.memory_bytes:
        return (
            f"memory need {_gib(est.mem)} per task is more than each of {n} instances "
            f"gets (at most {best.name}: {_gib(best.memory_bytes)}); lower mem= or tasks= "
            "in the job's --comment"
        )
    return f"no region of {n} MIG instances can run it (every runtime estimate is inf)"
