"""The decision core: choose among the pools the policy admitted, and word the result.

Pure: the fleet, the verdicts OPA gave for its shapes, and the capacity each pool has now come in as
arguments; nothing here touches OPA, the state store or the clock. Filter, then choose, the one
piece of decision logic outside Rego, kept equal to the policy's own reference rule
(``data.examlops.hardware.placement.decision``) by a property test through the real OPA:

1. pools whose shape the policy denies are out; so are pools over the budget, pools that would not
   start the workload in time (their start estimates against its max_wait and deadline, at the
   decision's time: ``Starts``), and pools without room for the grant now (a pool gives the first
   of its grants with room: the smallest share that covers the request, else a larger one the
   budget allows, priced as granted);
2. the lowest admissible tier wins (HPC before cloud, the requested accelerator before a stand-in);
3. within it, what the workload optimises: the cheapest grant (price per device-hour x devices
   granted, a slice counting as its share), or the lowest carbon of the grant (then cost), or the
   earliest start (a pool without an estimate last; then cost), or a balanced score of cost and
   carbon; then the pool's name.

The burst verdict and a rejection's summary follow from the same filter. Per-pool verdicts (for
explanations) are built only when someone looks at them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Final, overload

from examlops_policy.model import (
    BurstVerdict,
    Capacity,
    CheckInfo,
    Decision,
    Grant,
    NodeRoom,
    Placement,
    Pool,
    PoolVerdict,
    Provenance,
    Reason,
    Rejection,
    Workload,
)
from examlops_policy.accounting import carbon_basis
from examlops_policy.tables import Tables
from examlops_policy.views import balanced_scores
from examlops_policy._core import codec
from examlops_policy._core.verdicts import ShapeVerdict, WorkloadVerdict
from examlops_policy._core.waiting import Starts, exceeded

COST_DIGITS: Final = 9  # grant costs compare at this precision (Rego computes them in decimals)


def effective_cost(pool: Pool, tables: Tables) -> float:
    """USD per device-hour: the pool's own price, else the accelerator's default."""
    return pool.cost_per_hour if pool.cost_per_hour is not None else tables.default_cost(pool.accelerator)


def grounded_carbon(pool: Pool, tables: Tables) -> float | None:
    """gCO2e per device-hour from board power x PUE x grid intensity, where all three are known."""
    return carbon_basis(pool, tables).grounded


def carbon_per_hour(pool: Pool, tables: Tables) -> float:
    """The headline gCO2e per device-hour (``accounting.carbon_basis`` says how it is found)."""
    return carbon_basis(pool, tables).per_hour


def priced(pools: Sequence[Pool], tables: Tables) -> list[tuple[Pool, float, float]]:
    """Every pool in name order with its price and carbon per device-hour: the fleet's document."""
    return [(p, effective_cost(p, tables), carbon_per_hour(p, tables)) for p in sorted(pools, key=lambda p: p.name)]


def fits(grant: Grant, capacity: Capacity) -> bool:
    """Room for the grant (the policy's capacity check, checks/capacity): enough empty devices, or
    enough placeable slices of its profile; on a node-tracked pool, as many nodes as the grant asks
    (within one group of a required topology level) that each hold what it asks of one node."""
    rooms = capacity.nodes
    if rooms is None:
        if grant.nodes != 1:
            return False
        if grant.profile is None:
            return capacity.whole >= grant.units
        return capacity.slices.get(grant.profile, 0) >= grant.units
    if grant.shares is None and grant.profile is None and capacity.whole < grant.units * grant.nodes:
        return False  # fewer whole devices free in all than the grant asks
    if grant.topology is None:
        # Enough nodes that hold it, counted until there are (rooms are in ascending order of
        # their whole devices: the roomiest are looked at first).
        need = grant.nodes
        for r in reversed(rooms):
            if holds(r, grant):
                need -= r.count
                if need <= 0:
                    return True
        return False
    level = "block" if grant.topology == "same-block" else "switch"
    together: dict[int, int] = {}
    for r in rooms:
        group = getattr(r, level)
        if group is not None and holds(r, grant):
            together[group] = together.get(group, 0) + r.count
    return any(n >= grant.nodes for n in together.values())


def holds(room: NodeRoom, grant: Grant) -> bool:
    """Whether a node with ``room`` holds what ``grant`` asks of one node: its devices (whole ones,
    a slice, or its shares on a shared or a free device), its CPU and its memory."""
    if room.cpu is not None and room.cpu < grant.cpu_milli:
        return False
    if room.memory is not None and room.memory < grant.memory_mib:
        return False
    if grant.shares is not None:
        return room.whole >= 1 or room.shares >= grant.shares
    if grant.profile is None:
        return room.whole >= grant.units
    return room.slice_room(grant.profile) >= grant.units


def grant_cost(price: float, grant: Grant) -> float:
    return round(price * grant.devices, COST_DIGITS)


@dataclass(frozen=True)
class FleetEntry:
    """One pool of a fleet: the pool, its shape key under the policy's signature, its price and
    carbon per device-hour."""

    pool: Pool
    key: str
    price: float
    carbon: float = 0.0


@dataclass(frozen=True)
class Fleet:
    """Every registered pool, in name order, with its shape key: what the verdicts are keyed on."""

    revision: str
    entries: tuple[FleetEntry, ...]

    @cached_property
    def index(self) -> Mapping[str, int]:
        return {e.pool.name: i for i, e in enumerate(self.entries)}

    @cached_property
    def document(self) -> bytes:
        """The fleet document's canonical bytes (its SHA-256 is ``revision``), as stored."""
        return codec.canonical(codec.fleet_document([(e.pool, e.price, e.carbon) for e in self.entries]))


class Judged:
    """A fleet judged for one workload signature under one policy revision: the pools in the order
    selection tries them, computed once and reused while the fleet and the revision hold.

    ``objective`` and ``carbon_weight`` are the workload's (part of its signature); ``texts`` the
    policy's words for a rejection's summary (``about.texts``), which selection fills in."""

    def __init__(
        self,
        fleet: Fleet,
        shapes: Mapping[str, ShapeVerdict],
        workload: WorkloadVerdict,
        *,
        judged: bool = True,
        checks: tuple[CheckInfo, ...] = (),
        objective: str = "cost",
        carbon_weight: float = 0.5,
        texts: Mapping[str, str] | None = None,
    ) -> None:
        self.fleet = fleet
        self.texts = texts or {}
        self.shapes = shapes
        self.workload = workload
        self.judged = judged
        self.checks = checks
        self.objective = objective
        self.carbon_weight = carbon_weight
        # Per pool: its shape's denials and what the budget says of its price and carbon.
        self.denials: list[tuple[Reason, ...]] = []
        ranked: list[tuple[object, ...]] = []
        blocked: list[tuple[float, str, int]] = []
        requested_ok: set[int] = set()
        requested_over: set[int] = set()
        # Per pool with larger shares that cover the request: the grants it may give, in order.
        self.grants: dict[int, tuple[Grant, ...]] = {}
        for i, entry in enumerate(fleet.entries if judged else ()):
            v = shapes[entry.key]
            over = v.limits.over(entry.price, entry.carbon)
            denials = (*v.denials, *over)
            self.denials.append(denials)
            if v.alternatives:
                grants = v.candidates(entry.price, entry.carbon)
                if len(grants) > 1:
                    self.grants[i] = grants
            if not denials:
                ranked.append((*self.key_of(i, v.grant), i))
                if v.tier % 2 == 0:
                    requested_ok.add(v.tier)
            elif v.blocks_burst and not over:
                blocked.append((entry.price, entry.pool.name, i))
            if v.tier % 2 == 0 and over and not v.denials:
                requested_over.add(v.tier)
        # Tiers where a pool of the requested accelerator passes every check (it can only be full),
        # and where one passes every check but the budget.
        self.requested_ok_tiers = frozenset(requested_ok)
        self.requested_over_tiers = frozenset(requested_over)
        forbidden = workload.budget_fallback
        if forbidden is not None:
            # The workload does not fall back for budget: the stand-ins reached for it are denied.
            refused = {i for i, entry in enumerate(fleet.entries if judged else ()) if self.over_budget_fallback(shapes[entry.key].tier)}
            for i in refused:
                self.denials[i] = (*self.denials[i], forbidden)
            ranked = [row for row in ranked if row[-1] not in refused]
            blocked = [row for row in blocked if row[-1] not in refused]
        self.ranked = sorted(ranked, key=lambda row: row[:-1])
        self.blocked = sorted(blocked)

    def key_of(self, index: int, grant: Grant, starts: Starts | None = None) -> tuple[object, ...]:
        """Where pool ``index`` giving ``grant`` ranks: its tier, then the objective (the grant's
        cost; or its carbon, then cost; or its start in ``starts``, a pool without an estimate
        last, then cost), then the pool's name."""
        entry = self.fleet.entries[index]
        tier = self.verdict(index).tier
        cost = grant_cost(entry.price, grant)
        if self.objective == "carbon":
            return (tier, grant_cost(entry.carbon, grant), cost, entry.pool.name)
        if self.objective == "earliest":
            at = None if starts is None else starts.start_s(entry.pool.name)
            return (tier, 1, 0, cost, entry.pool.name) if at is None else (tier, 0, at, cost, entry.pool.name)
        return (tier, cost, entry.pool.name)

    def grant_for(self, index: int, capacity: Capacity) -> Grant | None:
        """What pool ``index`` gives with ``capacity``: the first of its grants with room (the
        smallest covering share, then the larger ones its budget allows), or None."""
        grants = self.grants.get(index)
        if grants is None:
            grant = self.verdict(index).grant
            return grant if fits(grant, capacity) else None
        return next((g for g in grants if fits(g, capacity)), None)

    def full_fallback(self, tier: int) -> bool:
        """A stand-in's tier where a better tier has a pool of the requested accelerator that
        passes every check (it is full): the fallback is for capacity."""
        return tier % 2 == 1 and any(t < tier for t in self.requested_ok_tiers)

    def over_budget_fallback(self, tier: int) -> bool:
        """A stand-in's tier where a better tier has a pool of the requested accelerator that passes
        every check but the budget, and none that is merely full: the fallback is for budget."""
        return tier % 2 == 1 and not self.full_fallback(tier) and any(t < tier for t in self.requested_over_tiers)

    def verdict(self, index: int) -> ShapeVerdict:
        return self.shapes[self.fleet.entries[index].key]

    @property
    def candidates(self) -> list[int]:
        """The pools (fleet indexes) no check but capacity and the wait denies, in selection order
        by cost: those whose start estimates a decision asks for."""
        return [int(row[-1]) for row in self.ranked]  # type: ignore[call-overload]

    def late(self, index: int, starts: Starts | None) -> tuple[Reason, ...]:
        """The wait check's reasons for the pool at ``index``: its start estimate (in ``starts``)
        against the workload's max_wait and deadline at the decision's time. Only candidates are
        judged by their start (a pool denied otherwise says that alone); ValueError when the
        workload has a limit and no decision time was given."""
        limits = self.workload.wait
        if not limits.any or self.denials[index]:
            return ()
        if starts is None:
            raise ValueError("a workload with max_wait or a deadline is decided at a time, with its candidates' start estimates: none was given")
        return exceeded(limits, starts.of(self.fleet.entries[index].pool.name), starts.now)

    def order(self, starts: Starts | None) -> list[tuple[object, ...]]:
        """The candidates in selection order for this decision, each row its key (``key_of`` its
        smallest grant) and its fleet index: ``ranked``, or for ``optimize: earliest`` by tier,
        then the earliest start in ``starts`` (none last), then cost and name."""
        if self.objective != "earliest" or starts is None:
            return self.ranked
        rows = []
        for row in self.ranked:
            index = int(row[-1])  # type: ignore[call-overload]
            rows.append((*self.key_of(index, self.verdict(index).grant, starts), index))
        return sorted(rows, key=lambda row: row[:-1])

    @cached_property
    def static_counts(self) -> tuple[Mapping[str, int], tuple[bool | None, ...]]:
        """What a rejection's summary counts that no capacity changes: each code over the pools'
        shape and budget denials, and per pool whether those are all ``not_now`` (None: it has
        none)."""
        counts: dict[str, int] = {}
        not_now: list[bool | None] = []
        for denials in self.denials:
            for r in denials:
                counts[r.code] = counts.get(r.code, 0) + 1
            not_now.append(all(r.kind == "not_now" for r in denials) if denials else None)
        return counts, tuple(not_now)

    @cached_property
    def rank(self) -> Mapping[int, int]:
        """Each admissible pool's (fleet index's) place in selection order."""
        return {int(row[-1]): at for at, row in enumerate(self.ranked)}  # type: ignore[call-overload]


class LazyVerdicts(Sequence[PoolVerdict]):
    """Per-pool verdicts, built on first look: a decision over thousands of pools does not pay for
    explanations nobody reads."""

    def __init__(self, build: Callable[[], tuple[PoolVerdict, ...]]) -> None:
        self._build: Callable[[], tuple[PoolVerdict, ...]] | None = build
        self._items: tuple[PoolVerdict, ...] = ()

    def _all(self) -> tuple[PoolVerdict, ...]:
        if self._build is not None:
            self._items, self._build = self._build(), None
        return self._items

    @overload
    def __getitem__(self, index: int) -> PoolVerdict: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[PoolVerdict]: ...

    def __getitem__(self, index: int | slice) -> PoolVerdict | Sequence[PoolVerdict]:
        return self._all()[index]

    def __len__(self) -> int:
        return len(self._all())

    def __iter__(self) -> Iterator[PoolVerdict]:
        return iter(self._all())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and tuple(self) == tuple(other)

    def __hash__(self) -> int:
        return hash(self._all())

    def __repr__(self) -> str:
        return f"LazyVerdicts({len(self)} pools)"


@dataclass(frozen=True)
class Outcome:
    """What selection found: the chosen pool (an index into the fleet) and the burst verdict."""

    chosen: int | None
    tier: int | None
    burst: BurstVerdict
    blocked_pool: int | None = None
    grant: Grant | None = None  # what the chosen pool gives


def select(judged: Judged, capacities: Sequence[Capacity], starts: Starts | None = None) -> Outcome:
    """Lowest admissible tier, then the objective (cheapest grant; or lowest carbon, then cost; or
    earliest start, then cost; or the balanced score), then name; and what that means for
    bursting.

    ``capacities`` are aligned with ``judged.fleet.entries``; ``starts``: the candidates' start
    estimates and the decision's time (None: none asked for, which a workload with a wait limit
    cannot be decided without).
    """
    wv = judged.workload
    if wv.rejection is not None:
        return Outcome(None, None, BurstVerdict(attempted=False))
    chosen: int | None = None
    tier: int | None = None
    grant: Grant | None = None
    if judged.objective == "balanced":
        chosen, tier, grant = _balanced(judged, capacities, starts)
    else:
        # In selection order of each pool's smallest grant: a pool that gives a larger one ranks
        # where that one's cost puts it, never before, so the first pool whose smallest grant ranks
        # at or after the best found so far ends the search.
        best: tuple[object, ...] | None = None
        for row in judged.order(starts):
            if best is not None and row[:-1] >= best:
                break
            index = int(row[-1])  # type: ignore[call-overload]
            given = judged.grant_for(index, capacities[index])
            if given is None or judged.late(index, starts):
                continue
            key = row[:-1] if given is judged.verdict(index).grant else judged.key_of(index, given, starts)
            if best is None or key < best:
                best, chosen, tier, grant = key, index, int(row[0]), given  # type: ignore[call-overload]
    attempted = wv.burst_mode == "cloud" or (wv.burst_mode == "spill" and (tier is None or tier >= 2))
    if not attempted:
        burst = BurstVerdict(attempted=False)
    elif tier is not None and tier >= 2:
        burst = BurstVerdict(attempted=True, verdict="allowed")
    else:
        for _, name, i in judged.blocked:
            v = judged.verdict(i)
            if judged.grant_for(i, capacities[i]) is not None:
                pool = judged.fleet.entries[i].pool
                burst = BurstVerdict(True, "blocked", name, pool.region, v.denials[0])
                return Outcome(chosen, tier, burst, i, grant)
        burst = BurstVerdict(attempted=True, verdict="unavailable")
    return Outcome(chosen, tier, burst, grant=grant)


def _balanced(judged: Judged, capacities: Sequence[Capacity], starts: Starts | None) -> tuple[int | None, int | None, Grant | None]:
    """The best tier's pools with room that start in time, scored by cost and carbon of what each
    gives, each divided by the highest among them, carbon weighted by ``carbon_weight``; then cost,
    then name."""
    tier: int | None = None
    rows: list[tuple[float, float, str, int, Grant]] = []
    for row in judged.ranked:
        t, index = int(row[0]), int(row[-1])  # type: ignore[call-overload]
        if tier is not None and t != tier:
            break
        entry = judged.fleet.entries[index]
        given = judged.grant_for(index, capacities[index])
        if given is not None and not judged.late(index, starts):
            tier = t
            rows.append((grant_cost(entry.price, given), grant_cost(entry.carbon, given), entry.pool.name, index, given))
    if not rows:
        return None, None, None
    scores = balanced_scores([(r[0], r[1]) for r in rows], judged.carbon_weight)
    best = min(zip(scores, rows), key=lambda sr: (sr[0], sr[1][0], sr[1][2]))
    return best[1][3], tier, best[1][4]


def pool_verdicts(judged: Judged, capacities: Sequence[Capacity], tier: int | None, starts: Starts | None = None) -> tuple[PoolVerdict, ...]:
    """Every pool's verdict and reasons, as the policy's reference decision words them (its start
    estimate beside them, where it was asked for): eligible first, then by tier, grant cost and
    name."""
    if not judged.judged:
        return ()
    wv = judged.workload
    out = []
    for i, entry in enumerate(judged.fleet.entries):
        v = judged.shapes[entry.key]
        given = judged.grant_for(i, capacities[i])
        room = given is not None
        grant = given or v.grant
        late = judged.late(i, starts)
        denials = (*judged.denials[i], *late) if room else (*judged.denials[i], *late, v.shortfall)
        admissible = not denials
        reasons: tuple[Reason, ...] = denials
        if admissible:
            preference = _preference(wv, v.tier, tier)
            if preference is not None:
                reasons = (preference,)
        eligible = admissible and tier is not None and v.tier == tier and wv.rejection is None
        cost = grant_cost(entry.price, grant)
        pool = entry.pool
        out.append(
            PoolVerdict(
                pool.name, eligible, admissible, v.tier, v.fallback, v.burst, reasons, grant, entry.price, v.note, cost,
                pool.accelerator, pool.target, pool.region, grant_cost(entry.carbon, grant), pool.spot,
                None if starts is None else starts.of(pool.name),
            )
        )  # fmt: skip
    return tuple(sorted(out, key=lambda p: (not p.eligible, p.tier, p.grant_cost_per_hour, p.pool)))


def _preference(wv: WorkloadVerdict, t: int, selected: int | None) -> Reason | None:
    if t == selected:
        return None
    if selected is not None:
        return wv.preferences.get((t, selected))
    return wv.request_rejected


def fill(template: str, **values: object) -> str:
    """``template`` with each ``{name}`` replaced by its value (as the policy's
    ``strings.replace_n`` does)."""
    for name, value in values.items():
        template = template.replace("{" + name + "}", str(value))
    return template


def summary(judged: Judged, capacities: Sequence[Capacity], workload: Workload, starts: Starts | None = None) -> tuple[str, str]:
    """(code, message) when no pool is eligible: how many pools each reason stopped, in the
    policy's words (``judged.texts``; a message of a verdict set stored without them is empty: its
    record keeps the message). Counted from the denials per pool, as ``pool_verdicts`` words them,
    without building every verdict."""
    texts = judged.texts
    entries = judged.fleet.entries
    if not entries or not judged.judged:
        return "no_pools", texts.get("no_pools", "")
    static, not_now = judged.static_counts
    counts = dict(static)
    capacity_only = False
    shapes = judged.shapes
    for i, entry in enumerate(entries):
        v = shapes[entry.key]
        base = not_now[i]
        extra = list(judged.late(i, starts))
        if judged.grant_for(i, capacities[i]) is None:
            extra.append(v.shortfall)
        if not extra:
            capacity_only = capacity_only or base is True
            continue
        for r in extra:
            counts[r.code] = counts.get(r.code, 0) + 1
        capacity_only = capacity_only or ((base is None or base) and all(r.kind == "not_now" for r in extra))
    code = "no_capacity" if capacity_only else "no_eligible_pool"
    if not texts:
        return code, ""
    parts = texts["separator"].join(
        fill(texts["reason_on_one"] if n == 1 else texts["reason_on_many"], code=c, count=n) for c, n in sorted(counts.items())
    )
    return code, fill(texts[code], workload=workload.name, checked=len(entries), reasons=parts)


def decide_over(
    judged: Judged,
    workload: Workload,
    capacities: Sequence[Capacity],
    tables: Tables,
    provenance: Provenance,
    starts: Starts | None = None,
) -> Decision:
    """A Placement on the pool selection chose, or a Rejection saying why there is none.
    ``starts``: the candidates' start estimates and the decision's time (see ``select``); the
    decision carries them, the chosen pool's as its own."""
    outcome = select(judged, capacities, starts)
    verdicts = LazyVerdicts(lambda: pool_verdicts(judged, capacities, outcome.tier, starts))
    wv = judged.workload
    checks = judged.checks
    decided_at = None if starts is None else starts.now
    if wv.rejection is not None:
        return Rejection(workload, wv.rejection.message, wv.rejection.code, verdicts, outcome.burst, provenance, checks=checks, decided_at=decided_at)
    if outcome.chosen is None:
        reason = outcome.burst.reason
        if outcome.burst.verdict == "blocked" and reason is not None:
            return Rejection(workload, reason.message, reason.code, verdicts, outcome.burst, provenance, checks=checks, decided_at=decided_at)
        code, message = summary(judged, capacities, workload, starts)
        return Rejection(workload, message, code, verdicts, outcome.burst, provenance, checks=checks, decided_at=decided_at)
    entry = judged.fleet.entries[outcome.chosen]
    v = judged.verdict(outcome.chosen)
    grant = outcome.grant or v.grant
    pool = entry.pool
    note = v.note_full if judged.full_fallback(v.tier) else v.note_budget if judged.over_budget_fallback(v.tier) else v.note
    notes = [n for n in (note, grant.note) if n]
    return Placement(
        workload=workload,
        pool=pool.name,
        accelerator=pool.accelerator,
        target=pool.target,
        region=pool.region,
        fallback=v.fallback,
        fraction_honored=grant.honored,
        note="; ".join(notes) or None,
        grant=grant,
        cost_per_hour=entry.price,
        carbon_factor=carbon_per_hour(pool, tables),
        model=pool.model,
        grounded_carbon_per_hour=grounded_carbon(pool, tables),
        verdicts=verdicts,
        burst=outcome.burst,
        provenance=provenance,
        checks=checks,
        estimate=None if starts is None else starts.of(pool.name),
        decided_at=decided_at,
    )

