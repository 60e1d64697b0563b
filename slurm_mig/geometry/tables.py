"""The offline catalogue: every MIG GPU model's profiles, placements, FAR tree and
reconfiguration times, with where each table comes from; ``get_model`` by name or alias.
"""

from __future__ import annotations

import re

from .model import (
    GIB,
    Board,
    GeometryError,
    GpuModel,
    Placement,
    Profile,
    TreeNode,
)

__all__ = ["ALIASES", "MODELS", "get_model"]

# ---------------------------------------------------------------------------
# Table 1 of the FAR paper (shared/data/far-reference/reconfig_times.csv).
# Models not measured there (H100-94GB, H100-96GB, H200, GH200-144GB, B200, GB200,
# B300, GB300, RTX PRO 6000) take the H100 figures: Table 1 has no row for them.
_RECONFIG = {
    "A30": ({1: 0.11, 2: 0.12, 4: 0.13}, {1: 0.10, 2: 0.10, 4: 0.10}),
    "A100": (
        {1: 0.16, 2: 0.17, 3: 0.20, 4: 0.21, 7: 0.24},
        {1: 0.20, 2: 0.20, 3: 0.21, 4: 0.21, 7: 0.22},
    ),
    "H100": (
        {1: 0.16, 2: 0.21, 3: 0.33, 4: 0.38, 7: 0.42},
        {1: 0.21, 2: 0.23, 3: 0.25, 4: 0.26, 7: 0.26},
    ),
}

# (class, compute slices, memory slices, starts) for the 7-slice lattice.
_LATTICE7 = (
    ("1_SLICE", 1, 1, (0, 1, 2, 3, 4, 5, 6)),
    ("1_SLICE_REV2", 1, 2, (0, 2, 4, 6)),
    ("2_SLICE", 2, 2, (0, 2, 4)),
    ("3_SLICE", 3, 4, (0, 4)),
    ("4_SLICE", 4, 4, (0,)),
    ("7_SLICE", 7, 8, (0,)),
)
_LATTICE4 = (
    ("1_SLICE", 1, 1, (0, 1, 2, 3)),
    ("2_SLICE", 2, 2, (0, 2)),
    ("4_SLICE", 4, 4, (0,)),
)

# Usable memory per profile class. Known NVML figures where published (H100-80GB:
# 1g 9.75 GiB, 3g 39.5 GiB, 7g 79.25 GiB); others scale the same reserve per
# memory slice. NVML's memorySizeMB is authoritative on a real GPU.
_RESERVE_GIB = {1: 0.25, 2: 0.25, 4: 0.5, 8: 0.75}


def _profiles(
    names: dict[str, str],
    lattice: tuple,
    slice_gib: float,
    measured: dict[str, float] | None = None,
) -> tuple[Profile, ...]:
    """The profiles of ``lattice``; usable memory from ``measured`` (GiB by class, an
    ``nvidia-smi mig -lgip`` Memory column) where given, else the reserve estimate."""
    out = []
    for cls, c, m, starts in lattice:
        usable = (m * slice_gib - _RESERVE_GIB[m] * slice_gib / 10.0) * GIB
        if measured and cls in measured:
            usable = measured[cls] * GIB
        out.append(Profile(names[cls], c, m, int(usable), starts, cls))
    return tuple(out)


def _media7(plain: Profile) -> tuple[Profile, ...]:
    """The 7-slice lattice's media-extension 1g (``1g.Xgb+me``, NVML 1_SLICE_REV1): the
    1g's memory and placements, one per GPU. MIG user guide, "Supported MIG Profiles",
    Tables 6-9 ("1 (A single 1g profile can include media extensions)"); placements
    from its ``nvidia-smi mig -lgipp`` example ("Profile ID 20 Placements:
    {0,1,2,3,4,5,6}:1"); the class from nvml.h ("1_SLICE profile with at least one of
    Decoder, Encoder, JPEG, OFA") and go-nvlib's mig_profile.go (REV1 -> "+me")."""
    return (
        Profile(
            plain.name + "+me", 1, 1, plain.memory_bytes, plain.starts, "1_SLICE_REV1", limit=1
        ),
    )


def _names7(g1: int, g2: int, g3: int, total: int) -> dict[str, str]:
    return {
        "1_SLICE": f"1g.{g1}gb",
        "1_SLICE_REV2": f"1g.{g2}gb",
        "2_SLICE": f"2g.{g2}gb",
        "3_SLICE": f"3g.{g3}gb",
        "4_SLICE": f"4g.{g3}gb",
        "7_SLICE": f"7g.{total}gb",
    }


def _tree7() -> tuple[TreeNode, ...]:
    """FAR's A100/H100 tree (Fig. 4), with the 3-slice use of the first four slices."""
    spec = [
        # index, size, placement, slices, parent
        (0, 7, Placement(0, 8), (0, 1, 2, 3, 4, 5, 6), None),
        (1, 4, Placement(0, 4), (0, 1, 2, 3), 0),
        (2, 3, Placement(4, 4), (4, 5, 6), 0),
        (3, 3, Placement(0, 4), (0, 1, 2), 1),
        (4, 2, Placement(4, 2), (4, 5), 2),
        (5, 1, Placement(6, 1), (6,), 2),
        (6, 2, Placement(0, 2), (0, 1), 3),
        (7, 2, Placement(2, 2), (2, 3), 3),
        (8, 1, Placement(4, 1), (4,), 4),
        (9, 1, Placement(5, 1), (5,), 4),
        (10, 1, Placement(0, 1), (0,), 6),
        (11, 1, Placement(1, 1), (1,), 6),
        (12, 1, Placement(2, 1), (2,), 7),
        (13, 1, Placement(3, 1), (3,), 7),
    ]
    return _link(spec)


def _tree4() -> tuple[TreeNode, ...]:
    spec = [
        (0, 4, Placement(0, 4), (0, 1, 2, 3), None),
        (1, 2, Placement(0, 2), (0, 1), 0),
        (2, 2, Placement(2, 2), (2, 3), 0),
        (3, 1, Placement(0, 1), (0,), 1),
        (4, 1, Placement(1, 1), (1,), 1),
        (5, 1, Placement(2, 1), (2,), 2),
        (6, 1, Placement(3, 1), (3,), 2),
    ]
    return _link(spec)


def _link(spec: list) -> tuple[TreeNode, ...]:
    children: dict[int, list[int]] = {i: [] for i, *_ in spec}
    for i, _, _, _, parent in spec:
        if parent is not None:
            children[parent].append(i)
    return tuple(
        TreeNode(i, size, pl, sl, parent, tuple(children[i])) for i, size, pl, sl, parent in spec
    )


def _model7(
    name: str,
    family: str,
    names: dict[str, str],
    total_gb: int,
    *,
    measured: dict[str, float] | None = None,
    renamed: dict[str, str] | None = None,
    source: str = "",
    board: Board | None = None,
) -> GpuModel:
    create, destroy = _RECONFIG[family]
    profiles = _profiles(names, _LATTICE7, total_gb / 8, measured)
    return GpuModel(
        name=name,
        timing_family=family,
        compute_slices=7,
        memory_slices=8,
        profiles=profiles,
        planner_sizes=(1, 2, 3, 4, 7),
        tree=_tree7(),
        create_s=dict(create),
        destroy_s=dict(destroy),
        extra_profiles=_media7(profiles[0]),
        renamed=dict(renamed or {}),
        source=source,
        board=board,
    )


def _a30() -> GpuModel:
    create, destroy = _RECONFIG["A30"]
    names = {"1_SLICE": "1g.6gb", "2_SLICE": "2g.12gb", "4_SLICE": "4g.24gb"}
    profiles = _profiles(names, _LATTICE4, 6.0)
    memory = {p.compute_slices: p.memory_bytes for p in profiles}
    # The media-extension profiles, one each (the guide's A30 table), with the plain
    # profiles' memory: -lgipp "Profile ID 21 Placements: {0,1,2,3}:1" (Summer-Lo/
    # Docker_configuration 000-MIG/README.md) and "Profile ID 6 Placements: {0,2}:2"
    # (an A30 session log on driver 535.183.01 whose -lgip lists 2g.12gb+me as id 6).
    media = (
        Profile("1g.6gb+me", 1, 1, memory[1], (0, 1, 2, 3), "1_SLICE_REV1", limit=1),
        Profile("2g.12gb+me", 2, 2, memory[2], (0, 2), "2_SLICE_REV1", limit=1),
    )
    return GpuModel(
        name="A30-24GB",
        timing_family="A30",
        compute_slices=4,
        memory_slices=4,
        profiles=profiles,
        planner_sizes=(1, 2, 4),
        tree=_tree4(),
        create_s=dict(create),
        destroy_s=dict(destroy),
        extra_profiles=media,
        source="MIG user guide, Supported MIG Profiles, A30 table; -lgipp for +me",
        board=Board(
            165,
            165,
            "PCIe 4.0 x16",
            PCIE4,
            "NVIDIA A30 datasheet: 165 W (a PCIe card only)",
            _PCIE4_SRC,
            nvml_names=(r"A30",),
            nvml_source=_NVIDIA_NAMES,
        ),
    )


# RTX PRO 6000 Blackwell (Server, Workstation and Max-Q editions, 96 GB): 4 compute and
# 4 memory slices like the A30, so the A30's lattice and tree. NVML counts its
# placements in 12 units, 3 per memory slice: "-lgipp" gives {0,3,6,9}:3 for every 1g
# variant, {0,6}:6 for every 2g and {0}:12 for 4g (blog "Slicing GPUs in Kubernetes
# with NVIDIA MIG", 2026-07-15, RTX PRO 6000 Blackwell Server Edition, driver
# 610.43.02). Names and counts: MIG user guide Table 11 "GPU Instance Profiles on RTX
# PRO 6000"; memory: the same blog's "-lgip" (23.62 / 47.38 / 95.12 GiB; GCP
# container-engine-accelerators PR #564 shows 23.62 too, bigstack-oss/cubecos #312
# shows 23.12 on another driver); classes: nvml.h GPU_INSTANCE_PROFILE_*_GFX, _NO_ME,
# _ALL_ME, _REV1 and go-nvlib's mig_profile.go suffixes (+gfx, -me, +me.all, +me).
# +me.all takes every media engine: while it exists only -me profiles can be added.
_RTX_EXTRA = (
    # name, compute = memory slices, starts, class, limit
    ("1g.24gb+me", 1, (0, 1, 2, 3), "1_SLICE_REV1", 1),
    ("1g.24gb+gfx", 1, (0, 1, 2, 3), "1_SLICE_GFX", 0),
    ("1g.24gb+me.all", 1, (0, 1, 2, 3), "1_SLICE_ALL_ME", 1),
    ("1g.24gb-me", 1, (0, 1, 2, 3), "1_SLICE_NO_ME", 0),
    ("2g.48gb+gfx", 2, (0, 2), "2_SLICE_GFX", 0),
    ("2g.48gb+me.all", 2, (0, 2), "2_SLICE_ALL_ME", 1),
    ("2g.48gb-me", 2, (0, 2), "2_SLICE_NO_ME", 0),
    ("4g.96gb+gfx", 4, (0,), "4_SLICE_GFX", 0),
)


def _rtx_pro_6000() -> GpuModel:
    create, destroy = _RECONFIG["H100"]
    sizes = (1, 2, 4)
    names = {"1_SLICE": "1g.24gb", "2_SLICE": "2g.48gb", "4_SLICE": "4g.96gb"}
    measured = {"1_SLICE": 23.62, "2_SLICE": 47.38, "4_SLICE": 95.12}
    profiles = _profiles(names, _LATTICE4, 24.0, measured)
    memory = {p.compute_slices: p.memory_bytes for p in profiles}
    extra = tuple(
        Profile(name, c, c, memory[c], starts, cls, limit=limit)
        for name, c, starts, cls, limit in _RTX_EXTRA
    )
    return GpuModel(
        name="RTXPRO6000-96GB",
        timing_family="H100",
        compute_slices=4,
        memory_slices=4,
        profiles=profiles,
        planner_sizes=sizes,
        tree=_tree4(),
        create_s={s: create[s] for s in sizes},
        destroy_s={s: destroy[s] for s in sizes},
        extra_profiles=extra,
        nvml_placement_unit=3,
        source="MIG user guide Table 11 (RTX PRO 6000); -lgip/-lgipp, driver 610.43.02",
        board=Board(
            600,
            600,
            "PCIe 5.0 x16",
            PCIE5,
            "RTX PRO 6000 Blackwell: 600 W (VideoCardz via gpu.name, 2025-03; the Server "
            "Edition's limit is configurable below it)",
            _PCIE5_SRC,
            nvml_names=(r"RTX\s*PRO\s*6000",),
            nvml_source="NVIDIA RTX PRO 6000 Blackwell Server Edition (bigstack-oss/cubecos issue #312), ... Max-Q Workstation Edition (gpu-operator issue #2249)",
        ),
    )


# The PCIe slowdown model's bandwidth per GPU (Eq. 1-2): the PCIe paper measured 30.08
# GB/s on its PCIe 4.0 A30 and A100; twice that for the PCIe 5.0 generation and every
# later host link is our assumption (a faster link, NVLink-C2C's 450 GB/s each way to a
# Grace CPU, only over-counts contention).
PCIE4 = 30.08
PCIE5 = 2 * PCIE4
_PCIE4_SRC = "PCIe paper (shared/seeds): 30.08 GB/s measured on PCIe 4.0 A30 and A100"
_PCIE5_SRC = "twice the PCIe paper's PCIe 4.0 figure (our assumption)"
_C2C_SRC = (
    "NVLink-C2C to the Grace CPU, 900 GB/s both ways (NVIDIA GH200 and GB200 briefs); "
    "the slowdown model keeps the PCIe 5.0 figure (our assumption, conservative)"
)
# SXM and superchip board powers of the Blackwell generation: the per-GPU "max thermal
# design power" table of verda.com/blog/gb300-nvl72-architecture (B200 1 kW, B300 1.1
# kW, GB200 1.2 kW, GB300 1.4 kW); B200's 1000 W also in NVIDIA's HGX B200 figures
# (docs.vultr.com inference cookbook, hardware overview).
_BLACKWELL_W = "per-GPU max TDP table, verda.com/blog/gb300-nvl72-architecture"
_GH200_W = (
    "GH200 module: up to 1000 W, the Grace CPU and its LPDDR5X included (NVIDIA GH200 "
    "brief; an upper bound for the GPU alone)"
)
_GUIDE = "MIG user guide, Supported MIG Profiles"


def _gh200_board(
    nvml_names: tuple[str, ...], nvml_source: str, nvml_named: tuple[str, ...] = ()
) -> Board:
    """The board facts both GH200 models share, with their own NVML names."""
    return Board(
        1000,
        1000,
        "NVLink-C2C (GH200)",
        PCIE5,
        _GH200_W,
        _C2C_SRC,
        nvml_names=nvml_names,
        nvml_source=nvml_source,
        nvml_named=nvml_named,
    )


# NVML's device names of a model (``nvmlDeviceGetName``): "NVIDIA A100-SXM4-40GB",
# "NVIDIA A30", "NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA B200"...
_NVIDIA_NAMES = "NVIDIA's device names (nvidia-smi -L, nvmlDeviceGetName): NVIDIA <model> ..."
_PARTED = "mig-parted deployments/systemd/config-default.yaml"

MODELS: dict[str, GpuModel] = {
    m.name: m
    for m in (
        _a30(),
        _model7(
            "A100-40GB",
            "A100",
            _names7(5, 10, 20, 40),
            40,
            source=_GUIDE + ", A100",
            board=Board(
                250,
                400,
                "PCIe 4.0 x16",
                PCIE4,
                "SMART-MIG (shared/seeds): 250 W cap of its A100-40GB PCIe; NVIDIA A100 datasheet: 400 W SXM4",
                _PCIE4_SRC,
                nvml_names=(r"A100",),
                nvml_source=_NVIDIA_NAMES,
            ),
        ),
        _model7(
            "A100-80GB",
            "A100",
            _names7(10, 20, 40, 80),
            80,
            source=_GUIDE + ", A100",
            board=Board(
                300,
                400,
                "PCIe 4.0 x16",
                PCIE4,
                "NVIDIA A100 datasheet: 300 W PCIe, 400 W SXM4",
                _PCIE4_SRC,
                nvml_names=(r"A100",),
                nvml_source=_NVIDIA_NAMES,
            ),
        ),
        _model7(
            "H100-80GB",
            "H100",
            _names7(10, 20, 40, 80),
            80,
            source=_GUIDE + ", H100",
            board=Board(
                350,
                700,
                "PCIe 5.0 x16",
                PCIE5,
                "NVIDIA H100 PCIe product brief PB-11133-001: 350 W; H100 datasheet: 700 W SXM5",
                _PCIE5_SRC,
                nvml_names=(r"H100",),
                nvml_source=_NVIDIA_NAMES,
            ),
        ),
        # H100 94GB (SXM5, PCIe) and H100 NVL: the same names (guide; mig-parted's
        # "H100 NVL, H800 NVL" configs; gpu-operator PR #903's -lgip of an H100 NVL).
        # Usable memory: the -lgip of an H100 NVL in gpu-operator PR #900/#903 (1g 10.75,
        # 1g.24gb and 2g 21.62 GiB) and mig-parted PR #101 (3g/4g 46.38 GiB).
        _model7(
            "H100-94GB",
            "H100",
            _names7(12, 24, 47, 94),
            94,
            measured={
                "1_SLICE": 10.75,
                "1_SLICE_REV2": 21.62,
                "2_SLICE": 21.62,
                "3_SLICE": 46.38,
                "4_SLICE": 46.38,
            },
            source=_PARTED + "; -lgip in gpu-operator #903 and mig-parted #101",
            board=Board(
                400,
                400,
                "PCIe 5.0 x16",
                PCIE5,
                "NVIDIA H100 NVL (94 GB): up to 400 W",
                _PCIE5_SRC,
                nvml_names=(r"H100",),
                nvml_source="NVIDIA H100 NVL, 94 GB (gpu-operator PR #903)",
                nvml_named=(r"H100\s+NVL",),
            ),
        ),
        # H100 96GB: the H100 on GH200 (guide "H100 96GB product (H100 on GH200)";
        # mig-parted "H100-96GB, PG506-96GB, GH200" configs: 1g.12gb, 1g.12gb+me,
        # 1g.24gb, 2g.24gb, 3g.48gb, 4g.48gb, 7g.96gb). No -lgip output found: usable
        # memory is the reserve estimate.
        _model7(
            "H100-96GB",
            "H100",
            _names7(12, 24, 48, 96),
            96,
            source=_PARTED,
            board=_gh200_board(
                nvml_names=(r"GH200", r"H100"),
                nvml_source="NVIDIA GH200 480GB with 97871 MiB: the 96 GB H100 of GH200 (marin PR #5446)",
                nvml_named=(r"GH200\s+480\s?GB",),
            ),
        ),
        # Table 1 has no H200 or B200 row: they take the H100 figures.
        # Usable memory: the -lgip of an H200 in mig-parted issue #120.
        _model7(
            "H200-141GB",
            "H100",
            _names7(18, 35, 71, 141),
            141,
            measured={
                "1_SLICE": 16.0,
                "1_SLICE_REV2": 32.25,
                "2_SLICE": 32.25,
                "3_SLICE": 69.5,
                "4_SLICE": 69.5,
                "7_SLICE": 139.75,
            },
            source=_GUIDE + ", H200; -lgip in mig-parted #120",
            board=Board(
                600,
                700,
                "PCIe 5.0 x16",
                PCIE5,
                "NVIDIA H200 datasheet: 600 W H200 NVL (PCIe), 700 W SXM",
                _PCIE5_SRC,
                nvml_names=(r"H200",),
                nvml_source=_NVIDIA_NAMES,
            ),
        ),
        # GH200 144G HBM3e (device 0x2348): mig-parted PR #139 (2024-10-23) with its
        # -lgip (1g.18gb 17.50 GiB, 1g.36gb and 2g.36gb 35.25 GiB; IDs 19/20/15/14);
        # 3g.72gb, 4g.72gb and 7g.144gb from the same config, their memory estimated.
        _model7(
            "GH200-144GB",
            "H100",
            _names7(18, 36, 72, 144),
            144,
            measured={"1_SLICE": 17.5, "1_SLICE_REV2": 35.25, "2_SLICE": 35.25},
            source="mig-parted PR #139 (-lgip)",
            board=_gh200_board(
                nvml_names=(r"GH200",),
                nvml_source=_NVIDIA_NAMES,
            ),
        ),
        # Usable memory: B200 -lgip outputs. The first driver gave 1g.23gb 22.00 GiB
        # (mig-parted PR #166, gpu-operator PR #1242), a later one 20.50 GiB (mig-parted
        # PR #187); both 44.25 GiB for 1g.45gb and 2g.45gb. The tables keep the later
        # (smaller) figure; 3g/4g/7g estimated.
        _model7(
            "B200-180GB",
            "H100",
            _names7(23, 45, 90, 180),
            180,
            measured={"1_SLICE": 20.5, "1_SLICE_REV2": 44.25, "2_SLICE": 44.25},
            source=_GUIDE + ", B200; -lgip in mig-parted #166 and #187",
            board=Board(
                1000,
                1000,
                "PCIe (HGX B200)",
                PCIE5,
                _BLACKWELL_W,
                _PCIE5_SRC,
                nvml_names=(r"B200",),
                nvml_source=_NVIDIA_NAMES,
            ),
        ),
        # GB200 (HGX, device 0x2941): 186 GB in the guide's Supported GPUs table. The
        # first drivers named 1g.24gb, 3g.95gb, 4g.95gb, 7g.189gb (mig-parted 89dd81a3,
        # gpu-operator PR #1303, 1g at 20.00 GiB); production boards report 1g.23gb,
        # 3g.93gb, 4g.93gb, 7g.186gb (mig-parted ebab1f77 "Use the correct mig
        # partition settings for the GB200", 2025-08-07; its issue #227 -lgip: 1g.23gb
        # 22.00 GiB, 1g.47gb and 2g.47gb 45.50 GiB). 3g/4g/7g memory estimated.
        _model7(
            "GB200-186GB",
            "H100",
            _names7(23, 47, 93, 186),
            186,
            measured={"1_SLICE": 22.0, "1_SLICE_REV2": 45.5, "2_SLICE": 45.5},
            renamed={
                "1g.24gb": "1g.23gb",
                "1g.24gb+me": "1g.23gb+me",
                "3g.95gb": "3g.93gb",
                "4g.95gb": "4g.93gb",
                "7g.189gb": "7g.186gb",
            },
            source="mig-parted ebab1f77 and issue #227 (-lgip)",
            board=Board(
                1200,
                1200,
                "NVLink-C2C (GB200)",
                PCIE5,
                _BLACKWELL_W,
                _C2C_SRC,
                nvml_names=(r"GB200",),
                nvml_source="NVIDIA GB200 (sglang issue #11208)",
            ),
        ),
        # B300 (device 0x3182) and GB300 (0x31C2): mig-parted 47c56d96 and 75449116
        # (2025-10): 1g x7, 1g+me x1, double-memory 1g x4, 2g x3, 3g x2, 4g x1, 7g x1,
        # the 7-slice lattice's counts. No -lgip output found: memory estimated,
        # placements the lattice's (check against the driver).
        _model7(
            "B300-269GB",
            "H100",
            _names7(34, 67, 135, 269),
            269,
            source=_PARTED,
            board=Board(
                1100,
                1100,
                "PCIe (HGX B300)",
                PCIE5,
                _BLACKWELL_W,
                _PCIE5_SRC,
                nvml_names=(r"B300",),
                nvml_source="NVIDIA B300 SXM6 AC (pytorch/ao PR #3640)",
            ),
        ),
        _model7(
            "GB300-278GB",
            "H100",
            _names7(35, 70, 139, 278),
            278,
            source=_PARTED,
            board=Board(
                1400,
                1400,
                "NVLink-C2C (GB300)",
                PCIE5,
                _BLACKWELL_W,
                _C2C_SRC,
                nvml_names=(r"GB300",),
                nvml_source="NVIDIA GB300 (OLMo-core PR #747)",
            ),
        ),
        _rtx_pro_6000(),
    )
}

# Short names: get_model folds case, and spaces or underscores to dashes.
ALIASES = {
    "A30": "A30-24GB",
    "A100": "A100-40GB",
    "H100": "H100-80GB",
    "H100NVL": "H100-94GB",
    "H100-NVL": "H100-94GB",
    "H100-NVL-94GB": "H100-94GB",
    "H200": "H200-141GB",
    "GH200": "H100-96GB",
    "GH200-96GB": "H100-96GB",
    "GH200-144G": "GH200-144GB",
    "B200": "B200-180GB",
    "GB200": "GB200-186GB",
    "GB200-189GB": "GB200-186GB",
    "B300": "B300-269GB",
    "GB300": "GB300-278GB",
    "RTXPRO6000": "RTXPRO6000-96GB",
    "RTX-PRO-6000": "RTXPRO6000-96GB",
    "RTX-PRO-6000-96GB": "RTXPRO6000-96GB",
    "RTX-PRO-6000-BLACKWELL": "RTXPRO6000-96GB",
}


def get_model(name: str) -> GpuModel:
    """Look a model up by name or short name (case-insensitive; ``A100`` means
    ``A100-40GB``, ``GB200`` ``GB200-186GB``, ``RTX PRO 6000`` ``RTXPRO6000-96GB``)."""
    key = re.sub(r"[\s_]+", "-", name.strip().upper())
    key = ALIASES.get(key, key)
    for model_name, model in MODELS.items():
        if model_name.upper() == key:
            return model
    raise GeometryError(f"unknown GPU model {name!r}; known models: {', '.join(MODELS)}")
