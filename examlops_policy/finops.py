"""Cost and carbon totals over recorded placements, by device type and region."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

from examlops_policy.accounting import device_accounting
from examlops_policy.model import Placement
from examlops_policy.store import DecisionRecord


@dataclass(frozen=True)
class FinopsRow:
    """Totals for one device type in one region."""

    device: str
    region: str
    decisions: int
    device_hours: float
    cost: float
    carbon_g: float


def _parse(ts: str) -> datetime:
    return datetime.fromisoformat(ts.replace("Z", "+00:00"))


def held_hours(record: DecisionRecord, now: datetime | None = None) -> float:
    """Hours a placement held its capacity: until its release, or until ``now``."""
    end = _parse(record.released_at) if record.released_at else (now or datetime.now(timezone.utc))
    return max(0.0, (end - _parse(record.created_at)).total_seconds() / 3600.0)


def totals(records: Sequence[DecisionRecord], *, hours: float | None = None, now: datetime | None = None) -> list[FinopsRow]:
    """One row per (device, region), sorted by device then region."""
    groups: dict[tuple[str, str], list[float]] = {}
    for record in records:
        placement = record.decision
        if not isinstance(placement, Placement):
            continue
        h = hours if hours is not None else held_hours(record, now)
        acct = device_accounting(placement, h)
        group = groups.setdefault((placement.accelerator, placement.region), [0, 0.0, 0.0, 0.0])
        group[0] += 1
        group[1] += placement.grant.devices * h
        group[2] += float(acct["cost"])  # type: ignore[arg-type]
        group[3] += float(acct["carbon_g"])  # type: ignore[arg-type]
    return [
        FinopsRow(device, region, int(g[0]), round(g[1], 6), round(g[2], 6), round(g[3], 6))
        for (device, region), g in sorted(groups.items())
    ]
