"""argparse value types shared by the commands (one wording for every bad number)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

__all__ = [
    "count_at_most",
    "int_at_least",
    "number_within",
    "positive_float",
    "positive_int",
    "rate_multiplier",
]


def int_at_least(low: int, why: str, *, otherwise: str = "") -> Callable[[str], int]:
    """A whole number >= ``low``; below it the message is ``<value> must be <why>``, and
    ``otherwise`` ends the message for text that is no whole number."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number{otherwise}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{value} must be {why}")
        return value

    parse.__name__ = "count"  # argparse names the type in its messages
    return parse


_at_least_one = int_at_least(1, "at least 1")


def positive_int(text: str) -> int:
    """A whole number >= 1."""
    return _at_least_one(text)


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


def number_within(
    low: float, high: float, why: str, *, above_low: bool = False
) -> Callable[[str], float]:
    """A finite number in ``low..high`` (``above_low``: strictly above ``low``); out of range
    the message is ``<text> must be <why>``, so each option keeps its own advice."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        inside = (value > low if above_low else value >= low) and value <= high
        if not inside:  # NaN fails both comparisons
            raise argparse.ArgumentTypeError(f"{text} must be {why}")
        return value

    parse.__name__ = "number"
    return parse


positive_float = number_within(
    0.0, sys.float_info.max, "a positive number of seconds", above_low=True
)
positive_float.__doc__ = "A positive, finite number of seconds."
rate_multiplier = number_within(
    0.0, 10_000.0, "a multiplier in (0, 10000], e.g. 20", above_low=True
)
rate_multiplier.__doc__ = "``--rate-multiplier``: the arrival rate as a multiple of the base."
