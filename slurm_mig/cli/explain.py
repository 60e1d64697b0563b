"""``slurm-mig explain JOB``: why a job waits, where it is planned and when it is
projected to start, for its owner (no root needed; slurm_mig/explain.py)."""

from __future__ import annotations

import argparse
import json
import time

from .common import Formatter, wrap


def add_parser(sub) -> None:
    p = sub.add_parser(
        "explain",
        formatter_class=Formatter,
        help="say where a job is planned, why it waits and when it should start (users)",
        description=wrap(
            "For one job: where the planner placed it (node, GPU, profile, placement), "
            "why it waits (its batch window, its slices busy until a time, its memory "
            "need from its hint or a restart, PCIe, a deadline), when it is projected to "
            "start, and what its mig: hint said (a job of several slices, mig:tasks=N: "
            "its N instances, e.g. '4x1g.5gb (4 instances of 1g.5gb in region 4g at "
            "placement 0:4)'). Reads only what the job's owner may "
            "read: squeue's view of the job (Comment, AdminComment) and the planner's "
            "public summary ([paths] public_file). When that summary is older than "
            "3 x [planner] cycle + 60 s, it says first that the planner seems to have "
            "stopped."
        ),
    )
    p.add_argument("job", metavar="JOB", help="the Slurm job id")
    p.add_argument("--config", metavar="PATH", help="config file (default: as the planner)")
    p.add_argument("--json", action="store_true", help="print the explanation as JSON")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from ..config import ConfigError, load_config
    from ..daemon.public import read_public
    from ..explain import NO_SUMMARY, explain
    from ..safetext import printable
    from ..slurm.client import SlurmClient, SlurmError

    job_id = args.job.strip()
    if not (0 < len(job_id) <= 64 and all(c.isdigit() or c == "_" for c in job_id)):
        raise ValueError(f"JOB {args.job[:30]!r} is not a Slurm job id; give e.g. 4242")
    partition, public, cycle, no_summary = None, None, None, NO_SUMMARY
    try:
        config = load_config(args.config)
        partition, cycle = config.partition, config.cycle
        if config.public_file:
            public = read_public(config.public_file)
            no_summary = f"cannot read the planner's summary {config.public_file}"
    except ConfigError:
        no_summary = "the slurm-mig config cannot be read, nor its [paths] public_file"
    try:
        jobs = SlurmClient().jobs(partition)
    except SlurmError as exc:
        raise ValueError(f"cannot read the queue: {' '.join(str(exc).split())}") from None
    found = [j for j in jobs if j.job_id == job_id]
    if not found:
        where = f" in partition {partition}" if partition else ""
        raise ValueError(f"no job {job_id}{where} in the queue (finished long ago, or not yours?)")
    got = explain(found[0], public, time.time(), cycle, no_summary)
    if args.json:
        print(json.dumps(got, indent=1))
        return 0
    name = printable(found[0].name, 200)
    print(f"job {job_id}{f' ({name})' if name else ''}: {got['state'].lower()}")
    for line in got["lines"]:
        print(f"  {line}")
    return 0
