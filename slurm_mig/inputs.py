"""Reading an operator's input file (a task table, a plan, a memory trace, the config):
at most `MAX_INPUT_BYTES`, and one clear line for whatever is wrong with it, whatever the
path names (a directory, /dev/zero, a file of another encoding). Standard library only."""

from __future__ import annotations

import json
from pathlib import Path

MAX_INPUT_BYTES = 64 << 20  # far above any task table, plan, trace or config


class InputError(ValueError):
    """An input file that cannot be read as one: names the file and the fix."""


def read_bytes(path: str | Path, limit: int = MAX_INPUT_BYTES) -> bytes:
    """The file's bytes; InputError when it is missing, unreadable or over ``limit``
    (read no further than that, so /dev/zero or a huge file costs ``limit`` at most)."""
    p = Path(path)
    try:
        with open(p, "rb") as f:
            data = f.read(limit + 1)
    except FileNotFoundError:
        raise InputError(f"{p}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{p}: is a directory; give a file") from None
    except PermissionError:
        raise InputError(f"{p}: cannot read the file (permission denied)") from None
    except OSError as exc:
        raise InputError(f"{p}: cannot read the file ({exc.strerror or exc})") from None
    if len(data) > limit:
        raise InputError(
            f"{p}: larger than {limit >> 20} MiB, more than any input of slurm-mig needs; "
            "is it the right file?"
        )
    return data


def read_text(path: str | Path, limit: int = MAX_INPUT_BYTES) -> str:
    """The file as UTF-8 text (see `read_bytes`)."""
    data = read_bytes(path, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{path}: not UTF-8 text; save the file as UTF-8") from None


def parse_json(text: str, source: str) -> object:
    """JSON, or InputError with the place of the error; nesting Python cannot follow
    (thousands of levels) is an error too, not a crash."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{source}: not valid JSON ({exc.msg}, line {exc.lineno})") from None
    except RecursionError:
        raise InputError(f"{source}: JSON nested too deeply to be a slurm-mig input") from None


def control_character(text: str) -> str | None:
    """The first control character of ``text`` (a line break, a tab, an escape) as
    Python writes it, or None: ids printed in tables must not carry them."""
    for c in text:
        if ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 or c in "\u2028\u2029":
            return repr(c)
    return None
