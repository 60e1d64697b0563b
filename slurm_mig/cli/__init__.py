"""The ``slurm-mig`` command: one module per subcommand, each with ``add_parser(sub)``
and ``run(args)``; this module assembles them and runs one.

Results go to stdout, diagnostics (``-v``) and errors to stderr. Bad input of any
kind ends with one line ``slurm-mig: error: <message>`` and exit status 2.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from ..safetext import LogEscaper
from . import (
    avail,
    bench,
    bound,
    check_config,
    demo,
    explain,
    forecast,
    gres_conf,
    keygen,
    node_flush,
    node_sweep,
    plan,
    planner,
    report,
    simulate,
    site_files,
    status,
    train_controller,
    uninstall,
    validate,
)
from .common import INPUT_ERRORS, PROG, Formatter, Parser, version, wrap

__all__ = ["build_parser", "main"]

log = logging.getLogger("slurm_mig")

# in the order `slurm-mig --help` lists them
COMMANDS = (
    plan,
    validate,
    demo,
    bench,
    check_config,
    keygen,
    site_files,
    gres_conf,
    forecast,
    planner,
    status,
    explain,
    avail,
    report,
    node_flush,
    node_sweep,
    bound,
    train_controller,
    uninstall,
)


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog=PROG,
        formatter_class=Formatter,
        description=wrap(
            "Plan NVIDIA MIG repartitioning for a batch of GPU jobs: how many compute "
            "slices each job gets, on which GPU and instance placement it runs, in which "
            "order, and when instances are created and destroyed."
        ),
        epilog=f"Run '{PROG} COMMAND --help' for the inputs and defaults of a command.",
    )
    p.add_argument("--version", action="version", version=f"{PROG} {version()}")
    p.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="log diagnostics to stderr (-vv for debug detail)",
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        command.add_parser(sub)
    simulate.add_parser(sub, Formatter)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = (
        logging.WARNING
        if not args.verbose
        else (logging.INFO if args.verbose == 1 else logging.DEBUG)
    )
    _setup_logging(level)
    try:
        status = args.handler(args)
        sys.stdout.flush()  # a closed pipe shows here, not in an exit-time warning
        return status
    except BrokenPipeError:
        return _broken_pipe()
    except INPUT_ERRORS as exc:
        message = " ".join(str(exc).split()) or exc.__class__.__name__
        print(f"{PROG}: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


def _setup_logging(level: int) -> None:
    """Diagnostics of the whole package to the current stderr, once per call of main."""
    for handler in list(log.handlers):
        if getattr(handler, "_slurm_mig_cli", False):
            log.removeHandler(handler)
    handler = _StderrHandler()
    handler.setFormatter(logging.Formatter(f"{PROG}: %(levelname)s: %(message)s"))
    handler.addFilter(LogEscaper())  # a job name's newline or escape is shown, not obeyed
    handler._slurm_mig_cli = True  # type: ignore[attr-defined]
    log.addHandler(handler)
    log.setLevel(level)
    log.propagate = False


class _StderrHandler(logging.StreamHandler):
    """A handler that writes to whatever ``sys.stderr`` is when it emits (a caller that
    swaps stderr, as tests and embedding programs do, never leaves it a closed stream)."""

    @property  # type: ignore[override]
    def stream(self):
        """The current ``sys.stderr``."""
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        pass


def _broken_pipe() -> int:
    """The reader went away (e.g. '| head'): stop quietly, as other Unix tools do."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return 141  # 128 + SIGPIPE, the status a shell shows for a tool killed by the pipe


if __name__ == "__main__":
    sys.exit(main())
