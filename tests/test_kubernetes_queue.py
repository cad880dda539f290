"""The queue against the real local Kubernetes control plane (scripts/k8s-up, kwok nodes): a Job
completes, ``serve`` reconciles it (its grant released with the Job's start and end) and admits the
queued workload within one interval, submitting its Job; a cordoned node takes its devices out of
its pool's capacity and gives them back when uncordoned. Skipped when no cluster answers, unless
``EXA_REQUIRE_SERVICES`` is set (tests/test_kubernetes_cluster.py's conventions)."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from examlops_policy.executors.kubernetes_api import KubernetesCluster
from examlops_policy.hardware import Hardware
from examlops_policy.opa import stop_server
from tests.conftest import EXA, exa_json, shared_opa_env
from tests.kubernetes_support import KUBECONFIG, admin, cluster, delete_nodes, fake_node, wait_ready  # noqa: F401 - fixtures

pytestmark = pytest.mark.kubernetes

RUN = secrets.token_hex(3)
REGION = "europe-west9"  # no other test module puts nodes here: the pool discovered there is this module's
POOL = f"k8s-{REGION}-mi300x"
ENV = {"KUBECONFIG": str(KUBECONFIG)}


@pytest.fixture(scope="module")
def node(cluster: KubernetesCluster, admin: Any) -> Iterator[str]:  # noqa: F811 - fixtures
    from lightkube import codecs

    name = f"exa-queue-{RUN}-mi300x"
    admin.create(codecs.from_dict(fake_node(name, REGION, {"amd.com/gpu": "2"}, {"amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM"})))
    try:
        wait_ready(cluster, [name])
        yield name
    finally:
        for ref in cluster.jobs():
            if RUN in ref.name:
                cluster.delete_job(ref.namespace, ref.name, wait_s=60)
        delete_nodes(admin, [name])


@pytest.fixture()
def home(tmp_path: Path, node: str, opa_home: Path) -> Iterator[Path]:
    """A state holding only this module's pool (discovered from the cluster)."""
    path = tmp_path / "exa-home"
    hw = Hardware(path)
    try:
        found = hw.discover("kubernetes", kubeconfig=str(KUBECONFIG))
        mine = [c.pool for c in found.changes if c.pool.name == POOL]
        assert len(mine) == 1 and mine[0].count == 2 and mine[0].nodes_named, [c.pool.name for c in found.changes]
        hw.apply(mine)
    finally:
        hw.close()
    yield path
    stop_server(path)


def test_a_job_completes_and_serve_admits_and_submits_the_queued_one_within_an_interval(home: Path, cluster: KubernetesCluster) -> None:  # noqa: F811
    first = exa_json(home, "hardware", "place", f"first-{RUN}", "--accelerator", "amd", "--count", "2", "--target", "cloud", env=ENV)
    assert first["outcome"] == "placed" and first["pool"] == POOL
    submitted = exa_json(home, "hardware", "submit", first["id"], "--kubernetes", "--image", "busybox", env=ENV)
    waiting = exa_json(home, "hardware", "place", f"second-{RUN}", "--accelerator", "amd", "--count", "2", "--target", "cloud",
                       "--queue", "--submit", "kubernetes", "--image", "busybox", env=ENV)  # fmt: skip
    assert waiting["outcome"] == "queued"
    namespace, _, name = submitted["job_id"].partition("/")
    deadline = time.monotonic() + 90
    while cluster.job_status(namespace, name).state != "complete":  # kwok completes the pod
        assert time.monotonic() < deadline, "the first Job did not complete"
        time.sleep(0.25)
    completed_at = time.monotonic()
    interval = 2.0
    proc = subprocess.Popen([str(EXA), "hardware", "serve", "--interval", "2s", "--kubernetes"],
                            env={**os.environ, **ENV, **shared_opa_env(), "EXA_HOME": str(home)},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:
        admitted_at = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            entry = next(e for e in exa_json(home, "hardware", "queue", "--all", env=ENV)["entries"] if e["id"] == waiting["id"])
            if entry["state"] == "admitted":
                placed = exa_json(home, "hardware", "explain", entry["admitted_by"], env=ENV)
                if placed["job_id"]:
                    admitted_at = time.monotonic()
                    break
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert admitted_at is not None, out
    # Within one interval of serve starting (plus the time a step and this poll take).
    assert admitted_at - completed_at < interval + 10, out
    ended = exa_json(home, "hardware", "explain", first["id"], env=ENV)
    assert ended["released_at"] is not None and ended["job_state"] == "complete"
    assert ended["job_started_at"] is not None and ended["job_ended_at"] is not None
    assert placed["queued_id"] == waiting["id"] and placed["scheduler"] == "kubernetes"
    assert f"ended (complete): released 2 amd on {POOL}" in out and f"admitted second-{RUN}" in out
    assert exa_json(home, "audit", "verify", env=ENV)["ok"] is True


def test_a_cordoned_node_leaves_the_pool_and_comes_back(home: Path, node: str, admin: Any) -> None:  # noqa: F811
    from lightkube.resources.core_v1 import Node

    def free() -> float:
        return {p["name"]: p["free"] for p in exa_json(home, "hardware", "pools", env=ENV)}[POOL]  # type: ignore[no-any-return]

    assert free() == 2
    admin.patch(Node, node, {"spec": {"unschedulable": True}})
    try:
        changes = exa_json(home, "hardware", "reconcile", "--kubernetes", env=ENV)["changes"]
        assert [(c["kind"], c["node"], c["state"]) for c in changes] == [("node", node, "drained")]
        assert free() == 0
        assert exa_json(home, "hardware", "reconcile", "--kubernetes", env=ENV)["changes"] == []  # no change: nothing written
    finally:
        admin.patch(Node, node, {"spec": {"unschedulable": False}})
    back = exa_json(home, "hardware", "reconcile", "--kubernetes", env=ENV)["changes"]
    assert [(c["kind"], c["node"]) for c in back] == [("node_up", node)]
    assert free() == 2
