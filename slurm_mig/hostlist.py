"""Slurm hostlist expressions (``gpu[01-04],login``) expanded to node names.

Standard library only: the config module, which the hooks import on every job, uses it.
"""

from __future__ import annotations

import re

__all__ = ["MAX_HOSTLIST", "HostlistError", "expand_hostlist"]

MAX_HOSTLIST = 65536  # most names one hostlist expression may expand to


class HostlistError(ValueError):
    """A hostlist that cannot be expanded; the message names the expression and the fix."""


def expand_hostlist(expr: str) -> list[str]:
    """Slurm hostlist to names, in order: ``gpu[01-03,07],login`` -> gpu01 gpu02 gpu03
    gpu07 login. Ranges keep the zero padding of their lower bound; brackets may repeat
    (``r[1-2]n[1-2]``). HostlistError on an empty name, bad bracket or bad range."""
    names: list[str] = []
    for part in _split_top(expr):
        names.extend(_expand_one(part, expr))
    return names


def _split_top(expr: str) -> list[str]:
    parts: list[str] = []
    depth = 0
    cur: list[str] = []
    for c in expr:
        if c == "[":
            depth += 1
        elif c == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"hostlist {expr!r}: ']' without '['; balance the brackets")
        if c == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    if depth != 0:
        raise HostlistError(f"hostlist {expr!r}: '[' without ']'; close the bracket")
    parts.append("".join(cur))
    out = []
    for p in parts:
        p = p.strip()
        if not p:
            raise HostlistError(
                f"hostlist {expr!r}: empty name; remove the extra comma, e.g. 'gpu[01-04],login'"
            )
        out.append(p)
    return out


_BRACKET = re.compile(r"\[([^\[\]]*)\]")


def _expand_one(part: str, expr: str) -> list[str]:
    pieces: list[list[str]] = []
    pos = 0
    for m in _BRACKET.finditer(part):
        pieces.append([part[pos : m.start()]])
        pieces.append(_expand_ranges(m.group(1), expr))
        pos = m.end()
    pieces.append([part[pos:]])
    total = 1
    for p in pieces:
        total *= len(p)
    if total > MAX_HOSTLIST:
        raise HostlistError(
            f"hostlist {expr!r}: expands to {total} names, over {MAX_HOSTLIST}; check the ranges"
        )
    names = [""]
    for p in pieces:
        names = [n + s for n in names for s in p]
    return names


def _digits(text: str) -> bool:
    return text.isascii() and text.isdigit()


def _expand_ranges(body: str, expr: str) -> list[str]:
    fix = "write ranges like [01-04,07]"
    if not body.strip():
        raise HostlistError(f"hostlist {expr!r}: empty brackets; {fix}")
    out: list[str] = []
    for item in body.split(","):
        item = item.strip()
        lo, sep, hi = item.partition("-")
        if not _digits(lo) or (sep and not _digits(hi)):
            raise HostlistError(f"hostlist {expr!r}: bad range {item!r}; {fix}")
        if not sep:
            out.append(lo)
            continue
        a, b = int(lo), int(hi)
        if b < a:
            raise HostlistError(
                f"hostlist {expr!r}: range {item!r} runs backwards; write the lower bound first"
            )
        if b - a + 1 > MAX_HOSTLIST:
            raise HostlistError(f"hostlist {expr!r}: range {item!r} is too large; check the bounds")
        width = len(lo)
        out.extend(str(i).zfill(width) for i in range(a, b + 1))
    return out
