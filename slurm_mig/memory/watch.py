"""One launch of the job, watched: its stderr copied and kept, its samples traced and
forecast, and how it ended (a restart decision, an out-of-memory, or its exit status)."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol, TextIO

from . import oom, trace
from .options import EXIT_FAILED
from .sources import (
    ForecastSetup,
    MemorySource,
    NvmlSource,
    NvmlTakeOver,
    ProbeSource,
    read_json,
)
from .trace import Sample, human

__all__ = [
    "MAX_UPDATES",
    "OOM_FACTOR",
    "Outcome",
    "StderrTee",
    "TraceWriter",
    "WatchHost",
    "merge_samples",
    "trace_path",
]


class WatchHost(Protocol):
    """What a launch's watch needs of the ``mig-run`` that started it (`runner.Runner`
    is one): the options, the slice and memory source, the forecaster to build,
    whether it is stopping, and the two calls it makes back."""

    opts: Any
    choice: Any
    stopping: bool
    make_forecaster: Any

    @property
    def slice(self) -> Any: ...

    def say(self, message: str) -> None: ...

    def restart_problem(self, need: int) -> str | None: ...


MAX_UPDATES = 16  # forecaster updates per poll; a larger backlog is merged (peaks kept)
OOM_FACTOR = 1.1  # a real OOM restarts with the observed peak times this


@dataclass(frozen=True)
class Outcome:
    """How one launch of the command ended."""

    exit_code: int
    need: int | None = None  # bytes: restart on a slice this large
    reason: str = ""
    oom: bool = False


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
    """One launch's samples: the sources, the observed peak, the restart decision."""

    def __init__(
        self,
        runner: WatchHost,
        out: Path,
        tee: StderrTee,
        kills: int = -1,
        nvml: NvmlSource | None = None,
    ) -> None:
        self.runner = runner
        self.out = out
        self.tee = tee
        self.kills = kills
        self.probe = ProbeSource(out, runner.opts.context)
        self.nvml = nvml
        self.source: MemorySource = self.probe
        capacity = runner.slice.capacity
        self.take_over = NvmlTakeOver(runner.choice, capacity)
        self.setup = ForecastSetup(runner.make_forecaster, capacity, runner.opts, self._announce)
        self.announced = ""
        self.peak = 0
        self.ooms = 0
        self.last_need: int | None = None
        self.last_iteration: int | None = None
        self.warned = False

    @property
    def needs_samples(self) -> bool:
        forecaster = self.source.forecaster
        return forecaster is None or bool(forecaster.needs_samples)

    def observe(self, s: Sample) -> None:
        self.peak = max(self.peak, s.requested_peak, s.allocated_peak)
        self.ooms = max(self.ooms, s.ooms)
        self.last_iteration = s.iteration

    def _announce(self, what: str) -> None:
        if what and what != self.announced:
            self.announced = what
            self.runner.say(f"memory source: {what}")

    def poll(self, writer: TraceWriter) -> Outcome | None:
        """Forecast on new samples (the probe's, or NVML's once it is the source); the
        Outcome of a restart decision, if one was made."""
        probe = self.probe.read()
        nvml = self.nvml.read() if self.nvml is not None else []
        self.take_over.saw_probe(probe)
        meta = read_json(Path(f"{self.out}.meta")) or {}
        if (
            self.nvml is not None
            and self.source is self.probe
            and nvml
            and self.take_over.due(nvml, meta, self.probe.context)
        ):
            self.source = self.nvml
        samples = nvml if self.source is self.nvml else probe
        if not samples:
            return None
        self.source.refresh(meta, self.setup)
        for s in samples:
            writer.write(s)
            self.observe(s)
        return self._forecast(self.source.current(samples))

    def drain(self, writer: TraceWriter) -> None:
        """The samples that came after the job ended: traced (the probe's) and observed."""
        for s in self.probe.read():
            writer.write(s)
            self.observe(s)
        if self.nvml is not None:
            for s in self.nvml.read():
                self.observe(s)

    def _forecast(self, samples: list[Sample]) -> Outcome | None:
        """The source's forecaster on ``samples``: a restart Outcome, or None (a forecast
        that cannot be acted on is one warning and the job goes on)."""
        forecaster = self.source.forecaster
        assert forecaster is not None
        for s in merge_samples(samples, MAX_UPDATES):
            decision = forecaster.update(s)
            need = getattr(decision, "need", None)
            if need is not None:
                self.last_need = int(need)
            if not getattr(decision, "restart", False) or self.runner.stopping:
                continue
            problem = self.runner.restart_problem(int(need))
            reason = (
                f"forecast at iteration {s.iteration}: {decision.reason}"
                if getattr(decision, "reason", "")
                else f"forecast at iteration {s.iteration}: the job needs {human(need)}"
            )
            if problem is None:
                return Outcome(exit_code=EXIT_FAILED, need=int(need), reason=reason)
            if not self.warned:
                self.warned = True
                self.runner.say(f"warning: {reason}; {problem}; the job goes on")
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
            self.runner.say(
                f"the job was killed by {form.what} at iteration {where}; a larger GPU slice "
                "does not help: ask for more host memory (--mem)"
            )
            return Outcome(exit_code=code)
        context = int(info.get("context_bytes", self.probe.context))
        observed = max(self.peak, int(info.get("requested_bytes", 0)))
        if form.kind == "nvml-assert" and 0 < observed + context < self.runner.slice.capacity / 2:
            self.runner.say(
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
