"""Where a job's deadline comes from on Slurm: squeue's ``deadline`` (sbatch
--deadline), else the ``deadline=`` hint (a duration after submission or a UTC date),
else none; a malformed hint gives none (its estimate reports the problem)."""

from __future__ import annotations

from slurm_mig.daemon.cycle import job_deadline
from slurm_mig.slurm.client import job_from_json


def _job(**extra):
    base = {
        "job_id": 7,
        "name": "k",
        "job_state": "PENDING",
        "submit_time": 1_000_000,
        "comment": "",
        "deadline": 0,  # 22.05: 0 when unset
    }
    base.update(extra)
    return job_from_json(base)


def test_squeue_deadline_is_read_in_both_formats():
    assert _job().deadline is None
    assert _job(deadline=1_003_600).deadline == 1_003_600.0
    # 23.02+: {"set": .., "infinite": .., "number": ..}
    assert _job(deadline={"set": True, "infinite": False, "number": 1_003_600}).deadline == (
        1_003_600.0
    )
    assert _job(deadline={"set": False, "infinite": False, "number": 0}).deadline is None


def test_slurm_deadline_wins_over_the_hint():
    job = _job(deadline=1_003_600, comment="mig:key=k,deadline=10m")
    assert job_deadline(job) == 1_003_600.0


def test_duration_hint_counts_from_submission():
    assert job_deadline(_job(comment="run mig:deadline=10m")) == 1_000_600.0
    assert job_deadline(_job(comment="mig:key=k,deadline=1:00:00")) == 1_003_600.0


def test_date_hint_is_absolute_even_when_passed():
    assert job_deadline(_job(comment="mig:deadline=2001-01-01T00:00Z")) == 978307200.0


def test_no_or_bad_hint_gives_no_deadline():
    assert job_deadline(_job(comment="mig:key=k")) is None
    assert job_deadline(_job(comment="mig:deadline=soon")) is None
    assert job_deadline(_job(comment="deadline=10m")) is None  # not a mig: word
