"""The ports of the application layer: what each workflow needs, by role, as typed protocols.

A workflow names the narrowest port it needs and is handed whatever satisfies it: the decision
cycle (``DecisionCycle``: ``State``, ``PolicySource``), the store's clock (``Clock``), the recorded
decisions (``Records``: ``Jobs``, ``Recorded``), the placing workflow (``Placer``), the fleet's
workflows (``Fleet``), who estimates starts, with its own clock (``Estimator``), the policy's other
entry points (``Queries``), and the schedulers work is handed to (``Scheduler``, each registered
once by name in ``app.schedulers``, with its ``StartAsking``: how it is asked for start estimates). No port
names the façade (``Hardware``) or anything private of it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from examlops_policy._core.engine import Engine
    from examlops_policy._core.records import DecisionInputs
    from examlops_policy._core.state import Capacities, Snapshot
    from examlops_policy._core.verdicts import PolicyEvaluator
    from examlops_policy.app.schedulers.seen import Seen
    from examlops_policy.app.under import Under
    from examlops_policy.discovery import Discovery
    from examlops_policy.estimates import StartEstimate
    from examlops_policy.estimates.gather import EstimateRequest, PoolAsker
    from examlops_policy.executors.command import Runner
    from examlops_policy.model import JSONObject, JSONValue, Pool, PoolState, Workload
    from examlops_policy.store import Store
    from examlops_policy.store.api import GrantRow, NodeUsageRow
    from examlops_policy.tables import Tables
    from examlops_policy.views import DecisionPage, DecisionRecord, JobReport, PoolChange, Submission, Submit


class Clock(Protocol):
    """A clock that says what writes are recorded at (the store's: RFC 3339, UTC)."""

    def now(self) -> str: ...


class State(Protocol):
    """The state: the store (its narrow API), the packing rules capacities are worked out with, and
    the state as of now."""

    @property
    def store(self) -> Store: ...

    @property
    def capacities(self) -> Capacities: ...

    def snapshot(self) -> Snapshot: ...


class PolicySource(Protocol):
    """The reviewed policy decisions are made under: its snapshot (tables and revision together,
    ``force``: the files looked at again), the engine of a snapshot, the evaluator, and the files
    looked at again with the policy connected again when OPA served another revision."""

    @property
    def policy(self) -> PolicyEvaluator: ...

    def current(self, *, force: bool = False) -> Under: ...

    def engine(self, under: Under | None = None) -> Engine: ...

    def again(self, *, local_only: bool = False) -> Under: ...


class Queries(Protocol):
    """A policy that answers its other entry points (the queue's order, preemption, reservations,
    the quotas report)."""

    def query(self, path: str, policy_input: JSONObject) -> object: ...


class Estimator(Protocol):
    """Who is asked when pools would start a workload: its clock and its estimates, one per
    request, in order."""

    def now(self) -> datetime: ...

    def estimate(self, requests: Sequence[EstimateRequest], now: datetime | None = None) -> list[StartEstimate]: ...


class Jobs(Protocol):
    """Recorded decisions and their jobs: a record as of now, its pool, and the writes that record a
    job (or a changed job state) on its decision."""

    def decision(self, ident: str) -> DecisionRecord: ...

    def pool_by_name(self, name: str) -> Pool: ...

    def set_job(self, ident: str, job_id: str, *, scheduler: str, uid: str | None = None) -> DecisionRecord: ...

    def mark_job(self, ident: str, state: str) -> DecisionRecord: ...


class Recorded(Protocol):
    """Recorded decisions read back: pages of them, one as of now, and what one was made on."""

    def decision_page(
        self, *, limit: int = 20, since: str | None = None, until: str | None = None, cursor: str | None = None
    ) -> DecisionPage: ...

    def decision(self, ident: str) -> DecisionRecord: ...

    def decision_inputs(self, ident: str) -> DecisionInputs: ...


class Placer(Protocol):
    """Who places a workload (a preempted grant's, placed again or queued, keeping its age)."""

    def place(
        self, workload: Workload, *, request_id: str | None = None, lease: timedelta | None = None, queue: bool = False,
        submission: Submit | None = None, queued_at: str | None = None, preempted_from: str | None = None,
    ) -> DecisionRecord: ...  # fmt: skip


class Fleet(Protocol):
    """The fleet as discovery and catalog import change it: the tables, the registered pools, and
    the writes that register pools and record what schedulers report busy."""

    @property
    def tables(self) -> Tables: ...

    def pools(self) -> list[PoolState]: ...

    def apply(self, pools: Sequence[Pool]) -> list[PoolChange]: ...

    def record_usage(
        self, usage: Mapping[str, float], *, scheduler: str, nodes: Mapping[str, Sequence[NodeUsageRow]] | None = None
    ) -> dict[str, float]: ...


class StartAsking(Protocol):
    """How a scheduler is asked for start estimates, for the life of one ``Hardware`` (what it
    caches lives as long): its asker under the policy snapshot of folder ``root``."""

    def asker(self, root: Path) -> PoolAsker: ...


class Scheduler(Protocol):
    """A scheduler this layer hands placements to, registered once by ``name`` (``app.schedulers``).

    ``title`` and ``job_word`` name it and its jobs in words (``Slurm`` ``job``); ``resubmit``: the
    options of ``exa hardware submit`` that hand a placement to it. ``options`` is what the caller
    gave (``Hardware.submit(..., **options)``, the CLI's flags), read by the adapter into its own
    typed options (a value of the wrong type: SpecError).

    * ``discover``: the pools it serves (``region``: for new pools; ``prefix`` of their names) and
      which registered pools it owns (the stale ones among them);
    * its start estimates: the ``StartAsking`` it is registered with (none: not asked unless told);
    * ``submit`` a live placement (``dry_run``: what would be sent, recording nothing), the job
      recorded on its decision; ``queued``: a submission kept with a queued workload, from the
      CLI's options, ``check_queued`` its options, ``submit_queued`` it once admitted;
    * ``status`` of a recorded job; ``cancel`` it (True: a job was stopped), ``released``: what a
      release does to it first (None: nothing);
    * ``reconcile``: what it says, in one read, of the jobs of ``grants`` and of its nodes
      (``runner``: how a command is run); ``serves``: a pool whose nodes' states it reports.
    """

    @property
    def name(self) -> str: ...

    @property
    def title(self) -> str: ...

    @property
    def job_word(self) -> str: ...

    @property
    def resubmit(self) -> str: ...

    def serves(self, pool: Pool) -> bool: ...

    def discover(
        self, fleet: Fleet, *, region: str | None, prefix: str | None, options: Mapping[str, object]
    ) -> tuple[Discovery, Callable[[Pool], bool]]: ...

    def submit(self, jobs: Jobs, ident: str, options: Mapping[str, object], *, dry_run: bool) -> Submission: ...

    def queued(self, given: Mapping[str, object]) -> Submit: ...

    def check_queued(self, options: Mapping[str, JSONValue]) -> None: ...

    def submit_queued(self, jobs: Jobs, ident: str, options: Mapping[str, JSONValue]) -> Submission: ...

    def status(self, jobs: Jobs, record: DecisionRecord, options: Mapping[str, object]) -> JobReport: ...

    def cancel(self, record: DecisionRecord, options: Mapping[str, object]) -> bool: ...

    def released(self, record: DecisionRecord, options: Mapping[str, object]) -> bool | None: ...

    def reconcile(self, grants: Sequence[GrantRow], options: Mapping[str, object], runner: Runner) -> Seen: ...
