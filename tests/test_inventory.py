"""A pools file's nodes, each stated once (``nodes:``), and pools that name them (issue 30).

A pool that names nodes is the pool that lists them inline with their facts: the same Pool, the
same stored spec, so a state written from inline pools is unchanged (every grant kept, nothing
to migrate) when the same fleet is applied in the new form. The schema (pools-file.schema.json)
and the loader agree on what is well formed; what only the file as a whole can say (a node
named that nodes: does not state, a pool's node without the pool's devices, a fact said twice
otherwise) is the loader's, and each error names the file, the pool, the field and the node.
Through the real OPA and store: the example's overlapping partitions draw on one node."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from examlops_policy import Placement, Pool, Workload
from examlops_policy.errors import SpecError
from examlops_policy.hardware import Hardware
from examlops_policy.model import Node, pool_spec
from examlops_policy.specs import pool_from_mapping, pools_from_file
from examlops_policy.tables import schema_dir

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "nodes" / "inventory.yaml"

NODES = [
    {"name": "gpu-0", "model": "H100", "devices": 4, "cpu": 32, "memory": "256Gi", "block": "b1", "switch": "s1"},
    {"name": "gpu-1", "model": "H100", "devices": 4, "cpu": 32, "memory": "256Gi", "block": "b1", "switch": "s1", "state": "drained"},
    {"name": "a100-0", "model": "A100", "devices": 2, "supports_fractions": True, "cpu": 16},
    {"name": "cpu-0", "cpu": 128, "memory": "1Ti"},
]


def pool(name: str = "p", **fields: object) -> dict[str, object]:
    return {"name": name, "target": "hpc", "accelerator": "nvidia", "region": "eu", **fields}


def write(tmp_path: Path, doc: object) -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def schema_accepts(doc: object) -> bool:
    from jsonschema import Draft202012Validator
    from referencing import Registry, Resource

    resources = []
    for path in sorted(schema_dir().glob("*.schema.json")):
        contents = json.loads(path.read_text(encoding="utf-8"))
        resources.append((contents["$id"], Resource.from_contents(contents)))
    schema = json.loads((schema_dir() / "pools-file.schema.json").read_text(encoding="utf-8"))
    return Draft202012Validator(schema, registry=Registry().with_resources(resources)).is_valid(doc)


# -- a named node is the node listed inline ----------------------------------------------------


def test_a_pool_naming_nodes_is_the_pool_listing_them_inline(tmp_path: Path) -> None:
    named = pools_from_file(write(tmp_path, {"nodes": NODES, "pools": [
        pool("gpus", nodes=["gpu-0", "gpu-1"], cost_per_hour=2.0),
        pool("cores", accelerator="cpu", nodes=["gpu-0", "cpu-0"]),
        pool("mig", nodes=["a100-0"]),
        pool("shared", nodes=["a100-0"], sharing="time-slice", shares_per_device=4),
    ]}))  # fmt: skip
    inline = [
        Pool("gpus", "hpc", "nvidia", 8, "eu", model="h100", cost_per_hour=2.0, nodes=(
            Node("gpu-0", 4, 32, 262144, block="b1", switch="s1"), Node("gpu-1", 4, 32, 262144, "drained", "b1", "s1"))),
        Pool("cores", "hpc", "cpu", 160, "eu", nodes=(Node("gpu-0", 32, 32, 262144, block="b1", switch="s1"), Node("cpu-0", 128, 128, 1048576))),
        Pool("mig", "hpc", "nvidia", 2, "eu", model="a100", supports_fractions=True, nodes=(Node("a100-0", 2, 16),)),
        # A sharing pool offers shares: it does not take the nodes' slicing.
        Pool("shared", "hpc", "nvidia", 2, "eu", model="a100", sharing="time-slice", shares_per_device=4, nodes=(Node("a100-0", 2, 16),)),
    ]  # fmt: skip
    assert named == inline
    assert [pool_spec(p) for p in named] == [pool_spec(p) for p in inline]


def test_a_pool_of_fixed_slices_naming_nodes_counts_the_slices_they_offer(tmp_path: Path) -> None:
    """A node offers fixed slices as resources of their own (MIG's mixed strategy: Slurm's typed GRES
    gpu:1g.10gb:14); a pool of fixed slices naming it counts those, and takes its model, CPU,
    memory, state and labels; it does not take the node's slicing (it grants one profile)."""
    nodes = [
        {"name": "m0", "model": "A100", "devices": 2, "supports_fractions": True, "slices": {"1g.10gb": 14, "3g.40gb": 4}, "cpu": 16,
         "switch": "s1"},
        {"name": "m1", "model": "A100", "devices": 2, "slices": {"1g.10gb": 7}, "cpu": 16, "state": "drained"},
    ]  # fmt: skip
    named = pools_from_file(write(tmp_path, {"nodes": nodes, "pools": [
        pool("one-g", fixed_profile="1g.10gb", nodes=["m0", {"name": "m1", "devices": 7}]),
        pool("three-g", fixed_profile="3g.40gb", nodes=["m0"]),
    ]}))  # fmt: skip
    assert named == [
        Pool("one-g", "hpc", "nvidia", 21, "eu", model="a100", fixed_profile="1g.10gb",
             nodes=(Node("m0", 14, 16, switch="s1"), Node("m1", 7, 16, state="drained"))),
        Pool("three-g", "hpc", "nvidia", 4, "eu", model="a100", fixed_profile="3g.40gb", nodes=(Node("m0", 4, 16, switch="s1"),)),
    ]  # fmt: skip


def test_an_inline_node_under_a_stated_name_takes_what_it_leaves_out(tmp_path: Path) -> None:
    (p,) = pools_from_file(write(tmp_path, {"nodes": NODES, "pools": [pool(nodes=[{"name": "gpu-1", "devices": 4}, "gpu-0"])]}))
    assert p.nodes == (Node("gpu-1", 4, 32, 262144, "drained", "b1", "s1"), Node("gpu-0", 4, 32, 262144, block="b1", switch="s1"))
    assert p.model == "h100" and p.count == 8


def test_a_file_without_nodes_reads_as_before(tmp_path: Path) -> None:
    inline = {"pools": [pool(count=4, nodes=[{"name": "x", "devices": 4, "cpu": 8}])]}
    (p,) = pools_from_file(write(tmp_path, inline))
    assert p == Pool("p", "hpc", "nvidia", 4, "eu", nodes=(Node("x", 4, 8),)) and p.model is None


def test_the_example_names_every_node_it_states_and_reads() -> None:
    pools = {p.name: p for p in pools_from_file(EXAMPLE)}
    assert {n.name for n in pools["batch"].node_list()} == {n.name for n in pools["interactive"].node_list()} == {"gpu-0", "gpu-1"}
    assert pools["cpu"].count == 64 and pools["batch"].count == 8 and pools["batch"].model == "h100"
    assert pools["l4"].nodes == pools["l4-shared"].nodes


# -- schema and loader agree --------------------------------------------------------------------

GOOD = [
    {"nodes": NODES, "pools": [pool(nodes=["gpu-0"])]},
    {"nodes": NODES, "pools": [pool(nodes=["gpu-0", {"name": "gpu-9", "devices": 2, "cpu": 4}])]},
    {"nodes": NODES, "pools": [pool(accelerator="cpu", nodes=["cpu-0"], partition="cpu")]},
    {"nodes": NODES, "pools": [pool(nodes=[{"name": "gpu-0", "devices": 4}], count=4)]},
    {"nodes": [], "pools": [pool(count=2)]},
    {"nodes": [{"name": "idle", "cpu": 4}], "pools": []},
    {"pools": [pool(count=2, nodes=[{"name": "a", "devices": 2}])]},
]

# (document, field the error names): the schema refuses them, and so does the loader, there.
MALFORMED = [
    ({"nodes": [{"name": "x", "devices": 2}], "pools": []}, "nodes[0]"),  # devices of no model
    ({"nodes": [{"name": "x", "model": "H100"}], "pools": []}, "nodes[0]"),  # a model, no devices
    ({"nodes": [{"name": "x", "supports_fractions": True}], "pools": []}, "nodes[0]"),
    ({"nodes": [{"name": "x", "colour": "red"}], "pools": []}, "nodes[0]"),
    ({"nodes": [{"name": "x y"}], "pools": []}, "nodes[0].name"),
    ({"nodes": [{"name": "x", "memory": "64G"}], "pools": []}, "nodes[0].memory"),
    ({"nodes": [{"name": "x", "state": "broken"}], "pools": []}, "nodes[0].state"),
    ({"nodes": [{"name": "x", "model": "H100", "devices": 0}], "pools": []}, "nodes[0].devices"),
    ({"nodes": {"x": {}}, "pools": []}, "nodes"),
    ({"nodes": NODES, "pools": [pool(nodes=["gpu-0"], cpu_per_node=4)]}, "pools[0]"),
    ({"nodes": NODES, "pools": [pool(nodes=["gpu-0"], target="moon")]}, "pools[0].target"),
    ({"nodes": NODES, "pools": [pool(nodes=["gpu-0"], sharing="mps")]}, "pools[0]"),
    ({"nodes": NODES, "pools": [pool(nodes=["gpu 0"])]}, "pools[0].nodes[0]"),
    ({"nodes": NODES, "pools": [pool(nodes=["gpu-0", {"name": "z"}])]}, "pools[0].nodes[1]"),
    ({"nodes": NODES, "pools": [{"name": "p", "nodes": ["gpu-0"]}]}, "pools[0]"),
    ({"nodes": NODES, "pools": [pool(nodes=[])]}, "pools[0].nodes"),
    ({"nodes": [{"name": "x", "slices": {"1g.10gb": 7}}], "pools": []}, "nodes[0]"),  # slices of no model
    ({"nodes": [{"name": "x", "model": "A100", "devices": 1, "slices": {"1g.10gb": 0}}], "pools": []}, "nodes[0].slices.1g.10gb"),
    ({"nodes": [{"name": "x", "model": "A100", "devices": 1, "slices": {}}], "pools": []}, "nodes[0].slices"),
]

# (document, field, what the message names): well formed, refused by what the file says as a whole.
REFUSED = [
    ({"nodes": NODES, "pools": [pool("a", nodes=["gpu-9"])]}, "pools[0].nodes[0]", ["pool 'a'", "node 'gpu-9'", "gpu-0"]),
    ({"pools": [pool("a", nodes=["gpu-0"])]}, "pools[0].nodes[0]", ["pool 'a'", "node 'gpu-0'", "no nodes: section"]),
    ({"nodes": NODES, "pools": [pool("a", nodes=["gpu-0", "a100-0"])]}, "pools[0].nodes", ["pool 'a'", "'gpu-0' (h100)", "'a100-0' (a100)"]),
    ({"nodes": NODES, "pools": [pool("a", accelerator="amd", nodes=["gpu-0"])]}, "pools[0].nodes[0]", ["pool 'a'", "node 'gpu-0'", "no amd device"]),
    ({"nodes": NODES, "pools": [pool("a", nodes=["cpu-0"])]}, "pools[0].nodes[0]", ["pool 'a'", "node 'cpu-0'", "no devices"]),
    ({"nodes": [{"name": "c", "cpu": 1.5}], "pools": [pool("a", accelerator="cpu", nodes=["c"])]}, "pools[0].nodes[0]", ["node 'c'", "whole number of cores"]),
    ({"nodes": [{"name": "g", "model": "L4", "devices": 1}], "pools": [pool("a", accelerator="cpu", nodes=["g"])]}, "pools[0].nodes[0]", ["node 'g'", "does not state its cpu"]),
    ({"nodes": NODES, "pools": [pool("a", model="A100", nodes=["gpu-0"])]}, "pools[0].model", ["pool 'a'", "node 'gpu-0'", "h100"]),
    ({"nodes": NODES, "pools": [pool("a", nodes=[{"name": "gpu-0", "devices": 4, "cpu": 64}])]}, "pools[0].nodes[0].cpu",
     ["pool 'a'", "node 'gpu-0'", "CPU 64", "says 32 (nodes[0])"]),
    ({"nodes": NODES, "pools": [pool("a", nodes=[{"name": "gpu-0", "devices": 8}])]}, "pools[0].nodes[0].devices", ["node 'gpu-0'", "devices 8", "says 4"]),
    ({"nodes": NODES, "pools": [pool("a", nodes=[{"name": "gpu-1", "devices": 4, "state": "up"}])]}, "pools[0].nodes[0].state",
     ["node 'gpu-1'", "state up", "says drained (nodes[1])"]),
    ({"nodes": NODES, "pools": [pool("a", nodes=[{"name": "gpu-0", "devices": 4, "switch": "s9"}])]}, "pools[0].nodes[0].switch", ["switch s9", "says s1"]),
    ({"nodes": NODES, "pools": [pool("a", fixed_profile="1g.10gb", nodes=["a100-0"])]}, "pools[0].nodes[0]",
     ["fixed 1g.10gb slices", "node 'a100-0' offers none", "no slices:", "slices: {1g.10gb: N}"]),
    ({"nodes": [{"name": "m", "model": "A100", "devices": 2, "slices": {"2g.20gb": 6}}], "pools": [pool("a", fixed_profile="1g.10gb", nodes=["m"])]},
     "pools[0].nodes[0]", ["node 'm' offers none", "slices: {2g.20gb: 6}"]),
    ({"nodes": [{"name": "m", "model": "A100", "devices": 2, "slices": {"1g.10gb": 14}}],
      "pools": [pool("a", fixed_profile="1g.10gb", nodes=[{"name": "m", "devices": 12}])]}, "pools[0].nodes[0].devices",
     ["node 'm' has slices of the pool's profile 12", "says 14"]),
    ({"nodes": [{"name": "m", "model": "A100", "devices": 2, "slices": {"9g.99gb": 1}}], "pools": []}, "nodes[0].slices",
     ["node 'm' offers slices of profile '9g.99gb'", "1g.10gb"]),
    ({"nodes": [{"name": "l", "model": "L4", "devices": 1, "slices": {"1g.10gb": 1}}], "pools": []}, "nodes[0].slices",
     ["'1g.10gb'", "none: it cannot be partitioned"]),
    ({"nodes": NODES, "pools": [pool("a", supports_fractions=True, nodes=[{"name": "n", "devices": 1}]), pool("b", nodes=["gpu-0", "gpu-0"])]},
     "pools[1].nodes[1].name", ["duplicate node name 'gpu-0'"]),
    ({"nodes": [*NODES, {"name": "gpu-0", "cpu": 2}], "pools": []}, "nodes[4].name", ["node 'gpu-0' is stated twice", "nodes[0]"]),
    ({"nodes": [{"name": "x", "model": "Z9", "devices": 1}], "pools": []}, "nodes[0].model", ["unknown model 'Z9'"]),
    ({"nodes": [{"name": "x", "model": "H100", "devices": 1, "supports_fractions": False}], "pools": [pool("a", supports_fractions=True, nodes=["x"])]},
     "pools[0].supports_fractions", ["node 'x'", "not cut"]),
    ({"nodes": [{"name": "x", "model": "H100", "devices": 1, "supports_fractions": True}, {"name": "y", "model": "H100", "devices": 1}],
      "pools": [pool("a", nodes=["x", "y"])]}, "pools[0].nodes", ["node 'x'", "node 'y'", "say supports_fractions on the pool"]),
    ({"nodes": NODES, "pools": [pool("a", count=3, nodes=["gpu-0"])]}, "pools[0].count", ["devices of the listed nodes summed (4; got 3)"]),
]  # fmt: skip


@pytest.mark.parametrize("doc", GOOD)
def test_the_schema_and_the_loader_accept_a_good_file(tmp_path: Path, doc: object) -> None:
    assert schema_accepts(doc)
    pools_from_file(write(tmp_path, doc))


@pytest.mark.parametrize(("doc", "field"), MALFORMED)
def test_the_schema_and_the_loader_refuse_a_malformed_file(tmp_path: Path, doc: object, field: str) -> None:
    assert not schema_accepts(doc)
    path = write(tmp_path, doc)
    with pytest.raises(SpecError) as info:
        pools_from_file(path)
    assert (info.value.source, info.value.field) == (str(path), field), info.value


@pytest.mark.parametrize(("doc", "field", "words"), REFUSED)
def test_what_the_file_says_as_a_whole_is_the_loaders_and_each_error_names_it(tmp_path: Path, doc: object, field: str, words: list[str]) -> None:
    assert schema_accepts(doc)  # well formed: only the file as a whole says it is wrong
    path = write(tmp_path, doc)
    with pytest.raises(SpecError) as info:
        pools_from_file(path)
    assert (info.value.source, info.value.field) == (str(path), field), info.value
    assert all(w in info.value.detail for w in words), info.value.detail


def test_the_pool_schema_of_a_pool_naming_nodes_is_the_pool_schemas_fields() -> None:
    """One source for a pool's fields: a pool naming nodes refers to pool.schema.json's, field by
    field, less those of N identical nodes (named nodes say their own)."""
    pool_doc = json.loads((schema_dir() / "pool.schema.json").read_text(encoding="utf-8"))
    file_doc = json.loads((schema_dir() / "pools-file.schema.json").read_text(encoding="utf-8"))
    named = file_doc["$defs"]["pool_naming_nodes"]["properties"]
    assert set(named) == set(pool_doc["properties"]) - {"devices_per_node", "cpu_per_node", "memory_per_node"}
    assert all(v == {"$ref": f"pool.schema.json#/properties/{k}"} for k, v in named.items() if k != "nodes")
    assert file_doc["$defs"]["pool_naming_nodes"]["required"] == [*pool_doc["required"], "nodes"]


def test_a_pool_on_its_own_naming_a_node_says_nothing_states_it() -> None:
    with pytest.raises(SpecError) as info:
        pool_from_mapping(pool(nodes=["gpu-0"]), source="request body", field="pools[0]")
    assert info.value.field == "pools[0].nodes[0]" and "node 'gpu-0' is named" in info.value.detail


# -- through the real OPA and store -------------------------------------------------------------


def _placed(hw: Hardware, workload: Workload) -> Placement | None:
    decision = hw.place(workload).decision
    return decision if isinstance(decision, Placement) else None


def test_the_examples_overlapping_pools_draw_on_one_node(hardware: Hardware) -> None:
    changes = hardware.apply_file(EXAMPLE)
    assert [c.action for c in changes] == ["added"] * 5
    train = _placed(hardware, Workload("train", "nvidia", models=("h100",), count=4, cpu=16))
    dev = _placed(hardware, Workload("dev", "nvidia", models=("h100",), capabilities=("interactive",), cpu=8))
    assert train is not None and dev is not None and (train.pool, dev.pool) == ("batch", "interactive")
    free = {p.pool.name: p.free for p in hardware.pools()}
    assert free["batch"] == free["interactive"] == 3  # one device of each grant's node is gone for both
    cores = _placed(hardware, Workload("cores", "cpu", engine="cpu", count=20))
    assert cores is not None and cores.pool == "cpu"
    # 20 cores of the cpu pool and 8 of dev's leave gpu-1 4 cores: 3 GPUs there, with 8 cores, do not fit.
    assert _placed(hardware, Workload("more", "nvidia", models=("h100",), count=3, cpu=8)) is None
    assert _placed(hardware, Workload("more", "nvidia", models=("h100",), count=3, cpu=4)) is not None
    quarter = _placed(hardware, Workload("quarter", "nvidia", models=("l4",), fraction=0.25))
    whole = _placed(hardware, Workload("whole", "nvidia", models=("l4",)))
    assert quarter is not None and whole is not None and (quarter.pool, whole.pool) == ("l4-shared", "l4")
    assert _placed(hardware, Workload("whole-2", "nvidia", models=("l4",))) is None  # device 0 is time-sliced
    assert hardware.verify_audit().ok


def test_a_state_written_from_inline_pools_is_unchanged_by_the_same_fleet_named(hardware: Hardware, tmp_path: Path) -> None:
    """No migration: the file in the new form is the stored fleet, so apply changes nothing and
    every live grant stays where it is."""
    inline = {"pools": [
        {**pool("batch", model="H100", cost_per_hour=2.0), "nodes": [
            {"name": "gpu-0", "devices": 4, "cpu": 32, "memory": "256Gi", "block": "b1", "switch": "s1"},
            {"name": "gpu-1", "devices": 4, "cpu": 32, "memory": "256Gi", "block": "b1", "switch": "s1", "state": "drained"}]},
        {**pool("cores", accelerator="cpu"), "nodes": [{"name": "cpu-0", "devices": 128, "cpu": 128, "memory": "1Ti"}]},
    ]}  # fmt: skip
    hardware.apply_file(write(tmp_path, inline))
    held = [_placed(hardware, Workload(f"w{i}", "nvidia", models=("h100",), cpu=4)) for i in range(3)]
    held.append(_placed(hardware, Workload("c", "cpu", engine="cpu", count=10)))
    assert all(held)

    def seen() -> dict[str, object]:
        return {s.pool.name: (s.free, s.pool, hardware.pool(s.pool.name).holdings, hardware.pool(s.pool.name).nodes) for s in hardware.pools()}

    before = seen()
    assert sum(len(v[2]) for v in before.values()) == 3 + 10  # type: ignore[arg-type]  # 3 GPUs, 10 cores
    named = {"nodes": [n for n in NODES if n["name"] != "a100-0"], "pools": [
        pool("batch", cost_per_hour=2.0, nodes=["gpu-0", "gpu-1"]), pool("cores", accelerator="cpu", nodes=["cpu-0"])]}  # fmt: skip
    assert [c.action for c in hardware.apply_file(write(tmp_path, named))] == ["unchanged", "unchanged"]
    assert seen() == before
    assert hardware.verify_audit().ok


def test_a_named_node_disagreeing_with_a_registered_pool_is_refused_naming_both(hardware: Hardware, tmp_path: Path) -> None:
    hardware.add_pool(Pool("old", "hpc", "nvidia", 4, "eu", model="h100", nodes=(Node("gpu-0", 4, 64),)))
    path = write(tmp_path, {"nodes": NODES, "pools": [pool("new", nodes=["gpu-0"])]})
    with pytest.raises(SpecError) as info:
        hardware.apply_file(path)
    assert "node 'gpu-0'" in str(info.value) and "'old'" in str(info.value) and "'new'" in str(info.value) and "CPU" in str(info.value)
    assert [p.pool.name for p in hardware.pools()] == ["old"]  # nothing written


# -- add-pool over nodes the stored fleet states ----------------------------------------------------

STORED = {
    "nodes": [
        {"name": "n1", "model": "h100", "devices": 8, "cpu": 64, "memory": "512Gi", "block": "b1"},
        {"name": "n2", "model": "h100", "devices": 8, "cpu": 64, "memory": "512Gi", "state": "drained"},
    ],
    "pools": [pool("gpu", nodes=["n1", "n2"])],
}


def _add_pool(home: Path, name: str, *more: str) -> tuple[int, str]:
    from tests.conftest import run_exa

    result = run_exa(home, "hardware", "add-pool", name, "--target", "hpc", "--region", "eu", *more)
    return result.returncode, result.stdout + result.stderr


def test_add_pool_names_nodes_the_stored_fleet_states_and_takes_their_facts(exa_home: Path, tmp_path: Path) -> None:
    from tests.conftest import run_exa

    assert run_exa(exa_home, "hardware", "apply", "-f", str(write(tmp_path, STORED))).returncode == 0
    assert _add_pool(exa_home, "cores", "--accelerator", "cpu", "--node", "n1", "--node", "n2")[0] == 0
    assert _add_pool(exa_home, "shared", "--accelerator", "nvidia", "--node", "n1", "--sharing", "time-slice", "--shares-per-device", "4")[0] == 0
    listed = {p["name"]: p for p in json.loads(run_exa(exa_home, "hardware", "pools", "--json").stdout)}
    # A cpu pool's devices are the nodes' cores; a device pool's, the nodes' devices (model from the pool listing them).
    assert (listed["cores"]["count"], listed["shared"]["count"], listed["shared"]["model"]) == (128, 8, "h100")
    assert listed["cores"]["nodes"] == [
        {"name": "n1", "devices": 64, "cpu": 64, "memory": 524288, "block": "b1"},
        {"name": "n2", "devices": 64, "cpu": 64, "memory": 524288, "state": "drained"},
    ], listed["cores"]["nodes"]
    # The same node, one capacity: the shared pool's GPU grant with --cpu takes the cpu pool's cores.
    placed = run_exa(exa_home, "hardware", "place", "w", "--accelerator", "nvidia", "--engine", "vllm", "--fraction", "0.25", "--cpu", "60")
    assert placed.returncode == 0, placed.stdout + placed.stderr
    free = {p["name"]: p["free"] for p in json.loads(run_exa(exa_home, "hardware", "pools", "--json").stdout)}
    assert free["cores"] == 4  # n1's 64 cores less the 60 granted; n2 is drained


@pytest.mark.parametrize(
    ("more", "field", "words"),
    [
        (("--accelerator", "amd", "--node", "n1"), "--node n1", "which has 8 nvidia h100 device(s), no amd device (pool 'gpu')"),
        (("--accelerator", "nvidia", "--node", "n9"), "--node n9", "which the stored fleet does not state (stated there: n1, n2)"),
        (("--accelerator", "nvidia", "--node", "n1", "--model", "a100"), "--model", "the stored fleet says node 'n1' has h100 (pool 'gpu')"),
        (("--accelerator", "nvidia", "--node", "n1", "--count", "4"), "count", "must be the devices of the listed nodes summed (8; got 4)"),
        (("--accelerator", "nvidia", "--node", "n1", "--nodes", "2"), "--nodes", "give --node (stored nodes by name) or --nodes"),
        (("--accelerator", "nvidia"), "--count", "give --count (the pool's devices), or --node"),
        (("--accelerator", "nvidia", "--node", "n1", "--fixed-profile", "1g.10gb"), "--node n1", "node 'n1' offers none (pool 'gpu': no slices:)"),
    ],
)
def test_add_pool_over_stored_nodes_refuses_what_they_do_not_say_and_writes_nothing(
    exa_home: Path, tmp_path: Path, more: tuple[str, ...], field: str, words: str
) -> None:
    from tests.conftest import run_exa

    assert run_exa(exa_home, "hardware", "apply", "-f", str(write(tmp_path, STORED))).returncode == 0
    code, said = _add_pool(exa_home, "bad", *more)
    assert code == 2 and f"exa hardware add-pool: {field}: " in said and words in said, said
    assert [p["name"] for p in json.loads(run_exa(exa_home, "hardware", "pools", "--json").stdout)] == ["gpu"]
