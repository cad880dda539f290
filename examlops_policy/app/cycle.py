"""One decision cycle: the only way a decision is made (``Hardware.place``, queue admission).

A cycle runs in four steps, each under what the one before it fixed:

1. **policy snapshot** (``current``): the reviewed policy files read together, tables and revision
   (``_reviewed``), with their packing rules (``Capacities``), their engine (verdicts kept per
   revision), their reader of recorded decisions and their start estimator;
2. **state snapshot** (``snapshot``): every pool with what it can place, as of now (leases that
   ended seen ended);
3. **decide** (``decide``): the policy's verdicts, the candidates' start estimates and the
   selection over the snapshot's capacity, all outside any lock (OPA and the schedulers are asked
   here, never under the write lock);
4. **commit** (``run``): the decision written in one transaction through the store's narrow API
   (``_core.commit.place``), decided again (from step 2) when the pools that matter changed
   meanwhile (``StaleFleet``), at most ``FLEET_ROUNDS`` times.

A workflow shapes what a round writes (``plan``: a ``Write``, or a ``Skip`` with its own result,
writing nothing) and reads what was written (``Written``); the loop itself is written once, here.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Final, Generic, TypeVar

from examlops_policy._core import codec, commit, leases
from examlops_policy._core.engine import Engine, Prepared, RevisionMismatch
from examlops_policy._core.quota import NO_USE, QuotaUse
from examlops_policy._core.records import Reader
from examlops_policy._core.request import Request
from examlops_policy._core.selection import priced
from examlops_policy._core.state import Capacities, Snapshot, Snapshots
from examlops_policy._core.verdicts import PolicyEvaluator
from examlops_policy._core.waiting import Starts
from examlops_policy.app.under import Under
from examlops_policy.errors import StateError
from examlops_policy.model import Decision, Pool, Workload
from examlops_policy.store import StaleFleet, Store
from examlops_policy.tables import Tables

if TYPE_CHECKING:
    from examlops_policy._reviewed import Pinned, PolicySnapshot, Reviewed
    from examlops_policy.app.estimators import Estimators
    from examlops_policy.estimates.gather import StartEstimator
    from examlops_policy.store import DecisionRow
    from examlops_policy.views import DecisionRecord

# What decisions made by this layer are recorded as (their audit entries' source).
SOURCE: Final = "exa-hardware"
# Pools changing under a decision send it back for verdicts; after this many rounds, give up.
FLEET_ROUNDS: Final = 5

T = TypeVar("T")


@dataclass(frozen=True)
class Decided:
    """One round's decision: made under ``under`` over ``snapshot`` from ``prepared`` (the policy's
    verdicts) with the start estimates ``starts``; nothing is written yet."""

    under: Under
    snapshot: Snapshot
    prepared: Prepared
    starts: Starts
    decision: Decision


@dataclass(frozen=True)
class Write:
    """What a round commits: ``decision`` (the round's, or decided again by the workflow) over
    ``snapshot`` (the round's, or one read again), and what ``_core.commit.place`` records with it
    (the id chosen before the write, the request id, the lease, the queue's row, devices a queue's
    reservation withholds, the queued record admitted and the grants preempted for it)."""

    decision: Decision
    snapshot: Snapshot
    ident: str | None = None
    request_id: str | None = None
    lease: timedelta | None = None
    queue: commit.QueueIntent | None = None
    withheld: Mapping[str, int] | None = None
    admit: str | None = None
    preempted: Sequence[str] = ()


@dataclass(frozen=True)
class Skip(Generic[T]):
    """A round that writes nothing: the workflow's own result instead."""

    result: T


@dataclass(frozen=True)
class Written:
    """A committed round: the decision it made, what it wrote, and what the store did."""

    decided: Decided
    write: Write
    done: commit.Committed


class FleetKeptChanging(StateError):
    """The pools changed under every one of ``FLEET_ROUNDS`` rounds: nothing was written."""


class DecisionCycle:
    """The state and the policy of one home, and the decision cycle over them (see the module).

    ``open_store`` and ``open_policy`` are called when the state or the policy is first needed
    (and the policy again after ``close_policy``); ``managed``: whether the policy is this layer's
    to connect again (a local OPA restarts on the files as they are when it serves another
    revision); ``estimators``: who is asked when pools would start a workload."""

    def __init__(
        self,
        home: Path,
        *,
        reviewed: Reviewed | Pinned,
        open_store: Callable[[], Store],
        open_policy: Callable[[], PolicyEvaluator],
        managed: Callable[[PolicyEvaluator], bool],
        estimators: Estimators,
        store: Store | None = None,
        policy: PolicyEvaluator | None = None,
    ) -> None:
        self.home = home
        self._reviewed = reviewed
        self._open_store = open_store
        self._open_policy = open_policy
        self._managed = managed
        self.estimators = estimators
        self._store = store
        self._policy = policy
        self._under: Under | None = None
        self._fleet_revs: dict[tuple[str, int], str] = {}
        self._snapshots = Snapshots()
        self._laid_out: str | None = None
        self._closed = False
        # What this cycle's decisions are recorded as in their audit entries (the placement
        # service names the caller's token while it decides for a request).
        self.source = SOURCE

    # -- 1. the policy snapshot --------------------------------------------------------------

    def current(self, *, force: bool = False) -> Under:
        """What decisions are made under now: the policy snapshot, its packing rules and its engine
        (``force``: the policy files are looked at again first)."""
        snapshot = self._reviewed.current(force=force)
        if self._under is None or self._under.policy is not snapshot:
            self._under = Under(snapshot, Capacities(snapshot.tables))
        return self._under

    @property
    def tables(self) -> Tables:
        return self.current().policy.tables

    @property
    def capacities(self) -> Capacities:
        return self.current().capacities

    @property
    def policy(self) -> PolicyEvaluator:
        """The policy evaluator (opened on first use)."""
        self._check_open()
        if self._policy is None:
            self._policy = self._open_policy()
        return self._policy

    def engine(self, under: Under | None = None) -> Engine:
        """The engine of ``under`` (default: the current policy snapshot)."""
        under = under or self.current()
        if under.engine is None:
            policy = under.policy
            under.engine = Engine(self.policy, policy.tables, reviewed=policy.revision, reviewed_tables=policy.tables_digest)
        return under.engine

    def estimator(self, under: Under | None = None) -> StartEstimator:
        """Who decisions under ``under`` (default: the current policy snapshot) ask when pools
        would start a workload."""
        return self.estimators.of((under or self.current()).policy)

    def again(self, *, local_only: bool = False) -> Under:
        """The policy files looked at again (they may have changed, or been reverted) and a policy
        of this layer's connected again (a local OPA restarts on the files as they are; an external
        one is asked again what it serves), when OPA served another revision. ``local_only``: an
        external OPA (``EXA_OPA_URL``) is not connected again."""
        under = self.current(force=True)
        if self._policy is not None and self._managed(self._policy) and not (local_only and os.environ.get("EXA_OPA_URL")):
            close = getattr(self._policy, "close", None)
            if close is not None:
                close()
        return under

    def prepare(
        self, request: Request | Workload, pools: Sequence[Pool], *, fleet_rev: str | None = None, under: Under | None = None
    ) -> tuple[Under, Prepared]:
        """Confirm and judge under the policy snapshot ``under`` (default: the current one). When
        OPA serves another revision, the files are looked at again and the policy connected again
        (``again``), once."""
        under = under or self.current()
        try:
            return under, self.engine(under).prepare(request, pools, fleet_rev=fleet_rev)
        except RevisionMismatch:
            under = self.again()
            return under, self.engine(under).prepare(request, pools, fleet_rev=fleet_rev)

    def close_policy(self) -> None:
        """Close the policy connection; the next decision opens it (and its snapshot) anew."""
        close = getattr(self._policy, "close", None)
        if close is not None:
            close()
        self._policy = None
        self._under = None

    # -- 2. the state snapshot ---------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise StateError(f"this Hardware (state in {self.home}) was closed; make a new Hardware() to go on")

    def opened_store(self) -> Store:
        """The store as it is found: nothing worked out again (what ``audit verify`` reads)."""
        self._check_open()
        if self._store is None:
            self._store = self._open_store()
        return self._store

    @property
    def store(self) -> Store:
        """The store, its capacities worked out with the current packing rules."""
        store = self.opened_store()
        capacities = self.capacities
        if self._laid_out != capacities.digest:
            # Capacities worked out with other packing rules (or before an upgrade) are redone once;
            # a state opened read-only is read as it is.
            if store.read_only is None:
                commit.ensure_layout(store, capacities, source=SOURCE)
            self._laid_out = capacities.digest
        return store

    @property
    def records(self) -> Reader:
        """Recorded decisions read back (rebuilt) from the store's rows, under the current snapshot."""
        under = self.current()
        if under.reader is None:
            under.reader = Reader(self.store, under.policy.tables)
        return under.reader

    def record(self, row: DecisionRow) -> DecisionRecord:
        """A recorded decision as of now: a placement whose lease ended is released at its end."""
        return self.records.record(leases.as_read(row, self.store.now()))

    def snapshot(self) -> Snapshot:
        """The state as of now: every pool with what it can place, leases that ended seen ended."""
        return self._snapshots.read(self.store, self.capacities)

    def close(self) -> None:
        """Close the store and the policy; using the cycle afterwards raises StateError."""
        self._closed = True
        if self._store is not None:
            self._store.close()
        close = getattr(self._policy, "close", None)
        if close is not None:
            close()

    # -- 3. decide ---------------------------------------------------------------------------

    def fleet_revision(self, snap: Snapshot, under: Under) -> str:
        """The fleet's revision: its pools with their prices (the tables' defaults among them)."""
        key = (under.policy.revision, snap.fleet_version)
        rev = self._fleet_revs.get(key)
        if rev is None:
            if len(self._fleet_revs) > 8:
                self._fleet_revs.clear()
            rev = self._fleet_revs[key] = codec.fleet_revision(codec.fleet_document(priced(snap.pools, under.policy.tables)))
        return rev

    def decide(self, request: Request, snap: Snapshot | None = None, under: Under | None = None) -> Decided:
        """The policy's verdicts, then the candidates' start estimates (both outside any lock),
        then selection over the snapshot's capacity (default: the state as of now), all under one
        policy snapshot (default: the current one; another only when OPA serves another revision)."""
        from examlops_policy.app.estimating import starts_for

        under = under or self.current()
        snap = snap or self.snapshot()
        under, prepared = self.prepare(request, snap.pools, fleet_rev=self.fleet_revision(snap, under), under=under)
        if prepared.judged.fleet.revision != self.fleet_revision(snap, under):
            prepared = self.engine(under).prepare(request, snap.pools, fleet_rev=self.fleet_revision(snap, under))
        tables = under.policy.tables
        # What the projects hold, when a quota counts it (read again under the write lock).
        needs = prepared.judged.quota_needs
        use = commit.read_quota(self.store, needs, tables.unassigned, commit.epoch_of(self.store.now())) if not needs.empty else NO_USE
        starts = starts_for(self.estimator(under), prepared, snap.capacities, tables, snap.capacity_digest, quota=use)
        decision = prepared.decide(snap.capacities, tables, capacities_digest=snap.capacity_digest, starts=starts, quota=use)
        return Decided(under, snap, prepared, starts, decision)

    def withholding(self, decided: Decided, withheld: Mapping[str, int]) -> Decision:
        """The round's placement decided again as if ``withheld`` (pool -> whole devices) were held,
        with the same estimates and what the projects held then."""
        seen = commit.withhold(decided.snapshot.capacities, decided.snapshot.pools, withheld)
        used = QuotaUse.from_json(decided.decision.provenance.quota_use)
        tables = decided.under.policy.tables
        return decided.prepared.decide(seen, tables, capacities_digest=codec.capacity_digest(seen), starts=decided.starts, quota=used)

    # -- 4. commit, decided again while the fleet changes -------------------------------------

    def run(self, request: Request, plan: Callable[[Decided], Write | Skip[T]], *, name: str, under: Under | None = None) -> Written | Skip[T]:
        """Decide and commit (the module's steps 2 to 4): each round ``plan`` says what to write of
        its decision (or skips, writing nothing); a round whose fleet changed before the write is
        decided again. FleetKeptChanging after ``FLEET_ROUNDS`` rounds (``name``: the workload)."""
        under = under or self.current()
        for _ in range(FLEET_ROUNDS):
            decided = self.decide(request, self.snapshot(), under)
            under = decided.under
            step = plan(decided)
            if isinstance(step, Skip):
                return step
            try:
                # A lease is counted from the commit that records the placement.
                done = commit.place(
                    self.store, decided.prepared, step.decision, step.snapshot, under.capacities, source=self.source,
                    request_id=step.request_id, lease=step.lease, starts=decided.starts, queue=step.queue, ident=step.ident,
                    withheld=step.withheld, admit=step.admit, preempted=step.preempted,
                )  # fmt: skip
            except StaleFleet:
                continue
            if done.after is not None:
                # Only the chosen pool changed: the next snapshot starts from this one.
                self._snapshots.advance(step.snapshot.base or step.snapshot, *done.after)
            return Written(decided, step, done)
        raise FleetKeptChanging(f"pools kept changing while {name} was being placed ({FLEET_ROUNDS} rounds); nothing was placed")

