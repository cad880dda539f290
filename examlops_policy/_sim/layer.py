"""A replay through the placement path itself: the policy's verdicts, the core's selection and the
node packer ``place`` uses, over a fleet held in memory.

``LayerFleet`` is a trace's fleet as pools (``fleet_pools``): one pool of nodes per device model
(node by node, devices shared in thousandths, so that a share of a GPU is a share as the trace
asks), and one ``cpu`` pool listing every node, whose devices are the node's cores: CPU-only work
may use any node's host CPU and memory, which it shares with the device pools listing the node
(``state.sharing_of``: pools listing a node by the same name share its CPU and memory). A trace
may give its own pools (the generic format).

``LayerPlacer`` places one request as ``Hardware.place`` does, without a store:

1. the request becomes a workload (``workload_of``: accelerator, count or fraction, CPU, memory,
   the models that will do: the policy's ``models`` rule);
2. ``Engine.prepare`` judges it over the fleet: the real OPA's verdicts, asked once per workload
   signature and pool shape under the policy revision confirmed when the replay starts (confirmed
   again when it ends: a replay decides under one snapshot of the policy);
3. ``selection.select`` picks the pool and its grant over every pool's capacity summary (among
   pools that tie under the objective, ``rooms.best_tied``: the one holding the packer's best
   node, as ``place`` chooses; equal scores go to the node earlier in the fleet's order where the
   replay gives one, ``order``: the trace's node order, as one packer over every node breaks
   them);
4. ``rooms.choose`` picks the node(s) and devices with the packer ``place`` uses (a CPU pool over
   device nodes scores its nodes by their whole state, ``rooms.OnNodes``: here the capacity of
   every node below, which ``place`` builds as ``rooms.whole_nodes``); what the grant
   holds is held on the pools sharing those nodes too (``rooms.hold_beside``: as ``rooms.build``
   counts the records), and each changed pool's summary is worked out again for the nodes that
   changed (``rooms.capacity_of(rooms, changed)``) when it is next read (``Summaries``).

Nothing is written and nothing is audited. Per placement the cost is selection and the packer.
A ``NodeCapacity`` over every node (``capacity``) holds every grant too: it checks that no device,
share, core or MiB is held twice across pools (it raises otherwise) and is what the fragmentation
figure reads. Where the fleet has one device pool listing every node (a trace of one device model,
or grouped as one), that pool's own capacity is it: every grant reaches it already (its own as the
packer places them, the ``cpu`` pool's CPU and memory as ``hold_beside`` holds them), so no second
copy of each grant is written.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime, timezone
from typing import ClassVar, overload

from examlops_policy import _nodes
from examlops_policy._core import rooms as _rooms
from examlops_policy._core.engine import Engine
from examlops_policy._core import codec
from examlops_policy._core.selection import Judged, priced, select, summary
from examlops_policy._core.waiting import Starts
from examlops_policy._core.state import Capacities, sharing_of
from examlops_policy._record import Record
from examlops_policy._node_packers import DEFAULT_PACKER, ExpectedWorkload, packer_named
from examlops_policy.errors import SpecError, StateError
from examlops_policy.estimates import start_now
from examlops_policy.model import Capacity, Grant, Node, NodeAllocation, Pool, Workload

REPLAY_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
"""What arrival 0 stands for in a trace that does not say (its ``start``): a replay of such a trace
judges no deadline (a trace with one is refused), and max_wait counts from each arrival."""

SIGNATURE = "workload"
"""The name a workload is judged under: the policy is asked once per signature, whatever its name."""

SEEN_HELD = 4096
"""Requests ``LayerPlacer.judged`` knows by identity (a trace's few shapes, asked again and again)."""

CPU_POOL = "cpu"
"""The name of the pool of every node's host CPU and memory (``fleet_pools``)."""

SHARES = _nodes.MILLI  # a device shared in thousandths: a share is what the trace asks, exactly


def pool_name(model: str) -> str:
    """The pool of a device model's nodes: the model in lower case (``G2`` -> ``g2``)."""
    return model.lower()


GROUPINGS = ("model", "one")
"""How a trace's device nodes become pools: one pool per device model (the policy's ``models``
rule can then tell them apart), or one pool of them all naming no model (a fleet whose work never
names a model: the traced cluster's own scheduler sees one pool)."""

ONE_POOL = "gpu"


def fleet_pools(
    nodes: Sequence[_nodes.Node], *, region: str, target: str = "hpc", accelerator: str = "nvidia", grouping: str = "model"
) -> list[Pool]:
    """A trace's nodes as pools, in the order given (the order that breaks ties): a pool of nodes
    per device model (``grouping`` ``one``: one pool ``gpu`` of every device node, naming no
    model), devices shared in thousandths; and the ``cpu`` pool listing every node with CPU, its
    cores as devices."""
    if grouping not in GROUPINGS:
        raise SpecError(f"unknown grouping {grouping!r}; known: {', '.join(GROUPINGS)}", field="pools")
    by_model: dict[str | None, list[_nodes.Node]] = {}
    for n in nodes:
        if n.devices and n.model is not None:
            by_model.setdefault(n.model if grouping == "model" else None, []).append(n)
    pools = []
    for model, listed in by_model.items():
        pools.append(
            Pool(
                pool_name(model) if model is not None else ONE_POOL, target, accelerator, sum(n.devices for n in listed), region,
                model=model.lower() if model is not None else None, nodes=tuple(_node(n, n.devices) for n in listed), sharing="time-slice",
                shares_per_device=SHARES,
            )  # fmt: skip
        )
    hosts = [n for n in nodes if n.cpu_milli is not None and n.cpu_milli >= _nodes.MILLI]
    if hosts:
        cores = [max(1, int(n.cpu_milli or 0) // _nodes.MILLI) for n in hosts]
        pools.append(Pool(CPU_POOL, target, "cpu", sum(cores), region, nodes=tuple(_node(n, c) for n, c in zip(hosts, cores))))
    return pools


def _node(n: _nodes.Node, devices: int) -> Node:
    cpu = None if n.cpu_milli is None else n.cpu_milli / _nodes.MILLI
    return Node(n.name, devices, cpu, n.memory_mib)


def workload_of(request: _nodes.NodeRequest, name: str = "pod", *, accelerator: str = "nvidia") -> Workload:
    """The workload a trace's request is: CPU only (one of the ``cpu`` pool's cores as its device,
    beside the CPU and memory it asks), a share of one device (a fraction), or whole devices; the
    models that will do; on ``nodes`` nodes."""
    cpu = request.cpu_milli / _nodes.MILLI if request.cpu_milli else None
    memory = request.memory_mib or None
    models = tuple(sorted(m.lower() for m in request.models)) if request.models else ()
    if request.kind == "cpu":
        return Workload(name, "cpu", cpu=cpu, memory=memory, nodes=request.nodes)
    if request.kind == "share":
        return Workload(name, accelerator, fraction=request.share_milli / _nodes.MILLI, cpu=cpu, memory=memory, models=models, nodes=request.nodes)
    return Workload(name, accelerator, count=request.devices, cpu=cpu, memory=memory, models=models, nodes=request.nodes)


class Summaries(Sequence[Capacity]):
    """Each pool's capacity summary, worked out when it is read: a change marks the nodes it
    touched (``changed``), and the next read of that pool's summary works out theirs alone
    (``rooms.capacity_of(rooms, changed)``). A pool no request looks at between two changes costs
    nothing more for the second: the cost of a change is the nodes it touched, once."""

    def __init__(self, rooms: Sequence[_rooms.Rooms]) -> None:
        self._rooms = rooms
        self._summaries = [_rooms.capacity_of(r) for r in rooms]
        self._changed: list[set[int]] = [set() for _ in rooms]

    def changed(self, pool: int, nodes: Sequence[int]) -> None:
        """Pool ``pool``'s nodes at ``nodes`` changed since its summary."""
        changed = self._changed[pool]
        for i in nodes:  # one by one: a set's add, not a method call on it
            changed.add(i)

    @overload
    def __getitem__(self, index: int) -> Capacity: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Capacity]: ...

    def __getitem__(self, index: int | slice) -> Capacity | Sequence[Capacity]:
        if isinstance(index, slice):
            return [self[i] for i in range(len(self._rooms))[index]]
        changed = self._changed[index]
        if changed:
            self._summaries[index] = _rooms.capacity_of(self._rooms[index], changed)
            changed.clear()
        return self._summaries[index]

    def __len__(self) -> int:
        return len(self._rooms)

    def __iter__(self) -> Iterator[Capacity]:
        return (self[i] for i in range(len(self._rooms)))


class Placed(Record):
    """Where one request went: the pool and what it holds node by node (``allocations``), and what
    the fleet-wide capacity holds of it (``held``, derived from them; empty where that capacity
    is the pool's own, which holds the allocations themselves)."""

    FIELDS: ClassVar[tuple[str, ...]] = ("pool", "grant", "allocations", "held")

    pool: str
    grant: Grant
    allocations: tuple[NodeAllocation, ...]
    held: tuple[_nodes.NodeGrant, ...]

    def __init__(self, pool: str, grant: Grant, allocations: tuple[NodeAllocation, ...], held: tuple[_nodes.NodeGrant, ...] = ()) -> None:
        self.pool = pool
        self.grant = grant
        self.allocations = allocations
        self.held = held


class LayerPlacer:
    """Places requests through the policy's verdicts, the core's selection and the node packer,
    over ``pools`` held in memory (see the module's docstring). ``expected``: the workload the
    packer expects on each pool (a replay: the trace's own), by pool name, or one for all."""

    def __init__(
        self,
        engine: Engine,
        confirmed: tuple[str, str],
        pools: Sequence[Pool],
        *,
        packer: str = DEFAULT_PACKER,
        expected: ExpectedWorkload | Mapping[str, ExpectedWorkload] | None = None,
        seed: int = 0,
        workload: Callable[[_nodes.NodeRequest], Workload] = workload_of,
        order: Sequence[str] | None = None,
    ) -> None:
        self.engine = engine
        self.confirmed = confirmed
        self.workload = workload
        ordered = sorted(pools, key=lambda p: p.name)
        self.pools = ordered
        capacities = Capacities(engine.tables)
        sharing = sharing_of(ordered)
        self.rooms = [capacities.rooms_of(p, [], states=sharing.states(p.name)) for p in ordered]
        self.summaries = Summaries(self.rooms)
        index = self._at = {p.name: i for i, p in enumerate(ordered)}
        # Per pool: the pools sharing its nodes, whether their devices there are its devices, and
        # whether they are its devices shared another way.
        self.sharers = [
            tuple((index[other], other in sharing.devices(p.name), other in sharing.other_mode(p.name)) for other in sharing.group(p.name)[1:])
            for p in ordered
        ]  # fmt: skip
        made = [packer_named(packer, expected=expected.get(p.name) if isinstance(expected, Mapping) else expected, seed=seed) for p in ordered]
        self.packer = packer
        self.fleet_rev = codec.fleet_revision(codec.fleet_document(priced(ordered, engine.tables)))
        self._judged: dict[object, tuple[Workload, Judged]] = {}
        self._seen: dict[int, tuple[object, tuple[Workload, Judged]]] = {}  # by the request's identity (``judged``)
        # Every node once: its devices from the device pools listing it, its CPU and memory.
        hosts: dict[str, Node] = {}
        devices: dict[str, tuple[int, str | None]] = {}
        for p in ordered:
            for n in p.node_list():
                hosts.setdefault(n.name, n)
                if p.accelerator != "cpu":
                    seen = devices.setdefault(n.name, (n.devices, p.model))
                    if seen != (n.devices, p.model):
                        raise SpecError(
                            f"node {n.name!r} is listed with {seen[0]} {seen[1] or 'unnamed'} devices and with {n.devices} {p.model or 'unnamed'} "
                            "devices; a replay holds one kind of device per node",
                            field="nodes",
                        )  # fmt: skip
        nodes = [_nodes.Node(name, *devices.get(name, (0, None)), n.cpu_milli, n.memory_mib) for name, n in hosts.items()]
        self._capacity = self._one_device_pool(nodes) or _nodes.NodeCapacity(nodes)
        self._copy = all(r.capacity is not self._capacity for r in self.rooms)  # a copy of every grant kept beside the pools'
        # A CPU pool over device nodes chooses its nodes by their whole state (``joint.packer_on``).
        self.packers: list[_nodes.Packer] = [
            _rooms.OnNodes(chooser, self._capacity) if p.accelerator == "cpu" and any(n.name in devices for n in p.node_list()) else chooser
            for p, chooser in zip(ordered, made)
        ]  # fmt: skip
        # The fleet's node order, by name: equal scores of tied pools' best nodes go to the earlier
        # node (None: to the first pool by name, as ``place`` breaks them).
        ranks: dict[str, int] = {}
        for name in order or ():
            ranks.setdefault(name, len(ranks))
        self.order = None if order is None else ranks
        self.judged_new = 0  # workload signatures judged (an OPA query each at most)
        self.refused: dict[str, int] = {}  # requests the policy refused outright, by reason code
        self._failed: tuple[Workload, Judged, str | None, str | None] | None = None  # the last request that failed
        self._starts: Starts | None = None  # the start estimates it was judged with

    def _one_device_pool(self, nodes: Sequence[_nodes.Node]) -> _nodes.NodeCapacity | None:
        """The capacity of the fleet's one device pool where it is the fleet's: it lists every
        node, in the fleet's order, counting a device in thousandths, and the other pools listing
        its nodes hold only their CPU and memory there. Every grant then reaches it (its own as
        the packer places them, the others' as ``hold_beside`` holds them), so it is the
        fleet-wide capacity and no copy of it is kept. None otherwise."""
        devices = [i for i, p in enumerate(self.pools) if p.accelerator != "cpu"]
        if len(devices) != 1:
            return None
        i = devices[0]
        capacity = self.rooms[i].capacity
        facts = [(n.name, n.devices, n.model, n.cpu_milli, n.memory_mib, n.state) for n in capacity.nodes]
        if capacity.unit != _nodes.MILLI or facts != [(n.name, n.devices, n.model, n.cpu_milli, n.memory_mib, n.state) for n in nodes]:
            return None
        beside = all(not same and not other_mode for j in range(len(self.pools)) for k, same, other_mode in self.sharers[j] if k == i)
        return capacity if beside else None

    @property
    def capacity(self) -> _nodes.NodeCapacity:
        """Every node, holding every grant (what the fragmentation figure reads)."""
        return self._capacity

    def judged(self, request: _nodes.NodeRequest | Workload) -> tuple[Workload, Judged]:
        """The request's workload and the fleet judged for it (OPA asked once per signature; a
        workload's name is not part of it)."""
        seen = self._seen.get(id(request))
        if seen is not None and seen[0] is request:  # the same object again (a trace's shape): nothing to hash
            return seen[1]
        key: object = request
        if isinstance(request, Workload) and request.name != SIGNATURE:
            key = dataclasses.replace(request, name=SIGNATURE)
        found = self._judged.get(key)
        if found is None:
            workload = request if isinstance(request, Workload) else self.workload(request)
            prepared = self.engine.prepare(workload, self.pools, fleet_rev=self.fleet_rev, confirmed=self.confirmed)
            found = self._judged[key] = (workload, prepared.judged)
            self.judged_new += 1
        if len(self._seen) >= SEEN_HELD:
            self._seen.clear()
        self._seen[id(request)] = (request, found)  # the request held: its id is not reused while kept
        return found

    def decide(
        self, request: _nodes.NodeRequest | Workload, *, name: str | None = None, at: datetime | Callable[[], datetime] | None = None
    ) -> Placed | None:
        """Place ``request`` (a trace's request, or a workload): the pool selection chooses and the
        node(s) its packer chooses, held; None when no pool is admitted with room. ``name``: the
        workload's own name, where ``request`` is its shape (``why_failed`` names it). ``at``: the
        replay's instant (or what gives it, asked only for a workload whose wait the policy
        limits), which a workload's max_wait and deadline are judged at (the wait check
        ``place`` makes): the replay starts work at once or not at all, so each pool with room
        starts it then (a ``now`` estimate, the replay's own capacity being the whole fleet)."""
        workload, judged = self.judged(request)
        if isinstance(request, Workload):
            workload = request  # its own name (the judged one may be another's of the same signature)
        starts = self.starts(judged, at)
        outcome = select(judged, self.summaries, starts)
        if outcome.chosen is None:
            if name is not None and name != workload.name:
                workload = dataclasses.replace(workload, name=name)
            rejection = judged.workload.rejection
            if rejection is not None:  # refused whatever the capacity: counted by its reason
                self.refused[rejection.code] = self.refused.get(rejection.code, 0) + 1
                self._failed = (workload, judged, rejection.code, rejection.message)
            else:
                blocked = outcome.burst.reason if outcome.burst.verdict == "blocked" else None
                self._failed = (workload, judged, None if blocked is None else blocked.code, None if blocked is None else blocked.message)
            self._starts = starts
            return None
        i = outcome.chosen
        grant = outcome.grant or judged.verdict(i).grant
        if outcome.tied:  # the pools that tie: the packer's best node among all of them decides
            i, grant = outcome.tied[_rooms.best_tied([(self.rooms[j], g, self.packers[j]) for j, g in outcome.tied], self.order)]
        room = self.rooms[i]
        allocations = _rooms.choose(room, grant, workload, chooser=self.packers[i])
        if allocations is None:
            raise StateError(f"pool {self.pools[i].name!r}: its capacity summary says the grant fits but no node has room")
        self.summaries.changed(i, [room.capacity.index[a.node] for a in allocations])
        for j, same, other_mode in self.sharers[i]:
            self.summaries.changed(j, _rooms.hold_beside(self.rooms[j], allocations, same_devices=same, other_mode=other_mode))
        pool = self.pools[i]
        if not self._copy:  # the pools' own capacity is the fleet's: it holds the grant already
            return Placed(pool.name, grant, allocations)
        held = _held(allocations, pool, grant)
        for g in held:
            self._capacity.allocate(g)
        return Placed(pool.name, grant, allocations, held)

    def starts(self, judged: Judged, at: datetime | Callable[[], datetime] | None) -> Starts | None:
        """The start estimates a workload with max_wait or a deadline is judged with at ``at`` (the
        replay's instant; None: REPLAY_EPOCH): every pool starts it then if it has room (source
        ``now``: the replay's capacity is the whole fleet). None for a workload without limits."""
        if not judged.workload.wait.any:
            return None
        moment = REPLAY_EPOCH if at is None else at if isinstance(at, datetime) else at()
        return Starts(moment, {p.name: start_now(p.name, moment, "the replay's own capacity") for p in self.pools})

    def why_failed(self) -> tuple[str, str]:
        """(code, message) of the last request ``decide`` could not place, as a placement's
        rejection says it (the policy's reason, or how many pools each reason stopped, in the
        policy's words, against the capacity when it was asked). Worked out only when asked."""
        if self._failed is None:
            raise StateError("no request has failed")
        workload, judged, code, message = self._failed
        if code is not None and message is not None:
            return code, message
        return summary(judged, self.summaries, workload, self._starts)

    def place(self, request: _nodes.NodeRequest) -> tuple[_nodes.NodeGrant, ...] | None:
        """``decide``, as the replay harness reads it: one grant per node."""
        placed = self.decide(request)
        if placed is None:
            return None
        return placed.held or _held(placed.allocations, self.pools[self._at[placed.pool]], placed.grant)

    def release(self, placed: Placed) -> None:
        """Give back what ``placed`` holds (work that ended), on its pool and the pools sharing its nodes."""
        i = self._at[placed.pool]
        self.summaries.changed(i, _rooms.give_back(self.rooms[i], placed.allocations, devices=True, slice_share=placed.grant.share))
        for j, same, other_mode in self.sharers[i]:
            self.summaries.changed(j, _rooms.give_back(self.rooms[j], placed.allocations, devices=same, other_mode=other_mode))
        if self._copy:
            for g in placed.held or _held(placed.allocations, self.pools[i], placed.grant):
                self._capacity.release(g)


def _held(allocations: tuple[NodeAllocation, ...], pool: Pool, grant: Grant) -> tuple[_nodes.NodeGrant, ...]:
    """What a grant's allocations are as the fleet-wide capacity holds them, node by node."""
    return _node_grants(allocations[0], pool, grant) if len(allocations) == 1 else tuple(g for a in allocations for g in _node_grants(a, pool, grant))


def _node_grants(a: NodeAllocation, pool: Pool, grant: Grant) -> tuple[_nodes.NodeGrant, ...]:
    """An allocation as the fleet-wide capacity holds it (a ``cpu`` pool's cores are no devices;
    slices of a partitioned device are shares of it, their thousandths rounded down, one grant per
    device, the node's CPU and memory on the first)."""
    if pool.accelerator == "cpu":
        return (_nodes.NodeGrant(a.node, (), 0, a.cpu_milli, a.memory_mib),)
    if a.share is not None:
        milli = a.share.shares * _nodes.MILLI // (pool.shares_per_device or _nodes.MILLI)
        return (_nodes.NodeGrant(a.node, (a.share.device,), milli, a.cpu_milli, a.memory_mib),)
    if grant.profile is None or not a.holdings:
        return (_nodes.NodeGrant(a.node, tuple(h.device for h in a.holdings), 0, a.cpu_milli, a.memory_mib),)
    per_device: dict[int, int] = {}
    for h in a.holdings:
        per_device[h.device] = per_device.get(h.device, 0) + int(grant.share * _nodes.MILLI)
    return tuple(
        _nodes.NodeGrant(a.node, (device,), milli, a.cpu_milli if k == 0 else 0, a.memory_mib if k == 0 else 0)
        for k, (device, milli) in enumerate(sorted(per_device.items()))
    )


def replace_nodes(pools: Sequence[Pool], order: Sequence[str]) -> list[Pool]:
    """``pools`` with their nodes in ``order`` (node names; the order that breaks ties)."""
    at = {name: i for i, name in enumerate(order)}
    out = []
    for p in pools:
        if isinstance(p.nodes, tuple):
            p = dataclasses.replace(p, nodes=tuple(sorted(p.nodes, key=lambda n: at.get(n.name, len(at)))))
        out.append(p)
    return out
