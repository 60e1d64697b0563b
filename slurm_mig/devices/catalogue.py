"""One GPU's MIG catalogue as its driver reports it, and the check against geometry's tables.

``slurm_mig.devices.nvml.read_catalogue`` asks NVML for every
``NVML_GPU_INSTANCE_PROFILE_*`` constant and keeps here what the driver says: name, slices,
memory, instance count, placements (in memory slices: ``GpuModel.from_nvml``). Profiles are keyed by NAME, never by id: ids differ
between models. ``compare`` lists where the offline tables and the driver disagree;
``driver_wins`` builds the model the planner should use (the driver's names and memory).
This module reads no hardware (NVML builds a `Catalogue`; nothing here imports it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass

from ..geometry import GpuModel, Placement, Profile
from .base import DeviceError, InvalidRequest

_GIB = 1024**3
# Memory the tables and the driver may differ by and still agree: the tables round to
# the quarter GiB nvidia-smi prints, some drivers hold back a little more (B200's 1g.23gb
# went from 22.00 to 20.50 GiB). Above this, ``compare`` reports the difference.
MEMORY_TOLERANCE = 0.05


@dataclass(frozen=True)
class CatalogueProfile:
    """One GPU-instance profile as the driver reports it."""

    name: str  # NVML's name without "MIG ", e.g. "1g.10gb+me"
    nvml_class: str | None  # the constant's suffix ("1_SLICE_REV1"); None if pynvml has none
    profile_id: int  # the driver's id on this model (differs between models)
    slices: int  # compute slices (sliceCount)
    memory_bytes: int  # memorySizeMB x MiB
    instances: int  # instanceCount: how many can exist at once
    placements: tuple[Placement, ...]  # (start, size) in memory slices
    named: bool = True  # False: the driver gave no name (v1 info); ``name`` is built

    @property
    def memory_slices(self) -> int:
        return self.placements[0].size if self.placements else 0

    @property
    def starts(self) -> tuple[int, ...]:
        return tuple(p.start for p in self.placements)


@dataclass(frozen=True)
class Catalogue:
    """What one GPU's driver offers, keyed by profile name."""

    gpu_name: str  # nvmlDeviceGetName, e.g. "NVIDIA H100 80GB HBM3"
    profiles: tuple[CatalogueProfile, ...]  # in constant order
    model: str | None = None  # geometry's model of the board; None: unknown (NVML units)

    def __getitem__(self, name: str) -> CatalogueProfile:
        for p in self.profiles:
            if p.name == name:
                return p
        raise KeyError(name)

    def __contains__(self, name: object) -> bool:
        return any(p.name == name for p in self.profiles)

    def __iter__(self) -> Iterator[CatalogueProfile]:
        return iter(self.profiles)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.profiles)


def profile_name(slices: int, memory_bytes: int, suffix: str = "") -> str:
    """A name for a profile the driver gave none for: ``<slices>g.<GiB rounded up>gb`` plus
    ``+me``/``+gfx``... It matches NVIDIA's names on A100 and H100 but not on every model
    (H200's 1g.18gb has 16 GiB), so such a name never replaces the tables' one."""
    gb = -(-memory_bytes // _GIB)
    return f"{slices}g.{gb}gb{suffix}"


_SUFFIX = {"REV1": "+me", "GFX": "+gfx", "ALL_ME": "+me.all", "NO_ME": "-me"}


def suffix_of(nvml_class: str | None) -> str:
    """The name suffix of an NVML profile class: ``1_SLICE_REV1`` -> ``+me``."""
    for key, text in _SUFFIX.items():
        if nvml_class and nvml_class.endswith(key):
            return text
    return ""


# -- the check ---------------------------------------------------------------------------


def _gib(n: int) -> str:
    return f"{n / _GIB:.2f} GiB"


def _where(p: Profile | CatalogueProfile) -> str:
    starts = p.starts
    size = p.memory_slices
    return "{" + ",".join(map(str, starts)) + "}:" + str(size)


def _shape(p: Profile | CatalogueProfile) -> tuple:
    """What makes two profiles the same profile whatever their names: the NVML class,
    compute slices and placements."""
    slices = p.compute_slices if isinstance(p, Profile) else p.slices
    return (p.nvml_class, slices, p.memory_slices, tuple(p.starts))


def _memory_agrees(table: int, driver: int) -> bool:
    return abs(table - driver) <= MEMORY_TOLERANCE * driver


def _pairs(offline: GpuModel, driver: Catalogue) -> tuple[list, list, list]:
    """(table, driver) pairs matched by name, else by shape (a renamed profile); then the
    table's and the driver's profiles left without a partner."""
    pairs, tables, left = [], [], list(driver.profiles)
    for p in offline.all_profiles:
        match = next((d for d in left if d.name == p.name), None)
        if match is None:
            match = next((d for d in left if _shape(d) == _shape(p)), None)
        if match is None:
            tables.append(p)
        else:
            left.remove(match)
            pairs.append((p, match))
    return pairs, tables, left


def compare(offline: GpuModel, driver: Catalogue) -> list[str]:
    """One line per disagreement between geometry's table of a model and what its driver
    reports: profiles only one side has, renamed profiles, other memory, other placements,
    other slices. [] when they agree."""
    lines = []
    pairs, only_table, only_driver = _pairs(offline, driver)
    for t, d in pairs:
        if t.name != d.name and d.named:
            lines.append(
                f"{offline.name}: the driver calls {t.name} {d.name} "
                f"({d.slices} slices, placements {_where(d)})"
            )
        if not _memory_agrees(t.memory_bytes, d.memory_bytes):
            lines.append(
                f"{offline.name}: {d.name} has {_gib(d.memory_bytes)} on the driver, "
                f"{_gib(t.memory_bytes)} in the tables"
            )
        if t.compute_slices != d.slices:
            lines.append(
                f"{offline.name}: {d.name} has {d.slices} compute slices on the driver, "
                f"{t.compute_slices} in the tables"
            )
        if tuple(t.placements) != tuple(d.placements):
            lines.append(
                f"{offline.name}: {d.name} placements are {_where(d)} on the driver, "
                f"{_where(t)} in the tables"
            )
    for t in only_table:
        lines.append(f"{offline.name}: the tables have {t.name}, the driver does not")
    for d in only_driver:
        lines.append(
            f"{offline.name}: the driver has {d.name} (id {d.profile_id}, {d.slices} slices, "
            f"{_gib(d.memory_bytes)}, placements {_where(d)}), the tables do not"
        )
    return lines


def driver_wins(offline: GpuModel, driver: Catalogue) -> GpuModel:
    """The model the planner should use on this GPU: geometry's, with each profile's name
    and memory taken from the driver. Profiles the driver lacks are dropped, unless the
    planner needs them (then InvalidRequest: this GPU cannot be planned as the model)."""
    pairs, only_table, _ = _pairs(offline, driver)
    planner = {offline.profile_for_size(s).name for s in offline.planner_sizes}
    missing = [t.name for t in only_table if t.name in planner]
    if missing:
        raise InvalidRequest(
            f"{driver.gpu_name}: the driver has no profile like {', '.join(missing)} "
            f"of {offline.name}",
            hint="compare nvidia-smi mig -lgip with the model in [nodes] of the config",
        )
    seen = {t.name: d for t, d in pairs}

    def won(table: tuple[Profile, ...]) -> tuple[Profile, ...]:
        return tuple(
            dataclasses.replace(
                t,
                name=seen[t.name].name if seen[t.name].named else t.name,
                memory_bytes=seen[t.name].memory_bytes,
            )
            for t in table
            if t.name in seen
        )

    # every earlier name (the tables' own, and their older ones) leads to the driver's
    now = {t.name: (d.name if d.named else t.name) for t, d in pairs}
    renamed = {old: now[ours] for old, ours in offline.renamed.items() if ours in now}
    renamed.update({ours: theirs for ours, theirs in now.items() if ours != theirs})
    renamed = {old: new for old, new in renamed.items() if old != new}
    return dataclasses.replace(
        offline,
        profiles=won(offline.profiles),
        extra_profiles=won(offline.extra_profiles),
        renamed=renamed,
    )


def offline_catalogue(model: GpuModel) -> Catalogue:
    """geometry's tables of ``model`` as a Catalogue (no driver: ids unknown, -1)."""
    return Catalogue(
        model.name,
        tuple(
            CatalogueProfile(
                p.name,
                p.nvml_class,
                -1,
                p.compute_slices,
                p.memory_bytes,
                p.instance_count,
                p.placements,
            )
            for p in model.all_profiles
        ),
        model.name,
    )


def describe(catalogue: Catalogue) -> list[str]:
    """The catalogue as ``nvidia-smi mig -lgip``'s rows, one per profile, for a report."""
    return [
        f"{p.name:<16} {'id ' + str(p.profile_id) if p.profile_id >= 0 else 'offline':<7} "
        f"{p.slices} slices  {_gib(p.memory_bytes):>11}  {p.instances}x  "
        f"placements {_where(p)}"
        for p in catalogue.profiles
    ]


def error_line(exc: DeviceError) -> str:
    """The one line ``slurm-mig: error: <what> (<the fix>)`` for a failed read."""
    return f"slurm-mig: error: {exc.line()}"
