"""The tests, laid out like the package: ``tests/<package>/test_<module>.py`` tests
``slurm_mig/<package>/<module>.py`` (``tests/test_<module>.py`` a top-level module),
``tests/benchmarks/`` the scripts of ``benchmarks/``, ``tests/e2e/`` a real Slurm.

The shared helpers (``support``, ``fake_pynvml``, ``hooksite``, ``cyclesite``, ...)
live in this folder; pytest puts it on ``sys.path`` for this conftest, so every test
imports them by name. Fixtures several folders use are defined here, once."""

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _need_area_without_mount(request, monkeypatch):
    """The Prolog's per-job need area is a tmpfs mount (`slurm_mig.node.needarea`): in
    the unit tests a plain directory, so that no test leaves a mount behind whoever runs
    it; a test marked ``real_mount`` keeps the kernel's (the e2e hooks always do)."""
    if request.node.get_closest_marker("real_mount") is None:
        from slurm_mig.node import needarea

        monkeypatch.setattr(needarea, "mount_area", lambda path: None)


def pytest_configure(config):
    config.addinivalue_line("markers", "real_mount: the need area's real tmpfs mount (root)")


@pytest.fixture
def site(tmp_path: Path):
    """One node's worth of slurm-mig for the hook tests (`hooksite.make_site`)."""
    from hooksite import make_site

    return make_site(tmp_path)
