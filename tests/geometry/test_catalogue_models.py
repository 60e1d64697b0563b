"""The offline catalogue (issue 22): every MIG model by name and short name, its planner
and non-planner profiles (double-memory 1g, +me, RTX PRO 6000's +gfx/+me.all/-me), NVML
placement units, renamed GB200 profiles; and the planner of the models known before,
pinned so the new profiles change none of its sizes, slots, tree or partitions."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest

from slurm_mig.geometry import (
    ALIASES,
    GIB,
    MODELS,
    Board,
    GeometryError,
    Placement,
    can_coexist,
    get_model,
    mask_tables,
    planner_slots,
    valid_partitions,
)

# sha256 of each model's planner state, computed BEFORE the catalogue grew (issue 22).
PINNED = {
    "A30-24GB": "3a33b0a64eeab58e",
    "A100-40GB": "1ad9dffab6021e37",
    "A100-80GB": "6ff45a6d8690b631",
    "H100-80GB": "8f63bd89437eff59",
    # memory from published -lgip outputs since (sources in geometry/tables.py); the
    # lattice, tree, partitions and times are as before
    "H100-94GB": "dafa99d275caf38e",
    "H200-141GB": "61e1398cab94f232",
    "B200-180GB": "dfa16c9e28abe982",
}

NEW = ("H100-96GB", "GH200-144GB", "GB200-186GB", "B300-269GB", "GB300-278GB", "RTXPRO6000-96GB")

SHORT = {
    "H100NVL": "H100-94GB",
    "h100 nvl": "H100-94GB",
    "GH200": "H100-96GB",
    "GH200-96GB": "H100-96GB",
    "gh200-144g": "GH200-144GB",
    "GB200": "GB200-186GB",
    "GB200-189GB": "GB200-186GB",
    "B300": "B300-269GB",
    "GB300": "GB300-278GB",
    "RTXPRO6000": "RTXPRO6000-96GB",
    "RTX PRO 6000": "RTXPRO6000-96GB",
    "rtx_pro_6000": "RTXPRO6000-96GB",
    "H200": "H200-141GB",
    "B200": "B200-180GB",
}

# Usable memory (GiB) that an nvidia-smi mig -lgip output gives (sources in geometry.py).
MEASURED = {
    ("GB200-186GB", "1g.23gb"): 22.0,
    ("GB200-186GB", "1g.47gb"): 45.5,
    ("GB200-186GB", "2g.47gb"): 45.5,
    ("GH200-144GB", "1g.18gb"): 17.5,
    ("GH200-144GB", "1g.36gb"): 35.25,
    ("RTXPRO6000-96GB", "1g.24gb"): 23.62,
    ("RTXPRO6000-96GB", "2g.48gb"): 47.38,
    ("RTXPRO6000-96GB", "4g.96gb"): 95.12,
}


def _digest(name: str) -> str:
    m = get_model(name)
    state = {
        "sizes": list(m.planner_sizes),
        "cs": m.compute_slices,
        "ms": m.memory_slices,
        "slots": [(s.placement.start, s.placement.size, s.size) for s in planner_slots(m)],
        "tree": [
            (
                n.index,
                n.size,
                n.placement.start,
                n.placement.size,
                list(n.slices),
                n.parent,
                list(n.children),
            )
            for n in m.tree
        ],
        "parts": [
            [(s.placement.start, s.placement.size, s.size) for s in p]
            for p in valid_partitions(name)
        ],
        "profiles": [
            (
                p.name,
                p.compute_slices,
                p.memory_slices,
                p.memory_bytes,
                list(p.starts),
                p.nvml_class,
            )
            for p in m.profiles
        ],
        "times": [sorted(m.create_s.items()), sorted(m.destroy_s.items())],
    }
    return hashlib.sha256(json.dumps(state, sort_keys=True).encode()).hexdigest()[:16]


@pytest.mark.parametrize("name", sorted(PINNED))
def test_planner_of_known_models_unchanged(name):
    assert _digest(name) == PINNED[name]


def test_every_model_of_the_issue_is_known():
    assert set(NEW) | set(PINNED) == set(MODELS)


@pytest.mark.parametrize("short,name", sorted(SHORT.items()))
def test_short_names(short, name):
    assert get_model(short) is MODELS[name]


def test_aliases_name_real_models_and_every_model_by_its_name():
    for alias, name in ALIASES.items():
        assert get_model(alias) is MODELS[name]
        assert get_model(alias.lower()) is MODELS[name]
    for name in MODELS:
        assert get_model(name.lower()) is MODELS[name]
    with pytest.raises(GeometryError, match="GB200-186GB"):
        get_model("GB400")


@pytest.mark.parametrize("name", sorted(MODELS))
def test_profile_names_unique_and_found(name):
    model = get_model(name)
    names = [p.name for p in model.all_profiles]
    assert len(names) == len(set(names))
    for p in model.all_profiles:
        assert model.profile(p.name) is p


@pytest.mark.parametrize("name", sorted(MODELS))
def test_full_partitions_legal_and_memory_below_total(name):
    model = get_model(name)
    for part in valid_partitions(name):
        assert can_coexist(model, [s.placement for s in part])
    for p in model.all_profiles:
        gb = int(p.name.split(".")[1].split("gb")[0])
        assert 0.8 * gb * GIB < p.memory_bytes < gb * GIB, p.name
        assert all(pl.end <= model.memory_slices for pl in p.placements)
    assert mask_tables(model).memory[model.compute_slices] == model.memory_bytes


@pytest.mark.parametrize(("name", "profile"), sorted(MEASURED))
def test_measured_memory(name, profile):
    got = get_model(name).profile(profile).memory_bytes
    assert got == pytest.approx(MEASURED[name, profile] * GIB, abs=1)


@pytest.mark.parametrize("name", sorted(n for n, m in MODELS.items() if m.compute_slices == 7))
def test_double_memory_and_media_profiles_of_seven_slice_models(name):
    model = get_model(name)
    plain = model.profile_for_size(1)
    double = next(p for p in model.profiles if p.nvml_class == "1_SLICE_REV2")
    assert (double.compute_slices, double.memory_slices) == (1, 2)
    assert double.placements == tuple(Placement(s, 2) for s in (0, 2, 4, 6))
    assert double.instance_count == 4
    assert double.memory_bytes > plain.memory_bytes
    me = model.profile(plain.name + "+me")
    assert me.nvml_class == "1_SLICE_REV1"
    assert me.instance_count == 1 and me.placements == plain.placements
    assert me in model.extra_profiles and me not in model.profiles
    for size in model.planner_sizes:
        assert model.profile_for_size(size).nvml_class in {
            "1_SLICE",
            "2_SLICE",
            "3_SLICE",
            "4_SLICE",
            "7_SLICE",
        }
    assert [p.instance_count for p in model.profiles] == [7, 4, 3, 2, 1, 1]


def test_rtx_pro_6000_four_slices_like_the_a30():
    rtx, a30 = get_model("RTXPRO6000"), get_model("A30")
    assert (rtx.compute_slices, rtx.memory_slices, rtx.planner_sizes) == (4, 4, (1, 2, 4))
    assert [n.slot for n in rtx.tree] == [n.slot for n in a30.tree]
    assert [p.name for p in rtx.profiles] == ["1g.24gb", "2g.48gb", "4g.96gb"]
    assert [p.instance_count for p in rtx.profiles] == [4, 2, 1]
    extra = {p.name: (p.nvml_class, p.instance_count) for p in rtx.extra_profiles}
    assert extra == {
        "1g.24gb+me": ("1_SLICE_REV1", 1),
        "1g.24gb+gfx": ("1_SLICE_GFX", 4),
        "1g.24gb+me.all": ("1_SLICE_ALL_ME", 1),
        "1g.24gb-me": ("1_SLICE_NO_ME", 4),
        "2g.48gb+gfx": ("2_SLICE_GFX", 2),
        "2g.48gb+me.all": ("2_SLICE_ALL_ME", 1),
        "2g.48gb-me": ("2_SLICE_NO_ME", 2),
        "4g.96gb+gfx": ("4_SLICE_GFX", 1),
    }
    for size, name in zip((1, 2, 4), ("1g.24gb", "2g.48gb", "4g.96gb")):
        assert rtx.profile_for_size(size).name == name
    with pytest.raises(GeometryError, match="sizes are 1, 2, 4"):
        rtx.profile_for_size(3)
    assert len(valid_partitions(rtx.name)) == 5


def test_nvml_placement_units():
    """RTX PRO 6000's -lgipp: {0,3,6,9}:3, {0,6}:6, {0}:12; the others count slices."""
    rtx = get_model("RTXPRO6000")
    got = {p.name: [rtx.to_nvml(pl) for pl in p.placements] for p in rtx.profiles}
    assert got == {
        "1g.24gb": [Placement(s, 3) for s in (0, 3, 6, 9)],
        "2g.48gb": [Placement(0, 6), Placement(6, 6)],
        "4g.96gb": [Placement(0, 12)],
    }
    assert rtx.from_nvml(6, 3) == Placement(2, 1)
    with pytest.raises(GeometryError, match="not whole memory slices"):
        rtx.from_nvml(1, 3)
    h100 = get_model("H100")
    assert h100.to_nvml(Placement(4, 4)) == Placement(4, 4) == h100.from_nvml(4, 4)


def test_gb200_earlier_driver_names_resolve():
    gb200 = get_model("GB200")
    for old, new in {"1g.24gb": "1g.23gb", "3g.95gb": "3g.93gb", "7g.189gb": "7g.186gb"}.items():
        assert gb200.profile(old) is gb200.profile(new)
    with pytest.raises(GeometryError, match="7g.186gb"):
        gb200.profile("7g.190gb")


@pytest.mark.parametrize("name", NEW)
def test_new_models_take_the_h100_row_of_table_1(name):
    model, h100 = get_model(name), get_model("H100-80GB")
    assert model.timing_family == "H100"
    assert set(model.create_s) == set(model.planner_sizes)
    for s in model.planner_sizes:
        assert model.create_time(s) == h100.create_time(s)
        assert model.destroy_time(s) == h100.destroy_time(s)
    assert model.source


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_model_has_its_power_and_host_link_with_their_sources(name):
    """Issue 37: each catalogue entry holds its board power, its largest form factor's
    power and its host link, each with a source; the power and PCIe models read them
    there, never another model's."""
    from slurm_mig.pcie import pcie_max_for
    from slurm_mig.power import max_watts, power_curve

    model = MODELS[name]
    board = model.board
    assert isinstance(board, Board)
    assert 0 < board.tdp_w <= board.max_w and board.pcie_max_gbps > 0
    assert board.power_source.strip() and board.pcie_source.strip() and board.host_link
    assert power_curve(model)[-1] == pytest.approx(248.5 * board.tdp_w / 250.0)
    assert max_watts(name) == board.max_w
    assert pcie_max_for(model) == board.pcie_max_gbps
    assert board.nvml_names and board.nvml_source.strip()


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_model_is_found_by_its_own_board_names(name):
    """The board names live in the catalogue entry: a model's own name pattern and its
    memory find it, and nothing outside the catalogue says which boards a model has."""
    from slurm_mig.devices.boards import detect_model

    model = MODELS[name]
    word = model.board.nvml_names[-1].replace(r"\s*", " ")
    gib = int(name.rsplit("-", 1)[1].removesuffix("GB"))
    assert detect_model(f"NVIDIA {word}", gib * 1024**3) == name


def test_a_model_without_its_board_facts_is_refused_where_it_is_made():
    a100 = get_model("A100-40GB")
    with pytest.raises(GeometryError, match="A100-40GB: no board facts"):
        dataclasses.replace(a100, board=None)
    with pytest.raises(GeometryError, match="power_source: say it"):
        dataclasses.replace(a100.board, power_source=" ")
    with pytest.raises(GeometryError, match="max_w 100 is below its tdp_w 250"):
        dataclasses.replace(a100.board, max_w=100)
    with pytest.raises(GeometryError, match="nvml_names: give the patterns"):
        dataclasses.replace(a100.board, nvml_names=())
    with pytest.raises(GeometryError, match="nvml_source: say it"):
        dataclasses.replace(a100.board, nvml_source="")
    with pytest.raises(GeometryError, match="NVML name pattern '\\(': "):
        dataclasses.replace(a100.board, nvml_named=("(",))
