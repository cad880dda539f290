"""The examples are a contract: the fleet loads, and each workload gets the decision recorded in
examples/expected.yaml, through the real policies."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from examlops_policy import Placement, Rejection
from examlops_policy.hardware import Hardware
from examlops_policy.specs import pools_from_file, workload_from_file

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
EXPECTED = yaml.safe_load((EXAMPLES / "expected.yaml").read_text())


def test_every_example_workload_has_an_expectation() -> None:
    assert sorted(p.stem for p in (EXAMPLES / "workloads").glob("*.yaml")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_workload_gets_its_expected_decision(hardware: Hardware, name: str) -> None:
    fleet = pools_from_file(EXAMPLES / "fleet.yaml")
    workload = workload_from_file(EXAMPLES / "workloads" / f"{name}.yaml")
    decision = hardware.what_if(workload, fleet)
    expected = EXPECTED[name]
    if expected["outcome"] == "rejected":
        assert isinstance(decision, Rejection) and decision.code == expected["code"]
        return
    assert isinstance(decision, Placement), decision
    assert decision.pool == expected["pool"]
    assert decision.fallback is expected["fallback"]
    if "fraction_honored" in expected:
        assert decision.fraction_honored is expected["fraction_honored"]
        assert decision.grant.profile == expected["profile"]
    if "burst" in expected:
        assert decision.burst.verdict == expected["burst"]


@pytest.mark.parametrize(("name", "pool"), [("shared-infer", "infer-t4"), ("gang", "ai-a100")])
def test_the_node_examples_land_where_their_comments_say(hardware: Hardware, name: str, pool: str) -> None:
    """examples/nodes/: shared-infer.yaml says it takes a time-sliced T4 share (it went to an A100
    MIG 2g with the shipped pools), gang.yaml a gang of two nodes under one switch."""
    fleet = pools_from_file(EXAMPLES / "nodes" / "pools.yaml")
    decision = hardware.what_if(workload_from_file(EXAMPLES / "nodes" / f"{name}.yaml"), fleet)
    assert isinstance(decision, Placement), decision
    assert decision.pool == pool
    if name == "shared-infer":
        assert (decision.grant.scheme, decision.grant.shares, decision.grant.profile) == ("time-slice", 1, None)
        assert "shared without isolation (time-slice: 1 of 4 shares of one device)" in (decision.note or "")
    else:
        assert (decision.grant.units, decision.grant.nodes) == (4, 2)
