"""GPU power by busy compute slices: the concave A100 curve of SMART-MIG (shared by the
simulator and the planner policies that weigh energy).

SMART-MIG (A100-40GB, 250 W cap) measures P = [40, 119, 160, 205.3, 243.9, 247.7,
248.5, 248.5] W with 0..7 compute slices busy. Other models are our assumption:
the same curve over the fraction of slices busy (interpolated on 4-slice models),
scaled by the ratio of the model's board power (`Board.tdp_w` of its catalogue entry,
with its source) to the A100-40GB's 250 W.
"""

from __future__ import annotations

from .geometry import MODELS, GpuModel

__all__ = ["A100_CURVE_W", "A100_TDP_W", "idle_power", "max_watts", "power_curve"]

A100_CURVE_W = (40.0, 119.0, 160.0, 205.3, 243.9, 247.7, 248.5, 248.5)
A100_TDP_W = 250.0


def power_curve(model: GpuModel) -> tuple[float, ...]:
    """Watts with k = 0..compute_slices compute slices busy (index k)."""
    scale = _board(model).tdp_w / A100_TDP_W
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


def max_watts(model_name: str) -> float:
    """The model's largest board power (`Board.max_w`); for a name the catalogue does
    not know (a node's report), the largest of all, so that a bound made of it never
    rejects a real reading."""
    model = MODELS.get(model_name)
    if model is None:
        return max(_board(m).max_w for m in MODELS.values())
    return _board(model).max_w


def _board(model: GpuModel):
    board = model.board
    if board is None:  # pragma: no cover - GpuModel refuses a model without one
        raise ValueError(f"GPU model {model.name} has no board facts")
    return board
