"""The embedded SQLite store (the default): one file in ``$EXA_HOME``.

Crash safety and concurrency follow the audit-log design notes: WAL, ``synchronous=FULL``,
``busy_timeout``, and ``BEGIN IMMEDIATE`` around every read-then-write so the decision, the
reservation and the audit entries commit together or not at all.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Final

from examlops_policy import audit, codec
from examlops_policy.errors import NotFoundError, SpecError, StateError
from examlops_policy.model import Decision, JSONObject, Placement, Pool, PoolState
from examlops_policy.store import BurstEvent, Decide, DecisionRecord, PoolChange

BUSY_TIMEOUT_MS: Final = 10_000
LOCK_RETRIES: Final = 5
SOURCE: Final = "exa-hardware"


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def pool_json(pool: Pool) -> str:
    data = {k: v for k, v in pool.__dict__.items() if v is not None and v != ()}
    data["capabilities"] = list(pool.capabilities)
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def pool_from_json(text: str) -> Pool:
    data = json.loads(text)
    data["capabilities"] = tuple(data.get("capabilities", ()))
    return Pool(**data)


def _migrations() -> list[tuple[int, str]]:
    folder = resources.files("examlops_policy.store") / "migrations" / "sqlite"
    found = []
    for item in folder.iterdir():
        if item.name.endswith(".sql"):
            found.append((int(item.name.split("_", 1)[0]), item.read_text(encoding="utf-8")))
    return sorted(found)


class SQLiteStore:
    """State in one SQLite file; safe for many processes at once."""

    def __init__(self, path: Path, *, clock: Callable[[], str] = utc_now) -> None:
        self.path = path
        self._clock = clock
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(path, isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000)
            self._db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute("PRAGMA foreign_keys=ON")
        except sqlite3.DatabaseError as exc:
            raise StateError(f"{path}: cannot open the state database: {exc}") from exc
        self._migrate()

    # -- plumbing -----------------------------------------------------------------------------

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE (the write lock), with bounded retries; COMMIT or ROLLBACK."""
        for attempt in range(LOCK_RETRIES):
            try:
                self._db.execute("BEGIN IMMEDIATE")
                break
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise StateError(f"{self.path}: {exc}") from exc
                time.sleep(0.05 * (attempt + 1))
        else:
            raise StateError(f"{self.path}: the state database stayed locked; nothing was written")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        else:
            try:
                self._db.execute("COMMIT")
            except sqlite3.DatabaseError as exc:
                self._db.execute("ROLLBACK")
                raise StateError(f"{self.path}: commit failed, nothing was written: {exc}") from exc

    def _migrate(self) -> None:
        with self._write() as db:
            db.execute("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)")
            done = {row[0] for row in db.execute("SELECT version FROM schema_migrations")}
            for version, sql in _migrations():
                if version in done:
                    continue
                for statement in _statements(sql):
                    db.execute(statement)
                db.execute("INSERT INTO schema_migrations VALUES (?, ?)", (version, self._clock()))

    def _append_audit(self, db: sqlite3.Connection, kind: str, body: JSONObject, *, source: str) -> None:
        row = db.execute("SELECT seq, prev_hash, entry_hash, entry FROM audit_log ORDER BY seq DESC LIMIT 1").fetchone()
        head = audit.AuditRow(seq=row[0], prev_hash=row[1], entry_hash=row[2], canonical=row[3]) if row else None
        entry: JSONObject = {"source": source, "kind": kind, "ts": self._clock(), **body}
        new = audit.next_row(head, entry)
        db.execute(
            "INSERT INTO audit_log (seq, prev_hash, entry_hash, entry, source, kind, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (new.seq, new.prev_hash, new.entry_hash, new.canonical, source, kind, entry["ts"]),
        )

    # -- pools --------------------------------------------------------------------------------

    def apply_pools(self, pools: Sequence[Pool], *, replace: bool, source: str = SOURCE) -> list[PoolChange]:
        changes: list[PoolChange] = []
        with self._write() as db:
            for pool in pools:
                now = self._clock()
                row = db.execute("SELECT spec FROM pools WHERE name = ?", (pool.name,)).fetchone()
                spec = pool_json(pool)
                if row is None:
                    db.execute("INSERT INTO pools VALUES (?, ?, ?, ?, ?)", (pool.name, spec, pool.count, now, now))
                    changes.append(PoolChange(pool.name, "added"))
                elif not replace:
                    raise SpecError(f"pool {pool.name!r} already exists (use 'exa hardware apply' to change it)", field="name")
                elif row[0] == spec:
                    changes.append(PoolChange(pool.name, "unchanged"))
                    continue
                else:
                    before, after = json.loads(row[0]), json.loads(spec)
                    held = self._held(db, pool.name)
                    if pool.count < held - 1e-6:
                        raise SpecError(
                            f"pool {pool.name!r}: count {pool.count} is below the {held:g} device(s) live decisions hold",
                            field="count",
                        )
                    fields = tuple(sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k)))
                    db.execute("UPDATE pools SET spec = ?, count = ?, updated_at = ? WHERE name = ?", (spec, pool.count, now, pool.name))
                    changes.append(PoolChange(pool.name, "updated", fields))
                self._append_audit(db, "pool", {"pool": json.loads(spec), "action": changes[-1].action}, source=source)
        return changes

    def _held(self, db: sqlite3.Connection, pool: str) -> float:
        row = db.execute("SELECT COALESCE(SUM(devices), 0) FROM allocations WHERE pool = ? AND released_at IS NULL", (pool,)).fetchone()
        return float(row[0])

    def _states(self, db: sqlite3.Connection) -> list[PoolState]:
        rows = db.execute(
            "SELECT p.spec, p.count - COALESCE(SUM(a.devices), 0) FROM pools p "
            "LEFT JOIN allocations a ON a.pool = p.name AND a.released_at IS NULL "
            "GROUP BY p.name ORDER BY p.name"
        ).fetchall()
        return [PoolState(pool_from_json(spec), round(float(free), 9)) for spec, free in rows]

    def pool_states(self) -> list[PoolState]:
        return self._states(self._db)

    # -- decisions ----------------------------------------------------------------------------

    def place(self, decide: Decide, *, source: str = SOURCE) -> DecisionRecord:
        with self._write() as db:
            states = self._states(db)
            decision = decide(states)
            record = self._record(db, decision, source=source)
        return record

    def _record(self, db: sqlite3.Connection, decision: Decision, *, source: str) -> DecisionRecord:
        ident = uuid.uuid4().hex
        now = self._clock()
        document = codec.to_json(decision)
        outcome = str(document["outcome"])
        prov = decision.provenance
        placed = decision if isinstance(decision, Placement) else None
        db.execute(
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
            db.execute(
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
            db.execute(
                "INSERT INTO burst_events (created_at, decision_id, workload, residency, pool, region, verdict, reason_code, reason) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (now, ident, decision.workload.name, decision.workload.residency, pool, region, burst.verdict,
                 reason.code if reason else None, reason.message if reason else None),
            )  # fmt: skip
            self._append_audit(
                db,
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
        self._append_audit(db, "decision", summary, source=source)
        return DecisionRecord(ident, now, decision)

    def _row_to_record(self, row: tuple[str, str, str, str | None, str | None]) -> DecisionRecord:
        ident, created, document, released, job = row
        decision: Decision = codec.from_json(json.loads(document))
        decision = _with_id(decision, ident)
        return DecisionRecord(ident, created, decision, released, job)

    def decisions(self, limit: int = 20) -> list[DecisionRecord]:
        rows = self._db.execute(
            "SELECT id, created_at, document, released_at, job_id FROM decisions ORDER BY created_at DESC, id LIMIT ?", (limit,)
        ).fetchall()
        return [self._row_to_record(r) for r in rows]

    def _find(self, db: sqlite3.Connection, ident: str) -> tuple[str, str, str, str | None, str | None]:
        if not ident or not all(c in "0123456789abcdef" for c in ident):
            raise NotFoundError(f"no decision {ident!r} (ids are hexadecimal)")
        rows = db.execute(
            "SELECT id, created_at, document, released_at, job_id FROM decisions WHERE id LIKE ? LIMIT 2", (ident + "%",)
        ).fetchall()
        if not rows:
            raise NotFoundError(f"no decision {ident!r}")
        if len(rows) > 1:
            raise NotFoundError(f"decision id prefix {ident!r} is ambiguous; give more characters")
        return rows[0]  # type: ignore[no-any-return]

    def get_decision(self, ident: str) -> DecisionRecord:
        return self._row_to_record(self._find(self._db, ident))

    def release(self, ident: str, *, source: str = SOURCE) -> DecisionRecord:
        with self._write() as db:
            row = self._find(db, ident)
            if row[3] is None:
                now = self._clock()
                found = db.execute("UPDATE allocations SET released_at = ? WHERE decision_id = ? AND released_at IS NULL", (now, row[0]))
                if found.rowcount == 0:
                    raise SpecError(f"decision {row[0][:12]} placed nothing, so there is nothing to release")
                db.execute("UPDATE decisions SET released_at = ? WHERE id = ?", (now, row[0]))
                self._append_audit(db, "release", {"decision_id": row[0]}, source=source)
                row = (row[0], row[1], row[2], now, row[4])
        return self._row_to_record(row)

    def set_job(self, ident: str, job_id: str, *, scheduler: str, source: str = SOURCE) -> DecisionRecord:
        with self._write() as db:
            row = self._find(db, ident)
            db.execute("UPDATE decisions SET job_id = ? WHERE id = ?", (job_id, row[0]))
            self._append_audit(db, "submit", {"decision_id": row[0], "scheduler": scheduler, "job_id": job_id}, source=source)
            row = (row[0], row[1], row[2], row[3], job_id)
        return self._row_to_record(row)

    def burst_events(self, limit: int = 50) -> list[BurstEvent]:
        rows = self._db.execute(
            "SELECT id, created_at, decision_id, workload, residency, pool, region, verdict, reason_code, reason "
            "FROM burst_events ORDER BY id DESC LIMIT ?",
            (limit,),
        ).fetchall()
        return [BurstEvent(*r) for r in rows]

    def audit_rows(self) -> list[audit.AuditRow]:
        rows = self._db.execute("SELECT seq, prev_hash, entry_hash, entry FROM audit_log ORDER BY seq").fetchall()
        return [audit.AuditRow(seq=r[0], prev_hash=bytes(r[1]), entry_hash=bytes(r[2]), canonical=bytes(r[3])) for r in rows]

    def close(self) -> None:
        self._db.close()


def _with_id(decision: Decision, ident: str) -> Decision:
    return dataclasses.replace(decision, decision_id=ident)


def _statements(sql: str) -> list[str]:
    """Split a migration into statements; trigger bodies (BEGIN ... END;) stay whole."""
    statements, current = [], ""
    for line in sql.splitlines():
        if line.strip().startswith("--") or not line.strip():
            continue
        current += line + "\n"
        if sqlite3.complete_statement(current):
            statements.append(current.strip())
            current = ""
    return statements
