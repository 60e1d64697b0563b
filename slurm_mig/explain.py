"""``slurm-mig explain JOB``: where a job is planned, why it waits, when it is projected
to start and what its hint said, from what its owner may read.

Sources, all readable without root: the job as squeue shows it (state, times, its
Comment with the ``mig:`` hint and the planner's note, its AdminComment with the
planner's ``slurm-mig:`` record, written at release, or note) and the planner's public
summary (``[paths] public_file``: where a held job is planned, its projected start,
when the slices it waits for are free, the next batch). Never the status file or the nodes' records: those are root's and name
other jobs' instances. Pure: `explain` turns those inputs into lines, each printable
(`safetext.printable`: a job name's or comment's escape sequences shown as ``\x1b``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .geometry import GeometryError, Placement, get_model
from .safetext import printable

NO_SUMMARY = "the planner publishes no summary: [paths] public_file is off"


def _clock(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def _span(seconds: float) -> str:
    s = abs(int(round(seconds)))
    if s < 120:
        return f"{s} s"
    if s < 7200:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {(s % 3600) // 60} min"


def _count(value: object) -> int:
    """A count from the public summary (anyone's file to read, not to trust): 0 unless
    a whole number from 0 to 10^9."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 10**9:
        return 0
    return value


def _gib(n: int) -> str:
    return f"{n / 1024**3:.1f} GiB"


@dataclass(frozen=True)
class _PublicPlan:
    """A held job's plan as the public summary gives it (the fields explain reads)."""

    job_id: str
    restart: int
    node: str
    gpu: int
    model: str
    profile: str
    placement: Placement
    batch: int
    order: int
    planned_seconds: float
    tasks: int = 1  # instances of ``profile`` (a job of several slices), in its region


def _as(current: Any) -> str:
    """``as 1g.5gb at 0:1``; a job of several slices: ``as 4x1g.5gb (4 instances of
    1g.5gb in region 4g at placement 0:4)``."""
    from .daemon.gangview import gang_phrase, slice_name

    tasks, pl = getattr(current, "tasks", 1), current.placement
    if tasks <= 1:
        return f"as {current.profile} at {pl.start}:{pl.size}"
    phrase = gang_phrase(current.model, current.profile, pl, tasks)
    return f"as {slice_name(current.profile, tasks)} ({phrase})"


def _from_public(job: Any, entry: Mapping[str, Any] | None) -> _PublicPlan | None:
    """The plan of held ``job`` from its public summary entry, or None."""
    if entry is None or entry.get("state") != "planned":
        return None
    from .daemon.gangview import split_slice

    try:
        start, size = (int(x) for x in entry["placement"])
        profile, tasks = split_slice(str(entry["profile"])[:32])
        begin, end = entry.get("start"), entry.get("end")
        seconds = float(end) - float(begin) if begin is not None and end is not None else 0.0
        return _PublicPlan(
            job.job_id,
            job.restart_count,
            str(entry["node"])[:128],
            int(entry["gpu"]),
            _public_model(entry),
            profile,
            Placement(start, size),
            int(entry.get("batch") or 0),
            int(entry.get("order") or 0),
            max(0.0, seconds),
            tasks,
        )
    except (KeyError, TypeError, ValueError):
        return None


def _public_model(entry: Mapping[str, Any]) -> str:
    """The GPU model of a public plan of several slices (the summary names it, to
    name its region); "" otherwise, or when it is no model's name."""
    name = entry.get("model")
    if not isinstance(name, str) or not name:
        return ""
    try:
        return get_model(name[:64]).name
    except GeometryError:
        return ""


def _priority_lines(entry: Mapping[str, Any], public: Mapping[str, Any] | None) -> list[str]:
    """The job's priority as the planner read it from Slurm, and why it starts before
    jobs of higher priority, if it does."""
    prio = entry.get("priority")
    if not isinstance(prio, int) or isinstance(prio, bool):
        return []
    out = [f"priority: {prio} (Slurm's multifactor priority: fairshare, QOS, age, partition)"]
    ahead = entry.get("ahead_of")
    if isinstance(ahead, list) and ahead:
        names = ", ".join(str(j)[:20] for j in ahead[:5])
        reorder = (public or {}).get("reorder")
        bound = (
            f"up to {reorder} lower-priority jobs ([planner] reorder) when that packs the "
            "GPUs better, and "
            if isinstance(reorder, int) and not isinstance(reorder, bool) and reorder > 0
            else ""
        )
        out.append(
            f"starts before higher-priority job(s) {names}: they wait for slices that are "
            f"busy longer; the planner starts {bound}any job whose slices are free earlier "
            "when that delays no job of higher priority (backfill)"
        )
    return out


def _stale_line(public: Mapping[str, Any] | None, cycle: float | None, now: float) -> str | None:
    """What to say first when the public summary is older than a few cycles, or None."""
    from .daemon.liveness import staleness

    updated = public.get("updated") if public else None
    if cycle is not None and isinstance(updated, int | float) and not isinstance(updated, bool):
        return staleness(float(updated), cycle, now)
    return None


def _public_entry(job: Any, public: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The job's entry in the public summary, or None when absent or malformed."""
    entry = (public or {}).get("jobs", {}).get(job.job_id) if public else None
    return entry if isinstance(entry, dict) else None


def _where(current: Any) -> dict[str, Any] | None:
    """Where the plan puts the job, as the JSON ``where`` field (None: no plan)."""
    if current is None:
        return None
    from .daemon.gangview import slice_name

    tasks = getattr(current, "tasks", 1)
    out = {
        "node": current.node,
        "gpu": current.gpu,
        "profile": slice_name(current.profile, tasks),  # as status shows it
        "placement": [current.placement.start, current.placement.size],
        "planned_seconds": current.planned_seconds,
    }
    if tasks > 1:
        out["tasks"] = tasks
    return out


def _read_hints(comment: str) -> tuple[Any, str | None]:
    """The job's parsed ``mig:`` hints and None, or None and why they are invalid."""
    from .hints import HintError, parse_hints

    try:
        return parse_hints(comment), None
    except HintError as exc:
        return None, " ".join(str(exc).split())


def _active_lines(job: Any, current: Any, now: float) -> list[str]:
    """A running job: where it runs and how much of its planned runtime is left."""
    if current is None:
        return [f"{job.state.lower()} on {job.nodes or '?'} (no slurm-mig record)"]
    lines = [
        f"running on {current.node} gpu {current.gpu} {_as(current)} (batch "
        f"{current.batch}, order {current.order})"
    ]
    if job.start_time:
        ran = now - job.start_time
        left = current.planned_seconds - ran
        lines.append(
            f"started {_clock(job.start_time)}, planned to run "
            f"{_span(current.planned_seconds)}: "
            + (
                f"{_span(left)} left by the plan"
                if left >= 0
                else f"{_span(-left)} past its planned runtime"
            )
        )
    return lines


def _done_lines(job: Any, current: Any) -> list[str]:
    """A finished job: its end state, and how long it ran against its plan."""
    lines = [f"finished ({job.state})"]
    if current is not None and job.start_time and job.end_time:
        lines.append(
            f"ran {_span(job.end_time - job.start_time)} on {current.node} gpu "
            f"{current.gpu} {_as(current)}; planned {_span(current.planned_seconds)}"
        )
    return lines


def _release_line(job: Any, entry: Mapping[str, Any] | None) -> str:
    """Whether a planned pending job is released to Slurm or held by the planner."""
    state = entry.get("state") if entry else None
    if not job.held or state == "released":
        if job.dependency:
            return "released: Slurm starts it as soon as the jobs before it on its slices have left"
        return "released: waiting for Slurm to start it"
    return "held by the planner until its slices are free"


def _projection_lines(
    entry: Mapping[str, Any], public: Mapping[str, Any] | None, now: float
) -> tuple[list[str], float | None]:
    """A planned job's priority, what it waits for and its projected start (or None)."""
    lines = _priority_lines(entry, public)
    start = entry.get("start") if isinstance(entry.get("start"), int | float) else None
    free = entry.get("free_at")
    if isinstance(free, int | float) and free > now:
        lines.append(
            f"why it waits: its slices are busy until {_clock(free)} (in {_span(free - now)})"
        )
    if start is not None:
        lines.append(
            f"projected start: {_clock(start)}"
            + (f" (in {_span(start - now)})" if start > now else " (now)")
        )
    return lines, start


def _planned_lines(
    job: Any,
    current: Any,
    entry: Mapping[str, Any] | None,
    public: Mapping[str, Any] | None,
    now: float,
    no_summary: str,
) -> tuple[list[str], float | None]:
    """A pending job with a plan: where, whether released, and when it should start."""
    lines = [
        f"planned on {current.node} gpu {current.gpu} {_as(current)} (batch "
        f"{current.batch}, order {current.order} on that GPU), to run "
        f"{_span(current.planned_seconds)}",
        _release_line(job, entry),
    ]
    if entry is not None:
        more, start = _projection_lines(entry, public, now)
        return lines + more, start
    if public is None:
        lines.append(f"projected start: unknown ({no_summary})")
    else:
        lines.append(
            "projected start: unknown (the planner's summary has no projection "
            "for it yet; it plans again within a cycle)"
        )
    return lines, None


def _unplanned_lines(
    job: Any, entry: Mapping[str, Any] | None, public: Mapping[str, Any] | None
) -> list[str]:
    """A pending job without a plan: why not (a note, deferred, not seen, beyond)."""
    from .slurm.jobrecord import ADMIN_TAG

    note = (job.admin_comment or "").strip()
    if note.startswith(ADMIN_TAG):
        text = note[len(ADMIN_TAG) :].strip()
        return [f"not planned: {text.removeprefix('not planned:').strip()}"]
    if entry is not None and entry.get("state") == "deferred":
        return [f"not planned yet: {entry.get('why', '')}", *_priority_lines(entry, public)]
    if job.held and job.reason == "JobHeldUser":
        return [
            "held, waiting for the planner to take it (the planner's cycle has not "
            "seen it yet, or the planner is not running)"
        ]
    if public is not None and _count(public.get("beyond")):
        return [
            f"waiting: the planner keeps plans for the first "
            f"{_count(public.get('max_planned'))} held jobs of the partition by "
            f"priority, then submission time ([planner] max_planned); {_count(public.get('beyond'))} "
            "more wait unplanned until those start"
        ]
    return ["waiting for the planner's next batch"]


def _batch_window_lines(public: Mapping[str, Any], now: float) -> list[str]:
    """Why an unplanned job waits when the batch window is still collecting jobs."""
    nb = public.get("next_batch_at")
    if isinstance(nb, int | float) and nb > now:
        return [
            f"why it waits: the batch window ({public.get('batch_window', 0):g} s) "
            f"collects jobs until {_clock(nb)} (in {_span(nb - now)})"
        ]
    return []


def _pending_lines(
    job: Any,
    current: Any,
    entry: Mapping[str, Any] | None,
    public: Mapping[str, Any] | None,
    now: float,
    no_summary: str,
    note: str,
) -> tuple[list[str], float | None]:
    """A pending job: its plan or why it has none, and the planner's note; with the
    projected start (None: unknown)."""
    start = None
    if current is not None:
        lines, start = _planned_lines(job, current, entry, public, now, no_summary)
    else:
        lines = _unplanned_lines(job, entry, public)
    if current is None and public is not None:
        lines.extend(_batch_window_lines(public, now))
    if note:
        lines.append(f"the planner's note in its comment: {note}")
    return lines, start


def _memory_line(job: Any, mem: int, current: Any) -> str:
    """How much GPU memory the hint asks for, where from, and what the profile has."""
    source = (
        "set by mig-run after a restart (a forecast or an out-of-memory error)"
        if job.restart_count > 0
        else "from its hint"
    )
    gang = current is not None and getattr(current, "tasks", 1) > 1
    need = f"needs {_gib(mem)} of GPU memory{' per task' if gang else ''} ({source})"
    if current is not None:
        try:
            prof = get_model(current.model).profile(current.profile)
            each = "each instance of " if gang else ""
            need += f"; {each}{current.profile} has {_gib(prof.memory_bytes)}"
        except GeometryError:
            pass
    return need


def _hint_lines(
    job: Any, hints: Any, problem: str | None, hint_text: str | None, current: Any
) -> list[str]:
    """What the job's ``mig:`` hint said (memory, PCIe, runtime), or that it is invalid
    or missing."""
    if problem is not None:
        return [f"its hint is invalid: {problem}"]
    if hints is None or not hint_text:
        return [
            "no mig: hint in its comment (runtime from earlier runs of its name, else its time limit)"
        ]
    lines = [f"its hint: {hint_text}"]
    if hints.tasks > 1:
        lines.append(
            f"runs {hints.tasks} tasks side by side, each on a MIG instance of its own "
            "(all of one size, on one GPU; planned and started together)"
        )
    if hints.mem:
        lines.append(_memory_line(job, hints.mem, current))
    if hints.pcie:
        lines.append(
            f"PCIe-bound ({hints.pcie:g} GB/s): the planner keeps the PCIe demand on a "
            "GPU within its link, which can delay it"
        )
    if hints.time:
        lines.append(f"its hint says it runs {_span(hints.time)}")
    return lines


def _deadline_lines(
    job: Any, phase: str, start: float | None, current: Any, now: float
) -> list[str]:
    """The job's deadline, and whether a pending job's projected end misses it."""
    if not job.deadline:
        return []
    end = (start or now) + (current.planned_seconds if current else 0.0)
    if phase == "pending" and end > job.deadline:
        return [f"deadline {_clock(job.deadline)}: the projected end {_clock(end)} is after it"]
    return [f"deadline {_clock(job.deadline)}"]


def explain(
    job: Any,
    public: Mapping[str, Any] | None,
    now: float,
    cycle: float | None = None,
    no_summary: str = NO_SUMMARY,
) -> dict[str, Any]:
    """What to tell the owner of ``job`` (a `client.Job`): {"job", "state", "lines",
    "where", "start", "stale"}; ``public`` is the planner's public summary (None: off,
    or unreadable: ``no_summary`` says which), ``cycle`` the planner's ``[planner]
    cycle``: with both, a summary older than a few cycles comes first (``stale``: the
    planner seems to have stopped)."""
    from . import jobcomment as comments
    from .slurm.jobrecord import job_phase, parse_admin_comment

    stale = _stale_line(public, cycle, now)
    lines: list[str] = [stale] if stale is not None else []
    a = parse_admin_comment(job.admin_comment)
    current = a if a is not None and a.restart == job.restart_count else None
    phase = job_phase(job.state)
    entry = _public_entry(job, public)
    start: float | None = None
    if phase == "pending" and job.held:
        # a held job's plan is the planner's alone (an AdminComment record is that of
        # an earlier release, dropped when the job was held again)
        current = _from_public(job, entry)
    where = _where(current)

    # what the job said about itself
    parsed = comments.parse(job.comment)
    hints, problem = _read_hints(job.comment)

    if phase == "active":
        lines.extend(_active_lines(job, current, now))
    elif phase == "done":
        lines.extend(_done_lines(job, current))
    else:
        more, start = _pending_lines(job, current, entry, public, now, no_summary, parsed.note)
        lines.extend(more)

    lines.extend(_hint_lines(job, hints, problem, parsed.hint, current))
    if job.restart_count:
        lines.append(f"restarted {job.restart_count} time(s)")
    lines.extend(_deadline_lines(job, phase, start, current, now))
    if where is not None:
        where = {k: printable(v, 128) if isinstance(v, str) else v for k, v in where.items()}
    return {
        "job": printable(job.job_id, 64),
        "state": printable(job.state, 64),
        "where": where,
        "start": start,
        "lines": [printable(line, 2000) for line in lines],
        "stale": stale,
    }
