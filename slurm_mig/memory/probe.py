"""The in-job memory probe: one ``Sample`` per iteration, appended to the file the
``mig-run`` parent tails (``$SLURM_MIG_PROBE_OUT``).

CUDA: the caching allocator's ``memory_stats()`` peaks, read and reset at every iteration
boundary; the context overhead (``mem_get_info`` total - free - reserved) goes to the
``.meta`` file; allocator retries are an early warning, printed once.
CPU (what runs here, and what the emulated capacity needs): a ``TorchDispatchMode`` counts
the bytes of every op output's storage once, and a ``weakref.finalize`` on the storage
subtracts them when it is freed. It is pushed only while the parent's control file says
``on`` (the forecaster still needs samples) or an emulated capacity is set; past that
capacity it raises ``torch.OutOfMemoryError`` before the op's output reaches the program.

Iteration boundaries, one source counting (highest wins): ``slurm_mig.step()`` >
optimizer step post-hook > start of an outermost module forward > a timer.
This module imports torch; ``mig-run``'s sitecustomize loads it once torch is imported.
The live-tensor tracker (the CPU count) is memory/live_tensors.py's.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import re
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.nn.modules.module import (
    register_module_forward_hook,
    register_module_forward_pre_hook,
)
from torch.optim.optimizer import register_optimizer_step_post_hook

from . import oom, trace
from .live_tensors import LiveTensorTracker
from .trace import Sample

ENV_OUT = "SLURM_MIG_PROBE_OUT"
ENV_CTL = "SLURM_MIG_PROBE_CTL"
ENV_CAPACITY = "SLURM_MIG_CAPACITY_EMULATE"
ENV_CONTEXT = "SLURM_MIG_CONTEXT_EMULATE"
ENV_TIMER = "SLURM_MIG_PROBE_TIMER"
PROBE_ENV = (ENV_OUT, ENV_CTL, ENV_CAPACITY, ENV_CONTEXT, ENV_TIMER)

# Iteration sources by priority: a boundary counts only from the highest seen so far.
SOURCES = {"timer": 0, "forward": 1, "optimizer": 2, "step": 3}
CONTROL_PERIOD = 0.5  # seconds between two reads of the control file
DEFAULT_TIMER = 1.0  # seconds without any boundary before the timer makes one
TIMER_GRACE = 10  # timer periods after start before the timer may count at all

_TRIED = re.compile(r"Tried to allocate ([0-9.]+) (B|bytes|KiB|MiB|GiB|TiB)")
_UNITS = {"B": 1, "bytes": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


@dataclass(frozen=True)
class ProbeConfig:
    """What the parent told the probe through the environment."""

    out: Path
    control: Path | None = None
    capacity: int | None = None  # emulated device memory, bytes (context included)
    context: int = 0  # emulated context overhead, bytes
    timer: float = DEFAULT_TIMER

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ProbeConfig | None:
        """The probe's settings, or None when ``mig-run`` did not ask for a probe."""
        out = env.get(ENV_OUT)
        if not out:
            return None
        ctl = env.get(ENV_CTL)
        return cls(
            out=Path(out),
            control=Path(ctl) if ctl else None,
            capacity=_env_int(env, ENV_CAPACITY),
            context=_env_int(env, ENV_CONTEXT) or 0,
            timer=float(env.get(ENV_TIMER) or DEFAULT_TIMER),
        )


def _env_int(env: Mapping[str, str], name: str) -> int | None:
    text = env.get(name)
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{name}={text!r} is not a whole number of bytes") from None
    if value < 0:
        raise ValueError(f"{name}={value} must be >= 0")
    return value


# ---------------------------------------------------------------------------
# CUDA: the caching allocator's statistics (pure functions, tested on captured dicts)


def sample_from_cuda_stats(iteration: int, stats: Mapping[str, Any], wall: float) -> Sample:
    """A sample from ``torch.cuda.memory_stats()`` (peaks since the last reset)."""

    def get(key: str) -> int:
        return int(stats.get(key, 0))

    return Sample(
        iteration=iteration,
        requested_peak=get("requested_bytes.all.peak"),
        requested_current=get("requested_bytes.all.current"),
        allocated_peak=get("allocated_bytes.all.peak"),
        allocated_current=get("allocated_bytes.all.current"),
        reserved_peak=get("reserved_bytes.all.peak"),
        reserved_current=get("reserved_bytes.all.current"),
        alloc_retries=get("num_alloc_retries"),
        ooms=get("num_ooms"),
        wall=wall,
    )


def cuda_context_bytes(free: int, total: int, reserved: int) -> int:
    """Device memory that is neither free nor PyTorch's: CUDA context, libraries, others."""
    return max(0, total - free - reserved)


def tried_bytes(message: str) -> int:
    """The size in a CUDA OOM message's ``Tried to allocate 2.00 GiB``; 0 if absent."""
    m = _TRIED.search(message)
    return int(float(m.group(1)) * _UNITS[m.group(2)]) if m else 0


def _package() -> Any:
    """``slurm_mig.memory``, where ``step()`` finds the running probe."""
    return sys.modules[__name__.rpartition(".")[0]]


def _dispatch_stack() -> list[Any]:
    n = torch._C._len_torch_dispatch_stack()
    return [torch._C._get_dispatch_stack_at(i) for i in range(n)]


# ---------------------------------------------------------------------------
# The probe: boundaries, samples, control


class Probe:
    """Installs the hooks in the job's main process and writes one sample per iteration."""

    def __init__(self, config: ProbeConfig) -> None:
        self.config = config
        self.tracker = LiveTensorTracker(config.capacity, config.context)
        self.iteration = 0  # index of the iteration running now
        self.source_rank = -1
        self.source: str | None = None  # the iteration source that counts now
        self.source_since = 0  # the first iteration it ended
        self.tracking = False
        self.device = "cpu"
        self.context = config.context
        self._lock = threading.RLock()
        self._start = time.monotonic()
        self._last_boundary = self._start
        self._control_read = -math.inf
        self._want_tracking = True
        self._tracked_before = False
        self._forward_depth = 0
        self._forward_seen = False
        self._forward_handles: list[Any] = []
        self._handles: list[Any] = []
        self._out: Any = None
        self._closed = True
        self._retry_warned = False
        self._ooms_written = 0
        self._main = threading.get_ident()
        self._timer: threading.Thread | None = None
        self._stop = threading.Event()
        self._prev_excepthook: Any = None
        self._pid = os.getpid()

    # -- lifecycle -----------------------------------------------------------

    def install(self) -> Probe:
        """Register hooks, open the output, start tracking (if wanted) and the timer."""
        out = self.config.out
        out.parent.mkdir(parents=True, exist_ok=True)
        self._out = out.open("a", encoding="utf-8", buffering=1)
        if self._out.tell() == 0:
            self._out.write(trace.header() + "\n")
        self._write_meta()
        self._closed = False
        self._handles = [register_optimizer_step_post_hook(self._on_optimizer_step)]
        self._forward_handles = [
            register_module_forward_pre_hook(self._on_forward_pre),
            register_module_forward_hook(self._on_forward, always_call=True),
        ]
        self._read_control(force=True)
        if self._want_tracking:
            self._set_tracking(True)
        self._prev_excepthook = sys.excepthook
        sys.excepthook = self._excepthook
        atexit.register(self.close)
        os.register_at_fork(after_in_child=self._after_fork)
        self._timer = threading.Thread(target=self._timer_loop, name="mig-probe", daemon=True)
        self._timer.start()
        _package()._active = self
        return self

    def close(self) -> None:
        """Write the last partial iteration, remove every hook, pop the mode."""
        with self._lock:
            if self._closed:
                return
            if self.device == "cuda" or self.tracker.ooms > self._ooms_written:
                self._emit()  # the partial last iteration, for its OOM count
            self._closed = True
        self._stop.set()
        if self._timer is not None and self._timer is not threading.current_thread():
            self._timer.join(timeout=2)
        self._teardown()
        if self._out is not None:
            self._out.close()
            self._out = None
        atexit.unregister(self.close)

    def _teardown(self) -> None:
        for h in self._handles + self._forward_handles:
            h.remove()
        self._handles, self._forward_handles = [], []
        if self.tracking:
            self._set_tracking(False)
        self.tracker.enabled = False
        if sys.excepthook is self._excepthook:
            sys.excepthook = self._prev_excepthook
        if _package()._active is self:
            _package()._active = None

    def _after_fork(self) -> None:
        """A forked child (a DataLoader worker) must not probe nor write our file."""
        if self._closed or os.getpid() == self._pid:
            return
        self._closed = True
        self._out = None  # the parent's file; flushed after every line, so nothing pending
        self._teardown()

    # -- boundaries ----------------------------------------------------------

    def boundary(self, source: str) -> None:
        """End the running iteration if ``source`` is the highest-priority source seen.

        The first boundary of a source that takes over from the forward or optimizer
        source only switches sources (it comes mid-iteration): the partial iteration is
        folded into the next sample. Every change of source goes to the meta file
        (``source``, and ``since``: its first iteration), so that the parent forecasts
        from one source's samples only (timer samples of a slow start are not a trend)."""
        rank = SOURCES[source]
        with self._lock:
            if self._closed or rank < self.source_rank:
                return
            takeover = rank > self.source_rank > SOURCES["timer"]
            if rank > self.source_rank:
                self.source_rank = rank
                self.source = source
                self.source_since = self.iteration
                if rank > SOURCES["forward"]:
                    self._drop_forward_hooks()
                self._write_meta()
            self._last_boundary = time.monotonic()
            if takeover:
                return
            self._emit()
            self.iteration += 1
            if threading.get_ident() == self._main:
                self._read_control()
                if self._want_tracking != self.tracking:
                    self._set_tracking(self._want_tracking)

    def _on_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self.boundary("optimizer")

    def _on_forward_pre(self, module: Any, args: Any) -> None:
        if self._forward_depth == 0 and threading.get_ident() == self._main:
            if self._forward_seen:
                self.boundary("forward")
            self._forward_seen = True
        self._forward_depth += 1

    def _on_forward(self, module: Any, args: Any, output: Any) -> None:
        self._forward_depth = max(0, self._forward_depth - 1)

    def _drop_forward_hooks(self) -> None:
        for h in self._forward_handles:
            h.remove()
        self._forward_handles = []

    def _timer_loop(self) -> None:
        """Last resort: a boundary every ``timer`` seconds while no other source fired,
        from ``TIMER_GRACE`` timer periods after start (model loading is not an iteration)."""
        period = max(0.05, self.config.timer / 4)
        grace = TIMER_GRACE * self.config.timer
        while not self._stop.wait(period):
            now = time.monotonic()
            if self.source_rank > SOURCES["timer"] or now - self._start < grace:
                continue
            if now - self._last_boundary >= self.config.timer:
                self.boundary("timer")

    # -- samples -------------------------------------------------------------

    def _emit(self) -> None:
        wall = time.monotonic() - self._start
        sample: Sample | None = None
        if torch.cuda.is_initialized():
            sample = self._cuda_sample(wall)
        elif self.tracking:
            peak, current = self.tracker.take_peak()
            sample = Sample(
                iteration=self.iteration,
                requested_peak=peak,
                requested_current=current,
                allocated_peak=peak,
                allocated_current=current,
                reserved_peak=peak,
                reserved_current=current,
                alloc_retries=0,
                ooms=self.tracker.ooms,
                wall=wall,
            )
        if sample is not None and self._out is not None:
            self._out.write(trace.format_sample(sample) + "\n")
            self._out.flush()
            self._ooms_written = sample.ooms

    def _cuda_sample(self, wall: float) -> Sample:
        if self.device != "cuda":
            self._start_cuda()
        sample = sample_from_cuda_stats(self.iteration, torch.cuda.memory_stats(), wall)
        torch.cuda.reset_peak_memory_stats()
        if sample.alloc_retries and not self._retry_warned:
            self._retry_warned = True
            print(
                f"mig-run: warning: the CUDA allocator retried {sample.alloc_retries} "
                "allocation(s) after flushing its cache: the slice is nearly full",
                file=sys.stderr,
            )
        return sample

    def _start_cuda(self) -> None:
        """First CUDA sample: measure the context, cap an emulated slice, stop CPU tracking."""
        self.device = "cuda"
        free, total = torch.cuda.mem_get_info()
        self.context = cuda_context_bytes(free, total, torch.cuda.memory_reserved())
        if self.config.capacity is not None:
            usable = max(0, self.config.capacity - self.context)
            torch.cuda.set_per_process_memory_fraction(min(1.0, usable / total))
        self._want_tracking = False
        if self.tracking:
            self._set_tracking(False)
        self._write_meta()

    def _write_meta(self) -> None:
        meta = {
            "context_bytes": self.context,
            "device": self.device,
            "pid": os.getpid(),
            "source": self.source,
            "since": self.source_since,
        }
        path = Path(f"{self.config.out}.meta")
        tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(meta) + "\n", encoding="utf-8")
        os.replace(tmp, path)

    # -- control -------------------------------------------------------------

    def _read_control(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._control_read < CONTROL_PERIOD:
            return
        self._control_read = now
        want = True
        if self.config.control is not None:
            try:
                want = self.config.control.read_text(encoding="utf-8").strip() != "off"
            except OSError:
                want = True
        if self.config.capacity is not None:
            want = True  # the emulated cap needs the count
        if self.device == "cuda":
            want = False  # the allocator's own statistics
        self._want_tracking = want

    def _set_tracking(self, on: bool) -> None:
        """Push or pop the tracker, only where the dispatch stack is ours alone."""
        stack = _dispatch_stack()
        if on and not stack:
            if self._tracked_before:
                self.tracker.rescan()  # tensors made while the mode was off
            self._tracked_before = True
            with self.tracker._lock:
                self.tracker.peak = self.tracker.current
            self.tracker.__enter__()
            self.tracking = True
        elif not on and stack == [self.tracker]:
            self.tracker.__exit__(None, None, None)
            self.tracking = False

    # -- the end -------------------------------------------------------------

    def _excepthook(self, etype: Any, value: BaseException, tb: Any) -> None:
        found = _find_oom(value)
        if found is not None:
            try:
                self._write_exit(*found)
            except Exception:  # never hide the job's own traceback
                pass
        hook = self._prev_excepthook or sys.__excepthook__
        hook(etype, value, tb)

    def _write_exit(self, exc: BaseException, kind: str = "torch") -> None:
        message = str(exc)
        requested = self.tracker.refused
        if self.device == "cuda":
            stats = torch.cuda.memory_stats()
            requested = int(stats.get("allocated_bytes.all.peak", 0)) + tried_bytes(message)
        record = {
            "exception": f"{type(exc).__module__}.{type(exc).__qualname__}",
            "kind": kind,
            "message": message[:2000],
            "requested_bytes": requested,
            "context_bytes": self.context,
            "iteration": self.iteration,
        }
        Path(f"{self.config.out}.exit").write_text(json.dumps(record) + "\n", encoding="utf-8")


def _find_oom(exc: BaseException | None) -> tuple[BaseException, str] | None:
    """The out-of-memory exception in an exception's cause/context chain and its form
    (``oom.FORMS``: torch.OutOfMemoryError, the allocator's NVML assert, cuBLAS/cuDNN
    allocation failures, CUDA error: out of memory ...), if any."""
    seen = 0
    while exc is not None and seen < 20:
        if isinstance(exc, torch.OutOfMemoryError):
            return exc, "torch"
        form = oom.classify_exception(exc, depth=1)
        if form is not None:
            return exc, form.kind
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


def is_spawned_child(argv: list[str] | None = None) -> bool:
    """True in a process that multiprocessing started by spawn or forkserver."""
    argv = list(sys.orig_argv if argv is None else argv)
    if "--multiprocessing-fork" in argv:
        return True
    code = " ".join(argv)
    return "multiprocessing.spawn" in code or "multiprocessing.forkserver" in code


def activate_from_env(env: Mapping[str, str] | None = None) -> Probe | None:
    """Start the probe if ``mig-run`` asked for one; the main process only.

    The probe's variables are removed from ``os.environ`` so that the job's own
    subprocesses (nested scripts, spawned workers) do not probe into the same file."""
    env = os.environ if env is None else env
    config = ProbeConfig.from_env(env)
    if config is None or is_spawned_child():
        return None
    for name in PROBE_ENV:
        os.environ.pop(name, None)
    return Probe(config).install()
