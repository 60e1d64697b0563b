"""What a policy decides from a snapshot: operations for the executor (the simulator's
engine, or the daemon through Slurm and the hooks) and the standing plan of the jobs
that wait.

* `Place`: run a waiting job on ``slot`` of GPU ``gpu``. ``start == now``: start it now
  (an identical idle instance there is reused, otherwise one is created, after the
  `Destroy` of idle instances in its way, which the decisions list before it).
  ``more``: the other instances a job of several slices holds, as (GPU, slot) on the
  same node (a static layout's gang, as Slurm's ``--gres=gpu:N``): each is reused or
  created the same way, the job starts once all exist and holds all of them until
  it ends; such a job never moves. The simulator carries it out; the daemon's
  assignments know a gang on a region only.
* `Move`: migrate a running, restartable job (the simulator keeps its progress; on
  Slurm it is requeued and planned again).
* `Create` / `Destroy`: an idle instance made or removed ahead of use (static layouts,
  repartitioning). The daemon leaves instance lifetimes to the hooks and ignores them.

``planned`` holds the standing plan of every waiting job that has one after this step
(batch policies); ``plan`` the whole projected plan, for reports and the Gantt chart.
``numbered``: the places' ``batch`` and ``order`` number a plan's batches (a batch
planner through ``planner.driver``); else they are placed now, unnumbered, and the
executor numbers them after every batch so far.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ..geometry import Slot
from ..plan import Plan
from .snapshot import ClusterSnapshot, Planned

__all__ = ["Create", "Decisions", "Destroy", "Move", "Op", "Place", "decisions_to_json"]


@dataclass(frozen=True, slots=True)
class Place:
    """Run ``job`` on ``slot`` of ``gpu`` from ``start`` (absolute; ``now``: at once)."""

    job: str
    gpu: int
    slot: Slot
    start: float
    end: float = float("nan")  # projected end (nan: unknown)
    batch: int = 0
    order: int = 0  # place in the order of its GPU
    more: tuple[tuple[int, Slot], ...] = ()  # its other instances: (gpu, slot), one node


@dataclass(frozen=True, slots=True)
class Move:
    """Move running, restartable ``job`` from GPU ``src`` to ``slot`` of GPU ``dst``."""

    job: str
    src: int
    dst: int
    slot: Slot


@dataclass(frozen=True, slots=True)
class Create:
    """Create an empty instance at ``slot`` of ``gpu``."""

    gpu: int
    slot: Slot


@dataclass(frozen=True, slots=True)
class Destroy:
    """Destroy the idle instance at ``slot`` of ``gpu``."""

    gpu: int
    slot: Slot


Op = Place | Move | Create | Destroy


@dataclass(frozen=True)
class Decisions:
    """A policy's answer to one snapshot (see the module doc)."""

    ops: tuple[Op, ...] = ()
    planned: Mapping[str, Planned] = field(default_factory=lambda: MappingProxyType({}))
    wake_at: float | None = None  # ask again at this time even if nothing happens
    plan: Plan | None = None
    stats: Mapping[str, Any] = field(default_factory=dict)
    numbered: bool = False  # places numbered by a plan's batches (module doc)

    @property
    def places(self) -> tuple[Place, ...]:
        return tuple(op for op in self.ops if type(op) is Place)

    @property
    def moves(self) -> tuple[Move, ...]:
        return tuple(op for op in self.ops if type(op) is Move)


def decisions_to_json(got: Decisions, snap: ClusterSnapshot) -> dict[str, Any]:
    """What a policy decided, as JSON: placements (with ``now``: start at once), moves,
    instance operations and the standing plans, GPUs named by index, node and local
    index, slots by profile and placement; the plan when there is one."""
    model = snap.model

    def where(gpu: int, slot: Slot) -> dict[str, Any]:
        g = snap.gpus[gpu]
        return {
            "gpu": gpu,
            "node": g.node,
            "local": g.local,
            "profile": model.profile_for_slot(slot).name,
            "placement": slot.placement.to_json(),
        }

    out: dict[str, Any] = {"now": snap.now, "gpu_model": model.name, "placements": []}
    for op in got.ops:
        if type(op) is Place:
            item = {"job": op.job, **where(op.gpu, op.slot), "start": op.start}
            if op.end == op.end:  # not nan
                item["end"] = op.end
            if op.more:
                item["more"] = [where(g, slot) for g, slot in op.more]
            out["placements"].append({**item, "batch": op.batch, "order": op.order})
    out["moves"] = [
        {"job": m.job, "src": m.src, **where(m.dst, m.slot)} for m in got.ops if type(m) is Move
    ]
    out["creates"] = [where(c.gpu, c.slot) for c in got.ops if type(c) is Create]
    out["destroys"] = [where(d.gpu, d.slot) for d in got.ops if type(d) is Destroy]
    out["planned"] = [
        {
            "job": p.job,
            **where(p.gpu, p.slot),
            "batch": p.batch,
            "order": p.order,
            "seconds": p.seconds,
        }
        for p in sorted(got.planned.values(), key=lambda p: (p.gpu, p.batch, p.order, p.job))
    ]
    out["wake_at"] = got.wake_at
    out["plan"] = got.plan.to_json() if got.plan is not None else None
    return out
