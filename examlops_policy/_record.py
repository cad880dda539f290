"""Records the decision path makes by the million (a node's grant, what a grant holds on a node and
its share of a device, a selection's outcome, a replay's placement, a workload's outcome, a pool's
capacity summary and its rows of node rooms): plain classes with an ``__init__`` of their own.

A dataclass's ``__init__`` is written by the ``dataclasses`` module when the class is made and
runs in the interpreter, even in a module compiled by mypyc (``hatch_build.py``): 0.75 µs for a
frozen one of five fields, against 0.04 µs compiled. A record names its fields in ``FIELDS``
(annotated in its body, in the order of its ``__init__``'s parameters) and its ``__init__`` sets
each once. Records compare equal when they are of the same class with equal fields, hash alike,
show their fields and pickle, as a frozen dataclass's do.

They are immutable by use, not by force: nothing assigns a field after ``__init__``. Declared
``Final``, a field would refuse it when compiled, but mypyc (mypy 2.4.1) then keeps a Final field
it read without a reference of its own for the whole expression, and an expression that also
drops the record's last reference (a comprehension over the field, inside an index of it) reads
freed memory: the replay's ties crashed so (``tests/test_whole_nodes.py``, compiled)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from examlops_policy._holding import Holding


class Record:
    """Equality, hash, repr and pickling of a record, from its ``FIELDS`` (the module's docstring)."""

    FIELDS: ClassVar[tuple[str, ...]] = ()

    def values(self) -> tuple[object, ...]:
        """The record's fields, in ``FIELDS`` order."""
        return tuple([getattr(self, name) for name in self.FIELDS])

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, Record)
        return self.values() == other.values()

    def __hash__(self) -> int:
        return hash(self.values())

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.FIELDS)
        return f"{type(self).__name__}({shown})"

    def __reduce__(self) -> tuple[type[Record], tuple[object, ...]]:
        return type(self), self.values()


class NodeRoom(Record):
    """What one node (or ``count`` nodes alike) of a node-tracked pool can still hold: ``whole``
    devices with nothing on them (slices of a pool of fixed slices), ``cpu`` millicores and
    ``memory`` MiB free (None: not tracked), the most free ``shares`` of one device already
    shared (0: none), how many of each slice profile could still be placed (``slices``), and its
    topology groups (``block``, ``switch``: the label's number among the pool's, None: none).
    A row of a pool's capacity summary (``Capacity.nodes``); ``examlops_policy.model`` names it."""

    FIELDS: ClassVar[tuple[str, ...]] = ("whole", "cpu", "memory", "shares", "slices", "block", "switch", "count")

    whole: int
    cpu: int | None
    memory: int | None
    shares: int
    slices: tuple[tuple[str, int], ...]
    block: int | None
    switch: int | None
    count: int

    def __init__(
        self,
        whole: int,
        cpu: int | None = None,
        memory: int | None = None,
        shares: int = 0,
        slices: tuple[tuple[str, int], ...] = (),
        block: int | None = None,
        switch: int | None = None,
        count: int = 1,
    ) -> None:
        self.whole = whole
        self.cpu = cpu
        self.memory = memory
        self.shares = shares
        self.slices = slices
        self.block = block
        self.switch = switch
        self.count = count

    def times(self, count: int) -> NodeRoom:
        """This room, counted ``count`` times."""
        return NodeRoom(self.whole, self.cpu, self.memory, self.shares, self.slices, self.block, self.switch, count)

    def slice_room(self, profile: str) -> int:
        for name, n in self.slices:
            if name == profile:
                return n
        return 0


class Capacity(Record):
    """What a pool can still place: devices with nothing on them (``whole``) and, per slice
    profile, how many could still be placed; for a node-tracked pool also node by node
    (``nodes``: its up nodes' room, identical rows counted once; None for a pool that is one node
    counted as before nodes existed). ``examlops_policy.model`` names it."""

    FIELDS: ClassVar[tuple[str, ...]] = ("whole", "slices", "nodes")

    whole: int
    slices: Mapping[str, int]
    nodes: tuple[NodeRoom, ...] | None

    def __init__(self, whole: int, slices: Mapping[str, int] | None = None, nodes: tuple[NodeRoom, ...] | None = None) -> None:
        self.whole = whole
        self.slices = {} if slices is None else slices
        self.nodes = nodes


class DeviceShare(Record):
    """A share of one device of a shared pool (``Pool.sharing``): ``shares`` of its
    ``shares_per_device``, on the device with index ``device`` on its node. ``examlops_policy.model``
    names it."""

    FIELDS: ClassVar[tuple[str, ...]] = ("device", "shares")

    device: int
    shares: int

    def __init__(self, device: int, shares: int) -> None:
        self.device = device
        self.shares = shares


class NodeAllocation(Record):
    """What a grant holds on one node: whole devices and slices (``holdings``, ``device`` being
    the index on this node), or a ``share`` of one device, and ``cpu_milli`` millicores and
    ``memory_mib`` MiB of the node's own (0: none asked for). A gang holds one per node, alike.
    ``examlops_policy.model`` names it."""

    FIELDS: ClassVar[tuple[str, ...]] = ("node", "holdings", "share", "cpu_milli", "memory_mib")

    node: str
    holdings: tuple[Holding, ...]
    share: DeviceShare | None
    cpu_milli: int
    memory_mib: int

    def __init__(self, node: str, holdings: tuple[Holding, ...] = (), share: DeviceShare | None = None, cpu_milli: int = 0, memory_mib: int = 0) -> None:
        self.node = node
        self.holdings = holdings
        self.share = share
        self.cpu_milli = cpu_milli
        self.memory_mib = memory_mib

    @property
    def devices(self) -> int:
        """Whole devices and slices held on this node (a share counts none)."""
        return len(self.holdings)
