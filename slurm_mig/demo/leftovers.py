"""What a test run left running: `make test` ends with this check, which names every
process the run started that still runs (one line each: pid, command, why it is ours),
ends it and fails the run.

`make test` exports ``SLURM_MIG_TEST_RUN=<id>`` (`RUN_VAR`), fresh for each run: every
process the run starts inherits it (LocalSlurm passes it to its daemons and client
commands, sbatch to the jobs). Slurm 24.11's and later slurmstepd overwrite their
environment block (/proc shows none), so each LocalSlurm started under a run also
registers its directory (`register`): a process that works in or holds open a path
under one is the run's too (slurmstepd holds slurmd's log there), and so is one that
shares a node's private mount namespace with a process of the run (`procfs.find`).
Processes of other runs (another clone's `make test` on the same machine) carry
another id and other directories: they are neither reported nor ended.

    python -m slurm_mig.demo.leftovers            # the run of $SLURM_MIG_TEST_RUN
    python -m slurm_mig.demo.leftovers --run ID
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from . import procfs

RUN_VAR = "SLURM_MIG_TEST_RUN"
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def run_id() -> str | None:
    """The id of the test run this process belongs to ($SLURM_MIG_TEST_RUN), if valid."""
    value = os.environ.get(RUN_VAR, "")
    return value if RUN_ID.fullmatch(value) else None


def registry(run: str) -> Path:
    """The file listing the directories of the clusters test run ``run`` started."""
    return Path(tempfile.gettempdir()) / f"slurm-mig-run-{run}.dirs"


def register(directory: Path) -> None:
    """Record ``directory`` (a cluster's) as the current test run's, when there is one:
    what holds a path under it is the run's even once its environment reads empty."""
    run = run_id()
    if run is None:
        return
    with open(registry(run), "a") as f:  # one short append: whole lines, also at once
        f.write(f"{directory}\n")


def registered(run: str) -> list[str]:
    """The directories the clusters of test run ``run`` registered (absolute ones)."""
    try:
        lines = registry(run).read_text().splitlines()
    except OSError:
        return []
    return [line for line in lines if line.startswith("/")]


def find(run: str) -> list[procfs.Found]:
    """The running processes of test run ``run``; never this process or its ancestors
    (`make test`'s shell carries the mark too)."""
    exclude = procfs.ancestors(os.getpid())
    return procfs.find([f"{RUN_VAR}={run}"], registered(run), exclude)


def check(run: str, grace: float = 2.0, out=sys.stdout) -> int:
    """Name and end what test run ``run`` left running; 1 when it left anything, else 0.
    Removes the run's registry."""
    found = find(run)
    for f in found:
        print(f"leftover: pid {f.pid}: {f.command}: {f.reason}", file=out)
    left = procfs.end(found, grace) if found else []
    for f in left:
        print(f"leftover: pid {f.pid} still runs after SIGKILL: {f.command}", file=out)
    if found:
        print(
            f"leftovers: test run {run} left {len(found)} process(es) running; "
            f"{len(found) - len(left)} ended",
            file=out,
        )
    else:
        print(f"leftovers: test run {run} left no process running", file=out)
    registry(run).unlink(missing_ok=True)
    return 1 if found else 0


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: check the run of --run or $SLURM_MIG_TEST_RUN (2 without one)."""
    parser = argparse.ArgumentParser(prog="leftovers", description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", default=None, help=f"the run's id (default: ${RUN_VAR})")
    parser.add_argument(
        "--grace", type=float, default=2.0, help="seconds between SIGTERM and SIGKILL"
    )
    args = parser.parse_args(argv)
    run = args.run if args.run is not None else run_id()
    if run is None or not RUN_ID.fullmatch(run):
        print(f"leftovers: no valid test run id (--run or ${RUN_VAR})", file=sys.stderr)
        return 2
    return check(run, args.grace)


if __name__ == "__main__":
    sys.exit(main())
