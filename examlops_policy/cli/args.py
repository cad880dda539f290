"""argparse value types shared by the commands: each names what it expected."""

from __future__ import annotations

import argparse
import math
import re
from datetime import datetime, timedelta
from typing import Any, Final, TypeAlias

from examlops_policy import quantities

# About 114 years of one placement: every sum of cost and carbon over it stays a finite number.
MAX_HOURS: Final = 1_000_000.0
# Rows on one page; more is a loop over --cursor.
MAX_LIMIT: Final = 1_000_000
_HEX_ID: Final = re.compile(r"[0-9a-f]{1,64}", re.ASCII)


def hours(text: str) -> float:
    """A finite number of hours, from 0 to ``MAX_HOURS``."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"hours must be a finite number of at least 0 (got {text!r})")
    if value > MAX_HOURS:
        raise argparse.ArgumentTypeError(f"hours must be at most {MAX_HOURS:.0f} (about 114 years; got {text!r})")
    return value


def limit(text: str) -> int:
    """A whole number of rows, from 1 to ``MAX_LIMIT``."""
    return _count(text, "")


def page_limit(text: str) -> int:
    """A page's rows, from 1 to ``MAX_LIMIT`` (a command with ``--cursor``)."""
    return _count(text, "; page through more with --cursor")


def admissions(text: str) -> int:
    """How many workloads one admission pass may admit, from 1 to ``MAX_LIMIT``."""
    return _count(text, "; leave out --max to admit every workload that fits")


def _count(text: str, hint: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not 1 <= value <= MAX_LIMIT:
        raise argparse.ArgumentTypeError(f"must be from 1 to {MAX_LIMIT} (got {text!r}){hint}")
    return value


def cursor(text: str) -> str:
    """``CREATED_AT/ID`` as a page of ``exa hardware decisions`` printed it: an ISO 8601 time and a
    hexadecimal decision id."""
    created, _, ident = text.partition("/")
    try:
        datetime.fromisoformat(created.replace("Z", "+00:00"))
        valid = bool(created) and created == created.strip() and bool(_HEX_ID.fullmatch(ident))
    except ValueError:
        valid = False
    if not valid:
        raise argparse.ArgumentTypeError(
            f"a cursor is CREATED_AT/ID as the previous page printed it, e.g. 2026-11-30T16:53:12.516233Z/ab8860ae... (got {text!r})"
        )
    return text


def names(text: str) -> list[str]:
    """A comma-separated list, blanks dropped: ``fp8,hbm3``."""
    return [t.strip() for t in text.split(",") if t.strip()]


def unitless(text: str) -> str | None:
    """Why a duration given on the command line without its unit is refused, or None. A bare
    number other than 0 would silently be seconds where minutes or hours were meant (``--lease 5``);
    a workload file may say whole seconds."""
    bare = text.strip()
    if bare.isdigit() and int(bare) != 0:
        return f"say the unit: {bare}s, {bare}m, {bare}h or {bare}d (got {bare} without one)"
    return None


def lease(text: str) -> timedelta:
    """A duration with its unit, of more than 0s (``quantities.duration_s``): ``90s``, ``30m``,
    ``2h``, ``1d``, ``1h30m``."""
    problem = unitless(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    try:
        return timedelta(seconds=quantities.duration_s(text, least=1))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# Where commands register their subcommands (any ArgumentParser subclass).
Commands: TypeAlias = "argparse._SubParsersAction[Any]"
