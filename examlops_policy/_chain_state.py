"""What the audit chain says the state is, and every table held to it (``exa audit verify``).

The chain proves its own entries (``audit.verify_chain``) and, through each decision's record
digest, the stored records (``audit.verify_records``). The tables beside it are what placements,
releases and capacity are read from, so they are held to the chain too: ``replay`` rebuilds, from
the entries alone, the pools (their spec and what their scheduler holds outside this layer), every
decision with its burst attempt, devices, release, lease and job; ``compare`` then names each
difference with the tables as stored, and each row no entry accounts for:

    decisions       every column an entry (or the record it vouches for) states: workload,
                    outcome, pool, accelerator, model, target, region, devices, fallback,
                    fraction_honored, the rejection's note, digests and revisions, request id,
                    residency, fraction, price and carbon, created/released times (and their epoch
                    seconds), lease end (and its epoch seconds), a larger partition, job id,
                    scheduler, job uid, job state, when it was submitted; the chosen pool's start
                    estimate and its source as its record says (``audit.verify_records``); the
                    project, priority class and queued record it was decided for, when its job
                    started and ended (reconcile), when a node it holds went down, the queued
                    record a preemption takes it for, the preempted grant whose workload it
                    places again
    queue           each queued record: what it asks, its state (queued, admitted, cancelled,
                    failed), the placement that admitted it, when its wait ended and why, its
                    submission attempts; the workload it keeps as its queued decision's record
                    says, its submission as the digest its queued entry holds
    allocations     one per placement: its pool, devices, times and release
    holdings        the devices (and slices) each placement holds, as its entry lists them (node by
                    node, with the shares of a shared device, as its allocations say; a holding an
                    upgrade mapped to its node, as the ``holding`` entry that moved it says)
    node_grants     each node of a node-by-node grant: its place, CPU and memory, as its entry says
    burst_events    one per burst attempt: workload, residency, pool, region, verdict, reason
    verdict_sets    the verdict set (and fleets) each compact record was judged on: stored
    node_usage      what a scheduler reported busy on each node of a pool, as its last
                    ``node_usage`` entry says
    pools           spec and count as the last pool entry, held_outside as the last capacity
                    entry (a pool registered again under a removed pool's name starts from none);
                    removed_at and removing_since as the pool entries that removed it or asked
                    for its removal say; free and the capacity summary as the live holdings give
                    them (a pool counted node by node: as the live holdings, node grants and node
                    usage of it and of the pools sharing its nodes give them)
    capacity_log    what every pool could place at the state version each decision was decided
                    at (a record of version 3 names that version, not the capacities): what the
                    log gives back for it must hash to the input digest of the record its audit
                    entry vouches for, as when the decision is read; a pool's latest entry must be
                    its capacity in pools, at or before its version there (a removal, or one
                    asked for, moves the version without changing the capacity), and no entry may
                    lie beyond the state's
                    version. (An entry no decision was decided at, and not a pool's latest, is read
                    by nothing and so not compared.)

Fields an older entry does not carry are not compared (entries before this version did not hold
the rows' own times). A chain that does not verify on its own (an entry edited, deleted, inserted,
reordered, damaged, or the log cut short) describes no state: its problems are reported alone.
Pure: the rows come from the store's ``audited_read`` (``store.api.AuditedRead``), one consistent
read, the log and the decisions as they stream by (``Replay``, ``Comparison.decision``), the
smaller tables whole (``store.api.AuditedState``). Kept of a decision: its decision entry's bytes
(parsed again when its rows are compared), its id, and what its input digest covers.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final, cast

from examlops_policy import specs
from examlops_policy.audit import AuditRow, Problem, VerifyReport
from examlops_policy.errors import ExaError, StateError
from examlops_policy.model import Holding, Pool
from examlops_policy.store.api import AUDITED, AuditedState, HeldRow, NodeGrantRow, NodeUsageRow
from examlops_policy._core import codec, recount
from examlops_policy._core.packing import PoolLayout
from examlops_policy._core.state import sharing_of

DECISION_COLUMNS: Final = AUDITED["decisions"][0]
ALLOCATION_COLUMNS: Final = AUDITED["allocations"][0]
HOLDING_COLUMNS: Final = AUDITED["holdings"][0]
NODE_GRANT_COLUMNS: Final = AUDITED["node_grants"][0]
NODE_USAGE_COLUMNS: Final = AUDITED["node_usage"][0]
BURST_COLUMNS: Final = AUDITED["burst_events"][0]
POOL_COLUMNS: Final = AUDITED["pools"][0]
QUEUE_COLUMNS: Final = AUDITED["queue"][0]
# The decision columns an entry states by the same name.
_ENTRY_FIELDS: Final = (
    "workload", "outcome", "pool", "accelerator", "region", "devices", "fallback", "fraction_honored", "input_digest",
    "policy_revision", "opa_version", "verdicts", "record_digest", "request_id", "created_at", "larger_partition",
)  # fmt: skip
Row = Mapping[str, object]
# The record versions that name the state version they were decided at (3; 4 with start estimates).
_DECIDED_AT: Final = (3, 4)


# What a pool's capacity summary (JSON) and its free devices are, for what its live grants hold
# and what its scheduler holds outside this layer; for a pool counted node by node, also what the
# live grants hold of its nodes' CPU and memory, what schedulers report busy there, and the pools
# whose devices on its nodes are its own (``held``, ``grants`` and ``usage`` then include the rows
# of the pools sharing its nodes) and those whose same devices there are shared another way:
# and the states other pools give its nodes where less available (``Sharing.states``):
# (pool, held, held outside, grants, usage, same devices, other modes, states) -> (summary, free).
# None: summaries are not compared.
Summary = Callable[
    [Pool, Sequence[HeldRow], float, Sequence[NodeGrantRow], Sequence[NodeUsageRow], frozenset[str] | None, frozenset[str], Mapping[str, str]],
    tuple[object, float],
]


@dataclass
class _Decision:
    seq: int
    raw: bytes  # its decision entry's canonical bytes, parsed when compared (``entry``): a fraction of its parse's memory
    burst: tuple[int, dict[str, object]] | None = None
    released: tuple[int, dict[str, object]] | None = None
    lease: tuple[int, object] | None = None
    job: tuple[int, dict[str, object]] | None = None
    job_state: tuple[int, object] | None = None
    moves: list[tuple[int, dict[str, object]]] = field(default_factory=list)  # holdings mapped to their nodes
    # What reconcile and preemption recorded of it: (entry, value), the latest entry's.
    job_started: tuple[int, object] | None = None
    job_ended: tuple[int, object] | None = None
    node_down: tuple[int, object] | None = None
    preempting: tuple[int, object] | None = None

    def entry(self) -> dict[str, object]:
        parsed = json.loads(self.raw)
        return parsed if isinstance(parsed, dict) else {}


@dataclass
class _Queued:
    """A queued record as its entries say: queued, then admitted, cancelled or failed; submissions
    tried again."""

    seq: int
    entry: dict[str, object]
    state: str = "queued"
    ended: tuple[int, dict[str, object]] | None = None  # the entry that ended its wait
    attempts: tuple[int, dict[str, object]] | None = None  # the last submit_retry entry


@dataclass
class _Pool:
    seq: int
    spec: dict[str, object]
    held_outside: tuple[int, float] = (0, 0.0)
    # (entry, its time or None when the entry predates carrying it): when it left the fleet, and
    # since when it is to go once its last live grant ends.
    removed: tuple[int, object] | None = None
    removing: tuple[int, object] | None = None
    node_usage: tuple[int, dict[str, object]] | None = None  # the last node_usage entry


@dataclass
class ChainState:
    """The state the entries describe (``replay``)."""

    decisions: dict[str, _Decision] = field(default_factory=dict)
    pools: dict[str, _Pool] = field(default_factory=dict)
    stray: list[tuple[int, str]] = field(default_factory=list)  # entries about decisions not in the chain
    queue: dict[str, _Queued] = field(default_factory=dict)
    # The first decision entry of an id that a later decision entry states again (``decisions``
    # holds the last): its record is held to the first, as reading it back does.
    first: dict[str, _Decision] = field(default_factory=dict)

    def said(self, ident: str) -> _Decision | None:
        """The first decision entry of ``ident``."""
        return self.first.get(ident) or self.decisions.get(ident)


class Replay:
    """The state the entries describe (``ChainState``), applied one at a time in seq order
    (``add``) as the log is read, and settled by ``done``."""

    def __init__(self) -> None:
        self.state = ChainState()

    def add(self, seq: int, entry: dict[str, object], raw: bytes) -> None:
        """An entry (parsed) and its canonical bytes."""
        _replay(self.state, seq, entry, raw)

    def done(self) -> ChainState:
        state = self.state
        for ident, decision in list(state.decisions.items()):
            if decision.seq == 0 and decision.burst is not None:  # a burst entry whose decision entry is gone
                state.stray.append((decision.burst[0], ident))
                del state.decisions[ident]
        return state


def _replay(state: ChainState, seq: int, entry: dict[str, object], raw: bytes) -> None:
    """One entry applied to ``state``."""
    kind = entry.get("kind")
    if kind == "pool":
        _replay_pool(state, seq, entry)
        return
    if kind == "node_usage":
        pool = state.pools.get(str(entry.get("pool")))
        if pool is not None:
            pool.node_usage = (seq, entry)
        return
    if kind == "capacity":
        pool = state.pools.get(str(entry.get("pool")))
        if pool is not None and isinstance(entry.get("held_outside"), (int, float)):
            pool.held_outside = (seq, float(cast(float, entry["held_outside"])))
        return
    if kind in _QUEUE_KINDS:
        _replay_queue(state, seq, str(kind), entry)
        return
    if kind == "node":  # a node that went down flags the grants on it; back up, they are cleared
        down = entry.get("state") == "down"
        grants = entry.get("grants")
        for g in grants if isinstance(grants, list) else []:
            flagged = state.decisions.get(str(g))
            if flagged is not None and "at" in entry:
                flagged.node_down = (seq, entry["at"] if down else None)
        return
    ident = entry.get("decision_id")
    if not isinstance(ident, str):
        return
    if kind == "decision":
        earlier = state.decisions.get(ident)  # its burst entry comes first, in the same transaction
        if earlier is not None and earlier.seq != 0 and ident not in state.first:
            state.first[ident] = earlier  # stated twice: its record is held to the first
        state.decisions[ident] = _Decision(seq, raw, burst=earlier.burst if earlier is not None else None)
        return
    decision = state.decisions.get(ident)
    if decision is None:
        if kind == "burst":
            # A burst entry precedes its decision's entry in the same transaction.
            state.decisions[ident] = _Decision(0, b"{}", burst=(seq, entry))
        else:
            state.stray.append((seq, ident))
        return
    if kind == "burst":
        decision.burst = (seq, entry)
    elif kind in ("release", "expired", "preempted", "job_ended"):
        # What a release is compared by: when (entries before times were recorded have none).
        decision.released = (seq, {"released_at": entry["released_at"]} if "released_at" in entry else {})
        if kind == "job_ended":  # reconcile: its job ended, with its state and times
            decision.job_state = (seq, entry.get("state"))
            decision.job_ended = (seq, entry.get("ended_at"))
            if "job_started_at" in entry:
                decision.job_started = (seq, entry["job_started_at"])
    elif kind == "job_started":
        decision.job_started = (seq, entry.get("started_at"))
    elif kind == "preempt_dropped":
        decision.preempting = (seq, None)
    elif kind == "renew":
        decision.lease = (seq, entry.get("lease_expires_at"))
    elif kind == "submit":
        decision.job = (seq, entry)
        decision.job_state = (seq, None)
    elif kind == "job":
        decision.job_state = (seq, entry.get("state"))
    elif kind == "holding":
        decision.moves.append((seq, entry))


_QUEUE_KINDS: Final = frozenset({"queued", "admit", "cancel", "queue_failed", "submit_retry", "preempt"})


def _replay_queue(state: ChainState, seq: int, kind: str, entry: dict[str, object]) -> None:
    """An entry of the queue: a workload queued (its decision's id), admitted, cancelled, failed,
    its submission tried again; a preemption marking the grants it takes."""
    if kind == "queued":
        ident = entry.get("decision_id")
        if isinstance(ident, str):
            state.queue[ident] = _Queued(seq, entry)
        return
    if kind == "preempt":
        victims = entry.get("victims")
        for victim in victims if isinstance(victims, list) else []:
            marked = state.decisions.get(str(victim))
            if marked is not None:
                marked.preempting = (seq, entry.get("queued_id"))
        return
    queued = state.queue.get(str(entry.get("queued_id")))
    if queued is None:
        return  # a queue entry whose queued record has no entry: the rows' comparison names it
    if kind == "submit_retry":
        queued.attempts = (seq, entry)
    else:
        queued.state = {"admit": "admitted", "cancel": "cancelled", "queue_failed": "failed"}[kind]
        queued.ended = (seq, entry)


def _replay_pool(state: ChainState, seq: int, entry: dict[str, object]) -> None:
    """A pool entry: registered or changed (its spec), drained or undrained (its spec, and a
    removal cancelled), removed, or its removal asked for (its name)."""
    spec, action = entry.get("pool"), entry.get("action")
    if isinstance(spec, dict) and isinstance(spec.get("name"), str):
        old = state.pools.get(spec["name"])
        if old is None or action == "added":  # new, or registered again after its removal
            # (What a scheduler reported busy on its nodes stays: registering does not touch it.)
            state.pools[spec["name"]] = _Pool(seq, spec, node_usage=old.node_usage if old is not None else None)
            return
        old.seq, old.spec = seq, spec
        if entry.get("removal_cancelled"):
            old.removing = None
        return
    pool = state.pools.get(spec) if isinstance(spec, str) else None
    if pool is None:
        return
    if action == "removed":
        pool.removed, pool.removing = (seq, entry.get("removed_at")), None
    elif action == "removal_pending":
        pool.removing = (seq, entry.get("removing_since"))


def entry_of(row: AuditRow) -> dict[str, object] | None:
    """A row's entry, when its bytes are a JSON object (the chain walk reports the rest)."""
    try:
        entry = json.loads(row.canonical)
    except (ValueError, UnicodeDecodeError):
        return None
    return entry if isinstance(entry, dict) else None


def _number(a: object, b: object) -> bool:
    if a is None or b is None:
        return a is None and b is None
    try:
        x, y = float(cast(float, a)), float(cast(float, b))
    except (TypeError, ValueError):
        return False
    return abs(x - y) <= 1e-9 * max(1.0, abs(x), abs(y))


def _same(a: object, b: object) -> bool:
    """Values as a table and an entry hold them: numbers by value, booleans as 0/1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return (None if a is None else int(cast(int, a))) == (None if b is None else int(cast(int, b)))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return _number(a, b)
    return a == b


def _epoch(ts: object) -> float | None:
    if not isinstance(ts, str):
        return None
    try:
        return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _shown(value: object) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


class _Report:
    def __init__(self) -> None:
        self.found: list[Problem] = []

    def add(self, seq: int, message: str) -> None:
        self.found.append(Problem(seq, "state", message))

    def differs(self, table: str, column: str, key: str, actual: object, expected: object, seq: int, *, number: bool = False) -> None:
        if actual == expected:  # the common case, decided at once (True == 1 and 2 == 2.0 included)
            return
        same = _number(actual, expected) if number else _same(actual, expected)
        if not same:
            self.add(seq, f"{table}.{column} of {key} is {_shown(actual)}, the audit log (entry {seq}) says {_shown(expected)}")


class _Fleets:
    """The stored fleet documents, each parsed once when first asked for: its pools' specs by
    name, and their names in fleet order (None: no such fleet is stored, or it is malformed)."""

    def __init__(self, documents: Iterable[tuple[str, str]]) -> None:
        self._text = {k: v for k, v in documents if k.startswith("fleet:")}
        self._parsed: dict[str, tuple[dict[str, dict[str, object]], tuple[str, ...]] | None] = {}

    def _get(self, revision: object) -> tuple[dict[str, dict[str, object]], tuple[str, ...]] | None:
        if not isinstance(revision, str):
            return None
        if revision not in self._parsed:
            found = None
            try:
                doc = json.loads(self._text[revision])
                specs = [item["pool"] for item in doc["pools"]]
                found = ({str(p["name"]): p for p in specs}, tuple(str(p["name"]) for p in specs))
            except (ValueError, TypeError, KeyError):
                pass
            self._parsed[revision] = found
        return self._parsed[revision]

    def pool(self, revision: object, name: object) -> dict[str, object] | None:
        found = self._get(revision)
        return None if found is None or not isinstance(name, str) else found[0].get(name)

    def names(self, revision: object) -> tuple[str, ...] | None:
        found = self._get(revision)
        return None if found is None else found[1]


class Comparison:
    """Every difference between the tables and the state the chain describes (see the module
    docstring), the decisions table read as it streams by (``decision``, in any order), the other
    tables from ``state``; ``found`` gives them in the order of the chain's entries. ``chain_lost``:
    entries are missing from the chain, so rows without an entry are not reported again (the
    chain's problem explains them). ``summary``: how a pool's capacity summary and free devices
    follow from its live holdings (None: not compared). What it keeps of a decision, once compared,
    is its id, and for the capacity log what its input digest covers (``codec.input_digest_rest``)."""

    def __init__(self, chain: ChainState, state: AuditedState, *, chain_lost: bool, summary: Summary | None = None) -> None:
        self.chain, self.state, self.chain_lost, self.summary = chain, state, chain_lost, summary
        self.fleets = _Fleets(state.documents)
        self.stored = {key for key, _ in state.documents}
        rows = state.tables
        self.allocations = {str(r[0]): r for r in rows["allocations"]}
        self.holdings: dict[str, list[tuple[object, ...]]] = {}
        for r in rows["holdings"]:
            self.holdings.setdefault(str(r[0]), []).append(r)
        self.grants: dict[str, list[tuple[object, ...]]] = {}
        for r in rows["node_grants"]:
            self.grants.setdefault(str(r[0]), []).append(r)
        self.bursts: dict[str, list[tuple[object, ...]]] = {}
        for r in rows["burst_events"]:
            self.bursts.setdefault(str(r[2]), []).append(r)
        self.released: set[str] = set()  # decisions whose row says they were released
        self.seen: set[str] = set()
        self.by_decision: list[tuple[int, list[Problem]]] = []  # (its entry, what its rows showed)
        # (state version, entry, id, fleet, what its input digest covers but the capacities, the
        # input digest its provenance states or None) of records that name their state version
        self.decided: list[tuple[int, int, str, object, bytes, object]] = []
        self._rests: dict[bytes, bytes] = {}  # one copy of each (workloads repeat)
        self.queued: dict[str, dict[str, object]] = {}  # the records of queued decisions, that hash to their entries

    def decision(self, r: tuple[object, ...], entry: dict[str, object] | None, verified: dict[str, object] | None) -> None:
        """A row of the decisions table; ``entry``: its last decision entry, parsed (None: the
        chain has none); ``verified``: its record when it hashes to its (first) entry."""
        row = dict(zip(DECISION_COLUMNS, r))
        ident = str(r[0])
        if row.get("released_at") is not None:
            self.released.add(ident)
        d = self.chain.decisions.get(ident)
        if d is None or entry is None:
            return
        self.seen.add(ident)
        out = _Report()
        record = verified if verified is not None and codec.is_compact(verified) else None
        _compare_decision(out, ident, d, entry, row, record, self.fleets)
        _compare_documents(out, ident, d.seq, record, self.stored)
        if record is not None and record.get("outcome") == "queued":
            self.queued[ident] = record
        if record is not None and record.get("v") in _DECIDED_AT:
            at = record.get("at")
            if isinstance(at, int) and not isinstance(at, bool):
                rest = codec.input_digest_rest(record)
                provenance = record.get("provenance")
                claimed = provenance.get("input_digest") if isinstance(provenance, dict) else None
                self.decided.append((at, d.seq, ident, record.get("fleet"), self._rests.setdefault(rest, rest), claimed))
        alloc = self.allocations.pop(ident, None)
        _compare_allocation(out, ident, d, entry, row, None if alloc is None else dict(zip(ALLOCATION_COLUMNS, alloc)))
        held = self.holdings.pop(ident, None)
        _compare_holdings(out, ident, d, entry, row, None if held is None else [dict(zip(HOLDING_COLUMNS, h)) for h in held])
        granted = self.grants.pop(ident, None)
        _compare_node_grants(out, ident, d, entry, None if granted is None else [dict(zip(NODE_GRANT_COLUMNS, g)) for g in granted])
        burst = self.bursts.pop(ident, None)
        _compare_bursts(out, ident, d, row, None if burst is None else [dict(zip(BURST_COLUMNS, b)) for b in burst])
        if out.found:
            self.by_decision.append((d.seq, out.found))

    def found(self, capacity_log: Iterable[tuple[object, ...]], layout: Callable[[Pool], PoolLayout] | None = None) -> list[Problem]:
        """Every difference, once every decision row went by; ``capacity_log``: its rows (version,
        pool, capacity) in version order, read once. With ``layout`` (a pool's packing rules),
        what the nodes hold too (``node_problems``), last."""
        out, chain, state, chain_lost = _Report(), self.chain, self.state, self.chain_lost
        for seq, ident in chain.stray:
            if not chain_lost:
                out.add(seq, f"audit entry {seq} speaks of decision {ident[:12]}, which no decision entry records")
        for ident, d in chain.decisions.items():
            if ident not in self.seen:
                gone = Problem(d.seq, "state", f"decision {ident[:12]} is in the audit log (entry {d.seq}) but not in the decisions table: its row was deleted")
                self.by_decision.append((d.seq, [gone]))
        self.by_decision.sort(key=lambda sp: sp[0])
        for _, problems in self.by_decision:
            out.found.extend(problems)
        if not chain_lost:
            for ident in sorted(self.allocations):
                out.add(0, f"allocations has a row for decision {ident[:12]}, which no placement entry in the audit log accounts for")
            for ident, rows in sorted(self.holdings.items()):
                out.add(0, f"holdings has {len(rows)} row(s) for decision {ident[:12]}, which no placement entry in the audit log accounts for")
            for ident, rows in sorted(self.grants.items()):
                out.add(0, f"node_grants has {len(rows)} row(s) for decision {ident[:12]}, which no placement entry in the audit log accounts for")
            for ident, rows in sorted(self.bursts.items()):
                out.add(0, f"burst_events has {len(rows)} row(s) for decision {ident[:12]}, which no burst entry in the audit log accounts for")
        # A holding is live while its allocation is (the release sets both; compared above):
        # ``released``, the decisions whose row says they were released.
        live = _live_holdings(state, self.released)
        _compare_pools(out, chain, state, self.released, live, self.summary, chain_lost=chain_lost)
        _compare_node_usage(out, chain, state, chain_lost=chain_lost)
        _compare_queue(out, chain, state, self.queued, chain_lost=chain_lost)
        _compare_capacity_log(out, state, capacity_log, self.decided, self.fleets)
        if layout is not None:
            out.found.extend(node_problems(chain, state, self.released, live, layout))
        return out.found


def _compare_decision(
    out: _Report, ident: str, d: _Decision, e: Mapping[str, object], row: Row, record: dict[str, object] | None,
    fleets: _Fleets,
) -> None:  # fmt: skip
    key, seq = ident[:12], d.seq
    for name in _ENTRY_FIELDS:
        if name in e:
            out.differs("decisions", name, key, row.get(name), e[name], seq)
    placed = e.get("outcome") == "placed"
    if "reason" in e and not placed:
        out.differs("decisions", "note", key, row.get("note"), e["reason"], seq)
    if "created_at" in e:
        out.differs("decisions", "created_ts", key, row.get("created_ts"), _epoch(e["created_at"]), seq, number=True)
    if "lease_expires_at" in e or d.lease is not None:
        lease_seq, lease = d.lease if d.lease is not None else (seq, e.get("lease_expires_at"))
        out.differs("decisions", "lease_expires_at", key, row.get("lease_expires_at"), lease, lease_seq)
        out.differs("decisions", "lease_expires_ts", key, row.get("lease_expires_ts"), _epoch(lease), lease_seq, number=True)
    if d.released is None:
        if row.get("released_at") is not None or row.get("released_ts") is not None:
            out.add(seq, f"decisions.released_at of {key} is {_shown(row.get('released_at'))}, but the audit log records no release of it")
    else:
        rseq, rentry = d.released
        if row.get("released_at") is None:
            out.add(rseq, f"decisions.released_at of {key} is null, but the audit log (entry {rseq}) records its release")
        elif "released_at" in rentry:
            out.differs("decisions", "released_at", key, row.get("released_at"), rentry["released_at"], rseq)
            out.differs("decisions", "released_ts", key, row.get("released_ts"), _epoch(rentry["released_at"]), rseq, number=True)
    if d.job is None:
        for name in ("job_id", "submitted_at"):
            if row.get(name) is not None:
                out.add(seq, f"decisions.{name} of {key} is {_shown(row.get(name))}, but the audit log records no submission of it")
    else:
        jseq, job = d.job
        for name in ("job_id", "scheduler", "job_uid"):
            if name in job or name == "job_uid":
                out.differs("decisions", name, key, row.get(name), job.get(name), jseq)
        if "submitted_at" in job:
            out.differs("decisions", "submitted_at", key, row.get("submitted_at"), job["submitted_at"], jseq)
    if d.job_state is not None:
        out.differs("decisions", "job_state", key, row.get("job_state"), d.job_state[1], d.job_state[0])
    elif row.get("job_state") is not None:
        out.add(seq, f"decisions.job_state of {key} is {_shown(row.get('job_state'))}, but the audit log records no job state for it")
    if "project" in e:  # entries that state the queue's columns
        for name in ("project", "priority", "queued_id"):
            out.differs("decisions", name, key, row.get(name), e.get(name), seq)
    # The preempted grant it places again (entries state it only when there is one).
    out.differs("decisions", "replaces", key, row.get("replaces"), e.get("replaces"), seq)
    for name, said in (("job_started_at", d.job_started), ("job_ended_at", d.job_ended), ("node_down_at", d.node_down),
                       ("preempting_for", d.preempting)):  # fmt: skip
        if said is not None:
            out.differs("decisions", name, key, row.get(name), said[1], said[0])
        elif row.get(name) is not None:
            out.add(seq, f"decisions.{name} of {key} is {_shown(row.get(name))}, but the audit log records none for it")
    if record is None:
        return
    workload = record.get("workload") if isinstance(record.get("workload"), dict) else {}
    assert isinstance(workload, dict)
    for column, value in (("residency", workload.get("residency")), ("fraction", workload.get("fraction")),
                          ("fleet_revision", record.get("fleet")), ("verdict_set", record.get("verdicts"))):  # fmt: skip
        out.differs("decisions", column, key, row.get(column), value, seq)
    if placed:
        spec = fleets.pool(record.get("fleet"), record.get("pool"))
        if spec is not None:
            for column in ("model", "target"):
                out.differs("decisions", column, key, row.get(column), spec.get(column), seq)


def _compare_documents(out: _Report, ident: str, seq: int, record: Mapping[str, object] | None, stored: set[str]) -> None:
    """The verdict set (and fleet) a compact record was judged on must be stored: the decision is
    read back from them. (The fleet of a record that names its state version is held to the
    capacity log, which names it when it is gone.)"""
    if record is None:
        return
    wanted = [("verdict set", record.get("verdicts"))]
    if record.get("v") not in _DECIDED_AT:
        wanted.append(("fleet", record.get("fleet")))
    for what, key in wanted:
        if isinstance(key, str) and key not in stored:
            out.add(seq, f"the {what} {key[:24]}... that decision {ident[:12]} (entry {seq}) was judged on is not stored: its row was deleted")


def _compare_allocation(out: _Report, ident: str, d: _Decision, e: Mapping[str, object], row: Row, alloc: Row | None) -> None:
    key, seq = ident[:12], d.seq
    if e.get("outcome") != "placed":
        if alloc is not None:
            out.add(seq, f"allocations has a row for decision {key}, which the audit log (entry {seq}) records as {e.get('outcome')}")
        return
    if alloc is None:
        out.add(seq, f"allocations has no row for decision {key}, which the audit log (entry {seq}) records as placed: its row was deleted")
        return
    if "pool" in e:
        out.differs("allocations", "pool", key, alloc.get("pool"), e["pool"], seq)
    if "devices" in e:
        out.differs("allocations", "devices", key, alloc.get("devices"), e["devices"], seq)
    if "created_at" in e:
        out.differs("allocations", "created_at", key, alloc.get("created_at"), e["created_at"], seq)
    if d.released is None:
        if alloc.get("released_at") is not None:
            out.add(seq, f"allocations.released_at of {key} is {_shown(alloc.get('released_at'))}, but the audit log records no release of it")
    else:
        rseq, rentry = d.released
        if alloc.get("released_at") is None:
            out.add(rseq, f"allocations.released_at of {key} is null, but the audit log (entry {rseq}) records its release")
        elif "released_at" in rentry:
            out.differs("allocations", "released_at", key, alloc.get("released_at"), rentry["released_at"], rseq)


def _expected_holdings(e: Row, moves: Sequence[tuple[int, dict[str, object]]]) -> list[tuple[object, ...]] | None:
    """(node, device, profile, start, units, shares) of what a placement entry says it holds: node
    by node from its allocations; else from its devices, each with no node (None) unless a
    ``holding`` entry mapped it to one. None: an entry from before devices were recorded."""
    allocations = e.get("allocations")
    if isinstance(allocations, list):
        out: list[tuple[object, ...]] = []
        for a in allocations:
            if not (isinstance(a, list) and len(a) == 5 and isinstance(a[1], list)):
                return []
            node, held, share = a[0], a[1], a[2]
            out.extend((node, *h, None) for h in held if isinstance(h, list) and len(h) == 4)
            if isinstance(share, list) and len(share) == 2:
                out.append((node, share[0], None, None, None, share[1]))
        return out
    listed = e.get("holdings")
    if not isinstance(listed, list):
        return None
    flat: list[tuple[object, ...]] = [(None, *h[:3], None, None) for h in listed if isinstance(h, list) and len(h) >= 3]
    for _, move in moves:
        for i, h in enumerate(flat):
            if h[0] is None and h[1] == move.get("device") and h[3] == move.get("start"):
                flat[i] = (move.get("node"), move.get("to"), h[2], h[3], None, None)
                break
    return flat


def _compare_holdings(out: _Report, ident: str, d: _Decision, e: Mapping[str, object], row: Row, found: list[Row] | None) -> None:
    key, seq = ident[:12], d.seq
    if e.get("outcome") != "placed":
        if found:
            out.add(seq, f"holdings has {len(found)} row(s) for decision {key}, which the audit log (entry {seq}) records as {e.get('outcome')}")
        return
    expected = _expected_holdings(e, d.moves)
    if expected is None:
        return  # an entry from before devices were recorded
    by_node = isinstance(e.get("allocations"), list)
    rows = [(h.get("node"), h.get("device"), h.get("profile"), h.get("start"), h.get("units"), h.get("shares")) for h in found or []]
    want: list[tuple[object, ...]]
    have: list[tuple[object, ...]]
    if by_node:
        # Node by node: every column the allocations state.
        want, have = sorted(expected, key=repr), sorted(rows, key=repr)
    else:
        # The device, profile and start the entry lists; the node only of a holding a move named.
        moved = {(w[1], w[3]) for w in expected if w[0] is not None}
        want = sorted((w[:4] for w in expected), key=repr)
        have = sorted(((r[0] if (r[1], r[3]) in moved else None, *r[1:4]) for r in rows), key=repr)
    if want != have:
        def listed(items: Sequence[tuple[object, ...]]) -> list[list[object]]:
            return [list(h) if by_node or h[0] is not None else list(h[1:]) for h in items]

        out.add(seq, f"holdings of decision {key} are {_shown(listed(have))}, the audit log (entry {seq}) says {_shown(listed(want))}")
        return
    devices = e.get("devices")
    for h in found or []:
        where = f"{key} device {h.get('device')}" + (f" on {h.get('node')}" if by_node else "")
        if "pool" in e:
            out.differs("holdings", "pool", where, h.get("pool"), e["pool"], seq)
        if isinstance(devices, (int, float)) and want:
            # Each holding's share of a device: the grant's devices over what it holds.
            out.differs("holdings", "share", where, h.get("share"), float(devices) / len(want), seq, number=True)


def _compare_node_grants(out: _Report, ident: str, d: _Decision, e: Mapping[str, object], found: list[Row] | None) -> None:
    key, seq = ident[:12], d.seq
    allocations = e.get("allocations") if e.get("outcome") == "placed" else None
    if not isinstance(allocations, list):
        if found:
            out.add(seq, f"node_grants has {len(found)} row(s) for decision {key}, whose audit entry (entry {seq}) names no node")
        return
    want = sorted(
        ((e.get("pool"), a[0], i, a[3], a[4]) for i, a in enumerate(allocations) if isinstance(a, list) and len(a) == 5), key=repr
    )
    have = sorted(((g.get("pool"), g.get("node"), g.get("position"), g.get("cpu_milli"), g.get("memory_mib")) for g in found or []), key=repr)
    if want != have:
        out.add(seq, f"node_grants of decision {key} are {_shown([list(g) for g in have])}, the audit log (entry {seq}) says {_shown([list(g) for g in want])}")


def _compare_queue(out: _Report, chain: ChainState, state: AuditedState, records: Mapping[str, dict[str, object]], *, chain_lost: bool) -> None:
    """Each queued record's row as its entries say: what it asks, its state, the placement that
    admitted it, when its wait ended and why, its submission attempts; the workload it keeps
    (``spec``) as its queued decision's record says (``records``: those that hash to their
    entries), and its submission as the digest its queued entry holds."""
    rows = {str(r[0]): dict(zip(QUEUE_COLUMNS, r)) for r in state.tables.get("queue", ())}
    for ident, q in sorted(chain.queue.items(), key=lambda kv: kv[1].seq):
        key, e, seq = ident[:12], q.entry, q.seq
        row = rows.pop(ident, None)
        if row is None:
            out.add(seq, f"queued record {key} is in the audit log (entry {seq}) but not in the queue table: its row was deleted")
            continue
        record = records.get(ident)
        if record is not None and not _spec_is_record(row.get("spec"), record, e.get("priority")):
            out.add(seq, f"queue.spec of {key} is {_shown(row.get('spec'))}, not the workload its queued record (entry {seq}) holds")
        _compare_submission(out, key, row.get("submission"), e, seq)
        for name in ("queued_at", "workload", "project", "priority", "accelerator", "devices", "lease_s", "preempted_from"):
            if name in e or name == "preempted_from":
                out.differs("queue", name, key, row.get(name), e.get(name), seq)
        end_seq, ended = q.ended if q.ended is not None else (seq, {})
        out.differs("queue", "state", key, row.get("state"), q.state, end_seq)
        if q.ended is None:
            for name in ("admitted_by", "ended_at"):
                if row.get(name) is not None:
                    out.add(seq, f"queue.{name} of {key} is {_shown(row.get(name))}, but the audit log records that it still waits")
        else:
            out.differs("queue", "admitted_by", key, row.get("admitted_by"), ended.get("decision_id") if q.state == "admitted" else None, end_seq)
            if "ended_at" in ended:
                out.differs("queue", "ended_at", key, row.get("ended_at"), ended["ended_at"], end_seq)
        attempts = q.attempts[1].get("attempts") if q.attempts is not None else 0
        out.differs("queue", "attempts", key, row.get("attempts"), attempts, q.attempts[0] if q.attempts is not None else seq)
        said = [(at[0], at[1].get("message")) for at in (q.attempts, q.ended if q.state == "failed" else None) if at is not None]
        if said:
            mseq, message = max(said, key=lambda sm: sm[0])
            out.differs("queue", "message", key, row.get("message"), message, mseq)
        elif row.get("message") is not None:
            out.add(seq, f"queue.message of {key} is {_shown(row.get('message'))}, but the audit log records none for it")
    if not chain_lost:
        for ident in sorted(rows):
            out.add(0, f"queue has a row for {ident[:12]}, which no queued entry in the audit log accounts for")


def _spec_is_record(spec: object, record: Mapping[str, object], priority: object) -> bool:
    """Whether a queue row's workload (JSON) is its queued record's workload (the policy's input)
    with the priority class its entry states."""
    try:
        kept = specs.workload_from_mapping(json.loads(str(spec)), source="the queue")
        recorded = codec.workload_from_json(cast(Mapping[str, object], record.get("workload")))
    except (ValueError, TypeError, AttributeError, ExaError):
        return False
    return kept == dataclasses.replace(recorded, priority=priority if isinstance(priority, str) else None)


def _compare_submission(out: _Report, key: str, submission: object, e: Mapping[str, object], seq: int) -> None:
    """A queue row's submission as its queued entry records it: its digest (entries from before
    entries held it: only whether there is one)."""
    digest = e.get("submission_digest")
    if submission is None:
        if e.get("submission") or digest is not None:
            out.add(seq, f"queue.submission of {key} is null, but the audit log (entry {seq}) records a submission for it")
    elif digest is not None:
        actual = "sha256:" + hashlib.sha256(str(submission).encode("utf-8")).hexdigest()
        if actual != digest:
            out.add(seq, f"queue.submission of {key} is not the submission its queued entry (entry {seq}) records: its digest differs")
    elif not e.get("submission"):
        out.add(seq, f"queue.submission of {key} is {_shown(submission)}, but the audit log (entry {seq}) records no submission for it")


def _compare_node_usage(out: _Report, chain: ChainState, state: AuditedState, *, chain_lost: bool) -> None:
    stored: dict[str, list[tuple[object, ...]]] = {}
    for r in state.tables["node_usage"]:
        u = dict(zip(NODE_USAGE_COLUMNS, r))
        try:
            indices = json.loads(str(u["indices"]))
        except ValueError:
            indices = u["indices"]
        stored.setdefault(str(u["pool"]), []).append(
            (u["node"], u["devices"], indices, u["shares"], u["cpu_milli"], u["memory_mib"], u["scheduler"])
        )
    for name, pool in sorted(chain.pools.items()):
        have = sorted(stored.pop(name, []), key=repr)
        if pool.node_usage is None:
            if have:
                out.add(pool.seq, f"node_usage has {len(have)} row(s) for pool {name!r}, but the audit log records no node usage of it")
            continue
        seq, entry = pool.node_usage
        nodes = entry.get("nodes") if isinstance(entry.get("nodes"), list) else []
        assert isinstance(nodes, list)
        want = sorted(
            ((n.get("node"), n.get("devices"), n.get("indices"), n.get("shares"), n.get("cpu_milli"), n.get("memory_mib"), entry.get("scheduler"))
             for n in nodes if isinstance(n, dict)),
            key=repr,
        )  # fmt: skip
        if want != have:
            out.add(seq, f"node_usage of pool {name!r} is {_shown([list(u) for u in have])}, the audit log (entry {seq}) says {_shown([list(u) for u in want])}")
    if not chain_lost:
        for name, rows in sorted(stored.items()):
            out.add(0, f"node_usage has {len(rows)} row(s) for pool {name!r}, which no pool entry in the audit log adds")


def _compare_bursts(out: _Report, ident: str, d: _Decision, row: Row, found: list[Row] | None) -> None:
    key = ident[:12]
    if d.burst is None:
        if found:
            out.add(d.seq, f"burst_events has {len(found)} row(s) for decision {key}, whose audit entries record no burst attempt")
        return
    seq, entry = d.burst
    if not found:
        out.add(seq, f"burst_events has no row for the burst attempt of decision {key} (entry {seq}, {entry.get('verdict')}): its row was deleted")
        return
    if len(found) > 1:
        out.add(seq, f"burst_events has {len(found)} rows for the one burst attempt of decision {key} (entry {seq})")
    event = found[0]
    for name in ("workload", "residency", "pool", "region", "verdict", "reason"):
        if name in entry:
            out.differs("burst_events", name, key, event.get(name), entry[name], seq)
    out.differs("burst_events", "created_at", key, event.get("created_at"), row.get("created_at"), seq)


def _compare_pools(
    out: _Report, chain: ChainState, state: AuditedState, released: set[str], ordered: Sequence[HeldRow], summary: Summary | None, *,
    chain_lost: bool,
) -> None:
    live: dict[str, list[HeldRow]] = {}
    for h in ordered:
        live.setdefault(h.pool or "", []).append(h)
    nodes: _NodeRows | None = None
    seen = set()
    for r in state.tables["pools"]:
        p = dict(zip(POOL_COLUMNS, r))
        name = str(p["name"])
        seen.add(name)
        expected = chain.pools.get(name)
        if expected is None:
            if not chain_lost:
                out.add(0, f"pools has a row {name!r}, which no pool entry in the audit log adds")
            continue
        try:
            spec = json.loads(str(p["spec"]))
        except ValueError:
            spec = p["spec"]
        if spec != expected.spec:
            changed = sorted(k for k in set(spec) | set(expected.spec) if spec.get(k) != expected.spec.get(k)) if isinstance(spec, dict) else ["spec"]
            detail = ", ".join(f"{k} {_shown(spec.get(k) if isinstance(spec, dict) else spec)} (the log: {_shown(expected.spec.get(k))})" for k in changed[:4])
            out.add(expected.seq, f"pools.spec of {name!r} differs from its last pool entry ({expected.seq}): {detail}")
        out.differs("pools", "count", repr(name), p["count"], expected.spec.get("count"), expected.seq)
        held_seq, held = expected.held_outside
        out.differs("pools", "held_outside", repr(name), p["held_outside"], held, held_seq, number=True)
        for column, said, what in (("removed_at", expected.removed, "removal"), ("removing_since", expected.removing, "pending removal")):
            if said is None:
                if p[column] is not None:
                    out.add(expected.seq, f"pools.{column} of {name!r} is {_shown(p[column])}, but the audit log records no {what} of it")
            elif p[column] is None:
                out.add(said[0], f"pools.{column} of {name!r} is null, but the audit log (entry {said[0]}) records its {what}")
            elif said[1] is not None:
                out.differs("pools", column, repr(name), p[column], said[1], said[0])
        pool = codec.pool_from_doc(spec) if summary is not None and isinstance(spec, dict) and spec == expected.spec else None
        if summary is not None and pool is not None:
            if pool.node_tracked:
                # What is held and busy on its nodes, by it and by the pools sharing them.
                nodes = nodes or _NodeRows(chain, state, released, ordered)
                capacity, free = nodes.summary(summary, pool, held)
            else:
                capacity, free = summary(pool, live.get(name, []), held, (), (), None, frozenset(), {})
            out.differs("pools", "free", repr(name), p["free"], free, expected.seq, number=True)
            try:
                stored = json.loads(str(p["capacity"])) if isinstance(p["capacity"], str) else p["capacity"]
            except ValueError:
                stored = p["capacity"]
            if stored != capacity:
                out.add(expected.seq, f"pools.capacity of {name!r} is {_shown(stored)}, its live holdings give {_shown(capacity)}")
    for name, expected in sorted(chain.pools.items()):
        if name not in seen:
            out.add(expected.seq, f"pool {name!r} is in the audit log (entry {expected.seq}) but not in the pools table: its row was deleted")


def _live_holdings(state: AuditedState, released: set[str]) -> list[HeldRow]:
    """What the live grants hold, in the order a write reads it (``Transaction.held_in``: the
    order the grants were made, then node by node, by device)."""
    at = ALLOCATION_COLUMNS.index("created_at")
    rows = [h for h in (dict(zip(HOLDING_COLUMNS, r)) for r in state.tables["holdings"]) if str(h["decision_id"]) not in released]
    held = {str(h["decision_id"]) for h in rows}
    made = {str(r[0]): str(r[at]) for r in state.tables["allocations"] if str(r[0]) in held}
    rows.sort(key=lambda h: (made.get(str(h["decision_id"]), ""), str(h["decision_id"]), str(h["node"] or ""), _int(h["device"]), _int(h["start"])))
    return [
        HeldRow(
            str(h["decision_id"]),
            Holding(int(cast(int, h["device"])), cast("str | None", h["profile"]), cast("int | None", h["start"]), cast("int | None", h["units"])),
            float(cast(float, h["share"])), cast("str | None", h["node"]), cast("int | None", h["shares"]), str(h["pool"]),
        )  # fmt: skip
        for h in rows
    ]


def node_problems(
    chain: ChainState, state: AuditedState, released: set[str], held: Sequence[HeldRow], layout: Callable[[Pool], PoolLayout]
) -> list[Problem]:
    """Over the pools present as the chain states them: pools that say a node's facts otherwise
    (``recount.disagreements``), and the live grants recounted against their nodes' physical totals
    (``recount.over_held``; ``held``: the live holdings). A state an earlier release wrote can
    hold either with every row the one its entry vouches for (before issue 30, pools over one node
    did not share it)."""
    at_name, at_removed = POOL_COLUMNS.index("name"), POOL_COLUMNS.index("removed_at")
    present = {str(r[at_name]) for r in state.tables["pools"] if r[at_removed] is None}
    pools = {name: codec.pool_from_doc(p.spec) for name, p in sorted(chain.pools.items()) if name in present and p.removed is None}
    disagree = [Problem(0, "state", why) for _, why in recount.disagreements(list(pools.values()), set(pools))]
    found = recount.over_held(pools, layout, held, _live_grants(state, released))
    return [*disagree, *(Problem(0, "state", f"{said} (live grants recounted against the node)") for said in found)]


def _live_grants(state: AuditedState, released: set[str]) -> list[NodeGrantRow]:
    """What the live grants hold of each node's CPU and memory (``node_grants``), in table order."""
    out = []
    for r in state.tables["node_grants"]:
        g = dict(zip(NODE_GRANT_COLUMNS, r))
        if str(g["decision_id"]) not in released:
            out.append(NodeGrantRow(str(g["decision_id"]), str(g["pool"]), str(g["node"]), _int(g["position"]), _int(g["cpu_milli"]), _int(g["memory_mib"])))
    return out


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else -1


class _NodeRows:
    """What a pool counted node by node is worked out from, as a write reads it: the pools sharing
    its nodes (among the pools not removed, as the chain states them), and what the live grants
    hold on the nodes of them all (devices, CPU and memory) and schedulers report busy there."""

    def __init__(self, chain: ChainState, state: AuditedState, released: set[str], held: Sequence[HeldRow]) -> None:
        at_name, at_removed = POOL_COLUMNS.index("name"), POOL_COLUMNS.index("removed_at")
        present = {str(r[at_name]) for r in state.tables["pools"] if r[at_removed] is None}
        self.sharing = sharing_of(codec.pool_from_doc(p.spec) for name, p in sorted(chain.pools.items()) if name in present and p.removed is None)
        # By pool, each with its place in the order a write reads them (a group is merged by it).
        self.held: dict[str, list[tuple[int, HeldRow]]] = {}
        for i, h in enumerate(held):
            self.held.setdefault(h.pool or "", []).append((i, h))
        self.grants: dict[str, list[NodeGrantRow]] = {}
        for g in _live_grants(state, released):
            self.grants.setdefault(g.pool, []).append(g)
        self.usage: dict[str, list[NodeUsageRow]] = {}
        for r in state.tables["node_usage"]:
            u = dict(zip(NODE_USAGE_COLUMNS, r))
            try:
                indices = tuple(int(i) for i in json.loads(str(u["indices"])))
            except (ValueError, TypeError):
                indices = ()  # reported by the node_usage comparison
            self.usage.setdefault(str(u["pool"]), []).append(
                NodeUsageRow(str(u["pool"]), str(u["node"]), _int(u["devices"]), indices, _int(u["shares"]),
                             cast("int | None", u["cpu_milli"]), cast("int | None", u["memory_mib"]))  # fmt: skip
            )

    def summary(self, summary: Summary, pool: Pool, held_outside: float) -> tuple[object, float]:
        names = self.sharing.group(pool.name)
        return summary(
            pool,
            [h for _, h in sorted((ih for n in names for ih in self.held.get(n, ())), key=lambda ih: ih[0])],
            held_outside,
            sorted((g for n in names for g in self.grants.get(n, ())), key=lambda g: (g.pool, g.decision_id, g.position)),
            sorted((u for n in names for u in self.usage.get(n, ())), key=lambda u: (u.pool, u.node)),
            self.sharing.devices(pool.name),
            self.sharing.other_mode(pool.name),
            self.sharing.states(pool.name),
        )


def _text(value: object) -> str:
    """A stored capacity (JSON text) as it is, shortened."""
    text = str(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _fragment(text: object, cache: dict[object, bytes | None]) -> bytes | None:
    """A logged capacity in the canonical bytes a capacity digest is taken of (None: not one)."""
    if text not in cache:
        try:
            cache[text] = codec.canonical(codec.capacity_json(codec.capacity_from_text(str(text))))
        except StateError:
            cache[text] = None
    return cache[text]


def _compare_capacity_log(
    out: _Report, state: AuditedState, log: Iterable[tuple[object, ...]], decided: list[tuple[int, int, str, object, bytes, object]], fleets: _Fleets
) -> None:  # fmt: skip
    """Hold the capacity log (its rows in version order, read once as they stream by) to the
    decisions decided at its versions (see the module docstring): each decision takes every pool's
    latest capacity at or before its version, as reading it back does (``_core.records``). Kept:
    each pool's latest entry and capacity, and each capacity's bytes once."""
    cache: dict[object, bytes | None] = {}
    latest: dict[str, tuple[object, ...]] = {}
    current: dict[str, bytes | None] = {}
    entries, by_decision = _Report(), _Report()
    decided.sort(key=lambda d: (d[0], d[1]))
    waiting = iter(decided)
    due = next(waiting, None)
    for version, pool, capacity in log:
        # The decisions decided before this entry's version take the capacities up to it.
        while due is not None and due[0] < cast(int, version):
            _compare_decided(by_decision, due, current, fleets)
            due = next(waiting, None)
        if isinstance(version, int) and version > state.version:
            entries.add(0, f"capacity_log has an entry for pool {pool!r} at state version {version}, beyond the state's version {state.version}")
        fragment = _fragment(capacity, cache)
        if fragment is None:
            entries.add(0, f"capacity_log entry of pool {pool!r} at state version {version} is not a capacity: {_text(capacity)}")
        latest[str(pool)] = (version, capacity)
        current[str(pool)] = fragment
    while due is not None:
        _compare_decided(by_decision, due, current, fleets)
        due = next(waiting, None)
    out.found.extend(entries.found)
    for r in state.tables["pools"]:
        p = dict(zip(POOL_COLUMNS, r))
        name, last = str(p["name"]), latest.get(str(p["name"]))
        if p["capacity"] is None and last is None:
            continue
        if last is None:
            out.add(0, f"capacity_log has no entry for pool {name!r}, whose capacity in pools is {_text(p['capacity'])}")
        elif last[1] != p["capacity"] or not cast(int, last[0]) <= cast(int, p["version"]):
            out.add(
                0,
                f"capacity_log's latest entry for pool {name!r} is {_text(last[1])} at state version {last[0]}, "
                f"but pools holds {_text(p['capacity'])} at version {p['version']}",
            )
    out.found.extend(by_decision.found)


def _compare_decided(
    out: _Report, decided: tuple[int, int, str, object, bytes, object], current: Mapping[str, bytes | None], fleets: _Fleets
) -> None:  # fmt: skip
    """A decision's input digest against every pool's capacity at the state version it was
    decided at (``current``)."""
    at, seq, ident, fleet, rest, claimed = decided
    names = fleets.names(fleet)
    if names is None:
        out.add(seq, f"decision {ident[:12]} was decided on fleet {str(fleet)[:22]}, which is not stored")
        return
    fragments = [current.get(n) for n in names]
    lacking = [n for n, f in zip(names, fragments) if f is None]
    if lacking:
        out.add(seq, f"capacity_log has no capacity of pool {lacking[0]!r} at state version {at}, which decision {ident[:12]} was decided at")
        return
    capacity = hashlib.sha256(b"[" + b",".join(cast(list[bytes], fragments)) + b"]").hexdigest()
    if claimed is None or codec.input_digest_with(capacity, rest) != claimed:
        out.add(
            seq,
            f"capacity_log: the capacities decision {ident[:12]} was decided at (state version {at}) are not what its "
            "input digest says: an entry of the log at or before that version was edited, added or removed",
        )
