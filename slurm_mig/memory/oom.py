"""The forms an out-of-memory failure takes on a MIG slice, recognised from an exception,
from the text a job wrote (its stderr tail) or from the kernel's OOM-kill counters.
Standard library only: the probe in the job and the mig-run parent both use it.

GPU forms (FACTS.md, "MIG out-of-memory forms"): ``torch.OutOfMemoryError``; the caching
allocator's ``NVML_SUCCESS == r INTERNAL ASSERT FAILED ... CUDACachingAllocator.cpp`` (on MIG
the allocator's NVML query fails on its out-of-memory path, pytorch issue 112377);
``CUBLAS_STATUS_ALLOC_FAILED``, ``CUDNN_STATUS_ALLOC_FAILED``; ``CUDA error: out of memory``
(kernels) and NCCL's ``Cuda failure 'out of memory'``; and the other frameworks' own:
JAX/XLA ``RESOURCE_EXHAUSTED: Out of memory``, TensorFlow ``OOM when allocating``, CuPy
``OutOfMemoryError``. Host memory: a child killed by SIGKILL while the kernel's OOM-kill
counter grew, which no larger slice cures.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

TAIL_BYTES = 64 * 1024  # the most of a job's stderr kept, and classified
TAIL_LINES = 60  # the failure is in the last lines: earlier text is the job's own log


@dataclass(frozen=True)
class OomForm:
    """A recognised out-of-memory failure."""

    kind: str  # a key of FORMS, or "host"
    what: str  # a short phrase for messages
    gpu: bool = True  # False: host memory; a larger slice does not help


# kind -> (pattern over the text, phrase). Order matters: the most specific first.
FORMS: dict[str, tuple[re.Pattern[str], str]] = {
    "nvml-assert": (
        re.compile(r"NVML_SUCCESS == \w+ INTERNAL ASSERT FAILED at [^\n]*CUDACachingAllocator"),
        "the CUDA caching allocator's NVML assert on its out-of-memory path",
    ),
    "cublas": (re.compile(r"CUBLAS_STATUS_ALLOC_FAILED"), "a cuBLAS allocation failure"),
    "cudnn": (re.compile(r"CUDNN_STATUS_ALLOC_FAILED"), "a cuDNN allocation failure"),
    "torch": (
        re.compile(r"(?:torch\.(?:cuda\.)?)?OutOfMemoryError\b|CUDA out of memory\."),
        "torch.OutOfMemoryError",
    ),
    "nccl": (re.compile(r"Cuda failure '?out of memory'?"), "an NCCL CUDA out-of-memory failure"),
    "cuda": (re.compile(r"CUDA error: out of memory"), "CUDA error: out of memory"),
    "xla": (
        re.compile(r"RESOURCE_EXHAUSTED: Out of memory"),
        "an XLA (JAX) RESOURCE_EXHAUSTED out of memory",
    ),
    "tensorflow": (
        re.compile(r"OOM when allocating tensor"),
        "a TensorFlow OOM when allocating a tensor",
    ),
    "cupy": (
        re.compile(r"cupy\.cuda\.memory\.OutOfMemoryError|Out of memory allocating [0-9,]+ bytes"),
        "a CuPy out-of-memory error",
    ),
}
HOST = OomForm("host", "the kernel's OOM killer (host memory, not the GPU slice)", gpu=False)


def classify_text(text: str) -> OomForm | None:
    """The out-of-memory form named in ``text`` (an exception's type and message, or the
    last lines a job wrote), or None."""
    found: tuple[int, str] | None = None
    for kind, (pattern, _) in FORMS.items():
        for m in pattern.finditer(text):  # the latest mention is the failure
            if found is None or m.start() > found[0]:
                found = (m.start(), kind)
    if found is None:
        return None
    return OomForm(found[1], FORMS[found[1]][1])


def classify_exception(exc: BaseException | None, depth: int = 20) -> OomForm | None:
    """The out-of-memory form of an exception or of one in its cause/context chain."""
    seen = 0
    while exc is not None and seen < depth:
        kind = type(exc)
        text = f"{kind.__module__}.{kind.__qualname__}: {str(exc)[:4000]}"
        form = classify_text(text)
        if form is not None:
            return form
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


def classify_tail(tail: bytes) -> OomForm | None:
    """The out-of-memory form in the last ``TAIL_LINES`` lines of a job's stderr tail."""
    text = tail[-TAIL_BYTES:].decode("utf-8", errors="replace")
    lines = text.splitlines()[-TAIL_LINES:]
    return classify_text("\n".join(line[:2000] for line in lines))


class Tail:
    """The last ``limit`` bytes written through it (a bounded ring of a job's stderr)."""

    def __init__(self, limit: int = TAIL_BYTES) -> None:
        self.limit = limit
        self._buf = bytearray()

    def add(self, chunk: bytes) -> None:
        self._buf += chunk
        if len(self._buf) > 2 * self.limit:
            del self._buf[: len(self._buf) - self.limit]

    def bytes(self) -> bytes:
        return bytes(self._buf[-self.limit :])


# ---------------------------------------------------------------------------
# Host memory: the kernel's OOM-kill counters


def oom_kills(proc: Path = Path("/proc"), cgroup_root: Path = Path("/sys/fs/cgroup")) -> int:
    """OOM kills the kernel counted so far: in this process's memory cgroup (v2
    ``memory.events``, v1 ``memory.oom_control``) when readable, else system-wide
    (``/proc/vmstat``). Compare two readings; -1 when none can be read."""
    for path in _cgroup_counters(proc, cgroup_root):
        value = _read_counter(path, "oom_kill")
        if value is not None:
            return value
    value = _read_counter(proc / "vmstat", "oom_kill")
    return -1 if value is None else value


def _cgroup_counters(proc: Path, root: Path) -> list[Path]:
    try:
        lines = (proc / "self" / "cgroup").read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        controllers, where = parts[1].split(","), parts[2].lstrip("/")
        if parts[0] == "0" and parts[1] == "":  # v2 unified hierarchy
            out.append(root / where / "memory.events")
        elif "memory" in controllers:  # v1
            out.append(root / "memory" / where / "memory.oom_control")
    return out


def _read_counter(path: Path, name: str) -> int | None:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == name and value.strip().isdigit():
            return int(value.strip())
    return None
