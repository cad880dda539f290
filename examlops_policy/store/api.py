"""The store's narrow API: rows in, rows out, one write transaction at a time.

What the decision core reads and writes through (``Transaction``), and the rows it reads and
writes (plain values and text; no decision logic, no JSON form of the store's own: the core encodes
and decodes). Any implementation will do: the SQL stores here, or one in memory (a simulator's).

Versions: ``version`` changes with every write that changes what pools hold or can place,
``fleet_version`` with every change to the pools themselves. Every change of a pool's capacity is
appended to a log (state version, pool, capacity) so that what every pool could place at any state
version can be read back (``capacities_at``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Literal, Protocol, TypeVar

from examlops_policy.model import Holding, JSONObject

if TYPE_CHECKING:
    from examlops_policy.audit import AuditRow

T = TypeVar("T")
Document = Literal["fleets", "verdict_sets"]


class StaleFleet(Exception):
    """Pools were added or changed after the snapshot a decision was made on: decide again."""


@dataclass(frozen=True)
class PoolRow:
    """A pool as stored: its spec and capacity as the core wrote them (text), the devices free
    (shares summed, for people), those held outside this layer, and its last change's version.
    ``removed``: it left the fleet (the row stays for the records that name it); ``removing``: since
    when it is to go once its last live grant ends."""

    name: str
    spec: str
    capacity: str | None
    free: float | None
    held_outside: float
    version: int
    removed: bool = False
    removing: str | None = None


@dataclass(frozen=True)
class HeldRow:
    """A device (or slice, or share) a live grant holds, and its share of a device: on ``node``
    (a pool counted as one node: the pool's name; None: recorded before grants named nodes), and
    for a share of a shared device, how many of the device's shares (``shares``)."""

    decision_id: str
    holding: Holding
    share: float
    node: str | None = None
    shares: int | None = None
    pool: str | None = None


@dataclass(frozen=True)
class NodeGrantRow:
    """What a live grant holds of one node's own CPU and memory (``position``: the node's place in
    the gang)."""

    decision_id: str
    pool: str
    node: str
    position: int
    cpu_milli: int
    memory_mib: int


@dataclass(frozen=True)
class NodeUsageRow:
    """What a scheduler reports busy on a node of a pool beyond this layer's own submitted grants:
    whole ``devices`` (``indices`` where it names them), ``shares`` of shared devices, CPU
    millicores and memory MiB (None: not reported)."""

    pool: str
    node: str
    devices: int = 0
    indices: tuple[int, ...] = ()
    shares: int = 0
    cpu_milli: int | None = None
    memory_mib: int | None = None


@dataclass(frozen=True)
class StateRows:
    """The state version and fleet version, with the pools changed since the version asked for
    (every pool when asked since -1; removed ones among them when they changed), in name order;
    read in one consistent read. Asked with a time, also the live placements whose lease had ended
    by then (``ended``: (decision id, pool)) and what every live grant of those pools holds
    (``held``), so that a read can see those leases ended before any write releases them."""

    version: int
    fleet_version: int
    pools: tuple[PoolRow, ...]
    ended: tuple[tuple[str, str], ...] = ()
    held: Mapping[str, tuple[HeldRow, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class DecisionRow:
    """A decision as stored: its record (text) and what happened to it since: released, its job
    (and what reconcile read of it: when it really started and ended, a node of it gone down), the
    queued record it was admitted for (``queued_id``), the queued record a planned preemption takes
    its grant for (``preempting_for``)."""

    id: str
    created_at: str
    document: str
    released_at: str | None = None
    job_id: str | None = None
    request_id: str | None = None
    lease_expires_at: str | None = None
    scheduler: str | None = None
    job_uid: str | None = None
    job_state: str | None = None
    queued_id: str | None = None
    job_started_at: str | None = None
    job_ended_at: str | None = None
    node_down_at: str | None = None
    preempting_for: str | None = None


@dataclass(frozen=True)
class BurstRow:
    """A burst attempt, written with its decision."""

    workload: str
    residency: str
    pool: str | None
    region: str | None
    verdict: str
    reason_code: str | None
    reason: str | None


@dataclass(frozen=True)
class NewDecision:
    """What a decision writes, in one go: the decision's columns and record, and for a placement
    the grant (its pool, devices held in all, each holding with its share of a device)."""

    id: str
    created_at: str
    workload: str
    outcome: str
    document: str
    record_digest: str
    input_digest: str
    policy_revision: str
    opa_version: str
    verdicts: str
    fleet_revision: str | None
    verdict_set: str
    residency: str
    fraction: float
    note: str | None
    request_id: str | None = None
    pool: str | None = None
    accelerator: str | None = None
    model: str | None = None
    target: str | None = None
    region: str | None = None
    fallback: bool | None = None
    fraction_honored: bool | None = None
    devices: float | None = None
    cost_per_hour: float | None = None
    carbon_factor: float | None = None
    lease_expires_at: str | None = None
    larger_partition: bool | None = None
    holdings: tuple[Holding, ...] = ()
    share: float = 0.0
    burst: BurstRow | None = None
    # When the chosen pool was expected to start it (RFC 3339 UTC; None: no estimate) and who said so.
    estimated_start: str | None = None
    estimate_source: str | None = None
    queued_id: str | None = None
    project: str | None = None
    priority: str | None = None
    # The preempted grant whose workload this decision places again (at once, or queued again).
    replaces: str | None = None
    # A node-tracked grant node by node: each node's holdings (or its share: (device, shares) with
    # the share of a device it is), CPU and memory. Empty: ``holdings`` on the pool's one node.
    nodes: tuple[NewNodeGrant, ...] = ()


@dataclass(frozen=True)
class NewNodeGrant:
    """What a new grant holds on one node."""

    node: str
    holdings: tuple[Holding, ...] = ()
    share: tuple[int, int, float] | None = None  # (device, shares, share of the device)
    cpu_milli: int = 0
    memory_mib: int = 0


QueueState = Literal["queued", "admitted", "cancelled", "failed"]


@dataclass(frozen=True)
class QueueRow:
    """A queued record's place in the queue: what it asks (for the order), how to place and
    submit it once admitted, and what became of it."""

    id: str
    state: str
    queued_at: str
    queued_ts: float
    workload: str
    spec: str
    project: str | None
    priority: str | None
    accelerator: str
    devices: float
    lease_s: float | None = None
    submission: str | None = None
    admitted_by: str | None = None
    ended_at: str | None = None
    preempted_from: str | None = None
    message: str | None = None
    attempts: int = 0
    version: int = 1
    waits_for: str | None = None


@dataclass(frozen=True)
class NewQueued:
    """What queueing a workload writes beside its queued decision."""

    id: str
    queued_at: str
    workload: str
    spec: str
    project: str | None
    priority: str | None
    accelerator: str
    devices: float
    lease_s: float | None = None
    submission: str | None = None
    preempted_from: str | None = None
    waits_for: str | None = None


@dataclass(frozen=True)
class GrantRow:
    """A placement as the queue and reconcile read it (columns only): its project and class, its
    grant, its job and what reconcile recorded of it."""

    id: str
    created_at: str
    created_ts: float
    released_ts: float | None
    workload: str
    project: str | None
    priority: str | None
    pool: str
    accelerator: str
    devices: float
    job_id: str | None = None
    scheduler: str | None = None
    job_uid: str | None = None
    job_state: str | None = None
    job_started_at: str | None = None
    node_down_at: str | None = None
    preempting_for: str | None = None
    queued_id: str | None = None
    replaces: str | None = None  # the preempted grant whose workload it places again


@dataclass(frozen=True)
class TokenRow:
    """A bearer token of the placement service as stored: its id, the project it acts for, its
    scopes, the SHA-256 digest of the token (never the token), when it was made, when it expires
    and when it was revoked (None: not)."""

    id: str
    project: str
    scopes: tuple[str, ...]
    digest: str
    created_at: str
    expires_at: str | None = None
    revoked_at: str | None = None


class Transaction(Protocol):
    """One write transaction holding the store's write lock: reads see what it wrote so far."""

    def now(self) -> str:
        """The time this write is recorded at (ISO 8601 UTC)."""
        ...

    def state(self) -> tuple[int, int]:
        """(version, fleet_version)."""
        ...

    def bump(self, *, fleet: bool = False) -> int:
        """The next state version (and fleet version); returns the new state version."""
        ...

    def pools(self, since: int = -1) -> list[PoolRow]:
        """The pools changed after state version ``since``, in name order."""
        ...

    def pool(self, name: str) -> PoolRow | None: ...

    def held(self, pool: str) -> list[HeldRow]:
        """What the live grants on ``pool`` hold."""
        ...

    def held_in(self, pools: Sequence[str], *, submitted: bool = False) -> list[HeldRow]:
        """What the live grants on ``pools`` hold (``submitted``: only those handed to a
        scheduler), each row naming its pool."""
        ...

    def node_grants(self, pools: Sequence[str], *, submitted: bool = False) -> list[NodeGrantRow]:
        """The CPU and memory the live grants on ``pools`` hold, node by node."""
        ...

    def grant_of(self, ident: str) -> tuple[list[HeldRow], list[NodeGrantRow]]:
        """What one placement holds, released or not: its holdings (node by node, by device) and
        the CPU and memory of each node of its grant (by place in the gang); by its id alone."""
        ...

    def node_usage(self, pools: Sequence[str]) -> list[NodeUsageRow]:
        """What schedulers report busy on the nodes of ``pools`` beyond this layer's grants."""
        ...

    def set_node_usage(self, pool: str, rows: Sequence[NodeUsageRow], scheduler: str) -> None:
        """Replace what ``pool``'s scheduler reports busy on its nodes (nodes not in ``rows``: none)."""
        ...

    def move_holding(self, row: HeldRow, node: str, device: int) -> None:
        """Give a live holding its node (and its device's index there): grants recorded before
        grants named nodes."""
        ...

    def holders(self, pool: str) -> list[str]:
        """The live decisions holding devices of ``pool``, by id."""
        ...

    def submitted_devices(self, pool: str) -> float:
        """Devices of ``pool`` held by live placements that were handed to a scheduler."""
        ...

    def add_pool(self, name: str, spec: str, count: int, version: int) -> None:
        """Register a pool (a removed pool of that name comes back, with nothing held outside)."""
        ...

    def update_pool(self, name: str, spec: str, count: int) -> None: ...

    def remove_pool(self, name: str, version: int, *, at: str | None = None) -> None:
        """The pool leaves the fleet at ``version``, removed at ``at`` (None: now); its row stays for
        the records that name it."""
        ...

    def set_removing(self, name: str, since: str | None, version: int) -> None:
        """Mark the pool, at ``version``, to go when its last live grant ends (None: not any more)."""
        ...

    def set_capacity(self, pool: str, capacity: str, free: float, version: int) -> None:
        """A pool's capacity changed at ``version``: store it and append it to the capacity log."""
        ...

    def set_held_outside(self, pool: str, held_outside: float) -> None: ...

    def put_document(self, kind: Document, key: str, document: Callable[[], bytes]) -> None:
        """Store a content-addressed document once (``document`` is built only when it is not
        known to be stored already)."""
        ...

    def find(self, ident: str) -> DecisionRow:
        """A decision by id or unique id prefix; NotFoundError otherwise."""
        ...

    def by_id(self, ident: str) -> DecisionRow | None: ...

    def by_request(self, request_id: str) -> DecisionRow | None: ...

    def lease_ended(self, now: str) -> list[DecisionRow]:
        """Live placements whose lease ended before ``now`` and that were never submitted."""
        ...

    def add_decision(self, row: NewDecision) -> None:
        """The decision, its grant's allocation and holdings, and its burst event."""
        ...

    def release(self, ident: str, at: str) -> str:
        """Free what a placement holds, released at ``at`` (now, or when its lease ended); the pool
        it held. SpecError when it placed nothing."""
        ...

    def renew(self, ident: str, lease_expires_at: str) -> None:
        """SpecError unless ``ident`` is a live placement."""
        ...

    def set_job(self, ident: str, job_id: str, scheduler: str, uid: str | None, *, at: str | None = None) -> None:
        """Record the placement's job, submitted at ``at`` (None: now). SpecError unless ``ident``
        is a live placement without a job."""
        ...

    def set_job_state(self, ident: str, state: str) -> bool:
        """Whether the state changed."""
        ...

    def audit(self, kind: str, body: JSONObject, *, source: str) -> None:
        """Append an entry to the audit chain."""
        ...

    def layout(self) -> str | None:
        """The digest of the packing rules the stored capacities were worked out with."""
        ...

    def set_layout(self, digest: str) -> None: ...

    def unheld_grants(self, pool: str) -> list[tuple[str, float, str]]:
        """Live grants on ``pool`` recorded before grants held devices: (id, devices, record)."""
        ...

    def hold(self, ident: str, pool: str, holdings: Sequence[Holding], share: float) -> None:
        """Give a live grant its devices (grants recorded before grants held devices)."""
        ...

    # -- the queue, quotas and reconcile --------------------------------------------------------

    def add_queued(self, row: NewQueued) -> None:
        """The queue's row for a queued decision (written in the same transaction)."""
        ...

    def queue_row(self, ident: str) -> QueueRow | None: ...

    def claim(self, queued_id: str, now: str) -> bool:
        """Mark a waiting row admitted: True only when it was waiting (one conditional update;
        another admitter or a cancel that came first leaves it False)."""
        ...

    def link_admitted(self, queued_id: str, placement_id: str) -> None:
        """The placement that admitted a claimed row (written in the same transaction)."""
        ...

    def end_queued(self, ident: str, state: QueueState, now: str, *, message: str | None = None, was: tuple[str, ...] = ("queued",)) -> bool:
        """Move a row in one of the states ``was`` to ``state`` (cancelled, failed): whether it moved."""
        ...

    def note_attempt(self, ident: str, message: str | None) -> int:
        """Count a submission tried for an admitted row (its message kept); the attempts now."""
        ...

    def quota_held(self, pairs: Sequence[tuple[str, str]], unassigned: str) -> dict[tuple[str, str], float]:
        """Devices the live placements of each (project, class) hold (a decision without a project
        counts as ``unassigned``)."""
        ...

    def device_hours(self, project: str, accelerator: str, since_ts: float, now_ts: float, unassigned: str) -> float:
        """Device-hours the placements of (project, class) held between ``since_ts`` and ``now_ts``."""
        ...

    def job_ended(self, ident: str, state: str, started_at: str | None, ended_at: str | None) -> None:
        """What the scheduler said of a job that ended: its end state and times."""
        ...

    def job_started(self, ident: str, at: str) -> bool:
        """The job's actual start, once: whether it was recorded now."""
        ...

    def flag_node_down(self, ident: str, at: str | None) -> bool:
        """Flag a live grant whose node went down (None: clear it): whether it changed."""
        ...

    def set_preempting(self, ident: str, queued_id: str | None) -> bool:
        """Mark a live grant as taken by a planned preemption for ``queued_id`` (None: unmark)."""
        ...

    def grant_row(self, ident: str) -> GrantRow | None: ...

    def replaced(self, victim: str) -> str | None:
        """The decision that places a preempted grant's workload again (at once, or queued again),
        if one was made: what makes placing it again conditional, keyed by the victim."""
        ...

    def add_token(self, row: TokenRow) -> None:
        """Record a new bearer token (its digest)."""
        ...

    def find_token(self, ident: str) -> TokenRow | None: ...

    def revoke_token(self, ident: str, at: str) -> bool:
        """Revoke a live token; False when it was revoked already."""
        ...


class Rows(Protocol):
    """The reads the decision core makes outside a write transaction, and the write transaction."""

    def now(self) -> str:
        """The store's time now (ISO 8601 UTC), as a write would record it."""
        ...

    def rows(self, since: int = -1, *, now: str | None = None) -> StateRows:
        """See ``StateRows``; ``now``: also the leases ended by then."""
        ...

    def layout(self) -> str | None:
        """The digest of the packing rules the stored capacities were worked out with."""
        ...

    def node_rows(self, pools: Sequence[str]) -> tuple[list[HeldRow], list[NodeGrantRow], list[NodeUsageRow]]:
        """What the live grants on ``pools`` hold (devices, then CPU and memory node by node) and
        what schedulers report busy on their nodes, in one consistent read."""
        ...

    def capacities_at(self, version: int) -> dict[str, str]:
        """Every pool's capacity (text) at state version ``version``: its latest logged capacity
        at or before it."""
        ...

    def document(self, kind: Document, key: str) -> str:
        """A stored fleet or verdict-set document; StateError when it is missing."""
        ...

    def transaction(self, work: Callable[[Transaction], T], *, landed: Callable[[Transaction], T | None] | None = None) -> T:
        """``work`` in one write transaction holding the write lock, re-run a bounded number of
        times on conflicts; ``landed`` settles a connection lost while committing (what the
        committed work returned, or None when nothing landed)."""
        ...


# -- what exa audit verify reads --------------------------------------------------------------------

# The tables the audit chain describes, each with the columns it is read with (in this order) and
# the order its rows come in.
AUDITED: Final[Mapping[str, tuple[tuple[str, ...], str]]] = {
    "decisions": ((
        "id", "created_at", "workload", "outcome", "pool", "accelerator", "model", "target", "region", "fallback",
        "fraction_honored", "devices", "cost_per_hour", "carbon_factor", "note", "input_digest", "policy_revision",
        "opa_version", "released_at", "job_id", "document", "record_digest", "fleet_revision", "verdict_set",
        "request_id", "lease_expires_at", "created_ts", "released_ts", "residency", "verdicts", "fraction", "scheduler",
        "job_uid", "job_state", "lease_expires_ts", "larger_partition", "estimated_start", "estimate_source", "submitted_at",
        "queued_id", "project", "priority", "job_started_at", "job_ended_at", "node_down_at", "preempting_for", "replaces",
    ), "id"),
    "queue": ((
        "id", "state", "queued_at", "workload", "project", "priority", "accelerator", "devices", "lease_s", "admitted_by", "ended_at",
        "preempted_from", "message", "attempts", "spec", "submission",
    ), "id"),
    "allocations": (("decision_id", "pool", "devices", "created_at", "released_at"), "decision_id"),
    "holdings": (("decision_id", "pool", "device", "profile", "start", "units", "share", "node", "shares"), "decision_id, node, device"),
    "node_grants": (("decision_id", "pool", "node", "position", "cpu_milli", "memory_mib"), "decision_id, position"),
    "node_usage": (("pool", "node", "devices", "indices", "shares", "cpu_milli", "memory_mib", "scheduler"), "pool, node"),
    "burst_events": (("id", "created_at", "decision_id", "workload", "residency", "pool", "region", "verdict", "reason_code", "reason"), "id"),
    "pools": (("name", "spec", "count", "held_outside", "free", "capacity", "version", "removed_at", "removing_since"), "name"),
    "capacity_log": (("version", "pool", "capacity"), "version, pool"),
}  # fmt: skip


class AuditedRead(Protocol):
    """What ``exa audit verify`` reads, inside ONE consistent read (``Store.audited_read``): a write
    committed meanwhile cannot show up as a row without its entry. The log and the tables are
    streamed (read a batch at a time while the read lasts), so verifying holds what its checks keep,
    not the whole state; each stream may be read once."""

    version: int  # the state version
    layout: str | None  # the digest of the packing rules the stored capacities were worked out with

    def log(self) -> Iterator[AuditRow]:
        """The audit log in seq order."""
        ...

    def documents(self) -> list[tuple[str, str]]:
        """The stored fleet and verdict-set documents as (key, document)."""
        ...

    def rows(self, table: str) -> Iterator[tuple[object, ...]]:
        """The rows of a table of ``AUDITED``, tuples in its column order, in its order."""
        ...


@dataclass(frozen=True)
class AuditedState:
    """What ``exa audit verify`` holds the state the chain describes to, besides what streams by
    (``AuditedRead``): the stored fleet and verdict-set documents as (key, document), the tables
    read whole as rows (tuples in their column order; the streamed ones absent), the state version
    and the digest of the packing rules the stored capacities were worked out with."""

    documents: Sequence[tuple[str, str]]
    tables: Mapping[str, Sequence[tuple[object, ...]]]
    version: int
    layout: str | None
