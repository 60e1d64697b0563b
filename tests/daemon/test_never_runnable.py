"""A job whose memory need exceeds every MIG profile of its partition (issue 21):
job_submit.lua refuses it at sbatch when MAX_MIG_MEM is set (tests/test_hints.py,
tests/e2e/test_job_submit.py); one that got past (submitted before the limit was set,
or through a site without it) stays held with the reason, for its owner (explain) and
the admin (status)."""

from __future__ import annotations

from dataclasses import replace

from support import plan_jobs
from support import squeue_job as job

from slurm_mig.daemon.cycle.actions import Note
from slurm_mig.daemon.statusview import build_view
from slurm_mig.explain import explain
from slurm_mig.hints import largest_profile_memory, parse_hints

NOW = 10_000.0
MODELS = ("A100-40GB",)


def _cycle(jobs):
    return plan_jobs(jobs, now=NOW)


def test_a_never_runnable_job_is_held_with_the_reason_in_explain_and_status():
    big = job("7", comment="nightly mig:key=llm,mem=100G")
    small = job("8", comment="mig:mem=12G,time=60")
    result = _cycle([big, small])
    assert "8" in result.planned and "7" not in result.planned
    [note] = [a for a in result.actions if isinstance(a, Note)]
    assert note.job_id == "7"
    why = (
        "memory need 100.0 GiB is more than the largest MIG profile offers (7g.40gb of "
        "A100-40GB: 39.6 GiB); lower mem= in the job's --comment or submit it to a "
        "partition with larger GPUs"
    )
    assert note.text == why
    # the daemon writes the note; the owner and the admin then read it
    fields = dict(note.fields)
    noted = replace(big, comment=fields["Comment"], admin_comment=fields["AdminComment"])
    assert noted.comment == f"nightly mig:key=llm,mem=100G [slurm-mig: {why}]"
    told = explain(noted, None, NOW)
    assert f"not planned: {why}" in told["lines"]
    [row] = build_view({}, [noted], {}, NOW).queue
    assert (row.job, row.state, row.why) == ("7", "noted", f"not planned: {why}")
    # the limit job_submit.lua would have refused it with, from the same models
    limit = largest_profile_memory(MODELS)
    assert parse_hints("mig:mem=39.6G", max_mem=limit).mem <= limit
