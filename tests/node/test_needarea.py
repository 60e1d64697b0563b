"""mig-run's need area (`slurm_mig.node.needarea`): a file system of one page per job,
made by the Prolog only when reports go somewhere, removed by every Epilog."""

from __future__ import annotations

import errno
import os

import pytest
from hooksite import T0, make_site, run

from slurm_mig.node import needarea
from slurm_mig.node.hooks import epilog_main, prolog_main


def _with_reports(site) -> None:
    text = site.config.read_text()
    site.config.write_text(text.replace("[planner]\n", '[planner]\nreports = "127.0.0.1:9"\n'))


def test_the_prolog_makes_the_area_only_for_reports_and_every_epilog_removes_it(tmp_path, capsys):
    site = make_site(tmp_path)
    env = site.env("42", site.comment("42", gpu=1))
    need = needarea.need_path(site.run_dir, "42")
    assert run(prolog_main, env, capsys)[0] == 0
    assert not need.parent.exists()  # reports = "": nothing would read it
    assert run(epilog_main, env, capsys, t=T0 + 30)[0] == 0
    _with_reports(site)
    env = site.env("43", site.comment("43", gpu=1))
    need = needarea.need_path(site.run_dir, "43")
    assert run(prolog_main, env, capsys, t=T0 + 40)[0] == 0
    assert need.is_file() and need.stat().st_size == 0
    site.config.write_text(site.config.read_text().replace('reports = "127.0.0.1:9"\n', ""))
    assert (
        run(epilog_main, env, capsys, t=T0 + 70)[0] == 0
    )  # reports off since: removed all the same
    assert not need.parent.exists()
    assert sorted(p.name for p in (site.run_dir / "task").iterdir()) == []


def test_an_area_that_cannot_be_mounted_leaves_nothing_and_says_why(tmp_path, monkeypatch):
    def refused(path):
        raise OSError(errno.EPERM, "Operation not permitted", str(path))

    monkeypatch.setattr(needarea, "mount_area", refused)
    (tmp_path / "task").mkdir()
    with pytest.raises(OSError):
        needarea.make_need_file(tmp_path, "42", 4242)
    assert list((tmp_path / "task").iterdir()) == []


def test_a_need_file_of_an_older_version_is_removed(tmp_path):
    (tmp_path / "task").mkdir()
    old = tmp_path / "task" / "42.need"  # before issue 34: a plain file, not an area
    old.write_bytes(b"x" * 10_000)
    needarea.drop_need_area(tmp_path, "42")
    assert not old.exists()
    old.write_bytes(b"x")
    needarea.make_need_file(tmp_path, "42", 4242)  # and the Prolog replaces one
    assert needarea.need_path(tmp_path, "42").is_file()
    needarea.drop_need_area(tmp_path, "42")
    needarea.drop_need_area(tmp_path, "42")  # nothing there: nothing to do
    assert not old.exists()


@pytest.mark.real_mount
@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_the_area_is_a_file_system_of_one_page(tmp_path):
    (tmp_path / "task").mkdir()
    try:
        needarea.make_need_file(tmp_path, "42", 4242)
    except OSError as exc:
        pytest.skip(f"cannot mount a tmpfs here: {exc}")
    path = needarea.need_path(tmp_path, "42")
    try:
        assert os.statvfs(path.parent).f_blocks * os.statvfs(path.parent).f_frsize <= 4096
        assert os.stat(path.parent).st_dev != os.stat(tmp_path).st_dev
        fd = os.open(path, os.O_WRONLY)
        try:
            with pytest.raises(OSError) as got:
                for _ in range(64):
                    os.write(fd, b"x" * 4096)
        finally:
            os.close(fd)
        assert got.value.errno == errno.ENOSPC and path.stat().st_size <= 4096
        assert needarea.read_need(path, 4242, 40 << 30, None)[1].endswith("bytes; ignored")
    finally:
        needarea.drop_need_area(tmp_path, "42")
    assert not path.parent.exists()
