"""MIGM's partition manager and its two schedulers (Section 4.2-4.3 of "MIGM: memory
prediction and a partition manager for MIG").

The partition state of a GPU is the set of its live instances. Its *future
configuration reachability* is the number of full configurations
(``geometry.valid_partitions``, 19 on the A100) that still contain it, i.e. that further
allocations can reach. It is precomputed per model for every valid state (Algorithm 2;
``reachability_table``) and a new partition goes where the successor state keeps the
most (Algorithm 3; ``best_slot``). On an empty A100 a 1g goes to the last slice: 12
full configurations keep a 1g there, 6 keep one on any other slice.

Schedulers (online policies):
  migm-b  Scheme B, in order: the head of the queue takes an idle partition of its
          tight size, else a new one in free space, else one made by destroying
          (merging/splitting) idle partitions, each the most reachable; if none,
          everything waits for it (FIFO, no overtaking).
  migm-a  Scheme A, by size: a GPU with nothing running starts a phase for the
          smallest size class pending: it creates as many partitions of that class as
          fit (each the most reachable), claims its share of those jobs and deals them
          round-robin to the partitions, which run their queues one job after another
          ("multi-threaded", equal division). Idle partitions of a phase take later
          jobs of the class; the GPU is repartitioned only when all of them finished.
          The partitions' queues are standing plans (``Decisions.planned``): the
          executor keeps them and hands them back in the next snapshot, so a phase is
          read from the snapshot (its running and planned jobs), never remembered.
A job's tight size: its requested size, else the sizes of the least memory it fits
(on the A100 a 20 GB job fits 3g.20gb and 4g.20gb; the more reachable placement
wins, the larger compute on a tie: 3g at 4, then 4g at 0 - the 4/7 + 3/7 split of the
paper's Ml3 corner case).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache, partial
from types import MappingProxyType

from ..geometry import GpuModel, Slot, get_model, planner_slots, slot_mask, valid_partitions
from .baseline import busy_instance
from .decisions import Create, Decisions, Destroy, Op, Place
from .snapshot import ClusterSnapshot, Gpu, Job, Planned, runnable_sizes

__all__ = [
    "MigmPolicy",
    "best_slot",
    "reachability",
    "reachability_table",
    "slot_reachability",
    "tight_sizes",
]


@dataclass(frozen=True)
class _Tables:
    slots: tuple[Slot, ...]
    index: dict[Slot, int]
    masks: tuple[int, ...]  # memory-slice mask of each slot
    configs: tuple[int, ...]  # full configurations as bitsets over slot numbers
    reach: dict[int, int]  # valid state (bitset over slots) -> reachable full configs


@cache
def _tables(model_name: str) -> _Tables:
    model = get_model(model_name)
    slots = tuple(sorted(planner_slots(model), key=lambda s: (s.placement.start, s.size)))
    index = {s: i for i, s in enumerate(slots)}
    masks = tuple(slot_mask(s) for s in slots)
    configs = []
    for part in valid_partitions(model.name):
        bits = 0
        for s in part:
            bits |= 1 << index[s]
        configs.append(bits)
    # Algorithm 2: every valid state is a subset of a full configuration; count the
    # full configurations each one is a subset of.
    states: set[int] = set()
    for c in configs:
        members = [1 << i for i in range(len(slots)) if c >> i & 1]
        subs = [0]
        for b in members:
            subs += [x | b for x in subs]
        states.update(subs)
    reach = {st: sum(1 for c in configs if c & st == st) for st in states}
    return _Tables(slots, index, masks, tuple(configs), reach)


def reachability_table(model: GpuModel) -> dict[frozenset[Slot], int]:
    """Every valid partition state of ``model`` -> its future configuration reachability."""
    t = _tables(model.name)
    return {
        frozenset(t.slots[i] for i in range(len(t.slots)) if st >> i & 1): n
        for st, n in t.reach.items()
    }


def _bits(t: _Tables, slots: Iterable[Slot]) -> int | None:
    bits = 0
    for s in slots:
        i = t.index.get(s)
        if i is None:
            return None
        bits |= 1 << i
    return bits


def reachability(model: GpuModel, state: Iterable[Slot]) -> int:
    """Full configurations still reachable from the partition ``state`` (0: invalid)."""
    t = _tables(model.name)
    bits = _bits(t, state)
    return 0 if bits is None else t.reach.get(bits, 0)


def slot_reachability(model: GpuModel, state: Iterable[Slot], size: int) -> dict[Slot, int]:
    """For each free slot of ``size``: the reachability after placing it there."""
    t = _tables(model.name)
    base = _bits(t, state)
    if base is None:
        return {}
    held = 0
    for i in range(len(t.slots)):
        if base >> i & 1:
            held |= t.masks[i]
    out = {}
    for i, s in enumerate(t.slots):
        if s.size == size and not t.masks[i] & held:
            out[s] = t.reach.get(base | 1 << i, 0)
    return out


def best_slot(
    model: GpuModel, state: Iterable[Slot], sizes: Sequence[int], blocked: int | None = None
) -> tuple[Slot, int] | None:
    """Algorithm 3: the slot of one of ``sizes`` free in ``state`` (and of the memory
    slices ``blocked``) whose successor state is the most reachable; ties go to the
    larger compute, then the lower placement. None if no such slot is free."""
    t = _tables(model.name)
    state = tuple(state)
    base = _bits(t, state)
    if base is None:
        return None
    held = 0
    for i in range(len(t.slots)):
        if base >> i & 1:
            held |= t.masks[i]
    if blocked is not None:
        held |= blocked
    best = None
    for i, s in enumerate(t.slots):
        if s.size not in sizes or t.masks[i] & held:
            continue
        n = t.reach.get(base | 1 << i, 0)
        key = (-n, -s.size, s.placement.start)
        if best is None or key < best[0]:
            best = (key, s, n)
    return None if best is None else (best[1], best[2])


def tight_sizes(job: Job, model: GpuModel) -> tuple[int, ...]:
    """The job's requested size, else the sizes with the least memory it runs on."""
    if job.size is not None:
        return (job.size,)
    sizes = runnable_sizes(job, model)
    mslices = {s: model.profile_for_size(s).memory_slices for s in sizes}
    least = min(mslices.values())
    return tuple(sorted((s for s in sizes if mslices[s] == least), reverse=True))


# ---------------------------------------------------------------------------
# The policies


class MigmPolicy:
    """MIGM scheme A (``by_size``) or scheme B (in order) on every GPU of a cluster.
    Counters: ``reconfigurations`` (partitions destroyed), ``phases`` (scheme A)."""

    kind = "online"

    def __init__(self, name: str = "migm-b", *, by_size: bool = False) -> None:
        self.name = name
        self.by_size = bool(by_size)
        self.reconfigurations = 0
        self.phases = 0
        self._key: dict[str, tuple[int, ...]] = {}

    def _sizes(self, job: Job, model: GpuModel) -> tuple[int, ...]:
        k = self._key.get(job.id)
        if k is None:
            k = self._key[job.id] = tight_sizes(job, model)
        return k

    def decide(self, snap: ClusterSnapshot) -> Decisions:
        for job, _ in snap.finished:
            self._key.pop(job, None)
        if self.by_size:
            ops, planned = self._scheme_a(snap)
            return Decisions(tuple(ops), MappingProxyType(planned))
        return Decisions(tuple(self._scheme_b(snap)))

    # -- scheme B ------------------------------------------------------------

    def _scheme_b(self, snap: ClusterSnapshot) -> Iterator[Op]:
        model = snap.model
        t = _tables(model.name)
        gpus: dict[int, Gpu] = {}
        summaries = [(k, _summary(t, g)) for k, g in enumerate(snap.gpus)]
        for job in list(snap.pending.values()):
            sizes = self._sizes(job, model)
            pick = _place(summaries, sizes, model)
            if pick is None:
                return  # FIFO: the rest waits for the head
            k, slot, destroy = pick
            for sl in destroy:
                yield Destroy(k, sl)
                self.reconfigurations += 1
            yield Place(job.id, k, slot, snap.now)
            g = gpus.get(k, snap.gpus[k]).placed(busy_instance(slot, job))
            gpus[k] = g
            summaries[k] = (k, _summary(t, g))

    # -- scheme A ------------------------------------------------------------

    def _scheme_a(self, snap: ClusterSnapshot) -> tuple[list[Op], dict[str, Planned]]:
        model = snap.model
        now = snap.now
        pending = snap.pending
        ops: list[Op] = []
        planned: dict[str, Planned] = {j: p for j, p in snap.planned.items() if j in pending}
        # phases from the snapshot: a GPU is in one while it runs or has planned jobs
        queues: dict[int, dict[Slot, list[Planned]]] = {}
        for p in sorted(planned.values(), key=lambda p: (p.gpu, p.order)):
            queues.setdefault(p.gpu, {}).setdefault(p.slot, []).append(p)
        phase_key: dict[int, tuple[int, ...]] = {}
        for k, g in enumerate(snap.gpus):
            member = next((i.job for i in g.instances if i.job is not None), None)
            if member is None and k in queues:
                member = next(iter(queues[k].values()))[0].job
            if member is not None:
                try:
                    phase_key[k] = self._sizes(snap.job(member), model)
                except KeyError:  # a job the snapshot does not describe: leave the GPU be
                    phase_key[k] = ()
        claimed = set(planned)
        # 1. active phases: idle partitions run their next job, else pull one of the class
        for k in sorted(phase_key):
            key = phase_key[k]
            if not key:
                continue
            g = snap.gpus[k]
            busy = {inst.slot for inst in g.instances if inst.job is not None}
            for slot in _fill(model, key):
                if slot in busy:
                    continue
                q = queues.get(k, {}).get(slot, [])
                nxt = q[0].job if q else self._pull(pending, claimed, key, model)
                if nxt is None:
                    continue
                if q:
                    planned.pop(nxt, None)
                claimed.add(nxt)
                ops.append(Place(nxt, k, slot, now))
        # 2. GPUs with nothing running or planned start a phase for the smallest class
        free = [k for k in range(len(snap.gpus)) if k not in phase_key]
        while free:
            by_class: dict[tuple[int, ...], list[str]] = {}
            for jid, job in pending.items():
                if jid not in claimed:
                    by_class.setdefault(self._sizes(job, model), []).append(jid)
            if not by_class:
                break
            key = min(by_class, key=lambda c: (model.profile_for_size(c[0]).memory_slices, c))
            jobs = by_class[key]
            k = free.pop(0)
            g = snap.gpus[k]
            parts = _fill(model, key)
            keep = set(parts)
            for inst in g.instances:
                if inst.slot not in keep:
                    ops.append(Destroy(k, inst.slot))
                    self.reconfigurations += 1
            share = max(len(parts), math.ceil(len(jobs) / (len(free) + 1)))
            claim = jobs[:share]
            deal: dict[Slot, list[str]] = {s: [] for s in parts}
            for i, jid in enumerate(claim):
                deal[parts[i % len(parts)]].append(jid)
                claimed.add(jid)
            order = 0
            for s in parts:
                q = deal[s]
                if q:
                    ops.append(Place(q[0], k, s, now))
                    for jid in q[1:]:
                        order += 1
                        planned[jid] = Planned(jid, k, s, 0, order, 0.0, now)
                elif g.instance(s) is None:
                    ops.append(Create(k, s))
            self.phases += 1
        return ops, planned

    def _pull(
        self, pending: Mapping[str, Job], claimed: set[str], key: tuple[int, ...], model: GpuModel
    ) -> str | None:
        for jid, job in pending.items():
            if jid not in claimed and self._sizes(job, model) == key:
                return jid
        return None


def _fill(model: GpuModel, sizes: tuple[int, ...]) -> list[Slot]:
    """Partitions of ``sizes`` allocated one by one on an empty GPU until none fits,
    each where the partition manager puts it (most reachable)."""
    state: list[Slot] = []
    while True:
        got = best_slot(model, state, sizes)
        if got is None:
            return state
        state.append(got[0])


def _summary(t: _Tables, gv: Gpu) -> tuple[int, int, int, int]:
    """(idle slots, busy slots) as bitsets over slot numbers, (held, busy) memory masks."""
    idle = busy = 0
    for inst in gv.instances:
        i = t.index[inst.slot]
        if inst.job is None:
            idle |= 1 << i
        else:
            busy |= 1 << i
    return idle, busy, gv.held_mask, gv.busy_mask


def _place(summaries, sizes: tuple[int, ...], model: GpuModel):
    """Scheme B's search, each step over every GPU: an idle tight partition; a new one
    in free space (most reachable); one made by destroying the idle partitions in its
    way (most reachable, then fewest destroyed). ``summaries``: (gpu, _summary)."""
    t = _tables(model.name)
    cands = [i for i, s in enumerate(t.slots) if s.size in sizes]
    for k, (idle, _, _, _) in summaries:
        for i in cands:
            if idle >> i & 1:
                return k, t.slots[i], ()
    best = None
    for k, (idle, busy, held, _) in summaries:
        live = idle | busy
        for i in cands:
            if not t.masks[i] & held:
                key = (
                    -t.reach.get(live | 1 << i, 0),
                    k,
                    -t.slots[i].size,
                    t.slots[i].placement.start,
                )
                if best is None or key < best[0]:
                    best = (key, k, t.slots[i], ())
    if best is not None:
        return best[1], best[2], best[3]
    n_slots = len(t.slots)
    for k, (idle, busy, _, busy_mask) in summaries:
        if not idle:
            continue
        for i in cands:
            m = t.masks[i]
            if m & busy_mask:
                continue
            gone = 0
            for j in range(n_slots):
                if idle >> j & 1 and t.masks[j] & m:
                    gone |= 1 << j
            state = ((idle & ~gone) | busy) | 1 << i
            key = (-t.reach.get(state, 0), gone.bit_count(), k, t.slots[i].placement.start)
            if best is None or key < best[0]:
                destroy = tuple(t.slots[j] for j in range(n_slots) if gone >> j & 1)
                best = (key, k, t.slots[i], destroy)
    if best is None:
        return None
    return best[1], best[2], best[3]


POLICIES = {
    "migm-a": partial(MigmPolicy, "migm-a", by_size=True),
    "migm-b": partial(MigmPolicy, "migm-b", by_size=False),
}
