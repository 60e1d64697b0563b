"""pytest set-up of the tracked benchmarks (``make bench``): the load average and CPU
count go into the JSON's machine_info, beside the figures they make noisy."""

from __future__ import annotations

import os

import pytest


def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict) -> None:
    """Adds ``loadavg`` (1, 5, 15 min at the start of the run) and ``cpus``."""
    machine_info["loadavg"] = [round(x, 2) for x in os.getloadavg()]
    machine_info["cpus"] = os.cpu_count()
