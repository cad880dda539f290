"""The store's statements for the queue, quotas and reconcile (migration 0009), shared by the SQLite
and PostgreSQL adapters.

``QueueReads`` are the reads outside a write transaction (the queue, what the projects used, the
jobs to reconcile, the nodes not taking work); ``QueueWrites`` the statements a write transaction
runs (``store.api.Transaction``). As everywhere in the store: rows in, rows out, no decision logic.
A decision recorded without a project counts as the unassigned project, which the caller names.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Final, Protocol, TypeVar, cast

from examlops_policy.errors import NotFoundError, SpecError
from examlops_policy.model import JSONObject
from examlops_policy.store.api import GrantRow, NewQueued, QueueRow, QueueState

T = TypeVar("T")
_QUEUE_COLUMNS: Final = (
    "id, state, queued_at, queued_ts, workload, spec, project, priority, accelerator, devices, lease_s, submission, "
    "admitted_by, ended_at, preempted_from, message, attempts, version, waits_for"
)
_GRANT_COLUMNS: Final = (
    "d.id, d.created_at, d.created_ts, d.released_ts, d.workload, d.project, d.priority, d.pool, d.accelerator, d.devices, "
    "d.job_id, d.scheduler, d.job_uid, d.job_state, d.job_started_at, d.node_down_at, d.preempting_for, d.queued_id, d.replaces"
)
_LIVE: Final = "d.outcome = 'placed' AND d.released_at IS NULL"


class _Cursor(Protocol):
    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


def _epoch(ts: str) -> float:
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


def _queue_row(r: Sequence[Any]) -> QueueRow:
    return QueueRow(
        str(r[0]), str(r[1]), str(r[2]), float(r[3]), str(r[4]), str(r[5]), r[6], r[7], str(r[8]), float(r[9]),
        None if r[10] is None else float(r[10]), r[11], r[12], r[13], r[14], r[15], int(r[16]), int(r[17]), r[18],
    )  # fmt: skip


def _grant_row(r: Sequence[Any]) -> GrantRow:
    return GrantRow(
        str(r[0]), str(r[1]), float(r[2]), None if r[3] is None else float(r[3]), str(r[4]), r[5], r[6], str(r[7]), str(r[8]),
        float(r[9]), r[10], r[11], r[12], r[13], r[14], r[15], r[16], r[17], r[18],
    )  # fmt: skip


def _projects(projects: Sequence[str], unassigned: str) -> tuple[str, list[object]]:
    """``(project IN (...) OR project IS NULL)`` for the projects named (NULL is ``unassigned``)."""
    named = sorted(set(projects))
    clause = f"d.project IN ({', '.join('?' for _ in named)})" if named else "1 = 0"
    if unassigned in named:
        clause = f"({clause} OR d.project IS NULL)"
    return clause, list(named)


def _held_hours_sql() -> str:
    """Device-hours a placement held between two instants (the parameters: now, since, now)."""
    end = "(CASE WHEN d.released_ts IS NULL OR d.released_ts > ? THEN ? ELSE d.released_ts END)"
    start = "(CASE WHEN d.created_ts < ? THEN ? ELSE d.created_ts END)"
    return f"d.devices * ({end} - {start}) / 3600.0"


class QueueReads:
    """Reads outside a write transaction (mixed into ``SQLStore``)."""

    _execute: Callable[..., _Cursor]
    dialect: str

    def _run(self, work: Callable[[], T], *, landed: Callable[[], T | None] | None = None, consistent: bool = False) -> T:
        raise NotImplementedError  # SQLStore's

    _clock: Callable[[], str]

    def now(self) -> str:
        """The store's clock (what a write is recorded at), ISO 8601 UTC."""
        return self._clock()

    def queue_waiting(self) -> bool:
        """Whether any workload waits (one indexed read)."""
        return self._run(lambda: self._execute("SELECT 1 FROM queue WHERE state = 'queued' LIMIT 1").fetchone()) is not None

    def next_lease_end(self) -> str | None:
        """When the first lease of a live placement not yet submitted ends (None: none has a
        lease); what ``Transaction.lease_ended`` releases once it has passed (the lease index)."""
        row = self._run(
            lambda: self._execute(
                "SELECT lease_expires_at FROM decisions WHERE lease_expires_at IS NOT NULL AND released_at IS NULL AND job_id IS NULL "
                "ORDER BY lease_expires_at LIMIT 1"
            ).fetchone()
        )
        return None if row is None else str(row[0])

    def queue_rows(self, states: Sequence[str] = ("queued",), *, limit: int | None = None) -> list[QueueRow]:
        """Rows in ``states``, oldest first (then by id)."""
        marks = ", ".join("?" for _ in states)
        sql = f"SELECT {_QUEUE_COLUMNS} FROM queue WHERE state IN ({marks}) ORDER BY queued_ts, id" + (" LIMIT ?" if limit else "")
        params: list[object] = [*states, *([limit] if limit else [])]
        return [_queue_row(r) for r in self._run(lambda: self._execute(sql, params).fetchall(), consistent=True)]

    def queue_find(self, ident: str) -> QueueRow:
        """A queued record by id or unique id prefix; NotFoundError otherwise."""
        if not ident or not all(c in "0123456789abcdef" for c in ident):
            raise NotFoundError(f"no queued workload {ident!r} (ids are hexadecimal)")
        rows = self._run(lambda: self._execute(f"SELECT {_QUEUE_COLUMNS} FROM queue WHERE id LIKE ? LIMIT 2", (ident + "%",)).fetchall())
        if not rows:
            raise NotFoundError(f"no queued workload {ident!r}")
        if len(rows) > 1:
            raise SpecError(f"id prefix {ident!r} is ambiguous: more than one queued workload begins so; give more characters", field="ID")
        return _queue_row(rows[0])

    def queue_of(self, placement_id: str) -> QueueRow | None:
        """The queued record a placement was admitted for, if any."""
        row = self._run(lambda: self._execute(f"SELECT {_QUEUE_COLUMNS} FROM queue WHERE admitted_by = ?", (placement_id,)).fetchone())
        return None if row is None else _queue_row(row)

    def usage_rows(self, since_ts: float, now_ts: float, unassigned: str) -> list[tuple[str, float, float, float, str, str]]:
        """Every placement that held devices between ``since_ts`` and ``now_ts``: (project, devices,
        start, end, pool, accelerator), the end clipped to ``now_ts`` (the live ones, and those
        released since)."""
        project = "COALESCE(d.project, ?)"
        columns = f"{project}, d.devices, d.created_ts, d.released_ts, d.pool, d.accelerator"
        sql = (
            f"SELECT {columns} FROM decisions d WHERE {_LIVE} "
            f"UNION ALL SELECT {columns} FROM decisions d "
            "WHERE d.outcome = 'placed' AND d.released_ts IS NOT NULL AND d.released_ts > ?"
        )
        rows = self._run(lambda: self._execute(sql, (unassigned, unassigned, since_ts)).fetchall(), consistent=True)
        out = []
        for p, devices, start, end, pool, accelerator in rows:
            stop = now_ts if end is None or float(end) > now_ts else float(end)
            if devices and float(start) < now_ts and stop > since_ts:
                out.append((str(p), float(devices), float(start), stop, str(pool), str(accelerator)))
        return out

    def quota_held(self, pairs: Sequence[tuple[str, str]], unassigned: str) -> dict[tuple[str, str], float]:
        return self._run(lambda: _quota_held(self._execute, pairs, unassigned), consistent=True)

    def device_hours(self, project: str, accelerator: str, since_ts: float, now_ts: float, unassigned: str) -> float:
        return self._run(lambda: _device_hours(self._execute, project, accelerator, since_ts, now_ts, unassigned))

    def live_grants(self, *, pools: Sequence[str] | None = None, with_jobs: bool = False) -> list[GrantRow]:
        """Live placements (on ``pools``; only those with a job), oldest first."""
        where, params = [_LIVE], list[object]()
        if pools is not None:
            if not pools:
                return []
            where.append(f"d.pool IN ({', '.join('?' for _ in pools)})")
            params += list(pools)
        if with_jobs:
            where.append("d.job_id IS NOT NULL")
        sql = f"SELECT {_GRANT_COLUMNS} FROM decisions d WHERE {' AND '.join(where)} ORDER BY d.created_ts, d.id"
        return [_grant_row(r) for r in self._run(lambda: self._execute(sql, params).fetchall(), consistent=True)]

    def grant(self, ident: str) -> GrantRow | None:
        row = self._run(lambda: self._execute(f"SELECT {_GRANT_COLUMNS} FROM decisions d WHERE d.id = ?", (ident,)).fetchone())
        return None if row is None else _grant_row(row)

    def preempted_for(self, queued_id: str) -> list[GrantRow]:
        """The grants a preemption marked for queued record ``queued_id`` (its victims), oldest first."""
        sql = f"SELECT {_GRANT_COLUMNS} FROM decisions d WHERE d.preempting_for = ? ORDER BY d.created_ts, d.id"
        return [_grant_row(r) for r in self._run(lambda: self._execute(sql, (queued_id,)).fetchall())]

    def preempted(self) -> list[GrantRow]:
        """Grants marked for a preemption: live ones (the preemption unfinished), and released ones
        neither placed nor queued again (their requeue unfinished)."""
        sql = (
            f"SELECT {_GRANT_COLUMNS} FROM decisions d WHERE d.preempting_for IS NOT NULL AND (d.released_at IS NULL "
            "OR NOT (EXISTS (SELECT 1 FROM queue q WHERE q.preempted_from = d.id) OR EXISTS (SELECT 1 FROM decisions r WHERE r.replaces = d.id))) "
            "ORDER BY d.created_ts, d.id"
        )
        return [_grant_row(r) for r in self._run(lambda: self._execute(sql).fetchall(), consistent=True)]

    def grant_ends(self, pool: str) -> list[tuple[float, float | None, bool, float, str]]:
        """The live grants on a pool, for when they end: (devices, lease end in epoch seconds or
        None, whether submitted to a scheduler, when it started (its job's start, else its
        placement), its record)."""
        rows = self._run(
            lambda: self._execute(
                f"SELECT d.devices, d.lease_expires_ts, d.job_id, d.job_started_at, d.created_ts, d.document FROM decisions d "
                f"WHERE {_LIVE} AND d.pool = ?",
                (pool,),
            ).fetchall(),
            consistent=True,
        )
        return [
            (float(r[0] or 0.0), None if r[1] is None else float(r[1]), r[2] is not None, _epoch(r[3]) if r[3] else float(r[4]), str(r[5]))
            for r in rows
        ]

    def queued_entry(self, ident: str) -> JSONObject | None:
        """The ``queued`` audit entry of a queued record (None: the log has none): the first entry
        of that kind whose canonical bytes name it (then read as JSON and checked)."""
        names = f'"decision_id":"{ident}"'.encode("utf-8")
        contains = "instr(entry, ?) > 0" if self.dialect == "sqlite" else "position(? in entry) > 0"  # the bytes hold it
        rows = self._run(
            lambda: self._execute(f"SELECT entry FROM audit_log WHERE kind = 'queued' AND {contains} ORDER BY seq", (names,)).fetchall()
        )
        for (raw,) in rows:
            try:
                entry = json.loads(bytes(raw))
            except (ValueError, TypeError):
                continue
            if isinstance(entry, dict) and entry.get("kind") == "queued" and entry.get("decision_id") == ident:
                return cast(JSONObject, entry)
        return None


def _quota_held(execute: Callable[..., _Cursor], pairs: Sequence[tuple[str, str]], unassigned: str) -> dict[tuple[str, str], float]:
    if not pairs:
        return {}
    clause, params = _projects([p for p, _ in pairs], unassigned)
    classes = sorted({c for _, c in pairs})
    rows = execute(
        f"SELECT COALESCE(d.project, ?), d.accelerator, SUM(d.devices) FROM decisions d WHERE {_LIVE} AND {clause} "
        f"AND d.accelerator IN ({', '.join('?' for _ in classes)}) GROUP BY 1, 2",
        (unassigned, *params, *classes),
    ).fetchall()
    wanted = set(pairs)
    return {(str(p), str(c)): round(float(n), 9) for p, c, n in rows if (str(p), str(c)) in wanted and n}


def _device_hours(execute: Callable[..., _Cursor], project: str, accelerator: str, since_ts: float, now_ts: float, unassigned: str) -> float:
    clause, params = _projects([project], unassigned)
    row = execute(
        f"SELECT COALESCE(SUM({_held_hours_sql()}), 0) FROM decisions d WHERE d.outcome = 'placed' AND {clause} AND d.accelerator = ? "
        "AND d.created_ts < ? AND (d.released_ts IS NULL OR d.released_ts > ?)",
        (now_ts, now_ts, since_ts, since_ts, *params, accelerator, now_ts, since_ts),
    ).fetchone()
    return max(0.0, round(float(row[0] or 0.0), 9))


class QueueWrites:
    """The statements a write transaction runs (mixed into the store's transaction)."""

    _execute: Callable[..., _Cursor]

    def add_queued(self, row: NewQueued) -> None:
        self._execute(
            "INSERT INTO queue (id, state, queued_at, queued_ts, workload, spec, project, priority, accelerator, devices, lease_s, "
            "submission, preempted_from, waits_for) VALUES (?, 'queued', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                row.id, row.queued_at, _epoch(row.queued_at), row.workload, row.spec, row.project, row.priority, row.accelerator,
                row.devices, row.lease_s, row.submission, row.preempted_from, row.waits_for,
            ),
        )  # fmt: skip

    def queue_row(self, ident: str) -> QueueRow | None:
        row = self._execute(f"SELECT {_QUEUE_COLUMNS} FROM queue WHERE id = ?", (ident,)).fetchone()
        return None if row is None else _queue_row(row)

    def claim(self, queued_id: str, now: str) -> bool:
        done = self._execute(
            "UPDATE queue SET state = 'admitted', ended_at = ?, version = version + 1 WHERE id = ? AND state = 'queued'", (now, queued_id)
        )
        return done.rowcount == 1

    def link_admitted(self, queued_id: str, placement_id: str) -> None:
        self._execute("UPDATE queue SET admitted_by = ? WHERE id = ? AND state = 'admitted' AND admitted_by IS NULL", (placement_id, queued_id))

    def end_queued(self, ident: str, state: QueueState, now: str, *, message: str | None = None, was: tuple[str, ...] = ("queued",)) -> bool:
        done = self._execute(
            f"UPDATE queue SET state = ?, ended_at = ?, message = COALESCE(?, message), version = version + 1 "
            f"WHERE id = ? AND state IN ({', '.join('?' for _ in was)})",
            (state, now, message, ident, *was),
        )
        return done.rowcount == 1

    def note_attempt(self, ident: str, message: str | None) -> int:
        row = self._execute(
            "UPDATE queue SET attempts = attempts + 1, message = ?, version = version + 1 WHERE id = ? RETURNING attempts", (message, ident)
        ).fetchone()
        return 0 if row is None else int(row[0])

    def quota_held(self, pairs: Sequence[tuple[str, str]], unassigned: str) -> dict[tuple[str, str], float]:
        return _quota_held(self._execute, pairs, unassigned)

    def device_hours(self, project: str, accelerator: str, since_ts: float, now_ts: float, unassigned: str) -> float:
        return _device_hours(self._execute, project, accelerator, since_ts, now_ts, unassigned)

    def job_ended(self, ident: str, state: str, started_at: str | None, ended_at: str | None) -> None:
        self._execute(
            "UPDATE decisions SET job_state = ?, job_started_at = COALESCE(job_started_at, ?), job_ended_at = ? WHERE id = ?",
            (state, started_at, ended_at, ident),
        )

    def job_started(self, ident: str, at: str) -> bool:
        return self._execute("UPDATE decisions SET job_started_at = ? WHERE id = ? AND job_started_at IS NULL", (at, ident)).rowcount == 1

    def flag_node_down(self, ident: str, at: str | None) -> bool:
        if at is None:
            return self._execute("UPDATE decisions SET node_down_at = NULL WHERE id = ? AND node_down_at IS NOT NULL", (ident,)).rowcount == 1
        return self._execute("UPDATE decisions SET node_down_at = ? WHERE id = ? AND node_down_at IS NULL", (at, ident)).rowcount == 1

    def set_preempting(self, ident: str, queued_id: str | None) -> bool:
        if queued_id is None:
            done = self._execute("UPDATE decisions SET preempting_for = NULL WHERE id = ? AND preempting_for IS NOT NULL", (ident,))
        else:
            done = self._execute(
                "UPDATE decisions SET preempting_for = ? WHERE id = ? AND outcome = 'placed' AND released_at IS NULL "
                "AND (preempting_for IS NULL OR preempting_for <> ?)",
                (queued_id, ident, queued_id),
            )
        return done.rowcount == 1

    def grant_row(self, ident: str) -> GrantRow | None:
        row = self._execute(f"SELECT {_GRANT_COLUMNS} FROM decisions d WHERE d.id = ?", (ident,)).fetchone()
        return None if row is None else _grant_row(row)

    def replaced(self, victim: str) -> str | None:
        # A requeue made before decisions named the grant they replace has only its queue row.
        row = self._execute(
            "SELECT id FROM decisions WHERE replaces = ? UNION ALL SELECT id FROM queue WHERE preempted_from = ? LIMIT 1", (victim, victim)
        ).fetchone()
        return None if row is None else str(row[0])
