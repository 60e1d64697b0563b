"""Issue 34, hole 10: the planner's status file names every job's owner, comment and
instance: it is written 0640 whatever the umask, over a file once written 0644 too, and
the systemd units give its state directory 0750 (systemd applies StateDirectoryMode at
each start)."""

from __future__ import annotations

import configparser
import os
import stat

from support import node, write_config
from support import squeue_job as job

from slurm_mig.config import load_config
from slurm_mig.daemon.daemon import STATUS_FILE, PlannerDaemon
from slurm_mig.runtimes import RuntimeStore
from slurm_mig.sitefiles import NAMES, site_file


class Slurm:
    def jobs(self, partition=None):
        return [job("7", comment="mig:time=60")]

    def nodes(self, partition=None):
        return [node("gpu01")]


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_the_status_file_is_written_0640_whatever_the_umask(tmp_path):
    cfg = load_config(write_config(tmp_path, {"gpu01": ["A100-40GB"]}))
    status = cfg.state_dir / STATUS_FILE
    status.parent.mkdir(parents=True, exist_ok=True)
    status.write_text("{}")
    status.chmod(0o644)  # as an earlier version left it
    store = RuntimeStore(tmp_path / "profiles.sqlite")
    daemon = PlannerDaemon(cfg, Slurm(), store, b"k" * 32, dry_run=True, clock=lambda: 2000.0)
    old = os.umask(0)
    try:
        report = daemon.run_cycle()  # a dry run: nothing published yet
        assert report.error is None and status.read_text() == "{}"
        daemon.publish(report)
    finally:
        os.umask(old)
    assert _mode(status) == 0o640
    assert '"cycle"' in status.read_text()
    assert not [p.name for p in status.parent.iterdir() if p.name.startswith(".")]  # no leftovers


def test_the_units_state_directory_is_0750():
    units = [n for n in NAMES if n.endswith(".service")]
    modes = {}
    for name in units:
        unit = configparser.ConfigParser(strict=False, interpolation=None)
        unit.optionxform = str  # systemd's keys are case-sensitive
        unit.read_string(site_file(name).read_text())
        service = unit["Service"] if unit.has_section("Service") else {}
        if "StateDirectory" in service:
            modes[name] = service.get("StateDirectoryMode")
    assert modes, "no unit sets a StateDirectory"
    assert set(modes.values()) == {"0750"}, modes
