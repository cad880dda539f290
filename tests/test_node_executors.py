"""Executors follow a node grant: Slurm is asked for exactly the nodes, devices, shards, CPUs and
memory granted, Kubernetes pins each pod to its granted node and runs a gang as an Indexed Job.

The placements are made by the real OPA; their node allocations are written by hand (the packer
that chooses them comes with the core). The real Slurm and the real control plane carry them out
in tests/test_slurm_nodes.py and tests/test_kubernetes_nodes.py.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, cast

import kubernetes_validate  # type: ignore[import-untyped]
import pytest

from examlops_policy.errors import SpecError
from examlops_policy.executors.gres import load_gres_table
from examlops_policy.executors.kubernetes import job_manifest
from examlops_policy.executors.slurm import slurm_request
from examlops_policy.hardware import Hardware
from examlops_policy.model import DeviceShare, Holding, Node, NodeAllocation, Pool, Workload
from examlops_policy.views import DecisionRecord
from tests.placement_support import granted

GRES = load_gres_table()
K8S_VERSION = kubernetes_validate.latest_version()

NODES = (Node("gpu-01", 4, 64, 524288, switch="s1"), Node("gpu-02", 4, 64, 524288, switch="s1"), Node("gpu-03", 4, 64, 524288, state="drained"))
HPC = Pool("ai-h100", "hpc", "nvidia", 12, "eu", model="h100", partition="gpu", gres_type="h100", capabilities=("fp8",), nodes=NODES)
UNNAMED = Pool("ai-n", "hpc", "nvidia", 8, "eu", model="h100", partition="gpu", gres_type="h100", nodes=2)
SHARDS = Pool("t4-shards", "hpc", "nvidia", 4, "eu", model="t4", partition="infer", gres_type="t4", sharing="time-slice", shares_per_device=4,
              nodes=(Node("t4-01", 2, 16, 65536), Node("t4-02", 2, 16, 65536)))  # fmt: skip
MIG = Pool("a100-mig", "hpc", "nvidia", 4, "eu", model="a100", partition="gpu", gres_type="a100", supports_fractions=True,
           nodes=(Node("a100-01", 4, 32, 262144),))  # fmt: skip
CLOUD = Pool("k8s-eu-h100", "cloud", "nvidia", 8, "eu", model="h100", nodes=(Node("kw-gpu-a", 4, 16, 65536), Node("kw-gpu-b", 4, 16, 65536)))
CLOUD_T4 = Pool("k8s-eu-t4", "cloud", "nvidia", 4, "eu", model="t4", sharing="time-slice", shares_per_device=4, nodes=(Node("kw-t4", 4, 8, 32768),))


@pytest.fixture()
def script(tmp_path: Path) -> Path:
    path = tmp_path / "job.sh"
    path.write_text("#!/bin/sh\necho hello\n")
    return path


def whole(node: str, *devices: int, cpu: int = 0, memory: int = 0) -> NodeAllocation:
    return NodeAllocation(node, tuple(Holding(d) for d in devices), cpu_milli=cpu, memory_mib=memory)


# -- Slurm --------------------------------------------------------------------------------------


def test_slurm_asks_for_the_granted_node_devices_cpus_and_memory(hardware: Hardware, script: Path) -> None:
    record = granted(hardware, HPC, Workload("train", "nvidia", count=2, capabilities=("fp8",), target="hpc"),
                     whole("gpu-02", 0, 1, cpu=8000, memory=65536))  # fmt: skip
    assert slurm_request(record, HPC, script, GRES).argv() == [
        "sbatch", "--parsable", "--partition=gpu", "--job-name=train", "--nodes=1", "--nodelist=gpu-02", "--ntasks-per-node=1",
        "--cpus-per-task=8", "--mem=65536M", "--gres=gpu:h100:2", "--constraint=fp8", f"--comment=examlops-decision={record.id}",
        str(script.resolve()),
    ]  # fmt: skip


def test_a_slurm_gang_asks_for_every_granted_node(hardware: Hardware, script: Path) -> None:
    record = granted(hardware, HPC, Workload("gang", "nvidia", count=4, target="hpc"),
                     whole("gpu-01", 0, 1, 2, 3, cpu=32000, memory=131072), whole("gpu-02", 0, 1, 2, 3, cpu=32000, memory=131072))  # fmt: skip
    request = slurm_request(record, HPC, script, GRES)
    assert (request.nodes, request.nodelist, request.gres, request.cpus_per_task, request.mem_mib) == (2, ("gpu-01", "gpu-02"), "gpu:h100:4", 32, 131072)
    assert "--nodes=2" in request.argv() and "--nodelist=gpu-01,gpu-02" in request.argv()


def test_slurm_pins_no_node_of_a_pool_whose_nodes_have_no_names(hardware: Hardware, script: Path) -> None:
    record = granted(hardware, UNNAMED, Workload("gang", "nvidia", count=4, target="hpc"), whole("ai-n-0", 0, 1, 2, 3), whole("ai-n-1", 0, 1, 2, 3))
    argv = slurm_request(record, UNNAMED, script, GRES).argv()
    assert "--nodes=2" in argv and "--gres=gpu:h100:4" in argv
    assert not any(a.startswith(("--nodelist", "--mem", "--cpus-per-task")) for a in argv)


def test_a_share_is_asked_for_as_slurm_shards(hardware: Hardware, script: Path) -> None:
    record = granted(hardware, SHARDS, Workload("infer", "nvidia", target="hpc"),
                     NodeAllocation("t4-02", share=DeviceShare(1, 2), cpu_milli=2000, memory_mib=8192))  # fmt: skip
    argv = slurm_request(record, SHARDS, script, GRES).argv()
    assert argv[4:10] == ["--nodes=1", "--nodelist=t4-02", "--ntasks-per-node=1", "--cpus-per-task=2", "--mem=8192M", "--gres=shard:t4:2"]


def test_a_mig_slice_on_a_node_asks_for_the_slice_gres_type(hardware: Hardware, script: Path) -> None:
    record = granted(hardware, MIG, Workload("small", "nvidia", fraction=0.1, target="hpc"),
                     NodeAllocation("a100-01", (Holding(2, "1g.10gb", 0, 1),), cpu_milli=1000))  # fmt: skip
    assert record.decision.grant.profile == "1g.10gb"  # type: ignore[union-attr]
    assert "--gres=gpu:1g.10gb:1" in slurm_request(record, MIG, script, GRES).argv()


@pytest.mark.parametrize(
    ("allocations", "expected"),
    [
        ((whole("gpu-01", 0, 1), whole("gpu-02", 0)), "one Slurm job asks the same of every node"),
        ((whole("gpu-01", 0, 1, cpu=500),), "Slurm allocates whole CPUs"),
        ((whole("gpu-09", 0, 1),), "node gpu-09 is not a node of pool ai-h100"),
        ((whole("gpu-01", 0, 1), whole("gpu-01", 2, 3)), "a node is granted twice"),
        ((NodeAllocation("gpu-01", share=DeviceShare(0, 1)),), "pool ai-h100 is not shared"),
    ],
)
def test_slurm_refuses_a_grant_it_cannot_be_asked_for_exactly(hardware: Hardware, script: Path, allocations: tuple[NodeAllocation, ...], expected: str) -> None:
    record = granted(hardware, HPC, Workload("train", "nvidia", count=2, target="hpc"), *allocations)
    with pytest.raises(SpecError, match=expected):
        slurm_request(record, HPC, script, GRES)


# -- Kubernetes -----------------------------------------------------------------------------------


def manifest(record: DecisionRecord, pool: Pool) -> dict[str, Any]:
    job = cast(dict[str, Any], job_manifest(record, pool, image="busybox:1.36"))
    kubernetes_validate.validate(job, K8S_VERSION, strict=True)
    return job


def terms(job: dict[str, Any]) -> list[dict[str, Any]]:
    affinity = job["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    return cast(list[dict[str, Any]], affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"])


def test_a_pod_is_pinned_to_its_node_and_requests_cpu_and_memory(hardware: Hardware) -> None:
    record = granted(hardware, CLOUD, Workload("serve", "nvidia", count=4, target="cloud"), whole("kw-gpu-b", 0, 1, 2, 3, cpu=2500, memory=16384))
    job = manifest(record, CLOUD)
    pod = job["spec"]["template"]["spec"]
    assert pod["containers"][0]["resources"] == {
        "limits": {"nvidia.com/gpu": "4", "memory": "16Gi"},
        "requests": {"cpu": "2500m", "memory": "16Gi"},
    }
    assert [t["matchFields"] for t in terms(job)] == [[{"key": "metadata.name", "operator": "In", "values": ["kw-gpu-b"]}]]
    assert "completionMode" not in job["spec"] and "podAntiAffinity" not in pod["affinity"]
    assert job["metadata"]["annotations"]["examlops.io/nodes"] == "kw-gpu-b"


def test_a_gang_is_an_indexed_job_one_pod_per_granted_node(hardware: Hardware) -> None:
    record = granted(hardware, CLOUD, Workload("gang", "nvidia", count=2, target="cloud"),
                     whole("kw-gpu-a", 0, 1, cpu=1000, memory=4096), whole("kw-gpu-b", 2, 3, cpu=1000, memory=4096))  # fmt: skip
    job = manifest(record, CLOUD)
    assert (job["spec"]["completionMode"], job["spec"]["completions"], job["spec"]["parallelism"]) == ("Indexed", 2, 2)
    assert [t["matchFields"][0]["values"] for t in terms(job)] == [["kw-gpu-a"], ["kw-gpu-b"]]
    anti = job["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti == [{"labelSelector": {"matchLabels": {"examlops.io/decision-id": record.id.lower()}}, "topologyKey": "kubernetes.io/hostname"}]
    assert job["spec"]["template"]["metadata"]["labels"]["examlops.io/decision-id"] == record.id.lower()


def test_pinning_keeps_the_model_terms_in_every_node_term(hardware: Hardware) -> None:
    # h100 has three product label values: an In expression, repeated beside each node's name.
    record = granted(hardware, CLOUD, Workload("gang", "nvidia", count=1, target="cloud"), whole("kw-gpu-a", 0), whole("kw-gpu-b", 0))
    for term in terms(manifest(record, CLOUD)):
        assert term["matchExpressions"][0]["key"] == "nvidia.com/gpu.product"
        assert "NVIDIA-H100-80GB-HBM3" in term["matchExpressions"][0]["values"]


def test_a_time_sliced_share_asks_for_replicas_and_takes_either_product_label(hardware: Hardware) -> None:
    record = granted(hardware, CLOUD_T4, Workload("infer", "nvidia", target="cloud"),
                     NodeAllocation("kw-t4", share=DeviceShare(3, 1), cpu_milli=500, memory_mib=2048))  # fmt: skip
    job = manifest(record, CLOUD_T4)
    assert job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1", "memory": "2Gi"}
    (term,) = terms(job)
    assert term["matchExpressions"] == [{"key": "nvidia.com/gpu.product", "operator": "In", "values": ["Tesla-T4", "Tesla-T4-SHARED"]}]


@pytest.mark.parametrize(
    ("allocations", "expected"),
    [
        ((whole("kw-gpu-a", 0, 1), whole("kw-gpu-b", 0)), "one pod template asks the same on each"),
        ((whole("kw-gpu-c", 0),), "node kw-gpu-c is not a node of pool k8s-eu-h100"),
        ((whole("kw-gpu-a", 0), whole("kw-gpu-a", 1)), "a node is granted twice"),
    ],
)
def test_kubernetes_refuses_a_grant_one_pod_template_cannot_carry(hardware: Hardware, allocations: tuple[NodeAllocation, ...], expected: str) -> None:
    record = granted(hardware, CLOUD, Workload("gang", "nvidia", count=1, target="cloud"), *allocations)
    with pytest.raises(SpecError, match=expected):
        job_manifest(record, CLOUD, image="busybox:1.36")


def test_an_mps_share_is_one_replica(hardware: Hardware) -> None:
    mps = dataclasses.replace(CLOUD_T4, name="k8s-eu-t4-mps", sharing="mps")
    record = granted(hardware, mps, Workload("infer", "nvidia", target="cloud"), NodeAllocation("kw-t4", share=DeviceShare(0, 2)))
    with pytest.raises(SpecError, match="an MPS share is one replica per pod"):
        job_manifest(record, mps, image="busybox:1.36")
