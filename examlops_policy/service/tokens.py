"""Bearer tokens of the placement service: who may place and read, for which project.

A token reads ``exa_<id>_<secret>``: ``id`` (12 hex digits) names its row, ``secret`` is 256
random bits. Only the SHA-256 digest of the whole token is stored; the token is shown once, when it
is made. Checking one looks its row up by id and compares digests in constant time
(``hmac.compare_digest``); a token unknown, revoked or past its expiry is refused alike.

Scopes: ``place`` (make, release and renew decisions, cancel queued work), ``read`` (read
decisions, pools, the queue) and ``admin`` (pool and policy changes). Making and revoking a token
are audited (kind ``token``) in the transaction that writes the row.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Final

from examlops_policy.errors import ExaError, NotFoundError, SpecError
from examlops_policy.store import Store, TokenRow, Transaction

SCOPES: Final = ("place", "read", "admin")
PREFIX: Final = "exa_"
_TOKEN_RE: Final = re.compile(r"^exa_([0-9a-f]{12})_([A-Za-z0-9_-]{43})$")
_PROJECT_RE: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
SOURCE: Final = "exa-tokens"
# A digest no token has: compared against when the id is unknown, so that an unknown id takes as
# long to refuse as a wrong secret.
_NO_DIGEST: Final = hashlib.sha256(b"no such token").hexdigest()


class TokenRefused(ExaError):
    """A request's bearer token is missing, malformed, unknown, revoked or expired (HTTP 401)."""


@dataclass(frozen=True)
class Caller:
    """Who a request comes from, as its bearer token says: the projects it acts for, its scopes,
    what the audit entries of its decisions name as their source, and how a message names it."""

    projects: tuple[str, ...]
    scopes: tuple[str, ...]
    source: str
    who: str

    @staticmethod
    def of(row: TokenRow) -> Caller:
        """The caller of one of the service's own tokens (audited as ``exa-service:token:<id>``)."""
        return Caller((row.project,), row.scopes, f"exa-service:token:{row.id}", f"this token (id {row.id})")


@dataclass(frozen=True)
class NewToken:
    """A token just made: the token itself (shown once) and its row."""

    token: str
    row: TokenRow


def digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def scopes_of(text: str | Sequence[str]) -> tuple[str, ...]:
    """Scopes from ``place,read`` (or a list): known ones only, each once, in ``SCOPES`` order."""
    given = [s.strip() for s in (text.split(",") if isinstance(text, str) else text)]
    unknown = [s for s in given if s not in SCOPES]
    if unknown or not given or any(not s for s in given):
        raise SpecError(f"expected scopes among {', '.join(SCOPES)}, comma-separated (got {','.join(given)!r})", field="--scope")
    return tuple(s for s in SCOPES if s in given)


def check_project(project: str) -> str:
    if not _PROJECT_RE.match(project):
        raise SpecError(f"expected a project name of letters, digits, '.', '_' or '-' (at most 64, got {project!r})", field="--project")
    return project


def _iso(at: datetime) -> str:
    return at.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def create(store: Store, project: str, scopes: str | Sequence[str], *, expires: timedelta | None = None) -> NewToken:
    """A new token for ``project`` with ``scopes`` (expiring ``expires`` from now), its digest
    recorded and its making audited in one transaction."""
    check_project(project)
    chosen = scopes_of(scopes)
    ident = secrets.token_hex(6)
    token = f"{PREFIX}{ident}_{secrets.token_urlsafe(32)}"
    now = datetime.now(timezone.utc)
    row = TokenRow(ident, project, chosen, digest(token), _iso(now), _iso(now + expires) if expires is not None else None)

    def work(txn: Transaction) -> str:
        txn.add_token(row)
        txn.audit("token", {"action": "created", "token_id": ident, "project": project, "scopes": list(chosen),
                            "expires_at": row.expires_at}, source=SOURCE)  # fmt: skip
        return ident

    store.transaction(work, landed=lambda txn: ident if txn.find_token(ident) is not None else None)
    return NewToken(token, row)


def revoke(store: Store, ident: str) -> tuple[TokenRow, bool]:
    """Revoke token ``ident``, audited: (its row, whether it was live until now). A second revoke
    writes nothing. NotFoundError for an unknown id."""

    def work(txn: Transaction) -> tuple[TokenRow, bool]:
        row = txn.find_token(ident)
        if row is None:
            raise NotFoundError(f"no token {ident!r} (exa tokens list shows them)")
        at = _iso(datetime.now(timezone.utc))
        if not txn.revoke_token(ident, at):
            return row, False
        txn.audit("token", {"action": "revoked", "token_id": ident, "project": row.project}, source=SOURCE)
        return TokenRow(row.id, row.project, row.scopes, row.digest, row.created_at, row.expires_at, at), True

    return store.transaction(work)


def listing(store: Store) -> list[TokenRow]:
    return store.token_rows()


def state(row: TokenRow, now: datetime | None = None) -> str:
    """``live``, ``revoked`` or ``expired``."""
    if row.revoked_at is not None:
        return "revoked"
    if row.expires_at is not None and row.expires_at <= _iso(now or datetime.now(timezone.utc)):
        return "expired"
    return "live"


def bearer(header: str | None) -> str:
    """The token of an ``Authorization: Bearer ...`` header; TokenRefused without one."""
    if not header:
        raise TokenRefused("no bearer token: send Authorization: Bearer <token> (exa tokens create makes one)")
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise TokenRefused("expected Authorization: Bearer <token>")
    return token


def authenticate(store: Store, header: str | None) -> TokenRow:
    """The live token of an ``Authorization: Bearer ...`` header; TokenRefused (saying why, but not
    whether an id exists) otherwise."""
    token = bearer(header)
    match = _TOKEN_RE.match(token)
    row = store.token_row(match.group(1)) if match else None
    same = hmac.compare_digest(row.digest if row is not None else _NO_DIGEST, digest(token))
    if row is None or not same:
        raise TokenRefused("the bearer token is not valid")
    why = state(row)
    if why != "live":
        raise TokenRefused(f"the bearer token was {why}" if why == "revoked" else "the bearer token has expired")
    return row


def as_json(row: TokenRow) -> dict[str, object]:
    return {"id": row.id, "project": row.project, "scopes": list(row.scopes), "created_at": row.created_at,
            "expires_at": row.expires_at, "revoked_at": row.revoked_at, "state": state(row)}  # fmt: skip
