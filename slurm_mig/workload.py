"""Task files and the synthetic generator of the FAR paper (Section 6.3): a task is
the planning core's `Job` (``slurm_mig.job``) with a runtime per instance size, arrived
at 0."""

from __future__ import annotations

import csv
import io
import math
import random
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources
from pathlib import Path

from .geometry import GpuModel
from .inputs import InputError, control_character, read_text
from .inputs import parse_json as _load_json
from .job import Job

# Embedded task tables: name -> (file in slurm_mig/data, its GPU model).
BUILTIN_TASKS = {"rodinia-a100": ("rodinia_a100.csv", "A100-40GB")}


class WorkloadError(ValueError):
    """Bad task input; the message names the file, the row or field, and the fix."""


def validate(tasks: Sequence[Job], model: GpuModel, source: str = "tasks") -> None:
    """Raise WorkloadError unless every task has a finite-or-inf, positive time for
    exactly the model's instance sizes and ids are unique."""
    if not tasks:
        raise WorkloadError(f"{source}: no tasks; give at least one task")
    sizes = set(model.planner_sizes)
    seen: set[str] = set()
    for task in tasks:
        if not task.id:
            raise WorkloadError(f"{source}: a task has an empty id; give every task an id")
        if task.id in seen:
            raise WorkloadError(f"{source}: duplicate task id {task.id!r}; ids must be unique")
        seen.add(task.id)
        extra = set(task.times) - sizes
        if extra:
            raise WorkloadError(
                f"{source}: task {task.id!r} has a time for size {min(extra)}, which "
                f"{model.name} does not have; sizes are "
                f"{', '.join(map(str, model.planner_sizes))}"
            )
        missing = sizes - set(task.times)
        if missing:
            raise WorkloadError(
                f"{source}: task {task.id!r} has no time for size {min(missing)}; give "
                f"one per size ({', '.join(map(str, model.planner_sizes))}), "
                "or 'inf' where it cannot run"
            )
        for size, t in task.times.items():
            if isinstance(t, bool) or not isinstance(t, (int, float)) or math.isnan(t):
                raise WorkloadError(
                    f"{source}: task {task.id!r} size {size}: time {t!r} is not a number"
                )
            if t <= 0:
                raise WorkloadError(
                    f"{source}: task {task.id!r} size {size}: time {t} must be > 0 seconds"
                )
        if all(math.isinf(t) for t in task.times.values()):
            raise WorkloadError(
                f"{source}: task {task.id!r} cannot run on any size (all times are inf)"
            )


MAX_TIME = 1e12  # seconds (31 700 years): a larger finite time is a typo


def _short(text: object) -> str:
    raw = repr(text)
    return raw if len(raw) <= 40 else f"{raw[:30]}...({len(raw)} characters)"


def _number(text: str, where: str) -> float:
    raw = text.strip()
    if raw == "":
        raise WorkloadError(f"{where}: missing time; give seconds or 'inf'")
    try:
        value = float(raw)
    except ValueError:
        raise WorkloadError(f"{where}: time {_short(raw)} is not a number") from None
    if math.isnan(value):
        raise WorkloadError(f"{where}: time is NaN; give seconds or 'inf'")
    return _bounded(value, raw, where)


def _bounded(value: float, raw: object, where: str) -> float:
    """``value`` unless it is finite and above MAX_TIME, or overflowed to inf from a
    finite number (a 400-digit integer)."""
    literal_inf = (isinstance(raw, float) and math.isinf(raw)) or (
        isinstance(raw, str) and raw.strip().lower().lstrip("+") in ("inf", "infinity")
    )
    if value > MAX_TIME and not (math.isinf(value) and literal_inf):
        raise WorkloadError(
            f"{where}: time {_short(raw)} is more than {MAX_TIME:g} seconds; give seconds, "
            "or 'inf' where the task cannot run"
        )
    return value


def _size(text: str, where: str) -> int:
    raw = str(text).strip().lower().rstrip("g")
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 3):
        raise WorkloadError(
            f"{where}: size {_short(text)} is not a number of slices (e.g. 1, 2, 3g)"
        )
    return int(raw)


def _task_id(value: object, where: str) -> str:
    """A task id: a non-empty string or a whole number, without control characters
    (ids are printed one per table line)."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        shown = (
            "null"
            if value is None
            else str(value).lower()
            if isinstance(value, bool)
            else _short(value)
        )
        raise WorkloadError(
            f"{where}: id {shown} is not a task id; give a non-empty string or a whole number"
        )
    tid = str(value).strip() if isinstance(value, str) else str(value)
    if not tid:
        raise WorkloadError(f"{where}: empty id; give every task an id")
    if len(tid) > 256:
        raise WorkloadError(f"{where}: id {_short(value)} is longer than 256 characters")
    bad = control_character(tid)
    if bad:
        raise WorkloadError(
            f"{where}: id {_short(tid)} contains the control character {bad}; ids are "
            "printed one per line: remove it"
        )
    return tid


def parse_csv(text: str, source: str = "tasks") -> list[Job]:
    """Wide ``id,1,2,3,4,7`` or long ``kernel,size,seconds`` CSV (header required)."""
    rows = [r for r in csv.reader(io.StringIO(text)) if r and any(c.strip() for c in r)]
    if not rows:
        raise WorkloadError(f"{source}: empty file; expected a CSV header and tasks")
    header = [h.strip().lower() for h in rows[0]]
    if len(header) == 3 and header[1] == "size" and header[2] in ("seconds", "time"):
        return _parse_long(rows, source)
    if len(header) < 2:
        raise WorkloadError(
            f"{source}: header {','.join(rows[0])!r} is neither 'id,1,2,...' nor "
            "'kernel,size,seconds'"
        )
    sizes = [_size(h, f"{source}: header column {i + 2}") for i, h in enumerate(header[1:])]
    if len(set(sizes)) != len(sizes):
        raise WorkloadError(f"{source}: header repeats a size")
    tasks = []
    for lineno, row in enumerate(rows[1:], start=2):
        if len(row) != len(header):
            raise WorkloadError(f"{source}:{lineno}: {len(row)} columns, header has {len(header)}")
        tid = _task_id(row[0], f"{source}:{lineno}")
        times = {
            s: _number(v, f"{source}:{lineno} (task {tid!r}, size {s})")
            for s, v in zip(sizes, row[1:])
        }
        tasks.append(Job(tid, 0.0, times))
    if not tasks:
        raise WorkloadError(f"{source}: header only, no tasks")
    return tasks


def _parse_long(rows: list[list[str]], source: str) -> list[Job]:
    times: dict[str, dict[int, float]] = {}
    for lineno, row in enumerate(rows[1:], start=2):
        if len(row) != 3:
            raise WorkloadError(f"{source}:{lineno}: expected kernel,size,seconds")
        tid = _task_id(row[0], f"{source}:{lineno}")
        size = _size(row[1], f"{source}:{lineno}")
        per = times.setdefault(tid, {})
        if size in per:
            raise WorkloadError(f"{source}:{lineno}: task {tid!r} size {size} given twice")
        per[size] = _number(row[2], f"{source}:{lineno} (task {tid!r}, size {size})")
    if not times:
        raise WorkloadError(f"{source}: header only, no tasks")
    return [Job(tid, 0.0, per) for tid, per in times.items()]


def parse_json(text: str, source: str = "tasks") -> list[Job]:
    """``[{"id": "a", "times": {"1": 10.0, ...}}, ...]`` or ``{"tasks": [...]}``."""
    try:
        data = _load_json(text, source)
    except InputError as exc:
        raise WorkloadError(str(exc)) from None
    if isinstance(data, dict) and "tasks" in data:
        data = data["tasks"]
    if not isinstance(data, list):
        raise WorkloadError(f'{source}: expected a list of tasks or {{"tasks": [...]}}')
    tasks = []
    for i, item in enumerate(data):
        where = f"{source}: task #{i + 1}"
        if not isinstance(item, dict) or "times" not in item or "id" not in item:
            raise WorkloadError(f"{where}: expected an object with 'id' and 'times'")
        if not isinstance(item["times"], dict):
            raise WorkloadError(f"{where}: 'times' must map size to seconds")
        times = {}
        for k, v in item["times"].items():
            size = _size(k, where)
            if size in times:
                raise WorkloadError(f"{where}: size {size} given twice")
            if isinstance(v, str):
                times[size] = _number(v, f"{where} size {size}")
                continue
            if not isinstance(v, (int, float)) or isinstance(v, bool):
                raise WorkloadError(f"{where} size {size}: time {_short(v)} is not a number")
            if isinstance(v, int) and v > MAX_TIME:  # float() of a huge int overflows
                _bounded(math.inf, v, f"{where} size {size}")
            times[size] = _bounded(float(v), v, f"{where} size {size}")
        mem = item.get("memory_bytes")
        if mem is not None and (isinstance(mem, bool) or not isinstance(mem, int) or mem < 0):
            raise WorkloadError(
                f"{where}: memory_bytes {mem!r} must be a whole number of bytes >= 0"
            )
        tasks.append(Job(_task_id(item["id"], where), 0.0, times, mem or 0))
    return tasks


def load_tasks(path: str | Path, model: GpuModel) -> list[Job]:
    """Load and validate a task file (CSV wide/long or JSON) for ``model``."""
    p = Path(path)
    try:
        text = read_text(p)
    except InputError as exc:
        raise WorkloadError(str(exc)) from None
    if not text.strip():
        raise WorkloadError(f"{p}: empty file; expected CSV or JSON tasks")
    if p.suffix.lower() == ".json" or text.lstrip()[:1] in "[{":
        tasks = parse_json(text, str(p))
    else:
        tasks = parse_csv(text, str(p))
    validate(tasks, model, str(p))
    return tasks


def load_task_source(source: str, model: GpuModel) -> list[Job]:
    """Tasks from a file, or from the embedded table named ``source`` (``rodinia-a100``)."""
    key = source.strip().lower()
    if key in BUILTIN_TASKS and not Path(source).exists():
        filename, _ = BUILTIN_TASKS[key]
        text = resources.files("slurm_mig").joinpath("data", filename).read_text()
        tasks = parse_csv(text, key)
        validate(tasks, model, key)
        return tasks
    return load_tasks(source, model)


# ---------------------------------------------------------------------------
# Synthetic generator, Section 6.3.

SCALING = {
    "POORSCALING": {1: 0.5, 2: 0.5},
    "MIXEDSCALING": {1: 0.2, 2: 0.2, 3: 0.2, 4: 0.2, 7: 0.2},
    "GOODSCALING": {4: 0.5, 7: 0.5},
}
TIMES = {"WIDETIMES": (1.0, 100.0), "NARROWTIMES": (90.0, 100.0)}
_STAY_MEMORY_BOUND = 0.7  # transition to compute-bound with probability 0.3 per slice


def _clipped(rng: random.Random, mu: float, sigma: float, lo: float, hi: float) -> float:
    return min(hi, max(lo, rng.gauss(mu, sigma)))


def _counts(n: int, shares: Mapping[int, float], sizes: Sequence[int]) -> dict[int, int]:
    """Floor each share, then add one to the size farthest from exact (footnote 8)."""
    counts = {s: math.floor(n * shares.get(s, 0.0)) for s in sizes}
    while sum(counts.values()) < n:
        best = max(sizes, key=lambda s: (n * shares.get(s, 0.0) - counts[s], -s))
        counts[best] += 1
    return counts


def generate(
    n: int,
    model: GpuModel,
    scaling: str | Mapping[int, float] = "MIXEDSCALING",
    times: str | tuple[float, float] = "WIDETIMES",
    p_sup: float = 0.0,
    seed: int = 0,
) -> list[Job]:
    """Synthetic tasks: ``t(s+1) = (s + r)/(s + 1) * t(s)`` with r super-, near- or
    sub-linear per the task's scaling class; deterministic for a seed."""
    if isinstance(scaling, str) and scaling not in SCALING:
        raise WorkloadError(f"unknown scaling {scaling!r}; choose {', '.join(SCALING)}")
    if isinstance(times, str) and times not in TIMES:
        raise WorkloadError(f"unknown times {times!r}; choose {', '.join(TIMES)}")
    shares = SCALING[scaling] if isinstance(scaling, str) else dict(scaling)
    tmin, tmax = TIMES[times] if isinstance(times, str) else times
    if n < 1:
        raise WorkloadError("n must be at least 1")
    if not 0.0 <= p_sup <= 1.0:
        raise WorkloadError("p_sup must be within [0, 1]")
    if abs(sum(shares.values()) - 1.0) > 1e-9:
        raise WorkloadError("scaling shares must add up to 1")
    rng = random.Random(seed)
    sizes = model.planner_sizes
    top = model.compute_slices
    tasks: list[Job] = []
    for scale_to, count in _counts(n, shares, sizes).items():
        memory_bound = math.floor(p_sup * count)
        for k in range(count):
            superlinear = k < memory_bound
            t = {1: rng.uniform(tmin, tmax)}
            for s in range(1, top):
                if s + 1 > scale_to:
                    r = _clipped(rng, 0.75, 0.25, 0.5, 1.0)
                elif superlinear and not (top == 7 and s + 1 == 4):
                    # 3 -> 4 slices adds no memory bandwidth on the 7-slice lattice
                    r = _clipped(rng, -0.25, 0.25, -0.5, 0.0)
                    superlinear = rng.random() < _STAY_MEMORY_BOUND
                else:
                    r = _clipped(rng, 0.1, 0.1, 0.0, 0.2)
                t[s + 1] = (s + r) / (s + 1) * t[s]
            tid = f"t{len(tasks)}"
            tasks.append(Job(tid, 0.0, {s: t[s] for s in sizes}))
    return tasks


def tasks_to_csv(tasks: Iterable[Job], sizes: Sequence[int]) -> str:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["id", *sizes])
    for t in tasks:
        w.writerow([t.id, *(repr(float(t.times[s])) for s in sizes)])
    return out.getvalue()
