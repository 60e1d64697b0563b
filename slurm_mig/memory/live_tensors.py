"""Live tensor bytes on the CPU, the in-job probe's count where there is no CUDA
allocator: a ``TorchDispatchMode`` that counts the storage of every op's output once and
subtracts it when the storage is freed, and that raises ``torch.OutOfMemoryError`` past an
emulated capacity (memory/probe.py pushes it). This module imports torch."""

from __future__ import annotations

import gc
import math
import threading
import weakref
from collections.abc import Mapping
from functools import partial
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["LiveTensorTracker", "format_bytes", "planned_bytes"]


def format_bytes(n: float) -> str:
    """``1536`` -> ``1.50 KiB``: sizes in messages."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} GiB"  # pragma: no cover


class LiveTensorTracker(TorchDispatchMode):
    """Bytes of live tensor storages created by ops while the mode is on the stack.

    Each new storage of an op's output is counted once (keyed by the storage's Python
    object, which PyTorch keeps for the storage's whole life, so views and in-place
    results share the key) and a finalizer subtracts it when the storage is freed.
    With a capacity set, an op whose new outputs would take the live bytes plus the
    context past it raises ``torch.OutOfMemoryError``; the outputs are dropped.
    """

    def __init__(self, capacity: int | None = None, context: int = 0) -> None:
        super().__init__()
        self.capacity = capacity
        self.context = context
        self.enabled = True
        self.current = 0
        self.peak = 0
        self.ooms = 0
        self.refused = 0  # live bytes the program would have held at its failed request
        self._live: dict[int, tuple[int, Any]] = {}  # id(storage) -> (bytes, weak ref)
        self._lock = threading.RLock()  # finalizers may run inside _admit (GC)

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        # Let torch.compile compile; ops inside compiled graphs are not seen.
        return True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.capacity is not None and self.enabled and func in _FACTORIES:
            planned = planned_bytes(func, args, kwargs)
            if self.context + self.current + planned > self.capacity:
                self._refuse(planned, func)  # before the allocation, not after
        out = func(*args, **kwargs)
        if self.enabled:
            fresh = self._fresh(out)
            if fresh:
                self._admit(fresh, func)
        return out

    def _fresh(self, out: Any) -> list[tuple[Any, int, int]]:
        """(storage or None, key, added bytes) for storages not counted yet or resized."""
        items = (out,) if isinstance(out, torch.Tensor) else out
        if not isinstance(items, (tuple, list)):
            return []
        found: list[tuple[Any, int, int]] = []
        live = self._live
        for t in items:
            if not isinstance(t, torch.Tensor):
                continue
            try:
                storage = t.untyped_storage()
                nbytes = storage.nbytes()
            except (RuntimeError, NotImplementedError, TypeError):
                continue  # sparse, nested or functional tensors have no plain storage
            key = id(storage)
            known = live.get(key)
            if known is None:
                if nbytes and all(k != key for _, k, _ in found):
                    found.append((storage, key, nbytes))
            elif known[0] != nbytes:  # resize_ grew or shrank a counted storage
                found.append((None, key, nbytes - known[0]))
        return found

    def _admit(self, fresh: list[tuple[Any, int, int]], func: Any) -> None:
        added = sum(delta for _, _, delta in fresh)
        with self._lock:
            if (
                self.capacity is not None
                and added > 0
                and self.context + self.current + added > self.capacity
            ):
                self._refuse(added, func)
            self._register(fresh)
            self.current += added
            if self.current > self.peak:
                self.peak = self.current

    def _register(self, fresh: list[tuple[Any, int, int]]) -> None:
        """Count storages; a weak reference's callback subtracts each when it is freed
        (cheaper than weakref.finalize on this hot path)."""
        live = self._live
        for storage, key, delta in fresh:
            if storage is None:
                nbytes, ref = live[key]
                live[key] = (nbytes + delta, ref)
            else:
                live[key] = (delta, weakref.ref(storage, partial(self._release, key)))

    def _refuse(self, added: int, func: Any) -> None:
        """Count and raise the emulated out-of-memory error of a request of ``added`` bytes."""
        assert self.capacity is not None
        self.ooms += 1
        self.refused = max(self.refused, self.current + added)
        raise torch.OutOfMemoryError(
            f"emulated device out of memory (mig-run): {func} tried to allocate "
            f"{format_bytes(added)}; {format_bytes(self.current)} in use by tensors "
            f"and {format_bytes(self.context)} by the context, capacity "
            f"{format_bytes(self.capacity)}"
        )

    def _release(self, key: int, ref: Any = None) -> None:
        with self._lock:
            entry = self._live.get(key)
            if entry is not None and (ref is None or entry[1] is ref):
                del self._live[key]
                self.current -= entry[0]

    def rescan(self) -> int:
        """Count live tensors made while the mode was off (a garbage-collector walk,
        done once when tracking is switched back on); returns the bytes added."""
        added = 0
        with self._lock:
            for obj in gc.get_objects():
                if issubclass(type(obj), torch.Tensor):
                    fresh = self._fresh(obj)
                    self._register(fresh)
                    added += sum(delta for _, _, delta in fresh)
            self.current += added
            self.peak = max(self.peak, self.current)
        return added

    def take_peak(self) -> tuple[int, int]:
        """(peak since the last call, current); the next peak starts from current."""
        with self._lock:
            peak, current = self.peak, self.current
            self.peak = current
        return peak, current


_aten = torch.ops.aten
# Factories whose size is known before they run: the cap is checked before they allocate.
_SIZE_FIRST = {
    _aten.empty.memory_format,
    _aten.empty_strided.default,
    _aten.zeros.default,
    _aten.ones.default,
    _aten.full.default,
    _aten.rand.default,
    _aten.randn.default,
}
_SIZE_LAST = {_aten.randint.default, _aten.randint.low}
_NEW = {
    _aten.new_empty.default,
    _aten.new_zeros.default,
    _aten.new_ones.default,
    _aten.new_full.default,
}
_LIKE = {
    _aten.empty_like.default,
    _aten.zeros_like.default,
    _aten.ones_like.default,
    _aten.full_like.default,
    _aten.rand_like.default,
    _aten.randn_like.default,
}
_FACTORIES = _SIZE_FIRST | _SIZE_LAST | _NEW | _LIKE


def planned_bytes(func: Any, args: tuple, kwargs: Mapping[str, Any]) -> int:
    """Bytes a factory op is about to allocate, from its size and dtype; 0 if unknown."""
    dtype = kwargs.get("dtype")
    if func in _LIKE:
        src = args[0]
        return src.numel() * (dtype or src.dtype).itemsize
    if func in _NEW:
        size, dtype = args[1], dtype or args[0].dtype
    elif func in _SIZE_LAST:
        size = next((a for a in reversed(args) if isinstance(a, (list, tuple))), ())
        dtype = dtype or torch.int64
    else:
        size = args[0]
    dtype = dtype or torch.get_default_dtype()
    try:
        dims = [int(d) for d in size]
    except TypeError:
        return 0
    if func is _aten.empty_strided.default:
        if any(d == 0 for d in dims):
            return 0
        return (1 + sum((d - 1) * int(st) for d, st in zip(dims, args[1]))) * dtype.itemsize
    return math.prod(dims) * dtype.itemsize
