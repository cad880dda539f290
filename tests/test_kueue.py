"""Against a real Kueue (scripts/kueue-up: sigs.k8s.io/kueue v0.17.0's manager, its own CRDs and
webhooks) on the real control plane of scripts/k8s-up, with kwok GPU nodes: the admission check
``exa kueue admission-check`` decides each Workload through the layer's policy.

Each test starts the controller as a child process (``exa``; its Popen handle is how it is
stopped: a process this test started) on a home of its own, and removes its Jobs (and so their
Workloads) when it ends, so that the next test's controller sees none of them. Skipped when Kueue
is not running, unless ``EXA_REQUIRE_SERVICES`` is set: then they fail.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from examlops_policy.hardware import Hardware
from examlops_policy.kueue import workloads as wl
from examlops_policy.model import Node, Placement, Pool
from tests.conftest import EXA, ROOT, open_hardware, shared_opa_env
from tests.kubernetes_support import fake_node

pytestmark = pytest.mark.kueue

STATE = ROOT / ".exa-services"
KUBECONFIG = Path(os.environ.get("EXA_TEST_KUBECONFIG", STATE / "k8s" / "kubeconfig"))
RUN = secrets.token_hex(3)
NS = f"kq-{RUN}"
CHECK = f"kq-{RUN}-placement"
QUEUE = "team"
IMAGE = "registry.example/train:1.0"  # never pulled: kwok runs no containers
EU_NODE = f"kq-{RUN}-eu"
US_NODE = f"kq-{RUN}-us"
EU = Pool("kq-eu", "hpc", "nvidia", 1, "eu-central-1", cost_per_hour=2.0, nodes=(Node(EU_NODE, 1, cpu=64, memory="512Gi"),))
US_AMD = Pool("kq-us-amd", "hpc", "amd", 1, "us-east-1", cost_per_hour=1.0, nodes=(Node(US_NODE, 1, cpu=64, memory="512Gi"),))
T = TypeVar("T")


def require(message: str) -> None:
    if os.environ.get("EXA_REQUIRE_SERVICES"):
        pytest.fail(message)
    pytest.skip(message)


def wait_for(what: str, probe: Callable[[], T | None], timeout_s: float = 120) -> T:
    """Poll ``probe`` until it returns something (a generous bound: the machine may be loaded)."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = probe()
        if found is not None and found is not False:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s:g}s: {what}")
        time.sleep(0.3)


@pytest.fixture(scope="module")
def kube() -> Iterator[Any]:
    if not (STATE / "kueue" / "env").is_file() or not KUBECONFIG.is_file():
        require("no Kueue (.exa-services/kueue/env missing); start it with scripts/kueue-up")
    from lightkube import ApiError, Client, KubeConfig
    from lightkube.generic_resource import create_global_resource

    client = Client(KubeConfig.from_file(KUBECONFIG), lazy=False, field_manager="exa-tests")
    try:
        client.list(create_global_resource("kueue.x-k8s.io", "v1beta2", "ClusterQueue", "clusterqueues"))
    except (ApiError, OSError) as exc:
        client.close()
        require(f"Kueue's API does not answer ({exc}); start it with scripts/kueue-up")
    yield client
    client.close()


class Kinds:
    from lightkube.generic_resource import create_global_resource, create_namespaced_resource

    ResourceFlavor = create_global_resource("kueue.x-k8s.io", "v1beta2", "ResourceFlavor", "resourceflavors")
    AdmissionCheck = create_global_resource("kueue.x-k8s.io", "v1beta2", "AdmissionCheck", "admissionchecks")
    ClusterQueue = create_global_resource("kueue.x-k8s.io", "v1beta2", "ClusterQueue", "clusterqueues")
    LocalQueue = create_namespaced_resource("kueue.x-k8s.io", "v1beta2", "LocalQueue", "localqueues")
    Workload = create_namespaced_resource("kueue.x-k8s.io", "v1beta2", "Workload", "workloads")


@pytest.fixture(scope="module")
def queue(kube: Any) -> Iterator[str]:
    """kwok nodes (one NVIDIA GPU in eu-central-1, one AMD GPU in us-east-1), a namespace Kueue's
    Job webhooks see, and a ClusterQueue with ample quota whose only admission check is this
    layer's. Its LocalQueue's name is returned; everything is deleted afterwards."""
    from lightkube import codecs
    from lightkube.resources.core_v1 import Node, ServiceAccount

    created: list[tuple[Any, str, str | None]] = []

    def make(doc: dict[str, Any], kind: Any = None) -> None:
        obj = codecs.from_dict(doc) if kind is None else kind.from_dict(doc)
        kube.create(obj)
        meta = doc["metadata"]
        created.append((type(obj), meta["name"], meta.get("namespace")))

    try:
        make(fake_node(EU_NODE, "eu-central-1", {"nvidia.com/gpu": "1"}, {}))
        make(fake_node(US_NODE, "us-east-1", {"amd.com/gpu": "1"}, {}))
        make({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS, "labels": {"examlops.io/kueue": "enabled"}}})
        make({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": f"kq-{RUN}"}}, Kinds.ResourceFlavor)
        make({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck", "metadata": {"name": CHECK},
              "spec": {"controllerName": wl.CONTROLLER_NAME}}, Kinds.AdmissionCheck)  # fmt: skip
        quota = [{"name": "cpu", "nominalQuota": "1000"}, {"name": "memory", "nominalQuota": "100Ti"},
                 {"name": "nvidia.com/gpu", "nominalQuota": "100"}, {"name": "amd.com/gpu", "nominalQuota": "100"}]  # fmt: skip
        make({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": f"kq-{RUN}"},
              "spec": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NS}},
                       "resourceGroups": [{"coveredResources": [q["name"] for q in quota], "flavors": [{"name": f"kq-{RUN}", "resources": quota}]}],
                       "admissionChecksStrategy": {"admissionChecks": [{"name": CHECK}]}}}, Kinds.ClusterQueue)  # fmt: skip
        make({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": QUEUE, "namespace": NS},
              "spec": {"clusterQueue": f"kq-{RUN}"}}, Kinds.LocalQueue)  # fmt: skip
        wait_for("kwok makes the nodes Ready", lambda: all(
            any(c.type == "Ready" and c.status == "True" for c in (kube.get(Node, n).status.conditions or [])) for n in (EU_NODE, US_NODE)))  # fmt: skip
        wait_for("the namespace's default ServiceAccount", lambda: _exists(kube, ServiceAccount, "default", NS))
        yield QUEUE
    finally:
        for kind, name, namespace in reversed(created):
            try:
                kube.delete(kind, name, namespace=namespace) if namespace else kube.delete(kind, name)
            except Exception:  # noqa: BLE001 - cleanup of what may not have been created
                pass


def _exists(kube: Any, kind: Any, name: str, namespace: str | None = None) -> bool:
    from lightkube import ApiError

    try:
        kube.get(kind, name, namespace=namespace)
        return True
    except ApiError:
        return False


@pytest.fixture()
def jobs(kube: Any, queue: str) -> Iterator[list[str]]:
    """The names of the Jobs a test created; they (and their pods and Workloads) are gone after it."""
    from lightkube.resources.batch_v1 import Job
    from lightkube.types import CascadeType

    names: list[str] = []
    yield names
    for name in names:
        try:
            kube.delete(Job, name, namespace=NS, cascade=CascadeType.BACKGROUND)
        except Exception:  # noqa: BLE001 - a Job the test may not have created
            pass
    wait_for("the test's Workloads are deleted", lambda: not list(kube.list(Kinds.Workload, namespace=NS)), 120)


def create_job(kube: Any, jobs: list[str], name: str, resource: str, labels: dict[str, str] | None = None) -> Any:
    from lightkube import codecs

    job = codecs.from_dict({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": NS, "labels": {"kueue.x-k8s.io/queue-name": QUEUE, **(labels or {})}},
        "spec": {"backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never", "containers": [
            {"name": "train", "image": IMAGE, "resources": {"limits": {resource: "1"}, "requests": {"cpu": "1", "memory": "1Gi"}}}]}}},
    })  # fmt: skip
    made = kube.create(job)
    jobs.append(name)
    return made


def workload_of(kube: Any, job_uid: str) -> dict[str, Any] | None:
    for w in kube.list(Kinds.Workload, namespace=NS):
        doc = w.to_dict()
        if any(o.get("uid") == job_uid for o in doc["metadata"].get("ownerReferences") or []):
            return doc
    return None


def check_of(doc: dict[str, Any]) -> dict[str, Any] | None:
    return next((c for c in (doc.get("status") or {}).get("admissionChecks") or [] if c["name"] == CHECK), None)


def reserved_and_pending(kube: Any, job_uid: str) -> wl.KueueWorkload | None:
    doc = workload_of(kube, job_uid)
    if doc is None:
        return None
    kw = wl.parse(doc)
    check = kw.checks.get(CHECK)
    return kw if kw.reserved and check is not None and check.state == "Pending" else None


def check_state(kube: Any, job_uid: str, state: str) -> dict[str, Any] | None:
    doc = workload_of(kube, job_uid)
    check = check_of(doc) if doc else None
    return check if check is not None and check["state"] == state else None


def pods_of(kube: Any, job: str) -> list[Any]:
    from lightkube.resources.core_v1 import Pod

    return list(kube.list(Pod, namespace=NS, labels={"job-name": job}))


@pytest.fixture()
def home(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "home"


@pytest.fixture()
def layer(home: Path) -> Iterator[Hardware]:
    hardware = open_hardware(home)
    yield hardware
    hardware.close()


class ControllerProcess:
    """``exa kueue admission-check`` as a child process of this test."""

    def __init__(self, home: Path, log: Path) -> None:
        self.home, self.log = home, log
        self.proc: subprocess.Popen[bytes] | None = None

    def env(self) -> dict[str, str]:
        return {**os.environ, "EXA_HOME": str(self.home), **shared_opa_env()}

    def start(self) -> None:
        assert self.proc is None
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [str(EXA), "kueue", "admission-check", "--kubeconfig", str(KUBECONFIG), "--interval", "1"],
                env=self.env(), stdout=out, stderr=subprocess.STDOUT,
            )

    def once(self) -> str:
        done = subprocess.run([str(EXA), "kueue", "admission-check", "--once", "--kubeconfig", str(KUBECONFIG)],
                              env=self.env(), capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
        assert done.returncode == 0, f"exit {done.returncode}: {done.stdout}{done.stderr}"
        return done.stdout

    def kill(self, sig: int = signal.SIGKILL) -> int:
        assert self.proc is not None
        self.proc.send_signal(sig)
        code = self.proc.wait(timeout=60)
        self.proc = None
        return code

    def text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace") if self.log.exists() else ""


@pytest.fixture()
def controller(home: Path, tmp_path: Path) -> Iterator[ControllerProcess]:
    started = ControllerProcess(home, tmp_path / "controller.log")
    yield started
    if started.proc is not None:
        started.kill(signal.SIGTERM)


def live_kueue_grants(layer: Hardware) -> list[Any]:
    return [g for g in layer.cycle.store.live_grants(with_jobs=True) if g.scheduler == "kueue"]


def decisions_for(layer: Hardware, workload_uid: str) -> list[Any]:
    return [d for d in layer.decisions(200) if wl.uid_of(d.request_id) == workload_uid]


# -- the tests ------------------------------------------------------------------------------------


def test_a_job_runs_only_once_the_check_is_ready_on_the_granted_node(kube: Any, jobs: list[str], layer: Hardware, controller: ControllerProcess) -> None:
    layer.apply([EU, US_AMD])
    # One step: the check is Active (a ClusterQueue whose check no controller keeps Active reserves
    # nothing). Then no controller runs while the Job comes in.
    controller.once()
    job = create_job(kube, jobs, f"train-{RUN}", "nvidia.com/gpu")
    assert job.spec.suspend is True, "Kueue's Job webhook (served on 127.0.0.1) suspends a queued Job at creation"
    kw = wait_for("Kueue reserves quota; the check is Pending", lambda: reserved_and_pending(kube, job.metadata.uid))
    # No controller runs: quota is reserved, yet nothing is admitted and nothing runs.
    time.sleep(2)
    assert not pods_of(kube, job.metadata.name) and not kw.holds("Admitted")
    assert check_state(kube, job.metadata.uid, "Pending") is not None

    controller.start()
    check = wait_for("the check is Ready", lambda: check_state(kube, job.metadata.uid, "Ready"))
    (update,) = check["podSetUpdates"]
    decision_id = update["annotations"][wl.DECISION_KEY]
    assert update["nodeSelector"] == {"topology.kubernetes.io/region": "eu-central-1", "kubernetes.io/hostname": EU_NODE}
    record = layer.decision(decision_id)
    assert isinstance(record.decision, Placement) and record.decision.pool == "kq-eu"
    assert [a.node for a in record.decision.allocations] == [EU_NODE]
    assert (record.scheduler, record.job_id, record.job_uid) == ("kueue", f"{NS}/{kw.name}", kw.uid)

    pod = wait_for("the Job's pod is bound", lambda: next((p for p in pods_of(kube, job.metadata.name) if p.spec.nodeName), None))
    assert pod.spec.nodeName == EU_NODE
    assert pod.metadata.annotations[wl.DECISION_KEY] == decision_id
    assert controller.proc is not None
    assert (controller.home / "kueue" / "serve" / f"{controller.proc.pid}.json").is_file()  # recorded while it serves
    # kwok completes the pod; Kueue marks the Workload Finished; the grant is released.
    wait_for("the grant is released once the Workload finished", lambda: layer.decision(decision_id).released_at, 180)
    # The controller says why once the step's releases are done: its line may follow the release.
    wait_for("the controller says the Workload finished", lambda: "its Workload finished" in controller.text(), 30)
    pid = controller.proc.pid
    assert controller.kill(signal.SIGTERM) == 0  # the step under way finishes; the record goes
    assert "stopped" in controller.text() and not (controller.home / "kueue" / "serve" / f"{pid}.json").exists()


def test_a_residency_denial_ends_rejected_with_the_policys_reason(kube: Any, jobs: list[str], layer: Hardware, controller: ControllerProcess) -> None:
    layer.apply([US_AMD])
    job = create_job(kube, jobs, f"eu-data-{RUN}", "amd.com/gpu", labels={wl.RESIDENCY_LABEL: "eu-only"})
    controller.start()
    # Kueue deactivates a Workload whose check is Rejected and says why in its event, with the
    # check's message (the check itself is then reset to Pending: the Workload is inactive).
    event = wait_for("Kueue's AdmissionCheckRejected event", lambda: rejected_event(kube, job.metadata.uid))
    assert f"AdmissionCheck for {CHECK} was Rejected: " in event.message
    assert "data-residency eu-only forbids egress to region 'us-east-1'" in event.message
    doc = workload_of(kube, job.metadata.uid)
    assert doc is not None and doc["spec"]["active"] is False
    assert not pods_of(kube, job.metadata.name) and not live_kueue_grants(layer)


def rejected_event(kube: Any, job_uid: str) -> Any:
    from lightkube.resources.core_v1 import Event

    doc = workload_of(kube, job_uid)
    if doc is None:
        return None
    for event in kube.list(Event, namespace=NS):
        if event.reason == "AdmissionCheckRejected" and event.involvedObject.uid == doc["metadata"]["uid"]:
            return event
    return None


def test_a_full_fleet_gives_retry_then_ready_after_a_release(kube: Any, jobs: list[str], layer: Hardware, controller: ControllerProcess) -> None:
    from examlops_policy.model import Workload

    layer.apply([EU])
    holder = layer.place(Workload("holder", "nvidia"))  # the fleet's only GPU, held outside Kueue
    assert isinstance(holder.decision, Placement)
    job = create_job(kube, jobs, f"wait-{RUN}", "nvidia.com/gpu")
    controller.start()
    wait_for("the check went Retry (the fleet is full)", lambda: f"{NS}/" in controller.text() and ": Retry: not now: " in controller.text())
    retried = [line for line in controller.text().splitlines() if ": Retry: not now: " in line]
    assert "kq-eu" in retried[0], retried[0]  # the policy's reason names the pool that is full
    assert not pods_of(kube, job.metadata.name) and not live_kueue_grants(layer)

    layer.release(holder.id)
    check = wait_for("the check is Ready after the release", lambda: check_state(kube, job.metadata.uid, "Ready"), 300)
    pod = wait_for("the Job's pod is bound", lambda: next((p for p in pods_of(kube, job.metadata.name) if p.spec.nodeName), None))
    assert pod.spec.nodeName == EU_NODE
    assert layer.decision(check["podSetUpdates"][0]["annotations"][wl.DECISION_KEY]).decision.pool == "kq-eu"  # type: ignore[union-attr]


def test_a_controller_killed_and_restarted_grants_nothing_twice(kube: Any, jobs: list[str], layer: Hardware, controller: ControllerProcess) -> None:
    layer.apply([EU])
    controller.once()  # the check Active; no controller runs while the Job comes in
    job = create_job(kube, jobs, f"again-{RUN}", "nvidia.com/gpu")
    kw = wait_for("Kueue reserves quota; the check is Pending", lambda: reserved_and_pending(kube, job.metadata.uid))
    # A controller that recorded its decision and died before it wrote the check: the state
    # holds the grant, the Workload still says Pending.
    key = wl.request_id(kw, CHECK)
    first = layer.place(wl.build(kw, projects=()), request_id=key)
    assert isinstance(first.decision, Placement)

    controller.start()
    check = wait_for("the restarted controller sets the check Ready", lambda: check_state(kube, job.metadata.uid, "Ready"))
    assert check["podSetUpdates"][0]["annotations"][wl.DECISION_KEY] == first.id  # the recorded decision, not a new one
    assert controller.kill(signal.SIGKILL) == -signal.SIGKILL  # killed outright, mid-loop
    controller.once()  # and started again: one step, then another
    controller.once()
    # One decision for the Workload, ever; its grant is the only one (or released already, when
    # the Workload finished meanwhile: kwok completes the pod after 3 s).
    assert [d.id for d in decisions_for(layer, kw.uid)] == [first.id]
    assert {g.id for g in live_kueue_grants(layer)} <= {first.id}
    assert layer.decision(first.id).job_uid == kw.uid


def test_an_evicted_workloads_grant_is_released(kube: Any, jobs: list[str], layer: Hardware, controller: ControllerProcess) -> None:
    from lightkube.resources.core_v1 import Node
    from lightkube.types import PatchType

    layer.apply([EU])
    kube.patch(Node, EU_NODE, {"spec": {"unschedulable": True}})  # the pod stays Pending: no finish first
    try:
        controller.start()
        job = create_job(kube, jobs, f"evict-{RUN}", "nvidia.com/gpu")
        check = wait_for("the check is Ready", lambda: check_state(kube, job.metadata.uid, "Ready"))
        decision_id = check["podSetUpdates"][0]["annotations"][wl.DECISION_KEY]
        wait_for("the admitted Job's pod exists", lambda: pods_of(kube, job.metadata.name))
        doc = workload_of(kube, job.metadata.uid)
        assert doc is not None and layer.decision(decision_id).released_at is None
        # Deactivated by hand: Kueue evicts the Workload (and stops its Job).
        kube.patch(Kinds.Workload, doc["metadata"]["name"], {"spec": {"active": False}}, namespace=NS, patch_type=PatchType.MERGE)
        wait_for("the grant is released once the Workload is evicted", lambda: layer.decision(decision_id).released_at)
        wait_for("the controller says it was evicted", lambda: f"released {decision_id}: its Workload was evicted" in controller.text(), 30)
    finally:
        kube.patch(Node, EU_NODE, {"spec": {"unschedulable": False}})


def test_a_deleted_workloads_grant_is_released(kube: Any, jobs: list[str], layer: Hardware, controller: ControllerProcess) -> None:
    from lightkube.resources.batch_v1 import Job
    from lightkube.resources.core_v1 import Node
    from lightkube.types import CascadeType

    layer.apply([EU])
    # The node is cordoned: the admitted Job's pod stays Pending, so the Workload cannot finish
    # before it is deleted.
    kube.patch(Node, EU_NODE, {"spec": {"unschedulable": True}})
    try:
        controller.start()
        job = create_job(kube, jobs, f"gone-{RUN}", "nvidia.com/gpu")
        check = wait_for("the check is Ready", lambda: check_state(kube, job.metadata.uid, "Ready"))
        decision_id = check["podSetUpdates"][0]["annotations"][wl.DECISION_KEY]
        wait_for("the admitted Job's pod exists (unbound: the node is cordoned)", lambda: pods_of(kube, job.metadata.name))
        assert layer.decision(decision_id).released_at is None
        kube.delete(Job, job.metadata.name, namespace=NS, cascade=CascadeType.BACKGROUND)
        wait_for("the grant is released once the Workload is deleted", lambda: layer.decision(decision_id).released_at)
        wait_for("the controller says it was deleted", lambda: f"released {decision_id}: its Workload was deleted" in controller.text(), 30)
    finally:
        kube.patch(Node, EU_NODE, {"spec": {"unschedulable": False}})


def test_without_the_policy_the_check_goes_inactive_and_nothing_is_decided(kube: Any, jobs: list[str], layer: Hardware, controller: ControllerProcess) -> None:
    from tests.conftest import free_port

    layer.apply([EU])
    controller.once()
    assert active_condition(kube)["status"] == "True"
    port = free_port()  # nothing listens there: the policy cannot be asked
    done = subprocess.run(
        [str(EXA), "kueue", "admission-check", "--once", "--kubeconfig", str(KUBECONFIG)],
        env={**controller.env(), "EXA_OPA_URL": f"http://127.0.0.1:{port}", "EXA_OPA_TOKEN": "x" * 32},
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 5, done.stdout + done.stderr
    assert "the policy cannot be asked; nothing decided" in done.stdout
    condition = active_condition(kube)
    assert (condition["status"], condition["reason"]) == ("False", "PolicyUnavailable")
    controller.once()  # the policy answers again
    assert active_condition(kube)["status"] == "True"


def active_condition(kube: Any) -> dict[str, Any]:
    doc = kube.get(Kinds.AdmissionCheck, CHECK).to_dict()
    return next(c for c in doc["status"]["conditions"] if c["type"] == "Active")
