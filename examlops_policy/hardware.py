"""The façade the command line and the library share: ``Hardware``, the composition root. It opens
(or is given) a home's store, policy and start estimator, makes the decision cycle over them
(``app.cycle.DecisionCycle``, the only way a decision is made) and the workflows of ``app/`` over
the cycle, and offers each workflow as one method. It decides nothing itself."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from examlops_policy._core.engine import Engine
from examlops_policy._core.explain import explain
from examlops_policy._core.records import DecisionInputs, Reader
from examlops_policy._reviewed import Pinned, PolicySnapshot, Reviewed
from examlops_policy.app import discovering, policy_review, reports, schedulers, submitting, queue as queueing, simulate as simulating
from examlops_policy.app.cycle import DecisionCycle
from examlops_policy.app.estimators import Estimators
from examlops_policy.app.placing import Placing, as_burst
from examlops_policy.app.pools import Pools
from examlops_policy.app.records import Records
from examlops_policy.app.wiring import ManagedPolicy, default_home, default_policy, is_managed, open_store, resolve_home
from examlops_policy.model import Decision, JSONObject, Pool, PoolState, Workload
from examlops_policy.store import Store
from examlops_policy.store.api import NodeUsageRow
from examlops_policy.tables import Tables
from examlops_policy.views import (
    AdmissionReport, BurstEvent, Cancelled, DecisionPage, DecisionRecord, DiscoveryResult, EstimateError, FinopsReport, JobReport,
    ModelsCost, PoolChange, PoolDetail, Portability, PoolView, QueueListing, QuotaRow, ReconcileReport, ReleaseReport, Replay,
    Submission, Submit,
)  # fmt: skip

if TYPE_CHECKING:  # the crypto, OPA-process and report stacks load only when a command needs them
    from examlops_policy import audit
    from examlops_policy._core.verdicts import PolicyEvaluator
    from examlops_policy._policy_docs import DocsCheck
    from examlops_policy._policy_tools import LintReport, TestReport
    from examlops_policy._serve import Stopped
    from examlops_policy._sim.simulate import Simulation
    from examlops_policy._sim.work import WorkSimulation
    from examlops_policy.app.impact import Impact
    from examlops_policy.catalog import CatalogImport
    from examlops_policy.estimates.gather import StartEstimator
    from examlops_policy.estimates.kubernetes import PendingSource
    from examlops_policy.opa import OpaConnection, OpaStatus as OpaStatus, StopReport  # OpaStatus: named by ``exa opa status``
    from examlops_policy.opa.bundle import Bundle
    from examlops_policy.opa.revisions import PolicyStatus
    from examlops_policy.report import ReportData

__all__ = ["Hardware", "ManagedPolicy", "as_burst", "default_home", "default_policy", "explain", "open_store", "resolve_home", "schedulers"]


class Hardware:
    """Pools, placements and their records, as ``exa hardware`` offers them. ``home``: the state
    folder (default ``default_home()``); ``store``, ``policy``, ``tables`` (pinned) and ``estimator``:
    given instead of what the home opens (``app.wiring``, ``app.estimators``)."""

    def __init__(
        self, home: Path | str | None = None, *, store: Store | None = None, policy: PolicyEvaluator | None = None,
        tables: Tables | None = None, estimator: StartEstimator | None = None,
    ) -> None:  # fmt: skip
        self.home = at = default_home() if home is None else resolve_home(home)
        self.cycle = DecisionCycle(
            at, reviewed=Pinned(tables) if tables is not None else Reviewed(), open_store=lambda: open_store(at),
            open_policy=lambda: default_policy(at), managed=is_managed, estimators=Estimators(estimator), store=store, policy=policy,
        )  # fmt: skip
        self._records = Records(self.cycle)
        self.placing = Placing(self.cycle, self._records)  # its queue: ``placing.queue``
        self._queue = self.placing.queue
        self._pools = Pools(self.cycle, self._queue)

    # -- what decisions are made with -----------------------------------------------------------

    @property
    def tables(self) -> Tables:
        """The reviewed tables (of the policy snapshot decisions are made under now)."""
        return self.cycle.tables

    @property
    def store(self) -> Store:
        return self.cycle.store

    @property
    def records(self) -> Reader:
        """Recorded decisions read back (rebuilt) from the store's rows."""
        return self.cycle.records

    @property
    def policy(self) -> PolicyEvaluator:
        return self.cycle.policy

    @property
    def engine(self) -> Engine:
        """The engine of the policy snapshot decisions are made under now (verdicts kept per revision)."""
        return self.cycle.engine()

    def policy_snapshot(self, *, force: bool = False) -> PolicySnapshot:
        """The reviewed policy decisions are made under now (``force``: the files looked at again)."""
        return self.cycle.current(force=force).policy

    def estimator(self) -> StartEstimator:
        """Who decisions ask when pools would start a workload (under the current policy snapshot)."""
        return self.cycle.estimator()

    def ask_kubernetes(self, cluster: PendingSource | None = None, *, kubeconfig: str | None = None, context: str | None = None) -> None:
        """From now on, ask a Kubernetes cluster when the cloud pools it serves would start (``app.estimators``)."""
        self.cycle.estimators.ask_kubernetes(cluster, kubeconfig=kubeconfig, context=context)

    def estimate_from_own_capacity(self, on: bool = True) -> None:
        """From now on, "now" where a scheduler gives no estimate and the grant fits (``app.estimators``)."""
        self.cycle.estimators.own_capacity(on)

    def close(self) -> None:
        """Close the store and the policy connection (harmless twice); using it afterwards: StateError."""
        self.cycle.close()
        self.cycle.estimators.close()

    def close_policy(self) -> None:
        self.cycle.close_policy()

    # -- pools ----------------------------------------------------------------------------------

    def add_pool(self, pool: Pool) -> PoolChange:
        """Register a new pool; SpecError for a name already registered or facts the tables refuse."""
        return self._pools.add(pool)

    def apply(self, pools: Sequence[Pool], *, prune: bool = False, dry_run: bool = False) -> list[PoolChange]:
        """Register or update pools, idempotent (``prune``: remove the others; ``dry_run``: nothing written)."""
        return self._pools.apply(pools, prune=prune, dry_run=dry_run)

    def apply_file(self, path: Path, *, prune: bool = False, dry_run: bool = False) -> list[PoolChange]:
        """``apply`` the pools of a reviewed YAML file (``pools: [...]``)."""
        return self._pools.apply_file(path, prune=prune, dry_run=dry_run)

    def drain(self, name: str, *, dry_run: bool = False) -> PoolChange:
        """Drain a pool: no new grants (``pool_drained``), those it holds kept. Audited."""
        return self._pools.drain(name, dry_run=dry_run)

    def undrain(self, name: str, *, dry_run: bool = False) -> PoolChange:
        """Let a drained pool take grants again (a pending removal cancelled); the queue is offered it."""
        return self._pools.undrain(name, dry_run=dry_run)

    def remove_pool(self, name: str, *, dry_run: bool = False) -> PoolChange:
        """Remove a pool now, or when its last live grant ends if it is drained (``removal_pending``)."""
        return self._pools.remove(name, dry_run=dry_run)

    def pools(self) -> list[PoolState]:
        """Every pool with what it can still place, cheapest first (then by name)."""
        return self._pools.pools()

    def pool_views(self) -> list[PoolView]:
        """``pools()`` as people look at them: what is placeable, price and carbon per device-hour."""
        return self._pools.views()

    def pool(self, name: str) -> PoolDetail:
        """One pool device by device, or node by node (NotFoundError for an unknown one)."""
        return self._pools.detail(name)

    def pool_by_name(self, name: str) -> Pool:
        return self._records.pool_by_name(name)

    def set_node_states(self, states: Mapping[str, str]) -> list[PoolChange]:
        """Set nodes' states by name (``up``, ``drained``, ``down``) in every pool that lists them, audited."""
        return self._pools.set_node_states(states)

    def record_usage(self, usage: Mapping[str, float], *, scheduler: str, nodes: Mapping[str, Sequence[NodeUsageRow]] | None = None) -> dict[str, float]:
        """Record the devices each pool's scheduler reports busy beyond this layer's: held outside it."""
        return self._pools.record_usage(usage, scheduler=scheduler, nodes=nodes)

    def expire_leases(self) -> list[str]:
        """Release the placements whose lease ended (audited as ``expired``): their ids."""
        return self._pools.expire_leases()

    # -- decisions ------------------------------------------------------------------------------

    def place(
        self, workload: Workload, *, request_id: str | None = None, lease: timedelta | None = None, queue: bool = False,
        submission: Submit | None = None, queued_at: str | None = None, preempted_from: str | None = None,
    ) -> DecisionRecord:  # fmt: skip
        """Decide and record, atomically, through the decision cycle (``app.placing.Placing.place``:
        ``request_id``, ``lease``, ``queue``, ``submission``). SpecError, PolicyUnavailable, StateError."""
        return self.placing.place(
            workload, request_id=request_id, lease=lease, queue=queue, submission=submission, queued_at=queued_at, preempted_from=preempted_from
        )  # fmt: skip

    def burst(self, workload: Workload, *, request_id: str | None = None, lease: timedelta | None = None) -> DecisionRecord:
        """``place`` asking for cloud explicitly (bursting allowed), recorded as ``place``."""
        return self.place(as_burst(workload), request_id=request_id, lease=lease)

    def portable(self, engine: str, accelerator: str) -> Portability:
        """Whether ``engine`` can run on ``accelerator`` (the policy's portability check), and why not."""
        return self.placing.portable(engine, accelerator)

    def what_if(self, workload: Workload, pools: Sequence[Pool] | None = None, *, where: bool = False) -> Decision:
        """Decide without recording, over ``pools`` (all free) or the state (``where``: the nodes too)."""
        return self.placing.what_if(workload, pools, where=where)

    def decisions(self, limit: int = 20) -> list[DecisionRecord]:
        """The most recent decisions, each in full (rebuilt from its record)."""
        return self._records.decisions(limit)

    def decision_page(self, *, limit: int = 20, since: str | None = None, until: str | None = None, cursor: str | None = None) -> DecisionPage:
        """A page of decisions from their columns, newest first (``cursor``: the previous page's)."""
        return self._records.decision_page(limit=limit, since=since, until=until, cursor=cursor)

    def decision(self, ident: str) -> DecisionRecord:
        """A decision by id or unique prefix, as of now; a queued one with its place in the queue."""
        return self.placing.decision(ident)

    def decision_inputs(self, ident: str) -> DecisionInputs:
        """What a recorded decision was made on: its fleet, verdicts and every pool's capacity."""
        return self._records.decision_inputs(ident)

    def release(self, ident: str, *, kubeconfig: str | None = None, context: str | None = None) -> ReleaseReport:
        """Free what a placement holds (its Kubernetes Job deleted first); a second release writes nothing."""
        return self.placing.release(ident, kubeconfig=kubeconfig, context=context)

    def renew(self, ident: str, lease: timedelta) -> DecisionRecord:
        """Move a live placement's lease end to ``lease`` from now (SpecError once it ended)."""
        return self._records.renew(ident, lease)

    def replay(self, ident: str) -> Replay:
        """Does the policy OPA serves now give a recorded decision the same answer (its reference rule)?"""
        return self._records.replay(self._records.decision(ident))

    def accounting(self, ident: str, hours: float) -> dict[str, object]:
        """``device_accounting`` of a recorded placement held for ``hours`` (SpecError: it placed nothing)."""
        return self._records.accounting(self._records.decision(ident), hours)

    def set_job(self, ident: str, job_id: str, *, scheduler: str, uid: str | None = None) -> DecisionRecord:
        """Record the scheduler's job (and uid) on a live placement without one, audited."""
        return self._records.set_job(ident, job_id, scheduler=scheduler, uid=uid)

    def mark_job(self, ident: str, state: str) -> DecisionRecord:
        """Record a changed job state on a decision (e.g. ``missing``), audited."""
        return self._records.mark_job(ident, state)

    def burst_events(self, limit: int = 50) -> list[BurstEvent]:
        """Every burst attempt, allowed or blocked, most recent first."""
        return self._records.burst_events(limit)

    # -- the queue ------------------------------------------------------------------------------

    def queue(self, *, every: bool = False) -> QueueListing:
        """The waiting workloads in the policy's order (``every``: the admitted, cancelled and failed too)."""
        return queueing.listing(self._queue, every=every)

    def admit(self, *, limit: int | None = None) -> AdmissionReport:
        """One admission pass over the queue, through the decision cycle (at most ``limit`` admitted)."""
        return queueing.admit(self._queue, limit=limit)

    def cancel(self, ident: str) -> Cancelled:
        """Take a waiting workload out of the queue, audited (a second cancel writes nothing)."""
        return queueing.cancel(self._queue, ident)

    def quotas(self) -> list[QuotaRow]:
        """Use against quota per project and accelerator class (quotas.yaml), worded by the policy."""
        return queueing.quotas(self._queue)

    def queue_wakes_at(self) -> datetime | None:
        """While work waits, when capacity next frees by itself (what ``serve`` wakes for)."""
        return queueing.wakes_at(self._queue)

    def reconcile(self, *, slurm: bool | None = None, kubernetes: Mapping[str, str | None] | None = None, admit: bool = True) -> tuple[ReconcileReport, AdmissionReport | None]:
        """What the schedulers say of this layer's jobs and nodes, written back (``app.reconcile``)."""
        from examlops_policy.app import reconcile

        return reconcile.reconcile_and_admit(self._queue, slurm=slurm, kubernetes=kubernetes, admit=admit)

    def serve(self, *, interval_s: float, slurm: bool | None = None, kubernetes: Mapping[str, str | None] | None = None, out: TextIO | None = None,
              once: bool = False, slurm_table: Path | None = None, slurm_accounts: Path | None = None) -> int:  # fmt: skip
        """``exa hardware serve``: reconcile, expire leases and admit every ``interval_s`` until
        SIGTERM or SIGINT (``once``: one step), logging to ``out`` (see ``_serve``). This Hardware
        is closed first: the loop opens its own on the same home (and again after a fault). The
        exit status: 0, or 5 when the policy cannot be served at start. SpecError (nothing closed)
        for an interval shorter than ``_serve.MIN_INTERVAL_S`` (1 s). ``slurm_table``,
        ``slurm_accounts``: the job_submit plugin's decision table kept current (``_serve.slurm_keeper``)."""
        from examlops_policy._serve import Server, check_interval, slurm_keeper

        check_interval(interval_s)
        keeper = slurm_keeper(slurm_table, slurm_accounts)
        home = self.home
        self.close()
        server = Server(lambda: Hardware(home), interval_s=interval_s, slurm=slurm, kubernetes=kubernetes, out=out, slurm_table=keeper)
        return server.run(home, once=once)

    # -- cost, carbon, audit --------------------------------------------------------------------

    def finops(self, hours: float | None = None, *, methods: bool = True) -> FinopsReport:
        """Cost and carbon of placed decisions by device type and region, with totals."""
        return reports.finops(self.cycle, hours, methods=methods)

    def estimate_errors(self, *, since: str | None = None, until: str | None = None) -> tuple[EstimateError, ...]:
        """Per estimate source, the median and 90th percentile of actual minus estimated start."""
        return reports.start_errors(self.cycle, since=since, until=until)

    def models_cost(self, hours: float | None = None) -> ModelsCost:
        """Cost and carbon per workload name (``exa models cost``), most expensive first."""
        return reports.models_cost(self.cycle, hours)

    def finops_report(self, *, since: str | None = None, until: str | None = None, title: str = "FinOps report", now: datetime | None = None) -> ReportData:
        """The FinOps report's data over a period (default: the first decision to now)."""
        return reports.finops_report(self.cycle, since=since, until=until, title=title, now=now)

    def verify_audit(self, checkpoint: audit.Checkpoint | None = None, key: audit.VerifierKey | None = None) -> audit.VerifyReport:
        """The chain, what it vouches for and every table held to it (with ``checkpoint``, the anchor),
        in the state as found (capacities worked out again first, as ``store`` does, would hide an edit)."""
        from examlops_policy.app import audit_verify

        return audit_verify.verify(self.cycle.opened_store(), self.cycle.capacities, checkpoint, key)

    def checkpoint(self, *, origin: str | None = None, key: audit.SigningKey | None = None) -> audit.Checkpoint:
        """A checkpoint of a log that verifies (signed with ``key``); AuditIntegrityError otherwise."""
        from examlops_policy.app import audit_verify

        return audit_verify.checkpoint(self.verify_audit(), origin=origin, key=key)

    # -- the policy as reviewed code, and its engine --------------------------------------------

    def policy_status(self) -> PolicyStatus:
        """The reviewed revision of the policy files and what each decision path serves."""
        return policy_review.policy_status(self.home)

    def policy_docs(self, readme: Path | None = None, *, write: bool = True) -> DocsCheck:
        """Regenerate (``write``) or check the reason-code table of ``readme`` (default: docs/reason-codes.md)."""
        return policy_review.policy_docs(readme, write=write)

    def policy_tests(self, threshold: float | None = None) -> TestReport:
        """The policy's Rego tests and its coverage against ``threshold`` percent (default: the gate)."""
        return policy_review.policy_tests(threshold)

    def policy_lint(self) -> LintReport:
        """Regal over the policy folder, with the project's ``.regal/config.yaml``."""
        return policy_review.policy_lint()

    def policy_impact(
        self, against: str, *, last: int | None = None, since: str | None = None, recorded: bool = True,
        workloads: Path | None = None, fleet: Path | None = None, examples: bool = True,
    ) -> Impact:  # fmt: skip
        """The decisions that change between the policy ``against`` names and the files here (``app.impact``)."""
        return policy_review.policy_impact(
            self._records, self.tables, against, last=last, since=since, recorded=recorded, workloads=workloads, fleet=fleet, examples=examples
        )  # fmt: skip

    def simulate(
        self, pods: Path, nodes: Path | None = None, *, format: str | None = None, inflate: float = 1.3, seeds: Sequence[int] = (42,),
        packers: Sequence[str] = ("exa",), policy: Path | None = None, region: str = "eu", pools: str = "model", optimize: Sequence[str] = (),
    ) -> Simulation | WorkSimulation:  # fmt: skip
        """Replay a trace against a fleet in memory through the placement path (``app.simulate``)."""
        return simulating.simulate(
            self.cycle, pods, nodes, format=format, inflate=inflate, seeds=seeds, packers=packers, policy=policy, region=region, pools=pools,
            optimize=optimize,
        )  # fmt: skip

    def opa_status(self) -> OpaStatus:
        """How the deciding OPA runs and is protected; starts nothing."""
        return policy_review.opa_status(self.home)

    def serve_stop(self) -> Stopped:
        """``exa hardware serve --stop``: SIGTERM to the serve processes this state folder's records prove (``_serve.stop_recorded``)."""
        from examlops_policy._serve import stop_recorded

        return stop_recorded(self.home)

    def opa_stop(self) -> StopReport:
        """Stop this home's local OPA, saying what happened (SpecError when it is external)."""
        return policy_review.opa_stop(self.home, self.close_policy)

    def opa_restart(self) -> OpaConnection:
        """Stop this home's local OPA and start it again on the current policy (SpecError when external)."""
        return policy_review.opa_restart(self.home, self.close_policy)

    def opa_bundle(self, out_dir: Path, *, signing_key: Path | None = None) -> Bundle:
        """Build the policy bundle OPA serves (``out_dir/bundle.tar.gz``, signed with ``signing_key``)."""
        return policy_review.opa_bundle(out_dir, signing_key=signing_key)

    # -- executors: discovery, submission, jobs -------------------------------------------------

    def discover(self, source: str, *, region: str | None = None, prefix: str | None = None, apply: bool = False, **options: object) -> DiscoveryResult:
        """Pools where they are (``slurm``, ``local``, ``kubernetes``) and what ``apply`` would change."""
        return discovering.discover(self._pools, source, region=region, prefix=prefix, apply=apply, **options)

    def import_catalog(self, path: Path, *, apply: bool = False, **options: object) -> CatalogImport:
        """The pools a SkyPilot catalog would add or reprice; ``apply`` registers them."""
        return discovering.import_catalog(self._pools, path, apply=apply, **options)

    def submit(self, ident: str, scheduler: str, *, dry_run: bool = False, **options: object) -> Submission:
        """Hand a live placement to a registered scheduler (``schedulers``); the job recorded on it, audited."""
        return submitting.submit(self._records, ident, scheduler, dry_run=dry_run, **options)

    def job_status(self, ident: str, **options: object) -> JobReport:
        """The decision's job as its scheduler reports it (a Job deleted outside: ``missing``, audited)."""
        return submitting.status(self._records, ident, **options)

    def manifest(self, ident: str, *, image: str, **options: object) -> JSONObject:
        """The Kubernetes ``batch/v1`` Job for a live placement (nothing is sent)."""
        return submitting.manifest(self._records, ident, image=image, **options)
