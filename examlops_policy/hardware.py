"""The orchestrator: state store + policy engine + decision core, as the CLI and library use it.

``Hardware`` wires the adapters (SQLite or PostgreSQL state, a local or remote OPA) around the pure
decision core. A placement asks the policy first, outside any lock, on a snapshot of the state;
then the store commits it (reservation, devices, decision, burst event and audit entries in one
transaction), redoing the selection if capacity changed meanwhile.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Mapping, Sequence
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Final, cast

from examlops_policy._policy_review import PolicyReview
from examlops_policy._engine import Engine, Prepared, capacity_digest, differences, fleet_revision, reference_input, same_policy
from examlops_policy.errors import NotFoundError, PolicyUnavailable, SpecError, StateError
from examlops_policy.model import Decision, JSONObject, Placement, Pool, PoolState, Reason, Workload
from examlops_policy._packing import describe, device_layouts, layout_of, summarize
from examlops_policy._placement import carbon_per_hour, effective_cost
from examlops_policy._policy import Confirmation, OpaPolicy, PolicyEvaluator
from examlops_policy.store import Snapshot, StaleFleet, Store
from examlops_policy.tables import Tables, load_tables, policy_dir, revision
from examlops_policy._verdicts import About, Answer, workload_input
from examlops_policy.views import (
    BurstEvent,
    DecisionPage,
    DecisionRecord,
    DiscoveryResult,
    FinopsReport,
    JobReport,
    ModelsCost,
    PoolChange,
    PoolDetail,
    Portability,
    PoolView,
    ReleaseReport,
    Replay,
    Submission,
)

if TYPE_CHECKING:  # the crypto, OPA-process and report stacks load only when a command needs them
    from examlops_policy import audit
    from examlops_policy.catalog import CatalogImport
    from examlops_policy.opa import OpaConnection, OpaStatus, StopReport
    from examlops_policy.opa.bundle import Bundle
    from examlops_policy.report import ReportData

DEFAULT_HOME: Final = Path("~/.local/share/examlops")
SOURCE: Final = "exa-hardware"
# Pools changing under a placement send it back for verdicts; after this many rounds, give up.
FLEET_ROUNDS: Final = 5
# A local OPA that answered this recently is not checked again before the next query.
RECHECK_AFTER_S: Final = 1.0


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
        self._answered = float("-inf")


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


def lease_end(lease: timedelta, now: datetime | None = None) -> str:
    end = (now or datetime.now(timezone.utc)) + lease
    return end.isoformat(timespec="microseconds").replace("+00:00", "Z")


class Hardware(PolicyReview):
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
        self._capacities_at: tuple[tuple[int, int] | None, str] = (None, "")

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
        """Register a new pool; SpecError for a name already registered or facts the tables refuse."""
        from examlops_policy import specs

        specs.check_pool_facts(pool, self.tables)
        return self.store.apply_pools([pool], replace=False)[0]

    def apply(self, pools: Sequence[Pool]) -> list[PoolChange]:
        """Register or update pools (idempotent). A pool that live decisions hold keeps its
        accelerator, model, target, region and partitioning, and no device they hold: SpecError."""
        from examlops_policy import specs

        for pool in pools:
            specs.check_pool_facts(pool, self.tables)
        return self.store.apply_pools(pools, replace=True)

    def apply_file(self, path: Path) -> list[PoolChange]:
        """``apply`` the pools of a reviewed YAML file (``pools: [...]``)."""
        from examlops_policy.specs import pools_from_file

        return self.apply(pools_from_file(path, self.tables))

    def pools(self) -> list[PoolState]:
        """Every pool with what it can still place, cheapest first (then by name)."""
        return sorted(self.store.pool_states(), key=lambda s: (effective_cost(s.pool, self.tables), s.pool.name))

    def pool_views(self) -> list[PoolView]:
        """``pools()`` as people look at them: what is placeable, price and carbon per device-hour."""
        return [self._view(s) for s in self.pools()]

    def _view(self, state: PoolState) -> PoolView:
        pool = state.pool
        layout = layout_of(pool, self.tables)
        return PoolView(
            state=state,
            packing=layout.kind,
            placeable=None if layout.kind == "whole" else describe(state.capacity, layout),
            cost_per_hour=effective_cost(pool, self.tables),
            cost_default=pool.cost_per_hour is None,
            carbon_per_hour=carbon_per_hour(pool, self.tables),
            carbon_default=pool.carbon_factor is None,
        )

    def pool(self, name: str) -> PoolDetail:
        """One pool device by device: what its live grants hold. NotFoundError for an unknown one."""
        state, holdings = self.store.pool_detail(name)
        layout = layout_of(state.pool, self.tables)
        return PoolDetail(self._view(state), tuple(holdings), tuple(device_layouts(layout, holdings)))

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
        ``expired``). Raises SpecError, PolicyUnavailable/PolicyError (nothing placed), StateError.
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

    def burst(self, workload: Workload, *, request_id: str | None = None, lease: timedelta | None = None) -> DecisionRecord:
        """An explicit burst to cloud (target cloud, bursting allowed), recorded as ``place``."""
        return self.place(as_burst(workload), request_id=request_id, lease=lease)

    def portable(self, engine: str, accelerator: str) -> Portability:
        """Whether ``engine`` can run on ``accelerator`` (the policy's portability check): the
        accelerator's backend, and the policy's reason when it cannot. SpecError for an unknown
        engine or accelerator; PolicyUnavailable without a verdict."""
        prepared = self.engine.prepare(Workload("portability-check", accelerator=accelerator, engine=engine), [])
        rejection = prepared.judged.workload.rejection
        # With no pools, the only rejection that speaks of the workload itself is portability's.
        reason = rejection if rejection is not None and rejection.code == "backend_unsupported" else None
        backend = str(cast(JSONObject, self.tables.accelerators[accelerator])["backend"])
        return Portability(engine, accelerator, backend, reason)

    def what_if(self, workload: Workload, pools: Sequence[Pool] | None = None) -> Decision:
        """Decide without recording or reserving: over ``pools`` (nothing held on them) or the
        current state."""
        from examlops_policy import specs

        specs.check_workload_facts(workload, self.tables)
        if pools is None:
            snap = self.store.snapshot()
            capacities = [s.capacity for s in snap.states]
            # What-ifs on one state share its capacity digest: worked out once per state version.
            if self._capacities_at[0] != (snap.version, snap.fleet_version):
                self._capacities_at = ((snap.version, snap.fleet_version), capacity_digest(capacities))
            return self._prepare(workload, snap).decide(capacities, self.tables, capacities_digest=self._capacities_at[1])
        states = []
        for pool in pools:
            specs.check_pool_facts(pool, self.tables)
            states.append(PoolState(pool, float(pool.count), summarize(layout_of(pool, self.tables), [])))
        return self.engine.decide(workload, states)

    def decisions(self, limit: int = 20) -> list[DecisionRecord]:
        """The most recent decisions, each in full (rebuilt from its record)."""
        return self.store.decisions(limit)

    def decision_page(self, *, limit: int = 20, since: str | None = None, until: str | None = None, cursor: str | None = None) -> DecisionPage:
        """A page of decisions from their columns, newest first (``since``/``until``: ISO 8601 UTC
        bounds on when they were made; ``cursor``: the previous page's)."""
        before = None
        if cursor is not None:
            created, _, ident = cursor.partition("/")
            if not created or not ident:
                raise SpecError("a cursor is CREATED_AT/ID, as the previous page gave it", field="cursor")
            before = (created, ident)
        rows = self.store.decision_summaries(limit=limit, since=_instant(since, "since"), until=_instant(until, "until"), before=before)
        more = f"{rows[-1].created_at}/{rows[-1].id}" if len(rows) == limit and rows else None
        return DecisionPage(tuple(rows), more)

    def decision(self, ident: str) -> DecisionRecord:
        """A decision by id or unique id prefix, rebuilt with every pool's verdict as it was made."""
        return self.store.get_decision(ident)

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
        result = self.store.release(record.id, source=SOURCE)
        return ReleaseReport(result.record, result.already, deleted)

    def renew(self, ident: str, lease: timedelta) -> DecisionRecord:
        """Move a live placement's lease end to ``lease`` from now."""
        return self.store.renew(ident, lease_end(_check_lease(lease)), source=SOURCE)

    def replay(self, ident: str) -> Replay:
        """Ask the policy again, with the input a recorded decision was made on (its workload, its
        fleet, the capacity it saw), through the policy's complete reference rule: does the policy
        OPA serves now give the same answer?"""
        from examlops_policy._records import judged_from

        record = self.decision(ident)
        decision = record.decision
        fleet_rev = decision.provenance.fleet_revision
        if fleet_rev is None:
            raise SpecError(f"decision {record.id[:12]} was recorded before decisions kept their fleet; it cannot be replayed", field="ID")
        revision_now, _ = self.engine.confirm()
        about = self.engine.about(revision_now)
        doc = self.store.decision_inputs(record.id)
        judged = judged_from(doc.fleet, doc.verdicts, fleet_rev)
        fleet = self.engine.fleet([e.pool for e in judged.fleet.entries], revision_now, about)
        reference = self.policy.decision(reference_input(decision.workload, fleet, doc.capacities, about))
        diffs = differences(decision, reference)
        recorded = decision.provenance.policy_revision
        same_rev = same_policy(revision_now, recorded)
        summary = ("the same answer" if not diffs else f"{len(diffs)} difference(s)") + (
            " (the same policy revision)" if same_rev else f" (the decision was made under {recorded[:19]})"
        )
        return Replay(record.id, not diffs, revision_now, recorded, summary, tuple(diffs))

    def accounting(self, ident: str, hours: float) -> dict[str, object]:
        """``device_accounting`` of a recorded placement held for ``hours``."""
        from examlops_policy.accounting import device_accounting

        record = self.decision(ident)
        if not isinstance(record.decision, Placement):
            raise SpecError(f"decision {record.id[:12]} placed nothing, so it has no cost or carbon", field="ID")
        return device_accounting(record.decision, hours)

    def burst_events(self, limit: int = 50) -> list[BurstEvent]:
        """Every burst attempt, allowed or blocked, most recent first."""
        return self.store.burst_events(limit)

    # -- cost and carbon --------------------------------------------------------------------

    def finops(self, hours: float | None = None) -> FinopsReport:
        """Cost and carbon of placed decisions by device type and region, with totals. Hours are
        ``hours`` for every decision when given, else the time each placement held its devices."""
        rows = tuple(self.store.finops(hours=_hours(hours)))
        return FinopsReport(
            rows,
            sum(r.decisions for r in rows),
            round(sum(r.device_hours for r in rows), 6),
            round(sum(r.cost for r in rows), 6),
            round(sum(r.carbon_g for r in rows), 6),
        )

    def models_cost(self, hours: float | None = None) -> ModelsCost:
        """Cost and carbon per workload name (``exa models cost``), most expensive first."""
        rows = tuple(self.store.cost_by_workload(hours=_hours(hours)))
        return ModelsCost(rows, round(sum(r.cost for r in rows), 6), round(sum(r.carbon_g for r in rows), 6))

    def finops_report(self, *, since: str | None = None, until: str | None = None, title: str = "FinOps report", now: datetime | None = None) -> ReportData:
        """The FinOps report's data over a period (default: from the first decision to now), for
        ``report.render_html``."""
        from examlops_policy.report import report_from_rows

        now = now or datetime.now(timezone.utc)
        since, until = _instant(since, "since"), _instant(until, "until")
        decisions, bursts = self.store.report_rows(since=since, until=until)
        start = _day(since) if since else min((_day(str(d["created_at"])) for d in decisions), default=now.date())
        end = (_day(until) - timedelta(days=1)) if until else now.date()
        return report_from_rows(title, start, max(start, end), now, decisions=decisions, bursts=bursts)

    # -- audit ------------------------------------------------------------------------------

    def verify_audit(self, checkpoint: audit.Checkpoint | None = None, key: audit.VerifierKey | None = None) -> audit.VerifyReport:
        """The chain, the decision records it vouches for, the stored fleets and verdict sets, and every
        table held to the state the chain describes; with ``checkpoint`` (and ``key``), the anchor too."""
        from examlops_policy.store import _audit_read

        return _audit_read.verify(self.store, checkpoint, key)  # every table held to the chain, too

    def checkpoint(self, *, origin: str | None = None, key: audit.SigningKey | None = None) -> audit.Checkpoint:
        """A checkpoint (size and head) of a log that verifies, signed with ``key`` when given;
        AuditIntegrityError otherwise."""
        from examlops_policy import audit

        report = self.verify_audit()
        report.raise_for_problems()
        cp = audit.make_checkpoint(report.size, report.head, origin or audit.ORIGIN)
        return audit.sign_checkpoint(cp, key) if key is not None else cp

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
        self._engine = None

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
        for state in self.store.pool_states():
            if state.pool.name == name:
                return state.pool
        raise NotFoundError(f"no pool {name!r}")


def as_burst(workload: Workload) -> Workload:
    """The workload asking for cloud explicitly, bursting allowed (``exa hardware burst``)."""
    return dataclasses.replace(workload, target="cloud", allow_burst=True)


def _hours(hours: float | None) -> float | None:
    if hours is None:
        return None
    if isinstance(hours, bool) or not isinstance(hours, (int, float)) or not math.isfinite(hours) or hours < 0:
        raise SpecError(f"hours must be a finite number of at least 0 (got {hours!r})", field="hours")
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


def _not_external(action: str) -> None:
    url = os.environ.get("EXA_OPA_URL")
    if url:
        raise SpecError(f"OPA at {url} is external (EXA_OPA_URL): exa neither starts nor stops it", source=f"exa opa {action}")


def _day(ts: str) -> date:
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).astimezone(timezone.utc).date()


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
