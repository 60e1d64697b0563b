"""The baselines FAR is compared against (FAR paper, Section 6.5).

FIXPART(P): a static partition P, configured before the batch and never changed;
tasks go in FIFO order to the instance that frees first. FIXPARTBEST: the FIXPART(P)
with the lowest makespan over every valid partition. MISO-OPT (MISO's optimizer):
in FIFO order, repeatedly pick the partition whose instances, taken left to right by
the next tasks, maximise the sum of their speedups over one slice; unlike the
paper's simulation, our plan pays the sequential create/destroy times this needs.

These are batch baselines (FAR's Section 6.5: one batch on idle GPUs), for ``plan``
and ``bench``; they are not what a site runs in a stream of jobs:

* ``miso-opt`` is FAR's reading of MISO's optimizer, not MISO's scheduler (SoCC'22:
  each arriving job goes to the GPU with the fewest jobs, which is repartitioned into
  exactly as many instances as it has jobs at the least mean slowdown, its running
  jobs checkpointed and moved; a GPU is repartitioned again when a job leaves). In a
  stream (``simulate``) each batch is planned for idle GPUs and appended behind the
  work already on them, and the next batch waits until its last job has started: on
  miso-trace (40 A100s, load 0.5-1.5) 24-28 % utilisation and 1.4-4.3 x the mean JCT
  of whole GPUs, where MISO's paper reports 0.24 x. ``simulate`` therefore refuses it;
  the stream baselines are ``static`` and ``no-mig`` (``planner.online``).
* ``fixpart-*`` in ``simulate`` are not a static site either: ``fixpart-best`` picks
  a partition per batch and repartitions between batches (miso-trace, 40 A100s: 164
  creates, 124 destroys), and ``fixpart-SIZES`` keeps its partition but plans each
  batch FIFO behind the previous one's work instead of starting a job on any idle
  instance (2.5 x the mean JCT of ``static`` with the same layout there). A site's
  fixed layout is ``static:layout=...``.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from ..geometry import GpuModel, Slot, partition_name, valid_partitions
from ..job import Job
from ..plan import Plan
from .batch import Batch, UnknownPlanner
from .registry import BatchPolicy
from .snapshot import Gpu, Instance
from .timeline import Use, retime_onto, run_uses, to_plan

Partition = tuple[Slot, ...]
_TIE = 1e-12  # relative: speedup sums this close are a tie (linear scaling is exact in theory)


class InfeasiblePartition(ValueError):
    """A task that has no finite time on any instance size of a fixed partition."""


# ---------------------------------------------------------------------------
# FIXPART(P)


def _fixpart_assign(
    tasks: Sequence[Job], partition: Partition, gpus: int, model: GpuModel
) -> tuple[dict[tuple[int, Slot], list[int]], float]:
    """FIFO first-free assignment on P replicated on ``gpus`` GPUs; returns (tasks per
    instance, makespan), so FIXPARTBEST can rank partitions without building plans."""
    slots = sorted(partition)
    free = {(g, s): 0.0 for g in range(gpus) for s in slots}
    assign: dict[tuple[int, Slot], list[int]] = {key: [] for key in free}
    for k, task in enumerate(tasks):
        best: tuple[float, int, int] | None = None
        where: tuple[int, Slot] | None = None
        for g in range(gpus):
            for s in slots:
                d = task.times.get(s.size, math.inf)
                if math.isinf(d):
                    continue
                key = (free[(g, s)], s.placement.start, g)  # first free, leftmost, lower GPU
                if best is None or key < best:
                    best, where = key, (g, s)
        if where is None:
            finite = sorted(s for s, t in task.times.items() if not math.isinf(t))
            raise InfeasiblePartition(
                f"task {task.id!r} cannot run on any instance of partition "
                f"{partition_name(partition)} of {model.name} (it runs only on sizes "
                f"{', '.join(map(str, finite))}); choose a partition with one of those sizes"
            )
        assign[where].append(k)
        free[where] += task.times[where[1].size]
    return {key: ks for key, ks in assign.items() if ks}, max(free.values(), default=0.0)


def _fixpart_plan(
    batch: Batch,
    partition: Partition,
    assign: dict[tuple[int, Slot], list[int]],
    planner: str,
    stats: dict,
    t0: float,
) -> Plan:
    """Time a FIXPART assignment on pre-configured instances (no create/destroy ops)."""
    slots = sorted(partition)
    uses = [Use(g, s, list(ks)) for (g, s), ks in sorted(assign.items())]
    ready = tuple(Instance(s, ready_at=0.0) for s in slots)
    start = [Gpu(g, ready) for g in range(batch.gpus)]
    timeline = run_uses(batch.model, batch.tasks, uses, batch.gpus, start)
    initial = [(g, s) for g in range(batch.gpus) for s in slots]
    stats = {"planning_seconds": time.perf_counter() - t0, **stats}
    return to_plan(
        batch.model, batch.tasks, timeline, batch.gpus, planner, initial=initial, stats=stats
    )


def _parse_spec(spec: str) -> tuple[int, ...]:
    """Sizes of a ``fixpart-<spec>`` name (``4-2-1`` or ``4,2,1``), left to right."""
    text = spec.strip()
    if not re.fullmatch(r"\d+([-,]\d+)*", text):
        raise UnknownPlanner(
            f"fixpart-{spec}: {spec!r} is not instance sizes separated by '-' "
            "(e.g. fixpart-7, fixpart-4-3, fixpart-1-1-1-1-1-1-1), nor fixpart-best"
        )
    return tuple(int(x) for x in re.split(r"[-,]", text))


def _resolve(sizes: tuple[int, ...], model: GpuModel) -> Partition:
    """The valid partition of ``model`` whose sizes read ``sizes`` left to right."""
    name = "-".join(map(str, sizes))
    for p in valid_partitions(model.name):
        if partition_name(p) == name:
            return p
    valid = ", ".join(partition_name(p) for p in valid_partitions(model.name))
    raise UnknownPlanner(
        f"fixpart-{name}: {name} is not a valid MIG partition of {model.name}; "
        f"valid partitions (left to right): {valid}"
    )


def _as_partition(partition: Sequence[Slot] | str, model: GpuModel) -> Partition:
    """Accept a spec string or a set of slots; insist on one of the model's partitions."""
    if isinstance(partition, str):
        return _resolve(_parse_spec(partition), model)
    p = tuple(sorted(partition))
    if p not in valid_partitions(model.name):
        valid = ", ".join(partition_name(q) for q in valid_partitions(model.name))
        raise ValueError(f"{list(p)} is not a valid MIG partition of {model.name}; valid: {valid}")
    return p


def plan_fixpart(batch: Batch, partition: Sequence[Slot] | str) -> Plan:
    """FIXPART(P): a static partition, no reconfiguration, FIFO on the first free
    instance; the paper's baseline for a cluster that never repartitions."""
    t0 = time.perf_counter()
    p = _as_partition(partition, batch.model)
    assign, _ = _fixpart_assign(batch.tasks, p, batch.gpus, batch.model)
    name = partition_name(p)
    stats: dict = {"partition": name}
    return _fixpart_plan(batch, p, assign, f"fixpart({name})", stats, t0)


def fixpart_planner(spec: str) -> Callable[[Batch], Plan]:
    """The planner for ``fixpart-<spec>``; the spec is checked against the batch's
    model when it is called, because only then is the model known."""
    sizes = _parse_spec(spec)

    def plan(batch: Batch) -> Plan:
        return plan_fixpart(batch, _resolve(sizes, batch.model))

    plan.__name__ = plan.__qualname__ = "plan_fixpart_" + "_".join(map(str, sizes))
    plan.__doc__ = f"FIXPART({'-'.join(map(str, sizes))}): static partition, FIFO first free."
    return plan


def plan_fixpart_best(batch: Batch) -> Plan:
    """FIXPARTBEST: the best static partition for this batch, i.e. what an oracle
    picking one fixed partition per batch achieves without reconfiguring."""
    t0 = time.perf_counter()
    best: tuple[float, Partition, dict] | None = None
    makespans: dict[str, float | None] = {}
    reasons: list[str] = []
    for p in valid_partitions(batch.model.name):
        try:
            assign, makespan = _fixpart_assign(batch.tasks, p, batch.gpus, batch.model)
        except InfeasiblePartition as exc:
            makespans[partition_name(p)] = None
            reasons.append(str(exc))
            continue
        makespans[partition_name(p)] = makespan
        if best is None or makespan < best[0]:  # strict: the first partition wins ties
            best = (makespan, p, assign)
    if best is None:
        raise InfeasiblePartition(
            f"no partition of {batch.model.name} can run every task of the batch; "
            + "; ".join(reasons[:3])
        )
    _, p, assign = best
    stats: dict = {"partition": partition_name(p), "makespans": makespans}
    return _fixpart_plan(batch, p, assign, "fixpart-best", stats, t0)


# ---------------------------------------------------------------------------
# MISO-OPT


def _speedups(task: Job) -> dict[int, float]:
    """speedup(s) = t(1)/t(s) over the sizes the task can run on (reference: the
    smallest finite size when t(1) is inf)."""
    finite = {s: t for s, t in task.times.items() if not math.isinf(t)}
    if not finite:
        raise ValueError(f"task {task.id!r} cannot run on any size (all times are inf)")
    ref = finite[min(finite)]
    return {s: ref / t for s, t in finite.items()}


def _choose_partition(
    speed: Sequence[dict[int, float]], k: int, partitions: Sequence[Partition]
) -> tuple[Partition, int]:
    """MISO's rule: the partition maximising the sum of speedups of tasks k, k+1, ...
    on its instances left to right; returns it and how many tasks it takes.

    A partition that puts a task on a size where it cannot run is not a candidate.
    Should none remain, a partition may take only the runnable prefix of its
    instances (one always exists: every size has an instance at slice 0).
    """
    remaining = len(speed) - k
    for prefix_ok in (False, True):
        best: tuple[float, Partition, int] | None = None
        for p in partitions:
            m = min(len(p), remaining)
            total, taken = 0.0, 0
            for i in range(m):
                sp = speed[k + i].get(p[i].size)
                if sp is None:
                    break
                total += sp
                taken += 1
            if taken < m and not (prefix_ok and taken > 0):
                continue
            # strictly better (beyond float noise): the first in Fig. 1 order wins ties
            if best is None or total > best[0] * (1 + _TIE):
                best = (total, p, taken)
        if best is not None:
            return best[1], best[2]
    raise AssertionError("unreachable: a task with a finite size always fits a partition")


def plan_miso_opt(batch: Batch) -> Plan:
    """MISO-OPT: FIFO rounds, each on the partition maximising the summed speedup of
    the next tasks; each instance starts once the earlier tasks on its slices end (as
    in the authors' simulator), here paying real reconfiguration times."""
    t0 = time.perf_counter()
    model, tasks, gpus = batch.model, batch.tasks, batch.gpus
    partitions = valid_partitions(model.name)
    speed = [_speedups(t) for t in tasks]
    uses: list[Use] = []
    per_gpu: list[list[Use]] = [[] for _ in range(gpus)]
    free = [0.0] * gpus  # when all of a GPU's instances so far are done
    names: list[str] = []
    round_gpus: list[int] = []
    k = 0
    while k < len(tasks):
        p, m = _choose_partition(speed, k, partitions)
        g = min(range(gpus), key=lambda i: (free[i], i))
        for i in range(m):
            use = Use(g, p[i], [k + i])
            uses.append(use)
            per_gpu[g].append(use)
        if gpus > 1:  # GPUs are independent in run_uses: time just this one
            free[g] = run_uses(model, tasks, per_gpu[g], gpus).makespan
        names.append(partition_name(p))
        round_gpus.append(g)
        k += m
    timeline = run_uses(model, tasks, uses, gpus)
    stats = {
        "planning_seconds": time.perf_counter() - t0,
        "rounds": len(names),
        "partitions": names,
        "round_gpus": round_gpus,
    }
    return to_plan(model, tasks, timeline, gpus, "miso-opt", stats=stats)


# ---------------------------------------------------------------------------
# The registry's entries


def _onto(plan_idle: Callable[[Batch], Plan]) -> Callable[[Batch], Plan]:
    """A baseline onto busy GPUs: its plan for idle GPUs appended after their work (a
    baseline knows no better; a static partition is then created, not pre-configured)."""

    def plan(batch: Batch) -> Plan:
        if not batch.busy:
            return plan_idle(batch)
        assert batch.start is not None
        t0 = time.perf_counter()
        idle = plan_idle(replace(batch, start=None))
        tl = retime_onto(idle, batch.tasks, batch.start, batch.number)
        out = to_plan(batch.model, batch.tasks, tl, batch.gpus, idle.planner, start=batch.start)
        return replace(out, stats={**idle.stats, "planning_seconds": time.perf_counter() - t0})

    return plan


def _no_options(options: dict) -> None:
    if options:
        raise TypeError(f"unexpected argument {next(iter(options))!r}")


def make_miso_opt(**options) -> BatchPolicy:
    """Registry factory of ``miso-opt`` (no options)."""
    _no_options(options)
    return BatchPolicy("miso-opt", _onto(plan_miso_opt))


def make_fixpart_best(**options) -> BatchPolicy:
    """Registry factory of ``fixpart-best`` (no options)."""
    _no_options(options)
    return BatchPolicy("fixpart-best", _onto(plan_fixpart_best))


def make_fixpart(sizes: str, **options) -> BatchPolicy:
    """Registry factory of ``fixpart-SIZES``: the registry passes ``SIZES`` (``4-3``)."""
    _no_options(options)
    return BatchPolicy(f"fixpart-{sizes}", _onto(fixpart_planner(sizes)))


POLICIES = {
    "miso-opt": make_miso_opt,
    "fixpart-best": make_fixpart_best,
    "fixpart-SIZES": make_fixpart,
}
