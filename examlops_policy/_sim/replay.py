"""Replay a trace against a fleet, as the openb experiments of Weng et al. (ATC'23) run it.

The protocol (the published simulator's, ``pkg/simulator``; spelled out in the data's README):

1. A generator seeded with ``seed``. The pods, sorted by name, are shuffled.
2. The list is tuned to ``inflate`` x the fleet's device capacity (in milli): below it, pods drawn
   uniformly with replacement from the original list (sorted by name) are appended until the next
   draw's per-device milli would pass the target; above it, random pods are removed until the
   total is no longer above it.
3. The node order that breaks ties is a random permutation drawn once (node ``i`` of the nodes
   sorted by name takes position ``perm[i]``).
4. Pods are placed one by one in that order; none leaves. After each pod (placed or not) the
   arrived device milli and the allocated device milli are recorded (and once before the first).

The figure: the allocation ratio (allocated / capacity, %) at each whole percent of arrived demand
(arrived / capacity), each the mean of the events whose arrived percent rounds to it (or, where
none does, those within one percent), rounded as the published files are.

Where a pod goes is behind one small interface, ``Placer`` (``place(request) -> grants | None``
and the ``capacity`` it places into), built per replay by a ``PlacerFactory`` from the nodes in
tie-break order and the seed. ``PackerPlacer`` is a packer over the nodes directly. The product's
placement path plugs in the same way: a placer that turns the request into a workload (its
``models`` for the policy's models rule; CPU-only requests may use any node's CPU and memory), asks
the policy for its verdicts on the pools holding those nodes, keeps the pools the selection admits
(best tier first), and calls ``NodeCapacity.place(request, packer, among=<their nodes>)`` with the
same packer ``place`` uses, so the replay and ``place`` cannot disagree on a node or a device.
"""

from __future__ import annotations

import math
import random
import time
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol

from examlops_policy._node_packers import ExpectedWorkload, FragmentationPacker, packer_named
from examlops_policy._nodes import MILLI, Node, NodeCapacity, NodeGrant, NodeRequest, Packer, order_nodes
from examlops_policy._sim.trace import POD_KINDS, PodKind, TracePod
from examlops_policy.errors import SpecError, StateError

ROUNDED_HELD: Final = 65536
"""The most allocated figures a ``Curve`` keeps rounded (past it, it forgets them and rounds afresh)."""


class Placer(Protocol):
    """Decides where one request goes and holds it: the grants (one per node of a gang), or None.

    ``capacity`` is the node state it places into (read for the fragmentation figure).
    """

    @property
    def capacity(self) -> NodeCapacity: ...

    def place(self, request: NodeRequest) -> tuple[NodeGrant, ...] | None: ...


class PackerPlacer:
    """A packer over the nodes directly: ``NodeCapacity.place``."""

    def __init__(self, nodes: Sequence[Node], packer: Packer) -> None:
        self._capacity = NodeCapacity(nodes)
        self.packer = packer

    @property
    def capacity(self) -> NodeCapacity:
        return self._capacity

    def place(self, request: NodeRequest) -> tuple[NodeGrant, ...] | None:
        return self._capacity.place(request, self.packer)


PlacerFactory = Callable[[Sequence[Node], int], Placer]
"""Builds the placer for one replay: the nodes in tie-break order, and the seed."""


def packer_placer(name: str, expected: ExpectedWorkload | None) -> PlacerFactory:
    """A factory of ``PackerPlacer`` with the packer called ``name`` (seeded per replay)."""

    def build(nodes: Sequence[Node], seed: int) -> Placer:
        return PackerPlacer(nodes, packer_named(name, expected=expected, seed=seed))

    return build


def expected_workload(pods: Sequence[TracePod], coverage: float = 0.95) -> ExpectedWorkload:
    """The trace's own expected workload, as the paper's FGD uses it: the original pods' most frequent shapes."""
    return ExpectedWorkload.from_requests((p.request for p in pods), coverage)


@dataclass(frozen=True)
class ReplayResult:
    """One replay: the allocation curve, failures by kind, fragmentation at the end, speed."""

    seed: int
    packer: str
    pods: int
    placed: int
    alloc_pct: Mapping[int, float]
    failed: dict[str, int]
    capacity_milli: int
    arrived_milli: int
    allocated_milli: int
    fragmentation_milli: float
    seconds: float
    events: tuple[tuple[int, int], ...] = field(repr=False, default=())  # (arrived, allocated) milli after each pod (openb)
    peak_milli: int = 0  # the most device milli allocated at once

    @property
    def placements_per_second(self) -> float:
        return self.pods / self.seconds if self.seconds > 0 else float("inf")

    @property
    def fragmentation_pct(self) -> float:
        """Fragmented share of the free device milli, in % (the paper's fragmentation ratio)."""
        free = self.capacity_milli - self.allocated_milli
        return 100.0 * self.fragmentation_milli / free if free > 0 else 0.0


def tune(pods: Sequence[TracePod], target_milli: float, rng: random.Random, originals: Sequence[TracePod]) -> list[TracePod]:
    """The pod list tuned to ``target_milli`` (openb protocol, step 2); ``pods`` is already in order."""
    out = list(pods)
    total = sum(p.device_milli for p in out)
    if total < target_milli:
        i = 0
        while True:
            pod = originals[rng.randrange(len(originals))]
            if total + pod.per_device_milli > target_milli:
                break
            out.append(TracePod(f"{pod.name}-tuned-{i}", pod.request, pod.source))
            total += pod.device_milli
            i += 1
    else:
        while total > target_milli:
            total -= out.pop(rng.randrange(len(out))).device_milli
    return out


def arrival(pods: Sequence[TracePod], nodes: Sequence[Node], seed: int, inflate: float) -> tuple[list[TracePod], list[Node]]:
    """The pods in the order they arrive and the nodes in tie-break order, for ``seed`` (steps 1 to 3)."""
    if inflate <= 0:
        raise SpecError(f"inflate is a ratio > 0 (got {inflate})", field="inflate")
    rng = random.Random(seed)
    originals = sorted(pods, key=lambda p: p.name)
    order = list(originals)
    rng.shuffle(order)
    capacity = sum(n.devices for n in nodes) * MILLI
    arriving = tune(order, inflate * float(capacity), rng, originals)
    by_name = sorted(nodes, key=lambda n: n.name)
    perm = list(range(len(by_name)))
    rng.shuffle(perm)
    return arriving, order_nodes(by_name, perm)


def replay(pods: Sequence[TracePod], nodes: Sequence[Node], placer: PlacerFactory, *, seed: int, inflate: float = 1.3,
           packer: str = "", expected: ExpectedWorkload | None = None) -> ReplayResult:
    """Replay ``pods`` on ``nodes`` through ``placer`` (openb protocol) for one seed.

    ``expected`` is the workload the fragmentation figure is measured against (default: the
    trace's own, as the paper's).
    """
    arriving, ordered = arrival(pods, nodes, seed, inflate)
    target = placer(ordered, seed)
    total_devices = sum(n.devices for n in nodes)
    events: list[tuple[int, int]] = [(0, 0)]
    curve = Curve(total_devices, round(inflate * 100))
    curve.add(0, 0)
    failed = {k: 0 for k in POD_KINDS}
    arrived = allocated = placed = 0
    start = time.perf_counter()
    for pod in arriving:
        grants = target.place(pod.request)
        arrived += pod.device_milli
        if grants is None:
            kind: PodKind = pod.kind
            failed[kind] += 1
        else:
            placed += 1
            allocated += sum(g.device_milli for g in grants)
        events.append((arrived, allocated))
        curve.add(arrived, allocated)
    seconds = time.perf_counter() - start
    frag = FragmentationPacker(expected or expected_workload(pods)).fragmentation(target.capacity)
    return ReplayResult(
        seed=seed, packer=packer, pods=len(arriving), placed=placed,
        alloc_pct=curve,
        failed=failed, capacity_milli=total_devices * MILLI, arrived_milli=arrived, allocated_milli=allocated,
        fragmentation_milli=float(frag.sum()), seconds=seconds, events=tuple(events), peak_milli=curve.peak_milli,
    )


def allocation_curve(events: Iterable[tuple[int, int]], total_devices: int, upto: int) -> dict[int, float]:
    """Allocation % at each whole arrived % 0..``upto``, computed as the published files are.

    Each event's arrived % is rounded to a whole number and its allocation % to two decimals
    (Python's ``round``, as the published analysis does); the value at x is the mean of the events
    at x, or where there are none of those within x +/- 1, rounded to two decimals.

    One pass over the events, then one look at each whole percent and its two neighbours: a scan of
    every arrived percent for each x that had no event made a long replay (whose arrived percent
    reaches thousands) quadratic. The sums are taken in the order the events came, as before.
    """
    by_arrived: dict[float, list[float]] = {}
    for a, u in events:
        by_arrived.setdefault(round(a / total_devices / 10, 0), []).append(round(u / total_devices / 10, 2))
    order = {k: i for i, k in enumerate(by_arrived)}  # where each arrived % first came
    curve: dict[int, float] = {}
    for x in range(upto + 1):
        values = by_arrived.get(float(x))
        if not values:
            near = sorted((k for k in (x - 1.0, x + 1.0) if k in by_arrived), key=order.__getitem__)
            values = [y for k in near for y in by_arrived[k]]
        if values:
            curve[x] = round(sum(values) / len(values), 2)
    return curve


class Curve(Mapping[int, float]):
    """The allocation curve built as the events come, each event O(1), equal to
    ``allocation_curve`` over the same events (the same roundings, the same sums in the same
    order): the events of one replay come in order of arrived demand (it only grows), so each
    whole percent's events are summed as they come; a percent without events takes its
    neighbours' (the one below, then the one above), summed on from the one below's sum.

    Held: one mean per whole percent reached (8 bytes each, in an array), never the events. A
    Mapping of the whole percents 0..``upto`` that have a value (``upto`` None: every percent
    reached), as ``allocation_curve`` gives them. ``peak_milli``: the most allocated at once.
    """

    def __init__(self, total_devices: int, upto: int | None = None) -> None:
        self.total = total_devices
        self.upto = upto
        self._means = array("d")  # per whole percent from 0: its mean, NaN where it has none
        self._at = -1  # the percent of the last event (-1: none yet)
        self._sum = 0.0  # the events' values at ``_at``, summed in order (from 0.0: the same sums as ``sum``'s from 0, the values being never negative)
        self._n = 0
        self._gap: tuple[float, int] | None = None  # ``_at - 1`` without events: its neighbours' sum and count so far
        self.events = 0
        self.peak_milli = 0
        self._y: dict[int, float] = {}  # each allocated figure's percent, rounded (the figures recur; bounded: ROUNDED_HELD)

    def add(self, arrived_milli: int, allocated_milli: int) -> None:
        """One event: the arrived and allocated device milli after it (arrived never falls)."""
        total = self.total
        x = round(arrived_milli / total / 10)  # half to even, as round(..., 0)
        y = self._y.get(allocated_milli)
        if y is None:
            if len(self._y) >= ROUNDED_HELD:
                self._y.clear()
            y = self._y[allocated_milli] = round(allocated_milli / total / 10, 2)
        self.events += 1
        if allocated_milli > self.peak_milli:
            self.peak_milli = allocated_milli
        if x != self._at:
            if x < self._at:
                raise StateError(f"arrived demand fell ({self._at} % to {x} %): a curve's events come as demand arrives")
            self._close(x)
        self._sum += y
        self._n += 1
        if self._gap is not None:
            self._gap = (self._gap[0] + y, self._gap[1] + 1)

    def _close(self, x: int) -> None:
        """Percent ``_at`` is done and the next event is at ``x``: its mean is written, and those of
        the percents between without events (the one above it takes its sum, the one below ``x``
        will take x's)."""
        means, at = self._means, self._at
        if at >= 0:
            if self._gap is not None:  # at - 1 had no events: it is done too (its upper neighbour, at, is)
                means[at - 1] = self._gap[0] / self._gap[1]
            means.append(self._sum / self._n)
        done = (self._sum, self._n) if at >= 0 else None
        for gap in range(at + 1, x):
            below = done if gap == at + 1 else None
            if gap == x - 1:
                self._gap = below if below is not None else (0.0, 0)
                means.append(math.nan)  # written when x is done
            else:
                means.append(below[0] / below[1] if below is not None else math.nan)
        if x - 1 <= at:
            self._gap = None
        self._at, self._sum, self._n = x, 0.0, 0

    def _value(self, x: int) -> float:
        """The mean at ``x`` (NaN: none), the percents still open included."""
        at = self._at
        if x < len(self._means) and not (x == at - 1 and self._gap is not None):
            return self._means[x]
        if x == at:
            return self._sum / self._n
        if x == at - 1 and self._gap is not None:
            return self._gap[0] / self._gap[1] if self._gap[1] else math.nan
        if x == at + 1 and self._n:
            return self._sum / self._n
        return math.nan

    def _last(self) -> int:
        reached = self._at + 1 if self._n else self._at
        return reached if self.upto is None else min(reached, self.upto)

    def __getitem__(self, x: int) -> float:
        if not isinstance(x, int) or x < 0 or x > self._last():
            raise KeyError(x)
        value = self._value(x)
        if value != value:
            raise KeyError(x)
        return round(value, 2)

    def __iter__(self) -> Iterator[int]:
        for x in range(self._last() + 1):
            if self._value(x) == self._value(x):
                yield x

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return f"Curve({dict(self)!r})"
