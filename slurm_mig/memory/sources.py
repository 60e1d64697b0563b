"""Where one launch's memory samples come from: the in-job probe's file or the slice's
NVML sampler, each behind one interface that also starts the forecaster for its samples;
and which of them ``--memory-source`` asks for."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from . import trace
from .options import Options
from .trace import Sample

__all__ = [
    "CHOICES",
    "FORECAST_DEPS",
    "NVML_GRACE",
    "NVML_SEEN",
    "UNSEEN",
    "ForecastSetup",
    "ForecasterFactory",
    "ForecasterLike",
    "MemorySource",
    "NvmlSource",
    "NvmlTakeOver",
    "ProbeSource",
    "ProbeTail",
    "SourceChoice",
    "default_forecaster",
    "missing_forecast_deps",
    "open_nvml",
    "parse_sample",
    "read_json",
    "warm_up",
]

NVML_GRACE = 10  # NVML samples without any from the probe before NVML takes over (auto)
NVML_SEEN = 3  # NVML samples in a row above what the probe accounts for (auto)
UNSEEN = 256 * 2**20  # memory NVML sees beyond the probe's before it counts (or 5 %)
FORECAST_DEPS = ("numpy", "scipy")


class ForecasterLike(Protocol):
    def update(self, sample: Sample) -> Any: ...

    @property
    def needs_samples(self) -> bool: ...


ForecasterFactory = Callable[[int, int, "int | None"], ForecasterLike]


def default_forecaster(capacity: int, context: int, horizon: int | None) -> ForecasterLike:
    """The forecaster (numpy and scipy, imported here, in the parent, never in the job)."""
    from .forecast import Forecaster

    return Forecaster(capacity, context=context, horizon=horizon)


def missing_forecast_deps() -> list[str]:
    """The forecaster's libraries that this Python lacks."""
    import importlib.util

    return [name for name in FORECAST_DEPS if importlib.util.find_spec(name) is None]


def warm_up() -> None:
    """Import the forecaster's libraries while the job starts (about 2 s)."""
    try:
        from scipy.stats import chi2  # noqa: F401

        from . import forecast  # noqa: F401
    except ImportError:
        pass


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


def read_json(path: Path) -> dict | None:
    """The first line of ``path`` as JSON; None when missing or not JSON."""
    try:
        return json.loads(path.read_text(encoding="utf-8").splitlines()[0])
    except (OSError, ValueError, IndexError):
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


@dataclass(frozen=True)
class ForecastSetup:
    """What a source needs to start a forecaster, and where it names itself."""

    make: ForecasterFactory
    capacity: int
    opts: Options
    announce: Callable[[str], None]


class MemorySource(ABC):
    """One stream of samples and the forecaster that reads it."""

    def __init__(self) -> None:
        self.forecaster: ForecasterLike | None = None
        self.since = 0  # samples of earlier iterations are not forecast

    @abstractmethod
    def read(self) -> list[Sample]:
        """The samples that came since the last read."""

    @abstractmethod
    def refresh(self, meta: Mapping[str, Any], setup: ForecastSetup) -> None:
        """Start the forecaster when there is none, or when the job it follows changed."""

    def current(self, samples: list[Sample]) -> list[Sample]:
        """The samples the forecaster takes."""
        return [s for s in samples if s.iteration >= self.since]


class ProbeSource(MemorySource):
    """The in-job PyTorch probe: a sample per iteration, in its CSV file."""

    def __init__(self, out: Path, context: int) -> None:
        super().__init__()
        self.tail = ProbeTail(out)
        self.context = context  # the CUDA context, once the probe measured it
        self.who: tuple[Any, ...] = ()

    def read(self) -> list[Sample]:
        return self.tail.read()

    def refresh(self, meta: Mapping[str, Any], setup: ForecastSetup) -> None:
        who = (meta.get("pid"), meta.get("device"), meta.get("source"))
        if self.forecaster is not None and who == self.who:
            return
        # a new process, CUDA came up, or another iteration source took over
        self.who = who
        self.since = int(meta.get("since") or 0)
        self.context = int(meta.get("context_bytes", setup.opts.context))
        self.forecaster = setup.make(setup.capacity, self.context, setup.opts.iterations)
        device = meta.get("device") or "cpu"
        what = (
            "the PyTorch CUDA allocator (torch.cuda.memory_stats)"
            if device == "cuda"
            else "PyTorch live tensors (CPU)"
        )
        setup.announce(f"{what}, a sample per iteration ({meta.get('source') or '-'})")


class NvmlSource(MemorySource):
    """The MIG slice's memory through NVML: a sample per ``--sample-interval``, the timer
    as the iteration clock."""

    def __init__(self, nvml_slice: Any, what: str) -> None:
        super().__init__()
        self.slice = nvml_slice
        self.what = what
        self.feed: Any = None

    def start(self, pid: int, interval: float, say: Callable[[str], None]) -> None:
        """Sample the job's processes (``pid`` and its descendants)."""
        from .nvml_sampler import NvmlFeed, job_pids

        self.feed = NvmlFeed(
            self.slice,
            interval,
            lambda: job_pids(pid),
            on_error=lambda why: say(f"warning: NVML sampling stopped: {why}"),
        )

    def read(self) -> list[Sample]:
        return self.feed.read() if self.feed is not None else []

    def refresh(self, meta: Mapping[str, Any], setup: ForecastSetup) -> None:
        if self.forecaster is not None:
            return
        opts = setup.opts
        ticks = None
        if opts.duration:
            ticks = max(1, round(opts.duration / opts.sample_interval))
        self.forecaster = setup.make(setup.capacity, 0, ticks)  # the context is in NVML's
        self.since = 0
        setup.announce(
            f"{self.what}, a sample every {opts.sample_interval:g} s (the timer is "
            "the iteration clock)"
        )

    def stop(self) -> None:
        if self.feed is not None:
            self.feed.stop()

    def close(self) -> None:
        """Close the slice of a job that never started."""
        self.slice.close()


@dataclass(frozen=True)
class SourceChoice:
    """What one ``--memory-source`` asks of NVML."""

    opens_nvml: bool  # sample the slice through NVML too
    nvml_only: bool  # NVML or nothing: the source from its first samples, an error without


CHOICES = {
    "torch": SourceChoice(opens_nvml=False, nvml_only=False),
    "auto": SourceChoice(opens_nvml=True, nvml_only=False),
    "nvml": SourceChoice(opens_nvml=True, nvml_only=True),
}


def open_nvml(
    choice: SourceChoice, env: Mapping[str, str], say: Callable[[str], None]
) -> tuple[NvmlSource | None, str]:
    """(the NVML source of the job's MIG slice, or None; why not)."""
    if not choice.opens_nvml:
        return None, ""
    uuid = env.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    if not uuid.startswith("MIG-"):
        return None, "CUDA_VISIBLE_DEVICES names no MIG device (MIG-<uuid>)"
    from .nvml_sampler import NvmlSlice, SamplerUnavailable

    try:
        nvml_slice = NvmlSlice(uuid)
        what = nvml_slice.open()
    except SamplerUnavailable as exc:
        if not choice.nvml_only:
            say(f"memory source: the PyTorch probe only; {exc}")
        return None, str(exc)
    return NvmlSource(nvml_slice, what), ""


class NvmlTakeOver:
    """When NVML replaces the probe as the source: asked for (``--memory-source nvml``), or
    (auto) the probe has sent nothing after ``NVML_GRACE`` NVML samples of a slice in use, or
    NVML sees memory the probe does not account for (another framework or process)
    ``NVML_SEEN`` times in a row."""

    def __init__(self, choice: SourceChoice, capacity: int) -> None:
        self.at_once = choice.nvml_only
        self.capacity = capacity
        self.probe_seen = 0  # probe samples seen
        self.probe_current = 0  # the probe's last device bytes (reserved, else requested)
        self.nvml_seen = 0  # NVML samples seen
        self.unseen = 0  # NVML samples in a row with memory the probe does not account for

    def saw_probe(self, samples: list[Sample]) -> None:
        """Count the probe's new samples."""
        if samples:
            self.probe_seen += len(samples)
            last = samples[-1]
            self.probe_current = max(last.reserved_current, last.requested_current)

    def due(self, nvml: list[Sample], meta: Mapping[str, Any], context: int) -> bool:
        """Whether NVML becomes the source with these new NVML samples."""
        if self.at_once:
            return True
        self.nvml_seen += len(nvml)
        if self.probe_seen == 0:
            return self.nvml_seen >= NVML_GRACE and any(s.requested_current > 0 for s in nvml)
        accounted = self.probe_current + (context if meta.get("device") == "cuda" else 0)
        slack = max(UNSEEN, 0.05 * self.capacity)
        for s in nvml:
            self.unseen = self.unseen + 1 if s.requested_current > accounted + slack else 0
        return self.unseen >= NVML_SEEN
