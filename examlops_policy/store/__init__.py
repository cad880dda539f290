"""Durable state: pools and the devices live decisions hold, decisions, burst events, the audit chain.

``Store`` is the seam. Two adapters implement it over one shared body of SQL
(``examlops_policy.store._sql``) and one schema, migrated in step (``migrations/<dialect>/``):
``SQLiteStore``, the embedded default, and ``PostgresStore`` for placers on many hosts
(``EXA_DB_URL=postgresql://...``). The store holds no decision logic: the decision core reads and
writes through its narrow API (``store.api``: rows, and write transactions), and the façade reads
its columns for lists and reports. The contract every adapter keeps:

* ``transaction`` runs the core's work in ONE write transaction holding the write lock: a decision,
  its reservation, burst event and audit entries commit together or not at all; concurrent placers
  never place more than fits and never fork the audit chain.
* Bad input raises ``SpecError`` before anything is written.
* Conflicts (a lock wait that timed out, a serialization failure, a deadlock, a unique violation)
  and, on PostgreSQL, a lost connection re-run the whole transaction a bounded number of times;
  then ``StateError``, with nothing written. A connection lost while committing is settled by
  looking for what the transaction wrote, so nothing is recorded twice.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar

from examlops_policy.errors import StateError
from examlops_policy.model import JSONObject
from examlops_policy.store.api import (
    AuditedRead, DecisionRow, Document, GrantRow, HeldRow, NodeGrantRow, NodeUsageRow, PoolRow, QueueRow, StaleFleet, StateRows,
    TokenRow, Transaction,
)  # fmt: skip
from examlops_policy.views import BurstEvent, DecisionSummary, FinopsRow, UsageRow, WorkloadCost

if TYPE_CHECKING:
    from examlops_policy.audit import AuditRow

T = TypeVar("T")

__all__ = ["AuditedRead", "DecisionRow", "GrantRow", "HeldRow", "PoolRow", "QueueRow", "StaleFleet", "StateRows", "Store", "TokenRow", "Transaction"]


class Store(Protocol):
    """Durable state for placements (see the module docstring for the contract)."""

    # Why writes are refused (a state opened read-only: a read-only mount, a full disk), else None.
    read_only: StateError | None

    # -- the narrow API the decision core uses (store.api.Rows) --------------------------------

    def transaction(self, work: Callable[[Transaction], T], *, landed: Callable[[Transaction], T | None] | None = None) -> T: ...

    def now(self) -> str:
        """The store's time now, as a write would record it."""
        ...

    def rows(self, since: int = -1, *, now: str | None = None) -> StateRows:
        """The state and fleet versions, with the pools changed after ``since``, in name order;
        with ``now``, the leases ended by then and what the live grants of their pools hold."""
        ...

    def layout(self) -> str | None: ...

    def capacities_at(self, version: int) -> dict[str, str]:
        """Every pool's capacity at a state version (the capacity log)."""
        ...

    def document(self, kind: Document, key: str) -> str:
        """A stored fleet or verdict-set document; StateError when it is missing."""
        ...

    def node_rows(self, pools: Sequence[str]) -> tuple[list[HeldRow], list[NodeGrantRow], list[NodeUsageRow]]:
        """What the live grants on ``pools`` hold, node by node, and what schedulers report busy on
        their nodes, in one consistent read."""
        ...

    # -- reads ---------------------------------------------------------------------------------

    def pool_row(self, name: str) -> tuple[PoolRow, list[HeldRow]]:
        """One pool and what its live grants hold; NotFoundError otherwise."""
        ...

    def decision_row(self, ident: str) -> DecisionRow:
        """By id or unique id prefix; NotFoundError otherwise."""
        ...

    def decision_rows(self, limit: int = 20) -> list[DecisionRow]:
        """Most recent first."""
        ...

    def request_row(self, request_id: str) -> DecisionRow | None: ...

    def decision_summaries(
        self, *, limit: int = 20, since: str | None = None, until: str | None = None, before: tuple[str, str] | None = None
    ) -> list[DecisionSummary]:
        """Most recent first, from columns only, one page at a time."""
        ...

    def finops(
        self, *, hours: float | None = None, since: str | None = None, until: str | None = None, now: str | None = None, charge_idle: bool = True
    ) -> list[FinopsRow]:
        """Cost and carbon of placements by device type and region, used and reserved-but-idle,
        summed by the database."""
        ...

    def cost_by_workload(
        self, *, hours: float | None = None, since: str | None = None, until: str | None = None, now: str | None = None, charge_idle: bool = True
    ) -> list[WorkloadCost]:
        """Cost and carbon per workload name, used and reserved-but-idle, summed by the database."""
        ...

    def placed_pools(self) -> list[tuple[str, str, str | None, str | None]]:
        """Each distinct (device type, region, pool, fleet revision) of the placed decisions: what
        says how their carbon was found."""
        ...

    def usage_page(self, start: str, end: str, *, after: tuple[str, str] | None = None, limit: int = 1000) -> list[UsageRow]:
        """One page of the placements that held devices in ``[start, end)``, in (created, id)
        order after ``after``, with their holding and run times and what they hold."""
        ...

    def decision_audit_hashes(self, ids: Sequence[str], since: str) -> dict[str, str]:
        """The hash (hex) of the audit entry that recorded each decision of ``ids`` (made at or after ``since``)."""
        ...

    def report_rows(self, *, hours: float | None = None, since: str | None = None, until: str | None = None, now: str | None = None) -> tuple[list[JSONObject], list[JSONObject]]:
        """Decision and burst rows, from columns, for the FinOps report (a placement names its pool
        and the fleet revision it was decided on)."""
        ...

    def estimate_starts(self, *, since: str | None = None, until: str | None = None) -> list[tuple[str, str, str, str]]:
        """(estimate source, pool, estimated start, actual start) of the placements over a period
        with both times, oldest first."""
        ...

    def burst_events(self, limit: int = 50) -> list[BurstEvent]:
        """Most recent first."""
        ...

    def audit_rows(self) -> list[AuditRow]:
        """The whole audit chain in seq order."""
        ...

    def audited_read(self, work: Callable[[AuditedRead], T]) -> T:
        """``work`` given the audit log, the stored documents and every table the log describes,
        streamed, in one consistent read (``exa audit verify``; run again when the read is retried)."""
        ...

    # -- the queue, quotas and reconcile (store._queue_sql) --------------------------------------

    def queue_waiting(self) -> bool:
        """Whether any workload waits (one indexed read)."""
        ...

    def next_lease_end(self) -> str | None:
        """When the first lease of a live placement not yet submitted ends (None: none has a
        lease): when capacity next frees by itself (one indexed read)."""
        ...

    def queue_rows(self, states: Sequence[str] = ("queued",), *, limit: int | None = None) -> list[QueueRow]: ...

    def queue_find(self, ident: str) -> QueueRow:
        """By id or unique id prefix; NotFoundError otherwise."""
        ...

    def queue_of(self, placement_id: str) -> QueueRow | None: ...

    def usage_rows(self, since_ts: float, now_ts: float, unassigned: str) -> list[tuple[str, float, float, float, str, str]]: ...

    def quota_held(self, pairs: Sequence[tuple[str, str]], unassigned: str) -> dict[tuple[str, str], float]: ...

    def device_hours(self, project: str, accelerator: str, since_ts: float, now_ts: float, unassigned: str) -> float: ...

    def live_grants(self, *, pools: Sequence[str] | None = None, with_jobs: bool = False) -> list[GrantRow]: ...

    def grant(self, ident: str) -> GrantRow | None: ...

    def preempted_for(self, queued_id: str) -> list[GrantRow]: ...

    def preempted(self) -> list[GrantRow]: ...

    def grant_ends(self, pool: str) -> list[tuple[float, float | None, bool, float, str]]:
        """The live grants on a pool: (devices, lease end or None, submitted, started, record)."""
        ...

    def queued_entry(self, ident: str) -> JSONObject | None:
        """The ``queued`` audit entry of a queued record (None: the log has none); a scan of the
        log, for what admission holds a queue row to before it submits."""
        ...

    # -- the placement service's bearer tokens (store._tokens_sql) --------------------------------

    def token_row(self, ident: str) -> TokenRow | None: ...

    def token_rows(self) -> list[TokenRow]: ...

    def close(self) -> None: ...
