"""The admission check's mapping, without a cluster: a Kueue Workload (its API JSON) read into the
layer's workload, its idempotency key, and recorded decisions worded as the check's state
(the decisions themselves come from the real policy: ``hardware`` fixture)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from examlops_policy.errors import SpecError
from examlops_policy.hardware import Hardware
from examlops_policy.kueue import workloads as wl
from examlops_policy.model import Node, Pool, Workload


def workload_json(
    *, resources: dict[str, Any] | None = None, count: int = 1, labels: dict[str, str] | None = None, queue: str = "team-a",
    priority: str | None = None, conditions: list[dict[str, Any]] | None = None, checks: list[dict[str, Any]] | None = None,
    pod_sets: list[dict[str, Any]] | None = None, seconds: int | None = None,
) -> dict[str, Any]:  # fmt: skip
    resources = resources if resources is not None else {"limits": {"nvidia.com/gpu": "2"}, "requests": {"cpu": "4", "memory": "16Gi"}}
    spec: dict[str, Any] = {
        "queueName": queue,
        "podSets": pod_sets if pod_sets is not None else [{
            "name": "main", "count": count,
            "template": {"spec": {"containers": [{"name": "c", "image": "x", "resources": resources}]}},
        }],
    }  # fmt: skip
    if priority:
        spec["priorityClassRef"] = {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": priority}
    if seconds:
        spec["maximumExecutionTimeSeconds"] = seconds
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
        "metadata": {"name": "job-train-1a2b3", "namespace": "ml", "uid": "0f0e-uid", "labels": labels or {}},
        "spec": spec,
        "status": {"conditions": conditions or [], "admissionChecks": checks or []},
    }  # fmt: skip


RESERVED = [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "lastTransitionTime": "2026-12-05T08:00:00Z"}]


def test_a_job_pod_set_becomes_the_layers_workload() -> None:
    kw = wl.parse(workload_json(labels={wl.PROJECT_LABEL: "ml-research", wl.RESIDENCY_LABEL: "eu-only", wl.DATA_REGION_LABEL: "eu-central-1"},
                                count=2, priority="high", seconds=3600))  # fmt: skip
    w = wl.build(kw, projects=("ml-research",))
    assert (w.name, w.accelerator, w.count, w.nodes, w.cpu, w.memory) == ("job-train-1a2b3", "nvidia", 2, 2, 4, 16384)
    assert (w.project, w.priority, w.residency, w.data_region, w.walltime) == ("ml-research", "high", "eu-only", "eu-central-1", 3600)
    assert w.target is None  # any: the policy's default
    assert wl.build(wl.parse(workload_json(labels={wl.TARGET_LABEL: "cloud"})), projects=()).target == "cloud"
    with pytest.raises(SpecError, match="target"):
        wl.build(wl.parse(workload_json(labels={wl.TARGET_LABEL: "moon"})), projects=())


def test_requests_default_to_limits_and_containers_add_up() -> None:
    two = {"name": "main", "count": 1, "template": {"spec": {"containers": [
        {"name": "a", "resources": {"limits": {"amd.com/gpu": "1", "cpu": "500m", "memory": "1Gi"}}},
        {"name": "b", "resources": {"requests": {"amd.com/gpu": "1", "cpu": "1500m", "memory": "512Mi"}}},
    ]}}}  # fmt: skip
    w = wl.build(wl.parse(workload_json(pod_sets=[two])), projects=())
    assert (w.accelerator, w.count, w.cpu, w.memory) == ("amd", 2, 2, 1536)


def test_the_local_queue_names_the_project_only_when_budgets_know_it() -> None:
    kw = wl.parse(workload_json(queue="ml-research"))
    assert wl.build(kw, projects=("ml-research",)).project == "ml-research"
    assert wl.build(kw, projects=("other",)).project is None
    labelled = wl.parse(workload_json(queue="ml-research", labels={wl.PROJECT_LABEL: "other"}))
    assert wl.build(labelled, projects=("ml-research", "other")).project == "other"


@pytest.mark.parametrize(
    ("resources", "pod_sets", "labels", "words"),
    [
        ({"limits": {"cpu": "2"}}, None, {}, "asks for no accelerator"),
        ({"limits": {"nvidia.com/gpu": "1", "amd.com/gpu": "1"}}, None, {}, "several accelerators: amd.com/gpu, nvidia.com/gpu"),
        ({"limits": {"nvidia.com/gpu": "1", "example.com/fpga": "1"}}, None, {}, "asks for example.com/fpga"),
        ({"limits": {"nvidia.com/gpu": "1"}}, None, {wl.ACCELERATOR_LABEL: "amd"}, "does not match the resource nvidia.com/gpu"),
        ({"limits": {"nvidia.com/gpu": "1", "memory": "lots"}}, None, {}, "resources.memory"),
        (None, [], {}, "0 pod sets"),
        (None, [{"name": "a", "count": 1}, {"name": "b", "count": 1}], {}, "2 pod sets"),
        (None, [{"name": "main", "count": 0}], {}, "count must be a whole number >= 1"),
    ],
)
def test_what_the_check_cannot_place_is_bad_input_in_words(resources: Any, pod_sets: Any, labels: dict[str, str], words: str) -> None:
    kw = wl.parse(workload_json(resources=resources, pod_sets=pod_sets, labels=labels))
    with pytest.raises(SpecError, match=words.replace("(", r"\(").replace(")", r"\)")) as caught:
        wl.build(kw, projects=())
    update = wl.refused(caught.value)
    assert update.state == "Rejected" and words in update.message and not update.pod_set_updates


def test_the_key_is_one_per_reservation_and_retry() -> None:
    pending = wl.parse(workload_json(checks=[{"name": "exa", "state": "Pending"}]))
    assert wl.request_id(pending, "exa") is None  # no quota reserved: nothing to decide
    reserved = wl.parse(workload_json(conditions=RESERVED, checks=[{"name": "exa", "state": "Pending"}]))
    key = wl.request_id(reserved, "exa")
    assert key == "kueue:0f0e-uid:2026-12-05T08:00:00Z:0" and wl.uid_of(key) == "0f0e-uid"
    retried = wl.parse(workload_json(conditions=RESERVED, checks=[{"name": "exa", "state": "Pending", "retryCount": 1}]))
    assert wl.request_id(retried, "exa") != key
    later = [{**RESERVED[0], "lastTransitionTime": "2026-12-05T08:01:00Z"}]
    assert wl.request_id(wl.parse(workload_json(conditions=later, checks=[{"name": "exa", "state": "Pending"}])), "exa") != key
    assert wl.uid_of("another-caller-key") is None


def test_finished_evicted_and_deleting_workloads_are_over() -> None:
    assert not wl.parse(workload_json(conditions=RESERVED)).over
    for kind in ("Finished", "Evicted"):
        assert wl.parse(workload_json(conditions=[*RESERVED, {"type": kind, "status": "True"}])).over
    deleting = workload_json()
    deleting["metadata"]["deletionTimestamp"] = "2026-12-05T08:00:00Z"
    assert wl.parse(deleting).over


# -- the check's state from real decisions ------------------------------------------------------

EU = Pool("kq-eu", "hpc", "nvidia", 2, "eu-central-1", cost_per_hour=2.0, nodes=(Node("gpu-eu-1", 2, cpu=32, memory="256Gi"),))
US_AMD = Pool("kq-us-amd", "hpc", "amd", 1, "us-east-1", cost_per_hour=1.0, nodes=(Node("amd-us-1", 1, cpu=32, memory="256Gi"),))


def test_a_placement_is_ready_with_pod_set_updates_that_pin_the_granted_node(hardware: Hardware) -> None:
    hardware.apply([EU, US_AMD])
    kw = wl.parse(workload_json(conditions=RESERVED))
    record = hardware.place(wl.build(kw, projects=()), request_id=wl.request_id(kw, "exa"))
    update = wl.update_for(record, hardware.pool_by_name("kq-eu"), kw)
    assert update.state == "Ready" and update.decision_id == record.id
    assert f"placed on pool kq-eu on gpu-eu-1 (eu-central-1) by decision {record.id}" in update.message
    (ps,) = update.pod_set_updates
    assert ps["name"] == "main"
    assert ps["nodeSelector"] == {"topology.kubernetes.io/region": "eu-central-1", "kubernetes.io/hostname": "gpu-eu-1"}
    assert ps["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    annotations = ps["annotations"]
    assert isinstance(annotations, dict) and annotations[wl.DECISION_KEY] == record.id and annotations["examlops.io/nodes"] == "gpu-eu-1"


def test_a_full_fleet_is_retry_with_the_policys_reason(hardware: Hardware) -> None:
    hardware.apply([EU])
    hardware.place(Workload("holder", "nvidia", count=2))
    kw = wl.parse(workload_json(conditions=RESERVED))
    record = hardware.place(wl.build(kw, projects=()), request_id=wl.request_id(kw, "exa"))
    update = wl.update_for(record, None, kw)
    assert update.state == "Retry" and update.message.startswith("not now: ")
    assert record.decision.reason in update.message and not update.pod_set_updates  # type: ignore[union-attr]


def test_a_residency_denial_is_rejected_with_the_policys_words(hardware: Hardware) -> None:
    hardware.apply([US_AMD])
    kw = wl.parse(workload_json(conditions=RESERVED, resources={"limits": {"amd.com/gpu": "1"}}, labels={wl.RESIDENCY_LABEL: "eu-only"}))
    record = hardware.place(wl.build(kw, projects=()), request_id=wl.request_id(kw, "exa"))
    update = wl.update_for(record, None, kw)
    assert update.state == "Rejected"
    reason = record.decision.reason  # type: ignore[union-attr]
    assert reason and update.message.startswith(reason)
    # The policy's own words for the pool it forbids, not only the summary.
    (verdict,) = record.decision.verdicts
    assert "residency_forbids" in {r.code for r in verdict.reasons}
    assert all(f"kq-us-amd: {r.message}" in update.message for r in verdict.reasons)


# -- the command's bad input ----------------------------------------------------------------------


def test_the_command_refuses_a_bad_interval_and_a_missing_kubeconfig(exa_home: Path, tmp_path: Path) -> None:
    from tests.conftest import run_exa

    fast = run_exa(exa_home, "kueue", "admission-check", "--interval", "0.5", "--kubeconfig", str(tmp_path / "none"))
    assert fast.returncode == 2 and "--interval" in fast.stderr and "at least 1 second" in fast.stderr, fast.stderr
    missing = run_exa(exa_home, "kueue", "admission-check", "--once", "--kubeconfig", str(tmp_path / "none"))
    assert missing.returncode == 2 and f"{tmp_path / 'none'} does not exist" in missing.stderr, missing.stderr
