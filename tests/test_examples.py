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
