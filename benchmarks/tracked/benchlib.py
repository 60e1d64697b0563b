"""Helpers of the tracked benchmarks (``make bench``).

Each benchmark times one call with pytest-benchmark and may record quality figures that
are not timings in ``benchmark.extra_info["quality"]``, every one lower-is-better
(makespan over a lower bound, mean JCT, search nodes); ``compare.py`` compares timings
and quality figures with the stored baseline.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

BENCHMARKS = Path(__file__).resolve().parent.parent


def _collect() -> None:
    """gc.collect() as a pedantic set-up (which must return None, or the call's args)."""
    gc.collect()


def timed(benchmark, fn: Callable[[], T], rounds: int) -> T:
    """``fn`` timed (wall clock) ``rounds`` times after one untimed warm-up call
    (first-call imports and caches), each round after an untimed ``gc.collect()`` so that
    no round pays for the garbage of the one before; the result of its last call."""
    return benchmark.pedantic(fn, setup=_collect, rounds=rounds, iterations=1, warmup_rounds=1)


def quality(benchmark, **figures: float) -> None:
    """Records lower-is-better figures for ``compare.py`` to compare with the baseline."""
    benchmark.extra_info.setdefault("quality", {}).update({k: float(v) for k, v in figures.items()})


def import_script(name: str):
    """A module of the scripts under benchmarks/ (not a package), e.g. planner_cycle."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    return __import__(name)
