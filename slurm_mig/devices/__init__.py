"""MIG device backends: ``simulated`` (state on disk) and ``nvml`` (nvidia-ml-py)."""

from .base import (
    DeviceError,
    DeviceUnavailable,
    GpuInfo,
    InstanceInUse,
    InstanceNotFound,
    InvalidRequest,
    MigBackend,
    MigDisabled,
    MigInstance,
    NoPermission,
    PlacementConflict,
)

__all__ = [
    "DeviceError",
    "DeviceUnavailable",
    "GpuInfo",
    "MigInstance",
    "InstanceInUse",
    "InstanceNotFound",
    "InvalidRequest",
    "MigBackend",
    "MigDisabled",
    "NoPermission",
    "PlacementConflict",
]
