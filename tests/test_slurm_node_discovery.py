"""Slurm discovery reads nodes: CPUs, memory, typed GPUs and shards, states (drained, down), what
each node has busy, and the network (leaf switches). Pools of overlapping partitions name the same
nodes, with the same figures.

The fixtures were recorded from the four-node Slurm of scripts/slurm-up while a 2-node job and a
shard job ran (tests/fixtures/slurm/README.md); the real Slurm is read in tests/test_slurm_nodes.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from examlops_policy import specs
from examlops_policy.discovery import DiscoveredPool, NodeUsage
from examlops_policy.discovery.slurm import (
    SlurmNode,
    expand_hostlist,
    parse_gres_indices,
    parse_jobs_shares,
    parse_topology,
    pools_from_cluster,
    read_cluster,
)
from examlops_policy.executors.command import DEFAULT_TIMEOUT_S, CommandResult
from examlops_policy.executors.gres import load_gres_table
from examlops_policy import Workload
from examlops_policy.hardware import Hardware
from examlops_policy.model import Node, pool_spec
from examlops_policy.tables import load_tables

FIXTURES = Path(__file__).parent / "fixtures" / "slurm"
GRES = load_gres_table()


class ByCommand:
    """A runner answering each full argument list from a recorded file; keeps every call."""

    def __init__(self, answers: dict[tuple[str, ...], str]) -> None:
        self.answers = answers
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, argv: Sequence[str], *, timeout: float = DEFAULT_TIMEOUT_S) -> CommandResult:
        self.calls.append(tuple(argv))
        return CommandResult(tuple(argv), 0, self.answers[tuple(argv)], "")


def recorded(**overrides: str) -> ByCommand:
    files = {
        ("sinfo", "-N", "--json"): "sinfo-22.05-nodes.json",
        ("scontrol", "-o", "show", "partitions"): "partitions-22.05-nodes.txt",
        ("scontrol", "show", "topology"): "topology-22.05-nodes.txt",
        ("scontrol", "-d", "-o", "show", "jobs"): "jobs-22.05-nodes.txt",
    }
    answers = {argv: (FIXTURES / name).read_text() for argv, name in files.items()}
    for key, text in overrides.items():
        answers[{"topology": ("scontrol", "show", "topology")}[key]] = text
    return ByCommand(answers)


def discovered() -> dict[str, DiscoveredPool]:
    return {d.pool.name: d for d in pools_from_cluster(read_cluster(recorded()), GRES, region="eu").pools}


def test_each_pool_lists_its_nodes_with_cpus_memory_state_and_switch() -> None:
    pools = discovered()
    assert sorted(pools) == ["debug-h100", "debug-mi300x", "gpu-h100", "gpu-mi300x", "nodes-h100", "short-h100"]
    nodes = pools["nodes-h100"].pool
    assert nodes.nodes == (
        Node("exa-n1", 2, cpu=4, memory=4096, switch="leaf1"),
        Node("exa-n2", 2, cpu=4, memory=4096, switch="leaf1"),
        Node("exa-n3", 2, cpu=4, memory=4096, state="drained", switch="leaf2"),
    )
    assert nodes.count == 6 and nodes.nodes_named
    assert pools["gpu-h100"].pool.nodes == (Node("vm", 4, cpu=2, memory=12052, switch="leaf2"),)


def test_a_drained_node_has_devices_but_none_free() -> None:
    pools = discovered()
    # exa-n1 and exa-n2 each have one of 2 H100s busy; exa-n3's 2 are drained: 2 free of 6.
    assert pools["nodes-h100"].free == 2.0


def test_overlapping_partitions_name_the_same_nodes_alike() -> None:
    pools = discovered()
    short, nodes = pools["short-h100"].pool, pools["nodes-h100"].pool
    assert isinstance(short.nodes, tuple) and isinstance(nodes.nodes, tuple)
    assert short.nodes == (nodes.nodes[0],)
    assert pools["debug-h100"].pool.nodes == pools["gpu-h100"].pool.nodes
    # The same node's H100s and MI300Xs are different devices beside the same CPUs and memory.
    assert {n.name for n in pools["gpu-mi300x"].pool.node_list()} == {"vm"}


def test_typed_shards_make_a_shared_pool() -> None:
    pools = discovered()
    assert (pools["nodes-h100"].pool.sharing, pools["nodes-h100"].pool.shares_per_device) == ("time-slice", 4)
    assert pools["gpu-h100"].pool.sharing is None  # the host's H100s have no shards


def test_what_each_node_has_busy_is_reported() -> None:
    usage = {u.node: u for u in discovered()["nodes-h100"].usage}
    assert usage["exa-n1"] == NodeUsage("exa-n1", devices=1, indices=(0,), shares=0, cpu_milli=2000, memory_mib=1024)
    # The shard job's 3 shards are read from the running jobs (GresUsed does not count them).
    assert usage["exa-n2"] == NodeUsage("exa-n2", devices=1, indices=(0,), shares=3, cpu_milli=3000, memory_mib=1280)
    assert usage["exa-n3"] == NodeUsage("exa-n3", devices=0, indices=(), shares=0, cpu_milli=0, memory_mib=0)


def test_jobs_are_read_only_when_shares_are_in_use() -> None:
    runner = recorded()
    read_cluster(runner)
    assert ("scontrol", "-d", "-o", "show", "jobs") in runner.calls
    quiet = ByCommand({
        ("sinfo", "-N", "--json"): (FIXTURES / "sinfo-22.05.json").read_text(),
        ("scontrol", "-o", "show", "partitions"): (FIXTURES / "partitions-22.05.txt").read_text(),
        ("scontrol", "show", "topology"): "",
    })  # fmt: skip
    read_cluster(quiet)
    assert ("scontrol", "-d", "-o", "show", "jobs") not in quiet.calls


def test_without_a_topology_plugin_nodes_have_no_switch() -> None:
    found = pools_from_cluster(read_cluster(recorded(topology="")), GRES, region="eu")
    assert all(n.switch is None and n.block is None for d in found.pools for n in d.pool.node_list())


def test_every_discovered_pool_with_nodes_is_a_valid_pool_and_round_trips() -> None:
    tables = load_tables()
    for d in discovered().values():
        specs.check_pool_facts(d.pool, tables)
        assert specs.pool_from_mapping(pool_spec(d.pool), tables=tables) == d.pool


# -- the readers --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("exa-n[1-3]", ["exa-n1", "exa-n2", "exa-n3"]),
        ("gpu[01-03,07],login1", ["gpu01", "gpu02", "gpu03", "gpu07", "login1"]),
        ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
        ("vm,exa-n3", ["vm", "exa-n3"]),
        ("odd[a-b]", ["odd[a-b]"]),
        ("", []),
    ],
)
def test_hostlists_expand_as_slurm_writes_them(text: str, expected: list[str]) -> None:
    assert expand_hostlist(text) == expected


def test_gres_indices_in_use_are_read() -> None:
    assert parse_gres_indices("gpu:h100:2(IDX:0,3),gpu:mi300x:0(IDX:N/A),shard:h100:1(IDX:1)") == (
        ("gpu", "h100", (0, 3)),
        ("shard", "h100", (1,)),
    )
    assert parse_gres_indices("gpu:a100:3(IDX:0-2)") == (("gpu", "a100", (0, 1, 2)),)
    assert parse_gres_indices("(null)") == ()


def test_topology_gives_leaf_switches_and_blocks() -> None:
    switches, blocks = parse_topology((FIXTURES / "topology-22.05-nodes.txt").read_text())
    assert switches == {"exa-n1": "leaf1", "exa-n2": "leaf1", "vm": "leaf2", "exa-n3": "leaf2"}
    assert blocks == {}
    _, blocks = parse_topology("BlockName=b1 BlockIndex=0 Nodes=gh[001-002] BlockSize=2\nBlockName=b2 BlockIndex=1 Nodes=gh003\n")
    assert blocks == {"gh001": "b1", "gh002": "b1", "gh003": "b2"}


def test_shares_in_use_come_from_the_running_jobs() -> None:
    used = parse_jobs_shares((FIXTURES / "jobs-22.05-nodes.txt").read_text())
    assert used == {("exa-n2", "shard", "h100"): 3}
    pending = (FIXTURES / "jobs-22.05-nodes.txt").read_text().replace("JobState=RUNNING", "JobState=PENDING")
    assert parse_jobs_shares(pending) == {}


@pytest.mark.parametrize(
    ("states", "state"),
    [
        ((), "up"), (("idle",), "up"), (("mixed",), "up"), (("drain", "idle"), "drained"), (("draining", "mixed"), "drained"),
        (("drained",), "drained"), (("maint",), "drained"), (("down",), "down"), (("down", "drain"), "down"),
        (("not_responding", "idle"), "down"), (("inval",), "down"), (("fail",), "down"),
    ],
)  # fmt: skip
def test_slurm_node_states_map_to_up_drained_down(states: tuple[str, ...], state: str) -> None:
    node = SlurmNode("n", (), (), (), (), states, 4, 0)
    assert node.state == state


def test_uneven_shards_make_no_shared_pool_and_say_why() -> None:
    text = (FIXTURES / "sinfo-22.05-nodes.json").read_text().replace('"gpu:h100:2,shard:h100:8"', '"gpu:h100:2,shard:h100:6"', 1)
    runner = recorded()
    runner.answers[("sinfo", "-N", "--json")] = text
    found = pools_from_cluster(read_cluster(runner), GRES, region="eu")
    pools = {d.pool.name: d.pool for d in found.pools}
    assert pools["nodes-h100"].sharing is None
    assert any("do not split each h100 GPU into the same number of shard shares" in w for w in found.warnings), found.warnings


def test_applied_pools_have_capacity_node_by_node_from_what_slurm_reports_busy(
    make_hardware: Callable[..., Hardware], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Applying the recorded cluster: busy devices (by index), shards, CPU and memory are held
    outside this layer node by node; the drained node has no capacity; what overlapping partitions
    report of one node counts once."""
    import examlops_policy.discovery.slurm as slurm

    runner, real = recorded(), slurm.discover_slurm
    monkeypatch.setattr(slurm, "discover_slurm", lambda gres, **kw: real(gres, runner=runner, **kw))
    hw = make_hardware()
    result = hw.discover("slurm", region="eu", apply=True)
    assert result.applied
    rooms = {v.pool.name: v.state.capacity.nodes for v in hw.pool_views()}
    nodes = rooms["nodes-h100"]
    assert nodes is not None
    # exa-n1: device 0 busy (2 of 4 cores, 1Gi of 4Gi); exa-n2: device 0 busy and 3 shards on an
    # unnamed device (taken whole); exa-n3 drained: no row.
    assert sorted((r.whole, r.cpu, r.memory, r.count) for r in nodes) == [(0, 1000, 2816, 1), (1, 2000, 3072, 1)]
    # short-h100 lists exa-n1 too: the same node, the same busy device.
    short = rooms["short-h100"]
    assert short is not None and [(r.whole, r.cpu) for r in short] == [(1, 2000)]
    entries = [e for e in hw.store.audit_rows() if json.loads(e.canonical)["kind"] == "node_usage"]
    assert entries
    # No node of the pool has 2 H100s free now (one of exa-n1's is busy, exa-n3 is drained).
    decision = hw.place(Workload("two", "nvidia", count=2, models=("h100",), target="hpc")).decision
    verdict = next(v for v in decision.verdicts if v.pool == "nodes-h100")
    assert [r.code for r in verdict.reasons] == ["capacity_exhausted"]
