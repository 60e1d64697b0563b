"""argparse value types shared by the commands (one wording for every bad number)."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def positive_int(text: str) -> int:
    """A whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def count_at_most(most: int, what: str) -> Callable[[str], int]:
    """A whole number from 1 to ``most`` (``what`` names the unit in the message): a typo
    such as ``--gpus 1000000`` ends in one line, not in a run without end."""

    def parse(text: str) -> int:
        value = positive_int(text)
        if value > most:
            raise argparse.ArgumentTypeError(
                f"{value} is more than {most:,} {what}; give 1 to {most:,}"
            )
        return value

    parse.__name__ = "count"  # argparse names the type in its messages
    return parse
