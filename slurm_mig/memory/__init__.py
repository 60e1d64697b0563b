"""Memory forecasting for ``mig-run``: the in-job probe, the forecaster and the wrapper.

Only ``step()`` lives here, so that ``import slurm_mig`` and ``slurm_mig.step()`` stay
cheap: this module imports neither torch nor statsmodels. The probe (``probe.py``,
which imports torch) registers itself in ``_active`` when ``mig-run`` injects it.
"""

from __future__ import annotations

from typing import Protocol


class _Boundary(Protocol):
    def boundary(self, source: str) -> None: ...


# The running probe, set by ``probe.Probe.install`` in the job's main process only.
_active: _Boundary | None = None


def step() -> None:
    """Mark the end of one iteration of the job (a training step, a decoded token).

    Scripts call it where optimizer and forward hooks do not match their notion of an
    iteration; it takes precedence over every automatic boundary. Without ``mig-run``
    it does nothing.
    """
    probe = _active
    if probe is not None:
        probe.boundary("step")


__all__ = ["step"]
