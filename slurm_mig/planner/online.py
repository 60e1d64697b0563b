"""Online, fragmentation-aware MIG placement (Ting et al., "An Online Fragmentation-
Aware Scheduler for Managing GPU-Sharing Workloads on Multi-Instance GPUs", Sec. III-IV).

Pure functions over an immutable snapshot of the cluster (``GpuState``):

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

Policies for ``slurm_mig.sim`` (``make_policy``): ``first-fit`` (static layout, first
fit: the paper's ablation baseline), ``ff+lb`` (+ conditional load balancing),
``ff+lb+dp`` (+ dynamic, fragmentation-aware exact-size partitioning),
``ff+lb+dp+mig`` and ``frag-aware`` (+ migration on departure: the paper's method).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import cache

from ..geometry import GpuModel, Slot, get_model, partition_name, planner_slots, valid_partitions

DEFAULT_THRESHOLD = 0.4  # Sec. V-A3
_EPS = 1e-12

__all__ = [
    "DEFAULT_THRESHOLD",
    "Choice",
    "GpuState",
    "Move",
    "Occupant",
    "OnlinePolicy",
    "choose_placement",
    "fragmentation_cost",
    "is_lazy",
    "make_policy",
    "mask_cost",
    "parse_layout",
    "plan_departure",
    "profile_terms",
]


# ---------------------------------------------------------------------------
# The snapshot


@dataclass(frozen=True, slots=True)
class Occupant:
    """A job holding an instance. ``movable``: restartable and running now."""

    job: str
    slot: Slot
    movable: bool = False
    end: float = math.inf  # predicted end (s)


@dataclass(frozen=True, slots=True)
class GpuState:
    """One GPU as the placement functions see it: its jobs and its idle instances."""

    index: int
    busy: tuple[Occupant, ...] = ()
    idle: tuple[Slot, ...] = ()
    mem: int = field(default=-1, compare=False)  # memory slices of jobs (bit i)
    comp: int = field(default=-1, compare=False)  # compute slices of jobs (bit i)

    def __post_init__(self) -> None:
        if self.mem < 0:
            mem = comp = 0
            for o in self.busy:
                mem |= _mem_mask(o.slot)
                comp |= _comp_mask(o.slot)
            object.__setattr__(self, "mem", mem)
            object.__setattr__(self, "comp", comp)

    @property
    def busy_slices(self) -> int:
        return self.comp.bit_count()

    def load(self, model: GpuModel) -> float:
        """Share of the compute slices running (or bound to) a job."""
        return self.comp.bit_count() / model.compute_slices

    def occupant(self, job: str) -> Occupant | None:
        for o in self.busy:
            if o.job == job:
                return o
        return None

    def place(self, occ: Occupant) -> GpuState:
        """The state after ``occ`` starts here; idle instances it overlaps are gone."""
        m = _mem_mask(occ.slot)
        idle = tuple(s for s in self.idle if not _mem_mask(s) & m)
        return GpuState(
            self.index, self.busy + (occ,), idle, self.mem | m, self.comp | _comp_mask(occ.slot)
        )

    def remove(self, job: str, keep_instance: bool = True) -> GpuState:
        """The state after ``job`` leaves (its instance stays, idle, by default)."""
        busy = tuple(o for o in self.busy if o.job != job)
        gone = [o for o in self.busy if o.job == job]
        idle = self.idle + tuple(o.slot for o in gone) if keep_instance else self.idle
        return GpuState(self.index, busy, tuple(sorted(idle)))

    @classmethod
    def of(cls, index: int, slots: Iterable[Slot], idle: Iterable[Slot] = ()) -> GpuState:
        """A GPU running one (unnamed, unmovable) job on each of ``slots``."""
        busy = tuple(Occupant(f"job{i}", s) for i, s in enumerate(slots))
        return cls(index, busy, tuple(idle))


def _mem_mask(slot: Slot) -> int:
    return ((1 << slot.placement.size) - 1) << slot.placement.start


def _comp_mask(slot: Slot) -> int:
    return ((1 << slot.size) - 1) << slot.placement.start


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


def fragmentation_cost(gpu_state: GpuState | Iterable[Slot], model: GpuModel) -> float:
    """Eq. 5: the average unavailability of the model's MIG profiles on a GPU whose
    running jobs hold ``gpu_state`` (a GpuState, or the jobs' slots); 0 = none."""
    if not isinstance(gpu_state, GpuState):
        gpu_state = GpuState.of(0, gpu_state)
    return _mask_cost(model.name, gpu_state.mem, gpu_state.comp)


# ---------------------------------------------------------------------------
# Job arrival


def is_lazy(gpu: GpuState, model: GpuModel, threshold: float = DEFAULT_THRESHOLD) -> bool:
    """Lazy: load strictly below the threshold (a GPU exactly at it counts as busy)."""
    return gpu.comp.bit_count() < threshold * model.compute_slices - _EPS


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


def _dp_candidates(gpu: GpuState, size: int, model: GpuModel) -> Iterator[Choice]:
    """The GPU's cheapest placements of ``size`` (a dearer one never wins)."""
    cands = _candidates(model.name, size, gpu.mem, gpu.comp)
    if not cands:
        return
    low = cands[0][0]
    for cost, slot, m in cands:
        if cost > low:
            return
        reuse = slot in gpu.idle
        destroy = () if reuse else tuple(s for s in gpu.idle if _mem_mask(s) & m)
        yield Choice(gpu.index, slot, cost, reuse, destroy)


def choose_placement(
    gpus: Sequence[GpuState],
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
    groups: tuple[list[GpuState], ...] = ([], []) if load_balance else ([],)
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
                for s in g.idle:
                    if s.size == size:
                        cost = _mask_cost(model.name, g.mem | _mem_mask(s), g.comp | _comp_mask(s))
                        return Choice(g.index, s, cost, True, ())
    return None


# ---------------------------------------------------------------------------
# Job departure


@dataclass(frozen=True, slots=True)
class Move:
    """Migrate ``job`` from ``src`` to ``slot`` on ``dst`` (destroying ``destroy``)."""

    job: str
    src: int
    dst: int
    slot: Slot
    destroy: tuple[Slot, ...] = ()


def _moved_cost(g: GpuState, occ: Occupant, slot: Slot, model: GpuModel) -> float:
    mem = (g.mem & ~_mem_mask(occ.slot)) | _mem_mask(slot)
    comp = (g.comp & ~_comp_mask(occ.slot)) | _comp_mask(slot)
    return _mask_cost(model.name, mem, comp)


def _free_slots(g: GpuState, size: int, model: GpuModel, blocked: int) -> Iterator[Slot]:
    for slot in _slots_of_size(model.name).get(size, ()):
        if not _mem_mask(slot) & blocked:
            yield slot


def _apply_move(states: dict[int, GpuState], mv: Move, occ: Occupant) -> None:
    src = states[mv.src].remove(mv.job)
    states[mv.src] = src
    dst = states[mv.dst]
    states[mv.dst] = dst.place(replace(occ, slot=mv.slot, movable=False))


def _destroys(g: GpuState, slot: Slot) -> tuple[Slot, ...]:
    m = _mem_mask(slot)
    return tuple(s for s in g.idle if _mem_mask(s) & m and s != slot)


def plan_departure(
    gpus: Sequence[GpuState],
    departed: int,
    model: GpuModel,
    threshold: float = DEFAULT_THRESHOLD,
    *,
    can_move: Callable[[Occupant], bool] | None = None,
    max_moves: int = 64,
) -> list[Move]:
    """Migrations after a job left GPU ``departed`` (Sec. IV-D); ``gpus`` is the state
    after it left. ``can_move`` filters the movable occupants further."""
    states = {g.index: g for g in gpus}
    ok = can_move or (lambda o: True)
    moves: list[Move] = []
    if not is_lazy(states[departed], model, threshold):
        # intra-GPU: the single move that lowers this GPU's cost most, while one does
        while len(moves) < max_moves:
            g = states[departed]
            current = _mask_cost(model.name, g.mem, g.comp)
            best = None
            for occ in g.busy:
                if not (occ.movable and ok(occ)):
                    continue
                for slot in _free_slots(g, occ.slot.size, model, g.mem):
                    cost = _moved_cost(g, occ, slot, model)
                    key = (cost, slot.placement.start, occ.job)
                    if cost < current - 1e-9 and (best is None or key < best[0]):
                        best = (key, occ, slot)
            if best is None:
                break
            _, occ, slot = best
            mv = Move(occ.job, departed, departed, slot, _destroys(g, slot))
            _apply_move(states, mv, occ)
            moves.append(mv)
        return moves
    # inter-GPU: pull jobs from busy GPUs while that leaves this one less loaded
    while len(moves) < max_moves:
        g = states[departed]
        if not is_lazy(g, model, threshold):
            break
        load_g = g.busy_slices
        best = None
        for k, src in states.items():
            if k == departed or is_lazy(src, model, threshold):
                continue
            load_src = src.busy_slices
            for occ in src.busy:
                s = occ.slot.size
                if not (occ.movable and ok(occ)) or not load_g + s < load_src - s:
                    continue
                for slot in _free_slots(g, s, model, g.mem):
                    m = _mem_mask(slot)
                    cost = _mask_cost(model.name, g.mem | m, g.comp | _comp_mask(slot))
                    key = (cost, k, slot.placement.start, occ.job)
                    if best is None or key < best[0]:
                        best = (key, occ, k, slot)
        if best is None:
            break
        _, occ, k, slot = best
        mv = Move(occ.job, k, departed, slot, _destroys(g, slot))
        _apply_move(states, mv, occ)
        moves.append(mv)
    return moves


# ---------------------------------------------------------------------------
# Static layouts (no dynamic partitioning)


def parse_layout(spec: str, model: GpuModel) -> tuple[tuple[Slot, ...], ...]:
    """Partitions to cycle over the GPUs: ``"4-2-1"`` or ``"4-3,3-2-1"`` (sizes left to
    right, as ``geometry.partition_name`` writes them); ``auto`` = 4-2-1 (2-1-1 on
    4-slice models): every size up to 4 has an instance."""
    names = {partition_name(p): p for p in valid_partitions(model.name)}
    key = spec.strip().lower()
    if key in ("", "auto"):
        key = "4-2-1" if model.compute_slices == 7 else "2-1-1"
    out = []
    for part in key.split(","):
        part = part.strip().replace("g", "")
        if part not in names:
            raise ValueError(
                f"layout {part!r} is not a full partition of {model.name}; choose among "
                f"{', '.join(sorted(names))} (comma-separated to cycle over GPUs)"
            )
        out.append(names[part])
    return tuple(out)


# ---------------------------------------------------------------------------
# The simulator policy


_SIZE_RULES = ("min", "fastest", "efficient")


def pick_size(job, model: GpuModel, rule: str = "min") -> tuple[int, ...]:
    """Sizes a job may take, preferred first: its requested size, else by ``rule``
    (min: the smallest it runs on; fastest; efficient: least slice-seconds), then the
    larger runnable sizes (for static layouts only)."""
    from ..sim.cluster import runnable_sizes

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

    Jobs are taken in arrival order; one that cannot be placed waits and later ones
    may pass it (``backfill``; off = strict FCFS). A job with no requested size gets
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
    ) -> None:
        try:
            threshold = float(threshold)
        except (TypeError, ValueError):
            raise ValueError(f"threshold {threshold!r} must be a number in (0, 1]") from None
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"threshold {threshold} must be in (0, 1]; the paper uses 0.4")
        if size not in _SIZE_RULES:
            raise ValueError(f"size {size!r} must be one of {', '.join(_SIZE_RULES)}")
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
        self.migrations_intra = self.migrations_inter = self.reused = self.created = 0
        self.frag_samples: list[tuple[float, float]] = []
        self._states: dict[int, GpuState] = {}
        self._where: dict[str, int] = {}
        self._sizes: dict[str, tuple[int, ...]] = {}
        self._model: GpuModel | None = None
        self._layout: tuple[tuple[Slot, ...], ...] = ()

    # -- snapshot ------------------------------------------------------------

    def _snapshot(self, view, k: int) -> GpuState:
        gv = view.gpus[k]
        busy, idle = [], []
        for inst in gv.instances:
            if inst.job is None:
                idle.append(inst.slot)
                continue
            movable = False
            if self.migrate and view.job(inst.job).restartable:
                run = view.running(inst.job)
                movable = run is not None and run.started is not None
            end = inst.busy_until if inst.busy_until is not None else math.inf
            busy.append(Occupant(inst.job, inst.slot, movable, end))
        return GpuState(k, tuple(busy), tuple(idle))

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
        have = {s.size for part in self._layout for s in part}
        if self.match == "fit":
            return tuple(s for s in sizes if s in have)
        for size in sizes:
            if size in have:
                return (size,)
        return ()

    # -- decide --------------------------------------------------------------

    def decide(self, view) -> Iterator:
        from ..sim.api import Create, Destroy, Migrate, PolicyError, Start

        model = view.model
        if self._model is None:
            self._model = model
            if not self.dynamic:
                self._layout = parse_layout(self.layout_spec, model)
                for k in range(len(view.gpus)):
                    for slot in self._layout[k % len(self._layout)]:
                        yield Create(k, slot)
                        self.created += 1
        for k in view.changed:
            self._states[k] = self._snapshot(view, k)
        states = self._states
        departed = []
        for job in view.finished:
            k = self._where.pop(job, None)
            self._sizes.pop(job, None)
            if k is not None and k not in departed:
                departed.append(k)
        if self.migrate and self.dynamic:
            now = view.now
            floor = self.min_remaining_s

            def can_move(o: Occupant) -> bool:
                return o.end - now >= floor

            for k in departed:
                order = [states[i] for i in range(len(view.gpus))]
                for mv in plan_departure(order, k, model, self.threshold, can_move=can_move):
                    for s in mv.destroy:
                        yield Destroy(mv.dst, s)
                    yield Migrate(mv.job, mv.dst, mv.slot)
                    occ = states[mv.src].occupant(mv.job)
                    assert occ is not None
                    _apply_move(states, mv, occ)
                    self._where[mv.job] = mv.dst
                    if mv.src == mv.dst:
                        self.migrations_intra += 1
                    else:
                        self.migrations_inter += 1
        order = [states[i] for i in range(len(view.gpus))]
        failed: set[tuple[int, ...]] = set()
        for job in list(view.pending.values()):
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
                    names = ",".join(partition_name(p) for p in self._layout)
                    raise PolicyError(
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
            yield Start(job.id, choice.gpu, choice.slot)
            if choice.reuse:
                self.reused += 1
            else:
                self.created += 1
            self._where[job.id] = choice.gpu
            g = order[choice.gpu].place(Occupant(job.id, choice.slot))
            order[choice.gpu] = g
            states[choice.gpu] = g
        if self.trace_fragmentation:
            total = math.fsum(_mask_cost(model.name, g.mem, g.comp) for g in order)
            self.frag_samples.append((view.now, total / len(order)))


_VARIANTS = {
    # name: (load balancing, dynamic partitioning, migration)
    "first-fit": (False, False, False),
    "ff+lb": (True, False, False),
    "ff+lb+dp": (True, True, False),
    "ff+lb+dp+mig": (True, True, True),
    "frag-aware": (True, True, True),
}


def make_policy(name: str, **options) -> OnlinePolicy:
    """Registry hook of ``slurm_mig.sim.policies``: a fresh policy for ``name``.
    Options: threshold, layout, size, backfill, match, min_remaining_s, trace_fragmentation,
    and (frag-aware) load_balance / dynamic / migrate to switch a technique off."""
    if name not in _VARIANTS:
        raise ValueError(f"{__name__} has no policy {name!r}; it has {', '.join(_VARIANTS)}")
    lb, dp, mig = _VARIANTS[name]
    kw = {"load_balance": lb, "dynamic": dp, "migrate": mig}
    if name == "frag-aware":
        kw.update({k: options.pop(k) for k in list(options) if k in kw})
    return OnlinePolicy(name, **kw, **options)
