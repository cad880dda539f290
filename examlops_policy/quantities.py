"""CPU and memory quantities: read and written in one place.

CPU is said in cores (``2``, ``0.5``) or in millicores as Kubernetes writes them (``500m``) and
held as whole millicores. Memory is said in MiB as a plain whole number (``2048``) or with a
binary suffix (``512Mi``, ``64Gi``, ``1Ti``, ``1Pi``; ``Ki`` where the total is whole MiB) and held
as whole MiB. Decimal suffixes (``M``, ``G``, ``T``) are refused: Slurm reads ``64G`` as 64 GiB,
Kubernetes as 64 x 10^9 bytes, and a size must mean one thing.

Every reader raises ``ValueError`` with a sentence that says what was expected; the model wraps it
in a ``SpecError`` naming the field.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation
from typing import Final

# Bounds per node (and per workload, per node): far above any machine, low enough to catch typos
# and to keep sums exact.
MAX_CPU_CORES: Final = 100_000
MAX_MEMORY_MIB: Final = 1 << 30  # 1 PiB

_CPU_RE: Final = re.compile(r"^(?P<number>\d{1,12}(?:\.\d{1,12})?)(?P<milli>m?)$")
_MEMORY_RE: Final = re.compile(r"^(?P<number>\d{1,16}(?:\.\d{1,12})?)(?P<unit>Ki|Mi|Gi|Ti|Pi)?$")
_KIB_PER: Final = {"Ki": Decimal(1), "Mi": Decimal(1024), "Gi": Decimal(1024**2), "Ti": Decimal(1024**3), "Pi": Decimal(1024**4)}
_DECIMAL_UNITS: Final = re.compile(r"^\d+(?:\.\d+)?\s*(?:[kKMGTPE]|[kKMGTPE]i?B|[kKMGTPE]B)$")

CPU_EXPECTED: Final = "cores as a number (2, 0.5) or millicores such as 500m"
MEMORY_EXPECTED: Final = "a size such as 64Gi or 512Mi, or a whole number of MiB"


def cpu_milli(value: object) -> int:
    """Whole millicores of ``value`` (cores as int/float/text, or ``"<n>m"``); at least 1m."""
    if isinstance(value, bool):
        raise ValueError(f"expected {CPU_EXPECTED} (got {value!r})")
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
            raise ValueError(f"expected {CPU_EXPECTED} (got {value!r})")
        number = Decimal(match["number"]) / (1000 if match["milli"] else 1)
    else:
        raise ValueError(f"expected {CPU_EXPECTED} (got {value!r})")
    milli = number * 1000
    if milli != milli.to_integral_value():
        raise ValueError(f"must be a whole number of millicores (got {value!r}; 0.001 core is the smallest step)")
    if milli < 1:
        raise ValueError(f"must be more than 0 cores (got {value!r})")
    if milli > MAX_CPU_CORES * 1000:
        raise ValueError(f"at most {MAX_CPU_CORES} cores (got {value!r})")
    return int(milli)


def memory_mib(value: object) -> int:
    """Whole MiB of ``value`` (MiB as a whole number, or text with a binary suffix); at least 1 MiB."""
    if isinstance(value, bool):
        raise ValueError(f"expected {MEMORY_EXPECTED} (got {value!r})")
    if type(value) is int and 0 < value <= MAX_MEMORY_MIB:
        return value  # whole MiB, as a stored spec says them
    if isinstance(value, int):
        mib = Decimal(value)
    elif isinstance(value, float):
        if not math.isfinite(value) or value != int(value):
            raise ValueError(f"expected {MEMORY_EXPECTED}; a plain number is whole MiB (got {value!r})")
        mib = Decimal(int(value))
    elif isinstance(value, str):
        text = value.strip()
        match = _MEMORY_RE.fullmatch(text)
        if not match:
            if _DECIMAL_UNITS.fullmatch(text):
                raise ValueError(
                    f"{value!r} is ambiguous (Slurm reads G as GiB, Kubernetes as 10^9 bytes): "
                    "say it with a binary suffix, e.g. 64Gi or 512Mi"
                )
            raise ValueError(f"expected {MEMORY_EXPECTED} (got {value!r})")
        try:
            number = Decimal(match["number"])
        except InvalidOperation as exc:  # pragma: no cover - the pattern admits only decimals
            raise ValueError(f"expected {MEMORY_EXPECTED} (got {value!r})") from exc
        unit = match["unit"]
        mib = number if unit is None else number * _KIB_PER[unit] / 1024
        if unit is None and mib != mib.to_integral_value():
            raise ValueError(f"a plain number is whole MiB (got {value!r})")
    else:
        raise ValueError(f"expected {MEMORY_EXPECTED} (got {value!r})")
    if mib != mib.to_integral_value():
        raise ValueError(f"must be a whole number of MiB (got {value!r})")
    if mib < 1:
        raise ValueError(f"must be at least 1 MiB (got {value!r})")
    if mib > MAX_MEMORY_MIB:
        raise ValueError(f"at most {memory_text(MAX_MEMORY_MIB)} (got {value!r})")
    return int(mib)


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


__all__ = ["MAX_CPU_CORES", "MAX_MEMORY_MIB", "cores", "cpu_milli", "cpu_text", "memory_mib", "memory_text"]
