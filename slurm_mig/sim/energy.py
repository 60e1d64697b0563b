"""The simulator's energy model: the power curve of ``slurm_mig.power`` (SMART-MIG's
concave A100 curve by busy compute slices), re-exported where the simulator reads it."""

from __future__ import annotations

from ..power import A100_CURVE_W, A100_TDP_W, TDP_W, idle_power, power_curve

__all__ = ["A100_CURVE_W", "A100_TDP_W", "TDP_W", "idle_power", "power_curve"]
