"""The recount ``exa audit verify`` makes of what live grants hold of each node (``recount``).

Rows are built by hand here: the product never writes such a state (``test_overlapping_invariants``
holds it to that), but a state an earlier release wrote can hold one, and the recount must name
each way a node is held twice over, and nothing where it is not."""

from __future__ import annotations

import pytest

from examlops_policy._core import recount
from examlops_policy._core.state import Capacities
from examlops_policy.model import Holding, Node, Pool
from examlops_policy.store.api import HeldRow, NodeGrantRow
from examlops_policy.tables import load_tables

NODE = (Node("g1", 2, 16, 65536),)
WHOLE = Pool("whole", "hpc", "nvidia", 2, "eu", model="h100", nodes=NODE)
MIG = Pool("mig", "hpc", "nvidia", 2, "eu", model="h100", nodes=NODE, supports_fractions=True)
SHARED = Pool("ts", "hpc", "nvidia", 2, "eu", model="h100", nodes=NODE, sharing="time-slice", shares_per_device=4)
AMD_NODE = (Node("m1", 1, 16, 65536),)
AMD = Pool("amd", "hpc", "amd", 1, "eu", model="mi300x", nodes=AMD_NODE, supports_fractions=True)
CORES = Pool("cores", "hpc", "cpu", 16, "eu", nodes=(Node("g1", 16, 16, 65536),))
POOLS = {p.name: p for p in (WHOLE, MIG, SHARED, AMD, CORES)}


@pytest.fixture(scope="module")
def capacities() -> Capacities:
    return Capacities(load_tables())


def _row(decision: str, pool: Pool, device: int, profile: str | None = None, start: int | None = None, shares: int | None = None) -> HeldRow:
    node = pool.node_list()[0].name
    return HeldRow(decision, Holding(device, profile, start), 1.0, node, shares, pool.name)


def _found(capacities: Capacities, held: list[HeldRow], grants: tuple[NodeGrantRow, ...] = ()) -> list[str]:
    return recount.over_held(POOLS, capacities.layout, held, grants)


def test_a_node_that_holds_what_it_has_is_not_named(capacities: Capacities) -> None:
    held = [
        _row("a", WHOLE, 0),
        _row("b", MIG, 1, "3g.40gb", 0),
        _row("c", MIG, 1, "4g.40gb", 4),  # 3g + 4g: 7 compute slices, memory runs 0-3 and 4-7
        _row("d", AMD, 0, "cpx", 0),
        _row("e", AMD, 0, "cpx", 1),
    ]
    grants = (NodeGrantRow("a", "whole", "g1", 0, 10_000, 32768), NodeGrantRow("f", "cores", "g1", 0, 6_000, 0))
    assert _found(capacities, held, grants) == []


def test_each_way_a_device_is_held_twice_is_named(capacities: Capacities) -> None:
    found = _found(capacities, [
        _row("a", WHOLE, 0), _row("b", WHOLE, 0),  # whole twice
        _row("c", SHARED, 0, shares=1),  # and shared
        _row("d", MIG, 1, "4g.40gb", 0), _row("e", MIG, 1, "4g.40gb", 0),  # overlapping, 8 of 7 compute slices
        _row("f", SHARED, 2, shares=4), _row("g", SHARED, 2, shares=2),  # beyond the node's 2, and 1.5 of it
    ])  # fmt: skip
    assert found == [
        "node 'g1', device 0 (nvidia h100) is held in 2 modes at once (time-slice (4 shares per device) by ts; whole by whole): "
        "a device is in one mode at a time",
        "node 'g1', device 0 (nvidia h100) is held whole by 2 grants (a, b)",
        "node 'g1', device 1 (nvidia h100): MIG instances of d, e overlap in memory slices",
        "node 'g1', device 1 (nvidia h100): MIG instances hold 8 compute slices, the device has 7",
        "node 'g1', device 2 (nvidia h100) is held, but the node has 2 such device(s)",
        "node 'g1', device 2 (nvidia h100): its shares add up to 1.5 of the device",
    ]


def test_amd_partitions_of_two_modes_or_one_index_twice_are_named(capacities: Capacities) -> None:
    found = _found(capacities, [_row("a", AMD, 0, "cpx", 0), _row("b", AMD, 0, "cpx", 0), _row("c", AMD, 0, "dpx", 1)])
    assert found == [
        "node 'm1', device 0 (amd mi300x): AMD partitions of 2 modes at once (2 per device, 8 per device)",
        "node 'm1', device 0 (amd mi300x): partition 0 is held by 2 grants (a, b)",
    ]
    crowded = _found(capacities, [_row(str(i), AMD, 0, "dpx", i % 2) for i in range(3)])
    assert "node 'm1', device 0 (amd mi300x): 3 partitions held, its mode cuts it into 2" in crowded


def test_cores_and_memory_count_across_pools_and_a_cpu_pools_devices_are_cores(capacities: Capacities) -> None:
    # A cpu pool's grant made before its CPU said so (cpu_milli 0) still holds its 8 devices' cores.
    held = [_row("c", CORES, i) for i in range(8)]
    grants = (NodeGrantRow("a", "whole", "g1", 0, 10_000, 40_000), NodeGrantRow("c", "cores", "g1", 0, 0, 30_000))
    assert _found(capacities, held, grants) == [
        "node 'g1': 18 CPU cores granted (cores 8, whole 10), it has 16",
        "node 'g1': 70000 MiB of memory granted (cores 30000, whole 40000), it has 65536",
    ]


def test_a_pool_not_present_or_not_counted_node_by_node_is_left_to_its_own_summary(capacities: Capacities) -> None:
    counted = Pool("counted", "hpc", "nvidia", 1, "eu")
    held = [HeldRow("a", Holding(0), 1.0, "counted", None, "counted"), HeldRow("b", Holding(0), 1.0, "counted", None, "counted")]
    assert recount.over_held({"counted": counted}, capacities.layout, held, ()) == []
    assert recount.over_held({}, capacities.layout, [_row("a", WHOLE, 0), _row("b", WHOLE, 0)], ()) == []
