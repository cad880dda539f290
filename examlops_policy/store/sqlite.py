"""The embedded SQLite store (the default): one file in ``$EXA_HOME``.

Crash safety and concurrency follow the audit-log design notes: WAL, ``synchronous=FULL``,
``busy_timeout``, and ``BEGIN IMMEDIATE`` around every read-then-write so the decision, the
reservation and the audit entries commit together or not at all. The statements themselves are
shared with the PostgreSQL store (``examlops_policy.store._sql``).
"""

from __future__ import annotations

import os
import random
import sqlite3
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

from examlops_policy.errors import StateCorrupt, StateError, StateFull
from examlops_policy._private import private_database
from examlops_policy.store._sql import Cursor, Fault, SQLStore, utc_now

LOCK_TIMEOUT_S: Final = 10.0
LOCK_RETRIES: Final = 5
# Primary result codes (the low byte of the extended code): the write lock is held elsewhere.
_SQLITE_BUSY: Final = 5
_SQLITE_LOCKED: Final = 6
_SQLITE_IOERR: Final = 10
_SQLITE_CORRUPT: Final = 11
_SQLITE_FULL: Final = 13
_SQLITE_NOTADB: Final = 26
# Below this much free space, an I/O error is the disk being full: SQLite reports ENOSPC as
# SQLITE_FULL only on some paths (growing the -shm file of a fresh connection gives
# SQLITE_IOERR_SHMSIZE), and sqlite3 does not expose the errno.
_FULL_BELOW_BYTES: Final = 64 * 1024


class SQLiteStore(SQLStore):
    """State in one SQLite file; safe for many processes at once.

    A write waits up to ``lock_timeout_s`` for the lock (SQLite's busy handler), ``attempts``
    times with backoff, then raises StateError with nothing written.
    """

    dialect = "sqlite"

    def __init__(
        self,
        path: Path,
        *,
        clock: Callable[[], str] = utc_now,
        lock_timeout_s: float = LOCK_TIMEOUT_S,
        attempts: int = LOCK_RETRIES,
    ) -> None:
        super().__init__(clock=clock, attempts=attempts)
        self.path = path
        self.where = str(path)
        private_database(path)  # 0700 folder, 0600 file before SQLite opens it (its -wal/-shm follow)
        try:
            # isolation_level=None: this code issues BEGIN/COMMIT itself, so the head read is inside.
            self._db = sqlite3.connect(path, isolation_level=None, timeout=lock_timeout_s)
            self._db.execute(f"PRAGMA busy_timeout={int(lock_timeout_s * 1000)}")
            self._wal(lock_timeout_s)
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute("PRAGMA foreign_keys=ON")
        except sqlite3.DatabaseError as exc:
            raise self._state_error(exc) from exc
        self._migrate()

    def _wal(self, lock_timeout_s: float) -> None:
        """Switch to WAL. On a new file several first opens race for it, and SQLite answers BUSY at
        once there, without its busy handler: wait it out within the lock timeout."""
        deadline = time.monotonic() + lock_timeout_s
        while True:
            try:
                self._db.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as exc:
                if self._fault(exc) != "conflict" or time.monotonic() > deadline:
                    raise
                time.sleep(0.01 + random.random() * 0.02)

    def _execute(self, sql: str, params: Sequence[object] = ()) -> Cursor:
        return self._db.execute(sql, params)

    def _begin(self) -> None:
        # IMMEDIATE takes the write lock now: a deferred BEGIN that reads, then writes, gets
        # SQLITE_BUSY at once in WAL mode, ignoring busy_timeout.
        self._db.execute("BEGIN IMMEDIATE")

    def _begin_read(self) -> None:
        # A deferred transaction: its first read fixes one snapshot of the WAL for the rest.
        self._db.execute("BEGIN")

    def _commit(self) -> None:
        self._db.execute("COMMIT")

    def _rollback(self) -> None:
        if self._db.in_transaction:
            try:
                self._db.execute("ROLLBACK")
            except sqlite3.DatabaseError:
                pass  # SQLite already rolled back (e.g. after SQLITE_FULL); nothing is open now

    def _fault(self, exc: Exception) -> Fault | None:
        code = getattr(exc, "sqlite_errorcode", None)
        if isinstance(exc, sqlite3.OperationalError) and code is not None and code & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED):
            return "conflict"
        return None

    def _is_driver_error(self, exc: Exception) -> bool:
        return isinstance(exc, sqlite3.Error)

    def _classify(self, exc: Exception) -> type[StateError]:
        code = (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF
        if code in (_SQLITE_CORRUPT, _SQLITE_NOTADB):
            return StateCorrupt
        if code == _SQLITE_FULL or "disk is full" in str(exc):
            return StateFull
        if code == _SQLITE_IOERR and _disk_full(self.path.parent):
            return StateFull
        return StateError

    def _run_script(self, sql: str) -> None:
        for statement in _statements(sql):
            self._db.execute(statement)
            if statement.upper().replace(" ", "").startswith("PRAGMAWRITABLE_SCHEMA=OFF"):
                # The script edited a table's SQL text in place (SQLite's procedure for loosening a
                # constraint without rebuilding the table): every connection, this one included,
                # reads the schema again once its version changes.
                version = int(self._db.execute("PRAGMA schema_version").fetchone()[0])
                self._db.execute(f"PRAGMA schema_version = {version + 1}")

    def close(self) -> None:
        self._db.close()


def _disk_full(folder: Path) -> bool:
    """Whether the file system holding ``folder`` has (next to) no space left for this user."""
    try:
        found = os.statvfs(folder)
    except OSError:
        return False
    return found.f_bavail * found.f_frsize < _FULL_BELOW_BYTES


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
