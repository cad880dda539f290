"""The store over SQL, shared by the SQLite and PostgreSQL adapters.

``SQLStore`` holds every statement, the schema's migration runner and the bounded retry loop, and
offers the narrow API of ``store.api``: rows in and out, and write transactions (``transaction``)
in which the decision core reads and writes through ``Transaction``. It holds no decision logic and
no JSON form of the decision path: what it stores as text (pool specs, capacities, records) the
core encoded, and decodes. An adapter supplies the connection and three rules: how a write
transaction opens and takes the write lock (SQLite ``BEGIN IMMEDIATE``; PostgreSQL an advisory
transaction lock), which errors are worth retrying (`Fault`), and how a migration script runs.
Statements use ``?`` placeholders; the PostgreSQL adapter translates them.

Retries re-run the whole transaction. A connection lost during COMMIT leaves the outcome unknown:
the transaction's ``landed`` probe looks for what it wrote (a placement by its pre-chosen id) before
trying again, so a retry never records a decision twice.
"""

from __future__ import annotations

import json
import random
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, TypeVar

from examlops_policy.errors import NotFoundError, SpecError, StateBusy, StateCorrupt, StateError, StateFull, StateUnreachable
from examlops_policy.model import Holding, JSONObject
from examlops_policy.store.api import (
    AUDITED,
    AuditedRead,
    DecisionRow,
    Document,
    HeldRow,
    NewDecision,
    NodeGrantRow,
    NodeUsageRow,
    PoolRow,
    StateRows,
    Transaction,
)
from examlops_policy.views import BurstEvent, DecisionSummary, FinopsRow, UsageRow, WorkloadCost
from examlops_policy.store._queue_sql import QueueReads, QueueWrites

BACKOFF_S: Final = 0.05
BACKOFF_CAP_S: Final = 2.0

Fault = Literal["conflict", "disconnected"]
"""A retryable failure: ``conflict`` (lock wait timed out, serialization failure, deadlock, unique
violation) or ``disconnected`` (the connection was lost; reconnect first)."""

T = TypeVar("T")
Row = tuple[Any, ...]
_DECISION_COLUMNS: Final = (
    "id, created_at, document, released_at, job_id, request_id, lease_expires_at, scheduler, job_uid, job_state, "
    "queued_id, job_started_at, job_ended_at, node_down_at, preempting_for"
)
_POOL_COLUMNS: Final = "name, spec, capacity, free, held_outside, version, removed_at, removing_since"
_GAVE_UP: Final[dict[Fault, str]] = {
    "conflict": "the state database stayed locked or kept conflicting",
    "disconnected": "the state database could not be reached",
}
_KEY_COLUMN: Final[dict[str, str]] = {"fleets": "revision", "verdict_sets": "key"}
# The placements whose lease ended by a time and that are not released yet.
_ENDED: Final = (
    "FROM decisions d JOIN allocations a ON a.decision_id = d.id "
    "WHERE d.lease_expires_at IS NOT NULL AND d.lease_expires_at < ? AND d.released_at IS NULL "
    "AND d.job_id IS NULL AND a.released_at IS NULL"
)
# A row (the fleet version) only when the state is still at a version (and, with a time, no lease
# has ended by then): one statement for the common read.
_UNCHANGED: Final = "SELECT fleet_version FROM state WHERE id = 1 AND version = ?"
_UNCHANGED_NOW: Final = _UNCHANGED + f" AND NOT EXISTS (SELECT 1 {_ENDED})"

if TYPE_CHECKING:  # the audit chain's code loads when an entry is written or read
    from examlops_policy import audit


class Cursor(Protocol):
    """What the shared code reads from a DB-API cursor (sqlite3 and psycopg both have it)."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def fetchmany(self, size: int = ...) -> list[Any]: ...


def _entry_ts(canonical: bytes) -> str:
    """The time a stored entry is dated (empty when it has none that reads as one)."""
    try:
        ts = json.loads(canonical).get("ts")
    except (ValueError, UnicodeDecodeError, AttributeError):
        return ""
    return ts if isinstance(ts, str) and len(ts) == 27 and ts.endswith("Z") else ""


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def epoch(ts: str) -> float:
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


# A placement's actual start, as reconcile records it from its scheduler (the job's start time).
# The one place the estimate-error figures read it from: reconcile's column
# (decisions.job_started_at, migration 0009).
ACTUAL_START: Final = "job_started_at"


def migrations(dialect: str) -> list[tuple[int, str]]:
    """``(version, script)`` from ``migrations/<dialect>/NNNN_name.sql``, in version order."""
    folder = Path(__file__).parent / "migrations" / dialect  # files of the package (no importlib.resources: a zipfile import)
    found = []
    for item in folder.iterdir():
        if item.name.endswith(".sql"):
            found.append((int(item.name.split("_", 1)[0]), item.read_text(encoding="utf-8")))
    return sorted(found)


class SQLStore(QueueReads, ABC):
    """The store's narrow API (``store.api``) and its reads, over the connection an adapter provides.

    ``conflicts_retried`` and ``reconnects`` count, for this object's lifetime, the transactions
    re-run after a conflict and after a lost connection.
    """

    dialect: str  # the migrations folder
    epoch_sql: str  # epoch seconds of a text time column ``{col}`` (UTC ISO 8601), in this dialect
    where: str  # names the database in messages (never with a password)
    read_only: StateError | None = None  # why writes are refused (None: a writable state)

    def __init__(self, *, clock: Callable[[], str], attempts: int) -> None:
        if attempts < 1:
            raise SpecError(f"attempts must be at least 1, got {attempts}")
        self._clock = clock
        self._attempts = attempts
        self.conflicts_retried = 0
        self.reconnects = 0
        self._stored: set[str] = set()  # fleet and verdict-set keys known to be committed
        self._storing: set[str] = set()  # ... written by the open transaction (committed with it, or forgotten)
        self._signer: tuple[audit.SigningKey | None] | None = None  # (the writer's key,) once read

    # -- what an adapter provides -----------------------------------------------------------

    @abstractmethod
    def _execute(self, sql: str, params: Sequence[object] = ()) -> Cursor:
        """Run one statement (``?`` placeholders), connecting first if there is no connection."""

    @abstractmethod
    def _begin(self) -> None:
        """Open a write transaction holding the store's write lock (the audit head with it)."""

    @abstractmethod
    def _begin_read(self) -> None:
        """Open a read-only transaction that sees one consistent state."""

    @abstractmethod
    def _commit(self) -> None: ...

    @abstractmethod
    def _rollback(self) -> None:
        """End an open transaction without raising; drop a broken connection."""

    @abstractmethod
    def _fault(self, exc: Exception) -> Fault | None:
        """The retryable kind of ``exc``, or None: raise it (a driver error as StateError)."""

    @abstractmethod
    def _is_driver_error(self, exc: Exception) -> bool: ...

    @abstractmethod
    def _run_script(self, sql: str) -> None:
        """Run one migration script inside the open transaction."""

    @abstractmethod
    def close(self) -> None: ...

    # -- transactions -----------------------------------------------------------------------

    def _run(self, work: Callable[[], T], *, landed: Callable[[], T | None] | None = None, consistent: bool = False) -> T:
        """``work()`` with bounded retries: in one write transaction when ``landed`` is given, in one
        read-only transaction when ``consistent``, else as plain reads.

        ``landed`` settles a connection lost during COMMIT: it returns what the committed work
        returned, or None when nothing landed (then the work runs again).
        """
        write = landed is not None
        fault: Fault | None = None
        problem = ""
        probe: Callable[[], T | None] | None = None
        for attempt in range(self._attempts):
            if fault is not None:
                if fault == "conflict":
                    self.conflicts_retried += 1
                else:
                    self.reconnects += 1
                time.sleep(min(BACKOFF_CAP_S, BACKOFF_S * 2 ** (attempt - 1)) * (0.5 + random.random()))
            committing = False
            opened = False
            try:
                if probe is not None:
                    found = probe()
                    if found is not None:
                        return found
                    probe = None
                if write or consistent:
                    opened = True  # a BEGIN that failed halfway (a lock wait timed out) is rolled back too
                    if write:
                        self._begin()
                    else:
                        self._begin_read()
                self._storing = set()
                result = work()
                if opened:
                    committing = write
                    self._commit()
                self._stored |= self._storing
                return result
            except BaseException as exc:
                self._storing = set()
                if opened:
                    self._rollback()
                fault = self._fault(exc) if isinstance(exc, Exception) else None
                if fault is None:
                    if isinstance(exc, Exception) and self._is_driver_error(exc):
                        raise self._state_error(exc) from exc
                    raise
                problem = f"{_GAVE_UP[fault]} ({_first_line(exc)})"
                if committing and fault == "disconnected":
                    probe = landed
        raise self._gave_up(fault, problem)

    def _state_error(self, exc: Exception) -> StateError:
        """A driver error that retrying will not cure, as the error a user can act on."""
        kind = self._classify(exc)
        if kind is StateCorrupt:
            return StateCorrupt(f"{self.where}: the state database is damaged or is not a database ({_first_line(exc)}); nothing was written")
        if kind is StateFull:
            return StateFull(f"{self.where}: the disk is full ({_first_line(exc)}); nothing was written")
        return kind(f"{self.where}: {_first_line(exc)}; nothing was written")

    def _classify(self, exc: Exception) -> type[StateError]:
        """Which StateError a driver error is (adapters know their drivers' codes)."""
        return StateError

    def _gave_up(self, fault: Fault | None, problem: str) -> StateError:
        cls = StateUnreachable if fault == "disconnected" else StateBusy
        return cls(f"{self.where}: {problem}; gave up after {self._attempts} attempts, nothing was written")

    def _migrate(self) -> None:
        """Apply pending migrations; with none pending, only read (no DDL, no write lock), so a
        role that may only read and write rows (docs/postgres-least-privilege.sql) opens the state."""
        known = migrations(self.dialect)

        def pending(done: set[int]) -> list[tuple[int, str]]:
            unknown = done - {version for version, _ in known}
            if unknown:
                raise StateError(
                    f"{self.where}: the state has schema version {max(unknown)}, newer than this exa "
                    "knows; upgrade examlops-policy"
                )
            return [(version, sql) for version, sql in known if version not in done]

        def applied() -> set[int] | None:
            """The versions applied, or None when schema_migrations cannot be read (fresh state):
            the write below then creates it, or raises what is really wrong."""
            try:
                return {int(row[0]) for row in self._execute("SELECT version FROM schema_migrations").fetchall()}
            except Exception as exc:
                if self._is_driver_error(exc) and self._fault(exc) is None:
                    return None
                raise

        done = self._run(applied)
        if done is not None and not pending(done):
            return

        def work() -> None:
            self._execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)"
            )
            for version, sql in pending({row[0] for row in self._execute("SELECT version FROM schema_migrations").fetchall()}):
                self._run_script(sql)
                self._execute("INSERT INTO schema_migrations VALUES (?, ?)", (version, self._clock()))

        # Idempotent: a retry after a lost COMMIT sees what landed and applies only the rest.
        try:
            self._run(work, landed=lambda: None)
        except StateError as exc:
            cause = exc.__cause__
            if type(exc) is StateError and done and cause is not None and getattr(cause, "sqlstate", None) != "42501":
                # A migration that does not apply to a state that has some (a column it adds is
                # there already): its row was deleted, and the schema is ahead of the table. (A gap
                # alone is no sign: a state made before a migration was added below others has one.)
                raise StateCorrupt(
                    f"{self.where}: schema migration(s) {', '.join(str(v) for v, _ in pending(done))} do not apply to this state "
                    f"({_first_line(cause)}): the state is not what its schema_migrations table says (a row of it deleted, or the "
                    "schema edited); nothing was written"
                ) from cause
            if cause is None or getattr(cause, "sqlstate", None) != "42501":  # insufficient privilege
                raise
            what = (
                "the state has no schema yet (or this role cannot read schema_migrations)" if done is None
                else f"schema migration(s) {', '.join(str(v) for v, _ in pending(done))} are pending"
            )
            raise StateError(
                f"{self.where}: {what}, and this database role may not migrate the state ({_first_line(cause)}); "
                "run any exa command once with EXA_DB_URL set to the URL of the role that owns the schema "
                "(see docs/postgres-least-privilege.sql), then retry; nothing was written"
            ) from cause

    def _signing_key(self) -> audit.SigningKey | None:
        """The key this process signs audit entries with (``EXA_SIGNING_KEY``), read at the first
        entry it writes; SpecError (nothing written) when that file is not a signer key."""
        if self._signer is None:
            from examlops_policy import audit

            self._signer = (audit.configured_signing_key(),)
        return self._signer[0]

    def _append_audit(self, kind: str, body: JSONObject, *, source: str) -> None:
        row = self._execute("SELECT seq, prev_hash, entry_hash, entry FROM audit_log ORDER BY seq DESC LIMIT 1").fetchone()
        head = _audit_row(row) if row else None
        # Entries are dated in the order they are written: never before the head (a clock that
        # stepped back dates it as the head), so verify can hold their times to their order.
        ts, before = self._clock(), _entry_ts(head.canonical) if head is not None else ""
        if len(ts) == 27 and ts.endswith("Z") and before > ts:
            ts = before
        entry: JSONObject = {"source": source, "kind": kind, "ts": ts, **body}
        from examlops_policy import audit

        new = audit.next_row(head, entry, self._signing_key())
        self._execute(
            "INSERT INTO audit_log (seq, prev_hash, entry_hash, entry, source, kind, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (new.seq, new.prev_hash, new.entry_hash, new.canonical, source, kind, entry["ts"]),
        )

    # -- the narrow API: write transactions ------------------------------------------------------

    def transaction(self, work: Callable[[Transaction], T], *, landed: Callable[[Transaction], T | None] | None = None) -> T:
        """``work`` in one write transaction holding the write lock (see ``store.api.Rows``)."""
        txn = _SQLTransaction(self)
        return self._run(lambda: work(txn), landed=(lambda: landed(txn)) if landed is not None else (lambda: None))

    # -- the narrow API: reads -----------------------------------------------------------------

    def now(self) -> str:
        """The time now, as a write would record it."""
        return self._clock()

    def rows(self, since: int = -1, *, now: str | None = None) -> StateRows:
        """The state and fleet versions and the pools changed after ``since``, in one read; with
        ``now``, the leases ended by then and what the live grants of their pools hold. One
        statement when nothing changed since ``since`` (and no lease has ended by ``now``)."""
        if since >= 0:
            unchanged = self._run(lambda: self._execute(_UNCHANGED if now is None else _UNCHANGED_NOW, (since,) if now is None else (since, now)).fetchone())
            if unchanged is not None:
                return StateRows(since, int(unchanged[0]), ())

        def work() -> StateRows:
            version, fleet = (int(v) for v in self._execute("SELECT version, fleet_version FROM state WHERE id = 1").fetchone())
            ended: tuple[tuple[str, str], ...] = ()
            held: dict[str, tuple[HeldRow, ...]] = {}
            if now is not None:
                ended = tuple(
                    (str(r[0]), str(r[1]))
                    for r in self._execute(
                        f"SELECT d.id, a.pool {_ENDED} ORDER BY a.pool, d.id",
                        (now,),
                    ).fetchall()
                )
                held = {pool: tuple(self._held(pool)) for pool in sorted({pool for _, pool in ended})}
            pools = () if version == since else tuple(self._pool_rows(since))
            return StateRows(version, fleet, pools, ended, held)

        return self._run(work, consistent=True)

    def layout(self) -> str | None:
        row = self._run(lambda: self._execute("SELECT layout FROM state WHERE id = 1").fetchone())
        return None if row is None else row[0]

    def capacities_at(self, version: int) -> dict[str, str]:
        """Every pool's capacity at state version ``version``: its latest logged capacity at or
        before it (pools without one then are left out)."""
        rows = self._run(
            lambda: self._execute(
                "SELECT p.name, (SELECT c.capacity FROM capacity_log c WHERE c.pool = p.name AND c.version <= ? "
                "ORDER BY c.version DESC LIMIT 1) FROM pools p",
                (version,),
            ).fetchall(),
            consistent=True,
        )
        return {str(r[0]): str(r[1]) for r in rows if r[1] is not None}

    def document(self, kind: Document, key: str) -> str:
        row = self._run(lambda: self._execute(f"SELECT document FROM {kind} WHERE {_KEY_COLUMN[kind]} = ?", (key,)).fetchone())
        if row is None:
            raise StateCorrupt(
                f"{self.where}: the stored {kind[:-1].replace('_', ' ')} {key} is missing (its row was deleted); a decision cannot "
                "be rebuilt (run exa audit verify)"
            )
        return str(row[0])

    def pool_row(self, name: str) -> tuple[PoolRow, list[HeldRow]]:
        """One pool and what its live grants hold; NotFoundError for an unknown one."""

        def work() -> tuple[PoolRow, list[HeldRow]]:
            row = self._execute(f"SELECT {_POOL_COLUMNS} FROM pools WHERE name = ? AND removed_at IS NULL", (name,)).fetchone()
            if row is None:
                raise NotFoundError(f"no pool {name!r}")
            return _pool_row(row), self._held(name)

        return self._run(work, consistent=True)

    def decision_row(self, ident: str) -> DecisionRow:
        """A decision by id or unique id prefix; NotFoundError otherwise."""
        return self._run(lambda: self._find(ident), consistent=True)

    def decision_rows(self, limit: int = 20) -> list[DecisionRow]:
        """The most recent decisions first."""
        rows = self._run(
            lambda: self._execute(f"SELECT {_DECISION_COLUMNS} FROM decisions ORDER BY created_at DESC, id LIMIT ?", (limit,)).fetchall(),
            consistent=True,
        )
        return [DecisionRow(*r) for r in rows]

    def request_row(self, request_id: str) -> DecisionRow | None:
        """The decision an earlier call with this idempotency key recorded, if any."""
        return self._run(lambda: self._by("request_id", request_id))

    # -- statements the transaction runs ------------------------------------------------------------

    def _pool_rows(self, since: int) -> list[PoolRow]:
        rows = self._execute(f"SELECT {_POOL_COLUMNS} FROM pools WHERE version > ? ORDER BY name", (since,)).fetchall()
        return [_pool_row(r) for r in rows]

    def _held(self, pool: str) -> list[HeldRow]:
        return self._held_in((pool,))

    def _held_in(self, pools: Sequence[str], submitted: bool = False) -> list[HeldRow]:
        if not pools:
            return []
        # From the pools' live allocations (their partial index) to their holdings (by decision):
        # what this reads is what the pools hold now, never every holding they ever had. In the
        # order the grants were made (then node by node, by device), whatever order the ids came in.
        rows = self._execute(
            "SELECT h.decision_id, h.device, h.profile, h.start, h.units, h.share, h.node, h.shares, h.pool FROM allocations a "
            "JOIN holdings h ON h.decision_id = a.decision_id "
            + ("JOIN decisions d ON d.id = a.decision_id " if submitted else "")
            + f"WHERE a.pool IN ({', '.join('?' * len(pools))}) AND a.released_at IS NULL"
            + (" AND d.job_id IS NOT NULL" if submitted else "")
            + " ORDER BY a.created_at, a.decision_id, h.node, h.device, h.start",
            tuple(pools),
        ).fetchall()
        return [_held_row(r) for r in rows]

    def _node_grants(self, pools: Sequence[str], submitted: bool = False) -> list[NodeGrantRow]:
        if not pools:
            return []
        rows = self._execute(
            # From the live allocations, as _held_in.
            "SELECT g.decision_id, g.pool, g.node, g.position, g.cpu_milli, g.memory_mib FROM allocations a "
            "JOIN node_grants g ON g.decision_id = a.decision_id "
            + ("JOIN decisions d ON d.id = a.decision_id " if submitted else "")
            + f"WHERE a.pool IN ({', '.join('?' * len(pools))}) AND a.released_at IS NULL"
            + (" AND d.job_id IS NOT NULL" if submitted else "")
            + " ORDER BY g.pool, g.decision_id, g.position",
            tuple(pools),
        ).fetchall()
        return [NodeGrantRow(str(r[0]), str(r[1]), str(r[2]), int(r[3]), int(r[4]), int(r[5])) for r in rows]

    def _node_usage(self, pools: Sequence[str]) -> list[NodeUsageRow]:
        if not pools:
            return []
        rows = self._execute(
            "SELECT pool, node, devices, indices, shares, cpu_milli, memory_mib FROM node_usage "
            f"WHERE pool IN ({', '.join('?' * len(pools))}) ORDER BY pool, node",
            tuple(pools),
        ).fetchall()
        return [
            NodeUsageRow(str(r[0]), str(r[1]), int(r[2]), tuple(int(i) for i in json.loads(r[3])), int(r[4]),
                         None if r[5] is None else int(r[5]), None if r[6] is None else int(r[6]))  # fmt: skip
            for r in rows
        ]

    def node_rows(self, pools: Sequence[str]) -> tuple[list[HeldRow], list[NodeGrantRow], list[NodeUsageRow]]:
        """What the live grants on ``pools`` hold, node by node, and what schedulers report busy on
        their nodes, in one consistent read."""
        return self._run(lambda: (self._held_in(pools), self._node_grants(pools), self._node_usage(pools)), consistent=True)

    def _find(self, ident: str) -> DecisionRow:
        if not ident or not all(c in "0123456789abcdef" for c in ident):
            raise NotFoundError(f"no decision {ident!r} (ids are hexadecimal)")
        # A range on the primary key (ids are hexadecimal; the prefix's last character plus one
        # bounds every id that begins with it): a search, where LIKE would scan the table.
        after = ident[:-1] + chr(ord(ident[-1]) + 1)
        rows = self._execute(f"SELECT {_DECISION_COLUMNS} FROM decisions WHERE id >= ? AND id < ? ORDER BY id LIMIT 2", (ident, after)).fetchall()
        if not rows:
            raise NotFoundError(f"no decision {ident!r}")
        if len(rows) > 1:
            raise SpecError(f"decision id prefix {ident!r} is ambiguous: more than one decision begins so; give more characters", field="ID")
        return DecisionRow(*rows[0])

    def _by(self, column: Literal["id", "request_id"], value: str) -> DecisionRow | None:
        row = self._execute(f"SELECT {_DECISION_COLUMNS} FROM decisions WHERE {column} = ?", (value,)).fetchone()
        return None if row is None else DecisionRow(*row)

    def decision_summaries(
        self, *, limit: int = 20, since: str | None = None, until: str | None = None, before: tuple[str, str] | None = None
    ) -> list[DecisionSummary]:
        """Decisions from their columns, newest first: a page (``before`` = the last row's
        (created_at, id) of the previous page), never loading documents."""
        where, params = ["1 = 1"], []
        if since is not None:
            where.append("created_at >= ?")
            params.append(since)
        if until is not None:
            where.append("created_at < ?")
            params.append(until)
        if before is not None:
            where.append("(created_at < ? OR (created_at = ? AND id > ?))")
            params += [before[0], before[0], before[1]]
        sql = (
            "SELECT id, created_at, workload, outcome, pool, accelerator, model, region, fallback, fraction_honored, devices, "
            "cost_per_hour, carbon_factor, note, released_at, job_id, residency, policy_revision, verdicts, lease_expires_at, "
            f"scheduler, job_state, queued_id, larger_partition, estimated_start, estimate_source, submitted_at, {ACTUAL_START}, "
            f"preempting_for FROM decisions WHERE {' AND '.join(where)} ORDER BY created_at DESC, id LIMIT ?"
        )
        rows = self._run(lambda: self._execute(sql, (*params, limit)).fetchall())
        return [
            DecisionSummary(
                id=r[0], created_at=r[1], workload=r[2], outcome=r[3], pool=r[4], accelerator=r[5], model=r[6], region=r[7],
                fallback=None if r[8] is None else bool(r[8]), fraction_honored=None if r[9] is None else bool(r[9]),
                devices=r[10], cost_per_hour=r[11], carbon_factor=r[12], note=r[13], released_at=r[14], job_id=r[15],
                residency=r[16], policy_revision=r[17], verdicts=r[18], lease_expires_at=r[19], scheduler=r[20], job_state=r[21],
                queued_id=r[22], larger_partition=bool(r[23]), estimated_start=r[24], estimate_source=r[25], submitted_at=r[26],
                actual_start=r[27], preempting_for=r[28],
            )  # fmt: skip
            for r in rows
        ]

    def finops(
        self, *, hours: float | None = None, since: str | None = None, until: str | None = None, now: str | None = None, charge_idle: bool = True
    ) -> list[FinopsRow]:
        """Cost and carbon of placements by device type and region, summed in SQL.

        Hours are ``hours`` per placement when given, else the time it held its devices (until its
        release, or ``now``), split into the time its job ran (used) and the rest (reserved but
        idle; ``_spans``). ``charge_idle``: whether the idle time counts in ``cost``.
        """
        rows = self._placed_sums(("accelerator", "region"), "accelerator, region", hours=hours, since=since, until=until, now=now)
        return [FinopsRow(str(r[0]), str(r[1]), **_used_idle(r[2:], charge_idle)) for r in rows]  # type: ignore[arg-type]

    def placed_pools(self) -> list[tuple[str, str, str | None, str | None]]:
        """Each distinct (device type, region, pool, fleet revision) of the placed decisions."""
        sql = "SELECT DISTINCT accelerator, region, pool, fleet_revision FROM decisions WHERE outcome = 'placed'"
        rows = self._run(lambda: self._execute(sql).fetchall())
        return [(str(r[0]), str(r[1]), r[2], r[3]) for r in rows]

    def _placed_sums(
        self, keys: tuple[str, ...], order: str, *, hours: float | None, since: str | None, until: str | None, now: str | None
    ) -> list[tuple[object, ...]]:
        """Per ``keys`` of the placed decisions: the keys, then decisions, device-hours, cost and
        carbon over the hours each held its devices, then device-hours, cost and carbon over the
        hours its job ran (rounded to 6 places), summed in SQL."""
        where, params = _period(since, until)
        spans, span_params = self._spans(hours, now, f"WHERE outcome = 'placed'{where}")
        columns = ", ".join(keys)
        sql = (
            f"SELECT {columns}, COUNT(*), SUM(devices * h), SUM(cost_per_hour * devices * h), SUM(carbon_factor * devices * h), "
            f"SUM(devices * u), SUM(cost_per_hour * devices * u), SUM(carbon_factor * devices * u) "
            f"FROM {spans} placed GROUP BY {columns} ORDER BY {order}"
        )
        rows = self._run(lambda: self._execute(sql, (*span_params, *params)).fetchall())
        n = len(keys)
        return [(*r[:n], int(r[n]), *(round(float(v or 0), 6) for v in r[n + 1 :])) for r in rows]

    def _spans(self, hours: float | None, now: str | None, where: str) -> tuple[str, list[object]]:
        """A subquery of the decisions ``where`` selects, each with ``h``, the hours it counts
        (``hours``, else held until its release, the end of a lease that ended without a job, or
        now), and ``u``, the hours of those its job ran (the overlap of the job's start and end, as
        reconcile recorded them, with the time held; a placement submitted to no scheduler counts
        all its hours as used, one whose job never started none). Its parameters come first."""
        if hours is not None:
            return f"(SELECT *, CAST(? AS DOUBLE PRECISION) AS h, CAST(? AS DOUBLE PRECISION) AS u FROM decisions {where})", [hours, hours]
        end = epoch(now or self._clock())
        until = "COALESCE(released_ts, CASE WHEN job_id IS NULL AND lease_expires_ts < ? THEN lease_expires_ts END, ?)"
        js, je = self.epoch_sql.format(col="job_started_at"), self.epoch_sql.format(col="job_ended_at")
        held = f"(SELECT *, created_ts AS c_ts, {until} AS e_ts, {js} AS js_ts, {je} AS je_ts FROM decisions {where}) held"
        ran = (
            "(SELECT *, CASE WHEN e_ts > c_ts THEN e_ts - c_ts ELSE 0 END AS held_s, "
            "CASE WHEN js_ts > c_ts THEN js_ts ELSE c_ts END AS s_ts, "
            f"CASE WHEN je_ts IS NOT NULL AND je_ts < e_ts THEN je_ts ELSE e_ts END AS f_ts FROM {held}) ran"
        )
        spans = (
            "(SELECT *, held_s / 3600.0 AS h, (CASE WHEN job_id IS NULL THEN held_s WHEN js_ts IS NULL THEN 0 "
            f"WHEN f_ts > s_ts THEN f_ts - s_ts ELSE 0 END) / 3600.0 AS u FROM {ran})"
        )
        return spans, [end, end]

    def cost_by_workload(
        self, *, hours: float | None = None, since: str | None = None, until: str | None = None, now: str | None = None, charge_idle: bool = True
    ) -> list[WorkloadCost]:
        """Cost and carbon of placements per workload name, summed in SQL, most expensive first."""
        rows = self._placed_sums(("workload",), "workload", hours=hours, since=since, until=until, now=now)
        found = [WorkloadCost(str(r[0]), **_used_idle(r[1:], charge_idle)) for r in rows]  # type: ignore[arg-type]
        return sorted(found, key=lambda w: (-w.cost, w.workload))

    def usage_page(self, start: str, end: str, *, after: tuple[str, str] | None = None, limit: int = 1000) -> list[UsageRow]:
        """One page of the placements that held devices during ``[start, end)`` (UTC ISO 8601), in
        (created_at, id) order after ``after`` (the last row's): the columns a bill is made of, each placement's
        holding and run times as epoch seconds (``_spans``; the holding of a live one ends at
        ``end``), and what it holds, device by device (holdings stay after release)."""
        now = self._clock()
        spans, span_params = self._spans(None, end if epoch(end) < epoch(now) else now, "WHERE outcome = 'placed' AND created_ts < ?")
        keyset, keyset_params = ("", []) if after is None else (" AND (created_at > ? OR (created_at = ? AND id > ?))", [after[0], after[0], after[1]])
        sql = (
            "SELECT id, created_at, workload, project, pool, accelerator, model, region, devices, cost_per_hour, carbon_factor, "
            "policy_revision, fleet_revision, job_id, scheduler, c_ts, e_ts, js_ts, je_ts, u, "
            "(SELECT q.created_ts FROM decisions q WHERE q.id = s.queued_id), target "
            f"FROM {spans} s WHERE e_ts > ?{keyset} ORDER BY created_at, id LIMIT ?"
        )
        start_ts, end_ts = epoch(start), epoch(end)

        def work() -> list[UsageRow]:
            rows = self._execute(sql, (*span_params, end_ts, start_ts, *keyset_params, limit)).fetchall()
            if not rows:
                return []
            ids = [str(r[0]) for r in rows]
            marks = ", ".join("?" for _ in ids)
            held: dict[str, list[tuple[str, int, str | None, int | None, float, int | None]]] = {}
            for h in self._execute(
                f"SELECT decision_id, node, device, profile, units, share, shares FROM holdings WHERE decision_id IN ({marks}) ORDER BY decision_id, node, device, start",
                ids,
            ).fetchall():
                held.setdefault(str(h[0]), []).append((str(h[1] or ""), int(h[2]), h[3], None if h[4] is None else int(h[4]), float(h[5]), None if h[6] is None else int(h[6])))
            return [
                UsageRow(
                    id=str(r[0]), created_at=str(r[1]), workload=str(r[2]), project=r[3], pool=str(r[4]), accelerator=str(r[5]), model=r[6],
                    region=str(r[7]), devices=float(r[8]), cost_per_hour=float(r[9] or 0), carbon_factor=float(r[10] or 0),
                    policy_revision=str(r[11]), fleet_revision=r[12], job_id=r[13], scheduler=r[14], held_from=_ms(r[15]), held_until=_ms(r[16]),
                    job_started=None if r[17] is None else _ms(r[17]), job_ended=None if r[18] is None else _ms(r[18]),
                    used_hours=float(r[19] or 0), asked_at=None if r[20] is None else _ms(r[20]), target=r[21], holdings=tuple(held.get(str(r[0]), ())),
                )  # fmt: skip
                for r in rows
            ]

        return self._run(work, consistent=True)

    def decision_audit_hashes(self, ids: Sequence[str], since: str) -> dict[str, str]:
        """The entry hash (hex) of the audit entry that recorded each of the decisions ``ids``,
        made at or after ``since``: the chain's decision entries from then on, read in seq order
        until every one is found."""
        wanted, found = set(ids), dict[str, str]()
        sql = "SELECT entry_hash, entry FROM audit_log WHERE kind = 'decision' AND created_at >= ? ORDER BY seq"

        def work() -> dict[str, str]:
            cursor = self._execute(sql, (since,))
            while wanted - found.keys():
                batch = cursor.fetchmany(500)
                if not batch:
                    break
                for entry_hash, entry in batch:
                    ident = json.loads(bytes(entry)).get("decision_id")
                    if ident in wanted:
                        found[ident] = bytes(entry_hash).hex()
            return found

        return self._run(work, consistent=True)

    def report_rows(self, *, hours: float | None = None, since: str | None = None, until: str | None = None, now: str | None = None) -> tuple[list[JSONObject], list[JSONObject]]:
        """Decision and burst rows (columns only) for the FinOps report over a period; a placement's
        row also names its ``pool`` and the ``fleet`` revision it was decided on (None before
        decisions kept their fleet), from which the façade says how its carbon was found."""
        where, params = _period(since, until)
        spans, span_params = self._spans(hours, now, f"WHERE 1 = 1{where}")
        sql = (
            "SELECT workload, created_at, outcome, accelerator, region, devices * h, cost_per_hour * devices * h, "
            "carbon_factor * devices * h, fallback, fraction, fraction_honored, pool, fleet_revision, estimate_source, estimated_start, "
            f"{ACTUAL_START}, devices * u, cost_per_hour * devices * u, carbon_factor * devices * u FROM {spans} d ORDER BY created_at"
        )

        def work() -> tuple[list[JSONObject], list[JSONObject]]:
            decisions: list[JSONObject] = []
            for r in self._execute(sql, (*span_params, *params)).fetchall():
                row: JSONObject = {"workload": r[0], "created_at": r[1], "outcome": r[2]}
                if r[2] == "placed":
                    row.update(device=r[3], region=r[4], device_hours=float(r[5] or 0), cost=float(r[6] or 0), carbon_g=float(r[7] or 0),
                               fallback=bool(r[8]), fraction=float(r[9]) if r[9] is not None else 1.0, fraction_honored=bool(r[10]),
                               pool=r[11], fleet=r[12], estimate_source=r[13], estimated_start=r[14], actual_start=r[15],
                               used_device_hours=float(r[16] or 0), used_cost=float(r[17] or 0), used_carbon_g=float(r[18] or 0))  # fmt: skip
                decisions.append(row)
            burst_where = where.replace("created_at", "b.created_at")
            bursts = [
                {"residency": r[0], "verdict": r[1]}
                for r in self._execute(f"SELECT b.residency, b.verdict FROM burst_events b WHERE 1 = 1{burst_where}", params).fetchall()
            ]
            return decisions, bursts

        return self._run(work, consistent=True)

    def estimate_starts(self, *, since: str | None = None, until: str | None = None) -> list[tuple[str, str, str, str]]:
        """(estimate source, pool, estimated start, actual start) of the placements made over a
        period that have both times, oldest first: what estimate errors are worked out from."""
        where, params = _period(since, until)
        sql = (
            f"SELECT estimate_source, pool, estimated_start, actual_start FROM (SELECT *, {ACTUAL_START} AS actual_start FROM decisions "
            f"WHERE outcome = 'placed' AND estimated_start IS NOT NULL{where}) d WHERE actual_start IS NOT NULL ORDER BY created_at, id"
        )
        rows = self._run(lambda: self._execute(sql, params).fetchall())
        return [(str(r[0]), str(r[1]), str(r[2]), str(r[3])) for r in rows]

    def burst_events(self, limit: int = 50) -> list[BurstEvent]:
        rows = self._run(
            lambda: self._execute(
                "SELECT id, created_at, decision_id, workload, residency, pool, region, verdict, reason_code, reason "
                "FROM burst_events ORDER BY id DESC LIMIT ?",
                (limit,),
            ).fetchall(),
        )
        return [BurstEvent(*r) for r in rows]

    def audit_rows(self) -> list[audit.AuditRow]:
        rows = self._run(
            lambda: self._execute("SELECT seq, prev_hash, entry_hash, entry FROM audit_log ORDER BY seq").fetchall(),
            consistent=True,
        )
        return [_audit_row(r) for r in rows]

    def audited_read(self, work: Callable[[AuditedRead], T]) -> T:
        """``work`` given the audit log, the stored documents and every table it describes, in one
        read-only transaction, streamed (``store.api.AuditedRead``); run again from the start when
        the read is retried."""
        return self._run(lambda: work(_AuditedRead(self)), consistent=True)

    def _stream(self, sql: str) -> Iterator[tuple[object, ...]]:
        """The rows of a query, a batch at a time (a driver with cursors on the server overrides
        it: a plain cursor of the PostgreSQL driver holds every row in the client)."""
        cursor = self._execute(sql)
        while True:
            batch = cursor.fetchmany(STREAM_BATCH)
            if not batch:
                return
            yield from (tuple(r) for r in batch)


STREAM_BATCH: Final = 2000  # rows a streamed read takes at a time


class _AuditedRead:
    """``store.api.AuditedRead`` over a store's open read transaction."""

    def __init__(self, store: SQLStore) -> None:
        self._store = store
        row = store._execute("SELECT version, layout FROM state WHERE id = 1").fetchone()
        self.version, self.layout = int(row[0]), row[1]

    def log(self) -> Iterator[audit.AuditRow]:
        return (_audit_row(r) for r in self._store._stream("SELECT seq, prev_hash, entry_hash, entry FROM audit_log ORDER BY seq"))

    def documents(self) -> list[tuple[str, str]]:
        sql = "SELECT revision, document FROM fleets UNION ALL SELECT key, document FROM verdict_sets"
        return [(str(r[0]), str(r[1])) for r in self._store._execute(sql).fetchall()]

    def rows(self, table: str) -> Iterator[tuple[object, ...]]:
        columns, order = AUDITED[table]
        return self._store._stream(f"SELECT {', '.join(columns)} FROM {table} ORDER BY {order}")


class _SQLTransaction(QueueWrites):
    """``store.api.Transaction`` over an open write transaction of ``store``."""

    def __init__(self, store: SQLStore) -> None:
        self._store = store
        self._execute = store._execute

    def now(self) -> str:
        return self._store._clock()

    def state(self) -> tuple[int, int]:
        version, fleet = self._execute("SELECT version, fleet_version FROM state WHERE id = 1").fetchone()
        return int(version), int(fleet)

    def bump(self, *, fleet: bool = False) -> int:
        sql = "UPDATE state SET version = version + 1" + (", fleet_version = fleet_version + 1" if fleet else "") + " WHERE id = 1 RETURNING version"
        return int(self._execute(sql).fetchone()[0])

    def pools(self, since: int = -1) -> list[PoolRow]:
        return self._store._pool_rows(since)

    def pool(self, name: str) -> PoolRow | None:
        row = self._execute(f"SELECT {_POOL_COLUMNS} FROM pools WHERE name = ? AND removed_at IS NULL", (name,)).fetchone()
        return None if row is None else _pool_row(row)

    def held(self, pool: str) -> list[HeldRow]:
        return self._store._held(pool)

    def held_in(self, pools: Sequence[str], *, submitted: bool = False) -> list[HeldRow]:
        return self._store._held_in(pools, submitted)

    def node_grants(self, pools: Sequence[str], *, submitted: bool = False) -> list[NodeGrantRow]:
        return self._store._node_grants(pools, submitted)

    def grant_of(self, ident: str) -> tuple[list[HeldRow], list[NodeGrantRow]]:
        held = self._execute(
            "SELECT decision_id, device, profile, start, units, share, node, shares, pool FROM holdings WHERE decision_id = ? ORDER BY node, device, start",
            (ident,),
        ).fetchall()
        grants = self._execute(
            "SELECT decision_id, pool, node, position, cpu_milli, memory_mib FROM node_grants WHERE decision_id = ? ORDER BY position", (ident,)
        ).fetchall()
        return [_held_row(r) for r in held], [NodeGrantRow(str(r[0]), str(r[1]), str(r[2]), int(r[3]), int(r[4]), int(r[5])) for r in grants]

    def node_usage(self, pools: Sequence[str]) -> list[NodeUsageRow]:
        return self._store._node_usage(pools)

    def set_node_usage(self, pool: str, rows: Sequence[NodeUsageRow], scheduler: str) -> None:
        self._execute("DELETE FROM node_usage WHERE pool = ?", (pool,))
        now = self.now()
        for r in rows:
            self._execute(
                "INSERT INTO node_usage (pool, node, devices, indices, shares, cpu_milli, memory_mib, scheduler, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (pool, r.node, r.devices, json.dumps(list(r.indices)), r.shares, r.cpu_milli, r.memory_mib, scheduler, now),
            )

    def move_holding(self, row: HeldRow, node: str, device: int) -> None:
        self._execute(
            "UPDATE holdings SET node = ?, device = ? WHERE decision_id = ? AND pool = ? AND device = ? "
            "AND (node = ? OR node IS NULL) AND (start = ? OR (start IS NULL AND ? IS NULL))",
            (node, device, row.decision_id, row.pool, row.holding.device, row.node, row.holding.start, row.holding.start),
        )

    def holders(self, pool: str) -> list[str]:
        rows = self._execute(
            "SELECT DISTINCT a.decision_id FROM allocations a WHERE a.pool = ? AND a.released_at IS NULL ORDER BY a.decision_id", (pool,)
        ).fetchall()
        return [str(r[0]) for r in rows]

    def submitted_devices(self, pool: str) -> float:
        row = self._execute(
            "SELECT COALESCE(SUM(a.devices), 0) FROM allocations a JOIN decisions d ON d.id = a.decision_id "
            "WHERE a.pool = ? AND a.released_at IS NULL AND d.job_id IS NOT NULL",
            (pool,),
        ).fetchone()
        return float(row[0])

    def add_pool(self, name: str, spec: str, count: int, version: int) -> None:
        now = self.now()
        self._execute(
            "INSERT INTO pools (name, spec, count, created_at, updated_at, version) VALUES (?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (name) DO UPDATE SET spec = excluded.spec, count = excluded.count, created_at = excluded.created_at, "
            "updated_at = excluded.updated_at, version = excluded.version, held_outside = 0, removed_at = NULL, removing_since = NULL",
            (name, spec, count, now, now, version),
        )

    def update_pool(self, name: str, spec: str, count: int) -> None:
        self._execute("UPDATE pools SET spec = ?, count = ?, updated_at = ? WHERE name = ?", (spec, count, self.now(), name))

    def remove_pool(self, name: str, version: int, *, at: str | None = None) -> None:
        now = at or self.now()
        self._execute(
            "UPDATE pools SET removed_at = ?, removing_since = NULL, updated_at = ?, version = ? WHERE name = ?", (now, now, version, name)
        )

    def set_removing(self, name: str, since: str | None, version: int) -> None:
        self._execute("UPDATE pools SET removing_since = ?, version = ? WHERE name = ?", (since, version, name))

    def set_capacity(self, pool: str, capacity: str, free: float, version: int) -> None:
        self._execute("UPDATE pools SET capacity = ?, free = ?, version = ? WHERE name = ?", (capacity, free, version, pool))
        self._execute("INSERT INTO capacity_log (version, pool, capacity) VALUES (?, ?, ?)", (version, pool, capacity))

    def set_held_outside(self, pool: str, held_outside: float) -> None:
        self._execute("UPDATE pools SET held_outside = ? WHERE name = ?", (held_outside, pool))

    def put_document(self, kind: Document, key: str, document: Callable[[], bytes]) -> None:
        store = self._store
        if key in store._stored or key in store._storing:
            return
        self._execute(
            f"INSERT INTO {kind} ({_KEY_COLUMN[kind]}, document, created_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
            (key, document().decode("utf-8"), self.now()),
        )
        store._storing.add(key)

    def find(self, ident: str) -> DecisionRow:
        return self._store._find(ident)

    def by_id(self, ident: str) -> DecisionRow | None:
        return self._store._by("id", ident)

    def by_request(self, request_id: str) -> DecisionRow | None:
        return self._store._by("request_id", request_id)

    def lease_ended(self, now: str) -> list[DecisionRow]:
        rows = self._execute(
            f"SELECT {_DECISION_COLUMNS} FROM decisions WHERE lease_expires_at IS NOT NULL AND lease_expires_at < ? "
            "AND released_at IS NULL AND job_id IS NULL ORDER BY lease_expires_at, id",
            (now,),
        ).fetchall()
        return [DecisionRow(*r) for r in rows]

    def add_decision(self, row: NewDecision) -> None:
        def flag(value: bool | None) -> int | None:
            return None if value is None else int(value)

        self._execute(
            "INSERT INTO decisions (id, created_at, workload, outcome, pool, accelerator, model, target, region, fallback, "
            "fraction_honored, devices, cost_per_hour, carbon_factor, note, input_digest, policy_revision, opa_version, document, "
            "record_digest, fleet_revision, verdict_set, request_id, lease_expires_at, created_ts, residency, verdicts, fraction, "
            "lease_expires_ts, larger_partition, estimated_start, estimate_source, queued_id, project, priority, replaces) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                row.id, row.created_at, row.workload, row.outcome, row.pool, row.accelerator, row.model, row.target, row.region,
                flag(row.fallback), flag(row.fraction_honored), row.devices, row.cost_per_hour, row.carbon_factor, row.note,
                row.input_digest, row.policy_revision, row.opa_version, row.document, row.record_digest, row.fleet_revision,
                row.verdict_set, row.request_id, row.lease_expires_at, epoch(row.created_at), row.residency, row.verdicts, row.fraction,
                None if row.lease_expires_at is None else epoch(row.lease_expires_at), flag(row.larger_partition),
                row.estimated_start, row.estimate_source, row.queued_id, row.project, row.priority, row.replaces,
            ),
        )  # fmt: skip
        if row.pool is not None and row.devices is not None:
            self._execute(
                "INSERT INTO allocations (decision_id, pool, devices, created_at) VALUES (?, ?, ?, ?)", (row.id, row.pool, row.devices, row.created_at)
            )
            if not row.nodes:
                self.hold(row.id, row.pool, row.holdings, row.share)
            for position, grant in enumerate(row.nodes):
                for h in grant.holdings:
                    self._insert_holding(row.id, row.pool, grant.node, h, row.share, None)
                if grant.share is not None:
                    device, shares, share = grant.share
                    self._insert_holding(row.id, row.pool, grant.node, Holding(device), share, shares)
                self._execute(
                    "INSERT INTO node_grants (decision_id, pool, node, position, cpu_milli, memory_mib) VALUES (?, ?, ?, ?, ?, ?)",
                    (row.id, row.pool, grant.node, position, grant.cpu_milli, grant.memory_mib),
                )
        if row.burst is not None:
            b = row.burst
            self._execute(
                "INSERT INTO burst_events (created_at, decision_id, workload, residency, pool, region, verdict, reason_code, reason) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (row.created_at, row.id, b.workload, b.residency, b.pool, b.region, b.verdict, b.reason_code, b.reason),
            )

    def hold(self, ident: str, pool: str, holdings: Sequence[Holding], share: float) -> None:
        """Holdings on the pool's one node (named like the pool)."""
        for h in holdings:
            self._insert_holding(ident, pool, pool, h, share, None)

    def _insert_holding(self, ident: str, pool: str, node: str, h: Holding, share: float, shares: int | None) -> None:
        self._execute(
            "INSERT INTO holdings (decision_id, pool, node, device, profile, start, units, share, shares) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (ident, pool, node, h.device, h.profile, h.start, h.units, share, shares),
        )

    def release(self, ident: str, at: str) -> str:
        found = self._execute("UPDATE allocations SET released_at = ? WHERE decision_id = ? AND released_at IS NULL RETURNING pool", (at, ident))
        row = found.fetchone()
        if row is None:
            raise SpecError(f"decision {ident[:12]} placed nothing, so there is nothing to release")
        self._execute("UPDATE decisions SET released_at = ?, released_ts = ? WHERE id = ?", (at, epoch(at), ident))
        return str(row[0])

    def renew(self, ident: str, lease_expires_at: str) -> None:
        updated = self._execute(
            "UPDATE decisions SET lease_expires_at = ?, lease_expires_ts = ? WHERE id = ? AND released_at IS NULL AND outcome = 'placed'",
            (lease_expires_at, epoch(lease_expires_at), ident),
        )
        if updated.rowcount == 0:
            raise SpecError(f"decision {ident[:12]} is not a live placement; nothing was renewed")

    def set_job(self, ident: str, job_id: str, scheduler: str, uid: str | None, *, at: str | None = None) -> None:
        # One job per placement: checked and set in one statement, so two concurrent submits cannot
        # both record theirs.
        updated = self._execute(
            "UPDATE decisions SET job_id = ?, scheduler = ?, job_uid = ?, job_state = NULL, submitted_at = ? "
            "WHERE id = ? AND job_id IS NULL AND outcome = 'placed' AND released_at IS NULL",
            (job_id, scheduler, uid, at or self.now(), ident),
        )
        if updated.rowcount == 0:
            raise SpecError(f"decision {ident[:12]} is not a live placement without a job; nothing was recorded")

    def set_job_state(self, ident: str, state: str) -> bool:
        updated = self._execute("UPDATE decisions SET job_state = ? WHERE id = ? AND (job_state IS NULL OR job_state <> ?)", (state, ident, state))
        return bool(updated.rowcount)

    def audit(self, kind: str, body: JSONObject, *, source: str) -> None:
        self._store._append_audit(kind, body, source=source)

    def layout(self) -> str | None:
        row = self._execute("SELECT layout FROM state WHERE id = 1").fetchone()
        return None if row is None else row[0]

    def set_layout(self, digest: str) -> None:
        self._execute("UPDATE state SET layout = ? WHERE id = 1", (digest,))

    def unheld_grants(self, pool: str) -> list[tuple[str, float, str]]:
        rows = self._execute(
            "SELECT a.decision_id, a.devices, d.document FROM allocations a JOIN decisions d ON d.id = a.decision_id "
            "WHERE a.pool = ? AND a.released_at IS NULL AND NOT EXISTS (SELECT 1 FROM holdings h WHERE h.decision_id = a.decision_id) "
            "ORDER BY a.created_at, a.decision_id",
            (pool,),
        ).fetchall()
        return [(str(r[0]), float(r[1]), str(r[2])) for r in rows]


def _held_row(r: Sequence[Any]) -> HeldRow:
    """A holding as read: (decision_id, device, profile, start, units, share, node, shares, pool)."""
    return HeldRow(
        str(r[0]), Holding(int(r[1]), r[2], None if r[3] is None else int(r[3]), None if r[4] is None else int(r[4])), float(r[5]),
        None if r[6] is None else str(r[6]), None if r[7] is None else int(r[7]), str(r[8]),
    )  # fmt: skip


def _pool_row(row: Row) -> PoolRow:
    name, spec, capacity, free, held_outside, version, removed_at, removing_since = row
    return PoolRow(
        str(name), str(spec), None if capacity is None else str(capacity), None if free is None else float(free), float(held_outside), int(version),
        removed_at is not None, None if removing_since is None else str(removing_since),
    )  # fmt: skip


def _ms(value: object) -> float:
    """Epoch seconds to the millisecond (SQLite's julianday keeps no more)."""
    return round(float(value), 3)  # type: ignore[arg-type]


def _used_idle(sums: Sequence[object], charge_idle: bool) -> dict[str, object]:
    """A finops row's figures from ``_placed_sums``' (decisions, held device-hours, cost, carbon,
    used device-hours, cost, carbon): the total cost counts the idle part only when ``charge_idle``."""
    decisions, hours, cost, carbon, used_hours, used_cost, used_carbon = sums
    assert isinstance(hours, float) and isinstance(cost, float) and isinstance(carbon, float)
    assert isinstance(used_hours, float) and isinstance(used_cost, float) and isinstance(used_carbon, float)
    idle_cost = round(max(0.0, cost - used_cost), 6)
    return {
        "decisions": decisions, "device_hours": hours, "cost": round(used_cost + idle_cost, 6) if charge_idle else used_cost, "carbon_g": carbon,
        "used_device_hours": used_hours, "idle_device_hours": round(max(0.0, hours - used_hours), 6), "used_cost": used_cost, "idle_cost": idle_cost,
        "idle_charged": charge_idle,
    }  # fmt: skip


def _period(since: str | None, until: str | None) -> tuple[str, list[object]]:
    """`` AND created_at >= ? AND created_at < ?`` for the bounds given, and their values."""
    where, params = "", list[object]()
    if since is not None:
        where += " AND created_at >= ?"
        params.append(since)
    if until is not None:
        where += " AND created_at < ?"
        params.append(until)
    return where, params



def _audit_row(row: Row) -> audit.AuditRow:
    from examlops_policy import audit

    return audit.row_from_storage(row[0], row[1], row[2], row[3])


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__

