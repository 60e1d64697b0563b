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
  smallest larger size the layout has, if it has none of its own), first fit; a job
  of N tasks waits for N such instances on one node (``choose_gang``: Slurm's
  ``--gres=gpu[:type]:N``, sized per task; the dynamic variants plan it on a region).
* ``plan_departure`` - job departure (Sec. IV-D): if the GPU a job left is still busy,
  intra-GPU moves while one lowers its cost; if it became lazy, inter-GPU moves from
  busy GPUs while the move leaves it less loaded than the source, each time the job
  and placement giving it the lowest cost. Only restartable, running jobs move; the
  simulator charges each move its migration time plus the instance's creation.

Online policies (registry names): ``first-fit`` (static layout, first
fit: the paper's ablation baseline), ``static`` (the same under a site's name: a fixed
MIG layout, uniform or mixed per GPU, ``match=exact|fit``), ``no-mig`` (whole GPUs),
``ff+lb`` (+ conditional load balancing),
``ff+lb+dp`` (+ dynamic, fragmentation-aware exact-size partitioning),
``ff+lb+dp+mig`` and ``frag-aware`` (+ migration on departure: the paper's method).
Their options: threshold, layout, size, backfill, match, min_remaining_s,
trace_fragmentation, order (arrival, short), and (frag-aware) load_balance, dynamic and
migrate to switch a technique off; ``no-mig`` takes neither layout nor match.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from functools import partial

from ..geometry import (
    GpuModel,
    Slot,
    partition_name,
    valid_partitions,
)
from .decisions import Create, Decisions, Destroy, Move, Op, Place
from .online_migration import Migration, _apply_move, plan_departure
from .online_placement import (
    DEFAULT_THRESHOLD,
    Choice,
    _mask_cost,
    _mem_mask,
    choose_gang,
    choose_placement,
    fragmentation_cost,
    gpu_running,
    is_lazy,
    mask_cost,
    profile_terms,
    task_sizes,
)
from .snapshot import ClusterSnapshot, Gpu, Instance, Job, efficient_time, runnable_sizes

ORDERS = ("arrival", "short")  # option ``order``: the order jobs are offered in

__all__ = [
    "DEFAULT_THRESHOLD",
    "LAYOUT_SEPARATORS",
    "Choice",
    "Migration",
    "FragAwarePolicy",
    "choose_placement",
    "fragmentation_cost",
    "gpu_running",
    "is_lazy",
    "mask_cost",
    "parse_layout",
    "plan_departure",
    "profile_terms",
]


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


def pick_size(
    job: Job, model: GpuModel, rule: str = "min", per_task: bool = False
) -> tuple[int, ...]:
    """Sizes a job may take, preferred first: its requested size, else by ``rule``
    (min: the smallest it runs on; fastest; efficient: least slice-seconds), then the
    larger runnable sizes (for static layouts only). ``per_task``: the instance sizes
    of each of a gang's tasks (``task_sizes``, by one task's times), not its regions."""
    sizes = task_sizes(job, model) if per_task else runnable_sizes(job, model)
    times = job.per_task(model) if per_task else job.times
    if job.size is not None and not per_task:
        first = job.size
    elif rule == "fastest":
        first = min(sizes, key=lambda s: (times.get(s, math.inf), s))
    elif rule == "efficient":
        first = min(sizes, key=lambda s: (s * times.get(s, math.inf), -s))
    else:
        first = sizes[0]
    return (first,) + tuple(s for s in sizes if s > first)


class FragAwarePolicy:
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
        self._hosts: dict[tuple[tuple[int, ...], int], int] = {}  # (sizes, tasks) -> most

    def _sizes_of(self, job, model: GpuModel) -> tuple[int, ...]:
        s = self._sizes.get(job.id)
        if s is None:
            gang = self._is_gang(job)
            s = self._sizes[job.id] = pick_size(job, model, self.size_rule, gang)
        return s

    def _is_gang(self, job: Job) -> bool:
        """A job of several tasks on a static layout: N instances, not a region."""
        return not self.dynamic and job.tasks > 1

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

    @property
    def models_slurm(self) -> bool:
        """A static layout or whole GPUs: what Slurm itself runs (the simulator gives
        it what Slurm knows of runtimes: the time limits)."""
        return not self.dynamic

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
        """This decision's operations: a static layout's missing instances, the moves
        after departures (migration), then the waiting jobs' placements."""
        model = snap.model
        self._adopt(model, len(snap.gpus))
        states = {g.index: g for g in snap.gpus}
        if not self.dynamic:
            yield from self._fill_layout(snap, states)
        departed = self._departed(snap)
        if self.migrate and self.dynamic:
            yield from self._migrations(snap, states, departed)
        order = [states[i] for i in range(len(snap.gpus))]
        yield from self._placements(snap, order)
        if self.trace_fragmentation:
            total = math.fsum(_mask_cost(model.name, g.busy_mask, g.compute_mask) for g in order)
            self.frag_samples.append((snap.now, total / len(order)))

    def _adopt(self, model: GpuModel, n: int) -> None:
        """Caches for ``model`` and ``n`` GPUs: the job sizes and the static layout
        (on a new model), and the sizes the layout puts on some GPU."""
        if self._model is not model:
            self._model = model
            self._sizes.clear()
            if not self.dynamic:
                self._layout = parse_layout(self.layout_spec, model)
        if not self.dynamic and self._have_for != n:
            # the sizes the GPUs have: a mixed layout longer than the cluster has some
            # of its partitions on no GPU
            used = [self._layout[k % len(self._layout)] for k in range(n)]
            self._have = frozenset(s.size for part in used for s in part)
            self._have_for = n
            self._hosts.clear()

    def _fill_layout(self, snap: ClusterSnapshot, states: dict[int, Gpu]) -> Iterator[Op]:
        """The static layout: create its instances where they are missing and free
        (``states`` updated with them)."""
        for k, g in states.items():
            for slot in self._layout[k % len(self._layout)]:
                if g.instance(slot) is None and not _mem_mask(slot) & g.held_mask:
                    yield Create(k, slot)
                    self.created += 1
                    g = g.placed(Instance(slot, None, snap.now))
            states[k] = g

    def _departed(self, snap: ClusterSnapshot) -> list[int]:
        """The GPUs jobs left since the last decision, in order (their sizes forgotten)."""
        departed = []
        for job, gpu in snap.finished:
            self._sizes.pop(job, None)
            if gpu not in departed:
                departed.append(gpu)
        return departed

    def _migrations(
        self, snap: ClusterSnapshot, states: dict[int, Gpu], departed: list[int]
    ) -> Iterator[Op]:
        """Moves after departures (``plan_departure``), GPU by GPU (``states`` updated)."""
        can_move = self._can_move(snap)
        for k in departed:
            order = [states[i] for i in range(len(snap.gpus))]
            for mv in plan_departure(order, k, snap.model, self.threshold, can_move=can_move):
                for s in mv.destroy:
                    yield Destroy(mv.dst, s)
                yield Move(mv.job, mv.src, mv.dst, mv.slot)
                occ = next(o for o in states[mv.src].occupants if o.job == mv.job)
                _apply_move(states, mv, occ)
                if mv.src == mv.dst:
                    self.migrations_intra += 1
                else:
                    self.migrations_inter += 1

    def _waiting(self, snap: ClusterSnapshot) -> list[Job]:
        """The waiting jobs in the order they are offered (option ``order``)."""
        waiting = list(snap.pending.values())
        if self.order == "short":
            # within a priority shortest first, aged by the wait (adaptive's order),
            # to tell what a layout gains from the order alone
            model = snap.model
            waiting.sort(key=lambda j: (-j.priority, efficient_time(j, model) + j.arrival))
        return waiting

    def _placements(self, snap: ClusterSnapshot, order: list[Gpu]) -> Iterator[Op]:
        """Each waiting job placed by ``choose_placement`` (``order`` updated); one
        that cannot be placed stops the rest, or with ``backfill`` its sizes only."""
        from .baseline import busy_instance

        model = snap.model
        failed: set[tuple] = set()  # sizes (a gang: with its tasks) that found no room
        for job in self._waiting(snap):
            sizes = self._sizes_of(job, model)
            gang = self._is_gang(job)
            key = (sizes, job.tasks) if gang else sizes
            if key in failed:
                continue
            if gang:
                place = self._place_gang(snap, order, job, sizes)
                if place is not None:
                    yield place
                    continue
                if not self.backfill:
                    break
                failed.add(key)
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
                self._check_layout(job, sizes)
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

    def _place_gang(
        self, snap: ClusterSnapshot, order: list[Gpu], job: Job, sizes: tuple[int, ...]
    ) -> Place | None:
        """A gang's N idle instances on one node (``choose_gang``), ``order`` updated;
        None when they are not free now (ValueError when they never are)."""
        from .baseline import busy_instance

        choice = choose_gang(order, self._static_size(sizes), job.tasks)
        if choice is None:
            self._check_gang(job, sizes, order)
            return None
        for k, slot in choice:
            order[k] = order[k].placed(busy_instance(slot, job))
        self.reused += len(choice)
        (gpu, slot), *more = choice
        return Place(job.id, gpu, slot, snap.now, more=tuple(more))

    def _check_gang(self, job: Job, sizes: tuple[int, ...], gpus: list[Gpu]) -> None:
        """ValueError when no node of the static layout has ``job.tasks`` instances of
        the sizes the gang takes (``_static_size``)."""
        key = (sizes, job.tasks)
        most = self._hosts.get(key)
        usable = set(self._static_size(sizes))
        if most is None:
            count: dict[str, int] = {}
            for g in gpus:
                part = self._layout[g.index % len(self._layout)]
                count[g.node] = count.get(g.node, 0) + sum(s.size in usable for s in part)
            most = self._hosts[key] = max(count.values(), default=0)
        if most < job.tasks:
            names = "/".join(partition_name(p) for p in self._layout)
            raise ValueError(
                f"policy {self.name!r}: job {job.id!r} runs {job.tasks} tasks, each on an "
                f"instance of size {'/'.join(map(str, sorted(usable))) or '-'} (runnable: "
                f"{sizes}, match={self.match}), but the static layout {names!r} has at most "
                f"{most} such instance(s) on one node; pass layout=... with more, or use "
                "a policy with dynamic partitioning"
            )

    def _check_layout(self, job: Job, sizes: tuple[int, ...]) -> None:
        """ValueError when a static layout has no instance ``job`` could ever run on."""
        if not self.dynamic and not self._static_size(sizes):
            names = "/".join(partition_name(p) for p in self._layout)
            raise ValueError(
                f"policy {self.name!r}: job {job.id!r} runs on sizes "
                f"{sizes} but the static layout {names!r} has no such instance; "
                "pass layout=... with one, or use a policy with dynamic partitioning"
            )


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


def _variant(name: str, **options) -> FragAwarePolicy:
    """The technique variant ``name`` (load balancing, dynamic partitioning, migration)."""
    lb, dp, mig = _VARIANTS[name]
    return FragAwarePolicy(name, load_balance=lb, dynamic=dp, migrate=mig, **options)


def make_frag_aware(**options) -> FragAwarePolicy:
    """``frag-aware``: every technique, each one switched off by its option
    (load_balance, dynamic, migrate)."""
    kw = {"load_balance": True, "dynamic": True, "migrate": True}
    kw.update({k: options.pop(k) for k in list(options) if k in kw})
    return FragAwarePolicy("frag-aware", **kw, **options)


def make_no_mig(**options) -> FragAwarePolicy:
    """``no-mig``: whole GPUs, every job on a full GPU; it takes neither layout nor match."""
    for k in ("layout", "match"):
        if k in options:
            raise TypeError(
                f"got an unexpected keyword argument {k!r} (no-mig runs every job on "
                "a whole GPU; a layout is static:layout=...)"
            )
    kw = {"load_balance": False, "dynamic": False, "migrate": False}
    return FragAwarePolicy("no-mig", **kw, layout="whole", match="fit", **options)


POLICIES: dict[str, Callable[..., FragAwarePolicy]] = {
    **{name: partial(_variant, name) for name in _VARIANTS},
    "frag-aware": make_frag_aware,
    "no-mig": make_no_mig,
}
