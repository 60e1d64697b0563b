"""Fixtures of the demo harness's tests."""

from __future__ import annotations

import pytest

from slurm_mig.demo.slurmconf import LayoutInstance
from slurm_mig.geometry import Placement

A100 = "A100-40GB"


@pytest.fixture
def mig_layout() -> list[LayoutInstance]:
    """A fixed MIG layout of two GPUs: 2g and 3g on GPU 1, a whole 7g on GPU 0."""
    return [
        LayoutInstance(1, A100, "2g.10gb", Placement(0, 2)),
        LayoutInstance(1, A100, "3g.20gb", Placement(4, 4)),
        LayoutInstance(0, A100, "7g.40gb", Placement(0, 8)),
    ]
