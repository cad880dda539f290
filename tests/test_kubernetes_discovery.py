"""Kubernetes discovery without a cluster: nodes and pods as the client reads them -> cloud pools.

The grouping, counting and warnings are pure functions of ``NodeInfo`` / ``PodUsage``; the same
code runs against the real API server in tests/test_kubernetes_cluster.py. Also: the library
imports without the Kubernetes client, and the client's input checks (kubeconfig, manifest).
"""

from __future__ import annotations

import socket
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from examlops_policy.discovery import DiscoveredPool, Discovery, plan
from examlops_policy.discovery.kubernetes import from_kubernetes, pools_from_nodes, product_models
from examlops_policy.errors import SpecError
from examlops_policy.executors.kubernetes import PRODUCT_LABELS, PRODUCTS
from examlops_policy.executors.kubernetes_api import NodeInfo, PodUsage, kubeconfig_path
from examlops_policy.model import Pool
from examlops_policy.tables import load_tables

TABLES = load_tables()
REGION = "topology.kubernetes.io/region"


def nvidia(product: str) -> dict[str, str]:
    return {"nvidia.com/gpu.product": product}


def make(name: str, region: str | None, allocatable: dict[str, int | str], labels: dict[str, str] | None = None,
         ready: bool = True, cordoned: bool = False) -> NodeInfo:  # fmt: skip
    all_labels = dict(labels or {})
    if region is not None:
        all_labels[REGION] = region
    return NodeInfo(name, all_labels, {k: Decimal(str(v)) for k, v in allocatable.items()}, ready, cordoned)


def pod(node_name: str, requests: dict[str, int | str], *, managed: bool = False, name: str = "p") -> PodUsage:
    return PodUsage("default", name, node_name, "Running", {k: Decimal(str(v)) for k, v in requests.items()}, managed)


def discover(nodes: list[NodeInfo], pods: list[PodUsage] = []) -> Discovery:  # noqa: B006 - never mutated
    return pools_from_nodes(nodes, pods, TABLES.regions, models=TABLES.models)


def by_name(found: Discovery) -> dict[str, DiscoveredPool]:
    return {d.pool.name: d for d in found.pools}


MIXED = [
    make("gpu-a", "us-east-1", {"cpu": 96, "nvidia.com/gpu": 8}, nvidia("NVIDIA-H100-80GB-HBM3")),
    make("gpu-b", "us-east-1", {"cpu": 96, "nvidia.com/gpu": 8}, nvidia("NVIDIA-H100-SXM5-80GB")),
    make("mig-a", "eu-central-1", {"cpu": 64, "nvidia.com/mig-1g.10gb": 7, "nvidia.com/mig-3g.40gb": 2}, nvidia("NVIDIA-A100-SXM4-80GB")),
    make("amd-a", "us-east-1", {"cpu": 128, "amd.com/gpu": 8}, {"amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM"}),
    make("amd-p", "us-east-1", {"cpu": 128, "amd.com/cpx_nps4": 64}, {"amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM"}),
    make("gaudi", "us-east-1", {"cpu": 160, "habana.ai/gaudi": 8}),
    make("tpu", "us-central1", {"cpu": 208, "google.com/tpu": 4},
         {"cloud.google.com/gke-tpu-accelerator": "tpu-v5p-slice", "cloud.google.com/gke-tpu-topology": "2x2x1"}),
    make("cpu-1", "europe-west4", {"cpu": "15.5", "memory": 68719476736}),
    make("cpu-2", "europe-west4", {"cpu": 16}),
]  # fmt: skip


def test_one_pool_per_region_resource_and_model() -> None:
    pools = by_name(discover(MIXED))
    expected = {
        # name: (accelerator, model, count, fixed_profile)
        "k8s-us-east-1-h100": ("nvidia", "h100", 16, None),
        "k8s-eu-central-1-a100-mig-1g.10gb": ("nvidia", "a100", 7, "1g.10gb"),
        "k8s-eu-central-1-a100-mig-3g.40gb": ("nvidia", "a100", 2, "3g.40gb"),
        "k8s-us-east-1-mi300x": ("amd", "mi300x", 8, None),
        "k8s-us-east-1-mi300x-cpx-nps4": ("amd", "mi300x", 64, "cpx"),
        "k8s-us-east-1-intel-gaudi": ("intel-gaudi", None, 8, None),
        "k8s-us-central1-tpu-v5p": ("tpu", "tpu-v5p", 4, None),
        "k8s-europe-west4-cpu": ("cpu", None, 31, None),
    }
    assert {n: (d.pool.accelerator, d.pool.model, d.pool.count, d.pool.fixed_profile) for n, d in pools.items()} == expected
    for found in pools.values():
        assert found.pool.target == "cloud"
        assert found.pool.supports_fractions == (found.pool.fixed_profile is not None)
        assert found.free == found.pool.count or found.pool.accelerator == "cpu"
    assert pools["k8s-us-east-1-h100"].nodes == ("gpu-a", "gpu-b")
    assert "product NVIDIA-H100-80GB-HBM3, NVIDIA-H100-SXM5-80GB" in pools["k8s-us-east-1-h100"].details
    assert "resource amd.com/cpx_nps4" in pools["k8s-us-east-1-mi300x-cpx-nps4"].details
    assert "TPU topology 2x2x1" in pools["k8s-us-central1-tpu-v5p"].details
    # 15.5 + 16 cores allocatable: a pool counts whole CPUs, and never has more free than it counts.
    assert pools["k8s-europe-west4-cpu"].free == 31


def test_free_is_allocatable_minus_what_bound_pods_request() -> None:
    pods = [
        pod("gpu-a", {"nvidia.com/gpu": 3, "cpu": 8}, managed=True),
        pod("gpu-b", {"nvidia.com/gpu": 8}, name="other"),
        pod("mig-a", {"nvidia.com/mig-1g.10gb": 2}),
        pod("cpu-1", {"cpu": "1.5"}),
    ]
    pools = by_name(discover(MIXED, pods))
    assert pools["k8s-us-east-1-h100"].free == 5  # 16 - 3 - 8
    assert "3 held by examlops Jobs" in pools["k8s-us-east-1-h100"].details
    assert pools["k8s-eu-central-1-a100-mig-1g.10gb"].free == 5
    assert pools["k8s-eu-central-1-a100-mig-3g.40gb"].free == 2
    assert pools["k8s-europe-west4-cpu"].free == 30.0


def test_devices_of_unusable_nodes_are_counted_never_free() -> None:
    nodes = [
        make("up", "us-east-1", {"nvidia.com/gpu": 4}, nvidia("NVIDIA-H100-80GB-HBM3")),
        make("down", "us-east-1", {"nvidia.com/gpu": 4}, nvidia("NVIDIA-H100-80GB-HBM3"), ready=False),
        make("cordoned", "us-east-1", {"nvidia.com/gpu": 4}, nvidia("NVIDIA-H100-80GB-HBM3"), cordoned=True),
    ]
    found = discover(nodes)
    (only,) = found.pools
    assert (only.pool.count, only.free) == (12, 4)
    assert "node down is not Ready: its devices are counted, none is free" in found.warnings
    assert "node cordoned is cordoned: its devices are counted, none is free" in found.warnings


@pytest.mark.parametrize(
    ("bad", "warning"),
    [
        (make("n", None, {"nvidia.com/gpu": 8}, nvidia("NVIDIA-H100-80GB-HBM3")), "no topology.kubernetes.io/region label"),
        (make("n", "mars-1", {"nvidia.com/gpu": 8}, nvidia("NVIDIA-H100-80GB-HBM3")), "region 'mars-1' is not in the regions table"),
        (make("n", "us-east-1", {"nvidia.com/gpu": 8}, nvidia("NVIDIA-Imaginary-X")), "NVIDIA-Imaginary-X is not a known nvidia product"),
        (make("n", "us-east-1", {"nvidia.com/gpu": 8}), "nvidia devices without a nvidia.com/gpu.product label"),
        # A product of another vendor under the NVIDIA label is no NVIDIA model.
        (make("n", "us-east-1", {"nvidia.com/gpu": 8}, nvidia("AMD_Instinct_MI300X_OAM")), "is not a known nvidia product"),
        (make("n", "us-east-1", {"nvidia.com/gpu": 7}, nvidia("NVIDIA-A100-SXM4-80GB-MIG-1g.10gb")), "MIG single strategy"),
        (make("n", "us-east-1", {"nvidia.com/gpu.shared": 32}, nvidia("NVIDIA-H100-80GB-HBM3")), "time-sliced"),
        (make("n", "us-east-1", {"amd.com/xyz": 2}, {"amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM"}), "unknown device resource amd.com/xyz"),
    ],
    ids=["no-region", "unknown-region", "unknown-product", "no-product", "wrong-vendor", "mig-single", "time-sliced", "unknown-amd"],
)
def test_what_is_not_known_is_reported_and_skipped_never_guessed(bad: NodeInfo, warning: str) -> None:
    found = discover([bad])
    assert found.pools == ()  # a device node never falls back to being a CPU pool
    assert any(warning in w for w in found.warnings), found.warnings


def test_names_are_deterministic_safe_and_long_ones_are_refused() -> None:
    first, again = discover(MIXED), discover(list(reversed(MIXED)))
    assert first == again
    assert [d.pool.name for d in first.pools] == sorted(d.pool.name for d in first.pools)
    long_prefix = "k8s-" + "x" * 50 + "-"
    found = pools_from_nodes(MIXED, [], TABLES.regions, models=TABLES.models, prefix=long_prefix)
    assert all(len(d.pool.name) <= 63 for d in found.pools)
    assert any("is not a safe pool name" in w for w in found.warnings)


def test_rediscovery_plans_unchanged_and_ownership_follows_the_prefix() -> None:
    found = discover(MIXED)
    from examlops_policy.model import PoolState

    registered = [PoolState(d.pool, d.free or 0) for d in found.pools]
    assert {c.action for c in plan(discover(MIXED), registered, owned=from_kubernetes)} == {"unchanged"}
    stale = plan(discover(MIXED[:1]), registered, owned=from_kubernetes)
    assert {c.name for c in stale if c.action == "stale"} == {d.pool.name for d in found.pools} - {"k8s-us-east-1-h100"}
    assert not from_kubernetes(Pool("k8s-x", "hpc", "nvidia", 1, "eu", partition="gpu"))
    assert not from_kubernetes(Pool("cloud-a100", "cloud", "nvidia", 1, "us"))


def test_product_inverse_covers_every_pinned_value_and_names_known_models() -> None:
    inverse = product_models()
    assert set(inverse) == set(PRODUCT_LABELS.values())
    for model, values in PRODUCTS.items():
        assert model in TABLES.models
        for value in values:
            assert inverse["nvidia.com/gpu.product"][value] == model


def test_the_library_imports_and_discovers_without_the_kubernetes_client() -> None:
    code = (
        "import sys\n"
        "import examlops_policy, examlops_policy.discovery.kubernetes, examlops_policy.executors.kubernetes_api\n"
        "assert not [m for m in sys.modules if m.startswith(('lightkube', 'httpx2'))], 'client imported eagerly'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parent.parent)


def test_kubeconfig_is_found_in_order_and_a_missing_one_is_bad_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    given = tmp_path / "given"
    from_env = tmp_path / "env"
    given.write_text("x")
    from_env.write_text("x")
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'absent'}:{from_env}")
    assert kubeconfig_path(given) == given
    assert kubeconfig_path() == from_env  # the first file of KUBECONFIG that exists
    monkeypatch.delenv("KUBECONFIG")
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(SpecError, match=r"\.kube/config does not exist"):
        kubeconfig_path()
    with pytest.raises(SpecError, match="kubeconfig"):
        kubeconfig_path(tmp_path / "nope")


def kubeconfig(path: Path, server: str) -> Path:
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: k, cluster: {{server: '{server}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    return path


def test_an_unknown_context_or_a_broken_kubeconfig_is_bad_input(tmp_path: Path) -> None:
    pytest.importorskip("lightkube")
    from examlops_policy.executors.kubernetes_api import KubernetesCluster

    config = kubeconfig(tmp_path / "kubeconfig", "https://127.0.0.1:1")
    with KubernetesCluster.connect(config) as cluster:  # reads the file only
        assert (cluster.server, cluster.context, cluster.namespace) == ("https://127.0.0.1:1", "c", "default")
    with pytest.raises(SpecError, match="Context 'nope' not found"):
        KubernetesCluster.connect(config, context="nope")
    config.write_text("clusters: 3\n")
    with pytest.raises(SpecError, match="not a usable kubeconfig"):
        KubernetesCluster.connect(config)


def test_an_unreachable_server_is_a_clear_error(tmp_path: Path) -> None:
    pytest.importorskip("lightkube")
    from examlops_policy.executors.kubernetes_api import KubernetesCluster, KubernetesError

    with socket.socket() as probe:  # a port nothing listens on once the probe is closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = f"https://127.0.0.1:{port}"
    with KubernetesCluster.connect(kubeconfig(tmp_path / "kubeconfig", server)) as gone:
        with pytest.raises(KubernetesError, match=f"list nodes: cannot reach the API server at {server}") as refused:
            gone.nodes()
        assert refused.value.reason == "Unreachable" and refused.value.code is None
        with pytest.raises(KubernetesError, match=f"read Job default/x: cannot reach the API server at {server}"):
            gone.job_status("default", "x")  # never "missing": no answer is no answer
