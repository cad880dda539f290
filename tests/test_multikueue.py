"""MultiKueue with this layer as its dispatcher, on three real control planes with Kueue: the
manager cluster (scripts/kueue-up) and two workers (scripts/multikueue-up: worker-a, worker-b).

The manager's ClusterQueue lists two checks: this layer's placement check and MultiKueue's.
``exa kueue admission-check`` (Kueue's ``multiKueue.dispatcherName`` names it) places each
Workload over the pools of both workers and nominates the one cluster of the granted pool; Kueue
copies the Workload there only, the worker runs the Job (kwok), and the grant is released when
the Workload finishes. A Workload the policy refuses is copied nowhere.

Skipped when the workers are not running, unless ``EXA_REQUIRE_SERVICES`` is set: then they fail.
"""

from __future__ import annotations

import base64
import secrets
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lightkube.generic_resource import create_global_resource

from examlops_policy.hardware import Hardware
from examlops_policy.kueue import multikueue as mk
from examlops_policy.kueue import workloads as wl
from examlops_policy.model import Node, Placement, Pool
from tests.conftest import open_hardware
from tests.kubernetes_support import fake_node
from tests.test_kueue import KUBECONFIG, STATE, ControllerProcess, Kinds, require, wait_for

pytestmark = [pytest.mark.kueue, pytest.mark.multikueue]

RUN = secrets.token_hex(3)
NS = f"mk-{RUN}"
QUEUE = "team"
PLACEMENT = f"mk-{RUN}-placement"
MULTIKUEUE = f"mk-{RUN}-multikueue"
WORKERS = ("worker-a", "worker-b")
CLUSTER = {w: f"mk-{RUN}-{w}" for w in WORKERS}  # the MultiKueueClusters' names
NODE = {w: f"mk-{RUN}-{w}-gpu" for w in WORKERS}
REGION = {"worker-a": "eu-central-1", "worker-b": "us-east-1"}
IMAGE = "registry.example/train:1.0"  # never pulled: kwok runs no containers
# worker-a's GPU is in the EU and dearer; worker-b's is in the US and cheaper.
POOLS = [
    Pool("mk-a-eu", "hpc", "nvidia", 1, REGION["worker-a"], cost_per_hour=3.0, cluster=CLUSTER["worker-a"],
         nodes=(Node(NODE["worker-a"], 1, cpu=64, memory=512 * 1024),)),
    Pool("mk-b-us", "hpc", "nvidia", 1, REGION["worker-b"], cost_per_hour=1.0, cluster=CLUSTER["worker-b"],
         nodes=(Node(NODE["worker-b"], 1, cpu=64, memory=512 * 1024),)),
]  # fmt: skip
MultiKueueCluster = create_global_resource("kueue.x-k8s.io", "v1beta2", "MultiKueueCluster", "multikueueclusters")
MultiKueueConfig = create_global_resource("kueue.x-k8s.io", "v1beta2", "MultiKueueConfig", "multikueueconfigs")


def _client(kubeconfig: Path) -> Any:
    from lightkube import Client, KubeConfig

    return Client(KubeConfig.from_file(kubeconfig), lazy=False, field_manager="exa-tests")


@pytest.fixture(scope="module")
def clusters() -> Iterator[dict[str, Any]]:
    """Clients of the manager (``manager``) and of each worker, by name."""
    from lightkube import ApiError

    if not (STATE / "multikueue" / "env").is_file() or not KUBECONFIG.is_file():
        require("no MultiKueue workers (.exa-services/multikueue/env missing); start them with scripts/multikueue-up")
    clients = {"manager": _client(KUBECONFIG), **{w: _client(STATE / f"k8s-{w}" / "kubeconfig") for w in WORKERS}}
    try:
        for client in clients.values():
            client.list(Kinds.ClusterQueue)
    except (ApiError, OSError) as exc:
        require(f"a MultiKueue cluster does not answer ({exc}); start them with scripts/multikueue-up")
    yield clients
    for client in clients.values():
        client.close()


def _quota() -> list[dict[str, str]]:
    return [{"name": "cpu", "nominalQuota": "1000"}, {"name": "memory", "nominalQuota": "100Ti"}, {"name": "nvidia.com/gpu", "nominalQuota": "100"}]


def _queues(make: Any, checks: list[str]) -> None:
    """A namespace Kueue's Job webhooks see, a ResourceFlavor, a ClusterQueue with ``checks`` and
    its LocalQueue ``team``."""
    quota = _quota()
    make({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS, "labels": {"examlops.io/kueue": "enabled"}}})
    make({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": NS}}, Kinds.ResourceFlavor)
    spec: dict[str, Any] = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NS}},
        "resourceGroups": [{"coveredResources": [q["name"] for q in quota], "flavors": [{"name": NS, "resources": quota}]}],
    }
    if checks:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": c} for c in checks]}
    make({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": NS}, "spec": spec}, Kinds.ClusterQueue)
    make({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": QUEUE, "namespace": NS},
          "spec": {"clusterQueue": NS}}, Kinds.LocalQueue)  # fmt: skip


@pytest.fixture(scope="module")
def multikueue(clusters: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Each worker: a kwok GPU node in its region and a plain ClusterQueue. The manager: each
    worker's kubeconfig in a Secret of kueue-system, a MultiKueueCluster per worker, a
    MultiKueueConfig listing both, the two checks and a ClusterQueue listing them. All deleted
    afterwards."""
    from lightkube import codecs
    from lightkube.resources.core_v1 import Node as K8sNode
    from lightkube.resources.core_v1 import Secret

    created: list[tuple[Any, Any, str, str | None]] = []

    def maker(client: Any) -> Any:
        def make(doc: dict[str, Any], kind: Any = None) -> None:
            obj = codecs.from_dict(doc) if kind is None else kind.from_dict(doc)
            client.create(obj)
            meta = doc["metadata"]
            created.append((client, type(obj), meta["name"], meta.get("namespace")))

        return make

    manager = clusters["manager"]
    try:
        for w in WORKERS:
            make = maker(clusters[w])
            make(fake_node(NODE[w], REGION[w], {"nvidia.com/gpu": "1"}, {}))
            _queues(make, [])
        make = maker(manager)
        for w in WORKERS:
            kubeconfig = (STATE / f"k8s-{w}" / "kubeconfig").read_bytes()
            make({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": CLUSTER[w], "namespace": "kueue-system"},
                  "data": {"kubeconfig": base64.b64encode(kubeconfig).decode()}}, Secret)  # fmt: skip
            make({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "MultiKueueCluster", "metadata": {"name": CLUSTER[w]},
                  "spec": {"clusterSource": {"kubeConfig": {"location": CLUSTER[w], "locationType": "Secret"}}}}, MultiKueueCluster)  # fmt: skip
        make({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "MultiKueueConfig", "metadata": {"name": NS},
              "spec": {"clusters": [CLUSTER[w] for w in WORKERS]}}, MultiKueueConfig)  # fmt: skip
        make({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck", "metadata": {"name": PLACEMENT},
              "spec": {"controllerName": wl.CONTROLLER_NAME}}, Kinds.AdmissionCheck)  # fmt: skip
        make({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck", "metadata": {"name": MULTIKUEUE},
              "spec": {"controllerName": mk.CONTROLLER_NAME,
                       "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": NS}}}, Kinds.AdmissionCheck)  # fmt: skip
        _queues(make, [PLACEMENT, MULTIKUEUE])
        for w in WORKERS:
            wait_for(f"kwok makes {w}'s node Ready", lambda w=w: any(  # type: ignore[misc]
                c.type == "Ready" and c.status == "True" for c in (clusters[w].get(K8sNode, NODE[w]).status.conditions or [])))  # fmt: skip
        wait_for("MultiKueue connects to both workers (each MultiKueueCluster Active)", lambda: all(
            _active(manager.get(MultiKueueCluster, CLUSTER[w]).to_dict()) for w in WORKERS))  # fmt: skip
        wait_for("MultiKueue's check is Active", lambda: _active(manager.get(Kinds.AdmissionCheck, MULTIKUEUE).to_dict()))
        copies = {w: Copies(w) for w in WORKERS}
        yield {**clusters, "copies": copies}
        for seen in copies.values():
            seen.close()
    finally:
        for client, kind, name, namespace in reversed(created):
            try:
                client.delete(kind, name, namespace=namespace) if namespace else client.delete(kind, name)
            except Exception:  # noqa: BLE001 - cleanup of what may not have been created
                pass


class Copies:
    """Every Workload a worker's API server had in the test's namespace since it started: a
    watch of its own (a copy MultiKueue makes and deletes at once is seen too)."""

    def __init__(self, worker: str) -> None:
        self.client = _client(STATE / f"k8s-{worker}" / "kubeconfig")
        self.names: set[str] = set()
        self.ready = threading.Event()
        threading.Thread(target=self._watch, name=f"copies-{worker}", daemon=True).start()
        assert self.ready.wait(60), f"could not watch {worker}'s Workloads"

    def _watch(self) -> None:
        self.names.update(w.metadata.name for w in self.client.list(Kinds.Workload, namespace=NS))
        self.ready.set()
        try:
            for _op, obj in self.client.watch(Kinds.Workload, namespace=NS):
                self.names.add(obj.metadata.name)
        except Exception:  # noqa: BLE001 - the client closed at the module's end
            pass

    def close(self) -> None:
        self.client.close()


def _active(doc: dict[str, Any]) -> bool:
    return any(c.get("type") == "Active" and c.get("status") == "True" for c in (doc.get("status") or {}).get("conditions") or [])


@pytest.fixture()
def layer(tmp_path: Path) -> Iterator[Hardware]:
    hardware = open_hardware(tmp_path / "home")
    hardware.apply(POOLS)
    yield hardware
    hardware.close()


@pytest.fixture()
def controller(layer: Hardware, tmp_path: Path) -> Iterator[ControllerProcess]:
    started = ControllerProcess(layer.home, tmp_path / "controller.log")
    yield started
    if started.proc is not None:
        started.kill()


@pytest.fixture()
def jobs(multikueue: dict[str, Any]) -> Iterator[list[str]]:
    """The Jobs a test created on the manager; deleted afterwards, with their Workloads on every cluster."""
    from lightkube.resources.batch_v1 import Job
    from lightkube.types import CascadeType

    names: list[str] = []
    yield names
    manager = multikueue["manager"]
    for name in names:
        try:
            manager.delete(Job, name, namespace=NS, cascade=CascadeType.BACKGROUND)
        except Exception:  # noqa: BLE001 - a Job the test may not have created
            pass
    wait_for("the test's Workloads are deleted everywhere", lambda: not any(
        list(multikueue[c].list(Kinds.Workload, namespace=NS)) for c in ("manager", *WORKERS)), 180)  # fmt: skip


def create_job(manager: Any, jobs: list[str], name: str, labels: dict[str, str] | None = None) -> Any:
    from lightkube import codecs

    job = manager.create(codecs.from_dict({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": NS, "labels": {"kueue.x-k8s.io/queue-name": QUEUE, **(labels or {})}},
        "spec": {"backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never", "containers": [
            {"name": "train", "image": IMAGE, "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"cpu": "1", "memory": "1Gi"}}}]}}},
    }))  # fmt: skip
    jobs.append(name)
    return job


def workload(client: Any, job: str) -> dict[str, Any] | None:
    """The Workload of the Job ``job`` (its owner) on ``client``'s cluster (a worker's copy has the
    manager Workload's name)."""
    for w in client.list(Kinds.Workload, namespace=NS):
        doc: dict[str, Any] = w.to_dict()
        if any(o.get("name") == job for o in doc["metadata"].get("ownerReferences") or []):
            return doc
    return None


def reserved_and_pending(manager: Any, job: str) -> wl.KueueWorkload | None:
    doc = workload(manager, job)
    kw = wl.parse(doc) if doc is not None else None
    return kw if kw is not None and kw.reserved and PLACEMENT in kw.checks and kw.checks[PLACEMENT].state == "Pending" else None


def check(doc: dict[str, Any] | None, name: str) -> dict[str, Any] | None:
    return next((c for c in ((doc or {}).get("status") or {}).get("admissionChecks") or [] if c["name"] == name), None)


def test_the_layer_nominates_the_one_cluster_of_the_pool_it_grants(multikueue: dict[str, Any], jobs: list[str], layer: Hardware,
                                                                   controller: ControllerProcess) -> None:  # fmt: skip
    manager = multikueue["manager"]
    controller.start()
    job = create_job(manager, jobs, f"cheap-{RUN}")
    assert job.spec.managedBy == mk.CONTROLLER_NAME, "Kueue's Job webhook hands a Job of a MultiKueue queue to MultiKueue"
    # The cheapest pool is worker-b's: the placement check is Ready and worker-b alone is nominated.
    ready = wait_for("the placement check is Ready", lambda: (c := check(workload(manager, job.metadata.name), PLACEMENT)) and c["state"] == "Ready" and c)
    assert f"nominated cluster {CLUSTER['worker-b']} (MultiKueue)" in ready["message"], ready["message"]
    decision_id = ready["podSetUpdates"][0]["annotations"][wl.DECISION_KEY]
    record = layer.decision(decision_id)
    assert isinstance(record.decision, Placement) and record.decision.pool == "mk-b-us"
    # Kueue copies the Workload to worker-b only; worker-b reserves quota; the manager's Workload
    # names it (status.clusterName) and is admitted; worker-b runs the Job and it finishes.
    doc = wait_for("the manager's Workload runs on worker-b", lambda: (d := workload(manager, job.metadata.name)) and
                   (d.get("status") or {}).get("clusterName") and d)  # fmt: skip
    assert doc["status"]["clusterName"] == CLUSTER["worker-b"]
    name, copies = doc["metadata"]["name"], multikueue["copies"]
    assert name in copies["worker-b"].names
    wait_for("the grant is released once the Workload finished on worker-b", lambda: layer.decision(decision_id).released_at, 240)
    # The controller says why once the step's releases are done: its line may follow the release.
    wait_for("the controller says the Workload finished", lambda: f"released {decision_id}: its Workload finished" in controller.text(), 30)
    assert name not in copies["worker-a"].names, "nothing was ever copied to the cluster not nominated"


def test_residency_moves_the_nomination_to_the_eu_cluster(multikueue: dict[str, Any], jobs: list[str], layer: Hardware,
                                                          controller: ControllerProcess) -> None:  # fmt: skip
    manager = multikueue["manager"]
    controller.start()
    job = create_job(manager, jobs, f"eu-{RUN}", labels={wl.RESIDENCY_LABEL: "eu-only"})
    doc = wait_for("the Workload runs on a worker", lambda: (d := workload(manager, job.metadata.name)) and
                   (d.get("status") or {}).get("clusterName") and d)  # fmt: skip
    assert doc["status"]["clusterName"] == CLUSTER["worker-a"]  # the cheaper worker-b is in us-east-1
    ready = check(doc, PLACEMENT)
    assert ready is not None and ready["state"] == "Ready"
    assert layer.decision(ready["podSetUpdates"][0]["annotations"][wl.DECISION_KEY]).decision.pool == "mk-a-eu"  # type: ignore[union-attr]
    copies = multikueue["copies"]
    assert doc["metadata"]["name"] in copies["worker-a"].names and doc["metadata"]["name"] not in copies["worker-b"].names


def test_a_workload_the_policy_refuses_is_copied_nowhere(multikueue: dict[str, Any], jobs: list[str], layer: Hardware,
                                                         controller: ControllerProcess) -> None:  # fmt: skip
    manager = multikueue["manager"]
    layer.remove_pool("mk-a-eu")  # the only EU pool gone: an eu-only Workload has nowhere to go
    controller.start()
    job = create_job(manager, jobs, f"refused-{RUN}", labels={wl.RESIDENCY_LABEL: "eu-only"})
    wait_for("the placement check is Rejected", lambda: f"{NS}/" in controller.text() and ": Rejected: " in controller.text())
    line = next(x for x in controller.text().splitlines() if ": Rejected: " in x)
    assert "data-residency eu-only forbids egress to region 'us-east-1'" in line and "no cluster nominated" in line, line
    doc = workload(manager, job.metadata.name)
    assert doc is not None and not (doc.get("status") or {}).get("nominatedClusterNames") and not (doc.get("status") or {}).get("clusterName")
    assert all(doc["metadata"]["name"] not in multikueue["copies"][w].names for w in WORKERS)
    assert not [g for g in layer.cycle.store.live_grants(with_jobs=True) if g.scheduler == "kueue"]


def test_a_pool_on_no_listed_cluster_is_rejected_and_its_grant_released(multikueue: dict[str, Any], jobs: list[str], layer: Hardware,
                                                                        controller: ControllerProcess) -> None:  # fmt: skip
    manager = multikueue["manager"]
    # The cheapest pool is on a cluster the MultiKueueConfig does not list: the layer places there,
    # cannot send the Workload there, releases the grant and says so.
    layer.apply([Pool("mk-elsewhere", "hpc", "nvidia", 1, "us-east-1", cost_per_hour=0.5, cluster="elsewhere",
                      nodes=(Node(f"mk-{RUN}-elsewhere-gpu", 1, cpu=64, memory=512 * 1024),))])  # fmt: skip
    controller.start()
    job = create_job(manager, jobs, f"elsewhere-{RUN}")
    wait_for("the placement check is Rejected", lambda: ": Rejected: " in controller.text())
    line = next(x for x in controller.text().splitlines() if ": Rejected: " in x)
    assert "placed on pool mk-elsewhere" in line and "not one of this Workload's MultiKueueConfig's clusters" in line, line
    decision_id = line.rsplit("decision ", 1)[1].split(" released")[0]
    assert layer.decision(decision_id).released_at is not None
    doc = workload(manager, job.metadata.name)
    assert doc is not None and not (doc.get("status") or {}).get("nominatedClusterNames")
    assert all(doc["metadata"]["name"] not in multikueue["copies"][w].names for w in WORKERS)


def test_a_restarted_controller_nominates_the_recorded_decisions_cluster_once(multikueue: dict[str, Any], jobs: list[str], layer: Hardware,
                                                                              controller: ControllerProcess) -> None:  # fmt: skip
    manager = multikueue["manager"]
    controller.once()  # the check Active; no controller runs while the Job comes in
    job = create_job(manager, jobs, f"again-{RUN}")
    kw = wait_for("Kueue reserves quota; the check is Pending", lambda: reserved_and_pending(manager, job.metadata.name))
    assert not kw.nominated and kw.cluster_name is None
    # A controller that recorded its decision and died before it nominated: the state holds the
    # grant, the Workload is nominated nowhere.
    first = layer.place(wl.build(kw, projects=()), request_id=wl.request_id(kw, PLACEMENT))
    assert isinstance(first.decision, Placement) and first.decision.pool == "mk-b-us"
    controller.start()
    doc = wait_for("the Workload runs on worker-b", lambda: (d := workload(manager, job.metadata.name)) and
                   (d.get("status") or {}).get("clusterName") and d)  # fmt: skip
    assert doc["status"]["clusterName"] == CLUSTER["worker-b"]
    ready = check(doc, PLACEMENT)
    assert ready is not None and ready["podSetUpdates"][0]["annotations"][wl.DECISION_KEY] == first.id  # the recorded decision
    assert [d.id for d in layer.decisions(50) if wl.uid_of(d.request_id) == kw.uid] == [first.id]
    assert doc["metadata"]["name"] not in multikueue["copies"]["worker-a"].names
