"""Durable state: pools and the devices live decisions hold, decisions, burst events, the audit chain.

``Store`` is the seam. Two adapters implement it over one shared body of SQL
(``examlops_policy.store._sql``) and one schema, migrated in step (``migrations/<dialect>/``):
``SQLiteStore``, the embedded default, and ``PostgresStore`` for placers on many hosts
(``EXA_DB_URL=postgresql://...``). The contract every adapter keeps:

* A placement is decided on a ``Snapshot`` (pools, what each can still place, the state version)
  outside the write lock, then ``commit`` takes the lock, redoes the selection over the capacity
  the pools have at that moment (pure, no policy engine), picks the concrete devices and slices,
  and writes the reservation, the decision, its burst event and its audit entries in ONE
  transaction: concurrent placers never place more than fits and never fork the audit chain.
  Pools added or changed since the snapshot raise ``StaleFleet`` (decide again).
* Bad input raises ``SpecError`` before anything is written.
* Conflicts (a lock wait that timed out, a serialization failure, a deadlock, a unique violation)
  and, on PostgreSQL, a lost connection re-run the whole transaction a bounded number of times;
  then ``StateError``, with nothing written. A connection lost while committing is settled by
  looking for what the transaction wrote, so nothing is recorded twice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from examlops_policy.audit import AuditRow
from examlops_policy.model import Capacity, Holding, JSONObject, Pool, PoolState
from examlops_policy.views import BurstEvent, DecisionRecord, DecisionSummary, FinopsRow, PoolChange, WorkloadCost

if TYPE_CHECKING:
    from examlops_policy._core.engine import Prepared


class StaleFleet(Exception):
    """Pools were added or changed after the snapshot a decision was made on: decide again."""


@dataclass(frozen=True)
class Snapshot:
    """The pools, in name order, with what each can still place, at one state version.

    ``version`` changes with every write that changes what pools hold; ``fleet_version`` with every
    change to the pools themselves.
    """

    version: int
    fleet_version: int
    states: tuple[PoolState, ...]


@dataclass(frozen=True)
class DecisionInputs:
    """What a compact decision was made on: its fleet and verdict set documents, and the capacity
    every pool had."""

    fleet: JSONObject
    verdicts: JSONObject
    capacities: tuple[Capacity, ...]


@dataclass(frozen=True)
class Release:
    """What ``release`` did: ``already`` is True when the decision had been released before (its
    ``released_at`` says when) and nothing was written."""

    record: DecisionRecord
    already: bool


class Store(Protocol):
    """Durable state for placements (see the module docstring for the contract)."""

    def apply_pools(self, pools: Sequence[Pool], *, replace: bool) -> list[PoolChange]:
        """Register pools. ``replace=False`` refuses an existing name; ``True`` updates it, but not
        its accelerator, model, target, region or partitioning while decisions hold its devices,
        nor a count that would drop a device they hold."""
        ...

    def snapshot(self) -> Snapshot:
        """Every pool with what it can still place, at one state version."""
        ...

    def pool_states(self) -> list[PoolState]:
        """Every pool with what it can still place, in name order."""
        ...

    def pool_detail(self, name: str) -> tuple[PoolState, list[Holding]]:
        """One pool and what its live grants hold, device by device; NotFoundError otherwise."""
        ...

    def commit(
        self,
        prepared: Prepared,
        snapshot: Snapshot,
        *,
        source: str,
        request_id: str | None = None,
        lease_expires_at: str | None = None,
    ) -> DecisionRecord:
        """Record a decision made on ``snapshot`` (see the module docstring). With ``request_id``,
        a decision already recorded under that key is returned and nothing more is reserved."""
        ...

    def find_request(self, request_id: str) -> DecisionRecord | None: ...

    def decisions(self, limit: int = 20) -> list[DecisionRecord]:
        """Most recent first."""
        ...

    def decision_summaries(
        self, *, limit: int = 20, since: str | None = None, until: str | None = None, before: tuple[str, str] | None = None
    ) -> list[DecisionSummary]:
        """Most recent first, from columns only, one page at a time."""
        ...

    def get_decision(self, ident: str) -> DecisionRecord:
        """By id or unique id prefix; NotFoundError otherwise."""
        ...

    def decision_inputs(self, ident: str) -> DecisionInputs:
        """What a decision recorded as a compact record was made on; SpecError for an older one."""
        ...

    def release(self, ident: str, *, source: str) -> Release:
        """Free what a placement holds; a second release writes nothing and says so."""
        ...

    def renew(self, ident: str, lease_expires_at: str, *, source: str) -> DecisionRecord:
        """Move a live placement's lease end."""
        ...

    def set_job(self, ident: str, job_id: str, *, scheduler: str, uid: str | None = None, source: str) -> DecisionRecord:
        """Record the scheduler's job id (and its uid) on a placed decision, with an audit entry."""
        ...

    def mark_job(self, ident: str, state: str, *, source: str) -> DecisionRecord:
        """Record a changed job state (e.g. ``missing``), audited."""
        ...

    def record_scheduler_usage(self, usage: Mapping[str, float], *, scheduler: str, source: str) -> dict[str, float]:
        """Record how many devices of each named pool its scheduler reports busy.

        Busy devices not accounted for by this layer's own submitted, live placements are held
        outside it and are no longer free. Returns the held-outside figure per pool; an audit
        entry is written for each pool whose figure changed. NotFoundError for an unknown pool.
        """
        ...

    def finops(self, *, hours: float | None = None, since: str | None = None, until: str | None = None, now: str | None = None) -> list[FinopsRow]:
        """Cost and carbon of placements by device type and region, summed by the database."""
        ...

    def cost_by_workload(self, *, hours: float | None = None, since: str | None = None, until: str | None = None, now: str | None = None) -> list[WorkloadCost]:
        """Cost and carbon per workload name, summed by the database."""
        ...

    def report_rows(self, *, hours: float | None = None, since: str | None = None, until: str | None = None, now: str | None = None) -> tuple[list[JSONObject], list[JSONObject]]:
        """Decision and burst rows, from columns, for the FinOps report."""
        ...

    def burst_events(self, limit: int = 50) -> list[BurstEvent]:
        """Most recent first."""
        ...

    def audit_rows(self) -> list[AuditRow]:
        """The whole audit chain in seq order."""
        ...

    def records_for_audit(self) -> list[tuple[str, str, str | None, tuple[object, ...]]]: ...

    def stored_documents(self) -> list[tuple[str, str]]: ...

    def close(self) -> None: ...
