"""GPU power by busy compute slices: the concave A100 curve of SMART-MIG (shared by the
simulator and the planner policies that weigh energy).

SMART-MIG (A100-40GB, 250 W cap) measures P = [40, 119, 160, 205.3, 243.9, 247.7,
248.5, 248.5] W with 0..7 compute slices busy. Other models are our assumption:
the same curve over the fraction of slices busy (interpolated on 4-slice models),
scaled by the ratio of the model's board power to the A100-40GB's 250 W (PCIe card
TDPs; B200, which has no PCIe card, takes its 1000 W SXM figure).
"""

from __future__ import annotations

from .geometry import GpuModel

A100_CURVE_W = (40.0, 119.0, 160.0, 205.3, 243.9, 247.7, 248.5, 248.5)
A100_TDP_W = 250.0
TDP_W = {
    "A30-24GB": 165.0,
    "A100-40GB": 250.0,
    "A100-80GB": 300.0,
    "H100-80GB": 350.0,
    "H100-94GB": 400.0,
    "H200-141GB": 600.0,
    "B200-180GB": 1000.0,
}


def power_curve(model: GpuModel) -> tuple[float, ...]:
    """Watts with k = 0..compute_slices compute slices busy (index k)."""
    scale = TDP_W.get(model.name, A100_TDP_W) / A100_TDP_W
    top = len(A100_CURVE_W) - 1
    out = []
    for k in range(model.compute_slices + 1):
        x = k * top / model.compute_slices
        lo = int(x)
        hi = min(lo + 1, top)
        frac = x - lo
        out.append((A100_CURVE_W[lo] * (1 - frac) + A100_CURVE_W[hi] * frac) * scale)
    return tuple(out)


def idle_power(model: GpuModel) -> float:
    return power_curve(model)[0]


# The most board power any form factor of the model has (SXM where there is one), for the
# plausibility bound on a measured energy counter (`slurm.energysplit`): A30 PCIe 165 W;
# A100 SXM4 400 W; H100 SXM5 700 W (the PCIe card: 350 W, NVIDIA product brief
# PB-11133-001); H100 NVL (94 GB) 400 W; H200 SXM 700 W (H200 NVL: 600 W); B200 1000 W.
MAX_W = {
    "A30-24GB": 165.0,
    "A100-40GB": 400.0,
    "A100-80GB": 400.0,
    "H100-80GB": 700.0,
    "H100-94GB": 400.0,
    "H200-141GB": 700.0,
    "B200-180GB": 1000.0,
}


def max_watts(model_name: str) -> float:
    """The model's largest board power (`MAX_W`); for a model not in the table the
    largest of all, so that a bound made of it never rejects a real reading."""
    return MAX_W.get(model_name, max(MAX_W.values()))
