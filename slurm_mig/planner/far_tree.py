"""FAR's repartitioning trees (``planner.far``): the `Forest` of one tree per GPU,
when its nodes' slices are free of running work on busy GPUs (`Availability`), and the
timing of a tree assignment over it (`time_assignment`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..geometry import GpuModel
from ..job import Job
from .snapshot import Gpu
from .timeline import Timeline, Use, run_uses

__all__ = ["Availability", "Forest", "time_assignment"]


@dataclass
class Forest:
    """One repartitioning tree per GPU, flattened: node v of GPU g is g*T + local."""

    model: GpuModel
    gpus: int
    size: list[int] = field(default_factory=list)
    gpu: list[int] = field(default_factory=list)
    local: list[int] = field(default_factory=list)
    parent: list[int] = field(default_factory=list)
    children: list[tuple[int, ...]] = field(default_factory=list)
    covers: list[tuple[int, ...]] = field(default_factory=list)  # slice ids g*S+s
    leaves: list[int] = field(default_factory=list)
    by_size: dict[int, list[int]] = field(default_factory=dict)
    roots: list[int] = field(default_factory=list)

    @classmethod
    def build(cls, model: GpuModel, gpus: int) -> Forest:
        """The forest of ``gpus`` trees of ``model`` (shared: read it, never change it)."""
        key = (model.name, gpus)
        got = _FORESTS.get(key)
        if got is None or got.model is not model:
            if len(_FORESTS) >= 32:
                _FORESTS.pop(next(iter(_FORESTS)))
            got = _FORESTS[key] = cls._make(model, gpus)
        return got

    @classmethod
    def _make(cls, model: GpuModel, gpus: int) -> Forest:
        f = cls(model, gpus)
        T, S = len(model.tree), model.compute_slices
        for g in range(gpus):
            for node in model.tree:
                v = g * T + node.index
                f.size.append(node.size)
                f.gpu.append(g)
                f.local.append(node.index)
                f.parent.append(-1 if node.parent is None else g * T + node.parent)
                f.children.append(tuple(g * T + c for c in node.children))
                p = node.placement
                # slices whose availability the instance holds (3g at 0 blocks slice 3)
                f.covers.append(tuple(g * S + s for s in range(p.start, min(p.end, S))))
                if not node.children:
                    f.leaves.append(v)
                f.by_size.setdefault(node.size, []).append(v)
            f.roots.append(g * T)
        return f

    @property
    def nodes(self) -> int:
        return len(self.size)

    def uses(self, assign: Sequence[Sequence[int]], batch: int = 0) -> list[Use]:
        tree = self.model.tree
        return [
            Use(self.gpu[v], tree[self.local[v]].slot, list(assign[v]), batch)
            for v in range(self.nodes)
            if assign[v]
        ]


_FORESTS: dict[tuple[str, int], Forest] = {}


@dataclass(frozen=True)
class Availability:
    """When each forest node's slices are free of running work (``hi``: all of them,
    ``lo``: the first one) and when each GPU's reconfiguration channel is free, in
    seconds from the batch's start; from the GPUs as a batch finds them."""

    hi: list[float]
    lo: list[float]
    channel: list[float]

    @classmethod
    def of(cls, forest: Forest, start: Sequence[Gpu], now: float) -> Availability:
        S = forest.model.compute_slices
        free = [0.0] * (forest.gpus * S)
        channel = [0.0] * forest.gpus
        for g, gpu in enumerate(start):
            channel[g] = max(0.0, gpu.channel_free - now)
            for inst in gpu.instances:
                if inst.job is None:
                    continue
                end = math.inf if inst.busy_until is None else max(0.0, inst.busy_until - now)
                p = inst.slot.placement
                for sl in range(p.start, min(p.end, S)):
                    if end > free[g * S + sl]:
                        free[g * S + sl] = end
        hi = [max(free[c] for c in forest.covers[v]) for v in range(forest.nodes)]
        lo = [min(free[c] for c in forest.covers[v]) for v in range(forest.nodes)]
        return cls(hi, lo, channel)

    def backlog(self, forest: Forest) -> float:
        """Slice-seconds still committed to running work that ends (a slice never
        free is left out: the area bound stays a lower bound, and finite)."""
        return math.fsum(h for v in forest.leaves if (h := self.hi[v]) != math.inf)


def time_assignment(
    forest: Forest,
    tasks: Sequence[Job],
    assign: Sequence[Sequence[int]],
    start: Sequence[Gpu] | None = None,
    batch: int = 0,
    now: float = 0.0,
) -> tuple[Timeline, list[int]]:
    """Time a tree assignment (top-down uses) from ``start`` as it is at ``now``."""
    uses = forest.uses(assign, batch)
    nodes = [v for v in range(forest.nodes) if assign[v]]
    return run_uses(forest.model, tasks, uses, forest.gpus, start, now=now), nodes
