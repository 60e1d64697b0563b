"""Pick the MIG backend a node uses from the config's ``[device]`` section."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import MigBackend

if TYPE_CHECKING:
    from ..config import Config

BACKENDS = ("nvml", "simulated")


def open_backend(config: Config, node: str) -> MigBackend:
    """The backend of ``node``: ``simulated`` keeps its GPUs under the config's
    simulated_dir (``%n`` = node), ``nvml`` drives the real driver."""
    if config.backend == "simulated":
        from .simulated import SimulatedBackend

        return SimulatedBackend(
            config.simulated_dir_for(node),
            models=config.gpu_models(node),
            latency_scale=config.latency_scale,
        )
    if config.backend == "nvml":
        from .nvml import NvmlBackend

        return NvmlBackend()
    where = f" in {config.source}" if getattr(config, "source", None) else ""
    raise ValueError(
        f"[device] backend = {config.backend!r}{where}: unknown backend; "
        f"write one of {', '.join(repr(b) for b in BACKENDS)}"
    )
