"""A `ClusterSnapshot` read from its JSON form (what ``slurm-mig plan --start`` reads and
the daemon's status file holds); every check names the first bad field."""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from ..geometry import GeometryError, GpuModel, Placement, Slot, get_model, mask_tables, slot_mask
from .cluster_snapshot import (
    MAX_PRIORITY,
    ClusterSnapshot,
    Event,
    Gpu,
    Instance,
    Job,
    Planned,
    Running,
    SnapshotError,
    _planned_profile,
)

__all__ = ["snapshot_from_json"]


class _Reader:
    """Strict readers of one JSON document; every error names the field."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, where: str, why: str) -> SnapshotError:
        return SnapshotError(f"{self.source}: {where}: {why}")

    def obj(self, data: Any, where: str) -> Mapping[str, Any]:
        if not isinstance(data, Mapping):
            raise self.fail(where, "expected an object")
        return data

    def seq(self, data: Any, where: str) -> list:
        if data is None:
            return []
        if not isinstance(data, list):
            raise self.fail(where, "expected a list")
        return data

    def num(self, data: Any, where: str, *, allow_inf: bool = False) -> float:
        if isinstance(data, str) and allow_inf and data in ("inf", "-inf"):
            return math.inf if data == "inf" else -math.inf
        if isinstance(data, bool) or not isinstance(data, (int, float)):
            raise self.fail(where, f"{data!r} is not a number")
        value = float(data)
        if math.isnan(value) or (math.isinf(value) and not allow_inf):
            raise self.fail(where, f"{data!r} must be a finite number")
        return value

    def opt_num(self, data: Any, where: str, *, allow_inf: bool = False) -> float | None:
        return None if data is None else self.num(data, where, allow_inf=allow_inf)

    def int_(self, data: Any, where: str, lo: int = 0) -> int:
        if isinstance(data, bool) or not isinstance(data, int) or data < lo:
            raise self.fail(where, f"{data!r} must be a whole number >= {lo}")
        return data

    def gpu(self, data: Any, where: str, gpus: int) -> int:
        gpu = self.int_(data, where)
        if gpu >= gpus:
            raise self.fail(where, f"no gpu {gpu}; gpus are 0..{gpus - 1}")
        return gpu

    def text(self, data: Any, where: str, *, empty: bool = False) -> str:
        if isinstance(data, bool) or not isinstance(data, (str, int)):
            raise self.fail(where, f"{data!r} must be a string")
        text = str(data)
        if not empty and not text:
            raise self.fail(where, "must not be empty")
        if any(ord(c) < 32 for c in text):
            raise self.fail(where, "must not hold control characters")
        return text

    def slot(self, model: GpuModel, data: Mapping[str, Any], where: str) -> Slot:
        try:
            prof = model.profile(str(data.get("profile")))
            pl = self.obj(data.get("placement"), f"{where}.placement")
            placement = Placement(
                self.int_(pl.get("start"), f"{where}.placement.start"),
                self.int_(pl.get("size"), f"{where}.placement.size", 1),
            )
        except GeometryError as exc:
            raise self.fail(where, str(exc)) from None
        if placement not in prof.placements:
            raise self.fail(
                where,
                f"placement {placement.start}:{placement.size} is not legal for {prof.name} "
                f"(legal starts {list(prof.starts)})",
            )
        slot = Slot(placement, prof.compute_slices)
        if not _planned_profile(model, slot, prof):
            raise self.fail(where, f"{prof.name} is not a profile the planner uses")
        canon = mask_tables(model).index_of(slot)
        return mask_tables(model).slots[canon] if canon is not None else slot

    def job(self, model: GpuModel, data: Any, where: str) -> Job:
        d = self.obj(data, where)
        times_raw = self.obj(d.get("times"), f"{where}.times")
        times: dict[int, float] = {}
        for k, v in times_raw.items():
            try:
                size = int(str(k).rstrip("g"))
            except ValueError:
                raise self.fail(f"{where}.times", f"size {k!r} is not a number") from None
            if size not in model.planner_sizes:
                raise self.fail(
                    f"{where}.times",
                    f"size {size} is not an instance size of {model.name} "
                    f"({', '.join(map(str, model.planner_sizes))})",
                )
            t = self.num(v, f"{where}.times.{k}", allow_inf=True)
            if not t > 0:
                raise self.fail(f"{where}.times.{k}", f"{t} must be > 0 seconds")
            times[size] = t
        size = d.get("size")
        deadline = d.get("deadline")
        return Job(
            id=self.text(d.get("id"), f"{where}.id"),
            arrival=self.num(d.get("arrival", 0.0), f"{where}.arrival"),
            times=times,
            memory=self.int_(d.get("memory", 0), f"{where}.memory"),
            pcie_demand=self.num(d.get("pcie_demand", 0.0), f"{where}.pcie_demand"),
            alpha=self.num(d.get("alpha", 1.0), f"{where}.alpha"),
            restartable=bool(d.get("restartable", False)),
            size=None if size is None else self.int_(size, f"{where}.size", 1),
            kind=self.text(d.get("kind", ""), f"{where}.kind", empty=True),
            deadline=None if deadline is None else self.num(deadline, f"{where}.deadline"),
            priority=self.priority(d.get("priority", 0.0), f"{where}.priority"),
        )

    def priority(self, data: Any, where: str) -> float:
        value = self.num(data, where)
        if abs(value) > MAX_PRIORITY:
            raise self.fail(
                where, f"{data!r} is out of range: a priority lies between -2^32 and 2^32"
            )
        return value


def snapshot_from_json(data: Any, source: str = "snapshot") -> ClusterSnapshot:
    """A snapshot from its JSON form; SnapshotError names the first bad field."""
    r = _Reader(source)
    d = r.obj(data, "top level")
    try:
        model = get_model(str(d.get("gpu_model", "")))
    except GeometryError as exc:
        raise r.fail("gpu_model", str(exc)) from None
    now = r.num(d.get("now"), "now")
    gpus = [_read_gpu(r, model, k, g) for k, g in enumerate(r.seq(d.get("gpus"), "gpus"))]
    if not gpus:
        raise r.fail("gpus", "a snapshot needs at least one GPU")
    pending: dict[str, Job] = {}
    for i, j in enumerate(r.seq(d.get("pending"), "pending")):
        job = r.job(model, j, f"pending[{i}]")
        if job.id in pending:
            raise r.fail(f"pending[{i}].id", f"job {job.id!r} appears twice")
        pending[job.id] = job
    running = _read_running(r, model, d, pending, len(gpus))
    planned = _read_planned(r, model, d, pending, len(gpus), now)
    events = _read_events(r, d, len(gpus))
    _check_instances(r, gpus, running)
    finished = []
    for i, e in enumerate(r.seq(d.get("finished"), "finished")):
        e = r.seq(e, f"finished[{i}]")
        if len(e) != 2:
            raise r.fail(f"finished[{i}]", "expected [job, gpu]")
        gpu = r.gpu(e[1], f"finished[{i}][1]", len(gpus))
        finished.append((r.text(e[0], f"finished[{i}][0]"), gpu))
    return ClusterSnapshot(
        now=now,
        model=model,
        gpus=_final_gpus(gpus, running),
        pending=MappingProxyType(pending),
        running=MappingProxyType(running),
        planned=MappingProxyType(planned),
        next_batch=r.int_(d.get("next_batch", 0), "next_batch"),
        pcie_max=r.num(d.get("pcie_max", 30.08), "pcie_max"),
        seed=r.int_(d.get("seed", 0), "seed"),
        events=tuple(events),
        finished=tuple(finished),
    )


_RawGpu = tuple[list[Instance], float, str, int]  # instances, channel_free, node, local


def _read_gpu(r: _Reader, model: GpuModel, k: int, g: Any) -> _RawGpu:
    """GPU ``k``'s instances (sorted, none sharing a slice), channel, node and index."""
    where = f"gpus[{k}]"
    g = r.obj(g, where)
    insts = []
    for i, inst in enumerate(r.seq(g.get("instances"), f"{where}.instances")):
        w = f"{where}.instances[{i}]"
        inst = r.obj(inst, w)
        job = inst.get("job")
        keep = inst.get("keep_for")
        insts.append(
            Instance(
                slot=r.slot(model, inst, w),
                job=None if job is None else r.text(job, f"{w}.job"),
                ready_at=r.num(inst.get("ready_at", "-inf"), f"{w}.ready_at", allow_inf=True),
                busy_until=r.opt_num(inst.get("busy_until"), f"{w}.busy_until", allow_inf=True),
                keep_for=None if keep is None else r.text(keep, f"{w}.keep_for"),
            )
        )
    insts.sort(key=lambda i: (i.slot.placement.start, i.slot.size))
    masks = [slot_mask(i.slot) for i in insts]
    for a in range(len(insts)):
        for b in range(a + 1, len(insts)):
            if masks[a] & masks[b]:
                raise r.fail(
                    f"{where}.instances",
                    f"{insts[a].slot} and {insts[b].slot} share a memory slice",
                )
    return (
        insts,
        r.num(g.get("channel_free", "-inf"), f"{where}.channel_free", allow_inf=True),
        r.text(g.get("node", str(k)), f"{where}.node", empty=True),
        r.int_(g.get("local", 0), f"{where}.local"),
    )


def _read_running(
    r: _Reader, model: GpuModel, d: Mapping[str, Any], pending: Mapping[str, Job], gpus: int
) -> dict[str, Running]:
    running: dict[str, Running] = {}
    for i, x in enumerate(r.seq(d.get("running"), "running")):
        where = f"running[{i}]"
        x = r.obj(x, where)
        job = r.job(model, x.get("job"), f"{where}.job")
        if job.id in running or job.id in pending:
            raise r.fail(f"{where}.job.id", f"job {job.id!r} appears twice")
        running[job.id] = Running(
            job=job,
            gpu=r.gpu(x.get("gpu"), f"{where}.gpu", gpus),
            slot=r.slot(model, x, where),
            started=r.opt_num(x.get("started"), f"{where}.started"),
            remaining=r.num(x.get("remaining", 1.0), f"{where}.remaining"),
            slowdown=r.num(x.get("slowdown", 1.0), f"{where}.slowdown"),
            finish_at=r.num(x.get("finish_at"), f"{where}.finish_at", allow_inf=True),
            planned=r.opt_num(x.get("planned"), f"{where}.planned"),
        )
    return running


def _read_planned(
    r: _Reader,
    model: GpuModel,
    d: Mapping[str, Any],
    pending: Mapping[str, Job],
    gpus: int,
    now: float,
) -> dict[str, Planned]:
    planned: dict[str, Planned] = {}
    for i, x in enumerate(r.seq(d.get("planned"), "planned")):
        where = f"planned[{i}]"
        x = r.obj(x, where)
        jid = r.text(x.get("job"), f"{where}.job")
        if jid not in pending:
            raise r.fail(f"{where}.job", f"job {jid!r} is not pending")
        planned[jid] = Planned(
            job=jid,
            gpu=r.gpu(x.get("gpu"), f"{where}.gpu", gpus),
            slot=r.slot(model, x, where),
            batch=r.int_(x.get("batch", 0), f"{where}.batch"),
            order=r.int_(x.get("order", 0), f"{where}.order"),
            seconds=r.num(x.get("seconds", 0.0), f"{where}.seconds"),
            issued=r.num(x.get("issued", now), f"{where}.issued"),
        )
    return planned


def _read_events(r: _Reader, d: Mapping[str, Any], gpus: int) -> list[Event]:
    events = []
    for i, e in enumerate(r.seq(d.get("events"), "events")):
        e = r.seq(e, f"events[{i}]")
        if len(e) not in (2, 3):
            raise r.fail(f"events[{i}]", "expected [time, text] or [time, text, gpu]")
        gpu = e[2] if len(e) == 3 else None
        if gpu is not None:
            gpu = r.gpu(gpu, f"events[{i}][2]", gpus)
        events.append(
            Event(
                r.num(e[0], f"events[{i}][0]", allow_inf=True),
                r.text(e[1], f"events[{i}][1]"),
                gpu,
            )
        )
    return events


def _check_instances(r: _Reader, gpus: list[_RawGpu], running: Mapping[str, Running]) -> None:
    """Every running job on an instance holding it, and every held instance's job running."""
    on_instance = {(k, i.slot): i.job for k, g in enumerate(gpus) for i in g[0] if i.job}
    for jid, run in running.items():
        if on_instance.get((run.gpu, run.slot)) != jid:
            raise r.fail(
                f"running job {jid!r}",
                f"gpu {run.gpu} has no instance {run.slot} holding it; list it in that "
                "GPU's instances with job set",
            )
    for (k, slot), jid in on_instance.items():
        if jid not in running:
            raise r.fail(
                f"gpus[{k}] instance {slot}",
                f"holds job {jid!r}, which is not in running; add it there",
            )


def _final_gpus(gpus: list[_RawGpu], running: Mapping[str, Running]) -> tuple[Gpu, ...]:
    """The `Gpu`s, their instances and PCIe counts marking the PCIe-bound running jobs."""
    pcie: dict[int, int] = {}
    for run in running.values():
        if run.job.pcie_bound:
            pcie[run.gpu] = pcie.get(run.gpu, 0) + 1
    bound_jobs = {jid for jid, run in running.items() if run.job.pcie_bound}
    return tuple(
        Gpu(
            k,
            tuple(
                Instance(i.slot, i.job, i.ready_at, i.busy_until, i.job in bound_jobs, i.keep_for)
                for i in insts
            ),
            chan,
            pcie.get(k, 0),
            node,
            local,
        )
        for k, (insts, chan, node, local) in enumerate(gpus)
    )
