"""argparse value types shared by the commands (one wording for every bad number)."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """A whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value
