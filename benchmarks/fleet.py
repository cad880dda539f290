"""Reproducible synthetic fleets and workloads for the placement benchmark.

A fleet is built the way real ones are: a catalogue of *offerings* (an HPC partition at a site, or
a cloud instance family in a region: target, region, accelerator, model, capability tags,
partitioning) and many pools drawn from it with a skewed popularity, each with its own size, price
and free capacity. So a 10,000-pool fleet repeats a few hundred distinct policy-relevant shapes,
as a large multi-site, multi-cloud fleet does, and every pool is a valid ``Pool`` (region and
model from the reviewed tables, models matching their accelerator).

Everything is a function of the seed: the same seed and size give the same fleet, byte for byte.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from examlops_policy.model import Pool, PoolState, Workload

# HPC sites (EU-27 and not) and coarse regions, as regions.yaml names them.
HPC_REGIONS: tuple[str, ...] = (
    "fi-kajaani", "it-bologna", "es-barcelona", "de-juelich", "ch-lugano", "uk-bristol", "eu", "us",
)  # fmt: skip
# Cloud regions by provider (regions.yaml).
CLOUD_REGIONS: dict[str, tuple[str, ...]] = {
    "aws": ("us-east-1", "us-west-2", "eu-central-1", "eu-central-2", "eu-west-1", "eu-west-2", "eu-west-3",
            "eu-south-1", "eu-south-2", "eu-north-1"),
    "gcp": ("us-central1", "europe-west1", "europe-west2", "europe-west3", "europe-west4", "europe-west6",
            "europe-west9", "europe-north1", "europe-central2"),
    "azure": ("northeurope", "westeurope", "francecentral", "germanywestcentral", "swedencentral",
              "italynorth", "uksouth", "switzerlandnorth", "norwayeast"),
}  # fmt: skip

# (accelerator, model or None, weight on HPC, weight in cloud, list price USD/device-hour)
MODELS: tuple[tuple[str, str | None, float, float, float], ...] = (
    ("nvidia", "h100", 8, 8, 4.10),
    ("nvidia", "h200", 4, 5, 4.90),
    ("nvidia", "gh200", 5, 1, 4.40),
    ("nvidia", "b200", 1, 3, 6.80),
    ("nvidia", "a100", 6, 6, 2.75),
    ("nvidia", "a100-40gb", 3, 3, 2.10),
    ("nvidia", "v100", 2, 1, 1.20),
    ("nvidia", "l4", 1, 4, 0.80),
    ("nvidia", "t4", 0, 3, 0.45),
    ("nvidia", None, 2, 0, 2.75),
    ("amd", "mi250x", 5, 0, 1.60),
    ("amd", "mi300x", 4, 2, 2.60),
    ("amd", "mi325x", 1, 1, 3.20),
    ("amd", None, 1, 0, 1.80),
    ("intel-gaudi", "gaudi2", 1, 2, 1.30),
    ("intel-gaudi", "gaudi3", 1, 1, 1.90),
    ("tpu", "tpu-v5e", 0, 2, 1.20),
    ("tpu", "tpu-v5p", 0, 2, 4.20),
    ("tpu", "tpu-v6e", 0, 2, 2.70),
    ("cpu", None, 3, 3, 0.10),
)
# Pool-level capability tags an operator might advertise (models add their own, e.g. fp8).
TAGS: tuple[str, ...] = ("ib", "nvlink", "rdma", "local-nvme", "multi-node", "hbm3", "sxm")
PARTITIONABLE: frozenset[str] = frozenset({"a100", "a100-40gb", "h100", "h200", "gh200", "b200", "mi300x", "mi325x"})


@dataclass(frozen=True)
class Offering:
    """One policy-relevant pool shape: everything the policy's per-pool verdict depends on except
    the name, the capacity and the price."""

    target: str
    region: str
    accelerator: str
    model: str | None
    capabilities: tuple[str, ...]
    supports_fractions: bool
    list_price: float


def _catalogue(rng: random.Random) -> list[Offering]:
    """Every offering the fleet draws from: a few partitions per HPC site, instance families per
    cloud region (TPUs on GCP only)."""
    offerings: list[Offering] = []
    for region in HPC_REGIONS:
        for accel, model, hpc_w, _, price in MODELS:
            if hpc_w == 0 or rng.random() > 0.35 + hpc_w / 20:
                continue
            for _ in range(rng.choice((1, 1, 2, 3))):  # partitions with different interconnect/storage
                tags = tuple(sorted(rng.sample(TAGS, rng.choice((0, 1, 2, 2, 3)))))
                fractions = model in PARTITIONABLE or (model is None and accel == "nvidia")
                offerings.append(Offering("hpc", region, accel, model, tags, fractions and rng.random() < 0.6, price * 0.6))
    for provider, regions in CLOUD_REGIONS.items():
        for region in regions:
            for accel, model, _, cloud_w, price in MODELS:
                if cloud_w == 0 or (accel == "tpu" and provider != "gcp"):
                    continue
                if rng.random() > 0.25 + cloud_w / 12:
                    continue
                tags = tuple(sorted(rng.sample(TAGS[:4], rng.choice((0, 1, 1, 2)))))
                fractions = model in PARTITIONABLE and rng.random() < 0.5
                offerings.append(Offering("cloud", region, accel, model, tags, fractions, price))
    return offerings


# A pool of nodes (``generate_fleet(nodes=N)``): each node's CPU and memory beside its devices.
CPU_PER_NODE = 64
MEMORY_PER_NODE = 512 * 1024  # MiB


def generate_fleet(size: int, seed: int = 42, nodes: int | None = None) -> list[PoolState]:
    """``size`` pools with their free capacity, reproducibly from ``seed``.

    Popularity of offerings is Zipf-like (a few big partitions and instance families carry most
    pools; the first ones cover every accelerator and target). About 10 % of pools are full, the rest partly used. Roughly half the HPC pools and a
    third of cloud pools state their own price; the others take the accelerator's default.

    ``nodes``: every pool has that many identical nodes (its count rounded up to a multiple of
    them), each with CPU_PER_NODE cores and MEMORY_PER_NODE beside its devices; the same pools,
    prices and free shares otherwise.
    """
    rng = random.Random(f"examlops-fleet/{seed}")
    catalogue = _catalogue(rng)
    rng.shuffle(catalogue)
    weights = [1.0 / (rank + 1) ** 0.8 for rank in range(len(catalogue))]
    # Small fleets still get the mix: the first pools cover every (accelerator, target) pair the
    # catalogue offers, then popularity takes over.
    firsts: dict[tuple[str, str], Offering] = {}
    for o in catalogue:
        firsts.setdefault((o.accelerator, o.target), o)
    cover = [firsts[k] for k in sorted(firsts)]
    rng.shuffle(cover)
    states: list[PoolState] = []
    for index in range(size):
        o = cover[index] if index < len(cover) else rng.choices(catalogue, weights)[0]
        count = rng.choice((4, 8, 8, 16, 32, 64, 128, 256, 512)) if o.target == "hpc" else rng.choice((8, 8, 16, 64, 1000))
        if nodes is not None:
            count = -(-count // nodes) * nodes
        if rng.random() < 0.10:
            free = 0.0
        else:
            free = float(rng.randint(1, count))
        stated = rng.random() < (0.5 if o.target == "hpc" else 0.35)
        price = round(o.list_price * rng.uniform(0.7, 1.3), 3) if stated else None
        label = (o.model or o.accelerator).replace("_", "-")
        pool = Pool(
            name=f"{o.target}-{o.region}-{label}-{index:05d}",
            target=o.target,
            accelerator=o.accelerator,
            count=count,
            region=o.region,
            cost_per_hour=price,
            supports_fractions=o.supports_fractions,
            capabilities=o.capabilities,
            model=o.model,
            **({"nodes": nodes, "cpu_per_node": CPU_PER_NODE, "memory_per_node": MEMORY_PER_NODE} if nodes is not None else {}),  # type: ignore[arg-type]
        )
        states.append(PoolState(pool, free))
    return states


def distinct_shapes(states: Sequence[PoolState]) -> int:
    """How many distinct policy-relevant shapes (target, region, accelerator, model, tags,
    partitioning) the fleet has: the number of evaluations a shape-deduplicating policy needs."""
    return len({(s.pool.target, s.pool.region, s.pool.accelerator, s.pool.model, s.pool.capabilities, s.pool.supports_fractions) for s in states})


# The workload mix: (kind, workload). Kinds: direct hit, fallback, fraction, rejection, burst.
WORKLOADS: tuple[tuple[str, Workload], ...] = (
    ("direct", Workload("train-h", accelerator="nvidia", engine="vllm", target="hpc")),
    ("direct", Workload("infer-amd", accelerator="amd", engine="vllm")),
    ("direct", Workload("fp8-train", accelerator="nvidia", engine="generic", capabilities=("fp8", "ib"), count=8, residency="eu-only")),
    ("fallback", Workload("tpu-on-hpc", accelerator="tpu", engine="generic", target="hpc")),
    ("fallback", Workload("gaudi-vllm", accelerator="intel-gaudi", engine="vllm", target="hpc")),
    ("fraction", Workload("mig-half", accelerator="nvidia", engine="vllm", fraction=0.5, target="hpc")),
    ("fraction", Workload("amd-quarter", accelerator="amd", engine="vllm", fraction=0.25)),
    ("rejection", Workload("sglang-amd", accelerator="amd", engine="sglang")),
    ("rejection", Workload("needs-qpu", accelerator="nvidia", engine="generic", capabilities=("qpu",))),
    ("rejection", Workload("too-big", accelerator="amd", engine="vllm", count=100_000, target="hpc")),
    ("burst", Workload("cloud-b200", accelerator="nvidia", engine="vllm", target="cloud", capabilities=("fp4",))),
    ("burst", Workload("burst-eu", accelerator="tpu", engine="generic", residency="eu-only", allow_burst=True, capabilities=("bf16",))),
    ("burst", Workload("burst-noegress", accelerator="tpu", engine="generic", residency="no-egress", allow_burst=True)),
)

# The ones that normally place (the durable-throughput loop): every kind but rejection.
PLACING: tuple[Workload, ...] = tuple(w for kind, w in WORKLOADS if kind != "rejection")


def rotation() -> list[tuple[str, Workload]]:
    """The workload mix interleaved by kind (direct, fallback, fraction, rejection, burst, direct,
    ...), so that a run cut short by its time budget still samples every kind."""
    by_kind: dict[str, list[Workload]] = {}
    for kind, workload in WORKLOADS:
        by_kind.setdefault(kind, []).append(workload)
    order: list[tuple[str, Workload]] = []
    depth = max(len(v) for v in by_kind.values())
    for i in range(depth):
        for kind, items in by_kind.items():
            if i < len(items):
                order.append((kind, items[i]))
    return order
