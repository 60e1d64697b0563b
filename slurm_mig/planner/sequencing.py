"""Completion-time objectives for batch plans: re-sequence a plan's work so that short
jobs are not stuck behind long ones, within a bound on the makespan.

FAR minimises the makespan, and its list schedule (LPT over the repartitioning tree)
starts the longest tasks first: on batches its mean completion time is far worse than
a fixed layout's. This pure post-pass takes a plan (FAR's, or any batch planner's) and
returns a new one; the input is never changed. Objectives (``OBJECTIVES``):

* ``makespan``: the plan as it is (FAR as published).
* ``jct``: the least mean (weighted) completion time found; the makespan only breaks
  ties, or bounds it at ``slack`` x the plan's when ``slack`` is given.
* ``balanced`` (``DEFAULT_OBJECTIVE``): the least mean (weighted) completion time with
  the makespan at most ``BALANCED_SLACK`` (1.05) x the plan's.

Three steps, each giving a valid plan:

1. *Smith's rule per instance.* The tasks run back to back on one instance are put in
   order of time / weight (shortest first when unweighted). The instance's start, end
   and reconfigurations do not move, so the makespan is unchanged: free, always done.
2. *Tree order* (a plan that uses each node of the repartitioning tree at most once
   per GPU, as FAR's, ``exact``'s and ``auto``'s do; onto busy GPUs given ``start``). A used node's tasks
   run before the nodes below it (FAR's order: the child instance is created once its
   parent's tasks ended and the parent was destroyed) or after them (the reversed tree
   of FAR Section 4). Either way the node's subtree lasts the same (the path sums do not
   change), so the choice is made per node by an exchange argument: the node goes first
   when ``W_below x L_node <= W_node x D_below`` (W: the weights of the tasks, L: the
   node's length, D: the longest subtree below it).
3. *Moves* (``jct`` and ``balanced``, batches up to ``SEARCH_TASKS`` tasks): a local
   search moves single tasks to another node of any GPU and any size they run on while
   that lowers the estimated weighted completion time and keeps the estimated makespan
   within the bound (at most ``SEARCH_EVALS`` estimates; deterministic). The estimate
   leaves out that a GPU's reconfigurations share one channel; a plan whose exact
   makespan breaks the bound is searched again under a bound tightened by as much, and
   where the estimate is rough (short tasks) an unbounded search is tried as well.

Every candidate is timed exactly as FAR's trees are (``timeline.run_uses``: one
reconfiguration at a time per GPU, an instance created only after the instances in its
way ended and were destroyed); the chosen plan is the candidate of least weighted
completion whose exact makespan holds the bound, so it is never worse than the input
on that sum (step 1 alone qualifies).

Weights: ``weights`` (task id -> weight > 0), else a task's ``weight``, else 1.

The ``far`` and ``auto`` policies (option ``objective``) pass no ``start``: onto busy
GPUs they apply step 1 only. In the simulator's MISO streams (8 and 40 A100s) the
whole re-sequencing there made the makespan up to 24 % longer and the mean completion
time no better: a stream's batches are small and follow one another.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace

from ..geometry import Slot
from ..job import Job
from ..plan import Plan
from .sequencing_tree import _EPS, SEARCH_EVALS, _State, _tree, _tree_assignment
from .snapshot import ClusterSnapshot

__all__ = [
    "BALANCED_SLACK",
    "DEFAULT_OBJECTIVE",
    "OBJECTIVES",
    "accepts_objective",
    "check_objective",
    "mean_completion",
    "objective_options",
    "sequence_plan",
]

OBJECTIVES = ("makespan", "jct", "balanced")
DEFAULT_OBJECTIVE = "balanced"
BALANCED_SLACK = 1.05
SEARCH_TASKS = 400  # the local search (step 3) runs on batches up to this many tasks
RETRIES = 3  # searches under a tightened bound when the last broke it


def check_objective(value: object) -> str:
    """``value`` as an objective name (case and spaces ignored); ValueError names the
    valid ones."""
    name = str(value).strip().lower()
    if name not in OBJECTIVES:
        raise ValueError(
            f"objective {value!r}: choose one of {', '.join(OBJECTIVES)} (makespan: FAR's "
            "plan; jct: least mean completion time; balanced: least mean completion time "
            f"with the makespan at most {BALANCED_SLACK:g} x FAR's)"
        )
    return name


def mean_completion(plan: Plan) -> float:
    """The mean end time of the plan's own tasks (not the running jobs it found)."""
    ends = [t.end for t in plan.tasks if not t.running]
    return sum(ends) / len(ends) if ends else 0.0


def accepts_objective(name: str, objective: str) -> bool:
    """Whether the registered policy ``name`` takes ``objective=objective``: what its
    registry entry declares (`PolicyInfo.objectives`); False for an unknown name."""
    from .registry import UnknownPolicy, policy_info

    try:
        return objective in policy_info(name).objectives
    except UnknownPolicy:
        return False


def objective_options(name: str, objective: str | None) -> dict[str, str]:
    """``{"objective": objective}`` when policy ``name`` takes it, else ``{}`` (for a
    default applied where it fits; a value the user gave goes through
    `PolicyInfo.objective_options`, which refuses it instead)."""
    if not objective:
        return {}
    return {"objective": objective} if accepts_objective(name, objective) else {}


# ---------------------------------------------------------------------------
# The post-pass


def sequence_plan(
    plan: Plan,
    tasks: Sequence[Job],
    objective: str = DEFAULT_OBJECTIVE,
    *,
    slack: float | None = None,
    weights: Mapping[str, float] | None = None,
    start: ClusterSnapshot | None = None,
) -> Plan:
    """The plan re-sequenced for ``objective`` (module doc); ``plan`` itself when the
    objective is ``makespan``. ``tasks``: the batch the plan was made for. ``slack``:
    the makespan bound as a factor of the plan's (default: 1.05 for ``balanced``, no
    bound for ``jct``). ``start``: the GPUs the plan was made onto when they were busy
    (their running jobs stay; without it a plan onto busy GPUs gets step 1 only)."""
    objective = check_objective(objective)
    if objective == "makespan":
        return plan
    if slack is None:
        slack = BALANCED_SLACK if objective == "balanced" else math.inf
    slack = float(slack)
    if not slack >= 1.0:
        raise ValueError(f"slack {slack!r} must be a factor >= 1 of the plan's makespan")
    w = _weights(tasks, weights)
    base_ms = plan.makespan
    bound = base_ms * slack * (1 + _EPS) + _EPS
    first = _smith_runs(plan, w)
    candidates = [("smith", first)]
    tree = _tree(plan.model)
    assign = _tree_assignment(plan, tree, start)
    searched = 0
    if assign is not None:
        index = {t.id: i for i, t in enumerate(tasks)}
        wl = [w[t.id] for t in tasks]
        state = _State(plan.model, tree, tasks, wl, [
            {v: [index[i] for i in ids] for v, ids in per.items()} for per in assign
        ], start)  # fmt: skip
        tree_plan = state.plan(plan)
        candidates.append(("tree", tree_plan))
        if len(index) <= SEARCH_TASKS:
            estimate = state.makespan()
            ratios = [slack]
            if math.isfinite(slack) and abs(tree_plan.makespan - estimate) > 0.01 * estimate:
                # reconfigurations weigh (short tasks): the estimate is rough, and a
                # search without the bound may find what the bounded one cannot
                ratios.append(math.inf)
            budget = SEARCH_EVALS
            for n, ratio in enumerate(ratios):
                for _ in range(RETRIES if n == 0 else 1):
                    if budget <= 0:
                        break
                    trial = state.copy()
                    moves, used = trial.search(
                        estimate * ratio if math.isfinite(ratio) else ratio, budget
                    )
                    budget -= used
                    if not moves:
                        break
                    got = trial.plan(plan)
                    candidates.append(("moves", got))
                    searched = max(searched, moves)
                    if got.makespan <= bound:
                        break
                    # a plan over the bound: search again under a bound tightened by as much
                    ratio *= bound / got.makespan
    fits = [(n, p) for n, p in candidates if p.makespan <= bound] or [("input", plan)]
    name, best = min(fits, key=lambda np: (_wsum(np[1], w), np[1].makespan))
    stats = {
        **plan.stats,
        "objective": objective,
        "sequencing": name,
        "sequencing_moves": searched,
        "makespan_bound": base_ms * slack if math.isfinite(slack) else None,
        "far_makespan": plan.stats.get("far_makespan", base_ms),
        "input_makespan": base_ms,
        "input_mean_completion": mean_completion(plan),
        "mean_completion": mean_completion(best),
    }
    return replace(best, stats=stats)


def _weights(tasks: Sequence[Job], given: Mapping[str, float] | None) -> dict[str, float]:
    out = {}
    for t in tasks:
        raw = given.get(t.id) if given is not None else None
        if raw is None:
            raw = t.weight
        try:
            v = float(raw)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise ValueError(f"task {t.id!r}: weight {raw!r} is not a number") from None
        if not (v > 0 and math.isfinite(v)):
            raise ValueError(f"task {t.id!r}: weight {raw!r} must be a positive number")
        out[t.id] = v
    return out


def _wsum(plan: Plan, w: Mapping[str, float]) -> float:
    return sum(w.get(t.id, 1.0) * t.end for t in plan.tasks if not t.running)


# ---------------------------------------------------------------------------
# Step 1: Smith's rule within each run of one instance


def _smith_runs(plan: Plan, w: Mapping[str, float]) -> Plan:
    """The plan with each back-to-back run of tasks on one instance in Smith order."""
    runs: dict[tuple[int, Slot], list[int]] = {}
    for i, t in enumerate(plan.tasks):
        if not t.running:
            runs.setdefault((t.gpu, t.slot), []).append(i)
    out = list(plan.tasks)
    for idx in runs.values():
        idx.sort(key=lambda i: plan.tasks[i].start)
        cut = [0]
        for a in range(1, len(idx)):
            prev, cur = plan.tasks[idx[a - 1]], plan.tasks[idx[a]]
            if abs(cur.start - prev.end) > _EPS * max(1.0, abs(prev.end)):
                cut.append(a)
        cut.append(len(idx))
        for lo, hi in zip(cut, cut[1:]):
            run = [plan.tasks[i] for i in idx[lo:hi]]
            if len(run) < 2:
                continue
            order = sorted(run, key=lambda t: ((t.end - t.start) / w.get(t.id, 1.0), t.id))
            t0 = run[0].start
            for pos, t in zip(idx[lo:hi], order):
                d = t.end - t.start
                out[pos] = replace(t, start=t0, end=t0 + d)
                t0 += d
    return replace(plan, tasks=tuple(out))
