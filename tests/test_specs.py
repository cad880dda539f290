"""Specs from YAML and Python: validated by JSON Schema, errors that name file, field and expectation."""

from __future__ import annotations

from pathlib import Path

import pytest

from examlops_policy import Pool, SpecError, Workload
from examlops_policy.specs import check_pool_facts, pools_from_file, workload_from_file, workload_from_mapping
from examlops_policy.tables import load_tables


def write(tmp_path: Path, text: str, name: str = "spec.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "field", "expected"),
    [
        ("pools:\n  - {name: a, target: hpc, accelerator: amd, count: 0, region: eu}\n", "pools[0].count", "minimum of 1"),
        ("pools:\n  - {name: a, target: edge, accelerator: amd, count: 1, region: eu}\n", "pools[0].target", "expected one of hpc, cloud"),
        ("pools:\n  - {name: a, target: hpc, accelerator: amd, count: 1, region: eu, colour: red}\n", "pools[0]", "unknown field(s): 'colour'"),
        ("pools:\n  - {name: a, target: hpc, accelerator: amd, count: 1, region: eu, cost_per_hour: -2}\n", "pools[0].cost_per_hour", "minimum of 0"),
        ("pools:\n  - {name: 'a b', target: hpc, accelerator: amd, count: 1, region: eu}\n", "pools[0].name", "letters, digits"),
        ("pools:\n  - {name: a, target: hpc, accelerator: amd, count: 1, region: atlantis}\n", "pools[0].region", "regions table"),
        ("pools:\n  - {name: a, target: hpc, accelerator: amd, count: 1, region: eu}\n  - {name: a, target: hpc, accelerator: amd, count: 1, region: eu}\n", "pools[1].name", "duplicate pool name"),
        ("pool: []\n", "(top level)", "required property"),
    ],
)
def test_pool_file_errors_name_file_field_and_expectation(tmp_path: Path, text: str, field: str, expected: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(SpecError) as info:
        pools_from_file(path)
    message = str(info.value)
    assert message.startswith(f"{path}: {field}: "), message
    assert expected in message


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("pools: [\n", "malformed YAML"),
        ("a: &x [1]\nb: *x\n", "aliases are not allowed"),
        ("pools: []\npools: []\n", "duplicate key 'pools'"),
    ],
)
def test_malformed_yaml_is_refused(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(SpecError, match=expected):
        pools_from_file(write(tmp_path, text))


def test_non_utf8_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes("pools: []\n# caf\xe9\n".encode("latin-1"))
    with pytest.raises(SpecError, match="not UTF-8"):
        pools_from_file(path)


def test_workload_file_round_trip(tmp_path: Path) -> None:
    path = write(tmp_path, "workload:\n  name: train\n  accelerator: amd\n  engine: vllm\n  capabilities: [fp8]\n  target: hpc\n")
    assert workload_from_file(path) == Workload("train", accelerator="amd", engine="vllm", capabilities=("fp8",), target="hpc")


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"name": "w", "accelerator": "amd", "fraction": 0}, "fraction"),
        ({"name": "w", "accelerator": "amd", "fraction": 1.01}, "fraction"),
        ({"name": "w", "accelerator": "amd", "fraction": 0.5, "count": 2}, "count"),
        ({"name": "w", "accelerator": "amd", "count": 0}, "count"),
        ({"name": "w", "accelerator": "amd", "residency": "eu"}, "residency"),
        ({"name": "w", "accelerator": "amd", "target": "edge"}, "target"),
        ({"name": "w'; DROP TABLE pools; --", "accelerator": "amd"}, "name"),
    ],
)
def test_workload_errors_name_the_field(values: dict[str, object], field: str) -> None:
    with pytest.raises(SpecError) as info:
        workload_from_mapping(values)
    assert f": {field}: " in str(info.value)


def test_python_objects_are_checked_like_files() -> None:
    with pytest.raises(SpecError, match="count"):
        Workload("w", accelerator="amd", count=0)
    with pytest.raises(SpecError, match="is an nvidia device, not amd"):
        check_pool_facts(Pool("p", "hpc", "amd", 1, "eu", model="H100"), load_tables())
    assert check_pool_facts(Pool("p", "hpc", "amd", 1, "eu", model="MI300X"), load_tables()).model == "mi300x"


def test_example_fleet_is_valid() -> None:
    pools = pools_from_file(Path(__file__).resolve().parent.parent / "examples" / "fleet.yaml")
    assert len(pools) == 12 and len({p.name for p in pools}) == 12
