"""Against the real Slurm of scripts/slurm-up: discovery reads its nodes (CPUs, memory, typed GPUs
and shards, the drained exa-n3, the switches), and a placement's node allocations are submitted so
that Slurm allocates exactly them: the node list, GPUs or shards, CPUs and memory on each node.

Most allocations here are written by hand, to show what Slurm does with each; the last test takes
the layer's own (discovered, placed by the real OPA and the packer, submitted). Skipped without a Slurm unless
``EXA_REQUIRE_SERVICES`` is set (see tests/test_slurm_integration.py).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from examlops_policy.executors.command import run_command
from examlops_policy.executors.gres import load_gres_table
from examlops_policy.executors.slurm import SlurmJob, job, slurm_request, submit
from examlops_policy.hardware import Hardware
from examlops_policy.model import DeviceShare, Holding, Node, NodeAllocation, Placement, Pool, Workload
from tests.placement_support import granted
from tests.test_slurm_integration import slurm  # noqa: F401 - the fixture

pytestmark = pytest.mark.slurm

GRES = load_gres_table()


def nodes_pool(hw: Hardware) -> Pool:
    found = hw.discover("slurm", region="eu", prefix=None, apply=False)
    pools = {c.pool.name: c.pool for c in found.changes}
    return pools["nodes-h100"]


def wait(job_id: str, *, until: tuple[str, ...], timeout_s: float = 60.0) -> SlurmJob:
    deadline = time.monotonic() + timeout_s
    while True:
        found = job(job_id)
        if found.state in until or found.finished or time.monotonic() > deadline:
            return found
        time.sleep(0.3)


def cancel(job_id: str) -> None:
    run_command(["scancel", job_id], timeout=30)


@pytest.fixture()
def script(tmp_path: Path) -> Path:
    path = tmp_path / "job.sh"
    path.write_text("#!/bin/sh\nsleep 20\n")
    path.chmod(0o755)
    return path


def test_discovery_reads_the_real_nodes(slurm: dict[str, str], hardware: Hardware) -> None:  # noqa: F811
    pool = nodes_pool(hardware)
    assert pool.nodes_named and pool.count == 6
    assert pool.node_list() == (
        Node("exa-n1", 2, cpu=4, memory=4096, switch="leaf1"),
        Node("exa-n2", 2, cpu=4, memory=4096, switch="leaf1"),
        Node("exa-n3", 2, cpu=4, memory=4096, state="drained", switch="leaf2"),
    )
    assert (pool.sharing, pool.shares_per_device) == ("time-slice", 4)
    found = {c.pool.name: c for c in hardware.discover("slurm", region="eu", prefix=None, apply=False).changes}
    assert found["short-h100"].pool.node_list() == (pool.node_list()[0],)  # overlapping partitions: the same node
    assert found["nodes-h100"].free is not None and found["nodes-h100"].free <= 4  # exa-n3's GPUs are never free


def test_a_two_node_gang_runs_on_exactly_the_granted_nodes(slurm: dict[str, str], hardware: Hardware, script: Path) -> None:  # noqa: F811
    pool = nodes_pool(hardware)
    each = {"cpu_milli": 2000, "memory_mib": 1024}
    record = granted(hardware, pool, Workload("gang", "nvidia", count=1, target="hpc"),
                     NodeAllocation("exa-n1", (Holding(0),), **each), NodeAllocation("exa-n2", (Holding(1),), **each))  # fmt: skip
    request = slurm_request(record, pool, script, GRES)
    assert request.nodelist == ("exa-n1", "exa-n2")
    job_id = submit(request)
    try:
        running = wait(job_id, until=("RUNNING",))
        assert running.state == "RUNNING", running.fields
        assert running.fields["NodeList"] == "exa-n[1-2]"
        assert running.fields["NumNodes"] == "2"
        assert running.fields["TresPerNode"] == "gres:gpu:h100:1"
        # Per node, as granted: 2 CPUs, 1024 MiB and one H100 on each.
        assert running.fields["TRES"].startswith("cpu=4,mem=2G,node=2"), running.fields["TRES"]
        assert running.fields["MinMemoryNode"] == "1G"
        assert all(g.startswith("gpu:h100:1(IDX:") for g in running.gres), running.gres
    finally:
        cancel(job_id)


def test_a_share_runs_as_slurm_shards_on_the_granted_node(slurm: dict[str, str], hardware: Hardware, script: Path) -> None:  # noqa: F811
    pool = nodes_pool(hardware)
    record = granted(hardware, pool, Workload("infer", "nvidia", fraction=0.5, target="hpc"),
                     NodeAllocation("exa-n2", share=DeviceShare(0, 2), cpu_milli=1000, memory_mib=512))  # fmt: skip
    request = slurm_request(record, pool, script, GRES)
    assert request.gres == "shard:h100:2"
    job_id = submit(request)
    try:
        running = wait(job_id, until=("RUNNING",))
        assert running.state == "RUNNING", running.fields
        assert running.fields["NodeList"] == "exa-n2"
        assert running.fields["TresPerNode"] == "gres:shard:h100:2"
        assert any(g.startswith("shard:h100:2(IDX:") for g in running.gres), running.gres
        # Discovery now sees the shards in use on exa-n2, read from the running job.
        found = {c.pool.name: c for c in hardware.discover("slurm", region="eu", prefix=None, apply=False).changes}
        assert {u.node: u.shares for u in found["nodes-h100"].usage}["exa-n2"] >= 2
    finally:
        cancel(job_id)


def test_a_grant_on_the_drained_node_never_runs(slurm: dict[str, str], hardware: Hardware, script: Path) -> None:  # noqa: F811
    pool = nodes_pool(hardware)
    record = granted(hardware, pool, Workload("stuck", "nvidia", count=1, target="hpc"), NodeAllocation("exa-n3", (Holding(0),), cpu_milli=1000))
    job_id = submit(slurm_request(record, pool, script, GRES))
    try:
        time.sleep(2)
        pending = job(job_id)
        assert pending.state == "PENDING", pending.fields
        assert "ReqNodeNotAvail" in pending.fields.get("Reason", "") or "exa-n3" in pending.fields.get("Reason", ""), pending.fields
    finally:
        cancel(job_id)


def test_the_layer_grants_nodes_slurm_runs_on_and_none_on_the_drained_node(slurm: dict[str, str], hardware: Hardware) -> None:  # noqa: F811
    """End to end: the real Slurm discovered and applied; the drained exa-n3 has no capacity (a gang
    of 3 waits for it, never placed on it); a 2-node gang is granted the two up nodes and Slurm runs
    it on exactly them, with the CPUs, memory and GPUs granted on each."""
    from examlops_policy.model import Rejection

    hardware.discover("slurm", region="eu", prefix=None, apply=True)
    rooms = {v.pool.name: v.state.capacity.nodes for v in hardware.pool_views()}["nodes-h100"]
    assert rooms is not None and sum(r.count for r in rooms) == 2  # exa-n1, exa-n2: exa-n3 is drained
    three = hardware.place(Workload("three", "nvidia", count=1, nodes=3, target="hpc", models=("h100",))).decision
    assert isinstance(three, Rejection) and three.code == "no_capacity", three
    gang = hardware.place(Workload("gang", "nvidia", count=1, nodes=2, cpu=1, memory=512, target="hpc", models=("h100",)))
    decision = gang.decision
    assert isinstance(decision, Placement) and decision.pool == "nodes-h100", decision
    assert sorted(a.node for a in decision.allocations) == ["exa-n1", "exa-n2"]
    job_id = str(hardware.submit(gang.id, "slurm", script=str(_script())).job_id)
    try:
        running = wait(job_id, until=("RUNNING",))
        assert running.state == "RUNNING", running.fields
        assert running.fields["NodeList"] == "exa-n[1-2]" and running.fields["NumNodes"] == "2"
        assert running.fields["TresPerNode"] == "gres:gpu:h100:1"
        assert running.fields["MinMemoryNode"] == "512M"
    finally:
        cancel(job_id)


def _script() -> Path:
    import tempfile

    path = Path(tempfile.mkdtemp()) / "job.sh"
    path.write_text("#!/bin/sh\nsleep 20\n")
    path.chmod(0o755)
    return path
