"""The NVML backend driven against tests/fake_pynvml.py for A100, H100 and A30 chips:
profile discovery without hard-coded IDs, creation at every placement, the overlap error,
destroy order (compute instance first), and NVML errors mapped to ours with hints."""

from __future__ import annotations

import ctypes
import importlib.util
from itertools import product

import fake_pynvml as fake
import pytest

from slurm_mig.devices.base import (
    DeviceUnavailable,
    GpuInfo,
    InstanceInUse,
    InstanceNotFound,
    InvalidRequest,
    MigDisabled,
    NoPermission,
    PlacementConflict,
)
from slurm_mig.devices.nvml import NvmlBackend, detect_model
from slurm_mig.geometry import Placement, can_coexist, get_model

CHIPS = ["A100-40GB", "H100-80GB", "A30-24GB"]


@pytest.fixture
def nvml():
    """A backend on fresh fake GPUs: A100-40GB, H100-80GB, A30, and a T4 without MIG."""
    fake.fake_reset(["A100-40GB", "H100-80GB", "A30-24GB", "T4"])
    yield NvmlBackend(fake)
    assert fake.fake_init_depth() == 0  # every nvmlInit was matched by nvmlShutdown


def _options(model_name: str) -> list[tuple[str, Placement]]:
    model = get_model(model_name)
    return [(p.name, pl) for p in model.profiles for pl in p.placements]


def test_the_fake_chips_really_differ_in_profile_ids():
    fake.fake_reset(CHIPS)
    fake.nvmlInit()
    ids = {}
    for i, chip in enumerate(CHIPS):
        h = fake.nvmlDeviceGetHandleByIndex(i)
        ids[chip] = [
            fake.nvmlDeviceGetGpuInstanceProfileInfo(h, c).id
            for c in (
                fake.NVML_GPU_INSTANCE_PROFILE_1_SLICE,
                fake.NVML_GPU_INSTANCE_PROFILE_2_SLICE,
            )
        ]
    fake.nvmlShutdown()
    # A100 and H100 share IDs (as their drivers report); the A30's 1g ID is the A100's 2g ID
    assert ids == {"A100-40GB": [19, 14], "H100-80GB": [19, 14], "A30-24GB": [14, 5]}


def test_gpus_are_recognised_by_name_and_memory(nvml):
    assert nvml.gpus() == [
        GpuInfo(0, "A100-40GB", fake._sys.gpus[0].uuid, True),
        GpuInfo(1, "H100-80GB", fake._sys.gpus[1].uuid, True),
        GpuInfo(2, "A30-24GB", fake._sys.gpus[2].uuid, True),
        GpuInfo(3, "Tesla T4", fake._sys.gpus[3].uuid, False),
    ]
    assert nvml.health() == ["GPU 3 (Tesla T4): not a MIG GPU slurm-mig knows; it is left alone"]


@pytest.mark.parametrize(
    ("name", "gib", "model"),
    [
        ("NVIDIA A100-SXM4-40GB", 40, "A100-40GB"),
        ("NVIDIA A100 80GB PCIe", 80, "A100-80GB"),
        ("NVIDIA H100 80GB HBM3", 79.6, "H100-80GB"),
        ("NVIDIA H100 NVL", 93.6, "H100-94GB"),
        ("NVIDIA H200", 140.4, "H200-141GB"),
        ("NVIDIA B200", 179, "B200-180GB"),
        ("NVIDIA A30", 24, "A30-24GB"),
        ("NVIDIA GH200 480GB", 97871 / 1024, "H100-96GB"),  # marin PR #5446
        ("NVIDIA GB200", 186, "GB200-186GB"),
        ("NVIDIA B300 SXM6 AC", 275, "B300-269GB"),  # "~275 GiB usable"
        ("NVIDIA GB300", 278, "GB300-278GB"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", 96, "RTXPRO6000-96GB"),
        ("NVIDIA GH200 144G HBM3e", 144, "GH200-144GB"),
        ("NVIDIA GB200", 80, None),  # memory no GB200 has
        ("Tesla T4", 15, None),
        ("NVIDIA A100-SXM4-40GB", 12, None),
    ],
)
def test_detect_model(name, gib, model):
    assert detect_model(name, int(gib * 1024**3)) == model


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("NVIDIA A100-SXM4-40GB", "A100-40GB"),
        ("NVIDIA A100 80GB PCIe", "A100-80GB"),
        ("NVIDIA H100 80GB HBM3", "H100-80GB"),
        ("NVIDIA H100 NVL", "H100-94GB"),  # no size in the name: the NVL board's
        ("NVIDIA A30", "A30-24GB"),
        ("NVIDIA GH200 480GB", "H100-96GB"),  # 480 GB counts the CPU's memory
        ("NVIDIA GH200 144G HBM3e", "GH200-144GB"),
        ("NVIDIA GB200", "GB200-186GB"),  # not B200
        ("NVIDIA B200", "B200-180GB"),
        ("NVIDIA B300 SXM6 AC", "B300-269GB"),
        ("NVIDIA GB300", "GB300-278GB"),  # not B300
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "RTXPRO6000-96GB"),
        ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", "RTXPRO6000-96GB"),
        ("NVIDIA H100 PCIe", None),  # three H100 models and no size in the name
        ("NVIDIA RTX 6000 Ada Generation", None),  # no MIG
    ],
)
def test_detect_model_from_the_name_when_mig_denies_the_memory(name, model):
    # a non-root caller gets NO_PERMISSION for a MIG-enabled GPU's memory info
    assert detect_model(name, None) == model


@pytest.mark.parametrize("index,chip", list(enumerate(CHIPS)))
def test_create_at_every_placement_of_every_profile(nvml, index, chip):
    for profile, pl in _options(chip):
        inst = nvml.create(index, profile, pl, job_id="1")
        assert (inst.gpu, inst.profile, inst.placement) == (index, profile, pl)
        assert inst.uuid.startswith("MIG-") and inst.ci_id == 0
        (layout,) = fake.fake_layout(index)
        assert (layout["start"], layout["size"]) == (pl.start, pl.size)
        assert layout["uuids"] == [inst.uuid] and layout["gi_id"] == inst.gi_id
        # the driver's ID of this profile on this chip, whatever the constant was
        nvml_name = layout["name"].removeprefix("MIG ")
        assert nvml_name == profile
        assert nvml.instances(index) == [inst]
        nvml.destroy(index, inst.uuid)
        assert fake.fake_layout(index) == []


@pytest.mark.parametrize("index,chip", [(0, "A100-40GB"), (2, "A30-24GB")])
def test_pairs_coexist_exactly_when_geometry_says(nvml, index, chip):
    model = get_model(chip)
    for (pa, la), (pb, lb) in product(_options(chip), _options(chip)):
        first = nvml.create(index, pa, la)
        if can_coexist(model, [la, lb]):
            second = nvml.create(index, pb, lb)
            assert [i.uuid for i in nvml.instances(index)] == [
                i.uuid for i in sorted([first, second], key=lambda i: i.placement)
            ]
            nvml.destroy(index, second.uuid)
        else:
            with pytest.raises(PlacementConflict):
                nvml.create(index, pb, lb)
        nvml.destroy(index, first.uuid)


def test_overlap_names_nvml_text_and_the_instance_in_the_way(nvml):
    held = nvml.create(0, "4g.20gb", Placement(0, 4))
    with pytest.raises(PlacementConflict) as exc:
        nvml.create(0, "2g.10gb", Placement(2, 2))
    msg = str(exc.value)
    assert msg.startswith("GPU 0: create 2g.10gb at 2:2: NVML Insufficient Resources")
    assert f"in the way: 4g.20gb at 0:4 ({held.uuid})" in msg
    assert "b'" not in msg  # pynvml's str(bytes) quirk is cleaned up
    assert exc.value.node_fault is False
    assert len(fake.fake_layout(0)) == 1


def test_invalid_placement_and_profile_are_refused_before_nvml_creates(nvml):
    with pytest.raises(InvalidRequest) as exc:
        nvml.create(1, "3g.40gb", Placement(2, 4))
    assert "0:4, 4:4" in exc.value.hint
    with pytest.raises(InvalidRequest) as exc:
        nvml.create(0, "3g.40gb", Placement(0, 4))  # an H100 profile on the A100
    assert "3g.20gb" in exc.value.hint
    with pytest.raises(InvalidRequest):
        nvml.create(9, "1g.5gb", Placement(0, 1))
    assert "nvmlDeviceCreateGpuInstanceWithPlacement" not in fake.fake_calls()


def test_destroy_goes_compute_instance_first(nvml):
    inst = nvml.create(1, "3g.40gb", Placement(4, 4))
    fake.fake_clear_calls()
    nvml.destroy(1, inst.uuid)
    calls = [c for c in fake.fake_calls() if c.endswith("Destroy")]
    assert calls == ["nvmlComputeInstanceDestroy", "nvmlGpuInstanceDestroy"]
    with pytest.raises(InstanceNotFound) as exc:
        nvml.destroy(1, inst.uuid)
    assert exc.value.node_fault is False


def test_in_use_instance_is_not_destroyed_and_hint_says_the_epilog_retries(nvml):
    inst = nvml.create(0, "2g.10gb", Placement(2, 2))
    fake.fake_attach_process(inst.uuid)
    with pytest.raises(InstanceInUse) as exc:
        nvml.destroy(0, inst.uuid)
    assert "In use by another client" in str(exc.value)
    assert "the epilog retries after they exit" in exc.value.hint
    assert exc.value.node_fault is True
    assert nvml.instances(0) == [inst]
    fake.fake_detach_process(inst.uuid)
    nvml.destroy(0, inst.uuid)


def test_not_root_gets_no_permission_with_the_capability_hint(nvml):
    fake.fake_set_user("alice")
    assert [g.model for g in nvml.gpus()][:3] == CHIPS  # reading is fine
    with pytest.raises(NoPermission) as exc:
        nvml.create(0, "1g.5gb", Placement(0, 1))
    assert "/proc/driver/nvidia/capabilities/mig/config" in exc.value.hint
    assert fake.fake_layout(0) == []


def test_mig_off_and_non_mig_gpus_are_mig_disabled(nvml):
    fake.fake_set_mig_mode(2, False)
    with pytest.raises(MigDisabled) as exc:
        nvml.create(2, "1g.6gb", Placement(0, 1))
    assert exc.value.hint == "nvidia-smi -i 2 -mig 1 on an idle GPU"
    with pytest.raises(MigDisabled):
        nvml.create(3, "1g.5gb", Placement(0, 1))
    assert nvml.instances(2) == [] and nvml.instances(3) == []
    assert "GPU 2 (NVIDIA A30): MIG mode is off" in " ".join(nvml.health())
    fake.fake_set_mig_mode(2, False, pending=True)
    assert any("mig mode change is pending" in p.lower() for p in nvml.health())


def test_not_supported_from_nvml_maps_to_mig_disabled(nvml):
    fake.fake_fail("nvmlDeviceCreateGpuInstanceWithPlacement", fake.NVML_ERROR_NOT_SUPPORTED)
    with pytest.raises(MigDisabled) as exc:
        nvml.create(1, "1g.10gb", Placement(3, 1))
    assert "nvidia-smi -i 1 -mig 1" in exc.value.hint


@pytest.mark.parametrize(
    ("driver", "text", "hint"),
    [
        ("missing", "NVML Shared Library Not Found", "libnvidia-ml.so.1"),
        ("not_loaded", "Driver Not Loaded", "kernel module"),
    ],
)
def test_no_driver_is_a_device_fault(nvml, driver, text, hint):
    fake.fake_set_driver(driver)
    with pytest.raises(DeviceUnavailable) as exc:
        nvml.instances()
    assert text in str(exc.value) and hint in exc.value.hint and exc.value.node_fault
    assert nvml.health() == [str(exc.value)]


def test_lost_gpu_and_unknown_errors_are_device_faults(nvml):
    fake.fake_lose_gpu(1)
    with pytest.raises(DeviceUnavailable) as exc:
        nvml.create(1, "1g.10gb", Placement(0, 1))
    assert "GPU is lost" in str(exc.value) and "fell off the bus" in exc.value.hint
    assert any("GPU 1" in p and "GPU is lost" in p for p in nvml.health())
    fake.fake_fail("nvmlGpuInstanceGetInfo", fake.NVML_ERROR_UNKNOWN)
    with pytest.raises(DeviceUnavailable) as exc:
        nvml.create(0, "1g.5gb", Placement(0, 1))
    assert "Unknown Error" in str(exc.value) and "dmesg" in exc.value.hint


def test_failed_compute_instance_rolls_the_gpu_instance_back(nvml):
    fake.fake_fail("nvmlGpuInstanceCreateComputeInstance", fake.NVML_ERROR_INSUFFICIENT_RESOURCES)
    with pytest.raises(PlacementConflict):
        nvml.create(0, "3g.20gb", Placement(4, 4))
    assert fake.fake_layout(0) == []
    nvml.create(0, "3g.20gb", Placement(4, 4))


def test_gpu_instance_without_compute_instance_is_listed_and_destroyable(nvml):
    fake.nvmlInit()
    h = fake.nvmlDeviceGetHandleByIndex(0)
    info = fake.nvmlDeviceGetGpuInstanceProfileInfo(h, fake.NVML_GPU_INSTANCE_PROFILE_2_SLICE)
    pl = fake.c_nvmlGpuInstancePlacement_t(2, 2)
    fake.nvmlDeviceCreateGpuInstanceWithPlacement(h, info.id, ctypes.byref(pl))
    fake.nvmlShutdown()
    (orphan,) = nvml.instances(0)
    assert (orphan.profile, orphan.placement, orphan.ci_id) == ("2g.10gb", Placement(2, 2), -1)
    assert orphan.uuid == f"gi{orphan.gi_id}-no-ci"
    assert any("has no compute instance" in p for p in nvml.health())
    nvml.destroy(0, orphan.uuid)
    assert fake.fake_layout(0) == []


def test_instances_made_by_hand_with_profiles_we_do_not_plan_still_count(nvml):
    fake.nvmlInit()
    h = fake.nvmlDeviceGetHandleByIndex(0)
    info = fake.nvmlDeviceGetGpuInstanceProfileInfo(h, fake.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1)
    gi = fake.nvmlDeviceCreateGpuInstanceWithPlacement(
        h, info.id, ctypes.byref(fake.c_nvmlGpuInstancePlacement_t(6, 1))
    )
    ci_info = fake.nvmlGpuInstanceGetComputeInstanceProfileInfo(
        gi, fake.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, 0
    )
    fake.nvmlGpuInstanceCreateComputeInstance(gi, ci_info.id)
    fake.nvmlShutdown()
    (me,) = nvml.instances(0)
    assert me.profile == "1g.5gb+me" and me.placement == Placement(6, 1)
    with pytest.raises(PlacementConflict) as exc:
        nvml.create(0, "3g.20gb", Placement(4, 4))
    assert f"1g.5gb+me at 6:1 ({me.uuid})" in str(exc.value)
    nvml.destroy(0, me.uuid)


def test_mig_device_indices_with_gaps_are_all_found(nvml):
    a = nvml.create(0, "1g.5gb", Placement(0, 1))
    b = nvml.create(0, "1g.5gb", Placement(1, 1))
    c = nvml.create(0, "1g.5gb", Placement(2, 1))
    nvml.destroy(0, a.uuid)  # MIG device index 0 is now empty
    assert [i.uuid for i in nvml.instances(0)] == [b.uuid, c.uuid]


def test_one_session_for_several_calls(nvml):
    fake.fake_clear_calls()
    with nvml:
        inst = nvml.create(1, "7g.80gb", Placement(0, 8))
        nvml.destroy(1, inst.uuid)
        assert fake.fake_init_depth() == 1
    assert fake.fake_calls().count("nvmlInitWithFlags") == 1
    assert fake.fake_calls().count("nvmlShutdown") == 1


def test_backend_keeps_to_real_pynvml_names():
    """Every pynvml attribute the backend uses exists in nvidia-ml-py, and in the fake."""
    import re
    from pathlib import Path

    import slurm_mig.devices.nvml as mod

    # the backend and its parts: the session (init, errors) and the profile matching
    sources = sorted(Path(mod.__file__).parent.glob("nvml*.py"))
    assert {p.name for p in sources} >= {"nvml.py", "nvmlsession.py", "nvmlprofiles.py"}
    source = "\n".join(p.read_text() for p in sources)
    used = set(re.findall(r"\b(nvml[A-Z]\w+|NVML_\w+|c_nvml\w+|NVMLError)\b", source))
    used = {u for u in used if not u.endswith("_")}
    assert {"nvmlDeviceCreateGpuInstanceWithPlacement", "nvmlInit", "nvmlShutdown"} <= used
    missing_in_fake = sorted(u for u in used if not hasattr(fake, u))
    assert missing_in_fake == []
    if importlib.util.find_spec("pynvml") is None:
        pytest.skip("nvidia-ml-py is not installed here")
    import pynvml

    assert sorted(u for u in used if not hasattr(pynvml, u)) == []


def test_fake_signatures_match_pynvml():
    """The fake's functions take the same parameters as nvidia-ml-py's."""
    import inspect

    if importlib.util.find_spec("pynvml") is None:
        pytest.skip("nvidia-ml-py is not installed here")
    import pynvml

    names = [n for n in dir(fake) if n.startswith("nvml") and callable(getattr(fake, n))]
    assert len(names) > 25
    for n in names:
        real = getattr(pynvml, n)
        want = list(inspect.signature(real).parameters)
        assert list(inspect.signature(getattr(fake, n)).parameters) == want, n


def test_gres_conf_check_ids_through_nvml(nvml):
    """gres-conf --check-ids drives real create/destroy calls; this fake numbers GPU
    instances by creation order (the smallest free id), so the check must refuse it."""
    from slurm_mig.cli.gres_conf import check_ids

    problems, lines = check_ids(nvml, ["A100-40GB", "H100-80GB"])
    assert lines == [] and len(problems) == 2
    assert problems[0].startswith("GPU 0 (A100-40GB): the driver numbers GPU instances")
    assert "1g.5gb at 0:1 got id 1, its record names 7" in problems[0]
    assert nvml.instances(0) == [] and nvml.instances(1) == []  # all destroyed again


# -- issue 22: every model by its board name, NVML placement units, names first ----------

# A board name NVML gives for each model (sources in nvml.py's _BOARDS; the A100-80GB,
# H100-94GB and H200 names are the ones the tests above use).
BOARDS = {
    "A30-24GB": "NVIDIA A30",
    "A100-40GB": "NVIDIA A100-SXM4-40GB",
    "A100-80GB": "NVIDIA A100 80GB PCIe",
    "H100-80GB": "NVIDIA H100 80GB HBM3",
    "H100-94GB": "NVIDIA H100 NVL",
    "H100-96GB": "NVIDIA GH200 480GB",
    "H200-141GB": "NVIDIA H200 141GB HBM3e",
    "GH200-144GB": "NVIDIA GH200 144G HBM3e",
    "B200-180GB": "NVIDIA B200",
    "GB200-186GB": "NVIDIA GB200",
    "B300-269GB": "NVIDIA B300 SXM6 AC",
    "GB300-278GB": "NVIDIA GB300",
    "RTXPRO6000-96GB": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
}


def test_every_geometry_model_is_recognised_by_a_board_name_with_and_without_memory():
    from slurm_mig.geometry import MODELS

    assert set(BOARDS) == set(MODELS), "a model without a board name NVML gives"
    for model, board in BOARDS.items():
        assert detect_model(board, None) == model, board
        nominal = float(model.rsplit("-", 1)[1].removesuffix("GB"))
        assert detect_model(board, int(nominal * 0.98 * 1024**3)) == model, board


@pytest.fixture
def rtx():
    """An RTX PRO 6000 as its driver reports it (fake_pynvml.CHIPS, sourced there):
    placements in 12 units, 3 a memory slice."""
    fake.fake_reset(["RTXPRO6000-96GB"])
    yield NvmlBackend(fake)
    assert fake.fake_init_depth() == 0


def test_rtx_pro_6000_placements_are_read_and_written_in_its_nvml_units(rtx):
    assert rtx.gpus()[0].model == "RTXPRO6000-96GB"
    inst = rtx.create(0, "1g.24gb", Placement(2, 1))
    assert inst.placement == Placement(2, 1)
    assert [(g["start"], g["size"]) for g in fake.fake_layout(0)] == [(6, 3)]  # NVML's units
    two = rtx.create(0, "2g.48gb", Placement(0, 2))
    assert [i.placement for i in rtx.instances(0)] == [Placement(0, 2), Placement(2, 1)]
    with pytest.raises(InvalidRequest, match="placements .* are 0:1, 1:1, 2:1, 3:1"):
        rtx.create(0, "1g.24gb", Placement(1, 2))
    for i in (inst, two):
        rtx.destroy(0, i.uuid)
    gfx = rtx.create(0, "1g.24gb+gfx", Placement(3, 1))
    assert (gfx.profile, gfx.placement) == ("1g.24gb+gfx", Placement(3, 1))
    cat = rtx.catalogue(0)
    assert cat.model == "RTXPRO6000-96GB"
    assert (
        cat["1g.24gb+me"].placements
        == get_model("RTXPRO6000-96GB").profile("1g.24gb+me").placements
    )
    assert cat["4g.96gb"].placements == (Placement(0, 4),)


def _by_hand(gpu: int, profile_id: int, start: int, size: int) -> None:
    """A GPU instance and its compute instance made as nvidia-smi would, not by slurm-mig."""
    fake.nvmlInit()
    h = fake.nvmlDeviceGetHandleByIndex(gpu)
    gi = fake.nvmlDeviceCreateGpuInstanceWithPlacement(
        h, profile_id, ctypes.byref(fake.c_nvmlGpuInstancePlacement_t(start, size))
    )
    info = fake.nvmlGpuInstanceGetComputeInstanceProfileInfo(
        gi, fake.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, 0
    )
    fake.nvmlGpuInstanceCreateComputeInstance(gi, info.id)
    fake.nvmlShutdown()


def test_instances_made_by_hand_with_media_and_double_memory_profiles_are_recognised(nvml):
    _by_hand(1, 20, 3, 1)  # H100 1g.10gb+me (id 20) at 3:1
    _by_hand(1, 15, 4, 2)  # H100 1g.20gb, the double-memory 1g (id 15), at 4:2
    got = [(i.profile, i.placement) for i in nvml.instances(1)]
    assert got == [("1g.10gb+me", Placement(3, 1)), ("1g.20gb", Placement(4, 2))]
    assert nvml.health() == ["GPU 3 (Tesla T4): not a MIG GPU slurm-mig knows; it is left alone"]


def test_profiles_resolve_by_the_drivers_name_first_and_a_rename_is_followed(nvml):
    # a test scenario, not a claimed fact: the driver renames 1g.10gb and holds more back
    fake.fake_rename_profile(1, "1g.10gb", "1g.9gb", memory_mb=9216)
    old = nvml.create(1, "1g.10gb", Placement(0, 1))  # geometry's name: still found
    new = nvml.create(1, "1g.9gb", Placement(1, 1))  # the driver's (a driver_wins plan)
    assert old.profile == new.profile == "1g.10gb"
    assert [g["name"] for g in fake.fake_layout(1)] == ["MIG 1g.9gb", "MIG 1g.9gb"]
    me = nvml.create(1, "1g.10gb+me", Placement(2, 1))  # extra profile, by name
    assert me.profile == "1g.10gb+me"
    with pytest.raises(PlacementConflict):
        nvml.create(1, "1g.10gb+me", Placement(3, 1))  # one +me a GPU (NVML's count)
    with pytest.raises(InvalidRequest, match="no MIG profile '1g.99gb'"):
        nvml.create(1, "1g.99gb", Placement(4, 1))
