"""Recorded squeue/sinfo/scontrol output of each Slurm release (tests/fixtures/slurm/<release>/) and the jobs the client reads from it."""

from __future__ import annotations

import json
from pathlib import Path

from slurm_mig.slurm.client import Job, job_from_json

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "slurm"


RELEASES = sorted(p.name for p in FIXTURES.iterdir() if (p / "expected.json").exists())


def load(release: str, name: str) -> dict:
    return json.loads((FIXTURES / release / name).read_text())


def jobs_of(release: str, name: str = "squeue.json") -> dict[str, Job]:
    return {j.job_id: j for j in map(job_from_json, load(release, name)["jobs"])}
