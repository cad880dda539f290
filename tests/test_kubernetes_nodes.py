"""Against the real control plane of scripts/k8s-up: discovery reads nodes (allocatable CPU,
memory and GPUs, a cordoned and a NotReady node, topology labels by the names given), a pod pinned
by its node grant is scheduled by kube-scheduler on that very node (another node would fit it as
well), and a 2-node gang runs one pod on each of the two granted nodes.

End to end through the layer (``test_the_layer_grants_nodes_that_kubernetes_runs_on``): the
cluster discovered and applied, the layer refuses a 6-GPU request on the two 4-GPU nodes (it used
to place it, and the Job stayed Pending for ever), grants a gang two nodes and a 4-GPU request the
node with 4 GPUs free, and kube-scheduler runs each where it was granted. The other tests write
their allocations by hand, to show what the pin does. Skipped without a cluster unless
``EXA_REQUIRE_SERVICES`` is set (the fixtures of tests/test_kubernetes_cluster.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from examlops_policy.discovery.kubernetes import discover_kubernetes
from examlops_policy.executors.kubernetes import job_manifest
from examlops_policy.executors.kubernetes_api import JobRef, JobStatus, KubernetesCluster
from examlops_policy.hardware import Hardware
from examlops_policy.model import Holding, Node, NodeAllocation, Placement, Pool, Workload
from tests.kubernetes_support import admin, cluster, delete_nodes, fake_node, wait_ready  # noqa: F401 - fixtures
from tests.placement_support import granted
from tests.test_kubernetes_cluster import IMAGE, REGIONS, RUN, jobs  # noqa: F401 - fixtures

pytestmark = pytest.mark.kubernetes

REGION = "eu-west-1"
BLOCK = "cloud.google.com/gce-topology-block"
SWITCH = "cloud.google.com/gce-topology-subblock"
H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}


def name(key: str) -> str:
    return f"exa-{RUN}-n-{key}"


@pytest.fixture(scope="module")
def four_gpu_nodes(cluster: KubernetesCluster, admin: Any) -> Iterator[dict[str, str]]:  # noqa: F811
    """a, b: two Ready 4-GPU nodes under one switch; c: cordoned; d: never Ready (no kwok)."""
    from lightkube import codecs

    names = {key: name(key) for key in "abcd"}
    specs = {
        "a": ({**H100, BLOCK: "b1", SWITCH: "s1"}, False, True),
        "b": ({**H100, BLOCK: "b1", SWITCH: "s1"}, False, True),
        "c": ({**H100, BLOCK: "b1", SWITCH: "s2"}, True, True),
        "d": ({**H100, BLOCK: "b2", SWITCH: "s3"}, False, False),
    }
    try:
        for key, (labels, cordoned, kwok) in specs.items():
            manifest = fake_node(names[key], REGION, {"nvidia.com/gpu": "4", "cpu": "16", "memory": "64Gi"}, labels)
            if cordoned:
                manifest["spec"] = {"unschedulable": True}
            if not kwok:
                # No kubelet, no kwok: never Ready, and tainted as the node lifecycle controller
                # taints a NotReady node (this control plane runs none).
                del manifest["metadata"]["annotations"]
                manifest["spec"] = {"taints": [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]}
            admin.create(codecs.from_dict(manifest))
        wait_ready(cluster, [names["a"], names["b"], names["c"]])
        yield names
    finally:
        delete_nodes(admin, names.values())


def our_pool(cluster: KubernetesCluster, names: dict[str, str]) -> Pool:  # noqa: F811
    found = discover_kubernetes(cluster, REGIONS, block_label=BLOCK, switch_label=SWITCH)
    (pool,) = [d.pool for d in found.pools if set(d.nodes) & set(names.values())]
    return pool


def scheduled(cluster: KubernetesCluster, ref: JobRef, pods: int, timeout_s: float = 60) -> JobStatus:  # noqa: F811
    deadline = time.monotonic() + timeout_s
    while True:
        status = cluster.job_status(ref.namespace, ref.name)
        if len(status.nodes) >= pods or status.state == "failed" or time.monotonic() > deadline:
            return status
        time.sleep(0.25)


def test_discovery_reads_nodes_states_and_topology(cluster: KubernetesCluster, four_gpu_nodes: dict[str, str]) -> None:  # noqa: F811
    pool = our_pool(cluster, four_gpu_nodes)
    n = four_gpu_nodes
    assert pool.node_list() == (
        Node(n["a"], 4, cpu=16, memory=65536, block="b1", switch="s1"),
        Node(n["b"], 4, cpu=16, memory=65536, block="b1", switch="s1"),
        Node(n["c"], 4, cpu=16, memory=65536, state="drained", block="b1", switch="s2"),
        Node(n["d"], 4, cpu=16, memory=65536, state="down", block="b2", switch="s3"),
    )


@pytest.fixture()
def busy_b(four_gpu_nodes: dict[str, str], admin: Any) -> Iterator[str]:  # noqa: F811
    """A bare pod holding 12 of node b's 16 CPUs (kwok keeps it Running): left to itself,
    kube-scheduler prefers the emptier node a."""
    from lightkube import codecs
    from lightkube.resources.core_v1 import Pod

    pod = f"exa-{RUN}-n-hog"
    admin.create(codecs.from_dict({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod, "namespace": "default"},
        "spec": {"nodeName": four_gpu_nodes["b"], "containers": [{"name": "c", "image": IMAGE, "resources": {"requests": {"cpu": "12"}}}]},
    }))  # fmt: skip
    yield four_gpu_nodes["b"]
    admin.delete(Pod, pod, namespace="default", grace_period=0)


@pytest.mark.parametrize("pinned", [True, False], ids=["pinned", "unpinned"])
def test_a_pinned_pod_is_scheduled_on_its_granted_node(cluster: KubernetesCluster, four_gpu_nodes: dict[str, str],  # noqa: F811
                                                       hardware: Hardware, jobs: list[JobRef], busy_b: str, pinned: bool) -> None:  # noqa: F811  # fmt: skip
    pool = our_pool(cluster, four_gpu_nodes)
    target = busy_b  # node a fits the pod as well, and the scheduler would rather take it
    grant = NodeAllocation(target, tuple(Holding(i) for i in range(4)), cpu_milli=2000, memory_mib=4096)
    record = granted(hardware, pool, Workload(f"pin-{RUN}", "nvidia", count=4, target="cloud"), *((grant,) if pinned else ()))
    manifest = job_manifest(record, pool, image=IMAGE)
    ref = cluster.create_job(manifest)
    jobs.append(ref)
    status = scheduled(cluster, ref, 1)
    # Pinned: on b. Without a node grant the same Job goes where the scheduler likes (a): the pin
    # is what puts it on the granted node.
    assert status.nodes == ((target,) if pinned else (four_gpu_nodes["a"],)), status


def test_a_two_node_gang_runs_one_pod_on_each_granted_node(cluster: KubernetesCluster, four_gpu_nodes: dict[str, str],  # noqa: F811
                                                           hardware: Hardware, jobs: list[JobRef], admin: Any) -> None:  # noqa: F811  # fmt: skip
    from lightkube.resources.core_v1 import Pod

    pool = our_pool(cluster, four_gpu_nodes)
    a, b = four_gpu_nodes["a"], four_gpu_nodes["b"]
    each = {"cpu_milli": 1000, "memory_mib": 2048}
    record = granted(hardware, pool, Workload(f"gang-{RUN}", "nvidia", count=2, target="cloud"),
                     NodeAllocation(a, (Holding(0), Holding(1)), **each), NodeAllocation(b, (Holding(2), Holding(3)), **each))  # fmt: skip
    manifest = job_manifest(record, pool, image=IMAGE)
    ref = cluster.create_job(manifest)
    jobs.append(ref)
    status = scheduled(cluster, ref, 2)
    assert status.nodes == tuple(sorted((a, b))), status
    pods = list(admin.list(Pod, namespace=ref.namespace, labels={"job-name": ref.name}))
    placed = sorted((p.metadata.annotations["batch.kubernetes.io/job-completion-index"], p.spec.nodeName) for p in pods)
    assert [index for index, _ in placed] == ["0", "1"]
    assert len({node for _, node in placed}) == 2  # one pod per node
    for p in pods:
        requests = p.spec.containers[0].resources.requests
        assert (requests["cpu"], requests["memory"], requests["nvidia.com/gpu"]) == ("1", "2Gi", "2")


@pytest.fixture()
def gpu_held_on_a(four_gpu_nodes: dict[str, str], admin: Any) -> Iterator[str]:  # noqa: F811
    """A bare pod outside this layer holding 1 of node a's 4 GPUs (kwok keeps it Running)."""
    from lightkube import codecs
    from lightkube.resources.core_v1 import Pod

    pod = f"exa-{RUN}-n-gpu-hog"
    admin.create(codecs.from_dict({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod, "namespace": "default"},
        "spec": {"nodeName": four_gpu_nodes["a"],
                 "containers": [{"name": "c", "image": IMAGE, "resources": {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}]},
    }))  # fmt: skip
    yield four_gpu_nodes["a"]
    admin.delete(Pod, pod, namespace="default", grace_period=0)


def test_the_layer_grants_nodes_that_kubernetes_runs_on(cluster: KubernetesCluster, four_gpu_nodes: dict[str, str],  # noqa: F811
                                                        hardware: Hardware, jobs: list[JobRef], gpu_held_on_a: str) -> None:  # noqa: F811  # fmt: skip
    from examlops_policy.model import Rejection
    from tests.kubernetes_support import KUBECONFIG

    n = four_gpu_nodes
    found = hardware.discover("kubernetes", apply=True, kubeconfig=str(KUBECONFIG), block_label=BLOCK, switch_label=SWITCH)
    (name_,) = [c.pool.name for c in found.changes if set(c.nodes) & set(n.values())]
    view = {v.pool.name: v for v in hardware.pool_views()}[name_]
    rooms = view.state.capacity.nodes
    # Only a and b take work (c cordoned, d NotReady); a has 3 GPUs free beside the pod outside.
    assert rooms is not None and sorted((r.whole, r.count) for r in rooms) == [(3, 1), (4, 1)]

    six = hardware.place(Workload(f"six-{RUN}", "nvidia", count=6, target="cloud", models=("h100",))).decision
    assert isinstance(six, Rejection), six
    assert [r.code for r in next(v for v in six.verdicts if v.pool == name_).reasons][0] == "no_node_fits"

    gang = hardware.place(Workload(f"gang-{RUN}", "nvidia", count=2, nodes=2, cpu=1, memory="2Gi", target="cloud", models=("h100",)))
    assert isinstance(gang.decision, Placement) and gang.decision.pool == name_
    assert sorted(a.node for a in gang.decision.allocations) == sorted((n["a"], n["b"]))
    submitted = hardware.submit(gang.id, "kubernetes", image=IMAGE, kubeconfig=str(KUBECONFIG))
    ref = JobRef(submitted.namespace or "default", (submitted.job_id or "").split("/", 1)[1], submitted.job_uid or "")
    jobs.append(ref)
    assert scheduled(cluster, ref, 2).nodes == tuple(sorted((n["a"], n["b"])))
    hardware.release(gang.id, kubeconfig=str(KUBECONFIG))

    four = hardware.place(Workload(f"four-{RUN}", "nvidia", count=4, target="cloud", models=("h100",)))
    assert isinstance(four.decision, Placement) and [a.node for a in four.decision.allocations] == [n["b"]]
    submitted = hardware.submit(four.id, "kubernetes", image=IMAGE, kubeconfig=str(KUBECONFIG))
    ref = JobRef(submitted.namespace or "default", (submitted.job_id or "").split("/", 1)[1], submitted.job_uid or "")
    jobs.append(ref)
    assert scheduled(cluster, ref, 1).nodes == (n["b"],)
