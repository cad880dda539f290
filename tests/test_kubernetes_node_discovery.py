"""Kubernetes discovery reads nodes: allocatable CPU, memory and devices, cordoned and NotReady
nodes, the topology labels the caller names, time-sliced and MPS GPUs, and what bound pods hold on
each node. The real API server is read in tests/test_kubernetes_nodes.py."""

from __future__ import annotations

from decimal import Decimal

from examlops_policy.discovery import Discovery, DiscoveredPool, NodeUsage
from examlops_policy.discovery.kubernetes import pools_from_nodes
from examlops_policy.executors.kubernetes_api import NodeInfo, PodUsage
from examlops_policy.model import Node
from examlops_policy.tables import load_tables

TABLES = load_tables()
REGION = "topology.kubernetes.io/region"
BLOCK = "cloud.google.com/gce-topology-block"
SWITCH = "cloud.google.com/gce-topology-subblock"
GIB = 1024**3


def make(name: str, allocatable: dict[str, int | str], labels: dict[str, str] | None = None, *, ready: bool = True, cordoned: bool = False) -> NodeInfo:
    return NodeInfo(name, {REGION: "us-east-1", **(labels or {})}, {k: Decimal(str(v)) for k, v in allocatable.items()}, ready, cordoned)


def pod(node: str, requests: dict[str, int | str], name: str = "p") -> PodUsage:
    return PodUsage("default", name, node, "Running", {k: Decimal(str(v)) for k, v in requests.items()}, False)


def discover(nodes: list[NodeInfo], pods: list[PodUsage] = [], **labels: str) -> Discovery:  # noqa: B006 - never mutated
    return pools_from_nodes(nodes, pods, TABLES.regions, models=TABLES.models, **labels)  # type: ignore[arg-type]


def by_name(found: Discovery) -> dict[str, DiscoveredPool]:
    return {d.pool.name: d for d in found.pools}


H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
NODES = [
    make("h-a", {"cpu": "95.5", "memory": 512 * GIB, "nvidia.com/gpu": 8}, {**H100, BLOCK: "b1", SWITCH: "s1"}),
    make("h-b", {"cpu": 96, "memory": 1024 * GIB, "nvidia.com/gpu": 8}, {**H100, BLOCK: "b1", SWITCH: "s2"}, cordoned=True),
    make("h-c", {"cpu": 96, "nvidia.com/gpu": 8}, {**H100, BLOCK: "b2"}, ready=False),
]


def test_each_pool_lists_its_nodes_with_allocatable_cpu_memory_and_state() -> None:
    (found,) = discover(NODES).pools
    assert found.pool.nodes == (
        Node("h-a", 8, cpu=95.5, memory=524288),
        Node("h-b", 8, cpu=96, memory=1048576, state="drained"),
        Node("h-c", 8, cpu=96, state="down"),
    )
    assert found.pool.count == 24 and found.free == 8  # only h-a takes work


def test_topology_labels_are_read_only_under_the_names_given() -> None:
    (guessing,) = discover(NODES).pools
    assert all(n.block is None and n.switch is None for n in guessing.pool.node_list())
    (found,) = discover(NODES, block_label=BLOCK, switch_label=SWITCH).pools
    assert [(n.block, n.switch) for n in found.pool.node_list()] == [("b1", "s1"), ("b1", "s2"), ("b2", None)]


def test_what_bound_pods_hold_is_reported_per_node() -> None:
    pods = [pod("h-a", {"nvidia.com/gpu": 3, "cpu": "2.5", "memory": 8 * GIB}), pod("h-a", {"cpu": 1}, name="q")]
    (found,) = discover(NODES, pods).pools
    usage = {u.node: u for u in found.usage}
    assert usage["h-a"] == NodeUsage("h-a", devices=3, shares=0, cpu_milli=3500, memory_mib=8192)
    assert usage["h-b"] == NodeUsage("h-b", devices=0, shares=0, cpu_milli=0, memory_mib=0)
    assert found.free == 5


def test_time_sliced_gpus_make_a_shared_pool_of_physical_devices() -> None:
    t4 = {"nvidia.com/gpu.product": "Tesla-T4-SHARED", "nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.count": "4"}
    nodes = [
        make("t4-a", {"cpu": 16, "memory": 64 * GIB, "nvidia.com/gpu": 16}, t4),
        make("t4-b", {"cpu": 16, "nvidia.com/gpu": 16}, {**t4, "nvidia.com/gpu.sharing-strategy": "time-slicing"}),
        make("t4-m", {"cpu": 16, "nvidia.com/gpu": 8}, {**t4, "nvidia.com/gpu.replicas": "2", "nvidia.com/gpu.sharing-strategy": "mps"}),
        make("t4-x", {"cpu": 16, "nvidia.com/gpu": 4}, {"nvidia.com/gpu.product": "Tesla-T4"}),
    ]
    pools = by_name(discover(nodes, [pod("t4-a", {"nvidia.com/gpu": 6})]))
    shared = pools["k8s-us-east-1-t4-shared"]
    assert (shared.pool.sharing, shared.pool.shares_per_device, shared.pool.count) == ("time-slice", 4, 8)
    assert [n.devices for n in shared.pool.node_list()] == [4, 4]
    assert shared.free == 6.5  # 6 of t4-a's 16 replicas are taken: 1.5 GPUs
    assert {u.node: u.shares for u in shared.usage} == {"t4-a": 6, "t4-b": 0}
    mps = pools["k8s-us-east-1-t4-mps"]
    assert (mps.pool.sharing, mps.pool.shares_per_device, mps.pool.count) == ("mps", 2, 4)
    assert pools["k8s-us-east-1-t4"].pool.sharing is None  # not shared: its own pool


def test_replicas_that_do_not_divide_into_gpus_are_reported() -> None:
    t4 = {"nvidia.com/gpu.product": "Tesla-T4-SHARED", "nvidia.com/gpu.replicas": "4"}
    found = discover([make("t4-odd", {"nvidia.com/gpu": 6}, t4)])
    assert found.pools == ()
    assert any("not a whole number of GPUs of 4 replicas" in w for w in found.warnings), found.warnings


def test_a_node_in_two_pools_is_the_same_node() -> None:
    mig = make("mig-a", {"cpu": 64, "memory": 256 * GIB, "nvidia.com/mig-1g.10gb": 7, "nvidia.com/mig-3g.40gb": 2},
               {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"})  # fmt: skip
    pools = by_name(discover([mig]))
    small, large = pools["k8s-us-east-1-a100-mig-1g.10gb"].pool, pools["k8s-us-east-1-a100-mig-3g.40gb"].pool
    assert small.node_list() == (Node("mig-a", 7, 64, 262144),) and large.node_list() == (Node("mig-a", 2, 64, 262144),)


def test_unusable_topology_label_values_are_left_out_and_said() -> None:
    found = discover([make("h-a", {"nvidia.com/gpu": 8}, {**H100, SWITCH: "-bad"})], switch_label=SWITCH)
    assert found.pools[0].pool.node_list()[0].switch is None
    assert any("is no usable topology label value" in w for w in found.warnings)
