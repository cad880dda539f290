"""What the decision path writes, through the store's narrow transaction API.

A placement is decided outside any lock, on a snapshot of the state (``Snapshot``: its version);
then one write transaction (``place``) confirms the fleet is the one the policy judged (else
``StaleFleet``: ask the policy again), re-runs the selection only when the snapshot is stale for the
pools that matter (the chosen pool, or a pool ranked before it that has room now; for a rejection,
any pool whose capacity changed), picks the concrete devices, and writes the decision, its grant,
its burst event and its audit entries, and the one capacity that changed. Nothing waits on OPA or
the network while the write lock is held, and the cost of a write is the grant's, not the fleet's:
the record names the state version whose capacity it was decided at; the store's capacity log
(appended only for pools whose capacity changed) gives every pool's capacity at that version back.

The other writes that change what pools hold or can place run here too, so that the store holds no
decision logic: releases (and leases that ended: every write first releases them, stamped with the
time their lease ended, in ``expire``), pools registered or changed, devices a scheduler reports
busy, and capacities worked out again when the packing rules change.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Final, Protocol, TypeGuard, TypeVar, cast

from examlops_policy.errors import NotFoundError, SpecError, StateError
from examlops_policy.quantities import cpu_text, memory_text
from examlops_policy.model import (
    START_OBJECTIVES,
    WORK_OBJECTIVES,
    Capacity, Decision, DeviceShare, Holding, JSONObject, JSONValue, Node, NodeAllocation, Placement, Pool, PoolState, Queued, Rejection, iso, pool_spec,
)
from examlops_policy.store.api import (
    BurstRow, DecisionRow, HeldRow, NewDecision, NewNodeGrant, NewQueued, NodeUsageRow, PoolRow, QueueRow, Rows, StaleFleet,
    StateRows, Transaction,
)  # fmt: skip
from examlops_policy.views import DecisionRecord, PoolChange
from examlops_policy._core import codec, leases, packing
from examlops_policy._core import quota as quotas
from examlops_policy._core.quota import NO_USE, QuotaUse
from examlops_policy._core.engine import Prepared
from examlops_policy._core.selection import Judged
from examlops_policy._core.state import Capacities, Sharing, Snapshot, merge, sharing_of
from examlops_policy._core.waiting import Starts

if TYPE_CHECKING:  # the node packer (numpy) loads only where a pool has nodes
    from examlops_policy import _nodes
    from examlops_policy._core.rooms import Rooms

T = TypeVar("T")

# A pool's accelerator, model, target, region or partitioning decides what its live grants are:
# none of them may change while decisions hold its devices.
FROZEN_WHILE_HELD: Final = ("accelerator", "model", "target", "region", "supports_fractions", "fixed_profile")

__all__ = [
    "Committed", "StaleFleet", "apply_pools", "ensure_layout", "expire", "mark_job", "place", "record_usage", "release", "remove_pools",
    "reconcile_node", "renew", "set_drained", "set_job", "set_node_states",
]  # fmt: skip


@dataclass(frozen=True)
class Committed:
    """What ``place`` did: the decision recorded (``record``), or the one an earlier call with the
    same request id recorded (``earlier``: its row, to be read back). An admission that wrote
    nothing says why (``not_admitted``: ``no_room`` when nothing fits under the lock, ``claimed``
    when the queued record was no longer waiting: another admitter or a cancel came first;
    ``replaced`` when a preempted victim to place again already was: ``earlier`` is that decision)."""

    record: DecisionRecord | None
    earlier: DecisionRow | None = None
    not_admitted: str | None = None
    # When the write changed nothing but the chosen pool, on top of the snapshot it was decided
    # on: the state version after it and the pool's state then (the caller's next snapshot).
    after: tuple[int, PoolState] | None = None


@dataclass(frozen=True)
class QueueIntent:
    """A placement that waits when its pools are only full: what the queue keeps of it (``spec``:
    the workload in full, JSON; ``submission``: how to submit it once placed, JSON or None), and
    where the queue's order put it (``position`` of ``of``, asked before the write) and what it
    waits for (reason code -> pools)."""

    spec: str
    accelerator: str
    devices: float
    project: str | None = None
    priority: str | None = None
    lease_s: float | None = None
    submission: str | None = None
    queued_at: str | None = None
    preempted_from: str | None = None
    position: int | None = None
    of: int | None = None
    waits_for: Mapping[str, int] = dataclasses.field(default_factory=dict)


def waits_for(decision: Decision) -> dict[str, int]:
    """What a queued workload waits for: per reason code, the pools stopped by ``not_now`` reasons
    alone (full, slice unavailable, over quota) that it is found on."""
    counts: dict[str, int] = {}
    for v in decision.verdicts:
        reasons = [r for r in v.reasons if r.kind != "preference"]
        if reasons and all(r.kind == "not_now" for r in reasons):
            for code in sorted({r.code for r in reasons}):
                counts[code] = counts.get(code, 0) + 1
    return counts


def queueable(decision: Decision) -> TypeGuard[Rejection]:
    """Only a workload whose pools are stopped by ``not_now`` reasons alone (full, slice
    unavailable, over quota) may wait: the policy's ``no_capacity``. One that can never run, or
    whose burst data residency blocked, is rejected at once."""
    return isinstance(decision, Rejection) and decision.code == "no_capacity" and not decision.burst_blocked


def read_quota(source: QuotaSource, needs: quotas.Needs, unassigned: str, now_ts: float) -> QuotaUse:
    """What the projects a judgement's quotas count hold now (through the store, or a write
    transaction under the lock)."""
    if needs.empty:
        return NO_USE
    devices: dict[str, dict[str, float]] = {}
    for (p, c), n in source.quota_held(sorted(needs.devices), unassigned).items():
        devices.setdefault(p, {})[c] = n
    hours: dict[str, dict[str, float]] = {}
    for (p, c), days in sorted(needs.hours.items()):
        h = round(source.device_hours(p, c, now_ts - days * 86400.0, now_ts, unassigned), 6)
        if h > 0:
            hours.setdefault(p, {})[c] = h
    return QuotaUse(devices, hours)


class QuotaSource(Protocol):
    """Where what the projects hold is read: the store, or a write transaction."""

    def quota_held(self, pairs: Sequence[tuple[str, str]], unassigned: str) -> dict[tuple[str, str], float]: ...

    def device_hours(self, project: str, accelerator: str, since_ts: float, now_ts: float, unassigned: str) -> float: ...


def epoch_of(ts: str) -> float:
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


# -- placements ----------------------------------------------------------------------------------


def place(
    store: Rows,
    prepared: Prepared,
    decided: Decision,
    snapshot: Snapshot,
    capacities: Capacities,
    *,
    source: str,
    request_id: str | None = None,
    lease_expires_at: str | None = None,
    queue: QueueIntent | None = None,
    admit: str | None = None,
    ident: str | None = None,
    preempted: Sequence[str] = (),
    lease: timedelta | None = None,
    starts: Starts | None = None,
    withheld: Mapping[str, int] | None = None,
) -> Committed:
    """Record ``decided`` (made on ``snapshot`` from ``prepared`` with the start estimates
    ``starts``, gathered before, and on what the projects held for its quotas) in one write
    transaction.

    ``queue``: a workload whose pools are only full (``queueable``) is recorded as ``queued``, with
    its row in the queue, instead of rejected. ``admit``: the placement admits the queued record
    of that id: written only when selection under the lock still places it and the record is still
    waiting (claimed in this transaction, linked to the placement); else nothing is written for it.
    ``preempted``: grants a planned preemption marked for ``admit`` whose jobs were cancelled: released
    first, in the same transaction (audited as ``preempted``), whatever selection then finds.

    ``withheld``: whole devices of pools a queue's reservation keeps from this workload (pool ->
    devices): it was decided, and is decided again, as if they were held, and its record keeps the
    capacities it was decided on (a record of version 2), so it rebuilds as decided.

    ``lease``: the placement's lease, counted from this commit (``lease_expires_at``: an end
    given outright). Raises StaleFleet when pools were added or changed since the snapshot, or
    when selection, depending on the estimates, now chooses a pool whose start was not asked
    (decide again; what expire released is committed first);
    StateError when the store refuses (nothing written).
    """
    ident = ident or uuid.uuid4().hex  # chosen once: a retry after a lost COMMIT can tell whether it landed
    made: list[DecisionRecord] = []
    needs = prepared.judged.quota_needs
    tables = capacities.tables
    # A snapshot that sees ended leases is a view as of a time; the stored one it was made from is
    # what the state version and the capacity log say.
    base = snapshot.base or snapshot

    # Why a round ends without a record and is asked again (StaleFleet, once what it expired is
    # committed): the fleet changed, or a winner's start was not asked.
    retry: list[str] = []

    def work(txn: Transaction) -> Committed:
        made.clear()
        retry.clear()
        expire(txn, capacities, source=source)
        for victim in preempted:
            grant = txn.grant_row(victim)
            if grant is not None and grant.released_ts is None and grant.preempting_for == admit:
                _release(txn, capacities, victim, source=source, kind="preempted")
        if request_id is not None:
            earlier = txn.by_request(request_id)
            if earlier is not None:
                return Committed(None, earlier)
        version, fleet = txn.state()
        if fleet != base.fleet_version:
            # Said once this commits: what expire released stays released (and a pool whose
            # removal waited on it stays removed), so the next round sees the fleet as it is.
            retry.append("pools were added or changed while the policy was asked; asking again")
            return stale_fleet
        snap, decision = snapshot, decided
        # The capacities the decision was made on (the node packer's choice among tied pools
        # decides again on them).
        made_on: Callable[[], Sequence[Capacity]] = lambda: withhold(snapshot.capacities, snapshot.pools, withheld) if withheld else snapshot.capacities
        # What the projects hold now, when a quota counts it: a decision made on other figures is
        # made again (selection, pure).
        use = read_quota(txn, needs, tables.unassigned, epoch_of(txn.now())) if not needs.empty else NO_USE
        quota_moved = not needs.empty and (prepared.quota_held(use).as_json() or None) != decided.provenance.quota_use
        again = False
        if version != base.version or snapshot.base is not None:
            snap, changed = merge(base, _rows(txn, version, fleet, base.version))
            indexes = [prepared.judged.fleet.index[n] for n in changed if n in prepared.judged.fleet.index]
            # Decided on a view that saw ended leases: decided again on the state they left (the
            # record names its version, whose logged capacity its input digest must cover).
            if quota_moved or snapshot.base is not None or stale(prepared.judged, decided, snap.capacities, indexes):
                again = True
            else:
                snap = snapshot  # decided on the snapshot's capacity, and still what selection gives now
        elif quota_moved:
            again = True
        if again and withheld:
            seen = withhold(snap.capacities, snap.pools, withheld)
            decision = prepared.decide(seen, tables, capacities_digest=codec.capacity_digest(seen), starts=starts, quota=use)
            made_on = lambda: seen  # noqa: E731
        elif again:
            decision = prepared.decide(snap.capacities, tables, capacities_digest=snap.capacity_digest, starts=starts, quota=use)
            made_on = lambda: snap.capacities  # noqa: E731
            if isinstance(decision, Placement) and starts is not None and starts.of(decision.pool) is None and _by_start(prepared):
                # Selection depends on the estimates, and nothing waits on a scheduler under the
                # lock: a winner whose start was not asked is decided again. (Without a wait
                # limit or earliest the estimate only informs: the record says it was not asked.)
                retry.append(f"pool {decision.pool!r}, chosen now, was not asked when it would start; asking again")
                return stale_fleet
        replaces = queue.preempted_from if queue is not None else None
        if replaces is not None:
            # A preempted workload is placed (or queued) again once: the first write for its victim
            # wins, under the lock; another finds it and writes nothing.
            found = txn.replaced(replaces)
            if found is not None:
                return Committed(None, txn.by_id(found), not_admitted="replaced")
        if again and queue is not None and not withheld and isinstance(decision, Placement) and not isinstance(decided, Placement):
            # It would have waited and fits now (capacity freed meanwhile): whether the queue's
            # reservation lets it take that capacity is asked outside the lock, so it is asked again.
            retry.append("capacity freed while it was judged; asking again whether the queue reserves it")
            return stale_fleet
        if admit is not None:
            if not isinstance(decision, Placement):
                return Committed(None, not_admitted="no_room")
            claimed_at = txn.now()
            if not txn.claim(admit, claimed_at):
                return Committed(None, not_admitted="claimed")
        queued = queue if queue is not None and queueable(decision) else None
        held: list[HeldRow] = []
        room: Rooms | None = None
        current: PoolRow | None = None
        if isinstance(decision, Placement):
            built: dict[str, tuple[Rooms, PoolRow | None]] = {}
            sharing = capacities.sharing(fleet, snap.pools)

            def pool_of(name: str) -> Pool:
                return snap.states[snap.index[name]].pool

            def room_of(name: str) -> Rooms | None:
                pool = pool_of(name)
                if not pool.node_tracked:
                    return None
                if name not in built:
                    built[name] = _room(txn, capacities, pool, sharing)
                return built[name][0]

            chooser: _nodes.Packer | None = None
            if any(pool_of(name).node_tracked for name in (decision.pool, *decision.tied)):
                from examlops_policy._core import joint

                def sharers(name: str) -> list[Pool]:
                    return [pool_of(other) for other in sharing.group(name)[1:]]

                decision, room, chooser = joint.settle(prepared, decision, made_on(), tables, starts, room_of, pool_of, sharers)
                assert isinstance(decision, Placement)
            state = snap.states[snap.index[decision.pool]]
            if room is not None:
                from examlops_policy._core import rooms

                current = built[decision.pool][1]
                allocations = rooms.choose(room, decision.grant, decision.workload, chooser=chooser)
                if allocations is None:
                    raise StateError(
                        f"pool {decision.pool!r}: its capacity summary says the grant fits but no node has room; "
                        "nothing was written (run exa hardware pool to see its nodes)"
                    )
                holdings = tuple(h for a in allocations for h in a.holdings)
                decision = dataclasses.replace(decision, holdings=holdings, allocations=allocations)
            else:
                held = txn.held(decision.pool)
                chosen = packing.choose(
                    capacities.layout(state.pool), [h.holding for h in held], decision.grant.profile, decision.grant.units, state.held_outside
                )
                if chosen is None:
                    raise StateError(
                        f"pool {decision.pool!r}: its capacity summary says the grant fits but no device has room; "
                        "nothing was written (run exa hardware pool to see its devices)"
                    )
                decision = dataclasses.replace(decision, holdings=chosen)
        project, priority = prepared.workload.project, prepared.workload.priority
        if queued is not None:
            assert isinstance(decision, Rejection)
            decision = Queued.of(decision)
        now = txn.now()
        until = leases.lease_end(now, lease) if lease is not None else lease_expires_at
        record = _write(
            txn, ident, decision, prepared, snap.version, now=now, source=source, request_id=request_id, lease_expires_at=until,
            starts=starts, queued_id=admit, project=project, priority=priority, replaces=replaces,
            seen=withhold(snap.capacities, snap.pools, withheld) if withheld else None,
        )  # fmt: skip
        if queued is not None:
            _enqueue(txn, ident, decision, queued, source=source)
        if admit is not None:
            txn.link_admitted(admit, ident)
            txn.audit(
                "admit", {"queued_id": admit, "decision_id": ident, "pool": getattr(decision, "pool", None), "ended_at": claimed_at}, source=source
            )
        after = None
        if isinstance(decision, Placement):
            state = snap.states[snap.index[decision.pool]]
            bumped = txn.bump()
            alone = True
            if room is not None:
                from examlops_policy._core import rooms

                # Only the granted nodes changed: a room kept from this process's last write has
                # the summary of the others (a room built anew is summed up whole).
                capacity, free = rooms.summary(room, [room.capacity.index[a.node] for a in decision.allocations])
                txn.set_capacity(decision.pool, codec.capacity_text(capacity), free, bumped)
                if current is not None:
                    capacities.keep_rooms(decision.pool, bumped, current.spec, room)
                sharing = capacities.sharing(fleet, snap.pools)
                _refresh_sharers(txn, capacities, decision.pool, sharing, bumped)
                alone = len(sharing.group(decision.pool)) == 1  # else the pools sharing its nodes changed too
            else:
                mine = [HeldRow(ident, h, decision.grant.share) for h in decision.holdings]
                capacity, free = _refresh(txn, capacities, state.pool, state.held_outside, bumped, [*held, *mine])
            if alone and snap is snapshot and snapshot.base is None and version == snapshot.version:
                after = (bumped, PoolState(state.pool, free, capacity, state.held_outside, state.removing))
        made.append(record)
        return Committed(record, after=after)

    def landed(txn: Transaction) -> Committed | None:
        row = txn.by_id(ident)
        if row is None:
            return None
        return Committed(made[-1]) if made else Committed(None, row)

    stale_fleet = Committed(None)
    done = store.transaction(work, landed=landed)
    if done is stale_fleet:
        raise StaleFleet(retry[-1])
    return done


def withhold(capacities: Sequence[Capacity], pools: Sequence[Pool], withheld: Mapping[str, int]) -> list[Capacity]:
    """The capacities with the whole devices a reservation keeps taken out (a pool counted node
    by node is left as it is: its nodes say what it can place)."""
    return [
        Capacity(max(0, c.whole - withheld[p.name]), c.slices, c.nodes) if p.name in withheld and c.nodes is None else c
        for c, p in zip(capacities, pools)
    ]


# The objectives a change of capacity elsewhere may reorder (by score, by start, by a larger grant's
# work): a decision under them is made again when any pool of its tier or better changed.
PER_DECISION: Final = ("balanced", *START_OBJECTIVES, *WORK_OBJECTIVES)


def _by_start(prepared: Prepared) -> bool:
    """Whether the workload's selection depends on start estimates (a wait limit, or earliest or
    work-time)."""
    return prepared.judged.workload.wait.any or prepared.judged.objective in START_OBJECTIVES


def _rows(txn: Transaction, version: int, fleet: int, since: int) -> StateRows:
    return StateRows(version, fleet, tuple(txn.pools(since)))


def stale(judged: Judged, decided: Decision, capacities: Sequence[Capacity], changed: Sequence[int]) -> bool:
    """Whether a decision made before the pools at ``changed`` (fleet indexes) changed capacity
    may no longer be what selection gives now: its pool or a pool it tied with changed, or a pool
    ranked before it or tying with it has room now (for the balanced objective, any admissible pool of its tier or a better one changed);
    a rejection, whenever any pool changed. (Start estimates do not change under the lock: they
    were gathered before it.)"""
    if not changed:
        return False
    if not isinstance(decided, Placement):
        return True
    chosen = judged.fleet.index[decided.pool]
    if chosen in changed or any(judged.fleet.index[name] in changed for name in decided.tied):
        return True  # its pool, or a pool it tied with (which the packer chooses among)
    rank = judged.rank
    tier = judged.verdict(chosen).tier
    # Where the decision ranks with what its pool gives (a larger share ranks after the smallest).
    at_best = judged.key_of(chosen, decided.grant)
    for i in changed:
        at = rank.get(i)
        if at is None:
            continue  # denied by its shape or budget: never chosen, whatever its room
        v = judged.verdict(i)
        if judged.objective in PER_DECISION:  # ranked per decision, not by cost alone
            if v.tier <= tier:
                return True
        elif judged.ranked[at][:-2] <= at_best[:-1] and judged.grant_for(i, capacities[i]) is not None:
            return True  # ranks before it, or ties with it (name aside), and has room now
    return False


def _write(
    txn: Transaction,
    ident: str,
    decision: Decision,
    prepared: Prepared,
    at: int,
    *,
    now: str,
    source: str,
    request_id: str | None,
    lease_expires_at: str | None,
    starts: Starts | None = None,
    queued_id: str | None = None,
    project: str | None = None,
    priority: str | None = None,
    replaces: str | None = None,
    seen: Sequence[Capacity] | None = None,
) -> DecisionRecord:
    """The decision's documents, row, grant, burst event and audit entries, recorded at ``now``
    (``seen``: the capacities it was decided on when they are not the state's at ``at``)."""
    fleet = prepared.judged.fleet
    txn.put_document("fleets", fleet.revision, lambda: fleet.document)
    txn.put_document("verdict_sets", prepared.verdict_set_key, lambda: prepared.verdict_set_bytes)
    placed = decision if isinstance(decision, Placement) else None
    document = codec.encode_record(
        decision, workload=prepared.request.input, verdict_set=prepared.verdict_set_key, at=at if seen is None else None,
        capacities=seen or (), holdings=placed.holdings if placed else (), starts=starts, allocations=placed.allocations if placed else (),
    )  # fmt: skip
    estimate = placed.estimate if placed else None
    record_digest = codec.digest(document)
    prov = decision.provenance
    burst = decision.burst
    burst_row = None
    if burst.attempted:
        allowed = placed is not None and burst.verdict == "allowed"
        burst_row = BurstRow(
            decision.workload.name, decision.workload.residency,
            placed.pool if allowed and placed else burst.pool, placed.region if allowed and placed else burst.region,
            str(burst.verdict), burst.reason.code if burst.reason else None, burst.reason.message if burst.reason else None,
        )  # fmt: skip
    txn.add_decision(
        NewDecision(
            id=ident, created_at=now, workload=decision.workload.name, outcome=decision.outcome, document=document.decode("utf-8"),
            record_digest=record_digest, input_digest=prov.input_digest, policy_revision=prov.policy_revision,
            opa_version=prov.opa_version, verdicts=prov.verdicts, fleet_revision=fleet.revision,
            verdict_set=prepared.verdict_set_key, residency=decision.workload.residency, fraction=decision.workload.fraction,
            note=placed.note if placed else decision.reason,  # type: ignore[union-attr]
            request_id=request_id,
            pool=placed.pool if placed else None, accelerator=placed.accelerator if placed else None,
            model=placed.model if placed else None, target=placed.target if placed else None, region=placed.region if placed else None,
            fallback=placed.fallback if placed else None, fraction_honored=placed.fraction_honored if placed else None,
            devices=placed.grant.devices if placed else None, cost_per_hour=placed.cost_per_hour if placed else None,
            carbon_factor=placed.carbon_factor if placed else None, lease_expires_at=lease_expires_at if placed else None,
            larger_partition=placed.grant.larger if placed else None,
            holdings=placed.holdings if placed else (), share=placed.grant.share if placed else 0.0, burst=burst_row,
            estimated_start=None if estimate is None or estimate.at is None else iso(estimate.at),
            estimate_source=None if estimate is None else estimate.source,
            nodes=_node_grants(placed) if placed else (),
            queued_id=queued_id, project=project, priority=priority, replaces=replaces,
        )
    )  # fmt: skip
    if burst_row is not None:
        txn.audit(
            "burst",
            {
                "decision_id": ident, "workload": burst_row.workload, "residency": burst_row.residency, "pool": burst_row.pool,
                "region": burst_row.region, "verdict": burst_row.verdict, "reason": burst_row.reason,
            },
            source=source,
        )  # fmt: skip
    summary: JSONObject = {
        "decision_id": ident,
        "workload": decision.workload.name,
        "outcome": decision.outcome,
        "pool": placed.pool if placed else None,
        "accelerator": placed.accelerator if placed else None,
        "region": placed.region if placed else None,
        "devices": placed.grant.devices if placed else None,
        "holdings": [[h.device, h.profile, h.start] for h in placed.holdings] if placed else None,
        # Node by node (a node-tracked pool): what is needed to rebuild what each node holds.
        **({"allocations": codec.allocations_json(placed.allocations)} if placed and placed.allocations else {}),
        "fallback": placed.fallback if placed else None,
        "fraction_honored": placed.fraction_honored if placed else None,
        "reason": None if placed else decision.reason,  # type: ignore[union-attr]
        "input_digest": prov.input_digest,
        "policy_revision": prov.policy_revision,
        "opa_version": prov.opa_version,
        "verdicts": prov.verdicts,
        "record_digest": record_digest,
        "request_id": request_id,
        # The row's own times, so that exa audit verify can hold the tables to them.
        "created_at": now,
        "lease_expires_at": lease_expires_at if placed else None,
        "larger_partition": placed.grant.larger if placed else None,
    }
    # The queue's columns (exa audit verify holds them to this entry): the project and priority
    # class it was decided for, and the queued record a placement admitted (None: none).
    summary.update(project=project, priority=priority, queued_id=queued_id)
    if replaces is not None:  # the preempted grant whose workload it places (or queues) again
        summary["replaces"] = replaces
    txn.audit("decision", summary, source=source)
    return DecisionRecord(
        ident, now, dataclasses.replace(decision, decision_id=ident), None, None, request_id, lease_expires_at if placed else None,
        queued_id=queued_id,
    )  # fmt: skip


def _enqueue(txn: Transaction, ident: str, decision: Decision, queued: QueueIntent, *, source: str) -> None:
    """The queue's row for a queued decision, and its ``queued`` audit entry: its place in the order
    when it was queued, and what it waits for."""
    at = queued.queued_at or txn.now()
    waits = dict(sorted((queued.waits_for or waits_for(decision)).items()))
    txn.add_queued(
        NewQueued(
            ident, at, decision.workload.name, queued.spec, queued.project, queued.priority, queued.accelerator, queued.devices,
            queued.lease_s, queued.submission, queued.preempted_from, codec.canonical(waits).decode("utf-8"),
        )
    )  # fmt: skip
    entry: JSONObject = {
        "decision_id": ident, "workload": decision.workload.name, "project": queued.project, "priority": queued.priority,
        "queued_at": at, "position": queued.position, "of": queued.of, "waits_for": cast(JSONValue, waits),
        "reason": getattr(decision, "reason", None), "submission": queued.submission is not None,
        "accelerator": queued.accelerator, "devices": queued.devices, "lease_s": queued.lease_s,
    }  # fmt: skip
    if queued.submission is not None:  # what admission submits is held to it (and exa audit verify holds the row)
        entry["submission_digest"] = codec.digest(queued.submission.encode("utf-8"))
    if queued.preempted_from is not None:
        entry["preempted_from"] = queued.preempted_from
    txn.audit("queued", entry, source=source)


def _node_grants(placed: Placement) -> tuple[NewNodeGrant, ...]:
    """A node-tracked grant's rows node by node (a share: its device, shares and share of a device)."""
    return tuple(
        NewNodeGrant(
            a.node, a.holdings, None if a.share is None else (a.share.device, a.share.shares, placed.grant.share), a.cpu_milli, a.memory_mib,
        )
        for a in placed.allocations
    )


def _refresh(
    txn: Transaction,
    capacities: Capacities,
    pool: Pool,
    held_outside: float,
    version: int,
    held: Sequence[HeldRow] | None = None,
    *,
    sharing: Sharing | None = None,
    before: PoolRow | None = None,
) -> tuple[Capacity, float]:
    """Work out what ``pool`` can still place from what it holds (a node-tracked pool: what is held
    on its nodes, by it and by the pools sharing them, and what schedulers report busy there), and
    store it (and log it); nothing when ``before`` says it is unchanged. Returns what it worked out."""
    if pool.node_tracked:
        if sharing is None:
            sharing = _fleet_sharing(txn, capacities)
        names = sharing.group(pool.name)
        capacity, free = capacities.of(
            pool, txn.held_in(names), held_outside, txn.node_grants(names), txn.node_usage(names), sharing.devices(pool.name),
            sharing.other_mode(pool.name), sharing.states(pool.name),
        )
    else:
        capacity, free = capacities.of(pool, txn.held(pool.name) if held is None else held, held_outside)
    text = codec.capacity_text(capacity)
    if before is not None and before.capacity is not None and before.free is not None and abs(before.free - free) < 1e-9:
        if before.capacity == text or codec.capacity_from_text(before.capacity) == capacity:
            return capacity, free
    txn.set_capacity(pool.name, text, free, version)
    return capacity, free


def _room(txn: Transaction, capacities: Capacities, pool: Pool, sharing: Sharing) -> tuple[Rooms, PoolRow | None]:
    """A node-tracked pool's rooms, and its row where it shares no node: a pool that shares none,
    unchanged since this process last wrote it, is as this process left it (nothing to read
    again); else they are built from the records."""
    current = txn.pool(pool.name) if len(sharing.group(pool.name)) == 1 else None
    room = capacities.kept_rooms(pool.name, current.version, current.spec) if current is not None else None
    return room or _rooms(txn, capacities, pool, sharing), current


def _rooms(txn: Transaction, capacities: Capacities, pool: Pool, sharing: Sharing) -> Rooms:
    names = sharing.group(pool.name)
    return capacities.rooms_of(
        pool, txn.held_in(names), txn.node_grants(names), txn.node_usage(names), sharing.devices(pool.name), sharing.other_mode(pool.name),
        sharing.states(pool.name),
    )


def _refresh_sharers(txn: Transaction, capacities: Capacities, name: str, sharing: Sharing, version: int) -> None:
    """The pools sharing a node with ``name``, worked out again (what it holds is gone for them)."""
    for other in sharing.group(name)[1:]:
        row = txn.pool(other)
        if row is not None:
            _refresh(txn, capacities, codec.pool_from_text(row.spec), row.held_outside, version, sharing=sharing, before=row)


def _fleet_sharing(txn: Transaction, capacities: Capacities) -> Sharing:
    """Who shares nodes in the fleet as this transaction sees it."""
    _, fleet = txn.state()
    return capacities.sharing(fleet, lambda: [codec.pool_from_text(r.spec) for r in txn.pools(-1) if not r.removed])


# -- releases and leases -------------------------------------------------------------------------


def expire(txn: Transaction, capacities: Capacities, *, source: str) -> list[str]:
    """Release placements whose lease ended and that were neither submitted nor renewed, each at
    the time its lease ended (audited as ``expired``). Every write calls it first, under the write
    lock, so nothing is decided or written beside a lease that has ended; it returns the ids it
    released (capacity was freed on their pools)."""
    rows = txn.lease_ended(txn.now())
    for row in rows:
        assert row.lease_expires_at is not None
        _release(txn, capacities, row.id, source=source, kind="expired", at=row.lease_expires_at)
    return [r.id for r in rows]


def _release(
    txn: Transaction, capacities: Capacities, ident: str, *, source: str, kind: str, at: str | None = None, extra: JSONObject | None = None
) -> None:
    at = at or txn.now()
    name = txn.release(ident, at)
    row = txn.pool(name)
    assert row is not None
    pool = codec.pool_from_text(row.spec)
    version = txn.bump()
    if pool.node_tracked:
        sharing = _fleet_sharing(txn, capacities)
        if not _give_back(txn, capacities, pool, row, ident, sharing, version):
            _refresh(txn, capacities, pool, row.held_outside, version, sharing=sharing)
        _refresh_sharers(txn, capacities, name, sharing, version)
    else:
        _refresh(txn, capacities, pool, row.held_outside, version)
    # The row's own time (for an expired lease, its end, earlier than this write), so that exa
    # audit verify can hold the tables to it.
    txn.audit(kind, {"decision_id": ident, "released_at": at, **(extra or {})}, source=source)
    if row.removing is not None and not txn.holders(name):
        # A pool asked to go while this grant held it: its last one has ended, so it goes now.
        now = txn.now()
        txn.remove_pool(name, txn.bump(fleet=True), at=now)
        txn.audit("pool", {"pool": name, "action": "removed", "removal_asked_at": row.removing, "after": ident, "removed_at": now}, source=source)


def _give_back(txn: Transaction, capacities: Capacities, pool: Pool, row: PoolRow, ident: str, sharing: Sharing, version: int) -> bool:
    """A release on a pool of nodes that shares none, unchanged since this process last wrote it:
    what the grant held is given back on the rooms kept from that write, and only its nodes are
    worked out again (the cost of what changed, not of the pool's nodes). False when it cannot be
    (no rooms kept, or the grant holds slices): the pool is then worked out from its rows."""
    from examlops_policy._core import rooms

    if len(sharing.group(pool.name)) != 1:
        return False
    room = capacities.kept_rooms(pool.name, row.version, row.spec)
    if room is None:
        return False
    held, grants = txn.grant_of(ident)
    if any(h.holding.profile is not None or h.node is None for h in held):
        return False  # slices are laid out by packing (the rows say where the others are); no node: an old grant
    by_node: dict[str, NodeAllocation] = {g.node: NodeAllocation(g.node, cpu_milli=g.cpu_milli, memory_mib=g.memory_mib) for g in grants}
    for h in held:
        node = cast(str, h.node)
        at = by_node.get(node, NodeAllocation(node))
        if h.shares is not None:
            by_node[node] = NodeAllocation(at.node, at.holdings, DeviceShare(h.holding.device, h.shares), at.cpu_milli, at.memory_mib)
        else:
            by_node[node] = NodeAllocation(at.node, (*at.holdings, h.holding), at.share, at.cpu_milli, at.memory_mib)
    touched = rooms.give_back(room, list(by_node.values()), devices=True)
    capacity, free = rooms.summary(room, touched)
    txn.set_capacity(pool.name, codec.capacity_text(capacity), free, version)
    capacities.keep_rooms(pool.name, version, row.spec, room)
    return True


def release(store: Rows, capacities: Capacities, ident: str, *, source: str) -> tuple[DecisionRow, bool]:
    """Free what a placement holds: its row after, and whether it had been released before (then
    nothing was written)."""

    def work(txn: Transaction) -> tuple[DecisionRow, bool]:
        expire(txn, capacities, source=source)
        row = txn.find(ident)
        if row.released_at is not None:
            return row, True
        _release(txn, capacities, row.id, source=source, kind="release")
        return txn.find(row.id), False

    def landed(txn: Transaction) -> tuple[DecisionRow, bool] | None:
        row = txn.find(ident)
        return (row, False) if row.released_at is not None else None

    return store.transaction(work, landed=landed)


def renew(store: Rows, capacities: Capacities, ident: str, lease: timedelta, *, source: str) -> DecisionRow:
    """Move a live placement's lease end to ``lease`` from now (audited). SpecError, with nothing
    renewed, for a placement that was released or whose lease ended (the lease's end is recorded
    as its release then)."""

    def work(txn: Transaction) -> DecisionRow:
        expire(txn, capacities, source=source)
        row = txn.find(ident)
        if row.released_at is not None:
            return row  # over: said below, once what expire released is committed
        until = leases.lease_end(txn.now(), lease)
        txn.renew(row.id, until)
        txn.audit("renew", {"decision_id": row.id, "lease_expires_at": until}, source=source)
        return txn.find(row.id)

    row = store.transaction(work, landed=lambda txn: None)
    _live(row, "a live placement", "nothing was renewed")
    return row


def _live(row: DecisionRow, wanted: str, nothing: str) -> None:
    """SpecError for a placement that no longer holds its devices, saying since when and why."""
    if row.released_at is None:
        return
    why = (
        f"its lease ended at {row.released_at} and its devices were released"
        if leases.by_lease(row.released_at, row.lease_expires_at, row.job_id)
        else f"it was released at {row.released_at}"
    )
    raise SpecError(f"decision {row.id[:12]} is not {wanted}: {why}; {nothing}", field="ID")


def set_job(store: Rows, capacities: Capacities, ident: str, job_id: str, *, scheduler: str, uid: str | None, source: str) -> DecisionRow:
    """Record the scheduler's job (and its uid) on a live placement, audited."""

    def work(txn: Transaction) -> DecisionRow:
        expire(txn, capacities, source=source)
        row = txn.find(ident)
        if row.released_at is not None:
            return row  # over: said below, once what expire released is committed
        now = txn.now()
        txn.set_job(row.id, job_id, scheduler, uid, at=now)
        # The row's own time, so that exa audit verify can hold the table to it.
        entry: JSONObject = {"decision_id": row.id, "scheduler": scheduler, "job_id": job_id, "submitted_at": now}
        if uid is not None:
            entry["job_uid"] = uid
        txn.audit("submit", entry, source=source)
        return txn.find(row.id)

    def landed(txn: Transaction) -> DecisionRow | None:
        row = txn.find(ident)
        return row if row.job_id == job_id or row.released_at is not None else None

    row = store.transaction(work, landed=landed)
    _live(row, "a live placement without a job", "nothing was recorded")
    return row


def mark_job(store: Rows, ident: str, state: str, *, source: str) -> DecisionRow:
    """Record a changed job state (e.g. ``missing``: deleted outside this layer), audited; nothing
    when it is unchanged."""

    def work(txn: Transaction) -> DecisionRow:
        row = txn.find(ident)
        if row.job_id is None:
            raise SpecError(f"decision {row.id[:12]} has no job", field="ID")
        if txn.set_job_state(row.id, state):
            txn.audit("job", {"decision_id": row.id, "job_id": row.job_id, "scheduler": row.scheduler, "state": state}, source=source)
        return txn.find(row.id)

    return store.transaction(work, landed=lambda txn: None)


# -- pools ---------------------------------------------------------------------------------------


def apply_pools(
    store: Rows, capacities: Capacities, pools: Sequence[Pool], *, replace: bool, source: str, prune: bool = False, dry_run: bool = False
) -> list[PoolChange]:
    """Register pools. ``replace=False`` refuses an existing name; ``True`` updates it, but not its
    accelerator, model, target, region or partitioning while decisions hold its devices, nor a
    count that would drop a device they hold. A registered pool keeps its drained state.
    ``prune``: every registered pool not among ``pools`` is removed (as ``remove_pools``: refused,
    with nothing written, for one that live grants hold unless it is drained). ``dry_run``: what
    would change, with nothing written: every change the write would refuse is in the list as
    ``refused`` (saying why), beside all the others."""
    specs: dict[str, str] = {}
    changes: list[PoolChange] = []

    def work(txn: Transaction) -> list[PoolChange]:
        changes.clear()
        specs.clear()
        expire(txn, capacities, source=source)
        # What a pools file says is the pool's hardware; whether it is drained is kept.
        kept = []
        for given in pools:
            row = txn.pool(given.name)
            pool = dataclasses.replace(given, drained=True) if row is not None and codec.pool_from_text(row.spec).drained else given
            specs[pool.name] = codec.pool_text(pool)
            kept.append(pool)
        _apply(txn, capacities, kept, specs, changes, replace=replace, source=source, preview=dry_run)
        if prune:
            given_names = {p.name for p in pools}
            gone = [row.name for row in txn.pools(-1) if not row.removed and row.name not in given_names]
            changes.extend(_remove(txn, gone, source=source, preview=dry_run))
        return list(changes)

    def landed(txn: Transaction) -> list[PoolChange] | None:
        done = len(changes) >= len(pools) and all((row := txn.pool(name)) is not None and row.spec == spec for name, spec in specs.items())
        removed = all(txn.pool(c.name) is None for c in changes if c.action == "removed")
        return list(changes) if done and removed else None

    return _transaction(store, work, landed, dry_run)


# -- pool lifecycle: drain, undrain, remove ---------------------------------------------------------


class _Preview(Exception):
    """Carries what a write would have done out of a transaction that is then rolled back."""

    def __init__(self, result: object) -> None:
        super().__init__("preview")
        self.result = result


def _transaction(store: Rows, work: Callable[[Transaction], T], landed: Callable[[Transaction], T | None], dry_run: bool) -> T:
    """``work`` in one write transaction; ``dry_run``: the same work, its result kept and every
    write it made rolled back (a preview by the very code that would write, refusals included)."""
    if not dry_run:
        return store.transaction(work, landed=landed)

    def preview(txn: Transaction) -> T:
        raise _Preview(work(txn))

    try:
        store.transaction(preview, landed=lambda txn: None)
    except _Preview as done:
        return done.result  # type: ignore[return-value]
    raise AssertionError("a preview always ends in _Preview")


def _named(holders: Sequence[str]) -> str:
    return ", ".join(h[:12] for h in holders[:5]) + (f" and {len(holders) - 5} more" if len(holders) > 5 else "")


def _pool_row(txn: Transaction, name: str) -> PoolRow:
    row = txn.pool(name)
    if row is None:
        raise NotFoundError(f"no pool {name!r}")
    return row


def set_drained(store: Rows, capacities: Capacities, name: str, drained: bool, *, source: str, dry_run: bool = False) -> PoolChange:
    """Drain a pool (it takes no new grants: the policy denies it, ``pool_drained``; the grants it
    holds are kept) or undrain it (undraining also cancels a pending removal). Audited; nothing is
    written when it is so already. NotFoundError for an unknown pool."""

    def work(txn: Transaction) -> PoolChange:
        expire(txn, capacities, source=source)
        row = _pool_row(txn, name)
        pool = codec.pool_from_text(row.spec)
        holders = tuple(txn.holders(name))
        if pool.drained == drained:
            return PoolChange(name, "unchanged", holders=holders)
        version = txn.bump(fleet=True)
        changed = dataclasses.replace(pool, drained=drained)
        txn.update_pool(name, codec.pool_text(changed), changed.count)
        _refresh(txn, capacities, changed, row.held_outside, version)
        cancelled = not drained and row.removing is not None
        if cancelled:
            txn.set_removing(name, None, version)
        action = "drained" if drained else "undrained"
        entry: JSONObject = {"pool": pool_spec(changed), "action": action, "live_grants": len(holders)}
        if cancelled:
            entry["removal_cancelled"] = True
        txn.audit("pool", entry, source=source)
        return PoolChange(name, action, ("drained",), holders, cancelled)

    def landed(txn: Transaction) -> PoolChange | None:
        row = txn.pool(name)
        return PoolChange(name, "drained" if drained else "undrained", ("drained",)) if row and codec.pool_from_text(row.spec).drained == drained else None

    return _transaction(store, work, landed, dry_run)


def remove_pools(store: Rows, capacities: Capacities, names: Sequence[str], *, source: str, dry_run: bool = False) -> list[PoolChange]:
    """Remove pools from the fleet (their rows stay for the records that name them). One without
    live grants goes now; a drained one that live grants hold goes when the last of them ends
    (``removal_pending``); one that live grants hold and is not drained is refused, naming them,
    and then nothing is written. Audited. NotFoundError for an unknown pool."""

    def work(txn: Transaction) -> list[PoolChange]:
        expire(txn, capacities, source=source)
        for name in names:
            _pool_row(txn, name)
        return _remove(txn, names, source=source)

    def landed(txn: Transaction) -> list[PoolChange] | None:
        rows = {name: txn.pool(name) for name in names}
        if any(row is not None and row.removing is None for row in rows.values()):
            return None
        return [PoolChange(name, "removed" if row is None else "removal_pending") for name, row in rows.items()]

    return _transaction(store, work, landed, dry_run)


def _remove(txn: Transaction, names: Sequence[str], *, source: str, preview: bool = False) -> list[PoolChange]:
    """Remove ``names`` (see ``remove_pools``). ``preview``: a refused removal is in the list as
    ``refused``, not raised, so a dry run shows every one."""
    out: list[PoolChange] = []
    refused: list[tuple[str, tuple[str, ...]]] = []
    for name in names:
        row = _pool_row(txn, name)
        holders = tuple(txn.holders(name))
        if row.removing is not None:
            out.append(PoolChange(name, "removal_pending", holders=holders))
        elif not holders:
            now = txn.now()
            txn.remove_pool(name, txn.bump(fleet=True), at=now)
            txn.audit("pool", {"pool": name, "action": "removed", "removed_at": now}, source=source)
            out.append(PoolChange(name, "removed"))
        elif codec.pool_from_text(row.spec).drained:
            now = txn.now()
            txn.set_removing(name, now, txn.bump())
            txn.audit("pool", {"pool": name, "action": "removal_pending", "live_grants": list(holders), "removing_since": now}, source=source)
            out.append(PoolChange(name, "removal_pending", holders=holders))
        elif preview:
            grants = f"{len(holders)} live grant{'s hold' if len(holders) > 1 else ' holds'} it ({_named(holders)})"
            why = f"{grants}, and it is not drained: drain it first (exa hardware drain {name}), or release the grants"
            out.append(PoolChange(name, "refused", (), holders, refused=why))
        else:
            refused.append((name, holders))
    if refused:
        pools = "; ".join(
            f"pool {name!r}: {len(holders)} live grant{'s hold' if len(holders) > 1 else ' holds'} it ({_named(holders)})" for name, holders in refused
        )
        drain = f"exa hardware drain {refused[0][0]}" if len(refused) == 1 else "exa hardware drain NAME"
        raise SpecError(
            f"cannot remove {pools}, and {'it is' if len(refused) == 1 else 'they are'} not drained. Drain first ({drain}: no new grants, "
            "and the pool goes when its last live grant ends), or release the grants; nothing was changed",
            field="name",
        )
    return out


def _apply(
    txn: Transaction, capacities: Capacities, pools: Sequence[Pool], specs: Mapping[str, str], changes: list[PoolChange], *, replace: bool,
    source: str, preview: bool = False,
) -> None:
    """Register or update ``pools`` (specs as stored), audited, and work out again what they (and
    the pools sharing their nodes) can place. ``preview``: a refused update is in ``changes`` as
    ``refused`` (and not made), not raised, so a dry run shows every one."""
    version: int | None = None
    touched: list[tuple[Pool, float]] = []
    for pool in pools:
        row = txn.pool(pool.name)
        spec = specs[pool.name]
        if row is not None and not replace:
            raise SpecError(f"pool {pool.name!r} already exists (use 'exa hardware apply' to change it)", field="name")
        if row is not None and row.spec == spec:
            changes.append(PoolChange(pool.name, "unchanged"))
            continue
        if version is None:
            version = txn.bump(fleet=True)
        if row is None:
            txn.add_pool(pool.name, spec, pool.count, version)
            changes.append(PoolChange(pool.name, "added"))
            touched.append((pool, 0.0))
        else:
            before = pool_spec(codec.pool_from_text(row.spec))
            after = pool_spec(pool)
            fields = tuple(sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k)))
            problem = _change_problem(txn, pool, fields)
            if problem is not None and preview:
                changes.append(PoolChange(pool.name, "refused", fields, tuple(txn.holders(pool.name)), refused=problem[0]))
                continue
            if problem is not None:
                raise SpecError(f"pool {pool.name!r}: {problem[0]}", field=problem[1])
            txn.update_pool(pool.name, spec, pool.count)
            changes.append(PoolChange(pool.name, "updated", fields))
            touched.append((pool, row.held_outside))
        txn.audit("pool", {"pool": pool_spec(pool), "action": changes[-1].action}, source=source)
    # Only listed nodes are shared: who shares what is read from the fleet when such a pool is
    # given. Every pool given is held to the others, changed or not: a fleet an earlier release
    # stored with pools that disagree about a node is refused when applied again, not kept.
    from examlops_policy._core import recount  # applying only: a cold placement does not load it

    listed = any(p.nodes_named for p in pools)
    fleet = [codec.pool_from_text(r.spec) for r in txn.pools(-1) if not r.removed] if listed else []
    for name, why in recount.disagreements(fleet, {p.name for p in pools}):
        if not preview:
            raise SpecError(why, field="nodes")
        at = next(i for i, c in enumerate(changes) if c.name == name)
        was = changes[at]
        changes[at] = PoolChange(name, "refused", was.changed_fields, tuple(txn.holders(name)), refused=why, adding=was.action == "added", as_stored=was.action == "unchanged")
    if version is None:
        return
    sharing = sharing_of(fleet) if listed else Sharing({})
    updated = {c.name: i for i, c in enumerate(changes) if c.action == "updated"}
    for pool, _ in touched:
        position = updated.get(pool.name)
        shrunk = _below_live_grants(txn, pool, sharing.group(pool.name)) if position is not None else None
        if shrunk is None or position is None:
            continue
        if not preview:
            raise SpecError(f"pool {pool.name!r}: {shrunk}", field="nodes")
        was = changes[position]
        changes[position] = PoolChange(pool.name, "refused", was.changed_fields, tuple(txn.holders(pool.name)), refused=shrunk)
    done = {p.name for p, _ in touched}
    for pool, outside in touched:
        _refresh(txn, capacities, pool, outside, version, sharing=sharing)
    for pool, _ in touched:
        for other in sharing.group(pool.name)[1:]:
            row = txn.pool(other)
            if other not in done and row is not None:
                done.add(other)
                _refresh(txn, capacities, codec.pool_from_text(row.spec), row.held_outside, version, sharing=sharing, before=row)


def _below_live_grants(txn: Transaction, pool: Pool, group: Sequence[str]) -> str | None:
    """Why ``pool``'s nodes, as it now states them, would hold less CPU or memory than the live
    grants of the pools sharing them (``group``) hold there; None when they would not. A node's
    CPU or memory left unsaid is not checked (nothing was promised of it)."""
    sizes = {n.name: n for n in pool.node_list() if n.cpu is not None or n.memory is not None}
    if not sizes:
        return None
    cpu: dict[str, int] = {}
    memory: dict[str, int] = {}
    holders: dict[str, set[str]] = {}
    for g in txn.node_grants(list(group)):
        if g.node in sizes:
            cpu[g.node] = cpu.get(g.node, 0) + g.cpu_milli
            memory[g.node] = memory.get(g.node, 0) + g.memory_mib
            holders.setdefault(g.node, set()).add(g.decision_id)
    for name in sorted(holders):
        node = sizes[name]
        if node.cpu is not None and cpu[name] > round(node.cpu * 1000):
            what, has, held = "CPU", cpu_text(round(node.cpu * 1000)), cpu_text(cpu[name])
        elif node.memory is not None and memory[name] > node.memory:
            what, has, held = "memory", memory_text(node.memory), memory_text(memory[name])
        else:
            continue
        return (
            f"node {name!r} would have {what} {has}, less than the {held} that live decisions hold there "
            f"({_named(sorted(holders[name]))}); release them first"
        )
    return None


def _change_problem(txn: Transaction, pool: Pool, fields: Sequence[str]) -> tuple[str, str] | None:
    """Why a change would move live grants (what they hold must stay what it was), and the field;
    None when it would not."""
    holders = txn.holders(pool.name)
    if not holders:
        return None
    named = _named(holders)
    moved = [f for f in fields if f in FROZEN_WHILE_HELD]
    if moved:
        return (
            f"cannot change {', '.join(moved)} while decisions hold its devices ({named}); "
            "release them first (prices, carbon factor, capabilities and a larger count may change)",
            moved[0],
        )
    if pool.node_tracked:
        sizes = {n.name: n.devices for n in pool.node_list()}
        gone = [
            h for h in txn.held(pool.name)
            if h.node is not None and h.node != pool.name and (h.node not in sizes or h.holding.device >= sizes[h.node])
        ]  # fmt: skip
        lost = sorted({f"{h.node}:{h.holding.device}" for h in gone})
        if lost:
            # Named: the grants on the node devices the change would drop.
            return (
                f"its nodes would drop node device(s) {', '.join(lost[:8])} that live decisions hold "
                f"({_named(sorted({h.decision_id for h in gone}))}); release them first",
                "nodes",
            )
    dropped = [h for h in txn.held(pool.name) if h.holding.device >= pool.count and h.node in (None, pool.name)]
    beyond = sorted({h.holding.device for h in dropped})
    if beyond:
        # Named: the grants on the devices the count would drop.
        return (
            f"count {pool.count} would drop device(s) {', '.join(map(str, beyond[:8]))} that "
            f"live decisions hold ({_named(sorted({h.decision_id for h in dropped}))}); release them first",
            "count",
        )
    return None


def record_usage(
    store: Rows,
    capacities: Capacities,
    usage: Mapping[str, float],
    *,
    scheduler: str,
    source: str,
    nodes: Mapping[str, Sequence[NodeUsageRow]] | None = None,
) -> dict[str, float]:
    """Record how many devices of each named pool its scheduler reports busy: those beyond this
    layer's own submitted, live placements are held outside it. ``nodes``: for a node-tracked
    pool, what is busy node by node (devices, their indices, shares, CPU, memory), recorded beyond
    this layer's own submitted grants on each node (its capacity is worked out from these).
    Returns the held-outside figure per pool; an audit entry for each pool whose figures changed.
    NotFoundError for an unknown pool."""
    per_node = nodes or {}

    def work(txn: Transaction) -> dict[str, float]:
        held: dict[str, float] = {}
        version: int | None = None
        sharing: Sharing | None = None
        dirty: list[str] = []
        own: set[str] = set()
        for name in sorted(set(usage) | set(per_node)):
            row = txn.pool(name)
            if row is None:
                raise NotFoundError(f"no pool {name!r}")
            pool = codec.pool_from_text(row.spec)
            busy = usage.get(name)
            # Our own submitted, live placements are part of what the scheduler reports busy.
            outside = row.held_outside if busy is None else round(max(0.0, busy - txn.submitted_devices(name)), 9)
            held[name] = outside
            changed_nodes: list[NodeUsageRow] | None = None
            if name in per_node and pool.node_tracked:
                if sharing is None:
                    sharing = _fleet_sharing(txn, capacities)
                beyond = _beyond_ours(txn, pool, sharing, per_node[name])
                if beyond != txn.node_usage([name]):
                    changed_nodes = beyond
            if abs(row.held_outside - outside) <= 1e-9 and changed_nodes is None:
                continue
            if version is None:
                version = txn.bump()
            txn.set_held_outside(name, outside)
            if changed_nodes is not None:
                own.add(name)
                txn.set_node_usage(name, changed_nodes, scheduler)
                txn.audit("node_usage", {"pool": name, "scheduler": scheduler, "nodes": [_usage_json(u) for u in changed_nodes]}, source=source)
            dirty.extend((sharing or Sharing({})).group(name) if pool.node_tracked else (name,))
            if abs(row.held_outside - outside) > 1e-9:
                txn.audit("capacity", {"pool": name, "scheduler": scheduler, "busy": busy, "held_outside": outside}, source=source)
        # Each pool whose figures (or whose nodes' figures) changed, worked out again once: a pool
        # whose own figures changed at this version whatever its summary says (its nodes' busy
        # devices may differ while the counts do not: rooms kept by version must be read again).
        for name in dict.fromkeys(dirty):
            row = txn.pool(name)
            if row is not None and version is not None:
                _refresh(txn, capacities, codec.pool_from_text(row.spec), row.held_outside, version, sharing=sharing,
                         before=None if name in own else row)  # fmt: skip
        return held

    return store.transaction(work, landed=lambda txn: None)


def _beyond_ours(txn: Transaction, pool: Pool, sharing: Sharing, busy: Sequence[NodeUsageRow]) -> list[NodeUsageRow]:
    """What is busy on each of ``pool``'s nodes beyond this layer's own submitted, live grants there
    (from every pool sharing the node), in node order; nodes with nothing beyond them left out."""
    names = sharing.group(pool.name)
    known = {n.name for n in pool.node_list()}
    ours_devices: dict[str, set[int]] = {}
    ours_shares: dict[str, int] = {}
    for h in txn.held_in(names, submitted=True):
        node = h.node if h.node is not None else pool.name
        if h.shares is not None:
            ours_shares[node] = ours_shares.get(node, 0) + h.shares
        else:
            ours_devices.setdefault(node, set()).add(h.holding.device)
    ours_cpu: dict[str, int] = {}
    ours_memory: dict[str, int] = {}
    for g in txn.node_grants(names, submitted=True):
        ours_cpu[g.node] = ours_cpu.get(g.node, 0) + g.cpu_milli
        ours_memory[g.node] = ours_memory.get(g.node, 0) + g.memory_mib
    out = []
    for u in sorted(busy, key=lambda u: u.node):
        if u.node not in known:
            continue
        mine = ours_devices.get(u.node, set())
        row = NodeUsageRow(
            pool.name, u.node,
            max(0, u.devices - len(mine)),
            tuple(sorted(set(u.indices) - mine)),
            max(0, u.shares - ours_shares.get(u.node, 0)),
            None if u.cpu_milli is None else max(0, u.cpu_milli - ours_cpu.get(u.node, 0)),
            None if u.memory_mib is None else max(0, u.memory_mib - ours_memory.get(u.node, 0)),
        )  # fmt: skip
        if row.devices or row.shares or row.cpu_milli or row.memory_mib:
            out.append(row)
    return out


def _usage_json(u: NodeUsageRow) -> JSONObject:
    return {"node": u.node, "devices": u.devices, "indices": list(u.indices), "shares": u.shares, "cpu_milli": u.cpu_milli, "memory_mib": u.memory_mib}


def set_node_states(store: Rows, capacities: Capacities, states: Mapping[str, str], *, source: str) -> list[PoolChange]:
    """Set the state of named nodes (``up``, ``drained``, ``down``; a cordoned or NotReady
    Kubernetes node, a Slurm DRAIN or DOWN) in every pool that lists them, in one audited write:
    only up nodes take new grants, live ones stay; the live grants holding devices on a node set
    down are flagged (``node_down_at``; cleared when it is up again), as reconcile flags them. A
    node no pool lists is bad input (a name mistyped would otherwise change nothing, silently):
    nothing is written. Pools whose nodes already have those states are unchanged."""
    for node, state in states.items():
        if state not in ("up", "drained", "down"):
            raise SpecError(f"node {node!r}: state must be up, drained or down (got {state!r})", field="state")
    changes: list[PoolChange] = []

    def work(txn: Transaction) -> list[PoolChange]:
        changes.clear()
        listed = {n.name for row in txn.pools(-1) if not row.removed for n in _listed_nodes(codec.pool_from_text(row.spec))}
        unknown = sorted(set(states) - listed)
        if unknown:
            raise SpecError(
                f"no pool lists node(s) {', '.join(repr(n) for n in unknown)}: a node's state is set where pools list it by name", field="nodes"
            )
        expire(txn, capacities, source=source)
        pools = _set_node_states(txn, capacities, states, changes, source=source)
        for node, state in sorted(states.items()):
            _flag_grants(txn, node, state, [p for p in pools if node in {n.name for n in _listed_nodes(p)}], scheduler=None, source=source)
        return list(changes)

    return store.transaction(work, landed=lambda txn: None)


def _set_node_states(txn: Transaction, capacities: Capacities, states: Mapping[str, str], changes: list[PoolChange], *, source: str) -> list[Pool]:
    """The pools that list a node of ``states`` in another state, changed to it (audited): those pools."""
    pools = []
    for row in txn.pools(-1):
        if row.removed:
            continue
        pool = codec.pool_from_text(row.spec)
        listed = pool.nodes if isinstance(pool.nodes, tuple) else ()
        if any(n.name in states and n.state != states[n.name] for n in listed):
            nodes = tuple(dataclasses.replace(n, state=states[n.name]) if n.name in states else n for n in listed)
            pools.append(dataclasses.replace(pool, nodes=nodes))
    _apply(txn, capacities, pools, {p.name: codec.pool_text(p) for p in pools}, changes, replace=True, source=source)
    return pools


def reconcile_node(store: Rows, capacities: Capacities, node: str, state: str, *, scheduler: str, source: str) -> tuple[list[str], list[str]]:
    """A node its scheduler reports ``up``, ``drained`` or ``down``: its state in every pool that
    lists it, as ``set_node_states`` sets it (only up nodes take new grants; live ones stay), and
    the live grants holding devices on it flagged when it went down (``node_down_at``; cleared
    when it is up again: the scheduler, not this layer, decides whether their jobs died). One
    audited transaction: (the pools changed, the grants flagged or cleared); nothing written when
    every pool lists the node in that state already."""
    if state not in ("up", "drained", "down"):
        raise SpecError(f"node {node!r}: state must be up, drained or down (got {state!r})", field="state")
    changes: list[PoolChange] = []

    def work(txn: Transaction) -> tuple[list[str], list[str]]:
        changes.clear()
        pools = _set_node_states(txn, capacities, {node: state}, changes, source=source)
        if not pools:
            return [], []
        return [p.name for p in pools], _flag_grants(txn, node, state, pools, scheduler=scheduler, source=source)

    return store.transaction(work, landed=lambda txn: None)


def _listed_nodes(pool: Pool) -> tuple[Node, ...]:
    return pool.nodes if isinstance(pool.nodes, tuple) else ()


def _flag_grants(txn: Transaction, node: str, state: str, pools: Sequence[Pool], *, scheduler: str | None, source: str) -> list[str]:
    """The live grants holding devices on ``node`` in ``pools`` (those whose state of it changed)
    flagged when it went down, cleared when not (audited, with the pools changed): the grants
    flagged or cleared. Nothing when no pool changed."""
    if not pools:
        return []
    names = [p.name for p in pools]
    now = txn.now()
    holders = sorted({h.decision_id for h in txn.held_in(names) if h.node == node})
    flagged = [h for h in holders if txn.flag_node_down(h, now if state == "down" else None)]
    entry: JSONObject = {
        "node": node, "state": state, "scheduler": scheduler, "pools": cast(JSONValue, names), "grants": cast(JSONValue, flagged), "at": now,
    }  # fmt: skip
    txn.audit("node", entry, source=source)
    return flagged


def ensure_layout(store: Rows, capacities: Capacities, *, source: str = "exa") -> None:
    """Capacities worked out with other packing rules (or none yet, after an upgrade) are worked
    out again; a live grant recorded before grants held devices gets its devices first."""
    if store.layout() == capacities.digest:
        return

    def work(txn: Transaction) -> None:
        if txn.layout() == capacities.digest:
            return
        version = txn.bump()
        rows = txn.pools(-1)
        pools = [(codec.pool_from_text(row.spec), row) for row in rows if not row.removed]
        sharing = sharing_of(p for p, _ in pools)
        for pool, row in pools:
            _backfill(txn, capacities, pool, row.held_outside)
            if pool.node_tracked:
                _name_nodes(txn, pool, source=source)
        for pool, row in pools:
            # What comes out as it was is not written again (nor logged).
            _refresh(txn, capacities, pool, row.held_outside, version, sharing=sharing, before=row)
        txn.set_layout(capacities.digest)

    store.transaction(work, landed=lambda txn: None)


def _name_nodes(txn: Transaction, pool: Pool, *, source: str) -> None:
    """Live holdings of a node-tracked pool recorded before grants named nodes (their node is the
    pool's own name, their device counted across its nodes) get their node and its index there,
    each move audited (``holding``: the device as recorded and where it is now)."""
    from examlops_policy._core import rooms

    names = {n.name for n in pool.node_list()}
    if pool.name in names:
        return  # the pool's one node is named like it: nothing to map
    for h in txn.held(pool.name):
        if h.node is None or h.node == pool.name:
            found = rooms.flat_to_node(pool, h.holding.device)
            if found is not None:
                txn.move_holding(h, found[0], found[1])
                txn.audit(
                    "holding",
                    {"decision_id": h.decision_id, "pool": pool.name, "device": h.holding.device, "start": h.holding.start,
                     "node": found[0], "to": found[1]},
                    source=source,
                )  # fmt: skip


def _backfill(txn: Transaction, capacities: Capacities, pool: Pool, held_outside: float) -> None:
    """Devices for live grants recorded before capacity was tracked per device."""
    layout = capacities.layout(pool)
    for ident, devices, document in txn.unheld_grants(pool.name):
        grant = codec.document_of(document).get("grant") or {}
        assert isinstance(grant, dict)
        profile = grant.get("profile") if grant.get("honored") and devices < 1 else None
        units = 1 if profile is not None else max(1, round(devices))
        chosen = packing.choose(layout, [h.holding for h in txn.held(pool.name)], profile if isinstance(profile, str) else None, units, held_outside)
        if chosen is None:  # more was held than fits: keep the devices counted, on the lowest ones
            chosen = tuple(Holding(i) for i in range(min(units, pool.count)))
        txn.hold(ident, pool.name, chosen, devices / len(chosen))


# -- the queue -----------------------------------------------------------------------------------


def cancel_queued(store: Rows, ident: str, *, source: str) -> tuple[QueueRow, bool]:
    """Take a waiting workload out of the queue (audited): its row after, and whether it had been
    cancelled before (then nothing was written). SpecError for one admitted or failed."""

    def work(txn: Transaction) -> tuple[QueueRow, bool]:
        row = txn.queue_row(ident)
        if row is None:
            raise NotFoundError(f"no queued workload {ident[:12]!r}")
        if row.state == "cancelled":
            return row, True
        if row.state != "queued":
            what = f"admitted by decision {str(row.admitted_by)[:12]}: release that placement instead" if row.state == "admitted" else row.state
            raise SpecError(f"queued workload {row.id[:12]} ({row.workload}) is no longer waiting: {what}", field="ID")
        at = txn.now()
        if not txn.end_queued(row.id, "cancelled", at):
            raise StateError(f"queued workload {row.id[:12]} changed while it was being cancelled; nothing was written")
        txn.audit("cancel", {"queued_id": row.id, "workload": row.workload, "ended_at": at}, source=source)
        after = txn.queue_row(row.id)
        assert after is not None
        return after, False

    def landed(txn: Transaction) -> tuple[QueueRow, bool] | None:
        row = txn.queue_row(ident)
        return (row, False) if row is not None and row.state == "cancelled" else None

    return store.transaction(work, landed=landed)


def fail_queued(
    store: Rows, capacities: Capacities, ident: str, message: str, *, source: str, release_placement: bool = True, waiting: bool = False,
) -> QueueRow | None:
    """A queued workload that cannot run: a waiting one the policy now refuses outright, or an
    admitted one whose submission the scheduler refused (its placement released). The row after;
    None when it was no longer in a state to fail (another process did it; with ``waiting``, one
    that no longer waits: admitted meanwhile, it is left as it is)."""

    def work(txn: Transaction) -> QueueRow | None:
        expire(txn, capacities, source=source)
        row = txn.queue_row(ident)
        if row is None or row.state not in (("queued",) if waiting else ("queued", "admitted")):
            return None
        if row.state == "admitted" and row.admitted_by is not None and release_placement:
            placed = txn.find(row.admitted_by)
            if placed.released_at is None:
                _release(txn, capacities, placed.id, source=source, kind="release")
        at = txn.now()
        if not txn.end_queued(row.id, "failed", at, message=message, was=("queued", "admitted")):
            return None
        txn.audit(
            "queue_failed", {"queued_id": row.id, "workload": row.workload, "placement": row.admitted_by, "message": message, "ended_at": at},
            source=source,
        )
        return txn.queue_row(row.id)

    return store.transaction(work, landed=lambda txn: None)


def note_submission(store: Rows, ident: str, message: str | None, *, source: str) -> int:
    """A submission of an admitted workload that could not reach its scheduler (tried again at the
    next pass): the attempts so far, audited."""

    def work(txn: Transaction) -> int:
        attempts = txn.note_attempt(ident, message)
        txn.audit("submit_retry", {"queued_id": ident, "attempts": attempts, "message": message}, source=source)
        return attempts

    return store.transaction(work, landed=lambda txn: None)


def mark_preemption(store: Rows, queued_id: str, victims: Sequence[str], plan: JSONObject, *, source: str) -> list[str]:
    """Mark the grants a preemption plan takes for a waiting workload (before their jobs are
    cancelled, outside the lock), audited: the ids marked. Nothing when the workload no longer
    waits, or a grant is gone or marked for another workload."""

    def work(txn: Transaction) -> list[str]:
        row = txn.queue_row(queued_id)
        if row is None or row.state != "queued":
            return []
        for victim in victims:
            grant = txn.grant_row(victim)
            if grant is None or grant.released_ts is not None or grant.preempting_for not in (None, queued_id):
                return []
        marked = [v for v in victims if txn.set_preempting(v, queued_id) or True]
        txn.audit("preempt", {"queued_id": queued_id, "victims": list(marked), "plan": plan}, source=source)
        return marked

    return store.transaction(work, landed=lambda txn: None)


def unmark_preemption(store: Rows, victim: str, *, source: str) -> bool:
    """Take a live grant's preemption mark off (the workload it was taken for no longer waits)."""

    def work(txn: Transaction) -> bool:
        grant = txn.grant_row(victim)
        if grant is None or grant.released_ts is not None or grant.preempting_for is None:
            return False
        txn.set_preempting(victim, None)
        txn.audit("preempt_dropped", {"decision_id": victim, "queued_id": grant.preempting_for}, source=source)
        return True

    return store.transaction(work, landed=lambda txn: None)


# -- reconcile: what the schedulers say ------------------------------------------------------------


def end_job(
    store: Rows, capacities: Capacities, ident: str, job_id: str, state: str, started_at: str | None, ended_at: str | None, *, scheduler: str, source: str
) -> bool:
    """A placement's job ended (its scheduler says so): its grant is released, with the job's end
    state and times, in one audited transaction (kind ``job_ended``). False (nothing written) when
    the placement is no longer live with that job."""

    def work(txn: Transaction) -> bool:
        row = txn.by_id(ident)
        if row is None or row.released_at is not None or row.job_id != job_id:
            return False
        txn.job_ended(ident, state, started_at, ended_at)
        after = txn.by_id(ident)
        extra: JSONObject = {
            "scheduler": scheduler, "job_id": job_id, "state": state, "started_at": started_at, "ended_at": ended_at,
            # What the row keeps of the job's start: the one recorded when it was seen running, else this.
            "job_started_at": after.job_started_at if after is not None else started_at,
        }  # fmt: skip
        # Released as every release is (the pools sharing its nodes, a removal waiting on it).
        _release(txn, capacities, ident, source=source, kind="job_ended", extra=extra)
        return True

    def landed(txn: Transaction) -> bool | None:
        row = txn.by_id(ident)
        return True if row is not None and row.released_at is not None and row.job_ended_at == ended_at else None

    return store.transaction(work, landed=landed)


def start_job(store: Rows, ident: str, job_id: str, at: str, *, scheduler: str, source: str) -> bool:
    """A placement's job started running at ``at`` (its actual start, recorded once, audited)."""

    def work(txn: Transaction) -> bool:
        row = txn.by_id(ident)
        if row is None or row.job_id != job_id or not txn.job_started(ident, at):
            return False
        txn.audit("job_started", {"decision_id": ident, "scheduler": scheduler, "job_id": job_id, "started_at": at}, source=source)
        return True

    return store.transaction(work, landed=lambda txn: None)


def expire_leases(store: Rows, capacities: Capacities, *, source: str) -> list[str]:
    """Release the placements whose lease ended (what the next write does anyway), on its own: the
    ids released (none written when none ended)."""
    return store.transaction(lambda txn: expire(txn, capacities, source=source), landed=lambda txn: None)
