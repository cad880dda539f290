"""``exa hardware simulate`` says what became of each workload (and why the failed ones failed),
writes ``alloc_pct`` in the order of its numbers, reads the trace's format from the file, names
its packers, and replays against any pools file ``apply`` takes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from examlops_policy.errors import SpecError
from examlops_policy.hardware import Hardware
from tests.conftest import ROOT, run_exa

TRACE = ROOT / "examples" / "traces" / "site" / "trace.yaml"


def test_each_workload_has_its_outcome_and_the_failed_ones_their_reason(hardware: Hardware) -> None:
    run = hardware.simulate(TRACE).runs[0]
    outcomes = {o.name: o for o in run.outcomes}
    assert list(outcomes) == ["pretrain", "notebook-1", "notebook-2", "finetune", "etl", "serve", "pretrain-2"]
    failed = [o for o in run.outcomes if o.pool is None]
    assert [(o.name, o.arrival, o.code) for o in failed] == [("serve", 900.0, "no_capacity"), ("pretrain-2", 1200.0, "no_capacity")]
    assert failed[1].message is not None and failed[1].message.startswith("no pool has free capacity for pretrain-2 ")
    assert outcomes["pretrain"].pool == "h100-eu" and outcomes["etl"].pool == "cpu"
    out = run.to_json(())
    assert out["failures"] == {"no_capacity": 2} and out["refused"] == {}
    assert out["workloads"][5] == {  # type: ignore[index]
        "name": "serve", "arrival": 900.0, "outcome": "failed", "reason": {"code": "no_capacity", "message": failed[0].message},
    }  # fmt: skip


def test_the_cli_names_the_failed_and_orders_alloc_pct_by_number(exa_home: Path) -> None:
    text = run_exa(exa_home, "hardware", "simulate", "--pods", str(TRACE), check=True).stdout
    assert "  failed: serve at 900 s (no_capacity), pretrain-2 at 1200 s (no_capacity)" in text.splitlines()
    raw = run_exa(exa_home, "hardware", "simulate", "--pods", str(TRACE), "--json", check=True).stdout
    doc = json.loads(raw, object_pairs_hook=lambda pairs: pairs)
    curve = dict(doc)["alloc_pct"]
    numbers = [int(k) for k, _ in curve]
    assert len(numbers) > 10 and numbers == sorted(numbers)
    assert [w["name"] for w in json.loads(raw)["workloads"] if w["outcome"] == "failed"] == ["serve", "pretrain-2"]


def test_the_format_is_read_from_the_file(tmp_path: Path, exa_home: Path) -> None:
    from examlops_policy._sim.readers import infer

    assert infer(TRACE).name == "generic-yaml"
    assert infer(ROOT / "examples" / "traces" / "openb" / "openb_pod_list_default.csv").name == "openb"
    workloads = tmp_path / "workloads.csv"
    workloads.write_text("name,arrival,duration,accelerator,count,fraction,cpu,memory,models\nw,0,,nvidia,1,,,,\n", encoding="utf-8")
    assert infer(workloads).name == "generic-csv"
    assert infer(tmp_path / "missing.csv").name == "openb"  # openb's reader names the missing file
    # Without --format a YAML trace replays in time order (it was read as openb's pod list).
    assert run_exa(exa_home, "hardware", "simulate", "--pods", str(TRACE), check=True).stdout.splitlines()[1].startswith("in time order")


def test_the_packers_are_named_in_the_help_and_the_docs(exa_home: Path) -> None:
    from examlops_policy._node_packers import PACKERS

    help_text = " ".join(run_exa(exa_home, "hardware", "simulate", "--help", check=True).stdout.split())
    assert f"node packer(s) to replay with: {', '.join(PACKERS)} (default exa" in help_text
    page = (ROOT / "docs" / "replay.md").read_text(encoding="utf-8")
    assert all(f"| `{name}` |" in page for name in PACKERS)
    bad = run_exa(exa_home, "hardware", "simulate", "--pods", str(TRACE), "--packer", "tetris")
    assert bad.returncode == 2 and "invalid choice: 'tetris'" in bad.stderr


def test_nodes_takes_a_pools_file_that_apply_takes(exa_home: Path, hardware: Hardware) -> None:
    """examples/pools-lifecycle.yaml: a count-only pool and a partitioned one, neither listing
    nodes; examples/nodes/pools.yaml: node counts and listed nodes."""
    for name in ("pools-lifecycle.yaml", "nodes/pools.yaml"):
        pools = ROOT / "examples" / name
        assert run_exa(exa_home, "hardware", "apply", "-f", str(pools), "--dry-run").returncode == 0
        sim = hardware.simulate(TRACE, pools)
        run = sim.runs[0]
        assert len(run.outcomes) == 7
        assert all(o.pool is not None or o.code for o in run.outcomes)
    # The two 0.25 notebooks take AMD partitions of one MI300X, and give them back when they end.
    lifecycle = hardware.simulate(TRACE, ROOT / "examples" / "pools-lifecycle.yaml").runs[0]
    assert {o.name: o.pool for o in lifecycle.outcomes}["notebook-2"] == "mi300-c"
    assert lifecycle.results[0].placed == 4


WAITING = """
start: "2026-12-05T08:00:00Z"
pools:
  - {name: h100-eu, target: hpc, accelerator: nvidia, model: h100, region: eu, cost_per_hour: 2.9,
     nodes: [{name: gpu-01, devices: 4, cpu: 64, memory: 512Gi}]}
workloads:
  - {arrival: 0, duration: 600, workload: {name: waits, accelerator: nvidia, count: 1, max_wait: 10m}}
  - {arrival: 60, workload: {name: in-time, accelerator: nvidia, count: 1, deadline: "2026-12-05T08:05:00Z"}}
  - {arrival: 600, workload: {name: too-late, accelerator: nvidia, count: 1, deadline: "2026-12-05T08:05:00Z"}}
"""


def test_the_replay_judges_max_wait_and_deadlines_at_each_arrival_as_place_does(hardware: Hardware, tmp_path: Path) -> None:
    """Issue 30: a generic trace whose workloads set max_wait or a deadline raised a ValueError
    (no decision time, no start estimates). The replay decides each at its arrival after the
    trace's start, each pool with room starting it then; a deadline already passed is the wait
    check's own refusal."""
    trace = tmp_path / "trace.yaml"
    trace.write_text(WAITING, encoding="utf-8")
    run = hardware.simulate(trace).runs[0]
    assert [(o.name, o.pool, o.code) for o in run.outcomes] == [
        ("waits", "h100-eu", None), ("in-time", "h100-eu", None), ("too-late", None, "no_eligible_pool"),
    ]  # fmt: skip
    late = list(run.outcomes)[2]
    assert "deadline_passed on 1 pool" in str(late.message), late.message
    trace.write_text(WAITING.replace('start: "2026-12-05T08:00:00Z"\n', ""), encoding="utf-8")
    with pytest.raises(SpecError, match="say in the trace's start") as refused:
        hardware.simulate(trace)
    assert refused.value.field == "workloads[1].workload.deadline"
    trace.write_text(WAITING.replace("2026-12-05T08:00:00Z", "soon"), encoding="utf-8")
    with pytest.raises(SpecError, match="start is an RFC 3339 instant") as bad:
        hardware.simulate(trace)
    assert bad.value.field == "start"
