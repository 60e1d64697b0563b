"""Every model of the offline catalogue as the fake driver serves it (tests/fake_pynvml.py,
each chip written from its own sources): the catalogue read through NVML equals the
tables, a driver that renames profiles or moves memory is reported and followed."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))

import fake_pynvml as fake  # noqa: E402

from slurm_mig import geometry  # noqa: E402
from slurm_mig.devices.boards import detect_model  # noqa: E402
from slurm_mig.devices.catalogue import compare, driver_wins  # noqa: E402
from slurm_mig.devices.nvml import read_catalogue  # noqa: E402

MIB = 1024**2


def _read(chip: str):
    fake.fake_reset([chip])
    try:
        return read_catalogue(0, fake)
    finally:
        fake.fake_reset()


def test_the_fake_has_a_chip_for_every_model_of_the_tables():
    assert set(geometry.MODELS) <= set(fake.CHIPS)


@pytest.mark.parametrize("model", sorted(geometry.MODELS))
def test_the_catalogue_read_from_the_driver_equals_the_tables(model):
    cat = _read(model)
    assert cat.model == model  # the board name (and memory) tell the model
    assert compare(geometry.MODELS[model], cat) == []
    # and every profile is found by the name the driver gives, ids as the driver has them
    offline = geometry.MODELS[model]
    for p in cat:
        assert offline.profile(p.name).placements == p.placements
        assert p.profile_id >= 0


@pytest.mark.parametrize("model", sorted(geometry.MODELS))
def test_every_board_name_is_recognised(model):
    chip = fake.CHIPS[model]
    assert detect_model(chip.name, chip.memory_mib * MIB) == model
    assert detect_model(chip.name, None) == model  # MIG hides the memory from non-root


# The ids ``nvidia-smi mig -lgip`` prints, by the name's shape (sources in fake_pynvml).
IDS_7 = {"1g": 19, "1g+me": 20, "1g2x": 15, "2g": 14, "3g": 9, "4g": 5, "7g": 0}
IDS_RTX = {
    "1g.24gb": 14,
    "1g.24gb+me": 21,
    "1g.24gb+gfx": 47,
    "1g.24gb+me.all": 65,
    "1g.24gb-me": 67,
    "2g.48gb": 5,
    "2g.48gb+gfx": 35,
    "2g.48gb+me.all": 64,
    "2g.48gb-me": 66,
    "4g.96gb": 0,
    "4g.96gb+gfx": 32,
}


@pytest.mark.parametrize("model", sorted(m for m in geometry.MODELS if m != "RTXPRO6000-96GB"))
def test_ids_are_the_drivers(model):
    cat = _read(model)
    if model == "A30-24GB":
        ids = {p.name: p.profile_id for p in cat}
        assert ids == {"1g.6gb": 14, "1g.6gb+me": 21, "2g.12gb": 5, "2g.12gb+me": 6, "4g.24gb": 0}
        return
    for p in cat:
        key = p.name.split(".")[0] + ("+me" if p.name.endswith("+me") else "")
        if p.memory_slices == 2 and p.slices == 1:
            key = "1g2x"
        assert p.profile_id == IDS_7[key], p.name


def test_rtx_pro_6000_ids_and_placements_in_twelve_units():
    fake.fake_reset(["RTXPRO6000-96GB"])
    try:
        raw = {p.name.removeprefix("MIG "): p.id for p in fake.CHIPS["RTXPRO6000-96GB"].profiles}
        cat = read_catalogue(0, fake)
    finally:
        fake.fake_reset()
    assert raw == IDS_RTX
    assert (
        cat["1g.24gb-me"].placements
        == geometry.MODELS["RTXPRO6000-96GB"].profile("1g.24gb-me").placements
    )
    assert fake.CHIPS["RTXPRO6000-96GB"].profiles[0].placements == ((0, 3), (3, 3), (6, 3), (9, 3))


def test_gb200_early_driver_names_are_reported_and_followed():
    cat = _read("GB200-186GB-early")
    offline = geometry.MODELS["GB200-186GB"]
    lines = compare(offline, cat)
    renamed = sorted(line.split(": ", 1)[1].split(" (")[0] for line in lines if "calls" in line)
    assert renamed == [
        "the driver calls 1g.23gb 1g.24gb",
        "the driver calls 1g.23gb+me 1g.24gb+me",
        "the driver calls 3g.93gb 3g.95gb",
        "the driver calls 4g.93gb 4g.95gb",
        "the driver calls 7g.186gb 7g.189gb",
    ]
    # 20.00 GiB on that driver, 22.00 in the tables: reported too
    assert any("1g.24gb has 20.00 GiB on the driver, 22.00 GiB" in line for line in lines)
    won = driver_wins(offline, cat)
    assert [p.name for p in won.profiles] == [
        "1g.24gb",
        "1g.47gb",
        "2g.47gb",
        "3g.95gb",
        "4g.95gb",
        "7g.189gb",
    ]
    assert won.profile_for_size(1).memory_bytes == 20480 * MIB  # the driver's memory
    assert won.profile("1g.24gb+me").limit == 1
    # a config or plan naming the tables' profiles still finds the driver's
    assert won.profile("7g.186gb").name == won.profile("7g.189gb").name == "7g.189gb"
    # the tables resolve both names to the same profile
    assert offline.profile("7g.189gb") == offline.profile("7g.186gb")


def test_a_driver_that_moved_memory_is_reported_and_its_figure_planned():
    cat = _read("B200-180GB-first-driver")
    offline = geometry.MODELS["B200-180GB"]
    assert compare(offline, cat) == [
        "B200-180GB: 1g.23gb has 22.00 GiB on the driver, 20.50 GiB in the tables",
        "B200-180GB: 1g.23gb+me has 22.00 GiB on the driver, 20.50 GiB in the tables",
    ]
    won = driver_wins(offline, cat)
    assert won.profile_for_size(1).memory_bytes == 22528 * MIB
    assert won.profile_for_size(2) == offline.profile_for_size(2)
