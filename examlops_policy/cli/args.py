"""argparse value types shared by the commands: each names what it expected."""

from __future__ import annotations

import argparse
import math
import re
from datetime import timedelta
from typing import Any, TypeAlias


def hours(text: str) -> float:
    """A finite number of hours, at least 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"hours must be a finite number of at least 0 (got {text!r})")
    return value


def limit(text: str) -> int:
    """A whole number of rows, at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 (got {value})")
    return value


def names(text: str) -> list[str]:
    """A comma-separated list, blanks dropped: ``fp8,hbm3``."""
    return [t.strip() for t in text.split(",") if t.strip()]


def lease(text: str) -> timedelta:
    """A duration: a number and a unit, ``90s``, ``30m``, ``2h`` or ``1d``."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd])\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(f"a lease is a number and a unit, e.g. 30m, 2h or 1d (got {text!r})")
    unit = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}[match.group(2)]
    return timedelta(**{unit: float(match.group(1))})


# Where commands register their subcommands (any ArgumentParser subclass).
Commands: TypeAlias = "argparse._SubParsersAction[Any]"
