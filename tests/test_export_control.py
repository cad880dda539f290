"""The export-control check, a plugin (checks/export_control/ and tables/export_control.yaml), through
the real OPA and the whole placement path: a pool of a listed model in a listed country is denied
with export_controlled, and a cloud pool stopped by it alone blocks a burst.

The regions table lists no region in a listed country today, so the tests run on a copy of the
policy with one added (cn-north-1, country CN): the only difference from the reviewed policy."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from examlops_policy.hardware import Hardware
from examlops_policy.model import Placement, Pool, Rejection, Workload
from examlops_policy.tables import load_tables
from tests.conftest import HardwareFactory

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture()
def export_hw(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make_hardware: HardwareFactory) -> Hardware:
    """Hardware on a copy of the policy with a region in China, on its own OPA."""
    policies = tmp_path / "policies"
    shutil.copytree(ROOT / "policies", policies)
    regions = policies / "examlops" / "tables" / "regions.yaml"
    text = regions.read_text(encoding="utf-8")
    regions.write_text(text.replace("regions:\n", 'regions:\n  cn-north-1: {country: CN, provider: aws, label: "AWS Beijing (test)"}\n', 1), encoding="utf-8")
    monkeypatch.setenv("EXA_POLICY_DIR", str(policies))
    return make_hardware(tmp_path / "home", tables=load_tables(policies), shared_opa=False)


def reasons(decision: Placement | Rejection, pool: str) -> list[str]:
    return [r.code for v in decision.verdicts if v.pool == pool for r in v.reasons]


def test_a_listed_model_in_a_listed_country_is_denied(export_hw: Hardware) -> None:
    pools = [
        Pool("cn-h100", "hpc", "nvidia", 8, "cn-north-1", cost_per_hour=1.0, model="h100"),
        Pool("cn-unnamed", "hpc", "nvidia", 8, "cn-north-1", cost_per_hour=0.5),
        Pool("cn-t4", "hpc", "nvidia", 8, "cn-north-1", cost_per_hour=2.0, model="t4"),
        Pool("eu-h100", "hpc", "nvidia", 8, "de-juelich", cost_per_hour=3.0, model="h100"),
    ]
    decision = export_hw.what_if(Workload("train", "nvidia", engine="generic"), pools)
    assert isinstance(decision, Placement), decision
    # The cheapest two are denied by export control; the T4 is below the rule's threshold.
    assert decision.pool == "cn-t4"
    assert reasons(decision, "cn-h100") == ["export_controlled"]
    assert reasons(decision, "cn-unnamed") == ["export_model_unknown"]
    denial = next(r for v in decision.verdicts if v.pool == "cn-h100" for r in v.reasons)
    assert denial.kind == "never"
    assert denial.message.startswith("export control forbids H100 devices in CN (region 'cn-north-1'): rule us-ear-3a090-example, ")
    assert dict(denial.details)["country"] == "CN"
    # The check is listed for explanations from its own metadata.
    assert "export_control" in [c.name for c in decision.checks]


def test_export_control_blocks_a_burst(export_hw: Hardware) -> None:
    pools = [
        Pool("hpc-full", "hpc", "nvidia", 1, "de-juelich", cost_per_hour=3.0, model="h100"),
        Pool("cloud-cn", "cloud", "nvidia", 8, "cn-north-1", cost_per_hour=1.0, model="h100"),
    ]
    decision = export_hw.what_if(Workload("train", "nvidia", engine="generic", target="cloud"), pools)
    assert isinstance(decision, Rejection), decision
    assert decision.burst_blocked
    assert decision.burst.verdict == "blocked" and decision.burst.pool == "cloud-cn"
    assert decision.burst.reason is not None and decision.burst.reason.code == "export_controlled"


def test_the_reviewed_policy_places_nothing_there_either() -> None:
    """Against the reviewed tables, every listed model and country is well formed."""
    tables = load_tables(ROOT / "policies")
    raw = (ROOT / "policies" / "examlops" / "tables" / "export_control.yaml").read_text(encoding="utf-8")
    import yaml

    rules = yaml.safe_load(raw)["export_control"]["rules"]
    assert rules, "the export-control table lists no rule"
    for name, rule in rules.items():
        assert rule["source"], name
        assert set(rule["models"]) <= set(tables.models), name
        assert all(len(c) == 2 and c.isupper() for c in rule["countries"]), name
