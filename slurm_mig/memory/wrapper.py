"""``mig-run``: run a job under the memory probe, forecast its peak, and restart it on a
larger MIG slice before it runs out of memory (or right after it did).

The parent (this module) launches the command in its own process group with the probe
injected (``inject/sitecustomize.py`` first on PYTHONPATH), tails the probe's samples,
feeds them to the ``Forecaster`` and switches the probe's CPU tracking on and off through
a control file. On a restart decision it stops the job (SIGTERM, ``--grace`` seconds,
SIGKILL) and restarts it on the smallest profile of the GPU model that covers the need:

- standalone: through the device backend (``--sim-dir`` or ``--config``): create the
  larger instance, destroy the old one, relaunch with the new ``CUDA_VISIBLE_DEVICES``
  (and, with ``--emulate``, the new emulated capacity);
- slurm: record the need for the job's key, put ``mem=<need>`` into the job's ``mig:``
  hint and ``scontrol requeue`` the job, so the planner gives it a larger slice.

A real out-of-memory error takes the same path with the observed peak. A forecast that
cannot be acted on (restart limit, no larger profile, no backend) is one warning and the
job goes on, since the forecast may be pessimistic; a real OOM then ends mig-run with the
job's status and one line saying why. The child's exit status passes through; SIGTERM,
SIGINT, SIGHUP, SIGUSR1 and SIGUSR2 reach the child. The job's slice is ``--slice`` or
``--capacity``, else the MIG instance in CUDA_VISIBLE_DEVICES as the node's device
backend reports it. Bad input is one line ``mig-run: error: ...`` and exit status 2.

The pieces: ``options`` (the command line), ``slices`` (the job's slice and the backend's
instances), ``modes`` (standalone or slurm), ``sources`` (the probe or NVML), ``watch``
(one launch) and ``runner`` (the loop); this module is the entry point.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace

from ..hints import parse_hints
from .modes import job_comment
from .options import EXIT_FAILED, EXIT_USAGE, PROG, UsageError, parse_options
from .runner import Runner
from .slices import RestartError
from .sources import missing_forecast_deps

__all__ = ["hinted_iterations", "main"]


def hinted_iterations(env: Mapping[str, str]) -> int | None:
    """Inside a Slurm job without --iterations: the ``iters=`` of the job's hint, if any
    (the forecast horizon). Best effort: no Slurm, no hint or a bad hint give None."""
    job = env.get("SLURM_JOB_ID")
    if not job:
        return None
    try:
        comment = job_comment(env, job, timeout=10)
        return parse_hints(comment).iters if comment is not None else None
    except Exception:  # the horizon then falls back to the look-ahead
        return None


def _say_error(exc: Exception) -> None:
    print(f"{PROG}: error: {' '.join(str(exc).split())}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """The ``mig-run`` console script."""
    try:
        opts = parse_options(sys.argv[1:] if argv is None else argv)
        missing = missing_forecast_deps()
        if missing:
            raise UsageError(
                f"the forecaster needs {', '.join(missing)}, which {sys.executable} lacks; "
                "install slurm-mig with pip (or use the Python that has them)"
            )
        if opts.iterations is None:
            opts = replace(opts, iterations=hinted_iterations(os.environ))
        runner = Runner(opts)
    except UsageError as exc:
        _say_error(exc)
        return EXIT_USAGE
    except RestartError as exc:  # the device backend failed before the job started
        _say_error(exc)
        return EXIT_FAILED
    return runner.run()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
