"""Pause Python's cyclic garbage collector while a planner runs.

Planning a large batch allocates hundreds of thousands of small containers while the
snapshot keeps as many alive; each allocation burst then triggers collections that
scan every live object again (measured: 70 % of a 10,000-job re-plan). Planners make
no reference cycles worth collecting, and reference counting frees their garbage, so
the collector is paused for the call and restored afterwards (nested calls keep it
paused until the outermost one ends).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["paused_gc"]


@contextmanager
def paused_gc() -> Iterator[None]:
    """Disable the cyclic collector inside the block, if it was enabled."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
