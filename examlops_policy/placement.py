"""The decision core: build the policy input, read the verdicts, choose the cheapest eligible pool.

Pure: everything comes in as arguments (the workload, the pools with their free capacity, an
evaluator, the tables); nothing here touches OPA, the state store or the clock directly.
Filter, then choose: the policy says which pools are eligible and why the others are not; this
module only picks the cheapest eligible pool (ties broken by name) and words the result.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, cast

from examlops_policy.errors import PolicyError
from examlops_policy.model import (
    BurstVerdict,
    Decision,
    Grant,
    JSONObject,
    JSONValue,
    Placement,
    PoolState,
    PoolVerdict,
    Provenance,
    Reason,
    Rejection,
    Workload,
)
from examlops_policy.tables import Tables

if TYPE_CHECKING:
    from examlops_policy.policy import PolicyEvaluator


def effective_cost(state: PoolState, tables: Tables) -> float:
    """USD per device-hour: the pool's own price, else the accelerator's default."""
    pool = state.pool
    return pool.cost_per_hour if pool.cost_per_hour is not None else tables.default_cost(pool.accelerator)


def workload_input(workload: Workload) -> JSONObject:
    return {
        "name": workload.name,
        "accelerator": workload.accelerator,
        "engine": workload.engine,
        "capabilities": list(workload.capabilities),
        "target": workload.effective_target,
        "fraction": workload.fraction,
        "count": workload.count,
        "residency": workload.residency,
        "allow_burst": workload.allow_burst,
    }


def shape_of(state: PoolState) -> JSONObject:
    """Everything the policy judges a pool by, except its free capacity."""
    pool = state.pool
    return {
        "target": pool.target,
        "accelerator": pool.accelerator,
        "model": pool.model,
        "region": pool.region,
        "capabilities": list(pool.capabilities),
        "supports_fractions": pool.supports_fractions,
    }


def build_input(workload: Workload, pools: Sequence[PoolState], tables: Tables) -> JSONObject:
    """The policy input: the workload, and each distinct pool shape once with its pools (name,
    capacity, price) under it; shapes in order of first appearance by pool name, so the input never
    depends on dict/set order."""
    groups: dict[tuple[object, ...], JSONObject] = {}
    for state in sorted(pools, key=lambda s: s.pool.name):
        p = state.pool
        key = (p.target, p.accelerator, p.model, p.region, p.capabilities, p.supports_fractions)
        group = groups.get(key)
        if group is None:
            group = groups[key] = {**shape_of(state), "pools": []}
        cast(list[JSONValue], group["pools"]).append(
            {"name": state.pool.name, "count": state.pool.count, "free": state.free, "cost_per_hour": effective_cost(state, tables)}
        )
    return {"workload": workload_input(workload), "shapes": list(groups.values())}


def digest(document: Mapping[str, object]) -> str:
    """SHA-256 of the compact JSON of ``document``.

    Key order is the order ``build_input`` writes, which is fixed, so no sort is needed to make the
    digest reproducible (sorting costs a tenth of a large decision).
    """
    canonical = json.dumps(document, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _reason(raw: JSONValue) -> Reason:
    data = cast(JSONObject, raw)
    return Reason(
        code=str(data["code"]),
        kind=str(data.get("kind", "never")),
        message=str(data["message"]),
        details=cast(JSONObject, data.get("details") or {}),
    )


def _grant(raw: JSONValue) -> Grant:
    data = cast(JSONObject, raw)
    return Grant(
        requested=float(cast(float, data["requested"])),
        honored=bool(data["honored"]),
        granted=float(cast(float, data["granted"])),
        devices=float(cast(float, data["devices"])),
        scheme=cast("str | None", data.get("scheme")),
        profile=cast("str | None", data.get("profile")),
        why=cast("str | None", data.get("why")),
    )


def _verdicts(answer: JSONObject, policy_input: JSONObject) -> tuple[PoolVerdict, ...]:
    """Expand the per-shape verdicts into one verdict per pool, as the policy's ``decision`` does.

    The per-pool loop is the hot path of a large fleet: everything a shape shares is read once.
    """
    raw_shapes = cast(dict[str, JSONObject], answer["shapes"])
    short = set(cast(list[str], answer["short"]))
    eligible = set(cast(list[str], answer["eligible"]))
    verdicts = []
    for index, shape in enumerate(cast(list[JSONObject], policy_input["shapes"])):
        raw = raw_shapes.get(str(index))
        if raw is None:
            raise PolicyError("malformed decision: the policy did not return a verdict for every pool")
        pref = raw.get("preference")
        preference = _reason(pref) if pref else None
        shared = tuple(_reason(r) for r in cast(list[JSONValue], raw["denials"]))
        capacity = _reason(raw["capacity"])
        grant = _grant(raw["grant"])
        tier, fallback, burst = int(cast(int, raw["tier"])), bool(raw["fallback"]), bool(raw["burst"])
        note = cast("str | None", raw.get("note"))
        for row in cast(list[dict[str, "str | float"]], shape["pools"]):
            name = str(row["name"])
            denials = shared
            if name in short:
                # The shape's shortfall reason, with this pool's own capacity in the details.
                details: JSONObject = {**capacity.details, "free": row.get("free", 0), "count": row["count"]}
                denials = (*shared, Reason(capacity.code, capacity.kind, capacity.message, details))
            admissible = not denials
            reasons = (*denials, preference) if admissible and preference else denials
            verdicts.append(
                PoolVerdict(name, name in eligible, admissible, tier, fallback, burst, reasons, grant, float(row["cost_per_hour"]), note)
            )
    # Eligible first, then by tier, price and name: the order explanations list pools in.
    return tuple(sorted(verdicts, key=lambda v: (not v.eligible, v.tier, v.cost_per_hour, v.pool)))


def _burst(answer: JSONObject, regions: Mapping[str, str]) -> BurstVerdict:
    raw = cast(JSONObject, answer["burst"])
    if not raw.get("attempted"):
        return BurstVerdict(attempted=False)
    pool = cast("str | None", raw.get("pool"))
    reason = raw.get("reason")
    return BurstVerdict(
        attempted=True,
        verdict=str(raw["verdict"]),
        pool=pool,
        region=regions.get(pool) if pool else None,
        reason=_reason(reason) if reason else None,
    )


def _no_pool_reason(workload: Workload, verdicts: Sequence[PoolVerdict]) -> tuple[str, str]:
    if not verdicts:
        return "no_pools", "no pools are registered"
    counts: dict[str, int] = {}
    for verdict in verdicts:
        for reason in verdict.reasons:
            counts[reason.code] = counts.get(reason.code, 0) + 1
    summary = ", ".join(f"{code} on {n} pool{'s' if n > 1 else ''}" for code, n in sorted(counts.items()))
    only_capacity = any(all(r.kind == "not_now" for r in v.reasons) for v in verdicts)
    code = "no_capacity" if only_capacity else "no_eligible_pool"
    what = "has free capacity" if only_capacity else "is eligible"
    return code, f"no pool {what} for {workload.name} ({len(verdicts)} checked: {summary})"


def _note(verdict: PoolVerdict) -> str | None:
    notes = [verdict.note] if verdict.note else []
    grant = verdict.grant
    if not grant.honored:
        notes.append(f"fraction {grant.requested:g} not honored ({grant.why}) — whole device allocated")
    return "; ".join(notes) or None


def grounded_carbon(state: PoolState, tables: Tables) -> float | None:
    """gCO2e per device-hour from board power x PUE x grid intensity, where all three are known."""
    pool = state.pool
    power = pool.power_w if pool.power_w is not None else tables.model_power(pool.model)
    pue = pool.pue if pool.pue is not None else tables.region_pue(pool.region)
    intensity = tables.grid_intensity(pool.region)
    if power is None or pue is None or intensity is None:
        return None
    return round(power / 1000.0 * pue * intensity, 3)


def interpret(
    workload: Workload,
    pools: Sequence[PoolState],
    policy_input: JSONObject,
    answer: JSONObject,
    tables: Tables,
    provenance: Provenance,
) -> Decision:
    """Turn the policy's decision document into a Placement or a Rejection."""
    by_name = {s.pool.name: s for s in pools}
    rejection = answer.get("rejection")
    # An invalid workload gets no verdicts at all; otherwise every pool must have one.
    invalid = rejection is not None and not answer["shapes"]
    verdicts = () if invalid else _verdicts(answer, policy_input)
    burst = _burst(answer, {name: s.pool.region for name, s in by_name.items()})
    if rejection is not None:
        reason = _reason(rejection)
        return Rejection(workload, reason.message, reason.code, verdicts, burst, provenance)
    eligible = [v for v in verdicts if v.eligible]
    if not eligible:
        if burst.verdict == "blocked" and burst.reason is not None:
            return Rejection(workload, burst.reason.message, burst.reason.code, verdicts, burst, provenance)
        code, message = _no_pool_reason(workload, verdicts)
        return Rejection(workload, message, code, verdicts, burst, provenance)
    chosen = min(eligible, key=lambda v: (v.cost_per_hour, v.pool))
    state = by_name[chosen.pool]
    pool = state.pool
    return Placement(
        workload=workload,
        pool=pool.name,
        accelerator=pool.accelerator,
        target=pool.target,
        region=pool.region,
        fallback=chosen.fallback,
        fraction_honored=chosen.grant.honored,
        note=_note(chosen),
        grant=chosen.grant,
        cost_per_hour=chosen.cost_per_hour,
        carbon_factor=pool.carbon_factor if pool.carbon_factor is not None else tables.default_carbon_factor(pool.region),
        model=pool.model,
        grounded_carbon_per_hour=grounded_carbon(state, tables),
        verdicts=verdicts,
        burst=burst,
        provenance=provenance,
    )


def decide(
    workload: Workload,
    pools: Sequence[PoolState],
    evaluator: PolicyEvaluator,
    tables: Tables,
) -> Decision:
    """One policy query, then the choice. Raises PolicyUnavailable/PolicyError rather than guess."""
    policy_input = build_input(workload, pools, tables)
    answer = evaluator.evaluate(policy_input)
    meta = cast(JSONObject, answer.get("provenance") or {})
    served = meta.get("policy_revision")
    if served is not None and served != evaluator.revision:
        raise PolicyError(
            f"OPA runs policy revision {served}, but the local policy files are {evaluator.revision}; "
            "restart OPA (exa opa restart) so decisions match the reviewed policy"
        )
    provenance = Provenance(
        input_digest=digest(policy_input),
        policy_revision=str(served or evaluator.revision),
        opa_version=str(meta.get("opa_version") or "unknown"),
    )
    return interpret(workload, pools, policy_input, answer, tables, provenance)
