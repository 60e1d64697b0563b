"""Step 6 of the cycle: the `CycleResult`: what to release (with the record fields that
changed), hold, note, learn and requeue, and what the plan looks like."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from types import MappingProxyType

from ... import jobcomment as comments
from ...planner.decisions import Decisions, Place
from ...planner.driver import projected_end
from ...planner.snapshot import ClusterSnapshot, Planned
from ...slurm.assignment import Assignment
from ...slurm.jobrecord import JobLike, job_sort_key, parse_admin_comment, record_fields
from .actions import Action, CycleResult, Release, Requeue, held_again
from .classify import Classified
from .inputs import CycleInput
from .reuse import order_key

__all__ = ["cycle_result", "in_place_order"]


def cycle_result(
    snap: CycleInput,
    view: Classified,
    groups: Sequence[ClusterSnapshot],
    decisions: Sequence[Decisions],
    final: Mapping[str, Assignment],
    released: Sequence[str],
    requeues: Sequence[Requeue],
    ahead: Mapping[str, tuple[str, ...]] = MappingProxyType({}),
) -> CycleResult:
    """Step 6: what to release (with the records that changed), learn and requeue.
    Standing plans of held jobs are not written to Slurm: they stay in the daemon's
    state (`CycleResult.planned`) until their job is released."""
    holding = {h.job_id: h for h in view.holds}
    # the jobs that start now first, then those released ahead in plan order: a job's
    # predecessors on its slices always go out before it (a cut apply never leaves a
    # job released ahead of one still held, bar one re-planned in place)
    order = [*sorted(released, key=job_sort_key), *sorted(ahead, key=lambda j: order_key(final[j]))]
    # a job not held that is held now goes out again in this cycle only if Slurm cannot
    # start it before its update lands (`Classified.gated`); any other is released from
    # the held state of a later cycle, as are the jobs released ahead of it
    later = {j for j in order if j in holding and not view.jobs[j].held and j not in view.gated}
    for jid in order:
        if later.intersection(ahead.get(jid, ())):
            later.add(jid)
    order = [j for j in order if j not in later]
    moved = in_place_order([j for j in order if j in holding], view.jobs, final)
    releases = []
    for jid in [*moved, *(j for j in order if j not in moved)]:
        a, job = final[jid], view.jobs[jid]
        user = comments.parse(job.comment).with_token(None).with_note(None)
        after = ahead.get(jid, ())
        fields = record_fields(job, a)
        reason = ""
        if jid in moved:
            reason = holding[jid].reason
            if holding[jid].clear_dependency and not after:
                fields += (("Dependency", "0"),)  # "0": Slurm's word for none
        releases.append(Release(jid, a, user.render(), after, fields, reason))
    holds = [held_again(h, view.jobs[h.job_id]) for h in view.holds if h.job_id not in moved]
    stats = [d.stats for d in decisions]
    batches = sorted({b for a in final.values() for b in [a.batch] if b > view.max_batch})
    why = tuple(dict.fromkeys(w for s in stats for w in s.get("replanned", ())))
    waiting = sum(int(s.get("waiting", 0)) for s in stats) + view.no_gpu + view.beyond
    actions: tuple[Action, ...] = (
        *holds,
        *view.notes,
        *releases,
        *requeues,
        *view.learns,
    )
    return CycleResult(
        actions=actions,
        planned=MappingProxyType({j: final[j] for j in sorted(final, key=job_sort_key)}),
        released=tuple(sorted(order, key=job_sort_key)),
        batches=tuple(batches),
        replanned=why,
        busy=len(view.busy) + len(order),
        waiting=waiting,
        beyond=view.beyond,
        noted=view.noted,
        makespan=_makespan(groups, decisions),
        nodes=_seen_nodes(snap, view, bool(why)),
        deferred=MappingProxyType(dict(view.deferred)),
        priority=MappingProxyType(dict(view.priority)),
        limited=MappingProxyType(dict(view.limited)),
        throttles=MappingProxyType(dict(view.throttles)),
        stale=MappingProxyType(dict(view.stale)),
        snapshots=tuple(groups),
        decisions=tuple(decisions),
    )


def in_place_order(
    candidates: Sequence[str], jobs: Mapping[str, JobLike], final: Mapping[str, Assignment]
) -> list[str]:
    """Of the jobs to hold and release in the same cycle (``candidates``), those that
    take their new plan (``final``) in one update instead, in the order to write them.
    Such a job is pending and not held; until its update its old plan holds, as it
    would until a hold, and these updates go before any release of the cycle. A job
    goes after each one whose old plan overlaps its new one, so that every prefix of
    the updates keeps Slurm's view free of overlaps (a daemon stopped mid-way); jobs
    that would wait on each other in a ring are held and released instead."""
    moving = [j for j in candidates if not jobs[j].held]
    old: dict[str, Assignment] = {}
    for jid in moving:
        b = parse_admin_comment(jobs[jid].admin_comment)
        if b is not None and b.restart == jobs[jid].restart_count:
            old[jid] = b  # a plan for an earlier run claims nothing: the Prolog refuses it
    before: dict[str, set[str]] = {}
    for jid in moving:
        a = final[jid]
        before[jid] = {
            o
            for o, b in old.items()
            if o != jid and (b.node, b.gpu) == (a.node, a.gpu) and b.placement.overlaps(a.placement)
        }
    out: list[str] = []
    done: set[str] = set()
    while True:
        ready = [j for j in moving if j not in done and before[j] <= done]
        if not ready:
            return out
        out += ready
        done.update(ready)


def _seen_nodes(snap: CycleInput, view: Classified, replanned: bool) -> frozenset[str]:
    """The usable nodes to compare the next cycle with: a change of them counts as seen
    once the standing plans were made again, or when none was left to move."""
    nodes = frozenset(snap.nodes)
    if snap.previous_nodes is None or not view.kept or replanned:
        return nodes
    return snap.previous_nodes


def _makespan(groups: Sequence[ClusterSnapshot], decisions: Sequence[Decisions]) -> float:
    """Seconds from now until every busy and planned job is projected to end."""
    ms = 0.0
    for snap, got in zip(groups, decisions):
        plans = list(got.planned.values()) + [
            Planned(p.job, p.gpu, p.slot, p.batch, p.order, p.end - p.start, snap.now)
            for p in got.ops
            if type(p) is Place and math.isfinite(p.end - p.start)
        ]
        end = projected_end(snap, plans)
        if math.isfinite(end):
            ms = max(ms, end - snap.now)
    return ms
