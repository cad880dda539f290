"""The reviewed policy as one snapshot: its tables and their revision, read together, and noticed
when the files change.

A decision is made under exactly one ``PolicySnapshot``: the tables it is priced and checked with
are the ones whose revision it records, and the revision OPA must confirm serving. ``Reviewed``
watches one policy folder for a long-lived process: at most every ``CHECK_EVERY_S`` (or at once
when asked, e.g. when OPA confirms another revision) it stats the policy files (size and mtime,
and the folders' mtimes for files added or removed), and only when one changed reads the tables
and the revision again, together (a change while reading reads again).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Final

from examlops_policy.errors import PolicyError
from examlops_policy.tables import Tables, load_tables, policy_dir, policy_files, revision, table_files

CHECK_EVERY_S: Final = 0.25
READ_ATTEMPTS: Final = 5
Stamp = tuple[tuple[str, int, int], ...]


@dataclass(frozen=True)
class PolicySnapshot:
    """The reviewed policy a decision is made under: the tables and their revision, and the table
    files' bytes they were read from (``table_files``: path, bytes)."""

    root: Path
    revision: str
    tables: Tables
    table_files: tuple[tuple[Path, bytes], ...] = field(default=(), repr=False, compare=False)

    @cached_property
    def tables_digest(self) -> str:
        """The digest a policy serving these tables reports of them (``opa.content``): what an OPA
        whose revision is only a label must report to decide under this snapshot."""
        from examlops_policy.opa.content import digest_of_files

        return digest_of_files(self.table_files)


def _table_bytes(root: Path) -> tuple[tuple[Path, bytes], ...]:
    try:
        return tuple((p, p.read_bytes()) for p in table_files(root))
    except OSError as exc:
        raise PolicyError(f"cannot read the policy tables in {root}: {exc}") from exc


def _read_tables(root: Path) -> Tables:
    """The tables as the files say now (not a cached copy of an earlier read)."""
    fresh = getattr(load_tables, "__wrapped__", load_tables)
    return fresh(root)


class Reviewed:
    """The snapshot of one policy folder's files, read again when they change."""

    def __init__(self, root: Path | None = None, *, check_every_s: float = CHECK_EVERY_S) -> None:
        self.root = root or policy_dir()
        self._every = check_every_s
        self._snapshot: PolicySnapshot | None = None
        self._paths: list[Path] = []
        self._stamp: Stamp = ()
        self._checked = float("-inf")

    def current(self, *, force: bool = False) -> PolicySnapshot:
        """The snapshot of the files as they are (checked at most every ``check_every_s`` unless
        ``force``)."""
        now = time.monotonic()
        if self._snapshot is not None and not force and now - self._checked < self._every:
            return self._snapshot
        if self._snapshot is None or self._changed():
            self._snapshot = self._read()
        self._checked = now
        return self._snapshot

    def _scan(self) -> list[Path]:
        files = policy_files(self.root)
        folders = sorted({p.parent for p in files} | {self.root})
        return [*folders, *files]

    def _stamp_of(self, paths: list[Path]) -> Stamp | None:
        out = []
        for path in paths:
            try:
                st = os.stat(path)
            except OSError:
                return None  # removed: scan again
            out.append((str(path), st.st_mtime_ns, st.st_size))
        return tuple(out)

    def _changed(self) -> bool:
        stamp = self._stamp_of(self._paths)
        return stamp is None or stamp != self._stamp

    def _read(self) -> PolicySnapshot:
        for _ in range(READ_ATTEMPTS):
            paths = self._scan()
            before = self._stamp_of(paths)
            tables = _read_tables(self.root)
            rev = revision(self.root)
            files = _table_bytes(self.root)
            if before is not None and self._stamp_of(paths) == before:
                self._paths, self._stamp = paths, before
                return PolicySnapshot(self.root, rev, tables, files)
        raise PolicyError(f"the policy files in {self.root} kept changing while they were read; nothing was decided")


class Pinned:
    """A snapshot given (tables passed in explicitly): never read again."""

    def __init__(self, tables: Tables, root: Path | None = None) -> None:
        root = root or policy_dir()
        self._snapshot = PolicySnapshot(root, revision(root), tables, _table_bytes(root))

    def current(self, *, force: bool = False) -> PolicySnapshot:
        return self._snapshot
