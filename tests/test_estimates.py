"""Start estimates: the contract (``StartEstimate``), the provisioning table, Kubernetes' queue,
and which source each pool gets (``gather.StartEstimator``): never a silent "now".

Kubernetes is exercised for real at the end (scripts/k8s-up): a pod the scheduler cannot place
waits in front of a full pool, and the estimate says so."""

from __future__ import annotations

import secrets
import time
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from examlops_policy.errors import ExaError, PolicyError, SpecError
from examlops_policy.estimates import StartEstimate, start_now, start_text, unknown
from examlops_policy.estimates.gather import EstimateRequest, StartEstimator
from examlops_policy.estimates.kubernetes import KubernetesEstimator, competes
from examlops_policy.estimates.slurm import SlurmEstimator
from examlops_policy.estimates.table import ProvisioningTable
from examlops_policy.executors.command import CommandResult
from examlops_policy.executors.kubernetes_api import KubernetesCluster, KubernetesError, PendingPod
from examlops_policy.model import Grant, Node, Placement, Pool, Workload
from examlops_policy.tables import load_tables, policy_dir
from tests.kubernetes_support import KUBECONFIG, cluster  # noqa: F401 - the fixture

NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=timezone.utc)
ONE = Grant(requested=1.0, honored=True, share=1.0, units=1, devices=1.0)
W = Workload("w", "nvidia")
REGIONS = {"regions": load_tables().regions}


# -- the contract ---------------------------------------------------------------------------------


def test_an_estimate_is_a_start_or_a_reason_never_both() -> None:
    with pytest.raises(ValueError, match="not both"):
        StartEstimate("p", None, "slurm", NOW, "x")
    with pytest.raises(ValueError, match="not both"):
        StartEstimate("p", NOW, "slurm", NOW, "x", reason="down")
    with pytest.raises(ValueError, match="aware"):
        StartEstimate("p", datetime(2026, 12, 1, 12), "now", NOW, "x")
    with pytest.raises(ValueError, match="unknown estimate source"):
        StartEstimate("p", NOW, "guess", NOW, "x")  # type: ignore[arg-type]


def test_an_estimate_says_how_long_until_and_how_old() -> None:
    e = StartEstimate("p", NOW + timedelta(hours=2, minutes=5), "slurm", NOW - timedelta(seconds=7), "slurm: ...")
    assert e.wait(NOW) == timedelta(hours=2, minutes=5)
    assert e.wait(NOW + timedelta(hours=3)) == timedelta(0)
    assert e.age(NOW) == timedelta(seconds=7)
    assert e.as_json() == {
        "pool": "p", "estimated_start": "2026-12-01T14:05:00Z", "estimate_source": "slurm", "observed_at": "2026-12-01T11:59:53Z",
        "detail": "slurm: ...", "reason": None, "facts": {},
    }  # fmt: skip
    assert e.policy_input() == {"at": 1796133900, "source": "slurm", "observed_at": 1796126393}


def test_no_estimate_is_not_now() -> None:
    e = unknown("p", "slurm", "Slurm's controller does not answer", NOW)
    assert not e.known and e.wait(NOW) is None
    assert e.as_json()["estimated_start"] is None and e.policy_input()["at"] is None
    assert e.detail == "slurm: no estimate: Slurm's controller does not answer"
    assert start_now("p", NOW).at == NOW


@pytest.mark.parametrize(
    ("estimate", "text"),
    [
        (StartEstimate("p", NOW + timedelta(hours=2, minutes=5), "slurm", NOW, "x"), "slurm: expected start 14:05 UTC (in 2 h 05 m)"),
        (StartEstimate("p", NOW + timedelta(days=1, hours=2), "slurm", NOW, "x"), "slurm: expected start 2026-12-02 14:00 UTC (in 1 d 02 h)"),
        (StartEstimate("p", NOW - timedelta(minutes=3), "slurm", NOW, "x"), "slurm: starts now"),
        (start_now("p", NOW), "now: starts now"),
        (StartEstimate("p", NOW + timedelta(minutes=10), "table", NOW, "x", facts={"delay_s": 600, "typical": False}),
         "table: expected start 12:10 UTC (in 10 m; provisioning at most 10 m)"),
        (unknown("p", "slurm", "Slurm's controller does not answer (DOWN)", NOW), "slurm: no estimate (Slurm's controller does not answer (DOWN))"),
        # Nobody to ask: "now: no estimate" read as a contradiction.
        (unknown("p", "now", "no room for the grant now, and no scheduler to ask when there will be", NOW),
         "no estimate (no room for the grant now, and no scheduler to ask when there will be)"),
        (ProvisioningTable.load().estimate(Pool("site", "cloud", "nvidia", 8, "de-juelich"), NOW),
         "table: no estimate (provider not in the provisioning table: region de-juelich names no cloud provider in regions.yaml)"),
        (ProvisioningTable.load().estimate(Pool("seeweb", "cloud", "nvidia", 8, "it-mi2"), NOW),
         "table: no estimate (provider not in the provisioning table: provisioning.yaml has no provisioning delay for seeweb nvidia)"),
    ],
)  # fmt: skip
def test_an_estimate_is_worded_for_people(estimate: StartEstimate, text: str) -> None:
    assert start_text(estimate, NOW) == text


# -- the provisioning table -----------------------------------------------------------------------


def test_every_row_of_the_table_says_what_its_figure_means_and_where_it_comes_from() -> None:
    table = ProvisioningTable.load()
    assert set(table.rows) == {"aws", "gcp", "azure", "nebius"}
    text = (policy_dir() / "examlops" / "tables" / "provisioning.yaml").read_text()
    for by_accelerator in table.rows.values():
        for delay in by_accelerator.values():
            assert delay.means and delay.source in {"dstack", "gcp-boot"}
            assert f"{delay.source} " in text  # the source is described in the table's header
    # Every provider named in the table is a provider of the regions table.
    providers = {r.get("provider") for r in load_tables().regions.values() if isinstance(r, dict)}
    assert set(table.rows) <= providers


@pytest.mark.parametrize(
    ("pool", "delay_s", "typical"),
    [
        (Pool("aws-h100", "cloud", "nvidia", 8, "us-east-1", model="h100"), 600, False),
        (Pool("gcp-cpu", "cloud", "cpu", 64, "europe-west4"), 25, True),
        (Pool("gcp-tpu", "cloud", "tpu", 8, "europe-west4"), 600, False),
        (Pool("azure-mi300x", "cloud", "amd", 8, "westeurope"), 600, False),
    ],
)
def test_a_cloud_pool_starts_after_its_provider_s_delay(pool: Pool, delay_s: int, typical: bool) -> None:
    e = ProvisioningTable.load().estimate(pool, NOW)
    assert (e.source, e.at, e.observed_at) == ("table", NOW + timedelta(seconds=delay_s), NOW)
    assert e.facts["typical"] is typical and e.facts["delay_s"] == delay_s
    assert ("typical" if typical else "at most") in e.detail and "source:" in e.detail


@pytest.mark.parametrize(
    ("pool", "reason"),
    [
        (Pool("seeweb", "cloud", "nvidia", 8, "it-mi2"), "provisioning.yaml has no provisioning delay for seeweb nvidia"),
        (Pool("site", "cloud", "nvidia", 8, "de-juelich"), "region de-juelich names no cloud provider"),
    ],
)
def test_a_provider_without_a_row_has_no_estimate(pool: Pool, reason: str) -> None:
    e = ProvisioningTable.load().estimate(pool, NOW)
    assert not e.known and reason in str(e.reason)


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        ({"aws": {"*": {"bound_s": 600}}}, "bound_s needs bound_means and bound_source"),
        ({"aws": {"*": {}}}, "expected typical_s or bound_s"),
        ({"aws": {"*": {"bound_s": "10m", "bound_means": "m", "bound_source": "s"}}}, "expected whole seconds"),
        ({"aws": {"*": {"typical_s": 900, "typical_means": "m", "typical_source": "s", "bound_s": 600, "bound_means": "m",
                        "bound_source": "s"}}}, "typical_s (900) is above bound_s (600)"),
        ({"aws": ["*"]}, "expected accelerators"),
    ],
)  # fmt: skip
def test_a_malformed_table_is_refused(rows: dict[str, object], expected: str) -> None:
    with pytest.raises(PolicyError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        ProvisioningTable.from_data({"provisioning": rows}, REGIONS)  # type: ignore[dict-item]


# -- Kubernetes' queue ------------------------------------------------------------------------------


def pending(name: str, requests: dict[str, str], selector: dict[str, str] | None = None, created: str = "2026-12-01T11:50:00+00:00") -> PendingPod:
    return PendingPod("default", name, {k: Decimal(v) for k, v in requests.items()}, selector or {}, created, "0/3 nodes are available", False)


K8S_POOL = Pool("k8s-us-east-1-h100", "cloud", "nvidia", 8, "us-east-1", model="h100", nodes=(Node("gpu-a", 8),))


@pytest.mark.parametrize(
    ("pod", "waits"),
    [
        (pending("a", {"nvidia.com/gpu": "1"}), True),
        (pending("b", {"nvidia.com/mig-1g.10gb": "1"}), True),
        (pending("c", {"amd.com/gpu": "1"}), False),
        (pending("d", {"cpu": "2"}), False),
        (pending("e", {"nvidia.com/gpu": "1"}, {"topology.kubernetes.io/region": "eu-central-1"}), False),
        (pending("f", {"nvidia.com/gpu": "1"}, {"topology.kubernetes.io/region": "us-east-1"}), True),
        (pending("g", {"nvidia.com/gpu": "1"}, {"kubernetes.io/hostname": "gpu-b"}), False),
        (pending("h", {"nvidia.com/gpu": "1"}, {"kubernetes.io/hostname": "gpu-a"}), True),
        (pending("i", {"nvidia.com/gpu": "1"}, {"nvidia.com/gpu.product": "Tesla-T4"}), False),
        (pending("j", {"nvidia.com/gpu": "1"}, {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}), True),
    ],
)
def test_a_pending_pod_waits_for_a_pool_when_it_asks_for_its_devices_where_it_is(pod: PendingPod, waits: bool) -> None:
    assert competes(pod, K8S_POOL) is waits


def test_a_cpu_pool_is_waited_for_by_pods_that_ask_for_cpu_alone() -> None:
    cpus = Pool("k8s-cpu", "cloud", "cpu", 64, "us-east-1")
    assert competes(pending("a", {"cpu": "2", "memory": "1073741824"}), cpus)
    assert not competes(pending("b", {"cpu": "2", "nvidia.com/gpu": "1"}), cpus)


class Queue:
    def __init__(self, pods: Sequence[PendingPod] | ExaError) -> None:
        self.pods = pods
        self.calls = 0

    def pending_pods(self) -> Sequence[PendingPod]:
        self.calls += 1
        if isinstance(self.pods, ExaError):
            raise self.pods
        return self.pods


def test_kubernetes_room_now_is_a_start_now_and_no_room_is_no_estimate_with_the_queue() -> None:
    queue = Queue([pending("a", {"nvidia.com/gpu": "4"}), pending("b", {"nvidia.com/gpu": "1"}, created="2026-12-01T11:55:00+00:00")])
    est = KubernetesEstimator(queue, clock=lambda: NOW)
    fits, full = est.estimate_many([(K8S_POOL, True), (K8S_POOL, False)])
    assert fits.at == NOW and fits.source == "kubernetes"
    assert "2 pod(s) wait for nvidia.com/gpu in us-east-1" in fits.detail
    assert not full.known and full.source == "kubernetes"
    assert str(full.reason) == (
        "the pool has no room for the grant now and Kubernetes does not estimate when it will; "
        "2 pod(s) wait for nvidia.com/gpu in us-east-1 (the oldest since 2026-12-01T11:50:00+00:00)"
    )
    assert full.facts["pending_pods"] == 2
    assert queue.calls == 1  # one read for the batch


def test_kubernetes_not_answering_is_no_estimate() -> None:
    est = KubernetesEstimator(Queue(KubernetesError("cannot reach https://127.0.0.1:1", reason="Unreachable")), clock=lambda: NOW)
    e = est.estimate(K8S_POOL, True)
    assert not e.known and "the API server did not answer (cannot reach" in str(e.reason)


# -- which source each pool gets ---------------------------------------------------------------------

SLURM_POOL = Pool("gpu-h100", "hpc", "nvidia", 4, "de-juelich", partition="gpu", gres_type="h100")
LOCAL_POOL = Pool("local", "hpc", "nvidia", 4, "de-juelich")
AWS_POOL = Pool("aws-h100", "cloud", "nvidia", 8, "us-east-1", model="h100")


class Slurm:
    def __init__(self, answer: CommandResult) -> None:
        self.answer = answer
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, argv: Sequence[str], timeout: float) -> CommandResult:
        self.calls.append(tuple(argv))
        if argv[0] == "scontrol":
            return CommandResult(tuple(argv), 0, "Slurmctld(primary) at vm is UP\n", "")
        return self.answer


def test_each_pool_is_asked_of_its_own_source() -> None:
    slurm = Slurm(CommandResult(("sbatch",), 0, "", "sbatch: Job 9 to start at 2026-12-01T14:05:00 using 1 processors on nodes vm in partition gpu\n"))
    estimator = StartEstimator(slurm=SlurmEstimator(slurm, clock=lambda: NOW), kubernetes=KubernetesEstimator(Queue([]), clock=lambda: NOW),
                               clock=lambda: NOW)  # fmt: skip
    requests = [
        EstimateRequest(SLURM_POOL, Workload("w", "nvidia", walltime="30m"), ONE, fits_now=True),
        EstimateRequest(K8S_POOL, W, ONE, fits_now=True),
        EstimateRequest(AWS_POOL, W, ONE, fits_now=True),
        EstimateRequest(LOCAL_POOL, W, ONE, fits_now=True),
        EstimateRequest(LOCAL_POOL, W, ONE, fits_now=False),
        EstimateRequest(AWS_POOL, W, ONE, fits_now=False),
    ]
    got = estimator.estimate(requests)
    assert [e.source for e in got] == ["slurm", "kubernetes", "table", "now", "now", "table"]
    assert [e.known for e in got] == [True, True, True, True, False, False]
    assert got[0].at == datetime(2026, 12, 1, 14, 5, tzinfo=timezone.utc)
    assert ("sbatch", "--test-only", "--partition=gpu", "--job-name=w", "--time=30", "--gres=gpu:h100:1", "--wrap=true") in slurm.calls
    assert got[2].at == NOW + timedelta(minutes=10)
    assert "no scheduler to ask" in str(got[4].reason)
    assert "nothing to provision" in str(got[5].reason)


def test_a_slurm_pool_is_never_now_without_slurm() -> None:
    e = StartEstimator(clock=lambda: NOW).estimate([EstimateRequest(SLURM_POOL, W, ONE, fits_now=True)])[0]
    assert not e.known and e.source == "slurm" and "no Slurm to ask" in str(e.reason)


def test_a_grant_slurm_cannot_be_asked_for_is_no_estimate() -> None:
    half = Grant(requested=0.5, honored=False, share=1.0, units=1, devices=0.5)
    e = StartEstimator(slurm=SlurmEstimator(Slurm(CommandResult(("sbatch",), 0, "", ""))), clock=lambda: NOW).estimate(
        [EstimateRequest(SLURM_POOL, W, half, fits_now=True)]
    )[0]
    assert not e.known and "Slurm cannot be asked for this grant" in str(e.reason) and "whole numbers" in str(e.reason)


def test_own_capacity_stands_in_only_when_asked_for_and_only_where_a_scheduler_gave_no_estimate() -> None:
    """Off by default: a Slurm pool Slurm cannot be asked about has no estimate. With own_capacity,
    the layer's own account says now where the grant fits (source now, the scheduler's reason
    kept), and still nothing where it does not fit; Slurm's own answers, the table and the free
    capacity of pools without a scheduler are as before."""
    slurm = Slurm(CommandResult(("sbatch",), 0, "", "sbatch: Job 9 to start at 2026-12-01T14:05:00 using 1 processors on nodes vm in partition gpu\n"))
    requests = [
        EstimateRequest(SLURM_POOL, W, ONE, fits_now=True),
        EstimateRequest(SLURM_POOL, W, ONE, fits_now=False),
        EstimateRequest(AWS_POOL, W, ONE, fits_now=True),
        EstimateRequest(LOCAL_POOL, W, ONE, fits_now=False),
    ]
    off = StartEstimator(clock=lambda: NOW).estimate(requests)
    assert [e.known for e in off] == [False, False, True, False]
    on = StartEstimator(clock=lambda: NOW, own_capacity=True).estimate(requests)
    assert [(e.source, e.at) for e in on] == [("now", NOW), ("slurm", None), ("table", NOW + timedelta(minutes=10)), ("now", None)]
    assert on[0].facts == {"instead_of": "slurm", "unanswered": "no Slurm to ask (no Slurm estimator was given)"}
    assert start_text(on[0], NOW) == "now: starts now by this layer's own account (slurm gave no estimate: no Slurm to ask (no Slurm estimator was given))"
    answered = StartEstimator(slurm=SlurmEstimator(slurm, clock=lambda: NOW), clock=lambda: NOW, own_capacity=True).estimate(requests[:1])[0]
    assert (answered.source, answered.at) == ("slurm", datetime(2026, 12, 1, 14, 5, tzinfo=timezone.utc))  # Slurm's word stands


def test_a_hardware_estimates_from_its_own_capacity_only_when_told_to(tmp_path: Path) -> None:
    from examlops_policy.errors import StateError
    from examlops_policy.hardware import Hardware

    hw = Hardware(tmp_path)
    try:
        before = hw.estimator()
        assert before.own_capacity is False
        hw.estimate_from_own_capacity()
        after = hw.estimator()
        assert after is not before and after.own_capacity is True
        hw.estimate_from_own_capacity(False)
        assert hw.estimator().own_capacity is False
    finally:
        hw.close()
    own = Hardware(tmp_path, estimator=StartEstimator())
    try:
        with pytest.raises(StateError, match="its own start estimator"):
            own.estimate_from_own_capacity()
    finally:
        own.close()


def test_a_cloud_pool_on_a_cluster_without_a_kubernetes_estimator_is_read_from_the_table() -> None:
    e = StartEstimator(clock=lambda: NOW).estimate([EstimateRequest(K8S_POOL, W, ONE, fits_now=True)])[0]
    assert e.source == "table" and e.at == NOW + timedelta(minutes=10)


# -- on a real Kubernetes control plane ----------------------------------------------------------------


@pytest.mark.kubernetes
def test_a_pod_the_scheduler_cannot_place_waits_in_front_of_a_full_pool(cluster: KubernetesCluster) -> None:
    from lightkube import Client, KubeConfig, codecs
    from lightkube.resources.core_v1 import Node as KNode
    from lightkube.resources.core_v1 import Pod

    run = secrets.token_hex(3)
    node, pod = f"exa-{run}-h100", f"exa-{run}-waits"
    region = "us-east-1"
    admin: Any = Client(KubeConfig.from_file(KUBECONFIG), lazy=False)
    capacity = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "2"}
    try:
        admin.create(codecs.from_dict({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": node, "annotations": {"kwok.x-k8s.io/node": "fake"},
                         "labels": {"type": "kwok", "kubernetes.io/hostname": node, "topology.kubernetes.io/region": region,
                                    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
            "status": {"capacity": capacity, "allocatable": capacity},
        }))  # fmt: skip
        # Four GPUs where the region's only node has two: the scheduler cannot place it.
        admin.create(codecs.from_dict({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod, "namespace": "default"},
            "spec": {"nodeSelector": {"topology.kubernetes.io/region": region},
                     "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}],
                     "containers": [{"name": "c", "image": "registry.example/train:1.0",
                                     "resources": {"limits": {"nvidia.com/gpu": "4"}, "requests": {"nvidia.com/gpu": "4"}}}]},
        }))  # fmt: skip
        deadline = time.monotonic() + 60
        waiting: list[PendingPod] = []
        while time.monotonic() < deadline:
            waiting = [p for p in cluster.pending_pods() if p.name == pod]
            if waiting and waiting[0].unschedulable:
                break
            time.sleep(0.5)
        assert waiting and waiting[0].unschedulable and "nvidia.com/gpu" in waiting[0].unschedulable, waiting
        assert waiting[0].requests == {"nvidia.com/gpu": Decimal(4)}
        assert waiting[0].node_selector == {"topology.kubernetes.io/region": region}

        pool = Pool(f"k8s-{region}-h100", "cloud", "nvidia", 2, region, model="h100", nodes=(Node(node, 2),))
        elsewhere = Pool("k8s-eu-central-1-h100", "cloud", "nvidia", 2, "eu-central-1", model="h100", nodes=(Node("other", 2),))
        estimates = StartEstimator(kubernetes=KubernetesEstimator(cluster)).estimate([
            EstimateRequest(pool, W, ONE, fits_now=False),
            EstimateRequest(pool, W, ONE, fits_now=True),
            EstimateRequest(elsewhere, W, ONE, fits_now=False),
        ])  # fmt: skip
        full, free, other = estimates
        assert not full.known and full.source == "kubernetes"
        assert "1 pod(s) wait for nvidia.com/gpu in us-east-1" in str(full.reason)
        assert free.known and free.source == "kubernetes" and abs((free.at - datetime.now(timezone.utc)).total_seconds()) < 30  # type: ignore[operator]
        assert not other.known and "no pod waits for nvidia.com/gpu in eu-central-1" in str(other.reason)
    finally:
        for kind, name, namespace in ((Pod, pod, "default"), (KNode, node, None)):
            try:
                admin.delete(kind, name, namespace=namespace) if namespace else admin.delete(kind, name)
            except Exception:  # noqa: BLE001 - cleanup of what may not have been created
                pass
        admin.close()


def test_a_start_within_a_second_of_the_decision_is_now_for_people() -> None:
    """Slurm answers in whole seconds, a free partition the second after it is asked: within the
    wait policy's slack a start reads as now; two seconds on, it says so."""
    from datetime import timedelta

    now = datetime(2026, 12, 1, 12, 0, 0, 400000, tzinfo=timezone.utc)
    soon = StartEstimate("p", now + timedelta(seconds=1), "slurm", now, "slurm: soon")
    later = StartEstimate("p", now + timedelta(seconds=2), "slurm", now, "slurm: soon")
    assert start_text(soon, now) == "slurm: starts now"
    assert start_text(later, now) == "slurm: expected start 12:00 UTC (in 2 s)"


@pytest.mark.kubernetes
def test_a_decision_asks_the_cluster_for_its_pools_and_records_the_answer(cluster: KubernetesCluster, tmp_path: Path, opa_home: Path) -> None:
    """Through the façade, given the cluster: its pool (nodes named) starts now by the cluster's
    account, a cloud pool elsewhere only after provisioning (the table), so the earliest start is
    the cluster's, dearer as it is; the decision records the source."""
    from examlops_policy.hardware import Hardware, ManagedPolicy
    from examlops_policy.store.sqlite import SQLiteStore

    run = secrets.token_hex(3)
    pools = [
        Pool(f"k8s-{run}", "cloud", "nvidia", 2, "us-east-1", model="h100", cost_per_hour=6.0, nodes=(Node(f"exa-{run}-absent", 2),)),
        Pool("aws-h100", "cloud", "nvidia", 8, "eu-central-1", model="h100", cost_per_hour=4.0),
    ]
    estimator = StartEstimator(kubernetes=KubernetesEstimator(cluster))
    hw = Hardware(tmp_path, store=SQLiteStore(tmp_path / "state.db"), policy=ManagedPolicy(opa_home), estimator=estimator)
    try:
        hw.apply(pools)
        record = hw.place(Workload("train", "nvidia", target="cloud", optimize="earliest"))
        decision = record.decision
        assert isinstance(decision, Placement) and decision.pool == f"k8s-{run}"
        assert decision.estimate is not None and decision.estimate.source == "kubernetes" and decision.estimate.known
        table = next(v.estimate for v in decision.verdicts if v.pool == "aws-h100")
        assert table is not None and table.source == "table" and table.facts["delay_s"] == 600
        assert hw.decision(record.id).decision.estimate.source == "kubernetes"  # type: ignore[union-attr]
        cheapest = hw.what_if(Workload("train", "nvidia", target="cloud"))
        assert getattr(cheapest, "pool", None) == "aws-h100"
    finally:
        hw.close()


def test_a_hardware_asked_to_ask_kubernetes_routes_the_clusters_pools_to_it_and_keeps_slurm_and_the_table(tmp_path: Path) -> None:
    from examlops_policy.errors import StateError
    from examlops_policy.hardware import Hardware

    hw = Hardware(tmp_path)
    try:
        before = hw.estimator()
        assert (before.kubernetes, before.source_of(K8S_POOL)) == (None, "table")
        queue = Queue([])
        hw.ask_kubernetes(queue)
        after = hw.estimator()
        assert after is not before and after.source_of(K8S_POOL) == "kubernetes"
        assert after.source_of(Pool("slurm-gpu", "hpc", "nvidia", 4, "eu", partition="gpu")) == "slurm"
        assert after.source_of(Pool("cloud-gpu", "cloud", "nvidia", 4, "us-east-1")) == "table"  # lists no nodes
        assert after.kubernetes is not None and after.kubernetes.estimate(K8S_POOL, True).source == "kubernetes" and queue.calls == 1
        with pytest.raises(SpecError, match="none"):
            hw.ask_kubernetes(kubeconfig=str(tmp_path / "none"))  # a kubeconfig that cannot be read: bad input
        assert hw.estimator() is after  # and nothing changed
    finally:
        hw.close()
    own = Hardware(tmp_path, estimator=StartEstimator())
    try:
        with pytest.raises(StateError, match="its own start estimator"):
            own.ask_kubernetes(Queue([]))
    finally:
        own.close()
