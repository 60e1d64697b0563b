"""Device memory of a MIG slice through NVML, for jobs the PyTorch probe does not see
(JAX, TensorFlow, CuPy, a second CUDA process of the job): one ``Sample`` per interval,
the timer as the iteration clock.

Always on the MIG device handle (``nvmlDeviceGetHandleByUUID`` of the instance's
``MIG-...`` UUID): inside a slice the parent GPU answers NO_PERMISSION. Per process with
``nvmlDeviceGetComputeRunningProcesses`` where the driver reports each process's memory
(the job's processes; all of the instance's when none of their pids is the job's, as in a
container's pid namespace), else the instance's used memory (``nvmlDeviceGetMemoryInfo``).
pynvml is imported only when a sampler opens; it runs in the mig-run parent only.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .trace import Sample

SUBSAMPLES = 4  # reads per interval; a sample keeps their largest


class SamplerUnavailable(RuntimeError):
    """NVML cannot sample this slice: the message says why."""


def job_pids(root: int, proc: Path = Path("/proc")) -> set[int]:
    """``root`` and its descendants (from /proc/*/stat parent pids)."""
    children: dict[int, list[int]] = {}
    for entry in proc.iterdir() if proc.is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1 and fields[1].isdigit():
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    out, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid not in out:
            out.add(pid)
            todo.extend(children.get(pid, ()))
    return out


class NvmlSlice:
    """Used memory of one MIG device, read through NVML."""

    def __init__(self, uuid: str, nvml: Any = None) -> None:
        if not uuid.startswith("MIG-"):
            raise SamplerUnavailable(
                f"CUDA_VISIBLE_DEVICES={uuid!r} is not a MIG device; NVML is read on the "
                "MIG device handle only"
            )
        self.uuid = uuid
        self._nvml = nvml
        self.handle: Any = None
        self.per_process = False

    @property
    def nvml(self) -> Any:
        if self._nvml is None:
            try:
                import pynvml
            except ImportError:
                raise SamplerUnavailable("nvidia-ml-py is not installed (import pynvml)") from None
            self._nvml = pynvml
        return self._nvml

    def open(self) -> str:
        """Initialise NVML, find the MIG device, choose per-process or instance totals;
        returns a phrase naming the source."""
        nvml = self.nvml
        try:
            nvml.nvmlInit()
            self.handle = nvml.nvmlDeviceGetHandleByUUID(self.uuid)
            if not int(getattr(nvml.nvmlDeviceIsMigDeviceHandle(self.handle), "value", 1)):
                raise SamplerUnavailable(f"{self.uuid} is not a MIG device handle")
            try:
                procs = nvml.nvmlDeviceGetComputeRunningProcesses(self.handle)
                self.per_process = all(p.usedGpuMemory is not None for p in procs)
            except nvml.NVMLError:
                self.per_process = False
            nvml.nvmlDeviceGetMemoryInfo(self.handle)
        except nvml.NVMLError as exc:
            raise SamplerUnavailable(f"NVML on {self.uuid}: {_text(exc)}") from None
        how = "the job's processes" if self.per_process else "the instance's total"
        return f"NVML used memory of {self.uuid} ({how})"

    def used(self, pids: set[int]) -> int:
        """Bytes in use now: the job's processes', or the instance's."""
        nvml = self.nvml
        if self.per_process:
            try:
                procs = nvml.nvmlDeviceGetComputeRunningProcesses(self.handle)
                if all(p.usedGpuMemory is not None for p in procs):
                    mine = [p for p in procs if p.pid in pids] or procs
                    return sum(int(p.usedGpuMemory) for p in mine)
            except nvml.NVMLError:
                pass
            self.per_process = False  # the driver stopped reporting: instance totals
        try:
            return int(nvml.nvmlDeviceGetMemoryInfo(self.handle).used)
        except nvml.NVMLError as exc:
            raise SamplerUnavailable(f"NVML on {self.uuid}: {_text(exc)}") from None

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except Exception:
            pass


def _text(exc: Exception) -> str:
    s = str(exc)
    return s[2:-1] if len(s) >= 3 and s[0] == "b" and s[1] in "'\"" and s[-1] == s[1] else s


class NvmlFeed:
    """A thread that reads a slice every ``interval`` seconds (``SUBSAMPLES`` times) and
    queues one Sample per interval: iteration = intervals since start, peak = the largest
    read, current = the last."""

    def __init__(
        self,
        source: NvmlSlice,
        interval: float,
        pids: Callable[[], set[int]],
        on_error: Callable[[str], None] | None = None,
    ) -> None:
        self.source = source
        self.interval = interval
        self.pids = pids
        self.on_error = on_error
        self._samples: list[Sample] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._start = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="mig-run-nvml", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        tick = 0
        step = self.interval / SUBSAMPLES
        try:
            while not self._stop.is_set():
                pids = self.pids()
                reads = []
                for _ in range(SUBSAMPLES):
                    reads.append(self.source.used(pids))
                    if self._stop.wait(step):
                        break
                wall = time.monotonic() - self._start
                s = Sample(tick, max(reads), reads[-1], max(reads), reads[-1], wall=wall)
                with self._lock:
                    self._samples.append(s)
                tick += 1
        except SamplerUnavailable as exc:
            if self.on_error is not None:
                self.on_error(str(exc))

    def read(self) -> list[Sample]:
        """The samples queued since the last read."""
        with self._lock:
            out, self._samples = self._samples, []
        return out

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2 * self.interval + 1)
        self.source.close()


def open_feed(
    uuid: str,
    interval: float,
    root_pid: int,
    nvml: Any = None,
    on_error: Callable[[str], None] | None = None,
) -> tuple[NvmlFeed, str]:
    """Start sampling the MIG device ``uuid``; (the feed, a phrase naming the source).
    Raises SamplerUnavailable with the reason."""
    source = NvmlSlice(uuid, nvml)
    what = source.open()
    return NvmlFeed(source, interval, lambda: job_pids(root_pid), on_error), what


__all__ = ["NvmlFeed", "NvmlSlice", "SamplerUnavailable", "job_pids", "open_feed"]
