"""MIG device nodes: GPU-instance ids by placement and NVIDIA's capability minor table.

A process using a MIG instance opens the parent ``/dev/nvidia<N>`` and the instance's
GI and CI capability nodes ``/dev/nvidia-caps/nvidia-cap<minor>``; the minors come from
``/proc/driver/nvidia-caps/mig-minors``, a static table with lines ``config 1``,
``monitor 2``, ``gpu<N>/gi<g>/access <minor>`` and ``gpu<N>/gi<g>/ci<c>/access <minor>``
(NVIDIA's MIG user guide, "Device Nodes and Capabilities"). The driver numbers them GPU
by GPU, 15 GPU-instance ids each with its 8 compute-instance ids: `minor` below.

GPU-instance ids follow the memory placement as a binary tree is numbered heap-wise
(A100 listings: the whole GPU 0, halves 1-2, quarters 3-6, eighths 7-14; so 1g at
0..6 -> 7..13, 2g at 0/2/4 -> 3/4/5). The simulated backend hands ids out so; on real
GPUs the Prolog checks the id of each instance it creates against `gi_id_for` and
refuses the job (never the node) when a driver numbers otherwise.

Only the standard library and ``geometry``: the hooks import this module.
"""

from __future__ import annotations

from ..geometry import GpuModel, Placement

MIG_MINORS = "/proc/driver/nvidia-caps/mig-minors"
GI_PER_GPU = 15  # gi0 .. gi14 per GPU in the driver's table
CI_PER_GI = 8  # ci0 .. ci7 per GPU instance
FIRST_GPU_MINOR = 3  # after "config 1" and "monitor 2"
MAX_TABLE_BYTES = 1 << 20  # 32 GPUs take about 180 kB


class MinorTableError(ValueError):
    """The mig-minors table is unreadable or lacks an entry."""


def gi_id_for(model: GpuModel, placement: Placement) -> int:
    """The GPU-instance id of an instance at ``placement`` (heap numbering of the
    memory-slice tree: size M/2^k at start s -> 2^k - 1 + s / size)."""
    size, total = placement.size, model.memory_slices
    level = (total // size).bit_length() - 1
    if size <= 0 or total % size or (1 << level) * size != total or placement.start % size:
        raise ValueError(f"{placement} is not a node of {model.name}'s memory-slice tree")
    return (1 << level) - 1 + placement.start // size


def gi_ids(model: GpuModel) -> tuple[int, ...]:
    """Every GPU-instance id a profile placement of ``model`` can have, ascending."""
    return tuple(sorted({gi_id_for(model, pl) for p in model.profiles for pl in p.placements}))


def minor(gpu: int, gi: int, ci: int | None = None) -> int:
    """The capability minor of ``gpu<gpu>/gi<gi>/access`` (``ci`` None) or of
    ``gpu<gpu>/gi<gi>/ci<ci>/access``, as NVIDIA's driver numbers them."""
    base = FIRST_GPU_MINOR + gpu * GI_PER_GPU * (1 + CI_PER_GI) + gi * (1 + CI_PER_GI)
    return base if ci is None else base + 1 + ci


def render_minors(gpus: int) -> str:
    """The mig-minors table of a driver with ``gpus`` GPUs (the simulated backend's)."""
    lines = ["config 1", "monitor 2"]
    for g in range(gpus):
        for gi in range(GI_PER_GPU):
            lines.append(f"gpu{g}/gi{gi}/access {minor(g, gi)}")
            lines += [f"gpu{g}/gi{gi}/ci{ci}/access {minor(g, gi, ci)}" for ci in range(CI_PER_GI)]
    return "\n".join(lines) + "\n"


def parse_minors(text: str) -> dict[tuple[int, int, int | None], int]:
    """``(gpu, gi, ci or None) -> minor`` from a mig-minors table; other lines (config,
    monitor, fabric-imex and the like) are skipped; MinorTableError on a bad line."""
    if len(text) > MAX_TABLE_BYTES:
        raise MinorTableError(f"the mig-minors table is over {MAX_TABLE_BYTES} bytes")
    out: dict[tuple[int, int, int | None], int] = {}
    for n, line in enumerate(text.splitlines(), 1):
        words = line.split()
        if not words or not words[0].startswith("gpu"):
            continue
        parts = words[0].split("/")
        try:
            if len(words) != 2 or parts[-1] != "access" or len(parts) not in (3, 4):
                raise ValueError
            gpu = int(parts[0].removeprefix("gpu"))
            gi = int(parts[1].removeprefix("gi"))
            ci = int(parts[2].removeprefix("ci")) if len(parts) == 4 else None
            out[(gpu, gi, ci)] = int(words[1])
        except ValueError:
            raise MinorTableError(
                f"mig-minors line {n}: {line[:80]!r} is not 'gpuN/giG[/ciC]/access MINOR'"
            ) from None
    return out


def cap_minors(table: dict[tuple[int, int, int | None], int], gpu: int, gi: int) -> tuple[int, int]:
    """(GI minor, CI 0 minor) of GPU instance ``gi`` of ``gpu``: the two capability
    nodes a job on that instance (with its one full-size compute instance) opens."""
    try:
        return table[(gpu, gi, None)], table[(gpu, gi, 0)]
    except KeyError:
        raise MinorTableError(f"the mig-minors table has no gpu{gpu}/gi{gi} entries") from None
