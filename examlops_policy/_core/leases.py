"""Leases: when a placement that was neither submitted nor renewed stops holding its devices.

A placement made with a lease holds its devices until ``lease_expires_at`` unless it is handed to a
scheduler (a job) or renewed first. It ends at that instant, not at the next write: every read sees
it ended from then on (``ended_at``), and the write that finally releases it (``commit.expire``)
stamps that instant as its release, so the ledger bills nothing after it. The lease clock starts at
the commit that records the placement (``lease_end``), not before the decision was made.

Pure: times are ISO 8601 UTC text with microseconds (``2026-11-30T16:52:10.123456Z``), as the store
writes them, so that they compare as text.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta, timezone
from typing import Protocol, TypeVar


class _Held(Protocol):
    """A decision's row as any read gives it (the store's row, a summary of its columns)."""

    @property
    def released_at(self) -> str | None: ...

    @property
    def lease_expires_at(self) -> str | None: ...

    @property
    def job_id(self) -> str | None: ...


Row = TypeVar("Row", bound=_Held)


def instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def text_of(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def lease_end(start: str, lease: timedelta) -> str:
    """When a lease of ``lease`` taken at ``start`` (the commit's time) ends."""
    return text_of(instant(start) + lease)


def ended(lease_expires_at: str | None, job_id: str | None, now: str) -> bool:
    """Whether a live placement's lease has ended by ``now``: it has one, it was never handed to a
    scheduler, and its end is past."""
    return lease_expires_at is not None and job_id is None and lease_expires_at < now


def ended_at(released_at: str | None, lease_expires_at: str | None, job_id: str | None, now: str) -> str | None:
    """When a placement stopped holding its devices, as of ``now``: its release, else its lease's
    end once that has passed; None while it holds them."""
    if released_at is not None:
        return released_at
    return lease_expires_at if ended(lease_expires_at, job_id, now) else None


def by_lease(released_at: str | None, lease_expires_at: str | None, job_id: str | None) -> bool:
    """Whether a placement was released because its lease ended (the release is stamped with the
    lease's end; a release asked for is stamped when it was asked, before the lease ended)."""
    return released_at is not None and job_id is None and released_at == lease_expires_at


def as_read(row: Row, now: str) -> Row:
    """``row`` as a read at ``now`` sees it: a placement whose lease ended is released at its end,
    whether or not a write has stamped that yet."""
    if row.released_at is not None or not ended(row.lease_expires_at, row.job_id, now):
        return row
    return dataclasses.replace(row, released_at=row.lease_expires_at)  # type: ignore[type-var]
