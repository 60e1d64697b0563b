"""Node metrics written by the real Prolog and Epilog (simulated GPUs), parsed with
prometheus_client's own text parser, as node_exporter's textfile collector would."""

from __future__ import annotations

import json
import stat

from hooksite import NODE, T0, make_site, run
from prometheus_client.parser import text_string_to_metric_families

from slurm_mig.node import nodemetrics
from slurm_mig.node.hooks import epilog_main, prolog_main


def _samples(path) -> dict[tuple[str, tuple], float]:
    out = {}
    for family in text_string_to_metric_families(path.read_text()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _value(samples, name, **labels) -> float | None:
    return samples.get((name, tuple(sorted({k: str(v) for k, v in labels.items()}.items()))))


def test_prolog_and_epilog_write_instances_slices_and_counters(tmp_path, capsys):
    site = make_site(tmp_path)
    path = site.run_dir / "node-metrics.prom"
    env = site.env("42", site.comment("42"))
    assert run(prolog_main, env, capsys)[0] == 0
    m = _samples(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert (
        _value(m, "slurm_mig_node_instances", node=NODE, gpu=1, profile="3g.20gb", state="job") == 1
    )
    assert _value(m, "slurm_mig_node_slices_busy", node=NODE, gpu=1, model="A100-40GB") == 3
    assert _value(m, "slurm_mig_node_slices_busy", node=NODE, gpu=0, model="A100-40GB") == 0
    assert _value(m, "slurm_mig_node_slices_total", node=NODE, gpu=1, model="A100-40GB") == 7
    assert _value(m, "slurm_mig_node_instance_creates_total", node=NODE, profile="3g.20gb") == 1
    assert (
        _value(m, "slurm_mig_node_instance_creates_seconds_total", node=NODE, profile="3g.20gb")
        >= 0
    )
    assert _value(m, "slurm_mig_node_instance_destroys_total", node=NODE, profile="3g.20gb") is None

    assert run(epilog_main, env, capsys, t=T0 + 65.0)[0] == 0
    m = _samples(path)
    assert (
        _value(m, "slurm_mig_node_instances", node=NODE, gpu=1, profile="3g.20gb", state="job")
        is None
    )
    assert _value(m, "slurm_mig_node_slices_busy", node=NODE, gpu=1, model="A100-40GB") == 0
    assert _value(m, "slurm_mig_node_instance_creates_total", node=NODE, profile="3g.20gb") == 1
    assert _value(m, "slurm_mig_node_instance_destroys_total", node=NODE, profile="3g.20gb") == 1

    # a second job counts on; a refused one is counted by its action
    env2 = site.env("43", site.comment("43"))
    run(prolog_main, env2, capsys)
    run(epilog_main, env2, capsys)
    run(prolog_main, site.env("44", "no token"), capsys)
    m = _samples(path)
    assert _value(m, "slurm_mig_node_instance_creates_total", node=NODE, profile="3g.20gb") == 2
    assert _value(m, "slurm_mig_node_refusals_total", node=NODE, action="requeue") == 1


def test_a_device_fault_is_counted_and_the_restarted_run(tmp_path, capsys):
    site = make_site(tmp_path)
    env = site.env("42", site.comment("42", restart=1), restart=1)
    assert run(prolog_main, env, capsys)[0] == 0
    grown = site.env("44", site.comment("44", restart=2, text="mig:mem=30G", gpu=0), restart=2)
    assert run(prolog_main, grown, capsys)[0] == 0
    site.fault("create", "DeviceUnavailable", "Unknown Error (NVML 999)")
    assert (
        run(prolog_main, site.env("43", site.comment("43", gpu=0, placement=(0, 4))), capsys)[0]
        == 1
    )
    m = _samples(site.run_dir / "node-metrics.prom")
    assert _value(m, "slurm_mig_node_job_restarts_total", node=NODE, cause="other") == 1
    assert _value(m, "slurm_mig_node_job_restarts_total", node=NODE, cause="memory_hint") == 1
    assert _value(m, "slurm_mig_node_device_faults_total", node=NODE, hook="") == 1


def test_metrics_file_setting_and_unwritable_target_is_a_warning(tmp_path, capsys):
    site = make_site(tmp_path)
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where a directory should be")
    text = site.config.read_text().replace(
        "[hooks]\n", f'[hooks]\nmetrics_file = "{blocked}/slurm-mig-%n.prom"\n'
    )
    site.config.write_text(text)
    rc, _, err = run(prolog_main, site.env("42", site.comment("42")), capsys)
    assert rc == 0  # the job still gets its instance
    assert site.state.job("42") is not None
    assert any("metrics not written to" in line and "slurm-mig-node1.prom" in line for line in err)


def test_render_escapes_labels_and_bounds_counter_series():
    counters = nodemetrics.add_events({}, [("create", 'a"b\\c', 0.5), ("bogus", "x", 1.0)])
    assert counters == {'create|a"b\\c': 1.0, 'create|a"b\\c|s': 0.5}
    text = nodemetrics.render("n1", ["A100-40GB"], [], counters, 1.0)
    [fam] = [f for f in text_string_to_metric_families(text) if f.name.endswith("creates")]
    assert fam.samples[0].labels == {"node": "n1", "profile": 'a"b\\c'}
    many = nodemetrics.add_events({}, [("create", str(i), 0.0) for i in range(2000)])
    assert len(many) <= nodemetrics.MAX_KEYS + 1


def test_epilog_appends_an_accounting_line_the_daemon_gathers(tmp_path, capsys):
    from slurm_mig.slurm import accounting

    site = make_site(tmp_path)
    env = site.env("42", site.comment("42", restart=1), restart=1)
    env |= {"SLURM_JOB_USER": "alice", "SLURM_JOB_ACCOUNT": "physics"}
    run(prolog_main, env, capsys)
    run(epilog_main, env, capsys, t=T0 + 65.0)
    bad = site.env("43", site.comment("43"), SLURM_JOB_USER="x;rm -rf", SLURM_JOB_ACCOUNT="a" * 99)
    run(prolog_main, bad, capsys)
    run(epilog_main, bad, capsys, t=T0 + 35.0)
    log = site.run_dir / "private" / accounting.LOG
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert [(x["job_id"], x["user"], x["account"]) for x in lines] == [
        ("42", "alice", "physics"),
        ("43", "", ""),
    ]
    state = tmp_path / "state"
    state.mkdir()
    assert accounting.gather(state, {NODE: log}) == 2
    assert accounting.gather(state, {NODE: log}) == 0  # read once
    [alice] = [r for r in accounting.report(state, "user") if r["user"] == "alice"]
    assert alice["runs"] == 1 and alice["restarts"] == 1
    assert alice["seconds"] == 60.0 and alice["slice_seconds"] == 180.0
    assert alice["gpu_hours"] == round(180.0 / 7 / 3600, 6)
    assert alice["energy"] == "modelled" and alice["energy_kwh"] > 0
    [prof] = accounting.report(state, "profile")
    assert (prof["profile"], prof["runs"]) == ("3g.20gb", 2)
    assert accounting.report(state, "user", since=T0 + 1e6) == []
