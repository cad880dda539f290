"""Folders and files private to their owner, whatever the umask.

Everything this layer keeps in a state folder (the SQLite database and its journal files, the OPA
token, the server record, logs, the policy bundle) is created 0600 inside 0700 folders. The
umask can only take permission bits away, so each helper asks for the private mode at creation
and sets it again with ``fchmod``/``chmod`` where a file already existed with a wider mode.

A folder other users can write to is refused: whoever can write there can swap the database, the
token or the socket for their own.

Errors are ``ExaError`` subclasses chosen by the caller (``error=``): a state folder the store
cannot use is a ``StateUnusable`` (exit 13); the OPA layer passes ``PolicyUnavailable`` (exit 5). A
full disk (ENOSPC, EDQUOT) is named as such (a ``StateFull`` where the caller's error is a state
error), never a traceback.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path
from typing import Final

from examlops_policy.errors import ExaError, StateError, StateFull, StateUnusable

DIR_MODE: Final = 0o700
FILE_MODE: Final = 0o600
_FULL: Final = (errno.ENOSPC, errno.EDQUOT)


def describe_os_error(action: str, path: Path, exc: OSError) -> str:
    """``cannot <action> <path>: <why>``, naming a full disk plainly."""
    if exc.errno in _FULL:
        return f"cannot {action} {path}: the disk is full (no space left on the device or quota exceeded)"
    return f"cannot {action} {path}: {exc.strerror or exc}"


def _os_error(error: type[ExaError], action: str, path: Path, exc: OSError) -> ExaError:
    """``error`` saying what could not be done; a full disk is a ``StateFull`` for the store."""
    if exc.errno in _FULL and issubclass(error, StateError):
        return StateFull(describe_os_error(action, path, exc))
    return error(describe_os_error(action, path, exc))


def check_private_dir(path: Path, *, error: type[ExaError] = StateUnusable) -> None:
    """Raise ``error`` unless ``path`` is a folder owned by this user that nobody else can write to."""
    try:
        info = path.stat()
    except OSError as exc:
        raise _os_error(error, "use", path, exc) from exc
    if not stat.S_ISDIR(info.st_mode):
        raise error(f"{path} is not a folder")
    if info.st_uid != os.geteuid():
        raise error(f"{path} belongs to uid {info.st_uid}, not to this user (uid {os.geteuid()}); use a state folder of your own")
    if info.st_mode & 0o022:
        mode = stat.S_IMODE(info.st_mode)
        raise error(f"{path} can be written by other users (mode {mode:04o}); make it private with: chmod 700 {path}")


def ensure_private_dir(path: Path, *, error: type[ExaError] = StateUnusable) -> Path:
    """Create ``path`` and missing parents as 0700 folders; refuse an existing one others can write to.

    An existing folder keeps its mode when only readable by others (the files in it are 0600);
    a folder this call creates is 0700.
    """
    missing: list[Path] = []
    probe = path
    while not probe.exists():
        missing.append(probe)
        if probe.parent == probe:
            break
        probe = probe.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=DIR_MODE)
        except FileExistsError:
            pass  # another process made it meanwhile; checked below like any existing folder
        except OSError as exc:
            raise _os_error(error, "create", folder, exc) from exc
        else:
            # mkdir's mode passes through the umask, which may also *lack* bits: set it exactly.
            folder.chmod(DIR_MODE)
    check_private_dir(path, error=error)
    return path


def private_file(path: Path, *, error: type[ExaError] = StateUnusable) -> None:
    """Make sure ``path`` exists as a 0600 file of this user (created empty if missing)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, FILE_MODE)
    except OSError as exc:
        raise _os_error(error, "create", path, exc) from exc
    try:
        info = os.fstat(fd)
        if info.st_uid != os.geteuid():
            raise error(f"{path} belongs to uid {info.st_uid}, not to this user")
        if stat.S_IMODE(info.st_mode) != FILE_MODE:
            os.fchmod(fd, FILE_MODE)
    finally:
        os.close(fd)


def private_database(path: Path, *, error: type[ExaError] = StateUnusable) -> None:
    """Prepare a SQLite database file: 0700 folder, 0600 file, existing journal files tightened.

    SQLite creates ``-wal``, ``-shm`` and ``-journal`` with the database file's own permissions,
    so a 0600 database created before SQLite opens it keeps them private too.
    """
    ensure_private_dir(path.parent, error=error)
    private_file(path, error=error)
    for suffix in ("-wal", "-shm", "-journal"):
        companion = path.with_name(path.name + suffix)
        if companion.exists():
            private_file(companion, error=error)


def write_private_file(path: Path, data: bytes, *, error: type[ExaError] = StateError) -> None:
    """Write ``data`` to ``path`` (0600) atomically (``write_atomically``). On any failure, a full
    disk included, the old file (if any) is untouched, no temporary file is left behind, and
    ``error`` names what could not be written.
    """
    try:
        write_atomically(path, data, FILE_MODE)  # mkstemp makes 0600 already; stated, not assumed
    except OSError as exc:
        raise error(describe_os_error("write", path, exc)) from exc


def write_atomically(path: Path, data: bytes, mode: int) -> None:
    """``data`` at ``path`` whole or not at all, with ``mode``: a temporary file beside it, fsynced,
    renamed over it, the folder fsynced. OSError when it cannot (the old file, if any, untouched;
    no temporary file left behind, whatever ended the write)."""
    folder = path.parent
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    tmp = Path(tmp_name)
    try:
        try:
            os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        _fsync_dir(folder)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


class NotARegularFile(OSError):
    """``read_small_file`` found a link, a device, a FIFO or a folder, or a file over its limit."""


def read_small_file(path: Path, limit: int) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them. A symbolic link is not
    followed, a FIFO is opened without waiting for a writer, and anything but a regular file (a
    device such as ``/dev/zero``, a FIFO, a folder) or a file over ``limit`` bytes raises
    ``NotARegularFile`` (an ``OSError``) before more than ``limit + 1`` bytes are read.
    ``FileNotFoundError`` when there is none."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotARegularFile(errno.ELOOP, "a symbolic link, not a file", str(path)) from exc
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a FIFO" if stat.S_ISFIFO(mode) else "a folder" if stat.S_ISDIR(mode) else "a device or socket"
            raise NotARegularFile(errno.EINVAL, f"{kind}, not a file", str(path))
        chunks: list[bytes] = []
        left = limit + 1
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise NotARegularFile(errno.EFBIG, f"larger than {limit} bytes", str(path))
    return data


def open_private_log(path: Path, *, error: type[ExaError] = StateError) -> int:
    """An append-only file descriptor on a 0600 log file (for a child process's output)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, FILE_MODE)
    except OSError as exc:
        raise error(describe_os_error("open", path, exc)) from exc
    os.fchmod(fd, FILE_MODE)
    return fd


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
