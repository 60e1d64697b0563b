"""Which MIG GPU a board is: NVML's device name (and memory, where MIG lets a caller read
it) to the geometry model, e.g. "NVIDIA A100-SXM4-40GB" -> "A100-40GB". The names are the
catalogue's (each model's `geometry.Board.nvml_names`, with their sources)."""

from __future__ import annotations

import re

from .. import geometry

__all__ = ["detect_model"]

_GIB = 1024**3


def _families() -> tuple[tuple[str, tuple[str, ...]], ...]:
    """NVML name pattern -> the catalogue's models of boards so named (each model's
    `Board.nvml_names`, with their sources), told apart by memory; the longest pattern
    first, so that "GB200" is tried before "B200"."""
    family: dict[str, list[str]] = {}
    for model in geometry.MODELS.values():
        for pattern in model.board.nvml_names:
            family.setdefault(pattern, []).append(model.name)
    ordered = sorted(family.items(), key=lambda item: -len(item[0]))
    return tuple((pattern, tuple(models)) for pattern, models in ordered)


def _named() -> tuple[tuple[str, str], ...]:
    """Name patterns that pin one model whose memory cannot be read (`Board.nvml_named`):
    a name with no GPU memory size, or another one (GH200's 480 GB counts the Grace
    CPU's memory)."""
    return tuple(
        (pattern, model.name)
        for model in geometry.MODELS.values()
        for pattern in model.board.nvml_named
    )


def detect_model(name: str, total_bytes: int | None) -> str | None:
    """The geometry model of an NVML device name and memory, e.g. ("NVIDIA A100-SXM4-40GB",
    40 GiB) -> "A100-40GB", ("NVIDIA GB200", None) -> "GB200-186GB" (memory None: the size
    in the name); None for a GPU slurm-mig does not know."""
    upper = name.upper()
    family: tuple[str, ...] = ()
    for token, models in _families():
        if re.search(rf"(?<![A-Z0-9]){token}(?![0-9])", upper):
            family = models
            break
    if not family:
        return None
    if len(family) == 1 and total_bytes is None:
        return family[0]
    if total_bytes is None:  # MIG denies the parent's memory to non-root: the name's size
        size = re.search(r"(?<![0-9])([0-9]{2,3})\s?GB?(?![A-Z0-9])", upper)
        total_bytes = int(size.group(1)) * _GIB if size else None
        named = next((m for pat, m in _named() if re.search(pat, upper)), None)
        if named in family and (total_bytes is None or _near(family, total_bytes) is None):
            return named
    if total_bytes is None:
        return None
    return _near(family, total_bytes)


def _near(family: tuple[str, ...], total_bytes: int) -> str | None:
    """The model of ``family`` whose nominal memory is nearest, within 15 %."""

    def nominal(m: str) -> float:
        return float(m.rsplit("-", 1)[1].removesuffix("GB"))

    gib = total_bytes / _GIB
    best = min(family, key=lambda m: abs(nominal(m) - gib))
    return best if abs(nominal(best) - gib) <= 0.15 * nominal(best) else None
