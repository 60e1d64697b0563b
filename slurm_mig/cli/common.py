"""What every ``slurm-mig`` command shares: the program name, the help formatter, the
errors that are the operator's input (one line, exit 2), and small output helpers."""

from __future__ import annotations

import argparse
import math
import socket
import textwrap
import time
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from ..devices.base import DeviceError
from ..geometry import MODELS, GeometryError, GpuModel, get_model
from ..job import Job
from ..plan import Plan, PlanError
from ..planner import Batch, UnknownPlanner, get_planner
from ..workload import BUILTIN_TASKS, WorkloadError

if TYPE_CHECKING:
    from ..config import Config

PROG = "slurm-mig"
DEFAULT_PLANNER = "auto"

# Errors that are the operator's input, not a bug: one line, exit 2.
# DeviceError: the NVML layer's one error path, its message already ends in the hint
INPUT_ERRORS = (
    WorkloadError,
    GeometryError,
    UnknownPlanner,
    PlanError,
    DeviceError,
    OSError,
    ValueError,
)

TASKS_HELP = """\
task input (TASKS):
  A CSV or JSON file with one runtime in seconds per task and MIG instance size
  (compute slices); 'inf' means the task cannot run on that size. Every task
  needs a time for every size of the GPU model (A30: 1,2,4; the others: 1,2,3,4,7).
    wide CSV   id,1,2,3,4,7            one row per task
    long CSV   kernel,size,seconds     one row per task and size
    JSON       [{"id": "job-17", "times": {"1": 310.0, "2": 160.5, ...}}, ...]
  The name rodinia-a100 selects the embedded table of 16 Rodinia kernels profiled
  on an A100 (FAR paper, Section 6.4.1); its GPU model defaults to A100-40GB.
"""

MODELS_HELP = "GPU models: " + ", ".join(MODELS) + " (A30, A100, H100 are short names)."


def _planners_help() -> str:
    from ..planner.registry import describe

    return (
        "policies (--planner; the same names in the daemon's config and the simulator):\n"
        "batch planners (plan a batch of tasks; 'auto' is the default):\n"
        + describe("batch", 16)
        + "\nonline policies (place waiting jobs onto running GPUs: use them with --start):\n"
        + describe("online", 16)
        + "\n"
    )


PLANNERS_HELP = _planners_help()


class Parser(argparse.ArgumentParser):
    """argparse with the house's error form: one line ``slurm-mig: error: ...`` and exit
    status 2 (argparse prints a usage block first), naming the command and its help."""

    def parse_args(self, args=None, namespace=None):  # type: ignore[override]
        """As argparse's, but an unknown argument is reported by the command it follows."""
        ns, extra = self.parse_known_args(args, namespace)
        if extra:
            sub = next(
                (a for a in self._actions if isinstance(a, argparse._SubParsersAction)), None
            )
            chosen = sub.choices.get(getattr(ns, "command", None)) if sub else None
            (chosen or self).error(f"unrecognized arguments: {' '.join(extra)}")
        return ns

    def error(self, message: str) -> NoReturn:
        command = self.prog.removeprefix(PROG).strip()
        where = f"{command}: " if command else ""
        text = " ".join(message.split())
        self.exit(2, f"{PROG}: error: {where}{text} (see '{self.prog} --help')\n")


class Formatter(argparse.RawDescriptionHelpFormatter):
    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=30)


def wrap(text: str) -> str:
    return textwrap.fill(text, width=79)


def version() -> str:
    try:
        return metadata.version("slurm-mig")
    except metadata.PackageNotFoundError:
        return "0.1.0 (source tree, not installed)"


def model_for(source: str, name: str | None) -> GpuModel:
    if name is not None:
        return get_model(name)
    builtin = BUILTIN_TASKS.get(source.strip().lower())
    if builtin is not None and not Path(source).exists():
        return get_model(builtin[1])
    raise GeometryError(f"give --gpu-model for {source}; models: {', '.join(MODELS)}")


def run_planner(
    name: str,
    tasks: Sequence[Job],
    model: GpuModel,
    gpus: int,
    time_budget: float | None = None,
) -> tuple[Plan, float]:
    """Plan with the named planner; returns the plan and the wall time in seconds.

    ``time_budget`` bounds the exact planner's search (seconds); others ignore it."""
    planner = get_planner(name)
    if time_budget is not None and name.strip().lower() == "exact":
        from ..planner.exact import plan_exact

        def planner(batch: Batch) -> Plan:
            return plan_exact(batch, time_budget=time_budget)

    t0 = time.perf_counter()
    plan = planner(Batch(tuple(tasks), model, gpus))
    return plan, time.perf_counter() - t0


def size_option(option: str, text: str, zero: bool = False) -> int:
    from ..hints import parse_size

    if zero and text.strip() == "0":
        return 0
    try:
        return parse_size(text.strip())
    except ValueError as exc:
        raise ValueError(f"{option}: {exc}") from None


def slices_text(slices: Sequence[int]) -> str:
    if not slices:
        return "-"
    return str(slices[0]) if len(slices) == 1 else f"{slices[0]}-{slices[-1]}"


def table(rows: Sequence[Sequence[str]], right: set[int]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for row in rows:
        cells = [
            c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))
        ]
        out.append("  ".join(cells).rstrip())
    return out


def ratio(a: float, b: float) -> str:
    return f"{a / b:.3f}" if b > 0 and math.isfinite(a) else "inf"


MAX_INPUT_BYTES = 64 * 1024 * 1024


def read_json(path: str) -> object:
    """A JSON document from a file, with one clear error for every way it can fail
    (missing, too large, not JSON, nested too deeply)."""
    import json

    p = Path(path)
    try:
        with p.open("rb") as f:
            raw = f.read(MAX_INPUT_BYTES + 1)
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ValueError(f"{path}: is a directory, not a JSON file") from None
    if len(raw) > MAX_INPUT_BYTES:
        raise ValueError(f"{path}: larger than {MAX_INPUT_BYTES // 2**20} MiB; not read")
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc.msg}, line {exc.lineno})") from None
    except (RecursionError, UnicodeDecodeError):
        raise ValueError(
            f"{path}: not a JSON document this tool reads (nested too deeply or not UTF-8)"
        ) from None


def add_node_options(p: argparse.ArgumentParser) -> None:
    """``--config`` and ``--node`` of a command run on a node, as the hooks see it."""
    p.add_argument("--config", metavar="PATH", help="config file (default: as the hooks)")
    p.add_argument(
        "--node",
        metavar="NAME",
        help="this node's name in the config (default: the host's short name)",
    )


def node_config(args: argparse.Namespace) -> tuple[Config, str]:
    """The config (``--config``) and this node's name (``--node``, or the host's short
    name); ConfigError naming the config's nodes when it is not one of them."""
    from ..config import load_config

    config = load_config(args.config)
    node = args.node or socket.gethostname().split(".")[0]
    config.gpu_models(node)
    return config, node
