"""``exa hardware apply --prune --dry-run``: the whole diff, with every change the write would
refuse in it (saying why) beside the others, never only the first refusal."""

from __future__ import annotations

import json
from pathlib import Path

from examlops_policy.cli import exits
from examlops_policy.hardware import Hardware
from examlops_policy.model import Pool, Workload
from tests.conftest import run_exa

FILE = """pools:
  - {name: nv, target: hpc, accelerator: nvidia, count: 1, region: eu}
  - {name: fresh, target: hpc, accelerator: amd, count: 1, region: eu}
"""


def held_fleet(hw: Hardware) -> dict[str, str]:
    """nv (2 devices, both held), mi and mi2 (each held, not drained), idle (nothing held)."""
    for name, accelerator in (("nv", "nvidia"), ("mi", "amd"), ("mi2", "amd"), ("idle", "cpu")):
        hw.add_pool(Pool(name=name, target="hpc", accelerator=accelerator, count=2, region="eu"))
    ids = {}
    for pool, accelerator, count in (("nv", "nvidia", 2), ("mi", "amd", 1), ("mi2", "amd", 2)):
        ids[pool] = hw.place(Workload(name=f"w-{pool}", accelerator=accelerator, count=count)).id
    return ids


def test_a_dry_run_lists_every_refusal_beside_the_other_changes(hardware: Hardware) -> None:
    ids = held_fleet(hardware)
    pools = [Pool(name="nv", target="hpc", accelerator="nvidia", count=1, region="eu"),
             Pool(name="fresh", target="hpc", accelerator="amd", count=1, region="eu")]  # fmt: skip
    before = hardware.pool_views()
    changes = {c.name: c for c in hardware.apply(pools, prune=True, dry_run=True)}
    assert {n: c.action for n, c in changes.items()} == {"nv": "refused", "fresh": "added", "mi": "refused", "mi2": "refused", "idle": "removed"}
    assert changes["nv"].changed_fields == ("count",) and "count 1 would drop device(s) 1" in str(changes["nv"].refused)
    for name in ("mi", "mi2"):
        assert changes[name].holders == (ids[name],)
        assert f"not drained: drain it first (exa hardware drain {name})" in str(changes[name].refused)
    assert changes["fresh"].refused is None
    assert hardware.pool_views() == before  # nothing written


def test_the_cli_shows_the_whole_diff_and_exits_as_the_write_would(hardware: Hardware, tmp_path: Path) -> None:
    held_fleet(hardware)
    hardware.close()
    path = tmp_path / "pools.yaml"
    path.write_text(FILE, encoding="utf-8")
    home = hardware.home
    result = run_exa(home, "hardware", "apply", "-f", str(path), "--prune", "--dry-run")
    assert result.returncode == exits.BAD_INPUT, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("✗ nv update (count) refused: count 1 would drop device(s) 1 that live decisions hold")
    assert lines[1] == "+ fresh added"
    assert sorted(line.split(" refused:")[0] for line in lines[2:5]) == ["- idle removed", "✗ mi removal", "✗ mi2 removal"]
    assert sum(line.startswith("✗ ") for line in lines) == 3
    assert "1 added, 0 updated, 0 unchanged, 1 removed, 3 refused" in lines
    assert lines[-1].startswith("dry run: nothing was changed; 3 changes would be refused")
    as_json = json.loads(run_exa(home, "hardware", "apply", "-f", str(path), "--prune", "--dry-run", "--json").stdout)
    assert sorted((c["pool"], c["action"]) for c in as_json) == [
        ("fresh", "added"), ("idle", "removed"), ("mi", "refused"), ("mi2", "refused"), ("nv", "refused"),
    ]  # fmt: skip
    # The write itself still refuses, and changes nothing.
    assert run_exa(home, "hardware", "apply", "-f", str(path), "--prune").returncode == exits.BAD_INPUT
    pools = json.loads(run_exa(home, "hardware", "pools", "--json", check=True).stdout)
    assert sorted(p["name"] for p in pools) == ["idle", "mi", "mi2", "nv"]
