"""The orchestrator: state store + policy evaluator + decision core, as the CLI and library use it.

``Hardware`` wires the adapters (SQLite or PostgreSQL state, a local or remote OPA) around the pure
decision core. Every placement it makes is recorded: reservation, decision, burst event and audit
entries in one transaction.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from typing import TYPE_CHECKING

from examlops_policy.errors import PolicyUnavailable, SpecError
from examlops_policy.finops import FinopsRow, totals
from examlops_policy.model import Decision, JSONObject, Pool, PoolState, Reason, Rejection, Workload
from examlops_policy.placement import decide, effective_cost
from examlops_policy.store import DecisionRecord, PoolChange, Store
from examlops_policy.tables import Tables, load_tables

if TYPE_CHECKING:  # the OPA client, HTTP and crypto stacks load only when a command needs them
    from examlops_policy import audit
    from examlops_policy.policy import OpaEvaluator, PolicyEvaluator

DEFAULT_HOME: Final = Path("~/.local/share/examlops")


def default_home() -> Path:
    """``$EXA_HOME``, else ``$XDG_DATA_HOME/examlops``, else ``~/.local/share/examlops``."""
    if os.environ.get("EXA_HOME"):
        return Path(os.environ["EXA_HOME"]).expanduser()
    if os.environ.get("XDG_DATA_HOME"):
        return Path(os.environ["XDG_DATA_HOME"]).expanduser() / "examlops"
    return DEFAULT_HOME.expanduser()


class ManagedOpaEvaluator:
    """An OpaEvaluator on the OPA ``examlops_policy.opa.connect`` finds: ``EXA_OPA_URL``'s, else
    this home's local one, started on demand; reconnected (and restarted) after a failure."""

    def __init__(self, home: Path, root: Path | None = None) -> None:
        self._home = home
        self._root = root
        self._inner: OpaEvaluator | None = None

    @property
    def revision(self) -> str:
        """The revision OPA serves (proven to have the reviewed policy's content)."""
        return self._connect().revision

    @property
    def url(self) -> str:
        return self._connect().url

    def ensure_started(self) -> None:
        """Find or start the OPA now (it may take seconds), not inside a transaction."""
        self._connect()

    def _connect(self) -> OpaEvaluator:
        if self._inner is None:
            from examlops_policy.opa import OpaUnreachable, connect
            from examlops_policy.policy import OpaEvaluator

            try:
                connection = connect(self._home, policy_root=self._root)
            except OpaUnreachable as exc:
                raise exc.nothing_placed() from exc
            self._inner = OpaEvaluator(connection.transport, revision=connection.expected_revision)
        return self._inner

    def evaluate(self, policy_input: Mapping[str, object]) -> JSONObject:
        inner = self._connect()
        try:
            return inner.evaluate(policy_input)
        except PolicyUnavailable:
            # Fail closed now; the next call finds (or starts) a live server.
            inner.close()
            self._inner = None
            raise


def default_evaluator(home: Path) -> PolicyEvaluator:
    """The OPA of ``EXA_OPA_URL`` when set, else this home's local one (see ``connect``)."""
    return ManagedOpaEvaluator(home)


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


class Hardware:
    """Pools, placements and their records, as ``exa hardware`` offers them."""

    def __init__(
        self,
        home: Path | None = None,
        *,
        store: Store | None = None,
        evaluator: PolicyEvaluator | None = None,
        tables: Tables | None = None,
    ) -> None:
        self.home = home or default_home()
        self._store = store
        self._evaluator = evaluator
        self.tables = tables or load_tables()

    @property
    def store(self) -> Store:
        if self._store is None:
            self._store = open_store(self.home)
        return self._store

    @property
    def evaluator(self) -> PolicyEvaluator:
        if self._evaluator is None:
            self._evaluator = default_evaluator(self.home)
        return self._evaluator

    def close(self) -> None:
        if self._store is not None:
            self._store.close()

    # -- pools ------------------------------------------------------------------------------

    def add_pool(self, pool: Pool) -> PoolChange:
        from examlops_policy import specs  # jsonschema loads only when validating

        specs.check_pool(pool, self.tables)
        return self.store.apply_pools([pool], replace=False)[0]

    def apply(self, pools: Sequence[Pool]) -> list[PoolChange]:
        from examlops_policy import specs  # jsonschema loads only when validating

        for pool in pools:
            specs.check_pool(pool, self.tables)
        return self.store.apply_pools(pools, replace=True)

    def pools(self) -> list[PoolState]:
        """Every pool, cheapest first (then by name)."""
        states = self.store.pool_states()
        return sorted(states, key=lambda s: (effective_cost(s, self.tables), s.pool.name))

    # -- decisions --------------------------------------------------------------------------

    def place(self, workload: Workload) -> DecisionRecord:
        """Decide and record: reservation, decision, burst event and audit entries, atomically."""
        from examlops_policy import specs  # jsonschema loads only when validating

        specs.check_workload(workload)
        if isinstance(self.evaluator, ManagedOpaEvaluator):
            self.evaluator.ensure_started()  # an OPA start must not happen under the write lock
        return self.store.place(lambda states: decide(workload, states, self.evaluator, self.tables), source="exa-hardware")

    def burst(self, workload: Workload) -> DecisionRecord:
        """An explicit burst to cloud: target cloud, bursting allowed."""
        return self.place(_replace(workload, target="cloud", allow_burst=True))

    def portable(self, engine: str, accelerator: str) -> Reason | None:
        """None when the engine can run on the accelerator, else the policy's reason."""
        from examlops_policy import specs  # jsonschema loads only when validating

        workload = specs.check_workload(Workload("portability-check", accelerator=accelerator, engine=engine))
        decision = decide(workload, [], self.evaluator, self.tables)
        # With no pools, the only rejection that speaks of the workload itself is portability's.
        if isinstance(decision, Rejection) and decision.code == "backend_unsupported":
            return Reason(decision.code, "never", decision.reason)
        return None

    def what_if(self, workload: Workload, pools: Sequence[Pool] | None = None) -> Decision:
        """Decide without recording or reserving: over ``pools`` (all free) or the current state."""
        from examlops_policy import specs  # jsonschema loads only when validating

        specs.check_workload(workload)
        if pools is None:
            states = self.store.pool_states()
        else:
            states = [PoolState(specs.check_pool(p, self.tables), float(p.count)) for p in pools]
        return decide(workload, states, self.evaluator, self.tables)

    def decisions(self, limit: int = 20) -> list[DecisionRecord]:
        return self.store.decisions(limit)

    def decision(self, ident: str) -> DecisionRecord:
        return self.store.get_decision(ident)

    def release(self, ident: str) -> DecisionRecord:
        return self.store.release(ident, source="exa-hardware")

    # -- audit --------------------------------------------------------------------------------

    def verify_audit(self, checkpoint: audit.Checkpoint | None = None, key: audit.VerifierKey | None = None) -> audit.VerifyReport:
        from examlops_policy import audit

        rows = self.store.audit_rows()
        return audit.verify_chain(rows, checkpoint, public_key=key)

    def finops(self, hours: float | None = None) -> list[FinopsRow]:
        """Cost and carbon of placed decisions grouped by device type and region.

        Hours are ``hours`` for every decision when given, else the time each placement held its
        capacity (until release, or until now).
        """
        return totals(self.store.decisions(limit=1_000_000), hours=hours)


def _replace(workload: Workload, **changes: object) -> Workload:
    return dataclasses.replace(workload, **changes)  # type: ignore[arg-type]
