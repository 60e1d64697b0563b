"""A batch for a batch planner, and ``get_planner`` (a batch planner by name)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..geometry import GpuModel
from ..job import Job
from ..plan import Plan
from .registry import UnknownPolicy, get_policy
from .snapshot import ClusterSnapshot

__all__ = ["Batch", "UnknownPlanner", "get_planner"]


@dataclass(frozen=True)
class Batch:
    """What a batch planner sees: the tasks, the GPU model, how many GPUs, and the GPUs
    as the batch finds them (``start``; None: idle). A plan's times count from
    ``start.now`` (0 when there is no start); ``number`` goes into every planned task's
    ``batch``."""

    tasks: tuple[Job, ...]
    model: GpuModel
    gpus: int = 1
    seed: int = 0
    start: ClusterSnapshot | None = None
    number: int = 0

    def __post_init__(self) -> None:
        if self.start is not None and len(self.start.gpus) != self.gpus:
            raise ValueError(
                f"batch on {self.gpus} GPUs but its start snapshot has {len(self.start.gpus)}"
            )

    @property
    def busy(self) -> bool:
        """True when the start snapshot has any live instance (else the GPUs are idle)."""
        return self.start is not None and any(g.instances for g in self.start.gpus)

    @property
    def now(self) -> float:
        return self.start.now if self.start is not None else 0.0


class UnknownPlanner(UnknownPolicy):
    """A batch planner name the registry does not know."""


def get_planner(name: str, **options) -> Callable[[Batch], Plan]:
    """The batch planner ``name`` as a function ``plan(batch) -> Plan``; a policy that
    plans no batch (an online one) is refused with one line."""
    try:
        policy = get_policy(name, **options)
    except UnknownPolicy as exc:
        raise UnknownPlanner(str(exc)) from None
    plan = getattr(policy, "fn", None) or getattr(policy, "plan", None)
    if not callable(plan):
        raise UnknownPlanner(
            f"{name!r} is an online policy: it places jobs as they arrive and plans no "
            "batch; use it with 'slurm-mig plan --start STATE.json', the simulator or "
            "the daemon"
        )
    return plan
