"""Which state and which policy a home uses: the state folder, the store (SQLite in the folder, or
PostgreSQL at ``EXA_DB_URL``) and the policy (``EXA_OPA_URL``'s OPA, else the home's local one,
started on demand). What ``Hardware`` opens when it is not given them.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final

from examlops_policy._policy import Confirmation, OpaPolicy, PolicyEvaluator
from examlops_policy._core.verdicts import About, Answer
from examlops_policy.errors import PolicyUnavailable, SpecError
from examlops_policy.model import JSONObject

if TYPE_CHECKING:
    from examlops_policy.opa import OpaConnection
    from examlops_policy.store import Store

DEFAULT_HOME: Final = Path("~/.local/share/examlops")
# A local OPA that answered this recently is not checked again before the next query.
RECHECK_AFTER_S: Final = 1.0


def default_home() -> Path:
    """``$EXA_HOME``, else ``$XDG_DATA_HOME/examlops``, else ``~/.local/share/examlops``: an
    absolute path (see ``resolve_home``). An ``EXA_HOME`` that is set but empty is refused."""
    if "EXA_HOME" in os.environ:
        return resolve_home(os.environ["EXA_HOME"], source="EXA_HOME")
    if os.environ.get("XDG_DATA_HOME"):
        return resolve_home(Path(os.environ["XDG_DATA_HOME"]).expanduser() / "examlops")
    return resolve_home(DEFAULT_HOME)


def resolve_home(home: str | Path, *, source: str = "--home") -> Path:
    """The state folder ``home`` names, made absolute once (``~`` expanded, ``..`` and symlinks
    resolved): what is started or opened in it later (the OPA supervisor, which runs in the folder
    itself) reads the same folder, and ``x/../home`` creates no ``x``. An empty name is refused, not
    read as the current or the default folder."""
    if isinstance(home, str) and not home.strip():
        default = "unset it" if source == "EXA_HOME" else "leave the option out"
        raise SpecError(f"the state folder is empty: name a folder (or {default} for the default)", source=source)
    return Path(home).expanduser().resolve()


class ManagedPolicy:
    """The policy on the OPA ``examlops_policy.opa.connect`` finds: ``EXA_OPA_URL``'s, else this
    home's local one, started on demand. A local server that stopped (idle, killed, restarted) is
    found again before a decision asks it anything; one that fails while asked fails that decision
    closed, and the next decision connects anew."""

    def __init__(self, home: Path, root: Path | None = None, *, timeout: float | None = None) -> None:
        self._home = home
        self._root = root
        self._timeout = timeout
        self._inner: OpaPolicy | None = None
        self._connection: OpaConnection | None = None
        self._answered = float("-inf")  # when the server last answered (monotonic seconds)

    def _connect(self) -> OpaPolicy:
        # A server that answered within the last second is taken to be serving still (the check
        # reads its record and two processes); a call that then fails finds out (see _call).
        recent = time.monotonic() - self._answered < RECHECK_AFTER_S
        if self._inner is not None and self._connection is not None and not recent and not self._connection.still_serving():
            self.close()
        if self._inner is None:
            from examlops_policy.opa import OpaUnreachable, connect

            try:
                if self._timeout is None:
                    self._connection = connect(self._home, policy_root=self._root)
                else:
                    self._connection = connect(self._home, policy_root=self._root, timeout=self._timeout)
            except OpaUnreachable as exc:
                raise exc.nothing_placed() from exc
            self._inner = OpaPolicy(self._connection.transport)
        return self._inner

    def _call(self, fn: str, *args: object) -> object:
        """One query (every query is a read, so a retry is safe): a server found stopped when the
        query fails is found (or started) again, and asked once more."""
        for attempt in (1, 2):
            inner = self._connect()
            try:
                answer = getattr(inner, fn)(*args)
            except PolicyUnavailable:
                stopped = self._connection is not None and not self._connection.still_serving()
                self.close()  # the next call finds (or starts) a live server
                if attempt == 2 or not stopped:
                    raise
                continue
            self._answered = time.monotonic()
            return answer
        raise AssertionError("unreachable")

    def describe(self) -> str:
        return self._connect().describe()

    def confirm(self) -> Confirmation:
        confirmation: Confirmation = self._call("confirm")  # type: ignore[assignment]
        connection = self._connection
        if connection is not None and connection.tables_digest is not None:
            # An external OPA's tables, as its policy reported them on this connection.
            return dataclasses.replace(confirmation, tables_digest=connection.tables_digest)
        return confirmation

    def about(self) -> About:
        return self._call("about")  # type: ignore[return-value]

    def verdicts(self, workload: JSONObject, keys: Sequence[str], shapes: Mapping[str, JSONObject]) -> Answer:
        return self._call("verdicts", workload, keys, shapes)  # type: ignore[return-value]

    def decision(self, policy_input: JSONObject) -> JSONObject:
        return self._call("decision", policy_input)  # type: ignore[return-value]

    def query(self, path: str, policy_input: JSONObject) -> object:
        """Another entry point of the policy (the queue's order, preemption, the quotas report)."""
        return self._call("query", path, policy_input)

    def close(self) -> None:
        if self._inner is not None:
            self._inner.close()
        self._inner = None
        self._connection = None
        self._answered = float("-inf")


def default_policy(home: Path) -> PolicyEvaluator:
    """The OPA of ``EXA_OPA_URL`` when set, else this home's local one (see ``opa.connect``)."""
    return ManagedPolicy(home)


def open_store(home: Path) -> Store:
    """``EXA_DB_URL`` (postgresql://...) when set, else SQLite in ``home``."""
    url = os.environ.get("EXA_DB_URL")
    if url:
        if not url.startswith(("postgresql://", "postgres://")):
            raise SpecError(f"EXA_DB_URL must be a postgresql:// URL (got {url.split(':')[0]}:...)")
        from examlops_policy.store.postgres import PostgresStore

        return PostgresStore(url)
    from examlops_policy.store.sqlite import SQLiteStore

    return SQLiteStore(home / "state.db")



def is_managed(policy: PolicyEvaluator) -> bool:
    """Whether ``policy`` is this layer's to connect again (a ``ManagedPolicy``)."""
    return isinstance(policy, ManagedPolicy)
