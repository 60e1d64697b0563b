"""Memory samples (one per iteration) and their CSV form, the probe's trace and the
forecaster's input. Standard library only: the probe in the job and the watchdog both use it.

Two CSV forms are read: the full header the probe writes (``FIELDS``) and the short
``iteration,requested_bytes[,reserved_bytes]`` an operator can write by hand.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence
from dataclasses import astuple, dataclass
from pathlib import Path

FIELDS = (
    "iteration",
    "requested_peak",
    "requested_current",
    "allocated_peak",
    "allocated_current",
    "reserved_peak",
    "reserved_current",
    "alloc_retries",
    "ooms",
    "wall",
)
SHORT_FIELDS = ("iteration", "requested_bytes", "reserved_bytes")
_INT_FIELDS = FIELDS[:-1]


class TraceError(ValueError):
    """A trace file that cannot be read: the message names the file, line and column."""


@dataclass(frozen=True)
class Sample:
    """Memory of one iteration, in bytes; counters are cumulative since the job started."""

    iteration: int
    requested_peak: int  # bytes requested by the program in this iteration (peak)
    requested_current: int = 0
    allocated_peak: int = 0  # allocator "allocated" (rounded blocks)
    allocated_current: int = 0
    reserved_peak: int = 0  # allocator reserved/cached segments; 0 = not measured
    reserved_current: int = 0
    alloc_retries: int = 0  # cumulative num_alloc_retries (CUDA), 0 on the CPU
    ooms: int = 0  # cumulative num_ooms
    wall: float = 0.0  # seconds since the job started

    @classmethod
    def short(cls, iteration: int, requested: int, reserved: int = 0) -> Sample:
        """A sample from the short form: requested (and reserved) peak only."""
        return cls(
            iteration=iteration,
            requested_peak=requested,
            requested_current=requested,
            allocated_peak=requested,
            allocated_current=requested,
            reserved_peak=reserved,
            reserved_current=reserved,
        )


def header() -> str:
    """The CSV header line of the full form (no newline)."""
    return ",".join(FIELDS)


def format_sample(sample: Sample) -> str:
    """One CSV line of the full form (no newline), as the probe appends it."""
    values = astuple(sample)
    return ",".join(f"{v:.3f}" if isinstance(v, float) else str(v) for v in values)


def write_trace(samples: Iterable[Sample], path: str | Path) -> Path:
    """Write samples as a full-form CSV file (header first)."""
    out = Path(path)
    with out.open("w", encoding="utf-8") as f:
        f.write(header() + "\n")
        for s in samples:
            f.write(format_sample(s) + "\n")
    return out


def read_trace(path: str | Path) -> list[Sample]:
    """Samples from a CSV file in the full or the short form, in file order."""
    from ..inputs import InputError, read_bytes

    p = Path(path)
    try:
        text = read_bytes(p).decode("utf-8")
    except InputError as exc:
        raise TraceError(str(exc)) from None
    except UnicodeDecodeError:
        raise TraceError(f"{p}: not a text CSV file") from None
    return parse_trace(text, str(p))


def parse_trace(text: str, source: str = "trace") -> list[Sample]:
    """Samples from CSV text; ``source`` names the input in error messages.

    Rows must have increasing iterations; a trailing partial line (a probe still
    writing) is skipped. Raises TraceError naming a missing column or a bad cell."""
    rows = list(csv.reader(io.StringIO(text)))
    rows = [r for r in rows if any(c.strip() for c in r)]
    if not rows:
        raise TraceError(f"{source}: empty; expected a header 'iteration,requested_bytes'")
    names = [c.strip().lower() for c in rows[0]]
    short = not any(f in names for f in FIELDS[1:])
    wanted = ("iteration", "requested_bytes") if short else ("iteration", "requested_peak")
    for col in wanted:
        if col not in names:
            raise TraceError(
                f"{source}: missing column '{col}'; the header must have "
                f"iteration,requested_bytes[,reserved_bytes] or the probe's {header()}"
            )
    index = {name: i for i, name in enumerate(names)}
    samples: list[Sample] = []
    body = rows[1:]
    for lineno, row in enumerate(body, start=2):
        if len(row) < len(names):
            if lineno == len(body) + 1 and not text.endswith("\n"):
                break  # the probe is writing this line now
            raise TraceError(f"{source}, line {lineno}: {len(row)} values for {len(names)} columns")
        if short:
            it = _int(row, index, "iteration", source, lineno)
            req = _int(row, index, "requested_bytes", source, lineno)
            res = (
                _int(row, index, "reserved_bytes", source, lineno)
                if "reserved_bytes" in index
                else 0
            )
            sample = Sample.short(it, req, res)
        else:
            values = {f: _int(row, index, f, source, lineno) for f in _INT_FIELDS if f in index}
            wall = _float(row, index, "wall", source, lineno) if "wall" in index else 0.0
            sample = Sample(**values, wall=wall)
        if samples and sample.iteration <= samples[-1].iteration:
            raise TraceError(
                f"{source}, line {lineno}: iteration {sample.iteration} after "
                f"{samples[-1].iteration}; iterations must increase"
            )
        samples.append(sample)
    return samples


def _int(row: Sequence[str], index: dict[str, int], col: str, source: str, lineno: int) -> int:
    text = row[index[col]].strip()
    try:
        value = int(text)
    except ValueError:
        try:
            as_float = float(text)
        except ValueError:
            as_float = float("nan")
        if not as_float.is_integer():
            raise TraceError(
                f"{source}, line {lineno}: column '{col}' is {text!r}; "
                "write a whole number of bytes"
            ) from None
        value = int(as_float)
    if value < 0:
        raise TraceError(f"{source}, line {lineno}: column '{col}' is {value}; must be >= 0")
    return value


def _float(row: Sequence[str], index: dict[str, int], col: str, source: str, lineno: int) -> float:
    text = row[index[col]].strip()
    try:
        return float(text)
    except ValueError:
        raise TraceError(
            f"{source}, line {lineno}: column '{col}' is {text!r}; write seconds"
        ) from None


def human(n: float | None) -> str:
    """Bytes as a short binary size: 12.3 GiB, 512.0 MiB."""
    if n is None:
        return "-"
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"
