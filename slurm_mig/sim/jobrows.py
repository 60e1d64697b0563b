"""Per-row parsing of a workload file: one CSV row or JSON object into a ``SimJob``,
field by field, with a WorkloadError naming the row and the field."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..geometry import MAX_TASKS, GpuModel, gang_times, most_tasks, region_sizes
from ..planner.snapshot import MAX_PRIORITY
from ..workload import WorkloadError
from .api import SimJob

__all__ = ["MIB", "job_from_row", "sizes_at_least"]

MIB = 1024**2


def sizes_at_least(model: GpuModel, size: int) -> list[int]:
    """The model's instance sizes from ``size`` up (a runtime holds on each of them)."""
    return [s for s in model.planner_sizes if s >= size]


_BOOL = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False, "": False}


def _num(value: Any, where: str, what: str, allow_inf: bool = False) -> float:
    """``value`` as a finite float (inf only with ``allow_inf``); WorkloadError else."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise WorkloadError(f"{where}: {what} {value!r} is not a number") from None
    if math.isnan(x) or (math.isinf(x) and not allow_inf):
        raise WorkloadError(f"{where}: {what} {value!r} must be a finite number")
    return x


def _job_id(item: Mapping) -> str:
    """The job's id, stripped (empty when missing)."""
    return str(item.get("id", "")).strip()


def _given(item: Mapping, key: str) -> bool:
    """Whether the row gives ``key`` (an empty CSV cell does not)."""
    return item.get(key) not in (None, "")


def _size_number(value: object) -> int:
    """A size written as 3, "3" or "3g"; ValueError when it is not a number."""
    return int(str(value).strip().lower().rstrip("g"))


def _sizes_text(model: GpuModel) -> str:
    """The model's instance sizes, for messages."""
    return ", ".join(map(str, model.planner_sizes))


def _arrival(item: Mapping, where: str) -> float:
    """Seconds from the start (default 0), never negative."""
    arrival = _num(item.get("arrival") or 0, where, "arrival")
    if arrival < 0:
        raise WorkloadError(f"{where}: arrival {arrival} must be >= 0 seconds")
    return arrival


def _requested_size(item: Mapping, where: str, model: GpuModel) -> int | None:
    """The requested size, one of the model's instance sizes, or None when not given."""
    if not _given(item, "size"):
        return None
    try:
        size = _size_number(item["size"])
    except ValueError:
        raise WorkloadError(f"{where}: size {item['size']!r} is not a number of slices") from None
    if size not in model.planner_sizes:
        raise WorkloadError(
            f"{where}: size {size} is not an instance size of {model.name}; sizes are "
            f"{_sizes_text(model)}"
        )
    return size


def _given_times(item: Mapping, where: str, model: GpuModel, size: int | None) -> dict[int, float]:
    """Seconds per size as written: a 'times' map, or 'runtime' on ``size`` and larger."""
    raw_times = item.get("times")
    if raw_times is not None:
        if not isinstance(raw_times, Mapping):
            raise WorkloadError(f"{where}: 'times' must map sizes to seconds")
        times: dict[int, float] = {}
        for k, v in raw_times.items():
            try:
                s = _size_number(k)
            except ValueError:
                raise WorkloadError(f"{where}: size {k!r} in 'times' is not a number") from None
            times[s] = _num(v, where, f"time on size {s}", allow_inf=True)
        return times
    if _given(item, "runtime"):
        if size is None:
            raise WorkloadError(f"{where}: 'runtime' needs 'size', the size it was measured on")
        r = _num(item["runtime"], where, "runtime")
        return dict.fromkeys(sizes_at_least(model, size), r)
    raise WorkloadError(
        f"{where}: no runtime; give per-size columns ({','.join(map(str, model.planner_sizes))}) "
        "or 'runtime' with 'size'"
    )


def _finite_times(
    times: Mapping[int, float], where: str, model: GpuModel, size: int | None
) -> dict[int, float]:
    """The finite times, once every size is the model's and every time positive; the
    requested size must be among them."""
    for s, t in times.items():
        if s not in model.planner_sizes:
            raise WorkloadError(
                f"{where}: time for size {s}, which {model.name} does not have; sizes are "
                f"{_sizes_text(model)}"
            )
        if t <= 0:
            raise WorkloadError(f"{where}: time {t} on size {s} must be > 0 seconds")
    finite = {s: t for s, t in times.items() if not math.isinf(t)}
    if not finite:
        raise WorkloadError(f"{where}: cannot run on any size (every time is inf)")
    if size is not None and size not in finite:
        raise WorkloadError(f"{where}: requested size {size} has no finite time")
    return finite


def _resources(item: Mapping, where: str) -> tuple[float, float, float]:
    """(memory_mib, pcie_demand, alpha), defaults 0, 0 and 1."""
    mem = _num(item.get("memory_mib") or 0, where, "memory_mib")
    demand = _num(item.get("pcie_demand") or 0, where, "pcie_demand")
    alpha = _num(item.get("alpha") or 1, where, "alpha")
    if mem < 0 or demand < 0 or alpha <= 0:
        raise WorkloadError(f"{where}: memory_mib and pcie_demand must be >= 0, alpha > 0")
    return mem, demand, alpha


def _deadline(item: Mapping, where: str, arrival: float) -> float | None:
    """Seconds from the start, at or after the arrival; None when not given."""
    if not _given(item, "deadline"):
        return None
    deadline = _num(item["deadline"], where, "deadline")
    if deadline < arrival:
        raise WorkloadError(
            f"{where}: deadline {deadline} is before its arrival {arrival}; give seconds "
            "from the start, at or after the arrival"
        )
    return deadline


def _priority(item: Mapping, where: str) -> float:
    """Slurm-style priority (higher first, default 0) within +-MAX_PRIORITY."""
    if not _given(item, "priority"):
        return 0.0
    priority = _num(item["priority"], where, "priority")
    if abs(priority) > MAX_PRIORITY:
        raise WorkloadError(
            f"{where}: priority {priority:g} is out of range; give a number between "
            "-2^32 and 2^32 (Slurm's: higher goes first)"
        )
    return priority


def _restartable(item: Mapping, where: str) -> bool:
    """The 'restartable' flag: a JSON value, or 1/0, true/false, yes/no in CSV."""
    rs = item.get("restartable", False)
    if isinstance(rs, str):
        if rs.strip().lower() not in _BOOL:
            raise WorkloadError(f"{where}: restartable {rs!r} must be 1/0 or true/false")
        rs = _BOOL[rs.strip().lower()]
    return bool(rs)


def _tasks(item: Mapping, where: str, model: GpuModel, size: int | None) -> int:
    """The 'tasks' field: instances side by side, 1 to `MAX_TASKS` (default 1), a
    number some region of ``model`` holds; not with a requested size."""
    raw = item.get("tasks", 1)
    if raw in ("", None):
        return 1
    try:
        n = int(raw) if not isinstance(raw, (bool, float)) else -1
    except (TypeError, ValueError):
        n = -1
    if not 1 <= n <= MAX_TASKS:
        raise WorkloadError(f"{where}: tasks {raw!r} must be a whole number from 1 to {MAX_TASKS}")
    if n > 1 and not region_sizes(model, n):
        raise WorkloadError(
            f"{where}: tasks {n}: a {model.name} holds at most {most_tasks(model)} instances"
        )
    if n > 1 and size is not None:
        raise WorkloadError(
            f"{where}: tasks {n} with a requested size: give per-size times instead"
        )
    return n


def _region_times(
    model: GpuModel, task_times: Mapping[int, float], tasks: int, memory: int
) -> dict[int, float]:
    """A gang's seconds per region size: one task's (`gang_times`) on the regions whose
    instances (their size's own profile, as the Prolog creates them) hold ``memory``."""
    gang, per = gang_times(model, task_times, tasks), region_sizes(model, tasks)
    return {
        s: gang[s]
        if s in gang and model.profile_for_size(per[s]).memory_bytes >= memory
        else math.inf
        for s in model.planner_sizes
    }


def job_from_row(item: Mapping, where: str, model: GpuModel) -> SimJob:
    """A job from one row/object of a job file; WorkloadError naming the row else."""
    jid = _job_id(item)
    if not jid:
        raise WorkloadError(f"{where}: missing 'id'; give every job a unique id")
    where = f"{where} (job {jid!r})"
    arrival = _arrival(item, where)
    size = _requested_size(item, where, model)
    times = _finite_times(_given_times(item, where, model, size), where, model, size)
    tasks = _tasks(item, where, model, size)
    mem, demand, alpha = _resources(item, where)
    task_times: dict[int, float] = {}
    if tasks > 1:  # planned as one job on a region: its seconds per region size
        task_times = dict(times)  # one task's per instance size (static layouts)
        times = _region_times(model, times, tasks, int(mem * MIB))
        if not any(math.isfinite(t) for t in times.values()):
            raise WorkloadError(
                f"{where}: no region of {model.name} holds {tasks} of its sizes with "
                f"{mem:g} MiB each"
            )
    deadline = _deadline(item, where, arrival)
    priority = _priority(item, where)
    restartable = _restartable(item, where)
    return SimJob(
        jid,
        arrival,
        times,
        memory=int(mem * MIB),
        pcie_demand=demand,
        alpha=alpha,
        restartable=restartable,
        size=size,
        kind=str(item.get("kind") or ""),
        deadline=deadline,
        priority=priority,
        tasks=tasks,
        task_times=task_times,
    )
