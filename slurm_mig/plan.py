"""The plan: the JSON contract every planner emits and every executor consumes,
an independent validator of its three constraints, and the metrics (ω, bound, ρ, σ).

The validator reads only the plan's JSON form and ``geometry``; it shares no
bookkeeping with the planners, so a planner bug cannot hide behind it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .geometry import GIB, GeometryError, GpuModel, Placement, Profile, Slot, get_model
from .job import Job

EPS = 1e-6


class PlanError(ValueError):
    """A plan that breaks a constraint, or JSON that is not a plan."""


@dataclass(frozen=True)
class PlannedTask:
    """A task on an instance from ``start`` to ``end``. ``running``: a job already on
    the GPU when the plan was made (its start is the plan's start), not planned by it."""

    id: str
    gpu: int
    slot: Slot
    start: float
    end: float
    batch: int = 0
    running: bool = False


@dataclass(frozen=True)
class Reconfiguration:
    gpu: int
    op: str  # "create" | "destroy"
    slot: Slot
    start: float
    end: float


@dataclass(frozen=True)
class Plan:
    """A schedule of tasks on MIG instances of ``gpus`` GPUs of one model.

    ``lower_bound`` is the tightest bound known on the batch's makespan, ``bound`` its
    name and ``bounds`` every cheap bound by name (`planner.bounds.makespan_bounds`;
    empty where the maker knew only ``lower_bound``); ``rho`` is measured against
    ``lower_bound``, ``area_rho`` against the area bound of the FAR paper's Section 6.4."""

    model: GpuModel
    gpus: int
    tasks: tuple[PlannedTask, ...]
    reconfigurations: tuple[Reconfiguration, ...]
    lower_bound: float
    planner: str
    initial_instances: tuple[tuple[int, Slot], ...] = ()
    stats: Mapping[str, Any] = field(default_factory=dict)
    bound: str = "area"
    bounds: Mapping[str, float] = field(default_factory=dict)

    @property
    def makespan(self) -> float:
        return max((t.end for t in self.tasks), default=0.0)

    @property
    def rho(self) -> float:
        return rho(self.makespan, self.lower_bound)

    @property
    def area_rho(self) -> float:
        """rho against the area bound (the FAR paper's rho)."""
        return rho(self.makespan, self.bounds.get("area", self.lower_bound))

    def to_json(self) -> dict:
        m = self.model

        def inst(gpu: int, slot: Slot) -> dict:
            return {
                "gpu": gpu,
                "profile": m.profile_for_slot(slot).name,
                "placement": slot.placement.to_json(),
                "slices": list(slot.slices),
            }

        return {
            "gpu_model": m.name,
            "gpus": self.gpus,
            "planner": self.planner,
            "makespan": round(self.makespan, 9),
            "lower_bound": round(self.lower_bound, 9),
            "bound": self.bound,
            **({"bounds": {k: round(v, 9) for k, v in self.bounds.items()}} if self.bounds else {}),
            "rho": round(self.rho, 6),
            "tasks": [
                {
                    "id": t.id,
                    "gpu": t.gpu,
                    "profile": m.profile_for_slot(t.slot).name,
                    "placement": t.slot.placement.to_json(),
                    "slices": list(t.slot.slices),
                    "start": round(t.start, 9),
                    "end": round(t.end, 9),
                    "batch": t.batch,
                    **({"running": True} if t.running else {}),
                }
                for t in sorted(self.tasks, key=lambda t: (t.start, t.gpu, t.slot))
            ],
            "reconfigurations": [
                {
                    "gpu": r.gpu,
                    "op": r.op,
                    "profile": m.profile_for_slot(r.slot).name,
                    "placement": r.slot.placement.to_json(),
                    "start": round(r.start, 9),
                    "end": round(r.end, 9),
                }
                for r in sorted(self.reconfigurations, key=lambda r: (r.start, r.gpu))
            ],
            "initial_instances": [inst(g, s) for g, s in self.initial_instances],
            "stats": dict(self.stats),
        }


# ---------------------------------------------------------------------------
# Metrics


def lower_bound(tasks: Iterable[Job], model: GpuModel, gpus: int = 1) -> float:
    """Area bound of Section 6.4: minimum work of every task spread over all slices.
    (`Job.min_work` written out: this runs for every plan, 1,000 tasks included.)"""
    total = 0.0
    for t in tasks:
        low = math.inf
        for s, x in t.times.items():
            w = s * x
            if w < low:
                low = w
        total += low
    return total / (model.compute_slices * gpus)


def rho(makespan: float, bound: float) -> float:
    return makespan / bound if bound > 0 else math.inf


def sigma(makespan_a: float, makespan_far: float) -> float:
    return makespan_a / makespan_far if makespan_far > 0 else math.inf


# ---------------------------------------------------------------------------
# Independent validation of a plan's JSON form


def _whole(item: Mapping[str, Any], key: str, where: str) -> int:
    """``item[key]`` as a whole number (1.0 is, 0.5 and true are not); PlanError else."""
    value = item.get(key) if isinstance(item, Mapping) else None
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or abs(value) >= 2**53:
        raise PlanError(f"{where}: '{key}' must be a whole number, got {_shown(value)}")
    return value


def _seconds(item: Mapping[str, Any], key: str, where: str) -> float:
    """``item[key]`` as finite seconds; PlanError else."""
    value = item.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PlanError(f"{where}: '{key}' must be a number of seconds, got {_shown(value)}")
    try:
        seconds = float(value)
    except OverflowError:
        seconds = math.inf
    if not math.isfinite(seconds):
        raise PlanError(f"{where}: '{key}' must be a finite number of seconds")
    return seconds


def _shown(value: object) -> str:
    text = json_text(value)
    return text if len(text) <= 40 else f"{text[:30]}... ({len(text)} characters)"


def json_text(value: object) -> str:
    """How a JSON value is written (null, true, "x"), for messages."""
    import json

    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


_ITEM_NAMES = {
    "tasks": "task",
    "reconfigurations": "reconfiguration",
    "initial_instances": "initial instance",
}


def _items(data: Mapping[str, Any], key: str, errors: list[str]) -> list[tuple[str, Mapping]]:
    """(where, item) for each object of the list ``data[key]``; other entries become errors."""
    raw = data.get(key, [])
    if not isinstance(raw, list):
        errors.append(f"plan: '{key}' must be a list, got {_shown(raw)}")
        return []
    name, out = _ITEM_NAMES[key], []
    for i, item in enumerate(raw):
        if not isinstance(item, Mapping):
            errors.append(f"{name} #{i + 1}: must be an object, got {_shown(item)}")
            continue
        tid = item.get("id") if key == "tasks" else None
        named = isinstance(tid, str | int) and not isinstance(tid, bool)
        out.append((f"{name} {tid!r}" if named else f"{name} #{i + 1}", item))
    return out


def _slot_of(model: GpuModel, item: Mapping[str, Any], where: str) -> Slot:
    try:
        profile = model.profile(str(item["profile"]))
        pl = item["placement"]
        if not isinstance(pl, Mapping):
            raise TypeError
        placement = Placement(_whole(pl, "start", where), _whole(pl, "size", where))
    except PlanError:
        raise
    except GeometryError as exc:
        raise PlanError(f"{where}: {exc}") from None
    except (KeyError, TypeError, ValueError) as exc:
        raise PlanError(f"{where}: needs 'profile' and 'placement' {{start, size}}") from exc
    if placement not in profile.placements:
        raise PlanError(
            f"{where}: placement {placement.start}:{placement.size} is not legal for "
            f"{profile.name} (legal starts {list(profile.starts)})"
        )
    return Slot(placement, profile.compute_slices)


@dataclass(frozen=True)
class _Run:
    """One task entry of a plan's JSON as the validator reads it (no planner types)."""

    id: str
    gpu: int
    slot: Slot
    start: float
    end: float
    profile: Profile  # the profile it runs on, for the memory check
    running: bool  # already on the GPU when the plan was made: not the batch's to cover


_Operation = tuple[float, float, str, Slot]  # (start, end, "create" | "destroy", slot)
_Lifetime = tuple[Slot, float, float]  # (slot, usable from, usable until)


def _header(data: Mapping[str, Any]) -> tuple[GpuModel, int]:
    """The plan's GPU model and GPU count; PlanError naming the header else."""
    try:
        model = get_model(str(data.get("gpu_model")))
        gpus = _whole(data, "gpus", "plan header")
    except GeometryError as exc:
        raise PlanError(f"plan header: {exc}") from None
    return model, gpus


def _gpu_problem(gpu: int, gpus: int, where: str) -> str | None:
    """The message for a GPU index outside the plan's GPUs, None when inside."""
    return None if 0 <= gpu < gpus else f"{where}: gpu {gpu} outside 0..{gpus - 1}"


def _read_run(model: GpuModel, gpus: int, where: str, t: Mapping) -> tuple[_Run, list[str]]:
    """A task entry and what is wrong with its GPU, slices or interval (PlanError if unreadable)."""
    slot = _slot_of(model, t, where)
    gpu = _whole(t, "gpu", where)
    start, end = _seconds(t, "start", where), _seconds(t, "end", where)
    problems = [p for p in (_gpu_problem(gpu, gpus, where),) if p]
    slices = t.get("slices", list(slot.slices))
    if not isinstance(slices, list) or slices != list(slot.slices):
        problems.append(
            f"{where}: slices {_shown(slices)} but its placement gives {list(slot.slices)}"
        )
    if not (start >= -EPS and end >= start):
        problems.append(f"{where}: bad interval [{start}, {end}]")
    profile = model.profile(str(t["profile"]))
    run = _Run(str(t.get("id")), gpu, slot, start, end, profile, t.get("running") is True)
    return run, problems


def _read_runs(
    data: Mapping[str, Any], model: GpuModel, gpus: int, errors: list[str]
) -> list[_Run]:
    """Every readable task entry; its placement, size and interval problems go to ``errors``."""
    runs = []
    for where, t in _items(data, "tasks", errors):
        try:
            run, problems = _read_run(model, gpus, where, t)
        except PlanError as exc:
            errors.append(str(exc))
            continue
        errors.extend(problems)
        runs.append(run)
    return runs


def _memory_problem(run: _Run, task: Job) -> str | None:
    """The message when the task needs more memory than its instance's profile has."""
    prof = run.profile
    if task.memory and task.memory > prof.memory_bytes:
        return (
            f"task {run.id!r}: needs {task.memory / GIB:.2f} GiB of memory, "
            f"{prof.name} has {prof.memory_bytes / GIB:.2f} GiB"
        )
    return None


def _time_problem(run: _Run, task: Job) -> str | None:
    """The message when the run's length is not the task's time on its size."""
    size = run.slot.size
    want = task.times.get(size)
    if want is None or math.isinf(want):
        return f"task {run.id!r}: cannot run on size {size}"
    if abs((run.end - run.start) - want) > EPS * max(1.0, want):
        return f"task {run.id!r}: runs {run.end - run.start:.6f}s, needs {want:.6f}s on size {size}"
    return None


def _coverage_problems(runs: Sequence[_Run], tasks: Sequence[Job]) -> list[str]:
    """Each batch task planned exactly once, for its time on its size, within memory."""
    problems: list[str] = []
    by_id = {t.id: t for t in tasks}
    counts: dict[str, int] = defaultdict(int)
    for run in runs:
        if run.running:
            continue
        counts[run.id] += 1
        task = by_id.get(run.id)
        if task is None:
            problems.append(f"task {run.id!r}: not in the batch")
            continue
        found = (_memory_problem(run, task), _time_problem(run, task))
        problems.extend(p for p in found if p)
    for tid in by_id:
        if counts.get(tid, 0) != 1:
            problems.append(f"task {tid!r}: scheduled {counts.get(tid, 0)} times, must be once")
    return problems


def _overlap_problems(runs: Sequence[_Run]) -> list[str]:
    """Constraint (1): a GPU's compute slice is used by one task at a time."""
    per_slice: dict[tuple[int, int], list[tuple[float, float, str]]] = defaultdict(list)
    for run in runs:
        for s in run.slot.slices:
            per_slice[(run.gpu, s)].append((run.start, run.end, run.id))
    problems = []
    for (gpu, s), spans in per_slice.items():
        spans.sort()
        for (_a0, a1, ta), (b0, _b1, tb) in zip(spans, spans[1:]):
            if b0 < a1 - EPS:
                problems.append(f"gpu {gpu} slice {s}: tasks {ta!r} and {tb!r} overlap in time")
    return problems


def _read_operation(
    model: GpuModel, gpus: int, where: str, r: Mapping
) -> tuple[int, _Operation | None, list[str]]:
    """(gpu, operation or None when unusable, problems) of a reconfiguration entry."""
    slot = _slot_of(model, r, where)
    gpu = _whole(r, "gpu", where)
    start, end, op = _seconds(r, "start", where), _seconds(r, "end", where), r.get("op")
    if op not in ("create", "destroy"):
        return gpu, None, [f"{where}: op {_shown(op)} must be create or destroy"]
    outside = _gpu_problem(gpu, gpus, where)
    if outside:
        return gpu, None, [outside]
    need = model.create_time(slot.size) if op == "create" else model.destroy_time(slot.size)
    problems = []
    if end - start < need - EPS:
        problems.append(
            f"{where}: {op} of size {slot.size} takes {end - start:.3f}s, hardware needs {need:.3f}s"
        )
    return gpu, (start, end, op, slot), problems


def _read_operations(
    data: Mapping[str, Any], model: GpuModel, gpus: int, errors: list[str]
) -> dict[int, list[_Operation]]:
    """Each GPU's usable create/destroy operations; their problems go to ``errors``."""
    ops_by_gpu: dict[int, list[_Operation]] = defaultdict(list)
    for where, r in _items(data, "reconfigurations", errors):
        try:
            gpu, op, problems = _read_operation(model, gpus, where, r)
        except PlanError as exc:
            errors.append(str(exc))
            continue
        errors.extend(problems)
        if op is not None:
            ops_by_gpu[gpu].append(op)
    return ops_by_gpu


def _read_initial(
    data: Mapping[str, Any], model: GpuModel, gpus: int, errors: list[str]
) -> dict[int, list[Slot]]:
    """Each GPU's instances at the plan's start; unreadable entries go to ``errors``."""
    initial: dict[int, list[Slot]] = defaultdict(list)
    for where, inst in _items(data, "initial_instances", errors):
        try:
            gpu, slot = _whole(inst, "gpu", where), _slot_of(model, inst, where)
        except PlanError as exc:
            errors.append(str(exc))
            continue
        outside = _gpu_problem(gpu, gpus, where)
        if outside:
            errors.append(outside)
            continue
        initial[gpu].append(slot)
    return initial


def _sequence_problems(gpu: int, ops: Sequence[_Operation]) -> list[str]:
    """Constraint (3): a GPU's operations (sorted by start) run one after another."""
    return [
        f"gpu {gpu}: {prev[2]} {prev[3]} and {cur[2]} {cur[3]} run at the same time; reconfigurations are sequential"
        for prev, cur in zip(ops, ops[1:])
        if cur[0] < prev[1] - EPS
    ]


def _replay_gpu(
    gpu: int, initial: Sequence[Slot], ops: Sequence[_Operation]
) -> tuple[list[_Lifetime], list[str]]:
    """Constraints (2) and (3) on one GPU: its instances' lifetimes and the problems met."""
    problems: list[str] = []
    live: dict[Slot, float] = {}
    for slot in initial:
        clash = [o for o in live if o.placement.overlaps(slot.placement)]
        if clash:
            problems.append(f"gpu {gpu}: initial instances {clash[0]} and {slot} overlap")
        live[slot] = -math.inf
    ops = sorted(ops, key=lambda o: (o[0], o[1]))
    problems += _sequence_problems(gpu, ops)
    lifetimes: list[_Lifetime] = []
    for start, end, op, slot in ops:
        if op == "create":
            clash = [o for o in live if o.placement.overlaps(slot.placement)]
            if clash:
                problems.append(
                    f"gpu {gpu}: create {slot} at {start:.3f}s overlaps live instance {clash[0]}"
                )
            live[slot] = end
        elif slot not in live:
            problems.append(f"gpu {gpu}: destroy of {slot} at {start:.3f}s, which does not exist")
        else:
            lifetimes.append((slot, live.pop(slot), start))
    lifetimes += [(slot, usable, math.inf) for slot, usable in live.items()]
    return lifetimes, problems


def _instance_problems(
    model: GpuModel, runs: Sequence[_Run], lifetimes: Mapping[int, list[_Lifetime]]
) -> list[str]:
    """Constraint (3): every task runs on an instance that exists for its whole run."""
    problems = []
    for run in runs:
        slot, start, end = run.slot, run.start, run.end
        if not any(
            s == slot and lo <= start + EPS and end <= hi + EPS
            for s, lo, hi in lifetimes.get(run.gpu, [])
        ):
            problems.append(
                f"task {run.id!r}: no instance {model.profile_for_slot(slot).name} at "
                f"{slot.placement.start}:{slot.placement.size} on gpu {run.gpu} exists for all of [{start:.3f}, {end:.3f}]"
            )
    return problems


def validate_plan(data: Mapping[str, Any], tasks: Sequence[Job] | None = None) -> list[str]:
    """Return every violation of the plan's constraints (empty list = valid).

    (1) tasks on a common compute slice never overlap in time; (2) live instances of
    a GPU are always pairwise disjoint legal placements; (3) a GPU's create/destroy
    operations run one after another, each at least as long as the hardware needs,
    and a task runs only on an instance that exists for its whole run.
    """
    if not isinstance(data, Mapping):
        return [f"plan: expected an object, got {_shown(data)}"]
    try:
        model, gpus = _header(data)
    except PlanError as exc:
        return [str(exc)]
    errors: list[str] = []
    runs = _read_runs(data, model, gpus, errors)
    if tasks is not None:
        errors += _coverage_problems(runs, tasks)
    errors += _overlap_problems(runs)
    ops_by_gpu = _read_operations(data, model, gpus, errors)
    initial = _read_initial(data, model, gpus, errors)
    lifetimes: dict[int, list[_Lifetime]] = {}
    for gpu in set(ops_by_gpu) | set(initial):
        lifetimes[gpu], problems = _replay_gpu(gpu, initial[gpu], ops_by_gpu[gpu])
        errors += problems
    errors += _instance_problems(model, runs, lifetimes)
    return errors


def check_plan(data: Mapping[str, Any], tasks: Sequence[Job] | None = None) -> None:
    """Raise PlanError naming the first few violations, if any."""
    errors = validate_plan(data, tasks)
    if errors:
        more = f" (+{len(errors) - 3} more)" if len(errors) > 3 else ""
        raise PlanError("; ".join(errors[:3]) + more)
