"""Against a real Kubernetes control plane (scripts/k8s-up): discover, submit, watch, delete.

kube-apiserver, kube-scheduler and kube-controller-manager are the real v1.37.2 binaries; the GPU
nodes are Node objects this module creates, annotated ``kwok.x-k8s.io/node: fake`` so kwok marks
them Ready and runs (then completes) the pods the real scheduler binds to them.

Only the harness's own cluster is used (``.exa-services/k8s/kubeconfig``, or the file named by
``EXA_TEST_KUBECONFIG``), never the user's KUBECONFIG: these tests create and delete nodes.
Skipped when no cluster answers, unless ``EXA_REQUIRE_SERVICES`` is set: then they fail.
"""

from __future__ import annotations

import datetime
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import yaml

from examlops_policy.discovery import DiscoveredPool
from examlops_policy.discovery.kubernetes import discover_kubernetes
from examlops_policy.errors import SpecError
from examlops_policy.executors.kubernetes import job_manifest
from examlops_policy.executors.kubernetes_api import JobRef, JobStatus, KubernetesCluster, KubernetesError
from examlops_policy.hardware import Hardware
from examlops_policy.model import Pool, Workload
from examlops_policy.tables import load_tables
from tests.conftest import ROOT
from tests.kubernetes_support import KUBECONFIG, admin, cluster, delete_nodes, fake_node, wait_ready  # noqa: F401 - fixtures
from tests.placement_support import placed_in

pytestmark = pytest.mark.kubernetes

STATE = ROOT / ".exa-services" / "k8s"
RUN = secrets.token_hex(3)  # names of this run's nodes and Jobs
IMAGE = "registry.example/train:1.0"  # never pulled: kwok runs no containers
REGIONS = load_tables().regions


NODES = {
    "h100": ("us-east-1", {"nvidia.com/gpu": "8"}, {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}),
    "a100-mig": ("eu-central-1", {"nvidia.com/mig-1g.10gb": "7"}, {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}),
    "mi300x": ("us-east-1", {"amd.com/gpu": "4"}, {"amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM"}),
    "unknown-product": ("us-east-1", {"nvidia.com/gpu": "2"}, {"nvidia.com/gpu.product": "NVIDIA-Imaginary-X"}),
    "unknown-region": ("mars-north-1", {"nvidia.com/gpu": "2"}, {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}),
    # The same model in another region: a us-east-1 pool's Job must never land here (residency).
    "h100-eu": ("eu-central-1", {"nvidia.com/gpu": "8"}, {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}),
}


def node_name(key: str) -> str:
    return f"exa-{RUN}-{key}"


@pytest.fixture(scope="module")
def gpu_nodes(cluster: KubernetesCluster, admin: Any) -> Iterator[dict[str, str]]:
    """The fake GPU nodes, Ready (kwok) before the tests use them; deleted afterwards."""
    from lightkube import codecs

    names = {key: node_name(key) for key in NODES}
    try:
        for key, (region, allocatable, labels) in NODES.items():
            admin.create(codecs.from_dict(fake_node(names[key], region, allocatable, labels)))
        wait_ready(cluster, names.values())
        yield names
    finally:
        delete_nodes(admin, names.values())


@pytest.fixture()
def jobs(cluster: KubernetesCluster) -> Iterator[list[JobRef]]:
    """Jobs a test created; deleted (with their pods) when it ends."""
    created: list[JobRef] = []
    yield created
    for ref in created:
        if not ref.dry_run:
            cluster.delete_job(ref.namespace, ref.name, wait_s=60)


def burst(name: str, accelerator: str, **kwargs: Any) -> Workload:
    return Workload(f"{name}-{RUN}", accelerator, target="cloud", allow_burst=True, **kwargs)


def wait_for_job(cluster: KubernetesCluster, ref: JobRef, states: set[str], timeout_s: float = 90) -> JobStatus:
    deadline = time.monotonic() + timeout_s
    while True:
        status = cluster.job_status(ref.namespace, ref.name)
        if status.state in states or time.monotonic() > deadline:
            return status
        time.sleep(0.25)


def pools_of(cluster: KubernetesCluster, nodes: dict[str, str]) -> dict[str, DiscoveredPool]:
    """Discovered pools holding this module's nodes (the cluster may hold others)."""
    found = discover_kubernetes(cluster, REGIONS)
    ours = set(nodes.values())
    return {d.pool.name: d for d in found.pools if set(d.nodes) & ours}


# -- discovery ---------------------------------------------------------------------------------


def test_discovery_finds_the_gpu_nodes_as_cloud_pools(cluster: KubernetesCluster, gpu_nodes: dict[str, str]) -> None:
    found = discover_kubernetes(cluster, REGIONS)
    assert found.source == f"kubernetes {cluster.server}"
    pools = {d.pool.name: d for d in found.pools if set(d.nodes) & set(gpu_nodes.values())}
    assert {name: (d.pool.accelerator, d.pool.model, d.pool.region, d.pool.count, d.pool.fixed_profile, d.free, d.nodes)
            for name, d in pools.items()} == {  # fmt: skip
        "k8s-us-east-1-h100": ("nvidia", "h100", "us-east-1", 8, None, 8.0, (gpu_nodes["h100"],)),
        "k8s-eu-central-1-h100": ("nvidia", "h100", "eu-central-1", 8, None, 8.0, (gpu_nodes["h100-eu"],)),
        "k8s-eu-central-1-a100-mig-1g.10gb": ("nvidia", "a100", "eu-central-1", 7, "1g.10gb", 7.0, (gpu_nodes["a100-mig"],)),
        "k8s-us-east-1-mi300x": ("amd", "mi300x", "us-east-1", 4, None, 4.0, (gpu_nodes["mi300x"],)),
    }
    assert any(f"node {gpu_nodes['unknown-product']}: nvidia.com/gpu.product=NVIDIA-Imaginary-X is not a known" in w for w in found.warnings)
    assert any(f"node {gpu_nodes['unknown-region']}: region 'mars-north-1' is not in the regions table" in w for w in found.warnings)
    assert discover_kubernetes(cluster, REGIONS) == found  # idempotent


def test_free_devices_subtract_what_bound_pods_request(cluster: KubernetesCluster, gpu_nodes: dict[str, str], admin: Any) -> None:
    """A bare pod (not a Job: kwok keeps it Running) holding 3 GPUs on the H100 node."""
    from lightkube import codecs
    from lightkube.resources.core_v1 import Pod

    name = f"exa-{RUN}-holder"
    admin.create(codecs.from_dict({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app.kubernetes.io/managed-by": "examlops"}},
        "spec": {"nodeName": gpu_nodes["h100"], "containers": [{"name": "c", "image": IMAGE,
                 "resources": {"limits": {"nvidia.com/gpu": "3"}}}]},
    }))  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            pool = pools_of(cluster, gpu_nodes)["k8s-us-east-1-h100"]
            if pool.free == 5 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert (pool.pool.count, pool.free) == (8, 5.0)
        assert "3 held by examlops Jobs" in pool.details
    finally:
        admin.delete(Pod, name, namespace="default", grace_period=0)


# -- jobs --------------------------------------------------------------------------------------

# id: (pool, workload, the pool's Job asks)
SUBMITTED = {
    "nvidia": (Pool("k8s-us-east-1-h100", "cloud", "nvidia", 8, "us-east-1", model="h100"), burst("train", "nvidia", count=2), "nvidia.com/gpu"),
    "nvidia-mig": (Pool("k8s-eu-central-1-a100", "cloud", "nvidia", 7, "eu-central-1", model="a100", supports_fractions=True),
                   burst("infer", "nvidia", fraction=0.1), "nvidia.com/mig-1g.10gb"),
    "amd": (Pool("k8s-us-east-1-mi300x", "cloud", "amd", 4, "us-east-1", model="mi300x"), burst("train", "amd", count=4), "amd.com/gpu"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(SUBMITTED))
def test_a_placed_decisions_job_is_scheduled_and_completes(
    cluster: KubernetesCluster, gpu_nodes: dict[str, str], hardware: Hardware, jobs: list[JobRef], case: str
) -> None:
    pool, workload, resource = SUBMITTED[case]
    record = placed_in(hardware, pool, workload)
    manifest = job_manifest(record, pool, image=IMAGE, command=["python", "train.py"])
    assert resource in cast(Any, manifest)["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    ref = cluster.create_job(manifest)
    jobs.append(ref)
    assert (ref.namespace, ref.dry_run) == ("default", False) and ref.uid
    status = wait_for_job(cluster, ref, {"complete", "failed"})
    assert status.state == "complete", status
    key = {"nvidia": "h100", "nvidia-mig": "a100-mig", "amd": "mi300x"}[case]
    # Bound by the real scheduler to the node of that model in the pool's region (H100 nodes of two
    # other regions are candidates too, but for the Job's region selector).
    assert status.nodes == (gpu_nodes[key],)
    assert status.decision_id == record.id and status.uid == ref.uid and status.succeeded == 1
    assert [r.name for r in cluster.jobs(decision_id=record.id)] == [ref.name]


def test_a_request_larger_than_any_node_stays_pending_with_the_schedulers_reason(
    cluster: KubernetesCluster, gpu_nodes: dict[str, str], hardware: Hardware, jobs: list[JobRef]
) -> None:
    pool = Pool("k8s-us-east-1-h100-big", "cloud", "nvidia", 64, "us-east-1", model="h100")
    record = placed_in(hardware, pool, burst("huge", "nvidia", count=16))
    ref = cluster.create_job(job_manifest(record, pool, image=IMAGE))
    jobs.append(ref)
    deadline = time.monotonic() + 60
    status = cluster.job_status(ref.namespace, ref.name)
    while status.reason is None or "Insufficient" not in status.reason:  # until the scheduler has tried
        assert time.monotonic() < deadline and status.state == "pending", status
        time.sleep(0.25)
        status = cluster.job_status(ref.namespace, ref.name)
    assert status.state == "pending"
    assert status.reason.startswith("Unschedulable: ") and "Insufficient nvidia.com/gpu" in status.reason
    assert status.message is not None and "Insufficient nvidia.com/gpu" in status.message
    assert status.nodes == ()


def test_a_job_never_runs_outside_its_pools_region(
    cluster: KubernetesCluster, gpu_nodes: dict[str, str], hardware: Hardware, jobs: list[JobRef]
) -> None:
    """H100 nodes with free GPUs exist in us-east-1 and eu-central-1, none in eu-west-1."""
    pool = Pool("k8s-eu-west-1-h100", "cloud", "nvidia", 8, "eu-west-1", model="h100")
    ref = cluster.create_job(job_manifest(placed_in(hardware, pool, burst("resident", "nvidia")), pool, image=IMAGE))
    jobs.append(ref)
    deadline = time.monotonic() + 60
    status = cluster.job_status(ref.namespace, ref.name)
    while status.reason is None or not status.reason.startswith("Unschedulable"):
        assert time.monotonic() < deadline and status.state == "pending", status
        time.sleep(0.25)
        status = cluster.job_status(ref.namespace, ref.name)
    assert status.state == "pending" and status.nodes == ()
    assert "didn't match Pod's node affinity/selector" in (status.reason or "")


def test_delete_removes_the_job_and_its_status_then_says_missing(
    cluster: KubernetesCluster, gpu_nodes: dict[str, str], hardware: Hardware, jobs: list[JobRef]
) -> None:
    pool, workload, _ = SUBMITTED["nvidia"]
    record = placed_in(hardware, pool, burst("gone", "nvidia"))
    ref = cluster.create_job(job_manifest(record, pool, image=IMAGE))
    assert cluster.job_status(ref.namespace, ref.name).state != "missing"
    assert cluster.delete_job(ref.namespace, ref.name, wait_s=60) is True
    status = cluster.job_status(ref.namespace, ref.name)
    assert (status.state, status.reason) == ("missing", "NotFound")
    assert cluster.delete_job(ref.namespace, ref.name) is False  # already gone
    assert cluster.jobs(decision_id=record.id) == ()


def test_creating_the_same_job_twice_is_refused_as_already_existing(
    cluster: KubernetesCluster, gpu_nodes: dict[str, str], hardware: Hardware, jobs: list[JobRef]
) -> None:
    pool, workload, _ = SUBMITTED["nvidia"]
    record = placed_in(hardware, pool, burst("twice", "nvidia"))
    manifest = job_manifest(record, pool, image=IMAGE)
    jobs.append(cluster.create_job(manifest))
    with pytest.raises(KubernetesError, match="already exists") as refused:
        cluster.create_job(manifest)
    assert (refused.value.code, refused.value.reason) == (409, "AlreadyExists")


# -- the server's dry run -----------------------------------------------------------------------

# Every vendor's Job as this layer generates it (tests/test_kubernetes.py checks them offline).
DRY_RUN = {
    "nvidia-whole": (Pool("dry-h100", "cloud", "nvidia", 8, "us-east-1", model="h100"), burst("train", "nvidia", count=2)),
    "nvidia-mig": (Pool("dry-a100", "cloud", "nvidia", 8, "eu-central-1", model="a100", supports_fractions=True),
                   burst("infer", "nvidia", fraction=0.25)),
    "amd": (Pool("dry-mi300x", "cloud", "amd", 8, "us-east-1", model="mi300x"), burst("train", "amd", engine="vllm", count=8)),
    "amd-partition": (Pool("dry-mi300x-p", "cloud", "amd", 8, "us-east-1", model="mi300x", supports_fractions=True),
                      burst("infer", "amd", engine="vllm", fraction=0.125)),
    "intel-gaudi": (Pool("dry-gaudi3", "cloud", "intel-gaudi", 8, "us-east-1", model="gaudi3"),
                    burst("train", "intel-gaudi", engine="ipex", count=4)),
    "tpu": (Pool("dry-tpu", "cloud", "tpu", 4, "us-central1", model="tpu-v5p"), burst("train", "tpu", count=4)),
    "cpu": (Pool("dry-cpu", "cloud", "cpu", 64, "europe-west4"), burst("prep", "cpu", engine="cpu", count=8)),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(DRY_RUN))
def test_the_server_dry_run_accepts_every_job_this_layer_generates_and_stores_nothing(cluster: KubernetesCluster, hardware: Hardware, case: str) -> None:
    pool, workload = DRY_RUN[case]
    record = placed_in(hardware, pool, workload)
    manifest = job_manifest(record, pool, image=IMAGE, command=["run"], tpu_topology="2x2x1" if case == "tpu" else None)
    ref = cluster.create_job(manifest, dry_run=True)
    assert ref.dry_run and ref.name == cast(Any, manifest)["metadata"]["name"] and ref.namespace == "default"
    assert cluster.job_status(ref.namespace, ref.name).state == "missing"  # nothing was stored


def malformed(hardware: Hardware, change: str) -> dict[str, Any]:
    pool, workload = DRY_RUN["amd"]
    manifest = cast(dict[str, Any], job_manifest(placed_in(hardware, pool, workload), pool, image=IMAGE))
    container = manifest["spec"]["template"]["spec"]["containers"][0]
    if change == "fraction":
        container["resources"]["limits"] = {"amd.com/gpu": "500m"}  # half a device: no such thing
    elif change == "requests-differ":
        container["resources"]["requests"] = {"amd.com/gpu": "1"}  # limits ask 8
    elif change == "name":
        manifest["metadata"]["name"] = "Not_A_DNS_Label"
    elif change == "namespace":
        manifest["metadata"]["namespace"] = f"exa-{RUN}-absent"
    return manifest


@pytest.mark.parametrize(
    ("change", "code", "words"),
    [
        ("fraction", 422, "must be an integer"),
        ("requests-differ", 422, "must be equal to amd.com/gpu limit"),
        ("name", 422, "metadata.name: Invalid value"),
        ("namespace", 404, f"namespace 'exa-{RUN}-absent' does not exist"),
    ],
    ids=["fraction", "requests-differ", "name", "namespace"],  # the same in every process (pytest-xdist compares)
)
def test_the_server_refuses_a_malformed_job_with_its_reason(cluster: KubernetesCluster, hardware: Hardware, change: str, code: int, words: str) -> None:
    manifest = malformed(hardware, change)
    for dry_run in (True, False):
        with pytest.raises(KubernetesError) as refused:
            cluster.create_job(manifest, dry_run=dry_run)
        assert refused.value.code == code
        assert words in str(refused.value), str(refused.value)
        assert str(refused.value).startswith(f"create Job {manifest['metadata'].get('namespace', 'default')}/")


def test_a_manifest_the_client_would_change_is_refused_before_sending(cluster: KubernetesCluster, hardware: Hardware) -> None:
    manifest = malformed(hardware, "none")
    manifest["spec"]["template"]["spec"]["containers"][0]["resourcez"] = {}
    with pytest.raises(SpecError, match=r"containers\[0\]\.resourcez"):
        cluster.create_job(manifest, dry_run=True)
    with pytest.raises(SpecError, match="batch/v1 and kind Job"):
        cluster.create_job({"apiVersion": "v1", "kind": "Pod"}, dry_run=True)


# -- credentials and reachability ---------------------------------------------------------------


def kubeconfig_with(tmp_path: Path, **changes: str) -> Path:
    config = yaml.safe_load(KUBECONFIG.read_text())
    if "token" in changes:
        config["users"][0]["user"]["token"] = changes["token"]
    if "server" in changes:
        config["clusters"][0]["cluster"]["server"] = changes["server"]
    if "ca" in changes:
        config["clusters"][0]["cluster"]["certificate-authority-data"] = changes["ca"]
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


def test_a_wrong_token_is_refused_as_unauthorised(cluster: KubernetesCluster, tmp_path: Path) -> None:
    with KubernetesCluster.connect(kubeconfig_with(tmp_path, token="not-the-token")) as wrong:
        with pytest.raises(KubernetesError, match="unauthorised") as refused:
            wrong.nodes()
    assert refused.value.code == 401 and "context exa-local" in str(refused.value)


def test_a_user_without_a_role_is_forbidden(cluster: KubernetesCluster, hardware: Hardware) -> None:
    unprivileged = STATE / "kubeconfig-unprivileged"
    if not unprivileged.is_file():
        pytest.skip("the cluster was not started by scripts/k8s-up (no unprivileged user)")
    pool, workload = DRY_RUN["cpu"]
    manifest = job_manifest(placed_in(hardware, pool, workload), pool, image=IMAGE)
    with KubernetesCluster.connect(unprivileged) as nobody:
        with pytest.raises(KubernetesError, match=r"forbidden: .*exa-unprivileged.* cannot create resource \"jobs\"") as refused:
            nobody.create_job(manifest, dry_run=True)
    assert refused.value.code == 403


def test_a_server_certificate_from_another_ca_fails_tls(cluster: KubernetesCluster, tmp_path: Path) -> None:
    import base64

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, "another-ca")])
    now = datetime.datetime.now(datetime.timezone.utc)
    other_ca = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(key, hashes.SHA256())
    )  # fmt: skip
    pem = base64.b64encode(other_ca.public_bytes(serialization.Encoding.PEM)).decode()
    with KubernetesCluster.connect(kubeconfig_with(tmp_path, ca=pem)) as untrusted:
        with pytest.raises(KubernetesError, match="TLS with the API server at .* failed") as refused:
            untrusted.nodes()
    assert refused.value.reason == "TLS"
