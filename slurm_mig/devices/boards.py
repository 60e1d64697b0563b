"""Which MIG GPU a board is: NVML's device name (and memory, where MIG lets a caller read
it) to the geometry model, e.g. "NVIDIA A100-SXM4-40GB" -> "A100-40GB"."""

from __future__ import annotations

import re

from .. import geometry

__all__ = ["detect_model"]

_GIB = 1024**3

# NVML board-name tokens -> the geometry models that board can be, told apart by memory.
# Names as NVML reports them: "NVIDIA GB200" (sglang issue #11208), "NVIDIA B300 SXM6 AC"
# (pytorch/ao PR #3640), "NVIDIA GB300" (OLMo-core PR #747), "NVIDIA GH200 480GB" with
# 97871 MiB (marin PR #5446: the 96 GB H100 of GH200), "NVIDIA RTX PRO 6000 Blackwell
# Server Edition" (bigstack-oss/cubecos issue #312) and "... Max-Q Workstation Edition"
# (gpu-operator issue #2249), "NVIDIA H100 NVL" (94 GB, gpu-operator PR #903).
# GB before B, so that "GB200" is never read as B200.
_BOARDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (r"RTX\s*PRO\s*6000", ("RTXPRO6000-96GB",)),
    (r"GB300", ("GB300-278GB",)),
    (r"GB200", ("GB200-186GB",)),
    (r"GH200", ("H100-96GB", "GH200-144GB")),
    (r"B300", ("B300-269GB",)),
    (r"B200", ("B200-180GB",)),
    (r"H200", ("H200-141GB",)),
    (r"H100", ("H100-80GB", "H100-94GB", "H100-96GB")),
    (r"A100", ("A100-40GB", "A100-80GB")),
    (r"A30", ("A30-24GB",)),
)
# Boards whose name carries no GPU memory size (or another one: GH200's 480 GB counts
# the Grace CPU's memory), for when MIG denies the parent's memory to a non-root caller.
_NAMED = ((r"GH200\s+480\s?GB", "H100-96GB"), (r"H100\s+NVL", "H100-94GB"))


def detect_model(name: str, total_bytes: int | None) -> str | None:
    """The geometry model of an NVML device name and memory, e.g. ("NVIDIA A100-SXM4-40GB",
    40 GiB) -> "A100-40GB", ("NVIDIA GB200", None) -> "GB200-186GB" (memory None: the size
    in the name); None for a GPU slurm-mig does not know."""
    upper = name.upper()
    family: tuple[str, ...] = ()
    for token, models in _BOARDS:
        if re.search(rf"(?<![A-Z0-9]){token}(?![0-9])", upper):
            family = tuple(m for m in models if m in geometry.MODELS)
            break
    if not family:
        return None
    if len(family) == 1 and total_bytes is None:
        return family[0]
    if total_bytes is None:  # MIG denies the parent's memory to non-root: the name's size
        size = re.search(r"(?<![0-9])([0-9]{2,3})\s?GB?(?![A-Z0-9])", upper)
        total_bytes = int(size.group(1)) * _GIB if size else None
        named = next((m for pat, m in _NAMED if re.search(pat, upper)), None)
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
