"""The ports of the application layer: what each workflow needs, by role, as typed protocols.

A workflow names the narrowest port it needs and is handed whatever satisfies it: the decision
cycle (``DecisionCycle``: ``State``, ``PolicySource``), the store's clock (``Clock``), the recorded
decisions (``Records``: ``Jobs``, ``Recorded``), the placing workflow (``Placer``), the fleet's
workflows (``Fleet``), who estimates starts, with its own clock (``Estimator``), the policy's other
entry points (``Queries``). No port names the façade (``Hardware``) or anything private of it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from examlops_policy._core.engine import Engine
    from examlops_policy._core.records import DecisionInputs
    from examlops_policy._core.state import Capacities, Snapshot
    from examlops_policy._core.verdicts import PolicyEvaluator
    from examlops_policy.app.under import Under
    from examlops_policy.estimates import StartEstimate
    from examlops_policy.estimates.gather import EstimateRequest
    from examlops_policy.model import JSONObject, Pool, PoolState, Workload
    from examlops_policy.store import Store
    from examlops_policy.store.api import NodeUsageRow
    from examlops_policy.tables import Tables
    from examlops_policy.views import DecisionPage, DecisionRecord, PoolChange, Submit


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
