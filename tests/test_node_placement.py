"""Nodes, gangs and shared devices through the decision path (issue 19): the real OPA judges, the
real store holds what each node holds, the packer chooses nodes and devices.

Each case states the node(s) and devices a grant lands on, or the reason code and message it is
refused with; what a pool can place is read back node by node."""

from __future__ import annotations

import dataclasses

import pytest

from examlops_policy import Placement, Pool, Rejection, Workload
from examlops_policy.hardware import Hardware
from examlops_policy.errors import SpecError
from examlops_policy.model import DeviceShare, Holding, Node, NodeAllocation
from tests.placement_support import place_workload, placed, refused, verdict


def two_by_four(name: str = "ai", **kw: object) -> Pool:
    """Two nodes of 4 H100, 32 cores and 256Gi each."""
    return Pool(name, "hpc", "nvidia", 8, "eu", model="h100", cost_per_hour=2.0, nodes=2, cpu_per_node=32, memory_per_node="256Gi", **kw)  # type: ignore[arg-type]


def t4_shared(name: str = "t4", count: int = 2, **kw: object) -> Pool:
    return Pool(name, "hpc", "nvidia", count, "eu", model="t4", cost_per_hour=0.4, sharing="time-slice", shares_per_device=4, **kw)  # type: ignore[arg-type]


def reasons(decision: Placement | Rejection, pool: str) -> list[tuple[str, str, str]]:
    return [(r.code, r.kind, r.message) for r in verdict(decision, pool).reasons]


def where(p: Placement) -> list[tuple[str, tuple[int, ...]]]:
    return [(a.node, tuple(h.device for h in a.holdings)) for a in p.allocations]


# -- whole devices must fit on one node ------------------------------------------------------------


def test_eight_devices_on_two_nodes_of_four_are_never_placed(hardware: Hardware) -> None:
    hardware.add_pool(two_by_four())
    rejection = refused(hardware, "big", count=8)
    assert rejection.code == "no_eligible_pool"
    # Never, whatever frees: the shortfall of capacity now follows, as for every pool without room.
    assert reasons(rejection, "ai")[0] == ("no_node_fits", "never", "no node of the pool has 8 H100 device(s); the largest has 4")
    six = refused(hardware, "six", count=6)
    assert reasons(six, "ai")[0][0] == "no_node_fits"


def test_three_single_devices_then_four_all_fit_on_two_nodes_of_four(hardware: Hardware) -> None:
    hardware.add_pool(two_by_four())
    singles = [placed(hardware, f"one-{i}") for i in range(3)]
    # The packer fills the partly used node first, keeping the other whole for a large job.
    assert [where(p) for p in singles] == [[("ai-0", (0,))], [("ai-0", (1,))], [("ai-0", (2,))]]
    four = placed(hardware, "four", count=4)
    assert where(four) == [("ai-1", (0, 1, 2, 3))]
    assert four.holdings == (Holding(0), Holding(1), Holding(2), Holding(3))
    full = refused(hardware, "two", count=2)
    assert full.code == "no_capacity"
    assert reasons(full, "ai") == [("capacity_exhausted", "not_now", "needs 2 whole H100 device(s) with nothing on them, more than are free")]
    placed(hardware, "last")


def test_cpu_and_memory_are_held_beside_the_devices_on_the_same_node(hardware: Hardware) -> None:
    hardware.add_pool(two_by_four())
    first = placed(hardware, "cpu-heavy", count=1, cpu=30, memory="64Gi")
    assert first.allocations == (NodeAllocation("ai-0", (Holding(0),), None, 30000, 65536),)
    # ai-0 has 3 devices free but 2 cores: a job asking 4 cores goes to ai-1.
    second = placed(hardware, "next", count=3, cpu=4)
    assert where(second) == [("ai-1", (0, 1, 2))]
    # No node has 3 free devices beside 4 cores now.
    short = refused(hardware, "short", count=3, cpu=4)
    assert reasons(short, "ai") == [
        ("capacity_exhausted", "not_now", "needs 3 whole H100 device(s) and 4 CPU cores free on one node, more than are free"),
    ]
    too_much = refused(hardware, "too-much", cpu=64)
    assert reasons(too_much, "ai")[0] == ("no_node_fits", "never", "no node of the pool has 64 CPU cores; the largest has 32")
    memory = refused(hardware, "memory", memory="512Gi")
    assert reasons(memory, "ai")[0] == ("no_node_fits", "never", "no node of the pool has 512Gi memory; the largest has 256Gi")


def test_a_gang_holds_the_same_on_distinct_nodes_all_or_nothing(hardware: Hardware) -> None:
    hardware.add_pool(two_by_four())
    gang = placed(hardware, "gang", count=2, nodes=2, cpu=8, memory="32Gi")
    assert sorted(a.node for a in gang.allocations) == ["ai-0", "ai-1"]
    assert all(a.devices == 2 and (a.cpu_milli, a.memory_mib) == (8000, 32768) for a in gang.allocations)
    assert gang.grant.devices == 4 and gang.grant_cost_per_hour == pytest.approx(8.0)
    # Three free devices on one node is not room for a gang of 2 x 3.
    assert reasons(refused(hardware, "wide", count=3, nodes=2), "ai")[0][0] == "capacity_exhausted"
    never = refused(hardware, "three-nodes", nodes=3)
    assert reasons(never, "ai")[0] == ("no_node_fits", "never", "only 2 node(s) of the pool could ever hold 1 whole H100 device(s); the gang needs 3")


def test_a_gang_on_a_pool_without_nodes_is_never_placed(hardware: Hardware) -> None:
    hardware.add_pool(Pool("flat", "hpc", "nvidia", 8, "eu", cost_per_hour=1.0))
    rejection = refused(hardware, "gang", nodes=2)
    assert reasons(rejection, "flat")[0] == ("no_node_fits", "never", "the pool has no node information: it is one node, and the gang needs 2 nodes")
    # Without node information a pool is one node of its devices, as before: no allocations.
    one = placed(hardware, "one", count=8)
    assert one.allocations == () and one.holdings == tuple(Holding(i) for i in range(8))


def test_a_release_gives_back_exactly_what_each_node_held(hardware: Hardware) -> None:
    hardware.add_pool(two_by_four())
    gang = hardware.place(Workload("gang", "nvidia", count=4, nodes=2, cpu=32))
    assert isinstance(gang.decision, Placement)
    assert refused(hardware, "nothing-left").code == "no_capacity"
    hardware.release(gang.id)
    again = placed(hardware, "again", count=4, nodes=2, cpu=32)
    assert sorted(where(again)) == [("ai-0", (0, 1, 2, 3)), ("ai-1", (0, 1, 2, 3))]


def test_records_read_back_node_by_node(hardware: Hardware) -> None:
    hardware.add_pool(two_by_four())
    record = hardware.place(Workload("gang", "nvidia", count=1, nodes=2, memory="1Gi"))
    back = hardware.decision(record.id).decision
    assert isinstance(back, Placement) and isinstance(record.decision, Placement)
    assert back.allocations == record.decision.allocations and len(back.allocations) == 2
    assert hardware.replay(record.id).same
    assert hardware.verify_audit().ok


# -- models, sharing, isolation ---------------------------------------------------------------------


def test_a_workload_runs_only_on_the_models_it_names(hardware: Hardware) -> None:
    hardware.add_pool(two_by_four())
    hardware.add_pool(Pool("v100s", "hpc", "nvidia", 4, "eu", model="v100", cost_per_hour=5.0))
    p = placed(hardware, "old", models=("t4", "V100"))
    assert p.pool == "v100s"
    assert reasons(p, "ai") == [("model_not_accepted", "never", "the pool's devices are H100; the workload accepts only t4, v100")]


def test_a_fraction_on_a_shared_pool_is_a_share_of_one_device_said_to_be_unisolated(hardware: Hardware) -> None:
    hardware.add_pool(t4_shared())
    quarter = placed(hardware, "quarter", fraction=0.25)
    assert quarter.fraction_honored and quarter.grant.scheme == "time-slice" and quarter.grant.shares == 1
    assert quarter.allocations == (NodeAllocation("t4", (), DeviceShare(0, 1)),)
    assert quarter.note == "fraction 0.25 shared without isolation (time-slice: 1 of 4 shares of one device)"
    assert quarter.grant_cost_per_hour == pytest.approx(0.1)
    # Shares fill the device already shared before a fresh one: 3 more quarters on device 0.
    assert [placed(hardware, f"q{i}", fraction=0.25).allocations[0].share for i in range(3)] == [DeviceShare(0, 1)] * 3
    half = placed(hardware, "half", fraction=0.5)
    assert half.allocations[0].share == DeviceShare(1, 2)
    # 2 shares are left, on device 1: three quarters of a device is not.
    assert reasons(refused(hardware, "three-quarters", fraction=0.75), "t4") == [
        ("share_unavailable", "not_now", "needs 3 share(s) of one T4 device free on one node, more than are free"),
    ]
    whole = refused(hardware, "whole")
    assert reasons(whole, "t4")[0][0] == "capacity_exhausted"


def test_a_fraction_that_must_be_isolated_is_never_a_shared_device(hardware: Hardware) -> None:
    hardware.add_pool(t4_shared())
    hardware.add_pool(Pool("h100", "hpc", "nvidia", 1, "eu", model="h100", cost_per_hour=3.0, supports_fractions=True))
    p = placed(hardware, "strict", fraction=0.25, isolation="required")
    assert p.pool == "h100" and p.grant.profile == "2g.20gb"
    assert reasons(p, "t4") == [
        ("isolation_unavailable", "never", "the pool shares devices without isolation (time-slice), and the workload requires its fraction 0.25 isolated (isolation: required)"),
    ]
    assert placed(hardware, "lax", fraction=0.25).pool == "t4"


# -- topology, node states, shared nodes ------------------------------------------------------------


def labelled() -> Pool:
    # n0-n2 in block b1, n3 in b2, n4 in b3.
    nodes = tuple(Node(f"n{i}", 4, cpu=16, memory="64Gi", block=("b1" if i < 3 else f"b{i - 1}"), switch=f"s{i // 2}") for i in range(5))
    return Pool("lab", "hpc", "nvidia", 20, "eu", model="h100", cost_per_hour=2.0, nodes=nodes)


def test_a_gang_that_requires_one_block_is_placed_in_one_block(hardware: Hardware) -> None:
    hardware.add_pool(labelled())
    gang = placed(hardware, "gang", count=4, nodes=3, topology="same-block")
    assert sorted(a.node for a in gang.allocations) == ["n0", "n1", "n2"]
    # Two nodes are left, in different blocks: a gang of 2 that must share a block waits.
    waits = refused(hardware, "pair", count=4, nodes=2, topology="same-block")
    assert reasons(waits, "lab")[0] == (
        "capacity_exhausted", "not_now", "needs 4 whole H100 device(s) free on each of 2 nodes in one block, more than are free",
    )
    # Preferred, it is placed apart.
    assert sorted(a.node for a in placed(hardware, "apart", count=4, nodes=2, topology="same-block", topology_mode="preferred").allocations) == ["n3", "n4"]
    never = refused(hardware, "four-in-a-block", nodes=4, topology="same-block")
    assert reasons(never, "lab")[0][:2] == ("topology_unsatisfiable", "never")


def test_drained_and_down_nodes_have_no_capacity_and_come_back(hardware: Hardware) -> None:
    hardware.add_pool(two_by_four())
    with pytest.raises(SpecError, match="no pool lists node"):
        hardware.set_node_states({"ai-0": "drained"})  # ai-0 is a counted node, not one a scheduler names
    nodes = tuple(Node(f"gpu-{i}", 4, cpu=32) for i in range(2))
    hardware.add_pool(Pool("named", "hpc", "nvidia", 8, "eu", cost_per_hour=1.0, nodes=nodes))
    hardware.set_node_states({"gpu-0": "drained", "gpu-1": "down"})
    decided = place_workload(hardware, "none-up").decision
    assert reasons(decided, "named") == [("capacity_exhausted", "not_now", "needs 1 whole nvidia device(s) with nothing on them, more than are free")]
    assert {v.pool.name: v for v in hardware.pool_views()}["named"].state.capacity.nodes == ()
    hardware.set_node_states({"gpu-1": "up"})
    p = placed(hardware, "back", count=4)
    assert p.pool in ("ai", "named")


def test_what_no_node_could_ever_hold_is_refused_with_queue_and_a_drained_node_is_waited_for(hardware: Hardware) -> None:
    """A gang that fits only with a drained (or down) node is not never: the node may come back, so
    it waits. More than any node has, or more nodes than the pool has, is never: ``queue=True``
    rejects it at once and nothing waits for it."""
    nodes = tuple(Node(f"gpu-{i}", 4, cpu=32, memory="256Gi") for i in range(2))
    hardware.add_pool(Pool("named", "hpc", "nvidia", 8, "eu", cost_per_hour=1.0, nodes=nodes))
    hardware.set_node_states({"gpu-1": "drained"})
    for name, asks in {
        "eight": {"count": 8},
        "three-nodes": {"nodes": 3},
        "cores": {"cpu": 33},
        "memory": {"memory": "257Gi"},
    }.items():
        record = hardware.place(Workload(name, "nvidia", **asks), queue=True)  # type: ignore[arg-type]
        assert isinstance(record.decision, Rejection) and record.decision.code == "no_eligible_pool", name
        assert reasons(record.decision, "named")[0][:2] == ("no_node_fits", "never"), name
        assert record.queue is None
    assert hardware.store.queue_rows(("queued",)) == []
    gang = hardware.place(Workload("gang", "nvidia", count=4, nodes=2), queue=True)
    assert gang.decision.outcome == "queued" and gang.queue is not None and dict(gang.queue.waits_for) == {"capacity_exhausted": 1}
    assert [row.id for row in hardware.store.queue_rows(("queued",))] == [gang.id]
    # The drained node comes back: what waited for it is admitted.
    hardware.set_node_states({"gpu-1": "up"})
    (admitted,) = hardware.admit().admitted
    assert admitted.queued_id == gang.id and hardware.store.queue_rows(("queued",)) == []
    placement = hardware.decision(admitted.decision_id).decision
    assert isinstance(placement, Placement) and sorted(a.node for a in placement.allocations) == ["gpu-0", "gpu-1"]


def test_a_node_no_pool_lists_is_refused_and_nothing_changes(hardware: Hardware) -> None:
    """A mistyped node name used to change nothing and say nothing (issue 30, case 5)."""
    nodes = tuple(Node(f"gpu-{i}", 4, cpu=32) for i in range(2))
    hardware.add_pool(Pool("named", "hpc", "nvidia", 8, "eu", nodes=nodes))
    size = hardware.verify_audit().size
    with pytest.raises(SpecError, match=r"no pool lists node\(s\) 'gpu-99'"):
        hardware.set_node_states({"gpu-0": "drained", "gpu-99": "up"})
    assert hardware.verify_audit().size == size  # the known node was not drained either
    assert placed(hardware, "still-up", count=4).pool == "named"


def test_a_node_set_down_flags_the_grants_on_it_and_up_clears_them(hardware: Hardware) -> None:
    """As reconcile flags them when a scheduler reports the node down (issue 30, case 5)."""
    nodes = tuple(Node(f"gpu-{i}", 4, cpu=32) for i in range(2))
    hardware.add_pool(Pool("named", "hpc", "nvidia", 8, "eu", nodes=nodes))
    on = placed(hardware, "on-a-node", count=4)
    node = on.allocations[0].node
    hardware.set_node_states({node: "down"})
    assert hardware.decision(on.decision_id).node_down_at is not None
    hardware.set_node_states({node: "up"})
    assert hardware.decision(on.decision_id).node_down_at is None
    assert hardware.verify_audit().ok


def test_pools_that_share_nodes_share_their_capacity(hardware: Hardware) -> None:
    nodes = tuple(Node(f"gpu-{i}", 4, cpu=32) for i in range(2))
    hardware.add_pool(Pool("batch", "hpc", "nvidia", 8, "eu", cost_per_hour=1.0, nodes=nodes, partition="batch"))
    hardware.add_pool(Pool("debug", "hpc", "nvidia", 4, "eu", cost_per_hour=3.0, nodes=nodes[:1], partition="debug"))
    on_batch = placed(hardware, "fill", count=4)
    assert on_batch.pool == "batch" and where(on_batch) == [("gpu-0", (0, 1, 2, 3))]
    # gpu-0 is full: what batch granted is gone for debug too.
    debug = {v.pool.name: v for v in hardware.pool_views()}["debug"]
    assert debug.state.capacity.whole == 0
    hardware.add_pool(dataclasses.replace(two_by_four("other"), cost_per_hour=9.0))
    assert placed(hardware, "next", count=4).pool == "batch"
    rejection = refused(hardware, "more", count=4, models=("a100",))
    assert rejection.code == "no_eligible_pool"


def test_pools_of_other_devices_on_one_node_share_only_its_cpu_and_memory(hardware: Hardware) -> None:
    """A node with 2 H100 and 2 MI300X (Slurm lists it in a partition per GRES type): the H100
    pool's grants take nothing of the MI300Xs, but the cores they hold are gone for both."""
    node = Node("vm", 2, cpu=8, memory="16Gi")
    hardware.add_pool(Pool("h100s", "hpc", "nvidia", 2, "eu", model="h100", cost_per_hour=1.0, nodes=(node,)))
    hardware.add_pool(Pool("mi300xs", "hpc", "amd", 2, "eu", model="mi300x", cost_per_hour=1.0, nodes=(node,)))
    assert where(placed(hardware, "h", count=2, cpu=6)) == [("vm", (0, 1))]
    rooms = {v.pool.name: v.state.capacity.nodes for v in hardware.pool_views()}
    assert rooms["mi300xs"] is not None and [(r.whole, r.cpu) for r in rooms["mi300xs"]] == [(2, 2000)]
    amd = placed(hardware, "a", accelerator="amd", count=2, cpu=2)
    assert where(amd) == [("vm", (0, 1))]
    assert reasons(refused(hardware, "more", accelerator="amd", cpu=1), "mi300xs")[0][0] == "capacity_exhausted"


def test_placements_and_releases_in_a_row_store_the_summary_a_full_recount_gives(hardware: Hardware) -> None:
    """A write works out again only the nodes its grant took or gave back (the rooms this process
    kept from its last write on the pool); what it stores is what recounting every node gives
    (audit verify recounts it), for whole devices, MIG slices beside them, shares and gangs."""
    hardware.add_pool(two_by_four())
    hardware.add_pool(t4_shared(nodes=2))
    hardware.add_pool(Pool("a100", "hpc", "nvidia", 8, "eu", model="a100", cost_per_hour=2.0, supports_fractions=True, nodes=2))
    asks = [
        {"count": 1, "models": ("h100",)}, {"count": 2, "models": ("h100",)}, {"fraction": 0.1, "models": ("a100",)},
        {"count": 1, "models": ("a100",)}, {"fraction": 0.25, "models": ("t4",)}, {"fraction": 0.5, "models": ("t4",)},
        {"count": 1, "nodes": 2, "models": ("h100",)}, {"fraction": 0.3, "models": ("a100",)}, {"fraction": 0.25, "models": ("t4",)},
    ]  # fmt: skip
    ids = []
    for i, ask in enumerate(asks):
        record = hardware.place(Workload(f"w{i}", "nvidia", **ask))  # type: ignore[arg-type]
        assert isinstance(record.decision, Placement), record.decision
        ids.append(record.id)
        report = hardware.verify_audit()
        assert report.ok, (i, ask, [p.message for p in report.problems])
    for i in (1, 6, 4, 0, 2, 8, 3, 5, 7):  # a whole device, the gang, a share, a slice ...
        hardware.release(ids[i])
        report = hardware.verify_audit()
        assert report.ok, (i, asks[i], [p.message for p in report.problems])
    assert {s.pool.name: s.free for s in hardware.pools()} == {"ai": 8, "t4": 2, "a100": 8}


def test_a_fraction_that_needs_every_share_of_a_device_holds_the_device_in_its_sharing_mode(hardware: Hardware) -> None:
    """0.75 of a device shared two ways needs both shares. The policy grants 2 of 2 shares; before,
    the nodes refused a share as large as the device, and ``place`` failed with a StateError ("its
    capacity summary says the grant fits but no node has room") on an empty pool."""
    hardware.add_pool(Pool("ts2", "hpc", "nvidia", 2, "eu", model="l4", nodes=(Node("n0", 2, 8, 32768),), sharing="time-slice", shares_per_device=2))
    most = placed(hardware, "most", engine="vllm", fraction=0.75)
    assert most.allocations == (NodeAllocation("n0", (), DeviceShare(0, 2)),)
    half = placed(hardware, "half", engine="vllm", fraction=0.5)
    assert half.allocations == (NodeAllocation("n0", (), DeviceShare(1, 1)),)  # not on the full device
    assert refused(hardware, "whole", engine="vllm").code == "no_capacity"
    hardware.release(next(r.id for r in hardware.decisions(limit=5) if r.decision.workload.name == "most"))  # the device back
    assert placed(hardware, "whole-again", engine="vllm").allocations[0].holdings == (Holding(0),)
    assert hardware.verify_audit().ok
