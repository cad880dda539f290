"""The store's statements for the placement service's bearer tokens (migration 0011), shared by the
SQLite and PostgreSQL adapters: ``TokenReads`` outside a write transaction, ``TokenWrites`` inside
one (``store.api.Transaction``). Rows in, rows out: no token is made or checked here
(``examlops_policy.service.tokens``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final, Protocol, TypeVar

from examlops_policy.store.api import TokenRow

T = TypeVar("T")
_COLUMNS: Final = "id, project, scopes, digest, created_at, expires_at, revoked_at"


class _Cursor(Protocol):
    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


def _row(r: Sequence[Any]) -> TokenRow:
    return TokenRow(str(r[0]), str(r[1]), tuple(s for s in str(r[2]).split(",") if s), str(r[3]), str(r[4]), r[5], r[6])


class TokenReads:
    """Reads outside a write transaction (mixed into ``SQLStore``)."""

    _execute: Callable[..., _Cursor]

    def _run(self, work: Callable[[], T], *, landed: Callable[[], T | None] | None = None, consistent: bool = False) -> T:
        raise NotImplementedError  # SQLStore's

    def token_row(self, ident: str) -> TokenRow | None:
        """The token ``ident`` (revoked and expired ones too), or None."""
        row = self._run(lambda: self._execute(f"SELECT {_COLUMNS} FROM api_tokens WHERE id = ?", (ident,)).fetchone())
        return None if row is None else _row(row)

    def token_rows(self) -> list[TokenRow]:
        """Every token, oldest first."""
        return [_row(r) for r in self._run(lambda: self._execute(f"SELECT {_COLUMNS} FROM api_tokens ORDER BY created_at, id").fetchall())]


class TokenWrites:
    """The statements a write transaction runs (mixed into the store's transaction)."""

    _execute: Callable[..., _Cursor]

    def add_token(self, row: TokenRow) -> None:
        self._execute(
            f"INSERT INTO api_tokens ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (row.id, row.project, ",".join(row.scopes), row.digest, row.created_at, row.expires_at, row.revoked_at),
        )

    def find_token(self, ident: str) -> TokenRow | None:
        row = self._execute(f"SELECT {_COLUMNS} FROM api_tokens WHERE id = ?", (ident,)).fetchone()
        return None if row is None else _row(row)

    def revoke_token(self, ident: str, at: str) -> bool:
        """Revoke a live token; False when it was revoked already (nothing written)."""
        return self._execute("UPDATE api_tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", (at, ident)).rowcount == 1
