"""A node-tracked pool's nodes and what is on them: its capacity node by node, and where a grant
goes (which node or nodes, which devices, slices or shares there).

The seam between the two packers of the layer: ``_nodes.NodeCapacity`` (with the packer of
``_node_packers``, ``exa`` by default: THE packer, the one the simulator replays with) holds the
nodes, their whole devices, shares, CPU and memory, and chooses the node(s) and devices of whole
devices and shares; ``packing`` lays out slices (MIG instances, AMD partitions) on the devices of
one node. A device that holds slices is taken whole as far as ``NodeCapacity`` is concerned; which
node gets a slice is the first node that has room for it, nodes already holding slices first (small
slices beside slices keep whole devices whole, as on one node).

A pool that is one node counted as before nodes existed (not ``Pool.node_tracked``) never comes
here: ``packing`` alone holds it, as it did.

What is on a node comes from the records, and is never refused (``NodeCapacity.hold``): this
layer's live grants on the pool's nodes, from every pool that lists them (overlapping Slurm
partitions share their nodes), and what schedulers report busy there beyond them. Cost: the pool's
nodes and what is held on them; never one object per device.
"""

from __future__ import annotations

import dataclasses
import math
import struct
from bisect import bisect_left
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

import numpy as np

from examlops_policy import _nodes
from examlops_policy._node_packers import DEFAULT_PACKER, packer_named
from examlops_policy.model import Capacity, DeviceShare, Grant, Holding, Node, NodeAllocation, NodeRoom, Pool, Workload
from examlops_policy.store.api import HeldRow, NodeGrantRow, NodeUsageRow
from examlops_policy.views import NodeDetail
from examlops_policy._core import packing
from examlops_policy._core.selection import asked


@dataclass
class Rooms:
    """A node-tracked pool's nodes with what is held on them (``capacity``), and per node the
    slices held (``slices``) and the devices taken whole (``taken``: by grants, shares, or work
    outside this layer), which is what ``packing`` lays slices out beside."""

    pool: Pool
    layout: packing.PoolLayout
    nodes: tuple[Node, ...]
    capacity: _nodes.NodeCapacity
    slices: dict[int, list[Holding]] = field(default_factory=dict)
    slice_share: dict[int, dict[int, float]] = field(default_factory=dict)
    taken: dict[int, set[int]] = field(default_factory=dict)
    # Devices taken whole because a pool sharing them another way holds them (``hold_beside``
    # with ``other_mode``): (node position, device) -> how many of its grants hold it.
    foreign: dict[tuple[int, int], int] = field(default_factory=dict)
    # The other pools over the same devices holding each device (any part of it), by the records
    # ``build`` read: (node position, device) -> their names, for ``details`` to name them.
    others: dict[tuple[int, int], set[str]] = field(default_factory=dict)
    # Each node's room as ``summary`` last worked it out, so that a summary after a change costs
    # the nodes that changed (``summary(rooms, changed)``); None until the first summary.
    tally: _Tally | None = field(default=None, repr=False, compare=False)
    # The default packer as it last chose on these rooms: its per-node tables are worked out again
    # for the nodes that changed only (``chooser``), as the rooms are kept from write to write.
    kept_packer: _nodes.Packer | None = field(default=None, repr=False, compare=False)

    @property
    def unit(self) -> int:
        return self.capacity.unit

    def chooser(self) -> _nodes.Packer:
        """The default packer for these rooms, kept with them (made on first use)."""
        if self.kept_packer is None:
            self.kept_packer = packer_named(DEFAULT_PACKER)
        return self.kept_packer


def unit_of(pool: Pool) -> int:
    """What one device of the pool counts in a ``NodeCapacity``: its shares, or thousandths."""
    return pool.shares_per_device if pool.sharing is not None and pool.shares_per_device else _nodes.MILLI


def flat_to_node(pool: Pool, device: int) -> tuple[str, int] | None:
    """The node and index there of device ``device`` counted across the pool's nodes in order (how
    grants recorded before they named nodes counted): None beyond the pool."""
    for node in pool.node_list():
        if device < node.devices:
            return node.name, device
        device -= node.devices
    return None


def build(
    pool: Pool,
    layout: packing.PoolLayout,
    held: Sequence[HeldRow],
    grants: Sequence[NodeGrantRow] = (),
    usage: Sequence[NodeUsageRow] = (),
    same_devices: Collection[str] | None = None,
    other_modes: Collection[str] = (),
    states: Mapping[str, str] | None = None,
) -> Rooms:
    """The pool's nodes with what ``held`` (live holdings of the pool and of the pools sharing its
    nodes), ``grants`` (their CPU and memory) and ``usage`` (what schedulers report busy beyond
    them) put on them. Rows on other nodes are not this pool's and are left out; devices held (or
    reported busy) by a pool not in ``same_devices`` (default: this pool alone) are other devices
    of the node, of which only CPU and memory count; but a device held by a pool of
    ``other_modes`` (the same devices, shared another way) is taken whole, whatever part of it
    that pool granted: a device is in one mode at a time. A node named in ``states`` is in that
    state, whatever the pool says (``Sharing.states``: another pool listing it says less
    available)."""
    mine = frozenset(same_devices) if same_devices is not None else frozenset({pool.name})
    otherwise = frozenset(other_modes)
    nodes = pool.node_list()
    if states:
        nodes = tuple(dataclasses.replace(n, state=states[n.name]) if n.name in states else n for n in nodes)
    capacity = _nodes.NodeCapacity(
        (_nodes.Node(n.name, n.devices, pool.model, n.cpu_milli, n.memory_mib, n.state, n.labels) for n in nodes),  # type: ignore[arg-type]
        unit=unit_of(pool),
    )
    index = capacity.index
    rooms = Rooms(pool, layout, nodes, capacity)
    whole: dict[int, set[int]] = {}
    shares: dict[int, dict[int, int]] = {}
    for row in held:
        where = _where(pool, index, row)
        if where is None or (row.pool is not None and row.pool not in mine and row.pool not in otherwise):
            continue
        i, device = where
        if row.pool is not None and row.pool != pool.name:
            rooms.others.setdefault((i, device), set()).add(row.pool)
        if row.pool in otherwise:
            whole.setdefault(i, set()).add(device)
            continue
        h = row.holding
        if row.shares is not None:
            per = shares.setdefault(i, {})
            per[device] = per.get(device, 0) + row.shares
        elif h.profile is not None and layout.kind in packing.PARTITIONED:
            rooms.slices.setdefault(i, []).append(dataclasses.replace(h, device=device))
            per_device = rooms.slice_share.setdefault(i, {})
            per_device[device] = per_device.get(device, 0.0) + row.share
            whole.setdefault(i, set()).add(device)
        else:
            whole.setdefault(i, set()).add(device)
    cpu: dict[int, int] = {}
    memory: dict[int, int] = {}
    for g in grants:
        at = index.get(g.node)
        if at is not None:
            cpu[at] = cpu.get(at, 0) + g.cpu_milli
            memory[at] = memory.get(at, 0) + g.memory_mib
    for i in sorted(set(whole) | set(shares) | set(cpu) | set(memory)):
        capacity.hold(i, whole=sorted(whole.get(i, ())), shares=shares.get(i), cpu_milli=cpu.get(i, 0), memory_mib=memory.get(i, 0))
        rooms.taken[i] = set(whole.get(i, ())) | set(shares.get(i, {}))
    # A node in several pools is reported for each: its figures are the node's, counted once (the
    # most any report says); its devices only from pools of these devices.
    busy_devices: dict[int, NodeUsageRow] = {}
    busy_cpu: dict[int, int] = {}
    busy_memory: dict[int, int] = {}
    for u in usage:
        at = index.get(u.node)
        if at is None:
            continue
        busy_cpu[at] = max(busy_cpu.get(at, 0), u.cpu_milli or 0)
        busy_memory[at] = max(busy_memory.get(at, 0), u.memory_mib or 0)
        seen = busy_devices.get(at)
        if u.pool in mine and (seen is None or (u.devices, u.shares) > (seen.devices, seen.shares)):
            busy_devices[at] = u
    for i in sorted(set(busy_devices) | set(busy_cpu) | set(busy_memory)):
        busy = busy_devices.get(i)
        named = [d for d in sorted(set(busy.indices)) if capacity.is_free(i, d)] if busy is not None else []
        # Shares busy on unnamed devices count whole devices: never less than is busy.
        extra = max(0, busy.devices - len(busy.indices)) + math.ceil(busy.shares / capacity.unit) if busy is not None else 0
        took = capacity.hold(i, whole=named, cpu_milli=busy_cpu.get(i, 0), memory_mib=busy_memory.get(i, 0), lowest=extra)
        rooms.taken.setdefault(i, set()).update(named, took)
    return rooms


def _where(pool: Pool, index: dict[str, int], row: HeldRow) -> tuple[int, int] | None:
    """The node position and device index of a held row (a row that names no node of this pool
    but the pool itself was recorded before grants named nodes: its device counts across them)."""
    if row.node is not None and row.node in index:
        return index[row.node], row.holding.device
    if row.pool == pool.name and (row.node is None or row.node == pool.name):
        found = flat_to_node(pool, row.holding.device)
        if found is not None and found[0] in index:
            return index[found[0]], found[1]
    return None


def _groups(nodes: Sequence[Node], level: str) -> dict[str, int]:
    return {label: i for i, label in enumerate(sorted({getattr(n, level) for n in nodes if getattr(n, level) is not None}))}


Slices = tuple[tuple[str, int], ...]
RoomKey = bytes
"""A node's room as the summary orders and counts it: its figures packed big-endian, 8 bytes each
(``_Tally.pack``): whole devices, CPU, memory, shares, each slice profile's count (the pool's
profiles in name order: ``_Tally.profiles``), block and switch, ``NONE`` for None (CPU or memory
not tracked, no block or switch: after every value, as a room orders them). Two keys compare as
the tuples of their figures do (each is an unsigned 64-bit figure; one out of range fails the
packing loudly, never orders wrongly), and bytes compare in one memcmp and hash once, where a
tuple of seven ints took hundreds of instructions to compare and to hash each time: the summary's
upkeep (``_Tally.count``) is mostly comparing and looking keys up."""

NONE: Final = 1 << 63
"""A room's None: above any value a node's figure holds (an int64)."""


@dataclass
class _Tally:
    """Each node's room (its ``RoomKey``) and free units as ``summary`` worked them out (None, 0: a
    node not up), and the rooms counted, so that a summary after a change costs the nodes that
    changed: the distinct rooms in the summary's order (``keys``, with ``rows``: the room with its
    count), the whole devices, slices and free units of them all, each kept up to date by the
    change."""

    blocks: dict[str, int]
    switches: dict[str, int]
    kind: str  # the pool's layout's kind (``packing.PoolLayout.kind``)
    profiles: tuple[str, ...]  # the pool's slice profiles, in a key's order (none: devices are not sliced)
    rooms: list[RoomKey | None]
    free_units: list[int]
    keys: list[RoomKey] = field(default_factory=list)
    rows: list[NodeRoom] = field(default_factory=list)
    whole: int = 0
    slices: dict[str, int] = field(default_factory=dict)
    units: int = 0  # free units of the up nodes (their devices' free shares or thousandths, summed)
    slice_pico: list[int] = field(default_factory=list)  # per node: what its slices leave of the devices holding them, in 1e-12 devices
    pico: int = 0  # that, summed over the up nodes
    made: Capacity | None = None  # the summary of ``rows`` and the totals, until they change
    fixed: list[_Fixed | None] = field(default_factory=list)  # per node: what of its room never changes (``_fixed``)
    pack: Callable[..., bytes] = field(init=False, repr=False)  # a key of a room's figures: 6 and the profiles' counts

    def __post_init__(self) -> None:
        self.pack = struct.Struct(">" + "Q" * (6 + len(self.profiles))).pack
        self.slices = {name: 0 for name in self.profiles}

    def start(self, rooms: Sequence[NodeRoom | None]) -> None:
        """Count every node's room afresh (``rooms``: each node's, as ``_node_room`` says it)."""
        counted: dict[RoomKey, NodeRoom] = {}
        for key, room in zip(self.rooms, rooms):
            if key is not None and room is not None:
                seen = counted.get(key)
                counted[key] = room if seen is None else seen.times(seen.count + 1)
        self.keys = sorted(counted)
        self.rows = [counted[key] for key in self.keys]
        self.whole = 0
        self.slices = {name: 0 for name in self.profiles}
        for row in self.rows:
            self._total(row, row.count)
        self.units = sum(self.free_units)
        self.pico = sum(self.slice_pico)
        self.made = None

    def _total(self, row: NodeRoom, step: int) -> None:
        self.whole += row.whole * step
        for name, k in row.slices:
            self.slices[name] += k * step

    def count(self, key: RoomKey, step: int, room: NodeRoom | None = None) -> None:
        """Count ``key`` ``step`` more times (-1: a node left that room; ``room``: the room it
        says, for a key not counted yet)."""
        self.made = None
        keys, rows = self.keys, self.rows
        at = bisect_left(keys, key)
        if at < len(keys) and keys[at] == key:
            row = rows[at]
            self._total(row, step)
            n = row.count + step
            if n:
                rows[at] = row.times(n)
            else:
                del keys[at], rows[at]
        elif room is not None and step > 0:
            self._total(room, step)
            keys.insert(at, key)
            rows.insert(at, room.times(step))
        else:
            raise _nodes.CapacityError("a room left that was never counted")


def _profiles(layout: packing.PoolLayout) -> tuple[str, ...]:
    """The slice profiles a pool's rooms count (a room's ``slices``), in name order."""
    if layout.kind == "fixed":
        return (str(layout.fixed_profile),)
    if layout.kind in packing.PARTITIONED:
        return tuple(sorted(layout.shares))
    return ()


def _node_room(rooms: Rooms, tally: _Tally, i: int) -> tuple[RoomKey | None, NodeRoom | None, int, int]:
    """Node ``i``'s room, its key and the room counted once (None, None when it is not up), its free
    units, and what its slices leave of the devices holding them (in 1e-12 devices: whole
    numbers, summed exactly whatever the order)."""
    fixed = tally.fixed[i] if i < len(tally.fixed) else _fixed(rooms, tally, i)
    if fixed is None:
        return None, None, 0, 0
    cpu_tracked, memory_tracked, sharing, cores, block, switch = fixed
    capacity = rooms.capacity
    whole = capacity.whole_free_list[i]
    units = capacity.free_milli_list[i]
    if cores:
        # A cpu pool's devices are its node's cores (a unit of a grant takes 1000 millicores of
        # the node): no more are free than the node's cores that other pools' grants leave.
        whole = min(whole, capacity.cpu_free_list[i] // 1000)
        units = min(units, whole * capacity.unit)
    cpu = capacity.cpu_free_list[i] if cpu_tracked else NONE
    memory = capacity.memory_free_list[i] if memory_tracked else NONE
    shared = max(0, capacity.shared_max_list[i]) if sharing else 0
    slices: Slices = ()
    if tally.kind == "fixed":
        slices, whole = ((tally.profiles[0], whole),), 0
    elif tally.profiles:
        placeable = packing.summarize(dataclasses.replace(rooms.layout, devices=rooms.nodes[i].devices), _beside(rooms, i))
        slices = tuple((name, placeable.slices[name]) for name in tally.profiles)
    key = tally.pack(whole, cpu, memory, shared, *[n for _, n in slices], block, switch) if slices else tally.pack(whole, cpu, memory, shared, block, switch)
    room = NodeRoom(
        whole, cpu if cpu_tracked else None, memory if memory_tracked else None, shared, slices,
        None if block == NONE else block, None if switch == NONE else switch,
    )  # fmt: skip
    shares = rooms.slice_share.get(i)
    pico = round(sum(max(0.0, 1.0 - v) for v in shares.values()) * 1e12) if shares else 0
    return key, room, units, pico


_Fixed = tuple[bool, bool, bool, bool, int, int]
"""What of a node's room never changes with its holdings: whether its CPU and memory are tracked,
whether the pool shares devices, whether its devices are the node's cores (a ``cpu`` pool's, its
CPU tracked), and its block and switch as a room's key says them."""


def _fixed(rooms: Rooms, tally: _Tally, i: int) -> _Fixed | None:
    """Node ``i``'s ``_Fixed`` (None: not up), kept in ``tally.fixed`` (worked out in node order)."""
    node = rooms.nodes[i]
    fixed: _Fixed | None = None
    if node.usable:
        block = NONE if node.block is None else tally.blocks[node.block]
        switch = NONE if node.switch is None else tally.switches[node.switch]
        cpu_tracked = bool(rooms.capacity.cpu_tracked[i])
        fixed = (cpu_tracked, node.memory_mib is not None, rooms.pool.sharing is not None, cpu_tracked and rooms.pool.accelerator == "cpu", block, switch)
    if i == len(tally.fixed):
        tally.fixed.append(fixed)
    return fixed


def summary(rooms: Rooms, changed: Collection[int] | None = None) -> tuple[Capacity, float]:
    """What the pool can still place, node by node (its up nodes' rooms, identical ones counted
    once), with the pool's totals (``capacity_of``); and its devices free (shares summed, for
    people)."""
    capacity = capacity_of(rooms, changed)
    tally = rooms.tally
    assert tally is not None
    # Devices free: the free units over a device's units, and what the slices leave of the devices holding them.
    return capacity, round(tally.units / rooms.capacity.unit + tally.pico / 1e12, 9)


def capacity_of(rooms: Rooms, changed: Collection[int] | None = None) -> Capacity:
    """What the pool can still place, node by node (its up nodes' rooms, identical ones counted
    once), with the pool's totals.

    ``changed``: the positions of the only nodes whose holdings changed since the last summary of
    these rooms (their rooms alone are worked out again: the cost is theirs, not the pool's); None:
    every node."""
    layout = rooms.layout
    tally = rooms.tally
    if tally is None or changed is None:
        tally = rooms.tally = _Tally(_groups(rooms.nodes, "block"), _groups(rooms.nodes, "switch"), layout.kind, _profiles(layout), [], [])
        made = []
        for i in range(len(rooms.nodes)):
            key, room, units, pico = _node_room(rooms, tally, i)
            tally.rooms.append(key)
            made.append(room)
            tally.free_units.append(units)
            tally.slice_pico.append(pico)
        tally.start(made)
    else:
        stale: set[int] = changed if isinstance(changed, set) else set(changed)  # typed: its items read as ints, not objects
        for i in stale:
            before = tally.rooms[i]
            key, room, units, pico = _node_room(rooms, tally, i)
            tally.units += units - tally.free_units[i]
            tally.free_units[i] = units
            tally.pico += pico - tally.slice_pico[i]
            tally.slice_pico[i] = pico
            if key == before:
                continue
            if before is not None:
                tally.count(before, -1)
            tally.rooms[i] = key
            if key is not None:
                tally.count(key, +1, room)
    if tally.made is None:
        total_slices = {name: n for name, n in tally.slices.items() if n}
        if layout.kind == "fixed":
            total_slices = {str(layout.fixed_profile): total_slices.get(str(layout.fixed_profile), 0)}
        elif layout.kind in packing.PARTITIONED:
            total_slices = {p: total_slices.get(p, 0) for p in layout.shares}
        tally.made = Capacity(tally.whole, total_slices, tuple(tally.rows))
    return tally.made


def _devices(a: NodeAllocation) -> list[int]:
    """The devices an allocation holds any part of."""
    return sorted({h.device for h in a.holdings} | ({a.share.device} if a.share is not None else set()))


def hold_beside(rooms: Rooms, allocations: Sequence[NodeAllocation], *, same_devices: bool, other_mode: bool = False) -> list[int]:
    """Hold on ``rooms`` what ``allocations`` (a grant of another pool that lists some of the same
    nodes) took there, as ``build`` counts it from the records: its CPU and memory always, its
    devices (whole, or its shares) only where they are this pool's devices (``same_devices``), or
    each device it holds any part of whole where they are this pool's devices shared another way
    (``other_mode``). Returns the positions of the nodes it touched (for ``summary(rooms, changed)``)."""
    capacity = rooms.capacity
    touched = []
    for a in allocations:
        i = capacity.index.get(a.node)
        if i is None:
            continue
        if other_mode:
            devices = _devices(a)
            fresh = [d for d in devices if not rooms.foreign.get((i, d))]
            for d in devices:
                rooms.foreign[(i, d)] = rooms.foreign.get((i, d), 0) + 1
            capacity.hold(i, whole=fresh, cpu_milli=a.cpu_milli, memory_mib=a.memory_mib)
            rooms.taken.setdefault(i, set()).update(devices)
            touched.append(i)
            continue
        whole = [h.device for h in a.holdings] if same_devices else []
        shares = {a.share.device: a.share.shares} if same_devices and a.share is not None else None
        capacity.hold(i, whole=whole, shares=shares, cpu_milli=a.cpu_milli, memory_mib=a.memory_mib)
        if same_devices:
            rooms.taken.setdefault(i, set()).update(whole, shares or ())
        touched.append(i)
    return touched


def give_back(
    rooms: Rooms, allocations: Sequence[NodeAllocation], *, devices: bool, slice_share: float = 0.0, other_mode: bool = False
) -> list[int]:
    """Give back on ``rooms`` what ``allocations`` held there (a grant that ended): its CPU and
    memory, and its devices (whole, its shares, or its slices, each ``slice_share`` of a device:
    the device is free again with its last slice) where they are this pool's devices (its own
    grant, or ``hold_beside`` held them: ``devices``); a device held whole for a pool sharing it
    another way (``other_mode``) is free again with the last of its grants there. Returns the
    positions of the nodes it touched."""
    capacity = rooms.capacity
    touched = []
    for a in allocations:
        i = capacity.index.get(a.node)
        if i is None:
            continue
        if other_mode:
            freed = []
            for d in _devices(a):
                left = rooms.foreign.get((i, d), 0) - 1
                if left > 0:
                    rooms.foreign[(i, d)] = left
                else:
                    rooms.foreign.pop((i, d), None)
                    freed.append(d)
            capacity.give_back(a.node, tuple(freed), 0, a.cpu_milli, a.memory_mib)
            _untake(rooms, i, freed)
        elif devices and i in rooms.slices and any(h.profile is not None for h in a.holdings):
            held, per_device = rooms.slices[i], rooms.slice_share.setdefault(i, {})
            for h in a.holdings:
                if h not in held:
                    raise _nodes.CapacityError(f"node {a.node} holds no slice {h.profile}@{h.start} on device {h.device}")
                held.remove(h)
                if any(o.device == h.device for o in held):
                    per_device[h.device] = round(per_device.get(h.device, 0.0) - slice_share, 9)
                else:
                    per_device.pop(h.device, None)
                    capacity.give_back(a.node, (h.device,), 0, 0, 0)
                    rooms.taken.get(i, set()).discard(h.device)
            capacity.give_back(a.node, (), 0, a.cpu_milli, a.memory_mib)
        elif devices and a.share is not None:
            capacity.give_back(a.node, (a.share.device,), a.share.shares, a.cpu_milli, a.memory_mib)
            if capacity.is_free(i, a.share.device):
                rooms.taken.get(i, set()).discard(a.share.device)
        elif devices:
            whole = tuple(h.device for h in a.holdings)
            capacity.give_back(a.node, whole, 0, a.cpu_milli, a.memory_mib)
            _untake(rooms, i, whole)
        else:
            capacity.give_back(a.node, (), 0, a.cpu_milli, a.memory_mib)
        touched.append(i)
    return touched


def _take(rooms: Rooms, i: int, devices: Iterable[int]) -> None:
    """Node ``i``'s ``devices`` are taken (added one by one, as ``_untake`` discards them)."""
    taken = rooms.taken.get(i)
    if taken is None:
        taken = rooms.taken[i] = set()
    for d in devices:
        taken.add(d)


def _untake(rooms: Rooms, i: int, devices: Iterable[int]) -> None:
    """Node ``i``'s ``devices`` are no longer taken (a set's discard per device: cheaper than a
    method call on it for the few devices of a grant)."""
    taken = rooms.taken.get(i)
    if taken is not None:
        for d in devices:
            taken.discard(d)


def _beside(rooms: Rooms, i: int) -> list[Holding]:
    """What a slice on node ``i`` is laid out beside: its slices, and its devices taken whole."""
    slice_devices = {h.device for h in rooms.slices.get(i, ())}
    return [*rooms.slices.get(i, ()), *(Holding(d) for d in sorted(rooms.taken.get(i, set()) - slice_devices))]


def choose(
    rooms: Rooms, grant: Grant, workload: Workload, *, packer: str = DEFAULT_PACKER, chooser: _nodes.Packer | None = None
) -> tuple[NodeAllocation, ...] | None:
    """Where ``grant`` goes, node by node (a gang: one allocation per node, all or nothing), and
    hold it in ``rooms``; None when it does not fit (nothing held). ``chooser``: the packer called
    ``packer`` already made (with the workload it expects), else one is made here."""
    layout = rooms.layout
    if grant.profile is not None and layout.kind in packing.PARTITIONED:
        return _choose_slice(rooms, grant)
    capacity = rooms.capacity
    request = _request(grant)
    if chooser is None:
        chooser = rooms.chooser() if packer == DEFAULT_PACKER else packer_named(packer)
    for among in _together(rooms, grant, workload):
        granted = capacity.place(request, chooser, among)
        if granted is not None:
            break
    else:
        return None
    out = []
    for g in granted:
        i = capacity.index[g.node]
        _take(rooms, i, g.devices)
        if g.share_milli:
            out.append(NodeAllocation(g.node, (), DeviceShare(g.devices[0], g.share_milli), g.cpu_milli, g.memory_mib))
        else:
            out.append(NodeAllocation(g.node, _holdings(g.devices, layout.fixed_profile if layout.kind == "fixed" else None), None, g.cpu_milli, g.memory_mib))
    return tuple(out)


def node_score(rooms: Rooms, grant: Grant, chooser: _nodes.Packer) -> tuple[float, str] | None:
    """What ``chooser`` scores the node ``choose`` would take first for ``grant`` (higher is
    better), and that node's name, to compare it with other pools' best nodes; None where the
    grant is not placed by the packer alone (a gang, a slice laid out by ``packing``) or no node
    has room."""
    if grant.nodes > 1 or (grant.profile is not None and rooms.layout.kind in packing.PARTITIONED):
        return None
    request = _request(grant)
    feasible = rooms.capacity.feasible(request)
    if feasible.size == 0:
        return None
    scores = chooser.scores(rooms.capacity, request, feasible)
    best = int(scores.argmax())
    return float(scores[best]), rooms.capacity.nodes[int(feasible[best])].name


def best_tied(candidates: Sequence[tuple[Rooms | None, Grant, _nodes.Packer | None]], order: Mapping[str, int] | None = None) -> int:
    """Which of pools that tie under the objective (in name order: their nodes, what each gives
    and its packer; no nodes: None) takes the work: the one whose best node the packer scores
    highest. On equal scores the node earlier in ``order`` (the fleet's node order, by name: as
    one packer over every node breaks ties, a node not in it after those in it), else the first
    candidate, as nodes of one pool tie to the first in its order. A pool whose grant is not
    scored (``node_score``: no nodes, a gang, a slice) is taken only when none is scored: then
    the first."""
    best, top = 0, (-math.inf, -math.inf)
    last = len(order) if order is not None else 0
    for at, (room, grant, chooser) in enumerate(candidates):
        scored = None if room is None or chooser is None else node_score(room, grant, chooser)
        if scored is None:
            continue
        key = (scored[0], -(order.get(scored[1], last) if order is not None else 0))
        if key > top:
            best, top = at, key
    return best


class OnNodes:
    """A packer choosing a pool's nodes by the nodes' whole state (``nodes``: a capacity of them
    holding every grant, whichever pool made it; ``whole_nodes``). A pool whose devices are the
    nodes' cores (a CPU pool over device nodes) sees no device in its own rooms, so its packer
    would score CPU-only work blind to the devices that CPU feeds. Scored here as the node sees the
    request (its CPU and memory, no device), as one packer over every node scores it; the devices
    (the pool's cores) are chosen on the pool's own rooms."""

    def __init__(self, packer: _nodes.Packer, nodes: _nodes.NodeCapacity) -> None:
        self.packer = packer
        self.name = packer.name
        self.nodes = nodes
        # A capacity's nodes' positions in ``nodes``, as an array and as a list (made on first use).
        self._positions: tuple[_nodes.NodeCapacity, _nodes.IntArray, list[int]] | None = None

    def _positions_of(self, capacity: _nodes.NodeCapacity) -> tuple[_nodes.NodeCapacity, _nodes.IntArray, list[int]]:
        if self._positions is None or self._positions[0] is not capacity:
            at = self.nodes.index
            listed = [at[n.name] for n in capacity.nodes]
            self._positions = (capacity, np.array(listed, dtype=np.int64), listed)
        return self._positions

    def scores(self, capacity: _nodes.NodeCapacity, request: _nodes.NodeRequest, feasible: _nodes.IntArray) -> _nodes.IntArray | _nodes.FloatArray:
        asked = _request_of(None, 0, request.cpu_milli, request.memory_mib, 1)  # as the node sees it: no device
        return self.packer.scores(self.nodes, asked, self._positions_of(capacity)[1][feasible])

    def best(self, capacity: _nodes.NodeCapacity, request: _nodes.NodeRequest, nodes: list[int]) -> int | None:
        at = self._positions_of(capacity)[2]
        return self.packer.best(self.nodes, _request_of(None, 0, request.cpu_milli, request.memory_mib, 1), [at[i] for i in nodes])

    def devices(self, capacity: _nodes.NodeCapacity, node: int, request: _nodes.NodeRequest) -> tuple[int, ...]:
        return self.packer.devices(capacity, node, request)


def whole_nodes(rooms: Rooms, beside: Sequence[Rooms]) -> _nodes.NodeCapacity:
    """``rooms``' nodes whole: each node's devices as the first of ``beside`` listing it holds
    them (the rooms of the device pools sharing its nodes: devices held whole or in another mode
    taken, shares as thousandths of the device), its CPU and memory as ``rooms`` holds them (every
    pool's grants on the node are held there). A node no pool of ``beside`` lists has no device.
    What ``OnNodes`` scores a CPU pool's nodes on where the nodes are listed by device pools."""
    own = rooms.capacity
    listed: list[tuple[_nodes.NodeCapacity, int] | None] = []
    nodes = []
    for n in own.nodes:
        found = next(((b.capacity, b.capacity.index[n.name]) for b in beside if n.name in b.capacity.index), None)
        listed.append(found)
        device = found[0].nodes[found[1]] if found is not None else None
        nodes.append(_nodes.Node(n.name, device.devices if device else 0, device.model if device else None, n.cpu_milli, n.memory_mib, n.state, n.labels))
    out = _nodes.NodeCapacity(nodes)
    for i, found in enumerate(listed):
        cpu = 0 if not own.cpu_tracked[i] else int(own.cpu_total[i] - own.cpu_free[i])
        memory = 0 if own.memory_total[i] == _nodes.UNTRACKED else int(own.memory_total[i] - own.memory_free[i])
        whole: list[int] = []
        shares: dict[int, int] = {}
        if found is not None:
            capacity, j = found
            shared = capacity.shared_free(j)
            for d in range(int(capacity.devices[j])):
                if d in shared:
                    shares[d] = (capacity.unit - shared[d]) * _nodes.MILLI // capacity.unit
                elif not capacity.is_free(j, d):
                    whole.append(d)
        if whole or shares or cpu or memory:
            out.hold(i, whole=whole, shares=shares, cpu_milli=cpu, memory_mib=memory)
    return out


# Requests and holdings are immutable and asked alike again and again (a pool's grants come in a
# few shapes, on a few device indices): each is made once and kept, a bounded number of them.
_KEPT = 4096
_requests: dict[tuple[int | None, int, int, int, int], _nodes.NodeRequest] = {}
_kept_holdings: dict[tuple[tuple[int, ...], str | None], tuple[Holding, ...]] = {}


def _request(grant: Grant) -> _nodes.NodeRequest:
    """What ``grant`` asks of each node, as the node packer takes it (kept with its asks:
    ``selection.asked``, by the grant's identity)."""
    a = asked(grant)
    if a.request is None:
        a.request = _request_of(a.shares, a.units, a.cpu_milli, a.memory_mib, a.nodes)
    return a.request


def _request_of(shares: int | None, units: int, cpu_milli: int, memory_mib: int, nodes: int) -> _nodes.NodeRequest:
    """A node request (``shares`` of one device, else ``units`` whole devices; CPU and memory; on
    ``nodes`` nodes), made once."""
    key = (shares, units, cpu_milli, memory_mib, nodes)
    request = _requests.get(key)
    if request is None:
        if shares is not None:
            request = _nodes.NodeRequest(share_milli=shares, cpu_milli=cpu_milli, memory_mib=memory_mib, nodes=nodes)
        else:
            request = _nodes.NodeRequest(devices=units, cpu_milli=cpu_milli, memory_mib=memory_mib, nodes=nodes)
        if len(_requests) >= _KEPT:
            _requests.clear()
        _requests[key] = request
    return request


def _holdings(devices: tuple[int, ...], profile: str | None) -> tuple[Holding, ...]:
    """Devices held whole (each of ``profile``, a pool of fixed slices; else None)."""
    key = (devices, profile)
    held = _kept_holdings.get(key)
    if held is None:
        held = tuple(Holding(d, profile) for d in devices)
        if len(_kept_holdings) >= _KEPT:
            _kept_holdings.clear()
        _kept_holdings[key] = held
    return held


def _together(rooms: Rooms, grant: Grant, workload: Workload) -> list[_nodes.BoolArray | None]:
    """The sets of nodes a gang may be placed within, in the order tried: each block (or switch)
    by label when its topology is required; those, then any nodes, when it is preferred."""
    if workload.topology is None or grant.nodes < 2:
        return [None]
    level = "block" if workload.topology == "same-block" else "switch"
    labels = [getattr(n, level) for n in rooms.nodes]
    masks: list[_nodes.BoolArray | None] = [np.array([label == group for label in labels], dtype=np.bool_) for group in sorted({v for v in labels if v is not None})]
    return masks if grant.topology is not None else [*masks, None]


def _choose_slice(rooms: Rooms, grant: Grant) -> tuple[NodeAllocation, ...] | None:
    """A slice on the first up node with room for it beside its CPU and memory ask, nodes already
    holding slices first."""
    capacity, layout = rooms.capacity, rooms.layout
    order = sorted(range(len(rooms.nodes)), key=lambda i: (not rooms.slices.get(i), i))
    for i in order:
        node = rooms.nodes[i]
        if not node.usable or capacity.cpu_free[i] < grant.cpu_milli or capacity.memory_free[i] < grant.memory_mib:
            continue
        chosen = packing.choose(dataclasses.replace(layout, devices=node.devices), _beside(rooms, i), grant.profile, grant.units)
        if chosen is None:
            continue
        h = chosen[0]
        rooms.slices.setdefault(i, []).append(h)
        rooms.slice_share.setdefault(i, {})[h.device] = rooms.slice_share.get(i, {}).get(h.device, 0.0) + grant.share
        rooms.taken.setdefault(i, set()).add(h.device)
        capacity.hold(i, whole=[h.device], cpu_milli=grant.cpu_milli, memory_mib=grant.memory_mib)
        return (NodeAllocation(node.name, chosen, None, grant.cpu_milli, grant.memory_mib),)
    return None


def details(rooms: Rooms) -> tuple[NodeDetail, ...]:
    """Each node of the pool with what is held on it, for ``exa hardware pool NAME``."""
    capacity = rooms.capacity
    out = []
    for i, node in enumerate(rooms.nodes):
        shared = dict(capacity.shared_free(i))
        slices: dict[int, list[Holding]] = {}
        for h in rooms.slices.get(i, ()):
            slices.setdefault(h.device, []).append(h)
        taken = rooms.taken.get(i, set()) - set(shared) - set(slices)
        # Another pool's grant on a device is named by its pool: "device 1: held by mps8".
        theirs = {d: rooms.others[(i, d)] for d in taken if (i, d) in rooms.others}
        whole = sorted(taken - set(theirs))
        # "devices 0-1 whole", "device 3 whole": the indices of the devices held, never a count.
        parts = [f"device{'s' if len(whole) > 1 else ''} {_ranges(whole)} whole"] if whole else []
        # Devices the same pools hold, together: "devices 0-3: held by batch".
        by_holders: dict[tuple[str, ...], list[int]] = {}
        for device in sorted(theirs):
            by_holders.setdefault(tuple(sorted(theirs[device])), []).append(device)
        for device in sorted(set(shared) | set(slices) | set(theirs)):
            if device in theirs:
                holders = tuple(sorted(theirs[device]))
                same = by_holders[holders]
                if same[0] == device:
                    parts.append(f"device{'s' if len(same) > 1 else ''} {_ranges(same)}: held by {', '.join(holders)}")
            elif device in slices:
                held = sorted(slices[device], key=lambda h: (h.start or 0, h.profile or ""))
                parts.append(f"device {device}: " + ", ".join(f"{h.profile}@{h.start}" if h.start is not None else str(h.profile) for h in held))
            else:
                beside = rooms.others.get((i, device))
                parts.append(f"device {device}: {rooms.unit - shared[device]} of {rooms.unit} shares" + (f" (with {', '.join(sorted(beside))})" if beside else ""))
        out.append(
            NodeDetail(
                node.name, node.state, node.devices, int(capacity.whole_free[i]), ", ".join(parts) or "nothing held",
                node.cpu_milli, int(capacity.cpu_free[i]) if node.cpu_milli is not None else None,
                node.memory_mib, int(capacity.memory_free[i]) if node.memory_mib is not None else None,
                node.block, node.switch,
            )  # fmt: skip
        )
    return tuple(out)


def _ranges(indices: Sequence[int]) -> str:
    """``0-2, 5``: sorted indices as runs."""
    runs: list[list[int]] = []
    for i in indices:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
