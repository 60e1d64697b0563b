"""The simulator's contract with policies, which is the planning core's: a policy of
the registry (``planner.registry``) reads a `ClusterSnapshot` the engine builds after
every instant at which something happened, and returns `Decisions` the engine carries
out (``sim.policies`` adapts batch planners through ``planner.driver``, as the daemon
does). A job of a workload is the planner's `Job` (``SimJob``).

The snapshot the engine hands over is valid during that call only: its GPUs are built
lazily (those that changed), its mappings are read-only views of the engine's state.

Timing: a job placed on an idle existing instance starts at once; one that needs an
instance starts when its creation ends (Table 1 times, after the GPU's earlier create
and destroy operations, which run one at a time). A destroyed instance's slices are
free for the GPU's next operation (no event marks the end of a destroy).
"""

from __future__ import annotations

from ..planner.snapshot import Job, Running

__all__ = ["PolicyError", "RunningView", "SimJob"]

SimJob = Job
RunningView = Running


class PolicyError(RuntimeError):
    """A policy decided something the cluster cannot carry out (a policy bug)."""
