"""Finding device pools where they are: a running Slurm (``slurm``), a Kubernetes cluster
(``kubernetes``) or this machine (``local``).

A discovery yields pools plus what is free right now, and warnings for what it saw but would not
turn into a pool (unknown GRES types, unusable names, ...): it never guesses. ``plan`` compares the
discovery with the registered pools and says what applying it would change; applying is the
caller's ``Hardware.apply`` (idempotent). Facts discovery cannot know (price, carbon factor, board
power, PUE) are kept from the registered pool.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from examlops_policy.model import Pool, PoolState
from examlops_policy.views import NodeUsage

# Operator-set facts a scheduler or a device tool does not report: kept on re-discovery.
KEPT_FIELDS: Final = ("cost_per_hour", "carbon_factor", "power_w", "pue")

Action = Literal["add", "update", "unchanged", "stale"]


@dataclass(frozen=True)
class DiscoveredPool:
    """A pool as discovered, with the devices free at discovery time (None when unknown), the
    names of its nodes and, node by node, what is busy there (``usage``)."""

    pool: Pool
    free: float | None = None
    nodes: tuple[str, ...] = ()
    details: tuple[str, ...] = ()
    usage: tuple[NodeUsage, ...] = ()


@dataclass(frozen=True)
class Discovery:
    """Everything one discovery found: pools and the warnings about what it skipped."""

    source: str
    pools: tuple[DiscoveredPool, ...]
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class PlannedChange:
    """What applying one discovered pool would do to the registered pools."""

    name: str
    action: Action
    pool: Pool | None
    changed_fields: tuple[str, ...] = ()


def merged(discovered: Pool, existing: Pool | None) -> Pool:
    """``discovered`` with the operator-set facts of ``existing`` (same name) kept, and its region
    when the discovery was given none."""
    if existing is None:
        return discovered
    kept: dict[str, object] = {f: getattr(existing, f) for f in KEPT_FIELDS if getattr(discovered, f) is None}
    if not discovered.region:
        kept["region"] = existing.region
    return dataclasses.replace(discovered, **kept)  # type: ignore[arg-type]


def _changed(before: Pool, after: Pool) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(Pool) if getattr(before, f.name) != getattr(after, f.name))


def plan(discovery: Discovery, registered: Sequence[PoolState], *, owned: Callable[[Pool], bool]) -> list[PlannedChange]:
    """Per discovered pool: add, update (which fields) or unchanged; then registered pools that
    ``owned`` says came from this source but were not found again (``stale``: left registered)."""
    existing = {s.pool.name: s.pool for s in registered}
    changes: list[PlannedChange] = []
    for found in discovery.pools:
        before = existing.get(found.pool.name)
        after = merged(found.pool, before)
        if before is None:
            changes.append(PlannedChange(after.name, "add", after))
        elif before == after:
            changes.append(PlannedChange(after.name, "unchanged", after))
        else:
            changes.append(PlannedChange(after.name, "update", after, _changed(before, after)))
    found_names = {d.pool.name for d in discovery.pools}
    for name in sorted(existing):
        if name not in found_names and owned(existing[name]):
            changes.append(PlannedChange(name, "stale", existing[name]))
    return changes


__all__ = ["DiscoveredPool", "Discovery", "NodeUsage", "PlannedChange", "merged", "plan"]
