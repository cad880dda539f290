"""The packer chooses across pools as it chooses across one pool's nodes (issue 30).

Two things kept the placement path behind the packer over every node on openb: among pools that
tie, equal scores went to the first pool by name rather than to the earlier node, and the ``cpu``
pool over the GPU nodes scored CPU-only work on its cores alone, blind to the GPUs that CPU feeds.
A replay now breaks ties by the fleet's node order, and a CPU pool over device nodes chooses its
nodes by their whole state (``rooms.OnNodes`` over ``rooms.whole_nodes``), in ``place`` as in a
replay. So the layer, a pool per GPU model, places each request where the packer over every node
places it.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np
import pytest

from examlops_policy import _nodes
from examlops_policy._core import rooms
from examlops_policy._core.state import Capacities
from examlops_policy._node_packers import ExaPacker, ExpectedWorkload, packer_named
from examlops_policy._nodes import Node as TraceNode
from examlops_policy._nodes import NodeCapacity, NodeRequest
from examlops_policy._sim.layer import LayerPlacer, Placed, _held, fleet_pools
from examlops_policy._sim.replay import PackerPlacer
from examlops_policy.hardware import Hardware
from examlops_policy.model import Grant, Node, Pool
from examlops_policy.tables import load_tables

ASKS = [
    NodeRequest(devices=1, cpu_milli=8000, memory_mib=8192),
    NodeRequest(devices=2, cpu_milli=12000),
    NodeRequest(share_milli=500, cpu_milli=4000),
    NodeRequest(share_milli=250, cpu_milli=2000),
    NodeRequest(cpu_milli=6000, memory_mib=4096),
    NodeRequest(cpu_milli=2000),
]
EXPECTED = ExpectedWorkload.from_requests(ASKS, coverage=1.0)


def fleet(rng: random.Random, size: int, models: Sequence[str] = ("T4", "V100M16", "P100")) -> list[TraceNode]:
    return [TraceNode(f"n{i:02d}", rng.choice([2, 4, 8]), rng.choice(models), rng.choice([16000, 32000, 64000]), 262144) for i in range(size)]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_layer_places_each_request_where_the_packer_over_every_node_does(hardware: Hardware, seed: int) -> None:
    rng = random.Random(seed)
    nodes = fleet(rng, 12)
    rng.shuffle(nodes)
    order = [n.name for n in nodes]
    layer = LayerPlacer(hardware.engine, hardware.engine.confirm(), fleet_pools(nodes, region="eu"), expected=EXPECTED, order=order)
    alone = PackerPlacer(nodes, packer_named("exa", expected=EXPECTED))
    placed = 0
    for k in range(120):
        request = rng.choice(ASKS)
        ours, theirs = layer.place(request), alone.place(request)
        assert (None if ours is None else [g.node for g in ours]) == (None if theirs is None else [g.node for g in theirs]), (k, request)
        placed += ours is not None
    assert 40 <= placed < 120  # it filled the fleet: later requests failed in both
    assert layer.capacity.allocated_milli == alone.capacity.allocated_milli


def test_without_the_fleets_order_the_layer_breaks_equal_scores_by_pool_name(hardware: Hardware) -> None:
    # Two empty nodes score alike for one GPU: with the trace's order the earlier node (v0 of
    # v100m16) takes it, as the packer over every node does; without it, the first pool (t4).
    nodes = [TraceNode("v0", 4, "V100M16", 32000, 65536), TraceNode("t0", 4, "T4", 32000, 65536)]
    asked = NodeRequest(devices=1, cpu_milli=1000)
    with_order = LayerPlacer(hardware.engine, hardware.engine.confirm(), fleet_pools(nodes, region="eu"), order=["v0", "t0"])
    without = LayerPlacer(hardware.engine, hardware.engine.confirm(), fleet_pools(nodes, region="eu"))
    first, second = with_order.decide(asked), without.decide(asked)
    assert first is not None and (first.pool, first.allocations[0].node) == ("v100m16", "v0")
    assert second is not None and (second.pool, second.allocations[0].node) == ("t4", "t0")


def test_best_tied_prefers_the_higher_score_then_the_earlier_node() -> None:
    tables = load_tables()
    capacities = Capacities(tables)
    a = capacities.rooms_of(Pool("a", "hpc", "nvidia", 4, "eu", model="t4", nodes=(Node("x", 4, 32, 65536),)), [])
    b = capacities.rooms_of(Pool("b", "hpc", "nvidia", 4, "eu", model="t4", nodes=(Node("y", 4, 32, 65536),)), [])
    grant = Grant(1.0, True, 1.0, 1, 1.0)
    packer = packer_named("exa")
    candidates = [(a, grant, packer), (b, grant, packer)]
    assert rooms.best_tied(candidates) == 0  # equal scores, no order: the first
    assert rooms.best_tied(candidates, {"y": 0, "x": 1}) == 1  # y comes first in the fleet
    assert rooms.best_tied(candidates, {"x": 0}) == 0  # a node not in the order comes after those in it
    # A partly used node scores higher for one more device: it wins whatever the order.
    a.capacity.hold(0, whole=[0])
    assert rooms.best_tied(candidates, {"y": 0, "x": 1}) == 0
    assert rooms.best_tied([(None, grant, None), (b, grant, packer)]) == 1  # a pool without nodes is not scored


def test_random_among_tied_pools_is_uniform_over_all_their_nodes() -> None:
    # One node in pool a, three in pool b: a random packer over the four nodes gives b three
    # requests in four. (It gave a every one when each pool's one drawn node took the top score:
    # the tie went to the earlier node, whatever the pools' sizes.)
    capacities = Capacities(load_tables())
    a = capacities.rooms_of(Pool("a", "hpc", "nvidia", 4, "eu", model="t4", nodes=(Node("x", 4, 32, 65536),)), [])
    b_nodes = tuple(Node(f"y{i}", 4, 32, 65536) for i in range(3))
    b = capacities.rooms_of(Pool("b", "hpc", "nvidia", 12, "eu", model="t4", nodes=b_nodes), [])
    grant = Grant(1.0, True, 1.0, 1, 1.0)
    packer = packer_named("random", seed=11)
    order = {"x": 0, "y0": 1, "y1": 2, "y2": 3}
    wins = sum(rooms.best_tied([(a, grant, packer), (b, grant, packer)], order) for _ in range(4000))
    assert 0.72 < wins / 4000 < 0.78


@pytest.mark.parametrize("models", [("T4", "V100M16", "P100"), ("T4",)])
def test_whole_nodes_holds_what_the_layers_fleet_wide_capacity_holds(hardware: Hardware, models: tuple[str, ...]) -> None:
    # The layer holds every grant on one capacity of every node; ``whole_nodes`` builds the same
    # from the rooms of the pools (what ``place`` has): devices from the device pools, CPU and
    # memory from the CPU pool's rooms, where every pool's grants are held. With one device pool
    # over every node, that capacity is the device pool's own (no copy is kept), and holds the same.
    rng = random.Random(5)
    nodes = fleet(rng, 8, models)
    layer = LayerPlacer(hardware.engine, hardware.engine.confirm(), fleet_pools(nodes, region="eu"), expected=EXPECTED)
    shared = [r for r in layer.rooms if r.capacity is layer.capacity]
    assert len(shared) == (1 if len(models) == 1 else 0)
    # What the grants hold, held on a capacity of its own: the fleet-wide capacity holds the same.
    mirror = NodeCapacity([TraceNode(n.name, n.devices, n.model.lower() if n.model else None, n.cpu_milli, n.memory_mib) for n in nodes])
    pool_of = {p.name: p for p in layer.pools}
    placed: list[Placed] = []
    for k in range(60):
        if placed and k % 3 == 2:
            gone = placed.pop(rng.randrange(len(placed)))
            layer.release(gone)
            for g in _held(gone.allocations, pool_of[gone.pool], gone.grant):
                mirror.release(g)
        got = layer.decide(rng.choice(ASKS))
        if got is not None:
            placed.append(got)
            for g in _held(got.allocations, pool_of[got.pool], got.grant):
                mirror.allocate(g)
    assert placed and layer.capacity.allocated_milli == mirror.allocated_milli > 0
    on = [layer.capacity.index[n.name] for n in mirror.nodes]
    for field in ("whole_free", "free_milli", "cpu_free", "memory_free"):
        assert getattr(layer.capacity, field)[on].tolist() == getattr(mirror, field).tolist(), field
    assert [layer.capacity.shared_free(i) for i in on] == [mirror.shared_free(i) for i in range(len(mirror))]
    names = [p.name for p in layer.pools]
    cpu = layer.rooms[names.index("cpu")]
    built = rooms.whole_nodes(cpu, [r for p, r in zip(layer.pools, layer.rooms) if p.accelerator != "cpu"])
    truth = layer.capacity
    at = [truth.index[n.name] for n in built.nodes]
    for field in ("devices", "whole_free", "free_milli", "cpu_free", "memory_free"):
        assert getattr(built, field).tolist() == getattr(truth, field)[at].tolist(), field
    assert [built.shared_free(i) for i in range(len(built))] == [truth.shared_free(j) for j in at]
    assert [n.model for n in built.nodes] == [truth.nodes[j].model for j in at]


def test_whole_nodes_counts_a_pools_shares_as_thousandths_of_the_device() -> None:
    capacities = Capacities(load_tables())
    ts = Pool("ts4", "hpc", "nvidia", 2, "eu", model="l4", nodes=(Node("l1", 2, 32, 65536),), sharing="time-slice", shares_per_device=4)
    cores = Pool("pc", "hpc", "cpu", 32, "eu", nodes=(Node("l1", 32, 32, 65536),))
    gpu, cpu = capacities.rooms_of(ts, []), capacities.rooms_of(cores, [])
    gpu.capacity.hold(0, shares={1: 1}, cpu_milli=4000)  # one of device 1's four shares
    cpu.capacity.hold(0, cpu_milli=4000 + 6000, memory_mib=2048)  # that grant's CPU, and a CPU grant's
    built = rooms.whole_nodes(cpu, [gpu])
    assert built.devices.tolist() == [2] and built.shared_free(0) == {1: 750} and built.whole_free.tolist() == [1]
    assert (built.cpu_free.tolist(), built.memory_free.tolist()) == ([22000], [65536 - 2048])
    alone = rooms.whole_nodes(cpu, [])  # no device pool lists it: no device
    assert alone.devices.tolist() == [0]


def test_a_cpu_pool_over_gpu_nodes_puts_cpu_work_where_its_cpu_feeds_no_free_gpu() -> None:
    # n0's 4 GPUs are taken, n1's are free; both have 32 cores left. GPU work here asks 8 cores a
    # GPU: CPU-only work on n1 would strand its GPUs, on n0 it strands nothing. The CPU pool's own
    # rooms (cores as devices) see two equal nodes and take the first; by the nodes' whole state
    # the packer takes n0.
    capacities = Capacities(load_tables())
    listed = (Node("n1", 4, 64, 262144), Node("n0", 4, 64, 262144))
    gpus = capacities.rooms_of(Pool("g", "hpc", "nvidia", 8, "eu", model="t4", nodes=listed), [])
    cores = capacities.rooms_of(Pool("c", "hpc", "cpu", 128, "eu", nodes=tuple(Node(n.name, 64, 64, 262144) for n in listed)), [])
    n0 = gpus.capacity.index["n0"]
    gpus.capacity.hold(n0, whole=[0, 1, 2, 3], cpu_milli=32000)
    cores.capacity.hold(cores.capacity.index["n0"], cpu_milli=32000)
    cores.capacity.hold(cores.capacity.index["n1"], cpu_milli=32000)
    expected = ExpectedWorkload.from_requests([NodeRequest(devices=1, cpu_milli=8000)] * 3 + [NodeRequest(cpu_milli=16000)], coverage=1.0)
    request = NodeRequest(devices=1, cpu_milli=16000)  # a core of the CPU pool, with the CPU it asks
    blind = cores.capacity.choose(request, ExaPacker(expected))
    seeing = cores.capacity.choose(request, rooms.OnNodes(ExaPacker(expected), rooms.whole_nodes(cores, [gpus])))
    assert blind is not None and seeing is not None
    assert (blind[0].node, seeing[0].node) == ("n1", "n0")


def test_on_nodes_scores_each_node_as_the_node_sees_the_request() -> None:
    nodes = NodeCapacity([_nodes.Node("a", 2, "t4", 8000, 1024), _nodes.Node("b", 0, None, 8000, 1024)])
    seen: list[tuple[NodeRequest, list[int]]] = []

    class Recording:
        name = "recording"

        def scores(self, capacity: NodeCapacity, request: NodeRequest, feasible: np.ndarray) -> np.ndarray:
            assert capacity is nodes
            seen.append((request, feasible.tolist()))
            return np.zeros(feasible.size, dtype=np.int64)

        def best(self, capacity: NodeCapacity, request: NodeRequest, nodes: list[int]) -> int | None:
            return None

        def devices(self, capacity: NodeCapacity, node: int, request: NodeRequest) -> tuple[int, ...]:
            return (0,)

    pool = NodeCapacity([_nodes.Node("b", 8, None, 8000, 1024), _nodes.Node("a", 8, None, 8000, 1024)])
    on = rooms.OnNodes(Recording(), nodes)
    on.scores(pool, NodeRequest(devices=1, cpu_milli=500, memory_mib=64), np.array([0, 1]))
    assert seen == [(NodeRequest(cpu_milli=500, memory_mib=64), [1, 0])]
    assert on.name == "recording"


def test_the_packer_kept_with_a_pools_rooms_chooses_as_a_fresh_one_would(hardware: Hardware) -> None:
    # A write keeps the pool's rooms and their packer, whose per-node tables are worked out again
    # for the nodes that changed only; a dry run builds the rooms and a packer afresh from the
    # records. At every step of places and releases both choose the same node and devices.
    from examlops_policy.model import Placement, Workload

    hardware.apply([Pool("mix", "hpc", "nvidia", 20, "eu", model="t4", nodes=tuple(Node(f"m{i}", d, 32, 131072) for i, d in enumerate((8, 4, 4, 2, 2))))])
    rng = random.Random(11)
    live: list[str] = []
    compared = 0
    for k in range(40):
        if live and rng.random() < 0.3:
            hardware.release(live.pop(rng.randrange(len(live))))
            continue
        workload = Workload(f"w{k}", "nvidia", count=rng.choice([1, 1, 2, 4]), cpu=rng.choice([1, 4]))
        dry = hardware.what_if(workload, where=True)
        record = hardware.place(workload)
        if not isinstance(dry, Placement):
            assert not isinstance(record.decision, Placement), k
            continue
        assert isinstance(record.decision, Placement), k
        assert record.decision.allocations and record.decision.allocations == dry.allocations, k
        live.append(record.id)
        compared += 1
    assert compared >= 15
    assert hardware.verify_audit().ok
