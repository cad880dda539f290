"""Decision records: the decision rebuilt from what it stored.

A record holds only what is particular to the decision (``codec.encode_record``): the workload, the
revision of the fleet and the key of the verdict set it was judged on (each stored once,
content-addressed), the state version whose capacity it was decided at, the outcome, the devices it
holds and its provenance. The per-pool explanation is rebuilt from those on demand by the same
selection that made the decision, so it is identical to what the decision showed; a record whose
rebuild disagrees with what it recorded was altered.

The record's bytes are hashed and the digest goes into the decision's audit entry, so an edited cost
or pool is caught by ``exa audit verify``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, cast

from examlops_policy.errors import SpecError, StateCorrupt, StateError
from examlops_policy.model import Capacity, Decision, JSONObject, Placement, Provenance, Queued, Rejection
from examlops_policy.store.api import DecisionRow, Document
from examlops_policy.tables import Tables
from examlops_policy.views import DecisionRecord
from examlops_policy._core import codec, leases
from examlops_policy._core.quota import QuotaUse
from examlops_policy._core.selection import Fleet, FleetEntry, Judged, Work, decide_over
from examlops_policy._core.state import aligned
from examlops_policy._core.verdicts import Signature
from examlops_policy._core.waiting import Starts

LoadDocument = Callable[[str], JSONObject]
CapacitiesAt = Callable[[int, Sequence[str]], Sequence[Capacity]]
"""The capacity every named pool had at a state version (the latest entry of the store's capacity
log at or before it), in the order named."""


def judged_from(fleet_doc: Mapping[str, object], verdict_doc: Mapping[str, object], fleet_revision: str, tables: Tables | None = None) -> Judged:
    """The fleet and its verdicts as stored, joined again by shape key (``tables``: the throughput
    a workload's work is ranked by; without them, as if none were known)."""
    where = f"verdict set of fleet {fleet_revision}"
    sig = cast(Mapping[str, list[str]], verdict_doc["signature"])
    signature = Signature(tuple(sig["shape"]), tuple(sig["workload"]))
    entries = []
    for row in cast(list[Mapping[str, object]], fleet_doc["pools"]):
        pool = codec.pool_from_doc(cast(Mapping[str, object], row["pool"]))
        entries.append(FleetEntry(pool, codec.content_key(signature.shape_of(pool)), float(cast(float, row["price"])), float(cast(float, row.get("carbon", 0.0)))))
    shapes = {k: codec.shape_verdict_from_json(v, where) for k, v in cast(Mapping[str, object], verdict_doc["shapes"]).items()}
    judged = bool(verdict_doc.get("judged", True))
    if judged and any(e.key not in shapes for e in entries):
        raise StateCorrupt(f"stored {where} lacks verdicts for some of its pools; the record cannot be rebuilt")
    wv = codec.workload_verdict_from_json(verdict_doc["workload_verdict"], where)
    checks = codec.checks_from_json(verdict_doc.get("checks"))
    wsig = cast(Mapping[str, object], verdict_doc.get("workload") or {})
    texts = {str(k): str(v) for k, v in cast(Mapping[str, object], verdict_doc.get("texts") or {}).items()}
    return Judged(
        Fleet(fleet_revision, tuple(entries)), shapes, wv, judged=judged, checks=checks,
        objective=str(wsig.get("optimize", "cost")), carbon_weight=float(cast(float, wsig.get("carbon_weight", 0.5))), texts=texts,
        work=None if tables is None else Work.of(wsig, tables),
    )  # fmt: skip


def capacities_of_record(ident: str, document: Mapping[str, object], fleet: Fleet, capacities_at: CapacitiesAt | None) -> list[Capacity]:
    """What every pool of the record's fleet could place when it was decided: from the state
    version it names (the store's capacity log), or the vector a version-2 record keeps itself."""
    at = codec.record_at(document)
    if at is None:
        capacities = codec.capacities_of(document.get("capacity"))
    elif capacities_at is None:
        raise StateError(f"decision {ident[:12]} was decided at state version {at}, and no capacity log was given to rebuild it")
    else:
        capacities = list(capacities_at(at, [e.pool.name for e in fleet.entries]))
    if len(capacities) != len(fleet.entries):
        raise StateCorrupt(f"decision {ident[:12]}: its capacity vector does not match its fleet; the record was altered")
    return capacities


def rebuild(
    ident: str,
    document: Mapping[str, object],
    tables: Tables,
    load_fleet: LoadDocument,
    load_verdicts: LoadDocument,
    judged_cache: dict[tuple[str, str], Judged] | None = None,
    capacities_at: CapacitiesAt | None = None,
) -> Decision:
    """The decision a compact record describes, rebuilt by the selection that made it.

    Raises StateCorrupt (a damaged state) when the rebuilt outcome is not the recorded one (the record, its fleet or its
    verdict set was altered).
    """
    fleet_rev = str(document["fleet"])
    verdict_key = str(document["verdicts"])
    cache_key = (fleet_rev, verdict_key)
    judged = judged_cache.get(cache_key) if judged_cache is not None else None
    if judged is None:
        judged = judged_from(load_fleet(fleet_rev), load_verdicts(verdict_key), fleet_rev, tables)
        if judged_cache is not None:
            if len(judged_cache) > 32:
                judged_cache.clear()
            judged_cache[cache_key] = judged
    capacities = capacities_of_record(ident, document, judged.fleet, capacities_at)
    prov = cast(Mapping[str, str], document["provenance"])
    if codec.record_at(document) is not None:
        # The capacities came from the capacity log, outside the record: its input digest (in the
        # record, and in the record's audit entry) covers them.
        if codec.recorded_input_digest(codec.capacity_digest(capacities), document) != prov["input_digest"]:
            raise StateCorrupt(
                f"decision {ident[:12]}: the capacity it was decided at (state version {codec.record_at(document)}) is not what "
                "its input digest says; the capacity log or the record was altered (run exa audit verify)"
            )
    used = cast("JSONObject | None", cast(Mapping[str, object], document["provenance"]).get("quota_use")) or None
    provenance = Provenance(prov["input_digest"], prov["policy_revision"], prov["opa_version"], prov.get("verdicts", "fresh"), fleet_rev, used)
    workload = codec.workload_from_json(cast(Mapping[str, object], document["workload"]))
    # The estimates it was decided with and its time (version 4), and what the projects held for
    # its quotas, so the same selection runs again.
    # Among pools that tied, the node packer chose the one recorded (its best node was there).
    prefer = cast("str | None", document.get("pool"))
    decision = decide_over(judged, workload, capacities, tables, provenance, codec.starts_of(document), QuotaUse.from_json(used), prefer)
    recorded = str(document["outcome"])
    if recorded == "queued" and isinstance(decision, Rejection) and decision.code == "no_capacity":
        decision = Queued.of(decision)  # it was not rejected: it waited for capacity
    if decision.outcome != recorded or (isinstance(decision, Placement) and decision.pool != document.get("pool")):
        raise StateCorrupt(
            f"decision {ident[:12]} does not rebuild to what it recorded ({recorded} {document.get('pool') or ''}); "
            "the record, its fleet or its verdict set was altered (run exa audit verify)"
        )
    if isinstance(decision, Placement):
        decision = dataclasses.replace(
            decision,
            holdings=codec.holdings_from_json(document.get("holdings", [])),
            allocations=codec.allocations_from_json(document.get("allocations")),
            cost_per_hour=float(cast(float, document["cost_per_hour"])),
            carbon_factor=float(cast(float, document["carbon_factor"])),
            grounded_carbon_per_hour=cast("float | None", document.get("grounded_carbon_per_hour")),
        )
    else:
        decision = dataclasses.replace(decision, reason=str(document["reason"]), code=str(document["code"]))
    return dataclasses.replace(decision, decision_id=ident)


@dataclass(frozen=True)
class DecisionInputs:
    """What a compact decision was made on: its fleet and verdict set documents, the capacity
    every pool had, and the start estimates it was decided with at its time (None: a record from
    before estimates)."""

    fleet: JSONObject
    verdicts: JSONObject
    capacities: tuple[Capacity, ...]
    starts: Starts | None = None


class Stored(Protocol):
    """The store's reads a record is rebuilt from."""

    def document(self, kind: Document, key: str) -> str: ...

    def capacities_at(self, version: int) -> dict[str, str]: ...


class Reader:
    """Recorded decisions read back from their rows: rebuilt by the selection that made them, with
    the documents, judgements and capacities they share kept for the next one."""

    def __init__(self, store: Stored, tables: Tables) -> None:
        self._store = store
        self.tables = tables
        self._documents: dict[str, JSONObject] = {}
        self._judged: dict[tuple[str, str], Judged] = {}
        self._capacities: dict[int, dict[str, str]] = {}
        self._methods: dict[str, dict[str, str | None]] = {}

    def document(self, kind: Document, key: str) -> JSONObject:
        doc = self._documents.get(key)
        if doc is None:
            doc = codec.document_of(self._store.document(kind, key))
            if len(self._documents) > 64:
                self._documents.clear()
            self._documents[key] = doc
        return doc

    def capacities_at(self, version: int, names: Sequence[str]) -> list[Capacity]:
        found = self._capacities.get(version)
        if found is None:
            found = self._store.capacities_at(version)
            if len(self._capacities) > 16:
                self._capacities.clear()
            self._capacities[version] = found
        capacities = aligned(found, names)
        if capacities is None:
            raise StateCorrupt(f"the capacity log has no entry at state version {version} for a pool a decision was made over; the state was altered")
        return capacities

    def carbon_method(self, fleet_revision: str | None, pool: str | None) -> str | None:
        """How the carbon per device-hour of ``pool`` in the stored fleet ``fleet_revision`` was
        found (``accounting.carbon_basis``, under these tables); None for a decision from before
        stored fleets, or a pool its fleet does not hold."""
        if fleet_revision is None or pool is None:
            return None
        methods = self._methods.get(fleet_revision)
        if methods is None:
            from examlops_policy.accounting import carbon_method_of_spec

            pools = cast(list[JSONObject], self.document("fleets", fleet_revision).get("pools") or [])
            specs = (cast(JSONObject, entry.get("pool") or {}) for entry in pools)
            methods = {str(spec.get("name")): carbon_method_of_spec(spec, self.tables) for spec in specs}
            if len(self._methods) > 16:
                self._methods.clear()
            self._methods[fleet_revision] = methods
        return methods.get(pool)

    def decision(self, row: DecisionRow) -> Decision:
        document = codec.document_of(row.document)
        if not codec.is_compact(document):
            return dataclasses.replace(codec.decision_from_document(document), decision_id=row.id)
        return rebuild(
            row.id,
            document,
            self.tables,
            lambda key: self.document("fleets", key),
            lambda key: self.document("verdict_sets", key),
            self._judged,
            self.capacities_at,
        )

    def record(self, row: DecisionRow) -> DecisionRecord:
        return DecisionRecord(
            row.id, row.created_at, self.decision(row), row.released_at, row.job_id, row.request_id, row.lease_expires_at,
            row.scheduler, row.job_uid, row.job_state, row.queued_id, row.job_started_at, row.job_ended_at, row.node_down_at,
            row.preempting_for, lease_ended=leases.by_lease(row.released_at, row.lease_expires_at, row.job_id),
        )  # fmt: skip

    def inputs(self, row: DecisionRow) -> DecisionInputs:
        """What a compact decision was made on; SpecError for one recorded before."""
        doc = codec.document_of(row.document)
        if not codec.is_compact(doc):
            raise SpecError(f"decision {row.id[:12]} was recorded before decisions kept their inputs; it cannot be replayed", field="ID")
        fleet = self.document("fleets", str(doc["fleet"]))
        verdicts = self.document("verdict_sets", str(doc["verdicts"]))
        judged = judged_from(fleet, verdicts, str(doc["fleet"]))
        return DecisionInputs(fleet, verdicts, tuple(capacities_of_record(row.id, doc, judged.fleet, self.capacities_at)), codec.starts_of(doc))
