"""The embedded SQLite store (the default): one file in ``$EXA_HOME``.

Crash safety and concurrency follow the audit-log design notes: WAL, ``synchronous=FULL``,
``busy_timeout``, and ``BEGIN IMMEDIATE`` around every read-then-write so the decision, the
reservation and the audit entries commit together or not at all. The statements themselves are
shared with the PostgreSQL store (``examlops_policy.store._sql``).

**Read-only state.** A state that cannot be written (a read-only mount, a forensic copy, a full
disk, a file this user may only read) is opened read-only: every read works, and a write raises
the error that made it read-only (``StateFull`` for a full disk, else ``StateError``), with nothing
written. SQLite reads a WAL-mode file read-only through its ``-shm`` file; where that file is
missing and cannot be made, a file without a write-ahead log is read as immutable, and one with a
log is copied, with its log, to a private temporary folder and read there.

**History.** ``state.db.head`` beside the file records the audit log's size and head after each
write (written after the commit: it may lag behind, never run ahead). A state whose log is
shorter than that, or holds another entry there, was emptied, truncated or replaced by an older
copy: it is refused (``StateCorrupt``, exit 10) before anything is read or written, naming the
entries that are missing. Moving the file aside starts a new state deliberately.
"""

from __future__ import annotations

import errno
import json
import os
import random
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

from examlops_policy.errors import StateCorrupt, StateError, StateFull
from examlops_policy._private import check_private_dir, private_database, read_small_file
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
_SQLITE_READONLY: Final = 8
_SQLITE_CANTOPEN: Final = 14
# OS errors and SQLite codes that mean "this state cannot be written here", not "it is broken".
_UNWRITABLE_ERRNO: Final = frozenset({errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EDQUOT})
_UNWRITABLE_SQLITE: Final = frozenset({_SQLITE_READONLY, _SQLITE_CANTOPEN, _SQLITE_IOERR, _SQLITE_FULL})
HEAD_SUFFIX: Final = ".head"
HEAD_LIMIT_BYTES: Final = 4096  # the record is ~130 bytes


class SQLiteStore(SQLStore):
    """State in one SQLite file; safe for many processes at once.

    A write waits up to ``lock_timeout_s`` for the lock (SQLite's busy handler), ``attempts``
    times with backoff, then raises StateError with nothing written.
    """

    dialect = "sqlite"
    epoch_sql = "((julianday({col}) - 2440587.5) * 86400.0)"

    def __init__(
        self,
        path: Path,
        *,
        clock: Callable[[], str] = utc_now,
        lock_timeout_s: float = LOCK_TIMEOUT_S,
        attempts: int = LOCK_RETRIES,
        read_only: bool = False,
    ) -> None:
        super().__init__(clock=clock, attempts=attempts)
        self.path = path
        self.where = str(path)
        self.head_file = path.with_name(path.name + HEAD_SUFFIX)
        self.read_only: StateError | None = None  # why writes are refused (None: a writable state)
        self._copy: Path | None = None  # the private copy a read-only state is read from, if any
        self._writing = False
        self._seen = self._recorded_head()
        if read_only:
            self._open_read_only(StateError(f"{path}: opened read-only"), lock_timeout_s)
            return
        try:
            self._open_read_write(lock_timeout_s)
        except StateError as exc:
            self.close()
            if not _unwritable(exc):
                raise
            try:
                self._open_read_only(exc, lock_timeout_s)
            except BaseException:
                self.close()
                raise

    def _open_read_write(self, lock_timeout_s: float) -> None:
        if self._seen is not None and not self.path.exists():
            self._history_problem(0, None)  # raises: a home that held a state has none now
        private_database(self.path)  # 0700 folder, 0600 file before SQLite opens it (its -wal/-shm follow)
        try:
            # isolation_level=None: this code issues BEGIN/COMMIT itself, so the head read is inside.
            self._db = sqlite3.connect(self.path, isolation_level=None, timeout=lock_timeout_s)
            self._db.execute(f"PRAGMA busy_timeout={int(lock_timeout_s * 1000)}")
            self._check_history()  # before anything is written to a file that may have been emptied
            self._wal(lock_timeout_s)
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute("PRAGMA foreign_keys=ON")
        except sqlite3.DatabaseError as exc:
            raise self._state_error(exc) from exc
        self._migrate()

    def _open_read_only(self, why: StateError, lock_timeout_s: float) -> None:
        """Open the state without writing to it (see the module docstring); ``why`` is what a write
        will raise. Re-raises ``why`` when there is no state to read."""
        check_private_dir(self.path.parent)
        if not self.path.is_file() or self.path.stat().st_size == 0:
            if self._seen is not None:
                self._history_problem(0, None)
            raise why
        self.read_only = why
        try:
            self._db = self._connect_read_only(lock_timeout_s)
            self._check_history()
        except sqlite3.DatabaseError as exc:
            raise self._state_error(exc) from exc
        if self._execute("SELECT 1 FROM sqlite_master WHERE name = 'schema_migrations'").fetchone() is None:
            raise why  # a file with no state in it yet (made by a write that then failed)
        self._migrate()

    def _connect_read_only(self, lock_timeout_s: float) -> sqlite3.Connection:
        uri = self.path.absolute().as_uri()
        db = sqlite3.connect(f"{uri}?mode=ro", uri=True, isolation_level=None, timeout=lock_timeout_s)
        try:
            db.execute(f"PRAGMA busy_timeout={int(lock_timeout_s * 1000)}")
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()  # opens the WAL index, if it can
            return db
        except sqlite3.OperationalError as exc:
            db.close()
            if (getattr(exc, "sqlite_errorcode", 0) or 0) & 0xFF not in _UNWRITABLE_SQLITE:
                raise
        wal = self.path.with_name(self.path.name + "-wal")
        if not wal.exists() or wal.stat().st_size == 0:
            # No write-ahead log: the file holds the whole state, and nothing here can change it.
            return sqlite3.connect(f"{uri}?immutable=1", uri=True, isolation_level=None)
        # A log that cannot be read in place (no -shm, none can be made): read a private copy.
        try:
            self._copy = Path(tempfile.mkdtemp(prefix="exa-state-"))
            shutil.copy2(self.path, self._copy / self.path.name)
            shutil.copy2(wal, self._copy / wal.name)
        except OSError as exc:
            raise StateError(
                f"{self.path}: cannot read it read-only: its write-ahead log {wal.name} needs a -shm file that cannot be made "
                f"here, and copying both to {tempfile.gettempdir()} failed ({exc.strerror or exc}); copy state.db and "
                f"{wal.name} to a writable folder and read them there"
            ) from exc
        return sqlite3.connect(f"{(self._copy / self.path.name).as_uri()}?mode=ro", uri=True, isolation_level=None)

    # -- history --------------------------------------------------------------------------------

    def _recorded_head(self) -> tuple[int, str] | None:
        """The audit size and head this home recorded last, or None (no file: nothing recorded)."""
        try:
            # Read as a small regular file: a link to /dev/zero or a FIFO put in its place is
            # refused, not read until memory runs out or waited on.
            doc = json.loads(read_small_file(self.head_file, HEAD_LIMIT_BYTES).decode("utf-8"))
            return int(doc["audit_size"]), str(doc["audit_head"])
        except (FileNotFoundError, NotADirectoryError):
            return None  # nothing recorded (a home that is not a folder is refused as unusable when opened)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise StateCorrupt(
                f"{self.head_file} cannot be read ({exc}): it records how far this home's audit log reached; "
                "restore it, or move it aside to trust the state as it is"
            ) from exc

    def _check_history(self) -> None:
        """Refuse a state younger than this home's record of it (see the module docstring)."""
        if self._seen is None:
            return
        size, head = self._seen
        if self._db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'audit_log'").fetchone() is None:
            self._history_problem(0, None)
        last = self._db.execute("SELECT max(seq) FROM audit_log").fetchone()[0] or 0
        at = self._db.execute("SELECT entry_hash FROM audit_log WHERE seq = ?", (size,)).fetchone()
        if last < size or at is None:
            self._history_problem(int(last), None)
        if bytes(at[0]).hex() != head:
            self._history_problem(int(last), bytes(at[0]).hex())

    def _history_problem(self, last: int, found: str | None) -> None:
        size, head = self._seen or (0, "")
        move = f"restore the state from a backup, or move {self.head_file.name} aside to start a new state; nothing was read or written"
        if found is not None:
            raise StateCorrupt(
                f"{self.path}: audit entry {size} is not the one this home recorded ({found[:16]} here, {head[:16]} in "
                f"{self.head_file.name}): the state was replaced by another one; {move}"
            )
        what = "is missing" if not self.path.exists() else "holds no audit log" if last == 0 else f"holds {last} audit entries"
        missing = f"entry {size} is" if last + 1 == size else f"entries {last + 1}..{size} are"
        raise StateCorrupt(
            f"{self.path} {what}, but {self.head_file.name} records that this home's audit log reached {size} entries "
            f"(head {head[:16]}): {missing} missing, so the state was emptied, truncated or replaced by an older copy; {move}"
        )

    def _note_head(self, seq: int, entry_hash: bytes) -> None:
        """Record the audit head a write reached (after its commit; an older record is kept when a
        concurrent writer got further, and a failure to record costs nothing but the record)."""
        if self._seen is not None and seq <= self._seen[0]:
            return
        self._seen = (seq, entry_hash.hex())
        tmp = self.head_file.with_name(f".{self.head_file.name}.{os.getpid()}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, json.dumps({"format": 1, "audit_size": seq, "audit_head": entry_hash.hex()}).encode())
            finally:
                os.close(fd)
            os.replace(tmp, self.head_file)
        except OSError:
            tmp.unlink(missing_ok=True)

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
        if self.read_only is not None:
            why = self.read_only
            full = isinstance(why.__cause__, OSError) and why.__cause__.errno in (errno.ENOSPC, errno.EDQUOT)
            kind = StateFull if isinstance(why, StateFull) or full else StateError
            raise kind(f"{self.path} is open read-only ({why}); nothing was written")
        # IMMEDIATE takes the write lock now: a deferred BEGIN that reads, then writes, gets
        # SQLITE_BUSY at once in WAL mode, ignoring busy_timeout.
        self._db.execute("BEGIN IMMEDIATE")
        self._writing = True

    def _begin_read(self) -> None:
        # A deferred transaction: its first read fixes one snapshot of the WAL for the rest.
        self._db.execute("BEGIN")
        self._writing = False

    def _commit(self) -> None:
        head = None
        if self._writing:
            head = self._db.execute("SELECT seq, entry_hash FROM audit_log ORDER BY seq DESC LIMIT 1").fetchone()
            self._writing = False
        self._db.execute("COMMIT")
        if head is not None:
            self._note_head(int(head[0]), bytes(head[1]))

    def _rollback(self) -> None:
        self._writing = False
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
        db = getattr(self, "_db", None)
        if db is not None:
            db.close()
        if self._copy is not None:
            shutil.rmtree(self._copy, ignore_errors=True)
            self._copy = None


def _unwritable(exc: StateError) -> bool:
    """Whether ``exc`` says the state cannot be written here (read-only, full, not permitted), as
    opposed to broken or busy: then it can still be read."""
    if isinstance(exc, StateFull):
        return True
    if isinstance(exc, StateCorrupt):
        return False
    cause = exc.__cause__
    if isinstance(cause, OSError) and cause.errno in _UNWRITABLE_ERRNO:
        return True
    code = (getattr(cause, "sqlite_errorcode", 0) or 0) & 0xFF
    return isinstance(cause, sqlite3.Error) and code in (_SQLITE_READONLY, _SQLITE_CANTOPEN)


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
