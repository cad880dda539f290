"""The E8 specification's CLI transcript, run as a user would, plus exit codes and bad input."""

from __future__ import annotations

import functools
import json
import sqlite3
from pathlib import Path

import pytest

from tests.conftest import run_exa
from tests.conftest import run_exa as run_exa_shared

SEED_ADD_POOLS = [
    ["hardware", "add-pool", "hpc-nvidia", "--target", "hpc", "--accelerator", "nvidia", "--count", "8",
     "--region", "eu", "--cost-per-hour", "2.5", "--carbon-factor", "300", "--supports-fractions"],
    ["hardware", "add-pool", "hpc-mi300", "--target", "hpc", "--accelerator", "amd", "--count", "4", "--region", "eu"],
    ["hardware", "add-pool", "cloud-a100", "--target", "cloud", "--accelerator", "nvidia", "--count", "100", "--region", "us"],
]  # fmt: skip


def seed(home: Path) -> None:
    for args in SEED_ADD_POOLS:
        run_exa(home, *args, check=True)


def state_snapshot(home: Path) -> dict[str, list[tuple[object, ...]]]:
    db = sqlite3.connect(home / "state.db")
    try:
        return {t: db.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall() for t in ("pools", "decisions", "allocations", "burst_events", "audit_log")}
    finally:
        db.close()


def test_the_specification_transcript(exa_home: Path) -> None:
    """On a fresh EXA_HOME with its own OPA, started on demand by the first command that needs it."""
    run_exa = functools.partial(run_exa_shared, shared_opa=False)
    seed(exa_home)

    assert not (exa_home / "opa").exists()  # listing pools needs no policy engine
    pools = run_exa(exa_home, "hardware", "pools", check=True).stdout
    names = [line.split()[0] for line in pools.splitlines()[2:] if line and not line.startswith(("*", "carbon from "))]
    assert names == ["hpc-mi300", "hpc-nvidia", "cloud-a100"]  # cheapest first

    placed = run_exa(exa_home, "hardware", "place", "train", "--accelerator", "amd", "--engine", "vllm", "--target", "hpc")
    assert placed.returncode == 0
    assert placed.stdout.splitlines() == ["✓ train → pool hpc-mi300 · amd on hpc"]

    rejected = run_exa(exa_home, "hardware", "place", "train", "--accelerator", "amd", "--engine", "sglang")
    assert rejected.returncode == 3
    assert rejected.stdout.splitlines() == ["✗ Rejected: engine 'sglang' cannot run on amd (needs backend rocm; supports ('cuda',))"]

    portable = run_exa(exa_home, "hardware", "portable", "--engine", "sglang", "--accelerator", "amd")
    assert portable.returncode == 3
    assert portable.stdout.splitlines() == ["✗ Rejected: engine 'sglang' cannot run on amd (needs backend rocm; supports ('cuda',))"]

    fallback = run_exa(exa_home, "hardware", "place", "train", "--accelerator", "tpu", "--engine", "generic", "--target", "hpc")
    assert fallback.returncode == 0
    assert fallback.stdout.splitlines() == [
        "✓ train → pool hpc-mi300 · amd on hpc (fallback)",
        "  requested tpu unavailable — fell back to amd",
    ]

    burst = run_exa(exa_home, "hardware", "burst", "train", "--accelerator", "nvidia", "--residency", "eu-only", "--allow-burst")
    assert burst.returncode == 4
    assert burst.stdout.splitlines() == ["⚠ Burst blocked: data-residency eu-only forbids egress to region 'us'"]

    decisions = json.loads(run_exa(exa_home, "hardware", "decisions", "--json", check=True).stdout)
    assert [d["outcome"] for d in decisions] == ["blocked", "placed", "rejected", "placed"]
    first = decisions[-1]
    accounting = json.loads(run_exa(exa_home, "hardware", "accounting", first["id"], "--hours", "10", "--json", check=True).stdout)
    assert accounting == {"device": "amd", "region": "eu", "hours": 10.0, "cost": 18.0, "carbon_g": 2500.0}

    events = json.loads(run_exa(exa_home, "hardware", "burst-events", "--json", check=True).stdout)
    assert [(e["verdict"], e["pool"], e["region"], e["residency"]) for e in events] == [("blocked", "cloud-a100", "us", "eu-only")]

    audit = sqlite3.connect(exa_home / "state.db").execute("SELECT source, kind FROM audit_log ORDER BY seq").fetchall()
    assert audit.count(("exa-hardware", "burst")) == 1 and audit.count(("exa-hardware", "decision")) == 4
    assert run_exa(exa_home, "audit", "verify").returncode == 0
    assert (exa_home / "opa" / "server.json").is_file()  # the on-demand OPA this test started


def test_portable_pair_prints_a_check_mark(exa_home: Path) -> None:
    result = run_exa(exa_home, "hardware", "portable", "--engine", "vllm", "--accelerator", "amd")
    assert result.returncode == 0
    assert result.stdout.strip() == "✓ Portable: engine 'vllm' can run on amd (backend rocm)"


def test_allowed_burst_is_recorded_and_placed_in_the_cloud(exa_home: Path) -> None:
    seed(exa_home)
    result = run_exa(exa_home, "hardware", "burst", "train", "--accelerator", "nvidia", "--residency", "open", "--allow-burst")
    assert result.returncode == 0
    assert result.stdout.splitlines()[0] == "✓ train → pool cloud-a100 · nvidia on cloud (burst)"
    events = json.loads(run_exa(exa_home, "hardware", "burst-events", "--json").stdout)
    assert events[0]["verdict"] == "allowed" and events[0]["pool"] == "cloud-a100"


def test_burst_without_opt_in_is_refused(exa_home: Path) -> None:
    seed(exa_home)
    result = run_exa(exa_home, "hardware", "burst", "train", "--accelerator", "nvidia", "--residency", "open")
    assert result.returncode == 2 and "--allow-burst" in result.stderr


def test_explain_lists_every_pool_and_why_the_winner_won(exa_home: Path) -> None:
    seed(exa_home)
    out = run_exa(exa_home, "hardware", "place", "infer", "--accelerator", "nvidia", "--engine", "vllm", "--fraction", "0.5", "--explain").stdout
    assert "✓ infer → pool hpc-nvidia · nvidia on hpc" in out
    assert "fraction 0.5 honored as MIG 4g" in out
    for pool in ("hpc-nvidia", "hpc-mi300", "cloud-a100"):
        assert pool in out
    assert "fallback_not_needed" in out and "burst_not_allowed" in out
    assert "Chosen: hpc-nvidia, cheapest grant of 1 eligible in tier 0 (HPC, requested accelerator): a 4g slice (4/7 of an nvidia device) at $1.43/h ($2.50 per device-hour)." in out
    decision_id = out.strip().splitlines()[-1].split()[-1]
    explained = run_exa(exa_home, "hardware", "explain", decision_id[:10], check=True).stdout
    assert "Chosen: hpc-nvidia" in explained


def test_release_frees_capacity_and_is_audited(exa_home: Path) -> None:
    run_exa(exa_home, "hardware", "add-pool", "one", "--target", "hpc", "--accelerator", "amd", "--count", "1", "--region", "eu", check=True)
    first = json.loads(run_exa(exa_home, "hardware", "place", "a", "--accelerator", "amd", "--engine", "vllm", "--json").stdout)
    assert first["outcome"] == "placed"
    second = run_exa(exa_home, "hardware", "place", "b", "--accelerator", "amd", "--engine", "vllm")
    assert second.returncode == 3 and "capacity_exhausted" in second.stdout
    run_exa(exa_home, "hardware", "release", first["id"], check=True)
    assert run_exa(exa_home, "hardware", "place", "c", "--accelerator", "amd", "--engine", "vllm").returncode == 0
    kinds = [k for (k,) in sqlite3.connect(exa_home / "state.db").execute("SELECT kind FROM audit_log ORDER BY seq")]
    assert kinds == ["pool", "decision", "decision", "release", "decision"]


def test_apply_is_idempotent_and_shows_what_changed(exa_home: Path, tmp_path: Path) -> None:
    fleet = tmp_path / "pools.yaml"
    fleet.write_text("pools:\n  - {name: a, target: hpc, accelerator: amd, count: 4, region: eu}\n  - {name: b, target: cloud, accelerator: nvidia, count: 2, region: eu-west-1}\n")
    out = run_exa(exa_home, "hardware", "apply", "-f", str(fleet), check=True).stdout
    assert "+ a added" in out and "2 added, 0 updated, 0 unchanged" in out
    out = run_exa(exa_home, "hardware", "apply", "-f", str(fleet), check=True).stdout
    assert "0 added, 0 updated, 2 unchanged" in out
    fleet.write_text("pools:\n  - {name: a, target: hpc, accelerator: amd, count: 6, region: eu, cost_per_hour: 1.2}\n")
    out = run_exa(exa_home, "hardware", "apply", "-f", str(fleet), check=True).stdout
    assert "~ a updated (cost_per_hour, count)" in out


def test_finops_groups_by_device_and_region(exa_home: Path) -> None:
    seed(exa_home)
    run_exa(exa_home, "hardware", "place", "a", "--accelerator", "amd", "--engine", "vllm", check=True)
    run_exa(exa_home, "hardware", "place", "b", "--accelerator", "nvidia", "--engine", "vllm", "--count", "2", check=True)
    run_exa(exa_home, "hardware", "burst", "c", "--accelerator", "nvidia", "--allow-burst", check=True)
    report = json.loads(run_exa(exa_home, "finops", "cost", "--hours", "10", "--json", check=True).stdout)
    rows = report["rows"]
    assert report["totals"] == {"decisions": 3, "device_hours": 40.0, "cost": 95.5, "carbon_g": 12900.0,
                                "used_device_hours": 40.0, "idle_device_hours": 0.0, "used_cost": 95.5, "idle_cost": 0.0}  # fmt: skip
    assert [(r["device"], r["region"], r["cost"], r["carbon_g"]) for r in rows] == [
        ("amd", "eu", 18.0, 2500.0),
        ("nvidia", "eu", 50.0, 6000.0),
        ("nvidia", "us", 27.5, 4400.0),
    ]
    assert "total $95.50" in run_exa(exa_home, "finops", "cost", "--hours", "10", check=True).stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["hardware", "place", "w", "--accelerator", "quantum"], "invalid choice"),
        (["hardware", "place", "w", "--accelerator", "amd", "--engine", "torch"], "invalid choice"),
        (["hardware", "place", "w", "--accelerator", "amd", "--residency", "moon"], "invalid choice"),
        (["hardware", "place", "w", "--accelerator", "amd", "--count", "0"], "count"),
        (["hardware", "place", "w", "--accelerator", "amd", "--fraction", "0"], "fraction"),
        (["hardware", "place", "w", "--accelerator", "amd", "--fraction", "1.5"], "fraction"),
        (["hardware", "place", "w;rm -rf /", "--accelerator", "amd"], "name"),
        (["hardware", "add-pool", "hpc-mi300", "--target", "hpc", "--accelerator", "amd", "--count", "4", "--region", "eu"], "already exists"),
        (["hardware", "add-pool", "x", "--target", "hpc", "--accelerator", "amd", "--count", "4", "--region", "eu", "--cost-per-hour", "-1"], "cost_per_hour"),
        (["hardware", "add-pool", "x", "--target", "hpc", "--accelerator", "amd", "--count", "4", "--region", "mars-1"], "regions table"),
        (["hardware", "add-pool", "x", "--target", "hpc", "--accelerator", "amd", "--count", "4", "--region", "eu", "--model", "H100"], "nvidia device"),
        (["hardware", "add-pool", "x\n", "--target", "hpc", "--accelerator", "amd", "--count", "4", "--region", "eu"], "control characters"),
    ],
)
def test_bad_input_is_a_clear_error_and_changes_nothing(exa_home: Path, args: list[str], message: str) -> None:
    seed(exa_home)
    before = state_snapshot(exa_home)
    result = run_exa(exa_home, *args)
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert state_snapshot(exa_home) == before


def test_unknown_decision_is_not_found(exa_home: Path) -> None:
    result = run_exa(exa_home, "hardware", "explain", "abcdef")
    assert result.returncode == 8 and "no decision 'abcdef'" in result.stderr


def test_policy_engine_unavailable_exits_5_and_places_nothing(exa_home: Path) -> None:
    seed(exa_home)
    before = state_snapshot(exa_home)
    result = run_exa(exa_home, "hardware", "place", "w", "--accelerator", "amd", "--engine", "vllm", env={"EXA_OPA_URL": "http://127.0.0.1:9"})
    assert result.returncode == 5
    assert "PolicyUnavailable: OPA at http://127.0.0.1:9 is not reachable; nothing was placed (Connection refused)" in result.stderr
    assert state_snapshot(exa_home) == before


def test_piped_output_has_no_colour_codes(exa_home: Path) -> None:
    seed(exa_home)
    out = run_exa(exa_home, "hardware", "pools").stdout
    assert "\x1b[" not in out and "hpc-mi300" in out
