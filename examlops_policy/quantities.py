"""CPU, memory and time quantities: read and written in one place.

CPU is said in cores (``2``, ``0.5``) or in millicores as Kubernetes writes them (``500m``) and
held as whole millicores. Memory is said in MiB as a plain whole number (``2048``) or with a
binary suffix (``512Mi``, ``64Gi``, ``1Ti``, ``1Pi``; ``Ki`` where the total is whole MiB) and held
as whole MiB. Decimal suffixes (``M``, ``G``, ``T``) are refused: Slurm reads ``64G`` as 64 GiB,
Kubernetes as 64 x 10^9 bytes, and a size must mean one thing.

Durations (a workload's ``max_wait`` and ``walltime``, a placement's lease) are said as a number
and a unit, ``90s``, ``30m``, ``2h``, ``1d``, or several from the largest down (``1h30m``), or as a
whole number of seconds, and held as whole seconds. Instants (a workload's ``deadline``) are RFC
3339 times with their offset (``2026-12-01T14:00:00Z``, ``2026-12-01T15:00:00+01:00``): a time
without one would mean another instant on every machine. They are held as UTC text with ``Z``.

Every reader raises ``ValueError`` with a sentence that says what was expected; the model wraps it
in a ``SpecError`` naming the field.
"""

from __future__ import annotations

import math
import re
import json
from datetime import datetime, timedelta, timezone
from decimal import Decimal, InvalidOperation
from typing import Final

# Bounds per node (and per workload, per node): far above any machine, low enough to catch typos
# and to keep sums exact.
MAX_CPU_CORES: Final = 100_000
MAX_MEMORY_MIB: Final = 1 << 30  # 1 PiB

_CPU_RE: Final = re.compile(r"^(?P<number>\d{1,12}(?:\.\d{1,12})?)(?P<milli>m?)$")
_MEMORY_RE: Final = re.compile(r"^(?P<number>\d{1,16}(?:\.\d{1,12})?)(?P<unit>Ki|Mi|Gi|Ti|Pi)?$")
_KIB_PER: Final = {"Ki": Decimal(1), "Mi": Decimal(1024), "Gi": Decimal(1024**2), "Ti": Decimal(1024**3), "Pi": Decimal(1024**4)}
_DECIMAL_UNITS: Final = re.compile(r"^(?P<number>\d+(?:\.\d+)?)\s*(?P<letter>[kKMGTPE])(?:i?B)?$")
_POWERS: Final = "KMGTPE"
_NEGATIVE_RE: Final = re.compile(r"^-\s*\d")

CPU_EXPECTED: Final = "cores as a number (2, 0.5) or millicores such as 500m"
MEMORY_EXPECTED: Final = "a size such as 64Gi or 512Mi, or a whole number of MiB"


def number_text(value: float) -> str:
    """A number as a person writes it: ``10000000``, ``0.5``, ``2.75`` (never ``1e+07`` for a whole
    number a person could type out; ``1e+300`` stays short)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if math.isfinite(value) and value == int(value) and abs(value) < 1e16:
        return str(int(value))
    return repr(value) if math.isfinite(value) else ("NaN" if math.isnan(value) else ("-" if value < 0 else "") + "infinity")


def shown(value: object, limit: int = 80) -> str:
    """``value`` for an error message, as the person wrote it, never as a Python object: text in
    quotes (``'2TB'``), numbers as numbers, ``true``/``false``/``null`` and lists and mappings as
    YAML and JSON write them, a duration as ``30m``; cut short (an error must not echo megabytes of
    hostile input)."""
    if value is None or isinstance(value, bool):
        text = json.dumps(value)
    elif isinstance(value, (int, float)):
        text = number_text(value)
    elif isinstance(value, str):
        text = repr(value)
    elif isinstance(value, timedelta):
        seconds = value.total_seconds()
        text = duration_text(int(seconds)) if seconds >= 0 and seconds == int(seconds) else f"{number_text(seconds)}s"
    elif isinstance(value, datetime):
        text = value.isoformat()
    elif isinstance(value, (list, tuple, set, frozenset, dict)):
        text = json.dumps(sorted(value, key=str) if isinstance(value, (set, frozenset)) else value, ensure_ascii=False, default=str)
    else:
        text = str(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def cpu_milli(value: object) -> int:
    """Whole millicores of ``value`` (cores as int/float/text, or ``"<n>m"``); at least 1m."""
    if isinstance(value, bool):
        raise ValueError(f"expected {CPU_EXPECTED} (got {shown(value)})")
    if type(value) is int and 0 < value <= MAX_CPU_CORES:
        return value * 1000  # whole cores, as a stored spec says them: no arithmetic to check
    if isinstance(value, int):
        number = Decimal(value)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("must be a finite number (not NaN or infinity)")
        number = Decimal(repr(value))
    elif isinstance(value, str):
        match = _CPU_RE.fullmatch(value.strip())
        if not match:
            _not_negative(value, value.strip())
            raise ValueError(f"expected {CPU_EXPECTED} (got {shown(value)})")
        number = Decimal(match["number"]) / (1000 if match["milli"] else 1)
    else:
        raise ValueError(f"expected {CPU_EXPECTED} (got {shown(value)})")
    milli = number * 1000
    if milli != milli.to_integral_value():
        raise ValueError(f"must be a whole number of millicores (got {shown(value)}; 0.001 core is the smallest step)")
    if milli < 1:
        raise ValueError(f"must be more than 0 cores (got {shown(value)})")
    if milli > MAX_CPU_CORES * 1000:
        raise ValueError(f"at most {MAX_CPU_CORES} cores (got {shown(value)})")
    return int(milli)


def memory_mib(value: object) -> int:
    """Whole MiB of ``value`` (MiB as a whole number, or text with a binary suffix); at least 1 MiB."""
    if isinstance(value, bool):
        raise ValueError(f"expected {MEMORY_EXPECTED} (got {shown(value)})")
    if type(value) is int and 0 < value <= MAX_MEMORY_MIB:
        return value  # whole MiB, as a stored spec says them
    if isinstance(value, int):
        mib = Decimal(value)
    elif isinstance(value, float):
        if not math.isfinite(value) or value != int(value):
            raise ValueError(f"expected {MEMORY_EXPECTED}; a plain number is whole MiB (got {shown(value)})")
        mib = Decimal(int(value))
    elif isinstance(value, str):
        text = value.strip()
        match = _MEMORY_RE.fullmatch(text)
        if not match:
            decimal = _DECIMAL_UNITS.fullmatch(text)
            if decimal:
                raise ValueError(_ambiguous(value, decimal["number"], decimal["letter"].upper()))
            _not_negative(value, text)
            raise ValueError(f"expected {MEMORY_EXPECTED} (got {shown(value)})")
        try:
            number = Decimal(match["number"])
        except InvalidOperation as exc:  # pragma: no cover - the pattern admits only decimals
            raise ValueError(f"expected {MEMORY_EXPECTED} (got {shown(value)})") from exc
        unit = match["unit"]
        mib = number if unit is None else number * _KIB_PER[unit] / 1024
        if unit is None and mib != mib.to_integral_value():
            raise ValueError(f"a plain number is whole MiB (got {shown(value)})")
    else:
        raise ValueError(f"expected {MEMORY_EXPECTED} (got {shown(value)})")
    if mib != mib.to_integral_value():
        raise ValueError(f"must be a whole number of MiB (got {shown(value)})")
    if mib < 1:
        raise ValueError(f"must be at least 1 MiB (got {shown(value)})")
    if mib > MAX_MEMORY_MIB:
        raise ValueError(f"at most {memory_text(MAX_MEMORY_MIB)} (got {shown(value)})")
    return int(mib)


def _not_negative(value: str, text: str) -> None:
    """A quantity given with a minus sign: say that it cannot be negative, not that it is no quantity."""
    if _NEGATIVE_RE.match(text):
        raise ValueError(f"cannot be negative (got {shown(value)})")


def _ambiguous(value: str, number: str, letter: str) -> str:
    """Why a decimal suffix is refused, said with the suffix the person wrote (``2T``, ``64GB``)."""
    power = _POWERS.index(letter) + 1
    binary = f"{number}{letter}i" if letter in "KMGTP" else "64Gi or 512Mi"
    return (
        f"{shown(value)} is ambiguous (Slurm reads {letter} as {letter}iB, Kubernetes as 10^{3 * power} bytes): "
        f"say it with a binary suffix, e.g. {binary}"
    )


def cores(milli: int) -> int | float:
    """Millicores as the number of cores a spec stores: whole cores as an int, else a float."""
    return milli // 1000 if milli % 1000 == 0 else milli / 1000


def cpu_text(milli: int) -> str:
    """A Kubernetes CPU quantity: ``2`` for whole cores, else ``500m``."""
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def memory_text(mib: int) -> str:
    """A size with the largest binary suffix that says it exactly: ``64Gi``, ``1536Mi``."""
    for unit, factor in (("Pi", 1 << 30), ("Ti", 1 << 20), ("Gi", 1 << 10)):
        if mib % factor == 0:
            return f"{mib // factor}{unit}"
    return f"{mib}Mi"


# -- time ---------------------------------------------------------------------------------------

# A year of seconds: longer than any wait, time limit or lease a site grants, short enough to catch
# a unit typed wrong (3600h for 3600s).
MAX_DURATION_S: Final = 366 * 86400
DURATION_EXPECTED: Final = "a duration such as 90s, 30m, 2h, 1d or 1h30m, or a whole number of seconds"
INSTANT_EXPECTED: Final = "an RFC 3339 time with its offset, such as 2026-12-01T14:00:00Z"
_UNIT_S: Final = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_DURATION_PART_RE: Final = re.compile(r"(\d{1,9}(?:\.\d{1,6})?)\s*([dhms])\s*")
_INSTANT_RE: Final = re.compile(
    r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(?:\.\d{1,6})?(?:[Zz]|[+-]\d{2}:\d{2})$"
)
# Instants a deadline may name: OPA reads times as nanoseconds in 64 bits (up to 2262).
_FIRST_YEAR: Final = 2000
_LAST_YEAR: Final = 2200


def duration_s(value: object, *, least: int = 0, most: int = MAX_DURATION_S) -> int:
    """Whole seconds of ``value``: a whole number of seconds, or text of numbers and units
    (``d``, ``h``, ``m``, ``s``, each at most once, largest first: ``1h30m``, ``1.5h``), between
    ``least`` and ``most`` seconds."""
    if isinstance(value, bool):
        raise ValueError(f"expected {DURATION_EXPECTED} (got {shown(value)})")
    if isinstance(value, int):
        seconds = Decimal(value)
    elif isinstance(value, float):
        if not math.isfinite(value) or value != int(value):
            raise ValueError(f"expected {DURATION_EXPECTED}; a plain number is whole seconds (got {shown(value)})")
        seconds = Decimal(int(value))
    elif isinstance(value, str):
        text = value.strip()
        if text.isdigit() and len(text) <= 12:
            seconds = Decimal(text)
        else:
            _not_negative(value, text)
            seconds = _duration_text_s(value, text)
    else:
        raise ValueError(f"expected {DURATION_EXPECTED} (got {shown(value)})")
    if seconds != seconds.to_integral_value():
        raise ValueError(f"must be a whole number of seconds (got {shown(value)})")
    if seconds < least:
        raise ValueError(f"must be at least {duration_text(least)} (got {shown(value)})")
    if seconds > most:
        raise ValueError(f"at most {duration_text(most)} (got {shown(value)})")
    return int(seconds)


def _duration_text_s(value: str, text: str) -> Decimal:
    total = Decimal(0)
    position = 0
    last_unit = math.inf
    for match in _DURATION_PART_RE.finditer(text):
        if match.start() != position:
            break
        unit = _UNIT_S[match.group(2)]
        if unit >= last_unit:
            raise ValueError(f"say each unit once, largest first (d, h, m, s), e.g. 1h30m (got {shown(value)})")
        last_unit = unit
        total += Decimal(match.group(1)) * unit
        position = match.end()
    if position != len(text) or not text:
        raise ValueError(f"expected {DURATION_EXPECTED} (got {shown(value)})")
    return total


def duration_text(seconds: int) -> str:
    """Whole seconds as the shortest text ``duration_s`` reads back: ``2h``, ``1h30m``, ``45s``, ``0s``."""
    if seconds == 0:
        return "0s"
    parts = []
    rest = seconds
    for unit, size in _UNIT_S.items():
        if rest >= size:
            parts.append(f"{rest // size}{unit}")
            rest %= size
    return "".join(parts)


def instant_text(value: object) -> str:
    """``value`` (RFC 3339 text with its offset, or an aware ``datetime``) as UTC text ending in
    ``Z``: ``2026-12-01T13:00:00Z`` (fractions of a second kept)."""
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str):
        text = value.strip()
        if not _INSTANT_RE.fullmatch(text):
            raise ValueError(f"expected {INSTANT_EXPECTED} (got {shown(value)})")
        try:
            moment = datetime.fromisoformat(text[:-1] + "+00:00" if text[-1] in "Zz" else text)
        except ValueError as exc:
            raise ValueError(f"not a real time: {exc} (got {shown(value)})") from None
    else:
        raise ValueError(f"expected {INSTANT_EXPECTED} (got {shown(value)})")
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"say the offset, e.g. Z for UTC: a time without one means another instant on every machine (got {shown(value)})")
    utc = moment.astimezone(timezone.utc)
    if not _FIRST_YEAR <= utc.year <= _LAST_YEAR:
        raise ValueError(f"must be between the years {_FIRST_YEAR} and {_LAST_YEAR} (got {shown(value)})")
    return utc.replace(tzinfo=None).isoformat() + "Z"


def instant(text: str) -> datetime:
    """The aware UTC ``datetime`` of ``instant_text``'s form (or any RFC 3339 text)."""
    return datetime.fromisoformat(instant_text(text)[:-1] + "+00:00")


__all__ = [
    "DURATION_EXPECTED", "INSTANT_EXPECTED", "MAX_CPU_CORES", "MAX_DURATION_S", "MAX_MEMORY_MIB", "cores", "cpu_milli",
    "cpu_text", "duration_s", "duration_text", "instant", "instant_text", "memory_mib", "memory_text", "number_text", "shown",
]  # fmt: skip
