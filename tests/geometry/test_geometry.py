"""Geometry: profiles, NVIDIA placements, valid partitions, FAR's tree, Table 1 times."""

from __future__ import annotations

import csv
from itertools import product

import pytest
from support import shared_file

from slurm_mig.geometry import (
    GIB,
    MODELS,
    GeometryError,
    Placement,
    Slot,
    can_coexist,
    get_model,
    legal_placements,
    partition_name,
    planner_slots,
    valid_partitions,
)

SEVEN = [n for n, m in MODELS.items() if m.compute_slices == 7]
NAMES4_RTX = ("1g.24gb", "2g.48gb", "4g.96gb")  # MIG user guide Table 11

# FACTS.md: (1g, 1g 2x memory, 2g, 3g, 4g, 7g) profile names per model.
NAMES7 = {
    "A100-40GB": ("1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"),
    "A100-80GB": ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    "H100-80GB": ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    "H100-94GB": ("1g.12gb", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"),
    "H200-141GB": ("1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"),
    "B200-180GB": ("1g.23gb", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"),
    # mig-parted's config-default.yaml (sources in geometry.py)
    "H100-96GB": ("1g.12gb", "1g.24gb", "2g.24gb", "3g.48gb", "4g.48gb", "7g.96gb"),
    "GH200-144GB": ("1g.18gb", "1g.36gb", "2g.36gb", "3g.72gb", "4g.72gb", "7g.144gb"),
    "GB200-186GB": ("1g.23gb", "1g.47gb", "2g.47gb", "3g.93gb", "4g.93gb", "7g.186gb"),
    "B300-269GB": ("1g.34gb", "1g.67gb", "2g.67gb", "3g.135gb", "4g.135gb", "7g.269gb"),
    "GB300-278GB": ("1g.35gb", "1g.70gb", "2g.70gb", "3g.139gb", "4g.139gb", "7g.278gb"),
}
# 4-slice models: (1g, 2g, 4g) planner profiles
NAMES4 = {"A30-24GB": ("1g.6gb", "2g.12gb", "4g.24gb"), "RTXPRO6000-96GB": NAMES4_RTX}
# NVIDIA's placements (MIG user guide): (compute slices, starts, memory slices).
LATTICE7 = (
    (1, (0, 1, 2, 3, 4, 5, 6), 1),
    (1, (0, 2, 4, 6), 2),
    (2, (0, 2, 4), 2),
    (3, (0, 4), 4),
    (4, (0,), 4),
    (7, (0,), 8),
)
LATTICE_A30 = ((1, (0, 1, 2, 3), 1), (2, (0, 2), 2), (4, (0,), 4))
NAMES_A30 = ("1g.6gb", "2g.12gb", "4g.24gb")


def test_models_known():
    assert set(MODELS) == set(NAMES7) | set(NAMES4)


@pytest.mark.parametrize("name", SEVEN)
def test_seven_slice_profiles_and_placements(name):
    model = get_model(name)
    assert model.compute_slices == 7
    assert model.memory_slices == 8
    assert model.planner_sizes == (1, 2, 3, 4, 7)
    for pname, (compute, starts, mem) in zip(NAMES7[name], LATTICE7):
        p = model.profile(pname)
        assert p.compute_slices == compute
        assert p.memory_slices == mem
        assert p.placements == tuple(Placement(s, mem) for s in starts)


def test_a30_profiles_and_placements():
    model = get_model("A30-24GB")
    assert model.compute_slices == 4
    assert model.memory_slices == 4
    assert model.planner_sizes == (1, 2, 4)
    for pname, (compute, starts, mem) in zip(NAMES_A30, LATTICE_A30):
        p = model.profile(pname)
        assert p.compute_slices == compute
        assert p.placements == tuple(Placement(s, mem) for s in starts)


@pytest.mark.parametrize("name", list(MODELS))
def test_planner_profile_per_size(name):
    """The planner's instance of s compute slices is the plain (non double-memory) one."""
    model = get_model(name)
    if name in NAMES4:
        expected = dict(zip((1, 2, 4), NAMES4[name]))
    else:
        expected = dict(zip((1, 2, 3, 4, 7), NAMES7[name][:1] + NAMES7[name][2:]))
    for size in model.planner_sizes:
        assert model.profile_for_size(size).name == expected[size]


def test_a30_has_no_three_slice_instance():
    with pytest.raises(GeometryError, match="sizes are 1, 2, 4"):
        get_model("A30").profile_for_size(3)


def test_unknown_profile_names_the_profiles():
    with pytest.raises(GeometryError, match="3g.20gb"):
        get_model("A100-40GB").profile("5g.25gb")


def test_usable_memory_below_name_h100():
    """FACTS.md: H100-80GB 1g.10gb ~ 9.75 GiB, 3g.40gb ~ 39.5 GiB, 7g ~ 79.25 GiB."""
    model = get_model("H100-80GB")
    assert model.profile("1g.10gb").memory_bytes == pytest.approx(9.75 * GIB, rel=1e-6)
    assert model.profile("3g.40gb").memory_bytes == pytest.approx(39.5 * GIB, rel=1e-6)
    assert model.profile("7g.80gb").memory_bytes == pytest.approx(79.25 * GIB, rel=1e-6)
    for name, m in MODELS.items():
        for p in m.profiles:
            assert isinstance(p.memory_bytes, int)
            gb = int(p.name.split(".")[1].removesuffix("gb"))
            assert 0.8 * gb * GIB < p.memory_bytes < gb * GIB, (name, p.name)


def _fig1_names(left, right):
    return {"-".join(p) for p in product(left, right)}


def test_valid_partitions_counts_and_names():
    left = ["4", "3", "2-2", "2-1-1", "1-1-2", "1-1-1-1"]
    right = ["3", "2-1", "1-1-1"]
    expected7 = {"7"} | _fig1_names(left, right)
    assert len(expected7) == 19
    for name in SEVEN:
        parts = valid_partitions(name)
        assert len(parts) == 19
        assert {partition_name(p) for p in parts} == expected7
    a30 = valid_partitions("A30-24GB")
    assert len(a30) == 5
    assert {partition_name(p) for p in a30} == {"4", "2-2", "2-1-1", "1-1-2", "1-1-1-1"}


@pytest.mark.parametrize("name", list(MODELS))
def test_valid_partitions_disjoint_legal_maximal(name):
    model = get_model(name)
    slots = planner_slots(model)
    for part in valid_partitions(name):
        assert can_coexist(model, [s.placement for s in part])
        used = set()
        for s in part:
            assert s.placement in model.profile_for_size(s.size).placements
            used.update(s.slices)
        for extra in slots:
            assert not can_coexist(model, [s.placement for s in part] + [extra.placement])
        assert max(used) < model.compute_slices


def test_invalid_order_is_not_a_partition():
    """Section 2.3: 2-4-1 is not valid on the A100 (4-2-1 is)."""
    names = {partition_name(p) for p in valid_partitions("A100-40GB")}
    assert "4-2-1" in names
    assert "2-4-1" not in names


def test_can_coexist():
    m = get_model("A100-40GB")
    P = Placement
    assert can_coexist(m, [])
    assert can_coexist(m, [P(0, 8)])
    assert can_coexist(m, [P(0, 4), P(4, 4)])
    assert can_coexist(m, [P(0, 2), P(2, 1), P(3, 1), P(4, 2), P(6, 1)])
    assert can_coexist(m, [P(0, 4), P(4, 2), P(6, 2)])  # 1g.10gb at 6
    # 3g at 0 holds memory slices 0-3: a 1g at 3 overlaps it
    assert not can_coexist(m, [P(0, 4), P(3, 1)])
    assert not can_coexist(m, [P(0, 8), P(6, 1)])
    assert not can_coexist(m, [P(4, 2), P(4, 2)])
    assert not can_coexist(m, [P(0, 2), P(1, 1)])
    # illegal placements, even alone
    assert not can_coexist(m, [P(1, 2)])  # 2g at 1
    assert not can_coexist(m, [P(2, 4)])  # 3g/4g at 2
    assert not can_coexist(m, [P(7, 1)])  # 1g at 7
    assert not can_coexist(m, [P(0, 3)])
    a30 = get_model("A30")
    assert can_coexist(a30, [P(0, 2), P(2, 1), P(3, 1)])
    assert not can_coexist(a30, [P(1, 2)])
    assert not can_coexist(a30, [P(4, 1)])
    assert not can_coexist(a30, [P(0, 8)])


def test_legal_placements():
    assert set(legal_placements(get_model("A30"))) == {
        Placement(0, 1),
        Placement(1, 1),
        Placement(2, 1),
        Placement(3, 1),
        Placement(0, 2),
        Placement(2, 2),
        Placement(0, 4),
    }


def test_slot_slices():
    assert Slot(Placement(0, 4), 3).slices == (0, 1, 2)  # 3g at 0 computes on 0-2
    assert Slot(Placement(4, 4), 3).slices == (4, 5, 6)
    assert Slot(Placement(0, 8), 7).slices == tuple(range(7))
    assert get_model("A100").compute_slices_of(Placement(0, 4), 3) == (0, 1, 2)


@pytest.mark.parametrize("name", list(MODELS))
def test_tree_structure(name):
    model = get_model(name)
    tree = model.tree
    assert [n.index for n in tree] == list(range(len(tree)))
    roots = [n for n in tree if n.parent is None]
    assert len(roots) == 1
    root = roots[0]
    assert root.size == model.compute_slices
    assert root.placement == Placement(0, model.memory_slices)
    for node in tree:
        # the node is a legal instance of its size
        assert node.placement in model.profile_for_size(node.size).placements
        assert node.slices == node.slot.slices
        assert node.slot in planner_slots(model)
        # parent/children links agree
        for c in node.children:
            assert tree[c].parent == node.index
        if node.parent is not None:
            assert node.index in tree[node.parent].children
        # children lie inside the node and are pairwise disjoint
        kids = [tree[c] for c in node.children]
        for k in kids:
            assert node.placement.start <= k.placement.start
            assert k.placement.end <= node.placement.end
            assert k.size < node.size
        for i, a in enumerate(kids):
            for b in kids[i + 1 :]:
                assert not a.placement.overlaps(b.placement)
    # every node is reachable from the root
    seen, todo = set(), [root.index]
    while todo:
        v = todo.pop()
        seen.add(v)
        todo.extend(tree[v].children)
    assert seen == set(range(len(tree)))


@pytest.mark.parametrize("name", list(MODELS))
def test_every_planner_slot_is_in_the_tree(name):
    model = get_model(name)
    tree_slots = [n.slot for n in model.tree]
    assert len(tree_slots) == len(set(tree_slots))
    assert set(planner_slots(model)) <= set(tree_slots)
    for size in model.planner_sizes:
        assert {n.slot for n in model.nodes_of_size(size)} == {
            Slot(p, size) for p in model.profile_for_size(size).placements
        }


@pytest.mark.parametrize("name", SEVEN)
def test_three_slice_node_under_four_slice_node(name):
    tree = get_model(name).tree
    three_at_0 = [n for n in tree if n.size == 3 and n.placement.start == 0]
    assert len(three_at_0) == 1
    parent = tree[three_at_0[0].parent]
    assert parent.size == 4 and parent.placement == Placement(0, 4)
    assert three_at_0[0].slices == (0, 1, 2)
    # its children are the two 2-slice instances of the first four slices
    kids = sorted(tree[c].placement for c in three_at_0[0].children)
    assert kids == [Placement(0, 2), Placement(2, 2)]
    three_at_4 = [n for n in tree if n.size == 3 and n.placement.start == 4]
    assert len(three_at_4) == 1 and tree[three_at_4[0].parent].size == 7


def _table1() -> dict[str, dict[int, tuple[float, float]]]:
    out: dict[str, dict[int, tuple[float, float]]] = {}
    with shared_file("far-reference/reconfig_times.csv").open() as f:
        for row in csv.DictReader(f):
            out.setdefault(row["device"], {})[int(row["size"])] = (
                float(row["create_s"]),
                float(row["destroy_s"]),
            )
    return out


@pytest.mark.parametrize("name", list(MODELS))
def test_reconfiguration_times_table1(name):
    table = _table1()
    model = get_model(name)
    row = next((d for d in table if name.upper().startswith(d)), "H100")
    if not name.startswith(("A30", "A100", "H100")):
        assert row == "H100"  # absent from Table 1
    expected = {s: t for s, t in table[row].items() if s in model.planner_sizes}
    assert set(expected) == set(model.planner_sizes)
    for size, (create, destroy) in expected.items():
        assert model.create_time(size) == pytest.approx(create, abs=1e-12)
        assert model.destroy_time(size) == pytest.approx(destroy, abs=1e-12)


def test_models_absent_from_table1_use_h100_row():
    h100 = get_model("H100-80GB")
    for name in ("H100-94GB", "H200-141GB", "B200-180GB"):
        m = get_model(name)
        for s in m.planner_sizes:
            assert m.create_time(s) == h100.create_time(s)
            assert m.destroy_time(s) == h100.destroy_time(s)


def test_get_model_names_and_aliases():
    assert get_model("A100").name == "A100-40GB"
    assert get_model("a100-80gb").name == "A100-80GB"
    assert get_model(" h100 ").name == "H100-80GB"
    assert get_model("A30").name == "A30-24GB"
    for name in MODELS:
        assert get_model(name) is MODELS[name]


def test_get_model_error_names_known_models():
    with pytest.raises(GeometryError) as exc:
        get_model("V100")
    msg = str(exc.value)
    assert "V100" in msg
    for name in MODELS:
        assert name in msg
