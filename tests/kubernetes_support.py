"""The test Kubernetes control plane (scripts/k8s-up) as the Kubernetes tests use it.

Only the harness's own cluster is used (``.exa-services/k8s/kubeconfig``, or the file named by
``EXA_TEST_KUBECONFIG``), never the user's KUBECONFIG: the tests create and delete nodes. A test
that needs it is skipped when no cluster answers, unless ``EXA_REQUIRE_SERVICES`` is set: then it
fails. GPU nodes are Node objects the tests create, annotated ``kwok.x-k8s.io/node: fake`` so that
kwok marks them Ready and runs (then completes) the pods the real scheduler binds to them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from examlops_policy.errors import ExaError
from examlops_policy.executors.kubernetes_api import KubernetesCluster
from tests.conftest import ROOT

KUBECONFIG = Path(os.environ.get("EXA_TEST_KUBECONFIG", ROOT / ".exa-services" / "k8s" / "kubeconfig"))


def missing_cluster(message: str) -> None:
    """Skip the test for ``message``, or fail it where ``EXA_REQUIRE_SERVICES`` is set."""
    if os.environ.get("EXA_REQUIRE_SERVICES"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="module")
def cluster() -> Iterator[KubernetesCluster]:
    """The test cluster, connected (once per module)."""
    if not KUBECONFIG.is_file():
        missing_cluster(f"no test cluster ({KUBECONFIG} missing); start one with scripts/k8s-up")
    try:
        connected = KubernetesCluster.connect(KUBECONFIG)
        connected.nodes()
    except ExaError as exc:
        missing_cluster(f"the test cluster does not answer ({exc}); start it with scripts/k8s-up")
    with connected:
        yield connected


@pytest.fixture(scope="module")
def admin(cluster: KubernetesCluster) -> Iterator[Any]:
    """A plain lightkube client for what this layer does not do itself (nodes, bare pods)."""
    from lightkube import Client, KubeConfig

    client = Client(KubeConfig.from_file(KUBECONFIG), lazy=False)
    yield client
    client.close()


def fake_node(name: str, region: str, allocatable: dict[str, str], labels: dict[str, str]) -> dict[str, Any]:
    """The manifest of a kwok node ``name`` in ``region`` with ``allocatable`` devices and ``labels``."""
    capacity = {"cpu": "64", "memory": "512Gi", "pods": "110", **allocatable}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake"},
            "labels": {"type": "kwok", "kubernetes.io/hostname": name, "topology.kubernetes.io/region": region, **labels},
        },
        "status": {"capacity": capacity, "allocatable": capacity},
    }


def wait_ready(cluster: KubernetesCluster, names: Iterable[str], timeout_s: float = 60) -> None:
    """Wait (up to ``timeout_s``) until every node of ``names`` is Ready; fail naming those that are not."""
    wanted = set(names)
    deadline = time.monotonic() + timeout_s
    while missing := wanted - {n.name for n in cluster.nodes() if n.ready}:
        assert time.monotonic() < deadline, f"kwok did not make {sorted(missing)} Ready (is kwok running?)"
        time.sleep(0.2)


def delete_nodes(admin: Any, names: Iterable[str]) -> None:
    """Delete the nodes ``names`` (cleanup: one that was never created is passed over)."""
    from lightkube.resources.core_v1 import Node

    for name in names:
        try:
            admin.delete(Node, name)
        except Exception:  # noqa: BLE001 - cleanup of a node that may not have been created
            pass
