"""Step 6 of the cycle: the `CycleResult`: what to release (with the record fields that
changed), hold, note, learn and requeue, and what the plan looks like."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from types import MappingProxyType

from ...planner.decisions import Decisions, Place
from ...planner.driver import projected_end
from ...planner.snapshot import ClusterSnapshot, Planned
from .. import comment as comments
from ..assignment import Assignment
from ..jobrecord import job_sort_key, record_fields
from .actions import Action, CycleResult, Release, Requeue
from .classify import Classified
from .inputs import Snapshot
from .reuse import order_key

__all__ = ["cycle_result"]


def cycle_result(
    snap: Snapshot,
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
    releases = []
    # the jobs that start now first, then those released ahead in plan order: a job's
    # predecessors on its slices always go out before it (a cut apply never leaves a
    # job released ahead of one still held)
    now_first = sorted(released, key=job_sort_key)
    for jid in [*now_first, *sorted(ahead, key=lambda j: order_key(final[j]))]:
        a, job = final[jid], view.jobs[jid]
        user = comments.parse(job.comment).with_token(None).with_note(None)
        releases.append(Release(jid, a, user.render(), ahead.get(jid, ()), record_fields(job, a)))
    stats = [d.stats for d in decisions]
    batches = sorted({b for a in final.values() for b in [a.batch] if b > view.max_batch})
    why = tuple(dict.fromkeys(w for s in stats for w in s.get("replanned", ())))
    waiting = sum(int(s.get("waiting", 0)) for s in stats) + view.no_gpu + view.beyond
    actions: tuple[Action, ...] = (
        *view.holds,
        *view.notes,
        *releases,
        *requeues,
        *view.learns,
    )
    return CycleResult(
        actions=actions,
        planned=MappingProxyType({j: final[j] for j in sorted(final, key=job_sort_key)}),
        released=tuple(sorted([*released, *ahead], key=job_sort_key)),
        batches=tuple(batches),
        replanned=why,
        busy=len(view.busy) + len(released) + len(ahead),
        waiting=waiting,
        beyond=view.beyond,
        noted=view.noted,
        makespan=_makespan(groups, decisions),
        nodes=_seen_nodes(snap, view, bool(why)),
        deferred=MappingProxyType(dict(view.deferred)),
        snapshots=tuple(groups),
        decisions=tuple(decisions),
    )


def _seen_nodes(snap: Snapshot, view: Classified, replanned: bool) -> frozenset[str]:
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
