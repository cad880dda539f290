"""Cloud pools from a Kubernetes cluster: one pool per region x device resource x model.

Reads every node's allocatable extended resources and vendor labels, and the pods bound to nodes:

* whole devices: ``nvidia.com/gpu``, ``amd.com/gpu``, ``habana.ai/gaudi``, ``google.com/tpu``;
* fixed slices: ``nvidia.com/mig-<profile>`` (MIG "mixed" strategy) and AMD partition resources
  ``amd.com/<compute>_<memory>`` (e.g. ``amd.com/cpx_nps4``): a pool whose units are slices
  (``Pool.fixed_profile`` = ``1g.10gb`` / ``cpx``, ``count`` = number of slices);
* nodes with none of these make the region's ``cpu`` pool, whose devices are CPUs.

The model comes from the vendor's product label (``nvidia.com/gpu.product``,
``amd.com/gpu.product-name``, ``cloud.google.com/gke-tpu-accelerator``) read through the inverse of
``executors.kubernetes.PRODUCTS`` (the same values a Job is pinned to), and the region from
``topology.kubernetes.io/region`` (Kubernetes "Well-Known Labels"). Never guessed: a node whose
product is unknown, whose region is missing or not in the regions table, or whose devices only
a time-sliced or MIG "single" strategy exposes, is reported in a warning and skipped.

Free devices follow Slurm discovery: allocatable minus what the pending and running pods bound to
the pool's usable nodes request (this layer's own Jobs included: the store subtracts its own
submitted placements, recognised by ``app.kubernetes.io/managed-by: examlops``). Devices of nodes
that are not Ready or are cordoned are counted, never free.

Each pool lists its nodes (``Pool.nodes``): name, devices, allocatable CPU (whole millicores) and
memory (whole MiB), state (``drained`` when cordoned, ``down`` when not Ready) and, where the
caller names the labels that say them (``block_label``, ``switch_label``: the cluster's own label
names, e.g. ``cloud.google.com/gce-topology-block``; never guessed), the node's block and switch.
What each node has busy (devices, CPU and memory the bound pods request) is
``DiscoveredPool.usage``.

Time-sliced and MPS GPUs (NVIDIA device plugin sharing, the default ``renameByDefault: false``):
gpu-feature-discovery labels the node ``nvidia.com/gpu.replicas`` = R > 1 (and
``nvidia.com/gpu.sharing-strategy``, ``-SHARED`` after the product); ``nvidia.com/gpu`` then counts
R replicas per GPU. Such nodes make a shared pool (``sharing`` time-slice or mps,
``shares_per_device`` R, devices = replicas / R), named ``...-shared`` or ``...-mps``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Final, Protocol

from examlops_policy import quantities
from examlops_policy.discovery import DiscoveredPool, Discovery, NodeUsage
from examlops_policy.errors import SpecError
from examlops_policy.executors.kubernetes import PRODUCT_LABELS, PRODUCTS, REGION_LABEL, RESOURCES, SHARED_SUFFIX
from examlops_policy.model import Node, Pool, name_problem

if TYPE_CHECKING:
    from examlops_policy.executors.kubernetes_api import NodeInfo, PodUsage

TPU_TOPOLOGY_LABEL: Final = "cloud.google.com/gke-tpu-topology"
REPLICAS_LABEL: Final = "nvidia.com/gpu.replicas"
SHARING_LABEL: Final = "nvidia.com/gpu.sharing-strategy"
# gpu-feature-discovery's sharing strategies, as the model says them.
SHARING_STRATEGIES: Final = {"time-slicing": "time-slice", "mps": "mps"}
MIB: Final = Decimal(1024 * 1024)
NAME_RE: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
# Whole-device resources per vendor resource name (the inverse of executors.kubernetes.RESOURCES).
WHOLE: Final = {resource: accelerator for accelerator, resource in RESOURCES.items()}
MIG_RESOURCE_RE: Final = re.compile(r"^nvidia\.com/mig-(?P<profile>\d+g\.\d+gb)$")
AMD_PARTITION_RE: Final = re.compile(r"^amd\.com/(?P<compute>[sdqc]px)_(?P<memory>nps[1248])$")
# gpu-feature-discovery with the MIG "single" strategy renames the product "<product>-MIG-<profile>"
# and then nvidia.com/gpu counts MIG devices, not GPUs (NVIDIA gpu-feature-discovery README).
MIG_SINGLE_PRODUCT_RE: Final = re.compile(r"^.+-MIG-\d+g\.\d+gb$")
# Vendor resources that are no isolated device or slice (NVIDIA time-slicing renames the resource
# ``nvidia.com/gpu.shared``): never a pool.
SHARED: Final = frozenset({"nvidia.com/gpu.shared"})
VENDOR_DOMAINS: Final = ("nvidia.com/", "amd.com/", "habana.ai/", "google.com/")


class NodeSource(Protocol):
    """What discovery reads from a cluster (``KubernetesCluster`` is one)."""

    server: str

    def nodes(self) -> Sequence[NodeInfo]: ...

    def pods_on_nodes(self) -> Sequence[PodUsage]: ...


def product_models() -> dict[str, dict[str, str]]:
    """Per product label, each known label value -> model key (the inverse of ``PRODUCTS``)."""
    inverse: dict[str, dict[str, str]] = {label: {} for label in PRODUCT_LABELS.values()}
    for model, values in PRODUCTS.items():
        for value in values:
            for label in inverse:
                inverse[label][value] = model
    return inverse


@dataclass
class _Group:
    """Devices of one future pool, gathered node by node."""

    accelerator: str
    model: str | None
    resource: str
    region: str
    fixed_profile: str | None = None
    count: Decimal = Decimal(0)
    free: Decimal = Decimal(0)
    ours: Decimal = Decimal(0)
    nodes: list[str] = field(default_factory=list)
    products: set[str] = field(default_factory=set)
    topologies: set[str] = field(default_factory=set)
    sharing: tuple[str, int] | None = None
    members: list[Node] = field(default_factory=list)
    usage: list[NodeUsage] = field(default_factory=list)
    unnamed: bool = False  # a node the model cannot name: the pool lists no nodes


def _name(prefix: str, group: _Group) -> str:
    base = f"{prefix}{group.region}-{group.model or group.accelerator}"
    if group.sharing is not None:
        return f"{base}-{'mps' if group.sharing[0] == 'mps' else 'shared'}"
    if group.resource.startswith("nvidia.com/mig-"):
        return f"{base}-mig-{group.fixed_profile}"
    match = AMD_PARTITION_RE.fullmatch(group.resource)
    if match:
        return f"{base}-{match['compute']}-{match['memory']}"
    return base


def _model(node: NodeInfo, accelerator: str, known: Mapping[str, Mapping[str, str]], models: Mapping[str, object],
           warnings: list[str]) -> tuple[bool, str | None, str | None]:  # fmt: skip
    """(usable, model, product) for a node's devices of ``accelerator``; warns when unusable."""
    label = PRODUCT_LABELS.get(accelerator)
    if label is None:  # Intel Gaudi: the device plugin sets no product label
        return True, None, None
    product = node.labels.get(label)
    if not product:
        warnings.append(f"node {node.name}: {accelerator} devices without a {label} label; skipped (which model they are is unknown)")
        return False, None, None
    if accelerator == "nvidia" and _sharing(node) is not None and product.endswith(SHARED_SUFFIX):
        product = product[: -len(SHARED_SUFFIX)]  # the -SHARED gpu-feature-discovery adds to a shared GPU's product
    if accelerator == "nvidia" and MIG_SINGLE_PRODUCT_RE.fullmatch(product):
        warnings.append(f"node {node.name}: {label}={product} is the MIG single strategy (nvidia.com/gpu counts MIG devices); "
                        "only the mixed strategy's nvidia.com/mig-<profile> resources are used; skipped")  # fmt: skip
        return False, None, product
    model = known.get(label, {}).get(product)
    entry = models.get(model) if model else None
    if model is None or not isinstance(entry, dict) or entry.get("accelerator") != accelerator:
        warnings.append(f"node {node.name}: {label}={product} is not a known {accelerator} product "
                        "(executors/kubernetes.py PRODUCTS, models.yaml); skipped")  # fmt: skip
        return False, None, product
    return True, model, product


def _sharing(node: NodeInfo) -> tuple[str, int] | None:
    """(sharing, replicas per GPU) of a node whose NVIDIA GPUs the device plugin shares; None when
    it does not (no replicas label, or 1)."""
    text = node.labels.get(REPLICAS_LABEL, "")
    replicas = int(text) if text.isdigit() else 0
    if replicas < 2:
        return None
    return SHARING_STRATEGIES.get(node.labels.get(SHARING_LABEL, ""), "time-slice"), replicas


def _state(node: NodeInfo) -> str:
    """The model's node state: ``down`` when not Ready, ``drained`` when cordoned, else ``up``."""
    return "down" if not node.ready else "drained" if node.unschedulable else "up"


def _label(node: NodeInfo, key: str | None, warnings: list[str]) -> str | None:
    """The value of topology label ``key`` on ``node`` (None when not asked for, absent or unusable)."""
    if key is None or key not in node.labels:
        return None
    value = node.labels[key]
    if name_problem(value):
        warnings.append(f"node {node.name}: {key}={value!r} is no usable topology label value; left out")
        return None
    return value


def pools_from_nodes(
    nodes: Sequence[NodeInfo],
    pods: Sequence[PodUsage],
    regions: Mapping[str, object],
    *,
    models: Mapping[str, object],
    prefix: str = "k8s-",
    source: str = "kubernetes",
    block_label: str | None = None,
    switch_label: str | None = None,
) -> Discovery:
    """Group ``nodes`` into cloud pools (see the module docstring); ``pods`` are those bound to
    nodes and still holding resources there. ``block_label`` / ``switch_label`` name the node
    labels that say a node's block and switch. Deterministic: same input, same pools, same order."""
    known = product_models()
    warnings: list[str] = []
    used: dict[str, dict[str, Decimal]] = {}
    ours: dict[str, dict[str, Decimal]] = {}
    for pod in pods:
        for resource, amount in pod.requests.items():
            used.setdefault(pod.node, {}).setdefault(resource, Decimal(0))
            used[pod.node][resource] += amount
            if pod.managed:
                ours.setdefault(pod.node, {}).setdefault(resource, Decimal(0))
                ours[pod.node][resource] += amount

    groups: dict[tuple[str, str, str | None, str, tuple[str, int] | None], _Group] = {}

    def add(node: NodeInfo, region: str, accelerator: str, model: str | None, resource: str, profile: str | None, product: str | None,
            sharing: tuple[str, int] | None = None) -> None:  # fmt: skip
        key = (region, accelerator, model, resource, sharing)
        group = groups.setdefault(key, _Group(accelerator, model, resource, region, profile, sharing=sharing))
        per = Decimal(sharing[1]) if sharing else Decimal(1)
        amount = node.allocatable[resource] / per  # devices (a shared GPU's replicas, counted once)
        taken = used.get(node.name, {}).get(resource, Decimal(0))
        group.count += amount
        if node.usable:
            group.free += max(Decimal(0), amount - taken / per)
        group.ours += ours.get(node.name, {}).get(resource, Decimal(0)) / per
        group.nodes.append(node.name)
        cpu, memory = node.allocatable.get("cpu"), node.allocatable.get("memory")
        busy = used.get(node.name, {})
        devices = int(amount)  # whole devices (CPUs: whole cores)
        if devices >= 1:
            try:
                group.members.append(Node(
                    node.name, devices,
                    cpu=quantities.cores(int(cpu * 1000)) if cpu is not None and cpu >= Decimal("0.001") else None,
                    memory=int(memory / MIB) if memory is not None and memory >= MIB else None,
                    state=_state(node), block=_label(node, block_label, warnings), switch=_label(node, switch_label, warnings),
                ))  # fmt: skip
            except SpecError as exc:
                warnings.append(f"node {node.name}: {exc.detail}; its pools list no nodes")
                group.unnamed = True
            group.usage.append(NodeUsage(
                node.name,
                devices=0 if sharing else int(busy.get(resource, Decimal(0))),
                shares=int(busy.get(resource, Decimal(0))) if sharing else 0,
                cpu_milli=int(busy.get("cpu", Decimal(0)) * 1000),
                memory_mib=int(busy.get("memory", Decimal(0)) / MIB),
            ))  # fmt: skip
        if product:
            group.products.add(product)
        if accelerator == "tpu" and node.labels.get(TPU_TOPOLOGY_LABEL):
            group.topologies.add(node.labels[TPU_TOPOLOGY_LABEL])

    for node in sorted(nodes, key=lambda n: n.name):
        region = node.labels.get(REGION_LABEL)
        if not region:
            warnings.append(f"node {node.name}: no {REGION_LABEL} label; skipped (its region decides residency)")
            continue
        if region not in regions:
            warnings.append(f"node {node.name}: region {region!r} is not in the regions table (regions.yaml); skipped")
            continue
        if not node.usable:
            why = "cordoned" if node.unschedulable else "not Ready"
            warnings.append(f"node {node.name} is {why}: its devices are counted, none is free")
        # A node that advertises any vendor resource is a device node, even with none allocatable
        # now (a device plugin reporting 0): it never counts as a CPU node.
        devices = sorted(r for r in node.allocatable if r.startswith(VENDOR_DOMAINS))
        found_device = False
        for resource in devices:
            amount = node.allocatable[resource]
            if resource in WHOLE or MIG_RESOURCE_RE.fullmatch(resource) or AMD_PARTITION_RE.fullmatch(resource):
                found_device = True
            if amount <= 0:
                continue
            if amount != amount.to_integral_value():
                warnings.append(f"node {node.name}: {resource} = {amount} is no whole number; skipped")
                continue
            if resource in SHARED:
                found_device = True
                warnings.append(f"node {node.name}: {resource} is time-sliced under a renamed resource (renameByDefault); "
                                "not a pool: this layer asks for nvidia.com/gpu replicas")  # fmt: skip
                continue
            mig = MIG_RESOURCE_RE.fullmatch(resource)
            amd = AMD_PARTITION_RE.fullmatch(resource)
            if resource in WHOLE:
                accelerator, profile = WHOLE[resource], None
            elif mig:
                accelerator, profile = "nvidia", mig["profile"]
            elif amd:
                accelerator, profile = "amd", amd["compute"]
            else:
                if resource.startswith(("nvidia.com/mig-", "amd.com/")):
                    found_device = True
                    warnings.append(f"node {node.name}: unknown device resource {resource}; skipped")
                continue
            found_device = True
            ok, model, product = _model(node, accelerator, known, models, warnings)
            if not ok:
                continue
            sharing = _sharing(node) if resource == RESOURCES["nvidia"] else None
            if sharing is not None and amount % sharing[1]:
                warnings.append(f"node {node.name}: {resource} = {amount} is not a whole number of GPUs of {sharing[1]} replicas; skipped")
                continue
            add(node, region, accelerator, model, resource, profile, product, sharing)
        if not found_device and node.allocatable.get("cpu", Decimal(0)) > 0:
            add(node, region, "cpu", None, "cpu", None, None)

    found: list[DiscoveredPool] = []
    taken_names: set[str] = set()
    for _, group in sorted(groups.items(), key=lambda item: (_name(prefix, item[1]), str(item[0]))):
        name = _name(prefix, group)
        if not NAME_RE.fullmatch(name):
            warnings.append(f"pool name {name!r} is not a safe pool name (letters, digits, '.', '_', '-'; at most 63); skipped")
            continue
        count = int(group.count)  # whole devices; CPUs: whole cores
        if count < 1:
            continue
        details = [f"resource {group.resource}"]
        if group.accelerator == "cpu":
            details.append("devices are CPUs")
        if group.products:
            details.append(f"product {', '.join(sorted(group.products))}")
        if group.topologies:
            details.append(f"TPU topology {', '.join(sorted(group.topologies))}")
        if group.ours:
            details.append(f"{float(group.ours):g} held by examlops Jobs")
        members = None if group.unnamed or not group.members else tuple(sorted(group.members, key=lambda n: n.name))
        if members is not None:
            count = sum(n.devices for n in members)  # whole devices per node (CPUs: whole cores)
        if count < 1:
            continue
        if name in taken_names:
            warnings.append(f"pool name {name!r} would be given twice (nodes sharing GPUs with different replicas); the second is skipped")
            continue
        taken_names.add(name)
        pool = Pool(
            name=name, target="cloud", accelerator=group.accelerator, count=count, region=group.region,
            supports_fractions=group.fixed_profile is not None, model=group.model, fixed_profile=group.fixed_profile,
            nodes=members, sharing=group.sharing[0] if group.sharing else None,
            shares_per_device=group.sharing[1] if group.sharing else None,
        )  # fmt: skip
        usage = tuple(sorted(group.usage, key=lambda u: u.node))
        found.append(DiscoveredPool(pool, float(min(group.free, Decimal(count))), tuple(sorted(group.nodes)), tuple(details), usage))
    return Discovery(source, tuple(found), tuple(dict.fromkeys(warnings)))


def discover_kubernetes(
    cluster: NodeSource,
    regions: Mapping[str, object],
    *,
    prefix: str = "k8s-",
    models: Mapping[str, object] | None = None,
    block_label: str | None = None,
    switch_label: str | None = None,
) -> Discovery:
    """Read the cluster's nodes and bound pods and turn them into cloud pools (``pools_from_nodes``).

    ``regions`` is the regions table (``load_tables().regions``); ``models`` the models table
    (default: ``load_tables().models``). KubernetesError when the cluster refuses or does not answer.
    """
    if models is None:
        from examlops_policy.tables import load_tables

        models = load_tables().models
    return pools_from_nodes(
        cluster.nodes(), cluster.pods_on_nodes(), regions, models=models, prefix=prefix, source=f"kubernetes {cluster.server}",
        block_label=block_label, switch_label=switch_label,
    )  # fmt: skip


def from_kubernetes(pool: Pool, *, prefix: str = "k8s-") -> bool:
    """True for a registered pool that Kubernetes discovery with ``prefix`` made (a cloud pool
    with that name prefix and no Slurm partition)."""
    return pool.target == "cloud" and pool.name.startswith(prefix) and pool.partition is None and pool.gres_type is None


__all__ = ["NodeSource", "discover_kubernetes", "from_kubernetes", "pools_from_nodes", "product_models"]
