"""One device a grant holds (``Holding``): its own module so that the model (``model``) and the
records of the decision path (``_record``, whose ``NodeAllocation`` holds them) both name it without
importing each other. ``examlops_policy.model`` names it with the rest of the model."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Holding:
    """One device a grant holds: the whole device (``profile`` None), or one slice on it.

    ``start`` is where a MIG instance's run of memory slices starts, or an AMD partition's index;
    ``units`` the slice's compute units (sevenths on MIG, eighths on AMD).
    """

    device: int
    profile: str | None = None
    start: int | None = None
    units: int | None = None
