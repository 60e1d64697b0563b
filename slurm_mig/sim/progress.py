"""A one-line progress bar on stderr for long simulations.

Drawn only once a run has taken more than ``after`` seconds (2 s by default), so
short runs print nothing: redrawn in place on a terminal, else a plain line every
10 % (log files stay readable).
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, label: str, stream: TextIO | None = None, after: float = 2.0) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.after = after
        self.t0 = time.monotonic()
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.shown = False
        self.last_decile = -1

    def __call__(self, done: int, total: int) -> None:
        elapsed = time.monotonic() - self.t0
        if elapsed < self.after:
            return
        frac = done / total if total else 1.0
        if self.tty:
            width = 30
            fill = int(frac * width)
            bar = "#" * fill + "." * (width - fill)
            rate = done / elapsed if elapsed > 0 else 0.0
            eta = (total - done) / rate if rate > 0 else float("inf")
            eta_s = f"{eta:5.0f}s" if eta != float("inf") else "    ?"
            self.stream.write(
                f"\r{self.label} [{bar}] {done}/{total} jobs {elapsed:5.0f}s eta {eta_s}"
            )
            self.shown = True
        else:
            decile = int(frac * 10)
            if decile > self.last_decile:
                self.last_decile = decile
                self.stream.write(f"{self.label}: {done}/{total} jobs, {elapsed:.0f}s\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty and self.shown:
            self.stream.write("\n")
            self.stream.flush()
