"""Nodes of a pool, what each still has free, and the choice of node(s) and device(s) for a request.

A real scheduler allocates per node: ``--gres=gpu:4`` and a pod's ``nvidia.com/gpu: 4`` must fit on
ONE node, beside the job's CPU and memory. This module holds a pool's nodes as a scheduler sees
them and answers "where does this request go", node by node:

* a ``Node``: name, device count and model, CPU (milli) and memory (MiB) when tracked, state
  (only ``up`` takes new grants), labels (topology, later);
* a ``NodeRequest`` per node: whole devices, or a share of ONE device in milli (time-slicing, MPS,
  Slurm shards), CPU and memory; a gang is ``nodes`` nodes with the same request, all or nothing;
* a ``NodeCapacity``: the free CPU, memory and devices of every node, changed incrementally by
  ``allocate`` and ``release`` (the cost of what changed), and ``choose``/``place``, which ask a
  packer (``examlops_policy._node_packers``) to score the feasible nodes.

Feasibility is exact and the same for every packer: free CPU and free memory cover the request
(memory is checked, never scored), the node's model is one the request accepts, a share needs ONE
device with at least that much free milli, whole devices must be completely free.

Compact at any size: a node's empty devices are a count plus a list of free index ranges, and only
devices holding shares are kept one by one (with a count per free value). A pool without node
information is one node holding all its devices; a node of 1,000,000 devices costs the same per
operation as one of 8. Scoring is vectorised over nodes (numpy): one request against 1,213 nodes
is a few dozen array operations, not a Python loop over nodes.

Ties: among equally scored nodes the earliest in the capacity's node order wins. The order is the
order of the nodes given (production: a fixed order such as by name; the openb replay: a random
permutation fixed once per seed, as the published simulator does). Pure: no I/O, no clock; a random
packer brings its own seeded generator.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Final, Literal, Protocol

import numpy as np
import numpy.typing as npt

from examlops_policy._record import Record
from examlops_policy.quantities import shown
from examlops_policy.errors import SpecError

MILLI: Final = 1000
"""A whole device in milli; a share is 1..999 milli of one device."""

CHANGES_KEPT: Final = 1024
"""A capacity's changes kept for ``NodeCapacity.changed_since`` (at least this many, at most twice)."""

UNTRACKED: Final = 1 << 62
"""Free CPU or memory of a node that does not track it: more than any request."""

LIST_NODES: Final = 256
"""A capacity of at most this many nodes works out ``feasible`` node by node over its Python
lists: below it, numpy's cost per call (a few microseconds an operation) outweighs the work."""

NodeState = Literal["up", "drained", "down"]
NODE_STATES: Final = ("up", "drained", "down")

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class Node:
    """One node of a pool: its devices (count and model), CPU and memory, state and labels.

    ``cpu_milli`` / ``memory_mib`` None: not tracked (never a limit). ``model`` None: no devices or
    an unnamed model (a request naming models never goes there).
    """

    name: str
    devices: int = 0
    model: str | None = None
    cpu_milli: int | None = None
    memory_mib: int | None = None
    state: NodeState = "up"
    labels: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise SpecError("a node needs a non-empty name", field="name")
        _check_count(self.devices, f"node {self.name}", "devices")
        for what, value in (("cpu_milli", self.cpu_milli), ("memory_mib", self.memory_mib)):
            if value is not None:
                _check_count(value, f"node {self.name}", what)
        if self.state not in NODE_STATES:
            raise SpecError(f"state must be one of {', '.join(NODE_STATES)} (got {self.state!r})", source=f"node {self.name}", field="state")


@dataclass(frozen=True)
class NodeRequest:
    """What a workload asks of each node it runs on.

    ``devices``: whole devices (completely free ones) on the node; ``share_milli``: instead, a share
    of ONE device (1..999 milli, or of its shares, time-slicing / MPS / shards; all of them: the
    device is held in its sharing mode); ``cpu_milli``, ``memory_mib``: host
    CPU and memory on the node (0 devices: a CPU-only request). ``models``: the device models the
    request accepts (None: any; only checked when it asks for devices). ``nodes``: a gang of that
    many nodes, each with this request, all or nothing.
    """

    devices: int = 0
    share_milli: int = 0
    cpu_milli: int = 0
    memory_mib: int = 0
    models: frozenset[str] | None = None
    nodes: int = 1

    def __post_init__(self) -> None:
        _check_count(self.devices, "request", "devices")
        _check_count(self.cpu_milli, "request", "cpu_milli")
        _check_count(self.memory_mib, "request", "memory_mib")
        if not isinstance(self.share_milli, int) or isinstance(self.share_milli, bool) or self.share_milli < 0:
            raise SpecError(f"a share is a whole number of a device's units (got {shown(self.share_milli)})", source="request", field="share_milli")
        if self.share_milli and self.devices:
            raise SpecError("ask for whole devices or for a share of one device, not both", source="request", field="share_milli")
        if not isinstance(self.nodes, int) or isinstance(self.nodes, bool) or self.nodes < 1:
            raise SpecError(f"a gang is at least 1 node (got {shown(self.nodes)})", source="request", field="nodes")
        if self.models is not None and not self.models:
            raise SpecError("models, when given, names at least one model", source="request", field="models")

    @property
    def kind(self) -> Literal["cpu", "share", "whole"]:
        """``cpu`` (no devices), ``share`` (part of one device) or ``whole`` (whole devices)."""
        if self.share_milli:
            return "share"
        return "whole" if self.devices else "cpu"

    @property
    def device_milli(self) -> int:
        """Device milli asked per node (a share counts its milli, a whole device 1000)."""
        return self.share_milli or self.devices * MILLI

    @property
    def affinity(self) -> str | None:
        """The kind of grant as the GPU-clustering baseline groups them: ``share``, ``1``, ``2``, ... devices."""
        if self.share_milli:
            return "share"
        return str(self.devices) if self.devices else None


class NodeGrant(Record):
    """What one node gives a request: device indices (a share: one device and its milli), CPU, memory."""

    FIELDS: ClassVar[tuple[str, ...]] = ("node", "devices", "share_milli", "cpu_milli", "memory_mib")

    node: str
    devices: tuple[int, ...]
    share_milli: int
    cpu_milli: int
    memory_mib: int

    def __init__(self, node: str, devices: tuple[int, ...], share_milli: int, cpu_milli: int, memory_mib: int) -> None:
        self.node = node
        self.devices = devices
        self.share_milli = share_milli
        self.cpu_milli = cpu_milli
        self.memory_mib = memory_mib

    @property
    def device_milli(self) -> int:
        return self.share_milli if self.share_milli else MILLI * len(self.devices)

    @property
    def affinity(self) -> str | None:
        """The kind of grant: ``share``, ``1``, ``2``, ... devices, None for CPU only (as ``NodeRequest.affinity``)."""
        if self.share_milli:
            return "share"
        return str(len(self.devices)) if self.devices else None


_RUNS: dict[tuple[int, int], tuple[int, ...]] = {}


def _run(first: int, count: int) -> tuple[int, ...]:
    """The ``count`` consecutive indices from ``first`` (made once each, up to 64 devices)."""
    run = _RUNS.get((first, count))
    if run is None:
        run = tuple(range(first, first + count))
        if first < 64 and count <= 64:
            _RUNS[(first, count)] = run
    return run


_KINDS: Final = {n: str(n) for n in range(1, 65)}  # a grant of n whole devices: its kind (``NodeGrant.affinity``), made once


def _check_count(value: object, source: str, what: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise SpecError(f"{what} must be a whole number >= 0 (got {shown(value)})", source=source, field=what)


class _FreeRanges:
    """Free device indices of one node as sorted disjoint ranges [start, end): compact at any size."""

    __slots__ = ("starts", "ends")

    def __init__(self, count: int) -> None:
        self.starts: list[int] = [0] if count else []
        self.ends: list[int] = [count] if count else []

    def lowest(self) -> int:
        return self.starts[0]

    def contains(self, index: int) -> bool:
        i = bisect_right(self.starts, index) - 1
        return i >= 0 and index < self.ends[i]

    def take_lowest(self, count: int) -> list[int]:
        """Take the ``count`` lowest free indices (there must be so many), whole ranges at a time."""
        out: list[int] = []
        while len(out) < count:
            start, end = self.starts[0], self.ends[0]
            take = min(count - len(out), end - start)
            out.extend(range(start, start + take))
            if start + take == end:
                del self.starts[0]
                del self.ends[0]
            else:
                self.starts[0] = start + take
        return out

    def holds_run(self, start: int, end: int) -> bool:
        """Whether every index of [start, end) is free (within one range)."""
        i = bisect_right(self.starts, start) - 1
        return i >= 0 and end <= self.ends[i]

    def remove_run(self, start: int, end: int) -> None:
        """Take [start, end) (all free: ``holds_run``), splitting its range."""
        i = bisect_right(self.starts, start) - 1
        first, last = self.starts[i], self.ends[i]
        if first == start and last == end:
            del self.starts[i]
            del self.ends[i]
        elif first == start:
            self.starts[i] = end
        elif last == end:
            self.ends[i] = start
        else:
            self.ends[i] = start
            self.starts.insert(i + 1, end)
            self.ends.insert(i + 1, last)

    def free_of_run(self, start: int, end: int) -> bool:
        """Whether no index of [start, end) is free."""
        i = bisect_right(self.starts, end - 1) - 1  # the last range starting at or before end - 1
        return i < 0 or self.ends[i] <= start

    def add_run(self, start: int, end: int) -> None:
        """Give [start, end) back (none free: ``free_of_run``), merging with its neighbours."""
        i = bisect_right(self.starts, start)
        joins_left = i > 0 and self.ends[i - 1] == start
        joins_right = i < len(self.starts) and self.starts[i] == end
        if joins_left and joins_right:
            self.ends[i - 1] = self.ends[i]
            del self.starts[i]
            del self.ends[i]
        elif joins_left:
            self.ends[i - 1] = end
        elif joins_right:
            self.starts[i] = start
        else:
            self.starts.insert(i, start)
            self.ends.insert(i, end)

    def remove(self, index: int) -> None:
        """Take ``index`` (it must be free), splitting its range."""
        i = bisect_right(self.starts, index) - 1
        start, end = self.starts[i], self.ends[i]
        if start == index and end == index + 1:
            del self.starts[i]
            del self.ends[i]
        elif start == index:
            self.starts[i] = index + 1
        elif end == index + 1:
            self.ends[i] = index
        else:
            self.ends[i] = index
            self.starts.insert(i + 1, index + 1)
            self.ends.insert(i + 1, end)

    def add(self, index: int) -> None:
        """Give ``index`` back (it must not be free), merging with its neighbours."""
        i = bisect_right(self.starts, index)
        joins_left = i > 0 and self.ends[i - 1] == index
        joins_right = i < len(self.starts) and self.starts[i] == index + 1
        if joins_left and joins_right:
            self.ends[i - 1] = self.ends[i]
            del self.starts[i]
            del self.ends[i]
        elif joins_left:
            self.ends[i - 1] = index + 1
        elif joins_right:
            self.starts[i] = index
        else:
            self.starts.insert(i, index)
            self.ends.insert(i, index + 1)


class _Devices:
    """One node's devices: free ranges, and the devices holding shares (free milli, and devices by free milli)."""

    __slots__ = ("count", "free", "shared", "by_free")

    def __init__(self, count: int) -> None:
        self.count = count
        self.free = _FreeRanges(count)
        self.shared: dict[int, int] = {}  # device -> free milli (0..999)
        self.by_free: dict[int, list[int]] = {}  # free milli -> devices holding shares with that much free, sorted

    def _set_shared(self, device: int, free: int | None) -> None:
        old = self.shared.get(device)
        if old is not None:
            group = self.by_free[old]
            del group[bisect_left(group, device)]
            if not group:
                del self.by_free[old]
        if free is None:
            self.shared.pop(device, None)
        else:
            self.shared[device] = free
            insort(self.by_free.setdefault(free, []), device)


class Packer(Protocol):
    """How a request's node (and devices on it) are chosen among the feasible ones.

    ``scores`` ranks the feasible nodes (higher is better; ties go to the earlier node in the
    capacity's order); ``devices`` picks the devices on the chosen node. Both only read the
    capacity. A packer may keep derived per-node state and refresh the rows whose
    ``NodeCapacity.version`` changed. ``best`` is where it keeps scores it can look up: the place
    in ``nodes`` (a small pool's feasible nodes, a list it only reads) of the one ``scores`` would
    rank first, without making arrays; None where it has nothing kept (then ``scores`` ranks them).
    """

    name: str

    def scores(self, capacity: NodeCapacity, request: NodeRequest, feasible: IntArray) -> npt.NDArray[np.float64] | IntArray: ...

    def best(self, capacity: NodeCapacity, request: NodeRequest, nodes: list[int]) -> int | None: ...

    def devices(self, capacity: NodeCapacity, node: int, request: NodeRequest) -> tuple[int, ...]: ...


class CapacityError(SpecError):
    """A grant given back that this capacity does not hold (never silently accepted)."""


class NodeCapacity:
    """The free CPU, memory and devices of a pool's nodes, and the choice of where a request goes.

    Nodes keep the order they are given in: that order breaks ties between equally scored nodes.
    Arrays (index = node position) are read by packers: ``cpu_free``, ``memory_free`` (``UNTRACKED``
    when not tracked), ``devices``, ``whole_free`` (completely free devices), ``free_milli`` (free
    milli over all devices), ``model_id`` (into ``models``; -1 none), ``up``, ``shared_values``
    (each node's distinct free milli values of devices holding shares, -1 padded), ``version``
    (bumped when a node changes) and ``affinity_counts`` (live grants per kind, by node).

    What changes per grant (free CPU, memory, whole devices and milli, the version) is kept in
    Python lists (``cpu_free_list`` and so on: read and written as plain ints, per grant held or
    given back) and the arrays of the same names are brought up to date for the nodes changed when
    they are read (``_synced``): a numpy scalar costs ten to twenty times a list item, read or
    written, and the arrays are read only by the vectorised paths (large pools, scores not kept).
    """

    def __init__(self, nodes: Iterable[Node], *, unit: int = MILLI) -> None:
        if not isinstance(unit, int) or isinstance(unit, bool) or unit < 2:
            raise SpecError(f"a device is at least 2 units (got {shown(unit)})", field="unit")
        self.unit = unit
        self.nodes: tuple[Node, ...] = tuple(nodes)
        self.index: dict[str, int] = {}
        for i, node in enumerate(self.nodes):
            if node.name in self.index:
                raise SpecError(f"node {node.name!r} is listed twice", field="nodes")
            self.index[node.name] = i
        n = len(self.nodes)
        self.models: tuple[str, ...] = tuple(sorted({nd.model for nd in self.nodes if nd.model is not None}))
        self._model_ids = {m: i for i, m in enumerate(self.models)}
        self.model_id: npt.NDArray[np.int64] = np.array([self._model_ids.get(nd.model, -1) if nd.model else -1 for nd in self.nodes], dtype=np.int64)
        self.cpu_total: IntArray = np.array([UNTRACKED if nd.cpu_milli is None else nd.cpu_milli for nd in self.nodes], dtype=np.int64)
        self.memory_total: IntArray = np.array([UNTRACKED if nd.memory_mib is None else nd.memory_mib for nd in self.nodes], dtype=np.int64)
        self.cpu_tracked: BoolArray = np.array([nd.cpu_milli is not None for nd in self.nodes], dtype=np.bool_)
        self._cpu_free: IntArray = self.cpu_total.copy()
        self._memory_free: IntArray = self.memory_total.copy()
        self.devices: IntArray = np.array([nd.devices for nd in self.nodes], dtype=np.int64)
        self._whole_free: IntArray = self.devices.copy()
        self._free_milli: IntArray = self.devices * unit
        self.up: BoolArray = np.array([nd.state == "up" for nd in self.nodes], dtype=np.bool_)
        self._version: IntArray = np.zeros(n, dtype=np.int64)
        self.shared_values: IntArray = np.full((n, 1), -1, dtype=np.int64)
        self.shared_max: IntArray = np.full(n, -1, dtype=np.int64)
        # The same figures as Python ints (see the class's docstring), and the nodes whose arrays
        # are behind their lists.
        self.cpu_free_list: list[int] = self._cpu_free.tolist()
        self.memory_free_list: list[int] = self._memory_free.tolist()
        self.whole_free_list: list[int] = self._whole_free.tolist()
        self.free_milli_list: list[int] = self._free_milli.tolist()
        self.version_list: list[int] = [0] * n
        self.up_list: list[bool] = self.up.tolist()
        self.shared_max_list: list[int] = [-1] * n
        self.model_id_list: list[int] = self.model_id.tolist()
        self.cpu_total_list: list[int] = self.cpu_total.tolist()
        self.memory_total_list: list[int] = self.memory_total.tolist()
        self.cpu_tracked_list: list[bool] = self.cpu_tracked.tolist()
        self._behind: set[int] = set()
        self._model_lists: dict[frozenset[str], list[bool]] = {}
        self._model_luts: dict[frozenset[str], BoolArray] = {}
        # Live grants per kind, node by node, counted as they come; their arrays (``affinity_counts``,
        # ``affinity_kinds``) brought up to date for the nodes changed when they are read.
        self._affinity: list[dict[str, int]] = [{} for _ in self.nodes]
        self._affinity_changed: set[int] = set()
        self._affinity_counts: dict[str, IntArray] = {}
        self._affinity_kinds: IntArray = np.zeros(n, dtype=np.int64)
        self._devices = [_Devices(nd.devices) for nd in self.nodes]
        # Per node, whether its CPU and its memory are tracked (never change): read per grant.
        self._log: list[int] = []  # the nodes changed, in order (the last ``CHANGES_KEPT`` to twice that)
        self._log_base = 0  # how many changes came before the first in ``_log``
        self._tracked = [(bool(c), m != UNTRACKED) for c, m in zip(self.cpu_tracked.tolist(), self.memory_total.tolist())]
        tracked_cpu = [nd.cpu_milli for nd in self.nodes if nd.cpu_milli is not None]
        self.max_cpu_milli: int = max(tracked_cpu, default=0)
        self.max_device_milli: int = int(self.devices.max(initial=0)) * unit
        self.allocated_milli: int = 0

    def __len__(self) -> int:
        return len(self.nodes)

    @property
    def cpu_free(self) -> IntArray:
        return self._synced()._cpu_free

    @property
    def memory_free(self) -> IntArray:
        return self._synced()._memory_free

    @property
    def whole_free(self) -> IntArray:
        return self._synced()._whole_free

    @property
    def free_milli(self) -> IntArray:
        return self._synced()._free_milli

    @property
    def version(self) -> IntArray:
        return self._synced()._version

    def _synced(self) -> NodeCapacity:
        """Self, its arrays brought up to date with its lists for the nodes changed since they were read."""
        if self._behind:
            at = np.fromiter(self._behind, dtype=np.int64, count=len(self._behind))
            self._behind.clear()
            for array, values in (
                (self._cpu_free, self.cpu_free_list), (self._memory_free, self.memory_free_list), (self._whole_free, self.whole_free_list),
                (self._free_milli, self.free_milli_list), (self._version, self.version_list),
            ):  # fmt: skip
                array[at] = [values[i] for i in at.tolist()]
        return self

    def units_of(self, asked: NodeRequest | NodeGrant) -> int:
        """Device units a request (per node) or a grant takes: its share, or ``unit`` per whole device."""
        count = asked.devices if isinstance(asked, NodeRequest) else len(asked.devices)
        return asked.share_milli or count * self.unit

    # -- reading --------------------------------------------------------------------------------

    def feasible(self, request: NodeRequest, among: BoolArray | None = None) -> IntArray:
        """Positions of the nodes that can take ``request`` now (state, CPU, memory, model, devices)."""
        if request.share_milli > self.unit:
            return np.zeros(0, dtype=np.int64)  # a share is at most a device (all its shares)
        if among is None and len(self.nodes) <= LIST_NODES:
            return np.array(self.feasible_list(request), dtype=np.int64)
        # Free CPU and memory are never below 0: a request asking none of either is not compared.
        ok = self.up & (self.cpu_free >= request.cpu_milli) if request.cpu_milli else self.up.copy()
        if request.memory_mib:
            ok &= self.memory_free >= request.memory_mib
        if among is not None:
            ok &= among
        if request.kind != "cpu":
            if request.models is not None:
                ok &= self.model_mask(request.models)
            if request.kind == "whole":
                ok &= self.whole_free >= request.devices
            else:
                ok &= (self.whole_free > 0) | (self.shared_max >= request.share_milli)
        out: IntArray = ok.nonzero()[0]
        return out

    def feasible_list(self, request: NodeRequest) -> list[int]:
        """``feasible`` over every node, worked out node by node from the lists (the same checks)."""
        if request.share_milli > self.unit:
            return []
        cpu, memory, kind, devices, share = request.cpu_milli, request.memory_mib, request.kind, request.devices, request.share_milli
        up, cpu_free, memory_free, whole_free, shared_max = self.up_list, self.cpu_free_list, self.memory_free_list, self.whole_free_list, self.shared_max_list
        models: list[bool] | None = None
        if kind != "cpu" and request.models is not None:
            models = self._model_lists.get(request.models)
            if models is None:
                models = self._model_lists[request.models] = self.model_mask(request.models).tolist()
        out: list[int] = []
        # The devices first (the check that fails most often on a busy fleet), then the rest.
        if kind == "whole":
            for i in range(len(up)):
                if whole_free[i] < devices or not up[i] or (cpu and cpu_free[i] < cpu) or (memory and memory_free[i] < memory):
                    continue
                if models is None or models[i]:
                    out.append(i)
        elif kind != "cpu":
            for i in range(len(up)):
                if (whole_free[i] <= 0 and shared_max[i] < share) or not up[i] or (cpu and cpu_free[i] < cpu) or (memory and memory_free[i] < memory):
                    continue
                if models is None or models[i]:
                    out.append(i)
        else:
            for i in range(len(up)):
                if up[i] and not (cpu and cpu_free[i] < cpu) and not (memory and memory_free[i] < memory):
                    out.append(i)
        return out

    def model_mask(self, models: frozenset[str]) -> BoolArray:
        """Which nodes have one of ``models``."""
        lut = self._model_luts.get(models)
        if lut is None:
            lut = np.zeros(len(self.models) + 1, dtype=np.bool_)  # last entry (-1): nodes without a model
            for m in models:
                if m in self._model_ids:
                    lut[self._model_ids[m]] = True
            self._model_luts[models] = lut
        out: BoolArray = lut[self.model_id]
        return out

    def ever_fits(self, request: NodeRequest) -> bool:
        """Whether ``request.nodes`` nodes could take the request were they empty and up (else it is never placeable)."""
        ok = (self.cpu_total >= request.cpu_milli) & (self.memory_total >= request.memory_mib)
        if request.kind != "cpu":
            if request.models is not None:
                ok &= self.model_mask(request.models)
            ok &= self.devices >= max(request.devices, 1)
        return int(ok.sum()) >= request.nodes

    def shared_free(self, node: int) -> Mapping[int, int]:
        """Devices of ``node`` that hold shares, with their free milli."""
        return self._devices[node].shared

    def shared_by_free(self, node: int) -> Mapping[int, Sequence[int]]:
        """Devices of ``node`` that hold shares, grouped by free milli (each group in index order)."""
        return self._devices[node].by_free

    def free_ranges(self, node: int) -> list[tuple[int, int]]:
        """Completely free devices of ``node`` as index ranges [start, end)."""
        d = self._devices[node].free
        return list(zip(d.starts, d.ends))

    def is_free(self, node: int, device: int) -> bool:
        """Whether device ``device`` of the node at position ``node`` holds nothing."""
        d = self._devices[node]
        return 0 <= device < d.count and d.free.contains(device)

    def lowest_free_device(self, node: int) -> int | None:
        d = self._devices[node]
        return d.free.lowest() if d.free.starts else None

    def tightest_shared(self, node: int, milli: int) -> int | None:
        """The device holding shares with the least free milli that still covers ``milli`` (lowest index on ties)."""
        by_free = self._devices[node].by_free
        fits = [v for v in by_free if v >= milli]
        return by_free[min(fits)][0] if fits else None

    def best_fit_devices(self, node: int, request: NodeRequest) -> tuple[int, ...]:
        """Whole devices: the lowest free indices. A share: the tightest device holding shares, else the lowest free one."""
        if request.kind == "whole":
            free = self._devices[node].free
            if free.starts and free.ends[0] - free.starts[0] >= request.devices:  # the lowest free range holds them all
                return _run(free.starts[0], request.devices)
            return tuple(self.lowest_free_indices(node, request.devices))
        if request.kind == "cpu":
            return ()
        tight = self.tightest_shared(node, request.share_milli)
        if tight is not None:
            return (tight,)
        low = self.lowest_free_device(node)
        assert low is not None, "feasible share without a device"
        return (low,)

    def lowest_free_indices(self, node: int, k: int) -> list[int]:
        ranges = self._devices[node].free
        out: list[int] = []
        for start, end in zip(ranges.starts, ranges.ends):
            take = min(k - len(out), end - start)
            out.extend(range(start, start + take))
            if len(out) == k:
                break
        return out

    # -- choosing -------------------------------------------------------------------------------

    def choose(self, request: NodeRequest, packer: Packer, among: BoolArray | None = None) -> tuple[NodeGrant, ...] | None:
        """Where ``request`` would go (one grant per node of the gang), or None: nothing changes.

        ``among``: only these nodes (a mask by position), e.g. the nodes of the pools the policy
        admitted; None: all nodes.

        A gang is chosen node by node, each with the packer's best node given the ones before it
        (tentatively held, then given back).
        """
        grants = self.place(request, packer, among)
        if grants is not None:
            for grant in grants:
                self.release(grant)
        return grants

    def place(self, request: NodeRequest, packer: Packer, among: BoolArray | None = None) -> tuple[NodeGrant, ...] | None:
        """Choose and hold: one grant per node of the gang, all or nothing (None: nothing held).

        Feasible nodes (``feasible``) are scored by ``packer``; the best wins, the earliest in node
        order on ties; a single feasible node is taken without scoring (as kube-scheduler does).
        """
        grants: list[NodeGrant] = []
        used = np.zeros(len(self.nodes), dtype=np.bool_) if request.nodes > 1 else None
        for _ in range(request.nodes):
            mask = among
            if used is not None:
                mask = ~used if among is None else (among & ~used)
            best = self._best(request, packer, mask)
            if best is None:
                for grant in grants:
                    self.release(grant)
                return None
            grant = NodeGrant(self.nodes[best].name, packer.devices(self, best, request), request.share_milli, request.cpu_milli, request.memory_mib)
            self.allocate(grant)
            grants.append(grant)
            if used is not None:
                used[best] = True
        return tuple(grants)

    def _best(self, request: NodeRequest, packer: Packer, among: BoolArray | None) -> int | None:
        """The node ``place`` takes next (None: no node can take the request): the only feasible
        one, else the one the packer ranks first. A small pool's feasible nodes stay a list where
        the packer looks their scores up (``Packer.best``)."""
        if among is None and len(self.nodes) <= LIST_NODES:
            nodes = self.feasible_list(request)
            if len(nodes) <= 1:
                return nodes[0] if nodes else None
            at = packer.best(self, request, nodes)
            if at is not None:
                return nodes[at]
            feasible = np.array(nodes, dtype=np.int64)
        else:
            feasible = self.feasible(request, among)
            if feasible.size <= 1:
                return feasible.item(0) if feasible.size else None
        best: int = feasible.item(packer.scores(self, request, feasible).argmax())
        return best

    # -- changing -------------------------------------------------------------------------------

    def allocate(self, grant: NodeGrant) -> None:
        """Hold ``grant`` on its node (it must fit: checked, a mismatch raises and changes nothing)."""
        i = self._position(grant.node)
        d = self._devices[i]
        devices, share, cpu, memory = grant.devices, grant.share_milli, grant.cpu_milli, grant.memory_mib
        cpu_tracked, memory_tracked = self._tracked[i]
        if cpu and cpu_tracked and self.cpu_free_list[i] < cpu:
            raise CapacityError(f"node {grant.node} has {self.cpu_free_list[i]} CPU milli free, not {cpu}")
        if memory and self.memory_free_list[i] < memory:
            raise CapacityError(f"node {grant.node} has {self.memory_free_list[i]} MiB free, not {memory}")
        if share:
            if len(devices) != 1:
                raise CapacityError("a share is on exactly one device")
            if share > self.unit:
                raise CapacityError(f"a share is at most a device ({self.unit} units; got {share})")
            dev = devices[0]
            if dev in d.shared:
                if d.shared[dev] < share:
                    raise CapacityError(f"device {dev} of node {grant.node} has {d.shared[dev]} milli free, not {share}")
                d._set_shared(dev, d.shared[dev] - share)
            else:
                if not (0 <= dev < d.count) or not d.free.contains(dev):
                    raise CapacityError(f"device {dev} of node {grant.node} is not free")
                d.free.remove(dev)
                self.whole_free_list[i] = self.whole_free_list[i] - 1
                d._set_shared(dev, self.unit - share)
            units = share
        else:
            free, count = d.free, d.count
            first = devices[0] if devices else 0
            if len(devices) > 1 and devices == _run(first, len(devices)):  # consecutive devices (the usual grant): one range
                if not (0 <= first and first + len(devices) <= count) or not free.holds_run(first, first + len(devices)):
                    raise CapacityError(f"devices {list(devices)} of node {grant.node} are not all free")
                free.remove_run(first, first + len(devices))
            else:
                for dv in devices:
                    if not (0 <= dv < count) or not free.contains(dv):
                        raise CapacityError(f"devices {list(devices)} of node {grant.node} are not all free")
                if len(devices) > 1 and len(set(devices)) != len(devices):
                    raise CapacityError(f"devices {list(devices)} of node {grant.node} are not all free")
                for dv in devices:
                    free.remove(dv)
            units = len(devices) * self.unit
            if units:
                self.whole_free_list[i] = self.whole_free_list[i] - len(devices)
        if cpu and cpu_tracked:
            self.cpu_free_list[i] = self.cpu_free_list[i] - cpu
        if memory and memory_tracked:
            self.memory_free_list[i] = self.memory_free_list[i] - memory
        if units:
            self.free_milli_list[i] = self.free_milli_list[i] - units
            self.allocated_milli += units
            self._count_affinity(i, "share" if share else _KINDS.get(len(devices)) or str(len(devices)), +1)
        self._changed(i, shares=bool(share))

    def release(self, grant: NodeGrant) -> None:
        """Give ``grant`` back (it must be held: a grant this capacity does not hold raises, nothing changes)."""
        self.give_back(grant.node, grant.devices, grant.share_milli, grant.cpu_milli, grant.memory_mib)

    def give_back(self, node: str, devices: tuple[int, ...], share: int, cpu: int, memory: int) -> None:
        """``release`` of the grant these fields make, without making it (a grant given back is
        often one of a pool's allocations, which holds the same fields)."""
        i = self._position(node)
        d = self._devices[i]
        if share:
            if len(devices) != 1 or devices[0] not in d.shared or d.shared[devices[0]] + share > self.unit:
                raise CapacityError(f"node {node} holds no share of {share} milli on device {list(devices)}")
            dev = devices[0]
            left = d.shared[dev] + share
            if left == self.unit:
                d._set_shared(dev, None)
                d.free.add(dev)
                self.whole_free_list[i] = self.whole_free_list[i] + 1
            else:
                d._set_shared(dev, left)
            units = share
        else:
            free, count, shared = d.free, d.count, d.shared
            first = devices[0] if devices else 0
            if len(devices) > 1 and devices == _run(first, len(devices)):  # consecutive devices (the usual grant): one range
                end = first + len(devices)
                if not (0 <= first and end <= count) or not free.free_of_run(first, end) or (shared and any(dv in shared for dv in devices)):
                    raise CapacityError(f"node {node} does not hold devices {list(devices)} whole")
                free.add_run(first, end)
            else:
                for dv in devices:
                    if not (0 <= dv < count) or free.contains(dv) or dv in shared:
                        raise CapacityError(f"node {node} does not hold devices {list(devices)} whole")
                if len(devices) > 1 and len(set(devices)) != len(devices):
                    raise CapacityError(f"node {node} does not hold devices {list(devices)} whole")
                for dv in devices:
                    free.add(dv)
            units = len(devices) * self.unit
            if units:
                self.whole_free_list[i] = self.whole_free_list[i] + len(devices)
        cpu_tracked, memory_tracked = self._tracked[i]
        if cpu and cpu_tracked:
            self.cpu_free_list[i] = min(self.cpu_free_list[i] + cpu, self.cpu_total_list[i])
        if memory and memory_tracked:
            self.memory_free_list[i] = min(self.memory_free_list[i] + memory, self.memory_total_list[i])
        if units:
            self.free_milli_list[i] = self.free_milli_list[i] + units
            self.allocated_milli -= units
            self._count_affinity(i, "share" if share else _KINDS.get(len(devices)) or str(len(devices)), -1)
        self._changed(i, shares=bool(share))

    def hold(
        self,
        node: int,
        *,
        whole: Iterable[int] = (),
        shares: Mapping[int, int] | None = None,
        cpu_milli: int = 0,
        memory_mib: int = 0,
        lowest: int = 0,
    ) -> list[int]:
        """Mark what is already held on the node at position ``node``, as recorded (this layer's
        live grants, or work a scheduler reports that this layer did not place): devices held whole,
        shares used by device, CPU and memory; then ``lowest`` more whole devices, the lowest free
        ones (busy devices a scheduler counts without naming them). What a record says cannot be
        refused, so nothing here raises: an index beyond the node or held already is skipped, CPU
        and memory stop at none free. Choosing only ever takes what is free after this. Returns the
        devices ``lowest`` took."""
        d = self._devices[node]
        taken = 0
        for dev in whole:
            if 0 <= dev < d.count and d.free.contains(dev):
                d.free.remove(dev)
                self.whole_free_list[node] = self.whole_free_list[node] - 1
                taken += self.unit
        for dev, used in sorted(shares.items()) if shares else ():
            if used <= 0:
                continue
            if dev in d.shared:
                left = max(0, d.shared[dev] - used)
                taken += d.shared[dev] - left
                d._set_shared(dev, left)
            elif 0 <= dev < d.count and d.free.contains(dev):
                d.free.remove(dev)
                self.whole_free_list[node] = self.whole_free_list[node] - 1
                left = max(0, self.unit - used)
                taken += self.unit - left
                d._set_shared(dev, left)
        lowest_taken = d.free.take_lowest(min(lowest, self.whole_free_list[node])) if lowest > 0 else []
        if lowest_taken:
            self.whole_free_list[node] = self.whole_free_list[node] - len(lowest_taken)
            taken += self.unit * len(lowest_taken)
        if taken:
            self.free_milli_list[node] = self.free_milli_list[node] - taken
            self.allocated_milli += taken
        cpu_tracked, memory_tracked = self._tracked[node]
        if cpu_milli and cpu_tracked:
            self.cpu_free_list[node] = max(0, self.cpu_free_list[node] - cpu_milli)
        if memory_mib and memory_tracked:
            self.memory_free_list[node] = max(0, self.memory_free_list[node] - memory_mib)
        self._changed(node, shares=bool(shares))
        return lowest_taken

    def set_state(self, name: str, state: NodeState) -> None:
        """Drain, take down or bring up a node: only ``up`` nodes take new grants; live ones stay."""
        if state not in NODE_STATES:
            raise SpecError(f"state must be one of {', '.join(NODE_STATES)} (got {state!r})", field="state")
        i = self._position(name)
        self.up[i] = self.up_list[i] = state == "up"
        self._changed(i, shares=False)

    def _position(self, name: str) -> int:
        try:
            return self.index[name]
        except KeyError:
            raise CapacityError(f"no node named {name!r}") from None

    @property
    def affinity_counts(self) -> Mapping[str, IntArray]:
        """Live grants of each kind ever held (``NodeGrant.affinity``), by node."""
        self._affinity_up_to_date()
        return self._affinity_counts

    @property
    def affinity_kinds(self) -> IntArray:
        """How many kinds of grant each node holds live."""
        self._affinity_up_to_date()
        return self._affinity_kinds

    def _affinity_up_to_date(self) -> None:
        for i in self._affinity_changed:
            counts = self._affinity[i]
            for kind in counts:
                if kind not in self._affinity_counts:
                    self._affinity_counts[kind] = np.zeros(len(self.nodes), dtype=np.int64)
            for kind, column in self._affinity_counts.items():
                column[i] = counts.get(kind, 0)
            self._affinity_kinds[i] = len(counts)
        self._affinity_changed.clear()

    def _count_affinity(self, i: int, kind: str, step: int) -> None:
        counts = self._affinity[i]
        after = counts.get(kind, 0) + step
        if after > 0:
            counts[kind] = after
        else:
            counts.pop(kind, None)
        self._affinity_changed.add(i)

    def changed_since(self, mark: int) -> tuple[list[int] | None, int]:
        """The positions of the nodes changed since ``mark`` (one a change, in order; a node may
        come more than once) and the mark of now; ``mark`` -1, or older than the last
        ``CHANGES_KEPT`` or so changes: None (every node may have changed)."""
        now = self._log_base + len(self._log)
        if mark < self._log_base:
            return None, now
        return self._log[mark - self._log_base :], now

    def _changed(self, i: int, *, shares: bool) -> None:
        """Node ``i`` changed: its version bumped and the change logged (``changed_since``), and its
        devices' shares read again where they changed (``shares``: only shares change the devices
        holding them)."""
        self.version_list[i] = self.version_list[i] + 1
        self._behind.add(i)
        log = self._log
        log.append(i)
        if len(log) >= 2 * CHANGES_KEPT:
            del log[:CHANGES_KEPT]
            self._log_base += CHANGES_KEPT
        if not shares:
            return
        values = sorted(v for v in self._devices[i].by_free if v > 0)
        width = self.shared_values.shape[1]
        if len(values) > width:
            grown = np.full((len(self.nodes), len(values)), -1, dtype=np.int64)
            grown[:, :width] = self.shared_values
            self.shared_values = grown
            width = len(values)
        row = self.shared_values[i]
        row[:] = -1
        row[: len(values)] = values
        self.shared_max[i] = self.shared_max_list[i] = values[-1] if values else -1


def order_nodes(nodes: Sequence[Node], order: Sequence[int]) -> list[Node]:
    """``nodes`` rearranged so that ``nodes[i]`` takes position ``order[i]`` (a permutation)."""
    if sorted(order) != list(range(len(nodes))):
        raise SpecError("a node order is a permutation of the node positions", field="order")
    out: list[Node | None] = [None] * len(nodes)
    for node, pos in zip(nodes, order):
        out[pos] = node
    return [n for n in out if n is not None]
