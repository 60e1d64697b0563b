"""The MIG catalogue read from the fake driver (tests/fake_pynvml.py, sourced per model)
against geometry's offline tables: agreement, the disagreements known today, a renamed
profile reported and followed, and a missing driver in one line."""

import sys
import types
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))

import fake_pynvml as fake  # noqa: E402

from slurm_mig import geometry  # noqa: E402
from slurm_mig.devices.base import DeviceUnavailable, InvalidRequest, MigDisabled  # noqa: E402
from slurm_mig.devices.catalogue import (  # noqa: E402
    compare,
    driver_wins,
    error_line,
)
from slurm_mig.devices.nvml import read_catalogue

MIB = 1024**2
BOTH = [k for k in fake.CHIPS if k in geometry.MODELS]


@pytest.fixture(autouse=True)
def _fresh():
    fake.fake_reset(BOTH)
    yield
    fake.fake_reset()


def test_fake_serves_a_model_the_tables_know():
    assert {"A100-40GB", "H100-80GB", "H200-141GB", "A30-24GB"} <= set(BOTH)


@pytest.mark.parametrize("model", BOTH)
def test_catalogue_equals_the_tables(model):
    cat = read_catalogue(BOTH.index(model), fake)
    offline = geometry.MODELS[model]
    assert compare(offline, cat) == []
    # the planner's profiles exist on the driver under their names and placements
    for size in offline.planner_sizes:
        p = offline.profile_for_size(size)
        assert p.name in cat, f"{model}: the driver has no {p.name}"
        assert cat[p.name].placements == p.placements
        assert cat[p.name].slices == p.compute_slices


def test_catalogue_reads_ids_names_memory_and_placements_of_h200():
    cat = read_catalogue(BOTH.index("H200-141GB"), fake)
    assert cat.gpu_name == "NVIDIA H200 141GB HBM3e"
    rows = {p.name: (p.profile_id, p.instances, p.memory_bytes // MIB) for p in cat}
    assert rows == {
        "1g.18gb": (19, 7, 16384),
        "1g.18gb+me": (20, 1, 16384),
        "1g.35gb": (15, 4, 33024),
        "2g.35gb": (14, 3, 33024),
        "3g.71gb": (9, 2, 71168),
        "4g.71gb": (5, 1, 71168),
        "7g.141gb": (0, 1, 143104),
    }
    assert cat["1g.35gb"].starts == (0, 2, 4, 6) and cat["1g.35gb"].memory_slices == 2
    assert cat["3g.71gb"].starts == (0, 4) and cat["3g.71gb"].memory_slices == 4


def test_ids_differ_between_models_so_the_catalogue_is_keyed_by_name():
    a30 = read_catalogue(BOTH.index("A30-24GB"), fake)
    a100 = read_catalogue(BOTH.index("A100-40GB"), fake)
    assert a30["1g.6gb"].profile_id == 14 and a100["2g.10gb"].profile_id == 14


def test_a_renamed_profile_is_reported_and_the_driver_wins():
    gpu = BOTH.index("H100-80GB")
    # a test scenario, not a claimed fact: a driver that renames 1g.10gb and holds more back
    fake.fake_rename_profile(gpu, "1g.10gb", "1g.9gb", memory_mb=9216)
    cat = read_catalogue(gpu, fake)
    offline = geometry.MODELS["H100-80GB"]
    lines = compare(offline, cat)
    assert (
        "H100-80GB: the driver calls 1g.10gb 1g.9gb (1 slices, placements {0,1,2,3,4,5,6}:1)"
        in lines
    )
    assert "H100-80GB: 1g.9gb has 9.00 GiB on the driver, 9.75 GiB in the tables" in lines
    won = driver_wins(offline, cat)
    one = won.profile_for_size(1)
    assert (one.name, one.memory_bytes) == ("1g.9gb", 9216 * MIB)
    assert one.placements == offline.profile_for_size(1).placements
    assert won.profile_for_size(7).memory_bytes == cat["7g.80gb"].memory_bytes
    assert offline.profile_for_size(1).name == "1g.10gb"  # the offline table is untouched


def test_the_driver_wins_on_memory_where_names_agree():
    gpu = BOTH.index("H200-141GB")
    won = driver_wins(geometry.MODELS["H200-141GB"], read_catalogue(gpu, fake))
    assert won.profile_for_size(1).memory_bytes == 16384 * MIB
    assert won.profile_for_size(2).memory_bytes == 33024 * MIB


def test_a_driver_without_a_planner_profile_cannot_be_planned_as_the_model():
    gpu = BOTH.index("A100-40GB")
    cat = read_catalogue(gpu, fake)
    cat = type(cat)(cat.gpu_name, tuple(p for p in cat if p.name != "3g.20gb"))
    assert "A100-40GB: the tables have 3g.20gb, the driver does not" in compare(
        geometry.MODELS["A100-40GB"], cat
    )
    with pytest.raises(InvalidRequest, match="no profile like 3g.20gb"):
        driver_wins(geometry.MODELS["A100-40GB"], cat)


def _old_pynvml(named: bool) -> types.ModuleType:
    """The fake without nvmlDeviceGetGpuInstanceProfileInfoV (older pynvml); with
    ``named`` False its info is version 1, which has no name."""
    mod = types.ModuleType("pynvml")
    mod.__dict__.update({k: v for k, v in vars(fake).items() if not k.startswith("__")})
    del mod.nvmlDeviceGetGpuInstanceProfileInfoV
    if not named:
        mod.nvmlDeviceGetGpuInstanceProfileInfo = lambda dev, const: (
            fake.nvmlDeviceGetGpuInstanceProfileInfo(dev, const, version=1)
        )
    return mod


def test_falls_back_to_the_v1_call_and_builds_names_it_never_imposes():
    gpu = BOTH.index("H200-141GB")
    assert read_catalogue(gpu, _old_pynvml(True)).names == read_catalogue(gpu, fake).names
    cat = read_catalogue(gpu, _old_pynvml(False))
    assert "1g.16gb" in cat and "1g.16gb+me" in cat and not cat["1g.16gb"].named
    offline = geometry.MODELS["H200-141GB"]
    assert not any("calls" in line for line in compare(offline, cat))
    assert driver_wins(offline, cat).profile_for_size(1).name == "1g.18gb"


def test_a_missing_driver_is_one_line_with_the_fix():
    fake.fake_set_driver("missing")
    with pytest.raises(DeviceUnavailable) as info:
        read_catalogue(0, fake)
    line = error_line(info.value)
    assert "\n" not in line
    assert line.startswith("slurm-mig: error: initialise NVML: NVML Shared Library Not Found")
    assert line.endswith("(install the NVIDIA driver on this node (libnvidia-ml.so.1 is missing))")


def test_mig_off_is_an_error_with_the_fix_not_an_empty_catalogue():
    fake.fake_set_mig_mode(0, False)
    with pytest.raises(MigDisabled, match="read the MIG profiles") as info:
        read_catalogue(0, fake)
    assert "nvidia-smi -i 0 -mig 1" in info.value.hint
    assert fake.fake_init_depth() == 0  # NVML shut down again


def test_read_catalogue_is_the_backends_public_catalogue_with_its_model():
    from slurm_mig.devices.nvml import NvmlBackend

    gpu = BOTH.index("H100-80GB")
    cat = read_catalogue(gpu, fake)
    assert cat == NvmlBackend(fake).catalogue(gpu)
    assert cat.model == "H100-80GB"
    assert fake.fake_init_depth() == 0


def test_media_profiles_are_compared_and_the_driver_wins_on_them_too():
    gpu = BOTH.index("H100-80GB")
    fake.fake_rename_profile(gpu, "1g.10gb+me", "1g.9gb+me", memory_mb=9216)  # a scenario
    offline = geometry.MODELS["H100-80GB"]
    lines = compare(offline, read_catalogue(gpu, fake))
    assert "H100-80GB: the driver calls 1g.10gb+me 1g.9gb+me" in lines[0]
    won = driver_wins(offline, read_catalogue(gpu, fake))
    assert won.profile("1g.9gb+me").memory_bytes == 9216 * MIB
    assert won.profile_for_size(1).name == "1g.10gb"  # the plain 1g is untouched
