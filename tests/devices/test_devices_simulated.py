"""The simulated MIG backend: NVIDIA's placement rules, state on disk shared by processes,
Table 1 latencies, deterministic uuids, fault injection, and open_backend."""

from __future__ import annotations

import json
import multiprocessing
import subprocess
import sys
import time
from dataclasses import dataclass, field
from itertools import product
from pathlib import Path

import pytest

from slurm_mig.devices.base import (
    DeviceError,
    DeviceUnavailable,
    InstanceInUse,
    InstanceNotFound,
    InvalidRequest,
    MigDisabled,
    NoPermission,
    PlacementConflict,
)
from slurm_mig.devices.open import open_backend
from slurm_mig.devices.simulated import SimulatedBackend, mig_uuid_for
from slurm_mig.geometry import Placement, can_coexist, get_model


def _options(model_name: str) -> list[tuple[str, Placement]]:
    model = get_model(model_name)
    return [(p.name, pl) for p in model.profiles for pl in p.placements]


def _audit(backend: SimulatedBackend) -> list[dict]:
    if not backend.audit_path.exists():
        return []
    return [json.loads(line) for line in backend.audit_path.read_text().splitlines()]


@pytest.fixture
def a100(tmp_path: Path) -> SimulatedBackend:
    return SimulatedBackend(tmp_path / "node1", models=["A100-40GB", "A30-24GB"])


# -- placement rules ---------------------------------------------------------------------


@pytest.mark.parametrize("model_name", ["A100-40GB", "A30-24GB"])
def test_every_pair_of_legal_placements_coexists_exactly_when_geometry_says(tmp_path, model_name):
    backend = SimulatedBackend(tmp_path / "n", models=[model_name])
    model = get_model(model_name)
    options = _options(model_name)
    checked = conflicts = 0
    for (pa, la), (pb, lb) in product(options, options):
        first = backend.create(0, pa, la)
        if can_coexist(model, [la, lb]):
            second = backend.create(0, pb, lb)
            assert {i.uuid for i in backend.instances(0)} == {first.uuid, second.uuid}
            backend.destroy(0, second.uuid)
        else:
            with pytest.raises(PlacementConflict) as exc:
                backend.create(0, pb, lb)
            assert "Insufficient Resources" in str(exc.value)
            assert f"{pa} at {la.start}:{la.size} ({first.uuid})" in str(exc.value)
            assert exc.value.node_fault is False
            assert backend.instances(0) == [first]
            conflicts += 1
        backend.destroy(0, first.uuid)
        assert backend.instances(0) == []
        checked += 1
    assert checked == len(options) ** 2
    assert 0 < conflicts < checked


def test_a100_fills_up_with_seven_1g_and_then_nothing_fits(a100):
    for start in range(7):
        a100.create(0, "1g.5gb", Placement(start, 1))
    assert [i.placement.start for i in a100.instances(0)] == list(range(7))
    # memory slice 7 is free, but no profile of the A100 may start there
    for name, pl in _options("A100-40GB"):
        with pytest.raises((PlacementConflict, InvalidRequest)):
            a100.create(0, name, pl)
    with pytest.raises(InvalidRequest):
        a100.create(0, "1g.5gb", Placement(7, 1))


def test_unknown_profile_and_illegal_placement_are_invalid_requests(a100):
    with pytest.raises(InvalidRequest) as exc:
        a100.create(0, "3g.40gb", Placement(0, 4))  # an A100-80GB name
    assert "3g.40gb" in str(exc.value) and "3g.20gb" in exc.value.hint
    assert exc.value.node_fault is False
    with pytest.raises(InvalidRequest) as exc:
        a100.create(0, "3g.20gb", Placement(2, 4))
    assert "Invalid Argument" in str(exc.value) and "0:4, 4:4" in exc.value.hint
    with pytest.raises(InvalidRequest):
        a100.create(0, "2g.10gb", Placement(0, 1))  # size must be the profile's
    with pytest.raises(InvalidRequest):
        a100.create(1, "3g.20gb", Placement(0, 4))  # GPU 1 is an A30
    with pytest.raises(InvalidRequest) as exc:
        a100.create(2, "1g.6gb", Placement(0, 1))
    assert "GPU 2 does not exist" in str(exc.value)
    assert a100.instances() == []


def test_3g_at_0_blocks_memory_slice_3_though_it_computes_on_0_to_2(a100):
    a100.create(0, "3g.20gb", Placement(0, 4))
    with pytest.raises(PlacementConflict):
        a100.create(0, "1g.5gb", Placement(3, 1))
    a100.create(0, "3g.20gb", Placement(4, 4))
    assert [i.profile for i in a100.instances(0)] == ["3g.20gb", "3g.20gb"]


def test_instances_are_per_gpu_and_sorted(a100):
    a100.create(1, "2g.12gb", Placement(2, 2))
    a100.create(0, "1g.5gb", Placement(5, 1))
    a100.create(0, "2g.10gb", Placement(0, 2))
    a100.create(1, "1g.6gb", Placement(0, 1))
    got = [(i.gpu, i.placement.start) for i in a100.instances()]
    assert got == [(0, 0), (0, 5), (1, 0), (1, 2)]
    assert [i.placement.start for i in a100.instances(1)] == [0, 2]
    with pytest.raises(InvalidRequest):
        a100.instances(5)


# -- MIG mode, destroy, health -----------------------------------------------------------


def test_mig_mode_off_refuses_create_and_shows_in_health(a100):
    assert a100.health() == []
    a100.set_mig_mode(1, False)
    assert [g.mig_enabled for g in a100.gpus()] == [True, False]
    with pytest.raises(MigDisabled) as exc:
        a100.create(1, "1g.6gb", Placement(0, 1))
    assert exc.value.node_fault is True
    assert "nvidia-smi -i 1 -mig 1" in exc.value.hint
    assert a100.health() == [
        "GPU 1 (A30-24GB): MIG mode is off (hint: nvidia-smi -i 1 -mig 1 on an idle GPU)"
    ]
    a100.set_mig_mode(1, True)
    a100.create(1, "1g.6gb", Placement(0, 1))
    with pytest.raises(InstanceInUse):
        a100.set_mig_mode(1, False)  # NVIDIA needs a GPU without instances


def test_destroy_twice_and_unknown_uuids_are_not_found(a100):
    inst = a100.create(0, "4g.20gb", Placement(0, 4))
    with pytest.raises(InstanceNotFound) as exc:
        a100.destroy(1, inst.uuid)
    assert "it is on GPU 0" in str(exc.value)
    a100.destroy(0, inst.uuid)
    with pytest.raises(InstanceNotFound) as exc:
        a100.destroy(0, inst.uuid)
    assert exc.value.node_fault is False
    assert "gone already" in exc.value.hint
    with pytest.raises(InstanceNotFound):
        a100.destroy(0, "MIG-00000000-0000-0000-0000-000000000000")
    assert [r["op"] for r in _audit(a100)] == ["create", "destroy"]


def test_gi_ids_follow_the_placement_as_nvidia_numbers_them(a100):
    """Heap numbering of the memory-slice tree: whole GPU 0, halves 1-2, quarters 3-6,
    eighths 7-13 (A100 listings: 1g at 0..6 -> 7..13, 2g at 0/2/4 -> 3/4/5)."""
    full = a100.create(0, "7g.40gb", Placement(0, 8))
    assert (full.gi_id, full.ci_id) == (0, 0)
    a100.destroy(0, full.uuid)
    a = a100.create(0, "3g.20gb", Placement(4, 4))
    b = a100.create(0, "2g.10gb", Placement(0, 2))
    c = a100.create(0, "1g.5gb", Placement(2, 1))
    assert (a.gi_id, b.gi_id, c.gi_id) == (2, 3, 9)
    a100.destroy(0, b.uuid)
    assert a100.create(0, "1g.5gb", Placement(0, 1)).gi_id == 7
    assert a100.create(0, "1g.5gb", Placement(1, 1)).gi_id == 8


def test_gi_numbering_by_creation_order_when_asked(a100):
    (a100.state_dir / "gi-numbering").write_text("creation\n")
    a = a100.create(0, "3g.20gb", Placement(4, 4))
    b = a100.create(0, "1g.5gb", Placement(0, 1))
    assert (a.gi_id, b.gi_id) == (1, 2)


def test_mig_minors_table_is_nvidias_layout(a100):
    from slurm_mig.devices.migcaps import parse_minors

    table = parse_minors(a100.mig_minors())
    assert table[(0, 0, None)] == 3 and table[(0, 0, 0)] == 4 and table[(0, 0, 7)] == 11
    assert table[(0, 1, None)] == 12 and table[(1, 0, None)] == 3 + 135
    assert len(table) == 2 * 15 * 9  # the fixture's two GPUs


# -- persistence, uuids ------------------------------------------------------------------


def test_state_survives_a_restart_and_refuses_other_models(tmp_path):
    first = SimulatedBackend(tmp_path / "gpu01", models=["A100", "A30"])
    inst = first.create(0, "3g.20gb", Placement(4, 4), job_id="7")
    again = SimulatedBackend(tmp_path / "gpu01")  # models read from disk
    assert [g.model for g in again.gpus()] == ["A100-40GB", "A30-24GB"]
    assert again.instances() == [inst]
    assert SimulatedBackend(tmp_path / "gpu01", models=["A100-40GB", "A30-24GB"]).instances()
    with pytest.raises(DeviceError) as exc:
        SimulatedBackend(tmp_path / "gpu01", models=["H100-80GB"])
    assert "['A100-40GB', 'A30-24GB']" in str(exc.value) and "['H100-80GB']" in str(exc.value)
    again.destroy(0, inst.uuid)
    assert first.instances() == []
    assert json.loads(first.state_path.read_text())["generation"] == 1


def test_first_use_needs_models_and_known_names(tmp_path):
    with pytest.raises(DeviceError) as exc:
        SimulatedBackend(tmp_path / "empty")
    assert "no simulated GPUs" in str(exc.value)
    with pytest.raises(DeviceError) as exc:
        SimulatedBackend(tmp_path / "bad", models=["A100-40GB", "V100"])
    assert "simulated GPU 1" in str(exc.value) and "V100" in str(exc.value)


def test_corrupt_state_is_a_device_fault(a100):
    a100.state_path.write_text("{not json")
    with pytest.raises(DeviceUnavailable) as exc:
        a100.instances()
    assert str(a100.state_path) in str(exc.value) and exc.value.node_fault


def test_uuids_are_deterministic_and_new_per_creation(tmp_path):
    def run(root: Path) -> list[str]:
        b = SimulatedBackend(root / "gpu07", models=["A100-40GB", "A100-40GB"])
        x = b.create(0, "3g.20gb", Placement(0, 4))
        y = b.create(1, "3g.20gb", Placement(0, 4))
        b.destroy(0, x.uuid)
        z = b.create(0, "3g.20gb", Placement(0, 4))
        return [g.uuid for g in b.gpus()] + [x.uuid, y.uuid, z.uuid]

    one, two = run(tmp_path / "a"), run(tmp_path / "b")
    assert one == two
    gpu0, gpu1, x, y, z = one
    assert gpu0 != gpu1 and gpu0.startswith("GPU-")
    assert len({x, y, z}) == 3  # same gi id and placement again: a new uuid, as on hardware
    assert x == mig_uuid_for(gpu0, 1, 1) and z == mig_uuid_for(gpu0, 1, 3)
    other_node = SimulatedBackend(tmp_path / "gpu08", models=["A100-40GB"]).gpus()[0].uuid
    assert other_node != gpu0


# -- latency, audit ----------------------------------------------------------------------


@dataclass
class FakeTime:
    now: float = 1000.0
    slept: list[float] = field(default_factory=list)

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_create_and_destroy_take_table_1_times_scaled(tmp_path):
    t = FakeTime()
    b = SimulatedBackend(
        tmp_path / "n",
        models=["A100-40GB", "A30-24GB"],
        latency_scale=2.0,
        clock=t.clock,
        sleep=t.sleep,
    )
    a100, a30 = get_model("A100-40GB"), get_model("A30-24GB")
    i3 = b.create(0, "3g.20gb", Placement(0, 4), job_id="42")
    i1 = b.create(0, "1g.10gb", Placement(4, 2))
    j4 = b.create(1, "4g.24gb", Placement(0, 4))
    b.destroy(0, i3.uuid, job_id="42")
    assert t.slept == pytest.approx(
        [
            2 * a100.create_time(3),
            2 * a100.create_time(1),
            2 * a30.create_time(4),
            2 * a100.destroy_time(3),
        ]
    )
    log = _audit(b)
    assert [(r["op"], r["gpu"], r["profile"], r["uuid"], r["job_id"]) for r in log] == [
        ("create", 0, "3g.20gb", i3.uuid, "42"),
        ("create", 0, "1g.10gb", i1.uuid, None),
        ("create", 1, "4g.24gb", j4.uuid, None),
        ("destroy", 0, "3g.20gb", i3.uuid, "42"),
    ]
    assert log[0]["placement"] == {"start": 0, "size": 4}
    assert log[0]["start"] == 1000.0 and log[0]["end"] == pytest.approx(1000.0 + 0.40)
    assert all(r["pid"] == __import__("os").getpid() for r in log)


def test_zero_latency_scale_never_sleeps(tmp_path):
    t = FakeTime()
    b = SimulatedBackend(tmp_path / "n", models=["A100-40GB"], clock=t.clock, sleep=t.sleep)
    b.destroy(0, b.create(0, "7g.40gb", Placement(0, 8)).uuid)
    assert t.slept == []


def test_real_sleep_is_measurable(tmp_path):
    b = SimulatedBackend(tmp_path / "n", models=["H100-80GB"], latency_scale=0.25)
    t0 = time.monotonic()
    inst = b.create(0, "7g.80gb", Placement(0, 8))
    assert time.monotonic() - t0 >= 0.25 * 0.42 * 0.95
    (rec,) = _audit(b)
    assert rec["end"] - rec["start"] >= 0.25 * 0.42 * 0.95
    b.destroy(0, inst.uuid)


# -- fault injection -----------------------------------------------------------------------


def test_injected_faults_raise_the_named_error_until_removed(a100):
    a100.fault_path.write_text(
        json.dumps({"op": "create", "error": "DeviceUnavailable", "message": "GPU is lost"})
    )
    for _ in range(2):
        with pytest.raises(DeviceUnavailable) as exc:
            a100.create(0, "1g.5gb", Placement(0, 1))
        assert str(exc.value) == "GPU 0: GPU is lost" and exc.value.node_fault
    assert a100.instances() == []
    assert a100.health() == [
        f"fault injection active ({a100.fault_path}): create raises DeviceUnavailable: GPU is lost"
    ]
    a100.fault_path.unlink()
    inst = a100.create(0, "1g.5gb", Placement(0, 1))
    a100.fault_path.write_text(
        json.dumps({"op": "destroy", "error": "InstanceInUse", "message": "busy", "times": 1})
    )
    with pytest.raises(InstanceInUse):
        a100.destroy(0, inst.uuid)
    assert not a100.fault_path.exists()  # fired its one time
    a100.destroy(0, inst.uuid)
    assert [r["op"] for r in _audit(a100)] == ["create", "destroy"]


def test_fault_may_target_one_gpu_and_any_op(a100):
    a100.fault_path.write_text(
        json.dumps({"op": "any", "error": "NoPermission", "message": "not root", "gpu": 1})
    )
    inst = a100.create(0, "1g.5gb", Placement(0, 1))
    with pytest.raises(NoPermission):
        a100.create(1, "1g.6gb", Placement(0, 1))
    a100.destroy(0, inst.uuid)


def test_malformed_fault_file_says_how_to_write_it(a100):
    a100.fault_path.write_text(json.dumps({"op": "create", "error": "Oops"}))
    with pytest.raises(DeviceError) as exc:
        a100.create(0, "1g.5gb", Placement(0, 1))
    assert "malformed" in str(exc.value) and "DeviceUnavailable" in exc.value.hint


# -- concurrency -----------------------------------------------------------------------------


def _worker(state_dir: str, wishes: list, out) -> None:
    backend = SimulatedBackend(Path(state_dir))
    results = []
    for gpu, profile, start, size in wishes:
        try:
            inst = backend.create(gpu, profile, Placement(start, size), job_id=str(start))
            results.append(("ok", inst.uuid))
        except PlacementConflict:
            results.append(("conflict", None))
    out.put(results)


def test_eight_processes_never_create_overlapping_instances(tmp_path):
    state = tmp_path / "node"
    backend = SimulatedBackend(state, models=["A100-40GB", "A100-40GB"], latency_scale=0.02)
    options = [(g, n, pl.start, pl.size) for g in (0, 1) for n, pl in _options("A100-40GB")]
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    procs = [
        ctx.Process(target=_worker, args=(str(state), options[k::3] + options[:3], out))
        for k in range(8)
    ]
    for p in procs:
        p.start()
    results = [r for _ in procs for r in out.get(timeout=60)]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    made = {u for status, u in results if status == "ok"}
    live = backend.instances()
    assert {i.uuid for i in live} == made and made
    for g in (0, 1):
        placements = [i.placement for i in live if i.gpu == g]
        assert can_coexist(get_model("A100-40GB"), placements)
    log = _audit(backend)
    assert sorted(r["uuid"] for r in log) == sorted(made)
    assert all(r["op"] == "create" for r in log)
    assert len({r["pid"] for r in log}) >= 2
    for g in (0, 1):  # one reconfiguration of a GPU at a time
        spans = sorted((r["start"], r["end"]) for r in log if r["gpu"] == g)
        assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:]))


# -- open_backend and the hook's import cost ------------------------------------------------


@dataclass(frozen=True)
class _Config:
    backend: str
    simulated_dir: Path
    latency_scale: float = 0.5
    nodes: dict = field(default_factory=lambda: {"gpu01": ("A100-40GB", "A30-24GB")})
    source: Path | None = None

    def gpu_models(self, node: str) -> tuple[str, ...]:
        return self.nodes[node]

    def simulated_dir_for(self, node: str) -> Path:
        return Path(str(self.simulated_dir).replace("%n", node))


def test_open_backend_picks_the_configured_backend(tmp_path):
    cfg = _Config("simulated", tmp_path / "sim" / "%n")
    backend = open_backend(cfg, "gpu01")
    assert isinstance(backend, SimulatedBackend)
    assert backend.state_dir == tmp_path / "sim" / "gpu01"
    assert backend.latency_scale == 0.5
    assert [g.model for g in backend.gpus()] == ["A100-40GB", "A30-24GB"]
    from slurm_mig.devices.nvml import NvmlBackend

    assert isinstance(open_backend(_Config("nvml", tmp_path), "gpu01"), NvmlBackend)
    with pytest.raises(ValueError) as exc:
        open_backend(_Config("cuda", tmp_path, source=Path("/etc/x.toml")), "gpu01")
    assert "'cuda'" in str(exc.value) and "/etc/x.toml" in str(exc.value)


def test_open_backend_with_a_real_config_file(tmp_path):
    config = pytest.importorskip("slurm_mig.config")
    path = tmp_path / "config.toml"
    path.write_text(
        '[nodes]\n"gpu[01-02]" = ["A100-40GB"]\n'
        f'[device]\nbackend = "simulated"\nsimulated_dir = "{tmp_path}/sim/%n"\n'
        "latency_scale = 0.0\n"
    )
    backend = open_backend(config.load_config(path), "gpu02")
    assert backend.state_dir == tmp_path / "sim" / "gpu02"
    assert [g.model for g in backend.gpus()] == ["A100-40GB"]


def test_backends_do_not_import_heavy_modules():
    code = (
        "import sys; import slurm_mig.devices.open, slurm_mig.devices.simulated, "
        "slurm_mig.devices.nvml; "
        "bad = [m for m in ('numpy', 'torch', 'matplotlib', 'statsmodels', 'pynvml') "
        "if m in sys.modules]; print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_uuids_are_rfc4122_version_5_as_the_uuid_module_makes_them():
    import uuid

    from slurm_mig.devices.simulated import _UUID_NAMESPACE, _uuid5

    ns = uuid.UUID(bytes=_UUID_NAMESPACE)
    for name in ("node1/gpu/0", "GPU-1234/3/7", "ü"):
        assert _uuid5(name) == str(uuid.uuid5(ns, name))


# -- issue 22: extra profiles and their instance counts -----------------------------------


def test_media_extension_is_one_per_gpu_as_nvml_counts_it(a100):
    me = a100.create(0, "1g.5gb+me", Placement(2, 1))
    assert (me.profile, me.placement) == ("1g.5gb+me", Placement(2, 1))
    with pytest.raises(PlacementConflict, match="at most 1 1g.5gb\\+me"):
        a100.create(0, "1g.5gb+me", Placement(4, 1))
    plain = a100.create(0, "1g.5gb", Placement(4, 1))  # the plain 1g is not counted with it
    a100.destroy(0, me.uuid)
    assert a100.create(0, "1g.5gb+me", Placement(5, 1)).profile == "1g.5gb+me"
    assert [i.profile for i in a100.instances(0)] == ["1g.5gb", "1g.5gb+me"]
    assert plain.placement == Placement(4, 1)


def test_instance_counts_of_rtx_pro_6000_extras_and_renamed_gb200_profiles(tmp_path):
    sim = SimulatedBackend(tmp_path / "n", models=["RTXPRO6000-96GB", "GB200-186GB"])
    rtx = get_model("RTXPRO6000-96GB")
    for start in range(4):  # +gfx has no limit below its four placements
        assert sim.create(0, "1g.24gb+gfx", Placement(start, 1)).profile == "1g.24gb+gfx"
    assert rtx.profile("1g.24gb+gfx").instance_count == 4
    for inst in sim.instances(0):
        sim.destroy(0, inst.uuid)
    sim.create(0, "2g.48gb+me.all", Placement(0, 2))
    with pytest.raises(PlacementConflict, match="at most 1"):
        sim.create(0, "2g.48gb+me.all", Placement(2, 2))
    # an earlier GB200 driver's name is recorded under today's
    assert sim.create(1, "1g.24gb", Placement(0, 1)).profile == "1g.23gb"
    with pytest.raises(InvalidRequest, match="no MIG profile '1g.99gb'.*1g.23gb\\+me"):
        sim.create(1, "1g.99gb", Placement(1, 1))
