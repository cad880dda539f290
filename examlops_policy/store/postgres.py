"""PostgreSQL state, for placers on many hosts at once: ``EXA_DB_URL=postgresql://...``.

The schema and every statement are the SQLite store's (``migrations/postgres`` mirrors
``migrations/sqlite``; the SQL lives in ``examlops_policy.store._sql``). Concurrency follows the
audit-log design notes: READ COMMITTED, and each write transaction's first statement is
``pg_advisory_xact_lock`` on this schema's key, so writers (placements, releases, pool changes)
run one at a time. The capacity check and the audit head are read under that one lock: pools are
never oversubscribed and the chain never forks; UNIQUE(seq) and UNIQUE(prev_hash) are the
backstop. Serialization failures (40001), deadlocks (40P01), unique violations (23505) and lock
timeouts (55P03) are retried, bounded; so is a lost connection (a restarted server): reconnect,
then run the transaction again.

Every lock wait is bounded: the session's ``lock_timeout`` (``lock_timeout_s``, 10 s) ends a wait
for the advisory write lock, a table or a row, and the transaction is tried at most ``attempts``
times (8), so a session that holds exa's lock (any role may take advisory locks) stalls a writer
for at most about attempts x lock_timeout plus the backoff (about 85 s by default), never forever;
the StateBusy it then raises names the sessions holding the lock. (The app role of
docs/postgres-least-privilege.sql cannot LOCK a state table in a mode that stops writers.)
``idle_in_transaction_session_timeout`` ends a session left idle inside a transaction after 60 s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final

import psycopg
from psycopg import errors, pq
from psycopg.conninfo import conninfo_to_dict

from examlops_policy.errors import SpecError, StateCorrupt, StateError, StateFull, StateUnreachable
from examlops_policy.store._sql import STREAM_BATCH, Cursor, Fault, SQLStore, utc_now

LOCK_TIMEOUT_S: Final = 10.0
ATTEMPTS: Final = 8
CONNECT_TIMEOUT_S: Final = 5
# A client that stops mid-transaction (hung, or its host gone) would hold the write lock; the
# server ends such a session after this long (ms).
IDLE_IN_TRANSACTION_MS: Final = 60_000
# pg_advisory_xact_lock(key1, key2): key1 marks examlops' locks, key2 is the schema's hash.
_LOCK_CLASS: Final = 0x45584131  # "EXA1"
_CONFLICTS: Final = (errors.SerializationFailure, errors.DeadlockDetected, errors.UniqueViolation, errors.LockNotAvailable)
# Server gone or going: admin_shutdown, crash_shutdown, cannot_connect_now; class 08 is connection.
_GONE: Final = frozenset({"57P01", "57P02", "57P03"})
# Connection failures that waiting will not cure (libpq gives no SQLSTATE for these).
_PERMANENT: Final = ("authentication failed", "does not exist", "pg_hba.conf", "permission denied", "invalid")


def redacted(url: str) -> str:
    """``postgresql://user@host:port/db``: the URL without its password, for messages."""
    try:
        info = conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        raise SpecError(f"EXA_DB_URL is not a valid PostgreSQL URL: {exc}") from exc
    user = f"{info['user']}@" if info.get("user") else ""
    port = f":{info['port']}" if info.get("port") else ""
    return f"postgresql://{user}{info.get('host', '')}{port}/{info.get('dbname', '')}"


class PostgresStore(SQLStore):
    """State in a PostgreSQL database (the schema the URL's search_path names first).

    A write waits up to ``lock_timeout_s`` for the write lock, ``attempts`` times with backoff,
    then raises StateError with nothing written; a lost connection is retried the same way.
    """

    dialect = "postgres"
    epoch_sql = "CAST(EXTRACT(EPOCH FROM CAST({col} AS timestamptz)) AS DOUBLE PRECISION)"

    def __init__(
        self,
        url: str,
        *,
        clock: Callable[[], str] = utc_now,
        lock_timeout_s: float = LOCK_TIMEOUT_S,
        attempts: int = ATTEMPTS,
    ) -> None:
        super().__init__(clock=clock, attempts=attempts)
        self.where = redacted(url)
        self._url = url
        self._lock_timeout_ms = max(1, int(lock_timeout_s * 1000))
        self._conn: psycopg.Connection[tuple[Any, ...]] | None = None
        self._queries: dict[str, str] = {}
        self._streams = 0  # server cursors opened, each named after its number
        self._last_error: Exception | None = None
        self._migrate()

    def _connection(self) -> psycopg.Connection[tuple[Any, ...]]:
        if self._conn is None or self._conn.closed or self._conn.broken:
            self._conn = None
            conn = psycopg.connect(
                self._url,
                autocommit=True,  # transactions are explicit: BEGIN ... COMMIT in _run
                connect_timeout=CONNECT_TIMEOUT_S,
                application_name="examlops-policy",
                keepalives=1, keepalives_idle=10, keepalives_interval=5, keepalives_count=3,
            )  # fmt: skip
            conn.execute(
                "SELECT set_config('lock_timeout', %s, false), set_config('idle_in_transaction_session_timeout', %s, false)",
                (f"{self._lock_timeout_ms}ms", f"{IDLE_IN_TRANSACTION_MS}ms"),
            )
            self._conn = conn
        return self._conn

    def _execute(self, sql: str, params: Sequence[object] = ()) -> Cursor:
        query = self._queries.get(sql)
        if query is None:
            query = self._queries[sql] = sql.replace("%", "%%").replace("?", "%s")
        return self._connection().execute(query, params)

    def _stream(self, sql: str) -> Iterator[tuple[object, ...]]:
        """The rows of a query through a cursor on the server (a plain psycopg cursor holds every
        row in the client), a batch at a time; inside the read's transaction, closed with it."""
        self._streams += 1
        with self._connection().cursor(name=f"exa_stream_{self._streams}") as cursor:
            cursor.itersize = STREAM_BATCH
            cursor.execute(sql)  # no parameters: sent as written
            while True:
                batch = cursor.fetchmany(STREAM_BATCH)
                if not batch:
                    return
                yield from (tuple(r) for r in batch)

    def _begin(self) -> None:
        conn = self._connection()
        conn.execute("BEGIN ISOLATION LEVEL READ COMMITTED")
        # First statement: every later read (capacity, audit head) sees the previous writer's commit.
        conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(COALESCE(current_schema(), '')))", (_LOCK_CLASS,))

    def _begin_read(self) -> None:
        self._connection().execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")

    def _commit(self) -> None:
        self._connection().execute("COMMIT")

    def _rollback(self) -> None:
        conn = self._conn
        if conn is None or conn.closed:
            return
        try:
            if conn.info.transaction_status != pq.TransactionStatus.IDLE:
                conn.execute("ROLLBACK")
        except psycopg.Error:
            conn.close()  # broken: the server rolls back what the session left open
            self._conn = None

    def _fault(self, exc: Exception) -> Fault | None:
        self._last_error = exc
        if isinstance(exc, _CONFLICTS):
            return "conflict"
        if not isinstance(exc, psycopg.OperationalError):
            return None
        state = exc.sqlstate or ""
        lost = self._conn is None or self._conn.closed or self._conn.broken
        if state.startswith("08") or state in _GONE or (lost and not any(p in str(exc) for p in _PERMANENT)):
            return "disconnected"
        return None

    def _is_driver_error(self, exc: Exception) -> bool:
        return isinstance(exc, psycopg.Error)

    def _classify(self, exc: Exception) -> type[StateError]:
        state = getattr(exc, "sqlstate", None) or ""
        if state.startswith("53"):  # insufficient resources: disk full, out of memory
            return StateFull
        if state in ("XX001", "XX002"):  # data corrupted, index corrupted
            return StateCorrupt
        if isinstance(exc, psycopg.OperationalError):
            return StateUnreachable
        return StateError

    def _gave_up(self, fault: Fault | None, problem: str) -> StateError:
        error = super()._gave_up(fault, problem)
        if not isinstance(self._last_error, errors.LockNotAvailable):
            return error
        waited = f"each wait for its lock ended after lock_timeout {self._lock_timeout_ms / 1000:g} s"
        return type(error)(f"{error}; {waited}{self._lock_holders()}")

    def _lock_holders(self) -> str:
        """``; held by ...``: the sessions holding exa's write lock or a strong lock on its tables
        (pg_locks and pg_stat_activity, which every role may read), or nothing when none is found."""
        try:
            rows = self._connection().execute(
                "SELECT DISTINCT l.pid, a.usename, a.application_name, a.client_addr::text, a.state, "
                "floor(extract(epoch FROM now() - coalesce(a.xact_start, a.backend_start)))::int "
                "FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid "
                "WHERE l.granted AND l.pid <> pg_backend_pid() AND ("
                " (l.locktype = 'advisory' AND l.classid = %s::oid AND l.objsubid = 2)"
                " OR (l.locktype = 'relation' AND l.mode IN ('ShareLock', 'ShareRowExclusiveLock', 'ExclusiveLock', 'AccessExclusiveLock')"
                "     AND l.relation IN (SELECT oid FROM pg_class WHERE relnamespace = current_schema()::regnamespace)))"
                " ORDER BY 1 LIMIT 5",
                (_LOCK_CLASS,),
            ).fetchall()
        except psycopg.Error:
            self._rollback()
            return ""
        held = [
            f"pid {r[0]} (user {r[1]}, application {r[2]!r}{f', from {r[3]}' if r[3] else ''}, {r[4]}, for {r[5]} s)" for r in rows
        ]
        return f"; held by {', '.join(held)}" if held else ""

    def _run_script(self, sql: str) -> None:
        # No parameters: psycopg sends the script as is, several statements in one call.
        self._connection().execute(sql.encode("utf-8"))

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

