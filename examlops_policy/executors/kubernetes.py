"""A Kubernetes ``batch/v1`` Job for a placed decision (cloud bursts).

The container asks the vendor's device plugin for whole devices (``nvidia.com/gpu``,
``amd.com/gpu``, ``habana.ai/gaudi``, ``google.com/tpu``) or, for an honored fraction, for the named
partition resource (``nvidia.com/mig-<profile>``, ``amd.com/<compute>_<memory>``). Extended
resources are whole numbers: a fraction is never written as ``0.5`` of a device. The pod is pinned
to nodes labelled with the pool's region (``topology.kubernetes.io/region``, Kubernetes "Well-Known
Labels"): the region is what data residency was decided on, so a cluster spanning regions must not
run the Job elsewhere. Where the pool names a model, the pod is also pinned to nodes whose vendor
product label shows that model. Labels carry the decision id and the policy revision the decision
was made under.

A placement that names its nodes (``Placement.allocations``) is carried out node by node: the
container also requests the granted CPU and memory (memory limited to what was granted), and the
pod is pinned to the granted node by required node affinity on the node's name (``matchFields``
``metadata.name``: the node's own name, whatever its labels say). A gang of N nodes is an Indexed
Job with N completions and N in parallel, whose pods may only go to the granted nodes and, by
required pod anti-affinity on ``kubernetes.io/hostname``, one to a node. On a shared pool
(time-slicing, MPS) a share is that many replicas of the device plugin's resource: the plugin
chooses the physical device, so the layer pins the node, never the device.

Sources: NVIDIA k8s-device-plugin and gpu-feature-discovery docs (resource names, MIG "mixed"
strategy, ``nvidia.com/gpu.product`` = the NVML product name with spaces as '-'); ROCm
k8s-device-plugin docs (``amd.com/gpu``, partition resources such as ``amd.com/cpx_nps4``,
``amd.com/gpu.product-name`` from the node labeller); Intel Gaudi device plugin
(``habana.ai/gaudi``, no product label); GKE TPU docs (``google.com/tpu``,
``cloud.google.com/gke-tpu-accelerator``, ``cloud.google.com/gke-tpu-topology``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final, cast

from examlops_policy import quantities
from examlops_policy.executors.placed import live_placement
from examlops_policy.errors import SpecError
from examlops_policy.model import JSONObject, JSONValue, NodeAllocation, Placement, Pool
from examlops_policy.views import DecisionRecord


LABEL_PREFIX: Final = "examlops.io"
HOSTNAME_LABEL: Final = "kubernetes.io/hostname"
SHARED_SUFFIX: Final = "-SHARED"
RESOURCES: Final = {"nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu", "intel-gaudi": "habana.ai/gaudi", "tpu": "google.com/tpu"}
PRODUCT_LABELS: Final = {
    "nvidia": "nvidia.com/gpu.product",
    "amd": "amd.com/gpu.product-name",
    "tpu": "cloud.google.com/gke-tpu-accelerator",
}
# Product label values per model (models.yaml keys). Several values where SKUs differ (SXM/PCIe,
# driver versions); a model missing here gets no node selector and the manifest says so.
PRODUCTS: Final[dict[str, tuple[str, ...]]] = {
    "a100": ("NVIDIA-A100-SXM4-80GB", "NVIDIA-A100-80GB-PCIe"),
    "a100-40gb": ("NVIDIA-A100-SXM4-40GB", "NVIDIA-A100-PCIE-40GB", "A100-SXM4-40GB"),
    "h100": ("NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-SXM5-80GB", "NVIDIA-H100-PCIe"),
    "h200": ("NVIDIA-H200", "NVIDIA-H200-NVL"),
    "gh200": ("NVIDIA-GH200-480GB", "NVIDIA-GH200-144G-HBM3e"),
    "b200": ("NVIDIA-B200",),
    "l4": ("NVIDIA-L4",),
    "t4": ("Tesla-T4",),
    "v100": ("Tesla-V100-SXM2-32GB", "Tesla-V100-PCIE-32GB"),
    "mi250x": ("AMD_Instinct_MI250X",),
    "mi300x": ("AMD_Instinct_MI300X_OAM", "AMD_Instinct_MI300X"),
    "mi325x": ("AMD_Instinct_MI325_OAM", "AMD_Instinct_MI325X"),
    "tpu-v5e": ("tpu-v5-lite-podslice",),
    "tpu-v5p": ("tpu-v5p-slice",),
    "tpu-v6e": ("tpu-v6e-slice",),
}
AMD_MEMORY_PARTITIONS: Final = ("nps1", "nps2", "nps4")
REGION_LABEL: Final = "topology.kubernetes.io/region"

DNS_LABEL_RE: Final = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
# A node's name: a DNS subdomain (lower case letters, digits, '-', '.'; at most 253).
NODE_NAME_RE: Final = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$")
IMAGE_RE: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,254}$")
MIG_PROFILE_RE: Final = re.compile(r"^\d+g\.\d+gb$")
AMD_PROFILE_RE: Final = re.compile(r"^[sdqc]px$")
TOPOLOGY_RE: Final = re.compile(r"^\d+x\d+(x\d+)?$")


def job_name(workload: str, decision_id: str) -> str:
    """A DNS-1123 label from the workload name and the decision id (unique per decision)."""
    slug = re.sub(r"[^a-z0-9-]+", "-", workload.lower()).strip("-")[:50].rstrip("-") or "workload"
    return f"{slug}-{decision_id[:8].lower()}"


def resource_limits(placement: Placement, pool: Pool, *, amd_memory_partition: str = "nps1") -> dict[str, str]:
    """The container's limits: whole devices of the vendor resource, or one named partition."""
    grant = placement.grant
    count = placement.workload.count
    if pool.accelerator == "cpu":
        return {"cpu": _whole(grant.devices, "CPUs")}
    base = RESOURCES[pool.accelerator]
    if grant.honored and grant.profile is not None and (grant.requested < 1 or pool.fixed_profile is not None):
        profile = grant.profile
        if pool.accelerator == "nvidia" and MIG_PROFILE_RE.fullmatch(profile):
            return {f"nvidia.com/mig-{profile}": str(count)}
        if pool.accelerator == "amd" and AMD_PROFILE_RE.fullmatch(profile):
            if amd_memory_partition not in AMD_MEMORY_PARTITIONS:
                raise SpecError(f"expected one of {', '.join(AMD_MEMORY_PARTITIONS)}", field="--amd-memory-partition")
            return {f"amd.com/{profile}_{amd_memory_partition}": str(count)}
        raise SpecError(
            f"the granted share {profile!r} names no Kubernetes partition resource on {pool.accelerator}"
            + (" (the pool names no model, so the MIG profile has no memory size; set the pool's model)" if pool.accelerator == "nvidia" else ""),
            field="grant.profile",
        )
    return {base: _whole(grant.devices, "devices")}


def node_resources(placement: Placement, pool: Pool, allocation: NodeAllocation, *, amd_memory_partition: str = "nps1") -> tuple[dict[str, str], dict[str, str]]:
    """(limits, requests) of the container for what ``allocation`` holds on its node: devices,
    slices or shares of the vendor resource, and the granted CPU and memory (requested; memory
    also limited, so the pod never takes more than the grant)."""
    limits: dict[str, str] = {}
    requests: dict[str, str] = {}
    if pool.accelerator == "cpu":
        milli = max(allocation.cpu_milli, 1000 * allocation.devices)
        if milli:
            requests["cpu"] = quantities.cpu_text(milli)
    else:
        if allocation.share is not None:
            if pool.sharing is None:
                raise SpecError(f"pool {pool.name} is not shared, yet the grant holds a share of a device", field="allocations")
            if pool.sharing == "mps" and allocation.share.shares != 1:
                # NVIDIA's device plugin refuses more than one MPS replica per container.
                raise SpecError(f"an MPS share is one replica per pod on Kubernetes (the grant holds {allocation.share.shares})", field="allocations")
            limits[RESOURCES[pool.accelerator]] = str(allocation.share.shares)
        elif allocation.holdings:
            profiles = {h.profile for h in allocation.holdings}
            if len(profiles) != 1:
                raise SpecError("one node holds slices of several profiles; a pod asks for one resource", field="allocations")
            profile = profiles.pop()
            if profile is None:
                limits[RESOURCES[pool.accelerator]] = str(len(allocation.holdings))
            else:
                per_slice = resource_limits(placement, pool, amd_memory_partition=amd_memory_partition)
                (resource,) = per_slice
                limits[resource] = str(len(allocation.holdings))
        if allocation.cpu_milli:
            requests["cpu"] = quantities.cpu_text(allocation.cpu_milli)
    if allocation.memory_mib:
        requests["memory"] = quantities.memory_text(allocation.memory_mib)
        limits["memory"] = requests["memory"]
    return limits, requests


def _pinned_affinity(nodes: Sequence[str], affinity: JSONObject | None) -> JSONObject:
    """Required node affinity: one term per granted node (``metadata.name`` takes one value per
    term), each with the pool's model terms; the terms are alternatives."""
    base: list[JSONValue] = []
    if affinity:
        terms = cast(JSONObject, cast(JSONObject, affinity["nodeAffinity"])["requiredDuringSchedulingIgnoredDuringExecution"])["nodeSelectorTerms"]
        base = list(cast(list[JSONValue], cast(JSONObject, cast(list[JSONValue], terms)[0])["matchExpressions"]))
    terms_out: list[JSONValue] = []
    for node in nodes:
        term: JSONObject = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
        if base:
            term["matchExpressions"] = list(base)
        terms_out.append(term)
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms_out}}}


def _whole(value: float, what: str) -> str:
    if value != int(value) or value < 1:
        raise SpecError(f"{value:g} {what}: Kubernetes extended resources are whole numbers, never fractions")
    return str(int(value))


def _node_placement(pool: Pool, tpu_topology: str | None) -> tuple[dict[str, str], JSONObject | None, str | None]:
    """(nodeSelector, affinity, note): pin to nodes of the pool's region whose product label shows
    the pool's model."""
    selector: dict[str, str] = {REGION_LABEL: pool.region}
    label = PRODUCT_LABELS.get(pool.accelerator)
    values = PRODUCTS.get(pool.model or "", ())
    if pool.sharing is not None and pool.accelerator == "nvidia":
        # gpu-feature-discovery appends -SHARED to the product of a time-sliced or MPS GPU (unless
        # the device plugin renames the resource): either label names this model.
        values = tuple(v for value in values for v in (value, f"{value}{SHARED_SUFFIX}"))
    note = None
    affinity: JSONObject | None = None
    if pool.model is None or pool.accelerator == "cpu":
        pass
    elif label is None:
        note = f"{pool.accelerator} nodes carry no product label; not pinned to model {pool.model}"
    elif not values:
        note = f"no known {label} value for model {pool.model}; not pinned"
    elif len(values) == 1:
        selector[label] = values[0]
    else:
        term: JSONObject = {"matchExpressions": [{"key": label, "operator": "In", "values": list(values)}]}
        affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}
    if pool.accelerator == "tpu" and tpu_topology:
        if not TOPOLOGY_RE.fullmatch(tpu_topology):
            raise SpecError(f"expected e.g. 2x2 or 2x2x1 (got {tpu_topology!r})", field="--tpu-topology")
        selector["cloud.google.com/gke-tpu-topology"] = tpu_topology
    return selector, affinity, note


def job_manifest(
    record: DecisionRecord,
    pool: Pool,
    *,
    image: str,
    command: Sequence[str] = (),
    namespace: str | None = None,
    amd_memory_partition: str = "nps1",
    tpu_topology: str | None = None,
) -> JSONObject:
    """The ``batch/v1`` Job for a placed, unreleased decision on ``pool``; the workload's
    ``walltime`` is the Job's ``activeDeadlineSeconds``."""
    decision = live_placement(record, pool, nothing="to emit a Job for")
    if not IMAGE_RE.fullmatch(image):
        raise SpecError(f"not a container image reference: {image!r}", field="--image")
    if namespace is not None and not DNS_LABEL_RE.fullmatch(namespace):
        raise SpecError(f"not a Kubernetes namespace name: {namespace!r}", field="--namespace")
    if not DNS_LABEL_RE.fullmatch(record.id.lower()):
        raise SpecError(f"decision id {record.id!r} cannot be a label value")

    allocations = decision.allocations
    requests: dict[str, str] = {}
    if allocations:
        limits, requests = _node_grant(decision, pool, amd_memory_partition)
    else:
        limits = resource_limits(decision, pool, amd_memory_partition=amd_memory_partition)
    selector, affinity, note = _node_placement(pool, tpu_topology)
    revision = decision.provenance.policy_revision
    labels: dict[str, JSONValue] = {
        "app.kubernetes.io/managed-by": "examlops",
        f"{LABEL_PREFIX}/decision-id": record.id.lower(),
        # A label value holds at most 63 characters: the digest's first 63 hex digits; the full
        # revision is in the annotation.
        f"{LABEL_PREFIX}/policy-revision": revision.split(":", 1)[-1][:63],
        f"{LABEL_PREFIX}/accelerator": pool.accelerator,
    }
    annotations: dict[str, JSONValue] = {
        f"{LABEL_PREFIX}/policy-revision": revision,
        f"{LABEL_PREFIX}/opa-version": decision.provenance.opa_version,
        f"{LABEL_PREFIX}/workload": decision.workload.name,
        f"{LABEL_PREFIX}/pool": pool.name,
        f"{LABEL_PREFIX}/region": pool.region,
    }
    if decision.grant.requested < 1:
        share = decision.grant.profile if decision.grant.honored and decision.grant.profile else "whole device"
        annotations[f"{LABEL_PREFIX}/fraction"] = f"{decision.grant.requested:g} -> {share}"
    if note:
        annotations[f"{LABEL_PREFIX}/node-selection"] = note

    resources: JSONObject = {"limits": dict(limits)}
    if requests:
        resources["requests"] = dict(requests)
    container: JSONObject = {"name": "workload", "image": image, "resources": resources}
    if command:
        container["command"] = list(command)
    pod_spec: JSONObject = {"restartPolicy": "Never", "containers": [container]}
    if selector:
        pod_spec["nodeSelector"] = dict(selector)
    if allocations and pool.nodes_named:
        affinity = _pinned_affinity([a.node for a in allocations], affinity)
        annotations[f"{LABEL_PREFIX}/nodes"] = ",".join(a.node for a in allocations)
    if len(allocations) > 1:
        # One pod per node: never two pods of this decision on one node.
        anti: JSONObject = {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {f"{LABEL_PREFIX}/decision-id": record.id.lower()}}, "topologyKey": HOSTNAME_LABEL}
        ]}  # fmt: skip
        affinity = {**(affinity or {}), "podAntiAffinity": anti}
    if affinity:
        pod_spec["affinity"] = affinity
    if pool.accelerator in RESOURCES:
        # Device nodes are commonly tainted with the plugin's resource name (GKE does so for GPUs
        # and TPUs); tolerating it is harmless where they are not.
        pod_spec["tolerations"] = [{"key": RESOURCES[pool.accelerator], "operator": "Exists", "effect": "NoSchedule"}]

    metadata: JSONObject = {"name": job_name(decision.workload.name, record.id), "labels": dict(labels), "annotations": annotations}
    if namespace:
        metadata["namespace"] = namespace
    spec: JSONObject = {
        "backoffLimit": 0,
        "template": {"metadata": {"labels": dict(labels), "annotations": dict(annotations)}, "spec": pod_spec},
    }
    if decision.workload.walltime is not None:
        # The workload's time limit, as Slurm gets it (--time): Kubernetes ends the Job past it.
        spec["activeDeadlineSeconds"] = decision.workload.walltime
    if len(allocations) > 1:
        # A gang: N pods together, each with its index (JOB_COMPLETION_INDEX), all or nothing.
        gang: JSONObject = {"completionMode": "Indexed", "completions": len(allocations), "parallelism": len(allocations)}
        spec = {**gang, **spec}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": spec}


def _node_grant(decision: Placement, pool: Pool, amd_memory_partition: str) -> tuple[dict[str, str], dict[str, str]]:
    """(limits, requests) of each pod of a placement that names its nodes: every node of a gang
    holds the same, so one pod template serves them all."""
    allocations = decision.allocations
    names = [a.node for a in allocations]
    if len(set(names)) != len(names):
        raise SpecError(f"a node is granted twice in one placement: {', '.join(names)}", field="allocations")
    known = {n.name for n in pool.node_list()} if pool.nodes_named else None
    for name in names:
        if not NODE_NAME_RE.fullmatch(name):
            raise SpecError(f"node name {name!r} is not a Kubernetes node name", field="allocations")
        if known is not None and name not in known:
            raise SpecError(f"node {name} is not a node of pool {pool.name}", field="allocations")
    asks = [node_resources(decision, pool, a, amd_memory_partition=amd_memory_partition) for a in allocations]
    if any(ask != asks[0] for ask in asks[1:]):
        raise SpecError("the granted nodes hold different devices, CPU or memory: one pod template asks the same on each", field="allocations")
    return asks[0]
