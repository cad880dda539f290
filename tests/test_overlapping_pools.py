"""Pools that list the same node draw on one node (issue 30).

A device is in one mode at a time (case 1): two pools that list the same node and the
same devices, one time-sliced four ways and one shared through MPS eight ways, or one giving
whole devices and one sharing them, never hand out more than the device. Before, the shares of one
pool were counted as raw shares of the other (4 of 4 time-slices read as 4 of 8 MPS shares), and
0.5 more of a full L4 was placed.

Through the real OPA and store (``place``), and the replay's own bookkeeping of the same rooms
(``rooms.hold_beside``/``give_back``), which must agree.

A cpu pool over a GPU node (case 2) draws on the cores the GPU grants' CPU draws on: its devices
are the node's cores where the node says its CPU, so neither side grants a core the other holds
(before: 64 cores of GPU grants and 30 of the cpu pool on a 64-core node)."""

from __future__ import annotations

import dataclasses

import pytest

from examlops_policy import Placement, Pool, Workload, _nodes
from examlops_policy._core import rooms
from examlops_policy._core.state import sharing_of
from examlops_policy.errors import SpecError
from examlops_policy.hardware import Hardware
from examlops_policy.model import DeviceShare, Node, NodeAllocation

L1 = (Node("l1", 1, 16, 65536),)


def l4(name: str, **kw: object) -> Pool:
    return Pool(name, "hpc", "nvidia", 1, "eu", model="l4", nodes=L1, **kw)  # type: ignore[arg-type]


TS4 = l4("ts4", sharing="time-slice", shares_per_device=4, cost_per_hour=0.5)
MPS8 = l4("mps8", sharing="mps", shares_per_device=8, cost_per_hour=0.8)  # dearer: the time-slices fill first
TS8 = l4("ts8", sharing="time-slice", shares_per_device=8)
WHOLE = l4("whole")


def _place(hw: Hardware, fraction: float) -> str | None:
    """The pool a fraction of an L4 goes to (None: refused)."""
    decision = hw.place(Workload(f"w{fraction}", "nvidia", models=("l4",), engine="vllm", fraction=fraction)).decision
    return decision.pool if isinstance(decision, Placement) else None


def test_a_device_time_sliced_by_one_pool_is_taken_for_a_pool_that_shares_it_through_mps(hardware: Hardware) -> None:
    hardware.add_pool(TS4)
    hardware.add_pool(MPS8)
    assert [_place(hardware, f) for f in (0.5, 0.25, 0.25)] == ["ts4", "ts4", "ts4"]
    assert _place(hardware, 0.125) is None and _place(hardware, 0.375) is None  # the one device is full
    held = {p.pool.name: p.free for p in hardware.pools()}
    assert held == {"ts4": 0.0, "mps8": 0.0}, held
    assert hardware.verify_audit().ok


def test_while_one_pool_holds_a_share_the_other_pool_places_nothing_on_the_device(hardware: Hardware) -> None:
    hardware.add_pool(TS4)
    hardware.add_pool(TS8)  # the same scheme, another number of shares: another mode of the device
    first = _place(hardware, 0.25)
    assert first in ("ts4", "ts8")
    other = "ts8" if first == "ts4" else "ts4"
    assert {p.pool.name: p.free for p in hardware.pools()}[other] == 0.0
    for fraction in (0.125, 0.25, 0.5):
        assert _place(hardware, fraction) in (first, None)  # only the pool already sharing it, in its mode


def test_a_whole_device_pool_sees_a_shared_device_as_taken_whole(hardware: Hardware) -> None:
    """Case 5: a whole-device pool read another pool's 1 of 4 shares as 1 of 1000 (free 0.999)."""
    hardware.add_pool(TS4)
    hardware.add_pool(WHOLE)
    decision = hardware.place(Workload("slice", "nvidia", models=("l4",), engine="vllm", fraction=0.25)).decision
    assert isinstance(decision, Placement) and decision.pool == "ts4"
    assert {p.pool.name: p.free for p in hardware.pools()}["whole"] == 0.0
    refused = hardware.place(Workload("all", "nvidia", models=("l4",), engine="vllm")).decision
    assert not isinstance(refused, Placement)


def test_the_replays_rooms_take_the_device_whole_until_the_last_share_of_the_other_mode_ends() -> None:
    """``hold_beside``/``give_back`` with ``other_mode`` (the replay's bookkeeping) as ``build``
    counts it from the records: any share of another mode takes the device whole, and it is free
    again with the last one."""
    sharing = sharing_of([TS4, MPS8])
    assert sharing.other_mode("ts4") == {"mps8"} and sharing.devices("ts4") == {"ts4"}
    room = rooms.Rooms(TS4, None, L1, _capacity(TS4))  # type: ignore[arg-type]
    one, two = NodeAllocation("l1", share=DeviceShare(0, 1)), NodeAllocation("l1", share=DeviceShare(0, 3))
    rooms.hold_beside(room, [one], same_devices=False, other_mode=True)
    rooms.hold_beside(room, [two], same_devices=False, other_mode=True)
    assert not room.capacity.is_free(0, 0) and room.taken[0] == {0}
    rooms.give_back(room, [one], devices=False, other_mode=True)
    assert not room.capacity.is_free(0, 0)  # the second share still holds it
    rooms.give_back(room, [two], devices=False, other_mode=True)
    assert room.capacity.is_free(0, 0) and room.taken[0] == set() and not room.foreign


def _capacity(pool: Pool) -> _nodes.NodeCapacity:
    nodes = (_nodes.Node(n.name, n.devices, pool.model, n.cpu_milli, n.memory_mib, n.state, n.labels) for n in pool.node_list())  # type: ignore[arg-type]
    return _nodes.NodeCapacity(nodes, unit=rooms.unit_of(pool))


H100_NODE = (Node("n1", 8, 64, 524288),)
GPUS = Pool("pa", "hpc", "nvidia", 8, "eu", model="h100", nodes=H100_NODE)
CORES = Pool("pc", "hpc", "cpu", 64, "eu", nodes=(Node("n1", 64, 64, 524288),))


def _gpu(hw: Hardware, cores: float) -> bool:
    return isinstance(hw.place(Workload(f"g{cores}", "nvidia", engine="vllm", cpu=cores)).decision, Placement)


def _cores(hw: Hardware, count: int) -> bool:
    return isinstance(hw.place(Workload(f"c{count}", "cpu", engine="cpu", count=count)).decision, Placement)


def test_a_cpu_pool_over_a_gpu_node_takes_no_core_the_gpu_grants_hold(hardware: Hardware) -> None:
    hardware.add_pool(GPUS)
    hardware.add_pool(CORES)
    assert [_gpu(hardware, c) for c in (40, 10, 14)] == [True, True, True]  # the node's 64 cores
    assert not _cores(hardware, 30) and not _cores(hardware, 1)
    assert hardware.verify_audit().ok


def test_gpu_grants_take_no_core_the_cpu_pool_holds(hardware: Hardware) -> None:
    hardware.add_pool(GPUS)
    hardware.add_pool(CORES)
    assert _cores(hardware, 30)
    assert not _gpu(hardware, 40)  # 34 cores are left
    assert _gpu(hardware, 34) and not _gpu(hardware, 1)
    assert hardware.verify_audit().ok


# -- pools that disagree about a node (case 3) -------------------------------------------------------


def _h100(name: str, *nodes: Node, model: str | None = "h100") -> Pool:
    return Pool(name, "hpc", "nvidia", sum(n.devices for n in nodes), "eu", model=model, nodes=nodes)


@pytest.mark.parametrize(
    ("other", "said"),
    [
        (_h100("pb", Node("n1", 4, 64, 524288)), "has devices 4, pool 'pa' says 8"),
        (_h100("pb", Node("n1", 8, 32, 524288)), "has CPU 32, pool 'pa' says 64"),
        (_h100("pb", Node("n1", 8, 64, 262144)), "has memory 256Gi, pool 'pa' says 512Gi"),
        (_h100("pb", Node("n1", 8, 64, 524288, state="drained")), "has state drained, pool 'pa' says up"),
        (_h100("pb", Node("n1", 8, 64, 524288), model=None), "has device model none named, pool 'pa' says h100"),
    ],
)
def test_pools_that_disagree_about_a_node_are_refused_and_nothing_is_written(hardware: Hardware, other: Pool, said: str) -> None:
    """Before, each pool kept its own idea of the node: work went to a node one pool called drained,
    and two pools naming the model and none counted 4 whole devices on a node of 2."""
    with pytest.raises(SpecError) as refused:
        hardware.apply([GPUS, other])
    assert refused.value.field == "nodes"
    assert f"pool 'pb' says node 'n1' {said}" in str(refused.value), refused.value
    assert hardware.pools() == []  # all or nothing
    preview = {c.name: c for c in hardware.apply([GPUS, other], dry_run=True)}
    assert preview["pb"].action == "refused" and preview["pb"].adding and said in str(preview["pb"].refused)
    hardware.add_pool(GPUS)
    with pytest.raises(SpecError, match=f"pool 'pb' says node 'n1' {said}"):
        hardware.add_pool(other)


def test_a_fact_one_pool_leaves_unsaid_is_no_disagreement(hardware: Hardware) -> None:
    """A CPU partition over the GPU node that says its cores but not its memory, and a second GPU
    pool (another partition) that says the same facts: accepted."""
    changes = hardware.apply([GPUS, _h100("pb", Node("n1", 8, 64)), Pool("pc", "hpc", "cpu", 64, "eu", nodes=(Node("n1", 64, 64),))])
    assert sorted(c.action for c in changes) == ["added", "added", "added"]


# -- a node's CPU or memory shrunk below its live grants (case 4) -------------------------------------


def _gpu_pool(cpu: int, memory: int) -> Pool:
    return Pool("pa", "hpc", "nvidia", 8, "eu", model="h100", nodes=(Node("n1", 8, cpu, memory),))


@pytest.mark.parametrize(
    ("cpu", "memory", "said"),
    [
        (32, 524288, "node 'n1' would have CPU 32, less than the 40 that live decisions hold there"),
        (64, 65536, "node 'n1' would have memory 64Gi, less than the 100Gi that live decisions hold there"),
    ],
)
def test_a_node_shrunk_below_what_live_grants_hold_is_refused_and_nothing_is_written(hardware: Hardware, cpu: int, memory: int, said: str) -> None:
    """Before, ``apply`` lowered a node's cores or memory under its live grants (devices were
    protected, cores and memory were not) and ``pool NAME`` clamped the figure to hide it."""
    hardware.add_pool(GPUS)
    result = hardware.place(Workload("big", "nvidia", engine="vllm", cpu=40, memory="100Gi"))
    assert isinstance(result.decision, Placement)
    before = hardware.pools()
    with pytest.raises(SpecError) as refused:
        hardware.apply([_gpu_pool(cpu, memory)])
    assert refused.value.field == "nodes" and said in str(refused.value) and result.id[:12] in str(refused.value), refused.value
    assert hardware.pools() == before
    preview = hardware.apply([_gpu_pool(cpu, memory)], dry_run=True)
    assert [(c.action, said in str(c.refused)) for c in preview] == [("refused", True)]
    assert hardware.apply([_gpu_pool(48, 131072)])[0].action == "updated"  # still room for what is held
    hardware.release(result.id)
    assert hardware.apply([_gpu_pool(cpu, memory)])[0].action == "updated"
    assert hardware.verify_audit().ok


def test_the_cores_a_grant_holds_through_another_pool_count_too(hardware: Hardware) -> None:
    """A partition that leaves the node's CPU unsaid holds 40 of its cores; the partition that
    states them cannot lower them under 40."""
    unsaid = Pool("pa", "hpc", "nvidia", 8, "eu", model="h100", nodes=(Node("n1", 8),), cost_per_hour=1.0)
    said = Pool("pb", "hpc", "nvidia", 8, "eu", model="h100", nodes=(Node("n1", 8, 64),), cost_per_hour=2.0)
    hardware.apply([unsaid, said])
    assert hardware.place(Workload("big", "nvidia", engine="vllm", cpu=40)).decision.pool == "pa"  # type: ignore[union-attr]
    with pytest.raises(SpecError, match="node 'n1' would have CPU 32, less than the 40 that live decisions hold there"):
        hardware.apply([unsaid, dataclasses.replace(said, nodes=(Node("n1", 8, 32),))])
    assert hardware.verify_audit().ok


# -- views in the unit of the pool asking, the other pools named (issue 30) ------------------------------


def test_each_pool_names_the_other_pools_holding_its_devices_and_a_cpu_pool_counts_the_cores_left(hardware: Hardware) -> None:
    """Before, an MPS pool showed the time-slice pool's share as "device 0 whole", and a cpu pool
    over the node showed 10 of 16 cores free while GPU grants held 6 more (0 free, 4 really)."""
    hardware.apply([TS4, MPS8, Pool("cores", "hpc", "cpu", 16, "eu", nodes=(Node("l1", 16, 16, 65536),), cost_per_hour=0.1)])
    assert _place(hardware, 0.25) == "ts4"
    assert hardware.place(Workload("cpu-side", "nvidia", engine="vllm", fraction=0.25, cpu=6)).decision.pool == "ts4"  # type: ignore[union-attr]
    assert _cores(hardware, 6)
    layouts = {name: hardware.pool(name).nodes[0].layout for name in ("ts4", "mps8")}
    assert layouts == {"ts4": "device 0: 2 of 4 shares", "mps8": "device 0: held by ts4"}, layouts
    free = {p.pool.name: p.free for p in hardware.pools()}
    assert free["cores"] == 4, free  # 16 cores: 6 of the cpu pool's, 6 the GPU grant asked for
    assert not _cores(hardware, 5) and _cores(hardware, 4)
    assert {p.pool.name: p.free for p in hardware.pools()}["cores"] == 0
    assert hardware.verify_audit().ok


def test_a_node_is_as_unavailable_as_any_pool_listing_it_says() -> None:
    """A state stored before ``apply`` refused disagreeing pools may hold a node one pool calls up
    and another drained or down: every pool sees it in the least available state (fail closed)."""
    up = l4("up")
    drained = dataclasses.replace(l4("dr"), nodes=(dataclasses.replace(L1[0], state="drained"),))
    down = dataclasses.replace(l4("dn"), nodes=(dataclasses.replace(L1[0], state="down"),))
    assert sharing_of([up, drained]).states("up") == {"l1": "drained"} and sharing_of([up, drained]).states("dr") == {}
    together = sharing_of([up, drained, down])
    assert [together.states(p) for p in ("up", "dr", "dn")] == [{"l1": "down"}, {"l1": "down"}, {}]
    assert sharing_of([up, l4("other")]).states("up") == {}  # agreeing pools: nothing said
    room = rooms.build(up, None, [], states=together.states("up"))  # type: ignore[arg-type]
    assert [n.state for n in room.nodes] == ["down"] and room.capacity.feasible(_nodes.NodeRequest(devices=1)).size == 0
