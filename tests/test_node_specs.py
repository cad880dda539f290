"""Pools with nodes, shared devices and the workload's per-node asks: checked on construction and
from files like every other field, stored so that a pool without nodes reads and hashes as before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from examlops_policy import Pool, SpecError, Workload
from examlops_policy.model import DeviceShare, Holding, Node, NodeAllocation, Placement, node_spec, pool_spec
from examlops_policy.specs import check_workload_facts, pool_from_mapping, pools_from_file, workload_from_file, workload_from_mapping
from examlops_policy.tables import load_tables

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "nodes"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return path


# -- a pool without node information is stored as before --------------------------------------


def test_a_pool_without_nodes_keeps_its_stored_spec() -> None:
    pool = Pool("mn5-acc", "hpc", "nvidia", 64, "es-barcelona", model="H100", partition="acc", gres_type="h100", cost_per_hour=2.5)
    # The spec a pool of the previous release stored, byte for byte.
    assert json.dumps(pool_spec(pool), sort_keys=True, separators=(",", ":")) == (
        '{"accelerator":"nvidia","capabilities":[],"cost_per_hour":2.5,"count":64,"gres_type":"h100","model":"h100",'
        '"name":"mn5-acc","partition":"acc","region":"es-barcelona","supports_fractions":false,"target":"hpc"}'
    )
    assert pool.nodes is None and not pool.nodes_named
    assert pool.node_list() == (Node("mn5-acc", 64),)


# -- nodes: N ---------------------------------------------------------------------------------


def test_n_identical_nodes_split_the_count_evenly() -> None:
    pool = Pool("p", "hpc", "nvidia", 8, "eu", nodes=2, cpu_per_node="500m", memory_per_node="64Gi")
    assert (pool.devices_per_node, pool.cpu_per_node, pool.memory_per_node) == (4, 0.5, 65536)
    assert pool.node_list() == (Node("p-0", 4, 0.5, 65536), Node("p-1", 4, 0.5, 65536))
    assert not pool.nodes_named
    assert Pool(**pool_spec(pool)) == pool  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("values", "field", "expected"),
    [
        ({"count": 10, "nodes": 3}, "nodes", "10 devices do not split evenly over 3 nodes"),
        ({"count": 8, "nodes": 2, "devices_per_node": 3}, "devices_per_node", "count / nodes = 8 / 2 = 4 (got 3)"),
        ({"count": 2, "nodes": 3}, "nodes", "at most 2"),
        ({"count": 8, "nodes": 0}, "nodes", "at least 1"),
        ({"count": 8, "cpu_per_node": 4}, "cpu_per_node", "needs nodes"),
        ({"count": 8, "memory_per_node": "1Gi"}, "memory_per_node", "needs nodes"),
        ({"count": 8, "devices_per_node": 4}, "devices_per_node", "needs nodes"),
        ({"count": 8, "nodes": 2, "memory_per_node": "64G"}, "memory_per_node", "ambiguous"),
        ({"count": 8, "nodes": 2, "cpu_per_node": 0}, "cpu_per_node", "more than 0 cores"),
        ({"count": 8, "nodes": True}, "nodes", "a number of nodes or a list of nodes"),
        ({"count": 8, "nodes": "2"}, "nodes", "a number of nodes or a list of nodes"),
    ],
)
def test_bad_node_counts_name_the_field(values: dict[str, object], field: str, expected: str) -> None:
    with pytest.raises(SpecError) as info:
        Pool("p", "hpc", "nvidia", region="eu", **values)  # type: ignore[arg-type]
    assert info.value.field == field, info.value
    assert expected in info.value.detail


# -- listed nodes -----------------------------------------------------------------------------


def test_listed_nodes_are_named_and_round_trip_through_the_stored_spec() -> None:
    pool = Pool("p", "hpc", "nvidia", 8, "eu", nodes=[
        {"name": "gpu-01", "devices": 4, "cpu": 64, "memory": "512Gi", "block": "b1", "switch": "s1"},
        Node("gpu-02", 4, cpu="500m", state="drained"),
    ])  # fmt: skip
    assert pool.nodes_named
    assert pool.node_list() == (Node("gpu-01", 4, 64, 524288, "up", "b1", "s1"), Node("gpu-02", 4, 0.5, None, "drained"))
    spec = pool_spec(pool)
    assert spec["nodes"] == [
        {"name": "gpu-01", "devices": 4, "cpu": 64, "memory": 524288, "block": "b1", "switch": "s1"},
        {"name": "gpu-02", "devices": 4, "cpu": 0.5, "state": "drained"},
    ]
    # What the store keeps reads back as the same pool (and hashes alike).
    again = Pool(**json.loads(json.dumps(spec)))
    assert again == pool and hash(again) == hash(pool)
    assert [n.usable for n in pool.node_list()] == [True, False]
    assert pool.node_list()[1].cpu_milli == 500
    first = pool.node_list()[0]
    assert (first.cpu_milli, first.memory_mib, first.labels) == (64000, 524288, {"block": "b1", "switch": "s1"})
    assert pool.node_list()[1].labels == {}


@pytest.mark.parametrize(
    ("nodes", "field", "expected"),
    [
        ([{"name": "a", "devices": 4}, {"name": "a", "devices": 4}], "nodes[1].name", "duplicate node name 'a'"),
        ([{"name": "a", "devices": 4}, {"name": "b", "devices": 4, "memory": "64G"}], "nodes[1].memory", "ambiguous"),
        ([{"name": "a", "devices": 4, "cpus": 2}, {"name": "b", "devices": 4}], "nodes[0]", "unknown field(s): cpus"),
        ([{"name": "a"}, {"name": "b", "devices": 8}], "nodes[0]", "missing field(s): devices"),
        ([{"name": "a", "devices": 4, "state": "idle"}, {"name": "b", "devices": 4}], "nodes[0].state", "expected one of up, drained, down"),
        ([{"name": "a,b", "devices": 4}, {"name": "c", "devices": 4}], "nodes[0].name", "may hold only letters"),
        ([{"name": "a", "devices": 0}, {"name": "c", "devices": 8}], "nodes[0].devices", "at least 1"),
        ([{"name": "a", "devices": 4, "switch": "s 1"}, {"name": "c", "devices": 4}], "nodes[0].switch", "a switch label"),
        ([{"name": "a", "devices": 4}, {"name": "c", "devices": 3}], "count", "devices of the listed nodes summed (7; got 8)"),
        ([], "nodes", "1 to 100000 nodes"),
        (["a", "b"], "nodes[0]", "must be a node such as"),
    ],
)
def test_bad_listed_nodes_name_the_node_and_field(nodes: list[object], field: str, expected: str) -> None:
    with pytest.raises(SpecError) as info:
        Pool("p", "hpc", "nvidia", 8, "eu", nodes=nodes)  # type: ignore[arg-type]
    assert info.value.field == field, info.value
    assert expected in info.value.detail


def test_listed_nodes_refuse_per_node_shorthands() -> None:
    with pytest.raises(SpecError, match="cpu_per_node: listed nodes each say their own"):
        Pool("p", "hpc", "nvidia", 4, "eu", nodes=[Node("a", 4)], cpu_per_node=8)


# -- sharing ----------------------------------------------------------------------------------


def test_a_shared_pool_says_how_many_shares_each_device_has() -> None:
    pool = Pool("t4", "cloud", "nvidia", 4, "eu", model="t4", sharing="time-slice", shares_per_device=4)
    assert pool_spec(pool)["sharing"] == "time-slice" and pool_spec(pool)["shares_per_device"] == 4
    assert Pool("t4", "cloud", "nvidia", 4, "eu", sharing="mps", shares_per_device=1000).shares_per_device == 1000


@pytest.mark.parametrize(
    ("values", "field", "expected"),
    [
        ({"sharing": "time-slice"}, "shares_per_device", "must be given with sharing"),
        ({"shares_per_device": 4}, "shares_per_device", "needs sharing"),
        ({"sharing": "vgpu", "shares_per_device": 4}, "sharing", "expected one of time-slice, mps"),
        ({"sharing": "mps", "shares_per_device": 1}, "shares_per_device", "at least 2"),
        ({"sharing": "mps", "shares_per_device": 1001}, "shares_per_device", "at most 1000"),
        ({"sharing": "mps", "shares_per_device": 2, "fixed_profile": "1g.10gb"}, "sharing", "fixed slices"),
    ],
)
def test_bad_sharing_names_the_field(values: dict[str, object], field: str, expected: str) -> None:
    with pytest.raises(SpecError) as info:
        Pool("p", "cloud", "nvidia", 4, "eu", **values)  # type: ignore[arg-type]
    assert info.value.field == field, info.value
    assert expected in info.value.detail


def test_a_cpu_pool_is_not_shared() -> None:
    with pytest.raises(SpecError, match="sharing: a cpu pool has no devices to share"):
        Pool("c", "hpc", "cpu", 64, "eu", sharing="time-slice", shares_per_device=2)


def test_only_nvidia_devices_share_through_mps() -> None:
    """MPS is NVIDIA's; an AMD pool said to use it was accepted (issue 30, case 5)."""
    for accelerator in ("amd", "intel-gaudi", "tpu"):
        with pytest.raises(SpecError, match="sharing: mps is NVIDIA's Multi-Process Service"):
            Pool("m", "hpc", accelerator, 4, "eu", sharing="mps", shares_per_device=4)
    assert Pool("t", "hpc", "amd", 4, "eu", sharing="time-slice", shares_per_device=4).sharing == "time-slice"
    assert Pool("n", "hpc", "nvidia", 4, "eu", sharing="mps", shares_per_device=8).sharing == "mps"


# -- files ------------------------------------------------------------------------------------


def test_the_example_pools_with_nodes_load() -> None:
    pools = {p.name: p for p in pools_from_file(EXAMPLES / "pools.yaml")}
    assert pools["ai-h100"].count == 32 and pools["ai-h100"].devices_per_node == 4 and pools["ai-h100"].memory_per_node == 1 << 20
    a100 = pools["ai-a100"]
    assert a100.count == 16 and [n.state for n in a100.node_list()] == ["up", "up", "up", "drained"]
    assert [n.switch for n in a100.node_list()] == ["s1", "s1", "s2", "s3"]
    assert (pools["infer-t4"].sharing, pools["infer-t4"].shares_per_device) == ("time-slice", 4)


def test_count_may_be_left_to_the_nodes(tmp_path: Path) -> None:
    path = write(tmp_path, "pools:\n  - {name: a, target: hpc, accelerator: amd, region: eu, nodes: 2, devices_per_node: 8}\n"
                           "  - {name: b, target: hpc, accelerator: amd, region: eu, nodes: [{name: n1, devices: 2}, {name: n2, devices: 6}]}\n")  # fmt: skip
    a, b = pools_from_file(path)
    assert (a.count, b.count) == (16, 8)


@pytest.mark.parametrize(
    ("entry", "field", "expected"),
    [
        ("{name: a, target: hpc, accelerator: amd, region: eu}", "pools[0]", "'count' is a required property"),
        ("{name: a, target: hpc, accelerator: amd, region: eu, nodes: 2}", "pools[0].count", "give count (split evenly over the nodes) or devices_per_node"),
        ("{name: a, target: hpc, accelerator: amd, count: 6, region: eu, nodes: 4}", "pools[0].nodes", "6 devices do not split evenly over 4 nodes"),
        ("{name: a, target: hpc, accelerator: amd, count: 8, region: eu, nodes: 2, memory_per_node: 64G}", "pools[0].memory_per_node", "ambiguous"),
        ("{name: a, target: hpc, accelerator: amd, count: 8, region: eu, nodes: 2, cpu_per_node: 2 cores}", "pools[0].cpu_per_node", "expected cores"),
        ("{name: a, target: hpc, accelerator: amd, count: 8, region: eu, cpu_per_node: 2}", "pools[0]", "'nodes' is a dependency of 'cpu_per_node'"),
        ("{name: a, target: hpc, accelerator: amd, count: 8, region: eu, nodes: [{name: n1, devices: 8, colour: red}]}", "pools[0].nodes[0]", "unknown field(s): 'colour'"),
        ("{name: a, target: hpc, accelerator: amd, region: eu, nodes: [{name: n1, devices: 8, state: idle}]}", "pools[0].nodes[0].state", "expected one of up, drained, down"),
        ("{name: a, target: hpc, accelerator: amd, region: eu, nodes: [{name: n1, devices: 4}, {name: n1, devices: 4}]}", "pools[0].nodes[1].name", "duplicate node name"),
        ("{name: a, target: cloud, accelerator: nvidia, count: 4, region: eu, sharing: mps}", "pools[0]", "'shares_per_device' is a dependency of 'sharing'"),
    ],
)
def test_pool_file_node_errors_name_file_and_field(tmp_path: Path, entry: str, field: str, expected: str) -> None:
    path = write(tmp_path, f"pools:\n  - {entry}\n")
    with pytest.raises(SpecError) as info:
        pools_from_file(path)
    message = str(info.value)
    assert message.startswith(f"{path}: {field}: "), message
    assert expected in message


def test_command_line_values_are_checked_like_files() -> None:
    pool = pool_from_mapping({"name": "p", "target": "hpc", "accelerator": "nvidia", "count": 8, "region": "eu", "nodes": 2,
                              "cpu_per_node": "64", "memory_per_node": "512Gi"}, source="exa hardware add-pool")  # fmt: skip
    assert (pool.cpu_per_node, pool.memory_per_node) == (64, 524288)
    with pytest.raises(SpecError, match="^exa hardware add-pool: nodes: 8 devices do not split evenly over 3 nodes"):
        pool_from_mapping({"name": "p", "target": "hpc", "accelerator": "nvidia", "count": 8, "region": "eu", "nodes": 3}, source="exa hardware add-pool")


# -- workloads --------------------------------------------------------------------------------


def test_a_workload_asks_per_node() -> None:
    w = Workload("w", "nvidia", count=4, nodes=2, cpu="1500m", memory="256Gi", topology="same-switch", models=["H100", "a100"])
    assert (w.count, w.nodes, w.cpu, w.cpu_milli, w.memory) == (4, 2, 1.5, 1500, 262144)
    assert (w.topology, w.topology_mode, w.models, w.isolation) == ("same-switch", "required", ("a100", "h100"), "any")
    plain = Workload("w", "nvidia")
    assert (plain.nodes, plain.cpu, plain.memory, plain.topology, plain.topology_mode, plain.models, plain.isolation) == (1, None, None, None, None, (), "any")


@pytest.mark.parametrize(
    ("values", "field", "expected"),
    [
        ({"nodes": 0}, "nodes", "at least 1"),
        ({"nodes": 10_001}, "nodes", "at most 10000"),
        ({"fraction": 0.5, "nodes": 2}, "nodes", "must be 1 when a fraction below 1"),
        ({"count": 100, "nodes": 1001}, "nodes", "count x nodes is at most 100000"),
        ({"cpu": 0}, "cpu", "more than 0 cores"),
        ({"cpu": "lots"}, "cpu", "expected cores"),
        ({"memory": "8G"}, "memory", "ambiguous"),
        ({"memory": 0}, "memory", "at least 1 MiB"),
        ({"topology": "same-rack"}, "topology", "expected one of same-block, same-switch"),
        ({"topology_mode": "preferred"}, "topology_mode", "needs topology"),
        ({"topology": "same-block", "topology_mode": "maybe"}, "topology_mode", "expected one of required, preferred"),
        ({"models": "v100"}, "models", "must be a list of models"),
        ({"models": ["v 100"]}, "models", "may hold only letters"),
        ({"isolation": "strict"}, "isolation", "expected one of required, any"),
    ],
)
def test_bad_per_node_asks_name_the_field(values: dict[str, object], field: str, expected: str) -> None:
    with pytest.raises(SpecError) as info:
        Workload("w", "nvidia", **values)  # type: ignore[arg-type]
    assert info.value.field == field, info.value
    assert expected in info.value.detail


def test_the_example_workloads_with_nodes_load() -> None:
    gang = workload_from_file(EXAMPLES / "gang.yaml")
    assert (gang.count, gang.nodes, gang.cpu, gang.memory, gang.topology, gang.models) == (4, 2, 32, 262144, "same-switch", ("a100", "h100"))
    shared = workload_from_file(EXAMPLES / "shared-infer.yaml")
    assert (shared.fraction, shared.isolation, shared.memory) == (0.25, "any", 8192)


@pytest.mark.parametrize(
    ("text", "field", "expected"),
    [
        ("{name: w, accelerator: amd, nodes: 0}", "workload.nodes", "minimum of 1"),
        ("{name: w, accelerator: amd, fraction: 0.5, nodes: 2}", "workload.nodes", "nodes must be 1 when a fraction below 1 is requested (got 2)"),
        ("{name: w, accelerator: amd, memory: 8G}", "workload.memory", "ambiguous"),
        ("{name: w, accelerator: amd, cpu: -1}", "workload.cpu", "less than or equal to the minimum of 0"),
        ("{name: w, accelerator: amd, topology_mode: preferred}", "workload", "'topology' is a dependency of 'topology_mode'"),
        ("{name: w, accelerator: amd, isolation: strict}", "workload.isolation", "expected one of required, any"),
        ("{name: w, accelerator: amd, models: v100}", "workload.models", "expected a list (got 'v100')"),
    ],
)
def test_workload_file_node_errors_name_the_field(tmp_path: Path, text: str, field: str, expected: str) -> None:
    path = write(tmp_path, f"workload: {text}\n")
    with pytest.raises(SpecError) as info:
        workload_from_file(path)
    message = str(info.value)
    assert message.startswith(f"{path}: {field}: "), message
    assert expected in message


def test_acceptable_models_must_be_known_models_of_the_accelerator() -> None:
    tables = load_tables()
    assert check_workload_facts(workload_from_mapping({"name": "w", "accelerator": "nvidia", "models": ["V100", "t4"]}), tables).models == ("t4", "v100")
    with pytest.raises(SpecError, match="models: unknown model 'v100-16gb'"):
        check_workload_facts(Workload("w", "nvidia", models=("v100-16gb",)), tables)
    with pytest.raises(SpecError, match="models: model 'mi300x' is an amd device, not nvidia"):
        check_workload_facts(Workload("w", "nvidia", models=("mi300x",)), tables)


# -- the grant's shape --------------------------------------------------------------------------


def test_a_placement_holds_node_allocations() -> None:
    whole = NodeAllocation("gpu-01", holdings=(Holding(0), Holding(1)), cpu_milli=8000, memory_mib=65536)
    shared = NodeAllocation("t4-03", share=DeviceShare(device=2, shares=1), cpu_milli=500, memory_mib=2048)
    assert (whole.devices, shared.devices) == (2, 0)
    assert "allocations" in Placement.__dataclass_fields__
    assert Placement.__dataclass_fields__["allocations"].default == ()
    assert node_spec(Node("n", 4, state="down")) == {"name": "n", "devices": 4, "state": "down"}
