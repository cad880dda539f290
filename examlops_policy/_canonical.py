"""Canonical bytes: compact, sorted-key JSON in UTF-8 (NaN and Infinity refused). The one writer of
the bytes every digest, audit entry and cached table is taken of; ``_core.codec`` offers it to the
decision core, ``audit`` and ``tables`` use it from here (below the core, as the store must be)."""

from __future__ import annotations

import json


def canonical(value: object) -> bytes:
    """``value`` as canonical bytes (ValueError or TypeError for what JSON cannot carry exactly)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")
