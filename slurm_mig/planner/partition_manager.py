"""MIGM's partition manager and its two schedulers (Section 4.2-4.3 of "MIGM: memory
prediction and a partition manager for MIG").

The partition state of a GPU is the set of its live instances. Its *future
configuration reachability* is the number of full configurations
(``geometry.valid_partitions``, 19 on the A100) that still contain it, i.e. that further
allocations can reach. It is precomputed per model for every valid state (Algorithm 2;
``reachability_table``) and a new partition goes where the successor state keeps the
most (Algorithm 3; ``best_slot``). On an empty A100 a 1g goes to the last slice: 12
full configurations keep a 1g there, 6 keep one on any other slice.

Schedulers (simulator policies):
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
A job's tight size: its requested size, else the sizes of the least memory it fits
(on the A100 a 20 GB job fits 3g.20gb and 4g.20gb; the more reachable placement
wins, the larger compute on a tie: 3g at 4, then 4g at 0 - the 4/7 + 3/7 split of the
paper's Ml3 corner case).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache

from ..geometry import GpuModel, Slot, get_model, planner_slots, valid_partitions

__all__ = [
    "MigmPolicy",
    "best_slot",
    "make_policy",
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
    masks = tuple(((1 << s.placement.size) - 1) << s.placement.start for s in slots)
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


def tight_sizes(job, model: GpuModel) -> tuple[int, ...]:
    """The job's requested size, else the sizes with the least memory it runs on."""
    from ..sim.cluster import runnable_sizes

    if job.size is not None:
        return (job.size,)
    sizes = runnable_sizes(job, model)
    mslices = {s: model.profile_for_size(s).memory_slices for s in sizes}
    least = min(mslices.values())
    return tuple(sorted((s for s in sizes if mslices[s] == least), reverse=True))


# ---------------------------------------------------------------------------
# The simulator policies


def _mask(slot: Slot) -> int:
    return ((1 << slot.placement.size) - 1) << slot.placement.start


class MigmPolicy:
    """MIGM scheme A (``by_size``) or scheme B (in order) on every GPU of a cluster.
    Counters: ``reconfigurations`` (partitions destroyed), ``phases`` (scheme A)."""

    def __init__(self, name: str = "migm-b", *, by_size: bool = False) -> None:
        self.name = name
        self.by_size = bool(by_size)
        self.reconfigurations = 0
        self.phases = 0
        self._key: dict[str, tuple[int, ...]] = {}
        # scheme A: per GPU, the phase's class and each partition's queue
        self._phase: dict[int, tuple[tuple[int, ...], dict[Slot, deque[str]]]] = {}
        self._claimed: set[str] = set()
        self._summaries: dict[int, tuple[int, int, int, int]] = {}

    def _sizes(self, job, model: GpuModel) -> tuple[int, ...]:
        k = self._key.get(job.id)
        if k is None:
            k = self._key[job.id] = tight_sizes(job, model)
        return k

    def decide(self, view) -> Iterator:
        for job in view.finished:
            self._key.pop(job, None)
        if self.by_size:
            yield from self._scheme_a(view)
        else:
            yield from self._scheme_b(view)

    # -- scheme B ------------------------------------------------------------

    def _scheme_b(self, view) -> Iterator:
        from ..sim.api import Destroy, Start

        model = view.model
        t = _tables(model.name)
        gpus = view.gpus
        cache = self._summaries
        for k in view.changed:
            cache.pop(k, None)
        for job in list(view.pending.values()):
            sizes = self._sizes(job, model)
            summaries = []
            for k in range(len(gpus)):
                got = cache.get(k)
                if got is None:
                    got = cache[k] = _summary(t, gpus[k])
                summaries.append((k, got))
            pick = _place(summaries, sizes, model)
            if pick is None:
                return  # FIFO: the rest waits for the head
            k, slot, destroy = pick
            for s in destroy:
                yield Destroy(k, s)
                self.reconfigurations += 1
            yield Start(job.id, k, slot)
            cache.pop(k, None)

    # -- scheme A ------------------------------------------------------------

    def _scheme_a(self, view) -> Iterator:
        from ..sim.api import Create, Destroy, Start

        model = view.model
        gpus = view.gpus
        pending = view.pending
        # 1. active phases: partitions that are idle run their next job (only GPUs
        # that changed, or, for a class with new arrivals, every GPU in that class)
        fresh = {self._sizes(j, model) for j in view.arrived}
        changed = view.changed
        for k in sorted(self._phase):
            key, queues = self._phase[k]
            if k not in changed and key not in fresh:
                continue
            busy = {inst.slot for inst in gpus[k].instances if inst.job is not None}
            running = False
            for slot, q in queues.items():
                if slot in busy:
                    running = True
                    continue
                while q and q[0] not in pending:
                    q.popleft()
                nxt = q.popleft() if q else self._pull(pending, key, model)
                if nxt is not None:
                    yield Start(nxt, k, slot)
                    running = True
            if not running:
                del self._phase[k]
        # 2. GPUs with nothing running start a phase for the smallest class pending
        free = [k for k in range(len(gpus)) if k not in self._phase and not gpus[k].busy_mask]
        while free:
            by_class: dict[tuple[int, ...], list[str]] = {}
            for jid, job in pending.items():
                if jid not in self._claimed:
                    by_class.setdefault(self._sizes(job, model), []).append(jid)
            if not by_class:
                return
            key = min(by_class, key=lambda c: (model.profile_for_size(c[0]).memory_slices, c))
            jobs = by_class[key]
            k = free.pop(0)
            gv = gpus[k]
            parts = _fill(model, key)
            keep = set(parts)
            for inst in gv.instances:
                if inst.slot not in keep:
                    yield Destroy(k, inst.slot)
                    self.reconfigurations += 1
            share = max(len(parts), math.ceil(len(jobs) / (len(free) + 1)))
            claim = jobs[:share]
            queues = {s: deque() for s in parts}
            for i, jid in enumerate(claim):
                queues[parts[i % len(parts)]].append(jid)
                self._claimed.add(jid)
            for s in parts:
                q = queues[s]
                if q:
                    yield Start(q.popleft(), k, s)
                elif gv.instance(s) is None:
                    yield Create(k, s)
            self._phase[k] = (key, queues)
            self.phases += 1

    def _pull(self, pending, key: tuple[int, ...], model: GpuModel) -> str | None:
        for jid, job in pending.items():
            if jid not in self._claimed and self._sizes(job, model) == key:
                self._claimed.add(jid)
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


def _summary(t: _Tables, gv) -> tuple[int, int, int, int]:
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


def make_policy(name: str, **options) -> MigmPolicy:
    """Registry hook of ``slurm_mig.sim.policies``: ``migm-a`` or ``migm-b``."""
    if name == "migm-a":
        return MigmPolicy(name, by_size=True, **options)
    if name == "migm-b":
        return MigmPolicy(name, by_size=False, **options)
    raise ValueError(f"{__name__} has no policy {name!r}; it has migm-a, migm-b")
