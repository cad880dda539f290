"""Slurm discovery: recorded and hand-written ``sinfo -N --json`` output -> pools, and the CLI.

``sinfo-22.05.json`` was recorded from the real Slurm of scripts/slurm-up while a job held
``gpu:h100:3``; ``sinfo-24.11-hetero.json`` is a heterogeneous cluster in the newer JSON shape (see
tests/fixtures/slurm/README.md). The CLI tests put fake ``sinfo``/``scontrol`` first on PATH, so
the real subprocess path runs without a Slurm.
"""

from __future__ import annotations

import json
import sqlite3
import os
import stat
from collections.abc import Sequence
from pathlib import Path

import pytest

from examlops_policy import specs
from examlops_policy.discovery import DiscoveredPool, Discovery, NodeUsage, plan
from examlops_policy.discovery.slurm import (
    Gres,
    SlurmCluster,
    parse_gres,
    parse_partitions,
    parse_sinfo_json,
    pools_from_cluster,
    read_cluster,
)
from examlops_policy.errors import ExecutorError
from examlops_policy.executors.command import DEFAULT_TIMEOUT_S, CommandResult
from examlops_policy.executors.gres import load_gres_table
from examlops_policy.model import ACCELERATORS, Node, Pool, PoolState
from examlops_policy.tables import load_tables
from tests.conftest import run_exa

FIXTURES = Path(__file__).parent / "fixtures" / "slurm"
GRES = load_gres_table()


def slurm_cluster(name: str) -> SlurmCluster:
    version, nodes = parse_sinfo_json((FIXTURES / f"sinfo-{name}.json").read_text())
    return SlurmCluster(version, tuple(nodes), parse_partitions((FIXTURES / f"partitions-{name}.txt").read_text()))


def by_name(found: Discovery) -> dict[str, DiscoveredPool]:
    return {d.pool.name: d for d in found.pools}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("gpu:h100:4,gpu:mi300x:4", [Gres("gpu", "h100", 4), Gres("gpu", "mi300x", 4)]),
        ("gpu:h100:3(IDX:0-2),gpu:mi300x:0(IDX:N/A)", [Gres("gpu", "h100", 3), Gres("gpu", "mi300x", 0)]),
        ("gpu:a100:2(IDX:0,3),gpu:1g.10gb:1(IDX:5)", [Gres("gpu", "a100", 2), Gres("gpu", "1g.10gb", 1)]),
        ("gpu:l40s:4(S:0-1),tmpsize:7T", [Gres("gpu", "l40s", 4)]),
        ("gpu:4", [Gres("gpu", None, 4)]),
        ("gpu:H100:2", [Gres("gpu", "h100", 2)]),
        ("(null)", []),
        ("", []),
    ],
    ids=["typed", "used-with-idx", "comma-inside-idx", "sockets-and-size", "untyped", "upper-case", "null", "empty"],
)
def test_parse_gres(text: str, expected: list[Gres]) -> None:
    assert list(parse_gres(text)) == expected


def test_recorded_slurm_2205_node_is_read_as_it_was() -> None:
    c = slurm_cluster("22.05")
    assert c.version == "22.05.8"
    assert c.partitions == {"gpu": "UP", "debug": "UP"}
    (node,) = c.nodes
    assert node.partitions == ("gpu", "debug")
    assert node.gres == (Gres("gpu", "h100", 4), Gres("gpu", "mi300x", 4))
    assert node.gpus_used("h100") == 3 and node.gpus_used("mi300x") == 0
    assert node.features == ("fp8", "hbm3")
    assert node.usable


def test_recorded_slurm_2205_makes_one_pool_per_partition_and_gpu_type() -> None:
    found = pools_from_cluster(slurm_cluster("22.05"), GRES, region="eu")
    pools = by_name(found)
    assert sorted(pools) == ["debug-h100", "debug-mi300x", "gpu-h100", "gpu-mi300x"]
    h100 = pools["gpu-h100"]
    assert h100.pool == Pool("gpu-h100", "hpc", "nvidia", 4, "eu", capabilities=("fp8", "hbm3"), model="h100", partition="gpu", gres_type="h100",
                             nodes=(Node("vm", 4, cpu=2, memory=12052),))  # fmt: skip
    # What the node has busy: 3 GPUs by index, its CPUs and memory in use.
    assert h100.usage == (NodeUsage("vm", 3, (0, 1, 2), 0, 1000, 0),)
    assert h100.free == 1.0  # the recorded job held 3 of 4
    assert pools["gpu-mi300x"].pool.accelerator == "amd" and pools["gpu-mi300x"].pool.model == "mi300x"
    assert pools["gpu-mi300x"].free == 4.0
    assert any("share node(s) vm" in w for w in found.warnings)


# name: (accelerator, model, count, free, capabilities, supports_fractions)
HETERO = {
    "standard-g-mi250x": ("amd", "mi250x", 16, 5.0, ("amd_trento", "hbm2e"), False),  # lumi-g002 drained
    "booster-gh200": ("nvidia", "gh200", 8, 3.0, ("fp8", "nvlink"), False),  # features common to both nodes
    "dev-gh200": ("nvidia", "gh200", 4, 0.0, ("fp8", "nvlink"), False),
    "boost_mig-a100": ("nvidia", "a100", 2, 1.0, (), True),  # MIG slices typed 1g.10gb on the node
    "cpu-cpu": ("cpu", None, 256, 192.0, ("zen4",), False),
    "odd-gaudi2": ("intel-gaudi", "gaudi2", 8, 8.0, (), False),
    "maint-gh200": ("nvidia", "gh200", 4, 0.0, ("fp8",), False),  # partition DOWN
}


def test_heterogeneous_cluster_in_the_newer_json_shape() -> None:
    found = pools_from_cluster(slurm_cluster("24.11-hetero"), GRES, region="de-juelich")
    assert found.source == "slurm 24.11.0"
    got = {
        d.pool.name: (d.pool.accelerator, d.pool.model, d.pool.count, d.free, d.pool.capabilities, d.pool.supports_fractions)
        for d in found.pools
    }
    assert got == HETERO
    assert all(d.pool.target == "hpc" and d.pool.region == "de-juelich" for d in found.pools)
    assert by_name(found)["booster-gh200"].nodes == ("jw-b01", "jw-b02")


@pytest.mark.parametrize(
    "needle",
    [
        "GPU GRES type 'tesla' is not in gres.yaml",
        "untyped GPU GRES 'gpu:4'",
        "partition maint is DOWN",
        "pools booster-gh200 and dev-gh200 share node(s) jw-b01",
    ],
)
def test_what_discovery_will_not_guess_is_reported(needle: str) -> None:
    found = pools_from_cluster(slurm_cluster("24.11-hetero"), GRES, region="eu")
    assert any(needle in w for w in found.warnings), found.warnings


def test_every_discovered_pool_is_a_valid_pool() -> None:
    tables = load_tables()
    for name in ("22.05", "24.11-hetero"):
        for d in pools_from_cluster(slurm_cluster(name), GRES, region="eu").pools:
            specs.check_pool_facts(d.pool, tables)


def test_gres_table_agrees_with_the_models_table() -> None:
    models = load_tables().models
    for name, entry in GRES.types.items():
        assert entry.accelerator in ACCELERATORS, name
        if entry.model is not None:
            assert isinstance(models.get(entry.model), dict), f"{name}: model {entry.model} not in models.yaml"
            assert models[entry.model]["accelerator"] == entry.accelerator, name  # type: ignore[index,call-overload]
    # The mapping.
    for gres_type, accelerator in {"h100": "nvidia", "a100": "nvidia", "gh200": "nvidia", "mi250x": "amd",
                                   "mi300x": "amd", "gaudi": "intel-gaudi"}.items():  # fmt: skip
        found = GRES.lookup(gres_type)
        assert found is not None and found.accelerator == accelerator
    assert GRES.lookup("H100") == GRES.lookup("h100")
    assert GRES.slice_type("mig", "h100", "1g.10gb") == "1g.10gb"
    assert GRES.slice_type("amd-compute-partition", "mi300x", "cpx") == "mi300x_cpx"


class Recorded:
    """A runner answering from recorded outputs, keeping every call."""

    def __init__(self, answers: dict[str, CommandResult]) -> None:
        self.answers = answers
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, argv: Sequence[str], *, timeout: float = DEFAULT_TIMEOUT_S) -> CommandResult:
        assert isinstance(argv, (list, tuple)) and timeout > 0
        self.calls.append(tuple(argv))
        return self.answers[argv[0]]


def ok(argv0: str, text: str) -> CommandResult:
    return CommandResult((argv0,), 0, text, "")


def test_read_cluster_runs_sinfo_and_scontrol_as_argument_lists() -> None:
    runner = Recorded({"sinfo": ok("sinfo", (FIXTURES / "sinfo-22.05.json").read_text()),
                       "scontrol": ok("scontrol", (FIXTURES / "partitions-22.05.txt").read_text())})  # fmt: skip
    c = read_cluster(runner)
    assert runner.calls == [("sinfo", "-N", "--json"), ("scontrol", "-o", "show", "partitions"), ("scontrol", "show", "topology")]
    assert [n.name for n in c.nodes] == ["vm"]


@pytest.mark.parametrize(
    ("sinfo", "message"),
    [
        (CommandResult(("sinfo",), 1, "", "sinfo: error: Unable to contact slurm controller (connect failure)\n"), "Unable to contact slurm controller"),
        (ok("sinfo", "not json"), "not JSON"),
        (ok("sinfo", json.dumps({"errors": [{"error": "boom"}], "nodes": []})), "reported errors"),
        (ok("sinfo", json.dumps({"meta": {}})), "neither 'nodes' nor 'sinfo'"),
    ],
    ids=["unreachable", "garbage", "slurm-errors", "unknown-shape"],
)
def test_a_slurm_that_does_not_answer_properly_is_an_executor_error(sinfo: CommandResult, message: str) -> None:
    runner = Recorded({"sinfo": sinfo, "scontrol": ok("scontrol", "")})
    with pytest.raises(ExecutorError, match=message):
        read_cluster(runner)


def test_plan_says_what_applying_would_change_and_keeps_operator_facts() -> None:
    found = pools_from_cluster(slurm_cluster("22.05"), GRES, region="eu")
    registered = [
        PoolState(Pool("gpu-h100", "hpc", "nvidia", 2, "eu", cost_per_hour=3.1, model="h100", partition="gpu", gres_type="h100",
                       capabilities=("fp8", "hbm3")), 2.0),
        PoolState(Pool("gpu-mi300x", "hpc", "amd", 4, "eu", capabilities=("fp8", "hbm3"), model="mi300x", partition="gpu", gres_type="mi300x",
                       nodes=(Node("vm", 4, cpu=2, memory=12052),)), 4.0),
        PoolState(Pool("gone-h100", "hpc", "nvidia", 4, "eu", partition="gone", gres_type="h100"), 4.0),
        PoolState(Pool("hand-made", "hpc", "amd", 4, "eu"), 4.0),
    ]  # fmt: skip
    changes = {c.name: c for c in plan(found, registered, owned=lambda p: p.partition is not None)}
    assert {n: c.action for n, c in changes.items()} == {
        "debug-h100": "add", "debug-mi300x": "add", "gpu-h100": "update", "gpu-mi300x": "unchanged", "gone-h100": "stale",
    }  # fmt: skip
    assert changes["gpu-h100"].changed_fields == ("count", "nodes")  # registered before nodes: the node is new
    assert changes["gpu-h100"].pool is not None and changes["gpu-h100"].pool.cost_per_hour == 3.1


# -- the CLI, with fake Slurm commands first on PATH --------------------------------------------


def fake_slurm(tmp_path: Path, sinfo: str, partitions: str, *, fail: bool = False) -> dict[str, str]:
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir(exist_ok=True)
    for name, fixture in (("sinfo", sinfo), ("scontrol", partitions)):
        script = bin_dir / name
        body = 'echo "sinfo: error: Unable to contact slurm controller (connect failure)" >&2; exit 1' if fail else f'cat "{FIXTURES / fixture}"'
        script.write_text(f"#!/bin/sh\n{body}\n")
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def test_cli_discover_shows_then_applies_idempotently(tmp_path: Path, exa_home: Path) -> None:
    env = fake_slurm(tmp_path, "sinfo-22.05.json", "partitions-22.05.txt")
    shown = run_exa(exa_home, "hardware", "discover", "slurm", "--region", "eu", env=env, check=True)
    assert shown.stdout.splitlines()[0] == "slurm 22.05.8: 4 pool(s) · 4 to add, 0 to update, 0 unchanged"
    assert "+ gpu-h100: 4 × nvidia h100 (free 1) · partition gpu · gres h100 · region eu · capabilities fp8,hbm3" in shown.stdout
    assert "Nothing registered" in shown.stdout
    assert json.loads(run_exa(exa_home, "hardware", "pools", "--json", check=True).stdout) == []

    applied = run_exa(exa_home, "hardware", "discover", "slurm", "--region", "eu", "--apply", "--json", env=env, check=True)
    body = json.loads(applied.stdout)
    assert body["applied"] is True and body["source"] == "slurm 22.05.8"
    assert {p["name"]: p["action"] for p in body["pools"]} == dict.fromkeys(["debug-h100", "debug-mi300x", "gpu-h100", "gpu-mi300x"], "add")
    pools = {p["name"]: p for p in json.loads(run_exa(exa_home, "hardware", "pools", "--json", check=True).stdout)}
    assert pools["gpu-mi300x"]["partition"] == "gpu" and pools["gpu-mi300x"]["gres_type"] == "mi300x"
    assert pools["gpu-mi300x"]["model"] == "mi300x" and pools["gpu-mi300x"]["count"] == 4
    # Devices Slurm reports busy with work this layer did not place are not free for placement.
    assert pools["gpu-h100"]["free"] == 1
    kinds = [json.loads(row)["kind"] for (row,) in sqlite3.connect(exa_home / "state.db").execute("SELECT entry FROM audit_log ORDER BY seq")]
    # What is busy node by node is recorded (and audited) too: these pools list their node.
    assert kinds.count("pool") == 4 and set(kinds) == {"pool", "capacity", "node_usage"}

    again = run_exa(exa_home, "hardware", "discover", "slurm", "--apply", env=env, check=True)  # region kept
    assert again.stdout.splitlines()[0] == "slurm 22.05.8: 4 pool(s) · 0 to add, 0 to update, 4 unchanged"
    audit = run_exa(exa_home, "audit", "verify", "--json", check=True)
    assert json.loads(audit.stdout)["size"] == len(kinds)  # nothing changed, nothing written


def test_cli_discover_refuses_new_pools_without_a_region(tmp_path: Path, exa_home: Path) -> None:
    env = fake_slurm(tmp_path, "sinfo-22.05.json", "partitions-22.05.txt")
    result = run_exa(exa_home, "hardware", "discover", "slurm", "--apply", env=env)
    assert result.returncode == 2
    assert "have no region: give --region" in result.stderr
    unknown = run_exa(exa_home, "hardware", "discover", "slurm", "--region", "atlantis", env=env)
    assert unknown.returncode == 2 and "not in the reviewed regions table" in unknown.stderr


def test_cli_discover_when_slurm_does_not_answer(tmp_path: Path, exa_home: Path) -> None:
    env = fake_slurm(tmp_path, "sinfo-22.05.json", "partitions-22.05.txt", fail=True)
    result = run_exa(exa_home, "hardware", "discover", "slurm", "--region", "eu", env=env)
    assert result.returncode == 9
    assert result.stderr.startswith("ExecutorError: sinfo -N --json failed: sinfo: error: Unable to contact slurm controller")
