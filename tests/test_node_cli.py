"""The command line's node, gang and sharing options (names fixed by the issue: scripts rely on
them): parsed and checked into the model, bad values exit 2 and change nothing; the decision path
uses them (tests/test_node_placement.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_exa
from tests.test_cli import seed, state_snapshot

POOL = ["hardware", "add-pool", "ai", "--target", "hpc", "--accelerator", "nvidia", "--model", "h100", "--count", "8", "--region", "eu"]


def test_add_pool_splits_its_devices_over_its_nodes(exa_home: Path) -> None:
    run_exa(exa_home, *POOL, "--nodes", "2", "--cpu-per-node", "96", "--memory-per-node", "1Ti", check=True)
    run_exa(exa_home, "hardware", "add-pool", "t4", "--target", "cloud", "--accelerator", "nvidia", "--model", "t4", "--count", "4",
            "--region", "eu", "--sharing", "time-slice", "--shares-per-device", "4", check=True)  # fmt: skip
    pools = {p["name"]: p for p in json.loads(run_exa(exa_home, "hardware", "pools", "--json", check=True).stdout)}
    ai = pools["ai"]
    assert (ai["nodes"], ai["devices_per_node"], ai["cpu_per_node"], ai["memory_per_node"]) == (2, 4, 96, 1048576)
    assert (pools["t4"]["sharing"], pools["t4"]["shares_per_device"], pools["t4"]["nodes"]) == ("time-slice", 4, None)


def test_place_reads_the_per_node_asks(exa_home: Path) -> None:
    run_exa(exa_home, *POOL, "--nodes", "2", "--cpu-per-node", "96", check=True)
    out = run_exa(exa_home, "hardware", "place", "gang", "--accelerator", "nvidia", "--count", "2", "--nodes", "2", "--cpu", "1500m",
                  "--memory", "64Gi", "--models", "H100,a100", "--isolation", "required", "--topology", "same-switch",
                  "--topology-mode", "preferred", "--dry-run", "--json", check=True)  # fmt: skip
    body = json.loads(out.stdout)
    workload = body["workload"]
    assert body["outcome"] == "placed" and sorted(a["node"] for a in body["allocations"]) == ["ai-0", "ai-1"]
    assert (workload["count"], workload["nodes"], workload["cpu"], workload["memory"]) == (2, 2, 1.5, 65536)
    assert (workload["models"], workload["isolation"], workload["topology"], workload["topology_mode"]) == (
        ["a100", "h100"], "required", "same-switch", "preferred",
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([*POOL[:-6], "--count", "10", "--region", "eu", "--nodes", "3"], "nodes: 10 devices do not split evenly over 3 nodes"),
        ([*POOL, "--nodes", "2", "--memory-per-node", "64G"], "memory_per_node: '64G' is ambiguous"),
        ([*POOL, "--cpu-per-node", "8"], "cpu_per_node: needs nodes"),
        ([*POOL, "--sharing", "mps"], "shares_per_device: must be given with sharing"),
        ([*POOL, "--sharing", "vgpu", "--shares-per-device", "2"], "invalid choice"),
        (["hardware", "place", "w", "--accelerator", "nvidia", "--nodes", "0"], "nodes: must be at least 1"),
        (["hardware", "place", "w", "--accelerator", "nvidia", "--fraction", "0.5", "--nodes", "2"], "nodes: must be 1 when a fraction"),
        (["hardware", "place", "w", "--accelerator", "nvidia", "--memory", "8G"], "memory: '8G' is ambiguous"),
        (["hardware", "place", "w", "--accelerator", "nvidia", "--cpu", "two"], "cpu: expected cores"),
        (["hardware", "place", "w", "--accelerator", "nvidia", "--models", "mi300x"], "models: model 'mi300x' is an amd device, not nvidia"),
        (["hardware", "place", "w", "--accelerator", "nvidia", "--isolation", "strict"], "invalid choice"),
        (["hardware", "place", "w", "--accelerator", "nvidia", "--topology-mode", "preferred"], "topology_mode: needs topology"),
    ],
)
def test_bad_node_options_exit_2_and_change_nothing(exa_home: Path, args: list[str], message: str) -> None:
    seed(exa_home)
    before = state_snapshot(exa_home)
    result = run_exa(exa_home, *args)
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr, result.stderr
    assert state_snapshot(exa_home) == before


def test_a_workload_file_and_node_options_conflict(exa_home: Path) -> None:
    path = Path(__file__).resolve().parent.parent / "examples" / "nodes" / "gang.yaml"
    result = run_exa(exa_home, "hardware", "place", "-f", str(path), "--nodes", "2", "--cpu", "4")
    assert result.returncode == 2 and "--nodes, --cpu would conflict with it" in result.stderr, result.stderr


def test_a_placement_says_where_on_which_nodes_once_with_its_explanation(exa_home: Path) -> None:
    run_exa(exa_home, *POOL, "--nodes", "2", "--cpu-per-node", "32", check=True)
    placed = run_exa(exa_home, "hardware", "place", "gang", "--accelerator", "nvidia", "--count", "2", "--nodes", "2", "--cpu", "4",
                     "--explain", check=True).stdout  # fmt: skip
    where = ["  on node ai-0: devices 0-1 · 4 CPU cores", "  on node ai-1: devices 0-1 · 4 CPU cores"]
    lines = placed.splitlines()
    assert lines[:3] == ["✓ gang → pool ai · nvidia on hpc", *where]
    assert sum(line in where for line in lines) == 2, placed
    ident = next(line.split()[1] for line in lines if line.startswith("decision "))
    explained = run_exa(exa_home, "hardware", "explain", ident[:12], check=True).stdout.splitlines()
    assert explained[0].startswith(f"decision {ident} · ") and explained[1:4] == lines[:3]
    assert sum(line in where for line in explained) == 2
