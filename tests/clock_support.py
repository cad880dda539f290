"""A clock a test moves by hand, for the store (``backend.open(clock=...)``): leases, billing, drains."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from examlops_policy._core import leases

T0 = datetime(2030, 1, 1, 8, 0, tzinfo=timezone.utc)


class Clock:
    """The store's clock: a fixed instant (``T0`` at first) that a test moves on."""

    def __init__(self, at: datetime = T0) -> None:
        self.at = at

    def __call__(self) -> str:
        return leases.text_of(self.at)

    def move(self, by: timedelta = timedelta(), **parts: float) -> None:
        """Move on by ``by`` and by ``parts`` (``timedelta``'s keywords: ``minutes=5``)."""
        self.at += by + timedelta(**parts)
