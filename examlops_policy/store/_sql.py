"""The ``Store`` over SQL, shared by the SQLite and PostgreSQL adapters.

``SQLStore`` holds every statement, the record layout, the migration runner and the bounded retry
loop. An adapter supplies the connection and three rules: how a write transaction opens and takes
the write lock (SQLite ``BEGIN IMMEDIATE``; PostgreSQL an advisory transaction lock), which errors
are worth retrying (`Fault`), and how a migration script runs. Statements use ``?`` placeholders;
the PostgreSQL adapter translates them.

Retries re-run the whole transaction, decision included (the decision is a pure function of the
state read under the lock). A connection lost during COMMIT leaves the outcome unknown: the
transaction's ``landed`` probe looks for what it wrote (a placement by its pre-chosen id) before
trying again, so a retry never records a decision twice.
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
from typing import Any, Final, Literal, Protocol, TypeVar

from examlops_policy import audit, codec
from examlops_policy.errors import NotFoundError, SpecError, StateError
from examlops_policy.model import Decision, JSONObject, Placement, Pool, PoolState
from examlops_policy.store import BurstEvent, Decide, DecisionRecord, PoolChange

SOURCE: Final = "exa-hardware"
BACKOFF_S: Final = 0.05
BACKOFF_CAP_S: Final = 2.0

Fault = Literal["conflict", "disconnected"]
"""A retryable failure: ``conflict`` (lock wait timed out, serialization failure, deadlock, unique
violation) or ``disconnected`` (the connection was lost; reconnect first)."""

T = TypeVar("T")
Row = tuple[Any, ...]
_DECISION_COLUMNS: Final = "id, created_at, document, released_at, job_id"
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
    data = {k: v for k, v in pool.__dict__.items() if v is not None and v != ()}
    data["capabilities"] = list(pool.capabilities)
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


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

    def __init__(self, *, clock: Callable[[], str], attempts: int) -> None:
        if attempts < 1:
            raise SpecError(f"attempts must be at least 1, got {attempts}")
        self._clock = clock
        self._attempts = attempts
        self.conflicts_retried = 0
        self.reconnects = 0

    # -- what an adapter provides -----------------------------------------------------------

    @abstractmethod
    def _execute(self, sql: str, params: Sequence[object] = ()) -> Cursor:
        """Run one statement (``?`` placeholders), connecting first if there is no connection."""

    @abstractmethod
    def _begin(self) -> None:
        """Open a write transaction holding the store's write lock (the audit head with it)."""

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

    def _run(self, work: Callable[[], T], *, landed: Callable[[], T | None] | None = None) -> T:
        """``work()`` with bounded retries: in one write transaction when ``landed`` is given,
        else as plain reads.

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
            try:
                if probe is not None:
                    found = probe()
                    if found is not None:
                        return found
                    probe = None
                if write:
                    self._begin()
                result = work()
                if write:
                    committing = True
                    self._commit()
                return result
            except BaseException as exc:
                if write:
                    self._rollback()
                fault = self._fault(exc) if isinstance(exc, Exception) else None
                if fault is None:
                    if isinstance(exc, Exception) and self._is_driver_error(exc):
                        raise StateError(f"{self.where}: {_first_line(exc)}; nothing was written") from exc
                    raise
                problem = f"{_GAVE_UP[fault]} ({_first_line(exc)})"
                if committing and fault == "disconnected":
                    probe = landed
        raise StateError(f"{self.where}: {problem}; gave up after {self._attempts} attempts, nothing was written")

    def _migrate(self) -> None:
        known = migrations(self.dialect)

        def work() -> None:
            self._execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)"
            )
            done = {row[0] for row in self._execute("SELECT version FROM schema_migrations").fetchall()}
            unknown = done - {version for version, _ in known}
            if unknown:
                raise StateError(
                    f"{self.where}: the state has schema version {max(unknown)}, newer than this exa "
                    "knows; upgrade examlops-policy"
                )
            for version, sql in known:
                if version not in done:
                    self._run_script(sql)
                    self._execute("INSERT INTO schema_migrations VALUES (?, ?)", (version, self._clock()))

        # Idempotent: a retry after a lost COMMIT sees what landed and applies only the rest.
        self._run(work, landed=lambda: None)

    def _append_audit(self, kind: str, body: JSONObject, *, source: str) -> None:
        row = self._execute("SELECT seq, prev_hash, entry_hash, entry FROM audit_log ORDER BY seq DESC LIMIT 1").fetchone()
        head = _audit_row(row) if row else None
        entry: JSONObject = {"source": source, "kind": kind, "ts": self._clock(), **body}
        new = audit.next_row(head, entry)
        self._execute(
            "INSERT INTO audit_log (seq, prev_hash, entry_hash, entry, source, kind, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (new.seq, new.prev_hash, new.entry_hash, new.canonical, source, kind, entry["ts"]),
        )

    # -- pools --------------------------------------------------------------------------------

    def apply_pools(self, pools: Sequence[Pool], *, replace: bool, source: str = SOURCE) -> list[PoolChange]:
        specs = {pool.name: pool_json(pool) for pool in pools}
        changes: list[PoolChange] = []

        def work() -> list[PoolChange]:
            changes.clear()
            for pool in pools:
                now = self._clock()
                row = self._execute("SELECT spec FROM pools WHERE name = ?", (pool.name,)).fetchone()
                spec = specs[pool.name]
                if row is None:
                    self._execute(
                        "INSERT INTO pools (name, spec, count, created_at, updated_at) VALUES (?, ?, ?, ?, ?)",
                        (pool.name, spec, pool.count, now, now),
                    )
                    changes.append(PoolChange(pool.name, "added"))
                elif not replace:
                    raise SpecError(f"pool {pool.name!r} already exists (use 'exa hardware apply' to change it)", field="name")
                elif row[0] == spec:
                    changes.append(PoolChange(pool.name, "unchanged"))
                    continue
                else:
                    before, after = json.loads(row[0]), json.loads(spec)
                    held = self._held(pool.name)
                    if pool.count < held - 1e-6:
                        raise SpecError(
                            f"pool {pool.name!r}: count {pool.count} is below the {held:g} device(s) live decisions hold",
                            field="count",
                        )
                    fields = tuple(sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k)))
                    self._execute(
                        "UPDATE pools SET spec = ?, count = ?, updated_at = ? WHERE name = ?", (spec, pool.count, now, pool.name)
                    )
                    changes.append(PoolChange(pool.name, "updated", fields))
                self._append_audit("pool", {"pool": json.loads(spec), "action": changes[-1].action}, source=source)
            return list(changes)

        def landed() -> list[PoolChange] | None:
            stored = {row[0]: row[1] for row in self._execute("SELECT name, spec FROM pools").fetchall()}
            done = len(changes) == len(pools) and all(stored.get(name) == spec for name, spec in specs.items())
            return list(changes) if done else None

        return self._run(work, landed=landed)

    def _held(self, pool: str) -> float:
        row = self._execute(
            "SELECT COALESCE(SUM(devices), 0) FROM allocations WHERE pool = ? AND released_at IS NULL", (pool,)
        ).fetchone()
        return float(row[0])

    def _states(self) -> list[PoolState]:
        rows = self._execute(
            "SELECT p.spec, p.count - p.held_outside - COALESCE(SUM(a.devices), 0) FROM pools p "
            "LEFT JOIN allocations a ON a.pool = p.name AND a.released_at IS NULL "
            "GROUP BY p.name ORDER BY p.name"
        ).fetchall()
        # Never below zero: a scheduler may report more busy devices than a pool's count says.
        return [PoolState(pool_from_json(spec), max(0.0, round(float(free), 9))) for spec, free in rows]

    def pool_states(self) -> list[PoolState]:
        return self._run(self._states)

    # -- decisions ----------------------------------------------------------------------------

    def place(self, decide: Decide, *, source: str = SOURCE) -> DecisionRecord:
        # Chosen once, so a retry after a lost COMMIT can tell whether the first attempt landed.
        ident = uuid.uuid4().hex

        def work() -> DecisionRecord:
            return self._record(ident, decide(self._states()), source=source)

        def landed() -> DecisionRecord | None:
            row = self._execute(f"SELECT {_DECISION_COLUMNS} FROM decisions WHERE id = ?", (ident,)).fetchone()
            return _row_to_record(row) if row else None

        return self._run(work, landed=landed)

    def _record(self, ident: str, decision: Decision, *, source: str) -> DecisionRecord:
        now = self._clock()
        document = codec.to_json(decision)
        outcome = str(document["outcome"])
        prov = decision.provenance
        placed = decision if isinstance(decision, Placement) else None
        self._execute(
            "INSERT INTO decisions (id, created_at, workload, outcome, pool, accelerator, model, target, region, fallback, "
            "fraction_honored, devices, cost_per_hour, carbon_factor, note, input_digest, policy_revision, opa_version, document) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                ident, now, decision.workload.name, outcome,
                placed.pool if placed else None, placed.accelerator if placed else None,
                placed.model if placed else None, placed.target if placed else None,
                placed.region if placed else None,
                int(placed.fallback) if placed else None, int(placed.fraction_honored) if placed else None,
                placed.grant.devices if placed else None, placed.cost_per_hour if placed else None,
                placed.carbon_factor if placed else None,
                placed.note if placed else decision.reason,  # type: ignore[union-attr]
                prov.input_digest, prov.policy_revision, prov.opa_version,
                json.dumps(document, sort_keys=True),
            ),
        )  # fmt: skip
        if placed:
            self._execute(
                "INSERT INTO allocations (decision_id, pool, devices, created_at) VALUES (?, ?, ?, ?)",
                (ident, placed.pool, placed.grant.devices, now),
            )
        summary: JSONObject = {
            "decision_id": ident,
            "workload": decision.workload.name,
            "outcome": outcome,
            "pool": placed.pool if placed else None,
            "accelerator": placed.accelerator if placed else None,
            "region": placed.region if placed else None,
            "devices": placed.grant.devices if placed else None,
            "fallback": placed.fallback if placed else None,
            "fraction_honored": placed.fraction_honored if placed else None,
            "reason": None if placed else decision.reason,  # type: ignore[union-attr]
            "input_digest": prov.input_digest,
            "policy_revision": prov.policy_revision,
            "opa_version": prov.opa_version,
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
        return DecisionRecord(ident, now, decision)

    def decisions(self, limit: int = 20) -> list[DecisionRecord]:
        rows = self._run(
            lambda: self._execute(
                f"SELECT {_DECISION_COLUMNS} FROM decisions ORDER BY created_at DESC, id LIMIT ?", (limit,)
            ).fetchall(),
        )
        return [_row_to_record(r) for r in rows]

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
        return _row_to_record(self._run(lambda: self._find(ident)))

    def release(self, ident: str, *, source: str = SOURCE) -> DecisionRecord:
        def work() -> DecisionRecord:
            row = self._find(ident)
            if row[3] is None:
                now = self._clock()
                found = self._execute(
                    "UPDATE allocations SET released_at = ? WHERE decision_id = ? AND released_at IS NULL", (now, row[0])
                )
                if found.rowcount == 0:
                    raise SpecError(f"decision {row[0][:12]} placed nothing, so there is nothing to release")
                self._execute("UPDATE decisions SET released_at = ? WHERE id = ?", (now, row[0]))
                self._append_audit("release", {"decision_id": row[0]}, source=source)
                row = (row[0], row[1], row[2], now, row[4])
            return _row_to_record(row)

        def landed() -> DecisionRecord | None:
            record = _row_to_record(self._find(ident))
            return record if record.released_at is not None else None

        return self._run(work, landed=landed)

    def set_job(self, ident: str, job_id: str, *, scheduler: str, source: str = SOURCE) -> DecisionRecord:
        def work() -> DecisionRecord:
            row = self._find(ident)
            # One job per placement: checked and set in one statement, so two concurrent submits
            # cannot both record theirs.
            updated = self._execute(
                "UPDATE decisions SET job_id = ? WHERE id = ? AND job_id IS NULL AND outcome = 'placed' AND released_at IS NULL",
                (job_id, row[0]),
            )
            if updated.rowcount == 0:
                raise SpecError(f"decision {row[0][:12]} is not a live placement without a job; nothing was recorded")
            self._append_audit("submit", {"decision_id": row[0], "scheduler": scheduler, "job_id": job_id}, source=source)
            return _row_to_record((row[0], row[1], row[2], row[3], job_id))

        def landed() -> DecisionRecord | None:
            record = _row_to_record(self._find(ident))
            return record if record.job_id == job_id else None

        return self._run(work, landed=landed)

    def record_scheduler_usage(self, usage: Mapping[str, float], *, scheduler: str, source: str = SOURCE) -> dict[str, float]:
        def work() -> dict[str, float]:
            held: dict[str, float] = {}
            for pool, busy in sorted(usage.items()):
                row = self._execute("SELECT held_outside FROM pools WHERE name = ?", (pool,)).fetchone()
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
                    self._execute("UPDATE pools SET held_outside = ? WHERE name = ?", (outside, pool))
                    self._append_audit(
                        "capacity", {"pool": pool, "scheduler": scheduler, "busy": busy, "held_outside": outside}, source=source
                    )
            return held

        return self._run(work)

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
        )
        return [_audit_row(r) for r in rows]


def _audit_row(row: Row) -> audit.AuditRow:
    return audit.AuditRow(seq=int(row[0]), prev_hash=bytes(row[1]), entry_hash=bytes(row[2]), canonical=bytes(row[3]))


def _row_to_record(row: Row) -> DecisionRecord:
    ident, created, document, released, job = row
    decision: Decision = codec.from_json(json.loads(document))
    decision = dataclasses.replace(decision, decision_id=ident)
    return DecisionRecord(ident, created, decision, released, job)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
