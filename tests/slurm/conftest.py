"""Fixtures of the tests in tests/slurm: ``site``, one node's worth of slurm-mig for the
hook tests (`hooksite.make_site`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hooksite import Site, make_site


@pytest.fixture
def site(tmp_path: Path) -> Site:
    return make_site(tmp_path)
