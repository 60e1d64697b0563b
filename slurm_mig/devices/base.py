"""The one interface every MIG backend implements, and the errors it raises.

Backends know GPUs, instances and placements; they never know about plans. Job ids
are passed only so that a backend may write them to its audit log.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from ..geometry import Placement


@dataclass(frozen=True)
class GpuInfo:
    """A physical GPU of the node."""

    index: int
    model: str  # a geometry model name, e.g. "A100-40GB"
    uuid: str  # "GPU-..."
    mig_enabled: bool


@dataclass(frozen=True)
class MigInstance:
    """A GPU instance with its one full-size compute instance."""

    gpu: int
    profile: str  # the model's profile name, e.g. "3g.20gb"
    placement: Placement
    uuid: str  # "MIG-...", what CUDA_VISIBLE_DEVICES takes
    gi_id: int
    ci_id: int


class DeviceError(Exception):
    """A MIG operation failed. ``hint`` says what an operator can do about it.

    ``node_fault`` is True when the node itself is at fault (driver, permissions, MIG
    mode, a broken GPU) and False when the request was impossible (a placement already
    taken, an instance that is not there); hooks drain only on node faults.
    """

    node_fault = True

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} (hint: {self.hint})" if self.hint else self.message

    def line(self) -> str:
        """The operator's one line: ``<what> (<the fix>)``, as the CLI's errors read."""
        return f"{self.message} ({self.hint})" if self.hint else self.message


class PlacementConflict(DeviceError):
    """The placement overlaps a live instance (NVML_ERROR_INSUFFICIENT_RESOURCES)."""

    node_fault = False


class InstanceNotFound(DeviceError):
    """No such instance (NVML_ERROR_NOT_FOUND)."""

    node_fault = False


class InvalidRequest(DeviceError):
    """A profile or placement the GPU does not have (NVML_ERROR_INVALID_ARGUMENT)."""

    node_fault = False


class InstanceInUse(DeviceError):
    """Processes still run on the instance (NVML_ERROR_IN_USE)."""


class NoPermission(DeviceError):
    """Creating or destroying instances needs root (NVML_ERROR_NO_PERMISSION)."""


class MigDisabled(DeviceError):
    """MIG mode is off on the GPU."""


class DeviceUnavailable(DeviceError):
    """The driver, the library or the GPU cannot be reached, or an unknown NVML error."""


class MigBackend(ABC):
    """List GPUs and instances, create and destroy instances at explicit placements."""

    @abstractmethod
    def gpus(self) -> list[GpuInfo]:
        """The node's GPUs in index order."""

    @abstractmethod
    def instances(self, gpu: int | None = None) -> list[MigInstance]:
        """Live instances, of one GPU or of all, sorted by (gpu, placement)."""

    @abstractmethod
    def create(
        self, gpu: int, profile: str, placement: Placement, job_id: str | None = None
    ) -> MigInstance:
        """Create a GPU instance of ``profile`` at ``placement`` and its full compute
        instance; raises PlacementConflict when a live instance is in the way."""

    @abstractmethod
    def destroy(self, gpu: int, uuid: str, job_id: str | None = None) -> None:
        """Destroy the instance (compute instance first); InstanceNotFound if absent."""

    @abstractmethod
    def health(self) -> list[str]:
        """Problems an admin should know of (MIG mode off, driver errors); [] if none."""

    @abstractmethod
    def energy_mj(self, gpu: int) -> int | None:
        """GPU ``gpu``'s total-energy counter: millijoules since the driver loaded (an
        unsigned 64-bit count); None where there is no counter (a simulated GPU, a GPU
        or driver without one). Raises DeviceError only when the GPU cannot be reached."""

    def mig_minors(self) -> str:
        """The driver's MIG capability minor table (``migcaps.MIG_MINORS``)."""
        from .migcaps import MAX_TABLE_BYTES, MIG_MINORS

        try:
            with open(MIG_MINORS, encoding="ascii", errors="replace") as f:
                return f.read(MAX_TABLE_BYTES + 1)
        except PermissionError as exc:
            raise NoPermission(
                f"cannot read {MIG_MINORS}: {exc.strerror}", hint="run as root"
            ) from None
        except OSError as exc:
            raise DeviceUnavailable(
                f"cannot read {MIG_MINORS}: {exc.strerror}",
                hint="load the NVIDIA driver (nvidia.ko with MIG support) on this node",
            ) from None
