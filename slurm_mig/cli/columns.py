"""squeue-style output formats for the listing commands (``status``, ``report``,
``avail``): ``-o/--format "%.10i %u %P"`` picks and orders the fields, ``--noheader``
drops the header line.

A field is ``%[.][width]letter``: with a width it is padded to that many characters and
cut beyond them, as squeue does; without one the column is as wide as its widest cell
(the last field is never padded); ``.`` right-justifies. ``%%`` is a percent sign; any
other text is printed as given. Pure: a format string and rows of strings in, lines out.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

MAX_WIDTH = 1000  # a field's width at most (a typo like %.99999i is an error, not a wall)
_FIELD = re.compile(r"%(\.?)(\d*)(.?)", re.DOTALL)


@dataclass(frozen=True)
class Column:
    """A field a command can print: its letter, header and a line for --help."""

    letter: str
    header: str
    help: str


@dataclass(frozen=True)
class Field:
    """One ``%`` field of a parsed format."""

    letter: str
    width: int | None  # None: as wide as the widest cell
    right: bool


Format = tuple[str | Field, ...]


def parse_format(text: str, columns: Sequence[Column], option: str = "--format") -> Format:
    """The format ``text`` as literal strings and fields; a ValueError names an unknown
    letter (or a width beyond `MAX_WIDTH`) and lists the letters of ``columns``."""
    letters = {c.letter for c in columns}
    known = " ".join(f"%{c.letter}" for c in columns)
    out: list[str | Field] = []
    pos = 0
    for m in _FIELD.finditer(text):
        if m.start() > pos:
            out.append(text[pos : m.start()])
        pos = m.end()
        dot, width, letter = m.groups()
        if letter == "%" and not dot and not width:
            out.append("%")
            continue
        if not letter:
            raise ValueError(f"{option}: {text[:60]!r} ends in a '%' without a field letter")
        if letter not in letters:
            shown = letter if letter.isprintable() else ascii(letter)
            raise ValueError(f"{option}: unknown field %{shown} (fields: {known} %%)")
        size = int(width) if width else None
        if size is not None and not 0 < size <= MAX_WIDTH:
            raise ValueError(f"{option}: width {width} of %{letter}: give 1 to {MAX_WIDTH}")
        out.append(Field(letter, size, bool(dot)))
    if pos < len(text):
        out.append(text[pos:])
    if not any(isinstance(part, Field) for part in out):
        raise ValueError(f"{option}: {text[:60]!r} names no field (fields: {known})")
    return tuple(out)


def format_lines(
    fmt: Format,
    rows: Sequence[Mapping[str, str]],
    columns: Sequence[Column],
    header: bool = True,
) -> list[str]:
    """The lines of ``rows`` (letter -> cell text) in format ``fmt``, headed by the
    columns' headers unless ``header`` is False; trailing blanks stripped."""
    heads = {c.letter: c.header for c in columns}
    table = [dict(heads)] if header else []
    table += [dict(r) for r in rows]
    fields = [p for p in fmt if isinstance(p, Field)]
    # the field that ends the line (nothing but blanks after it) is never padded
    tail = [p for p in fmt if not (isinstance(p, str) and not p.strip())]
    last = tail[-1] if tail and isinstance(tail[-1], Field) else None
    auto: dict[int, int] = {}
    for f in fields:
        if f.width is None:
            auto[id(f)] = max((len(r.get(f.letter, "")) for r in table), default=0)
    lines = []
    for row in table:
        parts = []
        for p in fmt:
            if isinstance(p, str):
                parts.append(p)
                continue
            cell = row.get(p.letter, "")
            width = p.width if p.width is not None else auto[id(p)]
            if p.width is not None:
                cell = cell[:width]
            if p is last and not p.right:
                parts.append(cell)
            else:
                parts.append(cell.rjust(width) if p.right else cell.ljust(width))
        lines.append("".join(parts).rstrip())
    return lines


def fields_help(columns: Sequence[Column]) -> str:
    """The --help block that names every field letter."""
    lines = ["output fields (-o/--format, squeue's style: %[.][width]letter):"]
    lines += [f"  %{c.letter}  {c.header:<10} {c.help}" for c in columns]
    lines.append(
        "  a width pads and cuts the field to that many characters, '.' right-justifies;\n"
        "  without a width a column is as wide as its widest cell. %% is a percent sign."
    )
    return "\n".join(lines) + "\n"


def add_options(p: argparse.ArgumentParser, default: str, what: str) -> argparse._ActionsContainer:
    """``--noheader`` and ``-o/--format`` (with ``default`` shown), and the group that
    makes ``--format`` and ``--json`` exclusive (returned: add ``--json`` to it)."""
    p.add_argument(
        "--noheader",
        action="store_true",
        help=f"no header line ({what})",
    )
    group = p.add_mutually_exclusive_group()
    group.add_argument(
        "-o",
        "--format",
        metavar="FORMAT",
        help=f'fields to print, squeue\'s style (default "{default.replace("%", "%%")}"); '
        "see below",
    )
    return group


def check_json(args: argparse.Namespace) -> None:
    """``--noheader`` with ``--json`` is a mistake: one line saying so."""
    if getattr(args, "json", False) and getattr(args, "noheader", False):
        raise ValueError("--noheader: JSON has no header line (drop --noheader or --json)")
