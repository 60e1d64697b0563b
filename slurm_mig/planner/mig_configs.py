"""SMART-MIG's GPU configurations (Fig. 2), derived from ``geometry``.

A configuration is a multiset of instance sizes that some full partition of the model
realises and that no other such multiset contains: on the A100 the 19 valid partitions
give 14 multisets, of which 3-2-1 and 3-1-1-1 (a 3g at placement 0 wastes a compute
slice) sit inside 3-2-1-1 and 3-1-1-1-1, which leaves the paper's 12. They are numbered
as the paper numbers them, largest sizes first (1 = 7, 2 = 4-3, ..., 12 = 1x7). A
configuration may have several realisations (placements); a GPU uses the one that
keeps its running jobs where they are (`realise`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache

from ..geometry import GpuModel, Slot, get_model, slot_mask, valid_partitions
from .snapshot import Gpu

__all__ = [
    "FIG12_STATIC",
    "MigConfig",
    "ConfigError",
    "Layout",
    "configs_for",
    "infer_config",
    "parse_configs",
    "realise",
]

# The static configuration SMART-MIG compares against (Fig. 12): paper numbers per GPU.
FIG12_STATIC = (1, 1, 2, 3, 3, 5, 5, 10)


class ConfigError(ValueError):
    """A configuration list that the model does not have."""


@dataclass(frozen=True)
class MigConfig:
    """Configuration ``number`` (1-based, the paper's): its sizes, largest first, and
    the full partitions that realise it (geometry's order)."""

    number: int
    sizes: tuple[int, ...]
    realisations: tuple[tuple[Slot, ...], ...]

    @property
    def name(self) -> str:
        return "-".join(map(str, self.sizes))

    @property
    def mean_size(self) -> float:
        """Average instance size (CEDF sorts GPUs by it)."""
        return sum(self.sizes) / len(self.sizes)


@dataclass(frozen=True)
class Layout:
    """A GPU's configuration as placed: the realisation and its slots free of running
    jobs (sorted by placement)."""

    config: MigConfig
    slots: tuple[Slot, ...]
    free: tuple[Slot, ...]


def _contains(big: Counter, small: Counter) -> bool:
    return all(big[k] >= v for k, v in small.items())


@cache
def _configs(model_name: str) -> tuple[MigConfig, ...]:
    by_sizes: dict[tuple[int, ...], list[tuple[Slot, ...]]] = {}
    for part in valid_partitions(model_name):
        key = tuple(sorted((s.size for s in part), reverse=True))
        by_sizes.setdefault(key, []).append(part)
    counts = {k: Counter(k) for k in by_sizes}
    maximal = [
        k for k in by_sizes if not any(o != k and _contains(counts[o], counts[k]) for o in by_sizes)
    ]
    maximal.sort(reverse=True)
    return tuple(MigConfig(i + 1, k, tuple(by_sizes[k])) for i, k in enumerate(maximal))


def configs_for(model: GpuModel | str) -> tuple[MigConfig, ...]:
    """The model's configurations, numbered as in SMART-MIG's Fig. 2 (12 on 7-slice models)."""
    return _configs(get_model(model).name if isinstance(model, str) else model.name)


def parse_configs(spec: str | Sequence[int] | None, model: GpuModel) -> tuple[MigConfig, ...]:
    """Configurations to cycle over the GPUs: paper numbers, ``"1,1,2,3"`` or
    ``"1-1-2-3"`` (None: Fig. 12's static list on 12-configuration models, else all)."""
    configs = configs_for(model)
    if spec is None or (isinstance(spec, str) and spec.strip().lower() in ("", "auto")):
        numbers: Sequence[int] = (
            FIG12_STATIC if len(configs) == 12 else tuple(range(1, len(configs) + 1))
        )
    elif isinstance(spec, (int, str)):
        text = str(spec).replace("-", ",").replace("/", ",")
        try:
            numbers = [int(x) for x in text.split(",") if x.strip()]
        except ValueError:
            raise ConfigError(
                f"configs {spec!r}: write configuration numbers 1-{len(configs)} separated "
                "by commas, e.g. configs=1,1,2,3,3,5,5,10"
            ) from None
    else:
        numbers = list(spec)
    if not numbers or len(numbers) > 4096:
        raise ConfigError(f"configs {spec!r}: give 1 to 4096 configuration numbers")
    for n in numbers:
        if not isinstance(n, int) or not 1 <= n <= len(configs):
            raise ConfigError(
                f"configs {spec!r}: {n!r} is not a configuration of {model.name}; "
                f"numbers are 1-{len(configs)} (" + ", ".join(c.name for c in configs) + ")"
            )
    return tuple(configs[n - 1] for n in numbers)


def realise(config: MigConfig, gpu: Gpu) -> Layout:
    """The realisation of ``config`` that suits ``gpu`` best: most of its running
    instances inside, then most of its idle instances, then most free compute; the
    slots of it no running job overlaps are free."""
    busy = {i.slot for i in gpu.instances if i.job is not None}
    idle = {i.slot for i in gpu.instances if i.job is None}
    best = None
    for k, part in enumerate(config.realisations):
        free = tuple(s for s in part if not slot_mask(s) & gpu.busy_mask)
        key = (
            -sum(1 for s in part if s in busy),
            -sum(1 for s in part if s in idle),
            -sum(s.size for s in free),
            k,
        )
        if best is None or key < best[0]:
            best = (key, part, free)
    assert best is not None
    return Layout(config, best[1], best[2])


def fits(config: MigConfig, gpu: Gpu) -> bool:
    """True when a realisation of ``config`` holds every running instance of ``gpu``
    where it is (the GPU can take it without stopping a job)."""
    busy = [i.slot for i in gpu.instances if i.job is not None]
    return any(all(s in part for s in busy) for part in config.realisations)


def infer_config(gpu: Gpu, configs: Iterable[MigConfig], default: MigConfig) -> MigConfig:
    """The configuration a GPU is in: the one whose realisation holds the most of its
    live instances (running first, then idle); ``default`` on a tie with it, else the
    lowest number."""
    busy = {i.slot for i in gpu.instances if i.job is not None}
    idle = {i.slot for i in gpu.instances if i.job is None}
    if not busy and not idle:
        return default
    best = None
    for c in configs:
        score = max(
            (sum(1 for s in p if s in busy), sum(1 for s in p if s in idle)) for p in c.realisations
        )
        key = (score, c == default, -c.number)
        if best is None or key > best[0]:
            best = (key, c)
    assert best is not None
    return best[1]
