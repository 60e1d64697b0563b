"""One registry of policy names for the CLI, the simulator and the planner daemon.

Two kinds, one contract each (Kubernetes' scheduling framework in small: plugins over
an immutable snapshot that return decisions):

* ``batch``: ``plan(batch) -> Plan`` plans a batch of jobs onto the GPUs as
  ``batch.start`` (a `ClusterSnapshot`) finds them; ``planner.driver`` forms the
  batches, keeps standing plans and starts jobs as their slices free up.
* ``online``: ``decide(snapshot) -> Decisions`` places waiting jobs now (or lets them
  wait). A policy object may keep caches between calls (``snapshot.changed`` says what
  to refresh) but decides from the snapshot alone.

Modules are imported only when a policy of theirs is asked for.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from importlib import import_module
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:  # pragma: no cover - the registry stays cheap to import
    from ..plan import Plan
    from .decisions import Decisions
    from .snapshot import ClusterSnapshot

__all__ = [
    "BatchPlanner",
    "FACTORIES",
    "BatchPolicy",
    "OnlinePolicy",
    "Policy",
    "PolicyInfo",
    "UnknownPolicy",
    "describe",
    "get_policy",
    "policy_info",
    "policy_names",
    "register_policy",
    "takes_objective",
    "unregister_policy",
]


class UnknownPolicy(ValueError):
    """A policy name or option the registry does not know; lists the valid ones."""


@runtime_checkable
class BatchPlanner(Protocol):
    name: str
    kind: Literal["batch"]

    def plan(self, batch: Any) -> Plan: ...


@runtime_checkable
class OnlinePolicy(Protocol):
    name: str
    kind: Literal["online"]

    def decide(self, snapshot: ClusterSnapshot) -> Decisions: ...


Policy = BatchPlanner | OnlinePolicy


@dataclass(frozen=True)
class BatchPolicy:
    """A batch planner function as a registered policy."""

    name: str
    fn: Callable[[Any], Plan]
    kind: Literal["batch"] = "batch"

    def plan(self, batch: Any) -> Plan:
        from .gcpause import paused_gc

        with paused_gc():
            return self.fn(batch)


def bind_options(fn: Callable[..., Plan], name: str, options: dict[str, Any]) -> Callable:
    """``fn`` with keyword ``options`` bound, checked now (TypeError names a bad one)."""
    if not options:
        return fn
    import inspect  # only when a policy is built with options

    inspect.signature(fn).bind(None, **options)  # raises TypeError for unknown names
    return partial(fn, **options)


@dataclass(frozen=True)
class PolicyInfo:
    """A registered name: its kind, a line for --help, the module whose ``POLICIES``
    maps the name to its factory (called as ``factory(**options)``), and what the
    policy declares: the ``objective`` values it takes (none: it plans by its own rule,
    and an objective given to it is refused), whether the batch driver may
    list-schedule it (choose sizes once on idle GPUs, then place in order), and whether
    it runs a job of several slices on N instances of a fixed layout (``Place.more``,
    as Slurm does) instead of on one region, which the daemon's hooks cannot carry out."""

    name: str
    kind: Literal["batch", "online"]
    summary: str
    target: str
    objectives: tuple[str, ...] = ()
    list_scheduled: bool = False
    gangs_on_instances: bool = False

    def objective_options(self, objective: str | None) -> dict[str, str]:
        """``{"objective": objective}`` for a policy that takes it; ``{}`` for none
        given; UnknownPolicy (one line, naming what it takes) for one it does not."""
        if not objective:
            return {}
        if objective in self.objectives:
            return {"objective": objective}
        if self.objectives:
            *rest, last = self.objectives
            raise UnknownPolicy(
                f"policy {self.name!r}: objective {objective!r}: choose {', '.join(rest)} or {last}"
            )
        others = ", ".join(takes_objective(objective)) or "none"
        raise UnknownPolicy(
            f"policy {self.name!r} takes no objective (it plans by its own rule); remove "
            f"objective {objective!r}, or choose a policy that takes it: {others}"
        )


_P = "slurm_mig.planner."
# the objectives of planner.sequencing's post-pass (FAR's plan re-sequenced)
_SEQUENCED = ("makespan", "jct", "balanced")
_ENTRIES = (
    PolicyInfo(
        "auto",
        "batch",
        "FAR, plus an exact search where a batch is small enough (default)",
        _P + "auto",
        objectives=_SEQUENCED,
        list_scheduled=True,
    ),
    PolicyInfo(
        "far",
        "batch",
        "FAR: allotment family, LPT list scheduling over the repartitioning tree, "
        "moves and swaps; batches appended onto busy GPUs reversed (FAR Section 4)",
        _P + "far_planner",
        objectives=_SEQUENCED,
        list_scheduled=True,
    ),
    PolicyInfo(
        "far-pcie",
        "batch",
        "FAR candidates ranked under the PCIe slowdown model (Eq. 2), with the co-location gate",
        _P + "far_pcie",
        objectives=("makespan", "jct", "start", "online"),
    ),
    PolicyInfo(
        "exact",
        "batch",
        "branch and bound over FAR's search space (small batches only)",
        _P + "exact",
        list_scheduled=True,
    ),
    PolicyInfo(
        "miso-opt",
        "batch",
        "FAR Section 6.5's reading of MISO's optimizer, for batches (plan, bench): per "
        "step the partition that maximises summed speedup; not MISO's online scheduler, "
        "so simulate refuses it (README: Baselines)",
        _P + "far_baselines",
    ),
    PolicyInfo(
        "fixpart-best",
        "batch",
        "the best fixed partition for each batch (FAR's FIXPARTBEST); in simulate it "
        "repartitions between batches, so not a static site: see static",
        _P + "far_baselines",
    ),
    PolicyInfo(
        "fixpart-SIZES",
        "batch",
        "one fixed partition, sizes left to right: fixpart-7, fixpart-4-3, "
        "fixpart-1-1-1-1-1-1-1; planned per batch (each appended behind the last), so in "
        "simulate not a static site's scheduler: see static",
        _P + "far_baselines",
    ),
    PolicyInfo(
        "adaptive",
        "online",
        "the daemon's default: each job at the size and GPU of its earliest completion on "
        "the MIG timeline, larger slices only while they cost the waiting jobs less than "
        "they gain, backfilling before reserved slices; a batch on idle GPUs goes to FAR",
        _P + "adaptive",
        objectives=("balanced", "jct", "makespan"),
    ),
    PolicyInfo(
        "baseline",
        "online",
        "first GPU with room for the job's size, in arrival order with backfilling; PCIe-unaware",
        _P + "baseline",
    ),
    PolicyInfo(
        "pcie-aware",
        "online",
        "the PCIe paper's scheduler: lowest predicted slowdown first, gated by delay "
        "and wait-time thresholds",
        _P + "gate",
    ),
    PolicyInfo(
        "static",
        "online",
        "a site's fixed MIG layout, never repartitioned: layout=4-3, 7, 1-1-1-1-1-1-1 or "
        "mixed 7/4-3 (cycled over the GPUs); match=exact (typed requests: its own size, "
        "else the smallest larger one) or match=fit (untyped: any idle instance it runs "
        "on, smallest first)",
        _P + "online",
        gangs_on_instances=True,
    ),
    PolicyInfo(
        "no-mig",
        "online",
        "whole GPUs: every job on a full GPU, no MIG",
        _P + "online",
        gangs_on_instances=True,
    ),
    PolicyInfo(
        "first-fit",
        "online",
        "static layout, first fit (the fragmentation paper's ablation baseline)",
        _P + "online",
        gangs_on_instances=True,
    ),
    PolicyInfo(
        "ff+lb",
        "online",
        "static layout + conditional load balancing",
        _P + "online",
        gangs_on_instances=True,
    ),
    PolicyInfo(
        "ff+lb+dp",
        "online",
        "+ fragmentation-aware exact-size dynamic partitioning",
        _P + "online",
    ),
    PolicyInfo(
        "ff+lb+dp+mig",
        "online",
        "+ migration on departure (restartable jobs)",
        _P + "online",
    ),
    PolicyInfo(
        "frag-aware",
        "online",
        "the fragmentation-aware scheduler: load balancing, dynamic partitioning, "
        "migration on departure",
        _P + "online",
    ),
    PolicyInfo(
        "migm-a",
        "online",
        "MIGM scheme A: by size class, partitions that keep the most configurations reachable",
        _P + "partition_manager",
    ),
    PolicyInfo(
        "migm-b",
        "online",
        "MIGM scheme B: in order (FIFO), the most reachable partition",
        _P + "partition_manager",
    ),
    PolicyInfo(
        "edf",
        "online",
        "SMART-MIG EDF most packed: static configurations, earliest deadline first onto the "
        "slowest slot of the most packed GPU that meets it",
        _P + "edf",
    ),
    PolicyInfo(
        "met",
        "online",
        "SMART-MIG EDF marginal ET: static configurations, each job onto the slot with the "
        "least tardiness + a x marginal energy",
        _P + "edf",
    ),
    PolicyInfo(
        "cedf",
        "online",
        "SMART-MIG categorical EDF: jobs by throughput class then deadline onto GPUs by "
        "mean slot size",
        _P + "edf",
    ),
    PolicyInfo(
        "smart-mig",
        "online",
        "SMART-MIG: a mean-field RL controller repartitions GPUs among the 12 configurations "
        "(top-k sampling), CEDF places the jobs",
        _P + "smartmig",
    ),
)
_BY_NAME = {e.name: e for e in _ENTRIES}
_FIXPART = re.compile(r"^fixpart-(\d+(-\d+)*)$")
_EXTRA: dict[str, PolicyInfo] = {}


def _imported(info: PolicyInfo) -> Callable[..., Policy]:
    """The factory ``info``'s module contributes for its name, imported when first used."""

    def factory(*args: Any, **options: Any) -> Policy:
        return import_module(info.target).POLICIES[info.name](*args, **options)

    return factory


# name -> factory building the policy from its options (Kubernetes' scheduler
# ``Registry map[string]PluginFactory``); each module's ``POLICIES`` holds its entries
FACTORIES: dict[str, Callable[..., Policy]] = {e.name: _imported(e) for e in _ENTRIES}


def register_policy(info: PolicyInfo, factory: Callable[..., Policy]) -> None:
    """Add a name at run time (tests, experiments); ValueError when the name is taken,
    by a built-in policy or one registered before (never replaced silently)."""
    key = _key(info.name)
    if key != info.name or not key:
        raise ValueError(f"policy name {info.name!r}: use lower case, no surrounding space")
    if key in _EXTRA or key in _BY_NAME or _FIXPART.match(key) or key == "fixpart-sizes":
        raise ValueError(f"policy {info.name!r} is registered already; choose another name")
    _EXTRA[key] = info
    FACTORIES[key] = factory


def unregister_policy(name: str) -> None:
    """Remove a name `register_policy` added (built-in policies stay); KeyError if none."""
    key = _key(name)
    del _EXTRA[key]
    del FACTORIES[key]


def _key(name: str) -> str:
    return name.strip().lower()


def policy_info(name: str) -> PolicyInfo:
    """The entry of ``name`` (``fixpart-4-3`` finds ``fixpart-SIZES``); UnknownPolicy
    lists the valid names."""
    key = _key(name)
    if key in _EXTRA:
        return _EXTRA[key]
    if key in _BY_NAME and key != "fixpart-sizes":
        return _BY_NAME[key]
    if _FIXPART.match(key):
        return _BY_NAME["fixpart-SIZES"]
    raise UnknownPolicy(f"unknown policy {name!r}; choose one of {', '.join(policy_names())}")


def takes_objective(objective: str) -> list[str]:
    """The registered policies that take ``objective``."""
    infos = [*_ENTRIES, *_EXTRA.values()]
    return [i.name for i in infos if objective in i.objectives]


def policy_names(kind: str | None = None) -> list[str]:
    """Registered names (``fixpart-SIZES`` stands for every fixed partition)."""
    infos = [*_ENTRIES, *_EXTRA.values()]
    seen: dict[str, None] = {}
    for i in infos:
        if kind is None or i.kind == kind:
            seen[i.name] = None
    return list(seen)


def describe(kind: str | None = None, width: int = 14, columns: int = 79) -> str:
    """``name  summary`` lines for --help and check-config, wrapped to ``columns``."""
    import textwrap

    infos = {i.name: i for i in (*_ENTRIES, *_EXTRA.values())}
    lines = []
    for name in policy_names(kind):
        head = f"  {name:<{width}}"
        if len(head) > 2 + width:
            head += " "
        lines.append(
            textwrap.fill(
                infos[name].summary,
                width=columns,
                initial_indent=head,
                subsequent_indent=" " * (2 + width),
            )
        )
    return "\n".join(lines)


def get_policy(name: str, **options: Any) -> Policy:
    """A fresh policy for ``name`` with ``options``; UnknownPolicy names a bad name or
    option and lists the valid ones."""
    key = _key(name)
    info = policy_info(key)
    factory = FACTORIES[key if key in _EXTRA else info.name]
    sizes = _FIXPART.match(key)
    if sizes and key not in _EXTRA:  # fixpart-SIZES: the sizes are the factory's argument
        factory = partial(factory, sizes.group(1))
    return _call(info, key, factory, options)


def _call(info: PolicyInfo, key: str, factory: Callable[..., Policy], options: dict) -> Policy:
    if "objective" in options:  # declared, not found out from the factory's TypeError
        info.objective_options(options["objective"])
    try:
        policy = factory(**options)
    except TypeError as exc:
        if "argument" not in str(exc):
            raise
        raise UnknownPolicy(f"policy {key!r}: {exc}") from None
    if getattr(policy, "kind", None) != info.kind:  # pragma: no cover - a registry bug
        raise TypeError(f"policy {key!r} is registered as {info.kind} but is not")
    return policy
