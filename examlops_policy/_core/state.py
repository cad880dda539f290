"""The capacity state: what every pool can still place, as pure values worked out from holdings.

``Capacities`` holds the packing rules of one set of tables (each pool's layout) and works out a
pool's capacity summary and free devices from what its live grants hold. ``Snapshot`` is the fleet
with every pool's capacity at one state version, in name order, with the digest of the capacity
vector a decision's input digest covers; ``Snapshots`` keeps the last one and merges in only the
pools changed since. A read sees a lease that ended as ended before any write releases it: the
snapshot it gets has those pools' capacity worked out without the ended grants (``as_of``), and
names the stored snapshot it was worked out from (``base``). Nothing here touches a database: the
rows come from the store's narrow API, or from an implementation of it in memory.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from examlops_policy.model import NODE_STATES, Capacity, Pool, PoolState
from examlops_policy.store.api import HeldRow, NodeGrantRow, NodeUsageRow, PoolRow, Rows, StateRows
from examlops_policy.tables import Tables
from examlops_policy._core import codec, packing

if TYPE_CHECKING:  # the node packer (numpy) loads only where a pool has nodes
    from examlops_policy._core.rooms import Rooms

# What the capacity summaries are worked out with beyond the tables: bumped when the way they are
# worked out changes, so that stored ones are worked out again (``commit.ensure_layout``).
# 2: node by node (node-tracked pools), grants recorded before they named nodes mapped to nodes.
# 3: a cpu pool's devices free on a node no more than the node's cores other pools' grants leave.
# 4: a node some pool listing it calls drained or down is not up in the others (``Sharing.states``).
SUMMARY_VERSION = 4


@dataclass(frozen=True)
class Sharing:
    """Which pools share nodes: pools that list a node by the same name (overlapping Slurm
    partitions) hold that node's CPU and memory together, and its devices too where they are the
    same devices (the same accelerator, model and scheduler resource): what one grants is gone for
    the others. Pools of other devices on the same node (a node's H100s and its MI300Xs) share
    only its CPU and memory."""

    by_pool: Mapping[str, tuple[str, ...]]
    same_devices: Mapping[str, frozenset[str]] = field(default_factory=dict)
    other_modes: Mapping[str, frozenset[str]] = field(default_factory=dict)
    # By pool: its nodes that another pool listing them states less available (drained or down
    # where it says up, down where it says drained), with that state. ``apply`` refuses pools that
    # disagree; a state stored before it did may still hold them, and a node is then as unavailable
    # as any pool says (fail closed), not up through the pool that says so.
    held_states: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def group(self, name: str) -> tuple[str, ...]:
        """``name`` and the pools sharing a node with it."""
        return (name, *self.by_pool.get(name, ()))

    def devices(self, name: str) -> frozenset[str]:
        """``name`` and the pools whose devices on its nodes are its devices, shared the same way."""
        return self.same_devices.get(name, frozenset({name}))

    def other_mode(self, name: str) -> frozenset[str]:
        """The pools whose devices on its nodes are its devices, shared another way (time-sliced
        where it uses MPS, or in another number of shares, or whole where it shares them): a
        device is in one mode at a time, so one that any of them holds, even a share of it, is
        taken whole for ``name``."""
        return self.other_modes.get(name, frozenset())

    def states(self, name: str) -> Mapping[str, str]:
        """``name``'s nodes whose state another pool listing them gives as less available, with
        the least available state any pool gives them."""
        return self.held_states.get(name, {})


def device_kind(pool: Pool) -> tuple[object, ...]:
    """What makes two pools' devices on one node the same devices."""
    return (pool.accelerator, pool.model, pool.gres_type, pool.fixed_profile)


def device_mode(pool: Pool) -> tuple[object, ...]:
    """How a pool shares its devices: a device granted by one pool is in that mode until its last
    grant ends (whole devices and slices, None; or N shares of a sharing scheme)."""
    return (pool.sharing, pool.shares_per_device) if pool.sharing is not None else (None, None)


def sharing_of(pools: Iterable[Pool]) -> Sharing:
    """Who shares nodes with whom, from the pools' listed nodes (nodes a pool only counts, ``nodes:
    N``, are its own)."""
    by_node: dict[str, list[Pool]] = {}
    node_state: dict[tuple[str, str], str] = {}
    for pool in pools:
        if pool.nodes_named:
            for node in pool.node_list():
                by_node.setdefault(node.name, []).append(pool)
                node_state[(pool.name, node.name)] = node.state
    held_states: dict[str, dict[str, str]] = {}
    for node_name, listed in by_node.items():
        if len(listed) > 1:
            worst = max((node_state[(p.name, node_name)] for p in listed), key=NODE_STATES.index)
            for pool in listed:
                if node_state[(pool.name, node_name)] != worst:
                    held_states.setdefault(pool.name, {})[node_name] = worst
    together: dict[str, set[str]] = {}
    same: dict[str, set[str]] = {}
    other: dict[str, set[str]] = {}
    for listed in by_node.values():
        if len(listed) > 1:
            for pool in listed:
                together.setdefault(pool.name, set()).update(p.name for p in listed if p.name != pool.name)
                kin = [p for p in listed if device_kind(p) == device_kind(pool)]
                same.setdefault(pool.name, {pool.name}).update(p.name for p in kin if device_mode(p) == device_mode(pool))
                other.setdefault(pool.name, set()).update(p.name for p in kin if device_mode(p) != device_mode(pool))
    return Sharing(
        {name: tuple(sorted(others)) for name, others in together.items()},
        {name: frozenset(s) for name, s in same.items()},
        {name: frozenset(s) for name, s in other.items() if s},
        held_states,
    )


class Capacities:
    """The packing rules of one set of tables: each pool's device layout, and what it can place."""

    def __init__(self, tables: Tables) -> None:
        self.tables = tables
        # By what ``packing.layout_of`` reads of a pool, not by the pool: keyed by Pool, every version
        # of a pool of nodes was kept (and hashed whole, node by node, at each look-up).
        self._layouts: dict[tuple[object, ...], packing.PoolLayout] = {}
        self._sharing: tuple[int, Sharing] | None = None
        # A pool's nodes as this process last wrote them, by pool: (the pool row's version and spec
        # then, the rooms). Reused by the next write that finds the row unchanged (nothing else
        # wrote the pool since); see ``kept_rooms``.
        self._rooms: dict[str, tuple[int, str, Rooms]] = {}

    def kept_rooms(self, name: str, version: int, spec: str) -> Rooms | None:
        """The rooms this process left ``name`` with, if the pool is still at that version with that
        spec (every write that changes what a pool's nodes hold sets its version). Taken: a caller
        that changes it keeps it again (``keep_rooms``) only once its write is in."""
        found = self._rooms.pop(name, None)
        if found is None or found[0] != version or found[1] != spec:
            return None
        return found[2]

    def keep_rooms(self, name: str, version: int, spec: str, room: Rooms) -> None:
        if len(self._rooms) > 256:
            self._rooms.clear()
        self._rooms[name] = (version, spec, room)

    def sharing(self, fleet_version: int, pools: Iterable[Pool] | Callable[[], Iterable[Pool]]) -> Sharing:
        """Who shares nodes in the fleet at ``fleet_version`` (worked out once per fleet version
        from ``pools``, or what ``pools()`` reads)."""
        if self._sharing is None or self._sharing[0] != fleet_version:
            found = sharing_of(pools() if callable(pools) else pools)
            self._sharing = (fleet_version, found)
        return self._sharing[1]

    @cached_property
    def digest(self) -> str:
        """The digest of the rules capacities are worked out with (partitioning and geometry, and
        how summaries are made)."""
        rules = {"partitioning": self.tables.partitioning, "geometry": self.tables.geometry, "summary": SUMMARY_VERSION}
        return codec.digest(codec.canonical(rules))

    def layout(self, pool: Pool) -> packing.PoolLayout:
        key = packing.layout_key(pool)
        layout = self._layouts.get(key)
        if layout is None:
            if len(self._layouts) > 65536:
                self._layouts.clear()
            layout = self._layouts[key] = packing.layout_of(pool, self.tables)
        return layout

    def of(
        self,
        pool: Pool,
        held: Sequence[HeldRow],
        held_outside: float,
        grants: Sequence[NodeGrantRow] = (),
        usage: Sequence[NodeUsageRow] = (),
        same_devices: Collection[str] | None = None,
        other_modes: Collection[str] = (),
        states: Mapping[str, str] | None = None,
    ) -> tuple[Capacity, float]:
        """What ``pool`` can still place with ``held`` on it, and its devices free (shares summed;
        a pool of fixed slices counts slices: each holding is one of its units). A node-tracked
        pool node by node: ``held`` may hold rows of pools sharing its nodes, ``grants`` their CPU
        and memory, ``usage`` what schedulers report busy on its nodes."""
        layout = self.layout(pool)
        if pool.node_tracked:
            from examlops_policy._core import rooms

            return rooms.summary(rooms.build(pool, layout, held, grants, usage, same_devices, other_modes, states))
        capacity = packing.summarize(layout, [h.holding for h in held], held_outside)
        used = float(len(held)) if layout.kind == "fixed" else sum(h.share for h in held)
        return capacity, max(0.0, round(pool.count - held_outside - used, 9))

    def rooms_of(
        self,
        pool: Pool,
        held: Sequence[HeldRow],
        grants: Sequence[NodeGrantRow] = (),
        usage: Sequence[NodeUsageRow] = (),
        same_devices: Collection[str] | None = None,
        other_modes: Collection[str] = (),
        states: Mapping[str, str] | None = None,
    ) -> Rooms:
        """A node-tracked pool's nodes with what is held on them, to choose where a grant goes."""
        from examlops_policy._core import rooms

        return rooms.build(pool, self.layout(pool), held, grants, usage, same_devices, other_modes, states)

    def empty(self, pool: Pool) -> PoolState:
        """The pool with nothing held on it (what-if decisions)."""
        if pool.node_tracked:
            capacity, free = self.of(pool, [], 0.0)
            return PoolState(pool, free, capacity)
        return PoolState(pool, float(pool.count), packing.summarize(self.layout(pool), []))


def state_of(row: PoolRow) -> PoolState:
    """A pool as the store holds it, decoded."""
    capacity = codec.capacity_from_text(row.capacity) if row.capacity is not None else Capacity(0)
    return PoolState(codec.pool_from_text(row.spec), float(row.free if row.free is not None else 0.0), capacity, float(row.held_outside), row.removing)


@dataclass(frozen=True)
class Snapshot:
    """Every pool, in name order, with what it can still place, at one state version.

    ``fragments`` are each pool's capacity in canonical bytes (kept from one snapshot to the next
    for the pools that did not change), so the digest of the whole vector costs a join and a hash.
    """

    version: int
    fleet_version: int
    states: tuple[PoolState, ...]
    fragments: tuple[bytes, ...] = field(default=(), repr=False, compare=False)
    # A view of the state as of a time, not the state stored at ``version``: the stored snapshot it
    # was worked out from, and the placements it sees as ended (their leases ended, not yet released).
    base: Snapshot | None = field(default=None, repr=False, compare=False)
    ended: frozenset[str] = frozenset()

    @cached_property
    def index(self) -> Mapping[str, int]:
        return {s.pool.name: i for i, s in enumerate(self.states)}

    @cached_property
    def pools(self) -> list[Pool]:
        return [s.pool for s in self.states]

    @cached_property
    def capacities(self) -> list[Capacity]:
        return [s.capacity for s in self.states]

    @cached_property
    def capacity_digest(self) -> str:
        """``codec.capacity_digest`` of ``capacities``."""
        frags = self.fragments if len(self.fragments) == len(self.states) else [_fragment(s.capacity) for s in self.states]
        return hashlib.sha256(b"[" + b",".join(frags) + b"]").hexdigest()


def _fragment(capacity: Capacity) -> bytes:
    return codec.canonical(codec.capacity_json(capacity))


def merge(previous: Snapshot | None, rows: StateRows) -> tuple[Snapshot, frozenset[str]]:
    """``previous`` with the pools ``rows`` says changed since (every pool without a previous
    snapshot); and the names of the pools whose capacity changed."""
    if previous is not None and not rows.pools:
        if (rows.version, rows.fleet_version) == (previous.version, previous.fleet_version):
            return previous, frozenset()
        return Snapshot(rows.version, rows.fleet_version, previous.states, previous.fragments), frozenset()
    removed = {r.name for r in rows.pools if r.removed}
    changed = {r.name: state_of(r) for r in rows.pools if not r.removed}
    if previous is not None and not removed and all(name in previous.index for name in changed):
        return _replaced(previous, rows.version, rows.fleet_version, changed)
    merged = {s.pool.name: s for s in (previous.states if previous is not None else ())}
    before = dict(merged)
    merged.update(changed)
    for name in removed:
        merged.pop(name, None)
    ordered = tuple(merged[n] for n in sorted(merged))
    moved = {n for n, s in changed.items() if n not in before or before[n].capacity != s.capacity} | (removed & set(before))
    return Snapshot(rows.version, rows.fleet_version, ordered, tuple(_fragment(s.capacity) for s in ordered)), frozenset(moved)


def _replaced(previous: Snapshot, version: int, fleet_version: int, changed: Mapping[str, PoolState]) -> tuple[Snapshot, frozenset[str]]:
    """``previous`` with the states of some of its pools replaced, at ``version``."""
    states = list(previous.states)
    frags = list(previous.fragments) if len(previous.fragments) == len(states) else [_fragment(s.capacity) for s in states]
    capacities = list(previous.capacities)
    moved = set()
    same_pools = fleet_version == previous.fleet_version
    for name, state in changed.items():
        i = previous.index[name]
        same_pools = same_pools and states[i].pool == state.pool
        if states[i].capacity != state.capacity:
            moved.add(name)
            frags[i] = _fragment(state.capacity)
            capacities[i] = state.capacity
        states[i] = state
    result = Snapshot(version, fleet_version, tuple(states), tuple(frags))
    # The same pools in the same order: what is worked out per pool name carries over.
    result.__dict__["index"] = previous.index
    result.__dict__["capacities"] = capacities
    if same_pools:
        result.__dict__["pools"] = previous.pools
    return result, frozenset(moved)


NodeRows = Callable[[Sequence[str]], "tuple[Sequence[HeldRow], Sequence[NodeGrantRow], Sequence[NodeUsageRow]]"]


def as_of(snapshot: Snapshot, rows: StateRows, capacities: Capacities, nodes: NodeRows | None = None) -> Snapshot:
    """``snapshot`` (stored) as a read at the time ``rows`` were asked for sees it: the pools whose
    live grants include ended leases, with their capacity worked out without them. A node-tracked
    pool's ended grant is gone for every pool sharing its nodes too: those pools are worked out
    again from what ``nodes`` (the store's ``node_rows``) says is held on their nodes."""
    if not rows.ended:
        return snapshot
    ended = frozenset(ident for ident, _ in rows.ended)
    states = list(snapshot.states)
    frags = list(snapshot.fragments) if len(snapshot.fragments) == len(states) else [_fragment(s.capacity) for s in states]
    sharing: Sharing | None = None
    on_nodes: set[str] = set()
    for name in sorted({pool for _, pool in rows.ended}):
        at = snapshot.index.get(name)
        if at is None:
            continue
        state = states[at]
        if state.pool.node_tracked:
            sharing = sharing or capacities.sharing(snapshot.fleet_version, snapshot.pools)
            on_nodes.update(sharing.group(name))
            continue
        held = [h for h in rows.held.get(name, ()) if h.decision_id not in ended]
        capacity, free = capacities.of(state.pool, held, state.held_outside)
        states[at] = PoolState(state.pool, free, capacity, state.held_outside, state.removing)
        frags[at] = _fragment(capacity)
    if on_nodes and sharing is not None and nodes is not None:
        read = sorted({other for name in on_nodes for other in sharing.group(name)})
        all_held, all_grants, all_usage = nodes(read)
        held_rows = [h for h in all_held if h.decision_id not in ended]
        grant_rows = [g for g in all_grants if g.decision_id not in ended]
        for name in sorted(on_nodes):
            at = snapshot.index.get(name)
            if at is None:
                continue
            state = states[at]
            group = set(sharing.group(name))
            capacity, free = capacities.of(
                state.pool, [h for h in held_rows if h.pool in group], state.held_outside, [g for g in grant_rows if g.pool in group],
                [u for u in all_usage if u.pool in group], sharing.devices(name), sharing.other_mode(name), sharing.states(name),
            )  # fmt: skip
            states[at] = PoolState(state.pool, free, capacity, state.held_outside, state.removing)
            frags[at] = _fragment(capacity)
    view = Snapshot(snapshot.version, snapshot.fleet_version, tuple(states), tuple(frags), base=snapshot, ended=ended)
    view.__dict__["index"] = snapshot.index
    return view


class Snapshots:
    """The last snapshot a process read, kept: reading the state again reads only what changed.

    Read with ``capacities``, the snapshot is the state as of now: leases that ended are seen ended
    (``as_of``); the stored snapshot is what is kept."""

    def __init__(self) -> None:
        self.last: Snapshot | None = None

    def read(self, store: Rows, capacities: Capacities | None = None) -> Snapshot:
        previous = self.last
        now = None if capacities is None else store.now()
        rows = store.rows(-1 if previous is None else previous.version, now=now)
        if previous is not None and rows.version < previous.version:
            previous, rows = None, store.rows(-1, now=now)  # another state behind the same store: start again
        snapshot, _ = merge(previous, rows)
        self.last = snapshot
        return snapshot if capacities is None else as_of(snapshot, rows, capacities, store.node_rows)

    def advance(self, base: Snapshot, version: int, state: PoolState) -> None:
        """This process's own write made ``base`` into ``version`` by changing one pool to
        ``state`` and nothing else: the next read starts from there instead of reading that pool
        back (only when ``base`` is still the last snapshot read)."""
        if self.last is base and version == base.version + 1 and state.pool.name in base.index:
            self.last, _ = _replaced(base, version, base.fleet_version, {state.pool.name: state})

    def forget(self) -> None:
        self.last = None


def aligned(capacities: Mapping[str, str], names: Iterable[str]) -> list[Capacity] | None:
    """The capacities of ``names`` in order (None when one of them has none)."""
    out = []
    for name in names:
        text = capacities.get(name)
        if text is None:
            return None
        out.append(codec.capacity_from_text(text))
    return out
