"""What a workload consents to, through the real CLI and OPA: spot (preemptible) capacity only
when it says so (``--spot allow|require``), and a fallback to another accelerator because the
requested one is over the budget only when it does not forbid it (``--no-budget-fallback``);
either way the decision says why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from examlops_policy.cli import exits
from tests.conftest import run_exa

CATALOG = Path(__file__).resolve().parents[1] / "examples" / "catalogs" / "aws-vms-eu.csv"


def place(home: Path, *args: str) -> tuple[int, list[str]]:
    result = run_exa(home, "hardware", "place", *args)
    assert "Traceback" not in result.stderr, result.stderr
    return result.returncode, (result.stdout + result.stderr).splitlines()


# -- a budget cap does not silently change the vendor ------------------------------------------------


@pytest.fixture()
def budget_home(exa_home: Path) -> Path:
    run_exa(exa_home, "hardware", "add-pool", "nv", "--target", "hpc", "--accelerator", "nvidia", "--count", "2", "--region", "eu",
            "--cost-per-hour", "2.5", check=True)  # fmt: skip
    run_exa(exa_home, "hardware", "add-pool", "mi", "--target", "hpc", "--accelerator", "amd", "--count", "2", "--region", "eu",
            "--cost-per-hour", "0.9", check=True)  # fmt: skip
    return exa_home


def test_a_fallback_for_budget_says_the_requested_accelerator_was_over_the_budget(budget_home: Path) -> None:
    code, lines = place(budget_home, "j", "--accelerator", "nvidia", "--max-cost-per-hour", "1.0")
    assert code == exits.OK
    assert lines == [
        "✓ j → pool mi · amd on hpc (fallback)",
        "  requested nvidia pools are over the budget (max_cost_per_hour $1.00/h) — fell back to amd",
    ]


def test_a_workload_can_forbid_falling_back_for_budget(budget_home: Path) -> None:
    code, lines = place(budget_home, "j", "--accelerator", "nvidia", "--max-cost-per-hour", "1.0", "--no-budget-fallback", "--explain")
    assert code == exits.REJECTED
    assert lines[0] == "✗ Rejected: no pool is eligible for j (2 checked: budget_exceeded on 1 pool, budget_fallback_forbidden on 1 pool)"
    mi = next(line for line in lines if line.startswith("mi "))
    assert mi.endswith(
        "never    budget_fallback_forbidden: the requested nvidia pools are over the budget (max_cost_per_hour $1.00/h), and the "
        "workload does not fall back to another accelerator for budget (allow_budget_fallback is false)"
    )
    assert "  budget             0 pass      2 fail" in lines


def test_a_forbidden_budget_fallback_still_falls_back_when_the_requested_pools_are_full(budget_home: Path, tmp_path: Path) -> None:
    run_exa(budget_home, "hardware", "add-pool", "nv-cheap", "--target", "hpc", "--accelerator", "nvidia", "--count", "1", "--region", "eu",
            "--cost-per-hour", "0.5", check=True)  # fmt: skip
    assert place(budget_home, "first", "--accelerator", "nvidia", "--max-cost-per-hour", "1.0")[1] == ["✓ first → pool nv-cheap · nvidia on hpc"]
    workload = tmp_path / "w.yaml"
    workload.write_text("workload: {name: second, accelerator: nvidia, max_cost_per_hour: 1.0, allow_budget_fallback: false}\n", encoding="utf-8")
    code, lines = place(budget_home, "-f", str(workload))
    assert (code, lines) == (exits.OK, ["✓ second → pool mi · amd on hpc (fallback)", "  requested nvidia pools are full — fell back to amd"])


def test_no_budget_fallback_beside_a_workload_file_is_a_conflict(budget_home: Path, tmp_path: Path) -> None:
    workload = tmp_path / "w.yaml"
    workload.write_text("workload: {name: w, accelerator: nvidia}\n", encoding="utf-8")
    code, lines = place(budget_home, "-f", str(workload), "--no-budget-fallback")
    assert code == exits.BAD_INPUT and "--no-budget-fallback would conflict" in lines[-1]


# -- spot capacity by consent -----------------------------------------------------------------------


@pytest.fixture()
def spot_home(exa_home: Path) -> Path:
    run_exa(exa_home, "hardware", "import-catalog", str(CATALOG), "--spot", "--apply", "--count", "8", check=True)
    pools = json.loads(run_exa(exa_home, "hardware", "pools", "--json", check=True).stdout)
    assert any(p["spot"] for p in pools) and any(not p["spot"] for p in pools)
    return exa_home


def test_spot_capacity_is_not_used_by_default(spot_home: Path) -> None:
    """An 8-device training job goes to on-demand capacity although a spot pool is cheaper."""
    code, lines = place(spot_home, "train", "--accelerator", "nvidia", "--count", "8", "--target", "cloud", "--explain")
    assert code == exits.OK
    assert not lines[0].split(" · ")[0].endswith("-spot") and "spot capacity" not in "\n".join(lines[:2])
    spot_rows = [line for line in lines if line.split(" ")[0].endswith("-spot")]
    assert spot_rows and all("spot_not_accepted: spot (preemptible) capacity" in row for row in spot_rows)


def test_spot_capacity_by_consent_is_said_in_the_decision(spot_home: Path) -> None:
    code, lines = place(spot_home, "train", "--accelerator", "nvidia", "--count", "8", "--target", "cloud", "--spot", "allow")
    assert code == exits.OK
    assert lines[0].startswith("✓ train → pool ") and lines[0].split(" · ")[0].endswith("-spot")
    assert lines[1] == "  spot capacity: the provider may reclaim these devices at short notice (the workload accepts it: spot allow)"
    decision = json.loads(run_exa(spot_home, "hardware", "decisions", "--json", "--limit", "1", check=True).stdout)[0]
    assert decision["note"] == lines[1].strip()


def test_spot_require_uses_spot_capacity_only(spot_home: Path) -> None:
    code, lines = place(spot_home, "train", "--accelerator", "nvidia", "--count", "8", "--target", "cloud", "--spot", "require", "--explain")
    assert code == exits.OK and lines[0].split(" · ")[0].endswith("-spot")
    on_demand = [line for line in lines if line.startswith("aws-") and not line.split(" ")[0].endswith("-spot")]
    assert on_demand and all("spot_required: on-demand capacity" in row for row in on_demand)
    assert place(spot_home, "train", "--accelerator", "nvidia", "--spot", "sometimes")[0] == exits.BAD_INPUT
