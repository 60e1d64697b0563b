"""`apply.apply_actions`' holds (issue 34, hole 8): plain holds go out as one list call;
a hold that clears something (an earlier plan's token and GRES record, the planner's
dependency) is one ``scontrol update`` with ``Priority=0``, so a job held again can
never start on an old plan and Slurm calls per job do not grow."""

from __future__ import annotations

from slurm_mig.daemon.apply import apply_actions
from slurm_mig.daemon.cycle import Hold
from slurm_mig.slurm.client import SlurmError


class _Client:
    """Records each call; ``refuse``: {job id: the update's error}."""

    def __init__(self, refuse: dict[str, str] | None = None) -> None:
        self.calls: list[tuple] = []
        self.refuse = refuse or {}

    def hold_jobs(self, ids):
        self.calls.append(("hold", tuple(ids)))
        return {}

    def release_jobs(self, ids):
        self.calls.append(("release", tuple(ids)))
        return {}

    def update_job(self, job_id, **fields):
        self.calls.append(("update", job_id, fields))
        if job_id in self.refuse:
            raise SlurmError(self.refuse[job_id])


def _apply(actions, client):
    return apply_actions(actions, client, key=b"k" * 32, clock=lambda: 1000.0)


def test_a_job_held_again_loses_token_and_gres_in_the_update_that_holds_it() -> None:
    holds = [
        Hold("1", "not planned yet"),
        Hold("2", "not planned yet"),
        Hold("3", "released, but x", scrub=True, comment="run"),
        Hold("4", "released, but y", clear_dependency=True, scrub=True, comment=None),
        Hold("5", "held by its owner after release", clear_dependency=True),
    ]
    client = _Client()
    report = _apply(holds, client)
    assert client.calls == [
        ("hold", ("1", "2")),
        ("update", "3", {"Priority": "0", "Comment": "run", "TresPerNode": ""}),
        ("update", "4", {"Priority": "0", "TresPerNode": "", "Dependency": "0"}),
        ("update", "5", {"Priority": "0", "Dependency": "0"}),
    ]
    assert report.calls == 4 and report.applied == 5 and not report.failed


def test_a_job_started_meanwhile_keeps_its_token_and_nothing_fails() -> None:
    """Slurm refuses the whole update of a started job (TresPerNode is pending-only:
    tests/e2e/test_started_job_writes.py): it runs on its plan, which it keeps."""
    client = _Client({"3": "job 3: Job is no longer pending execution"})
    report = _apply([Hold("3", "released, but x", scrub=True, comment="run")], client)
    assert not report.failed and report.applied == 1


def test_a_failed_scrub_fails_its_job() -> None:
    client = _Client({"3": "Socket timed out"})
    report = _apply([Hold("3", "released, but x", scrub=True, comment="run")], client)
    assert [j for j, _ in report.failed] == ["3"] and report.applied == 0
