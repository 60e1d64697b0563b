"""Exact planner for small batches, and the default planner that uses it when cheap.

Search space (the space FAR searches). A schedule is an *assignment* of every task to
one node of the repartitioning tree (Fig. 4 of the FAR paper) of one GPU; the forest
``far.Forest.build(model, gpus)`` holds one tree per GPU. A task assigned to node ``v``
runs on an instance of ``forest.size[v]`` slices at that node's placement, the tasks of
a node run back to back, and the assignment is timed exactly as
``far.time_assignment`` times it (``timeline.run_uses``: a node waits for its nearest
used ancestor, destroys it, is created, one reconfiguration at a time per GPU). The
order of the tasks within a node does not change the makespan (only the node's total
does), so the search is over task -> node maps. A task is never put on a size where
its time is ``inf``.

"Exact" means: the minimum makespan over this space, proven by branch and bound when
``stats["optimal"]`` is true. It is *not* the optimum of the unrestricted MIG problem
(Section 2.2): schedules off the repartitioning trees (e.g. an instance created, used,
destroyed and created again, or two uses of one placement) are outside it, so the
figure is an upper bound on the unrestricted optimum.

Branch and bound. Tasks are placed in decreasing order of minimum work, each on the
node with the smallest bound first; FAR's assignment, improved by a short local search
(moves and swaps of single tasks), is the first incumbent. A partial assignment is
pruned when a lower bound on the makespan of *every* completion reaches the incumbent
(less a relative 1e-12, so "optimal" is up to that rounding). The timing is not
monotone in the loads (a longer node can let another one get the reconfiguration
channel earlier), so only these bounds, each proven for every completion, are used:

* chain: a used node is created after its nearest used ancestor p ended and was
  destroyed, so it ends at or after end(p) + destroy(p) + create + load, down every
  root-to-leaf path; completing the assignment only lengthens these chains;
* channel-aware chain: the used nodes hanging from the same used node p (or from
  nothing, at time 0) are ready together and the channel creates them in node order,
  so each other branch holding a lower used node (hanging from p) adds at least its smallest create
  time before f's create; a completion cannot undo that (``_Search._refresh`` has the
  argument);
* area: a node holds the slices it covers (``forest.covers``) for its whole load, nodes
  that share a slice run one after the other and nothing runs before the smallest
  create time, so ``min create + sum(covered slices x time) / (slices x gpus)``, each
  unplaced task at its smallest covered area, is a lower bound;
* look-ahead: every unplaced task ends up on some node v, so the smallest over v of
  what the chains through v become with it is a lower bound, for every unplaced task.

Symmetries, broken exactly: the constraints below are lexicographic-leader
constraints of one group acting on the task -> node vectors (node numbers GPU-major),
so they hold together for the least member of every orbit. Identical GPUs are opened
in order; of two isomorphic sibling subtrees (the two 1-slice leaves under a 2-slice
node, the two 2-slice subtrees under the 3-slice node at placement 0) the first task
placed in either goes to the first; tasks with identical time vectors take
non-decreasing nodes. Swapping sibling subtrees is not an exact symmetry of the timing
(the channel serves the lower node first on a tie), so a complete assignment is scored
at the best member of its orbit, which the bounds above do not tell apart: sibling
leaves take the larger load on the first leaf (never worse: their create times do not
depend on their loads and nothing waits for them), and both orientations of two
sibling subtrees are timed when both are used (with one unused, swapping changes
nothing: the node order against every other node is kept).

``time_budget`` bounds the search; when it runs out the best assignment found is
returned with ``stats["optimal"] = False``. The search is a loop over an explicit stack
(a batch is as deep as it has tasks), and a batch with more task-node options than
``EXACT_MAX_OPTIONS`` is not searched: FAR's plan is returned (``stats["searched"]``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from functools import partial

from ..geometry import GpuModel
from ..job import Job
from ..plan import Plan
from .auto import AUTO_MAX_TASKS, _onto, auto_budget, plan_auto
from .batch import Batch
from .exact_search import EXACT_MAX_OPTIONS, _far, _solve, searchable
from .far import time_assignment
from .registry import BatchPolicy
from .timeline import to_plan

__all__ = [
    "AUTO_MAX_TASKS",
    "EXACT_MAX_OPTIONS",
    "POLICIES",
    "auto_budget",
    "exact_schedule",
    "make_exact",
    "plan_auto",
    "plan_exact",
    "searchable",
]

log = logging.getLogger(__name__)


def exact_schedule(
    tasks: Sequence[Job], model: GpuModel, gpus: int = 1, time_budget: float = 10.0
) -> tuple[list[list[int]], float, bool, int]:
    """The best task -> tree node assignment (see the module docstring).

    Returns (assignment: task indexes per ``Forest.build(model, gpus)`` node, in run
    order; its makespan as ``far.time_assignment`` times it; optimal: True when the
    search completed within ``time_budget`` seconds; explored: search nodes visited).
    """
    forest, assign, optimal, explored = _solve(tasks, model, gpus, time_budget)
    makespan = time_assignment(forest, tasks, assign)[0].makespan
    return assign, makespan, optimal, explored


def plan_exact(batch: Batch, time_budget: float = 10.0) -> Plan:
    """The exact planner (CLI ``--planner exact``): the minimum makespan over FAR's
    space of tree assignments, proven when ``stats["optimal"]`` is true; otherwise the
    best found within ``time_budget`` seconds (never worse than FAR). Onto busy GPUs:
    the optimum for idle GPUs appended after their work, or FAR's plan onto them when
    that ends sooner."""
    if batch.busy:
        return _onto(batch, lambda b: plan_exact(b, time_budget), "exact")
    t0 = time.perf_counter()
    far_assign, far_ms = _far(batch.tasks, batch.model, batch.gpus)
    budget = time_budget - (time.perf_counter() - t0)
    forest, assign, optimal, explored = _solve(
        batch.tasks, batch.model, batch.gpus, budget, far_assign
    )
    timeline, _ = time_assignment(forest, batch.tasks, assign)
    searched = searchable(len(batch.tasks), forest.nodes)
    if not searched:
        log.warning(
            "planner exact: %d tasks on %d GPUs hold %d task-node options, above the "
            "search's %d; FAR's plan is kept (use far or auto for batches this large)",
            len(batch.tasks),
            batch.gpus,
            len(batch.tasks) * forest.nodes,
            EXACT_MAX_OPTIONS,
        )
    stats = {
        "searched": searched,
        "planning_seconds": time.perf_counter() - t0,
        "optimal": optimal,
        "explored": explored,
        "far_makespan": far_ms,
        "time_budget": time_budget,
        "space": "task -> repartitioning-tree node assignments (FAR's space); "
        "an upper bound on the unrestricted optimum",
    }
    return to_plan(batch.model, batch.tasks, timeline, batch.gpus, "exact", stats=stats)


def make_exact(**options) -> BatchPolicy:
    """Registry factory of ``exact`` (option time_budget, seconds)."""
    if "time_budget" not in options:
        if options:
            raise TypeError(f"unexpected argument {next(iter(options))!r}")
        return BatchPolicy("exact", plan_exact)
    budget = float(options.pop("time_budget"))
    if options:
        raise TypeError(f"unexpected argument {next(iter(options))!r}")
    if not budget > 0:
        raise ValueError(f"time_budget {budget} must be a positive number of seconds")
    return BatchPolicy("exact", partial(plan_exact, time_budget=budget))


POLICIES = {"exact": make_exact}
