"""A stand-in for nvidia-ml-py's ``pynvml`` module that behaves like the driver's MIG API.

Same names as pynvml 13.x for what slurm-mig calls: functions, ``NVML_*`` constants,
``NVMLError`` with the subclasses pynvml generates (``NVMLError_InsufficientResources``
...), the ctypes structures and handle types. Calls follow the C API's conventions as
pynvml passes them through: placements go ``byref``, arrays are ctypes arrays, counts are
``byref(c_uint)``, handles are ctypes pointers (opaque), UUIDs come back as bytes.

What the driver does and the fake reproduces:
- profile IDs per chip as the driver reports them (``nvidia-smi mig -lgip``): A100 and
  H100 share 19/20/15/14/9/5/0 for 1g/1g+me/1g-2x-memory/2g/3g/4g/7g; the A30 uses
  14/21/5/6/0 for 1g/1g+me/2g/2g+me/4g, so a backend that hard-codes IDs or takes the
  ``GPU_INSTANCE_PROFILE_*`` constant for the ID fails on some chip;
- placements in memory slices, INSUFFICIENT_RESOURCES on overlap or when a profile's
  instance count is used up, INVALID_ARGUMENT for an unknown profile ID or a placement
  the profile does not have, NOT_SUPPORTED when MIG mode is off or a profile constant is
  not on the chip;
- IN_USE when a compute instance still runs processes, or a GPU instance still has
  compute instances; NO_PERMISSION for create/destroy unless the user is ``root``;
- LIBRARY_NOT_FOUND / DRIVER_NOT_LOADED from ``nvmlInit``, UNINITIALIZED before it.

Test controls (not in pynvml) are the ``fake_*`` functions. The chip tables below stand for
the hardware, on purpose independent of ``slurm_mig.geometry``.
"""

from __future__ import annotations

import ctypes
import dataclasses
import string
import sys
import uuid as uuidlib
from collections.abc import Sequence
from ctypes import POINTER, Structure, c_char, c_uint, c_ulonglong
from dataclasses import dataclass, field

# -- return codes, as in pynvml ------------------------------------------------------
NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_INSUFFICIENT_POWER = 8
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_IRQ_ISSUE = 11
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_CORRUPTED_INFOROM = 14
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_OPERATING_SYSTEM = 17
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_IN_USE = 19
NVML_ERROR_MEMORY = 20
NVML_ERROR_NO_DATA = 21
NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22
NVML_ERROR_INSUFFICIENT_RESOURCES = 23
NVML_ERROR_FREQ_NOT_SUPPORTED = 24
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
NVML_ERROR_DEPRECATED = 26
NVML_ERROR_NOT_READY = 27
NVML_ERROR_GPU_NOT_FOUND = 28
NVML_ERROR_INVALID_STATE = 29
NVML_ERROR_RESET_TYPE_NOT_SUPPORTED = 30
NVML_ERROR_UNKNOWN = 999

NVML_DEVICE_NAME_V2_BUFFER_SIZE = 96
NVML_DEVICE_UUID_V2_BUFFER_SIZE = 96

NVML_DEVICE_MIG_DISABLE = 0x0
NVML_DEVICE_MIG_ENABLE = 0x1

NVML_GPU_INSTANCE_PROFILE_1_SLICE = 0x0
NVML_GPU_INSTANCE_PROFILE_2_SLICE = 0x1
NVML_GPU_INSTANCE_PROFILE_3_SLICE = 0x2
NVML_GPU_INSTANCE_PROFILE_4_SLICE = 0x3
NVML_GPU_INSTANCE_PROFILE_7_SLICE = 0x4
NVML_GPU_INSTANCE_PROFILE_8_SLICE = 0x5
NVML_GPU_INSTANCE_PROFILE_6_SLICE = 0x6
NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1 = 0x7
NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1 = 0x8
NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2 = 0x9
NVML_GPU_INSTANCE_PROFILE_1_SLICE_GFX = 0xA
NVML_GPU_INSTANCE_PROFILE_2_SLICE_GFX = 0xB
NVML_GPU_INSTANCE_PROFILE_4_SLICE_GFX = 0xC
NVML_GPU_INSTANCE_PROFILE_1_SLICE_NO_ME = 0xD
NVML_GPU_INSTANCE_PROFILE_2_SLICE_NO_ME = 0xE
NVML_GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME = 0xF
NVML_GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME = 0x10
NVML_GPU_INSTANCE_PROFILE_3_SLICE_GFX = 0x11
NVML_GPU_INSTANCE_PROFILE_COUNT = 0x12

NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE = 0x0
NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE = 0x1
NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE = 0x2
NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE = 0x3
NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE = 0x4
NVML_COMPUTE_INSTANCE_PROFILE_8_SLICE = 0x5
NVML_COMPUTE_INSTANCE_PROFILE_6_SLICE = 0x6
NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE_REV1 = 0x7
NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE_NVL = 0x8
NVML_COMPUTE_INSTANCE_PROFILE_COUNT = 0x9

NVML_PCIE_UTIL_TX_BYTES = 0
NVML_PCIE_UTIL_RX_BYTES = 1
NVML_PCIE_UTIL_COUNT = 2

NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED = 0x0
NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT = 0x1

nvmlGpuInstanceProfileInfo_v2 = 0x02000098
nvmlComputeInstanceProfileInfo_v2 = 0x02000088


# -- errors, built the way pynvml builds them ----------------------------------------
class NVMLError(Exception):
    _valClassMapping: dict = dict()
    _errcode_to_string = {
        NVML_ERROR_UNINITIALIZED: "Uninitialized",
        NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
        NVML_ERROR_NOT_SUPPORTED: "Not Supported",
        NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
        NVML_ERROR_ALREADY_INITIALIZED: "Already Initialized",
        NVML_ERROR_NOT_FOUND: "Not Found",
        NVML_ERROR_INSUFFICIENT_SIZE: "Insufficient Size",
        NVML_ERROR_INSUFFICIENT_POWER: "Insufficient External Power",
        NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
        NVML_ERROR_TIMEOUT: "Timeout",
        NVML_ERROR_IRQ_ISSUE: "Interrupt Request Issue",
        NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
        NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
        NVML_ERROR_CORRUPTED_INFOROM: "Corrupted infoROM",
        NVML_ERROR_GPU_IS_LOST: "GPU is lost",
        NVML_ERROR_RESET_REQUIRED: "GPU requires restart",
        NVML_ERROR_OPERATING_SYSTEM: "The operating system has blocked the request.",
        NVML_ERROR_LIB_RM_VERSION_MISMATCH: "RM has detected an NVML/RM version mismatch.",
        NVML_ERROR_MEMORY: "Insufficient Memory",
        NVML_ERROR_UNKNOWN: "Unknown Error",
    }

    def __new__(typ, value):
        if typ == NVMLError:
            typ = NVMLError._valClassMapping.get(value, typ)
        obj = Exception.__new__(typ)
        obj.value = value
        return obj

    def __str__(self):
        # pynvml asks the library for codes missing above and stores str(bytes): its
        # messages for IN_USE and INSUFFICIENT_RESOURCES read "b'...'". Kept as it is.
        try:
            if self.value not in NVMLError._errcode_to_string:
                NVMLError._errcode_to_string[self.value] = str(nvmlErrorString(self.value))
            return NVMLError._errcode_to_string[self.value]
        except NVMLError:
            return f"NVML Error with code {self.value}"

    def __eq__(self, other):
        return self.value == other.value

    __hash__ = Exception.__hash__


def nvmlExceptionClass(nvmlErrorCode):
    if nvmlErrorCode not in NVMLError._valClassMapping:
        raise ValueError(f"nvmlErrorCode {nvmlErrorCode} is not valid")
    return NVMLError._valClassMapping[nvmlErrorCode]


def _extractNVMLErrorsAsClasses():
    this_module = sys.modules[__name__]
    for err_name in [x for x in dir(this_module) if x.startswith("NVML_ERROR_")]:
        class_name = "NVMLError_" + string.capwords(
            err_name.replace("NVML_ERROR_", ""), "_"
        ).replace("_", "")
        err_val = getattr(this_module, err_name)

        def gen_new(val):
            def new(typ, *args):
                return NVMLError.__new__(typ, val)

            return new

        new_error_class = type(class_name, (NVMLError,), {"__new__": gen_new(err_val)})
        new_error_class.__module__ = __name__
        setattr(this_module, class_name, new_error_class)
        NVMLError._valClassMapping[err_val] = new_error_class


_extractNVMLErrorsAsClasses()

_DRIVER_STRINGS = {
    NVML_ERROR_IN_USE: b"In use by another client",
    NVML_ERROR_INSUFFICIENT_RESOURCES: b"Insufficient Resources",
    NVML_ERROR_INVALID_STATE: b"Invalid state",
    NVML_ERROR_NOT_READY: b"System is not ready",
}


def nvmlErrorString(result):
    return _DRIVER_STRINGS.get(result, b"Unknown Error")


# -- structures and handles (same fields as pynvml) ------------------------------------
class c_nvmlMemory_t(Structure):
    _fields_ = [("total", c_ulonglong), ("free", c_ulonglong), ("used", c_ulonglong)]


class c_nvmlGpuInstancePlacement_t(Structure):
    _fields_ = [("start", c_uint), ("size", c_uint)]


class c_nvmlGpuInstanceProfileInfo_t(Structure):
    _fields_ = [
        ("id", c_uint),
        ("isP2pSupported", c_uint),
        ("sliceCount", c_uint),
        ("instanceCount", c_uint),
        ("multiprocessorCount", c_uint),
        ("copyEngineCount", c_uint),
        ("decoderCount", c_uint),
        ("encoderCount", c_uint),
        ("jpegCount", c_uint),
        ("ofaCount", c_uint),
        ("memorySizeMB", c_ulonglong),
    ]


class c_nvmlGpuInstanceProfileInfo_v2_t(Structure):
    _fields_ = (
        [("version", c_uint)]
        + c_nvmlGpuInstanceProfileInfo_t._fields_
        + [("name", c_char * NVML_DEVICE_NAME_V2_BUFFER_SIZE)]
    )

    def __init__(self):
        super().__init__(version=nvmlGpuInstanceProfileInfo_v2)


class c_nvmlComputeInstancePlacement_t(Structure):
    _fields_ = [("start", c_uint), ("size", c_uint)]


class c_nvmlComputeInstanceProfileInfo_v2_t(Structure):
    _fields_ = [
        ("version", c_uint),
        ("id", c_uint),
        ("sliceCount", c_uint),
        ("instanceCount", c_uint),
        ("multiprocessorCount", c_uint),
        ("sharedCopyEngineCount", c_uint),
        ("sharedDecoderCount", c_uint),
        ("sharedEncoderCount", c_uint),
        ("sharedJpegCount", c_uint),
        ("sharedOfaCount", c_uint),
        ("name", c_char * NVML_DEVICE_NAME_V2_BUFFER_SIZE),
    ]

    def __init__(self):
        super().__init__(version=nvmlComputeInstanceProfileInfo_v2)


# Opaque in pynvml; the fake's structs carry an id so that a handle copied through a
# ctypes array still finds its object.
class struct_c_nvmlDevice_t(Structure):
    _fields_ = [("_fake_id", c_uint)]


class struct_c_nvmlGpuInstance_t(Structure):
    _fields_ = [("_fake_id", c_uint)]


class struct_c_nvmlComputeInstance_t(Structure):
    _fields_ = [("_fake_id", c_uint)]


c_nvmlDevice_t = POINTER(struct_c_nvmlDevice_t)
c_nvmlGpuInstance_t = POINTER(struct_c_nvmlGpuInstance_t)
c_nvmlComputeInstance_t = POINTER(struct_c_nvmlComputeInstance_t)


class c_nvmlGpuInstanceInfo_t(Structure):
    _fields_ = [
        ("device", c_nvmlDevice_t),
        ("id", c_uint),
        ("profileId", c_uint),
        ("placement", c_nvmlGpuInstancePlacement_t),
    ]


class c_nvmlComputeInstanceInfo_t(Structure):
    _fields_ = [
        ("device", c_nvmlDevice_t),
        ("gpuInstance", c_nvmlGpuInstance_t),
        ("id", c_uint),
        ("profileId", c_uint),
        ("placement", c_nvmlComputeInstancePlacement_t),
    ]


# -- the hardware ----------------------------------------------------------------------
@dataclass(frozen=True)
class FakeGiProfile:
    """One row of ``nvidia-smi mig -lgip``."""

    const: int  # the NVML_GPU_INSTANCE_PROFILE_* value that selects it
    id: int  # the profile ID the driver reports
    name: str
    slices: int
    instances: int
    memory_mb: int
    placements: tuple[tuple[int, int], ...]  # (start, size) in memory slices


@dataclass(frozen=True)
class FakeChip:
    name: str  # nvmlDeviceGetName
    memory_mib: int  # nvmlDeviceGetMemoryInfo().total / MiB
    max_mig_devices: int
    ci_sizes: tuple[int, ...]  # compute-instance slice counts the chip has
    profiles: tuple[FakeGiProfile, ...]


def _chip(
    name: str, memory_mib: int, max_mig: int, ci_sizes: tuple[int, ...], rows: tuple
) -> FakeChip:
    """A chip from literal ``-lgip`` rows: (NVML_GPU_INSTANCE_PROFILE_* suffix, id, name,
    slices, instances, memorySizeMB, placements)."""
    c = sys.modules[__name__]
    return FakeChip(
        name,
        memory_mib,
        max_mig,
        ci_sizes,
        tuple(
            FakeGiProfile(getattr(c, "NVML_GPU_INSTANCE_PROFILE_" + k), i, "MIG " + n, s, m, mb, p)
            for k, i, n, s, m, mb, p in rows
        ),
    )


# Placements as ``nvidia-smi mig -lgipp`` prints them, in NVML's units. 7-slice chips
# (A100 80GB -lgipp in the blog "GPU memory slicing ... with NVIDIA MIG", blog.seeweb.it;
# the same on the A100 40GB in the MIG user guide and H100/H200 outputs): 19/20
# {0,1,2,3,4,5,6}:1, 15 {0,2,4,6}:2, 14 {0,2,4}:2, 9 {0,4}:4, 5 {0}:4, 0 {0}:8.
P7_1 = ((0, 1), (1, 1), (2, 1), (3, 1), (4, 1), (5, 1), (6, 1))
P7_1X2 = ((0, 2), (2, 2), (4, 2), (6, 2))
P7_2 = ((0, 2), (2, 2), (4, 2))
P7_3 = ((0, 4), (4, 4))
P7_4 = ((0, 4),)
P7_7 = ((0, 8),)
# A30 (-lgipp of an A30 in a published setup note: 14/21 {0,1,2,3}:1, 5/6 {0,2}:2,
# 0 {0}:4).
P4_1 = ((0, 1), (1, 1), (2, 1), (3, 1))
P4_2 = ((0, 2), (2, 2))
P4_4 = ((0, 4),)
# RTX PRO 6000: 12 units, 3 a memory slice (-lgipp in the blog "Slicing GPUs in
# Kubernetes with NVIDIA MIG", driver 610.43.02: {0,3,6,9}:3, {0,6}:6, {0}:12).
PR_1 = ((0, 3), (3, 3), (6, 3), (9, 3))
PR_2 = ((0, 6), (6, 6))
PR_4 = ((0, 12),)
_C7 = (1, 2, 3, 4, 7)  # compute-instance sizes of a 7-slice chip
_C4 = (1, 2, 4)

# memorySizeMB = the GiB ``nvidia-smi mig -lgip`` prints x 1024 (two decimals: 19.62 is
# 19.625 GiB = 20096 MiB). A row marked "estimate" has no published -lgip figure: its
# memory is slurm_mig.geometry's estimate (within catalogue.MEMORY_TOLERANCE), so it
# checks names, ids, counts and placements only.
CHIPS: dict[str, FakeChip] = {
    # A100-SXM4-40GB: -lgip (driver 4.75 / 9.75 / 19.62 / 39.38 GiB, ids
    # 19/20/15/14/9/5/0) quoted in an OpenShift GPU-operator MIG note after Red Hat's
    # blog "Sharing is caring ... part 2 - Multi-instance GPU"; names and counts as the
    # MIG user guide's A100 table.
    "A100-40GB": _chip(
        "NVIDIA A100-SXM4-40GB",
        40960,
        7,
        _C7,
        (
            ("1_SLICE", 19, "1g.5gb", 1, 7, 4864, P7_1),
            ("1_SLICE_REV1", 20, "1g.5gb+me", 1, 1, 4864, P7_1),
            ("1_SLICE_REV2", 15, "1g.10gb", 1, 4, 9984, P7_1X2),
            ("2_SLICE", 14, "2g.10gb", 2, 3, 9984, P7_2),
            ("3_SLICE", 9, "3g.20gb", 3, 2, 20096, P7_3),
            ("4_SLICE", 5, "4g.20gb", 4, 1, 20096, P7_4),
            ("7_SLICE", 0, "7g.40gb", 7, 1, 40320, P7_7),
        ),
    ),
    # A100 80GB PCIe: -lgip (driver 515.86.01) in a nvidia-mig-parted tutorial: 1g.10gb
    # 9.50, 2g.20gb 19.50, 3g/4g.40gb 39.25, 7g.80gb 79.00 GiB (its MIG devices show
    # 9728 / 19968 MiB); that driver predates 1g.20gb (id 15): its row takes the 2g's
    # memory (same two memory slices). Placements: the blog.seeweb.it A100 80GB -lgipp.
    # Board memory 81920 MiB (nvidia-smi in NVIDIA/mig-parted issue #31).
    "A100-80GB": _chip(
        "NVIDIA A100 80GB PCIe",
        81920,
        7,
        _C7,
        (
            ("1_SLICE", 19, "1g.10gb", 1, 7, 9728, P7_1),
            ("1_SLICE_REV1", 20, "1g.10gb+me", 1, 1, 9728, P7_1),
            ("1_SLICE_REV2", 15, "1g.20gb", 1, 4, 19968, P7_1X2),
            ("2_SLICE", 14, "2g.20gb", 2, 3, 19968, P7_2),
            ("3_SLICE", 9, "3g.40gb", 3, 2, 40192, P7_3),
            ("4_SLICE", 5, "4g.40gb", 4, 1, 40192, P7_4),
            ("7_SLICE", 0, "7g.80gb", 7, 1, 80896, P7_7),
        ),
    ),
    # H100 80GB HBM3: -lgip in jbarrow.ai/field_notes/nvidia-mig (2026): 1g.10gb(+me)
    # 9.75, 1g.20gb/2g.20gb 19.62, 3g/4g.40gb 39.50, 7g.80gb 79.25 GiB.
    "H100-80GB": _chip(
        "NVIDIA H100 80GB HBM3",
        81559,
        7,
        _C7,
        (
            ("1_SLICE", 19, "1g.10gb", 1, 7, 9984, P7_1),
            ("1_SLICE_REV1", 20, "1g.10gb+me", 1, 1, 9984, P7_1),
            ("1_SLICE_REV2", 15, "1g.20gb", 1, 4, 20096, P7_1X2),
            ("2_SLICE", 14, "2g.20gb", 2, 3, 20096, P7_2),
            ("3_SLICE", 9, "3g.40gb", 3, 2, 40448, P7_3),
            ("4_SLICE", 5, "4g.40gb", 4, 1, 40448, P7_4),
            ("7_SLICE", 0, "7g.80gb", 7, 1, 81152, P7_7),
        ),
    ),
    # H100 NVL (94 GB): -lgip in NVIDIA/gpu-operator PR #900/#903 (1g.12gb(+me) 10.75,
    # 1g.24gb/2g.24gb 21.62 GiB) and NVIDIA/mig-parted PR #101 (3g/4g.47gb 46.38 GiB);
    # 7g.94gb estimate.
    "H100-94GB": _chip(
        "NVIDIA H100 NVL",
        96256,
        7,
        _C7,
        (
            ("1_SLICE", 19, "1g.12gb", 1, 7, 11008, P7_1),
            ("1_SLICE_REV1", 20, "1g.12gb+me", 1, 1, 11008, P7_1),
            ("1_SLICE_REV2", 15, "1g.24gb", 1, 4, 22144, P7_1X2),
            ("2_SLICE", 14, "2g.24gb", 2, 3, 22144, P7_2),
            ("3_SLICE", 9, "3g.47gb", 3, 2, 47488, P7_3),
            ("4_SLICE", 5, "4g.47gb", 4, 1, 47488, P7_4),
            ("7_SLICE", 0, "7g.94gb", 7, 1, 95354, P7_7),  # estimate
        ),
    ),
    # H100 96GB of GH200: names from mig-parted's "H100-96GB, PG506-96GB, GH200" config;
    # board "NVIDIA GH200 480GB" with 97871 MiB (marin PR #5446). No -lgip found: every
    # memory figure is geometry's estimate.
    "H100-96GB": _chip(
        "NVIDIA GH200 480GB",
        97871,
        7,
        _C7,
        (
            ("1_SLICE", 19, "1g.12gb", 1, 7, 11981, P7_1),  # estimate
            ("1_SLICE_REV1", 20, "1g.12gb+me", 1, 1, 11981, P7_1),  # estimate
            ("1_SLICE_REV2", 15, "1g.24gb", 1, 4, 24269, P7_1X2),  # estimate
            ("2_SLICE", 14, "2g.24gb", 2, 3, 24269, P7_2),  # estimate
            ("3_SLICE", 9, "3g.48gb", 3, 2, 48538, P7_3),  # estimate
            ("4_SLICE", 5, "4g.48gb", 4, 1, 48538, P7_4),  # estimate
            ("7_SLICE", 0, "7g.96gb", 7, 1, 97382, P7_7),  # estimate
        ),
    ),
    # H200 141GB HBM3e: -lgip in NVIDIA/mig-parted issue #120: 1g.18gb(+me) 16.00,
    # 1g.35gb/2g.35gb 32.25, 3g/4g.71gb 69.50, 7g.141gb 139.75 GiB; board memory 144384
    # MiB as NVIDIA/go-nvml's H200 mock has it.
    "H200-141GB": _chip(
        "NVIDIA H200 141GB HBM3e",
        144384,
        7,
        _C7,
        (
            ("1_SLICE", 19, "1g.18gb", 1, 7, 16384, P7_1),
            ("1_SLICE_REV1", 20, "1g.18gb+me", 1, 1, 16384, P7_1),
            ("1_SLICE_REV2", 15, "1g.35gb", 1, 4, 33024, P7_1X2),
            ("2_SLICE", 14, "2g.35gb", 2, 3, 33024, P7_2),
            ("3_SLICE", 9, "3g.71gb", 3, 2, 71168, P7_3),
            ("4_SLICE", 5, "4g.71gb", 4, 1, 71168, P7_4),
            ("7_SLICE", 0, "7g.141gb", 7, 1, 143104, P7_7),
        ),
    ),
    # GH200 144G HBM3e: -lgip in NVIDIA/mig-parted PR #139 (1g.18gb(+me) 17.50,
    # 1g.36gb/2g.36gb 35.25 GiB); 3g/4g/7g names from its config, memory estimate.
    "GH200-144GB": _chip(
        "NVIDIA GH200 144G HBM3e",
        147456,
        7,
        _C7,
        (
            ("1_SLICE", 19, "1g.18gb", 1, 7, 17920, P7_1),
            ("1_SLICE_REV1", 20, "1g.18gb+me", 1, 1, 17920, P7_1),
            ("1_SLICE_REV2", 15, "1g.36gb", 1, 4, 36096, P7_1X2),
            ("2_SLICE", 14, "2g.36gb", 2, 3, 36096, P7_2),
            ("3_SLICE", 9, "3g.72gb", 3, 2, 72806, P7_3),  # estimate
            ("4_SLICE", 5, "4g.72gb", 4, 1, 72806, P7_4),  # estimate
            ("7_SLICE", 0, "7g.144gb", 7, 1, 146074, P7_7),  # estimate
        ),
    ),
    # B200: -lgip of a later driver in NVIDIA/mig-parted PR #187 and gpu-operator PR
    # #1351 (1g.23gb(+me) 20.50, 1g.45gb/2g.45gb 44.25 GiB); 3g/4g/7g estimate.
    "B200-180GB": _chip(
        "NVIDIA B200",
        184320,
        7,
        _C7,
        (
            ("1_SLICE", 19, "1g.23gb", 1, 7, 20992, P7_1),
            ("1_SLICE_REV1", 20, "1g.23gb+me", 1, 1, 20992, P7_1),
            ("1_SLICE_REV2", 15, "1g.45gb", 1, 4, 45312, P7_1X2),
            ("2_SLICE", 14, "2g.45gb", 2, 3, 45312, P7_2),
            ("3_SLICE", 9, "3g.90gb", 3, 2, 91008, P7_3),  # estimate
            ("4_SLICE", 5, "4g.90gb", 4, 1, 91008, P7_4),  # estimate
            ("7_SLICE", 0, "7g.180gb", 7, 1, 182592, P7_7),  # estimate
        ),
    ),
    # The same B200 on its first driver (mig-parted PR #166, gpu-operator PR #1242):
    # 1g.23gb 22.00 GiB, more than the tables' 20.50 (a driver that moved memory).
    "B200-180GB-first-driver": _chip(
        "NVIDIA B200",
        184320,
        7,
        _C7,
        (
            ("1_SLICE", 19, "1g.23gb", 1, 7, 22528, P7_1),
            ("1_SLICE_REV1", 20, "1g.23gb+me", 1, 1, 22528, P7_1),
            ("1_SLICE_REV2", 15, "1g.45gb", 1, 4, 45312, P7_1X2),
            ("2_SLICE", 14, "2g.45gb", 2, 3, 45312, P7_2),
            ("3_SLICE", 9, "3g.90gb", 3, 2, 91008, P7_3),  # estimate
            ("4_SLICE", 5, "4g.90gb", 4, 1, 91008, P7_4),  # estimate
            ("7_SLICE", 0, "7g.180gb", 7, 1, 182592, P7_7),  # estimate
        ),
    ),
    # GB200, production boards: -lgip in NVIDIA/mig-parted issue #227 (1g.23gb(+me)
    # 22.00, 1g.47gb/2g.47gb 45.50 GiB); names 3g.93gb, 4g.93gb, 7g.186gb from mig-parted
    # ebab1f77, memory estimate; board name "NVIDIA GB200" (sglang issue #11208).
    "GB200-186GB": _chip(
        "NVIDIA GB200",
        190464,
        7,
        _C7,
        (
            ("1_SLICE", 19, "1g.23gb", 1, 7, 22528, P7_1),
            ("1_SLICE_REV1", 20, "1g.23gb+me", 1, 1, 22528, P7_1),
            ("1_SLICE_REV2", 15, "1g.47gb", 1, 4, 46592, P7_1X2),
            ("2_SLICE", 14, "2g.47gb", 2, 3, 46592, P7_2),
            ("3_SLICE", 9, "3g.93gb", 3, 2, 94042, P7_3),  # estimate
            ("4_SLICE", 5, "4g.93gb", 4, 1, 94042, P7_4),  # estimate
            ("7_SLICE", 0, "7g.186gb", 7, 1, 188678, P7_7),  # estimate
        ),
    ),
    # GB200 on the first drivers, a driver that renames five profiles: -lgip in
    # NVIDIA/gpu-operator PR #1303 (1g.24gb(+me) 20.00, 1g.47gb/2g.47gb 45.50 GiB);
    # names 3g.95gb, 4g.95gb, 7g.189gb from mig-parted 89dd81a3, memory estimate.
    "GB200-186GB-early": _chip(
        "NVIDIA GB200",
        190464,
        7,
        _C7,
        (
            ("1_SLICE", 19, "1g.24gb", 1, 7, 20480, P7_1),
            ("1_SLICE_REV1", 20, "1g.24gb+me", 1, 1, 20480, P7_1),
            ("1_SLICE_REV2", 15, "1g.47gb", 1, 4, 46592, P7_1X2),
            ("2_SLICE", 14, "2g.47gb", 2, 3, 46592, P7_2),
            ("3_SLICE", 9, "3g.95gb", 3, 2, 94042, P7_3),  # estimate
            ("4_SLICE", 5, "4g.95gb", 4, 1, 94042, P7_4),  # estimate
            ("7_SLICE", 0, "7g.189gb", 7, 1, 188678, P7_7),  # estimate
        ),
    ),
    # B300 ("NVIDIA B300 SXM6 AC", pytorch/ao PR #3640): names and counts from
    # mig-parted 47c56d96; ids as on every 7-slice chip. No -lgip found: every memory
    # figure is geometry's estimate.
    "B300-269GB": _chip(
        "NVIDIA B300 SXM6 AC",
        275456,
        7,
        _C7,
        (
            ("1_SLICE", 19, "1g.34gb", 1, 7, 33571, P7_1),  # estimate
            ("1_SLICE_REV1", 20, "1g.34gb+me", 1, 1, 33571, P7_1),  # estimate
            ("1_SLICE_REV2", 15, "1g.67gb", 1, 4, 68003, P7_1X2),  # estimate
            ("2_SLICE", 14, "2g.67gb", 2, 3, 68003, P7_2),  # estimate
            ("3_SLICE", 9, "3g.135gb", 3, 2, 136006, P7_3),  # estimate
            ("4_SLICE", 5, "4g.135gb", 4, 1, 136006, P7_4),  # estimate
            ("7_SLICE", 0, "7g.269gb", 7, 1, 272874, P7_7),  # estimate
        ),
    ),
    # GB300 ("NVIDIA GB300", OLMo-core PR #747): names and counts from mig-parted
    # 75449116. No -lgip found: every memory figure is geometry's estimate.
    "GB300-278GB": _chip(
        "NVIDIA GB300",
        284672,
        7,
        _C7,
        (
            ("1_SLICE", 19, "1g.35gb", 1, 7, 34694, P7_1),  # estimate
            ("1_SLICE_REV1", 20, "1g.35gb+me", 1, 1, 34694, P7_1),  # estimate
            ("1_SLICE_REV2", 15, "1g.70gb", 1, 4, 70278, P7_1X2),  # estimate
            ("2_SLICE", 14, "2g.70gb", 2, 3, 70278, P7_2),  # estimate
            ("3_SLICE", 9, "3g.139gb", 3, 2, 140557, P7_3),  # estimate
            ("4_SLICE", 5, "4g.139gb", 4, 1, 140557, P7_4),  # estimate
            ("7_SLICE", 0, "7g.278gb", 7, 1, 282003, P7_7),  # estimate
        ),
    ),
    # A30: -lgip in Summer-Lo/Docker_configuration 000-MIG/README.md and a Siemens AG Go
    # test (SMIOUTPUT_A30): 1g.6gb(+me) 5.81, 2g.12gb 11.69, 4g.24gb 23.44 GiB, ids
    # 14/21/5/0, "Profile ID 21 Placements: {0,1,2,3}:1"; 2g.12gb+me is id 6, 11.69 GiB,
    # "Profile ID 6 Placements: {0,2}:2" in an A30 session log on driver 535.183.01
    # (-lgip and -lgipp); one instance each, as in the MIG user guide's A30 table.
    "A30-24GB": _chip(
        "NVIDIA A30",
        24576,
        4,
        _C4,
        (
            ("1_SLICE", 14, "1g.6gb", 1, 4, 5952, P4_1),
            ("1_SLICE_REV1", 21, "1g.6gb+me", 1, 1, 5952, P4_1),
            ("2_SLICE", 5, "2g.12gb", 2, 2, 11968, P4_2),
            ("2_SLICE_REV1", 6, "2g.12gb+me", 2, 1, 11968, P4_2),
            ("4_SLICE", 0, "4g.24gb", 4, 1, 24000, P4_4),
        ),
    ),
    # RTX PRO 6000 Blackwell (Max-Q Workstation Edition, 97887 MiB, driver 580.105.08):
    # -lgip in a published Korean MIG setup note, every id and count: 1g.24gb 14,
    # +me 21, +gfx 47, +me.all 65, -me 67 (23.62 GiB); 2g.48gb 5, +gfx 35, +me.all 64,
    # -me 66 (47.38 GiB); 4g.96gb 0, +gfx 32 (95.00 GiB). Ids 14/21/47/65 and 23.62 GiB
    # also in GoogleCloudPlatform/container-engine-accelerators PR #564 and
    # bigstack-oss/cubecos issue #312. Placements in NVML's 12 units (above).
    "RTXPRO6000-96GB": _chip(
        "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",
        97887,
        4,
        _C4,
        (
            ("1_SLICE", 14, "1g.24gb", 1, 4, 24192, PR_1),
            ("1_SLICE_REV1", 21, "1g.24gb+me", 1, 1, 24192, PR_1),
            ("1_SLICE_GFX", 47, "1g.24gb+gfx", 1, 4, 24192, PR_1),
            ("1_SLICE_ALL_ME", 65, "1g.24gb+me.all", 1, 1, 24192, PR_1),
            ("1_SLICE_NO_ME", 67, "1g.24gb-me", 1, 4, 24192, PR_1),
            ("2_SLICE", 5, "2g.48gb", 2, 2, 48512, PR_2),
            ("2_SLICE_GFX", 35, "2g.48gb+gfx", 2, 2, 48512, PR_2),
            ("2_SLICE_ALL_ME", 64, "2g.48gb+me.all", 2, 1, 48512, PR_2),
            ("2_SLICE_NO_ME", 66, "2g.48gb-me", 2, 2, 48512, PR_2),
            ("4_SLICE", 0, "4g.96gb", 4, 1, 97280, PR_4),
            ("4_SLICE_GFX", 32, "4g.96gb+gfx", 4, 1, 97280, PR_4),
        ),
    ),
    "T4": FakeChip("Tesla T4", 15360, 0, (), ()),  # no MIG at all
}


# -- the driver's state ----------------------------------------------------------------
@dataclass(eq=False)
class _Ci:
    gi: _Gi
    id: int
    profile_id: int
    slices: int
    uuid: str
    mig_index: int
    handle: object = None
    mig_handle: object = None
    processes: set[int] = field(default_factory=set)
    alive: bool = True
    memory: dict[int, int] = field(default_factory=dict)  # pid -> device bytes used


@dataclass(eq=False)
class _Gi:
    gpu: _Gpu
    id: int
    profile: FakeGiProfile
    start: int
    size: int
    cis: dict[int, _Ci] = field(default_factory=dict)
    handle: object = None
    alive: bool = True


@dataclass(eq=False)
class _Gpu:
    index: int
    chip: FakeChip
    uuid: str
    mig: int
    pending: int
    gis: dict[int, _Gi] = field(default_factory=dict)
    handle: object = None
    lost: bool = False
    pcie_kbps: list[list[int]] = field(default_factory=lambda: [[0], [0]])  # TX, RX queues


@dataclass
class _System:
    gpus: list[_Gpu] = field(default_factory=list)
    user: str = "root"
    driver: str = "ok"  # ok | missing | not_loaded
    init_depth: int = 0
    calls: list[tuple[str, tuple]] = field(default_factory=list)
    failures: dict[str, list[int]] = field(default_factory=dict)
    objects: dict[int, tuple[Structure, object]] = field(default_factory=dict)
    next_id: int = 1
    serial: int = 0
    usage_file: str | None = None  # a JSON file {mig uuid: {pid: bytes}} shared by processes
    hide_process_memory: bool = False


_sys = _System()
_NS = uuidlib.UUID("7d0c6c53-5d1e-4d44-9d0e-2f3c1b9a6e01")


def _raise(code: int):
    raise NVMLError(code)


def _handle(ptr_type, obj):
    struct = ptr_type._type_()
    struct._fake_id = _sys.next_id
    _sys.objects[_sys.next_id] = (struct, obj)
    _sys.next_id += 1
    return ctypes.pointer(struct)


def _lookup(handle):
    """The fake object behind a handle, or None for anything that is not one."""
    if not isinstance(handle, ctypes._Pointer) or not handle:
        return None
    entry = _sys.objects.get(getattr(handle.contents, "_fake_id", -1))
    return None if entry is None else entry[1]


def _resolve(handle, kind):
    obj = _lookup(handle)
    if not isinstance(obj, kind):
        _raise(NVML_ERROR_INVALID_ARGUMENT)
    if isinstance(obj, _Gpu) and obj.lost:
        _raise(NVML_ERROR_GPU_IS_LOST)
    if isinstance(obj, _Gi | _Ci) and not obj.alive:
        _raise(NVML_ERROR_INVALID_ARGUMENT)
    return obj


def _device(handle) -> _Gpu:
    return _resolve(handle, _Gpu)


def _mig_device(handle) -> _Ci:
    if isinstance(_lookup(handle), _Gpu):
        _raise(NVML_ERROR_NOT_SUPPORTED)  # a physical GPU, not a MIG device
    return _resolve(handle, _Ci)


def _deref(ref):
    """The object a ``byref()``/``pointer()`` argument points at (what C would see)."""
    if type(ref).__name__ == "CArgObject":
        return ref._obj
    if isinstance(ref, ctypes._Pointer):
        return ref.contents
    if isinstance(ref, ctypes.Array):
        return ref
    if isinstance(ref, Structure):
        raise TypeError(
            f"{type(ref).__name__} passed by value: pynvml hands it to C as is, which needs "
            "a pointer; pass ctypes.byref(...)"
        )
    raise TypeError(f"expected byref()/pointer()/array, got {type(ref).__name__}")


def _enter(name: str, *args, initialized: bool = True) -> None:
    _sys.calls.append((name, args))
    pending = _sys.failures.get(name)
    if pending:
        _raise(pending.pop(0))
    if initialized and _sys.init_depth == 0:
        _raise(NVML_ERROR_UNINITIALIZED)


def _need_root() -> None:
    if _sys.user != "root":
        _raise(NVML_ERROR_NO_PERMISSION)


def _need_mig(gpu: _Gpu) -> None:
    if not gpu.chip.profiles or gpu.mig != NVML_DEVICE_MIG_ENABLE:
        _raise(NVML_ERROR_NOT_SUPPORTED)


def _profile_by_id(gpu: _Gpu, profile_id) -> FakeGiProfile:
    for p in gpu.chip.profiles:
        if p.id == profile_id:
            return p
    _raise(NVML_ERROR_INVALID_ARGUMENT)


_CI_SLICES = {
    NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE: 1,
    NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE: 2,
    NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE: 3,
    NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE: 4,
    NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE: 7,
}


def _ci_profile_slices(gi: _Gi, profile) -> int:
    """Slices of a compute-instance profile constant (= its ID) inside ``gi``."""
    if not isinstance(profile, int) or not 0 <= profile < NVML_COMPUTE_INSTANCE_PROFILE_COUNT:
        _raise(NVML_ERROR_INVALID_ARGUMENT)
    slices = _CI_SLICES.get(profile)
    if slices is None or slices > gi.profile.slices or slices not in gi.gpu.chip.ci_sizes:
        _raise(NVML_ERROR_NOT_SUPPORTED)
    return slices


def _fill(arrayRef, countRef, items) -> None:
    count = _deref(countRef)
    array = _deref(arrayRef)
    if len(array) < len(items):
        _raise(NVML_ERROR_INSUFFICIENT_SIZE)
    for i, item in enumerate(items):
        array[i] = item
    count.value = len(items)


# -- the API ------------------------------------------------------------------------------
def nvmlInitWithFlags(flags):
    _enter("nvmlInitWithFlags", flags, initialized=False)
    if _sys.driver == "missing":
        _raise(NVML_ERROR_LIBRARY_NOT_FOUND)
    if _sys.driver == "not_loaded":
        _raise(NVML_ERROR_DRIVER_NOT_LOADED)
    _sys.init_depth += 1


def nvmlInit():
    nvmlInitWithFlags(0)


def nvmlShutdown():
    _enter("nvmlShutdown")
    _sys.init_depth -= 1


def nvmlDeviceGetCount():
    _enter("nvmlDeviceGetCount")
    return len(_sys.gpus)


def nvmlDeviceGetHandleByIndex(index):
    _enter("nvmlDeviceGetHandleByIndex", index)
    if not isinstance(index, int) or not 0 <= index < len(_sys.gpus):
        _raise(NVML_ERROR_INVALID_ARGUMENT)
    gpu = _sys.gpus[index]
    if gpu.lost:
        _raise(NVML_ERROR_GPU_IS_LOST)
    return gpu.handle


def nvmlDeviceGetName(handle):
    _enter("nvmlDeviceGetName", handle)
    if isinstance(_lookup(handle), _Ci):
        ci = _mig_device(handle)
        return f"{ci.gi.gpu.chip.name} {ci.gi.profile.name}"
    return _device(handle).chip.name  # pynvml decodes this one to str


def nvmlDeviceGetUUID(handle):
    _enter("nvmlDeviceGetUUID", handle)
    if isinstance(_lookup(handle), _Ci):
        return _mig_device(handle).uuid.encode()
    return _device(handle).uuid.encode()  # pynvml 13 returns bytes here


_MIB = 1024 * 1024
_INSTANCE_RESERVED = 13 * _MIB  # what a MIG instance shows used with no process on it


class c_nvmlProcessInfo_t(Structure):
    _fields_ = [
        ("pid", c_uint),
        ("usedGpuMemory", c_ulonglong),
        ("gpuInstanceId", c_uint),
        ("computeInstanceId", c_uint),
    ]


NVML_VALUE_NOT_AVAILABLE_ulonglong = c_ulonglong(-1)


def _usage(ci: _Ci) -> dict[int, int]:
    """pid -> bytes of the processes on a MIG device (from the shared file when set)."""
    if _sys.usage_file:
        import json

        try:
            table = json.loads(open(_sys.usage_file, encoding="utf-8").read() or "{}")
        except (OSError, ValueError):
            table = {}
        return {int(pid): int(b) for pid, b in table.get(ci.uuid, {}).items()}
    return dict(ci.memory)


def nvmlDeviceGetMemoryInfo(handle, version=None):
    """A MIG device handle: the instance's memory (its profile's size; used = the
    instance's own reservation + its processes). The parent GPU of a MIG-enabled GPU:
    aggregate for root, NO_PERMISSION for anyone else (inside a slice)."""
    _enter("nvmlDeviceGetMemoryInfo", handle)
    if isinstance(_lookup(handle), _Ci):
        ci = _mig_device(handle)
        total = ci.gi.profile.memory_mb * _MIB
        used = min(total, _INSTANCE_RESERVED + sum(_usage(ci).values()))
        return c_nvmlMemory_t(total=total, free=total - used, used=used)
    gpu = _device(handle)
    if gpu.mig == NVML_DEVICE_MIG_ENABLE and _sys.user != "root":
        _raise(NVML_ERROR_NO_PERMISSION)
    total = gpu.chip.memory_mib * _MIB
    return c_nvmlMemory_t(total=total, free=total - 500 * _MIB, used=500 * _MIB)


def nvmlDeviceGetComputeRunningProcesses(handle):
    """Processes with a CUDA context: on a MIG device handle, that instance's; on the
    parent of a MIG-enabled GPU, all of them for root only (NO_PERMISSION otherwise).
    ``usedGpuMemory`` is None where the driver does not report it (pynvml's mapping of
    NVML_VALUE_NOT_AVAILABLE)."""
    _enter("nvmlDeviceGetComputeRunningProcesses", handle)
    if isinstance(_lookup(handle), _Ci):
        cis = [_mig_device(handle)]
    else:
        gpu = _device(handle)
        if gpu.mig == NVML_DEVICE_MIG_ENABLE and _sys.user != "root":
            _raise(NVML_ERROR_NO_PERMISSION)
        cis = [ci for gi in gpu.gis.values() for ci in gi.cis.values()]
    out = []
    for ci in cis:
        for pid, used in sorted(_usage(ci).items()):
            info = c_nvmlProcessInfo_t(pid, used, ci.gi.id, ci.id)
            if _sys.hide_process_memory:
                info.usedGpuMemory = NVML_VALUE_NOT_AVAILABLE_ulonglong.value
            out.append(info)
    procs = []
    for info in out:  # as pynvml does: friendly objects, NOT_AVAILABLE as None
        obj = nvmlStructToFriendlyObject(info)
        if obj.usedGpuMemory == NVML_VALUE_NOT_AVAILABLE_ulonglong.value:
            obj.usedGpuMemory = None
        procs.append(obj)
    return procs


class nvmlFriendlyObject:
    def __init__(self, dictionary):
        for x in dictionary:
            setattr(self, x, dictionary[x])


def nvmlStructToFriendlyObject(struct):
    return nvmlFriendlyObject({name: getattr(struct, name) for name, _ in struct._fields_})


def nvmlDeviceGetHandleByUUID(uuid):
    """A GPU's or a MIG device's handle by its UUID (str or bytes)."""
    _enter("nvmlDeviceGetHandleByUUID", uuid)
    text = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
    for gpu in _sys.gpus:
        if gpu.uuid == text:
            return gpu.handle
        for gi in gpu.gis.values():
            for ci in gi.cis.values():
                if ci.uuid == text:
                    return ci.mig_handle
    _raise(NVML_ERROR_NOT_FOUND)


def nvmlDeviceGetPcieThroughput(device, counter):
    """KB/s over the last 20 ms for ``NVML_PCIE_UTIL_TX_BYTES`` / ``_RX_BYTES``; the
    counters are the physical GPU's (a MIG device handle: NOT_SUPPORTED, our reading)."""
    _enter("nvmlDeviceGetPcieThroughput", device, counter)
    if isinstance(_lookup(device), _Ci):
        _raise(NVML_ERROR_NOT_SUPPORTED)
    gpu = _device(device)
    if isinstance(counter, bool) or not isinstance(counter, int):
        _raise(NVML_ERROR_INVALID_ARGUMENT)
    if not 0 <= counter < NVML_PCIE_UTIL_COUNT:
        _raise(NVML_ERROR_INVALID_ARGUMENT)
    queue = gpu.pcie_kbps[counter]
    return queue.pop(0) if len(queue) > 1 else queue[0]


def nvmlDeviceGetMigMode(device):
    _enter("nvmlDeviceGetMigMode", device)
    gpu = _device(device)
    if not gpu.chip.profiles:
        _raise(NVML_ERROR_NOT_SUPPORTED)
    return [gpu.mig, gpu.pending]


def nvmlDeviceGetGpuInstanceProfileInfo(device, profile, version=2):
    _enter("nvmlDeviceGetGpuInstanceProfileInfo", device, profile)
    gpu = _device(device)
    if not isinstance(profile, int) or not 0 <= profile < NVML_GPU_INSTANCE_PROFILE_COUNT:
        _raise(NVML_ERROR_INVALID_ARGUMENT)
    _need_mig(gpu)
    for p in gpu.chip.profiles:
        if p.const == profile:
            break
    else:
        _raise(NVML_ERROR_NOT_SUPPORTED)
    if version == 2:
        info = c_nvmlGpuInstanceProfileInfo_v2_t()
        info.name = p.name.encode()
    elif version == 1:
        info = c_nvmlGpuInstanceProfileInfo_t()
    else:
        _raise(NVML_ERROR_FUNCTION_NOT_FOUND)
    info.id = p.id
    info.sliceCount = p.slices
    info.instanceCount = p.instances
    info.multiprocessorCount = 14 * p.slices
    info.memorySizeMB = p.memory_mb
    return info


nvmlDeviceGetGpuInstanceProfileInfoV = nvmlDeviceGetGpuInstanceProfileInfo  # as pynvml


def nvmlDeviceGetGpuInstancePossiblePlacements(device, profileId, placementsRef, countRef):
    _enter("nvmlDeviceGetGpuInstancePossiblePlacements", device, profileId)
    gpu = _device(device)
    _need_mig(gpu)
    p = _profile_by_id(gpu, profileId)
    if placementsRef is None:
        _deref(countRef).value = len(p.placements)
        return NVML_SUCCESS
    items = [c_nvmlGpuInstancePlacement_t(s, z) for s, z in p.placements]
    _fill(placementsRef, countRef, items)
    return NVML_SUCCESS


def nvmlDeviceCreateGpuInstanceWithPlacement(device, profileId, placement):
    _enter("nvmlDeviceCreateGpuInstanceWithPlacement", device, profileId)
    gpu = _device(device)
    pl = _deref(placement)
    _need_root()
    _need_mig(gpu)
    p = _profile_by_id(gpu, profileId)
    start, size = int(pl.start), int(pl.size)
    if (start, size) not in p.placements:
        _raise(NVML_ERROR_INVALID_ARGUMENT)
    for gi in gpu.gis.values():
        if start < gi.start + gi.size and gi.start < start + size:
            _raise(NVML_ERROR_INSUFFICIENT_RESOURCES)
    if sum(1 for gi in gpu.gis.values() if gi.profile.id == p.id) >= p.instances:
        _raise(NVML_ERROR_INSUFFICIENT_RESOURCES)
    if p.slices == max(q.slices for q in gpu.chip.profiles):
        gi_id = 0
    else:
        gi_id = 1
        while gi_id in gpu.gis:
            gi_id += 1
    gi = _Gi(gpu, gi_id, p, start, size)
    gi.handle = _handle(c_nvmlGpuInstance_t, gi)
    gpu.gis[gi_id] = gi
    return gi.handle


def nvmlDeviceCreateGpuInstance(device, profileId):
    _enter("nvmlDeviceCreateGpuInstance", device, profileId)
    gpu = _device(device)
    p = _profile_by_id(gpu, profileId)
    for start, size in p.placements:
        if not any(start < g.start + g.size and g.start < start + size for g in gpu.gis.values()):
            return nvmlDeviceCreateGpuInstanceWithPlacement(
                device, profileId, ctypes.byref(c_nvmlGpuInstancePlacement_t(start, size))
            )
    _raise(NVML_ERROR_INSUFFICIENT_RESOURCES)


def nvmlGpuInstanceDestroy(gpuInstance):
    _enter("nvmlGpuInstanceDestroy", gpuInstance)
    gi = _resolve(gpuInstance, _Gi)
    _need_root()
    if gi.cis:
        _raise(NVML_ERROR_IN_USE)
    gi.alive = False
    del gi.gpu.gis[gi.id]
    return NVML_SUCCESS


def nvmlDeviceGetGpuInstances(device, profileId, gpuInstancesRef, countRef):
    _enter("nvmlDeviceGetGpuInstances", device, profileId)
    gpu = _device(device)
    _need_mig(gpu)
    p = _profile_by_id(gpu, profileId)
    found = [gi.handle for gi in sorted(gpu.gis.values(), key=lambda g: g.id) if gi.profile is p]
    _fill(gpuInstancesRef, countRef, found)
    return NVML_SUCCESS


def nvmlDeviceGetGpuInstanceById(device, gpuInstanceId):
    _enter("nvmlDeviceGetGpuInstanceById", device, gpuInstanceId)
    gpu = _device(device)
    _need_mig(gpu)
    gi = gpu.gis.get(gpuInstanceId)
    if gi is None:
        _raise(NVML_ERROR_NOT_FOUND)
    return gi.handle


def nvmlGpuInstanceGetInfo(gpuInstance):
    _enter("nvmlGpuInstanceGetInfo", gpuInstance)
    gi = _resolve(gpuInstance, _Gi)
    info = c_nvmlGpuInstanceInfo_t()
    info.device = gi.gpu.handle
    info.id = gi.id
    info.profileId = gi.profile.id
    info.placement = c_nvmlGpuInstancePlacement_t(gi.start, gi.size)
    return info


def nvmlGpuInstanceGetComputeInstanceProfileInfo(device, profile, engProfile, version=2):
    _enter("nvmlGpuInstanceGetComputeInstanceProfileInfo", device, profile, engProfile)
    gi = _resolve(device, _Gi)  # pynvml names the GPU-instance argument 'device'
    if engProfile != NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED:
        _raise(NVML_ERROR_INVALID_ARGUMENT)
    slices = _ci_profile_slices(gi, profile)
    if version != 2:
        _raise(NVML_ERROR_FUNCTION_NOT_FOUND)
    info = c_nvmlComputeInstanceProfileInfo_v2_t()
    info.id = profile
    info.sliceCount = slices
    info.instanceCount = gi.profile.slices // slices
    info.multiprocessorCount = 14 * slices
    gname = gi.profile.name.removeprefix("MIG ")
    info.name = (
        f"MIG {gname}" if slices == gi.profile.slices else f"MIG {slices}c.{gname}"
    ).encode()
    return info


def nvmlGpuInstanceCreateComputeInstance(gpuInstance, profileId):
    _enter("nvmlGpuInstanceCreateComputeInstance", gpuInstance, profileId)
    gi = _resolve(gpuInstance, _Gi)
    _need_root()
    slices = _ci_profile_slices(gi, profileId)
    if sum(ci.slices for ci in gi.cis.values()) + slices > gi.profile.slices:
        _raise(NVML_ERROR_INSUFFICIENT_RESOURCES)
    ci_id = 0
    while ci_id in gi.cis:
        ci_id += 1
    used = {ci.mig_index for g in gi.gpu.gis.values() for ci in g.cis.values()}
    mig_index = 0
    while mig_index in used:
        mig_index += 1
    _sys.serial += 1
    mig_uuid = "MIG-" + str(uuidlib.uuid5(_NS, f"{gi.gpu.uuid}/{gi.id}/{ci_id}/{_sys.serial}"))
    ci = _Ci(gi, ci_id, profileId, slices, mig_uuid, mig_index)
    ci.handle = _handle(c_nvmlComputeInstance_t, ci)
    ci.mig_handle = _handle(c_nvmlDevice_t, ci)
    gi.cis[ci_id] = ci
    return ci.handle


def nvmlComputeInstanceDestroy(computeInstance):
    _enter("nvmlComputeInstanceDestroy", computeInstance)
    ci = _resolve(computeInstance, _Ci)
    _need_root()
    if ci.processes:
        _raise(NVML_ERROR_IN_USE)
    ci.alive = False
    del ci.gi.cis[ci.id]
    return NVML_SUCCESS


def nvmlGpuInstanceGetComputeInstances(gpuInstance, profileId, computeInstancesRef, countRef):
    _enter("nvmlGpuInstanceGetComputeInstances", gpuInstance, profileId)
    gi = _resolve(gpuInstance, _Gi)
    _ci_profile_slices(gi, profileId)
    found = [
        ci.handle
        for ci in sorted(gi.cis.values(), key=lambda c: c.id)
        if ci.profile_id == profileId
    ]
    _fill(computeInstancesRef, countRef, found)
    return NVML_SUCCESS


def nvmlComputeInstanceGetInfo_v2(computeInstance):
    _enter("nvmlComputeInstanceGetInfo", computeInstance)
    ci = _resolve(computeInstance, _Ci)
    info = c_nvmlComputeInstanceInfo_t()
    info.device = ci.gi.gpu.handle
    info.gpuInstance = ci.gi.handle
    info.id = ci.id
    info.profileId = ci.profile_id
    info.placement = c_nvmlComputeInstancePlacement_t(0, ci.slices)
    return info


def nvmlComputeInstanceGetInfo(computeInstance):
    return nvmlComputeInstanceGetInfo_v2(computeInstance)


def nvmlDeviceGetMaxMigDeviceCount(device):
    _enter("nvmlDeviceGetMaxMigDeviceCount", device)
    gpu = _device(device)
    if not gpu.chip.profiles:
        _raise(NVML_ERROR_NOT_SUPPORTED)
    return gpu.chip.max_mig_devices


def nvmlDeviceGetMigDeviceHandleByIndex(device, index):
    _enter("nvmlDeviceGetMigDeviceHandleByIndex", device, index)
    gpu = _device(device)
    _need_mig(gpu)
    if not isinstance(index, int) or not 0 <= index < gpu.chip.max_mig_devices:
        _raise(NVML_ERROR_INVALID_ARGUMENT)
    for gi in gpu.gis.values():
        for ci in gi.cis.values():
            if ci.mig_index == index:
                return ci.mig_handle
    _raise(NVML_ERROR_NOT_FOUND)


def nvmlDeviceIsMigDeviceHandle(device):
    _enter("nvmlDeviceIsMigDeviceHandle", device)
    return c_uint(int(isinstance(_lookup(device), _Ci)))


def nvmlDeviceGetGpuInstanceId(device):
    _enter("nvmlDeviceGetGpuInstanceId", device)
    return _mig_device(device).gi.id


def nvmlDeviceGetComputeInstanceId(device):
    _enter("nvmlDeviceGetComputeInstanceId", device)
    return _mig_device(device).id


# -- test controls (not part of pynvml) ----------------------------------------------------
def fake_reset(
    chips: Sequence[str] = ("A100-40GB",), *, user: str = "root", driver: str = "ok"
) -> None:
    """Fresh GPUs of the named ``CHIPS`` (index order), MIG on where the chip has it."""
    global _sys
    _sys = _System(user=user, driver=driver)
    for i, key in enumerate(chips):
        chip = CHIPS[key]
        mode = NVML_DEVICE_MIG_ENABLE if chip.profiles else NVML_DEVICE_MIG_DISABLE
        gpu_uuid = "GPU-" + str(uuidlib.uuid5(_NS, f"fake/{i}/{key}"))
        gpu = _Gpu(i, chip, gpu_uuid, mode, mode)
        gpu.handle = _handle(c_nvmlDevice_t, gpu)
        _sys.gpus.append(gpu)


def fake_set_user(user: str) -> None:
    _sys.user = user


def fake_set_driver(driver: str) -> None:
    """``ok``, ``missing`` (no libnvidia-ml.so.1) or ``not_loaded`` (no kernel module)."""
    _sys.driver = driver


def fake_set_mig_mode(index: int, enabled: bool, pending: bool | None = None) -> None:
    gpu = _sys.gpus[index]
    gpu.mig = NVML_DEVICE_MIG_ENABLE if enabled else NVML_DEVICE_MIG_DISABLE
    gpu.pending = gpu.mig if pending is None else int(pending)


def fake_rename_profile(index: int, old: str, new: str, memory_mb: int | None = None) -> None:
    """GPU ``index``'s driver reports profile ``old`` as ``new`` (names without "MIG "),
    with ``memory_mb`` MiB if given: a driver update that renames a profile (GB200's
    1g.24gb became 1g.23gb). Ids, slices and placements stay."""
    gpu = _sys.gpus[index]
    swap = {
        p: dataclasses.replace(
            p, name="MIG " + new, memory_mb=p.memory_mb if memory_mb is None else memory_mb
        )
        for p in gpu.chip.profiles
        if p.name == "MIG " + old
    }
    if not swap:
        raise KeyError(f"{gpu.chip.name} has no profile {old}")
    gpu.chip = dataclasses.replace(
        gpu.chip, profiles=tuple(swap.get(p, p) for p in gpu.chip.profiles)
    )
    for gi in gpu.gis.values():
        gi.profile = swap.get(gi.profile, gi.profile)


def fake_set_pcie_throughput(index: int, tx_kbps, rx_kbps) -> None:
    """PCIe traffic of GPU ``index`` in KB/s per direction: a number, or a sequence
    served one reading per call (the last one repeats)."""

    def queue(v) -> list[int]:
        vals = [int(x) for x in v] if isinstance(v, Sequence) else [int(v)]
        if not vals or any(x < 0 for x in vals):
            raise ValueError("PCIe throughput must be one or more values >= 0 KB/s")
        return vals

    _sys.gpus[index].pcie_kbps = [queue(tx_kbps), queue(rx_kbps)]


def fake_lose_gpu(index: int) -> None:
    """The GPU falls off the bus: every call on it answers GPU_IS_LOST."""
    _sys.gpus[index].lost = True


def fake_fail(function: str, code: int, times: int = 1) -> None:
    """The next ``times`` calls of ``function`` return ``code``."""
    _sys.failures.setdefault(function, []).extend([code] * times)


def _ci_by_uuid(mig_uuid: str) -> _Ci:
    for gpu in _sys.gpus:
        for gi in gpu.gis.values():
            for ci in gi.cis.values():
                if ci.uuid == mig_uuid:
                    return ci
    raise KeyError(mig_uuid)


def fake_attach_process(mig_uuid: str, pid: int = 4242) -> None:
    """A CUDA process starts on the MIG device ``mig_uuid``."""
    _ci_by_uuid(mig_uuid).processes.add(pid)


def fake_detach_process(mig_uuid: str, pid: int = 4242) -> None:
    _ci_by_uuid(mig_uuid).processes.discard(pid)


def fake_set_process_memory(mig_uuid: str, pid: int, used: int) -> None:
    """Process ``pid`` uses ``used`` bytes of the MIG device (0 removes it)."""
    ci = _ci_by_uuid(mig_uuid)
    if used:
        ci.memory[pid] = used
        ci.processes.add(pid)
    else:
        ci.memory.pop(pid, None)
        ci.processes.discard(pid)


def fake_hide_process_memory(hidden: bool = True) -> None:
    """The driver reports processes but not their memory (usedGpuMemory None)."""
    _sys.hide_process_memory = hidden


def fake_share_usage(path: str | None) -> None:
    """Read the processes' device memory from a JSON file {mig uuid: {pid: bytes}} that
    other processes (a job under test) write: the fake's answer to a shared driver."""
    _sys.usage_file = path


def fake_write_usage(path: str, mig_uuid: str, pid: int, used: int) -> None:
    """What a job under test calls to 'allocate': set its bytes in the shared file."""
    import json
    import os

    try:
        table = json.loads(open(path, encoding="utf-8").read() or "{}")
    except (OSError, ValueError):
        table = {}
    table.setdefault(mig_uuid, {})[str(pid)] = int(used)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps(table))
    os.replace(tmp, path)


def fake_mig_instance(
    index: int = 0, profile_const: int = NVML_GPU_INSTANCE_PROFILE_1_SLICE
) -> str:
    """Create a GPU instance of ``profile_const`` and its full compute instance on GPU
    ``index`` (as root, through the API) and return the MIG device's UUID; the same
    calls after the same ``fake_reset`` give the same UUID in any process."""
    user, _sys.user = _sys.user, "root"
    nvmlInit()
    try:
        dev = nvmlDeviceGetHandleByIndex(index)
        info = nvmlDeviceGetGpuInstanceProfileInfo(dev, profile_const)
        gi = nvmlDeviceCreateGpuInstance(dev, info.id)
        ci_profile = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4}[info.sliceCount]
        ci = nvmlGpuInstanceCreateComputeInstance(gi, ci_profile)
        return _resolve(ci, _Ci).uuid
    finally:
        nvmlShutdown()
        _sys.user = user


def fake_from_env() -> str | None:
    """Set the fake up from ``$FAKE_PYNVML_SETUP`` (JSON: chips, user, usage file and
    MIG instances to create); returns the first MIG UUID. For a process under test that
    imports ``pynvml`` and gets this module."""
    import json
    import os

    text = os.environ.get("FAKE_PYNVML_SETUP")
    if not text:
        return None
    setup = json.loads(text)
    fake_reset(setup.get("chips", ["A100-40GB"]), user="root")
    uuids = [fake_mig_instance(i, c) for i, c in setup.get("instances", [[0, 0]])]
    fake_set_user(setup.get("user", "root"))
    fake_share_usage(setup.get("usage"))
    fake_hide_process_memory(bool(setup.get("hide_process_memory")))
    return uuids[0] if uuids else None


def fake_calls() -> list[str]:
    """Names of the NVML functions called since the last reset, in order."""
    return [name for name, _ in _sys.calls]


def fake_clear_calls() -> None:
    _sys.calls.clear()


def fake_init_depth() -> int:
    """nvmlInit calls not matched by nvmlShutdown."""
    return _sys.init_depth


def fake_layout(index: int) -> list[dict]:
    """The GPU's instances as the driver holds them: id, profile ID, placement, CIs."""
    gpu = _sys.gpus[index]
    return [
        {
            "gi_id": gi.id,
            "profile_id": gi.profile.id,
            "name": gi.profile.name,
            "start": gi.start,
            "size": gi.size,
            "cis": sorted(ci.id for ci in gi.cis.values()),
            "uuids": sorted(ci.uuid for ci in gi.cis.values()),
        }
        for gi in sorted(gpu.gis.values(), key=lambda g: g.start)
    ]


fake_reset()


def nvmlDeviceGetTotalEnergyConsumption(handle):
    """The GPU's energy counter in millijoules (an unsigned 64-bit count). The fake's
    counter is the device's ``energy_mj`` attribute, 0 on a fresh GPU: a test sets it
    (``fake._sys.gpus[i].energy_mj = ...``) as its fake clock advances; NOT_SUPPORTED
    on a GPU that has no MIG (a stand-in for a board without the counter)."""
    _enter("nvmlDeviceGetTotalEnergyConsumption", handle)
    gpu = _device(handle)
    if not gpu.chip.profiles:
        _raise(NVML_ERROR_NOT_SUPPORTED)
    return c_ulonglong(int(getattr(gpu, "energy_mj", 0)) % 2**64).value
