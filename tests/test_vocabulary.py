"""One vocabulary: the reviewed tables are the source of the words a workload and a pool are
written in (accelerators, engines, targets, residencies, objectives). The Python model's
constants, the JSON Schemas' enums, the CLI's choices and the Kubernetes executor's resources are
held equal to them here; the Rego reads them from the tables (workload_test.rego proves it)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from examlops_policy import model
from examlops_policy.cli.main import build_parser
from examlops_policy.executors import kubernetes

ROOT = Path(__file__).resolve().parent.parent
TABLES = ROOT / "policies" / "examlops" / "tables"
SCHEMAS = ROOT / "schemas"


def table(name: str) -> dict[str, object]:
    data = yaml.safe_load((TABLES / f"{name}.yaml").read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


# The tables, in their written order.
ACCELERATORS = tuple(table("accelerators")["accelerators"])  # type: ignore[arg-type]
ENGINES = tuple(table("engines")["engines"])  # type: ignore[arg-type]
VOCABULARY: dict[str, list[str]] = table("vocabulary")["vocabulary"]  # type: ignore[assignment]


def test_the_tables_hold_the_vocabulary() -> None:
    assert ACCELERATORS == ("nvidia", "amd", "intel-gaudi", "tpu", "cpu")
    assert ENGINES == ("vllm", "sglang", "ipex", "cpu", "generic")
    assert set(VOCABULARY) == {
        "pool_targets", "workload_targets", "residencies", "objectives", "sharing", "isolations", "topologies", "topology_modes",
        "node_states", "spot",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("constant", "expected"),
    [
        ("ACCELERATORS", ACCELERATORS),
        ("ENGINES", ENGINES),
        ("POOL_TARGETS", tuple(VOCABULARY["pool_targets"])),
        ("WORKLOAD_TARGETS", tuple(VOCABULARY["workload_targets"])),
        ("RESIDENCIES", tuple(VOCABULARY["residencies"])),
        ("OBJECTIVES", tuple(VOCABULARY["objectives"])),
        ("SHARING", tuple(VOCABULARY["sharing"])),
        ("ISOLATIONS", tuple(VOCABULARY["isolations"])),
        ("TOPOLOGIES", tuple(VOCABULARY["topologies"])),
        ("TOPOLOGY_MODES", tuple(VOCABULARY["topology_modes"])),
        ("NODE_STATES", tuple(VOCABULARY["node_states"])),
        ("SPOT", tuple(VOCABULARY["spot"])),
    ],
)
def test_model_constants_are_the_tables(constant: str, expected: tuple[str, ...]) -> None:
    assert getattr(model, constant) == expected


def schema_enum(schema: str, prop: str) -> tuple[object, ...]:
    doc = json.loads((SCHEMAS / schema).read_text(encoding="utf-8"))
    return tuple(doc["properties"][prop]["enum"])


@pytest.mark.parametrize(
    ("schema", "prop", "expected"),
    [
        ("workload.schema.json", "accelerator", ACCELERATORS),
        ("workload.schema.json", "engine", ENGINES),
        # null: the field given explicitly empty (the model reads it as "any").
        ("workload.schema.json", "target", (*VOCABULARY["workload_targets"], None)),
        ("workload.schema.json", "residency", tuple(VOCABULARY["residencies"])),
        ("workload.schema.json", "optimize", tuple(VOCABULARY["objectives"])),
        ("workload.schema.json", "spot", tuple(VOCABULARY["spot"])),
        ("pool.schema.json", "accelerator", ACCELERATORS),
        ("pool.schema.json", "target", tuple(VOCABULARY["pool_targets"])),
        ("pool.schema.json", "sharing", tuple(VOCABULARY["sharing"])),
        ("workload.schema.json", "isolation", tuple(VOCABULARY["isolations"])),
        ("workload.schema.json", "topology", tuple(VOCABULARY["topologies"])),
        ("workload.schema.json", "topology_mode", tuple(VOCABULARY["topology_modes"])),
    ],
)
def test_schema_enums_are_the_tables(schema: str, prop: str, expected: tuple[object, ...]) -> None:
    assert schema_enum(schema, prop) == expected


def test_the_node_schema_states_are_the_tables() -> None:
    doc = json.loads((SCHEMAS / "pool.schema.json").read_text(encoding="utf-8"))
    assert tuple(doc["$defs"]["node"]["properties"]["state"]["enum"]) == tuple(VOCABULARY["node_states"])


def test_the_shape_schema_is_the_pool_schema_and_what_nodes_derive() -> None:
    """What a check sees of a pool (shape.schema.json) is every pool field (pool.schema.json), none
    required, and the fields derived from its nodes (Pool.node_sizes), which Python computes."""
    from examlops_policy._core.verdicts import DERIVED_SHAPE_FIELDS

    pool = json.loads((SCHEMAS / "pool.schema.json").read_text(encoding="utf-8"))
    shape = json.loads((SCHEMAS / "shape.schema.json").read_text(encoding="utf-8"))
    derived = {k: v for k, v in shape["properties"].items() if k not in pool["properties"]}
    assert {k: v for k, v in shape["properties"].items() if k in pool["properties"]} == pool["properties"]
    assert tuple(derived) == DERIVED_SHAPE_FIELDS and "required" not in shape
    assert shape["$defs"] == pool["$defs"] and shape["additionalProperties"] is False


def choices(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[tuple[str, str, tuple[str, ...]]]:
    """Every option with choices in the CLI: (command, option, choices)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from choices(sub, (*path, name))
        elif action.choices and action.option_strings:
            yield " ".join(path), action.option_strings[-1], tuple(action.choices)


# Which table each CLI option's choices come from; --target depends on whether a pool or a
# workload is described.
POOL_COMMANDS = {"hardware add-pool", "hardware discover local"}


def expected_choices(command: str, option: str) -> tuple[str, ...] | None:
    if option == "--accelerator":
        return ACCELERATORS
    if option == "--engine":
        return ENGINES
    if option == "--residency":
        return tuple(VOCABULARY["residencies"])
    if option == "--optimize":
        return tuple(VOCABULARY["objectives"])
    if option == "--spot":
        return tuple(VOCABULARY["spot"])
    if option == "--target":
        return tuple(VOCABULARY["pool_targets" if command in POOL_COMMANDS else "workload_targets"])
    if option == "--sharing":
        return tuple(VOCABULARY["sharing"])
    if option == "--isolation":
        return tuple(VOCABULARY["isolations"])
    if option == "--topology":
        return tuple(VOCABULARY["topologies"])
    if option == "--topology-mode":
        return tuple(VOCABULARY["topology_modes"])
    return None


def test_cli_choices_are_the_tables() -> None:
    found = list(choices(build_parser()))
    checked = [(c, o) for c, o, _ in found if expected_choices(c, o) is not None]
    # The vocabulary options exist where people describe pools and workloads.
    assert {("hardware add-pool", "--accelerator"), ("hardware add-pool", "--target"), ("hardware place", "--engine"),
            ("hardware place", "--target"), ("hardware place", "--residency"), ("hardware add-pool", "--sharing"),
            ("hardware place", "--isolation"), ("hardware place", "--topology")} <= set(checked)  # fmt: skip
    for command, option, values in found:
        expected = expected_choices(command, option)
        if expected is not None:
            assert values == expected, f"exa {command} {option}"


def test_kubernetes_resources_name_every_device_accelerator() -> None:
    """Every accelerator but the CPU (whose backend is cpu: no device plugin) has a resource."""
    accelerators = table("accelerators")["accelerators"]
    assert isinstance(accelerators, dict)
    devices = tuple(a for a in ACCELERATORS if accelerators[a]["backend"] != "cpu")
    assert tuple(kubernetes.RESOURCES) == devices
