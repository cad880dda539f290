"""The ``Store`` over SQL, shared by the SQLite and PostgreSQL adapters.

``SQLStore`` holds every statement, the record layout, the migration runner and the bounded retry
loop. An adapter supplies the connection and three rules: how a write transaction opens and takes
the write lock (SQLite ``BEGIN IMMEDIATE``; PostgreSQL an advisory transaction lock), which errors
are worth retrying (`Fault`), and how a migration script runs. Statements use ``?`` placeholders;
the PostgreSQL adapter translates them.

A placement is decided OUTSIDE the write lock, on a snapshot of the state (its version): the
policy's verdicts come first (OPA may be slow or hung; nothing waits on it under the lock), then
the lock is taken and the selection is committed if the state the decision depended on is
unchanged, or redone over the fresh capacities (pure Python, no OPA) when only capacity changed.
A changed fleet (pools added or edited) sends the caller back for verdicts, a bounded number of
times.

Retries re-run the whole transaction, selection included. A connection lost during COMMIT leaves
the outcome unknown: the transaction's ``landed`` probe looks for what it wrote (a placement by its
pre-chosen id) before trying again, so a retry never records a decision twice.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import random
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from importlib import resources
from typing import Any, Final, Literal, Protocol, TypeVar, cast

from examlops_policy import audit, _codec as codec, _packing as packing, _records as records
from examlops_policy._engine import Prepared, capacity_from_json, capacity_json, fleet_document, fleet_revision
from examlops_policy.views import (
    BurstEvent,
    DecisionRecord,
    DecisionSummary,
    FinopsRow,
    PoolChange,
    WorkloadCost,
)
from examlops_policy.errors import NotFoundError, SpecError, StateBusy, StateCorrupt, StateError, StateFull, StateUnreachable
from examlops_policy.model import Capacity, Decision, Holding, JSONObject, Placement, Pool, PoolState, pool_spec
from examlops_policy._placement import Judged
from examlops_policy.store import DecisionInputs, Release, Snapshot, StaleFleet
from examlops_policy.tables import Tables, load_tables
from examlops_policy._verdicts import canonical

SOURCE: Final = "exa-hardware"
BACKOFF_S: Final = 0.05
BACKOFF_CAP_S: Final = 2.0

Fault = Literal["conflict", "disconnected"]
"""A retryable failure: ``conflict`` (lock wait timed out, serialization failure, deadlock, unique
violation) or ``disconnected`` (the connection was lost; reconnect first)."""

T = TypeVar("T")
Row = tuple[Any, ...]
_DECISION_COLUMNS: Final = "id, created_at, document, released_at, job_id, request_id, lease_expires_at, scheduler, job_uid, job_state"
# A pool's accelerator, model, target, region or partitioning decides what its live grants are:
# none of them may change while decisions hold its devices.
FROZEN_WHILE_HELD: Final = ("accelerator", "model", "target", "region", "supports_fractions", "fixed_profile")
_GAVE_UP: Final[dict[Fault, str]] = {
    "conflict": "the state database stayed locked or kept conflicting",
    "disconnected": "the state database could not be reached",
}


class Cursor(Protocol):
    """What the shared code reads from a DB-API cursor (sqlite3 and psycopg both have it)."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def pool_json(pool: Pool) -> str:
    return json.dumps(pool_spec(pool), sort_keys=True, separators=(",", ":"))


def epoch(ts: str) -> float:
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


@functools.lru_cache(maxsize=65536)
def pool_from_json(text: str) -> Pool:
    """The Pool a stored spec describes (cached: every placement reads every pool; Pool is frozen)."""
    data = json.loads(text)
    data["capabilities"] = tuple(data.get("capabilities", ()))
    return Pool(**data)


def migrations(dialect: str) -> list[tuple[int, str]]:
    """``(version, script)`` from ``migrations/<dialect>/NNNN_name.sql``, in version order."""
    folder = resources.files("examlops_policy.store") / "migrations" / dialect
    found = []
    for item in folder.iterdir():
        if item.name.endswith(".sql"):
            found.append((int(item.name.split("_", 1)[0]), item.read_text(encoding="utf-8")))
    return sorted(found)


class SQLStore(ABC):
    """Every ``Store`` method, over the connection an adapter provides.

    ``conflicts_retried`` and ``reconnects`` count, for this object's lifetime, the transactions
    re-run after a conflict and after a lost connection.
    """

    dialect: str  # the migrations folder
    where: str  # names the database in messages (never with a password)

    def __init__(self, *, clock: Callable[[], str], attempts: int, tables: Tables | None = None) -> None:
        if attempts < 1:
            raise SpecError(f"attempts must be at least 1, got {attempts}")
        self._clock = clock
        self._attempts = attempts
        self.tables = tables or load_tables()
        self.conflicts_retried = 0
        self.reconnects = 0
        self._snapshot: Snapshot | None = None
        self._stored: set[str] = set()  # fleet and verdict-set keys known to be committed
        self._storing: set[str] = set()  # ... written by the open transaction (committed with it, or forgotten)
        self._documents: dict[str, JSONObject] = {}  # stored fleet and verdict-set documents read back
        self._judged: dict[tuple[str, str], Judged] = {}
        self._layouts: dict[str, packing.PoolLayout] = {}

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

    def _append_audit(self, kind: str, body: JSONObject, *, source: str) -> None:
        row = self._execute("SELECT seq, prev_hash, entry_hash, entry FROM audit_log ORDER BY seq DESC LIMIT 1").fetchone()
        head = _audit_row(row) if row else None
        entry: JSONObject = {"source": source, "kind": kind, "ts": self._clock(), **body}
        new = audit.next_row(head, entry)
        self._execute(
            "INSERT INTO audit_log (seq, prev_hash, entry_hash, entry, source, kind, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (new.seq, new.prev_hash, new.entry_hash, new.canonical, source, kind, entry["ts"]),
        )

    # -- devices and capacity -------------------------------------------------------------------

    def _layout(self, pool: Pool) -> packing.PoolLayout:
        key = pool_json(pool)
        layout = self._layouts.get(key)
        if layout is None:
            layout = self._layouts[key] = packing.layout_of(pool, self.tables)
        return layout

    def _live_holdings(self, pool: str) -> list[Holding]:
        rows = self._execute(
            "SELECT h.device, h.profile, h.start, h.units FROM holdings h JOIN allocations a ON a.decision_id = h.decision_id "
            "WHERE h.pool = ? AND a.released_at IS NULL",
            (pool,),
        ).fetchall()
        return [Holding(int(r[0]), r[1], None if r[2] is None else int(r[2]), None if r[3] is None else int(r[3])) for r in rows]

    def _bump(self, *, fleet: bool = False) -> int:
        """The next state version (and fleet version): every write that changes what pools hold."""
        sql = "UPDATE state SET version = version + 1" + (", fleet_version = fleet_version + 1" if fleet else "") + " WHERE id = 1 RETURNING version"
        return int(self._execute(sql).fetchone()[0])

    def _refresh_pool(self, pool: Pool, held_outside: float, version: int) -> None:
        """Work out what ``pool`` can still place from the devices it holds, and store it."""
        layout = self._layout(pool)
        capacity = packing.summarize(layout, self._live_holdings(pool.name), held_outside)
        # A pool of fixed slices counts slices: each holding is one of its units, whatever share
        # of a device the slice is.
        used = "COUNT(*)" if layout.kind == "fixed" else "COALESCE(SUM(h.share), 0)"
        held = self._execute(
            f"SELECT {used} FROM holdings h JOIN allocations a ON a.decision_id = h.decision_id WHERE h.pool = ? AND a.released_at IS NULL",
            (pool.name,),
        ).fetchone()[0]
        free = max(0.0, round(pool.count - held_outside - float(held), 9))
        self._execute(
            "UPDATE pools SET capacity = ?, free = ?, version = ? WHERE name = ?",
            (json.dumps(capacity_json(capacity)), free, version, pool.name),
        )

    def _ensure_layout(self) -> None:
        """Summaries made with other partitioning tables (or none yet, after an upgrade) are made
        again; a live grant from before per-device capacity gets its devices first."""
        digest = _layout_digest(self.tables)
        row = self._run(lambda: self._execute("SELECT layout FROM state WHERE id = 1").fetchone())
        if row is not None and row[0] == digest:
            return

        def work() -> None:
            if self._execute("SELECT layout FROM state WHERE id = 1").fetchone()[0] == digest:
                return
            version = self._bump()
            for name, spec, outside in self._execute("SELECT name, spec, held_outside FROM pools ORDER BY name").fetchall():
                pool = pool_from_json(spec)
                self._backfill_holdings(pool, float(outside))
                self._refresh_pool(pool, float(outside), version)
            self._execute("UPDATE state SET layout = ? WHERE id = 1", (digest,))

        self._run(work, landed=lambda: None)

    def _backfill_holdings(self, pool: Pool, held_outside: float) -> None:
        """Devices for live grants recorded before capacity was tracked per device."""
        rows = self._execute(
            "SELECT a.decision_id, a.devices, d.document FROM allocations a JOIN decisions d ON d.id = a.decision_id "
            "WHERE a.pool = ? AND a.released_at IS NULL AND NOT EXISTS (SELECT 1 FROM holdings h WHERE h.decision_id = a.decision_id) "
            "ORDER BY a.created_at, a.decision_id",
            (pool.name,),
        ).fetchall()
        layout = self._layout(pool)
        for ident, devices, document in rows:
            grant = json.loads(document).get("grant") or {}
            profile = grant.get("profile") if grant.get("honored") and float(devices) < 1 else None
            units = 1 if profile is not None else max(1, round(float(devices)))
            chosen = packing.choose(layout, self._live_holdings(pool.name), profile, units, held_outside)
            if chosen is None:  # more was held than fits: keep the devices counted, on the lowest ones
                chosen = tuple(Holding(i) for i in range(min(units, pool.count)))
            self._insert_holdings(ident, pool.name, chosen, float(devices) / len(chosen))

    def _insert_holdings(self, ident: str, pool: str, holdings: Sequence[Holding], share: float) -> None:
        for h in holdings:
            self._execute(
                "INSERT INTO holdings (decision_id, pool, device, profile, start, units, share) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (ident, pool, h.device, h.profile, h.start, h.units, share),
            )

    # -- pools --------------------------------------------------------------------------------

    def apply_pools(self, pools: Sequence[Pool], *, replace: bool, source: str = SOURCE) -> list[PoolChange]:
        specs = {pool.name: pool_json(pool) for pool in pools}
        changes: list[PoolChange] = []

        def work() -> list[PoolChange]:
            changes.clear()
            self._expire_leases(source)
            version: int | None = None
            for pool in pools:
                now = self._clock()
                row = self._execute("SELECT spec, held_outside FROM pools WHERE name = ?", (pool.name,)).fetchone()
                spec = specs[pool.name]
                if row is not None and not replace:
                    raise SpecError(f"pool {pool.name!r} already exists (use 'exa hardware apply' to change it)", field="name")
                if row is not None and row[0] == spec:
                    changes.append(PoolChange(pool.name, "unchanged"))
                    continue
                if version is None:
                    version = self._bump(fleet=True)
                if row is None:
                    self._execute(
                        "INSERT INTO pools (name, spec, count, created_at, updated_at, version) VALUES (?, ?, ?, ?, ?, ?)",
                        (pool.name, spec, pool.count, now, now, version),
                    )
                    self._refresh_pool(pool, 0.0, version)
                    changes.append(PoolChange(pool.name, "added"))
                else:
                    before, after = json.loads(row[0]), json.loads(spec)
                    fields = tuple(sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k)))
                    self._check_change(pool, fields)
                    self._execute("UPDATE pools SET spec = ?, count = ?, updated_at = ? WHERE name = ?", (spec, pool.count, now, pool.name))
                    self._refresh_pool(pool, float(row[1]), version)
                    changes.append(PoolChange(pool.name, "updated", fields))
                self._append_audit("pool", {"pool": json.loads(spec), "action": changes[-1].action}, source=source)
            return list(changes)

        def landed() -> list[PoolChange] | None:
            stored = {row[0]: row[1] for row in self._execute("SELECT name, spec FROM pools").fetchall()}
            done = len(changes) == len(pools) and all(stored.get(name) == spec for name, spec in specs.items())
            return list(changes) if done else None

        return self._run(work, landed=landed)

    def _check_change(self, pool: Pool, fields: Sequence[str]) -> None:
        """Refuse a change that would move live grants: what they hold must stay what it was."""
        holders = [r[0] for r in self._execute(
            "SELECT DISTINCT a.decision_id FROM allocations a WHERE a.pool = ? AND a.released_at IS NULL ORDER BY a.decision_id", (pool.name,)
        ).fetchall()]  # fmt: skip
        if not holders:
            return
        named = ", ".join(h[:12] for h in holders[:5]) + (f" and {len(holders) - 5} more" if len(holders) > 5 else "")
        moved = [f for f in fields if f in FROZEN_WHILE_HELD]
        if moved:
            raise SpecError(
                f"pool {pool.name!r}: cannot change {', '.join(moved)} while decisions hold its devices ({named}); "
                "release them first (prices, carbon factor, capabilities and a larger count may change)",
                field=moved[0],
            )
        beyond = [h for h in self._live_holdings(pool.name) if h.device >= pool.count]
        if beyond:
            devices = sorted({h.device for h in beyond})
            raise SpecError(
                f"pool {pool.name!r}: count {pool.count} would drop device(s) {', '.join(map(str, devices[:8]))} that "
                f"live decisions hold ({named}); release them first",
                field="count",
            )

    def _states(self, since: int = -1) -> list[PoolState]:
        rows = self._execute(
            "SELECT spec, free, capacity, held_outside FROM pools WHERE version > ? ORDER BY name", (since,)
        ).fetchall()
        return [_state(*row) for row in rows]

    def snapshot(self) -> Snapshot:
        """The pools with what they can place, and the state version they were read at.

        Kept between calls: an unchanged version reads nothing more, a changed one only the pools
        that changed since.
        """

        def work() -> Snapshot:
            version, fleet = (int(v) for v in self._execute("SELECT version, fleet_version FROM state WHERE id = 1").fetchone())
            cached = self._snapshot
            if cached is not None and cached.version == version:
                return cached
            return self._merge(cached, version, fleet, self._states(-1 if cached is None else cached.version))

        snap = self._run(work, consistent=True)
        self._snapshot = snap
        return snap

    def _merge(self, cached: Snapshot | None, version: int, fleet: int, changed: Sequence[PoolState]) -> Snapshot:
        states = {s.pool.name: s for s in (cached.states if cached is not None else ())}
        states.update((s.pool.name, s) for s in changed)
        return Snapshot(version, fleet, tuple(states[n] for n in sorted(states)))

    def pool_states(self) -> list[PoolState]:
        return list(self.snapshot().states)

    def pool_detail(self, name: str) -> tuple[PoolState, list[Holding]]:
        """One pool and the devices (and slices) its live grants hold."""

        def work() -> tuple[PoolState, list[Holding]]:
            row = self._execute("SELECT spec, free, capacity, held_outside FROM pools WHERE name = ?", (name,)).fetchone()
            if row is None:
                raise NotFoundError(f"no pool {name!r}")
            return _state(*row), self._live_holdings(name)

        return self._run(work, consistent=True)

    # -- decisions ----------------------------------------------------------------------------

    def find_request(self, request_id: str) -> DecisionRecord | None:
        """The decision an earlier call with this idempotency key recorded, if any."""
        row = self._run(lambda: self._execute(f"SELECT {_DECISION_COLUMNS} FROM decisions WHERE request_id = ?", (request_id,)).fetchone())
        return None if row is None else self._row_to_record(tuple(row))

    def commit(
        self,
        prepared: Prepared,
        snapshot: Snapshot,
        *,
        source: str = SOURCE,
        request_id: str | None = None,
        lease_expires_at: str | None = None,
    ) -> DecisionRecord:
        """Record a decision made on ``snapshot``: under the write lock, the selection is redone
        over the capacity the pools have now (pure, no OPA), the devices chosen, and decision,
        reservation, burst event and audit entries written in one transaction.

        Raises StaleFleet when pools were added or changed since the snapshot (the caller asks the
        policy again), never waiting on anything but the database under the lock.
        """
        ident = uuid.uuid4().hex  # chosen once: a retry after a lost COMMIT can tell whether it landed
        after: list[Snapshot] = []

        def work() -> DecisionRecord:
            after.clear()
            self._expire_leases(source)
            if request_id is not None:
                found = self._execute(f"SELECT {_DECISION_COLUMNS} FROM decisions WHERE request_id = ?", (request_id,)).fetchone()
                if found is not None:
                    return self._row_to_record(tuple(found))
            version, fleet = (int(v) for v in self._execute("SELECT version, fleet_version FROM state WHERE id = 1").fetchone())
            if fleet != snapshot.fleet_version:
                raise StaleFleet("pools were added or changed while the policy was asked; asking again")
            snap = snapshot if version == snapshot.version else self._merge(snapshot, version, fleet, self._states(snapshot.version))
            capacities = [s.capacity for s in snap.states]
            decision = prepared.decide(capacities, self.tables)
            holdings: tuple[Holding, ...] = ()
            if isinstance(decision, Placement):
                state = snap.states[prepared.judged.fleet.index[decision.pool]]
                live = self._live_holdings(decision.pool)
                chosen = packing.choose(self._layout(state.pool), live, decision.grant.profile, decision.grant.units, state.held_outside)
                if chosen is None:
                    raise StateError(
                        f"pool {decision.pool!r}: its capacity summary says the grant fits but no device has room; "
                        "nothing was written (run exa hardware pool to see its devices)"
                    )
                holdings = chosen
                decision = dataclasses.replace(decision, holdings=holdings)
            record = self._record(ident, decision, prepared, snap, capacities, source, request_id, lease_expires_at)
            if isinstance(decision, Placement):
                version = self._bump()
                state = snap.states[prepared.judged.fleet.index[decision.pool]]
                self._refresh_pool(state.pool, state.held_outside, version)
                after.append(self._merge(snap, version, fleet, self._states(version - 1)))
            else:
                after.append(snap)
            return record

        def landed() -> DecisionRecord | None:
            row = self._execute(f"SELECT {_DECISION_COLUMNS} FROM decisions WHERE id = ?", (ident,)).fetchone()
            return self._row_to_record(tuple(row)) if row else None

        record = self._run(work, landed=landed)
        if after:
            self._snapshot = after[-1]
        return record

    def _store_document(self, table: str, key: str, document: Callable[[], bytes]) -> None:
        """Store a content-addressed document once; ``document`` is only built when it is not
        known to be stored already (a key is known once the transaction that wrote it committed)."""
        if key in self._stored or key in self._storing:
            return
        column = "revision" if table == "fleets" else "key"
        self._execute(
            f"INSERT INTO {table} ({column}, document, created_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
            (key, document().decode("utf-8"), self._clock()),
        )
        self._storing.add(key)

    def _record(
        self,
        ident: str,
        decision: Decision,
        prepared: Prepared,
        snap: Snapshot,
        capacities: Sequence[Capacity],
        source: str,
        request_id: str | None,
        lease_expires_at: str | None,
    ) -> DecisionRecord:
        now = self._clock()
        fleet_rev = prepared.judged.fleet.revision
        self._store_document("fleets", fleet_rev, lambda: canonical(fleet_document([s.pool for s in snap.states], self.tables)))
        self._store_document("verdict_sets", prepared.verdict_set_key, lambda: prepared.verdict_set_bytes)
        holdings = decision.holdings if isinstance(decision, Placement) else ()
        document = records.encode(decision, verdict_set=prepared.verdict_set_key, capacities=capacities, holdings=holdings)
        record_digest = records.digest(document)
        outcome = records.outcome_of(decision)
        prov = decision.provenance
        placed = decision if isinstance(decision, Placement) else None
        self._execute(
            "INSERT INTO decisions (id, created_at, workload, outcome, pool, accelerator, model, target, region, fallback, "
            "fraction_honored, devices, cost_per_hour, carbon_factor, note, input_digest, policy_revision, opa_version, document, "
            "record_digest, fleet_revision, verdict_set, request_id, lease_expires_at, created_ts, residency, verdicts, fraction) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                ident, now, decision.workload.name, outcome,
                placed.pool if placed else None, placed.accelerator if placed else None,
                placed.model if placed else None, placed.target if placed else None,
                placed.region if placed else None,
                int(placed.fallback) if placed else None, int(placed.fraction_honored) if placed else None,
                placed.grant.devices if placed else None, placed.cost_per_hour if placed else None,
                placed.carbon_factor if placed else None,
                placed.note if placed else decision.reason,  # type: ignore[union-attr]
                prov.input_digest, prov.policy_revision, prov.opa_version, document.decode("utf-8"),
                record_digest, fleet_rev, prepared.verdict_set_key, request_id,
                lease_expires_at if placed else None, epoch(now), decision.workload.residency, prov.verdicts,
                decision.workload.fraction,
            ),
        )  # fmt: skip
        if placed:
            self._execute(
                "INSERT INTO allocations (decision_id, pool, devices, created_at) VALUES (?, ?, ?, ?)",
                (ident, placed.pool, placed.grant.devices, now),
            )
            self._insert_holdings(ident, placed.pool, placed.holdings, placed.grant.share)
        summary: JSONObject = {
            "decision_id": ident,
            "workload": decision.workload.name,
            "outcome": outcome,
            "pool": placed.pool if placed else None,
            "accelerator": placed.accelerator if placed else None,
            "region": placed.region if placed else None,
            "devices": placed.grant.devices if placed else None,
            "holdings": [[h.device, h.profile, h.start] for h in placed.holdings] if placed else None,
            "fallback": placed.fallback if placed else None,
            "fraction_honored": placed.fraction_honored if placed else None,
            "reason": None if placed else decision.reason,  # type: ignore[union-attr]
            "input_digest": prov.input_digest,
            "policy_revision": prov.policy_revision,
            "opa_version": prov.opa_version,
            "verdicts": prov.verdicts,
            "record_digest": record_digest,
            "request_id": request_id,
            # The row's own times, so that exa audit verify can hold the tables to them.
            "created_at": now,
            "lease_expires_at": lease_expires_at if placed else None,
        }
        burst = decision.burst
        if burst.attempted:
            pool = placed.pool if placed and burst.verdict == "allowed" else burst.pool
            region = placed.region if placed and burst.verdict == "allowed" else burst.region
            reason = burst.reason
            self._execute(
                "INSERT INTO burst_events (created_at, decision_id, workload, residency, pool, region, verdict, reason_code, reason) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (now, ident, decision.workload.name, decision.workload.residency, pool, region, burst.verdict,
                 reason.code if reason else None, reason.message if reason else None),
            )  # fmt: skip
            self._append_audit(
                "burst",
                {
                    "decision_id": ident,
                    "workload": decision.workload.name,
                    "residency": decision.workload.residency,
                    "pool": pool,
                    "region": region,
                    "verdict": burst.verdict,
                    "reason": reason.message if reason else None,
                },
                source=source,
            )
        self._append_audit("decision", summary, source=source)
        return DecisionRecord(ident, now, dataclasses.replace(decision, decision_id=ident), None, None, request_id, lease_expires_at if placed else None)

    def _reread(self, ident: str) -> DecisionRecord:
        row = self._execute(f"SELECT {_DECISION_COLUMNS} FROM decisions WHERE id = ?", (ident,)).fetchone()
        return self._row_to_record(tuple(row))

    def decisions(self, limit: int = 20) -> list[DecisionRecord]:
        rows = self._run(
            lambda: self._execute(
                f"SELECT {_DECISION_COLUMNS} FROM decisions ORDER BY created_at DESC, id LIMIT ?", (limit,)
            ).fetchall(),
            consistent=True,
        )
        return [self._row_to_record(tuple(r)) for r in rows]

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
            "scheduler, job_state "
            f"FROM decisions WHERE {' AND '.join(where)} ORDER BY created_at DESC, id LIMIT ?"
        )
        rows = self._run(lambda: self._execute(sql, (*params, limit)).fetchall())
        return [
            DecisionSummary(
                id=r[0], created_at=r[1], workload=r[2], outcome=r[3], pool=r[4], accelerator=r[5], model=r[6], region=r[7],
                fallback=None if r[8] is None else bool(r[8]), fraction_honored=None if r[9] is None else bool(r[9]),
                devices=r[10], cost_per_hour=r[11], carbon_factor=r[12], note=r[13], released_at=r[14], job_id=r[15],
                residency=r[16], policy_revision=r[17], verdicts=r[18], lease_expires_at=r[19], scheduler=r[20], job_state=r[21],
            )  # fmt: skip
            for r in rows
        ]

    def _find(self, ident: str) -> Row:
        if not ident or not all(c in "0123456789abcdef" for c in ident):
            raise NotFoundError(f"no decision {ident!r} (ids are hexadecimal)")
        rows = self._execute(f"SELECT {_DECISION_COLUMNS} FROM decisions WHERE id LIKE ? LIMIT 2", (ident + "%",)).fetchall()
        if not rows:
            raise NotFoundError(f"no decision {ident!r}")
        if len(rows) > 1:
            raise NotFoundError(f"decision id prefix {ident!r} is ambiguous; give more characters")
        return tuple(rows[0])

    def get_decision(self, ident: str) -> DecisionRecord:
        return self._row_to_record(self._run(lambda: self._find(ident), consistent=True))

    def decision_inputs(self, ident: str) -> DecisionInputs:
        def work() -> DecisionInputs:
            row = self._find(ident)
            doc = records.document_of(row[2])
            if not records.is_compact(doc):
                raise SpecError(f"decision {row[0][:12]} was recorded before decisions kept their inputs; it cannot be replayed", field="ID")
            return DecisionInputs(
                self._document("fleets", str(doc["fleet"])),
                self._document("verdict_sets", str(doc["verdicts"])),
                tuple(records.capacities_of(doc["capacity"])),
            )

        return self._run(work, consistent=True)

    def _release(self, row: Row, *, source: str, kind: str) -> Row:
        """Free what a live placement holds; the row as it is after."""
        now = self._clock()
        found = self._execute("UPDATE allocations SET released_at = ? WHERE decision_id = ? AND released_at IS NULL", (now, row[0]))
        if found.rowcount == 0:
            raise SpecError(f"decision {row[0][:12]} placed nothing, so there is nothing to release")
        self._execute("UPDATE decisions SET released_at = ?, released_ts = ? WHERE id = ?", (now, epoch(now), row[0]))
        pool_row = self._execute(
            "SELECT p.spec, p.held_outside FROM pools p JOIN allocations a ON a.pool = p.name WHERE a.decision_id = ?", (row[0],)
        ).fetchone()
        self._refresh_pool(pool_from_json(pool_row[0]), float(pool_row[1]), self._bump())
        self._append_audit(kind, {"decision_id": row[0], "released_at": now}, source=source)
        return (row[0], row[1], row[2], now, *row[4:])

    def release(self, ident: str, *, source: str = SOURCE) -> Release:
        def work() -> Release:
            self._expire_leases(source)
            row = self._find(ident)
            if row[3] is not None:
                return Release(self._row_to_record(row), already=True)
            return Release(self._row_to_record(self._release(row, source=source, kind="release")), already=False)

        def landed() -> Release | None:
            record = self._row_to_record(self._find(ident))
            return Release(record, already=False) if record.released_at is not None else None

        result = self._run(work, landed=landed)
        return result

    def _expire_leases(self, source: str) -> list[str]:
        """Release placements whose lease ended and that were neither submitted nor renewed."""
        now = self._clock()
        rows = self._execute(
            f"SELECT {_DECISION_COLUMNS} FROM decisions WHERE lease_expires_at IS NOT NULL AND lease_expires_at < ? "
            "AND released_at IS NULL AND job_id IS NULL ORDER BY lease_expires_at, id",
            (now,),
        ).fetchall()
        for row in rows:
            self._release(tuple(row), source=source, kind="expired")
        return [r[0] for r in rows]

    def renew(self, ident: str, lease_expires_at: str, *, source: str = SOURCE) -> DecisionRecord:
        """Move a live placement's lease end to ``lease_expires_at`` (audited)."""

        def work() -> DecisionRecord:
            self._expire_leases(source)
            row = self._find(ident)
            updated = self._execute(
                "UPDATE decisions SET lease_expires_at = ? WHERE id = ? AND released_at IS NULL AND outcome = 'placed'",
                (lease_expires_at, row[0]),
            )
            if updated.rowcount == 0:
                raise SpecError(f"decision {row[0][:12]} is not a live placement; nothing was renewed")
            self._append_audit("renew", {"decision_id": row[0], "lease_expires_at": lease_expires_at}, source=source)
            return self._row_to_record(self._find(ident))

        return self._run(work, landed=lambda: None)

    def set_job(
        self, ident: str, job_id: str, *, scheduler: str, uid: str | None = None, source: str = SOURCE
    ) -> DecisionRecord:
        def work() -> DecisionRecord:
            self._expire_leases(source)
            row = self._find(ident)
            # One job per placement: checked and set in one statement, so two concurrent submits
            # cannot both record theirs.
            updated = self._execute(
                "UPDATE decisions SET job_id = ?, scheduler = ?, job_uid = ?, job_state = NULL "
                "WHERE id = ? AND job_id IS NULL AND outcome = 'placed' AND released_at IS NULL",
                (job_id, scheduler, uid, row[0]),
            )
            if updated.rowcount == 0:
                raise SpecError(f"decision {row[0][:12]} is not a live placement without a job; nothing was recorded")
            entry: JSONObject = {"decision_id": row[0], "scheduler": scheduler, "job_id": job_id}
            if uid is not None:
                entry["job_uid"] = uid
            self._append_audit("submit", entry, source=source)
            return self._reread(row[0])

        def landed() -> DecisionRecord | None:
            record = self._row_to_record(self._find(ident))
            return record if record.job_id == job_id else None

        return self._run(work, landed=landed)

    def mark_job(self, ident: str, state: str, *, source: str = SOURCE) -> DecisionRecord:
        """Record what a scheduler says of a decision's job when it changed (e.g. ``missing``: the
        job was deleted outside this layer), with an audit entry; nothing when it is unchanged."""

        def work() -> DecisionRecord:
            row = self._find(ident)
            if row[4] is None:
                raise SpecError(f"decision {row[0][:12]} has no job", field="ID")
            updated = self._execute(
                "UPDATE decisions SET job_state = ? WHERE id = ? AND (job_state IS NULL OR job_state <> ?)", (state, row[0], state)
            )
            if updated.rowcount:
                self._append_audit("job", {"decision_id": row[0], "job_id": row[4], "scheduler": row[7], "state": state}, source=source)
            return self._reread(row[0])

        return self._run(work, landed=lambda: None)

    def record_scheduler_usage(self, usage: Mapping[str, float], *, scheduler: str, source: str = SOURCE) -> dict[str, float]:
        def work() -> dict[str, float]:
            held: dict[str, float] = {}
            version: int | None = None
            for pool, busy in sorted(usage.items()):
                row = self._execute("SELECT held_outside, spec FROM pools WHERE name = ?", (pool,)).fetchone()
                if row is None:
                    raise NotFoundError(f"no pool {pool!r}")
                # Our own submitted, live placements are part of what the scheduler reports busy.
                ours = self._execute(
                    "SELECT COALESCE(SUM(a.devices), 0) FROM allocations a JOIN decisions d ON d.id = a.decision_id "
                    "WHERE a.pool = ? AND a.released_at IS NULL AND d.job_id IS NOT NULL",
                    (pool,),
                ).fetchone()
                outside = round(max(0.0, busy - float(ours[0])), 9)
                held[pool] = outside
                if abs(float(row[0]) - outside) > 1e-9:
                    if version is None:
                        version = self._bump()
                    self._execute("UPDATE pools SET held_outside = ? WHERE name = ?", (outside, pool))
                    self._refresh_pool(pool_from_json(row[1]), outside, version)
                    self._append_audit(
                        "capacity", {"pool": pool, "scheduler": scheduler, "busy": busy, "held_outside": outside}, source=source
                    )
            return held

        return self._run(work)

    def finops(self, *, hours: float | None = None, since: str | None = None, until: str | None = None, now: str | None = None) -> list[FinopsRow]:
        """Cost and carbon of placements by device type and region, summed in SQL.

        Hours are ``hours`` per placement when given, else the time it held its devices (until its
        release, or ``now``).
        """
        rows = self._placed_sums(("accelerator", "region"), "accelerator, region", hours=hours, since=since, until=until, now=now)
        return [FinopsRow(str(r[0]), str(r[1]), *r[2:]) for r in rows]  # type: ignore[arg-type]

    def _placed_sums(
        self, keys: tuple[str, ...], order: str, *, hours: float | None, since: str | None, until: str | None, now: str | None
    ) -> list[tuple[object, ...]]:
        """Per ``keys`` of the placed decisions: the keys, then decisions, device-hours, cost and
        carbon (rounded to 6 places), summed in SQL over the hours each counts."""
        where, params = _period(since, until)
        span, span_params = self._span(hours, now)
        columns = ", ".join(keys)
        sql = (
            f"SELECT {columns}, COUNT(*), SUM(devices * h), SUM(cost_per_hour * devices * h), SUM(carbon_factor * devices * h) "
            f"FROM (SELECT {columns}, devices, cost_per_hour, carbon_factor, {span} AS h FROM decisions "
            f"WHERE outcome = 'placed'{where}) placed GROUP BY {columns} ORDER BY {order}"
        )
        rows = self._run(lambda: self._execute(sql, (*span_params, *params)).fetchall())
        n = len(keys)
        return [(*r[:n], int(r[n]), *(round(float(v), 6) for v in r[n + 1 :])) for r in rows]

    def _span(self, hours: float | None, now: str | None) -> tuple[str, list[object]]:
        """The SQL for the hours a placement counts (``hours``, else held until release or now)."""
        if hours is not None:
            return "?", [hours]
        end = epoch(now or self._clock())
        return "(CASE WHEN COALESCE(released_ts, ?) > created_ts THEN COALESCE(released_ts, ?) - created_ts ELSE 0 END) / 3600.0", [end, end]

    def cost_by_workload(self, *, hours: float | None = None, since: str | None = None, until: str | None = None, now: str | None = None) -> list[WorkloadCost]:
        """Cost and carbon of placements per workload name, summed in SQL, most expensive first."""
        rows = self._placed_sums(("workload",), "4 DESC, workload", hours=hours, since=since, until=until, now=now)
        return [WorkloadCost(str(r[0]), *r[1:]) for r in rows]  # type: ignore[arg-type]

    def report_rows(self, *, hours: float | None = None, since: str | None = None, until: str | None = None, now: str | None = None) -> tuple[list[JSONObject], list[JSONObject]]:
        """Decision and burst rows (columns only) for the FinOps report over a period."""
        where, params = _period(since, until)
        span, span_params = self._span(hours, now)
        sql = (
            "SELECT workload, created_at, outcome, accelerator, region, devices * h, cost_per_hour * devices * h, "
            f"carbon_factor * devices * h, fallback, fraction, fraction_honored FROM (SELECT *, {span} AS h FROM decisions "
            f"WHERE 1 = 1{where}) d ORDER BY created_at"
        )

        def work() -> tuple[list[JSONObject], list[JSONObject]]:
            decisions: list[JSONObject] = []
            for r in self._execute(sql, (*span_params, *params)).fetchall():
                row: JSONObject = {"workload": r[0], "created_at": r[1], "outcome": r[2]}
                if r[2] == "placed":
                    row.update(device=r[3], region=r[4], device_hours=float(r[5] or 0), cost=float(r[6] or 0), carbon_g=float(r[7] or 0),
                               fallback=bool(r[8]), fraction=float(r[9]) if r[9] is not None else 1.0, fraction_honored=bool(r[10]))  # fmt: skip
                decisions.append(row)
            burst_where = where.replace("created_at", "b.created_at")
            bursts = [
                {"residency": r[0], "verdict": r[1]}
                for r in self._execute(f"SELECT b.residency, b.verdict FROM burst_events b WHERE 1 = 1{burst_where}", params).fetchall()
            ]
            return decisions, bursts

        return self._run(work, consistent=True)

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

    def records_for_audit(self) -> list[tuple[str, str, str | None, Row]]:
        """(id, document, record_digest, columns) of every decision, for ``audit verify``."""
        rows = self._run(
            lambda: self._execute(
                "SELECT id, document, record_digest, outcome, pool, cost_per_hour, carbon_factor FROM decisions ORDER BY id"
            ).fetchall(),
            consistent=True,
        )
        return [(r[0], r[1], r[2], tuple(r[3:])) for r in rows]

    def stored_documents(self) -> list[tuple[str, str]]:
        """(key, document) of every stored fleet and verdict set, for ``audit verify``."""
        rows = self._run(
            lambda: self._execute("SELECT revision, document FROM fleets UNION ALL SELECT key, document FROM verdict_sets").fetchall(),
            consistent=True,
        )
        return [(r[0], r[1]) for r in rows]

    def _document(self, table: str, key: str) -> JSONObject:
        doc = self._documents.get(key)
        if doc is None:
            column = "revision" if table == "fleets" else "key"
            row = self._execute(f"SELECT document FROM {table} WHERE {column} = ?", (key,)).fetchone()
            if row is None:
                raise StateError(f"{self.where}: the stored {table[:-1].replace('_', ' ')} {key} is missing; a decision cannot be rebuilt")
            doc = records.document_of(row[0])
            if len(self._documents) > 64:
                self._documents.clear()
            self._documents[key] = doc
        return doc

    def _row_to_record(self, row: Row) -> DecisionRecord:
        ident, created, raw, released, job, request_id, lease, scheduler, job_uid, job_state = row
        document = records.document_of(raw)
        if records.is_compact(document):
            decision = records.rebuild(
                ident,
                document,
                self.tables,
                lambda key: self._document("fleets", key),
                lambda key: self._document("verdict_sets", key),
                self._judged,
            )
        else:
            decision = dataclasses.replace(codec.from_json(document), decision_id=ident)
        return DecisionRecord(ident, created, decision, released, job, request_id, lease, scheduler, job_uid, job_state)


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


def _state(spec: str, free: float | None, capacity: str | None, held_outside: float) -> PoolState:
    cap = capacity_from_json(json.loads(capacity)) if capacity is not None else Capacity(0)
    return PoolState(pool_from_json(spec), float(free if free is not None else 0.0), cap, float(held_outside))


def _layout_digest(tables: Tables) -> str:
    return records.digest(canonical({"partitioning": tables.partitioning, "geometry": tables.geometry}))


def _audit_row(row: Row) -> audit.AuditRow:
    return audit.row_from_storage(row[0], row[1], row[2], row[3])


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
