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
decision logic: releases (and leases that ended, released by the next write), pools registered or
changed, devices a scheduler reports busy, and capacities worked out again when the packing rules
change.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from examlops_policy.errors import NotFoundError, SpecError, StateError
from examlops_policy.model import Capacity, Decision, Holding, JSONObject, Placement, Pool, pool_spec
from examlops_policy.store.api import BurstRow, DecisionRow, HeldRow, NewDecision, Rows, StaleFleet, StateRows, Transaction
from examlops_policy.views import DecisionRecord, PoolChange
from examlops_policy._core import codec, packing
from examlops_policy._core.engine import Prepared
from examlops_policy._core.selection import Judged, fits
from examlops_policy._core.state import Capacities, Snapshot, merge

# A pool's accelerator, model, target, region or partitioning decides what its live grants are:
# none of them may change while decisions hold its devices.
FROZEN_WHILE_HELD: Final = ("accelerator", "model", "target", "region", "supports_fractions", "fixed_profile")

__all__ = ["Committed", "StaleFleet", "apply_pools", "ensure_layout", "expire", "mark_job", "place", "record_usage", "release", "renew", "set_job"]


@dataclass(frozen=True)
class Committed:
    """What ``place`` did: the decision recorded (``record``), or the one an earlier call with the
    same request id recorded (``earlier``: its row, to be read back)."""

    record: DecisionRecord | None
    earlier: DecisionRow | None = None


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
) -> Committed:
    """Record ``decided`` (made on ``snapshot`` from ``prepared``) in one write transaction.

    Raises StaleFleet when pools were added or changed since the snapshot; StateError when the
    store refuses (nothing written).
    """
    ident = uuid.uuid4().hex  # chosen once: a retry after a lost COMMIT can tell whether it landed
    made: list[DecisionRecord] = []

    def work(txn: Transaction) -> Committed:
        made.clear()
        expire(txn, capacities, source=source)
        if request_id is not None:
            earlier = txn.by_request(request_id)
            if earlier is not None:
                return Committed(None, earlier)
        version, fleet = txn.state()
        if fleet != snapshot.fleet_version:
            raise StaleFleet("pools were added or changed while the policy was asked; asking again")
        snap, decision = snapshot, decided
        if version != snapshot.version:
            snap, changed = merge(snapshot, _rows(txn, version, fleet, snapshot.version))
            indexes = [prepared.judged.fleet.index[n] for n in changed if n in prepared.judged.fleet.index]
            if stale(prepared.judged, decided, snap.capacities, indexes):
                decision = prepared.decide(snap.capacities, capacities.tables, capacities_digest=snap.capacity_digest)
            else:
                snap = snapshot  # decided on the snapshot's capacity, and still what selection gives now
        held: list[HeldRow] = []
        if isinstance(decision, Placement):
            state = snap.states[snap.index[decision.pool]]
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
        record = _write(txn, ident, decision, prepared, snap.version, source=source, request_id=request_id, lease_expires_at=lease_expires_at)
        if isinstance(decision, Placement):
            state = snap.states[snap.index[decision.pool]]
            mine = [HeldRow(ident, h, decision.grant.share) for h in decision.holdings]
            _refresh(txn, capacities, state.pool, state.held_outside, txn.bump(), [*held, *mine])
        made.append(record)
        return Committed(record)

    def landed(txn: Transaction) -> Committed | None:
        row = txn.by_id(ident)
        if row is None:
            return None
        return Committed(made[-1]) if made else Committed(None, row)

    return store.transaction(work, landed=landed)


def _rows(txn: Transaction, version: int, fleet: int, since: int) -> StateRows:
    return StateRows(version, fleet, tuple(txn.pools(since)))


def stale(judged: Judged, decided: Decision, capacities: Sequence[Capacity], changed: Sequence[int]) -> bool:
    """Whether a decision made before the pools at ``changed`` (fleet indexes) changed capacity
    may no longer be what selection gives now: its pool changed, or a pool ranked before it has
    room now (for the balanced objective, any admissible pool of its tier or a better one changed);
    a rejection, whenever any pool changed."""
    if not changed:
        return False
    if not isinstance(decided, Placement):
        return True
    chosen = judged.fleet.index[decided.pool]
    if chosen in changed:
        return True
    rank = judged.rank
    tier = judged.verdict(chosen).tier
    for i in changed:
        at = rank.get(i)
        if at is None:
            continue  # denied by its shape or budget: never chosen, whatever its room
        v = judged.verdict(i)
        if judged.objective == "balanced":
            if v.tier <= tier:
                return True
        elif at < rank[chosen] and fits(v.grant, capacities[i]):
            return True
    return False


def _write(
    txn: Transaction,
    ident: str,
    decision: Decision,
    prepared: Prepared,
    at: int,
    *,
    source: str,
    request_id: str | None,
    lease_expires_at: str | None,
) -> DecisionRecord:
    """The decision's documents, row, grant, burst event and audit entries."""
    now = txn.now()
    fleet = prepared.judged.fleet
    txn.put_document("fleets", fleet.revision, lambda: fleet.document)
    txn.put_document("verdict_sets", prepared.verdict_set_key, lambda: prepared.verdict_set_bytes)
    placed = decision if isinstance(decision, Placement) else None
    document = codec.encode_record(decision, workload=prepared.request.input, verdict_set=prepared.verdict_set_key, at=at, holdings=placed.holdings if placed else ())
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
            holdings=placed.holdings if placed else (), share=placed.grant.share if placed else 0.0, burst=burst_row,
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
    }
    txn.audit("decision", summary, source=source)
    return DecisionRecord(ident, now, dataclasses.replace(decision, decision_id=ident), None, None, request_id, lease_expires_at if placed else None)


def _refresh(txn: Transaction, capacities: Capacities, pool: Pool, held_outside: float, version: int, held: Sequence[HeldRow] | None = None) -> None:
    """Work out what ``pool`` can still place from what it holds, and store it (and log it)."""
    capacity, free = capacities.of(pool, txn.held(pool.name) if held is None else held, held_outside)
    txn.set_capacity(pool.name, codec.capacity_text(capacity), free, version)


# -- releases and leases -------------------------------------------------------------------------


def expire(txn: Transaction, capacities: Capacities, *, source: str) -> list[str]:
    """Release placements whose lease ended and that were neither submitted nor renewed."""
    rows = txn.lease_ended(txn.now())
    for row in rows:
        _release(txn, capacities, row.id, source=source, kind="expired")
    return [r.id for r in rows]


def _release(txn: Transaction, capacities: Capacities, ident: str, *, source: str, kind: str) -> None:
    now = txn.now()
    name = txn.release(ident, now)
    row = txn.pool(name)
    assert row is not None
    _refresh(txn, capacities, codec.pool_from_text(row.spec), row.held_outside, txn.bump())
    txn.audit(kind, {"decision_id": ident, "released_at": now}, source=source)


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


def renew(store: Rows, capacities: Capacities, ident: str, lease_expires_at: str, *, source: str) -> DecisionRow:
    """Move a live placement's lease end (audited)."""

    def work(txn: Transaction) -> DecisionRow:
        expire(txn, capacities, source=source)
        row = txn.find(ident)
        txn.renew(row.id, lease_expires_at)
        txn.audit("renew", {"decision_id": row.id, "lease_expires_at": lease_expires_at}, source=source)
        return txn.find(row.id)

    return store.transaction(work, landed=lambda txn: None)


def set_job(store: Rows, capacities: Capacities, ident: str, job_id: str, *, scheduler: str, uid: str | None, source: str) -> DecisionRow:
    """Record the scheduler's job (and its uid) on a live placement, audited."""

    def work(txn: Transaction) -> DecisionRow:
        expire(txn, capacities, source=source)
        row = txn.find(ident)
        txn.set_job(row.id, job_id, scheduler, uid)
        entry: JSONObject = {"decision_id": row.id, "scheduler": scheduler, "job_id": job_id}
        if uid is not None:
            entry["job_uid"] = uid
        txn.audit("submit", entry, source=source)
        return txn.find(row.id)

    def landed(txn: Transaction) -> DecisionRow | None:
        row = txn.find(ident)
        return row if row.job_id == job_id else None

    return store.transaction(work, landed=landed)


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


def apply_pools(store: Rows, capacities: Capacities, pools: Sequence[Pool], *, replace: bool, source: str) -> list[PoolChange]:
    """Register pools. ``replace=False`` refuses an existing name; ``True`` updates it, but not its
    accelerator, model, target, region or partitioning while decisions hold its devices, nor a
    count that would drop a device they hold."""
    specs = {pool.name: codec.pool_text(pool) for pool in pools}
    changes: list[PoolChange] = []

    def work(txn: Transaction) -> list[PoolChange]:
        changes.clear()
        expire(txn, capacities, source=source)
        version: int | None = None
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
                _refresh(txn, capacities, pool, 0.0, version, [])
                changes.append(PoolChange(pool.name, "added"))
            else:
                before = pool_spec(codec.pool_from_text(row.spec))
                after = pool_spec(pool)
                fields = tuple(sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k)))
                _check_change(txn, pool, fields)
                txn.update_pool(pool.name, spec, pool.count)
                _refresh(txn, capacities, pool, row.held_outside, version)
                changes.append(PoolChange(pool.name, "updated", fields))
            txn.audit("pool", {"pool": pool_spec(pool), "action": changes[-1].action}, source=source)
        return list(changes)

    def landed(txn: Transaction) -> list[PoolChange] | None:
        done = len(changes) == len(pools) and all((row := txn.pool(name)) is not None and row.spec == spec for name, spec in specs.items())
        return list(changes) if done else None

    return store.transaction(work, landed=landed)


def _check_change(txn: Transaction, pool: Pool, fields: Sequence[str]) -> None:
    """Refuse a change that would move live grants: what they hold must stay what it was."""
    holders = txn.holders(pool.name)
    if not holders:
        return
    named = ", ".join(h[:12] for h in holders[:5]) + (f" and {len(holders) - 5} more" if len(holders) > 5 else "")
    moved = [f for f in fields if f in FROZEN_WHILE_HELD]
    if moved:
        raise SpecError(
            f"pool {pool.name!r}: cannot change {', '.join(moved)} while decisions hold its devices ({named}); "
            "release them first (prices, carbon factor, capabilities and a larger count may change)",
            field=moved[0],
        )
    beyond = sorted({h.holding.device for h in txn.held(pool.name) if h.holding.device >= pool.count})
    if beyond:
        raise SpecError(
            f"pool {pool.name!r}: count {pool.count} would drop device(s) {', '.join(map(str, beyond[:8]))} that "
            f"live decisions hold ({named}); release them first",
            field="count",
        )


def record_usage(store: Rows, capacities: Capacities, usage: Mapping[str, float], *, scheduler: str, source: str) -> dict[str, float]:
    """Record how many devices of each named pool its scheduler reports busy: those beyond this
    layer's own submitted, live placements are held outside it. Returns the held-outside figure per
    pool; an audit entry for each pool whose figure changed. NotFoundError for an unknown pool."""

    def work(txn: Transaction) -> dict[str, float]:
        held: dict[str, float] = {}
        version: int | None = None
        for name, busy in sorted(usage.items()):
            row = txn.pool(name)
            if row is None:
                raise NotFoundError(f"no pool {name!r}")
            # Our own submitted, live placements are part of what the scheduler reports busy.
            outside = round(max(0.0, busy - txn.submitted_devices(name)), 9)
            held[name] = outside
            if abs(row.held_outside - outside) > 1e-9:
                if version is None:
                    version = txn.bump()
                txn.set_held_outside(name, outside)
                _refresh(txn, capacities, codec.pool_from_text(row.spec), outside, version)
                txn.audit("capacity", {"pool": name, "scheduler": scheduler, "busy": busy, "held_outside": outside}, source=source)
        return held

    return store.transaction(work, landed=lambda txn: None)


def ensure_layout(store: Rows, capacities: Capacities) -> None:
    """Capacities worked out with other packing rules (or none yet, after an upgrade) are worked
    out again; a live grant recorded before grants held devices gets its devices first."""
    if store.layout() == capacities.digest:
        return

    def work(txn: Transaction) -> None:
        if txn.layout() == capacities.digest:
            return
        version = txn.bump()
        for row in txn.pools(-1):
            pool = codec.pool_from_text(row.spec)
            _backfill(txn, capacities, pool, row.held_outside)
            _refresh(txn, capacities, pool, row.held_outside, version)
        txn.set_layout(capacities.digest)

    store.transaction(work, landed=lambda txn: None)


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
