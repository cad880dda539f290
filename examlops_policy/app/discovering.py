"""Discovery and catalog import as library workflows: find pools, show the change, apply it.

Called through ``Hardware.discover`` and ``Hardware.import_catalog``; the CLI only renders what they
return.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, cast

from examlops_policy.errors import SpecError
from examlops_policy.model import Pool, PoolState
from examlops_policy.store.api import NodeUsageRow
from examlops_policy.views import DiscoveredChange, DiscoveryResult, PoolChange

if TYPE_CHECKING:
    from examlops_policy.discovery import Discovery
    from examlops_policy.app.ports import Fleet
    from examlops_policy.catalog import CatalogImport
    from examlops_policy.tables import Tables

SOURCES = ("slurm", "local", "kubernetes")


def _region(fleet: Fleet, region: str | None) -> str:
    if region is not None and not fleet.tables.region_known(region):
        raise SpecError(f"region {region!r} is not in the reviewed regions table (policies/examlops/tables/regions.yaml)", field="region")
    return region or ""


def _found(fleet: Fleet, source: str, region: str | None, prefix: str | None, options: dict[str, object]) -> tuple[Discovery, Callable[[Pool], bool]]:
    """What a source reports, and which registered pools that source owns (for stale ones)."""
    if source == "slurm":
        from examlops_policy.discovery.slurm import discover_slurm, from_slurm
        from examlops_policy.executors.gres import load_gres_table

        slurm_prefix = prefix or ""
        return (
            discover_slurm(load_gres_table(), region=_region(fleet, region), prefix=slurm_prefix),
            lambda p: from_slurm(p) and p.name.startswith(slurm_prefix),
        )
    if source == "local":
        from examlops_policy.discovery.local import discover_local

        local_prefix = prefix or "local-"
        target = str(options.get("target") or "hpc")
        return (
            discover_local(fleet.tables, region=_region(fleet, region), target=target, prefix=local_prefix),
            lambda p: p.name.startswith(local_prefix) and p.partition is None,
        )
    if source == "kubernetes":
        from examlops_policy.discovery.kubernetes import discover_kubernetes, from_kubernetes
        from examlops_policy.executors.kubernetes_api import KubernetesCluster

        k8s_prefix = prefix or "k8s-"
        with KubernetesCluster.connect(cast("str | None", options.get("kubeconfig")), cast("str | None", options.get("context"))) as cluster:
            found = discover_kubernetes(cluster, fleet.tables.regions, prefix=k8s_prefix, models=fleet.tables.models,
                                        block_label=cast("str | None", options.get("block_label")),
                                        switch_label=cast("str | None", options.get("switch_label")))  # fmt: skip
        return found, lambda p: from_kubernetes(p, prefix=k8s_prefix)
    raise SpecError(f"expected one of {', '.join(SOURCES)} (got {source!r})", field="source")


def discover(fleet: Fleet, source: str, *, region: str | None, prefix: str | None, apply: bool, **options: object) -> DiscoveryResult:
    """Pools where they are: ``slurm`` (sinfo/scontrol), ``local`` (this machine's devices) or
    ``kubernetes`` (nodes' allocatable devices; ``context``, ``kubeconfig``). Shows what
    applying would change; ``apply`` registers them and records what the scheduler reports busy
    beyond this layer's own submitted placements (held outside, audited)."""
    from examlops_policy.discovery import plan

    found, owned = _found(fleet, source, region, prefix, dict(options))
    changes = plan(found, sorted(fleet.pools(), key=lambda s: s.pool.name), owned=owned)
    extras = {d.pool.name: d for d in found.pools}
    held: dict[str, float] = {}
    if apply:
        pools = [c.pool for c in changes if c.action != "stale" and c.pool is not None]
        missing = [p.name for p in pools if not p.region]
        if missing:
            raise SpecError(f"new pool(s) {', '.join(missing)} have no region: give --region", field="region")
        fleet.apply(pools)
        # What the scheduler reports busy, beyond this layer's own submitted placements, is not free;
        # a pool of nodes node by node (its devices, their indices, shares, CPU and memory).
        usage = {d.pool.name: d.pool.count - d.free for d in found.pools if d.free is not None}
        per_node = {
            d.pool.name: [NodeUsageRow(d.pool.name, u.node, u.devices, u.indices, u.shares, u.cpu_milli, u.memory_mib) for u in d.usage]
            for d in found.pools if d.pool.node_tracked and d.usage
        }  # fmt: skip
        if usage or per_node:
            held = fleet.record_usage(usage, scheduler=found.source, nodes=per_node)
    out = []
    for c in changes:
        assert c.pool is not None
        extra = extras.get(c.name)
        out.append(
            DiscoveredChange(
                c.pool, c.action, c.changed_fields,
                extra.free if extra else None, extra.nodes if extra else (), extra.details if extra else (),
                extra.usage if extra else (),
            )
        )  # fmt: skip
    return DiscoveryResult(found.source, tuple(out), found.warnings, apply, held)


def import_catalog(fleet: Fleet, path: Path, *, apply: bool, **options: object) -> CatalogImport:
    """Read a SkyPilot catalog, show the pools it would add or reprice (``count`` required for
    new pools; ``overwrite`` replaces prices set by hand), and register them with ``apply``."""
    from examlops_policy.catalog import CatalogImport, ImportOptions, plan_import, read_catalog

    def strings(name: str) -> tuple[str, ...]:
        return tuple(cast("tuple[str, ...]", options.get(name) or ()))

    catalog = read_catalog(path, cloud=cast("str | None", options.get("cloud")), tables=fleet.tables)
    choice = ImportOptions(
        count=cast("int | None", options.get("count")),
        overwrite=bool(options.get("overwrite")),
        spot=bool(options.get("spot")),
        regions=strings("regions"),
        accelerators=strings("accelerators"),
    )
    planned = plan_import(catalog, sorted((s.pool for s in fleet.pools()), key=lambda p: p.name), choice, tables=fleet.tables)
    if not apply:
        return CatalogImport(planned)
    changes = fleet.apply(list(planned.writes()))
    return CatalogImport(planned, tuple(f"{c.name} {c.action}" for c in changes))
