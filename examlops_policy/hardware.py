"""The orchestrator: state store + policy engine + decision core, as the CLI and library use it.

``Hardware`` wires the adapters (SQLite or PostgreSQL state, a local or remote OPA, the reviewed
policy files) around the pure decision core (``_core``). A placement is made under one snapshot of
the reviewed policy (tables and revision together): the policy's verdicts and the selection come
first, outside any lock, on a snapshot of the state; then the core commits it through the store's
narrow transaction API (reservation, devices, decision, burst event and audit entries in one
transaction), re-running the selection only when the pools that matter changed meanwhile.
"""

from __future__ import annotations

import dataclasses
import math
import uuid
from dataclasses import dataclass
import os
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Final, TextIO, cast

from examlops_policy import quantities
from examlops_policy._core import codec, commit, leases
from examlops_policy._core.engine import Engine, Prepared, RevisionMismatch, differences, reference_input, same_policy
from examlops_policy._core.records import DecisionInputs, Reader, judged_from
from examlops_policy._core.request import Request
from examlops_policy._core.state import Capacities, Snapshot, Snapshots, state_of
from examlops_policy.errors import ExaError, NotFoundError, PolicyUnavailable, SpecError, StateError
from examlops_policy.model import Decision, JSONObject, NodeAllocation, Placement, Pool, PoolState, Workload
from examlops_policy._core.packing import PoolLayout, describe, device_layouts
from examlops_policy._core.selection import effective_cost, priced
from examlops_policy._policy import Confirmation, OpaPolicy, PolicyEvaluator
from examlops_policy.store import DecisionRow, StaleFleet, Store
from examlops_policy.store.api import NodeUsageRow
from examlops_policy._reviewed import Pinned, PolicySnapshot, Reviewed
from examlops_policy.tables import Tables, policy_dir
from examlops_policy._core.quota import NO_USE, QuotaUse
from examlops_policy._core.verdicts import About, Answer
from examlops_policy._core.waiting import Starts
from examlops_policy.views import (
    AdmissionReport,
    BurstEvent,
    Cancelled,
    DecisionPage,
    DecisionRecord,
    DiscoveryResult,
    EstimateError,
    FinopsReport,
    JobReport,
    ModelsCost,
    PoolChange,
    PoolDetail,
    Portability,
    PoolView,
    QueueListing,
    QuotaRow,
    ReconcileReport,
    ReleaseReport,
    Replay,
    Submission,
    Submit,
    estimate_error_s,
    estimate_errors,
)

if TYPE_CHECKING:  # the crypto, OPA-process and report stacks load only when a command needs them
    from examlops_policy import audit
    from examlops_policy.estimates.gather import StartEstimator
    from examlops_policy.estimates.kubernetes import KubernetesEstimator, PendingSource
    from examlops_policy.estimates.slurm import SlurmEstimator
    from examlops_policy.executors.gres import GresTable
    from examlops_policy._impact import Impact
    from examlops_policy._policy_docs import DocsCheck
    from examlops_policy._policy_tools import LintReport, TestReport
    from examlops_policy.opa.revisions import PolicyStatus
    from examlops_policy.catalog import CatalogImport
    from examlops_policy.opa import OpaConnection, OpaStatus, StopReport
    from examlops_policy.opa.bundle import Bundle
    from examlops_policy.report import ReportData
    from examlops_policy._sim.simulate import Simulation
    from examlops_policy._sim.work import WorkSimulation

DEFAULT_HOME: Final = Path("~/.local/share/examlops")
SOURCE: Final = "exa-hardware"
# Pools changing under a placement send it back for verdicts; after this many rounds, give up.
FLEET_ROUNDS: Final = 5
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


class Hardware:
    """Pools, placements and their records, as ``exa hardware`` offers them."""

    def __init__(
        self,
        home: Path | str | None = None,
        *,
        store: Store | None = None,
        policy: PolicyEvaluator | None = None,
        tables: Tables | None = None,
        estimator: StartEstimator | None = None,
    ) -> None:
        self.home = default_home() if home is None else resolve_home(home)
        self._store = store
        self._policy = policy
        # Who is asked when pools would start a workload (None: Slurm where a pool names a
        # partition, the provisioning table of the policy snapshot for cloud pools, the free
        # capacity for the rest; a Kubernetes cluster only when given: ``ask_kubernetes``).
        self._estimator = estimator
        self._slurm: SlurmEstimator | None = None
        self._kubernetes: KubernetesEstimator | None = None
        self._own_capacity = False  # estimate_from_own_capacity
        self._closing: list[Callable[[], None]] = []  # what this Hardware opened beside its store and policy
        # The reviewed policy a decision is made under: its tables and their revision, read together
        # and noticed when the files change (tables passed in are pinned).
        self._reviewed: Reviewed | Pinned = Pinned(tables) if tables is not None else Reviewed()
        self._under: _Under | None = None
        self._fleet_revs: dict[tuple[str, int], str] = {}
        self._snapshots = Snapshots()
        self._laid_out: str | None = None
        self._closed = False

    def _open(self) -> None:
        if self._closed:
            raise StateError(f"this Hardware (state in {self.home}) was closed; make a new Hardware() to go on")

    def _current(self, *, force: bool = False) -> _Under:
        """What decisions are made under now: the policy snapshot, its packing rules and its engine."""
        snapshot = self._reviewed.current(force=force)
        if self._under is None or self._under.policy is not snapshot:
            self._under = _Under(snapshot, Capacities(snapshot.tables))
        return self._under

    @property
    def tables(self) -> Tables:
        """The reviewed tables (of the policy snapshot decisions are made under now)."""
        return self._current().policy.tables

    def _opened_store(self) -> Store:
        """The store as it is found: nothing worked out again (what ``audit verify`` reads)."""
        self._open()
        if self._store is None:
            self._store = open_store(self.home)
        return self._store

    @property
    def store(self) -> Store:
        self._opened_store()
        assert self._store is not None
        capacities = self._current().capacities
        if self._laid_out != capacities.digest:
            # Capacities worked out with other packing rules (or before an upgrade) are redone once;
            # a state opened read-only is read as it is.
            if self._store.read_only is None:
                commit.ensure_layout(self._store, capacities, source=SOURCE)
            self._laid_out = capacities.digest
        return self._store

    @property
    def records(self) -> Reader:
        """Recorded decisions read back (rebuilt) from the store's rows."""
        under = self._current()
        if under.reader is None:
            under.reader = Reader(self.store, under.policy.tables)
        return under.reader

    @property
    def _capacities(self) -> Capacities:
        return self._current().capacities

    def _snapshot(self) -> Snapshot:
        """The state as of now: every pool with what it can place, leases that ended seen ended."""
        return self._snapshots.read(self.store, self._capacities)

    def _record(self, row: DecisionRow) -> DecisionRecord:
        """A recorded decision as of now: a placement whose lease ended is released at its end."""
        return self.records.record(leases.as_read(row, self.store.now()))

    @property
    def policy(self) -> PolicyEvaluator:
        self._open()
        if self._policy is None:
            self._policy = default_policy(self.home)
        return self._policy

    @property
    def engine(self) -> Engine:
        """The engine of the policy snapshot decisions are made under now (its verdicts are kept
        per revision)."""
        return self._engine_of(self._current())

    def _engine_of(self, under: _Under) -> Engine:
        if under.engine is None:
            under.engine = Engine(self.policy, under.policy.tables, reviewed=under.policy.revision, reviewed_tables=under.policy.tables_digest)
        return under.engine

    def estimator(self) -> StartEstimator:
        """Who decisions ask when pools would start a workload (under the current policy snapshot)."""
        return self._estimator_of(self._current())

    def _estimator_of(self, under: _Under) -> StartEstimator:
        if self._estimator is not None:
            return self._estimator
        if under.estimator is None:
            from examlops_policy.estimates.gather import StartEstimator
            from examlops_policy.estimates.table import ProvisioningTable

            root = under.policy.root
            under.estimator = StartEstimator(
                slurm=self._slurm_estimator, kubernetes=self._kubernetes, table=ProvisioningTable.from_tables(under.policy.tables),
                gres=lambda: _gres_table(root), own_capacity=self._own_capacity,
            )  # fmt: skip
        return under.estimator

    def ask_kubernetes(self, cluster: PendingSource | None = None, *, kubeconfig: str | None = None, context: str | None = None) -> None:
        """From now on, ask a Kubernetes cluster when the cloud pools it serves would start a
        workload: those that list their nodes by name, as ``discover kubernetes`` registers them.
        Now when the grant fits, else no estimate, with the pods that wait there in front of it
        (``estimates.kubernetes``); a cluster that does not answer gives no estimate; never the
        provisioning table. Slurm pools and the rest are asked as before.

        ``cluster``: a ``KubernetesCluster`` (or anything with ``pending_pods()``), else the one
        ``kubeconfig`` and ``context`` name (default: ``$KUBECONFIG``, else ``~/.kube/config``, and
        its current context), connected now (the file is read; the server is first asked by a
        decision) and closed with this Hardware. SpecError for a kubeconfig that cannot be used;
        StateError when this Hardware was given an estimator of its own (give it the cluster)."""
        from examlops_policy.estimates.kubernetes import KubernetesEstimator

        if self._estimator is not None:
            raise StateError("this Hardware was given its own start estimator: give that estimator the Kubernetes cluster instead")
        if cluster is None:
            from examlops_policy.executors.kubernetes_api import KubernetesCluster

            connected = KubernetesCluster.connect(kubeconfig, context)
            self._closing.append(connected.close)
            cluster = connected
        self._kubernetes = KubernetesEstimator(cluster)
        if self._under is not None:
            self._under.estimator = None

    def estimate_from_own_capacity(self, on: bool = True) -> None:
        """From now on (off by default), where Slurm or a Kubernetes cluster gives no start estimate
        (it cannot be asked, or does not say) and the grant fits the pool's free capacity by this
        layer's own account, take "now" as the estimate (source ``now``; its detail names the
        scheduler's reason). The layer does not see work it did not place, so this is an
        assumption: for a scheduler that is down or not installed here while its pools are known to
        be this layer's. StateError when this Hardware was given an estimator of its own (set
        ``own_capacity`` on it instead)."""
        if self._estimator is not None:
            raise StateError("this Hardware was given its own start estimator: set own_capacity on that estimator instead")
        self._own_capacity = on
        if self._under is not None:
            self._under.estimator = None

    def _slurm_estimator(self) -> SlurmEstimator:
        """The one Slurm estimator of this object: its answers are cached across policy snapshots
        (made when a Slurm pool is first asked about)."""
        if self._slurm is None:
            from examlops_policy.estimates.slurm import SlurmEstimator

            self._slurm = SlurmEstimator()
        return self._slurm

    def _prepare(
        self, request: Request | Workload, pools: Sequence[Pool], *, fleet_rev: str | None = None, under: _Under | None = None
    ) -> tuple[_Under, Prepared]:
        """Confirm and judge under the policy snapshot ``under`` (default: the current one). When
        OPA serves another revision, the files are looked at again (they may have changed, or been
        reverted) and a local OPA is found again (it restarts on the files as they are), once."""
        under = under or self._current()
        try:
            return under, self._engine_of(under).prepare(request, pools, fleet_rev=fleet_rev)
        except RevisionMismatch:
            under = self._current(force=True)
            if isinstance(self._policy, ManagedPolicy):
                # Found again: a local OPA restarts on the files as they are; an external one is
                # asked again what it serves (its tables' digest is proven on each connection).
                self._policy.close()
            return under, self._engine_of(under).prepare(request, pools, fleet_rev=fleet_rev)

    def close(self) -> None:
        """Close the store and the policy connection; using this Hardware afterwards raises
        StateError. Closing twice is harmless."""
        self._closed = True
        if self._store is not None:
            self._store.close()
        close = getattr(self._policy, "close", None)
        if close is not None:
            close()
        while self._closing:
            self._closing.pop()()

    # -- pools ------------------------------------------------------------------------------

    def add_pool(self, pool: Pool) -> PoolChange:
        """Register a new pool; SpecError for a name already registered or facts the tables refuse."""
        from examlops_policy import specs

        specs.check_pool_facts(specs.check_registrable(pool), self.tables)
        return commit.apply_pools(self.store, self._capacities, [pool], replace=False, source=SOURCE)[0]

    def apply(self, pools: Sequence[Pool], *, prune: bool = False, dry_run: bool = False) -> list[PoolChange]:
        """Register or update pools (idempotent). A pool that live decisions hold keeps its
        accelerator, model, target, region and partitioning, and no device they hold: SpecError.
        A registered pool keeps its drained state. ``prune``: registered pools not among ``pools``
        are removed, as ``remove_pool`` removes them (all or nothing). ``dry_run``: what would
        change, refusals included, with nothing written. A change offers the queue the capacity it
        may have added (``admit``)."""
        from examlops_policy import specs

        for pool in pools:
            specs.check_pool_facts(specs.check_registrable(pool), self.tables)
        changes = commit.apply_pools(self.store, self._capacities, pools, replace=True, source=SOURCE, prune=prune, dry_run=dry_run)
        if not dry_run and any(c.action != "unchanged" for c in changes):
            self._freed()  # devices added may take waiting work (what it admits is audited)
        return changes

    def apply_file(self, path: Path, *, prune: bool = False, dry_run: bool = False) -> list[PoolChange]:
        """``apply`` the pools of a reviewed YAML file (``pools: [...]``)."""
        from examlops_policy.specs import pools_from_file

        return self.apply(pools_from_file(path, self.tables), prune=prune, dry_run=dry_run)

    def drain(self, name: str, *, dry_run: bool = False) -> PoolChange:
        """Drain a pool: it takes no new grants (the policy denies it, ``pool_drained``, not_now),
        and the grants it holds are kept. Audited; ``unchanged`` when it is drained already.
        NotFoundError for an unknown pool; ``dry_run``: what would change, nothing written."""
        return commit.set_drained(self.store, self._capacities, name, True, source=SOURCE, dry_run=dry_run)

    def undrain(self, name: str, *, dry_run: bool = False) -> PoolChange:
        """Let a drained pool take new grants again (a pending removal is cancelled). Audited. The
        queue is offered the capacity it brings back (``admit``)."""
        change = commit.set_drained(self.store, self._capacities, name, False, source=SOURCE, dry_run=dry_run)
        if not dry_run and change.action != "unchanged":
            self._freed()  # waiting work may fit there again (what it admits is audited)
        return change

    def remove_pool(self, name: str, *, dry_run: bool = False) -> PoolChange:
        """Remove a pool from the fleet (its decisions stay readable). Without live grants it goes
        now; drained, with live grants, it goes when the last of them ends (``removal_pending``);
        not drained, with live grants, SpecError naming them (nothing written). Audited.
        NotFoundError for an unknown pool; ``dry_run``: what would change, nothing written."""
        return commit.remove_pools(self.store, self._capacities, [name], source=SOURCE, dry_run=dry_run)[0]

    def pools(self) -> list[PoolState]:
        """Every pool with what it can still place, cheapest first (then by name)."""
        return sorted(self._snapshot().states, key=lambda s: (effective_cost(s.pool, self.tables), s.pool.name))

    def pool_views(self) -> list[PoolView]:
        """``pools()`` as people look at them: what is placeable, price and carbon per device-hour."""
        return [self._view(s) for s in self.pools()]

    def _view(self, state: PoolState) -> PoolView:
        from examlops_policy.accounting import carbon_basis, carbon_method_text

        pool = state.pool
        layout = self._capacities.layout(pool)
        carbon = carbon_basis(pool, self.tables)
        return PoolView(
            state=state,
            packing=layout.kind,
            placeable=placeable_text(state, layout),
            cost_per_hour=effective_cost(pool, self.tables),
            cost_default=pool.cost_per_hour is None,
            carbon_per_hour=carbon.per_hour,
            carbon_default=pool.carbon_factor is None,
            carbon_method=carbon.method,
            carbon_method_text=carbon_method_text(carbon.method, self.tables),
        )

    def pool(self, name: str) -> PoolDetail:
        """One pool device by device (a node-tracked pool node by node): what its live grants
        hold (a grant whose lease ended holds nothing), and on its nodes what the pools sharing
        them and schedulers hold. NotFoundError for an unknown one."""
        snap = self._snapshot()
        ended = snap.ended
        row, held = self.store.pool_row(name)
        state = state_of(row)
        capacities = self._capacities
        if ended and any(h.decision_id in ended for h in held):
            held = [h for h in held if h.decision_id not in ended]
            if not state.pool.node_tracked:
                capacity, free = capacities.of(state.pool, held, state.held_outside)
                state = PoolState(state.pool, free, capacity, state.held_outside, state.removing)
        holdings = [h.holding for h in held]
        layout = capacities.layout(state.pool)
        if not state.pool.node_tracked:
            return PoolDetail(self._view(state), tuple(holdings), tuple(device_layouts(layout, holdings)))
        from examlops_policy._core import rooms

        sharing = capacities.sharing(snap.fleet_version, snap.pools)
        rows, grants, usage = self.store.node_rows(sharing.group(name))
        if ended:
            # What the pools on its nodes hold: grants whose lease ended hold nothing there either.
            rows = [r for r in rows if r.decision_id not in ended]
            grants = [g for g in grants if g.decision_id not in ended]
        room = capacities.rooms_of(state.pool, rows, grants, usage, sharing.devices(name), sharing.other_mode(name))
        if ended:
            capacity, free = rooms.summary(room)
            state = PoolState(state.pool, free, capacity, state.held_outside, state.removing)
        return PoolDetail(self._view(state), tuple(holdings), (), rooms.details(room))

    # -- decisions --------------------------------------------------------------------------

    def _fleet_rev(self, snap: Snapshot, under: _Under) -> str:
        """The fleet's revision: its pools with their prices (the tables' defaults among them)."""
        key = (under.policy.revision, snap.fleet_version)
        rev = self._fleet_revs.get(key)
        if rev is None:
            if len(self._fleet_revs) > 8:
                self._fleet_revs.clear()
            rev = self._fleet_revs[key] = codec.fleet_revision(codec.fleet_document(priced(snap.pools, under.policy.tables)))
        return rev

    def _decide(self, request: Request, snap: Snapshot, under: _Under) -> tuple[_Under, Prepared, Starts, Decision]:
        """The policy's verdicts, then the candidates' start estimates (both outside any lock),
        then selection over the snapshot's capacity, all under one policy snapshot (another one
        only when OPA serves another revision)."""
        from examlops_policy._estimating import starts_for

        under, prepared = self._prepare(request, snap.pools, fleet_rev=self._fleet_rev(snap, under), under=under)
        if prepared.judged.fleet.revision != self._fleet_rev(snap, under):
            prepared = self._engine_of(under).prepare(request, snap.pools, fleet_rev=self._fleet_rev(snap, under))
        tables = under.policy.tables
        # What the projects hold, when a quota counts it (read again under the write lock).
        needs = prepared.judged.quota_needs
        use = commit.read_quota(self.store, needs, tables.unassigned, commit.epoch_of(self.store.now())) if not needs.empty else NO_USE
        starts = starts_for(self._estimator_of(under), prepared, snap.capacities, tables, snap.capacity_digest, quota=use)
        decided = prepared.decide(snap.capacities, tables, capacities_digest=snap.capacity_digest, starts=starts, quota=use)
        return under, prepared, starts, decided

    def place(
        self,
        workload: Workload,
        *,
        request_id: str | None = None,
        lease: timedelta | None = None,
        queue: bool = False,
        submission: Submit | None = None,
        queued_at: str | None = None,
        preempted_from: str | None = None,
    ) -> DecisionRecord:
        """Decide and record: devices, decision, burst event and audit entries, atomically.

        ``request_id`` makes the call idempotent: a retry with the same key returns the decision
        recorded the first time and reserves nothing more (a retry after the placement was released,
        or its lease ended, says so: ``released_at``). ``lease``: counted from the commit; a
        placement neither submitted to a scheduler nor renewed before it ends holds nothing from
        then on (every read sees it ended; the next write releases it, stamped with the lease's end,
        audited as ``expired``). ``queue``: when every pool that could take the workload is only
        full (the policy's ``no_capacity``), it waits in the queue instead (outcome ``queued``, its
        record's ``queue`` says its place) and is placed when capacity frees (``admit``); work of a
        class that may preempt tries its preemption at once (its record's ``queue`` then says it was
        admitted, or why it takes no grant); ``submission``: how it is submitted once placed (now,
        when it fits at once: ExecutorError, its placement kept, when the scheduler refuses). A
        workload that can never run is rejected as ever. Raises SpecError, PolicyUnavailable/PolicyError (nothing placed), StateError.
        """
        from examlops_policy import _queueing, specs

        under = self._current()
        specs.check_workload_facts(workload, under.policy.tables)
        if submission is not None and not queue:
            raise SpecError("a submission once admitted is for a queued placement: add --queue (queue=True)", field="submission")
        request = Request(workload)
        if request_id is not None:
            specs.check_request_id(request_id)
            found = self.store.request_row(request_id)
            if found is not None:
                return self._with_queue(_same_request(self._record(found), request, request_id))
        if lease is not None:
            _check_lease(lease)
        for _ in range(FLEET_ROUNDS):
            snap = self._snapshot()
            under, prepared, starts, decided = self._decide(request, snap, under)
            ident = uuid.uuid4().hex
            waits = None
            withheld: dict[str, int] = {}
            if queue and isinstance(decided, Placement) and preempted_from is None and self.store.queue_waiting():
                # Work that may wait does not take what the queue reserves for a workload before it
                # (backfill): decided again as if the reserved devices were held.
                withheld = _queueing.withheld_for(self, workload, decided, ident, lease)
                if withheld:
                    seen = commit.withhold(snap.capacities, snap.pools, withheld)
                    used = QuotaUse.from_json(decided.provenance.quota_use)
                    tables = under.policy.tables
                    decided = prepared.decide(seen, tables, capacities_digest=codec.capacity_digest(seen), starts=starts, quota=used)
            if queue:
                # Its place in the order is asked before the write (when it is only full now; one
                # found only full under the lock is queued all the same, its place asked later).
                waits = _queueing.intent(
                    self, workload, decided if commit.queueable(decided) else None, ident, lease=lease, submission=submission,
                    queued_at=queued_at, preempted_from=preempted_from,
                )  # fmt: skip
            try:
                # The lease is counted from the commit that records the placement.
                done = commit.place(
                    self.store, prepared, decided, snap, under.capacities, source=SOURCE, request_id=request_id, lease=lease,
                    starts=starts, queue=waits, ident=ident, withheld=withheld or None,
                )  # fmt: skip
            except StaleFleet:
                continue
            if done.record is None and done.not_admitted == "replaced":
                assert done.earlier is not None  # the victim was placed or queued again already: that decision
                return self._with_queue(self._record(done.earlier))
            if done.record is None:
                assert done.earlier is not None and request_id is not None
                return self._with_queue(_same_request(self._record(done.earlier), request, request_id))
            if done.after is not None:
                self._snapshots.advance(snap.base or snap, *done.after)
            if done.record.decision.outcome == "queued":
                # Urgent work (a class that may preempt) takes its grants now, not at the next pass.
                _queueing.preempt_now(self, done.record.id)
            if submission is not None and isinstance(done.record.decision, Placement):
                # It fitted at once: submitted now, as admission would have (not left unsubmitted).
                return self._with_queue(_queueing.submit_placed(self, done.record, submission))
            return self._with_queue(done.record)
        raise StateError(f"pools kept changing while {workload.name} was being placed ({FLEET_ROUNDS} rounds); nothing was placed")

    def _with_queue(self, record: DecisionRecord) -> DecisionRecord:
        from examlops_policy import _queueing

        return _queueing.record_entry(self, record)

    def burst(self, workload: Workload, *, request_id: str | None = None, lease: timedelta | None = None) -> DecisionRecord:
        """An explicit burst to cloud (target cloud, bursting allowed), recorded as ``place``."""
        return self.place(as_burst(workload), request_id=request_id, lease=lease)

    def portable(self, engine: str, accelerator: str) -> Portability:
        """Whether ``engine`` can run on ``accelerator`` (the policy's portability check): the
        accelerator's backend, and the policy's reason when it cannot. SpecError for an unknown
        engine or accelerator; PolicyUnavailable without a verdict."""
        under, prepared = self._prepare(Workload("portability-check", accelerator=accelerator, engine=engine), [])
        rejection = prepared.judged.workload.rejection
        # With no pools, the only rejection that speaks of the workload itself is portability's.
        reason = rejection if rejection is not None and rejection.code == "backend_unsupported" else None
        backend = str(cast(JSONObject, under.policy.tables.accelerators[accelerator])["backend"])
        return Portability(engine, accelerator, backend, reason)

    def what_if(self, workload: Workload, pools: Sequence[Pool] | None = None, *, where: bool = False) -> Decision:
        """Decide without recording or reserving: over ``pools`` (nothing held on them) or the
        current state. ``where``: a placement on a pool of nodes also says the node(s) and devices
        it would get now (its nodes are read; a recorded placement's are chosen again when it is
        committed)."""
        from examlops_policy import specs

        under = self._current()
        specs.check_workload_facts(workload, under.policy.tables)
        if pools is None:
            snap = self._snapshot()
            decided = self._decide(Request(workload), snap, under)[3]
            return self._nodes_of(decided, under.capacities, snap) if where else decided
        from examlops_policy._estimating import starts_for

        states = []
        for pool in pools:
            specs.check_pool_facts(pool, under.policy.tables)
            states.append(under.capacities.empty(pool))
        ordered = sorted(states, key=lambda s: s.pool.name)
        under, prepared = self._prepare(workload, [s.pool for s in ordered], under=under)
        capacities, tables = [s.capacity for s in ordered], under.policy.tables
        decided = prepared.decide(capacities, tables, starts=starts_for(self._estimator_of(under), prepared, capacities, tables))
        if where and isinstance(decided, Placement):
            pool = next(s.pool for s in ordered if s.pool.name == decided.pool)
            if pool.node_tracked:
                from examlops_policy._core import rooms

                return _with_nodes(decided, rooms.choose(under.capacities.rooms_of(pool, []), decided.grant, decided.workload))
        return decided

    def _nodes_of(self, decided: Decision, capacities: Capacities, snap: Snapshot) -> Decision:
        """A placement on a pool of nodes with the node(s) and devices it would get now (what a
        recorded one gets is chosen again, under the write lock, when it is committed); a grant
        whose lease ended holds nothing there."""
        if not isinstance(decided, Placement):
            return decided
        pool = snap.states[snap.index[decided.pool]].pool
        if not pool.node_tracked:
            return decided
        from examlops_policy._core import rooms

        sharing = capacities.sharing(snap.fleet_version, snap.pools)
        rows, grants, usage = self.store.node_rows(sharing.group(pool.name))
        if snap.ended:
            rows = [r for r in rows if r.decision_id not in snap.ended]
            grants = [g for g in grants if g.decision_id not in snap.ended]
        room = capacities.rooms_of(pool, rows, grants, usage, sharing.devices(pool.name), sharing.other_mode(pool.name))
        return _with_nodes(decided, rooms.choose(room, decided.grant, decided.workload))

    def decisions(self, limit: int = 20) -> list[DecisionRecord]:
        """The most recent decisions, each in full (rebuilt from its record)."""
        now = self.store.now()
        return [self.records.record(leases.as_read(row, now)) for row in self.store.decision_rows(limit)]

    def decision_page(self, *, limit: int = 20, since: str | None = None, until: str | None = None, cursor: str | None = None) -> DecisionPage:
        """A page of decisions from their columns, newest first (``since``/``until``: ISO 8601 UTC
        bounds on when they were made; ``cursor``: the previous page's). SpecError for a ``limit``
        that is not a whole number of at least 1, as ``exa hardware decisions --limit``."""
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise SpecError(f"must be a whole number of at least 1 (got {limit!r})", field="limit")
        before = None
        if cursor is not None:
            created, _, ident = cursor.partition("/")
            if not created or not ident:
                raise SpecError("a cursor is CREATED_AT/ID, as the previous page gave it", field="cursor")
            before = (created, ident)
        start, end = _period(since, until)
        now = self.store.now()
        rows = [
            dataclasses.replace(r, lease_ended=leases.by_lease(r.released_at, r.lease_expires_at, r.job_id))
            for r in (leases.as_read(r, now) for r in self.store.decision_summaries(limit=limit, since=start, until=end, before=before))
        ]
        more = f"{rows[-1].created_at}/{rows[-1].id}" if len(rows) == limit and rows else None
        return DecisionPage(tuple(rows), more)

    def decision(self, ident: str) -> DecisionRecord:
        """A decision by id or unique id prefix, rebuilt with every pool's verdict as it was made
        (``released_at``: its release, or the end of a lease that ended); a queued one with its
        place in the queue (``queue``)."""
        return self._with_queue(self._record(self.store.decision_row(ident)))

    def release(self, ident: str, *, kubeconfig: str | None = None, context: str | None = None) -> ReleaseReport:
        """Free what a placement holds; a Kubernetes Job it was submitted as is deleted first
        (only the Job of the recorded uid, through ``kubeconfig``/``context`` as for submit). A
        second release writes nothing and says when the first one was. ExecutorError when the
        Job cannot be deleted (nothing released)."""
        record = self.decision(ident)
        deleted = None
        if record.released_at is None and record.scheduler == "kubernetes" and record.job_id and record.job_state != "missing":
            from examlops_policy.executors.kubernetes_api import KubernetesCluster

            namespace, _, name = record.job_id.partition("/")
            with KubernetesCluster.connect(kubeconfig, context) as cluster:
                deleted = cluster.delete_job(namespace, name, uid=record.job_uid)
        pool = getattr(record.decision, "pool", None)
        pending = pool is not None and any(s.pool.name == pool and s.removing is not None for s in self._snapshot().states)
        row, already = commit.release(self.store, self._capacities, record.id, source=SOURCE)
        removed = pending and pool not in self._snapshot().index
        admitted, problem = (None, None) if already else self._freed()
        return ReleaseReport(self.records.record(row), already, deleted, removed, admitted, problem)

    # -- the queue --------------------------------------------------------------------------

    def _freed(self) -> tuple[AdmissionReport | None, str | None]:
        """Capacity freed (a release, devices added): the queue is offered it now, in the same
        process. The write that freed it stands whatever admission finds: an error here is said
        (second value), not raised. One indexed read when nothing waits."""
        try:
            if not self.store.queue_waiting():
                return None, None
            return self.admit(), None
        except ExaError as exc:
            return None, f"{type(exc).__name__}: {exc}"

    def queue(self, *, every: bool = False) -> QueueListing:
        """The waiting workloads in the order the policy offers them capacity (position, project,
        priority, age, what each waits for, the order's reason); with ``every``, the admitted,
        cancelled and failed ones too. PolicyUnavailable when the order cannot be asked."""
        from examlops_policy import _queueing

        return _queueing.listing(self, every=every)

    def admit(self, *, limit: int | None = None) -> AdmissionReport:
        """Offer the queue capacity now (one admission pass): each waiting workload, in the
        policy's order, judged again under the revision served now and placed when it fits (at
        most ``limit``); submitted when it was queued with a submission. Nothing is admitted twice,
        whatever runs at once."""
        from examlops_policy import _queueing

        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise SpecError(f"must be a whole number of at least 1 (got {limit!r})", field="max")
        return _queueing.admit(self, limit=limit)

    def cancel(self, ident: str) -> Cancelled:
        """Take a waiting workload out of the queue (by its queued decision's id or a unique prefix),
        audited; a second cancel writes nothing. NotFoundError for no such queued workload, SpecError
        for one already admitted (release its placement) or failed."""
        from examlops_policy import _queueing

        return _queueing.cancel(self, ident)

    def reconcile(
        self, *, slurm: bool | None = None, kubernetes: Mapping[str, str | None] | None = None, admit: bool = True
    ) -> tuple[ReconcileReport, AdmissionReport | None]:
        """What the schedulers say of this layer's jobs and their nodes, written back (see
        ``_reconcile``): jobs that ended release their grants (end state, start and end times), jobs
        that run get their actual start, nodes not taking work leave their pools' capacity (and come
        back). Each change one audited transaction; a run with no change writes nothing. With
        ``admit``, capacity freed is offered to the queue at once. A scheduler that could not be read
        is in ``ReconcileReport.unreadable`` (the others' changes are written)."""
        from examlops_policy import _reconcile

        report = _reconcile.reconcile(self, slurm=slurm, kubernetes=kubernetes)
        admitted = None
        if admit and _reconcile.freed(report):
            admitted, _ = self._freed()
        return report, admitted

    def serve(
        self,
        *,
        interval_s: float,
        slurm: bool | None = None,
        kubernetes: Mapping[str, str | None] | None = None,
        out: TextIO | None = None,
        once: bool = False,
    ) -> int:
        """``exa hardware serve``: reconcile, expire leases and admit every ``interval_s`` until
        SIGTERM or SIGINT (``once``: one step), logging to ``out`` (see ``_serve``). This Hardware
        is closed first: the loop opens its own on the same home (and again after a fault). The
        exit status: 0, or 5 when the policy cannot be served at start. SpecError (nothing closed)
        for an interval shorter than ``_serve.MIN_INTERVAL_S`` (1 s)."""
        from examlops_policy._serve import Server, check_interval

        check_interval(interval_s)
        home = self.home
        self.close()
        server = Server(lambda: Hardware(home), interval_s=interval_s, slurm=slurm, kubernetes=kubernetes, out=out)
        return server.run(home, once=once)

    def expire_leases(self) -> list[str]:
        """Release the placements whose lease ended (audited as ``expired``): their ids."""
        return commit.expire_leases(self.store, self._capacities, source=SOURCE)

    def queue_wakes_at(self) -> datetime | None:
        """While work waits in the queue, when capacity next frees by itself: the end of the first
        lease of a live placement not yet submitted, an aware UTC datetime by the store's clock
        (None: nothing waits, or no placement has a lease). What ``serve`` wakes for."""
        if not self.store.queue_waiting():
            return None
        ends = self.store.next_lease_end()
        return None if ends is None else datetime.fromtimestamp(commit.epoch_of(ends), timezone.utc)

    def quotas(self) -> list[QuotaRow]:
        """Use against quota per project and accelerator class (quotas.yaml), worded by the policy."""
        from examlops_policy import _queueing

        return _queueing.quotas(self)

    def renew(self, ident: str, lease: timedelta) -> DecisionRecord:
        """Move a live placement's lease end to ``lease`` from now. SpecError for a placement that
        was released or whose lease has ended (saying when)."""
        return self.records.record(commit.renew(self.store, self._capacities, ident, _check_lease(lease), source=SOURCE))

    def replay(self, ident: str) -> Replay:
        """Ask the policy again, with the input a recorded decision was made on (its workload, its
        fleet, the capacity it saw), through the policy's complete reference rule: does the policy
        OPA serves now give the same answer?"""
        record = self.decision(ident)
        decision = record.decision
        fleet_rev = decision.provenance.fleet_revision
        if fleet_rev is None:
            raise SpecError(f"decision {record.id[:12]} was recorded before decisions kept their fleet; it cannot be replayed", field="ID")
        engine = self._engine_of(self._current(force=True))
        revision_now, _ = engine.confirm()
        about = engine.about(revision_now)
        doc = self.decision_inputs(record.id)
        judged = judged_from(doc.fleet, doc.verdicts, fleet_rev)
        fleet = engine.fleet([e.pool for e in judged.fleet.entries], revision_now, about)
        reference = self.policy.decision(
            reference_input(decision.workload, fleet, doc.capacities, about, doc.starts, quota_use=decision.provenance.quota_use)
        )
        diffs = differences(decision, reference)
        recorded = decision.provenance.policy_revision
        same_rev = same_policy(revision_now, recorded)
        summary = ("the same answer" if not diffs else f"{len(diffs)} difference(s)") + (
            " (the same policy revision)" if same_rev else f" (the decision was made under {recorded[:19]})"
        )
        return Replay(record.id, not diffs, revision_now, recorded, summary, tuple(diffs))

    def accounting(self, ident: str, hours: float) -> dict[str, object]:
        """``device_accounting`` of a recorded placement held for ``hours`` (the same dictionary:
        ``carbon_g_grounded`` exactly where the pool's power is known). SpecError for a decision
        that placed nothing."""
        from examlops_policy.accounting import device_accounting

        record = self.decision(ident)
        if not isinstance(record.decision, Placement):
            raise SpecError(f"decision {record.id[:12]} placed nothing, so it has no cost or carbon", field="ID")
        return device_accounting(record.decision, hours)

    def decision_inputs(self, ident: str) -> DecisionInputs:
        """What a recorded decision was made on: its fleet and verdict-set documents and the
        capacity every pool had (SpecError for a decision recorded before decisions kept them)."""
        return self.records.inputs(self.store.decision_row(ident))

    def set_job(self, ident: str, job_id: str, *, scheduler: str, uid: str | None = None) -> DecisionRecord:
        """Record the scheduler's job (and its uid) on a live placement, audited; SpecError when it
        is not a live placement without a job."""
        row = commit.set_job(self.store, self._capacities, ident, job_id, scheduler=scheduler, uid=uid, source=SOURCE)
        return self.records.record(row)

    def mark_job(self, ident: str, state: str) -> DecisionRecord:
        """Record a changed job state on a decision (e.g. ``missing``), audited."""
        return self.records.record(commit.mark_job(self.store, ident, state, source=SOURCE))

    def record_usage(
        self, usage: Mapping[str, float], *, scheduler: str, nodes: Mapping[str, Sequence[NodeUsageRow]] | None = None
    ) -> dict[str, float]:
        """Record how many devices of each named pool its scheduler reports busy: those beyond this
        layer's own submitted, live placements are held outside it (audited per change). ``nodes``:
        what is busy node by node on pools of nodes (beyond this layer's submitted grants there)."""
        return commit.record_usage(self.store, self._capacities, usage, scheduler=scheduler, source=SOURCE, nodes=nodes)

    def set_node_states(self, states: Mapping[str, str]) -> list[PoolChange]:
        """Set the state of nodes by name (``up``, ``drained``, ``down``) in every pool that lists
        them, in one audited write: only up nodes take new grants; live ones stay, flagged while
        their node is down. A node no pool lists by name is a SpecError (nothing is written). The
        one place a node's state changes (discovery and reconcile call it)."""
        return commit.set_node_states(self.store, self._capacities, states, source=SOURCE)

    def burst_events(self, limit: int = 50) -> list[BurstEvent]:
        """Every burst attempt, allowed or blocked, most recent first."""
        return self.store.burst_events(limit)

    # -- cost and carbon --------------------------------------------------------------------

    def finops(self, hours: float | None = None, *, methods: bool = True) -> FinopsReport:
        """Cost and carbon of placed decisions by device type and region, with totals. Hours are
        ``hours`` for every decision when given, else the time each placement held its devices.
        ``methods``: say how each row's carbon was found (it reads the fleets the placements were
        decided on; a cost table that does not show it can leave it out)."""
        from examlops_policy.accounting import UNRECORDED, carbon_method_text

        found: dict[tuple[str, str], set[str]] = {}
        for device, region, pool, fleet in self.store.placed_pools() if methods else ():
            method = self.records.carbon_method(fleet, pool)
            found.setdefault((device, region), set()).add(method or UNRECORDED)
        rows = tuple(
            dataclasses.replace(r, carbon_methods=tuple(sorted(found.get((r.device, r.region), ()))))
            for r in self.store.finops(hours=_hours(hours), charge_idle=self.tables.charge_idle)
        )  # fmt: skip
        return FinopsReport(
            rows,
            sum(r.decisions for r in rows),
            round(sum(r.device_hours for r in rows), 6),
            round(sum(r.cost for r in rows), 6),
            round(sum(r.carbon_g for r in rows), 6),
            tuple((m, carbon_method_text(m, self.tables)) for m in sorted({m for r in rows for m in r.carbon_methods})),
            used_device_hours=round(sum(r.used_device_hours for r in rows), 6),
            idle_device_hours=round(sum(r.idle_device_hours for r in rows), 6),
            used_cost=round(sum(r.used_cost for r in rows), 6),
            idle_cost=round(sum(r.idle_cost for r in rows), 6),
        )

    def estimate_errors(self, *, since: str | None = None, until: str | None = None) -> tuple[EstimateError, ...]:
        """How far start estimates were from the actual starts of placements made over a period
        (``since``/``until`` as for ``decision_page``): per estimate source, the median and 90th
        percentile of actual minus estimated start, over the placements with both."""
        start, end = _period(since, until)
        rows = self.store.estimate_starts(since=start, until=end)
        return estimate_errors([(source, error) for source, _, est, actual in rows if (error := estimate_error_s(est, actual)) is not None])

    def models_cost(self, hours: float | None = None) -> ModelsCost:
        """Cost and carbon per workload name (``exa models cost``), most expensive first."""
        rows = tuple(self.store.cost_by_workload(hours=_hours(hours), charge_idle=self.tables.charge_idle))
        return ModelsCost(
            rows, round(sum(r.cost for r in rows), 6), round(sum(r.carbon_g for r in rows), 6),
            used_cost=round(sum(r.used_cost for r in rows), 6), idle_cost=round(sum(r.idle_cost for r in rows), 6),
        )  # fmt: skip

    def finops_report(self, *, since: str | None = None, until: str | None = None, title: str = "FinOps report", now: datetime | None = None) -> ReportData:
        """The FinOps report's data over a period (default: from the first decision to now), for
        ``report.render_html``."""
        from examlops_policy.report import report_from_rows

        now = now or datetime.now(timezone.utc)
        since, until = _period(since, until)
        decisions, bursts = self.store.report_rows(since=since, until=until)
        records = self.records
        for row in decisions:
            # How each placement's carbon was found, from the fleet it was decided on.
            pool, fleet = row.pop("pool", None), row.pop("fleet", None)
            if row["outcome"] == "placed":
                row["carbon_method"] = records.carbon_method(cast("str | None", fleet), cast("str | None", pool))
        start = _day(since) if since else min((_day(str(d["created_at"])) for d in decisions), default=now.date())
        end = (_day(until) - timedelta(days=1)) if until else now.date()
        return report_from_rows(title, start, max(start, end), now, decisions=decisions, bursts=bursts, charge_idle=self.tables.charge_idle)

    # -- audit ------------------------------------------------------------------------------

    def verify_audit(self, checkpoint: audit.Checkpoint | None = None, key: audit.VerifierKey | None = None) -> audit.VerifyReport:
        """The chain, the decision records it vouches for, the stored fleets and verdict sets, and every
        table held to the state the chain describes; with ``checkpoint`` (and ``key``), the anchor too."""
        from examlops_policy import _audit_verify

        # The state as found: capacities worked out again first (``store``) would hide an edit.
        return _audit_verify.verify(self._opened_store(), self._capacities, checkpoint, key)  # every table held to the chain, too

    def checkpoint(self, *, origin: str | None = None, key: audit.SigningKey | None = None) -> audit.Checkpoint:
        """A checkpoint (size and head) of a log that verifies, signed with ``key`` when given;
        AuditIntegrityError otherwise."""
        from examlops_policy import audit

        report = self.verify_audit()
        report.raise_for_problems()
        cp = audit.make_checkpoint(report.size, report.head, origin or audit.ORIGIN)
        return audit.sign_checkpoint(cp, key) if key is not None else cp

    # -- the policy as reviewed code --------------------------------------------------------

    def policy_status(self) -> PolicyStatus:
        """The reviewed revision of the policy files and what each decision path serves; starts
        nothing. PolicyError when the policy files cannot be read."""
        from examlops_policy import _policy_review

        return _policy_review.policy_status(self.home)

    def policy_docs(self, readme: Path | None = None, *, write: bool = True) -> DocsCheck:
        """Regenerate (``write``) or only check the reason-code table of ``readme`` (default:
        docs/reason-codes.md beside the policy folder). SpecError when the page has no marked section;
        PolicyError/PolicyUnavailable when the policy's metadata cannot be read."""
        from examlops_policy import _policy_review

        return _policy_review.policy_docs(readme, write=write)

    def policy_tests(self, threshold: float | None = None) -> TestReport:
        """The policy's Rego tests and its coverage against ``threshold`` percent (default: the
        project's gate)."""
        from examlops_policy import _policy_review

        return _policy_review.policy_tests(threshold)

    def policy_lint(self) -> LintReport:
        """Regal over the policy folder, with the project's ``.regal/config.yaml``."""
        from examlops_policy import _policy_review

        return _policy_review.policy_lint()

    def policy_impact(
        self,
        against: str,
        *,
        last: int | None = None,
        since: str | None = None,
        recorded: bool = True,
        workloads: Path | None = None,
        fleet: Path | None = None,
        examples: bool = True,
    ) -> Impact:
        """The decisions that change between the policy ``against`` names (a git revision or a
        folder) and the policy files here: the recorded ones (``last`` N, default 100, or those
        made ``since``), unless not ``recorded``, and the workloads of ``workloads`` over the pools
        of ``fleet`` (default: the example workloads over ``examples/fleet.yaml`` where the
        checkout has them), unless not ``examples``.

        SpecError when there is nothing to evaluate or an input file is invalid; see
        ``impact.run_impact`` for the rest.
        """
        from examlops_policy import _policy_review

        return _policy_review.policy_impact(
            self, self.tables, against, last=last, since=since, recorded=recorded, workloads=workloads, fleet=fleet, examples=examples
        )

    def simulate(
        self,
        pods: Path,
        nodes: Path | None = None,
        *,
        format: str | None = None,
        inflate: float = 1.3,
        seeds: Sequence[int] = (42,),
        packers: Sequence[str] = ("exa",),
        policy: Path | None = None,
        region: str = "eu",
        pools: str = "model",
        optimize: Sequence[str] = (),
    ) -> Simulation | WorkSimulation:
        """Replay a trace against a fleet in memory through the placement path (the policy's
        verdicts from the real OPA, the core's selection, the node packer ``place`` uses): nothing
        is written, nothing audited. ``format`` ``openb``: ``nodes`` the node list, ``pods`` the pod
        list, the openb protocol (demand tuned to ``inflate`` x the GPU capacity, one replay per
        seed, none leaving), the GPU pools in ``region``, one per GPU model (``pools`` ``one``: one
        pool of every GPU node, for a trace that names no model); ``generic``: ``pods`` a trace
        (``schemas/trace.schema.json``; ``nodes``, when given, a pools file replacing its pools), or
        a workload list in CSV beside ``nodes``, a node list in CSV (``_sim.generic``'s columns),
        in time order, work leaving when its duration ends. ``format`` None: read from ``pods``
        (``_sim.trace_format``: a YAML or JSON trace, or a CSV with an ``arrival`` column, is
        generic; else openb). ``policy``: a policy folder to judge
        with instead of the reviewed one (its own OPA, stopped afterwards). One run per packer.
        ``optimize`` (generic only): replay by work instead (``_sim.work``): waiting workloads placed
        as room frees, each running for its duration or its work over its grant's throughput, once
        per objective, with the first packer; a ``WorkSimulation`` (cost, cost per unit of work,
        completion times, utilisation per device model).

        SpecError for bad input (file, line, column); PolicyUnavailable/PolicyError without a policy."""
        from examlops_policy._node_packers import PACKERS
        from examlops_policy._sim import simulate as sim
        from examlops_policy._sim.generic import trace_format

        if format is None:
            format = trace_format(Path(pods))
        if format not in ("openb", "generic"):
            raise SpecError(f"unknown trace format {format!r}; known: openb, generic", field="format")
        if not packers or any(p not in PACKERS for p in packers):
            bad = next((p for p in packers if p not in PACKERS), "")
            raise SpecError(f"unknown packer {bad!r}; known: {', '.join(PACKERS)}", field="packer")
        if format == "openb":
            if nodes is None:
                raise SpecError("the openb format needs the node list (--nodes FILE)", field="nodes")
            if not (isinstance(inflate, (int, float)) and math.isfinite(inflate) and 0 < inflate <= 10):
                raise SpecError(f"inflate is a ratio in (0, 10] (got {quantities.shown(inflate)})", field="inflate")
            if not seeds:
                raise SpecError("give at least one seed", field="seeds")
            if pools not in ("model", "one"):
                raise SpecError(f"pools are grouped by model or as one (got {quantities.shown(pools)})", field="pools")

        if optimize and format != "generic":
            raise SpecError("--optimize replays a generic trace by its work (--format generic)", field="optimize")

        def run(engine: Engine, tables: Tables) -> Simulation | WorkSimulation:
            if format == "openb":
                from examlops_policy._sim import read_openb_nodes, read_openb_pods

                assert nodes is not None
                if not tables.region_known(region):
                    raise SpecError(f"unknown region {region!r}", field="region")
                fleet = read_openb_nodes(nodes)
                listed = read_openb_pods(pods, fleet)
                return sim.simulate_openb(
                    engine, fleet, listed, trace=Path(pods).name, seeds=seeds, inflate=inflate, packers=packers, region=region, grouping=pools
                )  # fmt: skip
            from examlops_policy import specs
            from examlops_policy._sim.generic import read_csv_trace, read_trace, with_pools

            if Path(pods).suffix.lower() == ".csv":
                if nodes is None:
                    raise SpecError("a generic trace in CSV needs its node list (--nodes FILE.csv)", field="nodes")
                trace = read_csv_trace(nodes, pods, tables)
            else:
                trace = read_trace(pods, tables)
                if nodes is not None:
                    trace = with_pools(trace, specs.pools_from_file(nodes, tables))
            if optimize:
                from examlops_policy._sim.layer import LayerPlacer
                from examlops_policy._sim.work import simulate_work

                confirmed = engine.confirm()
                done = simulate_work(
                    lambda: LayerPlacer(engine, confirmed, trace.pools, packer=packers[0]), trace, optimize, name=Path(pods).name,
                    revision=confirmed[0],
                )  # fmt: skip
                sim._confirm_same(engine, confirmed)
                return done
            return sim.simulate_events(engine, trace, packers=packers, name=Path(pods).name)

        if policy is None:
            under = self._current()
            try:
                return run(self._engine_of(under), under.policy.tables)
            except RevisionMismatch:
                # The files changed (or OPA serves another revision): looked at again, a local OPA
                # restarted on them, and the replay made again under that one policy, once.
                under = self._current(force=True)
                if isinstance(self._policy, ManagedPolicy) and not os.environ.get("EXA_OPA_URL"):
                    self._policy.close()
                return run(self._engine_of(under), under.policy.tables)
        import tempfile

        from examlops_policy.opa.scratch import scratch_opa

        # The folder's tables and revision read together as the files are now (never a cached
        # read); its OPA must serve that revision (else RevisionMismatch: the files changed).
        candidate = Reviewed(Path(policy)).current(force=True)
        with tempfile.TemporaryDirectory(prefix="exa-sim-") as scratch, scratch_opa(candidate.root, Path(scratch) / "opa") as served:
            return run(Engine(served.policy, candidate.tables, reviewed=candidate.revision), candidate.tables)

    # -- the policy engine ------------------------------------------------------------------

    def opa_status(self) -> OpaStatus:
        """How the deciding OPA runs and is protected; starts nothing."""
        from examlops_policy import opa

        return opa.status(self.home)

    def opa_stop(self) -> StopReport:
        """Stop this home's local OPA (SIGTERM, then SIGKILL), saying what really happened.
        SpecError when the deciding OPA is external (``EXA_OPA_URL``): it is not this layer's."""
        from examlops_policy import opa

        _not_external("stop")
        self.close_policy()
        return opa.stop_server(self.home)

    def opa_restart(self) -> OpaConnection:
        """Stop this home's local OPA and start it again on the current policy (SpecError when the
        deciding OPA is external)."""
        from examlops_policy import opa

        _not_external("restart")
        report = self.opa_stop()
        if report.was_running and not report.stopped:
            raise PolicyUnavailable(f"the local OPA did not stop: {'; '.join(report.lines())}")
        return opa.connect(self.home)

    def opa_bundle(self, out_dir: Path, *, signing_key: Path | None = None) -> Bundle:
        """Build the policy bundle OPA serves (``out_dir/bundle.tar.gz``, signed with
        ``signing_key`` when given), for an OPA this layer does not run. PolicyError when the
        policy does not build."""
        from examlops_policy import opa

        out_dir.mkdir(parents=True, exist_ok=True)
        return opa.build_bundle(policy_dir(), out_dir, signing_key=signing_key)

    def close_policy(self) -> None:
        close = getattr(self._policy, "close", None)
        if close is not None:
            close()
        self._policy = None
        self._under = None

    # -- executors: discovery, submission, jobs ---------------------------------------------

    def discover(self, source: str, *, region: str | None = None, prefix: str | None = None, apply: bool = False, **options: object) -> DiscoveryResult:
        """Pools where they are: ``slurm`` (sinfo/scontrol), ``local`` (this machine's devices) or
        ``kubernetes`` (nodes' allocatable devices; ``context``, ``kubeconfig``). Shows what
        applying would change; ``apply`` registers them and records what the scheduler reports busy
        beyond this layer's own submitted placements (held outside, audited)."""
        from examlops_policy import _discovering

        return _discovering.discover(self, source, region=region, prefix=prefix, apply=apply, **options)

    def submit(self, ident: str, scheduler: str, *, dry_run: bool = False, **options: object) -> Submission:
        """Hand a live placement to ``slurm`` (``script``) or ``kubernetes`` (``image``,
        ``namespace``, ``command``, ``context``, ``kubeconfig``) and record the job on the decision
        and in the audit log in one transaction. ``dry_run``: Slurm prints the command; Kubernetes
        runs the server's dry run (admission and validation for real), recording nothing.
        ExecutorError when the scheduler refuses or cannot be reached (nothing recorded)."""
        from examlops_policy import _submitting

        return _submitting.submit(self, ident, scheduler, dry_run=dry_run, **options)

    def job_status(self, ident: str, **options: object) -> JobReport:
        """The decision's job as its scheduler reports it; a Kubernetes Job deleted outside this
        layer is marked ``missing`` on the decision (audited)."""
        from examlops_policy import _submitting

        return _submitting.status(self, ident, **options)

    def manifest(self, ident: str, *, image: str, **options: object) -> JSONObject:
        """The Kubernetes ``batch/v1`` Job for a live placement (nothing is sent)."""
        from examlops_policy import _submitting

        return _submitting.manifest(self, ident, image=image, **options)

    def import_catalog(self, path: Path, *, apply: bool = False, **options: object) -> CatalogImport:
        """Read a SkyPilot catalog, show the pools it would add or reprice (``count`` required for
        new pools; ``overwrite`` replaces prices set by hand), and register them with ``apply``."""
        from examlops_policy import _discovering

        return _discovering.import_catalog(self, path, apply=apply, **options)

    def pool_by_name(self, name: str) -> Pool:
        snap = self._snapshot()
        at = snap.index.get(name)
        if at is None:
            raise NotFoundError(f"no pool {name!r}")
        return snap.states[at].pool


@dataclass
class _Under:
    """What decisions are made under for one policy snapshot: its packing rules, its engine (its
    verdicts kept per revision) and its reader of recorded decisions."""

    policy: PolicySnapshot
    capacities: Capacities
    engine: Engine | None = None
    reader: Reader | None = None
    estimator: StartEstimator | None = None


def _with_nodes(decided: Placement, allocations: tuple[NodeAllocation, ...] | None) -> Placement:
    if allocations is None:
        return decided
    return dataclasses.replace(decided, allocations=allocations, holdings=tuple(h for a in allocations for h in a.holdings))


def placeable_text(state: PoolState, layout: PoolLayout) -> str | None:
    """What can still be placed, for people: slices (``1g x5, 3g x1``); on a pool of nodes, the
    largest block of whole devices free on one node and, shared, the most shares free on one
    device (None for a pool of whole devices counted as one node: its free devices say it)."""
    rooms = state.capacity.nodes
    if rooms is None:
        return None if layout.kind == "whole" else describe(state.capacity, layout)
    if not rooms:
        return "no node up"
    parts = [] if layout.kind == "whole" else [describe(state.capacity, layout)]
    if layout.kind != "fixed":
        parts.append(f"{max(r.whole for r in rooms)} whole on one node")
    pool = state.pool
    if pool.sharing is not None and pool.shares_per_device:
        most = max(pool.shares_per_device if r.whole else r.shares for r in rooms)
        parts.append(f"{most} of {pool.shares_per_device} shares on one device")
    return " · ".join(parts)


def as_burst(workload: Workload) -> Workload:
    """The workload asking for cloud explicitly, bursting allowed (``exa hardware burst``)."""
    return dataclasses.replace(workload, target="cloud", allow_burst=True)


def _hours(hours: float | None) -> float | None:
    if hours is None:
        return None
    if isinstance(hours, bool) or not isinstance(hours, (int, float)) or not math.isfinite(hours) or hours < 0:
        raise SpecError(f"hours must be a finite number of at least 0 (got {quantities.shown(hours)})", field="hours")
    return float(hours)


def _instant(text: str | None, field: str) -> str | None:
    """An ISO 8601 time (a date alone is its midnight; no offset is UTC) as decisions store theirs."""
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except (ValueError, AttributeError):
        raise SpecError(f"{field} must be an ISO 8601 time such as 2026-11-30 or 2026-11-30T08:00:00Z (got {text!r})", field=field) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _period(since: str | None, until: str | None) -> tuple[str | None, str | None]:
    """``since`` and ``until`` as stored times; SpecError when the period ends before it starts."""
    start, end = _instant(since, "since"), _instant(until, "until")
    if start is not None and end is not None and end < start:
        raise SpecError(f"the period ends ({until}) before it starts ({since}): --since must not be after --until", field="since")
    return start, end


def _not_external(action: str) -> None:
    url = os.environ.get("EXA_OPA_URL")
    if url:
        raise SpecError(f"OPA at {url} is external (EXA_OPA_URL): exa neither starts nor stops it", source=f"exa opa {action}")


def _day(ts: str) -> date:
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).astimezone(timezone.utc).date()


def _check_lease(lease: timedelta) -> timedelta:
    if not isinstance(lease, timedelta) or lease <= timedelta(0) or lease > timedelta(days=366):
        raise SpecError(f"a lease must be a duration of more than 0s and at most a year (got {quantities.shown(lease)})", field="lease")
    return lease


def _same_request(record: DecisionRecord, request: Request, request_id: str) -> DecisionRecord:
    """The recorded decision for ``request_id``, which must be for the same workload."""
    if not request.asks_as(codec.workload_input(record.decision.workload)):
        raise SpecError(
            f"request id {request_id!r} was used for another workload (decision {record.id[:12]}, {record.decision.workload.name}); "
            "use a new request id",
            field="request_id",
        )
    return record


def _gres_table(root: Path) -> GresTable:
    """The reviewed GRES table of the policy folder ``root`` (read when a Slurm pool needs it)."""
    from examlops_policy.executors.gres import load_gres_table

    return load_gres_table(root)
