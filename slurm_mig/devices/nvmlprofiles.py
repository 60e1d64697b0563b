"""The driver's GPU-instance profiles as the backend reads them (`NvmlProfile`), matched
to ``geometry``'s profiles, and NVML placements in memory slices."""

from __future__ import annotations

from dataclasses import dataclass

from ..geometry import GeometryError, GpuModel, Placement, Profile
from .base import DeviceUnavailable

__all__ = ["NvmlProfile", "match_profile", "nvml_slices"]


@dataclass(frozen=True)
class NvmlProfile:
    """One GPU-instance profile as this GPU's driver reports it."""

    constant: int  # the NVML_GPU_INSTANCE_PROFILE_* value asked for
    nvml_class: str | None  # "3_SLICE" ...; None for a constant this pynvml does not name
    id: int  # the driver's profile ID (differs between chips)
    name: str  # our name: the geometry profile's, else NVML's without "MIG "
    slice_count: int
    instance_count: int
    memory_bytes: int
    geometry: Profile | None  # None: a profile geometry's catalogue does not have
    nvml_name: str = ""  # the driver's name without "MIG " ("" from a v1 info)


def match_profile(
    model: GpuModel, nvml_class: str | None, name: str, slices: int, memory: int
) -> Profile | None:
    """The geometry profile of an NVML profile, planner's or not (+me, +gfx ...): by the
    driver's NAME (``model.profile`` follows renames) with the same slice count; only if
    that fails, by the constant's class, slice count and memory within 25 % (geometry's
    figures are estimates, NVML's exact; HAMi warns against inferring by memory)."""
    if name:
        try:
            p = model.profile(name)
        except GeometryError:
            p = None
        if p is not None and p.compute_slices == slices:
            return p
    if nvml_class is None:
        return None
    for p in model.all_profiles:
        if p.nvml_class == nvml_class and p.compute_slices == slices:
            if 0.75 <= memory / p.memory_bytes <= 1.25:
                return p
    return None


def nvml_slices(model: GpuModel, gpu: int, start: int, size: int) -> Placement:
    """An NVML placement in memory slices; a DeviceError if it is not whole slices."""
    try:
        return model.from_nvml(start, size)
    except GeometryError as exc:
        raise DeviceUnavailable(
            f"GPU {gpu}: {exc}",
            hint=f"compare nvidia-smi mig -lgipp -i {gpu} with the model in [nodes]",
        ) from None
