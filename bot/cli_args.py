"""Argument types the command lines share, for ``argparse``'s ``type=``.

Each raises :class:`argparse.ArgumentTypeError` with the value and what it must be; argparse
puts the option's name before it: ``argument --limit: '0' must be at least 1``.
"""

from __future__ import annotations

import argparse

__all__ = ["positive_int"]


def positive_int(text: str) -> int:
    """A whole number, 1 or more: ``"8"`` gives 8; ``"0"``, ``"-2"`` and ``"2.5"`` are refused."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value
