"""Upsizing: a restartable job that runs past its estimate on a small slice moves to a
whole GPU that would otherwise idle (option ``upsize`` of ``adaptive``).

Why: a policy that knows only learned runtimes puts a job on a small slice because its
kind's earlier runs were short; when this run proves long, it runs hours there while
whole GPUs idle (MISO's trace: runs of one kind differ 13-fold at the median). A
restartable job (``mig:restartable=yes``: it checkpoints, and may be requeued) can
move; MIG has no live migration, so the daemon requeues it and it starts again from
its checkpoint (the simulator keeps its progress and charges the restart).

A job moves only when nothing waits (every waiting job was placed in this decision
and no standing plan holds a GPU), leaving idle the whole GPUs that the arrivals are
expected to fill (`reserve_gpus`), after it has run past the seconds it was planned
for on its size and at least ``min_run`` seconds, onto a GPU with no job and nothing
this decision does. Its estimate's curve is not asked whether the whole GPU is faster:
the run just proved its estimate wrong, and a whole GPU is never slower than a slice
of it (the learned curves of MISO's kinds, from runs of different lengths, are often
flat: asking them kept most of the loss, README "Restartable jobs move up"). The longest-running jobs
move first, one per idle GPU.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from .decisions import Destroy, Move, Op, Place
from .gpu_timeline import slot_table
from .snapshot import ClusterSnapshot, Gpu, Running

__all__ = ["next_upsize", "reserve_gpus", "upsizes"]


def upsizes(
    snap: ClusterSnapshot, ops: Sequence[Op], min_run: float, reserve: int = 0
) -> tuple[Op, ...]:
    """The operations (destroys, then the move) that upsize overrunning restartable
    jobs onto whole GPUs left idle by ``ops`` (module doc), leaving ``reserve`` of them
    idle; () when a job waits."""
    placed = {op.job for op in ops if isinstance(op, Place)}
    if snap.planned or any(j not in placed for j in snap.pending):
        return ()
    idle = _idle_gpus(snap, ops)
    targets = idle[: max(0, len(idle) - reserve)]
    if not targets:
        return ()
    full = max(snap.model.planner_sizes)
    whole = slot_table(snap.model).by_size[full][0][0]
    movers = []
    for jid, run in snap.running.items():
        due = _due(run, full, min_run)
        if due is not None and due <= snap.now:
            movers.append((run.started, jid, run.gpu))
    movers.sort()
    out: list[Op] = []
    for (_, jid, src), gpu in zip(movers, targets):
        out.extend(Destroy(gpu.index, inst.slot) for inst in gpu.instances)
        out.append(Move(jid, src, gpu.index, whole))
    return tuple(out)


def reserve_gpus(snap: ClusterSnapshot, rate: float, typical: float) -> int:
    """Whole GPUs to leave idle for the jobs expected to arrive: by Little's law the
    arrivals keep ``rate`` x ``typical`` runtime jobs running, at the running jobs'
    mean size; what that needs beyond the slices busy now, in whole GPUs."""
    runs = snap.running.values()
    if not runs:
        return 0
    busy = sum(r.slot.size for r in runs)
    expected = rate * typical * busy / len(runs)
    return max(0, math.ceil((expected - busy) / max(snap.model.planner_sizes)))


def next_upsize(snap: ClusterSnapshot, min_run: float) -> float | None:
    """When the next running job becomes one that may move (None: none will), so that
    a policy asks to decide again then even if nothing else happens."""
    full = max(snap.model.planner_sizes)
    dues = (_due(run, full, min_run) for run in snap.running.values())
    return min((d for d in dues if d is not None and d > snap.now), default=None)


def _due(run: Running, full: int, min_run: float) -> float | None:
    """From when ``run`` may move: past the seconds planned on its size and
    ``min_run``; None when it never may (not restartable, several slices, not started,
    already whole, or it cannot run on a whole GPU)."""
    job, size = run.job, run.slot.size
    if run.started is None or not job.restartable or job.tasks > 1 or size >= full:
        return None
    known = any(t < math.inf for t in job.times.values())  # the daemon's: none known
    if known and not job.times.get(full, 0.0) < math.inf:  # it cannot run there
        return None
    return run.started + max(run.planned_seconds, min_run)


def _idle_gpus(snap: ClusterSnapshot, ops: Sequence[Op]) -> list[Gpu]:
    """GPUs with no job, none kept for one, and nothing this decision does there."""
    touched = {op.dst if isinstance(op, Move) else op.gpu for op in ops}
    return [
        g
        for g in snap.gpus
        if g.index not in touched
        and g.busy_mask == 0
        and not any(i.job is not None or i.keep_for for i in g.instances)
    ]
