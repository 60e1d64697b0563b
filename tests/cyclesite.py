"""One A100's planner cycle for the observability tests (status, web page, metrics,
public summary, ``avail``): squeue jobs with the daemon's estimator, the cycle's plan
and its report with the projection the daemon adds."""

from __future__ import annotations

from support import squeue_job as job

from slurm_mig.daemon.cycle import CycleInput, plan_cycle
from slurm_mig.daemon.daemon import CycleReport, Estimator
from slurm_mig.daemon.jobtimes import project_jobs

NOW = 10_000.0


class StubConfig:
    """The config fields the estimator reads."""

    default_runtime = 600.0
    serial_fraction = 0.3


def cycle_snapshot(jobs, now=NOW, plans=None) -> CycleInput:
    est = Estimator(StubConfig(), None)
    return CycleInput(
        now=now,
        jobs=tuple(jobs),
        nodes={"gpu01": ("A100-40GB",)},
        estimates={j.job_id: est(j, ["A100-40GB"]) for j in jobs},
        batch_window=0.0,
        release_ahead=0.0,
        plans=plans,
        algorithm="far",  # standing plans to report
    )


def observed_cycle(jobs, now=NOW, number=1, plans=None):
    """The snapshot, result and report of cycle ``number`` over ``jobs`` on one A100
    (``plans``: the standing plans it starts from)."""
    snap = cycle_snapshot(jobs, now, plans)
    result = plan_cycle(snap)
    report = CycleReport(number, now, now + 0.25, result, None, policy="far", batch_window=0.0)
    report.extra = {"projected": project_jobs(result.snapshots, result.decisions)}
    return snap, result, report


def planned_jobs():
    return [job(str(i), comment=f"mig:time={100 + 10 * i},mem=15G") for i in range(1, 6)]
