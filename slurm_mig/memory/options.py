"""``mig-run``'s command line: the Options, the parser and its checks (one line each)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..argtypes import int_at_least, number_within
from ..geometry import MODELS
from ..hints import HintError, parse_size

__all__ = [
    "EXIT_FAILED",
    "EXIT_REQUEUED",
    "EXIT_USAGE",
    "PROG",
    "Options",
    "UsageError",
    "build_parser",
    "parse_options",
]

PROG = "mig-run"
EXIT_USAGE = 2
EXIT_FAILED = 1
EXIT_REQUEUED = 75  # EX_TEMPFAIL: the job was requeued on a larger slice; stop the script


class UsageError(ValueError):
    """Bad command-line input: one line, exit status 2."""


@dataclass(frozen=True)
class Options:
    """What the command line asked for."""

    command: tuple[str, ...]
    slice: str | None = None
    capacity: int | None = None
    gpu_model: str | None = None
    context: int = 0
    iterations: int | None = None
    mode: str = "auto"
    trace: Path | None = None
    max_restarts: int = 2
    grace: float = 10.0
    emulate: bool = False
    sim_dir: Path | None = None
    config: Path | None = None
    memory_source: str = "auto"
    sample_interval: float = 1.0
    duration: float | None = None


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, no usage block
        raise UsageError(message)


def _size(text: str) -> int:
    try:
        return parse_size(text.strip())
    except HintError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


_count = int_at_least(0, ">= 0")


_seconds = number_within(0.0, sys.float_info.max, ">= 0 seconds")


def _add_where(p: argparse.ArgumentParser) -> None:
    """The job's slice and GPU model, its context overhead and its length."""
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--slice", metavar="PROFILE", help="the MIG profile the job runs on, e.g. 1g.10gb"
    )
    where.add_argument(
        "--capacity",
        metavar="SIZE",
        type=_size,
        help="the job's device memory instead of a profile's",
    )
    p.add_argument(
        "--gpu-model", metavar="MODEL", help="GPU model whose profiles restarts choose from"
    )
    p.add_argument(
        "--context",
        metavar="SIZE",
        type=_size,
        default=0,
        help="CUDA context overhead to assume until the probe measures it (with --emulate it "
        "is charged against the capacity; default 0)",
    )
    p.add_argument(
        "--iterations",
        metavar="N",
        type=_count,
        help="the job's total iterations: the forecast horizon",
    )


def _add_restarts(p: argparse.ArgumentParser) -> None:
    """How restarts are done: the mode, the limit, the grace and the device backend."""
    p.add_argument(
        "--mode",
        choices=("auto", "standalone", "slurm"),
        default="auto",
        help="restart through the device backend or by a Slurm requeue (auto: slurm inside a job)",
    )
    p.add_argument(
        "--trace",
        metavar="OUT.csv",
        type=Path,
        help="write every sample (restarts: OUT.1.csv, ...)",
    )
    p.add_argument(
        "--max-restarts", metavar="N", type=_count, default=2, help="restarts at most (default 2)"
    )
    p.add_argument(
        "--grace",
        metavar="S",
        type=_seconds,
        default=10.0,
        help="SIGTERM to SIGKILL (default 10 s)",
    )
    p.add_argument(
        "--emulate",
        action="store_true",
        help="emulate the capacity (CPU): the probe raises torch.OutOfMemoryError past it",
    )
    p.add_argument(
        "--sim-dir", metavar="DIR", type=Path, help="standalone: simulated MIG GPUs in DIR"
    )
    p.add_argument(
        "--config", metavar="FILE", type=Path, help="standalone: the backend of this node's config"
    )


def _add_sources(p: argparse.ArgumentParser) -> None:
    """Where the memory samples come from."""
    p.add_argument(
        "--memory-source",
        choices=("auto", "torch", "nvml"),
        default="auto",
        help="torch: the in-job PyTorch probe; nvml: the MIG slice's used memory through NVML "
        "(any CUDA program; the timer is the iteration clock); auto: the probe, and NVML when "
        "the slice holds memory the probe does not see (default)",
    )
    p.add_argument(
        "--sample-interval",
        metavar="S",
        type=_seconds,
        default=1.0,
        help="seconds between two NVML samples (default 1)",
    )
    p.add_argument(
        "--duration",
        metavar="S",
        type=_seconds,
        help="the job's expected run time in seconds: the horizon of the NVML forecast "
        "(default: 1000 samples ahead)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The ``mig-run`` parser: every error is a UsageError."""
    p = _Parser(
        prog=PROG,
        usage=f"{PROG} [--slice PROFILE | --capacity SIZE] [options] -- COMMAND [ARG ...]",
        description=(
            "Run a PyTorch job with a memory probe, forecast its peak memory, and restart "
            "it on a larger MIG slice before it runs out of memory (or after it did). "
            "The command needs no change; slurm_mig.step() may mark iterations."
        ),
        epilog=(
            "Sizes: bytes or 10GiB, 12G, 512M (binary units). Exit status: the command's; "
            f"2 for bad input; 1 when a restart is impossible; {EXIT_REQUEUED} after a "
            "Slurm requeue. GPU models: " + ", ".join(MODELS)
        ),
    )
    _add_where(p)
    _add_restarts(p)
    _add_sources(p)
    p.add_argument("command", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return p


def _check(opts: Options) -> Options:
    """``opts`` when its values agree with each other, else UsageError."""
    if opts.sample_interval < 0.05:
        raise UsageError(
            f"--sample-interval {opts.sample_interval} is too short; give 0.05 seconds or more"
        )
    if opts.capacity is not None and opts.capacity <= opts.context:
        raise UsageError(
            f"--capacity {opts.capacity} bytes is not above the context overhead "
            f"({opts.context} bytes of --context); give a larger capacity or a smaller context"
        )
    if opts.sim_dir is not None and opts.config is not None:
        raise UsageError("--sim-dir and --config both choose the device backend; give one")
    return opts


def parse_options(argv: Sequence[str]) -> Options:
    """Options from the command line; UsageError names the bad option and the fix."""
    argv = list(argv)
    command: list[str] | None = None
    if "--" in argv:
        i = argv.index("--")
        argv, command = argv[:i], argv[i + 1 :]
    ns = build_parser().parse_args(argv)
    if command is None:
        command = list(ns.command)
    elif ns.command:
        raise UsageError(f"unexpected argument {ns.command[0]!r} before '--'")
    if not command:
        raise UsageError("no command to run; write mig-run [options] -- python train.py ...")
    return _check(
        Options(
            command=tuple(command),
            slice=ns.slice,
            capacity=ns.capacity,
            gpu_model=ns.gpu_model,
            context=ns.context,
            iterations=ns.iterations or None,
            mode=ns.mode,
            trace=ns.trace,
            max_restarts=ns.max_restarts,
            grace=ns.grace,
            emulate=ns.emulate,
            sim_dir=ns.sim_dir,
            config=ns.config,
            memory_source=ns.memory_source,
            sample_interval=ns.sample_interval,
            duration=ns.duration or None,
        )
    )
