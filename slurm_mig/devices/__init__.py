"""MIG device backends: ``simulated`` (state on disk) and ``nvml`` (nvidia-ml-py)."""

from .base import (
    DeviceError,
    DeviceUnavailable,
    GpuInfo,
    Instance,
    InstanceInUse,
    InstanceNotFound,
    InvalidRequest,
    MigBackend,
    MigDisabled,
    NoPermission,
    PlacementConflict,
)

__all__ = [
    "DeviceError",
    "DeviceUnavailable",
    "GpuInfo",
    "Instance",
    "InstanceInUse",
    "InstanceNotFound",
    "InvalidRequest",
    "MigBackend",
    "MigDisabled",
    "NoPermission",
    "PlacementConflict",
]
