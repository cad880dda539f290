"""The MultiKueue dispatcher's pure part (``kueue.multikueue``): the cluster a placement nominates,
the apply body that nominates it as Kueue's admission manager, and the pool's ``cluster`` field.
The real stack is in tests/test_multikueue.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from examlops_policy.errors import SpecError
from examlops_policy.kueue import multikueue as mk
from examlops_policy.kueue import workloads as wl
from examlops_policy.model import Pool, pool_spec

POOL = Pool("b-us", "hpc", "nvidia", 2, "us-east-1", cluster="worker-b")
READY = wl.CheckUpdate("Ready", "placed on pool b-us (us-east-1) by decision d-1", ({"name": "main"},), "d-1")


def test_a_placement_nominates_the_cluster_of_its_pool() -> None:
    update, cluster = mk.dispatch(READY, POOL, ["worker-a", "worker-b"])
    assert cluster == "worker-b"
    assert (update.state, update.decision_id, update.pod_set_updates) == ("Ready", "d-1", ({"name": "main"},))
    assert update.message == "placed on pool b-us (us-east-1) by decision d-1; nominated cluster worker-b (MultiKueue)"


@pytest.mark.parametrize(
    ("pool", "words"),
    [
        (Pool("b-us", "hpc", "nvidia", 2, "us-east-1"), ", but pool b-us names no cluster (set it to the MultiKueueCluster running its nodes)"),
        (POOL, ", but pool b-us is on cluster worker-b, not one of this Workload's MultiKueueConfig's clusters (worker-a)"),
    ],
)
def test_a_pool_of_no_listed_cluster_is_rejected_and_nominates_nothing(pool: Pool, words: str) -> None:
    update, cluster = mk.dispatch(READY, pool, ["worker-a"])
    assert cluster is None and update.state == "Rejected" and update.decision_id == "d-1" and not update.pod_set_updates
    assert update.message.startswith(READY.message + words) and update.message.endswith(": nominated nowhere, decision d-1 released")


@pytest.mark.parametrize("state", ["Retry", "Rejected"])
def test_what_is_not_placed_is_nominated_nowhere(state: wl.CheckStateName) -> None:
    update, cluster = mk.dispatch(wl.CheckUpdate(state, "not now: no capacity", decision_id="d-2"), None, ["worker-a"])
    assert cluster is None and (update.state, update.message) == (state, "not now: no capacity; no cluster nominated")


def test_config_and_clusters_are_read_from_the_check_and_its_config() -> None:
    check = {"spec": {"controllerName": mk.CONTROLLER_NAME, "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": "c"}}}
    assert mk.config_name(check) == "c"
    assert mk.config_name({"spec": {"parameters": {"kind": "ProvisioningRequestConfig", "name": "c"}}}) is None
    assert mk.config_name({"spec": {}}) is None
    assert mk.clusters_of({"spec": {"clusters": ["a", "b", 3]}}) == ("a", "b")
    assert mk.clusters_of(None) == ()


def _fields(*paths: str) -> dict[str, Any]:
    return {p: {} for p in paths}


WORKLOAD: dict[str, Any] = {
    "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
    "metadata": {
        "name": "job-x", "namespace": "ns", "resourceVersion": "42",
        "managedFields": [
            {"manager": "kueue-admission", "operation": "Apply", "subresource": "status", "fieldsV1": {"f:status": {
                "f:admission": {}, "f:requeueState": {},
                "f:admissionChecks": {'k:{"name":"mk"}': {".": {}, "f:name": {}, "f:state": {}, "f:message": {}}},
                "f:conditions": {'k:{"type":"QuotaReserved"}': {".": {}, "f:type": {}, "f:status": {}, "f:reason": {}}},
            }}},
            {"manager": "examlops-placement", "operation": "Apply", "subresource": "status", "fieldsV1": {"f:status": {
                "f:admissionChecks": {'k:{"name":"placement"}': {".": {}, "f:name": {}, "f:state": {}}}}}},
            {"manager": "kueue-admission", "operation": "Update", "subresource": "status", "fieldsV1": {"f:status": {"f:other": {}}}},
        ],
    },
    "status": {
        "admission": {"clusterQueue": "cq", "podSetAssignments": [{"name": "main", "count": 1}]},
        "requeueState": {"count": 1},
        "admissionChecks": [{"name": "mk", "state": "Pending", "message": "", "lastTransitionTime": "t"},
                            {"name": "placement", "state": "Pending"}],
        "conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "m"},
                       {"type": "Finished", "status": "False"}],
        "other": "x",
    },
}  # fmt: skip


def test_the_nomination_keeps_all_kueues_admission_manager_owns_and_nothing_else() -> None:
    body = mk.nomination(WORKLOAD, ["worker-b"])
    assert body["metadata"] == {"name": "job-x", "namespace": "ns", "resourceVersion": "42"}
    assert body["status"] == {
        "admission": {"clusterQueue": "cq", "podSetAssignments": [{"name": "main", "count": 1}]},
        "requeueState": {"count": 1},
        "admissionChecks": [{"name": "mk", "state": "Pending", "message": ""}],  # not the placement check's: another manager's
        "conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"}],
        "nominatedClusterNames": ["worker-b"],
    }
    json.dumps(body)  # a JSON body as it is sent


def test_a_workload_kueue_never_applied_is_nominated_with_that_alone() -> None:
    doc = {**WORKLOAD, "metadata": {**WORKLOAD["metadata"], "managedFields": []}}
    assert mk.nomination(doc, ["a"])["status"] == {"nominatedClusterNames": ["a"]}


def test_owned_reads_sets_and_lists_by_key() -> None:
    assert mk.owned({"a": [1, 2], "b": 3}, {"f:a": {"v:2": {}, "v:9": {}}}) == {"a": [2, 9]}
    assert mk.owned({"a": {"x": 1, "y": 2}}, {"f:a": {".": {}, "f:y": {}}, "f:missing": {}}) == {"a": {"y": 2}}


def test_a_pools_cluster_is_a_dns_label_and_stored_only_when_set() -> None:
    assert pool_spec(POOL)["cluster"] == "worker-b"
    assert "cluster" not in pool_spec(Pool("p", "hpc", "nvidia", 1, "us-east-1"))  # a pool from before keeps its digest
    for bad in ("Worker-B", "-a", "a" * 64, "a_b", 3):
        with pytest.raises(SpecError, match="cluster"):
            Pool("p", "hpc", "nvidia", 1, "us-east-1", cluster=bad)  # type: ignore[arg-type]


def test_the_workload_reads_its_nomination_and_cluster() -> None:
    kw = wl.parse({"metadata": {"name": "w", "namespace": "n"}, "status": {"nominatedClusterNames": ["a", 1], "clusterName": "b"}})
    assert (kw.nominated, kw.cluster_name) == (("a",), "b")
    assert (wl.parse({"metadata": {"name": "w"}}).nominated, wl.parse({"metadata": {"name": "w"}}).cluster_name) == ((), None)


def test_a_grant_is_moved_when_its_workload_runs_or_is_nominated_elsewhere() -> None:
    def kw(nominated: tuple[str, ...] = (), cluster: str | None = None) -> wl.KueueWorkload:
        status: dict[str, Any] = {"nominatedClusterNames": list(nominated)}
        if cluster:
            status["clusterName"] = cluster
        return wl.parse({"metadata": {"name": "w", "namespace": "n"}, "status": status})

    assert mk.moved(kw(cluster="b"), "b") is None and mk.moved(kw(("a", "b")), "b") is None and mk.moved(kw(), "b") is None
    assert mk.moved(kw(cluster="a"), None) is None  # a pool of no cluster: not a MultiKueue grant
    assert mk.moved(kw(cluster="a"), "b") == "its Workload runs on cluster a, not on b, the granted pool's"
    assert mk.moved(kw(("a", "c")), "b") == "its Workload is nominated for a, c, not for b, the granted pool's"
