"""What several test modules share: where the project's reference data lies, and
batches small enough to plan by hand."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from slurm_mig.workload import Task


def _shared_data() -> Path:
    """``../shared/data`` beside the checkout, or ``$SLURM_MIG_SHARED_DATA``."""
    env = os.environ.get("SLURM_MIG_SHARED_DATA")
    if env:
        return Path(env)
    here = Path(__file__).resolve().parents[1]
    for cand in (here.parent / "shared" / "data", Path("/work/shared/data")):
        if cand.is_dir():
            return cand
    return here.parent / "shared" / "data"


SHARED_DATA = _shared_data()


def shared_file(relative: str) -> Path:
    """A file of the shared reference data; the calling test is skipped where it is absent."""
    path = SHARED_DATA / relative
    if not path.exists():
        pytest.skip(f"shared reference data not present: {path}")
    return path


# Five tasks on an A30 (Table 1: create 1g .11, 2g .12, 4g .13; destroy .10). The
# longest task already sits on 4 slices, so FAR's family has one allocation:
# A->4, B,C,E->1, D->2. Its FAR plan without refinement:
#   create 4g [0, .13]; A on 4g [.13, 8.13]; destroy 4g [8.13, 8.23];
#   create 2g@0 [8.23, 8.35]; D on 2g@0 [8.35, 11.35];
#   create 1g@2 [8.35, 8.46]; B [8.46, 14.46]; create 1g@3 [8.46, 8.57]; C [8.57, 13.57];
#   destroy 2g@0 [11.35, 11.45]; create 1g@0 [11.45, 11.56]; E [11.56, 13.56].
A30_FIVE = [
    Task("A", {1: 40.0, 2: 20.0, 4: 8.0}),
    Task("B", {1: 6.0, 2: 4.0, 4: 4.0}),
    Task("C", {1: 5.0, 2: 3.0, 4: 3.0}),
    Task("D", {1: 8.0, 2: 3.0, 4: 3.0}),
    Task("E", {1: 2.0, 2: 1.5, 4: 1.5}),
]


@contextmanager
def open_tmp_dir() -> Iterator[Path]:
    """A temporary directory every user can pass through (0755; pytest's tmp_path sits
    in a 0700 directory), for tests that run a program as another user."""
    import shutil
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="slurm-mig-test-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


class FakeClock:
    """A stand-in for the ``time`` module of the code under test (monkeypatched over its
    ``time`` attribute), so that a test about time takes none: ``time()``, ``monotonic()``
    and ``perf_counter()`` read ``now``, which ``sleep`` moves on at once (recording each
    wait in ``slept``, then calling ``on_sleep``); anything else is the real module's."""

    def __init__(self, now: float = 0.0, on_sleep: Callable[[FakeClock], None] | None = None):
        self.now = now
        self.slept: list[float] = []
        self.on_sleep = on_sleep

    def time(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now

    perf_counter = monotonic

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
        if self.on_sleep is not None:
            self.on_sleep(self)

    def __getattr__(self, name: str):
        return getattr(time, name)  # strftime, gmtime and the rest
