"""The NVML plumbing of the MIG backend: pynvml imported on first use, sessions
(``nvmlInit`` ... ``nvmlShutdown``, nested), and every NVMLError turned into one of
``base``'s errors with a hint an admin can act on."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Self

from .base import (
    DeviceError,
    DeviceUnavailable,
    InstanceInUse,
    InstanceNotFound,
    InvalidRequest,
    MigDisabled,
    NoPermission,
    PlacementConflict,
)

__all__ = ["DEFAULT_HINT", "NvmlSession", "nvml_text"]

# NVML error name -> (our error class, hint); "{gpu}" is filled in.
_ERRORS: dict[str, tuple[type[DeviceError], str]] = {
    "INSUFFICIENT_RESOURCES": (
        PlacementConflict,
        "destroy the instance in the way first, or pick a free placement",
    ),
    "IN_USE": (InstanceInUse, "processes still run on it; the epilog retries after they exit"),
    "NO_PERMISSION": (
        NoPermission,
        "run as root or grant /proc/driver/nvidia/capabilities/mig/config",
    ),
    "NOT_SUPPORTED": (MigDisabled, "nvidia-smi -i {gpu} -mig 1 on an idle GPU"),
    "NOT_FOUND": (InstanceNotFound, "it is gone already; nothing to do"),
    "INVALID_ARGUMENT": (
        InvalidRequest,
        "compare the profile and placement with nvidia-smi mig -lgipp -i {gpu}",
    ),
    "LIBRARY_NOT_FOUND": (
        DeviceUnavailable,
        "install the NVIDIA driver on this node (libnvidia-ml.so.1 is missing)",
    ),
    "DRIVER_NOT_LOADED": (
        DeviceUnavailable,
        "load the nvidia kernel module; nvidia-smi must work on this node",
    ),
    "GPU_IS_LOST": (
        DeviceUnavailable,
        "the GPU fell off the bus; drain the node, check dmesg, reset or reboot",
    ),
    "RESET_REQUIRED": (DeviceUnavailable, "reset the GPU (nvidia-smi -r -i {gpu}) or reboot"),
    "UNINITIALIZED": (DeviceUnavailable, "NVML was not initialised; report this as a bug"),
}
DEFAULT_HINT = "check nvidia-smi and the kernel log (dmesg) on this node"

# NVML names that the driver text would not make clear.
_TEXT = {
    "INSUFFICIENT_RESOURCES": "Insufficient Resources",
    "IN_USE": "In use by another client",
}


def nvml_text(value: Any) -> str:
    """pynvml gives str or bytes (and str(bytes) in some error messages)."""
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    s = str(value)
    if len(s) >= 3 and s[0] == "b" and s[1] in "'\"" and s[-1] == s[1]:
        return s[2:-1]
    return s


class NvmlSession:
    """NVML for the backend: ``with`` keeps one session open for several calls."""

    def __init__(self, pynvml_module: Any = None) -> None:
        self._nvml = pynvml_module
        self._depth = 0
        self._codes: dict[int, str] = {}
        self._open: list = []  # sessions opened by ``with``

    # -- NVML plumbing --------------------------------------------------------------

    @property
    def nvml(self) -> Any:
        if self._nvml is None:
            try:
                import pynvml
            except ImportError:
                raise DeviceUnavailable(
                    "nvidia-ml-py is not installed (import pynvml failed)",
                    hint="pip install nvidia-ml-py in the environment the hooks run in",
                ) from None
            self._nvml = pynvml
        return self._nvml

    def _code_name(self, value: int) -> str:
        if not self._codes:
            for k, v in vars(self.nvml).items():
                if k.startswith("NVML_ERROR_") and isinstance(v, int):
                    self._codes[v] = k.removeprefix("NVML_ERROR_")
        return self._codes.get(value, f"ERROR_{value}")

    def _error(self, exc: Exception, what: str, gpu: int | None = None) -> DeviceError:
        """Our error for an NVMLError raised while doing ``what``."""
        value = getattr(exc, "value", None)
        name = self._code_name(value) if isinstance(value, int) else "UNKNOWN"
        cls, hint = _ERRORS.get(name, (DeviceUnavailable, DEFAULT_HINT))
        text = _TEXT.get(name) or nvml_text(exc)
        if not text.startswith("NVML "):  # pynvml's own texts start so for some codes
            text = f"NVML {text}"
        where = f"GPU {gpu}: " if gpu is not None else ""
        hint = hint.replace("{gpu}", "N" if gpu is None else str(gpu))
        return cls(f"{where}{what}: {text} (NVML_ERROR_{name})", hint=hint)

    def _call(self, what: str, gpu: int | None, fn: str, *args: Any) -> Any:
        nvml = self.nvml
        try:
            return getattr(nvml, fn)(*args)
        except nvml.NVMLError as exc:
            raise self._error(exc, what, gpu) from None

    def _try(self, fn: str, *args: Any, ok: tuple[str, ...]) -> Any:
        """Call ``fn``; None when NVML answers one of the ``ok`` error names."""
        nvml = self.nvml
        try:
            return getattr(nvml, fn)(*args)
        except nvml.NVMLError as exc:
            if self._code_name(getattr(exc, "value", -1)) in ok:
                return None
            raise

    @contextmanager
    def _session(self):
        if self._depth == 0:
            self._call("initialise NVML", None, "nvmlInit")
        self._depth += 1
        try:
            yield self.nvml
        finally:
            self._depth -= 1
            if self._depth == 0:
                try:
                    self.nvml.nvmlShutdown()
                except self.nvml.NVMLError:
                    pass

    def __enter__(self) -> Self:
        cm = self._session()
        cm.__enter__()
        self._open.append(cm)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._open.pop().__exit__(*exc)
