"""Decision records: what a decision stores, and the decision rebuilt from it.

A record holds only what is particular to the decision: the workload, the revision of the fleet
and the key of the verdict set it was judged on (each stored once, content-addressed), the capacity
every pool had, the outcome, the devices it holds and its provenance. The per-pool explanation is
rebuilt from those on demand by the same selection that made the decision, so it is identical to
what the decision showed; a record whose rebuild disagrees with what it recorded was altered.

The record's bytes are hashed (``record_digest``) and the digest goes into the decision's audit
entry, so an edited cost or pool is caught by ``exa audit verify``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Final, cast

from examlops_policy._core.engine import capacity_from_json, capacity_json, pool_from_doc
from examlops_policy.errors import StateError
from examlops_policy.model import (
    BurstVerdict,
    Capacity,
    Decision,
    Holding,
    JSONObject,
    JSONValue,
    Placement,
    Provenance,
    Reason,
    Rejection,
    Workload,
)
from examlops_policy._core.selection import Fleet, FleetEntry, Judged, decide_over
from examlops_policy.tables import Tables
from examlops_policy._core.verdicts import (
    Signature,
    canonical,
    checks_from_json,
    content_key,
    reason_json,
    shape_verdict_from_json,
    workload_input,
    workload_verdict_from_json,
)

VERSION: Final = 2
LoadDocument = Callable[[str], JSONObject]


def digest(document: bytes) -> str:
    return "sha256:" + hashlib.sha256(document).hexdigest()


def outcome_of(decision: Decision) -> str:
    if isinstance(decision, Placement):
        return "placed"
    return "blocked" if decision.burst_blocked else "rejected"


def _burst_json(burst: BurstVerdict) -> JSONObject:
    return {
        "attempted": burst.attempted,
        "verdict": burst.verdict,
        "pool": burst.pool,
        "region": burst.region,
        "reason": None if burst.reason is None else reason_json(burst.reason),
    }


def encode(
    decision: Decision,
    *,
    verdict_set: str,
    capacities: Sequence[Capacity],
    holdings: Sequence[Holding] = (),
) -> bytes:
    """The record's bytes (compact, sorted-key JSON)."""
    prov = decision.provenance
    doc: JSONObject = {
        "v": VERSION,
        "outcome": outcome_of(decision),
        "workload": workload_input(decision.workload),
        "fleet": prov.fleet_revision,
        "verdicts": verdict_set,
        "capacity": packed_vector(capacities),
        "burst": _burst_json(decision.burst),
        "provenance": {
            "input_digest": prov.input_digest,
            "policy_revision": prov.policy_revision,
            "opa_version": prov.opa_version,
            "verdicts": prov.verdicts,
        },
    }
    if isinstance(decision, Placement):
        doc.update(
            pool=decision.pool,
            holdings=[[h.device, h.profile, h.start, h.units] for h in holdings],
            cost_per_hour=decision.cost_per_hour,
            carbon_factor=decision.carbon_factor,
            grounded_carbon_per_hour=decision.grounded_carbon_per_hour,
        )
    else:
        doc.update(code=decision.code, reason=decision.reason)
    return canonical(doc)


def capacity_vector(capacities: Sequence[Capacity]) -> JSONValue:
    """What every pool could still place, in fleet order, as a record stores it: the distinct
    values once and an index per pool (most pools of a large fleet share a few values)."""
    values: list[JSONValue] = []
    seen: dict[tuple[int, tuple[tuple[str, int], ...]], int] = {}
    at: list[JSONValue] = []
    for capacity in capacities:
        key = (capacity.whole, tuple(sorted(capacity.slices.items())))
        index = seen.get(key)
        if index is None:
            index = seen[key] = len(values)
            values.append(capacity_json(capacity))
        at.append(index)
    return {"values": values, "at": at}


# A packed capacity vector never unpacks to more than this (an altered record cannot exhaust memory).
MAX_VECTOR_BYTES: Final = 64 * 1024 * 1024


def packed_vector(capacities: Sequence[Capacity]) -> JSONValue:
    """``capacity_vector``, deflated and base64-encoded: profile names repeat pool after pool, so a
    large fleet's vector shrinks to a fraction (a record stays small at thousands of pools)."""
    raw = canonical(capacity_vector(capacities))
    return {"deflate": base64.b64encode(zlib.compress(raw, 6)).decode("ascii")}


def capacities_of(raw: object) -> list[Capacity]:
    """The capacity vector of a record: ``packed_vector``'s or ``capacity_vector``'s form, or the
    plain list of records written before them. StateError for anything else (an altered record)."""
    if isinstance(raw, Mapping) and isinstance(raw.get("deflate"), str):
        try:
            inflater = zlib.decompressobj()
            data = inflater.decompress(base64.b64decode(str(raw["deflate"]), validate=True), MAX_VECTOR_BYTES)
            if inflater.unconsumed_tail:
                raise StateError("a stored decision's capacity vector is larger than any fleet's; the record was altered")
            raw = json.loads(data)
        except (ValueError, zlib.error) as exc:
            raise StateError(f"malformed capacity vector in a stored decision: {exc}") from exc
    if isinstance(raw, list):
        return [capacity_from_json(c) for c in raw]
    if isinstance(raw, Mapping):
        values, at = raw.get("values"), raw.get("at")
        if isinstance(values, list) and isinstance(at, list):
            if all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < len(values) for i in at):
                decoded = [capacity_from_json(v) for v in values]
                return [decoded[i] for i in at]
    raise StateError(f"malformed capacity vector in a stored decision: {str(raw)[:80]}")


def is_compact(document: Mapping[str, object]) -> bool:
    return document.get("v") == VERSION


def workload_from_json(raw: Mapping[str, object]) -> Workload:
    values = dict(raw)
    target = values.get("target")
    values["target"] = None if target == "any" else target
    values["capabilities"] = tuple(cast(list[str], values.get("capabilities", [])))
    return Workload(**values)  # type: ignore[arg-type]


def judged_from(fleet_doc: Mapping[str, object], verdict_doc: Mapping[str, object], fleet_revision: str) -> Judged:
    """The fleet and its verdicts as stored, joined again by shape key."""
    where = f"verdict set of fleet {fleet_revision}"
    sig = cast(Mapping[str, list[str]], verdict_doc["signature"])
    signature = Signature(tuple(sig["shape"]), tuple(sig["workload"]))
    entries = []
    for row in cast(list[Mapping[str, object]], fleet_doc["pools"]):
        pool = pool_from_doc(cast(Mapping[str, object], row["pool"]))
        entries.append(FleetEntry(pool, content_key(signature.shape_of(pool)), float(cast(float, row["price"])), float(cast(float, row.get("carbon", 0.0)))))
    shapes = {k: shape_verdict_from_json(v, where) for k, v in cast(Mapping[str, object], verdict_doc["shapes"]).items()}
    judged = bool(verdict_doc.get("judged", True))
    if judged and any(e.key not in shapes for e in entries):
        raise StateError(f"stored {where} lacks verdicts for some of its pools; the record cannot be rebuilt")
    wv = workload_verdict_from_json(verdict_doc["workload_verdict"], where)
    checks = checks_from_json(verdict_doc.get("checks"))
    wsig = cast(Mapping[str, object], verdict_doc.get("workload") or {})
    return Judged(
        Fleet(fleet_revision, tuple(entries)), shapes, wv, judged=judged, checks=checks,
        objective=str(wsig.get("optimize", "cost")), carbon_weight=float(cast(float, wsig.get("carbon_weight", 0.5))),
    )  # fmt: skip


def rebuild(
    ident: str,
    document: Mapping[str, object],
    tables: Tables,
    load_fleet: LoadDocument,
    load_verdicts: LoadDocument,
    judged_cache: dict[tuple[str, str], Judged] | None = None,
) -> Decision:
    """The decision a compact record describes, rebuilt by the selection that made it.

    Raises StateError when the rebuilt outcome is not the recorded one (the record, its fleet or its
    verdict set was altered).
    """
    fleet_rev = str(document["fleet"])
    verdict_key = str(document["verdicts"])
    cache_key = (fleet_rev, verdict_key)
    judged = judged_cache.get(cache_key) if judged_cache is not None else None
    if judged is None:
        judged = judged_from(load_fleet(fleet_rev), load_verdicts(verdict_key), fleet_rev)
        if judged_cache is not None:
            if len(judged_cache) > 32:
                judged_cache.clear()
            judged_cache[cache_key] = judged
    capacities = capacities_of(document["capacity"])
    if len(capacities) != len(judged.fleet.entries):
        raise StateError(f"decision {ident[:12]}: its capacity vector does not match its fleet; the record was altered")
    prov = cast(Mapping[str, str], document["provenance"])
    provenance = Provenance(prov["input_digest"], prov["policy_revision"], prov["opa_version"], prov.get("verdicts", "fresh"), fleet_rev)
    workload = workload_from_json(cast(Mapping[str, object], document["workload"]))
    decision = decide_over(judged, workload, capacities, tables, provenance)
    recorded = str(document["outcome"])
    if outcome_of(decision) != recorded or (isinstance(decision, Placement) and decision.pool != document.get("pool")):
        raise StateError(
            f"decision {ident[:12]} does not rebuild to what it recorded ({recorded} {document.get('pool') or ''}); "
            "the record, its fleet or its verdict set was altered (run exa audit verify)"
        )
    if isinstance(decision, Placement):
        holdings = tuple(
            Holding(int(cast(int, h[0])), cast("str | None", h[1]), cast("int | None", h[2]), cast("int | None", h[3]))
            for h in cast(list[list[JSONValue]], document.get("holdings", []))
        )
        decision = _with(
            decision,
            holdings=holdings,
            cost_per_hour=float(cast(float, document["cost_per_hour"])),
            carbon_factor=float(cast(float, document["carbon_factor"])),
            grounded_carbon_per_hour=cast("float | None", document.get("grounded_carbon_per_hour")),
        )
    else:
        decision = _with(decision, reason=str(document["reason"]), code=str(document["code"]))
    return _with(decision, decision_id=ident)


def _with(decision: Decision, **changes: object) -> Decision:
    import dataclasses

    return dataclasses.replace(decision, **changes)  # type: ignore[arg-type]


def reason_from_json(raw: Mapping[str, object]) -> Reason:
    return Reason(str(raw["code"]), str(raw["kind"]), str(raw["message"]), cast(JSONObject, raw.get("details") or {}))


def document_of(raw: str | bytes) -> JSONObject:
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise StateError(f"a stored decision is not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise StateError("a stored decision is not a JSON object")
    return cast(JSONObject, doc)
