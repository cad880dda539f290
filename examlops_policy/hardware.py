"""The orchestrator: state store + policy engine + decision core, as the CLI and library use it.

``Hardware`` wires the adapters (SQLite or PostgreSQL state, a local or remote OPA) around the pure
decision core. A placement asks the policy first, outside any lock, on a snapshot of the state;
then the store commits it (reservation, devices, decision, burst event and audit entries in one
transaction), redoing the selection if capacity changed meanwhile.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Final

from examlops_policy.engine import Engine, Prepared, differences, fleet_revision, reference_input, same_policy
from examlops_policy.errors import PolicyUnavailable, SpecError, StateError
from examlops_policy.model import Decision, Holding, JSONObject, Pool, PoolState, Reason, Workload
from examlops_policy.packing import layout_of, summarize
from examlops_policy.policy import Confirmation, OpaPolicy, PolicyEvaluator
from examlops_policy.store import (
    BurstEvent,
    DecisionRecord,
    DecisionSummary,
    FinopsRow,
    PoolChange,
    Release,
    Snapshot,
    StaleFleet,
    Store,
)
from examlops_policy.tables import Tables, load_tables, policy_dir, revision
from examlops_policy.verdicts import About, Answer, workload_input

if TYPE_CHECKING:  # the crypto stack loads only when a command needs it
    from examlops_policy import audit
    from examlops_policy.opa import OpaConnection

DEFAULT_HOME: Final = Path("~/.local/share/examlops")
SOURCE: Final = "exa-hardware"
# Pools changing under a placement send it back for verdicts; after this many rounds, give up.
FLEET_ROUNDS: Final = 5


def default_home() -> Path:
    """``$EXA_HOME``, else ``$XDG_DATA_HOME/examlops``, else ``~/.local/share/examlops``."""
    if os.environ.get("EXA_HOME"):
        return Path(os.environ["EXA_HOME"]).expanduser()
    if os.environ.get("XDG_DATA_HOME"):
        return Path(os.environ["XDG_DATA_HOME"]).expanduser() / "examlops"
    return DEFAULT_HOME.expanduser()


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

    def _connect(self) -> OpaPolicy:
        if self._inner is not None and self._connection is not None and not self._connection.still_serving():
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
        inner = self._connect()
        try:
            return getattr(inner, fn)(*args)
        except PolicyUnavailable:
            self.close()  # the next call finds (or starts) a live server
            raise

    def describe(self) -> str:
        return self._connect().describe()

    def confirm(self) -> Confirmation:
        return self._call("confirm")  # type: ignore[return-value]

    def about(self) -> About:
        return self._call("about")  # type: ignore[return-value]

    def verdicts(self, workload: JSONObject, keys: Sequence[str], shapes: Mapping[str, JSONObject]) -> Answer:
        return self._call("verdicts", workload, keys, shapes)  # type: ignore[return-value]

    def decision(self, policy_input: JSONObject) -> JSONObject:
        return self._call("decision", policy_input)  # type: ignore[return-value]

    def close(self) -> None:
        if self._inner is not None:
            self._inner.close()
        self._inner = None
        self._connection = None


def default_policy(home: Path) -> PolicyEvaluator:
    """The OPA of ``EXA_OPA_URL`` when set, else this home's local one (see ``opa.connect``)."""
    return ManagedPolicy(home)


def open_store(home: Path, tables: Tables | None = None) -> Store:
    """``EXA_DB_URL`` (postgresql://...) when set, else SQLite in ``home``."""
    url = os.environ.get("EXA_DB_URL")
    if url:
        if not url.startswith(("postgresql://", "postgres://")):
            raise SpecError(f"EXA_DB_URL must be a postgresql:// URL (got {url.split(':')[0]}:...)")
        from examlops_policy.store.postgres import PostgresStore

        return PostgresStore(url, tables=tables)
    from examlops_policy.store.sqlite import SQLiteStore

    return SQLiteStore(home / "state.db", tables=tables)


@dataclass(frozen=True)
class Replay:
    """A recorded decision asked again: ``same`` when the policy gives the same answer."""

    decision_id: str
    same: bool
    policy_revision: str
    recorded_revision: str
    summary: str
    differences: tuple[str, ...]


def lease_end(lease: timedelta, now: datetime | None = None) -> str:
    end = (now or datetime.now(timezone.utc)) + lease
    return end.isoformat(timespec="microseconds").replace("+00:00", "Z")


class Hardware:
    """Pools, placements and their records, as ``exa hardware`` offers them."""

    def __init__(
        self,
        home: Path | None = None,
        *,
        store: Store | None = None,
        policy: PolicyEvaluator | None = None,
        tables: Tables | None = None,
    ) -> None:
        self.home = home or default_home()
        self._store = store
        self._policy = policy
        self.tables = tables or load_tables()
        self._engine: Engine | None = None
        self._fleet_revs: dict[int, str] = {}

    @property
    def store(self) -> Store:
        if self._store is None:
            self._store = open_store(self.home, self.tables)
        return self._store

    @property
    def policy(self) -> PolicyEvaluator:
        if self._policy is None:
            self._policy = default_policy(self.home)
        return self._policy

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            self._engine = Engine(self.policy, self.tables, reviewed=revision(policy_dir()))
        return self._engine

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
        close = getattr(self._policy, "close", None)
        if close is not None:
            close()

    # -- pools ------------------------------------------------------------------------------

    def add_pool(self, pool: Pool) -> PoolChange:
        from examlops_policy import specs

        specs.check_pool_facts(pool, self.tables)
        return self.store.apply_pools([pool], replace=False)[0]

    def apply(self, pools: Sequence[Pool]) -> list[PoolChange]:
        from examlops_policy import specs

        for pool in pools:
            specs.check_pool_facts(pool, self.tables)
        return self.store.apply_pools(pools, replace=True)

    def pools(self) -> list[PoolState]:
        """Every pool, cheapest first (then by name)."""
        from examlops_policy.placement import effective_cost

        return sorted(self.store.pool_states(), key=lambda s: (effective_cost(s.pool, self.tables), s.pool.name))

    def pool(self, name: str) -> tuple[PoolState, list[Holding]]:
        """One pool and what its live grants hold, device by device."""
        return self.store.pool_detail(name)

    # -- decisions --------------------------------------------------------------------------

    def _fleet_rev(self, snap: Snapshot) -> str:
        rev = self._fleet_revs.get(snap.fleet_version)
        if rev is None:
            rev = self._fleet_revs[snap.fleet_version] = fleet_revision([s.pool for s in snap.states], self.tables)
        return rev

    def _prepare(self, workload: Workload, snap: Snapshot) -> Prepared:
        return self.engine.prepare(workload, [s.pool for s in snap.states], fleet_rev=self._fleet_rev(snap))

    def place(self, workload: Workload, *, request_id: str | None = None, lease: timedelta | None = None) -> DecisionRecord:
        """Decide and record: devices, decision, burst event and audit entries, atomically.

        ``request_id`` makes the call idempotent: a retry with the same key returns the decision
        recorded the first time and reserves nothing more. ``lease``: a placement neither submitted
        to a scheduler nor renewed before it ends is released by the next write (audited as
        ``expired``).
        """
        from examlops_policy import specs

        specs.check_workload_facts(workload, self.tables)
        if request_id is not None:
            specs.check_request_id(request_id)
            found = self.store.find_request(request_id)
            if found is not None:
                return _same_request(found, workload, request_id)
        until = None if lease is None else lease_end(_check_lease(lease))
        for _ in range(FLEET_ROUNDS):
            snap = self.store.snapshot()
            prepared = self._prepare(workload, snap)
            try:
                record = self.store.commit(prepared, snap, source=SOURCE, request_id=request_id, lease_expires_at=until)
            except StaleFleet:
                continue
            return _same_request(record, workload, request_id) if request_id is not None else record
        raise StateError(f"pools kept changing while {workload.name} was being placed ({FLEET_ROUNDS} rounds); nothing was placed")

    def burst(self, workload: Workload, **options: object) -> DecisionRecord:
        """An explicit burst to cloud: target cloud, bursting allowed."""
        return self.place(dataclasses.replace(workload, target="cloud", allow_burst=True), **options)  # type: ignore[arg-type]

    def portable(self, engine: str, accelerator: str) -> Reason | None:
        """None when the engine can run on the accelerator, else the policy's reason."""
        prepared = self.engine.prepare(Workload("portability-check", accelerator=accelerator, engine=engine), [])
        rejection = prepared.judged.workload.rejection
        # With no pools, the only rejection that speaks of the workload itself is portability's.
        return rejection if rejection is not None and rejection.code == "backend_unsupported" else None

    def what_if(self, workload: Workload, pools: Sequence[Pool] | None = None) -> Decision:
        """Decide without recording or reserving: over ``pools`` (nothing held on them) or the
        current state."""
        from examlops_policy import specs

        specs.check_workload_facts(workload, self.tables)
        if pools is None:
            snap = self.store.snapshot()
            return self._prepare(workload, snap).decide([s.capacity for s in snap.states], self.tables)
        states = []
        for pool in pools:
            specs.check_pool_facts(pool, self.tables)
            states.append(PoolState(pool, float(pool.count), summarize(layout_of(pool, self.tables), [])))
        return self.engine.decide(workload, states)

    def decisions(self, limit: int = 20) -> list[DecisionRecord]:
        return self.store.decisions(limit)

    def decision_summaries(self, *, limit: int = 20, since: str | None = None, until: str | None = None, before: tuple[str, str] | None = None) -> list[DecisionSummary]:
        return self.store.decision_summaries(limit=limit, since=since, until=until, before=before)

    def decision(self, ident: str) -> DecisionRecord:
        return self.store.get_decision(ident)

    def release(self, ident: str) -> Release:
        return self.store.release(ident, source=SOURCE)

    def renew(self, ident: str, lease: timedelta) -> DecisionRecord:
        return self.store.renew(ident, lease_end(_check_lease(lease)), source=SOURCE)

    def replay(self, ident: str) -> Replay:
        """Ask the policy again, with the input a recorded decision was made on (its workload, its
        fleet, the capacity it saw), through the policy's complete reference rule: does the policy
        OPA serves now give the same answer?"""
        from examlops_policy.records import judged_from

        record = self.decision(ident)
        decision = record.decision
        fleet_rev = decision.provenance.fleet_revision
        if fleet_rev is None:
            raise SpecError(f"decision {record.id[:12]} was recorded before decisions kept their fleet; it cannot be replayed", field="ID")
        revision, _ = self.engine.confirm()
        about = self.engine.about(revision)
        doc = self.store.decision_inputs(record.id)
        judged = judged_from(doc.fleet, doc.verdicts, fleet_rev)
        fleet = self.engine.fleet([e.pool for e in judged.fleet.entries], revision, about)
        reference = self.policy.decision(reference_input(decision.workload, fleet, doc.capacities, about))
        diffs = differences(decision, reference)
        recorded = decision.provenance.policy_revision
        same_rev = same_policy(revision, recorded)
        summary = ("the same answer" if not diffs else f"{len(diffs)} difference(s)") + (
            " (the same policy revision)" if same_rev else f" (the decision was made under {recorded[:19]})"
        )
        return Replay(record.id, not diffs, revision, recorded, summary, tuple(diffs))

    def burst_events(self, limit: int = 50) -> list[BurstEvent]:
        """Every burst attempt, allowed or blocked, most recent first."""
        return self.store.burst_events(limit)

    # -- audit --------------------------------------------------------------------------------

    def verify_audit(self, checkpoint: audit.Checkpoint | None = None, key: audit.VerifierKey | None = None) -> audit.VerifyReport:
        from examlops_policy import audit

        report = audit.verify_chain(self.store.audit_rows(), checkpoint, public_key=key)
        return audit.verify_records(report, self.store.audit_rows(), self.store.records_for_audit(), self.store.stored_documents())

    def finops(self, hours: float | None = None) -> list[FinopsRow]:
        """Cost and carbon of placed decisions grouped by device type and region.

        Hours are ``hours`` for every decision when given, else the time each placement held its
        devices (until release, or until now).
        """
        return self.store.finops(hours=hours)


def _check_lease(lease: timedelta) -> timedelta:
    if not isinstance(lease, timedelta) or lease <= timedelta(0) or lease > timedelta(days=366):
        raise SpecError(f"a lease must be a positive duration of at most a year (got {lease!r})", field="lease")
    return lease


def _same_request(record: DecisionRecord, workload: Workload, request_id: str) -> DecisionRecord:
    """The recorded decision for ``request_id``, which must be for the same workload."""
    if workload_input(record.decision.workload) != workload_input(workload):
        raise SpecError(
            f"request id {request_id!r} was used for another workload (decision {record.id[:12]}, {record.decision.workload.name}); "
            "use a new request id",
            field="request_id",
        )
    return record
