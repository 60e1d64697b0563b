"""Eq. 2 re-pacing of one job, for the GPU state model (``planner.gpustate``) that
the simulator and the PCIe-aware FAR replay share.

A job runs at rate ``1 / (T * sd)`` of its work per second, ``T`` its seconds alone on
its instance and ``sd`` its slowdown (Eq. 2 over the PCIe-bound jobs on its GPU). When
that number of jobs changes, the work done since the job was last paced is taken off
what remained and its end is re-predicted at the new slowdown.
"""

from __future__ import annotations

from ..pcie import slowdown

__all__ = ["repace"]


def repace(
    now: float,
    n: int,
    pcie_max: float,
    alpha: float,
    demand: float,
    T: float,
    rem: float,
    t0: float,
    sd: float,
) -> tuple[float, float, float, float] | None:
    """A PCIe-bound job's pacing at ``now`` with ``n`` PCIe-bound jobs on its GPU:
    ``(sd, rem, t0, finish)`` (new slowdown, fraction of work left at ``t0``, and its
    end), or None when its slowdown is unchanged. ``rem`` was left at ``t0`` under
    slowdown ``sd`` (0: not paced yet, so nothing has run since ``t0``)."""
    new = slowdown(alpha, demand, n, pcie_max)
    if new == sd:
        return None
    if sd > 0.0:
        left = rem - (now - t0) / (T * sd)
        rem = left if left > 0.0 else 0.0
        t0 = now
    return new, rem, t0, now + rem * T * new
