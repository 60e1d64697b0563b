"""Online, fragmentation-aware MIG placement (Ting et al., "An Online Fragmentation-
Aware Scheduler for Managing GPU-Sharing Workloads on Multi-Instance GPUs", Sec. III-IV).

Pure functions over the snapshot's GPUs (``planner.snapshot.Gpu``):

* ``fragmentation_cost`` - Eq. 3-5: the average, over the model's MIG profiles, of
  ``1 - N_valid / N_ideal``; ``N_ideal`` (Eq. 3) is how many instances of the profile
  the GPU's free compute and memory slices would hold without placement rules,
  ``N_valid`` (Eq. 4) how many legal placements of it are free of running jobs.
  Profiles with ``N_ideal = 0`` add 0 (nothing of them is missing). An empty and a
  full GPU both cost 0.
* ``choose_placement`` - job arrival (Sec. IV-C): GPUs whose load (busy compute
  slices / slices) is below the threshold are *lazy* and tried first, *busy* ones
  after (conditional load balancing: lazy GPUs are packed, busy ones are avoided, so
  the load spreads once a GPU passes the threshold). With dynamic partitioning the
  exact requested size is placed where the GPU's resulting cost is lowest; among equal
  costs an existing idle instance is reused, then the fewest idle instances are
  destroyed, then the lowest GPU index (first fit). Without it the GPUs keep a static
  layout (``parse_layout``) and a job waits for an idle instance of its size (the
  smallest larger size the layout has, if it has none of its own), first fit.
* ``plan_departure`` - job departure (Sec. IV-D): if the GPU a job left is still busy,
  intra-GPU moves while one lowers its cost; if it became lazy, inter-GPU moves from
  busy GPUs while the move leaves it less loaded than the source, each time the job
  and placement giving it the lowest cost. Only restartable, running jobs move; the
  simulator charges each move its migration time plus the instance's creation.

Online policies (``make_policy``, registry names): ``first-fit`` (static layout, first
fit: the paper's ablation baseline), ``static`` (the same under a site's name: a fixed
MIG layout, uniform or mixed per GPU, ``match=exact|fit``), ``no-mig`` (whole GPUs),
``ff+lb`` (+ conditional load balancing),
``ff+lb+dp`` (+ dynamic, fragmentation-aware exact-size partitioning),
``ff+lb+dp+mig`` and ``frag-aware`` (+ migration on departure: the paper's method).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache

from ..geometry import (
    GpuModel,
    Slot,
    compute_mask,
    get_model,
    partition_name,
    planner_slots,
    slot_mask,
    valid_partitions,
)
from .decisions import Create, Decisions, Destroy, Move, Op, Place
from .snapshot import ClusterSnapshot, Gpu, Instance, Job, efficient_time, runnable_sizes

DEFAULT_THRESHOLD = 0.4  # Sec. V-A3
ORDERS = ("arrival", "short")  # option ``order``: the order jobs are offered in
_EPS = 1e-12

__all__ = [
    "DEFAULT_THRESHOLD",
    "LAYOUT_SEPARATORS",
    "Choice",
    "Migration",
    "OnlinePolicy",
    "choose_placement",
    "fragmentation_cost",
    "gpu_running",
    "is_lazy",
    "make_policy",
    "mask_cost",
    "parse_layout",
    "plan_departure",
    "profile_terms",
]


def gpu_running(
    index: int, slots: Iterable[Slot], idle: Iterable[Slot] = (), ends: Iterable[float] = ()
) -> Gpu:
    """A GPU running one (unnamed) job on each of ``slots``, with ``idle`` instances
    (for tests and reports)."""
    ends = list(ends)
    busy = [
        Instance(s, f"job{i}", busy_until=ends[i] if i < len(ends) else math.inf)
        for i, s in enumerate(slots)
    ]
    insts = sorted([*busy, *(Instance(s) for s in idle)], key=lambda i: i.slot.placement.start)
    return Gpu(index, tuple(insts))


_mem_mask = slot_mask
_comp_mask = compute_mask


# ---------------------------------------------------------------------------
# Eq. 3-5


@cache
def _profile_masks(model_name: str) -> tuple[tuple[int, int, tuple[tuple[int, int], ...]], ...]:
    """Per profile of the model: (compute slices, memory slices, ((memory mask,
    compute mask) of each legal placement))."""
    model = get_model(model_name)
    out = []
    for p in model.profiles:
        pl = tuple(
            (((1 << p.memory_slices) - 1) << s, ((1 << p.compute_slices) - 1) << s)
            for s in p.starts
        )
        out.append((p.compute_slices, p.memory_slices, pl))
    return tuple(out)


def profile_terms(mem: int, comp: int, model: GpuModel) -> list[tuple[str, int, int]]:
    """(profile, N_ideal Eq. 3, N_valid Eq. 4) with jobs on memory slices ``mem`` and
    compute slices ``comp`` (bit masks): the pieces of Eq. 5, for reports and tests."""
    c_rem = model.compute_slices - comp.bit_count()
    m_rem = model.memory_slices - mem.bit_count()
    out = []
    for p, (c, m, pls) in zip(model.profiles, _profile_masks(model.name)):
        ideal = min(c_rem // c, m_rem // m)
        valid = sum(1 for pm, pc in pls if not (pm & mem or pc & comp))
        out.append((p.name, ideal, valid))
    return out


@cache
def _mask_cost(model_name: str, mem: int, comp: int) -> float:
    model = get_model(model_name)
    c_rem = model.compute_slices - comp.bit_count()
    m_rem = model.memory_slices - mem.bit_count()
    profiles = _profile_masks(model_name)
    total = 0.0
    for c, m, pls in profiles:
        ideal = min(c_rem // c, m_rem // m)
        if ideal <= 0:
            continue
        valid = sum(1 for pm, pc in pls if not (pm & mem or pc & comp))
        total += 1.0 - min(valid, ideal) / ideal
    return total / len(profiles)


def mask_cost(mem: int, comp: int, model: GpuModel) -> float:
    """Eq. 5 for jobs on memory slices ``mem`` and compute slices ``comp``."""
    return _mask_cost(model.name, mem, comp)


def fragmentation_cost(gpu: Gpu | Iterable[Slot], model: GpuModel) -> float:
    """Eq. 5: the average unavailability of the model's MIG profiles on a GPU whose
    running jobs hold ``gpu`` (a snapshot GPU, or the jobs' slots); 0 = none."""
    if not isinstance(gpu, Gpu):
        gpu = gpu_running(0, gpu)
    return _mask_cost(model.name, gpu.busy_mask, gpu.compute_mask)


# ---------------------------------------------------------------------------
# Job arrival


def is_lazy(gpu: Gpu, model: GpuModel, threshold: float = DEFAULT_THRESHOLD) -> bool:
    """Lazy: load strictly below the threshold (a GPU exactly at it counts as busy)."""
    return gpu.compute_mask.bit_count() < threshold * model.compute_slices - _EPS


@dataclass(frozen=True, slots=True)
class Choice:
    """Where a job goes: ``slot`` on ``gpu``; ``destroy``: idle instances in the way;
    ``reuse``: an idle instance is already there; ``cost``: the GPU's Eq. 5 after."""

    gpu: int
    slot: Slot
    cost: float = 0.0
    reuse: bool = False
    destroy: tuple[Slot, ...] = ()


@cache
def _slots_of_size(model_name: str) -> dict[int, tuple[Slot, ...]]:
    out: dict[int, list[Slot]] = {}
    for s in planner_slots(get_model(model_name)):
        out.setdefault(s.size, []).append(s)
    return {k: tuple(sorted(v)) for k, v in out.items()}


@cache
def _candidates(model_name: str, size: int, mem: int, comp: int) -> tuple:
    """Slots of ``size`` free of the jobs' memory ``mem``, with the resulting Eq. 5
    cost, cheapest first: ((cost, slot, memory mask), ...)."""
    out = []
    for slot in _slots_of_size(model_name).get(size, ()):
        m = _mem_mask(slot)
        if not m & mem:
            cost = round(_mask_cost(model_name, mem | m, comp | _comp_mask(slot)), 12)
            out.append((cost, slot, m))
    out.sort(key=lambda c: (c[0], c[1].placement.start))
    return tuple(out)


def _idle_slots(gpu: Gpu) -> tuple[Slot, ...]:
    return tuple(i.slot for i in gpu.instances if i.job is None)


def _dp_candidates(gpu: Gpu, size: int, model: GpuModel) -> Iterator[Choice]:
    """The GPU's cheapest placements of ``size`` (a dearer one never wins)."""
    cands = _candidates(model.name, size, gpu.busy_mask, gpu.compute_mask)
    if not cands:
        return
    low = cands[0][0]
    idle = _idle_slots(gpu)
    for cost, slot, m in cands:
        if cost > low:
            return
        reuse = slot in idle
        destroy = () if reuse else tuple(s for s in idle if _mem_mask(s) & m)
        yield Choice(gpu.index, slot, cost, reuse, destroy)


def choose_placement(
    gpus: Sequence[Gpu],
    sizes: Sequence[int],
    model: GpuModel,
    threshold: float = DEFAULT_THRESHOLD,
    *,
    load_balance: bool = True,
    dynamic: bool = True,
) -> Choice | None:
    """Where a job that asks for ``sizes[0]`` compute slices goes (None: it waits).

    Dynamic: the exact size at the lowest resulting cost (Sec. IV-C steps 1-4).
    Static: an idle instance of ``sizes[0]`` (lazy GPUs first, then the lowest
    index), else of the next size in ``sizes``.
    """
    groups: tuple[list[Gpu], ...] = ([], []) if load_balance else ([],)
    for g in gpus:
        groups[1 if load_balance and not is_lazy(g, model, threshold) else 0].append(g)
    if dynamic:
        for group in groups:
            best, best_key = None, None
            for g in group:
                for c in _dp_candidates(g, sizes[0], model):
                    key = (c.cost, not c.reuse, len(c.destroy))
                    if best_key is None or key < best_key:
                        best, best_key = c, key
            if best is not None:
                return best
        return None
    for size in sizes:
        for group in groups:
            for g in group:
                for s in _idle_slots(g):
                    if s.size == size:
                        cost = _mask_cost(
                            model.name, g.busy_mask | _mem_mask(s), g.compute_mask | _comp_mask(s)
                        )
                        return Choice(g.index, s, cost, True, ())
    return None


# ---------------------------------------------------------------------------
# Job departure


@dataclass(frozen=True, slots=True)
class Migration:
    """Migrate ``job`` from ``src`` to ``slot`` on ``dst`` (destroying ``destroy``)."""

    job: str
    src: int
    dst: int
    slot: Slot
    destroy: tuple[Slot, ...] = ()


def _moved_cost(g: Gpu, occ: Instance, slot: Slot, model: GpuModel) -> float:
    mem = (g.busy_mask & ~_mem_mask(occ.slot)) | _mem_mask(slot)
    comp = (g.compute_mask & ~_comp_mask(occ.slot)) | _comp_mask(slot)
    return _mask_cost(model.name, mem, comp)


def _free_slots(size: int, model: GpuModel, blocked: int) -> Iterator[Slot]:
    for slot in _slots_of_size(model.name).get(size, ()):
        if not _mem_mask(slot) & blocked:
            yield slot


def _apply_move(states: dict[int, Gpu], mv: Migration, occ: Instance) -> None:
    states[mv.src] = states[mv.src].vacated(mv.job)
    moved = Instance(mv.slot, occ.job, busy_until=occ.busy_until, pcie=occ.pcie)
    states[mv.dst] = states[mv.dst].placed(moved)


def _destroys(g: Gpu, slot: Slot) -> tuple[Slot, ...]:
    m = _mem_mask(slot)
    return tuple(s for s in _idle_slots(g) if _mem_mask(s) & m and s != slot)


def plan_departure(
    gpus: Sequence[Gpu],
    departed: int,
    model: GpuModel,
    threshold: float = DEFAULT_THRESHOLD,
    *,
    can_move: Callable[[Instance], bool] | None = None,
    max_moves: int = 64,
) -> list[Migration]:
    """Migrations after a job left GPU ``departed`` (Sec. IV-D); ``gpus`` is the state
    after it left. ``can_move`` says which running jobs may move (default: none); a job
    moves at most once."""
    states = {g.index: g for g in gpus}
    ok = can_move or (lambda o: False)
    moved: set[str] = set()

    def movable(occ: Instance) -> bool:
        return occ.job not in moved and ok(occ)

    moves: list[Migration] = []
    if not is_lazy(states[departed], model, threshold):
        # intra-GPU: the single move that lowers this GPU's cost most, while one does
        while len(moves) < max_moves:
            g = states[departed]
            current = _mask_cost(model.name, g.busy_mask, g.compute_mask)
            best = None
            for occ in g.occupants:
                if not movable(occ):
                    continue
                for slot in _free_slots(occ.slot.size, model, g.busy_mask):
                    cost = _moved_cost(g, occ, slot, model)
                    key = (cost, slot.placement.start, occ.job)
                    if cost < current - 1e-9 and (best is None or key < best[0]):
                        best = (key, occ, slot)
            if best is None:
                break
            _, occ, slot = best
            assert occ.job is not None
            mv = Migration(occ.job, departed, departed, slot, _destroys(g, slot))
            _apply_move(states, mv, occ)
            moved.add(occ.job)
            moves.append(mv)
        return moves
    # inter-GPU: pull jobs from busy GPUs while that leaves this one less loaded
    while len(moves) < max_moves:
        g = states[departed]
        if not is_lazy(g, model, threshold):
            break
        load_g = g.compute_mask.bit_count()
        best = None
        for k, src in states.items():
            if k == departed or is_lazy(src, model, threshold):
                continue
            load_src = src.compute_mask.bit_count()
            for occ in src.occupants:
                s = occ.slot.size
                if not movable(occ) or not load_g + s < load_src - s:
                    continue
                for slot in _free_slots(s, model, g.busy_mask):
                    m = _mem_mask(slot)
                    cost = _mask_cost(
                        model.name, g.busy_mask | m, g.compute_mask | _comp_mask(slot)
                    )
                    key = (cost, k, slot.placement.start, occ.job)
                    if best is None or key < best[0]:
                        best = (key, occ, k, slot)
        if best is None:
            break
        _, occ, k, slot = best
        assert occ.job is not None
        mv = Migration(occ.job, k, departed, slot, _destroys(g, slot))
        _apply_move(states, mv, occ)
        moved.add(occ.job)
        moves.append(mv)
    return moves


# ---------------------------------------------------------------------------
# Static layouts (no dynamic partitioning)


LAYOUT_SEPARATORS = ",/+"  # between the partitions of a mixed layout ("/" in shells)


def parse_layout(spec: str | int, model: GpuModel) -> tuple[tuple[Slot, ...], ...]:
    """Partitions to cycle over the GPUs (GPU k gets partition k mod n): ``"4-2-1"``,
    or a mixed layout ``"7/4-3"`` (also ``"7,4-3"`` or ``"7+4-3"``). Sizes read left to
    right as ``geometry.partition_name`` writes them (``7g``, ``4g-3g`` too); sizes in
    another order name the one partition that has them (``3-2-2`` is ``2-2-3``).
    ``auto`` = 4-2-1 (2-1-1 on 4-slice models): every size up to 4 has an instance;
    ``whole`` = the whole GPU as one instance (``7`` on an A100). A number (``7``, as
    ``--policy static:layout=7`` reads it) is that partition's name."""
    names = {partition_name(p): p for p in valid_partitions(model.name)}
    key = str(spec).strip().lower()
    if key in ("", "auto"):
        key = "4-2-1" if model.compute_slices == 7 else "2-1-1"
    elif key == "whole":  # no MIG: the whole GPU as one instance
        key = str(model.compute_slices)
    for sep in LAYOUT_SEPARATORS[1:]:
        key = key.replace(sep, LAYOUT_SEPARATORS[0])
    out = []
    for part in key.split(LAYOUT_SEPARATORS[0]):
        out.append(names[_partition_key(part, names, model)])
    return tuple(out)


def _partition_key(part: str, names: dict, model: GpuModel) -> str:
    """The partition name ``part`` stands for (see ``parse_layout``); ValueError names
    the valid ones."""
    text = part.strip().replace("g", "").replace(" ", "")
    if text in names:
        return text
    sizes = sorted(text.split("-"))
    same = [n for n in names if sorted(n.split("-")) == sizes]
    if len(same) == 1:
        return same[0]
    if same:
        raise ValueError(
            f"layout {part.strip()!r} names {len(same)} partitions of {model.name} "
            f"({', '.join(same)}); give the sizes left to right as one of them"
        )
    raise ValueError(
        f"layout {part.strip()!r} is not a full partition of {model.name}; choose among "
        f"{', '.join(sorted(names))} (several, separated by '/', cycle over the GPUs)"
    )


# ---------------------------------------------------------------------------
# The simulator policy


_SIZE_RULES = ("min", "fastest", "efficient")


def pick_size(job: Job, model: GpuModel, rule: str = "min") -> tuple[int, ...]:
    """Sizes a job may take, preferred first: its requested size, else by ``rule``
    (min: the smallest it runs on; fastest; efficient: least slice-seconds), then the
    larger runnable sizes (for static layouts only)."""
    sizes = runnable_sizes(job, model)
    if job.size is not None:
        first = job.size
    elif rule == "fastest":
        first = min(sizes, key=lambda s: (job.time(s), s))
    elif rule == "efficient":
        first = min(sizes, key=lambda s: (s * job.time(s), -s))
    else:
        first = sizes[0]
    return (first,) + tuple(s for s in sizes if s > first)


class OnlinePolicy:
    """The fragmentation-aware scheduler and its ablations, as a simulator policy.

    Jobs are taken in arrival order (``order="short"``: within a priority shortest
    first, aged by the wait, as ``adaptive`` takes them); one that cannot be placed
    waits and later ones may pass it (``backfill``; off = strict FCFS). A job with no requested size gets
    one by ``size`` (``pick_size``). Migration needs dynamic partitioning (a static
    layout has no free instance to move to). Counters: ``migrations_intra``,
    ``migrations_inter``, ``reused``, ``created``; ``frag_samples`` holds
    (time, mean cost over GPUs) after each decision when ``trace_fragmentation``.
    """

    def __init__(
        self,
        name: str = "frag-aware",
        *,
        load_balance: bool = True,
        dynamic: bool = True,
        migrate: bool = True,
        threshold: float = DEFAULT_THRESHOLD,
        layout: str = "auto",
        size: str = "min",
        backfill: bool = True,
        match: str = "exact",
        min_remaining_s: float = 0.0,
        trace_fragmentation: bool = False,
        order: str = "arrival",
    ) -> None:
        try:
            threshold = float(threshold)
        except (TypeError, ValueError):
            raise ValueError(f"threshold {threshold!r} must be a number in (0, 1]") from None
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"threshold {threshold} must be in (0, 1]; the paper uses 0.4")
        if size not in _SIZE_RULES:
            raise ValueError(f"size {size!r} must be one of {', '.join(_SIZE_RULES)}")
        if order not in ORDERS:
            raise ValueError(f"order {order!r} must be one of {', '.join(ORDERS)}")
        if match not in ("exact", "fit"):
            raise ValueError(f"match {match!r} must be exact or fit")
        if float(min_remaining_s) < 0:
            raise ValueError(f"min_remaining_s {min_remaining_s} must be >= 0 seconds")
        self.name = name
        self.load_balance = bool(load_balance)
        self.dynamic = bool(dynamic)
        self.migrate = bool(migrate)
        self.threshold = threshold
        self.layout_spec = layout
        self.size_rule = size
        self.backfill = bool(backfill)
        self.match = match
        self.min_remaining_s = float(min_remaining_s)
        self.trace_fragmentation = bool(trace_fragmentation)
        self.order = order
        self.migrations_intra = self.migrations_inter = self.reused = self.created = 0
        self.frag_samples: list[tuple[float, float]] = []
        self._sizes: dict[str, tuple[int, ...]] = {}
        self._model: GpuModel | None = None
        self._layout: tuple[tuple[Slot, ...], ...] = ()
        self._have: frozenset[int] = frozenset()  # sizes the layout puts on some GPU
        self._have_for = -1  # the number of GPUs ``_have`` is for

    def _sizes_of(self, job, model: GpuModel) -> tuple[int, ...]:
        s = self._sizes.get(job.id)
        if s is None:
            s = self._sizes[job.id] = pick_size(job, model, self.size_rule)
        return s

    def _static_size(self, sizes: tuple[int, ...]) -> tuple[int, ...]:
        """The size a job waits for under a static layout: its own if the layout has
        that size (``match="exact"``: Kubernetes matches MIG instances exactly), else
        the smallest larger one it has; () if none. ``match="fit"``: any idle
        instance it runs on, the smallest first (MISO's static partitions)."""
        have = self._have
        if self.match == "fit":
            return tuple(s for s in sizes if s in have)
        for size in sizes:
            if size in have:
                return (size,)
        return ()

    # -- decide --------------------------------------------------------------

    kind = "online"

    def decide(self, snap: ClusterSnapshot) -> Decisions:
        return Decisions(tuple(self._ops(snap)))

    def _can_move(self, snap: ClusterSnapshot) -> Callable[[Instance], bool]:
        now, floor = snap.now, self.min_remaining_s

        def can_move(o: Instance) -> bool:
            run = snap.running.get(o.job) if o.job is not None else None
            if run is None or run.started is None or not run.job.restartable:
                return False
            end = o.busy_until if o.busy_until is not None else math.inf
            return end - now >= floor

        return can_move

    def _ops(self, snap: ClusterSnapshot) -> Iterator[Op]:
        from .baseline import busy_instance

        model = snap.model
        if self._model is not model:
            self._model = model
            self._sizes.clear()
            if not self.dynamic:
                self._layout = parse_layout(self.layout_spec, model)
        if not self.dynamic and self._have_for != len(snap.gpus):
            # the sizes the GPUs have: a mixed layout longer than the cluster has some
            # of its partitions on no GPU
            n = len(snap.gpus)
            used = [self._layout[k % len(self._layout)] for k in range(n)]
            self._have = frozenset(s.size for part in used for s in part)
            self._have_for = n
        states = {g.index: g for g in snap.gpus}
        if not self.dynamic:
            # the static layout: create its instances where they are missing and free
            for k, g in states.items():
                for slot in self._layout[k % len(self._layout)]:
                    if g.instance(slot) is None and not _mem_mask(slot) & g.held_mask:
                        yield Create(k, slot)
                        self.created += 1
                        g = g.placed(Instance(slot, None, snap.now))
                states[k] = g
        departed = []
        for job, gpu in snap.finished:
            self._sizes.pop(job, None)
            if gpu not in departed:
                departed.append(gpu)
        if self.migrate and self.dynamic:
            can_move = self._can_move(snap)
            for k in departed:
                order = [states[i] for i in range(len(snap.gpus))]
                for mv in plan_departure(order, k, model, self.threshold, can_move=can_move):
                    for s in mv.destroy:
                        yield Destroy(mv.dst, s)
                    yield Move(mv.job, mv.src, mv.dst, mv.slot)
                    occ = next(o for o in states[mv.src].occupants if o.job == mv.job)
                    _apply_move(states, mv, occ)
                    if mv.src == mv.dst:
                        self.migrations_intra += 1
                    else:
                        self.migrations_inter += 1
        order = [states[i] for i in range(len(snap.gpus))]
        failed: set[tuple[int, ...]] = set()
        waiting = list(snap.pending.values())
        if self.order == "short":
            # within a priority shortest first, aged by the wait (adaptive's order),
            # to tell what a layout gains from the order alone
            waiting.sort(key=lambda j: (-j.priority, efficient_time(j, model) + j.arrival))
        for job in waiting:
            sizes = self._sizes_of(job, model)
            if sizes in failed:
                continue
            choice = choose_placement(
                order,
                sizes[:1] if self.dynamic else self._static_size(sizes),
                model,
                self.threshold,
                load_balance=self.load_balance,
                dynamic=self.dynamic,
            )
            if choice is None:
                if not self.dynamic and not self._static_size(sizes):
                    names = "/".join(partition_name(p) for p in self._layout)
                    raise ValueError(
                        f"policy {self.name!r}: job {job.id!r} runs on sizes "
                        f"{sizes} but the static layout {names!r} has no such instance; "
                        "pass layout=... with one, or use a policy with dynamic partitioning"
                    )
                if not self.backfill:
                    break
                failed.add(sizes)
                continue
            for s in choice.destroy:
                yield Destroy(choice.gpu, s)
            yield Place(job.id, choice.gpu, choice.slot, snap.now)
            if choice.reuse:
                self.reused += 1
            else:
                self.created += 1
            order[choice.gpu] = order[choice.gpu].placed(busy_instance(choice.slot, job))
        if self.trace_fragmentation:
            total = math.fsum(_mask_cost(model.name, g.busy_mask, g.compute_mask) for g in order)
            self.frag_samples.append((snap.now, total / len(order)))


_VARIANTS = {
    # name: (load balancing, dynamic partitioning, migration)
    "first-fit": (False, False, False),
    "static": (False, False, False),
    "no-mig": (False, False, False),
    "ff+lb": (True, False, False),
    "ff+lb+dp": (True, True, False),
    "ff+lb+dp+mig": (True, True, True),
    "frag-aware": (True, True, True),
}


def make_policy(name: str, **options) -> OnlinePolicy:
    """Registry hook: a fresh policy for ``name``.

    Options: threshold, layout, size, backfill, match, min_remaining_s,
    trace_fragmentation, order (arrival, short), and (frag-aware) load_balance / dynamic / migrate to switch a
    technique off. ``static`` is ``first-fit`` under the name a site would use (a fixed
    layout, never repartitioned: ``layout=7``, ``4-3``, ``1-1-1-1-1-1-1`` or a mixed
    ``7/4-3``; ``match=exact``: typed GRES requests, a job waits for its own size or the
    smallest larger one the layout has; ``match=fit``: untyped, any idle instance it
    runs on, the smallest first). ``no-mig``: whole GPUs, every job on a full GPU (one
    7g instance per GPU, made once); it takes neither layout nor match."""
    if name not in _VARIANTS:
        raise ValueError(f"{__name__} has no policy {name!r}; it has {', '.join(_VARIANTS)}")
    lb, dp, mig = _VARIANTS[name]
    kw = {"load_balance": lb, "dynamic": dp, "migrate": mig}
    if name == "frag-aware":
        kw.update({k: options.pop(k) for k in list(options) if k in kw})
    elif name == "no-mig":
        for k in ("layout", "match"):
            if k in options:
                raise TypeError(
                    f"got an unexpected keyword argument {k!r} (no-mig runs every job on "
                    "a whole GPU; a layout is static:layout=...)"
                )
        kw.update(layout="whole", match="fit")
    return OnlinePolicy(name, **kw, **options)
