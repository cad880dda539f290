"""argparse value types shared by the commands: each names what it expected."""

from __future__ import annotations

import argparse
import math
from datetime import timedelta
from typing import Any, TypeAlias

from examlops_policy import quantities


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
    """A duration (``quantities.duration_s``): ``90s``, ``30m``, ``2h``, ``1d``, ``1h30m``."""
    try:
        return timedelta(seconds=quantities.duration_s(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# Where commands register their subcommands (any ArgumentParser subclass).
Commands: TypeAlias = "argparse._SubParsersAction[Any]"
