"""The decision core: choose among the pools the policy admitted, and word the result.

Pure: the fleet, the verdicts OPA gave for its shapes, and the capacity each pool has now come in as
arguments; nothing here touches OPA, the state store or the clock. Filter, then choose, the one
piece of decision logic outside Rego, kept equal to the policy's own reference rule
(``data.examlops.hardware.placement.decision``) by a property test through the real OPA:

1. pools whose shape the policy denies are out; so are pools over the budget, pools without room
   for the grant now, in capacity and in the quota of the workload's project for their accelerator
   class (a pool gives the first of its grants with room: the smallest share that covers the
   request, else a larger one the budget allows, priced as granted), and pools that would not start
   the workload in time (their start estimates against its max_wait and deadline, at the
   decision's time: ``Starts``);
2. the lowest admissible tier wins (HPC before cloud, the requested accelerator before a stand-in);
3. within it, what the workload optimises: the cheapest grant (price per device-hour x devices
   granted, a slice counting as its share), or the lowest carbon of the grant (then cost), or the
   earliest start (a pool without an estimate last; then cost), or a balanced score of cost and
   carbon, or by its work (``work-cost``, ``work-carbon``: the cost or carbon of the whole job on
   the pool; ``work-time``: its start plus its run time; pools whose throughput throughput.yaml
   does not give rank after those whose it does, as they would without it); then the pool's name.

The burst verdict and a rejection's summary follow from the same filter. Per-pool verdicts (for
explanations) are built only when someone looks at them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, ClassVar, Final, overload

from examlops_policy.model import (
    START_OBJECTIVES,
    WORK_OBJECTIVES,
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
from examlops_policy._record import Record
from examlops_policy._core import codec
from examlops_policy._core import quota as quotas
from examlops_policy._core.quota import NO_USE, QuotaUse
from examlops_policy._core.verdicts import Alternative, ShapeVerdict, WorkloadVerdict
from examlops_policy._core.waiting import Starts, exceeded

if TYPE_CHECKING:
    from examlops_policy import _nodes  # a node request's type, which ``rooms`` keeps on ``Asked``

# The headline of a no_capacity summary by what stops the pools that could take the workload (the
# policy's composer.headline_causes; any other cause, or several: no_capacity_other).
HEADLINES: Final = {"capacity": "no_capacity", "wait": "no_capacity_wait", "quota": "no_capacity_quota"}
COST_DIGITS: Final = 9  # grant costs compare at this precision (Rego computes them in decimals)
# Balanced scores compare at this precision (as grant costs do, and as the policy rounds them).
SCORE_DIGITS: Final = 9


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


def _quota_over(lim: quotas.QuotaLimits | None, use: QuotaUse) -> tuple[Reason, ...]:
    """A grant's quota reasons that depend on what the projects hold (none when its quota refuses
    it whatever they hold: those are among the pool's denials)."""
    if lim is None or not lim.counted:
        return ()
    return quotas.over(lim, use)


def fits(grant: Grant, capacity: Capacity) -> bool:
    """Room for the grant (the policy's capacity check, checks/capacity): enough empty devices, or
    enough placeable slices of its profile; on a node-tracked pool, as many nodes as the grant asks
    (within one group of a required topology level) that each hold what it asks of one node."""
    rooms = capacity.nodes
    a = asked(grant)
    if rooms is None:
        if a.nodes != 1:
            return False
        if a.profile is None:
            return capacity.whole >= a.units
        return capacity.slices.get(a.profile, 0) >= a.units
    if a.shares is None and a.profile is None and capacity.whole < a.units * a.nodes:
        return False  # fewer whole devices free in all than the grant asks
    cpu, memory, shares, profile, units = a.cpu_milli, a.memory_mib, a.shares, a.profile, a.units
    if a.topology is None:
        # Enough nodes that hold it, counted until there are (rooms are in ascending order of
        # their whole devices: the roomiest are looked at first).
        need = a.nodes
        for r in reversed(rooms):
            if holds(r, cpu, memory, shares, profile, units):
                need -= r.count
                if need <= 0:
                    return True
        return False
    level = "block" if a.topology == "same-block" else "switch"
    together: dict[int, int] = {}
    for r in rooms:
        group = getattr(r, level)
        if group is not None and holds(r, cpu, memory, shares, profile, units):
            together[group] = together.get(group, 0) + r.count
    return any(n >= a.nodes for n in together.values())


class Asked:
    """What a grant asks of a pool's capacity (``fits``), its fields read once: a judged pool's
    grant is asked about at every decision of its workload's signature. ``request``: what it asks
    of each node as the node packer takes it, kept here by ``rooms`` once worked out."""

    def __init__(self, grant: Grant) -> None:
        self.grant = grant
        self.request: _nodes.NodeRequest | None = None
        self.nodes = grant.nodes
        self.units = grant.units
        self.profile = grant.profile
        self.shares = grant.shares
        self.topology = grant.topology
        self.cpu_milli = grant.cpu_milli
        self.memory_mib = grant.memory_mib


ASKED_HELD: Final = 4096
"""Grants whose asks ``fits`` keeps read (by the grant's identity); past it, all are let go."""
_asked_by_id: dict[int, Asked] = {}


def asked(grant: Grant) -> Asked:
    """What ``grant`` asks, kept by the grant's identity (the one place a grant's asks are kept)."""
    found = _asked_by_id.get(id(grant))
    if found is None or found.grant is not grant:  # the grant held: its id is not reused while kept
        if len(_asked_by_id) >= ASKED_HELD:
            _asked_by_id.clear()
        found = _asked_by_id[id(grant)] = Asked(grant)
    return found


def holds(room: NodeRoom, cpu_milli: int, memory_mib: int, shares: int | None, profile: str | None, units: int) -> bool:
    """Whether a node with ``room`` holds what a grant asks of one node: its devices (``units``
    whole ones or of a slice ``profile``, or its ``shares`` on a shared or a free device), its CPU
    and its memory."""
    if room.cpu is not None and room.cpu < cpu_milli:
        return False
    if room.memory is not None and room.memory < memory_mib:
        return False
    if shares is not None:
        return room.whole >= 1 or room.shares >= shares
    if profile is None:
        return room.whole >= units
    return room.slice_room(profile) >= units


def grant_cost(price: float, grant: Grant) -> float:
    return round(price * grant.devices, COST_DIGITS)


@dataclass(frozen=True)
class Work:
    """A workload's work: ``amount`` units of ``work_class``, and the throughput table that says
    what a pool's grant does of it per second (``Tables.work_rate``; the policy's reference rule
    reads the same table)."""

    work_class: str
    amount: float
    tables: Tables

    @classmethod
    def of(cls, wsig: Mapping[str, object], tables: Tables) -> Work | None:
        """The work a workload's signed input says (None: it says none)."""
        work_class, amount = wsig.get("work_class"), wsig.get("work")
        if not isinstance(work_class, str) or not isinstance(amount, (int, float)):
            return None
        return cls(work_class, float(amount), tables)

    def rate(self, pool: Pool, grant: Grant) -> float | None:
        """Units per second ``grant`` on ``pool`` does (None: no throughput known)."""
        return self.tables.work_rate(self.work_class, pool.model, grant)


def job_figure(per_hour: float, amount: float, rate: float) -> float:
    """What a job of ``amount`` units costs (or emits) at ``per_hour`` for the grant doing
    ``rate`` units a second, at the precision the policy compares it."""
    return round(per_hour * amount / (rate * 3600), COST_DIGITS)


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
        work: Work | None = None,
    ) -> None:
        self.fleet = fleet
        self.work = work
        self.texts = texts or {}
        self.shapes = shapes
        self.workload = workload
        self.judged = judged
        self.checks = checks
        self.objective = objective
        self.carbon_weight = carbon_weight
        # Per pool: its shape's denials, what the budget says of its price and carbon, whether it
        # is counted as one node too small ever to hold the grant, and what its quota refuses
        # whatever the projects hold (the quota's reasons that depend on what they hold are
        # compared per decision, as capacity is).
        self.denials: list[tuple[Reason, ...]] = []
        ranked: list[tuple[object, ...]] = []
        blocked: list[tuple[float, str, int]] = []
        requested_ok: set[int] = set()
        requested_over: set[int] = set()
        # Per pool with larger shares that cover the request: the grants it may give, in order.
        self.grants: dict[int, tuple[Alternative, ...]] = {}
        for i, entry in enumerate(fleet.entries if judged else ()):
            v = shapes[entry.key]
            over = v.limits.over(entry.price, entry.carbon)
            small = v.too_small.of(entry.pool) if v.too_small is not None else ()
            always = v.quota.always if v.quota is not None else ()
            denials = (*v.denials, *over, *small, *always)
            self.denials.append(denials)
            if v.alternatives:
                grants = v.candidates(entry.price, entry.carbon)
                if len(grants) > 1:
                    self.grants[i] = grants
            if not denials:
                ranked.append((*self.key_of(i, v.grant), i))
                if v.tier % 2 == 0:
                    requested_ok.add(v.tier)
            elif v.blocks_burst and not over and not always:
                blocked.append((entry.price, entry.pool.name, i))
            if v.tier % 2 == 0 and over and not v.denials and not small and not always:
                requested_over.add(v.tier)
        # Tiers where a pool of the requested accelerator passes every check (it can only be full),
        # and where one passes every check but the budget.
        self.requested_ok_tiers = frozenset(requested_ok)
        self.requested_over_tiers = frozenset(requested_over)
        forbidden = workload.budget_fallback
        self.refused: frozenset[int] = frozenset()
        if forbidden is not None:
            # The workload does not fall back for budget: the stand-ins reached for it are denied.
            refused = {i for i, entry in enumerate(fleet.entries if judged else ()) if self.over_budget_fallback(shapes[entry.key].tier)}
            self.refused = frozenset(refused)
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
        if self.objective in WORK_OBJECTIVES:
            return (tier, *self.work_key(index, grant, starts), cost, entry.pool.name)
        return (tier, cost, entry.pool.name)

    def work_rate(self, index: int, grant: Grant) -> float | None:
        """What pool ``index`` giving ``grant`` does of the workload's work per second (None: the
        workload says no work, or the table has no row for the pool)."""
        return None if self.work is None else self.work.rate(self.fleet.entries[index].pool, grant)

    def work_key(self, index: int, grant: Grant, starts: Starts | None) -> tuple[object, ...]:
        """The objective's part of the key under a work objective, as the policy's ``work_key``:
        (0, the job's cost or carbon) where the throughput is known, else (1, the grant's cost or
        carbon per hour); under work-time (0, started, seconds from now to completion), else (1,
        started, seconds from now to the start), started 0 with a start estimate, 1 without."""
        entry = self.fleet.entries[index]
        rate = self.work_rate(index, grant)
        if self.objective == "work-time":
            at = None if starts is None else starts.start_s(entry.pool.name)
            waited = (1, 0) if at is None or starts is None else (0, at - starts.now_s)
            if rate is None or self.work is None:
                return (1, *waited)
            return (0, waited[0], round(waited[1] + self.work.amount / rate, COST_DIGITS))
        per_hour = grant_cost(entry.carbon if self.objective == "work-carbon" else entry.price, grant)
        if rate is None or self.work is None:
            return (1, per_hour)
        return (0, job_figure(per_hour, self.work.amount, rate))

    def grant_for(self, index: int, capacity: Capacity, use: QuotaUse = NO_USE) -> Grant | None:
        """What pool ``index`` gives with ``capacity`` while the projects hold ``use``: the first of
        its grants with room in capacity and quota (the smallest covering share, then the larger
        ones its budget allows), or None."""
        grants = self.grants.get(index)
        if grants is None:
            v = self.verdict(index)
            return v.grant if fits(v.grant, capacity) and not _quota_over(v.quota, use) else None
        return next((a.grant for a in grants if fits(a.grant, capacity) and not _quota_over(a.quota, use)), None)

    def given(self, index: int, capacity: Capacity, use: QuotaUse) -> tuple[Grant, tuple[Reason, ...], bool]:
        """What pool ``index`` gives now and why not, as the reference rule says it: the first grant
        with room in capacity and quota (no reasons); else the first with room in capacity, and its
        quota's reasons; else the smallest share, its quota's reasons and its capacity shortfall
        (the flag)."""
        v = self.verdict(index)
        grants = self.grants.get(index)
        if grants is None:
            return v.grant, _quota_over(v.quota, use), not fits(v.grant, capacity)
        first: tuple[Grant, tuple[Reason, ...]] | None = None
        for a in grants:
            if fits(a.grant, capacity):
                over = _quota_over(a.quota, use)
                if not over:
                    return a.grant, (), False
                if first is None:
                    first = (a.grant, over)
        if first is not None:
            return first[0], first[1], False
        return v.grant, _quota_over(v.quota, use), True

    def verdict_now(self, index: int, capacity: Capacity, use: QuotaUse, starts: Starts | None) -> tuple[Grant, tuple[Reason, ...]]:
        """What pool ``index`` gives now (``given``) and every reason it is denied for, in the
        policy's order: its shape's denials, its budget's, its quota's whatever the use, its quota's
        given the use, the workload's refusal of a fallback for budget, its start (only a pool
        nothing but capacity denies is judged by it), its capacity shortfall."""
        static = self.denials[index]
        grant, dynamic, short = self.given(index, capacity, use)
        if dynamic and index in self.refused:
            static, refusal = static[:-1], static[-1:]
            dynamic = (*dynamic, *refusal)
        late = () if dynamic else self.late(index, starts)
        return grant, (*static, *dynamic, *late, *((self.verdict(index).shortfall,) if short else ()))

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

    @cached_property
    def quota_needs(self) -> quotas.Needs:
        """What the pools' quotas compare with (nothing: no quota counts what the projects hold)."""
        if not self.judged:
            return quotas.Needs()
        return quotas.needs_of(q for v in self.shapes.values() for q in (v.quota, *(a.quota for a in v.alternatives)))

    @property
    def candidates(self) -> list[int]:
        """The pools (fleet indexes) no check but capacity, the quota and the wait denies, in
        selection order by cost: those whose start estimates a decision asks for."""
        return [int(row[-1]) for row in self.ranked]  # type: ignore[call-overload]

    def late(self, index: int, starts: Starts | None) -> tuple[Reason, ...]:
        """The wait check's reasons for the pool at ``index``: its start estimate (in ``starts``)
        against the workload's max_wait and deadline at the decision's time. Only candidates are
        judged by their start (a pool denied otherwise says that alone: the caller leaves out one
        its project's quota denies now); ValueError when the workload has a limit and no decision
        time was given."""
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
        if self.objective not in START_OBJECTIVES or starts is None:
            return self.ranked
        rows = []
        for row in self.ranked:
            index = int(row[-1])  # type: ignore[call-overload]
            rows.append((*self.key_of(index, self.verdict(index).grant, starts), index))
        return sorted(rows, key=lambda row: row[:-1])

    @cached_property
    def check_of_code(self) -> Mapping[str, str]:
        """The check that declares each reason code (the policy's ``about.checks``)."""
        return {code: check.name for check in self.checks for code, _, _ in check.codes}

    def cause(self, reasons: Iterable[Reason]) -> str:
        """What stops a pool whose reasons are all ``not_now`` (the policy's ``composer.cause``):
        ``other`` when a check beside capacity, wait and quota gives one of them, else ``quota``,
        else ``wait``, else ``capacity``."""
        checks = {self.check_of_code.get(r.code) for r in reasons}
        if checks - set(HEADLINES):
            return "other"
        if "quota" in checks:
            return "quota"
        return "wait" if "wait" in checks else "capacity"

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


class Outcome(Record):
    """What selection found: the chosen pool (an index into the fleet) and the burst verdict;
    ``grant``: what the chosen pool gives; ``tied``: the pools that tie with the chosen one under
    the objective (same tier and the same figures but for the name), each with what it gives, in
    name order, empty when none ties (which of them takes the work is the node packer's choice,
    ``prefer``; the first by name without one)."""

    FIELDS: ClassVar[tuple[str, ...]] = ("chosen", "tier", "burst", "blocked_pool", "grant", "tied")

    chosen: int | None
    tier: int | None
    burst: BurstVerdict
    blocked_pool: int | None
    grant: Grant | None
    tied: tuple[tuple[int, Grant], ...]

    def __init__(
        self,
        chosen: int | None,
        tier: int | None,
        burst: BurstVerdict,
        blocked_pool: int | None = None,
        grant: Grant | None = None,
        tied: tuple[tuple[int, Grant], ...] = (),
    ) -> None:
        self.chosen = chosen
        self.tier = tier
        self.burst = burst
        self.blocked_pool = blocked_pool
        self.grant = grant
        self.tied = tied


NOT_ATTEMPTED: Final = BurstVerdict(attempted=False)
"""No cloud pool considered (immutable: one for every decision that says so)."""


def _tie_key(key: tuple[object, ...]) -> tuple[object, ...]:
    """A selection key without its last part, the pool's name: what pools that tie share."""
    return key[:-1]


def select(
    judged: Judged, capacities: Sequence[Capacity], starts: Starts | None = None, use: QuotaUse = NO_USE, prefer: str | None = None
) -> Outcome:
    """Lowest admissible tier, then the objective (cheapest grant; or lowest carbon, then cost; or
    earliest start, then cost; or the balanced score), then name; and what that means for
    bursting.

    ``capacities`` are aligned with ``judged.fleet.entries``; ``starts``: the candidates' start
    estimates and the decision's time (None: none asked for, which a workload with a wait limit
    cannot be decided without); ``use``: what the projects hold, for the pools' quotas.
    ``prefer``: among the pools that tie under the objective (``Outcome.tied``), the one the node
    packer chose (its best node is there); the first by name when it is None or not among them.
    """
    wv = judged.workload
    if wv.rejection is not None:
        return Outcome(None, None, NOT_ATTEMPTED)
    chosen: int | None = None
    tier: int | None = None
    grant: Grant | None = None
    tied: list[tuple[int, Grant]] = []
    if judged.objective == "balanced":
        chosen, tier, grant, tied = _balanced(judged, capacities, starts, use)
    else:
        # In selection order of each pool's smallest grant: a pool that gives a larger one ranks
        # where that one's cost puts it, never before, so the first pool whose smallest grant ranks
        # after the best found so far (its name aside: it may tie) ends the search.
        best: tuple[object, ...] | None = None
        for row in judged.order(starts):
            if best is not None and _tie_key(row[:-1]) > _tie_key(best) and larger_ranks_later(judged):
                break
            index = int(row[-1])  # type: ignore[call-overload]
            given = judged.grant_for(index, capacities[index], use)
            if given is None or judged.late(index, starts):
                continue
            key = row[:-1] if given is judged.verdict(index).grant else judged.key_of(index, given, starts)
            if best is not None and _tie_key(key) == _tie_key(best):
                tied.append((index, given))
                if key < best:
                    best, chosen, grant = key, index, given
            elif best is None or key < best:
                best, chosen, tier, grant = key, index, int(row[0]), given  # type: ignore[call-overload]
                tied = [(index, given)]
    if len(tied) > 1:
        tied.sort(key=lambda t: judged.fleet.entries[t[0]].pool.name)
        if prefer is not None:
            chosen, grant = next(((i, g) for i, g in tied if judged.fleet.entries[i].pool.name == prefer), (chosen, grant))
    attempted = wv.burst_mode == "cloud" or (wv.burst_mode == "spill" and (tier is None or tier >= 2))
    if not attempted:
        burst = NOT_ATTEMPTED
    elif tier is not None and tier >= 2:
        burst = BurstVerdict(attempted=True, verdict="allowed")
    else:
        for _, name, i in judged.blocked:
            v = judged.verdict(i)
            if judged.grant_for(i, capacities[i], use) is not None:
                pool = judged.fleet.entries[i].pool
                burst = BurstVerdict(True, "blocked", name, pool.region, v.denials[0])
                return Outcome(chosen, tier, burst, i, grant)
        burst = BurstVerdict(attempted=True, verdict="unavailable")
    return Outcome(chosen, tier, burst, grant=grant, tied=tuple(tied) if len(tied) > 1 else ())


def larger_ranks_later(judged: Judged) -> bool:
    """Whether a pool's larger grants rank at or after its smallest (by cost or carbon per hour,
    or start: they cost more, emit more, start alike); not so by work, where a larger partition
    may do more than its price says."""
    return judged.objective not in WORK_OBJECTIVES


def balanced_scores(rows: Sequence[tuple[float, float]], carbon_weight: float) -> list[float]:
    """Each candidate's balanced score from its (cost, carbon) per hour: each divided by the
    highest among the candidates, carbon weighted by ``carbon_weight``; lower is better."""
    top_cost = max((r[0] for r in rows), default=0.0)
    top_carbon = max((r[1] for r in rows), default=0.0)
    w = carbon_weight
    return [
        round((1 - w) * (cost / top_cost if top_cost else 0.0) + w * (carbon / top_carbon if top_carbon else 0.0), SCORE_DIGITS)
        for cost, carbon in rows
    ]


def _balanced(
    judged: Judged, capacities: Sequence[Capacity], starts: Starts | None, use: QuotaUse = NO_USE
) -> tuple[int | None, int | None, Grant | None, list[tuple[int, Grant]]]:
    """The best tier's pools with room (capacity and quota) that start in time, scored by cost and
    carbon of what each gives, each divided by the highest among them, carbon weighted by
    ``carbon_weight``; then cost, then name. And the pools that tie with the best but for the name."""
    tier: int | None = None
    rows: list[tuple[float, float, str, int, Grant]] = []
    for row in judged.ranked:
        t, index = int(row[0]), int(row[-1])  # type: ignore[call-overload]
        if tier is not None and t != tier:
            break
        entry = judged.fleet.entries[index]
        given = judged.grant_for(index, capacities[index], use)
        if given is not None and not judged.late(index, starts):
            tier = t
            rows.append((grant_cost(entry.price, given), grant_cost(entry.carbon, given), entry.pool.name, index, given))
    if not rows:
        return None, None, None, []
    scores = balanced_scores([(r[0], r[1]) for r in rows], judged.carbon_weight)
    best = min(zip(scores, rows), key=lambda sr: (sr[0], sr[1][0], sr[1][2]))
    tied = [(r[3], r[4]) for s, r in zip(scores, rows) if (s, r[0]) == (best[0], best[1][0])]
    return best[1][3], tier, best[1][4], tied


def pool_verdicts(
    judged: Judged, capacities: Sequence[Capacity], tier: int | None, starts: Starts | None = None, use: QuotaUse = NO_USE
) -> tuple[PoolVerdict, ...]:
    """Every pool's verdict and reasons, as the policy's reference decision words them (its start
    estimate beside them, where it was asked for): eligible first, then by tier, grant cost and
    name."""
    if not judged.judged:
        return ()
    wv = judged.workload
    out = []
    for i, entry in enumerate(judged.fleet.entries):
        v = judged.shapes[entry.key]
        grant, denials = judged.verdict_now(i, capacities[i], use, starts)
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
                None if starts is None else starts.of(pool.name), judged.work_rate(i, grant),
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


def summary(
    judged: Judged, capacities: Sequence[Capacity], workload: Workload, starts: Starts | None = None, use: QuotaUse = NO_USE
) -> tuple[str, str]:
    """(code, message) when no pool is eligible: how many pools each reason stopped, in the
    policy's words (``judged.texts``; a message of a verdict set stored without them is empty: its
    record keeps the message). Counted from the denials per pool, as ``pool_verdicts`` words them,
    without building every verdict. ``no_capacity`` when some pool is stopped by reasons that are
    all ``not_now`` (it could take the workload once capacity or quota frees, or it could start in
    time)."""
    texts = judged.texts
    entries = judged.fleet.entries
    if not entries or not judged.judged:
        return "no_pools", texts.get("no_pools", "")
    static, not_now = judged.static_counts
    counts = dict(static)
    causes: set[str] = set()  # what stops each pool stopped only by not_now reasons
    shapes = judged.shapes
    for i, entry in enumerate(entries):
        v = shapes[entry.key]
        base = not_now[i]
        _, quota_over, short = judged.given(i, capacities[i], use)
        extra = [*quota_over, *(() if quota_over else judged.late(i, starts))]
        if short:
            extra.append(v.shortfall)
        if not extra:
            if base is True:
                causes.add(judged.cause(judged.denials[i]))
            continue
        for r in extra:
            counts[r.code] = counts.get(r.code, 0) + 1
        if (base is None or base) and all(r.kind == "not_now" for r in extra):
            causes.add(judged.cause((*judged.denials[i], *extra)))
    code = "no_capacity" if causes else "no_eligible_pool"
    if not texts:
        return code, ""
    parts = texts["separator"].join(
        fill(texts["reason_on_one"] if n == 1 else texts["reason_on_many"], code=c, count=n) for c, n in sorted(counts.items())
    )
    headline = code
    if causes:
        # As the policy's composer.headline: the text of the one cause every such pool has.
        (one,) = causes if len(causes) == 1 else ("other",)
        headline = HEADLINES.get(one, "no_capacity_other")
    return code, fill(texts.get(headline) or texts[code], workload=workload.name, checked=len(entries), reasons=parts)


def decide_over(
    judged: Judged,
    workload: Workload,
    capacities: Sequence[Capacity],
    tables: Tables,
    provenance: Provenance,
    starts: Starts | None = None,
    use: QuotaUse = NO_USE,
    prefer: str | None = None,
) -> Decision:
    """A Placement on the pool selection chose, or a Rejection saying why there is none.
    ``starts``: the candidates' start estimates and the decision's time (see ``select``); the
    decision carries them, the chosen pool's as its own. ``use``: what the projects hold, for the
    pools' quotas. ``prefer``: the tied pool the node packer chose (see ``select``)."""
    outcome = select(judged, capacities, starts, use, prefer)
    verdicts = LazyVerdicts(lambda: pool_verdicts(judged, capacities, outcome.tier, starts, use))
    wv = judged.workload
    checks = judged.checks
    decided_at = None if starts is None else starts.now
    if wv.rejection is not None:
        return Rejection(workload, wv.rejection.message, wv.rejection.code, verdicts, outcome.burst, provenance, checks=checks, decided_at=decided_at)
    if outcome.chosen is None:
        reason = outcome.burst.reason
        if outcome.burst.verdict == "blocked" and reason is not None:
            return Rejection(workload, reason.message, reason.code, verdicts, outcome.burst, provenance, checks=checks, decided_at=decided_at)
        code, message = summary(judged, capacities, workload, starts, use)
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
        tied=tuple(judged.fleet.entries[i].pool.name for i, _ in outcome.tied),
    )

