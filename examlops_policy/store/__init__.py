"""Durable state: pools, capacity held by decisions, decisions, burst events and the audit chain.

``Store`` is the seam. Two adapters implement it over one shared body of SQL
(``examlops_policy.store._sql``) and one schema, migrated in step (``migrations/<dialect>/``):
``SQLiteStore``, the embedded default, and ``PostgresStore`` for placers on many hosts
(``EXA_DB_URL=postgresql://...``). The contract every adapter keeps:

* ``place`` runs the decision and writes its reservation, decision row, burst event and audit
  entries in ONE transaction that holds the write lock while it decides, so concurrent placers
  never oversubscribe a pool and never fork the audit chain: all rows or none.
* Bad input raises ``SpecError`` before anything is written.
* Conflicts (a lock wait that timed out, a serialization failure, a deadlock, a unique violation)
  and, on PostgreSQL, a lost connection re-run the whole transaction, decision included, a bounded
  number of times; then ``StateError``, with nothing written. A connection lost while committing
  is settled by looking for what the transaction wrote, so nothing is recorded twice.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from examlops_policy.audit import AuditRow
from examlops_policy.model import Decision, Pool, PoolState


@dataclass(frozen=True)
class DecisionRecord:
    """A decision as stored: its id, when it was made, and whether its capacity was released."""

    id: str
    created_at: str
    decision: Decision
    released_at: str | None = None
    job_id: str | None = None


@dataclass(frozen=True)
class BurstEvent:
    """One burst attempt, allowed or blocked."""

    id: int
    created_at: str
    decision_id: str
    workload: str
    residency: str
    pool: str | None
    region: str | None
    verdict: str
    reason_code: str | None
    reason: str | None


@dataclass(frozen=True)
class PoolChange:
    """What applying a pool did: ``added``, ``updated`` or ``unchanged``."""

    name: str
    action: str
    changed_fields: tuple[str, ...] = ()


Decide = Callable[[Sequence[PoolState]], Decision]


class Store(Protocol):
    """Durable state for placements (see the module docstring for the contract)."""

    def apply_pools(self, pools: Sequence[Pool], *, replace: bool) -> list[PoolChange]:
        """Register pools. ``replace=False`` refuses an existing name; ``True`` updates it."""
        ...

    def pool_states(self) -> list[PoolState]:
        """Every pool with its free capacity, cheapest-agnostic, in name order."""
        ...

    def place(self, decide: Decide, *, source: str) -> DecisionRecord:
        """Decide under the write lock and record the outcome atomically.

        ``decide`` runs again on each retry, so it must have no side effects (a policy query).
        """
        ...

    def decisions(self, limit: int = 20) -> list[DecisionRecord]:
        """Most recent first."""
        ...

    def get_decision(self, ident: str) -> DecisionRecord:
        """By id or unique id prefix; NotFoundError otherwise."""
        ...

    def release(self, ident: str, *, source: str) -> DecisionRecord:
        """Free the capacity a placement holds (idempotent: a second release changes nothing)."""
        ...

    def set_job(self, ident: str, job_id: str, *, scheduler: str, source: str) -> DecisionRecord:
        """Record the scheduler's job id on a placed decision, with an audit entry."""
        ...

    def record_scheduler_usage(self, usage: Mapping[str, float], *, scheduler: str, source: str) -> dict[str, float]:
        """Record how many devices of each named pool its scheduler reports busy.

        Busy devices not accounted for by this layer's own submitted, live placements are held
        outside it and are no longer free. Returns the held-outside figure per pool; an audit
        entry is written for each pool whose figure changed. NotFoundError for an unknown pool.
        """
        ...

    def burst_events(self, limit: int = 50) -> list[BurstEvent]:
        """Most recent first."""
        ...

    def audit_rows(self) -> list[AuditRow]:
        """The whole audit chain in seq order."""
        ...

    def close(self) -> None: ...
