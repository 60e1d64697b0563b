"""Step 5 of the cycle: instance reuse (``keep_for``/``reuse_from`` where the next job
on an instance runs on the identical one; never for a job of several slices, whose
instances its Epilog destroys) and the jobs released ahead of their slices."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence

from ...geometry import Slot, get_model
from ...slurm.assignment import Assignment
from ...slurm.jobrecord import job_sort_key
from .classify import Busy, Classified
from .inputs import CycleInput
from .slots import model_slot
from .waiting import dependency_ids

__all__ = ["AHEAD_DEPTH", "early_releases", "link_reuse", "order_key"]

# jobs released ahead in a row on a slice at most: the next job after a running one, and
# the one after it (a hand-off takes milliseconds while a cycle, woken by the Prolog,
# releases the next in time); deeper chains of short jobs would turn a queue of
# thousands into that many releases at once for nothing
AHEAD_DEPTH = 2


def _linked(a: Assignment, keep: str | None, reuse: str | None) -> Assignment:
    """``a`` with ``keep_for``/``reuse_from`` set (faster than dataclasses.replace)."""
    return Assignment(
        a.job_id,
        a.restart,
        a.node,
        a.gpu,
        a.model,
        a.profile,
        a.placement,
        a.batch,
        a.order,
        a.planned_seconds,
        a.issued,
        reuse,
        keep,
        a.plan,
        a.tasks,
    )


def order_key(a: Assignment) -> tuple[int, int, tuple[int, int, str]]:
    return (a.batch, a.order, job_sort_key(a.job_id))


def link_reuse(plans: Mapping[str, Assignment], busy: Sequence[Busy]) -> dict[str, Assignment]:
    """Step 5: set keep_for / reuse_from where the next job on a job's slices of its GPU
    runs on the identical instance (same profile and placement). A job of several
    slices neither keeps nor reuses one: it is no link, but still holds its region."""
    per_gpu: dict[tuple[str, int], list[Assignment]] = defaultdict(list)
    for a in plans.values():
        per_gpu[(a.node, a.gpu)].append(a)
    busy_on: dict[tuple[str, int], list[Busy]] = defaultdict(list)
    for b in busy:
        busy_on[(b.node, b.gpu)].append(b)
    links = _links(per_gpu, busy_on)
    out = {}
    for jid, a in plans.items():
        want = links.get(jid, {})
        keep, reuse = want.get("keep_for"), want.get("reuse_from")
        out[jid] = a if (a.keep_for, a.reuse_from) == (keep, reuse) else _linked(a, keep, reuse)
    return out


def _links(
    per_gpu: Mapping[tuple[str, int], list[Assignment]],
    busy_on: Mapping[tuple[str, int], list[Busy]],
) -> dict[str, dict[str, str]]:
    """Job id -> its ``keep_for``/``reuse_from`` on each GPU: the first plan on a
    busy job's slices reuses its identical instance, a plan keeps its instance for the
    next identical one on its slices; jobs of several slices take no part."""
    links: dict[str, dict[str, str]] = defaultdict(dict)
    for key, lst in per_gpu.items():
        lst.sort(key=order_key)
        # a busy job's instance is reused by the first held job on its slices
        for b in busy_on.get(key, []):
            nxt = next((a for a in lst if a.placement.overlaps(b.slot.placement)), None)
            if (
                nxt is not None
                and b.tasks == 1
                and nxt.tasks == 1
                and nxt.placement == b.slot.placement
                and model_slot(nxt).size == b.slot.size
            ):
                links[nxt.job_id]["reuse_from"] = b.job_id
        for i, a in enumerate(lst):
            nxt = next((c for c in lst[i + 1 :] if c.placement.overlaps(a.placement)), None)
            if (
                nxt is not None
                and a.tasks == 1
                and nxt.tasks == 1
                and nxt.placement == a.placement
                and nxt.profile == a.profile
            ):
                links[a.job_id]["keep_for"] = nxt.job_id
                links[nxt.job_id]["reuse_from"] = a.job_id
    return links


def early_releases(
    snap: CycleInput,
    view: Classified,
    final: Mapping[str, Assignment],
    released: Sequence[str],
) -> dict[str, tuple[str, ...]]:
    """Held jobs to release before their slices are free, each with the jobs it must
    wait for (Slurm's ``afterany``: satisfied once those jobs have left, their Epilog
    done, and that moment triggers Slurm's scheduler at once). A chain of jobs on a
    slice then hands over in milliseconds, without the daemon's cycle or the
    scheduler's batch delay in between.

    In plan order, a job goes ahead when every job before it on its slices is running,
    completing or released (now or ahead), and they are projected to be through within
    ``snapshot.release_ahead`` seconds (kept below the token's lifetime, so that the
    token is still valid when the job starts), and it would wait behind at most
    `AHEAD_DEPTH` - 1 other jobs released ahead. A job with a dependency of its own is
    not released ahead."""
    if snap.release_ahead <= 0:
        return {}
    now = snap.now
    # per GPU: what holds or will hold slices, in order: (slot, job, projected end);
    # per memory slice, the latest projected end of what holds it (-inf: nothing)
    holding: dict[tuple[str, int], list[tuple[Slot, str, float]]] = defaultdict(list)
    latest: dict[tuple[str, int], list[float]] = defaultdict(lambda: [-math.inf] * 8)
    for b in view.busy:
        _hold(holding, latest, (b.node, b.gpu), b.slot, b.job_id, b.end)
    depth = _depths(view)
    # the planner's own afterany, cleared this cycle, does not keep a job from going ahead
    cleared = {h.job_id for h in view.holds if h.clear_dependency}
    out: dict[str, tuple[str, ...]] = {}
    now_released = set(released)
    for jid in sorted(final, key=lambda j: order_key(final[j])):
        a = final[jid]
        key = (a.node, a.gpu)
        slot = model_slot(a)
        p = slot.placement
        last = max(latest[key][p.start : p.start + p.size])
        ready = now if last == -math.inf else last
        create = get_model(a.model).create_time(slot.size)
        if jid in now_released:
            _hold(holding, latest, key, slot, jid, max(now, ready) + create + a.planned_seconds)
            continue
        if (
            last != -math.inf
            and math.isfinite(ready)
            and (not view.jobs[jid].dependency or jid in cleared)
            and ready - now <= snap.release_ahead
        ):
            before = {h[1] for h in holding[key] if h[0].placement.overlaps(p)}
            level = 1 + max((depth.get(b, 0) for b in before), default=0)
            if level <= AHEAD_DEPTH:
                out[jid] = tuple(sorted(before, key=job_sort_key))
                depth[jid] = level
                _hold(holding, latest, key, slot, jid, ready + create + a.planned_seconds)
                continue
        _hold(holding, latest, key, slot, jid, math.inf)  # later jobs wait for this one
    return out


def _depths(view: Classified) -> dict[str, int]:
    """Each busy job's place in a chain of jobs released ahead: 0 when it runs or may
    start now, else 1 + that of the deepest job it waits for (Slurm's ``afterany``),
    counted up to `AHEAD_DEPTH` + 1."""
    busy = {b.job_id: b for b in view.busy}
    depth: dict[str, int] = {}

    def of(jid: str, level: int) -> int:
        if jid in depth:
            return depth[jid]
        b, job = busy.get(jid), view.jobs.get(jid)
        if b is None or b.started or job is None or not job.dependency:
            return depth.setdefault(jid, 0)
        if level > AHEAD_DEPTH:  # deep enough (or a cycle): no need to look further
            return AHEAD_DEPTH + 1
        got = 1 + max((of(n, level + 1) for n in dependency_ids(job.dependency)), default=0)
        depth[jid] = min(got, AHEAD_DEPTH + 1)
        return depth[jid]

    for jid in busy:
        of(jid, 0)
    return depth


def _hold(holding, latest, key, slot: Slot, jid: str, end: float) -> None:
    """Record that ``jid`` holds ``slot`` of GPU ``key`` until ``end``."""
    holding[key].append((slot, jid, end))
    ends = latest[key]
    for i in range(slot.placement.start, slot.placement.start + slot.placement.size):
        if end > ends[i]:
            ends[i] = end
