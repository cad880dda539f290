"""Issue 13 through the real ``exa``: catalog import, carbon-aware placement, budgets, the FinOps
report read back from headless Chromium (marker ``chromium``) and ``exa models cost``.

Every decision comes from the real OPA (the session's shared one); every figure compared here is
read from the CLI's own output (``--json``) or from the page as Chromium parsed it.
"""

from __future__ import annotations

import json
import re
import time
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import exa_json, run_exa
from tests.chromium_support import chromium, png_facts, run_chromium

ROOT = Path(__file__).resolve().parents[1]
SNAPSHOTS = ROOT / "examples" / "catalogs"
AWS = SNAPSHOTS / "aws-vms-eu.csv"
SNAPSHOT_FILES = sorted(SNAPSHOTS.glob("*.csv"))
AWS_SOURCE = "skypilot:v7/aws/vms.csv@001367d22a00"

HEADER = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region,AvailabilityZone"
GOOD_ROW = "p5.48xlarge,H100,8.0,192.0,2048.0,,105.2024,28.528,eu-north-1,eun1-az3"


def pools(home: Path) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in exa_json(home, "hardware", "pools")}


def add_pool(home: Path, name: str, *options: str) -> None:
    run_exa(home, "hardware", "add-pool", name, *options, check=True)


def import_aws(home: Path, *extra: str) -> dict[str, Any]:
    return exa_json(home, "hardware", "import-catalog", str(AWS), "--apply", "--count", "8", *extra)  # type: ignore[no-any-return]


def chosen_line(stdout: str) -> str:
    (line,) = [x for x in stdout.splitlines() if x.startswith("Chosen: ")]
    return line


# --- 1. importing the shipped snapshots --------------------------------------------------------


@pytest.mark.parametrize("snapshot", SNAPSHOT_FILES, ids=[p.stem for p in SNAPSHOT_FILES])
def test_a_shipped_snapshot_is_shown_then_applied_once(exa_home: Path, snapshot: Path) -> None:
    # Without --apply: the diff, and nothing registered (even with --count).
    shown = run_exa(exa_home, "hardware", "import-catalog", str(snapshot), "--count", "8", check=True)
    assert f"catalog {snapshot}" in shown.stdout and "Nothing registered: add --apply" in shown.stdout
    plan = exa_json(exa_home, "hardware", "import-catalog", str(snapshot), "--count", "8")
    assert exa_json(exa_home, "hardware", "pools") == []
    assert plan["applied"] is None
    added = {c["name"]: c for c in plan["changes"] if c["kind"] == "added"}
    assert plan["summary"]["added"] == len(added) == len(plan["changes"])
    for name in added:  # every pool the diff adds is on its own line of the text table
        assert re.search(rf"^{re.escape(name)}\s+added\s", shown.stdout, re.M), name

    # --apply --count 8: exactly those pools, with the catalog's price and where it came from.
    applied = exa_json(exa_home, "hardware", "import-catalog", str(snapshot), "--apply", "--count", "8")
    assert sorted(applied["applied"]) == sorted(f"{n} added" for n in added)
    registered = pools(exa_home)
    assert set(registered) == set(added)
    for name, change in added.items():
        pool = registered[name]
        assert (pool["count"], pool["target"], pool["spot"]) == (8, "cloud", False)
        assert pool["cost_per_hour"] == pytest.approx(change["offer"]["price_per_device_hour"])
        assert pool["price_source"].startswith(f"skypilot:v7/{snapshot.stem.split('-')[0]}/vms.csv@")

    # A second --apply changes nothing, and says so.
    again = exa_json(exa_home, "hardware", "import-catalog", str(snapshot), "--apply", "--count", "8")
    assert again["applied"] == []
    assert again["summary"]["unchanged"] == len(added) and again["summary"]["added"] == 0
    text = run_exa(exa_home, "hardware", "import-catalog", str(snapshot), "--apply", "--count", "8", check=True).stdout
    assert f"0 added, 0 price changed, 0 source changed, {len(added)} unchanged" in text
    assert pools(exa_home) == registered


def test_the_aws_and_gcp_snapshots_add_pools_and_the_small_catalogs_list_what_they_cannot_place(exa_home: Path) -> None:
    counts = {p.stem: exa_json(exa_home, "hardware", "import-catalog", str(p))["summary"]["added"] for p in SNAPSHOT_FILES}
    assert counts["aws-vms-eu"] > 0 and counts["gcp-vms-eu"] > 0
    assert counts["nebius-vms"] > 0 and counts["seeweb-vms"] > 0
    # Nebius's us-central1 has GCP's name in regions.yaml: listed, not guessed.
    nebius = exa_json(exa_home, "hardware", "import-catalog", str(SNAPSHOTS / "nebius-vms.csv"))
    assert {u["region"]: u["reason"] for u in nebius["unknown_regions"]} == {"us-central1": "the regions table has it for gcp, not nebius"}
    shown = run_exa(exa_home, "hardware", "import-catalog", str(SNAPSHOTS / "seeweb-vms.csv"), check=True).stdout
    assert "? accelerator L40S: not in catalog_accelerators.yaml (4 rows, first line 18)" in shown


def test_the_json_diff_has_a_summary_and_one_change_per_pool(exa_home: Path) -> None:
    document = exa_json(exa_home, "hardware", "import-catalog", str(AWS))
    assert set(document) >= {"summary", "changes", "applied", "unknown_accelerators"}
    assert set(document["summary"]) == {"added", "price_changed", "source_changed", "unchanged", "kept", "conflict", "skipped"}
    h100 = next(c for c in document["changes"] if c["name"] == "aws-h100-eu-north-1")
    assert (h100["kind"], h100["after"], h100["reason"]) == ("added", None, "needs a count to be registered")
    assert (h100["offer"]["instance_type"], h100["offer"]["devices"], h100["offer"]["price_per_device_hour"]) == ("p5.48xlarge", 8, 13.1503)
    assert [u["name"] for u in document["unknown_accelerators"]] == ["V100"]


def test_new_pools_need_a_count(exa_home: Path) -> None:
    result = run_exa(exa_home, "hardware", "import-catalog", str(AWS), "--apply")
    assert result.returncode == 2 and "count is required for new pools" in result.stderr
    assert exa_json(exa_home, "hardware", "pools") == []


def test_a_price_set_by_hand_is_kept_unless_overwritten(exa_home: Path) -> None:
    add_pool(exa_home, "aws-h100-eu-north-1", "--target", "cloud", "--accelerator", "nvidia", "--count", "4",
             "--region", "eu-north-1", "--model", "h100", "--cost-per-hour", "9.0")  # fmt: skip
    shown = run_exa(exa_home, "hardware", "import-catalog", str(AWS), "--apply", "--count", "8", check=True).stdout
    assert re.search(r"^aws-h100-eu-north-1\s+kept \(set by hand\).*9\.0000 \(catalog 13\.1503\)", shown, re.M)
    kept = pools(exa_home)["aws-h100-eu-north-1"]
    assert (kept["cost_per_hour"], kept["count"], kept["price_source"]) == (9.0, 4, None)
    assert exa_json(exa_home, "hardware", "import-catalog", str(AWS), "--apply", "--count", "8")["summary"]["kept"] == 1

    forced = exa_json(exa_home, "hardware", "import-catalog", str(AWS), "--apply", "--count", "8", "--overwrite")
    assert forced["applied"] == ["aws-h100-eu-north-1 updated"] and forced["summary"]["price_changed"] == 1
    replaced = pools(exa_home)["aws-h100-eu-north-1"]
    # Only the price and its source change: the operator's count stays.
    assert (replaced["cost_per_hour"], replaced["count"], replaced["price_source"]) == (13.1503, 4, AWS_SOURCE)


def test_spot_prices_become_separate_pools_flagged_spot(exa_home: Path) -> None:
    document = import_aws(exa_home, "--spot")
    registered = pools(exa_home)
    spot = {n for n, p in registered.items() if p["spot"]}
    assert spot and spot == {n for n in registered if n.endswith("-spot")} and len(spot) * 2 == len(registered)
    assert registered["aws-h100-eu-north-1-spot"]["cost_per_hour"] == 3.566  # 28.528 / 8
    assert len(document["applied"]) == len(registered)


def test_spot_capacity_wins_only_by_consent_and_the_placement_says_so(exa_home: Path) -> None:
    import_aws(exa_home, "--spot")
    result = run_exa(exa_home, "hardware", "place", "s", "--accelerator", "nvidia", "--target", "cloud", "--explain", "--dry-run", check=True)
    assert result.stdout.startswith("✓ s → pool aws-v100-eu-west-1 ·")  # on-demand: the spot pool is cheaper, not accepted
    assert "spot_not_accepted" in result.stdout
    allowed = run_exa(exa_home, "hardware", "place", "s", "--accelerator", "nvidia", "--target", "cloud", "--spot", "allow", "--dry-run", check=True)
    assert allowed.stdout.startswith("✓ s → pool aws-v100-eu-west-1-spot")
    without_names = re.sub(r"[\w.-]+-spot\b", "<pool>", allowed.stdout)
    assert re.search(r"spot capacity: the provider may reclaim", without_names)


# --- 2. bad catalog files ------------------------------------------------------------------------


def _missing_column() -> str:
    return f"# cloud: aws\n{HEADER.replace(',SpotPrice', '')}\n{GOOD_ROW.replace(',28.528', '')}\n"


def _price_not_a_number() -> str:
    return f"# cloud: aws\n{HEADER}\n{GOOD_ROW}\np4d.24xlarge,A100,8,96,1152,,cheap,,eu-west-1,euw1-az2\n"


def _zero_count() -> str:
    return f"# cloud: aws\n{HEADER}\n{GOOD_ROW}\np4d.24xlarge,A100,0,96,1152,,32.77,,eu-west-1,euw1-az2\n"


BAD_FILES = [
    # (content, what the message must say); a good row comes first where there is one: it is not registered either.
    pytest.param(_missing_column, ["line 2", "missing column(s) SpotPrice"], id="missing-column"),
    pytest.param(_price_not_a_number, ["line 4, Price", "Price must be a number (got 'cheap')"], id="price-not-a-number"),
    pytest.param(_zero_count, ["line 4, AcceleratorCount", "AcceleratorCount must be more than 0"], id="zero-count"),
]


@pytest.mark.parametrize(("content", "expected"), BAD_FILES)
def test_a_bad_catalog_is_refused_naming_line_and_column_and_nothing_is_registered(
    exa_home: Path, tmp_path: Path, content: Any, expected: list[str]
) -> None:
    path = tmp_path / "vms.csv"
    path.write_text(content(), encoding="utf-8")
    result = run_exa(exa_home, "hardware", "import-catalog", str(path), "--apply", "--count", "8")
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stdout == ""
    assert result.stderr.startswith(f"SpecError: {path}: ")
    for fragment in expected:
        assert fragment in result.stderr
    as_json = run_exa(exa_home, "hardware", "import-catalog", str(path), "--apply", "--count", "8", "--json")
    error = json.loads(as_json.stderr)
    assert (as_json.returncode, error["error"], error["code"]) == (2, "SpecError", 2) and expected[0] in error["message"]
    assert exa_json(exa_home, "hardware", "pools") == []


def test_a_50_mb_catalog_is_refused_before_it_is_read(exa_home: Path, tmp_path: Path) -> None:
    from examlops_policy.catalog import MAX_CATALOG_BYTES

    path = tmp_path / "huge.csv"
    with path.open("wb") as handle:  # sparse: no 50 MB written to disk
        handle.write(f"# cloud: aws\n{HEADER}\n{GOOD_ROW}\n".encode())
        handle.truncate(50 * 1024 * 1024)
    started = time.monotonic()
    result = run_exa(exa_home, "hardware", "import-catalog", str(path), "--apply", "--count", "8")
    assert result.returncode == 2
    assert f"{path}: file is larger than {MAX_CATALOG_BYTES} bytes" in result.stderr
    assert time.monotonic() - started < 30
    assert exa_json(exa_home, "hardware", "pools") == []


# --- 3. carbon-aware placement --------------------------------------------------------------------


def test_carbon_objective_on_the_imported_fleet_picks_the_lowest_carbon_grant(exa_home: Path) -> None:
    import_aws(exa_home)
    fleet = sorted(pools(exa_home).values(), key=lambda p: (p["carbon_per_hour"], p["effective_cost_per_hour"]))
    greenest, runner = fleet[0], fleet[1]
    assert greenest["name"] == "aws-h100-eu-north-1"  # Stockholm's grid, though the dearest H100 but one
    cheapest = min(pools(exa_home).values(), key=lambda p: p["effective_cost_per_hour"])
    assert cheapest["name"] != greenest["name"]

    by_cost = run_exa(exa_home, "hardware", "place", "train", "--accelerator", "nvidia", "--target", "cloud", "--dry-run", check=True)
    assert by_cost.stdout.startswith(f"✓ train → pool {cheapest['name']}")

    result = run_exa(exa_home, "hardware", "place", "train", "--accelerator", "nvidia", "--target", "cloud",
                     "--optimize", "carbon", "--explain", check=True)  # fmt: skip
    assert result.stdout.startswith(f"✓ train → pool {greenest['name']} · nvidia on cloud")
    header = next(line for line in result.stdout.splitlines() if line.startswith("pool "))
    assert re.split(r"\s{2,}", header.strip())[5:8] == ["grant", "grant $/h", "grant gCO2e/h"]
    row = next(line for line in result.stdout.splitlines() if line.startswith(f"{greenest['name']} "))
    assert "28.459" in row and "13.15" in row and row.rstrip().endswith("chosen")
    assert chosen_line(result.stdout) == (
        f"Chosen: {greenest['name']}, lowest-carbon grant of 5 eligible in tier 2 (cloud, requested accelerator): "
        f"1 nvidia device at 28.459 gCO2e/h ($13.15/h); next: {runner['name']} at 95.238 gCO2e/h ($4.21/h)."
    )
    decision = exa_json(exa_home, "hardware", "decisions")[0]
    assert (decision["workload"], decision["pool"], decision["outcome"]) == ("train", greenest["name"], "placed")


@pytest.fixture()
def three_pools(exa_home: Path) -> Path:
    """Cheap but dirty, clean but dear, and one in between; same region, same tier."""
    for name, cost, carbon in (("hpc-dirty", "1", "1000"), ("hpc-clean", "10", "10"), ("hpc-mid", "4", "300")):
        add_pool(exa_home, name, "--target", "hpc", "--accelerator", "nvidia", "--count", "8", "--region", "eu",
                 "--cost-per-hour", cost, "--carbon-factor", carbon)  # fmt: skip
    return exa_home


def place_explained(home: Path, *options: str) -> tuple[str, str]:
    result = run_exa(home, "hardware", "place", "w", "--accelerator", "nvidia", "--explain", "--dry-run", *options, check=True)
    winner = re.match(r"✓ w → pool (\S+)", result.stdout)
    assert winner is not None and "dry run: nothing was reserved or recorded" in result.stdout
    return winner.group(1), chosen_line(result.stdout)


def test_each_objective_picks_its_own_winner_and_says_why(three_pools: Path) -> None:
    pool, why = place_explained(three_pools)
    assert pool == "hpc-dirty" and "cheapest grant of 3 eligible" in why and "next: hpc-mid at $4.00/h" in why
    pool, why = place_explained(three_pools, "--optimize", "carbon")
    assert pool == "hpc-clean"
    assert why.startswith("Chosen: hpc-clean, lowest-carbon grant of 3 eligible in tier 0")
    assert why.endswith("at 10 gCO2e/h ($10.00/h); next: hpc-mid at 300 gCO2e/h ($4.00/h).")
    # Balanced, weight 0.5: cost and carbon each divided by the tier's highest (10 and 1000).
    # dirty .5*(.1+1)=.55, clean .5*(1+.01)=.505, mid .5*(.4+.3)=.35.
    pool, why = place_explained(three_pools, "--optimize", "balanced", "--carbon-weight", "0.5")
    assert pool == "hpc-mid"
    assert "best balanced score (carbon weight 0.5; cost and carbon each divided by the highest in the tier)" in why
    assert why.endswith("at score 0.350 ($4.00/h, 300 gCO2e/h); next: hpc-clean at score 0.505 ($10.00/h, 10 gCO2e/h).")
    # The weight is the operator's: towards carbon, then towards cost.
    pool, why = place_explained(three_pools, "--optimize", "balanced", "--carbon-weight", "0.9")
    assert pool == "hpc-clean" and "carbon weight 0.9" in why and "score 0.109" in why
    pool, why = place_explained(three_pools, "--optimize", "balanced", "--carbon-weight", "0.1")
    assert pool == "hpc-dirty" and "carbon weight 0.1" in why and "score 0.190" in why
    # The default weight is 0.5, and it is shown.
    pool, why = place_explained(three_pools, "--optimize", "balanced")
    assert pool == "hpc-mid" and "carbon weight 0.5" in why


def test_equal_carbon_is_settled_by_cost(three_pools: Path) -> None:
    add_pool(three_pools, "hpc-clean-cheaper", "--target", "hpc", "--accelerator", "nvidia", "--count", "8", "--region", "eu",
             "--cost-per-hour", "8", "--carbon-factor", "10")  # fmt: skip
    pool, why = place_explained(three_pools, "--optimize", "carbon")
    assert pool == "hpc-clean-cheaper" and "next: hpc-clean at 10 gCO2e/h ($10.00/h)" in why


def test_the_grant_figures_scale_with_the_devices_granted(three_pools: Path) -> None:
    result = run_exa(three_pools, "hardware", "place", "w", "--accelerator", "nvidia", "--count", "3", "--optimize", "carbon",
                     "--explain", "--dry-run", check=True)  # fmt: skip
    row = next(line for line in result.stdout.splitlines() if line.startswith("hpc-mid "))
    assert re.search(r"3 whole\s+12\.00\s+900\b", row)
    assert "at 30 gCO2e/h ($30.00/h)" in chosen_line(result.stdout)


def test_a_bad_objective_or_weight_is_bad_input(three_pools: Path) -> None:
    weight = run_exa(three_pools, "hardware", "place", "w", "--accelerator", "nvidia", "--optimize", "balanced", "--carbon-weight", "1.5")
    assert weight.returncode == 2 and "carbon_weight: must be at least 0 and at most 1 (got 1.5)" in weight.stderr
    objective = run_exa(three_pools, "hardware", "place", "w", "--accelerator", "nvidia", "--optimize", "speed")
    assert objective.returncode == 2 and "invalid choice: 'speed'" in objective.stderr
    assert exa_json(three_pools, "hardware", "decisions") == []


@pytest.mark.parametrize("objective", [None, "cost", "carbon", "earliest"])
def test_a_carbon_weight_without_the_balanced_objective_is_refused_not_ignored(three_pools: Path, tmp_path: Path, objective: str | None) -> None:
    """--carbon-weight weighs carbon against cost under --optimize balanced only; with any other
    objective it was silently ignored. Refused (exit 2) on the command line and in a workload file,
    saying why; nothing recorded."""
    extra = ["--optimize", objective] if objective else []
    result = run_exa(three_pools, "hardware", "place", "w", "--accelerator", "nvidia", "--carbon-weight", "0.9", *extra)
    assert result.returncode == 2, result.stdout
    assert (f"--carbon-weight: a carbon weight is used only with --optimize balanced, and the objective here is {objective or 'cost'} "
            "(it would be ignored)") in result.stderr  # fmt: skip
    path = tmp_path / "w.yaml"
    path.write_text("workload: {name: w, accelerator: nvidia, carbon_weight: 0.9" + (f", optimize: {objective}" if objective else "") + "}\n")
    from_file = run_exa(three_pools, "hardware", "place", "-f", str(path))
    assert from_file.returncode == 2 and f"{path}: workload.carbon_weight: a carbon weight is used only with optimize: balanced" in from_file.stderr
    assert exa_json(three_pools, "hardware", "decisions") == []
    balanced = run_exa(three_pools, "hardware", "place", "w", "--accelerator", "nvidia", "--carbon-weight", "0.9", "--optimize", "balanced", "--dry-run")
    assert balanced.returncode == 0, balanced.stderr


# --- 4. budgets ---------------------------------------------------------------------------------


def verdict_reasons(decision: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    return {v["pool"]: v["reasons"] for v in decision["verdicts"]}


def test_a_cap_below_every_price_rejects_with_the_figures(exa_home: Path) -> None:
    import_aws(exa_home)
    text = run_exa(exa_home, "hardware", "place", "b", "--accelerator", "nvidia", "--target", "cloud", "--max-cost-per-hour", "1.5", "--explain")
    assert text.returncode == 3
    assert text.stdout.splitlines()[0] == "✗ Rejected: no pool is eligible for b (5 checked: budget_exceeded on 5 pools)"
    assert text.stdout.count("budget_exceeded: the grant would cost more than max_cost_per_hour $1.50/h: "
                             "at most $1.50 per device-hour for 1 device(s)") == 5  # fmt: skip
    result = run_exa(exa_home, "hardware", "place", "b", "--accelerator", "nvidia", "--target", "cloud", "--max-cost-per-hour", "1.5", "--json")
    assert result.returncode == 3
    decision = json.loads(result.stdout)
    assert decision["outcome"] == "rejected" and "budget_exceeded" in decision["reason"]
    for pool, reasons in verdict_reasons(decision).items():
        (reason,) = reasons
        assert reason["code"] == "budget_exceeded", pool
        assert reason["details"] == {"cap": "max_cost_per_hour", "limit": 1.5, "unit": "USD", "devices": 1,
                                     "per_device_hour": 1.5, "project": None}  # fmt: skip
    assert all(p["free"] == 8 for p in pools(exa_home).values())  # nothing reserved


def test_a_cap_is_per_hour_of_the_whole_grant(exa_home: Path) -> None:
    import_aws(exa_home)
    result = run_exa(exa_home, "hardware", "place", "b", "--accelerator", "nvidia", "--target", "cloud", "--count", "2",
                     "--max-cost-per-hour", "8.5", "--json")  # fmt: skip
    decision = json.loads(result.stdout)
    assert result.returncode == 0 and decision["pool"] == "aws-v100-eu-west-1"  # 2 x 4.21 <= 8.5; 2 x 4.42 is not
    reason = verdict_reasons(decision)["aws-a100-40gb-eu-west-1"][0]
    assert reason["message"] == "the grant would cost more than max_cost_per_hour $8.50/h: at most $4.25 per device-hour for 2 device(s)"


def test_a_project_cap_applies_and_the_lower_cap_wins(exa_home: Path) -> None:
    import_aws(exa_home)
    greener = run_exa(exa_home, "hardware", "place", "p", "--accelerator", "nvidia", "--target", "cloud", "--optimize", "carbon",
                      "--dry-run", check=True)  # fmt: skip
    assert greener.stdout.startswith("✓ p → pool aws-h100-eu-north-1")  # 13.15 $/h: over inference-eu's 6.0
    result = run_exa(exa_home, "hardware", "place", "p", "--accelerator", "nvidia", "--target", "cloud", "--optimize", "carbon",
                     "--project", "inference-eu", "--json")  # fmt: skip
    assert result.returncode == 0
    decision = json.loads(result.stdout)
    assert decision["pool"] == "aws-v100-eu-west-1" and decision["workload"]["project"] == "inference-eu"
    reasons = verdict_reasons(decision)
    over = {pool for pool, rs in reasons.items() if any(r["code"] == "budget_exceeded" for r in rs)}
    assert over == {"aws-h100-eu-north-1", "aws-h100-eu-west-2"}
    for pool in over:
        (reason,) = reasons[pool]
        assert reason["details"]["project"] == "inference-eu" and reason["details"]["limit"] == 6.0
        assert "max_cost_per_hour" in reason["message"] and "(project inference-eu)" in reason["message"]
    # The workload's own cap, lower than the project's, is the one that applies (and is named).
    own = run_exa(exa_home, "hardware", "place", "p", "--accelerator", "nvidia", "--target", "cloud", "--project", "inference-eu",
                  "--max-cost-per-hour", "4.3", "--json")  # fmt: skip
    decision = json.loads(own.stdout)
    assert decision["pool"] == "aws-v100-eu-west-1"
    reason = verdict_reasons(decision)["aws-a100-40gb-eu-west-1"][0]
    assert reason["message"] == "the grant would cost more than max_cost_per_hour $4.30/h: at most $4.30 per device-hour for 1 device(s)"


def test_a_carbon_cap_keeps_only_the_clean_pools(exa_home: Path) -> None:
    import_aws(exa_home)
    result = run_exa(exa_home, "hardware", "place", "c", "--accelerator", "nvidia", "--target", "cloud", "--max-carbon-per-hour", "50.4", "--json")
    decision = json.loads(result.stdout)
    assert result.returncode == 0 and decision["pool"] == "aws-h100-eu-north-1"  # 28.459 gCO2e/h, the only one under
    codes = {pool: [r["code"] for r in rs] for pool, rs in verdict_reasons(decision).items()}
    assert sum(1 for c in codes.values() if c == ["budget_exceeded"]) == 4


@pytest.mark.parametrize(
    ("option", "value", "field"),
    [("--project", "nope", "project"), ("--models", "nope", "models"), ("--priority", "nope", "priority"), ("--data-region", "nope", "data_region")],
    ids=["project", "model", "priority", "data-region"],
)
def test_a_name_no_reviewed_table_knows_is_bad_input_and_records_nothing(exa_home: Path, option: str, value: str, field: str) -> None:
    """One rule for unknown names, whichever table they name (budgets, models, priorities,
    regions): exit 2, the field named, nothing decided or recorded."""
    import_aws(exa_home)
    for extra in ([], ["--json"]):
        result = run_exa(exa_home, "hardware", "place", "p", "--accelerator", "nvidia", "--target", "cloud", option, value, *extra)
        assert (result.returncode, result.stdout) == (2, ""), result.stdout + result.stderr
        assert f"workload 'p': {field}: " in result.stderr and f"{value!r}" in result.stderr
    assert run_exa(exa_home, "hardware", "decisions", "--json", check=True).stdout.strip() in ("", "[]")
    assert all(p["free"] == 8 for p in pools(exa_home).values())


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        pytest.param(("--project", "inference-eu"), "max_cost_per_hour $6.00/h (project inference-eu): at most $6.00 per device-hour",
                     id="project-cap"),  # fmt: skip
        pytest.param(("--max-cost-per-hour", "2"), "max_cost_per_hour $2.00/h: at most $2.00 per device-hour", id="whole-dollar-cap"),
        pytest.param(("--max-carbon-per-hour", "20", "--count", "2"), "max_carbon_per_hour 20 gCO2e/h: at most 10 gCO2e per device-hour",
                     id="carbon-over-two-devices"),  # fmt: skip
    ],
)
def test_budget_figures_read_as_numbers_for_whole_caps(exa_home: Path, options: tuple[str, ...], expected: str) -> None:
    add_pool(exa_home, "dear", "--target", "hpc", "--accelerator", "nvidia", "--count", "8", "--region", "eu",
             "--cost-per-hour", "7.25", "--carbon-factor", "100")  # fmt: skip
    result = run_exa(exa_home, "hardware", "place", "w", "--accelerator", "nvidia", "--dry-run", "--json", *options)
    assert result.returncode == 3
    (reason,) = verdict_reasons(json.loads(result.stdout))["dear"]
    assert reason["code"] == "budget_exceeded"
    assert "%!" not in reason["message"] and expected in reason["message"]


# --- 5. the HTML report, in headless Chromium ---------------------------------------------------

class Page(HTMLParser):
    """Tags with their attributes, and the text of each element that has an id."""

    VOID = {"meta", "br", "img", "input", "link", "hr", "wbr", "area", "base", "col", "embed", "source", "track"}

    def __init__(self, html: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: dict[str, str] = {}
        self.rows: dict[str, list[list[str]]] = {}  # table id -> its rows' cell texts
        self._open: list[tuple[str, str | None]] = []
        self._table: str | None = None
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag not in self.VOID:
            ident = dict(attrs).get("id")
            self._open.append((tag, ident))
            if ident:
                self.text[ident] = ""
        if tag == "table":
            self._table = dict(attrs).get("id") or ""
            self.rows[self._table] = []
        elif tag == "tr" and self._table is not None:
            self.rows[self._table].append([])
        elif tag in ("td", "th") and self._table is not None and self.rows[self._table]:
            self.rows[self._table][-1].append("")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self._table = None
        for i in range(len(self._open) - 1, -1, -1):
            if self._open[i][0] == tag:
                del self._open[i:]
                break

    def handle_data(self, data: str) -> None:
        for _, ident in self._open:
            if ident:
                self.text[ident] += data
        if self._table is not None and self.rows[self._table] and self.rows[self._table][-1]:
            self.rows[self._table][-1][-1] += data

    def attr(self, ident: str, name: str) -> str:
        return str(next(attrs for _, attrs in self.tags if attrs.get("id") == ident)[name])


def assert_self_contained(html: str) -> None:
    page = Page(html)
    tags = {tag for tag, _ in page.tags}
    assert not tags & {"script", "link", "img", "iframe", "object", "embed", "base"}
    for tag, attrs in page.tags:
        assert not {"src", "href", "srcset", "action", "xlink:href"} & set(attrs), (tag, attrs)
        assert not any(a.startswith("on") for a in attrs), (tag, attrs)
    assert not re.search(r"<script[^>]*\bsrc", html, re.I) and "url(" not in html and "@import" not in html
    # The only http(s):// text is the SVG namespace name, which nothing fetches.
    assert re.findall(r"https?://[^\s\"'<>]*", html) == ["http://www.w3.org/2000/svg"] * html.count("http://www.w3.org/2000/svg")
    assert "https://" not in html


@pytest.mark.chromium
def test_the_html_report_is_self_contained_and_its_totals_match_finops_in_chromium(exa_home: Path, tmp_path: Path) -> None:
    chromium()
    # Dear pools, so the seconds each placement is held make figures well above the rounding.
    add_pool(exa_home, "hpc-cheap", "--target", "hpc", "--accelerator", "nvidia", "--count", "8", "--region", "eu",
             "--cost-per-hour", "3600", "--carbon-factor", "360000")  # fmt: skip
    add_pool(exa_home, "hpc-green", "--target", "hpc", "--accelerator", "nvidia", "--count", "8", "--region", "fi-kajaani",
             "--cost-per-hour", "36000", "--carbon-factor", "3600")  # fmt: skip
    add_pool(exa_home, "cloud-us", "--target", "cloud", "--accelerator", "nvidia", "--count", "8", "--region", "us")
    placed = [
        exa_json(exa_home, "hardware", "place", "train", "--accelerator", "nvidia"),
        exa_json(exa_home, "hardware", "place", "green", "--accelerator", "nvidia", "--optimize", "carbon", "--count", "2"),
        exa_json(exa_home, "hardware", "place", "infer", "--accelerator", "amd"),  # falls back to nvidia
    ]
    assert [(d["pool"], d["fallback"]) for d in placed] == [("hpc-cheap", False), ("hpc-green", False), ("hpc-cheap", True)]
    blocked = run_exa(exa_home, "hardware", "burst", "burst", "--accelerator", "nvidia", "--allow-burst", "--residency", "eu-only")
    assert blocked.returncode == 4 and "Burst blocked" in blocked.stdout
    assert run_exa(exa_home, "hardware", "place", "typo", "--accelerator", "amd", "--engine", "sglang").returncode == 3  # rejected
    time.sleep(1.0)
    # The report counts time held until now and takes no --hours: release first, so the held time
    # is fixed and the report and `exa finops` measure the same hours.
    for decision in placed:
        run_exa(exa_home, "hardware", "release", decision["id"], check=True)

    cost = exa_json(exa_home, "finops", "cost")["totals"]
    carbon = exa_json(exa_home, "finops", "carbon")["totals"]
    assert cost == carbon and cost["decisions"] == 3 and cost["cost"] > 10 and cost["carbon_g"] > 100
    out = tmp_path / "out.html"
    summary = exa_json(exa_home, "finops", "report", "--html", str(out), "--title", "Week <1>")
    assert summary["html"] == str(out) and summary["totals"]["decisions"] == 5
    assert summary["totals"]["cost"] == pytest.approx(cost["cost"], abs=1e-5)
    assert summary["totals"]["carbon_g"] == pytest.approx(carbon["carbon_g"], abs=1e-5)
    text = run_exa(exa_home, "finops", "report", "--html", str(out), check=True).stdout
    assert text.startswith(f"✓ report {out} · ") and f"· 5 decisions · ${cost['cost']:.2f} · " in text

    html = out.read_text(encoding="utf-8")
    assert_self_contained(html)

    dom = Page(run_chromium(tmp_path, "--dump-dom", out.as_uri()).stdout)
    assert float(dom.attr("total-cost", "data-value")) == pytest.approx(cost["cost"], abs=1e-5)
    assert float(dom.attr("total-carbon", "data-value")) == pytest.approx(carbon["carbon_g"], abs=1e-5)
    assert int(dom.attr("total-decisions", "data-value")) == 5
    assert dom.text["total-cost"] == f"${cost['cost']:,.2f}"
    assert (dom.text["placements"], dom.text["fallbacks"]) == ("3", "1")
    assert dom.rows["table-bursts"][1:] == [["eu-only", "0", "1", "0"]]  # allowed, blocked, unavailable
    by_device = exa_json(exa_home, "finops", "cost")["rows"]
    assert [row[:3] for row in dom.rows["table-cost-carbon"][1:]] == [[r["device"], r["region"], str(r["decisions"])] for r in by_device]
    head = dom.rows["table-cost-carbon"][0]
    cost_column = next(i for i, name in enumerate(head) if name.startswith("Cost ("))
    assert [row[cost_column] for row in dom.rows["table-cost-carbon"][1:]] == [f"{r['cost']:,.2f}" for r in by_device]
    # Placements never submitted to a scheduler are all used: nothing idle.
    idle_column = head.index("Idle")
    assert [row[idle_column] for row in dom.rows["table-cost-carbon"][1:]] == ["0.0" for _ in by_device]
    by_workload = exa_json(exa_home, "models", "cost")["rows"]  # most expensive first, like the page
    assert by_workload[0]["workload"] == "green"
    assert [row[:3] for row in dom.rows["table-workloads"][1:4]] == [[r["workload"], "1", f"{r['cost']:,.2f}"] for r in by_workload]
    assert sum(1 for tag, _ in dom.tags if tag == "svg") == 5

    # Released placements: the figures no longer move with the clock.
    time.sleep(1.0)
    assert exa_json(exa_home, "finops", "cost")["totals"] == cost

    shot = tmp_path / "report.png"
    run_chromium(tmp_path, f"--screenshot={shot}", "--window-size=1280,2000", out.as_uri())
    width, height, distinct = png_facts(shot)
    assert (width, height) == (1280, 2000)
    assert shot.stat().st_size > 50_000 and distinct > 100  # text and charts, not a blank page


# --- 6. exa models cost ---------------------------------------------------------------------------


def test_models_cost_is_per_workload_most_expensive_first_and_adds_up_to_finops(exa_home: Path) -> None:
    empty = exa_json(exa_home, "models", "cost")
    assert empty == {"rows": [], "totals": {"cost": 0, "carbon_g": 0, "used_cost": 0, "idle_cost": 0}}
    assert run_exa(exa_home, "models", "cost", check=True).stdout == "No placements yet.\n"

    add_pool(exa_home, "hpc-nvidia", "--target", "hpc", "--accelerator", "nvidia", "--count", "8", "--region", "eu",
             "--cost-per-hour", "2.5", "--carbon-factor", "300")  # fmt: skip
    add_pool(exa_home, "hpc-mi300", "--target", "hpc", "--accelerator", "amd", "--count", "4", "--region", "eu")
    train = [exa_json(exa_home, "hardware", "place", "train", "--accelerator", "nvidia") for _ in range(2)]
    infer = exa_json(exa_home, "hardware", "place", "infer", "--accelerator", "amd")
    evaluation = exa_json(exa_home, "hardware", "place", "eval", "--accelerator", "nvidia", "--count", "3")
    assert run_exa(exa_home, "hardware", "place", "typo", "--accelerator", "amd", "--engine", "sglang").returncode == 3  # costs nothing
    run_exa(exa_home, "hardware", "release", train[0]["id"], check=True)  # --hours counts released work alike

    found = exa_json(exa_home, "models", "cost", "--hours", "10")
    # eval: 3 x 2.5 x 10 = 75; train: 2 x 2.5 x 10 = 50; infer: the specification's hpc-mi300 over 10 h.
    assert [(r["workload"], r["decisions"], r["device_hours"], r["cost"], r["carbon_g"]) for r in found["rows"]] == [
        ("eval", 1, 30.0, 75.0, 9000.0),
        ("train", 2, 20.0, 50.0, 6000.0),
        ("infer", 1, 10.0, 18.0, 2500.0),
    ]
    assert found["totals"] == {"cost": 143.0, "carbon_g": 17500.0, "used_cost": 143.0, "idle_cost": 0.0}
    for kind in ("cost", "carbon"):
        totals = exa_json(exa_home, "finops", kind, "--hours", "10")["totals"]
        assert totals == {"decisions": 4, "device_hours": 60.0, "cost": 143.0, "carbon_g": 17500.0,
                          "used_device_hours": 60.0, "idle_device_hours": 0.0, "used_cost": 143.0, "idle_cost": 0.0}  # fmt: skip
    table = run_exa(exa_home, "models", "cost", "--hours", "10", check=True).stdout.splitlines()
    assert [line.split()[0] for line in table[2:5]] == ["eval", "train", "infer"]
    assert table[-1] == "total $143.00 · used $143.00 · idle $0.00 · 17500.0 gCO2e"

    # Without --hours both count the time held (fixed once released), and still agree.
    for decision in (train[1], infer, evaluation):
        run_exa(exa_home, "hardware", "release", decision["id"], check=True)
    held, ledger = exa_json(exa_home, "models", "cost")["totals"], exa_json(exa_home, "finops", "cost")["totals"]
    assert held["cost"] == pytest.approx(ledger["cost"], abs=1e-5) and held["carbon_g"] == pytest.approx(ledger["carbon_g"], abs=1e-5)


def test_finops_carbon_says_how_each_rows_carbon_was_found(exa_home: Path) -> None:
    """Per device type and region, the methods of the pools its placements were decided on: the
    ones ``hardware pools`` gives, the report's rows too; a legend explains them."""
    add_pool(exa_home, "own", "--target", "hpc", "--accelerator", "nvidia", "--count", "2", "--region", "eu-west-1", "--cost-per-hour", "1", "--carbon-factor", "100")
    add_pool(exa_home, "board", "--target", "hpc", "--accelerator", "nvidia", "--count", "2", "--region", "eu-west-1", "--cost-per-hour", "2", "--power-w", "400")
    add_pool(exa_home, "mi", "--target", "hpc", "--accelerator", "amd", "--count", "2", "--region", "eu-north-1")
    shown = pools(exa_home)
    assert {n: shown[n]["carbon_method"] for n in ("own", "board", "mi")} == {"own": "pool", "board": "power", "mi": "reference"}
    for accelerator, count in (("nvidia", "2"), ("nvidia", "1"), ("amd", "1")):  # own fills, then board
        run_exa(exa_home, "hardware", "place", "w", "--accelerator", accelerator, "--count", count, check=True)
    rows = exa_json(exa_home, "finops", "carbon", "--hours", "1")["rows"]
    assert [(r["device"], r["region"], r["carbon_methods"]) for r in rows] == [
        ("amd", "eu-north-1", ["reference"]), ("nvidia", "eu-west-1", ["pool", "power"]),
    ]
    assert exa_json(exa_home, "finops", "cost", "--hours", "1")["rows"] == rows  # the same rows, methods included
    text = run_exa(exa_home, "finops", "carbon", "--hours", "1", check=True).stdout.splitlines()
    assert text[1].split()[-2:] == ["carbon", "from"] and text[2].split()[-1] == "reference" and text[3].split()[-1] == "pool,power"
    assert [line.split(":")[0] for line in text[5:]] == ["carbon from pool", "carbon from power", "carbon from reference"]
    from examlops_policy.hardware import Hardware

    hw = Hardware(exa_home)
    try:
        report = hw.finops_report()
        assert [(r.device, r.region, r.carbon_methods) for r in report.cost_carbon] == [(r["device"], r["region"], tuple(r["carbon_methods"])) for r in rows]
    finally:
        hw.close()


@pytest.mark.parametrize(
    ("value", "digits", "unit", "shown"),
    [(0.0, 1, "", "0.0"), (0.027, 1, "", "<0.1"), (0.05, 1, "", "0.1"), (284.62, 1, "", "284.6"), (0.004, 2, "$", "<$0.01"), (0.0, 2, "$", "$0.00"), (3.5, 2, "$", "$3.50")],
)
def test_a_figure_that_is_not_zero_never_reads_zero(value: float, digits: int, unit: str, shown: str) -> None:
    from examlops_policy.cli.render import amount

    assert amount(value, digits, unit) == shown
