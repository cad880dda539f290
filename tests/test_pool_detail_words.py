"""``exa hardware pool NAME`` says which devices are held by their indices ("device 3 whole", never
"3 whole", which reads as three devices), and a shared pool's header says how it shares."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import run_exa


def test_held_devices_are_named_by_index_and_sharing_is_said(exa_home: Path) -> None:
    run_exa(exa_home, "hardware", "add-pool", "ts", "--target", "hpc", "--accelerator", "nvidia", "--model", "t4", "--count", "4",
            "--region", "eu", "--nodes", "1", "--sharing", "time-slice", "--shares-per-device", "4", check=True)  # fmt: skip
    run_exa(exa_home, "hardware", "add-pool", "nv", "--target", "hpc", "--accelerator", "nvidia", "--count", "4", "--region", "eu",
            "--nodes", "1", "--cost-per-hour", "9", check=True)  # fmt: skip
    run_exa(exa_home, "hardware", "place", "a", "--accelerator", "nvidia", "--count", "3", "--models", "t4", check=True)
    run_exa(exa_home, "hardware", "place", "b", "--accelerator", "nvidia", "--fraction", "0.25", "--models", "t4", check=True)
    first = json.loads(run_exa(exa_home, "hardware", "place", "c", "--accelerator", "nvidia", "--count", "2", "--json", check=True).stdout)
    shared = run_exa(exa_home, "hardware", "pool", "ts", check=True).stdout
    assert "packing: shared devices (time-slice, 4 shares each)" in shared
    assert "whole devices" not in shared
    assert "devices 0-2 whole, device 3: 1 of 4 shares" in shared
    whole = run_exa(exa_home, "hardware", "pool", "nv", check=True).stdout
    assert "packing: whole devices" in whole
    assert "devices 0-1 whole" in whole
    run_exa(exa_home, "hardware", "place", "d", "--accelerator", "nvidia", "--count", "1", check=True)
    run_exa(exa_home, "hardware", "release", first["id"], check=True)
    one = run_exa(exa_home, "hardware", "pool", "nv", check=True).stdout
    assert "device 2 whole" in one and "2 whole" not in one.replace("device 2 whole", "")
