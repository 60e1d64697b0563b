"""Slots a node keeps refusing: a job requeued `REFUSALS` times in a row from the same
slot (node, GPU, placement) is not planned there again for a while.

The Prolog refuses a job whose slices hold another job's instance ("slices still in
use", e.g. a record left by a job that ended while slurmd was down) or whose instance
does not match its GRES record, and the job comes back held with its restart count one
up; the refusal's text stays on the node. So the planner counts what it sees in Slurm:
a held job whose AdminComment records an earlier run than Slurm's (`Classified.requeued`)
was requeued from that record's slot (`requeued_runs`, read by the daemon before it
plans). `Refusals` is the daemon's memory of those
requeues between cycles (like `backoff.Backoff`): after `REFUSALS` in a row from one
slot, that slot is barred for the job for a delay that doubles each time it is barred
again (`backoff.backoff_delay`). `avoid_refused` (a step of the pure cycle) then moves
a plan on a barred slot to a free slot of the same profile on a GPU of its group, or,
when there is none, drops the plan: the job waits, deferred with the reason, which
``explain`` and the status show. Never the same slot in a loop."""

from __future__ import annotations

import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from ...geometry import get_model
from ...planner.snapshot import ClusterSnapshot
from ...slurm.assignment import Assignment, plan_id
from ...slurm.jobrecord import JobLike, job_phase, job_sort_key, parse_admin_comment
from .backoff import BACKOFF_BASE, BACKOFF_MAX, backoff_delay
from .classify import Classified
from .inputs import CycleInput, SlotKey
from .slots import gang_slot, plan_slot

__all__ = [
    "REFUSALS",
    "REFUSED",
    "Refusals",
    "avoid_refused",
    "requeued_by_slurm",
    "requeued_runs",
    "slot_key",
]

REFUSALS = 2  # requeues in a row from one slot, after which the job is not planned there
REFUSED = "refused by its node"  # how a deferred reason of a barred slot starts


def slot_key(a: Assignment) -> SlotKey:
    """The (node, gpu, start, size) of an assignment's placement."""
    return (a.node, a.gpu, a.placement.start, a.placement.size)


def requeued_runs(jobs: Iterable[JobLike]) -> dict[str, Assignment]:
    """The held pending jobs requeued since their last release: job id -> the record of
    that release (its AdminComment, of an earlier run than Slurm's)."""
    out = {}
    for job in jobs:
        if not (job.held and job_phase(job.state) == "pending") or not job.admin_comment:
            continue
        a = parse_admin_comment(job.admin_comment)
        if a is not None and a.job_id == job.job_id and a.restart < job.restart_count:
            out[job.job_id] = a
    return out


def requeued_by_slurm(jobs: Iterable[JobLike]) -> dict[str, Assignment]:
    """The pending jobs not held whose AdminComment records an earlier run than Slurm's:
    Slurm requeued them itself (NODE_FAIL, preemption, ``scontrol requeue``); a hook's
    refusal requeues and holds at once. Job id -> the record of the run requeued."""
    out = {}
    for job in jobs:
        if job.held or job_phase(job.state) != "pending" or not job.admin_comment:
            continue
        a = parse_admin_comment(job.admin_comment)
        if a is not None and a.job_id == job.job_id and a.restart < job.restart_count:
            out[job.job_id] = a
    return out


@dataclass
class _Job:
    slot: SlotKey | None = None  # the slot of its last requeue
    row: int = 0  # requeues in a row from it
    counted: int = -1  # the last run whose requeue was counted
    barred: dict[SlotKey, tuple[float, int, str]] = field(default_factory=dict)  # until, n, why


class Refusals:
    """Per job: its requeues in a row from one slot, and the slots it is not planned on
    until when. Only jobs squeue still shows unfinished are kept (bounded by the queue)."""

    def __init__(
        self, limit: int = REFUSALS, base: float = BACKOFF_BASE, most: float = BACKOFF_MAX
    ) -> None:
        self.limit, self.base, self.most = max(1, limit), base, most
        self._jobs: dict[str, _Job] = {}

    def update(
        self,
        requeued: Mapping[str, Assignment],
        unfinished: Collection[str],
        now: float,
        by_slurm: Mapping[str, Assignment] | None = None,
    ) -> list[str]:
        """After a cycle: ``requeued`` (job id -> the record of the run requeued) counted
        once per run; the jobs not in ``unfinished`` forgotten. A run in ``by_slurm``
        (`requeued_by_slurm`: Slurm requeued it, e.g. its node failed) is no refusal of
        its slot and ends a row. The log lines of the slots barred now."""
        for jid, a in (by_slurm or {}).items():
            e = self._jobs.setdefault(jid, _Job())
            if a.restart > e.counted:
                e.counted, e.slot, e.row = a.restart, None, 0
        self._jobs = {j: e for j, e in self._jobs.items() if j in unfinished}
        lines = []
        for jid, a in sorted(requeued.items(), key=lambda x: job_sort_key(x[0])):
            e = self._jobs.setdefault(jid, _Job())
            if a.restart <= e.counted:
                continue
            key = slot_key(a)
            e.counted = a.restart
            e.row = e.row + 1 if e.slot == key else 1
            e.slot = key
            if e.row < self.limit:
                continue
            times = e.barred[key][1] + 1 if key in e.barred else 1
            until = now + backoff_delay(times, self.base, self.most)
            why = (
                f"{REFUSED} {e.row} times in a row on {a.node} gpu {a.gpu} "
                f"{a.profile}@{a.placement.start} (requeued from there: its Prolog found "
                f"the slices still in use or a GRES mismatch, or it was requeued by hand); "
                f"not planned there until {_clock(until)}"
            )
            e.barred[key] = (until, times, why)
            lines.append(f"job {jid}: {why}")
        return lines

    def avoid(self, now: float) -> dict[str, dict[SlotKey, str]]:
        """The slots barred at ``now``: job id -> {slot: why}."""
        out = {}
        for jid, e in self._jobs.items():
            got = {k: why for k, (until, _, why) in e.barred.items() if now < until}
            if got:
                out[jid] = got
        return out


def avoid_refused(
    snap: CycleInput,
    view: Classified,
    groups: Sequence[ClusterSnapshot],
    planned: Mapping[str, Assignment],
    released: Sequence[str],
) -> tuple[dict[str, Assignment], list[str]]:
    """A plan on a slot barred for its job (``snap.refused``) moves to a free slot of the
    same profile (no busy job, no other plan overlaps it) on a GPU of its group, its own
    GPU first; with none, it is dropped and the job deferred with the reason."""
    out = dict(planned)
    if not snap.refused:
        return out, list(released)
    dropped = set()
    for jid in sorted(planned, key=job_sort_key):
        a, barred = out[jid], snap.refused.get(jid, {})
        if slot_key(a) not in barred:
            continue
        alt = _free_slot(view, _group_of(groups, a), out, a, barred)
        if alt is not None:
            out[jid] = alt
            continue
        del out[jid]
        dropped.add(jid)
        view.deferred[jid] = f"{barred[slot_key(a)]}; no other free {a.profile} slot now"
    return out, [j for j in released if j not in dropped]


def _group_of(groups: Sequence[ClusterSnapshot], a: Assignment) -> list[tuple[str, int]]:
    """The GPUs, as (node, gpu), of the planning group that holds ``a``'s GPU."""
    for g in groups:
        keys = [(gpu.node, gpu.local) for gpu in g.gpus]
        if (a.node, a.gpu) in keys:
            return keys
    return [(a.node, a.gpu)]


def _free_slot(
    view: Classified,
    gpus: list[tuple[str, int]],
    plans: Mapping[str, Assignment],
    a: Assignment,
    barred: Mapping[SlotKey, str],
) -> Assignment | None:
    """``a`` moved to the first free, legal, not barred placement of its profile."""
    try:
        model = get_model(a.model)
        slot = plan_slot(a)  # a job of several slices moves with its region
        prof = model.profile_for_slot(slot) if slot is not None else model.profile(a.profile)
        placements = prof.placements
    except Exception:  # a profile the model lacks: nowhere else
        return None
    gpus = sorted(gpus, key=lambda k: k != (a.node, a.gpu))
    for node, gpu in gpus:
        if view.models.get((node, gpu)) != a.model:
            continue
        taken = [b.slot.placement for b in view.busy if (b.node, b.gpu) == (node, gpu)]
        taken += [
            p.placement
            for j, p in plans.items()
            if j != a.job_id and (p.node, p.gpu) == (node, gpu)
        ]
        for pl in placements:
            if (node, gpu, pl.start, pl.size) in barred or any(pl.overlaps(t) for t in taken):
                continue
            if gang_slot(a.model, a.profile, pl, a.tasks) is None:
                continue
            moved = replace(a, node=node, gpu=gpu, placement=pl, keep_for=None, reuse_from=None)
            return replace(moved, plan=plan_id(moved))
    return None


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))
