"""The policy's answers as typed values, and the evaluator protocol that gives them.

The policy publishes which fields its verdicts depend on (``Signature``: the shape fields of a pool
and the workload fields) and answers verdict queries per shape (``ShapeVerdict``) and for the
workload itself (``WorkloadVerdict``). A verdict is keyed by (policy revision, workload signature,
shape key): nothing else can change it (the policy sees nothing else), so it is reused for as long
as OPA confirms the same revision. The wire and stored forms of these values are
``examlops_policy._core.codec``'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol

from examlops_policy.model import CheckInfo, Grant, JSONObject, JSONValue, Pool, Reason
from examlops_policy._core.quota import QuotaLimits
from examlops_policy._core.waiting import WaitLimits


# What a shape may say of a pool: its fields, and what is derived from its nodes. The fields that
# came with nodes are left out of a shape while they are null, so a pool that is not node-tracked
# has the shape (and the shape key) it had before.
DERIVED_SHAPE_FIELDS: Final = ("node_sizes", "node_limits", "whole_cpus")
LATER_SHAPE_FIELDS: Final = frozenset({"node_sizes", "node_limits", "whole_cpus", "sharing", "shares_per_device"})
SHAPE_FIELDS: Final = frozenset(Pool.__dataclass_fields__) | frozenset(DERIVED_SHAPE_FIELDS)


def _json(value: object) -> JSONValue:
    if isinstance(value, tuple):
        return [_json(v) for v in value]
    return value  # type: ignore[return-value]


@dataclass(frozen=True)
class Signature:
    """The fields a pool's verdict may depend on: the shape's and the workload's."""

    shape: tuple[str, ...]
    workload: tuple[str, ...]

    def shape_of(self, pool: Pool) -> JSONObject:
        out: JSONObject = {}
        for name in self.shape:
            value = getattr(pool, name)
            if value is None and name in LATER_SHAPE_FIELDS:
                continue
            out[name] = _json(value)
        return out

    def workload_of(self, policy_input: Mapping[str, object]) -> JSONObject:
        """The signature's fields of a workload's policy input (``Request.input``): those it has
        (what a workload does not ask of nodes is absent; the policy reads its default)."""
        return {name: policy_input[name] for name in self.workload if name in policy_input}  # type: ignore[misc]


@dataclass(frozen=True)
class About:
    """What the policy says about itself, once per revision."""

    revision: str
    opa_version: str
    signature: Signature
    checks: tuple[CheckInfo, ...]
    other_codes: tuple[tuple[str, str, str], ...]
    texts: Mapping[str, str] = field(default_factory=dict)

    @property
    def explained(self) -> tuple[CheckInfo, ...]:
        """The checks in order, then the tier (why an admissible pool was passed over)."""
        tier = tuple(c for c in self.other_codes if c[1] == "preference")
        return (*self.checks, CheckInfo("tier", "Tier", "preference", tier))


@dataclass(frozen=True)
class Limits:
    """What a pool may cost and emit per device-hour for a grant (None: no cap), and the reasons a
    pool over them gets."""

    cost_per_hour: float | None = None
    carbon_per_hour: float | None = None
    cost_reason: Reason | None = None
    carbon_reason: Reason | None = None

    def over(self, price: float, carbon: float) -> tuple[Reason, ...]:
        """The budget reasons of a pool with this price and carbon per device-hour (the policy's
        budget check, checks/budget)."""
        out = []
        if self.cost_per_hour is not None and price > self.cost_per_hour + 1e-9 and self.cost_reason is not None:
            out.append(self.cost_reason)
        if self.carbon_per_hour is not None and carbon > self.carbon_per_hour + 1e-9 and self.carbon_reason is not None:
            out.append(self.carbon_reason)
        return tuple(out)


@dataclass(frozen=True)
class TooSmall:
    """What a pool counted as one node (it lists no nodes and shares nothing) must have in all for
    a grant: ``devices`` (devices, or fixed slices, on its one node), and the reason a pool with
    fewer gets (the policy's capacity check, ``capacity.too_small``: it could never hold the grant,
    whatever is released)."""

    devices: int
    reason: Reason

    def of(self, pool: Pool) -> tuple[Reason, ...]:
        """The reason ``pool`` gets: none unless it is counted as one node of fewer devices (a
        pool of nodes is the nodes check's to judge)."""
        return (self.reason,) if not pool.node_tracked and pool.count < self.devices else ()


@dataclass(frozen=True)
class Alternative:
    """A larger share that also covers the request, with the budget's limits and the quota's figures
    for it: what a pool gives when the smallest covering share has no room now (the policy's
    fractions.alternatives)."""

    grant: Grant
    limits: Limits = Limits()
    quota: QuotaLimits | None = None


@dataclass(frozen=True)
class ShapeVerdict:
    """The verdict for every pool of one shape: its tier, what denies it, what it would grant.

    ``note_full`` replaces ``note`` when the requested accelerator's pools pass every check but are
    full, ``note_budget`` when they pass every check but the budget; ``limits`` are the budget's per
    device-hour for this grant, ``quota`` the quota's figures for it (None: a verdict given before
    the quota was a pool-stage check). ``alternatives``: the larger shares that also cover the
    request, smallest first (a pool gives the first of its grants with room, capacity and quota,
    that the budget allows); ``too_small``: what a pool counted as one node must have in all for the
    grant (None: one device does, which every pool has)."""

    tier: int
    note: str | None
    denials: tuple[Reason, ...]
    grant: Grant
    shortfall: Reason
    blocks_burst: bool
    note_full: str | None = None
    limits: Limits = Limits()
    note_budget: str | None = None
    quota: QuotaLimits | None = None
    alternatives: tuple[Alternative, ...] = ()
    too_small: TooSmall | None = None

    def candidates(self, price: float, carbon: float) -> tuple[Alternative, ...]:
        """The grants a pool of this shape at this price and carbon per device-hour may give, in
        order, each with its budget limits and quota figures: the smallest covering share, then
        (when the budget allows that one) each larger one the budget allows and its quota does not
        refuse whatever the projects hold."""
        smallest = Alternative(self.grant, self.limits, self.quota)
        if not self.alternatives or self.limits.over(price, carbon):
            return (smallest,)
        return (smallest, *(a for a in self.alternatives if not a.limits.over(price, carbon) and not (a.quota is not None and a.quota.always)))

    @property
    def fallback(self) -> bool:
        return self.tier % 2 == 1

    @property
    def burst(self) -> bool:
        return self.tier >= 2


@dataclass(frozen=True)
class WorkloadVerdict:
    """What the policy says of the workload itself: rejected outright, how cloud comes in, why
    an admissible pool of one tier is passed over when a better tier wins, the reason a stand-in
    gets when the workload does not fall back for budget (``budget_fallback``), and when it must
    start (``wait``: each candidate's start estimate is compared with these per decision)."""

    rejection: Reason | None
    burst_mode: str | None  # "cloud" | "spill" | None
    preferences: Mapping[tuple[int, int], Reason]
    request_rejected: Reason | None
    budget_fallback: Reason | None = None
    wait: WaitLimits = WaitLimits()


@dataclass(frozen=True)
class Answer:
    """A decoded verdict answer: the workload's verdict, the shapes judged, the keys OPA lacked."""

    confirm_revision: str | None
    workload: WorkloadVerdict
    shapes: Mapping[str, ShapeVerdict]
    missing: tuple[str, ...]
    judged: bool = True


@dataclass(frozen=True)
class Confirmation:
    """What OPA says it serves right now. ``tables_digest``: the digest the serving policy gave of
    the tables it evaluates (``examlops.provenance``), where the connection asked for it (an OPA at
    ``EXA_OPA_URL``, whose revision is only a label); None where it is proven otherwise (the local
    OPA loads only a bundle signed for its start) or not known."""

    revision: str | None
    opa_version: str
    tables_digest: str | None = None


class PolicyEvaluator(Protocol):
    """A policy engine serving the placement policy.

    Every method is free of side effects on placements and may be called again for the same answer
    while the revision holds. Each raises ``PolicyUnavailable`` when no answer could be had and
    ``PolicyError`` when the answer is not usable; never a partial answer.
    """

    def confirm(self) -> Confirmation: ...

    def about(self) -> About: ...

    def verdicts(self, workload: JSONObject, keys: Sequence[str], shapes: Mapping[str, JSONObject]) -> Answer: ...

    def decision(self, policy_input: JSONObject) -> JSONObject: ...

    def describe(self) -> str: ...
