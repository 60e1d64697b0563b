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
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol, TextIO

from .. import jobcomment as comments
from ..geometry import MODELS, GeometryError, GpuModel, Profile, can_coexist, get_model
from ..hints import HintError, comment_problem, parse_size
from . import oom, trace
from .trace import Sample, human

PROG = "mig-run"
EXIT_USAGE = 2
EXIT_FAILED = 1
EXIT_REQUEUED = 75  # EX_TEMPFAIL: the job was requeued on a larger slice; stop the script
POLL = 0.05  # seconds between two looks at the child and the probe file
MAX_UPDATES = 16  # forecaster updates per poll; a larger backlog is merged (peaks kept)
OOM_FACTOR = 1.1  # a real OOM restarts with the observed peak times this
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
STOPPING = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
INJECT_DIR = Path(__file__).resolve().parent / "inject"
ENV_XLA_SET = "SLURM_MIG_XLA_PREALLOCATE_SET"  # mig-run set XLA_PYTHON_CLIENT_PREALLOCATE
NVML_GRACE = 10  # NVML samples without any from the probe before NVML takes over (auto)
NVML_SEEN = 3  # NVML samples in a row above what the probe accounts for (auto)
UNSEEN = 256 * 2**20  # memory NVML sees beyond the probe's before it counts (or 5 %)


class UsageError(ValueError):
    """Bad command-line input: one line, exit status 2."""


class RestartError(RuntimeError):
    """A restart that cannot be done (device or Slurm failure): one line, exit status 1."""


class ForecasterLike(Protocol):
    def update(self, sample: Sample) -> Any: ...

    @property
    def needs_samples(self) -> bool: ...


ForecasterFactory = Callable[[int, int, "int | None"], ForecasterLike]


def default_forecaster(capacity: int, context: int, horizon: int | None) -> ForecasterLike:
    """The forecaster (numpy and scipy, imported here, in the parent, never in the job)."""
    from .forecast import Forecaster

    return Forecaster(capacity, context=context, horizon=horizon)


FORECAST_DEPS = ("numpy", "scipy")


def missing_forecast_deps() -> list[str]:
    """The forecaster's libraries that this Python lacks."""
    import importlib.util

    return [name for name in FORECAST_DEPS if importlib.util.find_spec(name) is None]


def _warm_up() -> None:
    """Import the forecaster's libraries while the job starts (about 2 s)."""
    try:
        from scipy.stats import chi2  # noqa: F401

        from . import forecast  # noqa: F401
    except ImportError:
        pass


# ---------------------------------------------------------------------------
# Command line


@dataclass(frozen=True)
class Options:
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


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} must be >= 0")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number of seconds") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text} must be >= 0 seconds")
    return value


def build_parser() -> argparse.ArgumentParser:
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
    p.add_argument("command", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return p


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
    opts = Options(
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


# ---------------------------------------------------------------------------
# Profiles (pure)


def model_for(opts: Options) -> GpuModel | None:
    """The GPU model named by --gpu-model, else the only model that has --slice."""
    if opts.gpu_model:
        try:
            return get_model(opts.gpu_model)
        except GeometryError as exc:
            raise UsageError(f"--gpu-model: {exc}") from None
    if opts.slice is None:
        return None
    having = [m for m in MODELS.values() if any(p.name == opts.slice for p in m.profiles)]
    if len(having) == 1:
        return having[0]
    if not having:
        known = sorted({p.name for m in MODELS.values() for p in m.profiles})
        raise UsageError(
            f"--slice {opts.slice!r}: no GPU model has this profile; profiles: {', '.join(known)}"
        )
    names = ", ".join(m.name for m in having)
    raise UsageError(f"--slice {opts.slice!r} exists on {names}; add --gpu-model MODEL")


def target_profile(model: GpuModel, need: int, current: int) -> Profile | None:
    """The smallest profile of ``model`` with more memory than ``current`` that covers
    ``need`` (fewest compute slices on a tie), or None."""
    fits = [p for p in model.profiles if p.memory_bytes > current and p.memory_bytes >= need]
    return min(fits, key=lambda p: (p.memory_bytes, p.compute_slices), default=None)


def largest_profile(model: GpuModel) -> Profile:
    return max(model.profiles, key=lambda p: (p.memory_bytes, p.compute_slices))


def with_mem_hint(comment: str, need: int) -> str:
    """The Comment mig-run writes back: ``mem=<need>`` set in the job's ``mig:`` word
    (added if absent), the user's text kept, the planner's token and note left out (the
    planner writes its own; job_submit.lua strips a token a user writes)."""
    return (
        comments.parse(comment)
        .with_token(None)
        .with_note(None)
        .with_hint("mem", str(need))
        .render()
    )


def _hint_problem(comment: str) -> str | None:
    """The hint parser's message for ``comment``, None when it parses."""
    from ..hints import parse_hints

    try:
        parse_hints(comment)
    except HintError as exc:
        return str(exc)
    return None


def merge_samples(samples: Sequence[Sample], limit: int) -> list[Sample]:
    """At most ``limit`` samples: consecutive ones merged (peaks and counters the
    largest, currents and time the last), so a slow forecaster never falls behind."""
    if len(samples) <= limit:
        return list(samples)
    size = -(-len(samples) // limit)
    out = []
    for i in range(0, len(samples), size):
        group = samples[i : i + size]
        last = group[-1]
        out.append(
            replace(
                last,
                requested_peak=max(s.requested_peak for s in group),
                allocated_peak=max(s.allocated_peak for s in group),
                reserved_peak=max(s.reserved_peak for s in group),
            )
        )
    return out


# ---------------------------------------------------------------------------
# The probe's files


def parse_sample(line: str) -> Sample | None:
    """A probe CSV line (full form); None for the header or a malformed line."""
    parts = line.strip().split(",")
    if len(parts) != len(trace.FIELDS) or parts[0] == "iteration":
        return None
    try:
        ints = [int(v) for v in parts[:-1]]
        return Sample(*ints, wall=float(parts[-1]))
    except ValueError:
        return None


class ProbeTail:
    """New complete lines of the probe's file since the last read."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._pos = 0
        self._partial = ""

    def read(self) -> list[Sample]:
        try:
            with self.path.open("r", encoding="utf-8") as f:
                f.seek(self._pos)
                data = f.read()
                self._pos = f.tell()
        except FileNotFoundError:
            return []
        lines = (self._partial + data).split("\n")
        self._partial = lines.pop()
        return [s for s in map(parse_sample, lines) if s is not None]


def read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8").splitlines()[0])
    except (OSError, ValueError, IndexError):
        return None


class TraceWriter:
    """``--trace``: every sample of one attempt, flushed per line."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._f: TextIO | None = None

    def write(self, sample: Sample) -> None:
        if self.path is None:
            return
        if self._f is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._f = self.path.open("w", encoding="utf-8")
            self._f.write(trace.header() + "\n")
        self._f.write(trace.format_sample(sample) + "\n")
        self._f.flush()

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None


def trace_path(base: Path | None, attempt: int) -> Path | None:
    """OUT.csv for the first run, OUT.1.csv, OUT.2.csv ... for the restarts."""
    if base is None or attempt == 0:
        return base
    return base.with_name(f"{base.stem}.{attempt}{base.suffix}")


# ---------------------------------------------------------------------------
# The run


@dataclass(frozen=True)
class Slice:
    """Where the job runs: its memory, and the MIG instance when a backend made it."""

    capacity: int
    profile: str | None = None
    uuid: str | None = None
    gpu: int | None = None
    owned: bool = False  # mig-run created it and destroys it at the end


@dataclass(frozen=True)
class Outcome:
    """How one launch of the command ended."""

    exit_code: int
    need: int | None = None  # bytes: restart on a slice this large
    reason: str = ""
    oom: bool = False


class Runner:
    """One ``mig-run``: launches, watches, restarts; ``run()`` returns the exit status."""

    def __init__(
        self,
        opts: Options,
        env: Mapping[str, str] | None = None,
        forecaster: ForecasterFactory = default_forecaster,
        err: TextIO | None = None,
    ) -> None:
        self.opts = opts
        self.env = dict(os.environ if env is None else env)
        self.make_forecaster = forecaster
        self.err = err or sys.stderr
        self.mode = opts.mode
        if self.mode == "auto":
            self.mode = "slurm" if self.env.get("SLURM_JOB_ID") else "standalone"
        if self.mode == "slurm" and not self.env.get("SLURM_JOB_ID"):
            raise UsageError("--mode slurm needs $SLURM_JOB_ID (run it inside a Slurm job)")
        self.model = model_for(opts)
        self.backend = self._open_backend()
        self.restarts = 0
        self.stopping = False
        self.child: subprocess.Popen | None = None
        self.slice = self._initial_slice()
        self._workdir = Path(tempfile.mkdtemp(prefix="mig-run-"))

    # -- setup ---------------------------------------------------------------

    def _open_backend(self) -> Any:
        """The device backend: ``--sim-dir`` (standalone), else the node's config when
        ``--config`` names one or when the slice must be looked up (no --slice or
        --capacity: the instance in CUDA_VISIBLE_DEVICES, through NVML on a real node).
        Under Slurm it is only read; instances are created in standalone mode only."""
        if self.opts.sim_dir is not None and self.mode == "standalone":
            from ..devices.base import DeviceError
            from ..devices.simulated import SimulatedBackend

            models = None
            if not (self.opts.sim_dir / "state.json").exists():
                if self.model is None:
                    raise UsageError(
                        f"--sim-dir {self.opts.sim_dir} has no GPUs yet; add --gpu-model"
                    )
                models = [self.model.name]
            try:
                return SimulatedBackend(self.opts.sim_dir, models=models)
            except DeviceError as exc:
                raise UsageError(f"--sim-dir: {exc}") from None
        lookup = self.opts.slice is None and self.opts.capacity is None
        if self.opts.config is None and not lookup:
            return None
        from ..config import ConfigError, load_config
        from ..devices.base import DeviceError
        from ..devices.open import open_backend

        node = self.env.get("SLURMD_NODENAME") or os.uname().nodename.split(".")[0]
        try:
            config = load_config(self.opts.config)
            return open_backend(config, node)
        except ConfigError as exc:
            if self.opts.config is None:
                return None  # no config here: --slice or --capacity is needed
            raise UsageError(f"--config: {' '.join(str(exc).split())}") from None
        except (DeviceError, ValueError) as exc:
            raise RestartError(f"cannot open the device backend: {exc}") from None

    def _initial_slice(self) -> Slice:
        opts = self.opts
        profile = None
        if opts.slice is not None:
            assert self.model is not None
            try:
                profile = self.model.profile(opts.slice)
            except GeometryError as exc:
                raise UsageError(f"--slice: {exc}") from None
        if self.backend is not None and profile is not None:
            current = self._adopt(profile)
            if current is not None:
                return current
        if profile is not None:
            if opts.capacity is None and profile.memory_bytes <= opts.context:
                raise UsageError(
                    f"--slice {profile.name} has {profile.memory_bytes} bytes, not above the "
                    f"context overhead ({opts.context} bytes of --context); pick a larger slice"
                )
            if self.backend is not None and self.mode == "standalone":
                made = self._create(profile, avoid=None)
                return Slice(profile.memory_bytes, profile.name, made.uuid, made.gpu, owned=True)
            return Slice(profile.memory_bytes, profile.name)
        if opts.capacity is not None:
            return Slice(opts.capacity)
        adopted = self._adopt(None) if self.backend is not None else None
        if adopted is not None:
            if adopted.capacity <= opts.context:
                raise UsageError(
                    f"the {adopted.profile} slice has {adopted.capacity} bytes, not above the "
                    f"context overhead ({opts.context} bytes of --context)"
                )
            return adopted
        raise UsageError(
            "the job's memory is unknown; give --slice PROFILE or --capacity SIZE "
            "(or run in a MIG instance that the node's config backend knows)"
        )

    def _adopt(self, profile: Profile | None) -> Slice | None:
        """The instance named by CUDA_VISIBLE_DEVICES, if the backend has it."""
        uuid = self.env.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
        if not uuid.startswith("MIG-"):
            return None
        for inst in self.backend.instances():
            if inst.uuid == uuid:
                if profile is not None and inst.profile != profile.name:
                    raise UsageError(
                        f"--slice {profile.name}, but CUDA_VISIBLE_DEVICES is a {inst.profile} "
                        "instance; drop --slice or run on that profile"
                    )
                gpu_model = {g.index: g.model for g in self.backend.gpus()}[inst.gpu]
                model = self.model or get_model(gpu_model)
                self.model = model
                return Slice(model.profile(inst.profile).memory_bytes, inst.profile, uuid, inst.gpu)
        return None

    # -- main loop -----------------------------------------------------------

    def run(self) -> int:
        previous = {sig: signal.signal(sig, self._on_signal) for sig in FORWARDED}
        if self.make_forecaster is default_forecaster:  # while the job imports torch
            threading.Thread(target=_warm_up, name="mig-run-warm-up", daemon=True).start()
        try:
            attempt = 0
            outcome = Outcome(exit_code=128 + signal.SIGTERM)
            while not self.stopping:
                outcome = self._launch(attempt)
                if outcome.need is None or self.stopping:
                    return outcome.exit_code
                problem = self._restart_problem(outcome.need)
                if problem is not None:
                    self._say(f"{outcome.reason}; {problem}")
                    return outcome.exit_code or EXIT_FAILED
                if self.mode == "slurm":
                    return self._requeue(outcome)
                self._switch(outcome)
                attempt += 1
            return outcome.exit_code
        except RestartError as exc:
            self._say(f"error: {exc}")
            return EXIT_FAILED
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self._release()
            shutil.rmtree(self._workdir, ignore_errors=True)

    def _on_signal(self, signum: int, frame: Any) -> None:
        if signum in STOPPING:
            self.stopping = True
        child = self.child
        if child is not None and child.poll() is None:
            try:
                os.killpg(child.pid, signum)
            except ProcessLookupError:
                pass

    def _child_env(self, attempt: int, out: Path) -> dict[str, str]:
        env = dict(self.env)
        paths = [str(INJECT_DIR)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        env["PYTHONPATH"] = os.pathsep.join(paths)
        env["SLURM_MIG_PROBE_OUT"] = str(out)
        env["SLURM_MIG_PROBE_CTL"] = str(out.with_name("control"))
        env["SLURM_MIG_RESTART"] = str(attempt)
        if self.slice.profile:
            env["SLURM_MIG_PROFILE"] = self.slice.profile
        if self.slice.uuid:
            env["CUDA_VISIBLE_DEVICES"] = self.slice.uuid
        if "XLA_PYTHON_CLIENT_PREALLOCATE" not in env:  # JAX takes 75 % of the slice else
            env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
            env[ENV_XLA_SET] = "1"
        if self.opts.emulate:
            env["SLURM_MIG_CAPACITY_EMULATE"] = str(self.slice.capacity)
            env["SLURM_MIG_CONTEXT_EMULATE"] = str(self.opts.context)
        return env

    def _launch(self, attempt: int) -> Outcome:
        folder = self._workdir / f"run{attempt}"
        folder.mkdir()
        out = folder / "probe.csv"
        control = out.with_name("control")
        control.write_text("on\n", encoding="utf-8")
        tracking = True
        kills = oom.oom_kills()
        env = self._child_env(attempt, out)
        nvml_slice = None
        if self.opts.memory_source != "torch":
            nvml_slice, why = self._nvml_slice(env)
            if nvml_slice is None and self.opts.memory_source == "nvml":
                self._say(f"error: --memory-source nvml: {why}")
                return Outcome(exit_code=EXIT_USAGE)
        try:
            self.child = subprocess.Popen(
                self.opts.command,
                env=env,
                start_new_session=True,
                stderr=subprocess.PIPE,
            )
        except OSError as exc:  # as a shell says it: 127 not found, 126 not runnable
            if nvml_slice is not None:
                nvml_slice[0].close()
            self._say(f"error: cannot run {self.opts.command[0]!r}: {exc.strerror}")
            return Outcome(exit_code=127 if isinstance(exc, FileNotFoundError) else 126)
        tee = StderrTee(self.child.stderr)
        tail = ProbeTail(out)
        writer = TraceWriter(trace_path(self.opts.trace, attempt))
        watch = _Watch(self, out, tee, kills)
        feed = None
        if nvml_slice is not None:
            from .nvml_sampler import NvmlFeed, job_pids

            pid = self.child.pid
            feed = NvmlFeed(
                nvml_slice[0],
                self.opts.sample_interval,
                lambda: job_pids(pid),
                on_error=lambda why: self._say(f"warning: NVML sampling stopped: {why}"),
            )
            watch.nvml_what = nvml_slice[1]
        try:
            while True:
                code = self.child.poll()
                restart = watch.feed(tail.read(), writer, feed.read() if feed else [])
                if restart is not None:
                    self._stop(self.child)
                    tee.finish()
                    if feed is not None:
                        feed.stop()
                    return restart
                want = watch.needs_samples
                if want != tracking:
                    tmp = control.with_name("control.tmp")
                    tmp.write_text("on\n" if want else "off\n", encoding="utf-8")
                    os.replace(tmp, control)
                    tracking = want
                if code is not None:
                    break
                time.sleep(POLL)
            for s in tail.read():
                writer.write(s)
                watch.observe(s)
            if feed is not None:
                for s in feed.read():
                    watch.observe(s)
        finally:
            writer.close()
            tee.finish()
            if feed is not None:
                feed.stop()
        return watch.ended(self.child.returncode)

    def _nvml_slice(self, env: Mapping[str, str]) -> tuple[Any, str]:
        """((the opened NVML slice, a phrase naming it) or None, why not)."""
        uuid = env.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
        if not uuid.startswith("MIG-"):
            return None, "CUDA_VISIBLE_DEVICES names no MIG device (MIG-<uuid>)"
        from .nvml_sampler import NvmlSlice, SamplerUnavailable

        try:
            source = NvmlSlice(uuid)
            what = source.open()
        except SamplerUnavailable as exc:
            if self.opts.memory_source == "auto":
                self._say(f"memory source: the PyTorch probe only; {exc}")
            return None, str(exc)
        return (source, what), ""

    def _stop(self, child: subprocess.Popen) -> None:
        """SIGTERM to the job's process group, ``--grace`` seconds, then SIGKILL."""
        for sig, wait in ((signal.SIGTERM, self.opts.grace), (signal.SIGKILL, None)):
            try:
                os.killpg(child.pid, sig)
            except ProcessLookupError:
                pass
            try:
                child.wait(timeout=wait)
                return
            except subprocess.TimeoutExpired:
                continue

    # -- restarts ------------------------------------------------------------

    def _restart_problem(self, need: int) -> str | None:
        """Why the job cannot restart on a slice of ``need`` bytes, or None."""
        done = self.restarts
        if self.mode == "slurm":
            done = int(self.env.get("SLURM_RESTART_COUNT") or 0)
        if done >= self.opts.max_restarts:
            return f"restart limit reached ({done} of --max-restarts {self.opts.max_restarts})"
        if self.model is None:
            if self.mode == "slurm":
                return None
            return "no GPU model to pick a larger profile from; give --gpu-model or --slice"
        target = target_profile(self.model, need, self.slice.capacity)
        if target is None:
            big = largest_profile(self.model)
            return (
                f"the job needs {human(need)} ({need} bytes) and the largest profile of "
                f"{self.model.name}, {big.name}, has {human(big.memory_bytes)}"
            )
        if self.mode == "standalone" and self.backend is None and not self.opts.emulate:
            return (
                f"cannot create a {target.name} slice without a device backend; "
                "give --sim-dir DIR or --config FILE (or --emulate)"
            )
        return None

    def _switch(self, outcome: Outcome) -> None:
        """Standalone: move to the smallest profile covering the need."""
        assert self.model is not None and outcome.need is not None
        target = target_profile(self.model, outcome.need, self.slice.capacity)
        assert target is not None
        old = self.slice
        new = Slice(target.memory_bytes, target.name)
        if self.backend is not None:
            made = self._create(target, avoid=old)
            new = Slice(target.memory_bytes, target.name, made.uuid, made.gpu, owned=True)
            if old.uuid and old.uuid != made.uuid and old.gpu is not None:
                self._destroy(old)
        self.restarts += 1
        where = f" ({new.uuid})" if new.uuid else ""
        self._say(
            f"restart {self.restarts} of {self.opts.max_restarts}: {outcome.reason}; "
            f"relaunching on {target.name}{where} with {human(target.memory_bytes)}"
        )
        self.slice = new

    def _create(self, profile: Profile, avoid: Slice | None) -> Any:
        """An instance of ``profile`` on a GPU of the model: at a free placement, or in
        the place of ``avoid`` (destroyed first) when nothing else is free."""
        from ..devices.base import DeviceError

        assert self.model is not None
        gpus = [g for g in self.backend.gpus() if g.model == self.model.name and g.mig_enabled]
        if avoid is not None and avoid.gpu is not None:
            gpus.sort(key=lambda g: g.index != avoid.gpu)
        for g in gpus:
            taken = [i.placement for i in self.backend.instances(g.index)]
            for pl in profile.placements:
                if can_coexist(self.model, taken + [pl]):
                    try:
                        return self.backend.create(g.index, profile.name, pl, job_id=self._job())
                    except DeviceError as exc:
                        raise RestartError(f"cannot create {profile.name}: {exc}") from None
        if avoid is not None and avoid.uuid and avoid.gpu is not None:
            self._destroy(avoid)
            self.slice = replace(avoid, uuid=None)
            taken = [i.placement for i in self.backend.instances(avoid.gpu)]
            for pl in profile.placements:
                if can_coexist(self.model, taken + [pl]):
                    try:
                        return self.backend.create(avoid.gpu, profile.name, pl, job_id=self._job())
                    except DeviceError as exc:
                        raise RestartError(f"cannot create {profile.name}: {exc}") from None
        raise RestartError(f"no free placement for {profile.name} on any {self.model.name} GPU")

    def _destroy(self, old: Slice) -> None:
        from ..devices.base import DeviceError, InstanceNotFound

        try:
            self.backend.destroy(old.gpu, old.uuid, job_id=self._job())
        except InstanceNotFound:
            pass
        except DeviceError as exc:
            raise RestartError(f"cannot destroy the old {old.profile} instance: {exc}") from None

    def _release(self) -> None:
        """Destroy the instance mig-run created, at the very end."""
        if self.backend is None or not self.slice.owned or not self.slice.uuid:
            return
        try:
            self._destroy(self.slice)
        except RestartError as exc:
            self._say(f"warning: {exc}")

    def _job(self) -> str:
        return self.env.get("SLURM_JOB_ID") or f"mig-run-{os.getpid()}"

    def _requeue(self, outcome: Outcome) -> int:
        """Slurm: record the need, put it into the job's hint, requeue the job."""
        assert outcome.need is not None
        from ..slurm.client import SlurmClient, SlurmError

        number = self.env["SLURM_JOB_ID"]
        # an array task is addressed as <array id>_<task>, as squeue and the planner
        # name it: its number may be the array's own, which scontrol takes for every task
        array, task = (
            self.env.get("SLURM_ARRAY_JOB_ID", ""),
            self.env.get("SLURM_ARRAY_TASK_ID", ""),
        )
        job = f"{array}_{task}" if array.isdigit() and task.isdigit() else number
        slurm = SlurmClient(env=self.env)
        try:
            found = [j for j in slurm.jobs() if j.job_id == job]
        except SlurmError as exc:
            raise RestartError(f"cannot read job {job}: {exc}") from None
        comment = found[0].comment if found else ""
        try:
            from ..hints import parse_hints

            hints = parse_hints(comment)
        except HintError:
            hints = None
        if hints is not None and hints.restartable is False:
            self._say(f"{outcome.reason}; the job says mig:restartable=no, so it is not requeued")
            return outcome.exit_code or EXIT_FAILED
        key = (hints.key if hints else None) or self.env.get("SLURM_JOB_NAME") or job
        self._record_need(key, outcome.need, number)
        written = with_mem_hint(comment, outcome.need)
        problem = comment_problem(written) or _hint_problem(written)
        if problem:
            raise RestartError(
                f"cannot write mem={outcome.need} into job {job}'s Comment: {problem}"
            )
        try:
            slurm.update_job(job, Comment=written)
            slurm.requeue(job)
        except SlurmError as exc:
            raise RestartError(f"cannot requeue job {job}: {exc}") from None
        self._say(
            f"{outcome.reason}; requeued job {job} with mem={human(outcome.need)} "
            f"({outcome.need} bytes) for a larger slice"
        )
        return EXIT_REQUEUED

    def _record_need(self, key: str, need: int, job: str) -> None:
        """Under Slurm the job's need file (the Epilog reports it to the planner, see
        `slurm.reports`); else RuntimeStore.record_memory when the store is there."""
        try:
            from ..config import load_config
            from ..runtimes import RuntimeStore
            from ..slurm.reports import need_path, write_need

            config = load_config(self.opts.config)
            node = self.env.get("SLURMD_NODENAME", "")
            path = need_path(config.run_dir_for(node), job) if node else None
            if path is not None and os.path.lexists(path):
                write_need(path, key, need)
                return
            RuntimeStore(config.state_dir / "profiles.sqlite").record_memory(key, need, job)
        except Exception as exc:  # the hint in the comment carries the need anyway
            self._say(
                f"warning: memory need not recorded for {key!r}: {' '.join(str(exc).split())}"
            )

    def _say(self, message: str) -> None:
        print(f"{PROG}: {message}", file=self.err, flush=True)


class StderrTee:
    """Copies the job's stderr to ours as it comes and keeps its last bytes (bounded), so
    that an out-of-memory error printed by any program can be recognised."""

    def __init__(self, pipe: Any, sink: Any = None) -> None:
        self.pipe = pipe
        self.sink = sink if sink is not None else getattr(sys.stderr, "buffer", None)
        self.tail = oom.Tail()
        self._thread = threading.Thread(target=self._copy, name="mig-run-stderr", daemon=True)
        self._thread.start()

    def _copy(self) -> None:
        fd = self.pipe.fileno()
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                return
            if not chunk:
                return
            self.tail.add(chunk)
            try:
                if self.sink is not None:
                    self.sink.write(chunk)
                    self.sink.flush()
                else:
                    os.write(2, chunk)
            except (OSError, ValueError):
                pass  # our stderr is gone: keep draining the pipe, so the job never blocks

    def finish(self, timeout: float = 2.0) -> None:
        """Wait for the rest of the job's output (a grandchild that keeps the pipe open
        delays this by ``timeout`` seconds at most)."""
        self._thread.join(timeout)


class _Watch:
    """One launch's samples: the forecaster, the observed peak, the restart decision."""

    def __init__(self, runner: Runner, out: Path, tee: StderrTee, kills: int = -1) -> None:
        self.runner = runner
        self.out = out
        self.tee = tee
        self.kills = kills
        self.nvml_what = ""
        self.source = "probe"
        self.probe_seen = 0  # probe samples seen
        self.probe_current = 0  # the probe's last device bytes (reserved, else requested)
        self.nvml_seen = 0  # NVML samples seen
        self.unseen = 0  # NVML samples in a row with memory the probe does not account for
        self.announced = ""
        self.forecaster: ForecasterLike | None = None
        self.who: tuple[Any, ...] = ()
        self.since = 0
        self.context = runner.opts.context
        self.peak = 0
        self.ooms = 0
        self.last_need: int | None = None
        self.last_iteration: int | None = None
        self.warned = False

    @property
    def needs_samples(self) -> bool:
        return self.forecaster is None or bool(self.forecaster.needs_samples)

    def observe(self, s: Sample) -> None:
        self.peak = max(self.peak, s.requested_peak, s.allocated_peak)
        self.ooms = max(self.ooms, s.ooms)
        self.last_iteration = s.iteration

    def _take_over(self, nvml: list[Sample], meta: dict) -> bool:
        """Whether NVML becomes the source: asked for, or (auto) the probe has sent nothing
        after ``NVML_GRACE`` NVML samples of a slice in use, or NVML sees memory the probe
        does not account for (another framework or process) ``NVML_SEEN`` times in a row."""
        if self.runner.opts.memory_source == "nvml":
            return True
        self.nvml_seen += len(nvml)
        if self.probe_seen == 0:
            return self.nvml_seen >= NVML_GRACE and any(s.requested_current > 0 for s in nvml)
        accounted = self.probe_current + (self.context if meta.get("device") == "cuda" else 0)
        slack = max(UNSEEN, 0.05 * self.runner.slice.capacity)
        for s in nvml:
            self.unseen = self.unseen + 1 if s.requested_current > accounted + slack else 0
        return self.unseen >= NVML_SEEN

    def _announce(self, what: str) -> None:
        if what and what != self.announced:
            self.announced = what
            self.runner._say(f"memory source: {what}")

    def feed(
        self, samples: list[Sample], writer: TraceWriter, nvml: list[Sample] | None = None
    ) -> Outcome | None:
        """Forecast on new samples (the probe's, or NVML's once it is the source); the
        Outcome of a restart decision, if one was made."""
        nvml = nvml or []
        if samples:
            self.probe_seen += len(samples)
            last = samples[-1]
            self.probe_current = max(last.reserved_current, last.requested_current)
        meta = read_json(Path(f"{self.out}.meta")) or {}
        if self.source == "probe" and nvml and self._take_over(nvml, meta):
            self.source = "nvml"
            r = self.runner
            ticks = None
            if r.opts.duration:
                ticks = max(1, round(r.opts.duration / r.opts.sample_interval))
            self.forecaster = r.make_forecaster(r.slice.capacity, 0, ticks)  # context in
            self.since = 0
            self._announce(
                f"{self.nvml_what}, a sample every {r.opts.sample_interval:g} s (the timer is "
                "the iteration clock)"
            )
        if self.source == "nvml":
            samples = nvml
        if not samples:
            return None
        for s in samples:
            writer.write(s)
            self.observe(s)
        who = (meta.get("pid"), meta.get("device"), meta.get("source"))
        if self.source == "probe" and (self.forecaster is None or who != self.who):
            # a new process, CUDA came up, or another iteration source took over
            self.who = who
            self.since = int(meta.get("since") or 0)
            self.context = int(meta.get("context_bytes", self.runner.opts.context))
            r = self.runner
            self.forecaster = r.make_forecaster(r.slice.capacity, self.context, r.opts.iterations)
            device = meta.get("device") or "cpu"
            what = (
                "the PyTorch CUDA allocator (torch.cuda.memory_stats)"
                if device == "cuda"
                else "PyTorch live tensors (CPU)"
            )
            self._announce(f"{what}, a sample per iteration ({meta.get('source') or '-'})")
        current = [s for s in samples if s.iteration >= self.since]
        for s in merge_samples(current, MAX_UPDATES):
            decision = self.forecaster.update(s)
            need = getattr(decision, "need", None)
            if need is not None:
                self.last_need = int(need)
            if not getattr(decision, "restart", False) or self.runner.stopping:
                continue
            problem = self.runner._restart_problem(int(need))
            reason = (
                f"forecast at iteration {s.iteration}: {decision.reason}"
                if getattr(decision, "reason", "")
                else f"forecast at iteration {s.iteration}: the job needs {human(need)}"
            )
            if problem is None:
                return Outcome(exit_code=EXIT_FAILED, need=int(need), reason=reason)
            if not self.warned:
                self.warned = True
                self.runner._say(f"warning: {reason}; {problem}; the job goes on")
        return None

    def form(self, returncode: int, info: dict) -> oom.OomForm | None:
        """How the child ran out of memory, if it did: the probe's exit record (the
        exception itself), the allocator's OOM counter, the kernel's OOM killer (a SIGKILL
        while its counter grew), or the last lines the job wrote to stderr."""
        kind = info.get("kind") or ("torch" if "OutOfMemoryError" in str(info) else None)
        if isinstance(kind, str) and kind in oom.FORMS:
            return oom.OomForm(kind, oom.FORMS[kind][1])
        if returncode == -signal.SIGKILL and self.kills >= 0 and oom.oom_kills() > self.kills:
            return oom.HOST
        found = oom.classify_tail(self.tee.tail.bytes())
        if found is not None:
            return found
        if self.ooms > 0:
            return oom.OomForm("torch", oom.FORMS["torch"][1])
        return None

    def ended(self, returncode: int) -> Outcome:
        """The Outcome of a child that exited by itself."""
        code = returncode if returncode >= 0 else 128 - returncode
        if code == 0 or self.runner.stopping:
            return Outcome(exit_code=code)
        info = read_json(Path(f"{self.out}.exit")) or {}
        form = self.form(returncode, info)
        if form is None:
            return Outcome(exit_code=code)
        where = info.get("iteration", self.last_iteration)
        on = f"{self.runner.slice.profile or 'the slice'} ({human(self.runner.slice.capacity)})"
        if not form.gpu:
            self.runner._say(
                f"the job was killed by {form.what} at iteration {where}; a larger GPU slice "
                "does not help: ask for more host memory (--mem)"
            )
            return Outcome(exit_code=code)
        context = int(info.get("context_bytes", self.context))
        observed = max(self.peak, int(info.get("requested_bytes", 0)))
        if form.kind == "nvml-assert" and 0 < observed + context < self.runner.slice.capacity / 2:
            self.runner._say(
                f"the CUDA caching allocator's NVML assert at iteration {where} with {on} "
                f"less than half full ({human(observed + context)}): not an out-of-memory, "
                "so no restart; PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False avoids it"
            )
            return Outcome(exit_code=code)
        need = max(int(observed * OOM_FACTOR) + context, self.last_need or 0)
        reason = (
            f"out of memory at iteration {where} on {on} ({form.what}): observed peak "
            f"{human(observed)}, needs {human(need)}"
        )
        return Outcome(exit_code=code, need=need, reason=reason, oom=True)


def hinted_iterations(env: Mapping[str, str]) -> int | None:
    """Inside a Slurm job without --iterations: the ``iters=`` of the job's hint, if any
    (the forecast horizon). Best effort: no Slurm, no hint or a bad hint give None."""
    job = env.get("SLURM_JOB_ID")
    if not job:
        return None
    try:
        from ..hints import parse_hints
        from ..slurm.client import SlurmClient

        found = [j for j in SlurmClient(env=env, timeout=10).jobs() if j.job_id == job]
        return parse_hints(found[0].comment).iters if found else None
    except Exception:  # the horizon then falls back to the look-ahead
        return None


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
        print(f"{PROG}: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return EXIT_USAGE
    except RestartError as exc:  # the device backend failed before the job started
        print(f"{PROG}: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return EXIT_FAILED
    return runner.run()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
