"""The node packer: feasibility, grants node by node, compact state, and each packer's choices.

Expected choices are worked out by hand from each packer's published formula (see
``examlops_policy._node_packers``) on fleets small enough to check on paper; the fleet-scale
behaviour is the openb replay's business (tests/test_simulate_openb.py, benchmarks/openb.py).
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from examlops_policy._node_packers import (
    PACKERS,
    BestFitPacker,
    DotProductPacker,
    ExaPacker,
    ExpectedWorkload,
    FragmentationPacker,
    GpuClusteringPacker,
    GpuPackingPacker,
    RandomPacker,
    packer_named,
)
from examlops_policy._nodes import MILLI, CapacityError, Node, NodeCapacity, NodeGrant, NodeRequest
from examlops_policy.errors import SpecError


def gpu_nodes(*specs: tuple[str, int, int]) -> NodeCapacity:
    """Nodes named and sized (name, devices, cpu milli), model "t4", memory 64 GiB."""
    return NodeCapacity(Node(name, devices, "t4", cpu, 65536) for name, devices, cpu in specs)


def whole(n: int, cpu: int = 0, memory: int = 0, nodes: int = 1) -> NodeRequest:
    return NodeRequest(devices=n, cpu_milli=cpu, memory_mib=memory, nodes=nodes)


def share(milli: int, cpu: int = 0) -> NodeRequest:
    return NodeRequest(share_milli=milli, cpu_milli=cpu)


UNIFORM_WHOLE = ExpectedWorkload(((whole(1), 1 / 3), (whole(2), 1 / 3), (whole(4), 1 / 3)))


def only(grants: tuple[NodeGrant, ...] | None) -> NodeGrant:
    assert grants is not None and len(grants) == 1, grants
    return grants[0]


# -- the request and node model ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"devices": -1}, "devices"),
        ({"share_milli": -1}, "share_milli"),
        ({"share_milli": 500, "devices": 1}, "share_milli"),
        ({"nodes": 0}, "nodes"),
        ({"models": frozenset()}, "models"),
        ({"cpu_milli": True}, "cpu_milli"),
    ],
)
def test_a_request_that_cannot_be_honoured_is_refused_naming_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(SpecError) as info:
        NodeRequest(**kwargs)  # type: ignore[arg-type]
    assert info.value.field == field


def test_request_kinds_and_device_milli() -> None:
    assert (whole(0).kind, share(250).kind, whole(4).kind) == ("cpu", "share", "whole")
    assert (whole(0).device_milli, share(250).device_milli, whole(4).device_milli) == (0, 250, 4000)


def test_a_node_listed_twice_is_refused() -> None:
    with pytest.raises(SpecError, match="listed twice"):
        NodeCapacity([Node("a", 1, "t4"), Node("a", 2, "t4")])


# -- feasibility ----------------------------------------------------------------------------------


def test_whole_devices_must_fit_on_one_node() -> None:
    cap = gpu_nodes(("a", 4, 64000), ("b", 4, 64000))
    assert cap.place(whole(8), GpuPackingPacker()) is None
    assert cap.ever_fits(whole(8)) is False and cap.ever_fits(whole(4)) is True
    assert cap.allocated_milli == 0


def test_three_single_devices_then_four_all_fit_on_two_four_device_nodes() -> None:
    for name in PACKERS:
        cap = gpu_nodes(("a", 4, 64000), ("b", 4, 64000))
        packer = packer_named(name, expected=UNIFORM_WHOLE, seed=1)
        if name == "random":
            continue  # random spreads by design; the guarantee is for the packing rules
        for _ in range(3):
            assert cap.place(whole(1), packer) is not None
        grant = only(cap.place(whole(4), packer))
        assert grant.devices == (0, 1, 2, 3), name


def test_cpu_and_memory_are_checked_on_the_same_node() -> None:
    cap = NodeCapacity([Node("cpu-poor", 4, "t4", 8000, 1 << 20), Node("mem-poor", 4, "t4", 64000, 1024)])
    assert cap.place(whole(1, cpu=16000, memory=2048), BestFitPacker()) is None
    grant = only(cap.place(whole(1, cpu=16000, memory=512), BestFitPacker()))
    assert grant.node == "mem-poor"


def test_untracked_cpu_and_memory_never_limit() -> None:
    cap = NodeCapacity([Node("open", 2, "t4")])
    grant = only(cap.place(whole(1, cpu=10**9, memory=10**9), BestFitPacker()))
    assert grant.node == "open"


def test_a_share_needs_one_device_with_that_much_free() -> None:
    cap = gpu_nodes(("a", 2, 64000))
    packer = GpuPackingPacker()
    assert only(cap.place(share(600), packer)).devices == (0,)
    assert only(cap.place(share(600), packer)).devices == (1,)
    # 400 free on each device: 800 in all, but no device has 500.
    assert cap.place(share(500), packer) is None
    assert only(cap.place(share(400), packer)).devices == (0,)


def test_shares_count_in_the_capacitys_unit_and_never_a_whole_device() -> None:
    """A pool shared in 16ths (Slurm shards) counts shares exactly: 16 of one share fill a device,
    never a 17th; every share of a device (what the policy grants for a fraction that needs them
    all) holds the device in its sharing mode, and more than a device is not a share."""
    cap = NodeCapacity([Node("a", devices=1, cpu_milli=64000)], unit=16)
    packer = GpuPackingPacker()
    for _ in range(16):
        assert only(cap.place(share(1), packer)).devices == (0,)
    assert cap.place(share(1), packer) is None
    fresh = NodeCapacity([Node("b", devices=2)], unit=16)
    assert fresh.place(share(17), packer) is None
    assert only(fresh.place(share(16), packer)).devices == (0,)
    assert only(fresh.place(share(15), packer)).devices == (1,)  # device 0 has no share left
    assert fresh.place(share(1), packer) is not None and fresh.place(share(1), packer) is None
    assert fresh.units_of(NodeRequest(devices=2)) == 32


def test_whole_devices_need_completely_free_devices() -> None:
    cap = gpu_nodes(("a", 2, 64000))
    cap.place(share(100), GpuPackingPacker())
    assert cap.place(whole(2), GpuPackingPacker()) is None
    assert only(cap.place(whole(1), GpuPackingPacker())).devices == (1,)


def test_models_limit_device_requests_but_not_cpu_only_ones() -> None:
    cap = NodeCapacity([Node("t", 1, "t4", 8000, 8192), Node("v", 1, "v100", 8000, 8192)])
    v100 = NodeRequest(devices=1, models=frozenset({"v100"}))
    assert only(cap.place(v100, GpuPackingPacker())).node == "v"
    assert cap.place(v100, GpuPackingPacker()) is None
    cpu_only = NodeRequest(cpu_milli=8000, models=frozenset({"v100"}))
    assert only(cap.place(cpu_only, GpuPackingPacker())).node == "t"


def test_only_up_nodes_take_new_grants_and_live_ones_stay() -> None:
    cap = gpu_nodes(("a", 2, 64000), ("b", 2, 64000))
    held = only(cap.place(whole(1), GpuPackingPacker()))
    cap.set_state(held.node, "drained")
    assert only(cap.place(whole(2), GpuPackingPacker())).node != held.node
    assert cap.place(whole(1), GpuPackingPacker()) is None
    cap.release(held)
    cap.set_state(held.node, "up")
    assert only(cap.place(whole(2), GpuPackingPacker())).node == held.node


def test_a_gang_takes_distinct_nodes_all_or_nothing() -> None:
    cap = gpu_nodes(("a", 4, 64000), ("b", 4, 64000), ("c", 4, 64000))
    grants = cap.place(whole(4, nodes=2), GpuPackingPacker())
    assert grants is not None and len({g.node for g in grants}) == 2
    before = cap.allocated_milli
    assert cap.place(whole(4, nodes=2), GpuPackingPacker()) is None
    assert cap.allocated_milli == before  # the one node it found was given back
    assert cap.choose(whole(4), GpuPackingPacker()) is not None
    assert cap.allocated_milli == before  # choose holds nothing


# -- allocation and release --------------------------------------------------------------------


def test_release_gives_back_exactly_what_was_held() -> None:
    cap = gpu_nodes(("a", 4, 64000))
    packer = GpuPackingPacker()
    grants = [only(cap.place(r, packer)) for r in (whole(2, cpu=1000), share(300, cpu=500), share(700), whole(1))]
    assert cap.allocated_milli == 2000 + 300 + 700 + 1000
    for grant in reversed(grants):
        cap.release(grant)
    assert cap.allocated_milli == 0 and cap.free_ranges(0) == [(0, 4)]
    assert int(cap.cpu_free[0]) == 64000 and int(cap.whole_free[0]) == 4


def test_a_grant_not_held_is_refused_and_changes_nothing() -> None:
    cap = gpu_nodes(("a", 4, 64000))
    held = only(cap.place(whole(1), GpuPackingPacker()))
    with pytest.raises(CapacityError):
        cap.release(NodeGrant("a", (3,), 0, 0, 0))
    with pytest.raises(CapacityError):
        cap.release(NodeGrant("a", (0,), 400, 0, 0))
    with pytest.raises(CapacityError):
        cap.release(NodeGrant("nowhere", (0,), 0, 0, 0))
    with pytest.raises(CapacityError):
        cap.allocate(NodeGrant("a", (0,), 0, 0, 0))  # already held whole
    assert cap.allocated_milli == 1000 and cap.free_ranges(0) == [(1, 4)]
    cap.release(held)
    with pytest.raises(CapacityError):
        cap.release(held)  # twice


def test_a_node_of_a_million_devices_keeps_only_what_changed() -> None:
    cap = NodeCapacity([Node("pool", 1_000_000, "h100")])
    packer = GpuPackingPacker()
    eight = only(cap.place(whole(8), packer))
    shared = only(cap.place(share(250), packer))
    assert eight.devices == tuple(range(8)) and shared.devices == (8,)
    # State: one free range and one device holding shares, however many devices the node has.
    assert cap.free_ranges(0) == [(9, 1_000_000)]
    assert dict(cap.shared_free(0)) == {8: 750}
    cap.release(eight)
    assert cap.free_ranges(0) == [(0, 8), (9, 1_000_000)]
    cap.release(shared)
    assert cap.free_ranges(0) == [(0, 1_000_000)] and not cap.shared_free(0)
    assert int(cap.whole_free[0]) == 1_000_000 and cap.allocated_milli == 0


def test_grants_of_any_device_order_merge_back() -> None:
    cap = gpu_nodes(("a", 6, 64000))
    grants = [NodeGrant("a", (i,), 0, 0, 0) for i in (1, 3, 5, 0, 2, 4)]
    for g in grants:
        cap.allocate(g)
    assert cap.free_ranges(0) == []
    for g in (grants[0], grants[2], grants[4], grants[1], grants[5], grants[3]):
        cap.release(g)
    assert cap.free_ranges(0) == [(0, 6)]


@pytest.mark.parametrize("seed", range(6))
def test_whole_devices_held_and_given_back_in_runs_or_one_by_one_match_a_plain_set(seed: int) -> None:
    """Consecutive devices are taken and given back as one range, any others one by one: either
    way the free devices, the kinds held and the refusals are those of a plain set of held
    devices, and a refused grant changes nothing."""
    rng = random.Random(seed)
    cap = NodeCapacity([Node("a", 12, "t4")])
    held: set[int] = set()
    live: list[NodeGrant] = []
    kinds: dict[str, int] = {}
    for _ in range(400):
        giving = live and rng.random() < 0.4
        if giving and rng.random() < 0.8:
            grant = live.pop(rng.randrange(len(live)))
        else:
            first, count = rng.randrange(12), rng.randrange(1, 5)
            devices = tuple(range(first, first + count)) if rng.random() < 0.7 else tuple(rng.sample(range(13), count))
            grant = NodeGrant("a", devices, 0, 0, 0)
        before = (cap.free_ranges(0), int(cap.whole_free[0]), cap.allocated_milli)
        kind = str(len(grant.devices))
        if giving:
            ok = set(grant.devices) <= held and len(set(grant.devices)) == len(grant.devices) and max(grant.devices) < 12
            if ok:
                cap.release(grant)
                held -= set(grant.devices)
                kinds[kind] = max(kinds.get(kind, 0) - 1, 0)  # a count never falls below none
            else:
                with pytest.raises(CapacityError):
                    cap.release(grant)
        else:
            ok = not (set(grant.devices) & held) and len(set(grant.devices)) == len(grant.devices) and max(grant.devices) < 12
            if ok:
                cap.allocate(grant)
                held |= set(grant.devices)
                live.append(grant)
                kinds[kind] = kinds.get(kind, 0) + 1
            else:
                with pytest.raises(CapacityError):
                    cap.allocate(grant)
        if not ok:
            assert (cap.free_ranges(0), int(cap.whole_free[0]), cap.allocated_milli) == before
        free = sorted(set(range(12)) - held)
        assert [d for start, end in cap.free_ranges(0) for d in range(start, end)] == free
        assert int(cap.whole_free[0]) == len(free) and cap.allocated_milli == len(held) * MILLI
        assert {k: int(v[0]) for k, v in cap.affinity_counts.items() if int(v[0])} == {k: n for k, n in kinds.items() if n}
        assert int(cap.affinity_kinds[0]) == sum(1 for n in kinds.values() if n)


@pytest.mark.parametrize("seed", range(4))
def test_feasible_node_by_node_agrees_with_the_vectorised_check_and_the_arrays_with_the_lists(seed: int) -> None:
    """A small capacity works out ``feasible`` node by node over its lists (``feasible_list``), a
    mask or a large pool with numpy over its arrays: over random grants, releases and node
    states (CPU and memory tracked or not, two models and none, shares and whole devices) both
    give the same nodes for every kind of request, and the arrays, brought up to date when read,
    hold what the lists hold."""
    rng = random.Random(seed)
    nodes = [
        Node(f"n{i}", rng.choice((0, 2, 4, 8)), rng.choice(("a100", "t4", None)) , rng.choice((None, 8000, 32000)), rng.choice((None, 65536)))
        for i in range(40)
    ]  # fmt: skip
    nodes = [Node(n.name, n.devices, n.model if n.devices else None, n.cpu_milli, n.memory_mib) for n in nodes]
    cap = NodeCapacity(nodes)
    every = np.ones(len(nodes), dtype=np.bool_)
    requests = [
        NodeRequest(cpu_milli=2000), NodeRequest(devices=1), NodeRequest(devices=2, cpu_milli=4000, memory_mib=16384),
        NodeRequest(devices=4, models=frozenset({"a100"})), NodeRequest(share_milli=300), NodeRequest(share_milli=700, cpu_milli=1000),
        NodeRequest(share_milli=500, models=frozenset({"t4"})), NodeRequest(devices=8), NodeRequest(memory_mib=70000),
    ]  # fmt: skip
    live: list[NodeGrant] = []
    for _ in range(300):
        roll = rng.random()
        if roll < 0.05:
            cap.set_state(rng.choice(nodes).name, rng.choice(("up", "up", "drained", "down")))
        elif live and roll < 0.4:
            cap.release(live.pop(rng.randrange(len(live))))
        else:
            request = rng.choice(requests)
            found = cap.feasible_list(request)
            if found:
                i = rng.choice(found)
                grant = NodeGrant(nodes[i].name, cap.best_fit_devices(i, request), request.share_milli, request.cpu_milli, request.memory_mib)
                cap.allocate(grant)
                live.append(grant)
        for request in requests:
            assert cap.feasible_list(request) == cap.feasible(request).tolist() == cap.feasible(request, every).tolist()
        assert cap.cpu_free.tolist() == cap.cpu_free_list and cap.memory_free.tolist() == cap.memory_free_list
        assert cap.whole_free.tolist() == cap.whole_free_list and cap.free_milli.tolist() == cap.free_milli_list
        assert cap.version.tolist() == cap.version_list and cap.up.tolist() == cap.up_list and cap.shared_max.tolist() == cap.shared_max_list


# -- each packer, by hand ------------------------------------------------------------------------


def test_best_fit_prefers_the_node_left_fullest() -> None:
    # a: 32 cores, 4 devices; b: 64 cores, 8 devices (the largest: normalisers 64000 and 8000).
    # One device and 4 cores: a scores trunc(100 * (1 - (28000/64000 + 3000/8000) / 2)) = 59,
    # b scores trunc(100 * (1 - (60000/64000 + 7000/8000) / 2)) = 9.
    cap = gpu_nodes(("b", 8, 64000), ("a", 4, 32000))
    feasible = cap.feasible(whole(1, cpu=4000))
    assert BestFitPacker().scores(cap, whole(1, cpu=4000), feasible).tolist() == [9, 59]
    assert only(cap.place(whole(1, cpu=4000), BestFitPacker())).node == "a"


def test_dot_product_prefers_the_least_aligned_node() -> None:
    # Free (CPU, device milli) over (64000, 8000) dotted with the request's, halved:
    # a (32000, 4000) . (8000, 1000) -> 1 - (0.5*0.125 + 0.5*0.125)/2 = 0.9375 -> 93; b (64000, 8000) -> 87.
    cap = gpu_nodes(("b", 8, 64000), ("a", 4, 32000))
    request = whole(1, cpu=8000)
    assert DotProductPacker().scores(cap, request, cap.feasible(request)).tolist() == [87, 93]


def test_gpu_packing_fills_shared_devices_then_used_nodes_then_empty_ones() -> None:
    cap = gpu_nodes(("empty", 4, 64000), ("used", 4, 64000))
    cap.allocate(NodeGrant("used", (2,), 500, 0, 0))
    packer = GpuPackingPacker()
    feasible = cap.feasible(share(300))
    # empty node: 100/3 - 4 = 29; the device with 500 free: 100 - (500*100/1000)/10 = 95.
    assert packer.scores(cap, share(300), feasible).tolist() == [29, 95]
    assert only(cap.place(share(300), packer)) == NodeGrant("used", (2,), 300, 0, 0)
    # A whole device: a used node scores 50 - 1 = 49 against the empty node's 29; lowest free index.
    assert only(cap.place(whole(1), packer)) == NodeGrant("used", (0,), 0, 0, 0)


def test_gpu_clustering_groups_grants_of_the_same_kind() -> None:
    cap = gpu_nodes(("mixed", 4, 64000), ("shares", 4, 64000), ("empty", 4, 64000))
    packer = GpuClusteringPacker()
    cap.allocate(NodeGrant("mixed", (0,), 200, 0, 0))
    cap.allocate(NodeGrant("mixed", (1,), 0, 0, 0))
    cap.allocate(NodeGrant("shares", (0,), 200, 0, 0))
    # Fuller term: 25 * (8000 - free) / 8000 with free 2800, 3800, 4000 -> 16, 13, 12 (here the
    # largest node has 4 devices: 25 * (4000 - free) / 4000 -> 7, 1, 0).
    scores = packer.scores(cap, share(100), cap.feasible(share(100))).tolist()
    assert scores == [50 + 7, 75 + 1, 25 + 0]
    assert only(cap.place(share(100), packer)).node == "shares"
    assert only(cap.place(whole(1), packer)).node == "mixed"  # holds a 1-device grant
    assert only(cap.place(whole(2), packer)).node == "empty"


def test_grant_kinds_are_counted_on_allocation_and_release() -> None:
    cap = gpu_nodes(("a", 4, 64000))
    grants = [NodeGrant("a", (0,), 200, 0, 0), NodeGrant("a", (0,), 300, 0, 0), NodeGrant("a", (1, 2), 0, 0, 0)]
    for g in grants:
        cap.allocate(g)
    assert (int(cap.affinity_counts["share"][0]), int(cap.affinity_counts["2"][0]), int(cap.affinity_kinds[0])) == (2, 1, 2)
    for g in grants[1:]:
        cap.release(g)
    assert (int(cap.affinity_counts["share"][0]), int(cap.affinity_counts["2"][0]), int(cap.affinity_kinds[0])) == (1, 0, 1)


def test_random_is_reproducible_for_a_seed_and_varies_across_seeds() -> None:
    def run(seed: int) -> list[str]:
        cap = gpu_nodes(*((f"n{i}", 2, 64000) for i in range(20)))
        packer = RandomPacker(seed)
        return [only(cap.place(share(300), packer)).node for _ in range(10)]

    assert run(7) == run(7)
    assert run(7) != run(8)


def test_fragmentation_counts_free_milli_the_expected_shapes_cannot_use() -> None:
    # Shapes: a 500 share and one whole device, half each. A node of 2 devices with 300 and 1000
    # free: both shapes fit (on the free device), so only the 300 counts as fragment.
    expected = ExpectedWorkload(((share(500), 0.5), (whole(1), 0.5)))
    cap = gpu_nodes(("a", 2, 64000), ("b", 2, 64000))
    cap.allocate(NodeGrant("a", (0,), 700, 0, 0))
    cap.allocate(NodeGrant("b", (0,), 0, 0, 0))
    cap.allocate(NodeGrant("b", (1,), 600, 0, 0))
    frag = FragmentationPacker(expected).fragmentation(cap).tolist()
    # b: 400 free on one device: no shape fits, all 400 is fragment.
    assert frag == [300.0, 400.0]


def test_fgd_puts_a_share_where_it_fragments_least() -> None:
    expected = ExpectedWorkload(((share(500), 0.5), (whole(1), 0.5)))
    cap = gpu_nodes(("fresh", 2, 64000), ("half", 2, 64000))
    cap.allocate(NodeGrant("half", (1,), 500, 0, 0))
    # A 500 share on "half" device 1 fills it (fragment 0 stays 0); on "fresh" it leaves a device
    # with 500 free that a whole device cannot use.
    grant = only(cap.place(share(500), FragmentationPacker(expected)))
    assert grant == NodeGrant("half", (1,), 500, 0, 0)


def test_fgd_keeps_cpu_for_the_devices_it_serves() -> None:
    # Expected: one whole device with 8 cores. A CPU-only request of 8 cores on "gpu" would leave
    # its free device without CPU (all 1000 milli fragment); on "full" (no free device) it costs nothing.
    expected = ExpectedWorkload(((whole(1, cpu=8000), 1.0),))
    cap = gpu_nodes(("gpu", 1, 8000), ("full", 1, 8000))
    cap.allocate(NodeGrant("full", (0,), 0, 0, 0))
    assert only(cap.place(whole(0, cpu=8000), FragmentationPacker(expected))).node == "full"


def test_exa_sends_cpu_where_it_does_not_strand_devices_and_fgd_does_not_see_it() -> None:
    # Expected: one device with 8 cores (rho = 8 CPU milli per device milli). "poor": 2 devices,
    # 24 cores; "rich": 2 devices, 64 cores. 10 cores of CPU-only work leave both able to take one
    # expected request (FGD: no change anywhere, a tie, the first node wins), but on "poor" only
    # 14 cores remain for 2000 device milli: 2000 - 14000 / 8 = 250 milli stranded
    # (exa: trunc(100 * sigmoid(-0.25)) = 43 against 50 on "rich").
    expected = ExpectedWorkload(((whole(1, cpu=8000), 1.0),))
    request = whole(0, cpu=10000)
    fgd_cap = gpu_nodes(("poor", 2, 24000), ("rich", 2, 64000))
    assert only(fgd_cap.place(request, FragmentationPacker(expected))).node == "poor"
    cap = gpu_nodes(("poor", 2, 24000), ("rich", 2, 64000))
    assert ExaPacker(expected).scores(cap, request, cap.feasible(request)).tolist() == [43, 50]
    assert only(cap.place(request, ExaPacker(expected))).node == "rich"


def test_exa_without_an_expected_workload_keeps_whole_blocks() -> None:
    # No history and no table: whole blocks of 1, 2, 4 devices, equally likely. One device goes
    # to the node already broken up, so the other keeps its 4 devices together.
    cap = gpu_nodes(("a", 4, 64000), ("b", 4, 64000))
    cap.allocate(NodeGrant("b", (0,), 0, 0, 0))
    packer = packer_named("exa")
    assert only(cap.place(whole(1), packer)).node == "b"
    assert only(cap.place(whole(4), packer)).node == "a"


@pytest.mark.parametrize("name", PACKERS)
def test_every_packer_is_deterministic_for_a_seed(name: str) -> None:
    expected = ExpectedWorkload(((share(300), 0.4), (whole(1, cpu=4000), 0.4), (whole(4), 0.2)))
    requests = [share(300, cpu=2000), whole(1, cpu=4000), whole(2), share(700), whole(0, cpu=8000), whole(4)] * 6

    def run() -> list[tuple[NodeGrant, ...] | None]:
        cap = gpu_nodes(*((f"n{i}", 4 if i % 2 else 8, 64000) for i in range(10)))
        packer = packer_named(name, expected=expected, seed=3)
        return [cap.place(r, packer) for r in requests]

    assert run() == run()


def test_a_packer_needing_the_expected_workload_says_so() -> None:
    with pytest.raises(SpecError, match="expected workload"):
        packer_named("fgd")
    with pytest.raises(SpecError, match="unknown packer"):
        packer_named("first-fit")


def test_expected_workload_takes_the_most_frequent_shapes_up_to_the_coverage() -> None:
    requests = [whole(1)] * 6 + [share(500)] * 3 + [whole(8)]
    expected = ExpectedWorkload.from_requests(requests, coverage=0.9)
    assert [(s, round(f, 4)) for s, f in expected.shapes] == [(whole(1), round(6 / 9, 4)), (share(500), round(3 / 9, 4))]
    assert MILLI == 1000


def test_expected_workload_from_a_reviewed_table_normalises_and_names_bad_rows() -> None:
    table = [{"devices": 1, "cpu_milli": 8000, "frequency": 3}, {"share_milli": 250, "models": ["t4"], "frequency": 1}]
    expected = ExpectedWorkload.from_table(table, source="tables/expected.yaml")
    assert expected.shapes == ((whole(1, cpu=8000), 0.75), (NodeRequest(share_milli=250, models=frozenset({"t4"})), 0.25))
    with pytest.raises(SpecError) as info:
        ExpectedWorkload.from_table([{"devices": 1, "frequency": 1}, {"share_milli": 1500, "frequency": 1}], source="t.yaml")
    assert str(info.value).startswith("t.yaml row 2: share_milli:")
    with pytest.raises(SpecError, match="row 1: frequency"):
        ExpectedWorkload.from_table([{"devices": 1, "frequency": 0}])
    with pytest.raises(SpecError, match="row 1: gpus: unknown field"):
        ExpectedWorkload.from_table([{"gpus": 1, "frequency": 1}])
