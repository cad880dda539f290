"""Discovery and catalog import as library workflows: find pools, show the change, apply it.

Called through ``Hardware.discover`` and ``Hardware.import_catalog``; the CLI only renders what they
return.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, cast

from examlops_policy.app import schedulers
from examlops_policy.errors import SpecError
from examlops_policy.model import Pool, PoolState
from examlops_policy.store.api import NodeUsageRow
from examlops_policy.views import DiscoveredChange, DiscoveryResult, PoolChange

if TYPE_CHECKING:
    from examlops_policy.discovery import Discovery
    from examlops_policy.app.ports import Fleet
    from examlops_policy.catalog import CatalogImport
    from examlops_policy.tables import Tables

LOCAL = "local"  # this machine's devices: a source of pools, not a scheduler


def sources() -> tuple[str, ...]:
    """Where pools are discovered: each registered scheduler, and this machine (``local``)."""
    return (*schedulers.names(), LOCAL)


def _local(fleet: Fleet, region: str | None, prefix: str | None, options: Mapping[str, object]) -> tuple[Discovery, Callable[[Pool], bool]]:
    from examlops_policy.app.schedulers.base import region_of, text
    from examlops_policy.discovery.local import discover_local

    local_prefix = prefix or "local-"
    target = text(options, "target") or "hpc"
    return (
        discover_local(fleet.tables, region=region_of(fleet, region), target=target, prefix=local_prefix),
        lambda p: p.name.startswith(local_prefix) and p.partition is None,
    )


def _found(fleet: Fleet, source: str, region: str | None, prefix: str | None, options: Mapping[str, object]) -> tuple[Discovery, Callable[[Pool], bool]]:
    """What a source reports, and which registered pools that source owns (for stale ones)."""
    if source in schedulers.SCHEDULERS:
        return schedulers.SCHEDULERS[source].discover(fleet, region=region, prefix=prefix, options=options)
    if source == LOCAL:
        return _local(fleet, region, prefix, options)
    raise SpecError(f"expected one of {', '.join(sources())} (got {source!r})", field="source")


def discover(fleet: Fleet, source: str, *, region: str | None, prefix: str | None, apply: bool, **options: object) -> DiscoveryResult:
    """Pools where they are: a registered scheduler's (``slurm``: sinfo/scontrol; ``kubernetes``:
    nodes' allocatable devices, ``context``, ``kubeconfig``) or ``local`` (this machine's devices). Shows what
    applying would change; ``apply`` registers them and records what the scheduler reports busy
    beyond this layer's own submitted placements (held outside, audited)."""
    from examlops_policy.discovery import plan

    found, owned = _found(fleet, source, region, prefix, options)
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
