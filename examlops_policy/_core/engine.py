"""The engine: OPA's verdicts, kept per policy revision, and the decision core over them.

A shape's verdict is a pure function of (policy revision, workload signature, shape key), so the
engine keeps every verdict OPA gave and asks only for shapes it has none for. Fail closed stays
absolute: every decision first confirms with OPA, in one cheap call, that the server is up and
serves the revision the verdicts were keyed on, and that this revision is the reviewed one. A
verdict is never reused across revisions (the tables are part of the revision).

Everything per decision is then Python over precomputed lists (``selection.Judged``): the first pool
in selection order with room for its grant.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Final, Generic, TypeVar, cast

from examlops_policy.errors import PolicyError
from examlops_policy.model import Capacity, Decision, Grant, JSONObject, JSONValue, Placement, Pool, PoolState, Provenance, Workload
from examlops_policy.tables import Tables
from examlops_policy._core import codec
from examlops_policy._core.quota import NO_USE, QuotaUse, relevant
from examlops_policy._core.request import Request
from examlops_policy._core.selection import Fleet, FleetEntry, Judged, Work, decide_over, priced
from examlops_policy._core.verdicts import About, PolicyEvaluator, ShapeVerdict, Signature, WorkloadVerdict
from examlops_policy._core.waiting import Starts

MAX_VERDICTS: Final = 200_000
MAX_JUDGED: Final = 64
K = TypeVar("K")
V = TypeVar("V")


class _Lru(Generic[K, V]):
    """A bounded mapping that forgets the least recently used entries."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._items: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self._limit:
            self._items.popitem(last=False)


class _Shapes(Mapping[str, JSONObject]):
    """The shapes of the pools a verdict query asks about, by key: each worked out only when the
    policy lacks it (to be uploaded), not for every query."""

    def __init__(self, signature: Signature) -> None:
        self.signature = signature
        self.pools: dict[str, Pool] = {}

    def __getitem__(self, key: str) -> JSONObject:
        return self.signature.shape_of(self.pools[key])

    def __iter__(self) -> Iterator[str]:
        return iter(self.pools)

    def __len__(self) -> int:
        return len(self.pools)

    def __contains__(self, key: object) -> bool:
        return key in self.pools


class RevisionMismatch(PolicyError):
    """OPA serves another policy revision than the one a decision is being made under."""


def same_policy(served: str, reviewed: str) -> bool:
    """Two revisions are the same policy when their content digests (before ``@git:``) are equal."""
    return served.split("@", 1)[0] == reviewed.split("@", 1)[0]


@dataclass
class Prepared:
    """A request judged over a fleet, ready for selection (possibly several times, as capacity
    changes under a write lock): no OPA call is left to make."""

    request: Request
    judged: Judged
    about: About
    revision: str
    opa_version: str
    fresh: bool
    signature_key: str
    workload_signature: JSONObject = field(default_factory=dict)
    # Shared by every Prepared of the same judgement (revision, workload signature, fleet): the
    # verdict set's bytes and key are built once, not per placement.
    memo: dict[str, object] = field(default_factory=dict)

    @property
    def workload(self) -> Workload:
        return self.request.workload

    @cached_property
    def verdict_set(self) -> JSONObject:
        """Every verdict this decision used, as stored once for all decisions that share it."""
        judged = self.judged
        return codec.verdict_set_document(
            self.revision, self.about.signature, self.workload_signature, judged.judged, judged.workload, judged.checks, judged.shapes,
            judged.texts,
        )  # fmt: skip

    @property
    def verdict_set_bytes(self) -> bytes:
        """The verdict set's canonical bytes, as stored."""
        found = self.memo.get("bytes")
        if not isinstance(found, bytes):
            found = self.memo["bytes"] = codec.canonical(self.verdict_set)
        return found

    @property
    def verdict_set_key(self) -> str:
        found = self.memo.get("key")
        if not isinstance(found, str):
            found = self.memo["key"] = "verdicts:" + hashlib.sha256(self.verdict_set_bytes).hexdigest()
        return found

    def decide(
        self,
        capacities: Sequence[Capacity],
        tables: Tables,
        *,
        capacities_digest: str | None = None,
        starts: Starts | None = None,
        quota: QuotaUse = NO_USE,
    ) -> Decision:
        """Selection over ``capacities`` (aligned with the fleet) and what the projects hold
        (``quota``, for the pools' quotas): pure, no OPA. ``capacities_digest``: their
        ``codec.capacity_digest``, when the caller has it already; ``starts``: the candidates'
        start estimates and the decision's time (gathered by the caller, before any lock)."""
        fleet_rev = self.judged.fleet.revision
        held = self.quota_held(quota)
        counted = held.as_json() or None
        provenance = Provenance(
            input_digest=self.request.input_digest(fleet_rev, capacities_digest or codec.capacity_digest(capacities), counted),
            policy_revision=self.revision,
            opa_version=self.opa_version,
            verdicts="fresh" if self.fresh else "reused",
            fleet_revision=fleet_rev,
            quota_use=counted,
        )
        return decide_over(self.judged, self.workload, capacities, tables, provenance, starts, held)

    def tied_grants(self, decision: Placement, capacities: Sequence[Capacity]) -> list[tuple[str, Grant]]:
        """The pools ``decision`` tied with (its own among them, by name) and what each gives with
        ``capacities``, the capacities it was decided on."""
        judged, use = self.judged, QuotaUse.from_json(decision.provenance.quota_use)
        out = []
        for name in decision.tied:
            i = judged.fleet.index[name]
            grant = judged.grant_for(i, capacities[i], use)
            if grant is not None:
                out.append((name, grant))
        return out

    def on_tied(self, decision: Placement, capacities: Sequence[Capacity], tables: Tables, starts: Starts | None, pool: str) -> Decision:
        """``decision`` (decided on ``capacities`` with ``starts``) with ``pool``, a pool it tied
        with, chosen instead: the node packer's choice among them. The same inputs, so the same
        provenance."""
        use = QuotaUse.from_json(decision.provenance.quota_use)
        return decide_over(self.judged, self.workload, capacities, tables, decision.provenance, starts, use, prefer=pool)

    def quota_held(self, quota: QuotaUse) -> QuotaUse:
        """Of what the projects hold, what this judgement's quotas count (what its record keeps)."""
        needs = self.judged.quota_needs
        return NO_USE if needs.empty else relevant(quota, needs)


class Engine:
    """Decisions over a fleet, asking OPA only what it has not answered under the current revision.

    ``reviewed`` is the revision the local policy files have (``None``: accept what the server
    serves, for tests of other servers); a server serving anything else is refused.
    """

    def __init__(self, policy: PolicyEvaluator, tables: Tables, *, reviewed: str | None, reviewed_tables: str | None = None) -> None:
        self.policy = policy
        self.tables = tables
        self.reviewed = reviewed
        # The digest of the reviewed tables (of the same files as ``tables`` and ``reviewed``) that a
        # served policy reporting its tables' digest must report.
        self.reviewed_tables = reviewed_tables
        self._about: dict[str, About] = {}
        self._fleets: dict[tuple[str, str], Fleet] = {}
        self._verdicts: _Lru[tuple[str, str, str], ShapeVerdict] = _Lru(MAX_VERDICTS)
        self._workload_verdicts: _Lru[tuple[str, str], tuple[WorkloadVerdict, bool]] = _Lru(MAX_JUDGED * 16)
        self._judged: _Lru[tuple[str, str, str], tuple[Judged, dict[str, object]]] = _Lru(MAX_JUDGED)
        self.asked = 0  # verdict queries sent to OPA (for benchmarks and tests)

    def confirm(self) -> tuple[str, str]:
        """The revision OPA serves now and its version; PolicyError unless it is the reviewed one."""
        confirmation = self.policy.confirm()
        served = confirmation.revision
        if served is None:
            raise PolicyError(
                f"OPA at {self.policy.describe()} does not report a policy bundle revision"
                + (f" (expected {self.reviewed})" if self.reviewed else "")
                + "; it must serve the reviewed policy as a bundle, so that what it evaluates is what was reviewed"
            )
        if self.reviewed is not None and not same_policy(served, self.reviewed):
            raise RevisionMismatch(
                f"OPA at {self.policy.describe()} serves policy revision {served}, but the reviewed policy is {self.reviewed}; "
                "restart it on the reviewed bundle (exa opa restart, or deploy the bundle from exa policy build)"
            )
        digest = confirmation.tables_digest
        if digest is not None and self.reviewed_tables is not None and digest != self.reviewed_tables:
            raise RevisionMismatch(
                f"OPA at {self.policy.describe()} serves revision {served}, but the tables it evaluates have digest {digest[:19]}..., "
                f"not the reviewed tables' {self.reviewed_tables[:19]}...: its bundle was built from other tables than its revision says; "
                "nothing was placed"
            )
        return served, confirmation.opa_version

    def about(self, revision: str) -> About:
        about = self._about.get(revision)
        if about is None:
            about = self.policy.about()
            if about.revision != revision:
                raise PolicyError(f"OPA at {self.policy.describe()} changed policy revision while answering ({revision} -> {about.revision})")
            self._about[revision] = about
        return about

    def fleet(self, pools: Sequence[Pool], revision: str, about: About, fleet_rev: str | None = None) -> Fleet:
        """The fleet with each pool's shape key under this revision's signature."""
        rows = None
        if fleet_rev is None:
            rows = priced(pools, self.tables)
            fleet_rev = codec.fleet_revision(codec.fleet_document(rows))
        cached = self._fleets.get((fleet_rev, revision))
        if cached is not None:
            return cached
        entries = [
            FleetEntry(pool, codec.content_key(about.signature.shape_of(pool)), price, carbon)
            for pool, price, carbon in (rows if rows is not None else priced(pools, self.tables))
        ]
        fleet = Fleet(fleet_rev, tuple(entries))
        if len(self._fleets) > 8:
            self._fleets.clear()
        self._fleets[(fleet_rev, revision)] = fleet
        return fleet

    def prepare(
        self, request: Request | Workload, pools: Sequence[Pool], *, fleet_rev: str | None = None, confirmed: tuple[str, str] | None = None
    ) -> Prepared:
        """Confirm the revision, then judge the request over ``pools``, asking OPA only for shapes
        it has no verdict for under this revision. ``confirmed``: the revision and OPA version a
        caller deciding many requests under one snapshot of the policy confirmed already (a replay
        confirms once before and once after)."""
        if not isinstance(request, Request):
            request = Request(request)
        revision, opa_version = confirmed if confirmed is not None else self.confirm()
        about = self.about(revision)
        fleet = self.fleet(pools, revision, about, fleet_rev)
        wsig, wkey = request.signed(about.signature)
        found = self._judged.get((revision, wkey, fleet.revision))
        fresh = False
        if found is None:
            judged, fresh = self._judge(revision, about, wsig, wkey, fleet)
            found = (judged, {})
            self._judged.put((revision, wkey, fleet.revision), found)
        return Prepared(request, found[0], about, revision, opa_version, fresh, wkey, wsig, found[1])

    def _judge(self, revision: str, about: About, wsig: JSONObject, wkey: str, fleet: Fleet) -> tuple[Judged, bool]:
        shapes: dict[str, ShapeVerdict] = {}
        wanted = _Shapes(about.signature)
        for entry in fleet.entries:
            if entry.key in shapes or entry.key in wanted:
                continue
            known = self._verdicts.get((revision, wkey, entry.key))
            if known is None:
                wanted.pools[entry.key] = entry.pool
            else:
                shapes[entry.key] = known
        cached = self._workload_verdicts.get((revision, wkey))
        fresh = bool(wanted) or cached is None
        if fresh:
            self.asked += 1
            answer = self.policy.verdicts(wsig, sorted(wanted), wanted)
            if answer.confirm_revision is not None and not same_policy(answer.confirm_revision, revision):
                raise PolicyError(f"OPA at {self.policy.describe()} changed policy revision while answering ({revision} -> {answer.confirm_revision})")
            cached = (answer.workload, answer.judged)
            self._workload_verdicts.put((revision, wkey), cached)
            if answer.judged:
                for key, verdict in answer.shapes.items():
                    self._verdicts.put((revision, wkey, key), verdict)
                    shapes[key] = verdict
                lacking = set(wanted) - set(answer.shapes)
                if lacking:
                    raise PolicyError(f"OPA at {self.policy.describe()} gave no verdict for {len(lacking)} shape(s); nothing was placed")
        assert cached is not None
        workload_verdict, judged = cached
        return (
            Judged(
                fleet, shapes if judged else {}, workload_verdict, judged=judged, checks=about.explained, texts=about.texts,
                objective=str(wsig.get("optimize", "cost")), carbon_weight=float(wsig.get("carbon_weight", 0.5)),  # type: ignore[arg-type]
                work=Work.of(wsig, self.tables),
            ),
            fresh,
        )  # fmt: skip

    def decide(self, workload: Request | Workload, states: Sequence[PoolState], *, fleet_rev: str | None = None) -> Decision:
        """A decision over ``states`` (their capacity as given), recording nothing."""
        ordered = sorted(states, key=lambda s: s.pool.name)
        prepared = self.prepare(workload, [s.pool for s in ordered], fleet_rev=fleet_rev)
        return prepared.decide([s.capacity for s in ordered], self.tables)


def reference_input(
    workload: Request | Workload,
    fleet: Fleet,
    capacities: Sequence[Capacity],
    about: About,
    starts: Starts | None = None,
    quota_use: JSONObject | None = None,
) -> JSONObject:
    """The input of the policy's complete reference rule (``decision``): the workload, every shape
    inline, every pool with its shape key, price, capacity and start estimate (where ``starts``
    has one), the decision's time, and what the projects hold (``quota_use``, when anything)."""
    shapes: dict[str, JSONValue] = {}
    pools: list[JSONValue] = []
    for entry, capacity in zip(fleet.entries, capacities):
        shapes[entry.key] = about.signature.shape_of(entry.pool)
        pools.append(
            {
                "name": entry.pool.name,
                "shape": entry.key,
                "cost_per_hour": entry.price,
                "carbon_per_hour": entry.carbon,
                **({"model": entry.pool.model} if entry.pool.model is not None else {}),
                "capacity": capacity_input(capacity, None if entry.pool.node_tracked else entry.pool.count),
                **({"estimate": starts.policy_input(entry.pool.name)} if starts is not None and starts.of(entry.pool.name) else {}),
            }
        )
    request = workload if isinstance(workload, Request) else Request(workload)
    out: JSONObject = {"workload": request.input, "shapes": shapes, "pools": pools}
    if starts is not None:
        out["now"] = starts.now_s
    if quota_use:
        out["quota_use"] = quota_use
    return out


def capacity_input(capacity: Capacity, devices: int | None = None) -> JSONObject:
    """A pool's capacity as the policy's capacity check reads it (rows of a node-tracked pool as
    objects); ``devices``: all the devices (or fixed slices) of a pool counted as one node, whatever
    is held (what it could ever hold on that node; None for a pool of nodes)."""
    out: JSONObject = {"whole": capacity.whole, "slices": dict(capacity.slices)}
    if devices is not None:
        out["devices"] = devices
    if capacity.nodes is not None:
        out["nodes"] = [
            {
                "whole": r.whole, "cpu": r.cpu, "memory": r.memory, "shares": r.shares, "slices": dict(r.slices),
                "block": r.block, "switch": r.switch, "count": r.count,
            }  # fmt: skip
            for r in capacity.nodes
        ]
    return out


def differences(decision: Decision, reference: Mapping[str, object]) -> list[str]:
    """What the policy's reference decision says differently from ``decision``: the outcome, the
    pool, the burst verdict, the reason of a rejection and every pool's reasons."""
    out = []
    # A queued decision is the policy's rejection for capacity (no_capacity) that waited.
    ours = "rejected" if decision.outcome == "queued" else decision.outcome
    if reference.get("outcome") != ours:
        out.append(f"outcome: {ours} here, {_said(reference.get('outcome'), 'no outcome')} by the policy")
    pool = getattr(decision, "pool", None)
    # Among the pools that tie (the policy names them, the first by name its pool), the node packer
    # chooses: the pool must be one of them, and the pools tied the same.
    tied = [str(n) for n in cast("list[object]", reference.get("tied") or [])]
    if reference.get("pool") != pool and pool not in tied:
        out.append(f"pool: {_said(pool, 'no pool')} here, {_said(reference.get('pool'), 'no pool')} by the policy")
    ours_tied = list(getattr(decision, "tied", ()) or ([pool] if pool is not None else []))
    if pool is not None and ours_tied != (tied or [str(reference.get("pool"))]):
        out.append(f"tied pools: {', '.join(ours_tied)} here, {', '.join(tied) or 'none'} by the policy")
    note = getattr(decision, "note", None)
    if pool is not None and pool == reference.get("pool") and reference.get("note") != note:
        out.append(f"note: {_said(note, 'no note', quoted=True)} here, {_said(reference.get('note'), 'no note', quoted=True)} by the policy")
    burst = cast(Mapping[str, object], reference.get("burst") or {})
    if bool(burst.get("attempted")) != decision.burst.attempted or (
        decision.burst.attempted and (burst.get("verdict") != decision.burst.verdict or burst.get("pool") != decision.burst.pool)
    ):
        out.append(f"burst: {decision.burst.verdict or 'not attempted'} here, {burst.get('verdict') or 'not attempted'} by the policy")
    reason = cast("Mapping[str, object] | None", reference.get("reason"))
    code = getattr(decision, "code", None)
    if reason is not None and (reason.get("code") != code or reason.get("message") != getattr(decision, "reason", None)):
        out.append(f"reason: {_said(code, 'no reason')} here, {_said(reason.get('code'), 'no reason')} by the policy ({reason.get('message')})")
    pools = cast(Mapping[str, Mapping[str, object]], reference.get("verdicts") or {})
    ours_by_pool = {v.pool: v for v in decision.verdicts}
    for name in sorted(set(pools) | set(ours_by_pool)):
        theirs = [cast(Mapping[str, object], r)["code"] for r in cast(list[object], pools.get(name, {}).get("reasons", []))]
        mine = [r.code for r in ours_by_pool[name].reasons] if name in ours_by_pool else None
        if mine != theirs:
            here = "not judged" if mine is None else _codes(mine)
            there = "not judged" if name not in pools else _codes(theirs)
            out.append(f"pool {name}: {here} here, {there} by the policy")
    return out


def _said(value: object, missing: str, *, quoted: bool = False) -> str:
    """A value of a decision as a line of ``differences`` says it: ``missing`` for none, text
    (in quotes with ``quoted``), never a Python object."""
    if value is None:
        return missing
    return f'"{value}"' if quoted else str(value)


def _codes(codes: Sequence[object]) -> str:
    """``reasons spot_not_accepted, capacity_exhausted`` or ``no reasons``."""
    return f"reason{'s' if len(codes) > 1 else ''} {', '.join(map(str, codes))}" if codes else "no reasons"
